//! The GroupX Envelope (§2) and the projection of a stored ledger event onto it.
//!
//! A GroupX room is a ledger group. `message.created` is the stored `chat.message` (so every
//! other face sees the same message); every other GroupX type is stored as the extension kind
//! `x.groupx.<type>` with `data = {"groupx": {correlation fields}, "body": {…}}`. Events of
//! other kinds (group and actor bookkeeping) have no GroupX projection.

use serde::Serialize;
use serde_json::{Map, Value};

/// The schema every envelope carries.
pub const SCHEMA: &str = "groupx.event/0.1";

/// The extension-kind prefix GroupX types are stored under.
pub const KIND_PREFIX: &str = "x.groupx.";

/// The one room of this slice.
pub const ROOM_ID: &str = "room:main";

/// The web client's identity.
pub const USER_WEB: &str = "user:web";

/// The ledger principal of the human (CCCS `by: "user"`).
pub const LEDGER_USER: &str = "user";

/// The ledger principal of the local operator (the room assistant, `user:assistant`).
pub const LEDGER_OPERATOR: &str = "svc:assistant";

/// The local operator's identity (§3.1: a user, not an agent of the roster).
pub const USER_ASSISTANT: &str = "user:assistant";

/// The ledger principal of the broker itself.
pub const LEDGER_SYSTEM: &str = "system";

/// What kind of party an actor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ActorKind {
    /// A human (or a local client acting for one).
    User,
    /// An agent CLI driven by the broker.
    Agent,
    /// The broker.
    System,
}

/// `ActorRef` (§2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActorRef {
    /// `user:web`, `agent:<id>`, `system:groupx`.
    pub actor_id: String,
    /// Kind.
    pub kind: ActorKind,
    /// Shown name.
    pub display_name: String,
}

/// The GroupX actor id of a ledger principal: `user` → `user:web`, the broker → `system:groupx`,
/// an actor `codex` → `agent:codex`.
pub fn actor_id_of(by: &str) -> String {
    match by {
        LEDGER_USER => USER_WEB.to_string(),
        LEDGER_SYSTEM => "system:groupx".to_string(),
        LEDGER_OPERATOR => USER_ASSISTANT.to_string(),
        other if other.starts_with("svc:") => "system:groupx".to_string(),
        other => format!("agent:{other}"),
    }
}

/// The ledger actor id of a GroupX agent id (`agent:codex` → `codex`).
pub fn agent_ledger_id(actor_id: &str) -> Option<&str> {
    actor_id.strip_prefix("agent:").filter(|s| !s.is_empty())
}

/// `GroupXEnvelope` (§2).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Envelope {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// Globally unique.
    pub event_id: String,
    /// Commit order in the room; `None` for transient events.
    pub seq: Option<u64>,
    /// Room.
    pub room_id: String,
    /// Type (`message.created`, `turn.queued`, …).
    #[serde(rename = "type")]
    pub kind: String,
    /// Who did it, from the ledger's `by` (never from a body).
    pub actor: ActorRef,
    /// Agents this event wakes.
    pub to: Vec<String>,
    /// Visible reply relation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_to_event_id: Option<String>,
    /// A forward's original message (its author is read from that envelope, §4.2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forwarded_event_id: Option<String>,
    /// What directly caused this event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub causation_id: Option<String>,
    /// The interaction chain.
    pub correlation_id: String,
    /// The chain's root.
    pub root_correlation_id: String,
    /// Commit time.
    pub occurred_at: String,
    /// `durable` or `transient`.
    pub durability: &'static str,
    /// Type-specific body.
    pub body: Value,
}

/// The fields of a stored ledger event the projection reads.
#[derive(Debug, Clone, Copy)]
pub struct Stored<'a> {
    /// Event id.
    pub id: &'a str,
    /// Per-group seq.
    pub seq: u64,
    /// Ledger kind.
    pub kind: &'a str,
    /// Ledger principal.
    pub by: &'a str,
    /// Timestamp.
    pub ts: &'a str,
    /// Data object.
    pub data: &'a Value,
}

fn str_field(m: Option<&Map<String, Value>>, k: &str) -> Option<String> {
    m.and_then(|m| m.get(k))
        .and_then(Value::as_str)
        .map(str::to_string)
}

fn to_list(v: Option<&Value>) -> Option<Vec<String>> {
    v.and_then(Value::as_array).map(|a| {
        a.iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    })
}

/// Projects a stored event; `name` gives the display name of an actor id (`None`: the id).
/// Returns `None` for kinds GroupX does not show.
pub fn project(ev: Stored<'_>, name: &dyn Fn(&str) -> Option<String>) -> Option<Envelope> {
    let gx = ev.data.get("groupx").and_then(Value::as_object);
    let (kind, body, to, reply) = if ev.kind == "chat.message" {
        let mut body = Map::new();
        body.insert(
            "content".into(),
            ev.data
                .get("text")
                .cloned()
                .unwrap_or(Value::String(String::new())),
        );
        if let Some(t) = gx.and_then(|g| g.get("turnId")) {
            body.insert("turnId".into(), t.clone());
        }
        // A message from another face names CCCS recipients; show them as GroupX ids.
        let to = to_list(gx.and_then(|g| g.get("to"))).unwrap_or_else(|| {
            to_list(ev.data.get("to"))
                .unwrap_or_default()
                .iter()
                .map(|t| {
                    if t.starts_with('@') {
                        t.clone()
                    } else {
                        actor_id_of(t)
                    }
                })
                .collect()
        });
        let reply = ev
            .data
            .get("reply_to")
            .and_then(Value::as_str)
            .map(str::to_string);
        // An operator's dispatch is stored as a message (so its turns can name it and every
        // face keeps it) but is not a chat bubble (§4: operator.dispatch).
        let kind = match gx
            .and_then(|g| g.get("commandType"))
            .and_then(Value::as_str)
        {
            Some("operator.dispatch") => "operator.dispatch",
            _ => "message.created",
        };
        (kind.to_string(), Value::Object(body), to, reply)
    } else if let Some(t) = ev.kind.strip_prefix(KIND_PREFIX) {
        let to = to_list(gx.and_then(|g| g.get("to"))).unwrap_or_default();
        let body = ev
            .data
            .get("body")
            .cloned()
            .unwrap_or(Value::Object(Map::new()));
        (t.to_string(), body, to, str_field(gx, "replyToEventId"))
    } else {
        return None;
    };
    let actor_id = actor_id_of(ev.by);
    let kind_of = match ev.by {
        LEDGER_USER | LEDGER_OPERATOR => ActorKind::User,
        b if b == LEDGER_SYSTEM || b.starts_with("svc:") => ActorKind::System,
        _ => ActorKind::Agent,
    };
    let display_name = name(&actor_id).unwrap_or_else(|| match kind_of {
        ActorKind::User if ev.by == LEDGER_OPERATOR => "Assistant".to_string(),
        ActorKind::User => "You".to_string(),
        ActorKind::System => "GroupX".to_string(),
        ActorKind::Agent => ev.by.to_string(),
    });
    let correlation_id =
        str_field(gx, "correlationId").unwrap_or_else(|| format!("corr_{}", ev.id));
    Some(Envelope {
        schema: SCHEMA,
        event_id: ev.id.to_string(),
        seq: Some(ev.seq),
        room_id: ROOM_ID.to_string(),
        kind,
        actor: ActorRef {
            actor_id,
            kind: kind_of,
            display_name,
        },
        to,
        reply_to_event_id: reply,
        forwarded_event_id: str_field(gx, "forwardedEventId"),
        causation_id: str_field(gx, "causationId"),
        root_correlation_id: str_field(gx, "rootCorrelationId")
            .unwrap_or_else(|| correlation_id.clone()),
        correlation_id,
        occurred_at: ev.ts.to_string(),
        durability: "durable",
        body,
    })
}

/// The correlation fields stored beside a GroupX event (`data.groupx`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Correlation {
    /// Chain id.
    pub correlation_id: String,
    /// Root chain id.
    pub root_correlation_id: String,
    /// Direct cause (an event or a turn id).
    pub causation_id: Option<String>,
    /// Agents woken (GroupX ids).
    pub to: Vec<String>,
}

impl Correlation {
    /// As stored under `data.groupx`.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("correlationId".into(), self.correlation_id.clone().into());
        m.insert(
            "rootCorrelationId".into(),
            self.root_correlation_id.clone().into(),
        );
        if let Some(c) = &self.causation_id {
            m.insert("causationId".into(), c.clone().into());
        }
        m.insert("to".into(), self.to.clone().into());
        Value::Object(m)
    }
}

/// The stored `data` of an `x.groupx.<type>` event.
pub fn extension_data(corr: &Correlation, body: Value) -> Value {
    let mut m = Map::new();
    m.insert("groupx".into(), corr.to_value());
    m.insert("body".into(), body);
    Value::Object(m)
}

/// A transient envelope (`seq: null`): deltas and live progress, never stored.
pub fn transient(
    kind: &str,
    actor: ActorRef,
    corr: &Correlation,
    occurred_at: String,
    body: Value,
) -> Envelope {
    Envelope {
        schema: SCHEMA,
        event_id: crate::ids::new_id("tev"),
        seq: None,
        room_id: ROOM_ID.to_string(),
        kind: kind.to_string(),
        actor,
        to: Vec::new(),
        reply_to_event_id: None,
        forwarded_event_id: None,
        causation_id: corr.causation_id.clone(),
        correlation_id: corr.correlation_id.clone(),
        root_correlation_id: corr.root_correlation_id.clone(),
        occurred_at,
        durability: "transient",
        body,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn none(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn a_web_message_projects_with_its_correlation() {
        let data = json!({"text": "hi", "to": ["codex"], "reply_to": "e0",
            "groupx": {"correlationId": "corr_1", "rootCorrelationId": "corr_1", "to": ["agent:codex"]}});
        let ev = Stored {
            id: "evt_1",
            seq: 4,
            kind: "chat.message",
            by: "user",
            ts: "t",
            data: &data,
        };
        let e = project(ev, &none).unwrap();
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["type"], "message.created");
        assert_eq!(
            v["actor"],
            json!({"actorId": "user:web", "kind": "user", "displayName": "You"})
        );
        assert_eq!(v["to"], json!(["agent:codex"]));
        assert_eq!(v["replyToEventId"], "e0");
        assert_eq!(v["seq"], 4);
        assert_eq!(v["body"], json!({"content": "hi"}));
        assert!(v.get("causationId").is_none());
    }

    #[test]
    fn a_message_from_another_face_gets_its_own_root_and_groupx_recipients() {
        let data = json!({"text": "from cccc", "to": ["codex", "@all"]});
        let ev = Stored {
            id: "e9",
            seq: 1,
            kind: "chat.message",
            by: "codex",
            ts: "t",
            data: &data,
        };
        let e = project(ev, &|id| (id == "agent:codex").then(|| "Codex".to_string())).unwrap();
        assert_eq!(e.to, vec!["agent:codex", "@all"]);
        assert_eq!(e.correlation_id, "corr_e9");
        assert_eq!(e.root_correlation_id, "corr_e9");
        assert_eq!(e.actor.display_name, "Codex");
        assert_eq!(e.actor.kind, ActorKind::Agent);
    }

    #[test]
    fn extension_events_carry_their_type_and_body_and_bookkeeping_is_hidden() {
        let corr = Correlation {
            correlation_id: "c".into(),
            root_correlation_id: "r".into(),
            causation_id: Some("evt_1".into()),
            to: vec![],
        };
        let data = extension_data(&corr, json!({"turnId": "turn_1"}));
        let ev = Stored {
            id: "e2",
            seq: 5,
            kind: "x.groupx.turn.queued",
            by: "system",
            ts: "t",
            data: &data,
        };
        let e = project(ev, &none).unwrap();
        assert_eq!(
            (e.kind.as_str(), e.actor.actor_id.as_str()),
            ("turn.queued", "system:groupx")
        );
        assert_eq!(e.causation_id.as_deref(), Some("evt_1"));
        assert_eq!(e.root_correlation_id, "r");
        let other = json!({"actor_id": "codex"});
        let ev = Stored {
            id: "e3",
            seq: 6,
            kind: "actor.add",
            by: "user",
            ts: "t",
            data: &other,
        };
        assert!(project(ev, &none).is_none());
    }
}
