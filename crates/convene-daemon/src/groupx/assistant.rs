//! The room assistant's side conversation (§10.7): the user talks to a private assistant beside
//! the room, and the assistant acts on the room only through the operator endpoint
//! (`/mcp/operator`, the only MCP server its session is given).
//!
//! The conversation is durable but not in the room: a ledger group of its own (setting
//! [`SIDE_SETTING`]), user lines by principal `user`, assistant lines by `svc:assistant`, each a
//! `chat.message` with `data.groupx = {clientCommandId, binding: "user:web"}`. It is folded at
//! start, so a retry is answered from the ledger across restarts. One assistant turn runs at a
//! time, on one long-lived native session ([`driver::Native`], shared with the lanes).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use convene_acp::{AcpError, StopReason, Update};
use convene_core::{Command, CoreError, SendArgs};
use convene_groupx::envelope::{LEDGER_OPERATOR, LEDGER_USER, USER_WEB};
use convene_groupx::request::parse_assistant_message;
use convene_groupx::{ErrorCode, GroupxError};
use hyper::body::Incoming;
use hyper::{Method, Request, Response};
use serde_json::{json, Map, Value};
use tokio::sync::{watch, Mutex, Notify};

use super::config::{AssistantConfig, Config};
use super::driver::{self, Native};
use super::http::{body, error, json as reply, Body};
use super::lane::{clip, push_bounded, CANCEL_GRACE, MAX_RESPONSE};
use super::{from_core, Face, Raw};
use crate::Daemon;

/// Group setting that marks the side conversation's ledger group.
pub const SIDE_SETTING: &str = "x_groupx_assistant";

/// Lines `GET /api/assistant/messages` returns (and the fold keeps in order).
const KEEP_LINES: usize = 200;
/// Earlier lines given to the assistant with each turn.
const PROMPT_LINES: usize = 20;
/// Characters of one earlier line in the prompt.
const PROMPT_CLIP: usize = 2000;
/// How long a POST waits for the reply before answering `202 running`.
const REPLY_WAIT: Duration = Duration::from_secs(120);

/// One line of the side conversation.
#[derive(Clone)]
struct Line {
    message_id: String,
    role: &'static str,
    content: String,
    created_at: String,
}

/// One user command (`clientCommandId`) and its reply, if written.
struct Cmd {
    content: String,
    user_message_id: String,
    reply: Option<(String, String)>,
}

/// How an assistant turn ended.
#[derive(Clone)]
enum Outcome {
    /// The reply line was written.
    Reply { message_id: String, content: String },
    /// No reply was written (a retry runs the assistant again).
    Ended {
        state: &'static str,
        code: Option<ErrorCode>,
        message: String,
    },
}

#[derive(Default)]
struct Side {
    lines: Vec<Line>,
    cmds: HashMap<String, Cmd>,
    /// Commands whose turn is queued or running: a retry joins it.
    inflight: HashMap<String, watch::Receiver<Option<Outcome>>>,
}

impl Side {
    fn fold(&mut self, raw: &Raw) {
        if raw.kind != "chat.message" {
            return;
        }
        let Some(ccid) = raw.data["groupx"]["clientCommandId"].as_str() else {
            return;
        };
        let content = raw.data["text"].as_str().unwrap_or_default().to_string();
        let role = match raw.by.as_str() {
            LEDGER_USER => {
                self.cmds.entry(ccid.to_string()).or_insert_with(|| Cmd {
                    content: content.clone(),
                    user_message_id: raw.id.clone(),
                    reply: None,
                });
                "user"
            }
            LEDGER_OPERATOR => {
                if let Some(c) = self.cmds.get_mut(ccid) {
                    c.reply.get_or_insert((raw.id.clone(), content.clone()));
                }
                "assistant"
            }
            _ => return,
        };
        self.lines.push(Line {
            message_id: raw.id.clone(),
            role,
            content,
            created_at: raw.ts.clone(),
        });
        if self.lines.len() > KEEP_LINES * 2 {
            self.lines.drain(..self.lines.len() - KEEP_LINES);
        }
    }
}

/// The assistant: its card, its side conversation, its session.
pub(super) struct Assistant {
    /// The card, when enabled.
    cfg: Option<AssistantConfig>,
    /// The side conversation's group (only when enabled).
    group_id: Option<String>,
    side: Mutex<Side>,
    /// The live session; its lock is the "one turn at a time" queue (tokio's mutex is FIFO).
    native: Mutex<Option<Native>>,
    /// `idle`, `starting`, `ready`, `failed`.
    session: parking_lot::Mutex<&'static str>,
    running: AtomicBool,
    /// The running turn was asked to stop (also before its prompt was written).
    cancel_asked: AtomicBool,
    cancel: Notify,
}

impl Assistant {
    /// Opens the side conversation (creating its group at first start) and folds it.
    pub(super) async fn open(d: &Arc<Daemon>, cfg: &Config) -> Result<Self, CoreError> {
        let card = cfg.assistant.clone().filter(|a| a.enabled);
        let mut side = Side::default();
        let group_id = match &card {
            None => None,
            Some(_) => {
                let g = super::ensure_group(
                    d,
                    SIDE_SETTING,
                    "groupx assistant",
                    "GroupX room:main, the assistant's side conversation",
                )
                .await?;
                let mut after = 0;
                loop {
                    let (r, gg) = (d.ledger.readers().clone(), g.clone());
                    let page =
                        tokio::task::spawn_blocking(move || r.events_after(&gg, after, 1000, &[]))
                            .await
                            .map_err(|e| CoreError::storage(e.to_string()))??;
                    let Some(last) = page.last().map(|e| e.seq) else {
                        break;
                    };
                    for e in &page {
                        if let Ok(raw) = serde_json::from_str::<Raw>(&e.json) {
                            side.fold(&raw);
                        }
                    }
                    after = last;
                }
                Some(g)
            }
        };
        Ok(Self {
            cfg: card,
            group_id,
            side: Mutex::new(side),
            native: Mutex::new(None),
            session: parking_lot::Mutex::new("idle"),
            running: AtomicBool::new(false),
            cancel_asked: AtomicBool::new(false),
            cancel: Notify::new(),
        })
    }

    fn enabled(&self) -> Result<(&AssistantConfig, &str), GroupxError> {
        match (&self.cfg, &self.group_id) {
            (Some(c), Some(g)) => Ok((c, g)),
            _ => Err(GroupxError::new(
                ErrorCode::NotFound,
                "the room assistant is not enabled (add an `assistant` card to groupx.json)",
            )),
        }
    }

    fn status(&self, all: &Config) -> Value {
        let card = all.assistant.as_ref();
        json!({"enabled": self.cfg.is_some(),
            "name": card.map(AssistantConfig::display_name),
            "driver": card.map(|c| c.driver.as_str()),
            "session": *self.session.lock(),
            "running": self.running.load(Ordering::Acquire)})
    }
}

/// Appends one side line and folds it (callers hold the side lock).
async fn append_line(
    face: &Face,
    side: &mut Side,
    gid: &str,
    by: &str,
    ccid: &str,
    text: &str,
    reply_to: Option<String>,
) -> Result<String, GroupxError> {
    let mut extra = Map::new();
    extra.insert(
        "groupx".into(),
        json!({"clientCommandId": ccid, "binding": USER_WEB}),
    );
    let c = face
        .d
        .ledger
        .execute(Command::Send(SendArgs {
            group_id: gid.to_string(),
            by: by.to_string(),
            text: Some(text.to_string()),
            reply_to,
            extra,
            ..SendArgs::default()
        }))
        .await
        .map_err(from_core)?;
    let mut id = String::new();
    for (ev, _) in &c.events {
        side.fold(&Raw {
            id: ev.id.clone(),
            seq: ev.seq,
            kind: ev.kind.clone(),
            by: ev.by.clone(),
            ts: ev.ts.clone(),
            data: ev.data.clone(),
        });
        id = ev.id.clone();
    }
    Ok(id)
}

fn answer(user_message_id: &str, o: &Outcome) -> Value {
    match o {
        Outcome::Reply {
            message_id,
            content,
        } => json!({"userMessageId": user_message_id,
            "reply": {"messageId": message_id, "content": content}}),
        Outcome::Ended {
            state,
            code,
            message,
        } => json!({"userMessageId": user_message_id, "reply": null, "state": state,
            "errorCode": code.map(ErrorCode::as_str), "message": message}),
    }
}

async fn post(face: Arc<Face>, b: &[u8]) -> Result<(u16, Value), GroupxError> {
    let (_, gid) = face.assistant.enabled()?;
    let gid = gid.to_string();
    let (ccid, content) = parse_assistant_message(b, face.cfg.limits.message_bytes)?;
    let (user_id, mut rx) = {
        let mut side = face.assistant.side.lock().await;
        if let Some(c) = side.cmds.get(&ccid) {
            if c.content != content {
                return Err(GroupxError::new(
                    ErrorCode::ClientCommandConflict,
                    "this clientCommandId was used with another content",
                )
                .field("clientCommandId"));
            }
            if let Some((id, text)) = &c.reply {
                let o = Outcome::Reply {
                    message_id: id.clone(),
                    content: text.clone(),
                };
                return Ok((200, answer(&c.user_message_id, &o)));
            }
        }
        match side.inflight.get(&ccid) {
            // Join the running (or queued) turn of this command.
            Some(rx) => (
                side.cmds
                    .get(&ccid)
                    .map(|c| c.user_message_id.clone())
                    .unwrap_or_default(),
                rx.clone(),
            ),
            None => {
                // A user line without a reply (the broker stopped mid-turn, or the turn
                // failed): the assistant runs again, without a second user line.
                let user_id = match side.cmds.get(&ccid) {
                    Some(c) => c.user_message_id.clone(),
                    None => {
                        append_line(&face, &mut side, &gid, LEDGER_USER, &ccid, &content, None)
                            .await?
                    }
                };
                let (tx, rx) = watch::channel(None);
                side.inflight.insert(ccid.clone(), rx.clone());
                tokio::spawn(run(
                    face.clone(),
                    ccid.clone(),
                    user_id.clone(),
                    content,
                    tx,
                ));
                (user_id, rx)
            }
        }
    };
    let waited = tokio::time::timeout(REPLY_WAIT, rx.wait_for(Option::is_some))
        .await
        .map(|r| r.map(|o| o.clone()));
    match waited {
        Ok(Ok(Some(o))) => Ok((200, answer(&user_id, &o))),
        Ok(Ok(None)) | Err(_) => Ok((202, json!({"userMessageId": user_id, "state": "running"}))),
        Ok(Err(_)) => {
            // The turn's task ended without an outcome: a retry starts it again.
            face.assistant.side.lock().await.inflight.remove(&ccid);
            Err(GroupxError::new(
                ErrorCode::Unavailable,
                "the assistant turn stopped",
            ))
        }
    }
}

/// Runs one assistant turn (after the ones ahead of it) and writes its reply.
async fn run(
    face: Arc<Face>,
    ccid: String,
    user_id: String,
    content: String,
    tx: watch::Sender<Option<Outcome>>,
) {
    let a = &face.assistant;
    let mut native = a.native.lock().await;
    // A cancel signal left over from an earlier turn must not stop this one.
    a.cancel_asked.store(false, Ordering::Release);
    while futures_util::FutureExt::now_or_never(a.cancel.notified()).is_some() {}
    a.running.store(true, Ordering::Release);
    let result = turn(&face, &mut native, &ccid, &content).await;
    let mut side = a.side.lock().await;
    let outcome = match (result, a.enabled()) {
        (Ok(text), Ok((_, gid))) => {
            let gid = gid.to_string();
            match append_line(
                &face,
                &mut side,
                &gid,
                LEDGER_OPERATOR,
                &ccid,
                &text,
                Some(user_id),
            )
            .await
            {
                Ok(id) => Outcome::Reply {
                    message_id: id,
                    content: text,
                },
                Err(e) => Outcome::Ended {
                    state: "failed",
                    code: Some(e.code),
                    message: e.message,
                },
            }
        }
        (Ok(_), Err(e)) => Outcome::Ended {
            state: "failed",
            code: Some(e.code),
            message: e.message,
        },
        (Err(o), _) => o,
    };
    side.inflight.remove(&ccid);
    a.running.store(false, Ordering::Release);
    let _ = tx.send(Some(outcome));
    drop(side);
    drop(native);
}

fn ended(state: &'static str, code: Option<ErrorCode>, message: impl Into<String>) -> Outcome {
    Outcome::Ended {
        state,
        code,
        message: message.into(),
    }
}

/// The product's default prompt: what the assistant is, and its tools (§10.7). The user's
/// `extraInstructions` are appended, never in place of it.
fn default_prompt(name: &str) -> String {
    format!(
        "[GroupX room assistant] You are {name}, the user's private assistant beside the GroupX \
         room room:main. This conversation is private: the room's agents do not see it.\n\
         You act on the room only through your MCP server groupx-operator:\n\
         - worker_dispatch {{to, content, clientCommandId}}: give agents work (a durable \
         operator.dispatch, no chat bubble); returns at once with their turn ids.\n\
         - worker_ask: the same, then waits (at most 60 s) for their answers.\n\
         - send {{content, clientCommandId}}: say something in the room as user:assistant; use \
         it only when the room should see it.\n\
         - read {{afterSeq?, limit?}}: what happened in the room (messages, dispatches, turn \
         outcomes).\n\
         - cancel_turn {{turnId}}: stop an agent's turn.\n\
         Agents are named agent:<id>. Answer the user briefly; say what you did in the room.\n"
    )
}

/// The turn's prompt: the default prompt, the user's extra instructions, the recent side
/// conversation (indented, bounded), and the current line last.
fn prompt(cfg: &AssistantConfig, earlier: &[Line], current: &str) -> String {
    let mut p = default_prompt(cfg.display_name());
    if let Some(x) = cfg
        .extra_instructions
        .as_deref()
        .filter(|x| !x.trim().is_empty())
    {
        p.push_str("\nThe user's instructions for you:\n");
        p.push_str(x.trim_end());
        p.push('\n');
    }
    if !earlier.is_empty() {
        p.push_str("\nRecent conversation (oldest first):\n");
        for l in earlier {
            let text: String = l.content.chars().take(PROMPT_CLIP).collect();
            p.push_str(&format!("  {}: {}\n", l.role, text.replace('\n', "\n    ")));
        }
    }
    p.push_str("\nThe user says:\n");
    p.push_str(current);
    p
}

/// One native turn; the reply text, or how it ended without one.
async fn turn(
    face: &Face,
    native: &mut Option<Native>,
    ccid: &str,
    content: &str,
) -> Result<String, Outcome> {
    let a = &face.assistant;
    let cfg = a
        .cfg
        .clone()
        .ok_or_else(|| ended("failed", Some(ErrorCode::NotFound), "not enabled"))?;
    if *face.d.shutdown_rx().borrow() {
        // Never start an assistant process while the daemon stops.
        return Err(ended(
            "failed",
            Some(ErrorCode::Unavailable),
            "the runtime is shutting down",
        ));
    }
    if !native.as_ref().is_some_and(Native::is_alive) {
        if let Some(old) = native.take() {
            old.shutdown(Duration::from_secs(1)).await;
        }
        *a.session.lock() = "starting";
        // Only the operator endpoint: the assistant is no member of the room (§3.1).
        let mcp = face.addr.map(|addr| {
            json!({"type": "http", "name": "groupx-operator",
                "url": format!("http://{addr}/mcp/operator"), "headers": []})
        });
        match driver::open(&face.home, &cfg.as_agent(), mcp).await {
            Ok(st) => {
                *native = Some(st.native);
                *a.session.lock() = "ready";
            }
            Err(why) => {
                *a.session.lock() = "failed";
                tracing::warn!(error = %why, "groupx: the assistant did not start");
                return Err(ended(
                    "failed",
                    Some(ErrorCode::SessionFailed),
                    clip(why, 2000),
                ));
            }
        }
    }
    let Some(n) = native.as_ref() else {
        return Err(ended(
            "failed",
            Some(ErrorCode::SessionFailed),
            "no session",
        ));
    };
    let text = {
        let side = a.side.lock().await;
        // The lines before this command's own user line, the newest PROMPT_LINES.
        let mine = side
            .cmds
            .get(ccid)
            .map(|c| c.user_message_id.clone())
            .unwrap_or_default();
        let earlier: Vec<Line> = side
            .lines
            .iter()
            .filter(|l| l.message_id != mine)
            .cloned()
            .collect();
        let from = earlier.len().saturating_sub(PROMPT_LINES);
        prompt(&cfg, &earlier[from..], content)
    };
    if a.cancel_asked.load(Ordering::Acquire) {
        return Err(ended(
            "cancelled",
            None,
            "cancelled before the prompt was written",
        ));
    }
    let run = match n.prompt(&text).await {
        Ok(r) => r,
        Err(e) => return Err(fail(native, e).await),
    };
    let mut cancelled = false;
    if a.cancel_asked.load(Ordering::Acquire) {
        // Asked while the prompt was being handed over.
        cancelled = true;
        n.cancel().await;
    }
    let (mut updates, mut done) = (run.updates, run.done);
    let idle = face.cfg.limits.turn_idle();
    let mut deadline = tokio::time::Instant::now() + idle;
    let mut shutdown = face.d.shutdown_rx();
    let (mut reply_text, mut interaction, mut timed_out) = (String::new(), None::<String>, false);
    let mut take = |u: Update, reply_text: &mut String| match u {
        Update::MessageChunk(t) => push_bounded(reply_text, &t, MAX_RESPONSE),
        Update::UnexpectedInteraction { method } => {
            interaction.get_or_insert(method);
        }
        _ => {}
    };
    let outcome: Result<StopReason, AcpError> = loop {
        tokio::select! {
            u = updates.recv() => match u {
                Some(u) => {
                    deadline = tokio::time::Instant::now() + idle;
                    take(u, &mut reply_text);
                }
                None => break done.await.unwrap_or(Err(AcpError::Closed)),
            },
            r = &mut done => {
                while let Ok(u) = updates.try_recv() {
                    take(u, &mut reply_text);
                }
                break r.unwrap_or(Err(AcpError::Closed));
            }
            _ = a.cancel.notified() => {
                cancelled = true;
                n.cancel().await;
                deadline = deadline.min(tokio::time::Instant::now() + CANCEL_GRACE);
            }
            _ = tokio::time::sleep_until(deadline) => {
                timed_out = !cancelled;
                n.cancel().await;
                break match tokio::time::timeout(CANCEL_GRACE, &mut done).await {
                    Ok(Ok(r)) => r,
                    _ => Err(AcpError::Protocol("no answer after cancel".into())),
                };
            }
            _ = shutdown.changed() => {
                return Err(ended("failed", Some(ErrorCode::Unavailable), "the runtime is shutting down"));
            }
        }
    };
    if let Some(m) = interaction {
        // §9: GroupX answers no interaction; the assistant is refused like the agents.
        n.cancel().await;
        return Err(ended(
            "failed",
            Some(ErrorCode::UnexpectedNativeInteraction),
            format!("the assistant asked for {m}; GroupX answers no interaction (§9)"),
        ));
    }
    if timed_out {
        return Err(ended(
            "failed",
            Some(ErrorCode::TurnIdleTimeout),
            "no output from the assistant",
        ));
    }
    match outcome {
        Ok(StopReason::Cancelled) => Err(ended("cancelled", None, "cancelled")),
        Ok(_) if cancelled => Err(ended("cancelled", None, "cancelled")),
        Ok(_) if reply_text.trim().is_empty() => Err(ended(
            "failed",
            Some(ErrorCode::AgentError),
            "the assistant answered nothing",
        )),
        Ok(_) => Ok(reply_text),
        Err(_) if cancelled => {
            native.take();
            Err(ended("cancelled", None, "cancelled"))
        }
        Err(e) => Err(fail(native, e).await),
    }
}

/// A native failure: the session is dropped when it may be unusable.
async fn fail(native: &mut Option<Native>, e: AcpError) -> Outcome {
    let (code, drop_session) = match &e {
        AcpError::Exited { .. } => (ErrorCode::AgentExited, true),
        AcpError::Rpc { .. } => (ErrorCode::AgentError, false),
        _ => (ErrorCode::ProtocolInvalidMessage, true),
    };
    if drop_session {
        if let Some(n) = native.take() {
            n.shutdown(Duration::from_secs(1)).await;
        }
    }
    ended("failed", Some(code), clip(e.to_string(), 2000))
}

/// Stops the assistant's process when the daemon stops.
pub(super) fn spawn_reaper(face: Arc<Face>) {
    if face.assistant.cfg.is_none() {
        return;
    }
    tokio::spawn(async move {
        let mut shutdown = face.d.shutdown_rx();
        while !*shutdown.borrow() {
            if shutdown.changed().await.is_err() {
                break;
            }
        }
        let mut n = face.assistant.native.lock().await;
        if let Some(n) = n.take() {
            n.shutdown(Duration::from_secs(2)).await;
        }
    });
}

/// Whether `path` is one of the assistant's routes.
pub(super) fn handles(path: &str) -> bool {
    path == "/api/assistant" || path.starts_with("/api/assistant/")
}

/// `/api/assistant`, `/api/assistant/messages`, `/api/assistant/cancel`.
pub(super) async fn route(face: Arc<Face>, req: Request<Incoming>, path: &str) -> Response<Body> {
    let method = req.method().clone();
    let not_allowed = || {
        error(&GroupxError::new(
            ErrorCode::MethodNotAllowed,
            format!("{method} is not allowed on {path}"),
        ))
    };
    match (path, &method) {
        ("/api/assistant", &Method::GET) => reply(200, &face.assistant.status(&face.cfg)),
        ("/api/assistant", _) => not_allowed(),
        ("/api/assistant/messages", &Method::GET) => match face.assistant.enabled() {
            Err(e) => error(&e),
            Ok(_) => {
                let side = face.assistant.side.lock().await;
                let from = side.lines.len().saturating_sub(KEEP_LINES);
                let lines: Vec<Value> = side.lines[from..]
                    .iter()
                    .map(|l| {
                        json!({"messageId": l.message_id, "role": l.role,
                        "content": l.content, "createdAt": l.created_at})
                    })
                    .collect();
                reply(200, &json!({"messages": lines}))
            }
        },
        ("/api/assistant/messages", &Method::POST) => {
            let r = async {
                let b = body(req).await?;
                post(face, &b).await
            }
            .await;
            match r {
                Ok((st, v)) => reply(st, &v),
                Err(e) => error(&e),
            }
        }
        ("/api/assistant/messages", _) => not_allowed(),
        ("/api/assistant/cancel", &Method::POST) => {
            let r = async {
                face.assistant.enabled()?;
                let b = body(req).await?;
                convene_groupx::request::parse_cancel(&b)?;
                let running = face.assistant.running.load(Ordering::Acquire);
                if running {
                    face.assistant.cancel_asked.store(true, Ordering::Release);
                    face.assistant.cancel.notify_one();
                }
                Ok::<_, GroupxError>(json!({"cancelling": running}))
            }
            .await;
            match r {
                Ok(v) => reply(202, &v),
                Err(e) => error(&e),
            }
        }
        ("/api/assistant/cancel", _) => not_allowed(),
        _ => error(&GroupxError::new(
            ErrorCode::NotFound,
            format!("no route {path}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_keeps_the_default_then_extra_then_history_then_the_line() {
        let cfg = AssistantConfig {
            driver: "acp".into(),
            name: String::new(),
            command: vec!["x".into()],
            cwd: None,
            mode: None,
            env: Default::default(),
            enabled: true,
            extra_instructions: Some("be terse".into()),
        };
        let l = Line {
            message_id: "m".into(),
            role: "user",
            content: "#hang\nsecond".into(),
            created_at: String::new(),
        };
        let p = prompt(&cfg, &[l], "#reply hi");
        let (d, e, h) = (
            p.find("worker_dispatch").unwrap(),
            p.find("be terse").unwrap(),
            p.find("  user: #hang\n    second").unwrap(),
        );
        assert!(d < e && e < h);
        assert!(p.ends_with("\n#reply hi"));
        // No earlier line starts with `#`: only the current line can carry one.
        assert_eq!(p.lines().filter(|l| l.starts_with('#')).count(), 1);
    }
}
