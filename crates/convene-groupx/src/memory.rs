//! Memory and identity requests (§10.4) and the context reset (§10.5): the REST bodies and
//! query strings, their validation, and the canonical payload a retry must repeat (§8.1).
//!
//! The author of a record is always the caller's binding (`user:web` on REST), so besides the
//! sender fields every request refuses (§3.2) these bodies also refuse `author`/`authorActorId`.

use serde_json::{json, Map, Value};

use crate::envelope::{agent_ledger_id, USER_WEB};
use crate::error::{ErrorCode, GroupxError};
use crate::request::{client_command_id, invalid, object, text};

/// Author fields a memory or identity body may not carry: the author is the binding.
pub const AUTHOR_FIELDS: &[&str] = &["author", "authorActorId"];

/// Longest identity `kind`, bytes.
pub const MAX_KIND: usize = 64;

/// Which records a request is about: public/agent memory or identity memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// `/api/memory`, `memory.*` events.
    Memory,
    /// `/api/identity`, `identity.*` events.
    Identity,
}

impl Family {
    /// Prefix of the ids the broker mints (`mem_…`, `idn_…`).
    pub fn id_prefix(self) -> &'static str {
        match self {
            Family::Memory => "mem",
            Family::Identity => "idn",
        }
    }

    /// The id field of a record (`memoryId`, `identityId`).
    pub fn id_field(self) -> &'static str {
        match self {
            Family::Memory => "memoryId",
            Family::Identity => "identityId",
        }
    }

    /// Event type prefix and the key of one record in an answer (`memory`, `identity`).
    pub fn name(self) -> &'static str {
        match self {
            Family::Memory => "memory",
            Family::Identity => "identity",
        }
    }

    /// The key of the record list in `GET` answers.
    pub fn plural(self) -> &'static str {
        match self {
            Family::Memory => "memories",
            Family::Identity => "identities",
        }
    }

    /// The code for an id that names no record of this family.
    pub fn unknown(self) -> ErrorCode {
        match self {
            Family::Memory => ErrorCode::UnknownMemory,
            Family::Identity => ErrorCode::UnknownIdentity,
        }
    }

    /// The code for a change to a retracted record.
    pub fn retracted(self) -> ErrorCode {
        match self {
            Family::Memory => ErrorCode::MemoryRetracted,
            Family::Identity => ErrorCode::IdentityRetracted,
        }
    }

    /// The code for a change to a version that is no longer current.
    pub fn superseded(self) -> ErrorCode {
        match self {
            Family::Memory => ErrorCode::MemorySuperseded,
            Family::Identity => ErrorCode::IdentitySuperseded,
        }
    }

    /// The GroupX event type of a change (`memory.remembered`, …).
    pub fn event_type(self, c: Change) -> String {
        format!("{}.{}", self.name(), c.as_str())
    }

    /// The family and change a GroupX event type stands for.
    pub fn of_type(t: &str) -> Option<(Family, Change)> {
        let (f, c) = t.split_once('.')?;
        let f = match f {
            "memory" => Family::Memory,
            "identity" => Family::Identity,
            _ => return None,
        };
        let c = match c {
            "remembered" => Change::Remembered,
            "superseded" => Change::Superseded,
            "retracted" => Change::Retracted,
            _ => return None,
        };
        Some((f, c))
    }
}

/// What an event does to a record lineage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A new lineage, version 1.
    Remembered,
    /// A new version of a lineage; the old one stays in history.
    Superseded,
    /// A tombstone on the current version.
    Retracted,
}

impl Change {
    /// Wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Remembered => "remembered",
            Change::Superseded => "superseded",
            Change::Retracted => "retracted",
        }
    }
}

/// Memory scope (§10.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Public room memory.
    Room,
    /// One agent's memory (core or dated).
    Agent,
}

impl Scope {
    /// Wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Room => "room",
            Scope::Agent => "agent",
        }
    }

    pub(crate) fn parse(s: &str, field: &str) -> Result<Self, GroupxError> {
        match s {
            "room" => Ok(Scope::Room),
            "agent" => Ok(Scope::Agent),
            _ => Err(invalid("scope is `room` or `agent`", field)),
        }
    }
}

/// The two layers of agent memory (§10.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentMemoryType {
    /// Stable, maintained by hand or by the agent.
    Core,
    /// Dated notes (normally rolled up by the agent).
    Dated,
}

impl AgentMemoryType {
    /// Wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentMemoryType::Core => "core",
            AgentMemoryType::Dated => "dated",
        }
    }

    fn parse(s: &str, field: &str) -> Result<Self, GroupxError> {
        match s {
            "core" => Ok(AgentMemoryType::Core),
            "dated" => Ok(AgentMemoryType::Dated),
            _ => Err(invalid("agentMemoryType is `core` or `dated`", field)),
        }
    }
}

/// `POST /api/memory`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RememberMemory {
    /// The caller's retry key.
    pub client_command_id: String,
    /// Room or agent.
    pub scope: Scope,
    /// Whom the record is about (agent scope: the agent whose memory it is).
    pub subject_actor_id: Option<String>,
    /// Agent scope only; `core` when not given.
    pub agent_memory_type: Option<AgentMemoryType>,
    /// Text.
    pub content: String,
    /// The room event the record comes from.
    pub source_event_id: Option<String>,
}

impl RememberMemory {
    /// The payload a retry must repeat.
    pub fn canonical(&self) -> String {
        json!({"op": "memory.remember", "scope": self.scope.as_str(),
            "subjectActorId": self.subject_actor_id,
            "agentMemoryType": self.agent_memory_type.map(AgentMemoryType::as_str),
            "content": self.content, "sourceEventId": self.source_event_id})
        .to_string()
    }
}

/// `POST /api/identity`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RememberIdentity {
    /// The caller's retry key.
    pub client_command_id: String,
    /// The agent the identity is about.
    pub subject_actor_id: String,
    /// What aspect of identity (free text, e.g. `role`).
    pub kind: String,
    /// Text.
    pub content: String,
    /// The room event the record comes from.
    pub source_event_id: Option<String>,
}

impl RememberIdentity {
    /// The payload a retry must repeat.
    pub fn canonical(&self) -> String {
        json!({"op": "identity.remember", "subjectActorId": self.subject_actor_id,
            "kind": self.kind, "content": self.content, "sourceEventId": self.source_event_id})
        .to_string()
    }
}

/// `POST /api/{memory|identity}/:id/supersede`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Supersede {
    /// The caller's retry key.
    pub client_command_id: String,
    /// The new version's text.
    pub content: String,
}

impl Supersede {
    /// The payload a retry must repeat (the target id is part of it).
    pub fn canonical(&self, family: Family, target: &str) -> String {
        json!({"op": format!("{}.supersede", family.name()), "target": target,
            "content": self.content})
        .to_string()
    }
}

/// `POST /api/{memory|identity}/:id/retract`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retract {
    /// The caller's retry key.
    pub client_command_id: String,
    /// Why, for people.
    pub reason: Option<String>,
}

impl Retract {
    /// The payload a retry must repeat (the target id is part of it).
    pub fn canonical(&self, family: Family, target: &str) -> String {
        json!({"op": format!("{}.retract", family.name()), "target": target,
            "reason": self.reason})
        .to_string()
    }
}

/// `POST /api/context/reset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResetContext {
    /// The caller's retry key.
    pub client_command_id: String,
}

impl ResetContext {
    /// The payload a retry must repeat.
    pub fn canonical(&self) -> String {
        json!({"op": "context.reset"}).to_string()
    }
}

/// The body as an object with only `known` fields, sender and author fields refused first.
fn fields(body: &[u8], known: &[&str]) -> Result<Map<String, Value>, GroupxError> {
    let m = object(body)?;
    if let Some(f) = AUTHOR_FIELDS.iter().find(|f| m.contains_key(**f)) {
        return Err(GroupxError::new(
            ErrorCode::SenderFieldForbidden,
            format!("`{f}` may not be given: the author is the caller's binding"),
        )
        .field(f));
    }
    if let Some(k) = m.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(invalid(format!("unknown field `{k}`"), k));
    }
    Ok(m)
}

/// An optional non-empty string (`null` = absent).
fn opt_str<'a>(m: &'a Map<String, Value>, f: &str) -> Result<Option<&'a str>, GroupxError> {
    match m.get(f) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s)),
        _ => Err(invalid(
            format!("{f} must be a non-empty string or null"),
            f,
        )),
    }
}

/// `agent:<id>`, or `UNKNOWN_ACTOR`.
pub(crate) fn agent_id(s: &str, f: &str) -> Result<String, GroupxError> {
    if agent_ledger_id(s).is_some() {
        Ok(s.to_string())
    } else {
        Err(GroupxError::new(
            ErrorCode::UnknownActor,
            format!("`{s}` is not an agent id (agent:<id>)"),
        )
        .field(f))
    }
}

/// Parses `POST /api/memory`; `max` bytes of content at most.
pub fn parse_remember_memory(body: &[u8], max: usize) -> Result<RememberMemory, GroupxError> {
    let m = fields(
        body,
        &[
            "clientCommandId",
            "content",
            "scope",
            "subjectActorId",
            "agentMemoryType",
            "sourceEventId",
        ],
    )?;
    let client_command_id = client_command_id(&m)?;
    let scope = match m.get("scope") {
        Some(Value::String(s)) => Scope::parse(s, "scope")?,
        _ => return Err(invalid("scope (`room` or `agent`) is required", "scope")),
    };
    let content = text(&m, "content", max)?;
    let subject = opt_str(&m, "subjectActorId")?;
    let subject_actor_id = match (scope, subject) {
        (Scope::Agent, None) => {
            return Err(invalid(
                "agent scope needs subjectActorId: the agent whose memory it is",
                "subjectActorId",
            ))
        }
        (Scope::Agent, Some(s)) => Some(agent_id(s, "subjectActorId")?),
        (Scope::Room, Some(s)) if s == USER_WEB => Some(s.to_string()),
        (Scope::Room, Some(s)) => Some(agent_id(s, "subjectActorId")?),
        (Scope::Room, None) => None,
    };
    let agent_memory_type = match (scope, opt_str(&m, "agentMemoryType")?) {
        (Scope::Room, Some(_)) => {
            return Err(invalid(
                "agentMemoryType is only for agent scope",
                "agentMemoryType",
            ))
        }
        (Scope::Room, None) => None,
        (Scope::Agent, None) => Some(AgentMemoryType::Core),
        (Scope::Agent, Some(t)) => Some(AgentMemoryType::parse(t, "agentMemoryType")?),
    };
    Ok(RememberMemory {
        client_command_id,
        scope,
        subject_actor_id,
        agent_memory_type,
        content,
        source_event_id: opt_str(&m, "sourceEventId")?.map(str::to_string),
    })
}

/// Parses `POST /api/identity`; `max` bytes of content at most.
pub fn parse_remember_identity(body: &[u8], max: usize) -> Result<RememberIdentity, GroupxError> {
    let m = fields(
        body,
        &[
            "clientCommandId",
            "subjectActorId",
            "kind",
            "content",
            "sourceEventId",
        ],
    )?;
    let client_command_id = client_command_id(&m)?;
    let subject_actor_id = match opt_str(&m, "subjectActorId")? {
        Some(s) => agent_id(s, "subjectActorId")?,
        None => {
            return Err(invalid(
                "subjectActorId (an agent id) is required",
                "subjectActorId",
            ))
        }
    };
    let kind = match m.get("kind") {
        Some(Value::String(k))
            if !k.trim().is_empty() && k.len() <= MAX_KIND && !k.chars().any(char::is_control) =>
        {
            k.clone()
        }
        _ => {
            return Err(invalid(
                format!("kind must be a 1-{MAX_KIND} byte string without control characters"),
                "kind",
            ))
        }
    };
    let content = text(&m, "content", max)?;
    Ok(RememberIdentity {
        client_command_id,
        subject_actor_id,
        kind,
        content,
        source_event_id: opt_str(&m, "sourceEventId")?.map(str::to_string),
    })
}

/// Parses a supersede body: `{clientCommandId, content}`.
pub fn parse_supersede(body: &[u8], max: usize) -> Result<Supersede, GroupxError> {
    let m = fields(body, &["clientCommandId", "content"])?;
    Ok(Supersede {
        client_command_id: client_command_id(&m)?,
        content: text(&m, "content", max)?,
    })
}

/// Parses a retract body: `{clientCommandId, reason?}`; `max` bytes of reason at most.
pub fn parse_retract(body: &[u8], max: usize) -> Result<Retract, GroupxError> {
    let m = fields(body, &["clientCommandId", "reason"])?;
    let client_command_id = client_command_id(&m)?;
    let reason = match m.get("reason") {
        None | Some(Value::Null) => None,
        Some(_) => Some(text(&m, "reason", max)?),
    };
    Ok(Retract {
        client_command_id,
        reason,
    })
}

/// Parses `POST /api/context/reset`: exactly `{clientCommandId}`.
pub fn parse_reset_context(body: &[u8]) -> Result<ResetContext, GroupxError> {
    let m = fields(body, &["clientCommandId"])?;
    Ok(ResetContext {
        client_command_id: client_command_id(&m)?,
    })
}

/// `GET /api/memory` and `GET /api/identity` filters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordQuery {
    /// Memory only: room or agent scope.
    pub scope: Option<Scope>,
    /// Records whose subject is this agent.
    pub agent_id: Option<String>,
    /// Memory only: core or dated.
    pub agent_memory_type: Option<AgentMemoryType>,
    /// Identity only: this kind.
    pub kind: Option<String>,
    /// Show retracted lineages (their last version, marked) too.
    pub include_retracted: bool,
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

/// `application/x-www-form-urlencoded` decoding of one query component.
fn decode(s: &str) -> Result<String, GroupxError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let v = b
                    .get(i + 1)
                    .and_then(|h| hex(*h))
                    .zip(b.get(i + 2).and_then(|l| hex(*l)))
                    .map(|(h, l)| h * 16 + l)
                    .ok_or_else(|| {
                        GroupxError::new(ErrorCode::InvalidEnvelope, "bad %-escape in the query")
                    })?;
                out.push(v);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out)
        .map_err(|_| GroupxError::new(ErrorCode::InvalidEnvelope, "the query is not UTF-8"))
}

/// Parses the query string of `GET /api/memory` (`Memory`) or `GET /api/identity`
/// (`Identity`); an unknown or repeated parameter is refused, not ignored.
pub fn parse_query(family: Family, q: Option<&str>) -> Result<RecordQuery, GroupxError> {
    let mut out = RecordQuery::default();
    let mut seen: Vec<String> = Vec::new();
    for pair in q.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (decode(k)?, decode(v)?);
        if seen.contains(&k) {
            return Err(invalid(format!("query parameter `{k}` is repeated"), &k));
        }
        seen.push(k.clone());
        match (family, k.as_str()) {
            (Family::Memory, "scope") => out.scope = Some(Scope::parse(&v, "scope")?),
            (Family::Memory, "agentMemoryType") => {
                out.agent_memory_type = Some(AgentMemoryType::parse(&v, "agentMemoryType")?)
            }
            (Family::Identity, "kind") if !v.is_empty() => out.kind = Some(v),
            (_, "agentId") => out.agent_id = Some(agent_id(&v, "agentId")?),
            (_, "includeRetracted") => {
                out.include_retracted = match v.as_str() {
                    "true" | "1" => true,
                    "false" | "0" => false,
                    _ => return Err(invalid("includeRetracted is true or false", &k)),
                }
            }
            _ => return Err(invalid(format!("unknown query parameter `{k}`"), &k)),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem(s: &str) -> Result<RememberMemory, GroupxError> {
        parse_remember_memory(s.as_bytes(), 10)
    }

    #[test]
    fn room_and_agent_memory_parse_with_their_defaults() {
        let r = mem(r#"{"clientCommandId":"k","scope":"room","content":"x"}"#).unwrap();
        assert_eq!((r.scope, r.agent_memory_type), (Scope::Room, None));
        let a = mem(r#"{"clientCommandId":"k","scope":"agent","subjectActorId":"agent:a","content":"x","sourceEventId":"evt_1"}"#).unwrap();
        assert_eq!(a.agent_memory_type, Some(AgentMemoryType::Core));
        assert_eq!(a.subject_actor_id.as_deref(), Some("agent:a"));
        assert_eq!(a.source_event_id.as_deref(), Some("evt_1"));
        assert_ne!(r.canonical(), a.canonical());
        let d = mem(r#"{"clientCommandId":"k","scope":"agent","subjectActorId":"agent:a","agentMemoryType":"dated","content":"x"}"#).unwrap();
        assert_eq!(d.agent_memory_type, Some(AgentMemoryType::Dated));
    }

    #[test]
    fn sender_and_author_fields_are_refused_before_anything_else() {
        for f in ["from", "actor", "provenance", "author", "authorActorId"] {
            let body = format!(r#"{{"{f}":"agent:x"}}"#);
            for e in [
                mem(&body).unwrap_err(),
                parse_remember_identity(body.as_bytes(), 10).unwrap_err(),
                parse_supersede(body.as_bytes(), 10).unwrap_err(),
                parse_retract(body.as_bytes(), 10).unwrap_err(),
                parse_reset_context(body.as_bytes()).unwrap_err(),
            ] {
                assert_eq!(e.code, ErrorCode::SenderFieldForbidden, "{f}");
            }
        }
    }

    #[test]
    fn bad_memory_bodies_get_their_codes() {
        let cases = [
            (
                r#"{"clientCommandId":"k","scope":"room","content":"x","zz":1}"#,
                ErrorCode::InvalidEnvelope,
            ),
            (
                r#"{"clientCommandId":"k","content":"x"}"#,
                ErrorCode::InvalidEnvelope,
            ),
            (
                r#"{"clientCommandId":"k","scope":"team","content":"x"}"#,
                ErrorCode::InvalidEnvelope,
            ),
            (
                r#"{"scope":"room","content":"x"}"#,
                ErrorCode::InvalidEnvelope,
            ),
            (
                r#"{"clientCommandId":"k","scope":"room","content":"  "}"#,
                ErrorCode::InvalidEnvelope,
            ),
            (
                r#"{"clientCommandId":"k","scope":"room","content":"x","agentMemoryType":"core"}"#,
                ErrorCode::InvalidEnvelope,
            ),
            (
                r#"{"clientCommandId":"k","scope":"agent","content":"x"}"#,
                ErrorCode::InvalidEnvelope,
            ),
            (
                r#"{"clientCommandId":"k","scope":"agent","subjectActorId":"codex","content":"x"}"#,
                ErrorCode::UnknownActor,
            ),
            (
                r#"{"clientCommandId":"k","scope":"agent","subjectActorId":"agent:a","agentMemoryType":"weekly","content":"x"}"#,
                ErrorCode::InvalidEnvelope,
            ),
            (
                r#"{"clientCommandId":"k","scope":"room","content":"x","sourceEventId":7}"#,
                ErrorCode::InvalidEnvelope,
            ),
            (
                r#"{"clientCommandId":"k","scope":"room","content":"x","transport":"direct"}"#,
                ErrorCode::InvalidEnvelope,
            ),
            (
                r#"{"clientCommandId":"k","scope":"room","content":"01234567890"}"#,
                ErrorCode::MessageTooLarge,
            ),
        ];
        for (body, code) in cases {
            assert_eq!(mem(body).unwrap_err().code, code, "{body}");
        }
        assert!(mem(
            r#"{"clientCommandId":"k","scope":"room","subjectActorId":"user:web","content":"x"}"#
        )
        .is_ok());
    }

    #[test]
    fn identity_needs_an_agent_subject_and_a_kind() {
        let ok = parse_remember_identity(
            br#"{"clientCommandId":"k","subjectActorId":"agent:a","kind":"role","content":"reviewer"}"#,
            100,
        )
        .unwrap();
        assert_eq!(ok.kind, "role");
        for (body, code) in [
            (
                r#"{"clientCommandId":"k","kind":"role","content":"x"}"#,
                ErrorCode::InvalidEnvelope,
            ),
            (
                r#"{"clientCommandId":"k","subjectActorId":"user:web","kind":"role","content":"x"}"#,
                ErrorCode::UnknownActor,
            ),
            (
                r#"{"clientCommandId":"k","subjectActorId":"agent:a","content":"x"}"#,
                ErrorCode::InvalidEnvelope,
            ),
            (
                r#"{"clientCommandId":"k","subjectActorId":"agent:a","kind":"role","content":"x","scope":"room"}"#,
                ErrorCode::InvalidEnvelope,
            ),
        ] {
            assert_eq!(
                parse_remember_identity(body.as_bytes(), 100)
                    .unwrap_err()
                    .code,
                code,
                "{body}"
            );
        }
    }

    #[test]
    fn changes_are_keyed_by_their_target_and_bounded() {
        let s = parse_supersede(br#"{"clientCommandId":"k","content":"v2"}"#, 10).unwrap();
        assert_ne!(
            s.canonical(Family::Memory, "mem_1"),
            s.canonical(Family::Memory, "mem_2")
        );
        assert_ne!(
            s.canonical(Family::Memory, "x"),
            s.canonical(Family::Identity, "x")
        );
        assert_eq!(
            parse_supersede(
                br#"{"clientCommandId":"k","content":"v2","scope":"room"}"#,
                10
            )
            .unwrap_err()
            .code,
            ErrorCode::InvalidEnvelope
        );
        let r = parse_retract(br#"{"clientCommandId":"k"}"#, 10).unwrap();
        assert_eq!(r.reason, None);
        assert_eq!(
            parse_retract(br#"{"clientCommandId":"k","reason":"01234567890"}"#, 10)
                .unwrap_err()
                .code,
            ErrorCode::MessageTooLarge
        );
        assert!(parse_reset_context(br#"{"clientCommandId":"k"}"#).is_ok());
        assert_eq!(
            parse_reset_context(b"{}").unwrap_err().code,
            ErrorCode::InvalidEnvelope
        );
    }

    #[test]
    fn queries_decode_and_refuse_what_they_do_not_know() {
        let q = parse_query(
            Family::Memory,
            Some("scope=agent&agentId=agent%3Acodex&includeRetracted=true&agentMemoryType=dated"),
        )
        .unwrap();
        assert_eq!(q.scope, Some(Scope::Agent));
        assert_eq!(q.agent_id.as_deref(), Some("agent:codex"));
        assert_eq!(q.agent_memory_type, Some(AgentMemoryType::Dated));
        assert!(q.include_retracted);
        assert_eq!(
            parse_query(Family::Memory, None).unwrap(),
            RecordQuery::default()
        );
        let i = parse_query(Family::Identity, Some("kind=team+role")).unwrap();
        assert_eq!(i.kind.as_deref(), Some("team role"));
        for (f, q) in [
            (Family::Memory, "kind=role"),
            (Family::Identity, "scope=room"),
            (Family::Memory, "scope=all"),
            (Family::Memory, "agentId=codex"),
            (Family::Memory, "includeRetracted=maybe"),
            (Family::Memory, "scope=room&scope=agent"),
            (Family::Memory, "x=%zz"),
        ] {
            assert!(parse_query(f, Some(q)).is_err(), "{q}");
        }
    }

    #[test]
    fn event_types_round_trip() {
        for f in [Family::Memory, Family::Identity] {
            for c in [Change::Remembered, Change::Superseded, Change::Retracted] {
                assert_eq!(Family::of_type(&f.event_type(c)), Some((f, c)));
            }
        }
        assert_eq!(Family::of_type("turn.queued"), None);
    }
}
