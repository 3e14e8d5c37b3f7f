//! [`CodexAgent`]: one `codex app-server` child, one JSON-RPC connection, request/response
//! correlation and routing of turn notifications to the running turn of their thread.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::{oneshot, watch};

use convene_agentio::process::{self, Line, StderrTail};
use convene_agentio::sink;

use crate::wire::{self, Event, Incoming};
use crate::{CodexConfig, CodexError, TurnEnd, TurnRun, Update, MAX_LINE_BYTES};

/// The reader's side of one running turn.
type TurnSink = sink::TurnSink<Result<TurnEnd, CodexError>>;

/// After the child is reaped, how long the reader gets to drain stdout before the connection is
/// declared dead anyway (a grandchild may hold stdout open).
const REAPED_DRAIN: Duration = Duration::from_secs(2);

/// After stdout EOF, how long to wait for the exit code and the rest of stderr.
const EOF_EXIT_WAIT: Duration = Duration::from_secs(2);

/// JSON-RPC "method not found".
const METHOD_NOT_FOUND: i64 = -32601;

/// JSON-RPC server error, for refused requests that have no refusal shape.
const REFUSED: i64 = -32000;

/// One app-server process and its connection. `Send + Sync`; all methods take `&self`.
pub struct CodexAgent {
    inner: Arc<Inner>,
    info: Value,
}

enum Pending {
    /// A request whose caller waits for the result.
    Call(oneshot::Sender<Result<Value, CodexError>>),
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

#[derive(Default)]
struct ConnState {
    pending: HashMap<u64, Pending>,
    /// Running turn per thread id.
    turns: HashMap<String, TurnSlot>,
    /// Set once the connection is unusable; every later call fails with it.
    dead: Option<CodexError>,
}

struct Inner {
    pid: u32,
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    next_id: AtomicU64,
    state: Mutex<ConnState>,
    request_timeout: Duration,
    /// `Some(code)` once the child has been reaped.
    exit: watch::Receiver<Option<Option<i32>>>,
    reaped: AtomicBool,
    stderr: StderrTail,
}

impl CodexAgent {
    /// Starts the app-server, runs `initialize` and sends `initialized`.
    pub async fn spawn(cfg: &CodexConfig) -> Result<CodexAgent, CodexError> {
        let spawned = process::spawn(&cfg.command, &cfg.cwd, &cfg.env)?;
        tracing::debug!(pid = spawned.pid, command = ?cfg.command, "spawned codex app-server");
        let (stderr, stderr_closed) = StderrTail::collect(spawned.stderr);
        let (exit_tx, exit) = watch::channel(None);
        let inner = Arc::new(Inner {
            pid: spawned.pid,
            stdin: tokio::sync::Mutex::new(Some(spawned.stdin)),
            next_id: AtomicU64::new(0),
            state: Mutex::new(ConnState::default()),
            request_timeout: cfg.request_timeout,
            exit,
            reaped: AtomicBool::new(false),
            stderr,
        });
        tokio::spawn(wait_child(inner.clone(), spawned.child, exit_tx));
        tokio::spawn(read_loop(inner.clone(), spawned.stdout, stderr_closed));
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
            .write_bounded(&wire::notification_line("initialized", None), "initialized")
            .await?;
        tracing::debug!(pid = agent.inner.pid, "codex app-server initialized");
        Ok(agent)
    }

    /// The `initialize` result (`userAgent`, `codexHome`, `platformOs`, ...).
    pub fn info(&self) -> &Value {
        &self.info
    }

    /// The child's process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.inner.pid
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
        let generation = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
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
                |tx| Pending::TurnStart {
                    tx,
                    thread_id: owner,
                    generation,
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
            match tokio::time::timeout(self.inner.request_timeout, started).await {
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
        let inner = self.inner.clone();
        drop(inner.stdin.lock().await.take());
        inner.fail(CodexError::Closed);
        let mut exit = inner.exit.clone();
        let exited = tokio::time::timeout(grace, exit.wait_for(Option::is_some))
            .await
            .is_ok();
        tracing::debug!(
            pid = inner.pid,
            exited_in_grace = exited,
            "shutting down codex app-server"
        );
        // Also after a clean exit: helpers the app-server left in its group go too.
        process::kill_group(inner.pid);
        let _ = tokio::time::timeout(Duration::from_secs(1), exit.wait_for(Option::is_some)).await;
    }

    /// False once the process exited or the connection broke (or was shut down).
    pub fn is_alive(&self) -> bool {
        self.inner.dead().is_none() && !self.inner.reaped.load(Ordering::Acquire)
    }
}

impl Drop for CodexAgent {
    fn drop(&mut self) {
        self.inner.fail(CodexError::Closed);
        if !self.inner.reaped.load(Ordering::Acquire) {
            process::kill_group(self.inner.pid);
        }
    }
}

/// Removes a request from `pending` if its caller stops waiting (timeout or dropped future).
struct PendingGuard<'a> {
    inner: &'a Inner,
    id: u64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.inner.lock().pending.remove(&self.id);
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

impl Inner {
    fn lock(&self) -> MutexGuard<'_, ConnState> {
        // The state stays consistent across a panic (single inserts/removes); keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn dead(&self) -> Option<CodexError> {
        self.lock().dead.clone()
    }

    /// Marks the connection unusable and fails everything waiting on it (first reason wins).
    fn fail(&self, err: CodexError) {
        let mut st = self.lock();
        if st.dead.is_some() {
            return;
        }
        tracing::debug!(pid = self.pid, error = %err, "codex connection failed");
        st.dead = Some(err.clone());
        let pending = std::mem::take(&mut st.pending);
        let turns = std::mem::take(&mut st.turns);
        drop(st);
        for p in pending.into_values() {
            if let Pending::Call(tx) | Pending::TurnStart { tx, .. } = p {
                let _ = tx.send(Err(err.clone()));
            }
        }
        for slot in turns.into_values() {
            slot.sink.finish(Err(err.clone()));
        }
    }

    /// Writes one line under `request_timeout`. A write that cannot finish in time means the
    /// app-server stopped reading stdin, and a half-written line corrupts the stream: the
    /// connection is failed and the process group killed.
    async fn write_bounded(&self, line: &[u8], method: &'static str) -> Result<(), CodexError> {
        match tokio::time::timeout(self.request_timeout, self.write(line)).await {
            Ok(r) => r,
            Err(_) => {
                self.fail(CodexError::Timeout(method));
                process::kill_group(self.pid);
                Err(CodexError::Timeout(method))
            }
        }
    }

    async fn write(&self, line: &[u8]) -> Result<(), CodexError> {
        let mut stdin = self.stdin.lock().await;
        let Some(w) = stdin.as_mut() else {
            return Err(self.dead().unwrap_or(CodexError::Closed));
        };
        let res = async {
            w.write_all(line).await?;
            w.flush().await
        }
        .await;
        res.map_err(|e| {
            tracing::debug!(pid = self.pid, error = %e, "write to codex app-server failed");
            self.dead().unwrap_or(CodexError::Closed)
        })
    }

    /// One request with `request_timeout` covering write and answer.
    async fn request(&self, method: &'static str, params: Value) -> Result<Value, CodexError> {
        self.request_with(method, params, Pending::Call).await
    }

    /// [`Inner::request`] with the pending entry built by `pending`.
    async fn request_with(
        &self,
        method: &'static str,
        params: Value,
        pending: impl FnOnce(oneshot::Sender<Result<Value, CodexError>>) -> Pending,
    ) -> Result<Value, CodexError> {
        let (tx, rx) = oneshot::channel();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut st = self.lock();
            if let Some(dead) = &st.dead {
                return Err(dead.clone());
            }
            st.pending.insert(id, pending(tx));
        }
        let _guard = PendingGuard { inner: self, id };
        tracing::debug!(id, method, "-> request");
        let started = tokio::time::Instant::now();
        self.write_bounded(&wire::request_line(id, method, &params), method)
            .await?;
        let left = self.request_timeout.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(self.dead().unwrap_or(CodexError::Closed)),
            Err(_) => Err(CodexError::Timeout(method)),
        }
    }

    /// Routes one parsed message (runs on the reader task; never waits for a consumer).
    fn dispatch(self: &Arc<Self>, msg: Incoming) {
        match msg {
            Incoming::Response {
                id: Some(id),
                result,
            } => {
                let mut st = self.lock();
                match st.pending.remove(&id) {
                    Some(Pending::Call(tx)) => {
                        drop(st);
                        let _ = tx.send(result);
                    }
                    Some(Pending::TurnStart {
                        tx,
                        thread_id,
                        generation,
                    }) => {
                        let turn_id = result.as_ref().ok().and_then(|v| wire::turn_id_of(v).ok());
                        if let (Some(slot), Some(turn_id)) = (st.turns.get_mut(&thread_id), turn_id)
                        {
                            if slot.generation == generation && slot.turn_id.is_none() {
                                slot.turn_id = Some(turn_id);
                            }
                        }
                        drop(st);
                        let _ = tx.send(result);
                    }
                    Some(Pending::Discard(method)) => {
                        tracing::debug!(id, method, ok = result.is_ok(), "<- unawaited answer");
                    }
                    None => tracing::debug!(id, "response to no waiting request (timed out?)"),
                }
            }
            Incoming::Response { id: None, .. } => {
                tracing::debug!("response with a foreign id ignored");
            }
            Incoming::Notification { method, params } => self.notification(&method, &params),
            Incoming::Request { id, method, params } => self.answer_request(id, method, params),
        }
    }

    /// Turn notifications go to the running turn of their `threadId`; the rest is dropped.
    fn notification(&self, method: &str, params: &Value) {
        let Some(thread_id) = wire::thread_id(params) else {
            tracing::debug!(method, "notification without threadId ignored");
            return;
        };
        let mut st = self.lock();
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

    /// Server→client requests: interactions are refused and their turn interrupted (GroupX
    /// §9); everything else (dynamic tool calls, auth refresh, ...) is "method not found",
    /// since this client registered none of it.
    fn answer_request(self: &Arc<Self>, id: Value, method: String, params: Value) {
        let thread_id = wire::thread_id(&params).map(str::to_string);
        let mut lines = Vec::new();
        if wire::is_interaction(&method) {
            tracing::debug!(%method, thread_id = ?thread_id, "<- interaction request refused");
            lines.push(match wire::interaction_refusal(&method) {
                Some(result) => wire::result_line(&id, &result),
                None => wire::error_line(&id, REFUSED, "interactions are not supported"),
            });
            let mut turn_id = wire::turn_id(&params).map(str::to_string);
            if let Some(thread_id) = &thread_id {
                let sink = {
                    let st = self.lock();
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
                    let rid = self.next_id.fetch_add(1, Ordering::Relaxed);
                    self.lock()
                        .pending
                        .insert(rid, Pending::Discard("turn/interrupt"));
                    lines.push(wire::request_line(
                        rid,
                        "turn/interrupt",
                        &json!({"threadId": thread_id, "turnId": turn_id}),
                    ));
                }
            }
        } else {
            tracing::debug!(%method, "<- unsupported server request");
            lines.push(wire::error_line(&id, METHOD_NOT_FOUND, "method not found"));
        }
        // Written from a task: the reader must keep reading even if the app-server is not
        // reading its stdin right now (both pipes full would deadlock). One write keeps the
        // answer and the interrupt adjacent and in order.
        let inner = self.clone();
        tokio::spawn(async move {
            let _ = inner
                .write_bounded(&lines.concat(), "server request answer")
                .await;
        });
    }
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

/// Owns the child: reaps it, publishes the exit code, and fails the connection if stdout
/// stays open after the exit (a leftover grandchild holding the pipe).
async fn wait_child(
    inner: Arc<Inner>,
    mut child: tokio::process::Child,
    exit_tx: watch::Sender<Option<Option<i32>>>,
) {
    let code = match child.wait().await {
        Ok(status) => status.code(),
        Err(e) => {
            tracing::debug!(error = %e, "waiting for codex app-server failed");
            None
        }
    };
    inner.reaped.store(true, Ordering::Release);
    let _ = exit_tx.send(Some(code));
    tracing::debug!(pid = inner.pid, ?code, "codex app-server exited");
    tokio::time::sleep(REAPED_DRAIN).await;
    if inner.dead().is_none() {
        inner.fail(CodexError::Exited {
            code,
            stderr_tail: inner.stderr.text(),
        });
        process::kill_group(inner.pid);
    }
}

/// Reads stdout line by line until EOF or a wire error, then fails the connection.
async fn read_loop(
    inner: Arc<Inner>,
    stdout: ChildStdout,
    mut stderr_closed: watch::Receiver<bool>,
) {
    let mut reader = BufReader::with_capacity(64 * 1024, stdout);
    let mut buf = Vec::new();
    loop {
        match process::read_line(&mut reader, &mut buf, MAX_LINE_BYTES).await {
            Ok(Line::Data(line)) => {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                match wire::parse_line(&line) {
                    Ok(msg) => inner.dispatch(msg),
                    Err(e) => {
                        tracing::debug!(pid = inner.pid, error = %e, "codex broke the wire format");
                        inner.fail(e);
                        process::kill_group(inner.pid);
                        return;
                    }
                }
            }
            Ok(Line::TooLong) => {
                inner.fail(CodexError::LineTooLong);
                process::kill_group(inner.pid);
                return;
            }
            Ok(Line::Eof) => break,
            Err(e) => {
                tracing::debug!(pid = inner.pid, error = %e, "reading codex stdout failed");
                break;
            }
        }
    }
    // stdout closed: report the exit code and stderr, when they come in time.
    let mut exit = inner.exit.clone();
    let waited = tokio::time::timeout(EOF_EXIT_WAIT, async {
        let code = exit
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|c| (*c).flatten());
        let _ = stderr_closed.wait_for(|closed| *closed).await;
        code
    })
    .await;
    let code = waited.unwrap_or(None);
    inner.fail(CodexError::Exited {
        code,
        stderr_tail: inner.stderr.text(),
    });
    if !inner.reaped.load(Ordering::Acquire) {
        process::kill_group(inner.pid);
    }
}
