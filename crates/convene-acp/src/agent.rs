//! [`AcpAgent`]: one child process, one JSON-RPC connection, request/response correlation and
//! routing of `session/update` notifications to the running prompt of their session.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::{oneshot, watch};

use convene_agentio::process::{self, Line, StderrTail};
use convene_agentio::sink::TurnSink;

use crate::wire::{self, Incoming};
use crate::{
    AcpConfig, AcpError, AgentInfo, PromptRun, SessionInfo, StopReason, Update, MAX_LINE_BYTES,
};

/// The reader's side of one running prompt.
type PromptSink = TurnSink<Result<StopReason, AcpError>>;

/// After the child is reaped, how long the reader gets to drain stdout before the connection is
/// declared dead anyway (a grandchild may hold stdout open).
const REAPED_DRAIN: Duration = Duration::from_secs(2);

/// After stdout EOF, how long to wait for the exit code and the rest of stderr.
const EOF_EXIT_WAIT: Duration = Duration::from_secs(2);

/// JSON-RPC "method not found".
const METHOD_NOT_FOUND: i64 = -32601;

/// One agent process and its ACP connection. `Send + Sync`; all methods take `&self`.
pub struct AcpAgent {
    inner: Arc<Inner>,
    info: AgentInfo,
}

enum Pending {
    /// A plain request waiting for its result.
    Call(oneshot::Sender<Result<Value, AcpError>>),
    /// The `session/prompt` of this session.
    Prompt(String),
}

#[derive(Default)]
struct ConnState {
    pending: HashMap<u64, Pending>,
    /// Running prompt per session: its request id and sink.
    prompts: HashMap<String, (u64, Arc<PromptSink>)>,
    /// Set once the connection is unusable; every later call fails with it.
    dead: Option<AcpError>,
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

impl AcpAgent {
    /// Starts the agent process and runs `initialize`.
    pub async fn spawn(cfg: &AcpConfig) -> Result<AcpAgent, AcpError> {
        let spawned = process::spawn(&cfg.command, &cfg.cwd, &cfg.env)?;
        tracing::debug!(pid = spawned.pid, command = ?cfg.command, "spawned ACP agent");
        let (stderr, stderr_closed) = StderrTail::collect(spawned.stderr);
        let (exit_tx, exit) = watch::channel(None);
        let inner = Arc::new(Inner {
            pid: spawned.pid,
            stdin: tokio::sync::Mutex::new(Some(spawned.stdin)),
            next_id: AtomicU64::new(1),
            state: Mutex::new(ConnState::default()),
            request_timeout: cfg.request_timeout,
            exit,
            reaped: AtomicBool::new(false),
            stderr,
        });
        tokio::spawn(wait_child(inner.clone(), spawned.child, exit_tx));
        tokio::spawn(read_loop(inner.clone(), spawned.stdout, stderr_closed));
        // If initialize fails, dropping the half-built agent kills the process group.
        let mut agent = AcpAgent {
            inner,
            info: AgentInfo {
                protocol_version: 0,
                load_session: false,
                raw: Value::Null,
            },
        };
        let result = agent
            .inner
            .request("initialize", wire::initialize_params())
            .await?;
        agent.info = wire::agent_info(result)?;
        tracing::debug!(
            pid = agent.inner.pid,
            protocol_version = agent.info.protocol_version,
            load_session = agent.info.load_session,
            "ACP agent initialized"
        );
        Ok(agent)
    }

    /// What the agent reported in `initialize`.
    pub fn capabilities(&self) -> &AgentInfo {
        &self.info
    }

    /// The child's process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.inner.pid
    }

    /// `session/new`; returns the session id.
    pub async fn new_session(
        &self,
        cwd: &Path,
        mcp_servers: Vec<Value>,
    ) -> Result<String, AcpError> {
        Ok(self.new_session_full(cwd, mcp_servers).await?.session_id)
    }

    /// `session/new`; returns the session id and the modes the agent offers.
    pub async fn new_session_full(
        &self,
        cwd: &Path,
        mcp_servers: Vec<Value>,
    ) -> Result<SessionInfo, AcpError> {
        let result = self
            .inner
            .request(
                "session/new",
                json!({"cwd": cwd.to_string_lossy(), "mcpServers": mcp_servers}),
            )
            .await?;
        wire::session_info(&result)
    }

    /// `session/load`. The history the agent replays before answering is discarded.
    pub async fn load_session(
        &self,
        session_id: &str,
        cwd: &Path,
        mcp_servers: Vec<Value>,
    ) -> Result<(), AcpError> {
        self.inner
            .request(
                "session/load",
                json!({"sessionId": session_id, "cwd": cwd.to_string_lossy(), "mcpServers": mcp_servers}),
            )
            .await
            .map(drop)
    }

    /// `session/set_mode`.
    pub async fn set_mode(&self, session_id: &str, mode_id: &str) -> Result<(), AcpError> {
        self.inner
            .request(
                "session/set_mode",
                json!({"sessionId": session_id, "modeId": mode_id}),
            )
            .await
            .map(drop)
    }

    /// Sends `session/prompt` and returns once the request is written and flushed.
    ///
    /// The turn's updates then arrive on [`PromptRun::updates`] in order and its outcome on
    /// [`PromptRun::done`], after the last update. The reader never waits for the consumer:
    /// while the channel is full, updates wait in memory, adjacent chunks of one kind merged;
    /// under a very large backlog `Other` updates are dropped and repeated `ToolCallUpdate`s
    /// of one tool call merged. Text is never lost. The prompt has no timeout (only writing
    /// it is bounded by `request_timeout`).
    pub async fn prompt(&self, session_id: &str, text: &str) -> Result<PromptRun, AcpError> {
        let (sink, ends) = PromptSink::start();
        let run = PromptRun {
            updates: ends.updates,
            done: ends.done,
        };
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut st = self.inner.lock();
            if let Some(dead) = &st.dead {
                let err = dead.clone();
                drop(st);
                sink.finish(Err(err.clone()));
                return Err(err);
            }
            if st.prompts.contains_key(session_id) {
                drop(st);
                let err = AcpError::SessionBusy(session_id.to_string());
                sink.finish(Err(err.clone()));
                return Err(err);
            }
            st.prompts
                .insert(session_id.to_string(), (id, sink.clone()));
            st.pending
                .insert(id, Pending::Prompt(session_id.to_string()));
        }
        let params = json!({"sessionId": session_id, "prompt": [{"type": "text", "text": text}]});
        tracing::debug!(id, session_id, "-> session/prompt");
        let line = wire::request_line(id, "session/prompt", &params);
        if let Err(e) = self.inner.write_bounded(&line, "session/prompt").await {
            let mut st = self.inner.lock();
            st.pending.remove(&id);
            if st
                .prompts
                .get(session_id)
                .is_some_and(|(pid, _)| *pid == id)
            {
                st.prompts.remove(session_id);
            }
            drop(st);
            sink.finish(Err(e.clone()));
            return Err(e);
        }
        Ok(run)
    }

    /// Sends the `session/cancel` notification; the prompt then ends with `Cancelled`.
    pub async fn cancel(&self, session_id: &str) -> Result<(), AcpError> {
        if let Some(dead) = self.inner.dead() {
            return Err(dead);
        }
        tracing::debug!(session_id, "-> session/cancel");
        let line = wire::notification_line("session/cancel", &json!({"sessionId": session_id}));
        self.inner.write_bounded(&line, "session/cancel").await
    }

    /// Closes the agent's stdin, waits up to `grace` for it to exit, then kills its process
    /// group. Running prompts and requests fail with [`AcpError::Closed`].
    pub async fn shutdown(self, grace: Duration) {
        let inner = self.inner.clone();
        drop(inner.stdin.lock().await.take());
        inner.fail(AcpError::Closed);
        let mut exit = inner.exit.clone();
        let exited = tokio::time::timeout(grace, exit.wait_for(Option::is_some))
            .await
            .is_ok();
        tracing::debug!(
            pid = inner.pid,
            exited_in_grace = exited,
            "shutting down ACP agent"
        );
        // Also after a clean exit: helpers the agent left in its group go too.
        process::kill_group(inner.pid);
        let _ = tokio::time::timeout(Duration::from_secs(1), exit.wait_for(Option::is_some)).await;
    }

    /// False once the process exited or the connection broke (or was shut down).
    pub fn is_alive(&self) -> bool {
        self.inner.dead().is_none() && !self.inner.reaped.load(Ordering::Acquire)
    }
}

impl Drop for AcpAgent {
    fn drop(&mut self) {
        self.inner.fail(AcpError::Closed);
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

impl Inner {
    fn lock(&self) -> MutexGuard<'_, ConnState> {
        // The state stays consistent across a panic (single inserts/removes); keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn dead(&self) -> Option<AcpError> {
        self.lock().dead.clone()
    }

    /// Marks the connection unusable and fails everything waiting on it (first reason wins).
    fn fail(&self, err: AcpError) {
        let mut st = self.lock();
        if st.dead.is_some() {
            return;
        }
        tracing::debug!(pid = self.pid, error = %err, "ACP connection failed");
        st.dead = Some(err.clone());
        let pending = std::mem::take(&mut st.pending);
        let prompts = std::mem::take(&mut st.prompts);
        drop(st);
        for p in pending.into_values() {
            if let Pending::Call(tx) = p {
                let _ = tx.send(Err(err.clone()));
            }
        }
        for (_, (_, sink)) in prompts {
            sink.finish(Err(err.clone()));
        }
    }

    /// Writes one line under `request_timeout`. A write that cannot finish in time means the
    /// agent stopped reading stdin, and a half-written line corrupts the stream: the
    /// connection is failed and the process group killed.
    async fn write_bounded(&self, line: &[u8], method: &'static str) -> Result<(), AcpError> {
        match tokio::time::timeout(self.request_timeout, self.write(line)).await {
            Ok(r) => r,
            Err(_) => {
                self.fail(AcpError::Timeout(method));
                process::kill_group(self.pid);
                Err(AcpError::Timeout(method))
            }
        }
    }

    async fn write(&self, line: &[u8]) -> Result<(), AcpError> {
        let mut stdin = self.stdin.lock().await;
        let Some(w) = stdin.as_mut() else {
            return Err(self.dead().unwrap_or(AcpError::Closed));
        };
        let res = async {
            w.write_all(line).await?;
            w.flush().await
        }
        .await;
        res.map_err(|e| {
            tracing::debug!(pid = self.pid, error = %e, "write to agent failed");
            self.dead().unwrap_or(AcpError::Closed)
        })
    }

    /// One request with `request_timeout` covering write and answer.
    async fn request(&self, method: &'static str, params: Value) -> Result<Value, AcpError> {
        let (tx, rx) = oneshot::channel();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut st = self.lock();
            if let Some(dead) = &st.dead {
                return Err(dead.clone());
            }
            st.pending.insert(id, Pending::Call(tx));
        }
        let _guard = PendingGuard { inner: self, id };
        tracing::debug!(id, method, "-> request");
        let started = tokio::time::Instant::now();
        self.write_bounded(&wire::request_line(id, method, &params), method)
            .await?;
        let left = self.request_timeout.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(self.dead().unwrap_or(AcpError::Closed)),
            Err(_) => Err(AcpError::Timeout(method)),
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
                    Some(Pending::Prompt(session)) => {
                        let sink = match st.prompts.get(&session) {
                            Some((pid, _)) if *pid == id => st.prompts.remove(&session),
                            _ => None,
                        };
                        drop(st);
                        let outcome = result.and_then(|v| wire::stop_reason(&v));
                        tracing::debug!(id, session_id = %session, outcome = ?outcome, "<- prompt done");
                        if let Some((_, sink)) = sink {
                            sink.finish(outcome);
                        }
                    }
                    None => tracing::debug!(id, "response to no waiting request (timed out?)"),
                }
            }
            Incoming::Response { id: None, .. } => {
                tracing::debug!("response with a foreign id ignored");
            }
            Incoming::Notification { method, params } => {
                if method != "session/update" {
                    tracing::debug!(%method, "agent notification ignored");
                    return;
                }
                let Some(session) = wire::session_id(&params) else {
                    tracing::debug!("session/update without sessionId ignored");
                    return;
                };
                let Some(update) = params.get("update").and_then(wire::update) else {
                    tracing::debug!(
                        session_id = session,
                        "session/update without sessionUpdate ignored"
                    );
                    return;
                };
                let kind = params
                    .pointer("/update/sessionUpdate")
                    .and_then(serde_json::Value::as_str);
                match self.prompt_sink(session) {
                    Some(sink) => sink.push(update),
                    None => tracing::debug!(
                        session_id = session,
                        kind,
                        "update outside a prompt dropped"
                    ),
                }
            }
            Incoming::Request { id, method, params } => self.answer_request(id, method, params),
        }
    }

    fn prompt_sink(&self, session: &str) -> Option<Arc<PromptSink>> {
        self.lock().prompts.get(session).map(|(_, s)| s.clone())
    }

    /// Agent→client requests: interactions are refused and their session cancelled (GroupX
    /// §9); everything else (fs/*, terminal/*, extensions) is "method not found", since
    /// `initialize` advertised none of it.
    fn answer_request(self: &Arc<Self>, id: Value, method: String, params: Value) {
        let session = wire::session_id(&params).map(str::to_string);
        let mut lines = Vec::new();
        if wire::is_interaction(&method) {
            tracing::debug!(%method, session_id = ?session, "<- interaction request refused");
            lines.push(match wire::interaction_refusal(&method) {
                Some(result) => wire::result_line(&id, &result),
                None => wire::error_line(&id, METHOD_NOT_FOUND, "interactions are not supported"),
            });
            if let Some(session) = &session {
                if let Some(sink) = self.prompt_sink(session) {
                    sink.push(Update::UnexpectedInteraction {
                        method: method.clone(),
                    });
                }
                lines.push(wire::notification_line(
                    "session/cancel",
                    &json!({"sessionId": session}),
                ));
            }
        } else {
            tracing::debug!(%method, "<- unsupported agent request");
            lines.push(wire::error_line(&id, METHOD_NOT_FOUND, "method not found"));
        }
        // Written from a task: the reader must keep reading even if the agent is not reading
        // its stdin right now (both pipes full would deadlock). One write keeps the answer and
        // the cancel adjacent and in order.
        let inner = self.clone();
        tokio::spawn(async move {
            let _ = inner
                .write_bounded(&lines.concat(), "agent request answer")
                .await;
        });
    }
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
            tracing::debug!(error = %e, "waiting for agent failed");
            None
        }
    };
    inner.reaped.store(true, Ordering::Release);
    let _ = exit_tx.send(Some(code));
    tracing::debug!(pid = inner.pid, ?code, "ACP agent exited");
    tokio::time::sleep(REAPED_DRAIN).await;
    if inner.dead().is_none() {
        inner.fail(AcpError::Exited {
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
                        tracing::debug!(pid = inner.pid, error = %e, "agent broke the wire format");
                        inner.fail(e);
                        process::kill_group(inner.pid);
                        return;
                    }
                }
            }
            Ok(Line::TooLong) => {
                inner.fail(AcpError::LineTooLong);
                process::kill_group(inner.pid);
                return;
            }
            Ok(Line::Eof) => break,
            Err(e) => {
                tracing::debug!(pid = inner.pid, error = %e, "reading agent stdout failed");
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
    inner.fail(AcpError::Exited {
        code,
        stderr_tail: inner.stderr.text(),
    });
    if !inner.reaped.load(Ordering::Acquire) {
        process::kill_group(inner.pid);
    }
}
