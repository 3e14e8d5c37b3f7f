//! ACP's JSON-RPC dialect (`"jsonrpc": "2.0"` on every message) and the few ACP shapes this
//! crate reads and writes; framing and parsing live in `convene-agentio`.
//!
//! Updates are read leniently: unknown update kinds are kept as `Other`.

use convene_agentio::jsonrpc::Dialect;
use serde_json::{json, Map, Value};

use crate::{AcpError, AgentInfo, SessionInfo, StopReason, Update};

/// The protocol version this client speaks.
pub const PROTOCOL_VERSION: u64 = 1;

/// ACP's JSON-RPC: `"jsonrpc": "2.0"` on every message.
pub const RPC: Dialect = Dialect {
    jsonrpc_member: true,
    peer: "agent",
};

/// `initialize` params: no fs, no terminal, nothing the broker cannot honour.
pub fn initialize_params() -> Value {
    json!({
        "protocolVersion": PROTOCOL_VERSION,
        "clientCapabilities": {
            "fs": {"readTextFile": false, "writeTextFile": false},
            "terminal": false
        },
        "clientInfo": {"name": "convene", "version": env!("CARGO_PKG_VERSION")}
    })
}

/// Reads the `initialize` result.
pub fn agent_info(result: Value) -> Result<AgentInfo, AcpError> {
    let protocol_version = result
        .get("protocolVersion")
        .and_then(Value::as_u64)
        .ok_or_else(|| AcpError::Protocol("initialize result without protocolVersion".into()))?;
    // An agent that cannot speak our version answers with its own; we speak only this one.
    if protocol_version != PROTOCOL_VERSION {
        return Err(AcpError::Protocol(format!(
            "agent speaks ACP version {protocol_version}, this client only {PROTOCOL_VERSION}"
        )));
    }
    let load_session = result
        .pointer("/agentCapabilities/loadSession")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok(AgentInfo {
        protocol_version,
        load_session,
        raw: result,
    })
}

/// Reads the `session/new` result.
pub fn session_info(result: &Value) -> Result<SessionInfo, AcpError> {
    let session_id = result
        .get("sessionId")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| AcpError::Protocol("session/new result without sessionId".into()))?
        .to_string();
    let current_mode = result
        .pointer("/modes/currentModeId")
        .and_then(Value::as_str)
        .map(str::to_string);
    let available_modes = result
        .pointer("/modes/availableModes")
        .and_then(Value::as_array)
        .map(|modes| {
            modes
                .iter()
                .filter_map(|m| m.get("id").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    Ok(SessionInfo {
        session_id,
        current_mode,
        available_modes,
    })
}

/// Reads the `session/prompt` result.
pub fn stop_reason(result: &Value) -> Result<StopReason, AcpError> {
    result
        .get("stopReason")
        .and_then(Value::as_str)
        .map(StopReason::from_wire)
        .ok_or_else(|| AcpError::Protocol("session/prompt result without stopReason".into()))
}

/// The session a request or notification is about, if it names one.
pub fn session_id(params: &Value) -> Option<&str> {
    params.get("sessionId").and_then(Value::as_str)
}

/// Reduces a `session/update` `update` object. Unknown or malformed updates become `Other`.
pub fn update(update: &Value) -> Option<Update> {
    let obj = update.as_object()?;
    let kind = obj.get("sessionUpdate").and_then(Value::as_str)?;
    let other = || Update::Other {
        kind: kind.to_string(),
    };
    let text = |obj: &Map<String, Value>| -> Option<String> {
        let content = obj.get("content")?;
        if content.get("type").and_then(Value::as_str) != Some("text") {
            return None;
        }
        content
            .get("text")
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let s = |key: &str| obj.get(key).and_then(Value::as_str).map(str::to_string);
    Some(match kind {
        "agent_message_chunk" => text(obj).map(Update::MessageChunk).unwrap_or_else(other),
        "agent_thought_chunk" => text(obj).map(Update::ThoughtChunk).unwrap_or_else(other),
        "tool_call" => match s("toolCallId") {
            Some(id) => Update::ToolCall {
                id,
                title: s("title").unwrap_or_default(),
                kind: s("kind"),
                status: s("status"),
            },
            None => other(),
        },
        "tool_call_update" => match s("toolCallId") {
            Some(id) => Update::ToolCallUpdate {
                id,
                title: s("title"),
                status: s("status"),
            },
            None => other(),
        },
        _ => other(),
    })
}

/// Agent→client requests that ask a human for something (GroupX §9: never answered yes).
pub fn is_interaction(method: &str) -> bool {
    let m = method.to_ascii_lowercase();
    [
        "permission",
        "elicitation",
        "user_input",
        "userinput",
        "question",
        "approval",
    ]
    .iter()
    .any(|k| m.contains(k))
}

/// The refusal for an interaction request: ACP's `cancelled` outcome, or `cancel` for an
/// elicitation; `None` means answer with a JSON-RPC error instead.
pub fn interaction_refusal(method: &str) -> Option<Value> {
    match method {
        "session/request_permission" => Some(json!({"outcome": {"outcome": "cancelled"}})),
        "elicitation/create" | "session/elicitation" => Some(json!({"action": "cancel"})),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_updates_and_tolerates_unknown_ones() {
        let chunk =
            json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}});
        assert_eq!(update(&chunk), Some(Update::MessageChunk("hi".into())));
        let image =
            json!({"sessionUpdate":"agent_message_chunk","content":{"type":"image","data":""}});
        assert_eq!(
            update(&image),
            Some(Update::Other {
                kind: "agent_message_chunk".into()
            })
        );
        let tool = json!({"sessionUpdate":"tool_call","toolCallId":"c","title":"t","kind":"read","extra":1});
        assert_eq!(
            update(&tool),
            Some(Update::ToolCall {
                id: "c".into(),
                title: "t".into(),
                kind: Some("read".into()),
                status: None
            })
        );
        let future = json!({"sessionUpdate":"usage_update","used":3});
        assert_eq!(
            update(&future),
            Some(Update::Other {
                kind: "usage_update".into()
            })
        );
        assert_eq!(update(&json!({"nope": 1})), None);
    }

    #[test]
    fn recognises_interaction_requests() {
        assert!(is_interaction("session/request_permission"));
        assert!(is_interaction("elicitation/create"));
        assert!(!is_interaction("fs/read_text_file"));
        assert!(!is_interaction("terminal/create"));
    }
}
