//! Pushes for one joined room: `message_received`, `agent_joined`, `agent_left`.
//!
//! Cursor-based exactly like `events_stream`: read `seq > cursor` from the hub's memory
//! buffer, or from the store when the buffer no longer reaches back, then wait for the
//! head to move. So a push task never skips or repeats an event, and a slow reader only
//! lags (the outbox is bounded; see `conn.rs`).

use std::sync::Arc;

use convene_core::{event::kinds, Event};
use serde_json::json;
use tokio::task::JoinHandle;

use super::conn::Outbox;
use super::{messages, Face};

/// Events read per page while catching up.
const PAGE: usize = 1000;

/// Starts the push task of `room_id` for agent `me`, after `cursor`.
pub(super) fn spawn(
    face: Arc<Face>,
    out: Arc<Outbox>,
    room_id: String,
    me: String,
    cursor: u64,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        if let Err(e) = run(&face, &out, &room_id, &me, cursor).await {
            tracing::debug!(room = %room_id, error = %e, "cowchat push ended");
        }
    })
}

/// The Cowchat push frame for a committed event, if any. The agent's own messages and its
/// own join/leave are not pushed back to it: it already has the reply.
fn push_of(e: &Event, me: &str) -> Option<(&'static str, serde_json::Value)> {
    match e.kind.as_str() {
        kinds::CHAT_MESSAGE if e.by != me => {
            messages::message_payload(e).map(|p| ("message_received", p))
        }
        kinds::ACTOR_ADD | kinds::ACTOR_REMOVE => {
            let aid = e.data_str("actor_id")?;
            if aid == me {
                return None;
            }
            let t = if e.kind == kinds::ACTOR_ADD {
                "agent_joined"
            } else {
                "agent_left"
            };
            Some((
                t,
                json!({"room_id": e.group_id, "agent_id": aid, "name": e.data_str("title"), "seq": e.seq, "timestamp": e.ts}),
            ))
        }
        _ => None,
    }
}

async fn run(
    face: &Face,
    out: &Outbox,
    gid: &str,
    me: &str,
    mut cursor: u64,
) -> Result<(), String> {
    let hub = face.d.ledger.hub();
    let feed = hub.feed(gid, cursor);
    let mut head_rx = feed.subscribe();
    loop {
        loop {
            let page = face
                .d
                .ledger
                .page_after(&feed, gid, cursor, PAGE)
                .await
                .map_err(|e| e.to_string())?;
            if page.is_empty() {
                break;
            }
            for fe in page {
                cursor = fe.seq;
                let Ok(e) = serde_json::from_str::<Event>(&fe.json) else {
                    continue;
                };
                // The agent left (maybe through another of its connections): stop here, so a
                // non-member never sees the room's later messages.
                if e.kind == kinds::ACTOR_REMOVE && e.data_str("actor_id") == Some(me) {
                    return Ok(());
                }
                if let Some((t, p)) = push_of(&e, me) {
                    if !out.frame(t, None, p).await {
                        return Ok(());
                    }
                }
            }
        }
        if head_rx.changed().await.is_err() {
            return Ok(()); // group deleted
        }
    }
}
