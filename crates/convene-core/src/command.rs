//! Commands: what a face asks the engine to append. Faces translate wire requests into these.

use serde_json::{Map, Value};

/// Fields of a `chat.message` send (§6.1), as given by the client.
#[derive(Debug, Clone, Default)]
pub struct SendArgs {
    /// Target group.
    pub group_id: String,
    /// Effective principal (set by the face from authentication or the local-trust hint).
    pub by: String,
    /// Message text (`None` when the client sent no text at all).
    pub text: Option<String>,
    /// `plain` or `markdown`.
    pub format: Option<String>,
    /// Sender perspective, ≤ 1200 normalized characters.
    pub insight: Option<String>,
    /// `send`, `request_reply` or `mail`.
    pub message_mode: Option<String>,
    /// Recipient tokens.
    pub to: Vec<String>,
    /// Replied-to event id.
    pub reply_to: Option<String>,
    /// Display hint.
    pub quote_text: Option<String>,
    /// Provenance: source group.
    pub src_group_id: Option<String>,
    /// Provenance: source event.
    pub src_event_id: Option<String>,
    /// Attachments (§8.1), kept as given.
    pub attachments: Vec<Value>,
    /// References (§8.2), kept as given.
    pub refs: Vec<Value>,
    /// Client idempotency key.
    pub client_id: Option<String>,
    /// Client timestamp for display only (§4.3).
    pub client_ts: Option<String>,
    /// Extra `data` fields to store untouched (forward compatibility).
    pub extra: Map<String, Value>,
    /// Event id chosen by a daemon face that must reference the message from other events
    /// committed with it (GroupX: `turn.queued` names its source message). Never taken from a
    /// client; `None` lets the engine mint one.
    pub event_id: Option<String>,
}

/// A relay of one message into another group (§9).
#[derive(Debug, Clone, Default)]
pub struct RelayArgs {
    /// The message to send in the destination group (its `group_id` is the destination).
    pub send: SendArgs,
    /// Group the relay is issued from.
    pub src_group_id: String,
    /// Source event being relayed, when relaying an existing message.
    pub src_event_id: Option<String>,
    /// Prefix the text with `[Summarized]` instead of carrying it verbatim.
    pub summarized: bool,
    /// Append the optional outbound send record in the source group (§9.2).
    pub record: bool,
}

/// Requested state of a delivery attempt (§6.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryState {
    /// Claimed before runtime I/O.
    Claimed,
    /// The runtime adapter accepted the payload.
    Accepted,
    /// Handoff did not occur.
    Failed,
    /// Side effects may have occurred but cannot be proven.
    Ambiguous,
}

impl DeliveryState {
    /// Wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Claimed => "claimed",
            Self::Accepted => "accepted",
            Self::Failed => "failed",
            Self::Ambiguous => "ambiguous",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "claimed" => Self::Claimed,
            "accepted" => Self::Accepted,
            "failed" => Self::Failed,
            "ambiguous" => Self::Ambiguous,
            _ => return None,
        })
    }
}

/// Why a delivery is being claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimKind {
    /// The daemon's own first attempt after a send.
    Automatic,
    /// An explicit operator re-delivery (`message_deliver`).
    Manual {
        /// Allow a new attempt after an `ambiguous` result.
        force_ambiguous: bool,
    },
}

/// Everything a face can ask the engine to append.
#[derive(Debug, Clone)]
pub enum Command {
    /// Create a group.
    GroupCreate {
        /// Principal.
        by: String,
        /// Title.
        title: String,
        /// Topic.
        topic: String,
        /// Settings applied in the same commit (e.g. a face's attributes); may be empty.
        settings: Map<String, Value>,
    },
    /// Change title/topic (and other plain fields).
    GroupUpdate {
        /// Group.
        group_id: String,
        /// Principal.
        by: String,
        /// Fields to change.
        patch: Map<String, Value>,
    },
    /// Change settings (e.g. `default_send_to`).
    GroupSettingsUpdate {
        /// Group.
        group_id: String,
        /// Principal.
        by: String,
        /// Settings to change.
        patch: Map<String, Value>,
    },
    /// Start or stop the group's runtimes.
    GroupSetState {
        /// Group.
        group_id: String,
        /// Principal.
        by: String,
        /// `active`, `idle`, `paused` or `stopped`.
        state: String,
    },
    /// Delete the group and its ledger.
    GroupDelete {
        /// Group.
        group_id: String,
        /// Principal.
        by: String,
    },
    /// Attach a scope (creating the group when `group_id` is empty).
    Attach {
        /// Group, or empty to create one.
        group_id: String,
        /// Principal.
        by: String,
        /// Project root path or URL.
        url: String,
    },
    /// Detach a scope.
    DetachScope {
        /// Group.
        group_id: String,
        /// Principal.
        by: String,
        /// Scope to detach.
        scope_key: String,
    },
    /// Add an actor.
    ActorAdd {
        /// Group.
        group_id: String,
        /// Principal.
        by: String,
        /// Actor fields (`actor_id`, `title`, `runtime`, `command`, `internal`, …).
        spec: Map<String, Value>,
    },
    /// Change an actor.
    ActorUpdate {
        /// Group.
        group_id: String,
        /// Principal.
        by: String,
        /// Actor.
        actor_id: String,
        /// Fields to change.
        patch: Map<String, Value>,
    },
    /// Remove an actor.
    ActorRemove {
        /// Group.
        group_id: String,
        /// Principal.
        by: String,
        /// Actor.
        actor_id: String,
    },
    /// Append a `chat.message`.
    Send(SendArgs),
    /// Relay a message across groups.
    Relay(RelayArgs),
    /// Append `mail.read`.
    MailRead {
        /// Group.
        group_id: String,
        /// Principal.
        by: String,
        /// Reader.
        actor_id: String,
        /// Last consumed Mail event (inclusive).
        event_id: String,
    },
    /// Append `chat.reply_request.cancelled`.
    CancelReplyRequest {
        /// Group.
        group_id: String,
        /// Principal.
        by: String,
        /// The `request_reply` message.
        source_event_id: String,
    },
    /// Append a daemon-authored `runtime.delivery` claim.
    DeliveryClaim {
        /// Group.
        group_id: String,
        /// Recipient actor.
        actor_id: String,
        /// Delivered message.
        source_event_id: String,
        /// Transport name.
        transport: String,
        /// Automatic or manual.
        kind: ClaimKind,
    },
    /// Append the one result of a claimed attempt.
    DeliveryResult {
        /// Group.
        group_id: String,
        /// The claimed delivery.
        delivery_id: String,
        /// accepted, failed or ambiguous.
        state: DeliveryState,
        /// Why.
        reason: Option<String>,
    },
    /// Append `system.notify`.
    Notify {
        /// Group.
        group_id: String,
        /// Principal.
        by: String,
        /// Notification data.
        data: Map<String, Value>,
    },
    /// Append `chat.reaction`.
    Reaction {
        /// Group.
        group_id: String,
        /// Principal.
        by: String,
        /// Reacted-to event.
        event_id: String,
        /// Emoji.
        emoji: String,
    },
    /// Append an extension event (`x.*` or `vendor.*`).
    AppendExtension {
        /// Group.
        group_id: String,
        /// Principal.
        by: String,
        /// Kind.
        kind: String,
        /// Data.
        data: Value,
    },
    /// Several appends that commit together or not at all (a face's message and the events
    /// that must never exist without it, e.g. GroupX's queued turns). Only `Send` and
    /// `AppendExtension` steps: none of them changes a group, so a refusal only has to give
    /// back the `seq`s the earlier steps took.
    All {
        /// The steps, in order.
        steps: Vec<Command>,
    },
    /// Import foreign or exported events into a group (assigning fresh `seq`).
    Import {
        /// Destination group (created when absent).
        group_id: String,
        /// Events, in ledger order.
        events: Vec<Value>,
    },
}
