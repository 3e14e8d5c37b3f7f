//! The native IPC face: CCCC daemon IPC v1 over a Unix socket and, when asked, TCP.
//! Thin: parse a line, call the engine through the ledger, shape the result as CCCC does.

mod args;
mod conn;
mod ops_chat;
mod ops_group;
mod ops_ledger;
mod stream;

use convene_core::{CoreError, ErrorCode, Event};
use serde_json::{json, Value};

use crate::Daemon;
use args::Args;
pub use conn::{serve_conn, MAX_IN_FLIGHT};

/// Bytes of events one answer carries at most (`inbox_peek`/`inbox_read`, `message_history`,
/// `ledger_tail`, `ledger_search`, `ledger_window`): the `cccc-sdk` refuses an answer line over
/// 4,000,000 bytes, so a bigger page ends early and says so (`has_more`); the caller pages on.
pub const ANSWER_BYTES: usize = 3_000_000;

/// Blob bytes one `blob_get` answer carries at most: 3,600,000 once in base64, under the SDK's
/// line limit and above the largest blob a default request can `blob_put` (about 2.6 MB), so
/// every blob put over this face still comes back whole in one answer.
pub const BLOB_CHUNK_BYTES: usize = 2_700_000;

/// How many of the leading items (sized by `sizes`) fit in [`ANSWER_BYTES`]; at least one when
/// there is one, so a page always makes progress.
fn fitting(sizes: impl Iterator<Item = usize>) -> usize {
    let mut total = 0;
    let mut n = 0;
    for s in sizes {
        total += s;
        if n > 0 && total > ANSWER_BYTES {
            break;
        }
        n += 1;
    }
    n
}

/// Every op this face serves (advertised in `ping.capabilities`).
pub const OPS: &[&str] = &[
    "ping",
    "version",
    "shutdown",
    "groups",
    "group_create",
    "group_show",
    "group_update",
    "group_delete",
    "group_settings_update",
    "group_start",
    "group_stop",
    "group_set_state",
    "attach",
    "group_detach_scope",
    "actor_add",
    "actor_update",
    "actor_remove",
    "actor_list",
    "send",
    "reply",
    "reply_request_cancel",
    "message_deliver",
    "inbox_peek",
    "inbox_read",
    "message_history",
    "system_notify",
    "send_cross_group",
    "source_resolve",
    "reaction",
    "append_event",
    "blob_put",
    "blob_get",
    "ledger_tail",
    "ledger_search",
    "ledger_window",
    "ledger_statuses",
    "ledger_import",
    "events_stream",
    "runtime_attach",
    "tool_gate",
];

/// Who is on the other end of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// Local socket or loopback: `by` is a trusted hint (documented in docs/SECURITY.md).
    Local,
    /// A remote TCP peer: every request must carry the daemon's API key.
    Remote,
}

pub(crate) fn ev_value(e: &Event) -> Value {
    serde_json::to_value(e).unwrap_or(Value::Null)
}

pub(crate) fn raw_value(json: &str) -> Value {
    serde_json::from_str(json).unwrap_or(Value::Null)
}

pub(crate) fn error_line(e: &CoreError) -> Vec<u8> {
    convene_ipc::err_line(e.code.as_str(), &e.message, e.details.clone())
}

/// Runs one non-streaming op (`send`/`reply` go through `conn.rs` to be pipelined).
async fn dispatch(d: &Daemon, op: &str, a: Args) -> Result<Value, CoreError> {
    match op {
        "ping" => Ok(ops_group::ping(d)),
        "version" => Ok(ops_group::version()),
        "shutdown" => {
            d.request_shutdown();
            Ok(json!({"shutting_down": true}))
        }
        "groups" => Ok(ops_group::groups(d)),
        "group_create" => ops_group::group_create(d, &a).await,
        "group_show" => ops_group::group_show(d, &a),
        "group_update" => ops_group::group_update(d, &a).await,
        "group_delete" => ops_group::group_delete(d, &a).await,
        "group_settings_update" => ops_group::group_settings_update(d, &a).await,
        "group_start" => ops_group::group_set_state(d, &a, Some("active")).await,
        "group_stop" => ops_group::group_set_state(d, &a, Some("stopped")).await,
        "group_set_state" => ops_group::group_set_state(d, &a, None).await,
        "attach" => ops_group::attach(d, &a).await,
        "group_detach_scope" => ops_group::detach_scope(d, &a).await,
        "actor_add" => ops_group::actor_add(d, &a).await,
        "actor_update" => ops_group::actor_update(d, &a).await,
        "actor_remove" => ops_group::actor_remove(d, &a).await,
        "actor_list" => ops_group::actor_list(d, &a),
        "reply_request_cancel" => ops_chat::cancel(d, &a).await,
        "message_deliver" => ops_chat::deliver(d, &a).await,
        "inbox_peek" => ops_chat::inbox_peek(d, &a),
        "inbox_read" => ops_chat::inbox_read(d, &a).await,
        "message_history" => ops_chat::history(d, &a),
        "system_notify" => ops_chat::notify(d, &a).await,
        "send_cross_group" => ops_chat::cross_group(d, &a).await,
        "source_resolve" => ops_chat::source_of(d, &a),
        "reaction" => ops_chat::reaction(d, &a).await,
        "append_event" => ops_chat::append(d, &a).await,
        "blob_put" => ops_chat::blob_put(d, &a),
        "blob_get" => ops_chat::blob_get(d, &a),
        "ledger_tail" => ops_ledger::tail(d, &a),
        "ledger_search" => ops_ledger::search(d, &a),
        "ledger_window" => ops_ledger::window(d, &a),
        "ledger_statuses" => ops_ledger::statuses(d, &a),
        "tool_gate" => ops_chat::tool_gate(d, &a).await,
        "ledger_import" => {
            let gid = a.req("group_id")?;
            let events = a.obj_list("events")?;
            let n = events.len();
            let given: std::collections::HashSet<String> = events
                .iter()
                .filter_map(|e| e.get("id").and_then(Value::as_str).map(str::to_string))
                .collect();
            let c = d.import(gid.clone(), events).await?;
            // The import's own last events: in-flight claims it settled to ambiguous.
            let settled = c
                .events
                .iter()
                .rev()
                .take_while(|(e, _)| {
                    e.kind == convene_core::event::kinds::RUNTIME_DELIVERY
                        && e.data_str("reason") == Some(convene_core::engine::IMPORT_SETTLED)
                        && !given.contains(&e.id)
                })
                .count();
            let imported = c.events.len() - settled;
            Ok(json!({
                "group_id": gid, "received": n, "imported": imported,
                "skipped": n.saturating_sub(imported), "settled": settled,
            }))
        }
        _ => Err(
            CoreError::new(ErrorCode::UnknownOp, format!("unknown operation: {op}")).with("op", op),
        ),
    }
}
