//! Convene core: the CCCS v1 envelope, routing rules, validation and the engine that turns
//! commands into ledger events and projection changes. This crate does no I/O: it knows
//! nothing of sockets, files or SQL.

pub mod command;
pub mod engine;
pub mod error;
pub mod event;
pub mod model;
pub mod routing;
pub mod view;

pub use command::{ClaimKind, Command, DeliveryState, RelayArgs, SendArgs};
pub use engine::{Engine, Limits, Outcome};
pub use error::{CoreError, ErrorCode};
pub use event::{Clock, Event, SystemClock};
pub use model::{Actor, Group, Role};
pub use view::{Change, DeliveryRow, LedgerView, Obligation, ObligationStatus};
