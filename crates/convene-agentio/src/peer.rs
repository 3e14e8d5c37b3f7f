//! [`Peer`]: one child process and its JSON-RPC connection. The table of requests waiting for
//! an answer (with timeouts), bounded writes, the reader task, the reaper task, and failing
//! everything that waits once the connection is dead.
//!
//! A [`Protocol`] routes notifications, peer requests and the answers to its own kinds of
//! request, and keeps its running turns in the connection's state, under the same lock as the
//! request table (so "is the connection dead, is this turn free, register it" is one step).

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::{oneshot, watch};

use crate::jsonrpc::{Dialect, Incoming};
use crate::process::{self, Line, StderrTail};
use crate::{PeerError, MAX_LINE_BYTES};

/// After the child is reaped, how long the reader gets to drain stdout before the connection is
/// declared dead anyway (a grandchild may hold stdout open).
const REAPED_DRAIN: Duration = Duration::from_secs(2);

/// After stdout EOF, how long to wait for the exit code and the rest of stderr.
const EOF_EXIT_WAIT: Duration = Duration::from_secs(2);

/// One protocol spoken over a [`Peer`]: its error, its running turns, and its message routing.
pub trait Protocol: Sized + Send + Sync + 'static {
    /// The protocol crate's error; every [`PeerError`] maps onto it.
    type Error: From<PeerError> + Clone + fmt::Display + Send + 'static;
    /// The running turns, kept in [`ConnState::turns`].
    type Turns: Default + Send + 'static;
    /// Entries of requests whose answers the protocol handles itself ([`Pending::Own`]).
    type Pending: Send + 'static;
    /// How this protocol writes JSON-RPC.
    const DIALECT: Dialect;
    /// The peer as named in logs (`"ACP agent"`, `"codex app-server"`).
    const NAME: &'static str;

    /// The answer to a request entered as [`Pending::Own`]; `st` is the locked connection
    /// state, the entry already removed. Runs on the reader task: must never wait.
    fn on_response(
        peer: &Arc<Peer<Self>>,
        st: MutexGuard<'_, ConnState<Self>>,
        id: u64,
        pending: Self::Pending,
        result: Result<Value, Self::Error>,
    );

    /// A notification from the peer. Runs on the reader task: must never wait.
    fn on_notification(peer: &Arc<Peer<Self>>, method: String, params: Value);

    /// A request from the peer, which must be answered. Runs on the reader task: must never
    /// wait (answers are written from a spawned task).
    fn on_request(peer: &Arc<Peer<Self>>, id: Value, method: String, params: Value);

    /// The connection died with `err`: fail the running turns and the protocol's own waiting
    /// requests (both already taken out of the connection state).
    fn on_fail(turns: Self::Turns, pending: Vec<Self::Pending>, err: &Self::Error);
}

/// One entry of the request table.
pub enum Pending<P: Protocol> {
    /// A request whose caller waits in [`Peer::request`] for the result.
    Call(oneshot::Sender<Result<Value, P::Error>>),
    /// A request whose answer goes to [`Protocol::on_response`].
    Own(P::Pending),
}

/// What the connection's lock guards.
pub struct ConnState<P: Protocol> {
    /// Requests waiting for an answer, by id.
    pub pending: HashMap<u64, Pending<P>>,
    /// The protocol's running turns.
    pub turns: P::Turns,
    /// Set once the connection is unusable; every later call fails with it.
    pub dead: Option<P::Error>,
}

/// One child process and its JSON-RPC connection. Kept in an `Arc` by its owner and by the
/// reader and reaper tasks.
pub struct Peer<P: Protocol> {
    pid: u32,
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    next_id: AtomicU64,
    state: Mutex<ConnState<P>>,
    request_timeout: Duration,
    /// `Some(code)` once the child has been reaped.
    exit: watch::Receiver<Option<Option<i32>>>,
    reaped: AtomicBool,
    stderr: StderrTail,
}

/// Removes a request from `pending` if its caller stops waiting (timeout or dropped future).
struct PendingGuard<'a, P: Protocol> {
    peer: &'a Peer<P>,
    id: u64,
}

impl<P: Protocol> Drop for PendingGuard<'_, P> {
    fn drop(&mut self) {
        self.peer.lock().pending.remove(&self.id);
    }
}

impl<P: Protocol> Peer<P> {
    /// Starts `command` (see [`process::spawn`]) and its reader and reaper tasks; request ids
    /// count up from `first_id`. Every request is bounded by `request_timeout`.
    pub fn start(
        command: &[String],
        cwd: &Path,
        env: &[(String, String)],
        request_timeout: Duration,
        first_id: u64,
    ) -> Result<Arc<Peer<P>>, P::Error> {
        let spawned = process::spawn(command, cwd, env)?;
        tracing::debug!(pid = spawned.pid, ?command, peer = P::NAME, "spawned");
        let (stderr, stderr_closed) = StderrTail::collect(spawned.stderr);
        let (exit_tx, exit) = watch::channel(None);
        let peer = Arc::new(Peer {
            pid: spawned.pid,
            stdin: tokio::sync::Mutex::new(Some(spawned.stdin)),
            next_id: AtomicU64::new(first_id),
            state: Mutex::new(ConnState {
                pending: HashMap::new(),
                turns: P::Turns::default(),
                dead: None,
            }),
            request_timeout,
            exit,
            reaped: AtomicBool::new(false),
            stderr,
        });
        tokio::spawn(wait_child(peer.clone(), spawned.child, exit_tx));
        tokio::spawn(read_loop(peer.clone(), spawned.stdout, stderr_closed));
        Ok(peer)
    }

    /// The child's process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The bound on every request.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// A fresh request id (also usable as a generation counter: ids never repeat).
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Locks the connection state.
    pub fn lock(&self) -> MutexGuard<'_, ConnState<P>> {
        // The state stays consistent across a panic (single inserts/removes); keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Why the connection is unusable, if it is.
    pub fn dead(&self) -> Option<P::Error> {
        self.lock().dead.clone()
    }

    /// False once the process exited or the connection broke (or was shut down).
    pub fn is_alive(&self) -> bool {
        self.dead().is_none() && !self.reaped.load(Ordering::Acquire)
    }

    /// Marks the connection unusable and fails everything waiting on it (first reason wins).
    pub fn fail(&self, err: P::Error) {
        let mut st = self.lock();
        if st.dead.is_some() {
            return;
        }
        tracing::debug!(pid = self.pid, error = %err, peer = P::NAME, "connection failed");
        st.dead = Some(err.clone());
        let pending = std::mem::take(&mut st.pending);
        let turns = std::mem::take(&mut st.turns);
        drop(st);
        let mut own = Vec::new();
        for p in pending.into_values() {
            match p {
                Pending::Call(tx) => {
                    let _ = tx.send(Err(err.clone()));
                }
                Pending::Own(p) => own.push(p),
            }
        }
        P::on_fail(turns, own, &err);
    }

    /// Kills the child's whole process group.
    pub fn kill(&self) {
        process::kill_group(self.pid);
    }

    /// Writes one line under `request_timeout`. A write that cannot finish in time means the
    /// peer stopped reading stdin, and a half-written line corrupts the stream: the
    /// connection is failed and the process group killed.
    pub async fn write_bounded(&self, line: &[u8], method: &'static str) -> Result<(), P::Error> {
        match tokio::time::timeout(self.request_timeout, self.write(line)).await {
            Ok(r) => r,
            Err(_) => {
                self.fail(PeerError::Timeout(method).into());
                self.kill();
                Err(PeerError::Timeout(method).into())
            }
        }
    }

    async fn write(&self, line: &[u8]) -> Result<(), P::Error> {
        let mut stdin = self.stdin.lock().await;
        let Some(w) = stdin.as_mut() else {
            return Err(self.dead_or_closed());
        };
        let res = async {
            w.write_all(line).await?;
            w.flush().await
        }
        .await;
        res.map_err(|e| {
            tracing::debug!(pid = self.pid, error = %e, peer = P::NAME, "write failed");
            self.dead_or_closed()
        })
    }

    fn dead_or_closed(&self) -> P::Error {
        self.dead().unwrap_or_else(|| PeerError::Closed.into())
    }

    /// One request with `request_timeout` covering write and answer.
    pub async fn request(&self, method: &'static str, params: Value) -> Result<Value, P::Error> {
        self.request_with(method, params, Pending::Call).await
    }

    /// [`Peer::request`] with the table entry built by `pending` (which may be an
    /// [`Pending::Own`] that still answers through the sender it is given).
    pub async fn request_with(
        &self,
        method: &'static str,
        params: Value,
        pending: impl FnOnce(oneshot::Sender<Result<Value, P::Error>>) -> Pending<P>,
    ) -> Result<Value, P::Error> {
        let (tx, rx) = oneshot::channel();
        let id = self.next_id();
        {
            let mut st = self.lock();
            if let Some(dead) = &st.dead {
                return Err(dead.clone());
            }
            st.pending.insert(id, pending(tx));
        }
        let _guard = PendingGuard { peer: self, id };
        tracing::debug!(id, method, "-> request");
        let started = tokio::time::Instant::now();
        self.write_bounded(&P::DIALECT.request_line(id, method, &params), method)
            .await?;
        let left = self.request_timeout.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(self.dead_or_closed()),
            Err(_) => Err(PeerError::Timeout(method).into()),
        }
    }

    /// Closes the child's stdin, fails everything with `Closed`, waits up to `grace` for the
    /// child to exit, then kills its process group.
    pub async fn shutdown(&self, grace: Duration) {
        drop(self.stdin.lock().await.take());
        self.fail(PeerError::Closed.into());
        let mut exit = self.exit.clone();
        let exited = tokio::time::timeout(grace, exit.wait_for(Option::is_some))
            .await
            .is_ok();
        tracing::debug!(
            pid = self.pid,
            exited_in_grace = exited,
            peer = P::NAME,
            "shutting down"
        );
        // Also after a clean exit: helpers the child left in its group go too.
        self.kill();
        let _ = tokio::time::timeout(Duration::from_secs(1), exit.wait_for(Option::is_some)).await;
    }

    /// What the owner's `Drop` does: fail everything with `Closed`, and kill the process
    /// group unless the child was already reaped.
    pub fn close(&self) {
        self.fail(PeerError::Closed.into());
        if !self.reaped.load(Ordering::Acquire) {
            self.kill();
        }
    }

    /// Routes one parsed message (runs on the reader task; never waits for a consumer).
    fn dispatch(self: &Arc<Self>, msg: Incoming<P::Error>) {
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
                    Some(Pending::Own(p)) => P::on_response(self, st, id, p, result),
                    None => tracing::debug!(id, "response to no waiting request (timed out?)"),
                }
            }
            Incoming::Response { id: None, .. } => {
                tracing::debug!("response with a foreign id ignored");
            }
            Incoming::Notification { method, params } => P::on_notification(self, method, params),
            Incoming::Request { id, method, params } => P::on_request(self, id, method, params),
        }
    }

    fn exited_error(&self, code: Option<i32>) -> P::Error {
        PeerError::Exited {
            code,
            stderr_tail: self.stderr.text(),
        }
        .into()
    }
}

/// Owns the child: reaps it, publishes the exit code, and fails the connection if stdout
/// stays open after the exit (a leftover grandchild holding the pipe).
async fn wait_child<P: Protocol>(
    peer: Arc<Peer<P>>,
    mut child: Child,
    exit_tx: watch::Sender<Option<Option<i32>>>,
) {
    let code = match child.wait().await {
        Ok(status) => status.code(),
        Err(e) => {
            tracing::debug!(error = %e, peer = P::NAME, "waiting for the child failed");
            None
        }
    };
    peer.reaped.store(true, Ordering::Release);
    let _ = exit_tx.send(Some(code));
    tracing::debug!(pid = peer.pid, ?code, peer = P::NAME, "exited");
    tokio::time::sleep(REAPED_DRAIN).await;
    if peer.dead().is_none() {
        peer.fail(peer.exited_error(code));
        peer.kill();
    }
}

/// Reads stdout line by line until EOF or a wire error, then fails the connection.
async fn read_loop<P: Protocol>(
    peer: Arc<Peer<P>>,
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
                match P::DIALECT.parse_line(&line) {
                    Ok(msg) => peer.dispatch(msg),
                    Err(e) => {
                        tracing::debug!(pid = peer.pid, error = %e, peer = P::NAME, "broke the wire format");
                        peer.fail(e);
                        peer.kill();
                        return;
                    }
                }
            }
            Ok(Line::TooLong) => {
                peer.fail(PeerError::LineTooLong.into());
                peer.kill();
                return;
            }
            Ok(Line::Eof) => break,
            Err(e) => {
                tracing::debug!(pid = peer.pid, error = %e, peer = P::NAME, "reading stdout failed");
                break;
            }
        }
    }
    // stdout closed: report the exit code and stderr, when they come in time.
    let mut exit = peer.exit.clone();
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
    peer.fail(peer.exited_error(code));
    if !peer.reaped.load(Ordering::Acquire) {
        peer.kill();
    }
}
