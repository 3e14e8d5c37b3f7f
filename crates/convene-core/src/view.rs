//! What the engine reads from and writes to the store, without knowing how it is stored.

use crate::error::CoreError;
use crate::event::Event;
use crate::model::Group;

/// Status of one recipient's reply obligation (§6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObligationStatus {
    /// Open.
    Requested,
    /// Closed by the recipient's reply.
    Replied,
    /// Closed by cancellation.
    Cancelled,
}

impl ObligationStatus {
    /// Wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Requested => "requested",
            Self::Replied => "replied",
            Self::Cancelled => "cancelled",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "requested" => Self::Requested,
            "replied" => Self::Replied,
            "cancelled" => Self::Cancelled,
            _ => return None,
        })
    }
}

/// One recipient's obligation for one `request_reply` message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Obligation {
    /// The recipient (`user` or an actor id).
    pub actor_id: String,
    /// Current status.
    pub status: ObligationStatus,
    /// The reply or cancellation that closed it.
    pub closed_by: Option<String>,
}

/// Latest state of a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRow {
    /// Deterministic id.
    pub delivery_id: String,
    /// Recipient actor.
    pub actor_id: String,
    /// Delivered message.
    pub source_event_id: String,
    /// Latest state.
    pub state: String,
    /// Transport of the latest attempt.
    pub transport: String,
}

/// Read access the engine needs while deciding; implemented by the store inside the
/// writer's open transaction, so it sees earlier commands of the same batch.
pub trait LedgerView {
    /// An event of a group by id.
    fn event(&self, group_id: &str, event_id: &str) -> Result<Option<Event>, CoreError>;
    /// Obligations created by one `request_reply` message.
    fn obligations(
        &self,
        group_id: &str,
        source_event_id: &str,
    ) -> Result<Vec<Obligation>, CoreError>;
    /// Whether `actor_id` was addressed by Mail event `event_id`; its `seq` if so.
    fn mail_addressed(
        &self,
        group_id: &str,
        actor_id: &str,
        event_id: &str,
    ) -> Result<Option<u64>, CoreError>;
    /// The actor's Mail cursor `seq` (0 when none).
    fn mail_cursor(&self, group_id: &str, actor_id: &str) -> Result<u64, CoreError>;
    /// Latest state of a delivery.
    fn delivery(&self, group_id: &str, delivery_id: &str)
        -> Result<Option<DeliveryRow>, CoreError>;
    /// The event id an idempotency key maps to, if recorded at or after `since_unix`.
    fn idempotent(
        &self,
        group_id: &str,
        by: &str,
        client_id: &str,
        since_unix: i64,
    ) -> Result<Option<String>, CoreError>;
}

/// A projection row change, written in the same transaction as its events.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Store the group's current snapshot.
    GroupUpsert(Box<Group>),
    /// Remove the group, its ledger and its projections.
    GroupDelete(String),
    /// Set one obligation.
    Obligation {
        /// Group.
        group_id: String,
        /// The `request_reply` message.
        source_event_id: String,
        /// Recipient.
        actor_id: String,
        /// New status.
        status: ObligationStatus,
        /// Closing event.
        closed_by: Option<String>,
    },
    /// Index one Mail item for one recipient.
    MailIndex {
        /// Group.
        group_id: String,
        /// Recipient.
        actor_id: String,
        /// Mail event `seq`.
        seq: u64,
        /// Mail event id.
        event_id: String,
    },
    /// Move a Mail cursor.
    MailCursor {
        /// Group.
        group_id: String,
        /// Reader.
        actor_id: String,
        /// Cursor `seq`.
        seq: u64,
        /// Cursor event.
        event_id: String,
    },
    /// An actor generation ends (`actor.remove`): its Mail index and Mail cursor are dropped
    /// and its still-open reply obligations are closed as cancelled by `closed_by`, so an
    /// actor later added under the same id starts with none of them.
    ActorRetire {
        /// Group.
        group_id: String,
        /// The removed actor.
        actor_id: String,
        /// The `actor.remove` event.
        closed_by: String,
    },
    /// An automatic runtime delivery is due for a newly appended message: recorded with the
    /// message, removed by the delivery's first record, so one whose claim never committed
    /// (a kill -9 in between) is found and made at the next start.
    DeliveryDue {
        /// Group.
        group_id: String,
        /// The message.
        source_event_id: String,
        /// Recipient.
        actor_id: String,
        /// The message's `seq` (recovery runs in ledger order).
        seq: u64,
    },
    /// Set a delivery's latest state.
    Delivery {
        /// Group.
        group_id: String,
        /// Row.
        row: DeliveryRow,
    },
    /// Record an idempotency key.
    Idempotency {
        /// Group.
        group_id: String,
        /// Principal.
        by: String,
        /// Key.
        client_id: String,
        /// Original event.
        event_id: String,
        /// When (unix seconds).
        at_unix: i64,
    },
}
