//! [`CodexAgent`]: the app-server protocol over a `convene-agentio` [`Peer`] (which owns the
//! child, the request table and the dead-connection handling): the methods, and routing of
//! turn notifications to the running turn of their thread.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use convene_agentio::jsonrpc::Dialect;
use convene_agentio::peer::{ConnState, Peer, Pending, Protocol};
use convene_agentio::sink;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use crate::wire::{self, Event};
use crate::{CodexConfig, CodexError, TurnEnd, TurnRun, Update};

/// The reader's side of one running turn.
type TurnSink = sink::TurnSink<Result<TurnEnd, CodexError>>;

/// JSON-RPC "method not found".
const METHOD_NOT_FOUND: i64 = -32601;

/// JSON-RPC server error, for refused requests that have no refusal shape.
const REFUSED: i64 = -32000;

/// One app-server process and its connection. `Send + Sync`; all methods take `&self`.
pub struct CodexAgent {
    inner: Arc<Inner>,
    info: Value,
}

/// The app-server protocol over a [`Peer`]: turns run per thread, `turn/completed` ends them.
struct Codex;

type Inner = Peer<Codex>;

/// Running turn per thread id.
type Turns = HashMap<String, TurnSlot>;

/// Requests whose answers the protocol handles itself.
enum Own {
    /// A `turn/start`: its answer names the turn of the thread's slot before any later
    /// notification is routed (the caller may resume only after those).
    TurnStart {
        tx: oneshot::Sender<Result<Value, CodexError>>,
        thread_id: String,
        generation: u64,
    },
    /// A request nobody waits for (the `turn/interrupt` after a refused interaction).
    Discard(&'static str),
}

/// The running turn of one thread.
struct TurnSlot {
    /// Tells this turn apart from a later one on the same thread.
    generation: u64,
    /// Known once `turn/start` answered; notifications of other turns are then dropped.
    turn_id: Option<String>,
    sink: Arc<TurnSink>,
    /// Message of the last `error` notification, for a failed turn without `turn.error`.
    last_error: Option<String>,
    /// Agent message items that streamed text (by deltas or on completion).
    message_items: HashSet<String>,
    /// Set by the first notification naming the turn (`turn/started`, items): codex refuses
    /// `turn/interrupt` before that ("no active turn to interrupt").
    started: bool,
    /// [`CodexAgent::interrupt`] calls waiting for `started`.
    started_waiters: Vec<oneshot::Sender<()>>,
}

impl CodexAgent {
    /// Starts the app-server, runs `initialize` and sends `initialized`.
    pub async fn spawn(cfg: &CodexConfig) -> Result<CodexAgent, CodexError> {
        let inner = Inner::start(&cfg.command, &cfg.cwd, &cfg.env, cfg.request_timeout, 0)?;
        // If initialize fails, dropping the half-built agent kills the process group.
        let mut agent = CodexAgent {
            inner,
            info: Value::Null,
        };
        agent.info = agent
            .inner
            .request("initialize", wire::initialize_params())
            .await?;
        agent
            .inner
            .write_bounded(
                &wire::RPC.notification_line("initialized", None),
                "initialized",
            )
            .await?;
        tracing::debug!(pid = agent.inner.pid(), "codex app-server initialized");
        Ok(agent)
    }

    /// The `initialize` result (`userAgent`, `codexHome`, `platformOs`, ...).
    pub fn info(&self) -> &Value {
        &self.info
    }

    /// The child's process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.inner.pid()
    }

    /// `thread/start` in `cwd` with approval policy `never` and sandbox `danger-full-access`;
    /// returns the thread id.
    pub async fn start_thread(&self, cwd: &Path) -> Result<String, CodexError> {
        let result = self
            .inner
            .request("thread/start", wire::thread_start_params(cwd))
            .await?;
        wire::thread_id_of(&result, "thread/start")
    }

    /// `thread/resume` of a stored thread (same policy as [`CodexAgent::start_thread`]).
    pub async fn resume_thread(&self, thread_id: &str) -> Result<(), CodexError> {
        self.inner
            .request("thread/resume", wire::thread_resume_params(thread_id))
            .await
            .map(drop)
    }

    /// Sends `turn/start` and returns once it is answered (bounded by `request_timeout`).
    ///
    /// The turn's updates then arrive on [`TurnRun::updates`] in order and its outcome on
    /// [`TurnRun::done`] (from `turn/completed`), after the last update. The reader never waits
    /// for the consumer: while the channel is full, updates wait in memory, adjacent chunks of
    /// one kind merged; under a very large backlog `Other` updates are dropped and repeated
    /// `ToolCallUpdate`s of one item merged. Text is never lost. The turn itself has no
    /// timeout. One turn per thread at a time: a second one is [`CodexError::TurnBusy`].
    pub async fn start_turn(&self, thread_id: &str, text: &str) -> Result<TurnRun, CodexError> {
        let (sink, ends) = TurnSink::start();
        let generation = self.inner.next_id();
        {
            let mut st = self.inner.lock();
            let refused = if let Some(dead) = &st.dead {
                Some(dead.clone())
            } else if st.turns.contains_key(thread_id) {
                Some(CodexError::TurnBusy(thread_id.to_string()))
            } else {
                None
            };
            if let Some(err) = refused {
                drop(st);
                sink.finish(Err(err.clone()));
                return Err(err);
            }
            st.turns.insert(
                thread_id.to_string(),
                TurnSlot {
                    generation,
                    turn_id: None,
                    sink: sink.clone(),
                    last_error: None,
                    message_items: HashSet::new(),
                    started: false,
                    started_waiters: Vec::new(),
                },
            );
        }
        // Frees the thread if this future is dropped or the request fails.
        let mut guard = SlotGuard {
            inner: &self.inner,
            thread_id,
            generation,
            sink: &sink,
            armed: true,
        };
        let owner = thread_id.to_string();
        let result = self
            .inner
            .request_with(
                "turn/start",
                wire::turn_start_params(thread_id, text),
                |tx| {
                    Pending::Own(Own::TurnStart {
                        tx,
                        thread_id: owner,
                        generation,
                    })
                },
            )
            .await;
        let turn_id = match result.and_then(|v| wire::turn_id_of(&v)) {
            Ok(id) => id,
            Err(e) => {
                guard.fail(e.clone());
                return Err(e);
            }
        };
        guard.armed = false;
        tracing::debug!(thread_id, turn_id, "turn started");
        Ok(TurnRun {
            turn_id,
            updates: ends.updates,
            done: ends.done,
        })
    }

    /// `turn/interrupt`; the turn then ends with [`crate::TurnEnd::Interrupted`].
    ///
    /// Codex accepts the interrupt only once the turn runs, which is after `turn/start` was
    /// answered: for a turn that has not started yet this waits (within `request_timeout`) for
    /// its first notification. A turn that ends before it starts needs no interrupt: `Ok`.
    pub async fn interrupt(&self, thread_id: &str, turn_id: &str) -> Result<(), CodexError> {
        let not_started = {
            let mut st = self.inner.lock();
            match st.turns.get_mut(thread_id) {
                Some(slot) if slot.turn_id.as_deref() == Some(turn_id) && !slot.started => {
                    let (tx, rx) = oneshot::channel();
                    slot.started_waiters.push(tx);
                    Some(rx)
                }
                _ => None,
            }
        };
        if let Some(started) = not_started {
            match tokio::time::timeout(self.inner.request_timeout(), started).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return self.inner.dead().map_or(Ok(()), Err),
                Err(_) => return Err(CodexError::Timeout("turn/interrupt")),
            }
        }
        self.inner
            .request(
                "turn/interrupt",
                json!({"threadId": thread_id, "turnId": turn_id}),
            )
            .await
            .map(drop)
    }

    /// Closes the app-server's stdin, waits up to `grace` for it to exit, then kills its
    /// process group. Running turns and requests fail with [`CodexError::Closed`].
    pub async fn shutdown(self, grace: Duration) {
        self.inner.shutdown(grace).await;
    }

    /// False once the process exited or the connection broke (or was shut down).
    pub fn is_alive(&self) -> bool {
        self.inner.is_alive()
    }
}

impl Drop for CodexAgent {
    fn drop(&mut self) {
        self.inner.close();
    }
}

/// Frees a thread's turn slot when `turn/start` fails or its caller gives up.
struct SlotGuard<'a> {
    inner: &'a Inner,
    thread_id: &'a str,
    generation: u64,
    sink: &'a TurnSink,
    armed: bool,
}

impl SlotGuard<'_> {
    fn fail(&mut self, err: CodexError) {
        self.release();
        self.sink.finish(Err(err));
    }

    fn release(&mut self) {
        if !self.armed {
            return;
        }
        self.armed = false;
        let mut st = self.inner.lock();
        if st
            .turns
            .get(self.thread_id)
            .is_some_and(|s| s.generation == self.generation)
        {
            st.turns.remove(self.thread_id);
        }
    }
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.release();
            self.sink.finish(Err(CodexError::Closed));
        }
    }
}

impl Protocol for Codex {
    type Error = CodexError;
    type Turns = Turns;
    type Pending = Own;
    const DIALECT: Dialect = wire::RPC;
    const NAME: &'static str = "codex app-server";

    fn on_response(
        _peer: &Arc<Inner>,
        mut st: MutexGuard<'_, ConnState<Codex>>,
        id: u64,
        own: Own,
        result: Result<Value, CodexError>,
    ) {
        match own {
            Own::TurnStart {
                tx,
                thread_id,
                generation,
            } => {
                let turn_id = result.as_ref().ok().and_then(|v| wire::turn_id_of(v).ok());
                if let (Some(slot), Some(turn_id)) = (st.turns.get_mut(&thread_id), turn_id) {
                    if slot.generation == generation && slot.turn_id.is_none() {
                        slot.turn_id = Some(turn_id);
                    }
                }
                drop(st);
                let _ = tx.send(result);
            }
            Own::Discard(method) => {
                tracing::debug!(id, method, ok = result.is_ok(), "<- unawaited answer");
            }
        }
    }

    fn on_notification(peer: &Arc<Inner>, method: String, params: Value) {
        notification(peer, &method, &params);
    }

    fn on_request(peer: &Arc<Inner>, id: Value, method: String, params: Value) {
        answer_request(peer, id, method, params);
    }

    fn on_fail(turns: Turns, pending: Vec<Own>, err: &CodexError) {
        for p in pending {
            if let Own::TurnStart { tx, .. } = p {
                let _ = tx.send(Err(err.clone()));
            }
        }
        for slot in turns.into_values() {
            slot.sink.finish(Err(err.clone()));
        }
    }
}

/// Turn notifications go to the running turn of their `threadId`; the rest is dropped.
fn notification(peer: &Inner, method: &str, params: &Value) {
    let Some(thread_id) = wire::thread_id(params) else {
        tracing::debug!(method, "notification without threadId ignored");
        return;
    };
    let mut st = peer.lock();
    let Some(slot) = st.turns.get_mut(thread_id) else {
        tracing::debug!(method, thread_id, "notification outside a turn dropped");
        return;
    };
    if let (Some(ours), Some(theirs)) = (&slot.turn_id, wire::turn_id(params)) {
        if ours != theirs {
            tracing::debug!(
                method,
                thread_id,
                turn_id = theirs,
                "notification of another turn dropped"
            );
            return;
        }
    }
    if !slot.started && wire::turn_id(params).is_some() {
        slot.started = true;
        for waiter in slot.started_waiters.drain(..) {
            let _ = waiter.send(());
        }
    }
    let sink = slot.sink.clone();
    let mut out = Vec::new();
    match wire::event(method, params) {
        Event::Update(u) => out.push(u),
        Event::MessageDelta { item_id, delta } => {
            message_text(slot, item_id, delta, &mut out);
        }
        Event::MessageDone { item_id, text } => {
            // Text that was not streamed (no deltas) still reaches the consumer.
            if !slot.message_items.contains(&item_id) && !text.is_empty() {
                message_text(slot, item_id, text, &mut out);
            }
            out.push(Update::Other {
                kind: "item/completed:agentMessage".into(),
            });
        }
        Event::Error {
            message,
            will_retry,
        } => {
            // A final error beats the "Reconnecting... n/5" ones of a retrying stream.
            if !will_retry || slot.last_error.is_none() {
                slot.last_error = Some(message);
            }
            out.push(Update::Other {
                kind: "error".into(),
            });
        }
        Event::TurnCompleted { status, error } => {
            let last_error = slot.last_error.take();
            st.turns.remove(thread_id);
            drop(st);
            let outcome = wire::turn_end(status.as_deref(), error, last_error);
            tracing::debug!(thread_id, outcome = ?outcome, "<- turn completed");
            sink.finish(outcome);
            return;
        }
    }
    drop(st);
    for u in out {
        sink.push(u);
    }
}

/// Server→client requests: interactions are refused and their turn interrupted (GroupX §9);
/// everything else (dynamic tool calls, auth refresh, ...) is "method not found", since this
/// client registered none of it.
fn answer_request(peer: &Arc<Inner>, id: Value, method: String, params: Value) {
    let thread_id = wire::thread_id(&params).map(str::to_string);
    let mut lines = Vec::new();
    if wire::is_interaction(&method) {
        tracing::debug!(%method, thread_id = ?thread_id, "<- interaction request refused");
        lines.push(match wire::interaction_refusal(&method) {
            Some(result) => wire::RPC.result_line(&id, &result),
            None => wire::RPC.error_line(&id, REFUSED, "interactions are not supported"),
        });
        let mut turn_id = wire::turn_id(&params).map(str::to_string);
        if let Some(thread_id) = &thread_id {
            let sink = {
                let st = peer.lock();
                st.turns.get(thread_id).map(|slot| {
                    if turn_id.is_none() {
                        turn_id.clone_from(&slot.turn_id);
                    }
                    slot.sink.clone()
                })
            };
            if let Some(sink) = sink {
                sink.push(Update::UnexpectedInteraction {
                    method: method.clone(),
                });
            }
            if let Some(turn_id) = &turn_id {
                let rid = peer.next_id();
                peer.lock()
                    .pending
                    .insert(rid, Pending::Own(Own::Discard("turn/interrupt")));
                lines.push(wire::RPC.request_line(
                    rid,
                    "turn/interrupt",
                    &json!({"threadId": thread_id, "turnId": turn_id}),
                ));
            }
        }
    } else {
        tracing::debug!(%method, "<- unsupported server request");
        lines.push(wire::RPC.error_line(&id, METHOD_NOT_FOUND, "method not found"));
    }
    // Written from a task: the reader must keep reading even if the app-server is not
    // reading its stdin right now (both pipes full would deadlock). One write keeps the
    // answer and the interrupt adjacent and in order.
    let inner = peer.clone();
    tokio::spawn(async move {
        let _ = inner
            .write_bounded(&lines.concat(), "server request answer")
            .await;
    });
}

/// Pushes agent message text, with a blank line between two messages of one turn.
fn message_text(slot: &mut TurnSlot, item_id: String, text: String, out: &mut Vec<Update>) {
    if !slot.message_items.contains(&item_id) {
        if !slot.message_items.is_empty() {
            out.push(Update::MessageChunk("\n\n".into()));
        }
        slot.message_items.insert(item_id);
    }
    out.push(Update::MessageChunk(text));
}
