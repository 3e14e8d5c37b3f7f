//! REST request bodies (§10.2, §10.3) and their validation. Refusals follow §3.2: a request
//! that tries to name its sender is `SENDER_FIELD_FORBIDDEN`, never partly honoured.

use serde_json::{Map, Value};

use crate::error::{ErrorCode, GroupxError};

/// Fields no request may carry: the sender comes from the binding, never the body (§3.2).
pub const SENDER_FIELDS: &[&str] = &["from", "actor", "provenance", "sender", "actorId"];

/// Fields fixed by the runtime, never per request (§1, §10.3).
pub const RUNTIME_FIELDS: &[&str] = &["transport", "access"];

/// Longest clientCommandId.
pub const MAX_CLIENT_COMMAND_ID: usize = 128;

/// Who a message wakes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recipients {
    /// `@all`: every enabled agent.
    All,
    /// These agents (`agent:<id>`, in the order given, without repeats).
    Agents(Vec<String>),
}

/// `POST /api/messages`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostMessage {
    /// The caller's retry key.
    pub client_command_id: String,
    /// Recipients.
    pub to: Recipients,
    /// Text.
    pub content: String,
    /// Visible reply relation.
    pub reply_to_event_id: Option<String>,
    /// Observers to pair with the workers (§4.3).
    pub supervision: Option<Supervision>,
    /// A forward: the original message, by reference only (§4.2).
    pub forwarded_event_id: Option<String>,
}

/// `SupervisionPair` (§4.3): 1-4 observers, mode `live_steer`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Supervision {
    /// Observer agent ids (`agent:<id>`), distinct, in the order given.
    pub observers: Vec<String>,
}

/// Most observers of one command.
pub const MAX_OBSERVERS: usize = 4;

/// Parses a `supervision` field (`None` when absent or null).
pub fn parse_supervision(v: Option<&Value>) -> Result<Option<Supervision>, GroupxError> {
    let pair = |m: &str| {
        GroupxError::new(ErrorCode::SupervisionPairInvalid, m.to_string()).field("supervision")
    };
    let m = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(m)) => m,
        Some(_) => return Err(pair("supervision must be {observers, mode}")),
    };
    if let Some(k) = m
        .keys()
        .find(|k| !["observers", "mode"].contains(&k.as_str()))
    {
        return Err(pair(&format!("unknown supervision field `{k}`")));
    }
    if m.get("mode").and_then(Value::as_str) != Some("live_steer") {
        return Err(pair("supervision mode must be \"live_steer\""));
    }
    let Some(list) = m.get("observers").and_then(Value::as_array) else {
        return Err(pair("supervision.observers must be an array"));
    };
    let mut observers: Vec<String> = Vec::new();
    for o in list {
        let Some(id) = o
            .as_str()
            .filter(|s| crate::envelope::agent_ledger_id(s).is_some())
        else {
            return Err(pair("observers are agent ids (agent:<id>)"));
        };
        if observers.iter().any(|x| x == id) {
            return Err(pair(&format!("{id} is named twice")));
        }
        observers.push(id.to_string());
    }
    if observers.is_empty() || observers.len() > MAX_OBSERVERS {
        return Err(pair(&format!("1-{MAX_OBSERVERS} observers")));
    }
    Ok(Some(Supervision { observers }))
}

impl PostMessage {
    /// The payload a retry must repeat exactly (§8.1): same key, other payload = conflict.
    pub fn canonical(&self) -> String {
        let to: Vec<&str> = match &self.to {
            Recipients::All => vec!["@all"],
            Recipients::Agents(a) => a.iter().map(String::as_str).collect(),
        };
        let observers = self.supervision.as_ref().map(|s| s.observers.clone());
        serde_json::json!({"to": to, "content": self.content, "replyToEventId": self.reply_to_event_id,
            "forwardedEventId": self.forwarded_event_id,
            "observers": observers})
        .to_string()
    }
}

pub(crate) fn invalid(msg: impl Into<String>, field: &str) -> GroupxError {
    GroupxError::new(ErrorCode::InvalidEnvelope, msg).field(field)
}

/// The body as an object, refusing sender and runtime fields first.
pub(crate) fn object(body: &[u8]) -> Result<Map<String, Value>, GroupxError> {
    let v: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Object(Map::new())
    } else {
        serde_json::from_slice(body).map_err(|e| {
            GroupxError::new(ErrorCode::InvalidEnvelope, format!("body is not JSON: {e}"))
        })?
    };
    let Value::Object(m) = v else {
        return Err(GroupxError::new(
            ErrorCode::InvalidEnvelope,
            "body must be a JSON object",
        ));
    };
    if let Some(f) = SENDER_FIELDS.iter().find(|f| m.contains_key(**f)) {
        return Err(GroupxError::new(
            ErrorCode::SenderFieldForbidden,
            format!("`{f}` may not be given: the sender is the caller's binding"),
        )
        .field(f));
    }
    if let Some(f) = RUNTIME_FIELDS.iter().find(|f| m.contains_key(**f)) {
        return Err(invalid(
            format!("`{f}` is fixed by the runtime and may not be set per request"),
            f,
        ));
    }
    Ok(m)
}

/// The `clientCommandId` of a body: 1-128 bytes, no control characters (every command body).
pub(crate) fn client_command_id(m: &Map<String, Value>) -> Result<String, GroupxError> {
    const F: &str = "clientCommandId";
    match m.get(F) {
        Some(Value::String(s))
            if !s.is_empty()
                && s.len() <= MAX_CLIENT_COMMAND_ID
                && !s.chars().any(char::is_control) =>
        {
            Ok(s.clone())
        }
        Some(Value::String(_)) => Err(invalid(
            format!("clientCommandId must be 1-{MAX_CLIENT_COMMAND_ID} bytes without control characters"),
            F,
        )),
        _ => Err(invalid("clientCommandId (a string) is required", F)),
    }
}

/// A required non-blank text of at most `max` bytes (over it: `MESSAGE_TOO_LARGE`).
pub(crate) fn text(m: &Map<String, Value>, f: &str, max: usize) -> Result<String, GroupxError> {
    match m.get(f) {
        Some(Value::String(s)) if s.trim().is_empty() => Err(invalid(format!("{f} is empty"), f)),
        Some(Value::String(s)) if s.len() > max => Err(GroupxError::new(
            ErrorCode::MessageTooLarge,
            format!("{f} is {} bytes; the limit is {max}", s.len()),
        )
        .field(f)),
        Some(Value::String(s)) => Ok(s.clone()),
        _ => Err(invalid(format!("{f} (a string) is required"), f)),
    }
}

/// Parses and validates a `POST /api/messages` body; `max_content` bytes of text at most.
pub fn parse_post_message(body: &[u8], max_content: usize) -> Result<PostMessage, GroupxError> {
    let m = object(body)?;
    const KNOWN: &[&str] = &[
        "clientCommandId",
        "to",
        "content",
        "replyToEventId",
        "supervision",
        "forwardedEventId",
    ];
    if let Some(k) = m.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(invalid(format!("unknown field `{k}`"), k));
    }
    let supervision = parse_supervision(m.get("supervision"))?;
    let id = client_command_id(&m)?;
    let content = text(&m, "content", max_content)?;
    let to = recipients(m.get("to"))?;
    let reply_to_event_id = match m.get("replyToEventId") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        _ => {
            return Err(invalid(
                "replyToEventId must be an event id or null",
                "replyToEventId",
            ))
        }
    };
    let forwarded_event_id = optional_event_id(&m, "forwardedEventId")?;
    Ok(PostMessage {
        client_command_id: id,
        to,
        content,
        reply_to_event_id,
        supervision,
        forwarded_event_id,
    })
}

fn recipients(v: Option<&Value>) -> Result<Recipients, GroupxError> {
    let Some(Value::Array(items)) = v else {
        return Err(invalid(
            "to must be a non-empty array of agent ids or [\"@all\"]",
            "to",
        ));
    };
    if items.is_empty() {
        return Err(invalid(
            "to is empty: name at least one agent, or @all",
            "to",
        ));
    }
    let mut out: Vec<String> = Vec::new();
    let mut all = false;
    for it in items {
        let Some(s) = it.as_str() else {
            return Err(invalid("to holds only strings", "to"));
        };
        if s == "@all" {
            all = true;
        } else if crate::envelope::agent_ledger_id(s).is_some() {
            if !out.iter().any(|x| x == s) {
                out.push(s.to_string());
            }
        } else {
            return Err(GroupxError::new(
                ErrorCode::UnknownTarget,
                format!("`{s}` is not an agent id (agent:<id>) or @all"),
            )
            .field("to"));
        }
    }
    Ok(if all {
        Recipients::All
    } else {
        Recipients::Agents(out)
    })
}

/// An optional event-id field (`null` or absent = none).
pub(crate) fn optional_event_id(
    m: &Map<String, Value>,
    k: &str,
) -> Result<Option<String>, GroupxError> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() && s.len() <= 128 => Ok(Some(s.clone())),
        _ => Err(invalid(format!("{k} must be an event id or null"), k)),
    }
}

/// `POST /api/runtime/shutdown` (§10.8): exactly `{"runtimeScopeKey": "<64 hex>"}`.
pub fn parse_shutdown(body: &[u8]) -> Result<String, GroupxError> {
    let m = object(body)?;
    if let Some(k) = m.keys().find(|k| k.as_str() != "runtimeScopeKey") {
        return Err(invalid(format!("unknown field `{k}`"), k));
    }
    match m.get("runtimeScopeKey").and_then(Value::as_str) {
        Some(k) if k.len() == 64 && k.bytes().all(|b| b.is_ascii_hexdigit()) => Ok(k.to_string()),
        _ => Err(invalid(
            "runtimeScopeKey (64 hex) is required",
            "runtimeScopeKey",
        )),
    }
}

/// `POST /api/turns/:id/cancel`: an empty body or `{}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelRequest;

/// Validates a cancel body: nothing may be set, least of all transport or access (§10.3).
pub fn parse_cancel(body: &[u8]) -> Result<CancelRequest, GroupxError> {
    let m = object(body)?;
    if let Some(k) = m.keys().next() {
        return Err(invalid(format!("unknown field `{k}`"), k));
    }
    Ok(CancelRequest)
}

/// `POST /api/assistant/messages` (§10.7): strictly `{clientCommandId, content}`; `max` bytes of
/// content at most. Sender fields are `SENDER_FIELD_FORBIDDEN`, anything else (`to`,
/// `supervision`, …) `INVALID_ENVELOPE`.
pub fn parse_assistant_message(b: &[u8], max: usize) -> Result<(String, String), GroupxError> {
    let m = object(b)?;
    if let Some(k) = m
        .keys()
        .find(|k| k.as_str() != "clientCommandId" && k.as_str() != "content")
    {
        // `to` and `supervision` included: the side conversation routes nothing (§10.7).
        return Err(invalid(
            format!(
                "unknown field `{k}` (the side conversation takes clientCommandId and content)"
            ),
            k,
        ));
    }
    let ccid = client_command_id(&m)?;
    let content = text(&m, "content", max)?;
    Ok((ccid, content))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_assistant_message_body_is_strict() {
        let code = |b: &str| parse_assistant_message(b.as_bytes(), 10).unwrap_err().code;
        assert_eq!(
            code(r#"{"clientCommandId":"a","content":"x","from":"u","to":["@all"]}"#),
            ErrorCode::SenderFieldForbidden
        );
        assert_eq!(
            code(r#"{"clientCommandId":"a","content":"x","to":["@all"]}"#),
            ErrorCode::InvalidEnvelope
        );
        assert_eq!(
            code(r#"{"clientCommandId":"a","content":"x","supervision":{}}"#),
            ErrorCode::InvalidEnvelope
        );
        assert_eq!(
            code(r#"{"clientCommandId":"a","content":"01234567890"}"#),
            ErrorCode::MessageTooLarge
        );
        assert_eq!(code(r#"{"content":"x"}"#), ErrorCode::InvalidEnvelope);
        assert_eq!(
            parse_assistant_message(br#"{"clientCommandId":"a","content":"x"}"#, 10).unwrap(),
            ("a".into(), "x".into())
        );
    }

    fn post(s: &str) -> Result<PostMessage, GroupxError> {
        parse_post_message(s.as_bytes(), 100)
    }

    #[test]
    fn a_valid_message() {
        let p = post(r#"{"clientCommandId":"c1","to":["agent:a","agent:b","agent:a"],"content":"hi","replyToEventId":null}"#).unwrap();
        assert_eq!(
            p.to,
            Recipients::Agents(vec!["agent:a".into(), "agent:b".into()])
        );
        let all = post(r#"{"clientCommandId":"c1","to":["@all"],"content":"hi"}"#).unwrap();
        assert_eq!(all.to, Recipients::All);
        assert_ne!(p.canonical(), all.canonical());
    }

    #[test]
    fn sender_fields_are_refused_before_anything_else() {
        for f in ["from", "actor", "provenance"] {
            let e = post(&format!(r#"{{"{f}":"agent:x","content":""}}"#)).unwrap_err();
            assert_eq!(e.code, ErrorCode::SenderFieldForbidden, "{f}");
        }
    }

    #[test]
    fn bad_bodies_get_their_codes() {
        let cases = [
            (r#"[1]"#, ErrorCode::InvalidEnvelope),
            (
                r#"{"clientCommandId":"c","to":["agent:a"],"content":"x","transport":"direct"}"#,
                ErrorCode::InvalidEnvelope,
            ),
            (
                r#"{"clientCommandId":"c","to":["agent:a"],"content":"x","zz":1}"#,
                ErrorCode::InvalidEnvelope,
            ),
            (
                r#"{"to":["agent:a"],"content":"x"}"#,
                ErrorCode::InvalidEnvelope,
            ),
            (
                r#"{"clientCommandId":"c","to":[],"content":"x"}"#,
                ErrorCode::InvalidEnvelope,
            ),
            (
                r#"{"clientCommandId":"c","to":["codex"],"content":"x"}"#,
                ErrorCode::UnknownTarget,
            ),
            (
                r#"{"clientCommandId":"c","to":["agent:a"],"content":"   "}"#,
                ErrorCode::InvalidEnvelope,
            ),
            (
                r#"{"clientCommandId":"c","to":["agent:a"],"content":"x","supervision":{"observers":["agent:b"]}}"#,
                ErrorCode::SupervisionPairInvalid,
            ),
            (
                r#"{"clientCommandId":"c","to":["agent:a"],"content":"x","supervision":{"observers":[],"mode":"live_steer"}}"#,
                ErrorCode::SupervisionPairInvalid,
            ),
            (
                r#"{"clientCommandId":"c","to":["agent:a"],"content":"x","supervision":{"observers":["agent:b","agent:b"],"mode":"live_steer"}}"#,
                ErrorCode::SupervisionPairInvalid,
            ),
        ];
        for (body, code) in cases {
            assert_eq!(post(body).unwrap_err().code, code, "{body}");
        }
        let big = format!(
            r#"{{"clientCommandId":"c","to":["agent:a"],"content":"{}"}}"#,
            "x".repeat(101)
        );
        assert_eq!(post(&big).unwrap_err().code, ErrorCode::MessageTooLarge);
    }

    #[test]
    fn cancel_takes_nothing() {
        assert!(parse_cancel(b"").is_ok());
        assert!(parse_cancel(b"{}").is_ok());
        assert_eq!(
            parse_cancel(br#"{"transport":"direct"}"#).unwrap_err().code,
            ErrorCode::InvalidEnvelope
        );
        assert_eq!(
            parse_cancel(br#"{"from":"x"}"#).unwrap_err().code,
            ErrorCode::SenderFieldForbidden
        );
    }
}
