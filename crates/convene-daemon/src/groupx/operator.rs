//! The local operator's MCP endpoint (`POST /mcp/operator`, §12): the room assistant — or any
//! local operator client — dispatches work without putting a chat bubble in the room. The
//! endpoint is the binding (`binding:operator`, author `user:assistant`): like every GroupX
//! binding it is a correlation handle on loopback, not a credential (§3.4).
//!
//! Tools: `worker_dispatch` (a durable `operator.dispatch` and one turn per target),
//! `worker_ask` (the same, then a bounded wait for the answers), `send` (a public message by
//! `user:assistant` that wakes nobody), `read` (a narrow projection: public semantic events,
//! text clipped, never reasoning or tool records) and `cancel_turn`. No watch/steer.

use std::sync::Arc;
use std::time::Duration;

use convene_groupx::envelope::{LEDGER_OPERATOR, USER_ASSISTANT};
use convene_groupx::tools::{self, Post};
use convene_groupx::{ErrorCode, GroupxError};
use serde_json::{json, Value};

use super::command::Origin;
use super::mcp::Answer;
use super::Face;

/// The operator's fixed binding.
pub const OPERATOR_BINDING: &str = "binding:operator";

/// Characters of an event's text the operator's read returns.
const READ_CLIP: usize = 2000;

/// Types the operator's read shows (§12: public semantic events).
const READ_TYPES: &[&str] = &[
    "message.created",
    "operator.dispatch",
    "turn.completed",
    "turn.failed",
    "turn.cancelled",
    "turn.interrupted",
    "supervision.paired",
    "supervision.steered",
    "context.reset",
    "routing.loop_stopped",
];

fn tool_list() -> Value {
    let m = tools::list();
    let get = |n: &str| {
        m["tools"]
            .as_array()
            .and_then(|a| a.iter().find(|t| t["name"] == n))
            .cloned()
            .unwrap_or(Value::Null)
    };
    let rename = |mut t: Value, name: &str, desc: &str| {
        t["name"] = name.into();
        t["description"] = desc.into();
        t
    };
    json!({"tools": [
        rename(get("groupx.send"), "worker_dispatch", "Give agents work: a durable operator.dispatch (no chat bubble) and one turn per target; returns at once. Optional supervision pairs observers with the workers."),
        rename(get("groupx.ask"), "worker_ask", "Like worker_dispatch, then wait (bounded, at most 60 s) for the workers' answers and return them (state=pending when they have not finished)."),
        rename(get("groupx.publish"), "send", "Say something to the room as user:assistant (a visible message that wakes nobody). Use only when the room should see it."),
        rename(get("groupx.read"), "read", "Read the room's public events (messages, dispatches, turn outcomes, supervision, resets), newest limit (default 20), text clipped."),
        {"name": "cancel_turn", "description": "Ask a turn to stop (a queued one is cancelled at once).",
         "inputSchema": {"type": "object", "properties": {"turnId": {"type": "string"}}, "required": ["turnId"], "additionalProperties": false}}
    ]})
}

/// Serves one JSON-RPC message of the operator endpoint.
pub(super) async fn handle(face: Arc<Face>, msg: Value) -> Answer {
    let Some(m) = msg.as_object() else {
        return Answer::Json(super::mcp::rpc_error(
            &Value::Null,
            -32600,
            "expected one JSON-RPC object",
        ));
    };
    let Some(id) = m.get("id").cloned() else {
        return Answer::Accepted;
    };
    let method = m.get("method").and_then(Value::as_str).unwrap_or("");
    let params = m.get("params").cloned().unwrap_or(json!({}));
    let result = match method {
        "initialize" => json!({"protocolVersion": super::mcp::protocol_for(&params),
            "capabilities": {"tools": {"listChanged": false}},
            "serverInfo": {"name": "convene-groupx-operator", "version": env!("CARGO_PKG_VERSION")},
            "instructions": "You operate a GroupX room for the user. worker_dispatch gives agents work without a chat bubble; worker_ask waits for their answers; send speaks to the room as user:assistant; read shows what happened."}),
        "ping" => json!({}),
        "tools/list" => tool_list(),
        "tools/call" => {
            let name = params["name"].as_str().unwrap_or("").to_string();
            let args = params.get("arguments").cloned().unwrap_or(json!({}));
            super::mcp::tool_result(call(&face, &name, &args).await)
        }
        _ => {
            return Answer::Json(super::mcp::rpc_error(
                &id,
                -32601,
                &format!("method {method} not found"),
            ))
        }
    };
    Answer::Json(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

async fn call(face: &Arc<Face>, name: &str, args: &Value) -> Result<Value, GroupxError> {
    let max = face.cfg.limits.message_bytes;
    match name {
        "worker_dispatch" => {
            let p = tools::parse_post(args, true, false, max)?;
            let c = dispatch(face, "operator.dispatch", &p).await?;
            let room = face.room.lock().await;
            let mut out = face.post_answer(&room, &c);
            out["dispatchEventId"] = c.message_event_id.clone().into();
            Ok(out)
        }
        "worker_ask" => {
            let p = tools::parse_post(args, true, true, max)?;
            let c = dispatch(face, "operator.dispatch", &p).await?;
            let ahead = c.turns.iter().any(|(_, _, pos)| *pos > 0);
            let wait = if ahead {
                Duration::ZERO
            } else {
                face.wait_bound(p.timeout_ms)
            };
            face.collect(
                &c.message_event_id,
                &c.correlation_id,
                wait,
                p.cancel_on_timeout,
            )
            .await
        }
        "send" => {
            let p = tools::parse_post(args, false, false, max)?;
            let c = dispatch(face, "operator.send", &p).await?;
            Ok(json!({"messageEventId": c.message_event_id, "correlationId": c.correlation_id}))
        }
        "read" => {
            let mut r = tools::parse_read(args)?;
            if args.get("limit").is_none_or(Value::is_null) {
                r.limit = 20;
            }
            read(face, r).await
        }
        "cancel_turn" => {
            let m = args.as_object().ok_or_else(|| {
                GroupxError::new(ErrorCode::InvalidEnvelope, "arguments must be an object")
            })?;
            if let Some(f) = convene_groupx::request::SENDER_FIELDS
                .iter()
                .find(|f| m.contains_key(**f))
            {
                return Err(GroupxError::new(
                    ErrorCode::SenderFieldForbidden,
                    format!("`{f}` may not be given"),
                )
                .field(f));
            }
            let id = m.get("turnId").and_then(Value::as_str).ok_or_else(|| {
                GroupxError::new(ErrorCode::InvalidEnvelope, "turnId is required").field("turnId")
            })?;
            face.cancel(id).await
        }
        _ => Err(
            GroupxError::new(ErrorCode::InvalidEnvelope, format!("no tool {name}")).field("name"),
        ),
    }
}

/// A dispatch (with turns) or a plain operator message (without).
async fn dispatch(
    face: &Arc<Face>,
    ty: &'static str,
    p: &Post,
) -> Result<super::room::CommandRec, GroupxError> {
    let targets = match &p.to {
        Some(to) => face.targets(to, None)?,
        None => Vec::new(),
    };
    if ty == "operator.dispatch" && targets.is_empty() {
        return Err(GroupxError::new(
            ErrorCode::UnknownTarget,
            "no enabled agent to give the work to",
        )
        .field("to"));
    }
    let observers = face.observers(p.supervision.as_ref())?;
    let origin = Origin {
        by: LEDGER_OPERATOR.to_string(),
        binding: OPERATOR_BINDING.to_string(),
        client_command_id: p.client_command_id.clone(),
        canonical: p.canonical(ty),
        command_type: ty,
        parent: None,
        observers,
        steer: None,
        forwarded: p.forwarded_event_id.clone(),
    };
    face.create(
        origin,
        targets,
        p.content.clone(),
        p.reply_to_event_id.clone(),
    )
    .await
}

/// The operator's narrow read (§12).
async fn read(face: &Arc<Face>, r: tools::Read) -> Result<Value, GroupxError> {
    let limit = r.limit;
    let mut all = face.read(tools::Read { limit: 10_000, ..r }).await?;
    let events: Vec<Value> = all["events"]
        .as_array_mut()
        .map(std::mem::take)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e["type"].as_str().is_some_and(|t| READ_TYPES.contains(&t)))
        .map(|mut e| {
            if let Some(c) = e["body"]["content"].as_str() {
                if c.chars().count() > READ_CLIP {
                    let clipped: String = c.chars().take(READ_CLIP).collect();
                    e["body"]["content"] = format!("{clipped}…").into();
                }
            }
            e
        })
        .collect();
    let skip = events.len().saturating_sub(limit);
    let events: Vec<Value> = events.into_iter().skip(skip).collect();
    Ok(json!({"events": events, "nextAfterSeq": all["nextAfterSeq"], "self": USER_ASSISTANT}))
}
