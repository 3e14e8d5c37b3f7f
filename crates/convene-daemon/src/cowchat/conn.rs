//! One Cowchat connection: a reader loop that answers frames, a writer task that owns the
//! socket's write half, a heartbeat task, and one push task per joined room.
//!
//! Slow-reader policy: every outbound frame goes through one bounded queue
//! ([`OUT_QUEUE`] frames). Replies and pushes wait for space (nothing is dropped); pushes
//! are cursor-based, so a slow reader only lags and later catches up from the ledger, and
//! holds no more than the queue in memory. A write that makes no progress for
//! [`WRITE_STALL`] closes the connection; so does silence (no frame, not even `pong`) for
//! four heartbeat intervals (counted from when a ping could be queued, so a peer busy
//! draining a full queue is not cut off).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use crate::lines::{read_frame, Frame as Read};
use convene_cowchat::{error_frame, parse_frame, ErrorCode, Frame, OutFrame, WireError};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinHandle;

use super::{agents, coord, messages, rooms, webhooks, Face};
use crate::ipc::Trust;

/// Outbound frames queued per connection before producers wait.
pub(super) const OUT_QUEUE: usize = 1024;
/// A write blocked this long means the peer stopped reading: close.
pub(super) const WRITE_STALL: Duration = Duration::from_secs(30);
/// Socket buffer size each way. Small on purpose: idle connections are the common case and
/// large frames bypass the buffer anyway.
const IO_BUF: usize = 16 * 1024;
/// `send_message` frames of one connection in flight at once (pipelining).
const MAX_INFLIGHT: u32 = 256;

/// The connection's outbound side, shared by the reader, heartbeat and push tasks.
/// A queued line, and the push cursor to advance once it is written to the socket.
type Line = (Vec<u8>, Option<(Arc<AtomicU64>, u64)>);

pub(super) struct Outbox {
    tx: mpsc::Sender<Line>,
    n: AtomicU64,
    /// room id → how far this connection's push task has pushed (read by a reconnect that
    /// arrives before this connection's close was noticed).
    pub cursors: parking_lot::Mutex<HashMap<String, Arc<AtomicU64>>>,
    /// Ends the connection (the reader loop watches it).
    close: Arc<watch::Sender<bool>>,
}

impl Outbox {
    /// A fresh server frame id.
    pub(super) fn next_id(&self) -> String {
        format!("s{}", self.n.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Queues a line; false when the connection is gone.
    pub(super) async fn send(&self, line: Vec<u8>) -> bool {
        self.push_line(line, None).await
    }

    /// Queues a frame of `ftype` answering `reply_to` (or unsolicited).
    pub(super) async fn frame(
        &self,
        ftype: &str,
        reply_to: Option<&Value>,
        payload: Value,
    ) -> bool {
        let id = self.next_id();
        let line = OutFrame {
            id: &id,
            ftype,
            reply_to,
            payload,
        }
        .to_line();
        self.send(line).await
    }

    /// Queues an unsolicited frame unless the queue is full (transient pushes only).
    pub(super) fn try_frame(&self, ftype: &str, payload: Value) {
        let id = self.next_id();
        let line = OutFrame {
            id: &id,
            ftype,
            reply_to: None,
            payload,
        }
        .to_line();
        let _ = self.tx.try_send((line, None));
    }

    /// Appends a push frame (with a fresh id) to `buf`, to be queued with [`Outbox::push_line`].
    pub(super) fn append_push(&self, buf: &mut Vec<u8>, ftype: &str, payload: &[u8]) {
        let id = self.next_id();
        convene_cowchat::frame::write_raw_line(buf, &id, ftype, None, payload);
    }

    /// Queues lines built with [`Outbox::append_push`] as one write; `ack` moves a replay
    /// cursor once they are written.
    pub(super) async fn push_line(
        &self,
        lines: Vec<u8>,
        ack: Option<(Arc<AtomicU64>, u64)>,
    ) -> bool {
        self.tx.send((lines, ack)).await.is_ok()
    }

    /// Moves `cursor` to `seq` once everything queued before is written (a page of events
    /// with nothing for this agent still moves its replay point).
    pub(super) async fn ack(&self, cursor: Arc<AtomicU64>, seq: u64) -> bool {
        self.tx
            .send((Vec::new(), Some((cursor, seq))))
            .await
            .is_ok()
    }

    /// Queues `e` (unless the queue is full) and closes the connection after what is queued.
    pub(super) fn revoke(&self, e: &WireError) {
        let id = self.next_id();
        let _ = self.tx.try_send((error_frame(&id, None, e), None));
        self.close.send_replace(true);
    }

    /// An outbox connected to nothing (its frames are dropped): for unit tests.
    #[cfg(test)]
    pub(super) fn detached() -> Arc<Self> {
        let (tx, _rx) = mpsc::channel(1);
        let (close, _) = watch::channel(false);
        Arc::new(Self {
            tx,
            n: AtomicU64::new(0),
            cursors: parking_lot::Mutex::new(HashMap::new()),
            close: Arc::new(close),
        })
    }

    /// Queues an error frame.
    pub(super) async fn error(&self, reply_to: Option<&Value>, e: &WireError) -> bool {
        let id = self.next_id();
        self.send(error_frame(&id, reply_to, e)).await
    }
}

/// The registered agent of a connection.
#[derive(Debug, Clone)]
pub(super) struct Agent {
    /// Agent id (= actor id in every joined group).
    pub id: String,
    /// Display name (= actor title).
    pub name: String,
}

/// A room's push task and how far it has pushed.
pub(super) struct Sub {
    handle: JoinHandle<()>,
    cursor: Arc<AtomicU64>,
}

/// Per-connection state the handlers use.
pub(super) struct Session {
    pub face: Arc<Face>,
    pub out: Arc<Outbox>,
    pub trust: Trust,
    pub agent: Option<Agent>,
    /// The API-key principal (set by `register`).
    pub principal: String,
    /// This connection in the face's live registry (set by `register`).
    pub conn_id: Option<u64>,
    /// room id → push task.
    pub subs: HashMap<String, Sub>,
    /// Events owed once the current answer is queued (the caller sees its answer first).
    pub after: Vec<After>,
    inflight: Arc<Semaphore>,
    /// Validated `send_message` frames not yet handed to the ledger: (frame id, command).
    sends: Vec<Pending>,
    /// Resolves once the last queued run of sends is answered (the next run answers after it).
    last_run: Option<tokio::sync::oneshot::Receiver<()>>,
}

impl Session {
    /// Starts pushing `room_id` events after `cursor`, unless already subscribed.
    pub(super) fn subscribe(&mut self, room_id: &str, cursor: u64) {
        let Some(agent) = &self.agent else { return };
        // A finished task (the agent left the room, then joined again) is replaced.
        if self
            .subs
            .get(room_id)
            .is_some_and(|s| !s.handle.is_finished())
        {
            return;
        }
        let at = Arc::new(AtomicU64::new(cursor));
        let handle = super::push::spawn(
            self.face.clone(),
            self.out.clone(),
            room_id.to_string(),
            agent.id.clone(),
            at.clone(),
        );
        self.subs
            .insert(room_id.to_string(), Sub { handle, cursor: at });
    }

    /// Stops pushing `room_id`.
    pub(super) fn unsubscribe(&mut self, room_id: &str) {
        if let Some(s) = self.subs.remove(room_id) {
            s.handle.abort();
        }
        self.out.cursors.lock().remove(room_id);
    }

    /// The limits of this connection's key (as read at the key's latest `register`).
    pub(super) fn limits(&self) -> super::Limits {
        self.face
            .live
            .lock()
            .limits_of(&self.principal, &self.face.cfg.limits)
    }

    /// The registered agent's id ("" before `register`).
    pub(super) fn me(&self) -> &str {
        self.agent
            .as_ref()
            .map(|a| a.id.as_str())
            .unwrap_or_default()
    }
}

/// Serves one connection until the peer leaves, goes silent or stalls, or the daemon stops.
pub(super) async fn serve<S>(face: Arc<Face>, stream: S, trust: Trust)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (r, w) = tokio::io::split(stream);
    let mut r = BufReader::with_capacity(IO_BUF, r);
    let (tx, rx) = mpsc::channel(OUT_QUEUE);
    let (close_tx, mut close_rx) = watch::channel(false);
    let close_tx = Arc::new(close_tx);
    let out = Arc::new(Outbox {
        tx,
        n: AtomicU64::new(0),
        cursors: parking_lot::Mutex::new(HashMap::new()),
        close: close_tx.clone(),
    });
    let writer = tokio::spawn(write_loop(
        BufWriter::with_capacity(IO_BUF, w),
        rx,
        close_tx.clone(),
    ));
    let start = Instant::now();
    let last_rx = Arc::new(AtomicU64::new(0));
    let heartbeat = tokio::spawn(heartbeat_loop(
        face.d.heartbeat,
        out.clone(),
        last_rx.clone(),
        start,
        close_tx.clone(),
    ));
    let mut s = Session {
        face: face.clone(),
        out: out.clone(),
        trust,
        agent: None,
        principal: String::new(),
        conn_id: None,
        subs: HashMap::new(),
        after: Vec::new(),
        inflight: Arc::new(Semaphore::new(MAX_INFLIGHT as usize)),
        sends: Vec::new(),
        last_run: None,
    };
    let mut shutdown = face.d.shutdown_rx();
    let mut buf = Vec::with_capacity(4096);
    loop {
        // Cancelling `read_frame` loses a partial line; that only happens when closing.
        let got = tokio::select! {
            g = read_frame(&mut r, &mut buf, convene_cowchat::MAX_FRAME_BYTES) => g,
            _ = close_rx.changed() => break,
            _ = shutdown.changed() => break,
        };
        last_rx.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
        match got {
            Err(_) | Ok(Read::Eof) => break,
            Ok(Read::TooLarge) => {
                let e = WireError::new(
                    ErrorCode::FrameTooLarge,
                    format!("frame exceeds {} bytes", convene_cowchat::MAX_FRAME_BYTES),
                );
                if !out.error(None, &e).await {
                    break;
                }
            }
            Ok(Read::Line) if buf.iter().all(u8::is_ascii_whitespace) => {}
            Ok(Read::Line) => match parse_frame(&buf) {
                Err(_) if crate::lines::is_http_request(&buf) => {
                    // A web page can make a browser send this to a loopback port, with NDJSON
                    // lines as its body: serving them would let any site act as a keyless
                    // local agent. Close before reading the body.
                    let e = WireError::new(
                        ErrorCode::InvalidFrame,
                        "an HTTP request is not a Cowchat frame (WebSocket: GET /ws on the --cowchat-ws port); closing",
                    );
                    let _ = out.error(None, &e).await;
                    break;
                }
                Err(e) => {
                    if !out.error(e.id.as_ref(), &e.to_wire()).await {
                        break;
                    }
                }
                Ok(f) => {
                    if !handle(&mut s, f).await {
                        break;
                    }
                }
            },
        }
        // Collected sends go to the ledger before this loop waits for the socket, whatever
        // the frame that ended the buffered burst was (a pong, a bad line, …).
        if !s.sends.is_empty() && !r.buffer().contains(&b'\n') && !flush_sends(&mut s).await {
            break;
        }
    }
    let mut cursors = HashMap::new();
    for (room, sub) in s.subs.drain() {
        sub.handle.abort();
        cursors.insert(room, sub.cursor.load(Ordering::Relaxed));
    }
    heartbeat.abort();
    if let (Some(a), Some(c)) = (&s.agent, s.conn_id) {
        let last = face.live.lock().detach(c, cursors);
        if last {
            super::agents::went_offline(&face, &a.id).await;
        }
    }
    // In-flight sends hold the outbox; let them answer, then the writer drains and ends.
    let _ = s.inflight.acquire_many(MAX_INFLIGHT).await;
    drop(s);
    drop(out);
    let _ = writer.await;
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut w: BufWriter<W>,
    mut rx: mpsc::Receiver<Line>,
    close: Arc<watch::Sender<bool>>,
) {
    let mut acks = Vec::new();
    while let Some(first) = rx.recv().await {
        let batch = async {
            w.write_all(&first.0).await?;
            acks.extend(first.1);
            // Coalesce whatever is already queued into one flush.
            while let Ok(more) = rx.try_recv() {
                w.write_all(&more.0).await?;
                acks.extend(more.1);
            }
            w.flush().await
        };
        match tokio::time::timeout(WRITE_STALL, batch).await {
            Ok(Ok(())) => {
                for (cursor, seq) in acks.drain(..) {
                    cursor.fetch_max(seq, Ordering::Relaxed);
                }
            }
            _ => break,
        }
    }
    close.send_replace(true);
}

async fn heartbeat_loop(
    hb: Duration,
    out: Arc<Outbox>,
    last_rx: Arc<AtomicU64>,
    start: Instant,
    close: Arc<watch::Sender<bool>>,
) {
    let ms = |i: Instant| i.duration_since(start).as_millis() as u64;
    let mut tick = tokio::time::interval(hb);
    tick.tick().await;
    // Silence is counted from the later of the peer's last frame and the moment a delayed
    // ping finally got queued: a peer whose queue was full could not have seen our pings.
    let mut grace = 0u64;
    loop {
        tick.tick().await;
        // The reader may store a newer time between these loads: saturate, never wrap.
        let since = last_rx.load(Ordering::Relaxed).max(grace);
        if ms(Instant::now()).saturating_sub(since) > 4 * hb.as_millis() as u64 {
            close.send_replace(true);
            return;
        }
        let asked = Instant::now();
        if !out.frame("ping", None, json!({})).await {
            return;
        }
        if asked.elapsed() > hb {
            grace = ms(Instant::now());
        }
    }
}

/// Answers one frame. Returns false when the connection must close.
async fn handle(s: &mut Session, f: Frame) -> bool {
    let rid = f.id.clone();
    let rid = rid.as_ref();
    if f.ftype == "pong" || (f.reply_to.is_some() && f.ftype != "error") {
        return true; // an answer to our ping: liveness was recorded on read
    }
    if f.ftype == "send_message" && s.agent.is_some() {
        return send_pipelined(s, f).await;
    }
    // Everything else observes the effects of earlier sends on this connection.
    if !flush_sends(s).await {
        return false;
    }
    if let Ok(all) = s.inflight.acquire_many(MAX_INFLIGHT).await {
        drop(all);
    }
    if f.ftype == "ping" {
        return s.out.frame("pong", rid, json!({})).await;
    }
    if s.agent.is_none() {
        let res = match f.ftype.as_str() {
            "register" => agents::register(s, f.payload).await,
            _ => Err(WireError::new(ErrorCode::NotRegistered, "register first")),
        };
        let ok = reply(&s.out, rid, res).await;
        settle_turns(s);
        return ok;
    }
    {
        let me = s.me().to_string();
        s.face.live.lock().touch(&me);
    }
    let p = f.payload;
    let res = match f.ftype.as_str() {
        "register" => Err(WireError::new(
            ErrorCode::AlreadyRegistered,
            "this connection is already registered",
        )),
        "create_room" => rooms::create_room(s, p).await,
        "join_room" => rooms::join_room(s, p).await,
        "leave_room" => rooms::leave_room(s, p).await,
        "rename_room" => rooms::rename_room(s, p).await,
        "destroy_room" => rooms::destroy_room(s, p).await,
        "list_rooms" => rooms::list_rooms(s, p).await,
        "room_info" => rooms::room_info(s, p).await,
        "list_agents" => agents::list_agents(s, p),
        "set_typing" => agents::set_typing(s, p),
        "set_presence" => agents::set_presence(s, p),
        "room_tip" => messages::room_tip(s, p).await,
        "thinking" => messages::thinking(s, p).await,
        "create_vote" => coord::votes::create_vote(s, p).await,
        "cast_vote" => coord::votes::cast_vote(s, p).await,
        "get_vote_status" => coord::votes::get_vote_status(s, p).await,
        "list_votes" => coord::votes::list_votes(s, p).await,
        "elect_leader" => coord::elections::elect_leader(s, p).await,
        "decline_election" => coord::elections::decline_election(s, p).await,
        "decision" => coord::elections::decision(s, p).await,
        "assign_task" => coord::tasks::assign_task(s, p).await,
        "update_task" => coord::tasks::update_task(s, p).await,
        "list_tasks" => {
            let ok = match coord::tasks::list_tasks(s, p).await {
                Ok(v) => s.out.frame("task_list", rid, v).await,
                Err(e) => s.out.error(rid, &e).await,
            };
            settle_turns(s);
            return ok;
        }
        "get_history" => {
            return match messages::get_history(s, p, rid).await {
                Ok(line) => s.out.send(line).await,
                Err(e) => s.out.error(rid, &e).await,
            }
        }
        "subscribe" => webhooks::subscribe(s, p).await,
        "unsubscribe" => webhooks::unsubscribe(s, p).await,
        "list_subscriptions" => webhooks::list_subscriptions(s, p).await,
        "enable_subscription" => webhooks::enable_subscription(s, p).await,
        t => Err(WireError::new(
            ErrorCode::UnknownType,
            format!("unknown frame type: {t}"),
        )),
    };
    let ok = reply(&s.out, rid, res).await;
    settle_turns(s);
    ok
}

/// Something a handler owes once its answer is queued.
pub(super) enum After {
    /// A turn-token rule: (room, agent, reason).
    Turn(String, String, &'static str),
    /// Rule 2 for a committed message: (room, sender, its seq).
    Sent((String, String, u64)),
    /// A transient push to these connections.
    Push(Vec<Arc<Outbox>>, &'static str, Value),
    /// Work that must start after the answer (so ledger pushes it causes follow it).
    Run(Box<dyn FnOnce() + Send + Sync>),
}

impl After {
    /// Does what was owed.
    pub(super) fn apply(self, face: &Face) {
        match self {
            After::Turn(room, agent, reason) => {
                super::live::turn_event(face, &room, &agent, reason)
            }
            After::Sent(t) => super::messages::apply_turn(face, Some(t)),
            After::Push(outs, t, v) => super::live::fan_out(&outs, t, &v),
            After::Run(f) => f(),
        }
    }
}

/// Applies what a handler left for after its answer.
fn settle_turns(s: &mut Session) {
    for a in std::mem::take(&mut s.after) {
        a.apply(&s.face);
    }
}

/// Sends the `ok` (or `error`) answer of a request.
pub(super) async fn reply(
    out: &Outbox,
    rid: Option<&Value>,
    res: Result<Value, WireError>,
) -> bool {
    match res {
        Ok(v) => out.frame("ok", rid, v).await,
        Err(e) => out.error(rid, &e).await,
    }
}

/// Most `send_message` frames handed to the ledger as one run.
const MAX_RUN: usize = 128;

/// A collected `send_message` frame: its id, and its command or why it was refused.
type Pending = (Option<Value>, Result<convene_core::Command, WireError>);

/// `send_message` is validated in frame order and collected while the client's next frame
/// is already buffered; the run goes to the ledger in one hand-off (one transaction, one
/// fsync) and is answered off the reader loop, so a pipelining client shares group commits
/// and wake-ups instead of paying them per frame. Answers keep frame order, refusals
/// included: each run is answered after the one before it.
async fn send_pipelined(s: &mut Session, f: Frame) -> bool {
    let cmd = messages::send_command(s, f.payload);
    s.sends.push((f.id, cmd));
    // The reader loop flushes when no whole frame is left buffered.
    if s.sends.len() < MAX_RUN {
        return true;
    }
    flush_sends(s).await
}

/// Hands the collected sends to the ledger, as one job.
async fn flush_sends(s: &mut Session) -> bool {
    if s.sends.is_empty() {
        return true;
    }
    let run: Vec<Pending> = std::mem::take(&mut s.sends);
    let mut cmds = Vec::with_capacity(run.len());
    let mut rids = Vec::with_capacity(run.len());
    for (rid, c) in run {
        rids.push((rid, c.as_ref().err().cloned()));
        if let Ok(c) = c {
            cmds.push(c);
        }
    }
    let n = rids.len() as u32;
    let Ok(permit) = s.inflight.clone().acquire_many_owned(n).await else {
        return false;
    };
    // The run before this one, if still unanswered: this run's answers wait for its.
    let prev = s.last_run.take();
    let ledger = s.face.d.ledger.clone();
    // A lone send from a client with nothing unanswered (the sequential case) commits here
    // when the ledger is idle: no hand-off to the writer thread and back. A longer run is
    // queued, so this loop reads and checks the next frames while the run's fsync is under way.
    if n == 1 && cmds.len() == 1 && s.inflight.available_permits() as u32 + n == MAX_INFLIGHT {
        let mut one = cmds.pop();
        if let Some(r) = ledger.try_inline(&mut one) {
            drop(permit);
            return answer_sends(&s.face, &s.out, rids, Ok(vec![r])).await;
        }
        cmds.extend(one);
    }
    // The first poll enqueues the run, fixing its order: the ledger queue is a FIFO and its
    // bounded sender is fair, so even a full queue keeps frame order. Unconstrained, because
    // tokio's cooperative budget could otherwise make that first poll yield before
    // enqueueing, letting a later frame overtake this run.
    let empty = cmds.is_empty();
    let mut fut = Box::pin(tokio::task::unconstrained(async move {
        if empty {
            return Ok(Vec::new());
        }
        match ledger.submit_many(cmds).await {
            Ok(rx) => rx.await.map_err(|_| crate::ledger::stopped()),
            Err(e) => Err(e),
        }
    }));
    let first = std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await;
    let (out, face) = (s.out.clone(), s.face.clone());
    let (done, done_rx) = tokio::sync::oneshot::channel::<()>();
    s.last_run = Some(done_rx);
    let answer = async move |r| {
        if let Some(p) = prev {
            let _ = p.await;
        }
        let ok = answer_sends(&face, &out, rids, r).await;
        drop(done);
        drop(permit);
        ok
    };
    match first {
        Poll::Ready(r) => answer(r).await,
        Poll::Pending => {
            tokio::spawn(async move { answer(fut.await).await });
            true
        }
    }
}

/// Queues the answers of a run of sends as one write (a refused frame gets its error in its
/// place), then moves the turn token once per room (every send of one agent moves it to the
/// same next member).
async fn answer_sends(
    face: &Face,
    out: &Outbox,
    rids: Vec<(Option<Value>, Option<WireError>)>,
    res: Result<Vec<crate::ledger::Answer>, convene_core::CoreError>,
) -> bool {
    let mut lines = Vec::with_capacity(rids.len() * 320);
    let mut turns: Vec<(String, String, u64)> = Vec::new();
    let (mut res, failed) = match res {
        Ok(v) => (v.into_iter(), None),
        Err(e) => (Vec::new().into_iter(), Some(e)),
    };
    for (rid, refused) in &rids {
        let id = out.next_id();
        let r = match (refused, &failed) {
            (Some(e), _) => Err(e.clone()),
            (None, Some(e)) => Err(super::wire(e.clone())),
            (None, None) => res
                .next()
                .unwrap_or_else(|| Err(crate::ledger::stopped()))
                .map_err(super::wire)
                .and_then(messages::sent_payload),
        };
        match r {
            Ok((v, turn)) => {
                convene_cowchat::frame::write_raw_line(&mut lines, &id, "ok", rid.as_ref(), &v);
                if let Some(t) = turn {
                    turns.retain(|x| x.0 != t.0);
                    turns.push(t);
                }
            }
            Err(e) => lines.extend(error_frame(&id, rid.as_ref(), &e)),
        }
    }
    let ok = out.send(lines).await;
    for t in turns {
        messages::apply_turn(face, Some(t));
    }
    ok
}
