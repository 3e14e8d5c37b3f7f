//! `POST /api/setup` (§10.6): the strict shape of a roster draft. The roster rules themselves
//! (id syntax, reserved and duplicate ids, drivers, commands) belong to the daemon's config
//! loader, which the daemon runs on the draft after this; here only what is about the draft as
//! a request: its fields, and what it may never carry.

use serde_json::{Map, Value};

use crate::error::{ErrorCode, GroupxError};
use crate::request::SENDER_FIELDS;

/// Fields a setup draft may never carry, at any depth: the transport and access are fixed
/// (§1), and approvals, sandboxes, models and native flags are not part of the contract.
pub const SETUP_FORBIDDEN: &[&str] = &["transport", "access", "approval", "sandbox", "model"];

/// The fields of one draft agent (the spec's seven, plus `mode` and `env` of our config).
pub const AGENT_FIELDS: &[&str] = &[
    "id", "driver", "name", "identity", "command", "cwd", "enabled", "mode", "env",
];

/// The fields of the optional top-level assistant card (§10.6, §10.7).
pub const ASSISTANT_FIELDS: &[&str] = &[
    "driver",
    "name",
    "command",
    "cwd",
    "mode",
    "env",
    "enabled",
    "extraInstructions",
];

/// A parsed setup draft.
#[derive(Debug, Clone, PartialEq)]
pub struct Draft {
    /// The roster's agent objects, in order.
    pub agents: Vec<Map<String, Value>>,
    /// The assistant card: absent (keep the file's), `null` (remove it), or a card.
    pub assistant: Option<Option<Map<String, Value>>>,
}

fn invalid(msg: impl Into<String>, field: &str) -> GroupxError {
    GroupxError::new(ErrorCode::InvalidEnvelope, msg).field(field)
}

/// The first key named in `names`, searched depth-first through objects and arrays, with its
/// path (`agents[0].model`).
fn find_key(v: &Value, names: &[&str], at: &str) -> Option<(String, String)> {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let path = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                if names.contains(&k.as_str()) {
                    return Some((k.clone(), path));
                }
                if let Some(hit) = find_key(x, names, &path) {
                    return Some(hit);
                }
            }
            None
        }
        Value::Array(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, x)| find_key(x, names, &format!("{at}[{i}]"))),
        _ => None,
    }
}

/// Parses a `POST /api/setup` body `{"agents": [...], "assistant"?: {...}|null}`.
///
/// The agents as [`parse_setup`] refuses them; the assistant card must have only
/// [`ASSISTANT_FIELDS`] of their JSON types, with `driver`, `command` and `enabled` given.
pub fn parse_draft(body: &[u8]) -> Result<Draft, GroupxError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        GroupxError::new(ErrorCode::InvalidEnvelope, format!("body is not JSON: {e}"))
    })?;
    let Value::Object(mut top) = v else {
        return Err(GroupxError::new(
            ErrorCode::InvalidEnvelope,
            "body must be a JSON object {\"agents\": [...]}",
        ));
    };
    let assistant = top.remove("assistant");
    if let Some(a) = &assistant {
        let wrapped = serde_json::json!({ "assistant": a });
        if let Some((k, path)) = find_key(&wrapped, SENDER_FIELDS, "") {
            return Err(GroupxError::new(
                ErrorCode::SenderFieldForbidden,
                format!("`{k}` may not be given: the sender is the caller's binding"),
            )
            .field(&path));
        }
    }
    let agents = parse_setup(&serde_json::to_vec(&Value::Object(top)).unwrap_or_default())?;
    let assistant = match assistant {
        None => None,
        Some(Value::Null) => Some(None),
        Some(a) => Some(Some(check_assistant(a)?)),
    };
    Ok(Draft { agents, assistant })
}

fn check_assistant(a: Value) -> Result<Map<String, Value>, GroupxError> {
    let wrapped = serde_json::json!({ "assistant": a });
    if let Some((k, path)) = find_key(&wrapped, SETUP_FORBIDDEN, "") {
        return Err(invalid(format!("`{k}` is not a setup setting"), &path));
    }
    let Value::Object(m) = a else {
        return Err(invalid(
            "the assistant card is an object or null",
            "assistant",
        ));
    };
    if let Some(k) = m.keys().find(|k| !ASSISTANT_FIELDS.contains(&k.as_str())) {
        return Err(invalid(
            format!("unknown assistant field `{k}`"),
            &format!("assistant.{k}"),
        ));
    }
    for (k, v) in &m {
        let ok = match k.as_str() {
            "driver" => v.is_string(),
            "name" | "cwd" | "mode" | "extraInstructions" => v.is_string() || v.is_null(),
            "enabled" => v.is_boolean(),
            "command" => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
            "env" => v
                .as_object()
                .is_some_and(|o| o.values().all(Value::is_string)),
            _ => false,
        };
        if !ok {
            return Err(invalid(
                format!("`{k}` has the wrong JSON type"),
                &format!("assistant.{k}"),
            ));
        }
    }
    for k in ["driver", "command", "enabled"] {
        if !m.contains_key(k) {
            return Err(invalid(
                format!("`{k}` is required"),
                &format!("assistant.{k}"),
            ));
        }
    }
    Ok(m)
}

/// Parses a `POST /api/setup` body `{"agents": [...]}` into its agent objects, in order.
///
/// Refused, in this order: a sender field anywhere (`SENDER_FIELD_FORBIDDEN`); a forbidden
/// setting anywhere, an unknown field, a field of the wrong JSON type, no agents, or no
/// enabled agent (`INVALID_ENVELOPE`, `field` names the place: `agents[2].model`).
pub fn parse_setup(body: &[u8]) -> Result<Vec<Map<String, Value>>, GroupxError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        GroupxError::new(ErrorCode::InvalidEnvelope, format!("body is not JSON: {e}"))
    })?;
    if let Some((k, path)) = find_key(&v, SENDER_FIELDS, "") {
        return Err(GroupxError::new(
            ErrorCode::SenderFieldForbidden,
            format!("`{k}` may not be given: the sender is the caller's binding"),
        )
        .field(&path));
    }
    if let Some((k, path)) = find_key(&v, SETUP_FORBIDDEN, "") {
        return Err(invalid(
            format!("`{k}` is not a setup setting (transport and access are fixed; approval, sandbox and model are the agent's own)"),
            &path,
        ));
    }
    let Value::Object(mut top) = v else {
        return Err(GroupxError::new(
            ErrorCode::InvalidEnvelope,
            "body must be a JSON object {\"agents\": [...]}",
        ));
    };
    if let Some(k) = top.keys().find(|k| k.as_str() != "agents") {
        return Err(invalid(format!("unknown field `{k}`"), k));
    }
    let Some(Value::Array(list)) = top.remove("agents") else {
        return Err(invalid("`agents` must be an array", "agents"));
    };
    if list.is_empty() {
        return Err(invalid("the roster needs at least one agent", "agents"));
    }
    let mut out = Vec::with_capacity(list.len());
    for (i, a) in list.into_iter().enumerate() {
        let at = format!("agents[{i}]");
        let Value::Object(m) = a else {
            return Err(invalid("each agent is an object", &at));
        };
        if let Some(k) = m.keys().find(|k| !AGENT_FIELDS.contains(&k.as_str())) {
            return Err(invalid(
                format!("unknown agent field `{k}`"),
                &format!("{at}.{k}"),
            ));
        }
        check_types(&m, &at)?;
        out.push(m);
    }
    if !out
        .iter()
        .any(|m| m.get("enabled").and_then(Value::as_bool).unwrap_or(true))
    {
        return Err(invalid("at least one agent must be enabled", "agents"));
    }
    Ok(out)
}

/// JSON types of the agent fields, so a refusal names the field (not a serde position).
fn check_types(m: &Map<String, Value>, at: &str) -> Result<(), GroupxError> {
    for (k, v) in m {
        let ok = match k.as_str() {
            "id" | "driver" => v.is_string(),
            "name" => v.is_string() || v.is_null(),
            "identity" | "cwd" | "mode" => v.is_string() || v.is_null(),
            "enabled" => v.is_boolean(),
            "command" => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
            "env" => v
                .as_object()
                .is_some_and(|o| o.values().all(Value::is_string)),
            _ => false,
        };
        if !ok {
            let want = match k.as_str() {
                "enabled" => "a boolean",
                "command" => "an array of strings",
                "env" => "an object of strings",
                "id" | "driver" => "a string",
                _ => "a string or null",
            };
            return Err(invalid(
                format!("`{k}` must be {want}"),
                &format!("{at}.{k}"),
            ));
        }
    }
    if !m.contains_key("id") {
        return Err(invalid("`id` is required", &format!("{at}.id")));
    }
    if !m.contains_key("command") {
        return Err(invalid("`command` is required", &format!("{at}.command")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(body: &str) -> (ErrorCode, Option<String>) {
        let e = parse_setup(body.as_bytes()).unwrap_err();
        (e.code, e.field)
    }

    #[test]
    fn a_draft_parses_in_order() {
        let a = parse_setup(
            br#"{"agents":[{"id":"a","command":["x"],"enabled":false},{"id":"b","command":["y"],"env":{"K":"v"}}]}"#,
        )
        .unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(a[1]["id"], "b");
    }

    #[test]
    fn refusals_name_their_field() {
        assert_eq!(
            code(r#"{"agents":[{"id":"a","command":["x"],"from":"user:web"}]}"#),
            (
                ErrorCode::SenderFieldForbidden,
                Some("agents[0].from".into())
            )
        );
        assert_eq!(
            code(r#"{"agents":[{"id":"a","command":["x"],"env":{"model":"x"}}],"actor":1}"#).0,
            ErrorCode::SenderFieldForbidden,
            "sender fields are checked before everything else"
        );
        for (body, field) in [
            (
                r#"{"agents":[{"id":"a","command":["x"],"model":"m"}]}"#,
                "agents[0].model",
            ),
            (
                r#"{"agents":[{"id":"a","command":["x"],"env":{"sandbox":"1"}}]}"#,
                "agents[0].env.sandbox",
            ),
            (r#"{"transport":"direct","agents":[]}"#, "transport"),
            (
                r#"{"agents":[{"id":"a","command":["x"],"extra":1}]}"#,
                "agents[0].extra",
            ),
            (
                r#"{"agents":[{"id":"a","command":"x"}]}"#,
                "agents[0].command",
            ),
            (
                r#"{"agents":[{"id":"a","command":["x"],"enabled":"yes"}]}"#,
                "agents[0].enabled",
            ),
            (r#"{"agents":[{"command":["x"]}]}"#, "agents[0].id"),
            (
                r#"{"agents":[{"id":"a","command":["x"],"enabled":false}]}"#,
                "agents",
            ),
            (r#"{"agents":[]}"#, "agents"),
            (r#"{"agents":[],"limits":{}}"#, "limits"),
        ] {
            assert_eq!(
                code(body),
                (ErrorCode::InvalidEnvelope, Some(field.into())),
                "{body}"
            );
        }
        assert_eq!(code("[1]").0, ErrorCode::InvalidEnvelope);
        let draft = |b: &str| parse_draft(b.as_bytes());
        let ag = r#""agents":[{"id":"a","command":["x"]}]"#;
        assert_eq!(draft(&format!("{{{ag}}}")).unwrap().assistant, None);
        assert_eq!(
            draft(&format!(r#"{{{ag},"assistant":null}}"#))
                .unwrap()
                .assistant,
            Some(None)
        );
        for (b, c, f) in [
            (
                r#""assistant":{"driver":"acp","command":["x"],"enabled":true,"from":1}"#,
                ErrorCode::SenderFieldForbidden,
                "assistant.from",
            ),
            (
                r#""assistant":{"driver":"acp","command":["x"],"enabled":true,"model":"m"}"#,
                ErrorCode::InvalidEnvelope,
                "assistant.model",
            ),
            (
                r#""assistant":{"driver":"acp","command":["x"],"enabled":true,"id":"a"}"#,
                ErrorCode::InvalidEnvelope,
                "assistant.id",
            ),
            (
                r#""assistant":{"driver":"acp","command":["x"]}"#,
                ErrorCode::InvalidEnvelope,
                "assistant.enabled",
            ),
            (
                r#""assistant":{"driver":"acp","command":"x","enabled":true}"#,
                ErrorCode::InvalidEnvelope,
                "assistant.command",
            ),
            (
                r#""assistant":[1]"#,
                ErrorCode::InvalidEnvelope,
                "assistant",
            ),
        ] {
            let e = draft(&format!("{{{ag},{b}}}")).unwrap_err();
            assert_eq!((e.code, e.field.as_deref()), (c, Some(f)), "{b}");
        }
        assert_eq!(code("nope").0, ErrorCode::InvalidEnvelope);
    }
}
