//! convene-evidence: CCS draft-04 evidence for Convene tool calls.
//!
//! Pipeline: [`intake`] -> [`rules`] -> [`receipt`] (HMAC + Ed25519) -> [`store`];
//! consumers validate with [`enforce`]; delegations propagate with [`chain`].

#![warn(missing_docs)]

pub mod chain;
pub mod cli;
pub(crate) mod commit;
pub mod config;
pub mod enforce;
pub mod error;
pub mod hook;
pub mod intake;
pub mod issuer;
pub mod jcs;
pub mod keys;
pub mod l1;
pub mod live;
pub mod receipt;
pub mod rotation;
pub mod rules;
pub mod seal;
pub mod server;
pub mod store;

pub use error::{EvidenceError, IntakeError, IntakeErrorCode};
pub use hook::{event_payload, ToolGate, EVENT_KIND};
pub use issuer::{IssuedReceipt, Verifier, VerifierSettings};
pub use receipt::{OutcomeStatus, Receipt, Verdict};

#[cfg(test)]
mod tests;
