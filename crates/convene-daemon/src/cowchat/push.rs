//! Pushes for one joined room, derived from the ledger in its order: `message_received`,
//! `mention`, `thinking`, `decision_made`, `agent_joined`, `agent_left`, and the
//! coordination events of `coord` (`vote_created`, `vote_result`, `election_started`,
//! `leader_elected`, `leader_cleared`, `task_assigned`, `task_updated`; never ballots).
//!
//! Cursor-based exactly like `events_stream`: read `seq > cursor` from the hub's memory
//! buffer, or from the store when the buffer no longer reaches back, then wait for the
//! head to move. So a push task never skips or repeats an event, and a slow reader only
//! lags (the outbox is bounded; see `conn.rs`). The cursor is shared with the connection so
//! a reconnect within the window resumes from it.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use convene_core::event::kinds;
use convene_cowchat::frame::push_json_str;
use tokio::task::JoinHandle;

use super::conn::Outbox;
use super::messages::Stored;
use super::{Face, THINKING_KIND};
use crate::hub::FeedEvent;

/// Events read per page while catching up.
const PAGE: usize = 1000;
/// Pushes gathered into one outbox line before it is queued.
const BATCH_BYTES: usize = 64 * 1024;
/// Events without a frame for this agent after which its replay point is moved anyway.
const ACK_EVERY: u64 = 256;

/// Starts the push task of `room_id` for agent `me`, after `cursor`.
pub(super) fn spawn(
    face: Arc<Face>,
    out: Arc<Outbox>,
    room_id: String,
    me: String,
    cursor: Arc<AtomicU64>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        if let Err(e) = run(&face, &out, &room_id, &me, &cursor).await {
            tracing::debug!(room = %room_id, error = %e, "cowchat push ended");
        }
    })
}

/// The push frames (type, payload JSON) of a membership event: the agent's own join and
/// leave are not pushed back to it.
fn pushes_of(e: &Stored<'_>, me: &str) -> Vec<(&'static str, Vec<u8>)> {
    let mut v = Vec::new();
    match e.kind.as_ref() {
        kinds::ACTOR_ADD | kinds::ACTOR_REMOVE => {
            let Some((aid, name)) = e.actor() else {
                return v;
            };
            if aid == me {
                return v;
            }
            let mut p = Vec::with_capacity(128);
            p.extend_from_slice(b"{\"room_id\":");
            push_json_str(&mut p, e.room());
            if e.kind == kinds::ACTOR_ADD {
                p.extend_from_slice(b",\"agent\":{\"agent_id\":");
                push_json_str(&mut p, aid);
                p.extend_from_slice(b",\"name\":");
                push_json_str(&mut p, name);
                p.extend_from_slice(b"},\"seq\":");
                p.extend_from_slice(e.seq.to_string().as_bytes());
                p.push(b'}');
                v.push(("agent_joined", p));
            } else {
                p.extend_from_slice(b",\"agent_id\":");
                push_json_str(&mut p, aid);
                p.extend_from_slice(b",\"seq\":");
                p.extend_from_slice(e.seq.to_string().as_bytes());
                p.push(b'}');
                v.push(("agent_left", p));
            }
        }
        _ => {}
    }
    v
}

/// A committed message or thinking pulse as this face shows it, rendered once per event and
/// kept in the event's memo: every receiver's push and every history read share it.
pub(super) struct Rendered {
    /// The sender (its own messages are not pushed back to it).
    pub by: String,
    /// The push type: `message_received`, `thinking` or `decision_made`.
    pub ftype: &'static str,
    /// Mentioned agent ids (each gets a `mention` push too).
    pub mentions: Vec<String>,
    /// The wire Message object.
    pub message: Vec<u8>,
    /// The push payload where it is not the bare message (`decision_made`).
    pub decision: Option<Vec<u8>>,
}

impl Rendered {
    fn of(json: &str) -> Option<Self> {
        let e = Stored::parse(json)?;
        if !e.is_message() {
            return None; // Mail: private, never shown here.
        }
        let mut message = Vec::with_capacity(json.len());
        e.write_message(&mut message);
        let ftype = if e.is_thinking() {
            "thinking"
        } else if e.is_decision() {
            "decision_made"
        } else {
            "message_received"
        };
        Some(Self {
            by: e.by.to_string(),
            ftype,
            mentions: e.mentions().map(str::to_string).collect(),
            message,
            decision: (ftype == "decision_made").then(|| decision_payload(&e)),
        })
    }
}

/// For a message-kind event, its rendering (`Some(None)` for one members may not read);
/// `None` for every other kind.
pub(super) fn message_memo(fe: &FeedEvent) -> Option<Option<&Rendered>> {
    if fe.kind != kinds::CHAT_MESSAGE && fe.kind != THINKING_KIND {
        return None;
    }
    let memo = fe
        .memo
        .get_or_init(|| Box::new(Rendered::of(&fe.json)))
        .downcast_ref::<Option<Rendered>>()?;
    Some(memo.as_ref())
}

/// The push frames of a rendered message for agent `me` (none for its own).
fn message_pushes<'a>(m: &'a Rendered, room: &str, me: &str) -> Vec<(&'static str, Cow<'a, [u8]>)> {
    let mut v = Vec::new();
    if m.by == me {
        return v;
    }
    if m.mentions.iter().any(|x| x == me) {
        let mut p = Vec::with_capacity(m.message.len() + 48);
        p.extend_from_slice(b"{\"room_id\":");
        push_json_str(&mut p, room);
        p.extend_from_slice(b",\"message\":");
        p.extend_from_slice(&m.message);
        p.push(b'}');
        v.push(("mention", Cow::Owned(p)));
    }
    let payload = m.decision.as_deref().unwrap_or(&m.message);
    v.push((m.ftype, Cow::Borrowed(payload)));
    v
}

/// `decision_made`: the message plus the spec's `leader_id` / `leader_name`.
fn decision_payload(e: &Stored<'_>) -> Vec<u8> {
    let mut m = e.message_value();
    m["leader_id"] = m["agent_id"].clone();
    m["leader_name"] = m["agent_name"].clone();
    serde_json::to_vec(&m).unwrap_or_default()
}

/// True when `fe` is the agent's own membership event of `kind` (join or leave).
fn own_membership(fe: &FeedEvent, kind: &str, me: &str) -> bool {
    fe.kind == kind && Stored::parse(&fe.json).is_some_and(|e| e.actor().map(|a| a.0) == Some(me))
}

async fn run(
    face: &Face,
    out: &Outbox,
    gid: &str,
    me: &str,
    cursor: &Arc<AtomicU64>,
) -> Result<(), String> {
    let hub = face.d.ledger.hub();
    let mut at = cursor.load(Ordering::Relaxed);
    let feed = hub.feed(gid, at);
    let mut head_rx = feed.subscribe();
    // The agent left the room (through another of its connections, or this one before it
    // asked to leave): push nothing until its own join comes by again.
    let mut away = false;
    loop {
        loop {
            let page = face
                .d
                .ledger
                .page_after(&feed, gid, at, PAGE)
                .await
                .map_err(|e| e.to_string())?;
            if page.is_empty() {
                break;
            }
            // The page's frames go out in lines of up to BATCH_BYTES: one queue slot, one
            // writer wake-up and one write for many pushes; a line counts as delivered (its
            // replay point moves) once written.
            let mut lines = Vec::new();
            for fe in page {
                at = fe.seq;
                if away {
                    away = !own_membership(&fe, kinds::ACTOR_ADD, me);
                    continue;
                }
                if let Some(m) = message_memo(&fe) {
                    for (t, p) in m.map(|m| message_pushes(m, gid, me)).unwrap_or_default() {
                        out.append_push(&mut lines, t, &p);
                    }
                } else {
                    let Some(e) = Stored::parse(&fe.json) else {
                        continue;
                    };
                    // The agent left (maybe through another of its connections): a non-member
                    // never sees the room's later messages, until the agent joins again
                    // (from any of its connections), when pushes resume after that join.
                    if e.kind == kinds::ACTOR_REMOVE && e.actor().map(|a| a.0) == Some(me) {
                        away = true;
                        continue;
                    }
                    for (t, p) in pushes_of(&e, me) {
                        out.append_push(&mut lines, t, &p);
                    }
                    if e.kind.starts_with("x.cowchat.") && !e.is_thinking() {
                        if let Some((t, p)) = super::coord::push_of(&fe.json, me) {
                            out.append_push(&mut lines, t, &p);
                        }
                    }
                }
                if lines.len() >= BATCH_BYTES
                    && !out
                        .push_line(std::mem::take(&mut lines), Some((cursor.clone(), at)))
                        .await
                {
                    return Ok(());
                }
            }
            if !lines.is_empty() {
                if !out.push_line(lines, Some((cursor.clone(), at))).await {
                    return Ok(());
                }
                continue;
            }
            // A page with nothing for this agent (its own messages) moves the replay point only
            // now and then: a lagging cursor is safe (a replay re-reads and filters), and an
            // ack per commit would wake the writer for nothing on every send.
            if cursor.load(Ordering::Relaxed) + ACK_EVERY <= at
                && !out.ack(cursor.clone(), at).await
            {
                return Ok(());
            }
        }
        if head_rx.changed().await.is_err() {
            return Ok(()); // group deleted
        }
    }
}
