//! One lane per agent: its turns run one at a time in enqueue order (§8.3), on one
//! long-lived ACP session that is (re)started when needed.
//!
//! Per turn: `turn.dispatched` (prompt_invoked + unknown) is durable before the prompt is
//! written (§2.1); the first update of the agent makes it `turn.started` (delivered);
//! content and reasoning stream as transient deltas; at the end one commit holds the
//! reasoning record, the tool records, the response message and the terminal event, in
//! that order (§2.2).

use std::sync::Arc;
use std::time::Duration;

use convene_acp::{AcpError, StopReason, Update};

use super::driver::Native;
use convene_core::{Command, SendArgs};
use convene_groupx::envelope::{transient, ActorKind, ActorRef, Correlation};
use convene_groupx::{ids, ErrorCode, TurnStatus};
use serde_json::{json, Map};
use tokio::sync::Notify;

use super::config::AgentConfig;
use super::context::{self, Line};
use super::room::Turn;
use super::Face;

/// After a cancel, how long the agent has to settle before the turn is failed anyway.
pub(super) const CANCEL_GRACE: Duration = Duration::from_secs(10);
/// Largest response text kept in the room (the ledger's message limit is 256 KiB).
pub(super) const MAX_RESPONSE: usize = 200 * 1024;
/// Largest reasoning record.
const MAX_REASONING: usize = 64 * 1024;
/// Most tool records one turn keeps.
const MAX_TOOLS: usize = 256;

/// Appends while `buf` is under `cap` bytes (never splitting a character).
pub(super) fn push_bounded(buf: &mut String, t: &str, cap: usize) {
    let room = cap.saturating_sub(buf.len());
    if room >= t.len() {
        buf.push_str(t);
        return;
    }
    let mut i = room;
    while i > 0 && !t.is_char_boundary(i) {
        i -= 1;
    }
    buf.push_str(&t[..i]);
}

/// A live agent session.
struct Session {
    native: Native,
    /// Its MCP binding (registered with the face while the session lives).
    binding: String,
    /// Whether it is the agent's earlier session, loaded again.
    resumed: bool,
}

/// Starts the lane worker of `agent`.
pub(super) fn spawn(face: Arc<Face>, agent: AgentConfig) {
    tokio::spawn(async move {
        let id = agent.id.clone();
        run(face, agent).await;
        tracing::debug!(agent = %id, "groupx lane stopped");
    });
}

async fn run(face: Arc<Face>, cfg: AgentConfig) {
    let (Some(wake), Some(cancel)) = (
        face.wake.get(&cfg.id).cloned(),
        face.cancel.get(&cfg.id).cloned(),
    ) else {
        return;
    };
    let mut session: Option<Session> = None;
    let mut shutdown = face.d.shutdown_rx();
    loop {
        if *shutdown.borrow() {
            break;
        }
        let next = {
            let room = face.room.lock().await;
            // A command for this agent that is committing may hold an earlier turn: wait
            // for its fold, then take the first in seq order.
            match room.active(&cfg.id) {
                Some(_) => None,
                None if room.pending_for(&cfg.id) => None,
                None => room.next_queued(&cfg.id).cloned(),
            }
        };
        let Some(turn) = next else {
            tokio::select! {
                _ = wake.notified() => continue,
                _ = shutdown.changed() => break,
            }
        };
        if !run_turn(&face, &cfg, &mut session, &turn, &cancel).await {
            break;
        }
    }
    if let Some(s) = session.take() {
        face.bindings.lock().remove(&s.binding);
        s.native.shutdown(Duration::from_secs(2)).await;
    }
}

fn corr_of(t: &Turn) -> Correlation {
    Correlation {
        to: Vec::new(),
        ..t.corr.clone()
    }
}

fn agent_ref(cfg: &AgentConfig) -> ActorRef {
    ActorRef {
        actor_id: format!("agent:{}", cfg.id),
        kind: ActorKind::Agent,
        display_name: if cfg.name.is_empty() {
            cfg.id.clone()
        } else {
            cfg.name.clone()
        },
    }
}

fn now() -> String {
    convene_core::event::format_ts(time::OffsetDateTime::now_utc())
}

/// Appends broker events for this lane, retrying a failing ledger until shutdown. `check`
/// re-validates under the room lock; `false` skips the write. Returns false at shutdown.
async fn commit(
    face: &Face,
    agent: &str,
    check: impl Fn(&super::room::Room) -> bool,
    cmds: impl Fn(bool) -> Vec<Command>,
) -> bool {
    let mut shutdown = face.d.shutdown_rx();
    // After the engine refuses the commands (not a storage failure), `cmds(true)` is tried:
    // the terminal commit then leaves out what was refused, so a lane never spins forever
    // on a write that can never succeed (e.g. the agent's actor was removed elsewhere).
    let mut refused = false;
    loop {
        let room = face.room.lock().await;
        if !check(&room) {
            return true;
        }
        // The lock is released during the fsync (other senders share the commit); the agent
        // is marked busy meanwhile, so a cancel of its turn waits for this fold.
        match face.append_released(room, agent, cmds(refused)).await {
            Ok(()) => return true,
            Err(e)
                if !refused
                    && !matches!(e.code, ErrorCode::StorageError | ErrorCode::Unavailable) =>
            {
                tracing::warn!(error = %e, "groupx: the ledger refused a lane commit; trying without what it refused");
                refused = true;
            }
            Err(e) => {
                tracing::warn!(error = %e, "groupx: ledger write failed; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = shutdown.changed() => return false,
                }
            }
        }
    }
}

/// The agent's first update proves it has the prompt: `turn.started` (delivered), once per
/// turn. Returns false at shutdown.
async fn mark_started(
    face: &Face,
    agent: &str,
    tid: &str,
    attempt: &str,
    corr: &Correlation,
    started: &mut bool,
) -> bool {
    if *started {
        return true;
    }
    *started = true;
    let b = json!({"turnId": tid, "attemptId": attempt});
    commit(
        face,
        agent,
        |r| status_is(r, tid, &[TurnStatus::Dispatching, TurnStatus::Cancelling]),
        |_| vec![face.ext("turn.started", corr, b.clone())],
    )
    .await
}

fn status_is(room: &super::room::Room, turn: &str, ok: &[TurnStatus]) -> bool {
    room.turns
        .get(turn)
        .is_some_and(|t| ok.contains(&t.state.status))
}

async fn start_session(face: &Face, cfg: &AgentConfig) -> Result<Session, String> {
    let binding = ids::new_id("bind");
    // The GroupX MCP server, for drivers whose agents can attach one (the binding header is how
    // their calls are known to be theirs, §3.3).
    let mcp = face.addr.map(|addr| {
        json!({"type": "http", "name": "groupx", "url": format!("http://{addr}/mcp"),
            "headers": [{"name": "X-GroupX-Binding", "value": binding}]})
    });
    // Resume the agent's own session when it can (session/load, thread/resume), so a broker
    // restart does not cost the agent its context; else a new one.
    let st = super::driver::open(&face.home, cfg, mcp).await?;
    Ok(Session {
        native: st.native,
        binding,
        resumed: st.resumed,
    })
}

/// The earlier room messages this agent has not seen, and the turn's own message.
async fn packet(face: &Face, cfg: &AgentConfig, turn: &Turn) -> String {
    let (after, recall) = {
        let room = face.room.lock().await;
        let seen = room.seen_up_to.get(&cfg.id).copied().unwrap_or(0);
        // A context.reset (§10.5) is a floor for every agent's packet.
        let after = seen.max(room.memory.context.floor_seq);
        (after, super::memory_tools::recall(&room.memory, &cfg.id))
    };
    let (r, g) = (face.d.ledger.readers().clone(), face.group_id.clone());
    let before = turn.source_seq.max(1);
    let kinds = vec!["chat.message".to_string()];
    let earlier = tokio::task::spawn_blocking(move || {
        // The last messages before the source, not before what the agent saw.
        r.events_before(&g, before, context::MAX_MESSAGES, &kinds)
    })
    .await
    .ok()
    .and_then(Result::ok)
    .unwrap_or_default();
    let mut lines: Vec<Line> = Vec::new();
    for e in earlier.iter().filter(|e| e.seq > after) {
        if let Some(env) = face.project(&e.json) {
            lines.push(Line {
                author: format!("{} ({})", env.actor.display_name, env.actor.actor_id),
                event_id: env.event_id,
                text: env.body["content"].as_str().unwrap_or_default().to_string(),
            });
        }
    }
    let (r, g, src) = (
        face.d.ledger.readers().clone(),
        face.group_id.clone(),
        turn.source_event_id.clone(),
    );
    let current = tokio::task::spawn_blocking(move || r.event(&g, &src))
        .await
        .ok()
        .and_then(Result::ok)
        .flatten()
        .and_then(|raw| face.project(&raw.json));
    let current = match current {
        Some(env) => Line {
            author: format!("{} ({})", env.actor.display_name, env.actor.actor_id),
            event_id: env.event_id,
            text: env.body["content"].as_str().unwrap_or_default().to_string(),
        },
        None => Line {
            author: "unknown".into(),
            event_id: turn.source_event_id.clone(),
            text: String::new(),
        },
    };
    context::packet(cfg, &recall, &lines, &current)
}

/// A Watch Turn's prompt: its dedicated observation packet (§4.3), never the user's text as
/// an order.
async fn watch_packet(face: &Face, cfg: &AgentConfig, turn: &Turn) -> String {
    let (workers, ids): (Vec<String>, Vec<String>) = {
        let room = face.room.lock().await;
        turn.subjects
            .iter()
            .filter_map(|s| room.turns.get(s))
            .map(|t| (format!("agent:{}", t.target), t.turn_id.clone()))
            .unzip()
    };
    let task = face
        .message_text(&turn.source_event_id)
        .await
        .unwrap_or_default();
    let name = if cfg.name.is_empty() {
        &cfg.id
    } else {
        &cfg.name
    };
    let task: String = task
        .chars()
        .take(500)
        .collect::<String>()
        .replace('\n', "\n  ");
    format!(
        "[GroupX room:main] You are {name} (agent:{}), supervising another agent's turn.\n\
         Watched: {} (turn {}).\n\
         Its task [{}]:\n  {task}\n\n\
         Follow it with the groupx.watch tool (until next_milestone or terminal). If it goes \
         wrong, use groupx.steer: nudge (public guidance) or interrupt (its turn is cancelled and \
         restarted with your guidance as its task); give a public reason. You do not approve or \
         deny its tools. Your final reply is posted to the room as your assessment.\n",
        cfg.id,
        workers.join(", "),
        ids.join(", "),
        turn.source_event_id,
    )
}

/// What a turn produced, gathered from its updates.
#[derive(Default)]
struct Gathered {
    text: String,
    reasoning: String,
    /// `(toolCallId, kind, title, status)` in first-seen order.
    tools: Vec<(String, String, String, String)>,
    interaction: Option<String>,
    chunks: u64,
}

impl Gathered {
    fn take(&mut self, face: &Face, who: &ActorRef, corr: &Correlation, turn_id: &str, u: Update) {
        let idx = self.chunks;
        self.chunks += 1;
        let (kind, body) = match u {
            Update::MessageChunk(t) => {
                face.note_progress(turn_id, |p| p.text(&t));
                // Kept up to what the answer can hold (it is clipped there): a runaway agent
                // cannot grow the broker's memory without bound; the live deltas still flow.
                push_bounded(&mut self.text, &t, MAX_RESPONSE + 64);
                (
                    "turn.content.delta",
                    json!({"turnId": turn_id, "chunkIndex": idx, "text": t}),
                )
            }
            Update::ThoughtChunk(t) => {
                push_bounded(&mut self.reasoning, &t, MAX_REASONING + 64);
                (
                    "turn.reasoning.delta",
                    json!({"turnId": turn_id, "chunkIndex": idx, "text": t}),
                )
            }
            Update::ToolCall {
                id,
                title,
                kind,
                status,
            } => {
                let kind = kind.unwrap_or_else(|| "other".into());
                let status = status.unwrap_or_else(|| "pending".into());
                self.tools.retain(|t| t.0 != id);
                // At most MAX_TOOLS records per turn (each becomes an event of the final commit).
                if self.tools.len() < MAX_TOOLS {
                    self.tools
                        .push((id.clone(), kind.clone(), title.clone(), status.clone()));
                }
                (
                    "tool.progress",
                    json!({"turnId": turn_id, "toolCallId": id, "nativeType": kind, "title": title, "status": status}),
                )
            }
            Update::ToolCallUpdate { id, title, status } => {
                let Some(t) = self.tools.iter_mut().find(|t| t.0 == id) else {
                    return;
                };
                if let Some(x) = title {
                    t.2 = x;
                }
                if let Some(x) = status {
                    t.3 = x;
                }
                (
                    "tool.progress",
                    json!({"turnId": turn_id, "toolCallId": t.0, "nativeType": t.1, "title": t.2, "status": t.3}),
                )
            }
            Update::UnexpectedInteraction { method } => {
                self.interaction.get_or_insert(method);
                return;
            }
            Update::Other { .. } => return,
        };
        if kind == "tool.progress" {
            let (id, title, st) = (
                body["toolCallId"].as_str().unwrap_or_default(),
                body["title"].as_str().unwrap_or_default(),
                body["status"].as_str().unwrap_or_default(),
            );
            face.note_progress(turn_id, |p| p.tool(id, title, st));
        }
        face.publish(&transient(kind, who.clone(), corr, now(), body));
    }
}

pub(super) fn clip(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut i = max;
        while !s.is_char_boundary(i) {
            i -= 1;
        }
        s.truncate(i);
        s.push_str("\n[truncated]");
    }
    s
}

/// Runs one turn to its terminal event. Returns false at shutdown.
async fn run_turn(
    face: &Arc<Face>,
    cfg: &AgentConfig,
    session: &mut Option<Session>,
    turn: &Turn,
    cancel: &Notify,
) -> bool {
    let tid = turn.turn_id.clone();
    let corr = corr_of(turn);
    let target = format!("agent:{}", cfg.id);
    let agent_corr = Correlation {
        to: Vec::new(),
        causation_id: None,
        ..corr.clone()
    };
    // 1. A live session.
    if !session.as_ref().is_some_and(|s| s.native.is_alive()) {
        if let Some(old) = session.take() {
            face.bindings.lock().remove(&old.binding);
            old.native.shutdown(Duration::from_secs(1)).await;
        }
        face.set_session(&cfg.id, "starting");
        let body = json!({"agent": target});
        if !commit(
            face,
            &cfg.id,
            |_| true,
            |_| vec![face.ext("session.starting", &agent_corr, body.clone())],
        )
        .await
        {
            return false;
        }
        match start_session(face, cfg).await {
            Ok(s) => {
                face.set_session(&cfg.id, "ready");
                let body = json!({"agent": target});
                let ty = if s.resumed {
                    "session.resumed"
                } else {
                    "session.ready"
                };
                if !commit(
                    face,
                    &cfg.id,
                    |_| true,
                    |_| vec![face.ext(ty, &agent_corr, body.clone())],
                )
                .await
                {
                    return false;
                }
                face.bindings
                    .lock()
                    .insert(s.binding.clone(), cfg.id.clone());
                *session = Some(s);
            }
            Err(why) => {
                face.set_session(&cfg.id, "failed");
                let why = clip(why, 2000);
                let failed = json!({"agent": target, "errorCode": ErrorCode::SessionFailed.as_str(), "message": why});
                let tbody = json!({"turnId": tid, "target": target, "status": "failed",
                    "errorCode": ErrorCode::SessionFailed.as_str(), "note": why});
                return commit(
                    face,
                    &cfg.id,
                    |r| status_is(r, &tid, &[TurnStatus::Queued]),
                    |_| {
                        vec![
                            face.ext("session.failed", &agent_corr, failed.clone()),
                            face.ext("turn.failed", &corr, tbody.clone()),
                        ]
                    },
                )
                .await;
            }
        }
    }
    let Some(s) = session.as_ref() else {
        return true;
    };
    // 2. The prompt, and the durable "maybe delivered" before it is written.
    let text = if turn.command_type == "supervision.watch" {
        watch_packet(face, cfg, turn).await
    } else {
        packet(face, cfg, turn).await
    };
    let attempt = ids::attempt_id();
    let dispatched = json!({"turnId": tid, "attemptId": attempt, "dispatchPhase": "prompt_invoked",
        "deliveryCertainty": "unknown", "transport": "structured"});
    let ok = commit(
        face,
        &cfg.id,
        |r| status_is(r, &tid, &[TurnStatus::Queued]),
        |_| vec![face.ext("turn.dispatched", &corr, dispatched.clone())],
    )
    .await;
    if !ok {
        return false;
    }
    let now_status = face
        .room
        .lock()
        .await
        .turns
        .get(&tid)
        .map(|t| t.state.status);
    match now_status {
        Some(TurnStatus::Dispatching) => {}
        // A cancel that waited for the dispatch commit folded right after it: the turn is
        // `cancelling` and no prompt was written. Settle it here; returning would leave a
        // non-terminal turn that blocks the lane forever.
        Some(TurnStatus::Cancelling) => {
            let body = json!({"turnId": tid, "target": target, "status": "cancelled",
                "attemptId": attempt, "note": "cancelled before the prompt was written"});
            return commit(
                face,
                &cfg.id,
                |r| status_is(r, &tid, &[TurnStatus::Cancelling]),
                |_| vec![face.ext("turn.cancelled", &corr, body.clone())],
            )
            .await;
        }
        _ => return true, // cancelled before it could be dispatched
    }
    face.current.lock().insert(cfg.id.clone(), tid.clone());
    let who = agent_ref(cfg);
    let mut got = Gathered::default();
    let mut started = false;
    let mut timed_out = false;
    // A cancel signal left over from an earlier turn must not stop this one; this turn's own
    // cancel intent, if any, is in the room.
    while futures_util::FutureExt::now_or_never(cancel.notified()).is_some() {}
    let cancel_now = status_is(&*face.room.lock().await, &tid, &[TurnStatus::Cancelling]);
    let outcome: Result<StopReason, AcpError> = match s.native.prompt(&text).await {
        Err(e) => Err(e),
        Ok(run) => {
            if cancel_now {
                s.native.cancel().await;
            }
            let (mut updates, mut done) = (run.updates, run.done);
            let idle = face.cfg.limits.turn_idle();
            let mut deadline = tokio::time::Instant::now() + idle;
            let mut shutdown = face.d.shutdown_rx();
            loop {
                tokio::select! {
                    u = updates.recv() => match u {
                        Some(u) => {
                            deadline = tokio::time::Instant::now() + idle;
                            if !mark_started(face, &cfg.id, &tid, &attempt, &corr, &mut started).await {
                                return false;
                            }
                            got.take(face, &who, &corr, &tid, u);
                        }
                        None => break done.await.unwrap_or(Err(AcpError::Protocol("agent connection lost".into()))),
                    },
                    r = &mut done => {
                        while let Ok(u) = updates.try_recv() {
                            // Updates that raced the answer still prove the start.
                            if !mark_started(face, &cfg.id, &tid, &attempt, &corr, &mut started).await {
                                return false;
                            }
                            got.take(face, &who, &corr, &tid, u);
                        }
                        break r.unwrap_or(Err(AcpError::Protocol("agent connection lost".into())));
                    }
                    _ = cancel.notified() => {
                        s.native.cancel().await;
                        deadline = deadline.min(tokio::time::Instant::now() + CANCEL_GRACE);
                    }
                    _ = tokio::time::sleep_until(deadline) => {
                        timed_out = true;
                        s.native.cancel().await;
                        break match tokio::time::timeout(CANCEL_GRACE, &mut done).await {
                            Ok(Ok(r)) => r,
                            _ => Err(AcpError::Protocol("no answer after cancel".into())),
                        };
                    }
                    // The turn stays dispatched; the next start settles it interrupted.
                    _ = shutdown.changed() => return false,
                }
            }
        }
    };
    // 3. One commit: reasoning, tools, response, terminal.
    let cancel_asked = status_is(&*face.room.lock().await, &tid, &[TurnStatus::Cancelling]);
    let (status, code, drop_session): (&str, Option<ErrorCode>, bool) =
        if let Some(_m) = &got.interaction {
            (
                "failed",
                Some(ErrorCode::UnexpectedNativeInteraction),
                false,
            )
        } else if timed_out && !cancel_asked {
            ("failed", Some(ErrorCode::TurnIdleTimeout), outcome.is_err())
        } else {
            match &outcome {
                Ok(StopReason::Cancelled) => ("cancelled", None, false),
                Ok(_) if cancel_asked && got.text.is_empty() => ("cancelled", None, false),
                Ok(_) => ("completed", None, false),
                Err(_) if cancel_asked => ("cancelled", None, true),
                Err(AcpError::Exited { .. }) => ("failed", Some(ErrorCode::AgentExited), true),
                Err(AcpError::Rpc { .. }) => ("failed", Some(ErrorCode::AgentError), false),
                Err(_) => ("failed", Some(ErrorCode::ProtocolInvalidMessage), true),
            }
        };
    let mut cmds_base: Vec<Command> = Vec::new();
    if !got.reasoning.is_empty() {
        cmds_base.push(face.ext(
            "turn.reasoning.recorded",
            &corr,
            json!({"turnId": tid, "content": clip(got.reasoning.clone(), MAX_REASONING), "terminalStatus": status}),
        ));
    }
    for (id, kind, title, st) in &got.tools {
        cmds_base.push(face.ext(
            "tool.progress.recorded",
            &corr,
            json!({"turnId": tid, "toolCallId": id, "nativeType": kind, "title": title, "status": st}),
        ));
    }
    let mut terminal =
        json!({"turnId": tid, "target": target, "status": status, "attemptId": attempt});
    if let Some(c) = code {
        terminal["errorCode"] = c.as_str().into();
    }
    match &outcome {
        Ok(r) => terminal["stopReason"] = stop_str(r).into(),
        Err(e) => terminal["note"] = clip(e.to_string(), 2000).into(),
    }
    if let Some(m) = &got.interaction {
        terminal["note"] = format!(
            "the agent asked for {m}; GroupX runs unrestricted and answers no interaction (§9)"
        )
        .into();
    }
    let response = (status == "completed" && !got.text.trim().is_empty()).then(ids::event_id);
    if let Some(rid) = &response {
        terminal["responseEventId"] = rid.clone().into();
        let mut extra = Map::new();
        extra.insert(
            "groupx".into(),
            json!({"correlationId": corr.correlation_id, "rootCorrelationId": corr.root_correlation_id,
                   "causationId": tid, "turnId": tid, "to": Vec::<String>::new()}),
        );
        cmds_base.push(Command::Send(SendArgs {
            group_id: face.group_id.clone(),
            by: cfg.id.clone(),
            text: Some(clip(got.text.clone(), MAX_RESPONSE)),
            reply_to: Some(turn.source_event_id.clone()),
            extra,
            event_id: Some(rid.clone()),
            ..SendArgs::default()
        }));
    }
    let ty = format!("turn.{status}");
    let ok = commit(
        face,
        &cfg.id,
        |r| {
            status_is(
                r,
                &tid,
                &[
                    TurnStatus::Dispatching,
                    TurnStatus::Running,
                    TurnStatus::Cancelling,
                ],
            )
        },
        |refused| {
            if refused {
                // The answer could not be written: the turn fails, its records stay.
                let mut v: Vec<Command> = cmds_base
                    .iter()
                    .filter(|c| !matches!(c, Command::Send(_)))
                    .cloned()
                    .collect();
                let body = json!({"turnId": tid, "target": target, "status": "failed",
                    "attemptId": attempt, "errorCode": ErrorCode::ResponseRefused.as_str(),
                    "note": "the ledger refused the turn's answer"});
                v.push(face.ext("turn.failed", &corr, body));
                return v;
            }
            let mut v = cmds_base.clone();
            v.push(face.ext(&ty, &corr, terminal.clone()));
            v
        },
    )
    .await;
    face.current.lock().remove(&cfg.id);
    face.end_progress(&tid);
    if drop_session {
        if let Some(s) = session.take() {
            face.bindings.lock().remove(&s.binding);
            s.native.shutdown(Duration::from_secs(1)).await;
        }
        face.set_session(&cfg.id, "idle");
        let body = json!({"agent": target, "errorCode": code.map(ErrorCode::as_str)});
        let _ = commit(
            face,
            &cfg.id,
            |_| true,
            |_| vec![face.ext("session.stopped", &agent_corr, body.clone())],
        )
        .await;
    }
    ok
}

fn stop_str(r: &StopReason) -> String {
    match r {
        StopReason::EndTurn => "end_turn".into(),
        StopReason::MaxTokens => "max_tokens".into(),
        StopReason::MaxTurnRequests => "max_turn_requests".into(),
        StopReason::Refusal => "refusal".into(),
        StopReason::Cancelled => "cancelled".into(),
        StopReason::Other(s) => s.clone(),
    }
}
