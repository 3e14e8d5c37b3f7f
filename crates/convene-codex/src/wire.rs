//! Codex's JSON-RPC dialect (no `"jsonrpc"` member; one is accepted and ignored on input) and
//! the few app-server v2 shapes this crate reads and writes; framing and parsing live in
//! `convene-agentio`.
//!
//! Notifications are read leniently: unknown ones are kept as `Other`.

use std::path::Path;

use convene_agentio::jsonrpc::Dialect;
use serde_json::{json, Value};

use crate::{CodexError, TurnEnd, Update};

/// Codex's JSON-RPC: no `"jsonrpc"` member.
pub const RPC: Dialect = Dialect {
    jsonrpc_member: false,
    peer: "app-server",
};

/// `initialize` params: who we are; no experimental API, no notification opt-outs.
pub fn initialize_params() -> Value {
    json!({
        "clientInfo": {
            "name": "convene",
            "title": "Convene",
            "version": env!("CARGO_PKG_VERSION")
        }
    })
}

/// The policy every thread runs under (GroupX v0.1 is unrestricted and never asks a human).
fn policy() -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    m.insert("approvalPolicy".into(), json!("never"));
    m.insert("sandbox".into(), json!("danger-full-access"));
    m
}

/// `thread/start` params.
pub fn thread_start_params(cwd: &Path) -> Value {
    let mut m = policy();
    m.insert("cwd".into(), json!(cwd.to_string_lossy()));
    Value::Object(m)
}

/// `thread/resume` params: the same policy, so a resumed thread never asks either, and
/// `excludeTurns` (the stored history is not needed, and could be a very long line).
pub fn thread_resume_params(thread_id: &str) -> Value {
    let mut m = policy();
    m.insert("threadId".into(), json!(thread_id));
    m.insert("excludeTurns".into(), json!(true));
    Value::Object(m)
}

/// `turn/start` params: one text input.
pub fn turn_start_params(thread_id: &str, text: &str) -> Value {
    json!({"threadId": thread_id, "input": [{"type": "text", "text": text}]})
}

fn non_empty_str<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// `thread.id` of a `thread/start` (or `thread/resume`) result.
pub fn thread_id_of(result: &Value, method: &str) -> Result<String, CodexError> {
    non_empty_str(result, "/thread/id")
        .map(str::to_string)
        .ok_or_else(|| CodexError::Protocol(format!("{method} result without thread.id")))
}

/// `turn.id` of a `turn/start` result.
pub fn turn_id_of(result: &Value) -> Result<String, CodexError> {
    non_empty_str(result, "/turn/id")
        .map(str::to_string)
        .ok_or_else(|| CodexError::Protocol("turn/start result without turn.id".into()))
}

/// The thread a notification or request is about: `threadId` (v2) or `conversationId`
/// (legacy approval requests).
pub fn thread_id(params: &Value) -> Option<&str> {
    params
        .get("threadId")
        .or_else(|| params.get("conversationId"))
        .and_then(Value::as_str)
}

/// The turn a notification or request is about: `turnId`, or `turn.id` for `turn/*`.
pub fn turn_id(params: &Value) -> Option<&str> {
    params
        .get("turnId")
        .or_else(|| params.pointer("/turn/id"))
        .and_then(Value::as_str)
}

/// What one notification of a turn means to the client.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// A plain update for the consumer.
    Update(Update),
    /// `item/agentMessage/delta`.
    MessageDelta { item_id: String, delta: String },
    /// `item/completed` of an `agentMessage` (its full text).
    MessageDone { item_id: String, text: String },
    /// `error` (may precede a failed `turn/completed`; `will_retry` while codex reconnects).
    Error { message: String, will_retry: bool },
    /// `turn/completed`.
    TurnCompleted {
        status: Option<String>,
        error: Option<String>,
    },
}

/// Item types reported as tool calls.
const TOOL_ITEMS: [&str; 6] = [
    "commandExecution",
    "fileChange",
    "mcpToolCall",
    "dynamicToolCall",
    "collabAgentToolCall",
    "webSearch",
];

/// A short human-readable title for a tool-like item.
fn tool_title(kind: &str, item: &Value) -> String {
    let s = |key: &str| item.get(key).and_then(Value::as_str).unwrap_or_default();
    match kind {
        "commandExecution" => s("command").to_string(),
        "fileChange" => {
            let paths: Vec<&str> = item
                .get("changes")
                .and_then(Value::as_array)
                .map(|c| {
                    c.iter()
                        .filter_map(|c| c.get("path").and_then(Value::as_str))
                        .collect()
                })
                .unwrap_or_default();
            paths.join(", ")
        }
        "mcpToolCall" => format!("{}/{}", s("server"), s("tool")),
        "dynamicToolCall" | "collabAgentToolCall" => s("tool").to_string(),
        "webSearch" => s("query").to_string(),
        _ => kind.to_string(),
    }
}

/// Reduces one notification (already routed to a running turn).
pub fn event(method: &str, params: &Value) -> Event {
    let other = |kind: String| Event::Update(Update::Other { kind });
    let delta = || {
        params
            .get("delta")
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    match method {
        "item/agentMessage/delta" => {
            match (params.get("itemId").and_then(Value::as_str), delta()) {
                (Some(item_id), Some(delta)) => Event::MessageDelta {
                    item_id: item_id.to_string(),
                    delta,
                },
                _ => other(method.to_string()),
            }
        }
        "item/reasoning/summaryTextDelta" | "item/reasoning/textDelta" => match delta() {
            Some(d) => Event::Update(Update::ThoughtChunk(d)),
            None => other(method.to_string()),
        },
        "item/started" | "item/completed" => {
            let item = params.get("item").unwrap_or(&Value::Null);
            let kind = item
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("unknown");
            let id = item.get("id").and_then(Value::as_str).map(str::to_string);
            let status = item
                .get("status")
                .and_then(Value::as_str)
                .map(str::to_string);
            let started = method == "item/started";
            match id {
                Some(id) if TOOL_ITEMS.contains(&kind) => Event::Update(if started {
                    Update::ToolCall {
                        title: tool_title(kind, item),
                        id,
                        kind: Some(kind.to_string()),
                        status: status.or_else(|| Some("inProgress".into())),
                    }
                } else {
                    Update::ToolCallUpdate {
                        id,
                        title: None,
                        status: status.or_else(|| Some("completed".into())),
                    }
                }),
                Some(item_id) if kind == "agentMessage" && !started => Event::MessageDone {
                    item_id,
                    text: item
                        .get("text")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                },
                _ => other(format!("{method}:{kind}")),
            }
        }
        "error" => Event::Error {
            message: params
                .pointer("/error/message")
                .and_then(Value::as_str)
                .unwrap_or("unknown error")
                .to_string(),
            will_retry: params.get("willRetry").and_then(Value::as_bool) == Some(true),
        },
        "turn/completed" => Event::TurnCompleted {
            status: params
                .pointer("/turn/status")
                .and_then(Value::as_str)
                .map(str::to_string),
            error: params
                .pointer("/turn/error/message")
                .and_then(Value::as_str)
                .map(str::to_string),
        },
        _ => other(method.to_string()),
    }
}

/// The outcome of a `turn/completed`; `last_error` is the turn's last `error` notification.
pub fn turn_end(
    status: Option<&str>,
    error: Option<String>,
    last_error: Option<String>,
) -> Result<TurnEnd, CodexError> {
    match status {
        Some("completed") => Ok(TurnEnd::Completed),
        Some("interrupted") => Ok(TurnEnd::Interrupted),
        Some("failed") => {
            Ok(TurnEnd::Failed(error.or(last_error).unwrap_or_else(|| {
                "turn failed without an error message".into()
            })))
        }
        Some(other) => Err(CodexError::Protocol(format!(
            "turn/completed with status {other:?}"
        ))),
        None => Err(CodexError::Protocol(
            "turn/completed without turn.status".into(),
        )),
    }
}

/// Server→client requests that ask a human for something (GroupX §9: never answered yes).
pub fn is_interaction(method: &str) -> bool {
    let m = method.to_ascii_lowercase();
    [
        "approval",
        "permission",
        "userinput",
        "user_input",
        "elicitation",
        "question",
    ]
    .iter()
    .any(|k| m.contains(k))
}

/// The refusal for an interaction request; `None` means answer with a JSON-RPC error.
///
/// Approvals get `cancel` (v2: "denied, and the turn is interrupted") or `abort` (legacy
/// `ReviewDecision`), permission requests an empty grant, elicitations `cancel`.
pub fn interaction_refusal(method: &str) -> Option<Value> {
    match method {
        "item/commandExecution/requestApproval" | "item/fileChange/requestApproval" => {
            Some(json!({"decision": "cancel"}))
        }
        "execCommandApproval" | "applyPatchApproval" => Some(json!({"decision": "abort"})),
        "item/permissions/requestApproval" => Some(json!({"permissions": {}, "scope": "turn"})),
        "mcpServer/elicitation/request" => Some(json!({"action": "cancel", "content": null})),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_codex_dialect() {
        let l = RPC.request_line(7, "thread/start", &thread_start_params(Path::new("/w")));
        let v: Value = serde_json::from_slice(&l).expect("json");
        assert_eq!(
            v,
            json!({"id": 7, "method": "thread/start", "params": {
                "approvalPolicy": "never", "sandbox": "danger-full-access", "cwd": "/w"}})
        );
        assert_eq!(
            RPC.notification_line("initialized", None),
            b"{\"method\":\"initialized\"}\n"
        );
    }

    #[test]
    fn maps_items_and_tolerates_unknown_ones() {
        let cmd = json!({"threadId": "t", "turnId": "u", "item": {
            "type": "commandExecution", "id": "c1", "command": "ls", "status": "inProgress"}});
        assert_eq!(
            event("item/started", &cmd),
            Event::Update(Update::ToolCall {
                id: "c1".into(),
                title: "ls".into(),
                kind: Some("commandExecution".into()),
                status: Some("inProgress".into())
            })
        );
        let done = json!({"item": {"type": "fileChange", "id": "f1", "changes": [], "status": "declined"}});
        assert_eq!(
            event("item/completed", &done),
            Event::Update(Update::ToolCallUpdate {
                id: "f1".into(),
                title: None,
                status: Some("declined".into())
            })
        );
        let mcp =
            json!({"item": {"type": "mcpToolCall", "id": "m", "server": "gh", "tool": "search"}});
        assert!(matches!(
            event("item/started", &mcp),
            Event::Update(Update::ToolCall { title, status: Some(s), .. }) if title == "gh/search" && s == "inProgress"
        ));
        assert_eq!(
            event(
                "item/started",
                &json!({"item": {"type": "reasoning", "id": "r"}})
            ),
            Event::Update(Update::Other {
                kind: "item/started:reasoning".into()
            })
        );
        assert_eq!(
            event(
                "item/completed",
                &json!({"item": {"type": "agentMessage", "id": "a", "text": "hi"}})
            ),
            Event::MessageDone {
                item_id: "a".into(),
                text: "hi".into()
            }
        );
        assert_eq!(
            event("item/reasoning/summaryTextDelta", &json!({"delta": "hm"})),
            Event::Update(Update::ThoughtChunk("hm".into()))
        );
        assert_eq!(
            event("thread/tokenUsage/updated", &json!({})),
            Event::Update(Update::Other {
                kind: "thread/tokenUsage/updated".into()
            })
        );
        assert_eq!(
            event("item/agentMessage/delta", &json!({"delta": "no item id"})),
            Event::Update(Update::Other {
                kind: "item/agentMessage/delta".into()
            })
        );
    }

    #[test]
    fn turn_outcomes() {
        assert_eq!(
            turn_end(Some("completed"), None, None),
            Ok(TurnEnd::Completed)
        );
        assert_eq!(
            turn_end(Some("failed"), None, Some("quota".into())),
            Ok(TurnEnd::Failed("quota".into()))
        );
        assert_eq!(
            turn_end(Some("failed"), Some("boom".into()), Some("quota".into())),
            Ok(TurnEnd::Failed("boom".into()))
        );
        assert!(matches!(
            turn_end(Some("inProgress"), None, None),
            Err(CodexError::Protocol(_))
        ));
    }

    #[test]
    fn recognises_interaction_requests() {
        for m in [
            "item/commandExecution/requestApproval",
            "item/fileChange/requestApproval",
            "item/permissions/requestApproval",
            "item/tool/requestUserInput",
            "mcpServer/elicitation/request",
            "execCommandApproval",
            "applyPatchApproval",
        ] {
            assert!(is_interaction(m), "{m}");
        }
        assert!(!is_interaction("item/tool/call"));
        assert!(!is_interaction("account/chatgptAuthTokens/refresh"));
        assert_eq!(interaction_refusal("item/tool/requestUserInput"), None);
    }
}
