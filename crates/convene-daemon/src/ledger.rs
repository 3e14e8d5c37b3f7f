//! The ledger service: one writer thread owns the engine and the store's write connection.
//!
//! Run loop: take the first queued command, drain up to `MAX_BATCH` more, execute each through
//! the engine against the open transaction, write events and projections, commit once (one
//! fsync for the whole batch: group commit), and only then publish to the hub and answer.
//! A storage failure rolls the batch back, reloads the engine from disk and fails every
//! command of the batch: nothing unacknowledged is visible, nothing acknowledged is lost.

use std::path::Path;
use std::sync::Arc;

use convene_core::{Command, CoreError, DeliveryState, Engine, Event, Limits, Outcome};
use convene_store::{Readers, Writer, WriterView};
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::{Mutex, RwLock};
use tokio::sync::{mpsc, oneshot, watch};

use crate::hub::{FeedEvent, Hub};

/// Most commands committed in one transaction.
const MAX_BATCH: usize = 512;
/// Recent events each group keeps in memory for subscribers and history reads.
const HUB_EVENTS: usize = 16_384;
/// About how many bytes the recent-event buffers of all groups hold together.
const HUB_BYTES: usize = 64 << 20;
/// Commands waiting for the writer before senders are told to back off.
pub const QUEUE_DEPTH: usize = 8192;

/// A committed command's result.
#[derive(Debug)]
pub struct Committed {
    /// Events appended, with their stored JSON.
    pub events: Vec<(Event, String)>,
    /// The same events as subscribers see them (a face's memo made while answering is
    /// shared with its pushes).
    pub feed: Vec<Arc<FeedEvent>>,
    /// For an idempotent duplicate: the original event.
    pub existing: Option<Event>,
}

impl Committed {
    /// The event the command is about.
    pub fn primary(&self) -> Option<&Event> {
        self.existing
            .as_ref()
            .or_else(|| self.events.first().map(|(e, _)| e))
    }
}

/// One command's answer.
pub type Answer = Result<Committed, CoreError>;

/// Queued work: one command, or a run of one caller's commands answered together (a
/// pipelining client's buffered frames: one hand-off and one wake-up for all of them).
// `One` is the common case and was this size before `Many` existed; boxing it would add an
// allocation per command.
#[allow(clippy::large_enum_variant)]
enum Job {
    One(Command, oneshot::Sender<Answer>),
    Many(Vec<Command>, oneshot::Sender<Vec<Answer>>),
}

impl Job {
    fn len(&self) -> usize {
        match self {
            Job::One(..) => 1,
            Job::Many(c, _) => c.len(),
        }
    }
}

/// Handle to the ledger: cheap to clone.
#[derive(Clone)]
pub struct Ledger {
    tx: mpsc::Sender<Job>,
    engine: Arc<RwLock<Engine>>,
    readers: Arc<Readers>,
    hub: Arc<Hub>,
    core: Arc<Mutex<Core>>,
    /// Commands queued to the writer thread and not yet answered.
    pending: Arc<AtomicUsize>,
    /// Automatic deliveries a previous process owed and never claimed (group, message,
    /// actor), found at open, taken once by the runtime.
    recovery: Arc<Mutex<Vec<(String, String, String)>>>,
    /// The engine revision after the last committed batch (see [`Ledger::revisions`]).
    revisions: watch::Receiver<u64>,
}

/// What a committing party needs: the write connection, and where committed events go.
struct Core {
    writer: Writer,
    engine: Arc<RwLock<Engine>>,
    hub: Arc<Hub>,
    committed: mpsc::UnboundedSender<Arc<Vec<Event>>>,
    /// Told the engine revision after each batch that moved it.
    revision: watch::Sender<u64>,
}

/// Receives every committed batch's events (for runtime delivery).
pub type CommitFeed = mpsc::UnboundedReceiver<Arc<Vec<Event>>>;

impl Ledger {
    /// The deliveries [`due_to_recover`] found at open; empty after the first call.
    pub fn take_recovery(&self) -> Vec<(String, String, String)> {
        std::mem::take(&mut *self.recovery.lock())
    }

    /// Opens the store at `db`, loads the engine, settles claims left by a previous process
    /// (§6.4) and starts the writer thread.
    pub fn open(db: &Path, limits: Limits) -> Result<(Self, CommitFeed), CoreError> {
        let mut writer = convene_store::open_writer(db)?;
        let groups = writer.load_groups()?;
        let mut engine = Engine::new(groups, limits);
        settle_claims(&mut writer, &mut engine)?;
        let recovery = due_to_recover(&mut writer, &engine)?;
        // One read connection up front; more open on demand when reads overlap, and the pool
        // keeps them (an idle daemon pays for one page cache and one parsed schema, not four).
        let readers = Arc::new(convene_store::open_readers(db, 1)?);
        let alive = Arc::new(std::sync::atomic::AtomicBool::new(true));
        convene_store::spawn_checkpointer(
            db,
            std::time::Duration::from_millis(250),
            alive.clone(),
        )?;
        let hub = Arc::new(Hub::new(HUB_EVENTS, HUB_BYTES));
        for g in engine.groups() {
            hub.feed(&g.group_id, g.last_seq);
        }
        let (revision, revisions) = watch::channel(engine.revision());
        let engine = Arc::new(RwLock::new(engine));
        let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
        let (ctx, crx) = mpsc::unbounded_channel();
        let core = Arc::new(Mutex::new(Core {
            writer,
            engine: engine.clone(),
            hub: hub.clone(),
            committed: ctx,
            revision,
        }));
        let pending = Arc::new(AtomicUsize::new(0));
        let ledger = Self {
            tx,
            engine,
            readers,
            hub,
            core: core.clone(),
            pending: pending.clone(),
            recovery: Arc::new(Mutex::new(recovery)),
            revisions,
        };
        std::thread::Builder::new()
            .name("convene-writer".into())
            .spawn(move || {
                writer_loop(&core, &pending, rx);
                alive.store(false, std::sync::atomic::Ordering::Relaxed);
            })
            .map_err(|e| CoreError::storage(format!("cannot start writer: {e}")))?;
        Ok((ledger, crx))
    }

    /// Queues a command in order; the receiver resolves once it is durable (or refused).
    /// Commands queued by one caller are executed in the order they were queued.
    pub async fn submit(
        &self,
        cmd: Command,
    ) -> Result<oneshot::Receiver<Result<Committed, CoreError>>, CoreError> {
        let (reply, rx) = oneshot::channel();
        self.enqueue(Job::One(cmd, reply)).await?;
        Ok(rx)
    }

    /// Queues `cmds` as one unit, in order; the receiver resolves with one answer per
    /// command once they are durable (or refused). They commit in the same transaction unless
    /// the batch limit splits them, and nothing queued later commits before them.
    pub async fn submit_many(
        &self,
        cmds: Vec<Command>,
    ) -> Result<oneshot::Receiver<Vec<Answer>>, CoreError> {
        let (reply, rx) = oneshot::channel();
        self.enqueue(Job::Many(cmds, reply)).await?;
        Ok(rx)
    }

    async fn enqueue(&self, job: Job) -> Result<(), CoreError> {
        self.pending.fetch_add(1, Ordering::AcqRel);
        if self.tx.send(job).await.is_err() {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            return Err(stopped());
        }
        Ok(())
    }

    /// Commits the command on the calling thread when nothing is queued or committing (the
    /// sequential case: no hand-off to the writer thread and back, which on a small VM costs
    /// as much as the work). Takes the command out of `cmd` only then; when the ledger is
    /// busy it returns `None` and leaves `cmd` to be queued. Blocks the caller for the fsync.
    pub fn try_inline(&self, cmd: &mut Option<Command>) -> Option<Result<Committed, CoreError>> {
        if self.pending.load(Ordering::Acquire) != 0 {
            return None;
        }
        let mut core = self.core.try_lock()?;
        // Re-checked under the lock: queued commands go first, so order is kept.
        if self.pending.load(Ordering::Acquire) != 0 {
            return None;
        }
        let (reply, mut rx) = oneshot::channel();
        core.process(vec![Job::One(cmd.take()?, reply)]);
        drop(core);
        Some(rx.try_recv().unwrap_or_else(|_| Err(stopped())))
    }

    /// Executes a command; resolves once it is durable (or refused).
    pub async fn execute(&self, cmd: Command) -> Answer {
        // Always queued: callers that know they are sequential use `try_inline` first, and a
        // pipelining caller must not commit one command per fsync on its own thread.
        self.submit(cmd).await?.await.map_err(|_| stopped())?
    }

    /// Read access to committed engine state (groups, actors, settings).
    pub fn engine(&self) -> parking_lot::RwLockReadGuard<'_, Engine> {
        self.engine.read()
    }

    /// Read connections to the store.
    pub fn readers(&self) -> &Arc<Readers> {
        &self.readers
    }

    /// The next committed events of a group after `cursor` (at most `max`): from the hub's
    /// memory buffer, or from the store when the subscriber fell behind it. Empty when the
    /// subscriber is caught up. Every face's subscriptions page through this.
    pub async fn page_after(
        &self,
        feed: &crate::hub::Feed,
        group_id: &str,
        cursor: u64,
        max: usize,
    ) -> Result<Vec<Arc<FeedEvent>>, CoreError> {
        if let Some(evs) = feed.after(cursor, max) {
            return Ok(evs);
        }
        let (readers, gid) = (self.readers.clone(), group_id.to_string());
        let page =
            tokio::task::spawn_blocking(move || readers.events_after(&gid, cursor, max, &[]))
                .await
                .map_err(|e| CoreError::new(convene_core::ErrorCode::Internal, e.to_string()))??;
        Ok(page
            .into_iter()
            .map(|r| Arc::new(FeedEvent::new(r.seq, r.kind, r.json)))
            .collect())
    }

    /// The subscriber hub.
    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    /// Changes to the engine revision (a group created, changed or deleted, from any face),
    /// published after the batch that moved it is durable and visible through
    /// [`engine`](Self::engine): a face that derives state from groups follows this with
    /// [`Engine::changed_since`] instead of finding out on its next use.
    pub fn revisions(&self) -> watch::Receiver<u64> {
        self.revisions.clone()
    }
}

/// The error for a writer that is gone.
pub fn stopped() -> CoreError {
    CoreError::new(
        convene_core::ErrorCode::DaemonUnavailable,
        "ledger writer stopped",
    )
}

/// Runtime recovery (§6.4): the automatic deliveries a previous process recorded as due with
/// their message but never claimed (it ended in between). Those that can still be made (the
/// group runs, the actor is the same, enabled and driven) are returned, in ledger order;
/// the rest are forgotten. Runs at startup, after [`settle_claims`].
fn due_to_recover(
    writer: &mut Writer,
    engine: &Engine,
) -> Result<Vec<(String, String, String)>, CoreError> {
    let due = writer.due_deliveries()?;
    if due.is_empty() {
        return Ok(due);
    }
    let (keep, drop): (Vec<_>, Vec<_>) = due.into_iter().partition(|(g, _, a)| {
        engine
            .group(g)
            .is_some_and(|g| convene_core::engine::drives(g, a))
    });
    if !drop.is_empty() {
        writer.drop_due(&drop)?;
    }
    tracing::warn!(
        recovered = keep.len(),
        dropped = drop.len(),
        "automatic deliveries owed by the previous process"
    );
    Ok(keep)
}

/// Settles every `claimed` delivery of a previous process to `ambiguous`, before anything
/// else runs (§6.4). Runs synchronously at startup.
fn settle_claims(writer: &mut Writer, engine: &mut Engine) -> Result<(), CoreError> {
    let claimed = writer.claimed_deliveries()?;
    if claimed.is_empty() {
        return Ok(());
    }
    let tx = writer.begin()?;
    for (group_id, delivery_id) in &claimed {
        let cmd = Command::DeliveryResult {
            group_id: group_id.clone(),
            delivery_id: delivery_id.clone(),
            state: DeliveryState::Ambiguous,
            reason: Some("daemon stopped after claim; handoff cannot be proven".into()),
        };
        let view = WriterView::new(&tx);
        let out = engine.execute(&view, cmd, time::OffsetDateTime::now_utc())?;
        convene_store::apply(&tx, &out)?;
    }
    tx.commit().map_err(|e| CoreError::storage(e.to_string()))?;
    tracing::warn!(
        count = claimed.len(),
        "settled claimed deliveries to ambiguous at startup"
    );
    Ok(())
}

/// Waits for the next command. Polls briefly before sleeping: a sequential client's next
/// request usually arrives within tens of microseconds, and waking a parked thread on a VM
/// costs about as much.
fn next_job(rx: &mut mpsc::Receiver<Job>) -> Option<Job> {
    let until = std::time::Instant::now() + std::time::Duration::from_micros(SPIN_MICROS);
    loop {
        match rx.try_recv() {
            Ok(j) => return Some(j),
            Err(mpsc::error::TryRecvError::Disconnected) => return None,
            Err(mpsc::error::TryRecvError::Empty) if std::time::Instant::now() < until => {
                std::thread::yield_now()
            }
            Err(mpsc::error::TryRecvError::Empty) => return rx.blocking_recv(),
        }
    }
}

/// How long the writer polls for work before parking.
const SPIN_MICROS: u64 = 100;

/// A command's result inside a batch, before it is handed to its caller.
type Done = Result<(Outcome, Vec<String>), CoreError>;

fn writer_loop(core: &Mutex<Core>, pending: &AtomicUsize, mut rx: mpsc::Receiver<Job>) {
    let mut last_checkpoint = std::time::Instant::now();
    while let Some(first) = next_job(&mut rx) {
        let mut batch = Vec::with_capacity(16);
        let mut cmds = first.len();
        batch.push(first);
        while cmds < MAX_BATCH {
            match rx.try_recv() {
                Ok(j) => {
                    cmds += j.len();
                    batch.push(j);
                }
                Err(_) => break,
            }
        }
        let n = batch.len();
        core.lock().process(batch);
        pending.fetch_sub(n, Ordering::AcqRel);
        // Under steady load the checkpointer thread never finds a gap between this thread's
        // transactions, so the WAL would never start over (and would grow without bound).
        // Now and then, between two batches (every caller already answered), this thread
        // checkpoints itself: the checkpointer has copied nearly everything, so this is short,
        // and the next transaction then restarts the WAL from its beginning.
        if last_checkpoint.elapsed() >= WRITER_CHECKPOINT_EVERY {
            if let Err(e) = core
                .lock()
                .writer
                .checkpoint_restart(WRITER_CHECKPOINT_WAIT)
            {
                tracing::debug!(error = %e, "checkpoint between batches did not finish");
            }
            last_checkpoint = std::time::Instant::now();
        }
    }
    let _ = core.lock().writer.checkpoint();
}

/// How often the writer thread checkpoints between its own batches.
const WRITER_CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_millis(250);
/// How long that checkpoint may wait for readers of old frames.
const WRITER_CHECKPOINT_WAIT: std::time::Duration = std::time::Duration::from_millis(5);

impl Core {
    /// Executes one batch in one transaction, publishes what committed, answers every job.
    fn process(&mut self, batch: Vec<Job>) {
        let (writer, engine, hub, committed, revision) = (
            &mut self.writer,
            &self.engine,
            &self.hub,
            &self.committed,
            &self.revision,
        );
        let mut cmds = Vec::with_capacity(batch.len());
        let mut replies = Vec::with_capacity(batch.len());
        for job in batch {
            match job {
                Job::One(c, r) => {
                    cmds.push(c);
                    replies.push(Reply::One(r));
                }
                Job::Many(cs, r) => {
                    replies.push(Reply::Many(cs.len(), r));
                    cmds.extend(cs);
                }
            }
        }
        let mut eng = engine.write();
        let done = match run_batch(writer, &mut eng, cmds) {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(error = %e, "batch failed; reloading state from the store");
                match writer.load_groups() {
                    Ok(groups) => {
                        let limits = eng.limits().clone();
                        *eng = Engine::new(groups, limits);
                    }
                    Err(le) => tracing::error!(error = %le, "reload failed"),
                }
                let now = eng.revision();
                revision.send_if_modified(|r| std::mem::replace(r, now) != now);
                drop(eng);
                for r in replies {
                    r.fail(&e);
                }
                return;
            }
        };
        // Durable: publish, then answer.
        let mut all = Vec::new();
        let mut per_group: Vec<(String, Vec<Arc<FeedEvent>>)> = Vec::new();
        let mut feeds = Vec::with_capacity(done.len());
        let mut deleted = Vec::new();
        // Per group of the batch: does any member have a runtime Convene drives?
        let mut driven: Vec<(&str, bool)> = Vec::new();
        for (out, jsons) in done.iter().flatten() {
            for c in &out.changes {
                if let convene_core::Change::GroupDelete(g) = c {
                    deleted.push(g.clone());
                }
            }
            let mut mine = Vec::with_capacity(out.events.len());
            for (e, j) in out.events.iter().zip(jsons) {
                let fe = Arc::new(FeedEvent::new(e.seq, e.kind.clone(), j.clone()));
                mine.push(fe.clone());
                match per_group.iter_mut().find(|(g, _)| *g == e.group_id) {
                    Some((_, v)) => v.push(fe),
                    None => per_group.push((e.group_id.clone(), vec![fe])),
                }
                // Only prompt-delivery messages in groups with a driven runtime concern the
                // runtime worker (Cowchat rooms have none: no clone, no wake-up per message);
                // imported messages are history, delivered (or not) where they were sent.
                if !out.replayed
                    && e.kind == convene_core::event::kinds::CHAT_MESSAGE
                    && matches!(e.data_str("message_mode"), Some("send" | "request_reply"))
                {
                    let has = match driven.iter().find(|(g, _)| *g == e.group_id) {
                        Some((_, h)) => *h,
                        None => {
                            let h = eng.group(&e.group_id).is_some_and(|g| {
                                g.actors.iter().any(|a| {
                                    a.enabled && crate::runtime::transport_for(&a.runtime).is_some()
                                })
                            });
                            driven.push((&e.group_id, h));
                            h
                        }
                    };
                    if has {
                        all.push(e.clone());
                    }
                }
            }
            feeds.push(mine);
        }
        let rev = eng.revision();
        drop(eng);
        for (g, evs) in per_group {
            hub.publish(&g, evs);
        }
        for g in deleted {
            hub.remove(&g);
        }
        if !all.is_empty() {
            let _ = committed.send(Arc::new(all));
        }
        revision.send_if_modified(|r| std::mem::replace(r, rev) != rev);
        let mut feeds = feeds.into_iter();
        let mut done = done.into_iter().map(|res| {
            res.map(|(out, jsons)| Committed {
                events: out.events.into_iter().zip(jsons).collect(),
                feed: feeds.next().unwrap_or_default(),
                existing: out.existing,
            })
        });
        for r in replies {
            match r {
                Reply::One(tx) => {
                    let _ = tx.send(done.next().unwrap_or_else(|| Err(stopped())));
                }
                Reply::Many(n, tx) => {
                    let v = (0..n)
                        .map(|_| done.next().unwrap_or_else(|| Err(stopped())))
                        .collect();
                    let _ = tx.send(v);
                }
            }
        }
    }
}

/// Where a batch's answers go: one caller per command, or one per run of commands.
enum Reply {
    One(oneshot::Sender<Answer>),
    Many(usize, oneshot::Sender<Vec<Answer>>),
}

impl Reply {
    fn fail(self, e: &CoreError) {
        match self {
            Reply::One(tx) => {
                let _ = tx.send(Err(e.clone()));
            }
            Reply::Many(n, tx) => {
                let _ = tx.send((0..n).map(|_| Err(e.clone())).collect());
            }
        }
    }
}

/// Executes `cmds` in one transaction: per command its outcome or refusal, or, when storage
/// fails, the error for all (nothing of the batch committed).
fn run_batch(
    writer: &mut Writer,
    eng: &mut Engine,
    cmds: Vec<Command>,
) -> Result<Vec<Done>, CoreError> {
    let tx = writer.begin()?;
    let mut done: Vec<Done> = Vec::with_capacity(cmds.len());
    let now = time::OffsetDateTime::now_utc();
    for cmd in cmds {
        let res = {
            let view = WriterView::new(&tx);
            eng.execute(&view, cmd, now)
        };
        match res {
            Ok(out) => {
                let jsons = convene_store::apply(&tx, &out)?;
                done.push(Ok((out, jsons)));
            }
            Err(e) => done.push(Err(e)),
        }
    }
    tx.commit().map_err(|e| CoreError::storage(e.to_string()))?;
    Ok(done)
}
