//! The GroupX face's wire format (spec: `groupx-protocol.md`, schema `groupx.event/0.1`):
//! the Envelope and how a stored ledger event projects onto it, the REST request shapes and
//! their validation, the protocol error codes with their HTTP statuses, and the Turn state
//! machine with its restart-recovery rule. Pure: no I/O, no ledger.

pub mod envelope;
pub mod error;
pub mod ids;
pub mod memory;
pub mod request;
pub mod setup;
pub mod tools;
pub mod turn;

pub use envelope::{ActorKind, ActorRef, Envelope, Stored, SCHEMA};
pub use error::{ErrorCode, GroupxError};
pub use request::{CancelRequest, PostMessage, Recipients};
pub use turn::{Certainty, Phase, Recovery, TurnEvent, TurnState, TurnStatus};
