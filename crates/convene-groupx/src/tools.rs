//! The agents' MCP tools (§6, §12): their schemas and the validation of their arguments.
//! Like REST bodies, no argument may name the sender (§3.2).

use serde_json::{json, Map, Value};

use crate::error::{ErrorCode, GroupxError};
use crate::memory::{
    agent_id, AgentMemoryType, RememberIdentity, RememberMemory, Scope, AUTHOR_FIELDS, MAX_KIND,
};
use crate::request::{client_command_id, text, Recipients, SENDER_FIELDS};

/// The longest a tool may wait (§6.3).
pub const MAX_WAIT_MS: u64 = 60_000;

/// `groupx.send` / `groupx.ask` / `groupx.publish` arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Post {
    /// Recipients (`None` for publish).
    pub to: Option<Recipients>,
    /// Text.
    pub content: String,
    /// Visible reply relation (default: the caller's current source message).
    pub reply_to_event_id: Option<String>,
    /// Retry key.
    pub client_command_id: String,
    /// ask: how long to wait, at most [`MAX_WAIT_MS`].
    pub timeout_ms: Option<u64>,
    /// ask: cancel children still running when the wait ends.
    pub cancel_on_timeout: bool,
    /// send/ask: observers to pair with the targets (§4.3).
    pub supervision: Option<crate::request::Supervision>,
    /// A forward of this event (§4.2).
    pub forwarded_event_id: Option<String>,
}

impl Post {
    /// What a retry must repeat.
    pub fn canonical(&self, tool: &str) -> String {
        let to = match &self.to {
            None => Value::Null,
            Some(Recipients::All) => json!(["@all"]),
            Some(Recipients::Agents(a)) => json!(a),
        };
        let observers = self.supervision.as_ref().map(|s| s.observers.clone());
        json!({"tool": tool, "to": to, "content": self.content, "replyToEventId": self.reply_to_event_id,
            "forwardedEventId": self.forwarded_event_id,
            "observers": observers})
        .to_string()
    }
}

/// `groupx.collect`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collect {
    /// The ask's message.
    pub message_event_id: String,
    /// Wait bound.
    pub timeout_ms: Option<u64>,
}

/// `groupx.read`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    /// Only this chain (its correlation or root correlation).
    pub correlation_id: Option<String>,
    /// Only events after this seq.
    pub after_seq: u64,
    /// At most this many (1-200, default 50).
    pub limit: usize,
}

fn bad(msg: impl Into<String>, field: &str) -> GroupxError {
    GroupxError::new(ErrorCode::InvalidEnvelope, msg).field(field)
}

fn args(v: &Value, known: &[&str]) -> Result<Map<String, Value>, GroupxError> {
    let Some(m) = v.as_object() else {
        return Err(GroupxError::new(
            ErrorCode::InvalidEnvelope,
            "arguments must be an object",
        ));
    };
    if let Some(f) = SENDER_FIELDS.iter().find(|f| m.contains_key(**f)) {
        return Err(GroupxError::new(
            ErrorCode::SenderFieldForbidden,
            format!("`{f}` may not be given: the sender is this session's binding"),
        )
        .field(f));
    }
    if let Some(k) = m.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(bad(format!("unknown argument `{k}`"), k));
    }
    Ok(m.clone())
}

fn opt_str(m: &Map<String, Value>, k: &str) -> Result<Option<String>, GroupxError> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        _ => Err(bad(format!("{k} must be a non-empty string"), k)),
    }
}

fn wait_ms(m: &Map<String, Value>) -> Result<Option<u64>, GroupxError> {
    match m.get("timeoutMs") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|n| *n <= MAX_WAIT_MS)
            .map(Some)
            .ok_or_else(|| bad(format!("timeoutMs must be 0-{MAX_WAIT_MS}"), "timeoutMs")),
    }
}

/// Parses send (`with_to`), ask (`with_to` and `ask`) or publish arguments.
pub fn parse_post(
    v: &Value,
    with_to: bool,
    ask: bool,
    max_content: usize,
) -> Result<Post, GroupxError> {
    let mut known = vec![
        "content",
        "replyToEventId",
        "clientCommandId",
        "forwardedEventId",
    ];
    if with_to {
        known.extend(["to", "supervision"]);
    }
    if ask {
        known.extend(["timeoutMs", "cancelOnTimeout"]);
    }
    let m = args(v, &known)?;
    // Reuse the REST rules for the shared fields.
    let mut body = Map::new();
    for k in [
        "clientCommandId",
        "content",
        "replyToEventId",
        "forwardedEventId",
    ] {
        if let Some(x) = m.get(k) {
            body.insert(k.into(), x.clone());
        }
    }
    body.insert(
        "to".into(),
        if with_to {
            m.get("to").cloned().unwrap_or(Value::Null)
        } else {
            json!(["@all"])
        },
    );
    let p = crate::request::parse_post_message(
        Value::Object(body).to_string().as_bytes(),
        max_content,
    )?;
    Ok(Post {
        to: with_to.then_some(p.to),
        content: p.content,
        reply_to_event_id: p.reply_to_event_id,
        client_command_id: p.client_command_id,
        timeout_ms: if ask { wait_ms(&m)? } else { None },
        cancel_on_timeout: m
            .get("cancelOnTimeout")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        supervision: crate::request::parse_supervision(m.get("supervision"))?,
        forwarded_event_id: p.forwarded_event_id,
    })
}

/// Parses collect arguments.
pub fn parse_collect(v: &Value) -> Result<Collect, GroupxError> {
    let m = args(v, &["messageEventId", "timeoutMs"])?;
    Ok(Collect {
        message_event_id: opt_str(&m, "messageEventId")?
            .ok_or_else(|| bad("messageEventId is required", "messageEventId"))?,
        timeout_ms: wait_ms(&m)?,
    })
}

/// Parses read arguments.
pub fn parse_read(v: &Value) -> Result<Read, GroupxError> {
    let m = args(v, &["correlationId", "afterSeq", "limit"])?;
    let after_seq = match m.get("afterSeq") {
        None | Some(Value::Null) => 0,
        // Seqs are stored as SQLite integers: a cursor past i64::MAX names no point.
        Some(v) => v
            .as_u64()
            .filter(|n| i64::try_from(*n).is_ok())
            .ok_or_else(|| bad("afterSeq must be an integer from 0 to 2^63-1", "afterSeq"))?,
    };
    let limit = match m.get("limit") {
        None | Some(Value::Null) => 50,
        Some(v) => v
            .as_u64()
            .filter(|n| (1..=200).contains(n))
            .ok_or_else(|| bad("limit must be 1-200", "limit"))? as usize,
    };
    Ok(Read {
        correlation_id: opt_str(&m, "correlationId")?,
        after_seq,
        limit,
    })
}

/// `groupx.watch` (§6.7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watch {
    /// The worker turn to watch (default: the pair's current worker turn).
    pub subject_turn_id: Option<String>,
    /// Wait for the terminal event rather than the next milestone.
    pub until_terminal: bool,
    /// Wait bound.
    pub timeout_ms: Option<u64>,
}

/// `groupx.steer` (§6.7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Steer {
    /// The worker turn (default: the pair's current worker turn).
    pub subject_turn_id: Option<String>,
    /// Cancel the worker's turn and queue a new one with the guidance.
    pub interrupt: bool,
    /// Why: public.
    pub reason: String,
    /// The guidance: a public message.
    pub content: String,
    /// Retry key.
    pub client_command_id: String,
}

impl Steer {
    /// What a retry must repeat.
    pub fn canonical(&self) -> String {
        json!({"tool": "groupx.steer", "subject": self.subject_turn_id, "interrupt": self.interrupt,
            "reason": self.reason, "content": self.content})
        .to_string()
    }
}

/// Parses watch arguments.
pub fn parse_watch(v: &Value) -> Result<Watch, GroupxError> {
    let m = args(v, &["subjectTurnId", "afterSeq", "until", "timeoutMs"])?;
    let until_terminal = match m.get("until").and_then(Value::as_str) {
        Some("terminal") => true,
        Some("next_milestone") | None => false,
        Some(_) => return Err(bad("until is next_milestone or terminal", "until")),
    };
    Ok(Watch {
        subject_turn_id: opt_str(&m, "subjectTurnId")?,
        until_terminal,
        timeout_ms: wait_ms(&m)?,
    })
}

/// Parses steer arguments.
pub fn parse_steer(v: &Value, max_content: usize) -> Result<Steer, GroupxError> {
    let m = args(
        v,
        &[
            "subjectTurnId",
            "action",
            "reason",
            "content",
            "clientCommandId",
        ],
    )?;
    let interrupt = match m.get("action").and_then(Value::as_str) {
        Some("interrupt") => true,
        Some("nudge") => false,
        _ => return Err(bad("action is nudge or interrupt", "action")),
    };
    let reason =
        opt_str(&m, "reason")?.ok_or_else(|| bad("reason is required (it is public)", "reason"))?;
    let content = opt_str(&m, "content")?.ok_or_else(|| bad("content is required", "content"))?;
    if content.len() + reason.len() > max_content {
        return Err(
            GroupxError::new(ErrorCode::MessageTooLarge, "steer content over the limit")
                .field("content"),
        );
    }
    let client_command_id = opt_str(&m, "clientCommandId")?
        .filter(|s| s.len() <= crate::request::MAX_CLIENT_COMMAND_ID)
        .ok_or_else(|| bad("clientCommandId is required", "clientCommandId"))?;
    Ok(Steer {
        subject_turn_id: opt_str(&m, "subjectTurnId")?,
        interrupt,
        reason,
        content,
        client_command_id,
    })
}

/// `groupx.memory.search` (§12): room memory and the caller's own agent memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemorySearch {
    /// Case-insensitive substring of the content (none: every record).
    pub query: Option<String>,
    /// Only room or only the caller's agent scope (none: both).
    pub scope: Option<Scope>,
    /// At most this many (1-[`MAX_SEARCH`], default 20).
    pub limit: usize,
}

/// `groupx.identity.read` (§12).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityRead {
    /// Only this agent (`agent:<id>`); none: every roster agent.
    pub agent_id: Option<String>,
}

/// Most records one `groupx.memory.search` returns.
pub const MAX_SEARCH: usize = 100;

/// Arguments of a memory tool: sender and author fields refused first (the author is the
/// binding), then the record fields the broker fixes, then anything unknown.
fn memory_args(
    v: &Value,
    known: &[&str],
    fixed: &[&str],
) -> Result<Map<String, Value>, GroupxError> {
    if let Some(f) = v.as_object().and_then(|m| {
        SENDER_FIELDS
            .iter()
            .chain(AUTHOR_FIELDS)
            .find(|f| m.contains_key(**f))
    }) {
        return Err(GroupxError::new(
            ErrorCode::SenderFieldForbidden,
            format!("`{f}` may not be given: the author is this session's binding"),
        )
        .field(f));
    }
    if let Some(f) = v
        .as_object()
        .and_then(|m| fixed.iter().find(|f| m.contains_key(**f)))
    {
        return Err(bad(
            format!("`{f}` may not be given: the broker fixes it to you (your binding)"),
            f,
        ));
    }
    args(v, known)
}

/// What the broker fixes on a record an agent writes about itself.
const SELF_FIELDS: &[&str] = &[
    "scope",
    "subject",
    "subjectActorId",
    "agentMemoryType",
    "binding",
    "agentId",
];

/// Parses `groupx.memory.search`.
pub fn parse_memory_search(v: &Value) -> Result<MemorySearch, GroupxError> {
    let m = memory_args(v, &["query", "scope", "limit"], &[])?;
    let query = match m.get("query") {
        None | Some(Value::Null) => None,
        Some(Value::String(q)) if q.trim().is_empty() => None,
        Some(Value::String(q)) => Some(q.clone()),
        _ => return Err(bad("query must be a string", "query")),
    };
    let scope = match m.get("scope") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(Scope::parse(s, "scope")?),
        _ => return Err(bad("scope is `room` or `agent`", "scope")),
    };
    let limit = match m.get("limit") {
        None | Some(Value::Null) => 20,
        Some(v) => v
            .as_u64()
            .filter(|n| (1..=MAX_SEARCH as u64).contains(n))
            .ok_or_else(|| bad(format!("limit must be 1-{MAX_SEARCH}"), "limit"))?
            as usize,
    };
    Ok(MemorySearch {
        query,
        scope,
        limit,
    })
}

/// Parses `groupx.memory.remember`: a public room record authored by the caller.
pub fn parse_memory_remember(v: &Value, max: usize) -> Result<RememberMemory, GroupxError> {
    let m = memory_args(
        v,
        &["content", "clientCommandId", "sourceEventId"],
        &["scope", "agentMemoryType", "binding"],
    )?;
    Ok(RememberMemory {
        client_command_id: client_command_id(&m)?,
        scope: Scope::Room,
        subject_actor_id: None,
        agent_memory_type: None,
        content: text(&m, "content", max)?,
        source_event_id: opt_str(&m, "sourceEventId")?,
    })
}

/// Parses `groupx.core_memory_remember`: the caller's (`caller`, `agent:<id>`) own core
/// memory; scope, subject and author come from the binding, never the arguments (§12).
pub fn parse_core_memory_remember(
    v: &Value,
    caller: &str,
    max: usize,
) -> Result<RememberMemory, GroupxError> {
    let m = memory_args(v, &["content", "clientCommandId"], SELF_FIELDS)?;
    Ok(RememberMemory {
        client_command_id: client_command_id(&m)?,
        scope: Scope::Agent,
        subject_actor_id: Some(caller.to_string()),
        agent_memory_type: Some(AgentMemoryType::Core),
        content: text(&m, "content", max)?,
        source_event_id: None,
    })
}

/// Parses `groupx.identity.read`.
pub fn parse_identity_read(v: &Value) -> Result<IdentityRead, GroupxError> {
    let m = memory_args(v, &["agentId"], &[])?;
    Ok(IdentityRead {
        agent_id: opt_str(&m, "agentId")?
            .map(|a| agent_id(&a, "agentId"))
            .transpose()?,
    })
}

/// Parses `groupx.identity.remember`: an identity record about the caller (`agent:<id>`).
pub fn parse_identity_remember(
    v: &Value,
    caller: &str,
    max: usize,
) -> Result<RememberIdentity, GroupxError> {
    let m = memory_args(v, &["kind", "content", "clientCommandId"], SELF_FIELDS)?;
    let client_command_id = client_command_id(&m)?;
    let kind = match m.get("kind") {
        Some(Value::String(k))
            if !k.trim().is_empty() && k.len() <= MAX_KIND && !k.chars().any(char::is_control) =>
        {
            k.clone()
        }
        _ => {
            return Err(bad(
                format!("kind must be a 1-{MAX_KIND} byte string without control characters"),
                "kind",
            ))
        }
    };
    Ok(RememberIdentity {
        client_command_id,
        subject_actor_id: caller.to_string(),
        kind,
        content: text(&m, "content", max)?,
        source_event_id: None,
    })
}

/// `tools/list`: the member tools of this slice.
pub fn list() -> Value {
    let to = json!({"type": "array", "items": {"type": "string"}, "minItems": 1,
        "description": "agent ids (agent:<id>) to wake, or [\"@all\"] (all enabled agents but you)"});
    let content =
        json!({"type": "string", "description": "message text, visible to the whole room"});
    let reply = json!({"type": ["string", "null"], "description": "event id this answers (default: your current turn's message)"});
    let cid = json!({"type": "string", "description": "your retry key: the same key and payload never create a second message"});
    let fwd = json!({"type": ["string", "null"], "description": "forward this message (by reference: its author stays its own)"});
    let wait = json!({"type": "integer", "minimum": 0, "maximum": MAX_WAIT_MS});
    let mem = json!({"type": "string", "description": "the record's text"});
    json!({"tools": [
        {"name": "groupx.send",
         "description": "Post a message to the room and give each target a new turn (asynchronous: returns at once with the queued turns). A target already working gets the turn after its current one.",
         "inputSchema": {"type": "object", "properties": {"to": to, "content": content, "replyToEventId": reply, "clientCommandId": cid, "forwardedEventId": fwd},
                         "required": ["to", "content", "clientCommandId"], "additionalProperties": false}},
        {"name": "groupx.publish",
         "description": "Post progress, a question or a conclusion to the room without waking anyone.",
         "inputSchema": {"type": "object", "properties": {"content": content, "replyToEventId": reply, "clientCommandId": cid, "forwardedEventId": fwd},
                         "required": ["content", "clientCommandId"], "additionalProperties": false}},
        {"name": "groupx.ask",
         "description": "Like send, then wait (bounded, at most 60 s) for the targets' answers and return them. Returns state=pending at once if a target has work ahead; continue with groupx.collect, not a second ask. Asking an agent that is waiting on you is refused (CAUSAL_CYCLE): use send.",
         "inputSchema": {"type": "object", "properties": {"to": to, "content": content, "replyToEventId": reply, "clientCommandId": cid,
                         "forwardedEventId": fwd, "timeoutMs": wait, "cancelOnTimeout": {"type": "boolean"}},
                         "required": ["to", "content", "clientCommandId"], "additionalProperties": false}},
        {"name": "groupx.collect",
         "description": "Wait (bounded) for the turns an earlier ask created and return their results; creates nothing.",
         "inputSchema": {"type": "object", "properties": {"messageEventId": {"type": "string"}, "timeoutMs": wait},
                         "required": ["messageEventId"], "additionalProperties": false}},
        {"name": "groupx.watch",
         "description": "Watch Turns only: wait (bounded) for the watched worker turn's next milestone (started, a tool, new text, terminal) or its end, and return a snapshot of its public progress.",
         "inputSchema": {"type": "object", "properties": {"subjectTurnId": {"type": "string"}, "afterSeq": {"type": "integer", "minimum": 0},
                         "until": {"enum": ["next_milestone", "terminal"]}, "timeoutMs": wait}, "additionalProperties": false}},
        {"name": "groupx.steer",
         "description": "Watch Turns only: post public guidance to the watched worker. nudge: a message it can read; interrupt: cancel its whole turn and queue a new one with your guidance as its task. Limited per watched turn.",
         "inputSchema": {"type": "object", "properties": {"subjectTurnId": {"type": "string"}, "action": {"enum": ["nudge", "interrupt"]},
                         "reason": {"type": "string"}, "content": content, "clientCommandId": cid},
                         "required": ["action", "reason", "content", "clientCommandId"], "additionalProperties": false}},
        {"name": "groupx.read",
         "description": "Read room events (messages and turn outcomes), optionally of one correlation chain, after a seq.",
         "inputSchema": {"type": "object", "properties": {"correlationId": {"type": "string"}, "afterSeq": {"type": "integer", "minimum": 0},
                         "limit": {"type": "integer", "minimum": 1, "maximum": 200}}, "additionalProperties": false}},
        {"name": "groupx.memory.search",
         "description": "Search the room's public memory and your own agent memory (case-insensitive substring of the content), newest first. Other agents' private memory is never returned.",
         "inputSchema": {"type": "object", "properties": {"query": {"type": "string"}, "scope": {"enum": ["room", "agent"]},
                         "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH}}, "additionalProperties": false}},
        {"name": "groupx.memory.remember",
         "description": "Add a public room memory record (a fact, a decision) that every agent and the human can read; you are its author.",
         "inputSchema": {"type": "object", "properties": {"content": mem, "clientCommandId": cid,
                         "sourceEventId": {"type": "string", "description": "the room event it comes from"}},
                         "required": ["content", "clientCommandId"], "additionalProperties": false}},
        {"name": "groupx.core_memory_remember",
         "description": "Add to your own core memory: stable notes about how you work here. It is shown to you at the start of every turn and to no other agent.",
         "inputSchema": {"type": "object", "properties": {"content": mem, "clientCommandId": cid},
                         "required": ["content", "clientCommandId"], "additionalProperties": false}},
        {"name": "groupx.identity.read",
         "description": "Read the current identity records of one agent (agentId) or of every agent in the room.",
         "inputSchema": {"type": "object", "properties": {"agentId": {"type": "string", "description": "agent:<id>"}}, "additionalProperties": false}},
        {"name": "groupx.identity.remember",
         "description": "Record an aspect of your own identity (kind, e.g. role or expertise). It is always about you.",
         "inputSchema": {"type": "object", "properties": {"kind": {"type": "string", "maxLength": MAX_KIND}, "content": mem, "clientCommandId": cid},
                         "required": ["kind", "content", "clientCommandId"], "additionalProperties": false}}
    ]})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_arguments_follow_the_rest_rules() {
        let p = parse_post(
            &json!({"to": ["agent:a"], "content": "x", "clientCommandId": "k"}),
            true,
            false,
            10,
        )
        .unwrap();
        assert_eq!(p.to, Some(Recipients::Agents(vec!["agent:a".into()])));
        let e = parse_post(
            &json!({"to": ["agent:a"], "content": "x", "clientCommandId": "k", "from": "agent:b"}),
            true,
            false,
            10,
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::SenderFieldForbidden);
        let e = parse_post(
            &json!({"to": ["agent:a"], "content": "x", "clientCommandId": "k"}),
            false,
            false,
            10,
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidEnvelope, "publish takes no `to`");
        let e = parse_post(&json!({"to": ["agent:a"], "content": "x", "clientCommandId": "k", "timeoutMs": 60_001}), true, true, 10).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("timeoutMs"));
        assert_eq!(parse_read(&json!({})).unwrap().limit, 50);
        assert!(parse_read(&json!({"limit": 0})).is_err());
        assert!(parse_collect(&json!({})).is_err());
        let names: Vec<String> = list()["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(
            names,
            [
                "groupx.send",
                "groupx.publish",
                "groupx.ask",
                "groupx.collect",
                "groupx.watch",
                "groupx.steer",
                "groupx.read",
                "groupx.memory.search",
                "groupx.memory.remember",
                "groupx.core_memory_remember",
                "groupx.identity.read",
                "groupx.identity.remember"
            ]
        );
        assert!(parse_steer(
            &json!({"action": "redirect", "reason": "r", "content": "c", "clientCommandId": "k"}),
            100
        )
        .is_err());
        assert!(parse_steer(
            &json!({"action": "interrupt", "content": "c", "clientCommandId": "k"}),
            100
        )
        .is_err());
        assert!(
            parse_watch(&json!({"until": "terminal"}))
                .unwrap()
                .until_terminal
        );
    }

    #[test]
    fn memory_tools_fix_the_author_and_subject_to_the_caller() {
        let core = parse_core_memory_remember(
            &json!({"content": "I review Rust", "clientCommandId": "k"}),
            "agent:a",
            100,
        )
        .unwrap();
        assert_eq!(core.subject_actor_id.as_deref(), Some("agent:a"));
        assert_eq!(core.scope, Scope::Agent);
        assert_eq!(core.agent_memory_type, Some(AgentMemoryType::Core));
        for f in [
            "scope",
            "subjectActorId",
            "subject",
            "binding",
            "agentMemoryType",
        ] {
            let mut a = json!({"content": "x", "clientCommandId": "k"});
            a[f] = json!("agent:b");
            let e = parse_core_memory_remember(&a, "agent:a", 100).unwrap_err();
            assert_eq!(
                (e.code, e.field.as_deref()),
                (ErrorCode::InvalidEnvelope, Some(f))
            );
            let e = parse_identity_remember(
                &json!({"kind": "role", "content": "x", "clientCommandId": "k", f: "agent:b"}),
                "agent:a",
                100,
            )
            .unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidEnvelope, "{f}");
        }
        for f in ["from", "author", "authorActorId", "actorId"] {
            let e = parse_memory_remember(
                &json!({"content": "x", "clientCommandId": "k", f: "agent:b", "scope": "agent"}),
                100,
            )
            .unwrap_err();
            assert_eq!(e.code, ErrorCode::SenderFieldForbidden, "{f}");
            let e = parse_core_memory_remember(
                &json!({"content": "x", "clientCommandId": "k", f: "agent:b"}),
                "agent:a",
                100,
            )
            .unwrap_err();
            assert_eq!(e.code, ErrorCode::SenderFieldForbidden, "{f}");
        }
        let room = parse_memory_remember(
            &json!({"content": "x", "clientCommandId": "k", "sourceEventId": "evt_1"}),
            100,
        )
        .unwrap();
        assert_eq!((room.scope, room.subject_actor_id), (Scope::Room, None));
        assert_eq!(room.source_event_id.as_deref(), Some("evt_1"));
        let e = parse_memory_remember(
            &json!({"content": "x".repeat(101), "clientCommandId": "k"}),
            100,
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::MessageTooLarge);
        assert!(parse_memory_remember(&json!({"content": "x"}), 100).is_err());
        let id = parse_identity_remember(
            &json!({"kind": "role", "content": "reviewer", "clientCommandId": "k"}),
            "agent:a",
            100,
        )
        .unwrap();
        assert_eq!(
            (id.subject_actor_id.as_str(), id.kind.as_str()),
            ("agent:a", "role")
        );
        assert!(parse_identity_remember(
            &json!({"kind": "", "content": "x", "clientCommandId": "k"}),
            "agent:a",
            100
        )
        .is_err());
    }

    #[test]
    fn memory_search_and_identity_read_are_bounded() {
        let s = parse_memory_search(&json!({})).unwrap();
        assert_eq!((s.query, s.scope, s.limit), (None, None, 20));
        let s =
            parse_memory_search(&json!({"query": "Rust", "scope": "agent", "limit": 100})).unwrap();
        assert_eq!(
            (s.query.as_deref(), s.scope),
            (Some("Rust"), Some(Scope::Agent))
        );
        assert!(parse_memory_search(&json!({"limit": 101})).is_err());
        assert!(parse_memory_search(&json!({"limit": 0})).is_err());
        assert!(parse_memory_search(&json!({"scope": "everyone"})).is_err());
        assert!(parse_memory_search(&json!({"subjectActorId": "agent:b"})).is_err());
        assert_eq!(parse_identity_read(&json!({})).unwrap().agent_id, None);
        assert_eq!(
            parse_identity_read(&json!({"agentId": "codex"}))
                .unwrap_err()
                .code,
            ErrorCode::UnknownActor
        );
    }
}
