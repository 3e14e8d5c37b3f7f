//! The `session` transport: an actor's own connected client (`runtime_attach`) receives the
//! payload through a bounded queue that the connection's writer drains.
//!
//! The result is what the writer can prove about the frame, reported back per frame:
//! - accepted: the whole frame was written and flushed to the consumer's socket;
//! - failed: the frame never started to be written (no session, queue full, the connection
//!   ended while it was still queued, or it was withdrawn from the queue when the bounded wait
//!   ran out), so a later retry cannot duplicate it;
//! - ambiguous: a write started but did not finish (error, or the bounded wait ran out while
//!   it was being written): some bytes may have reached the consumer.
//!
//! A consumer that reconnects (`runtime_attach` again as the same actor generation) takes over
//! the frames its old session had not started, in their order: the old connection keeps only
//! the frame it is writing, so a consumer whose old socket went dead does not lose what was
//! still waiting behind it.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{oneshot, Notify};

use super::{payload, Handoff};

/// Default queue depth per attached session; a full queue fails the handoff instead of
/// blocking.
pub const SESSION_QUEUE: usize = 1024;

/// Default bound on one handoff: from queueing the frame to its write finishing.
pub const SESSION_HANDOFF_TIMEOUT: Duration = Duration::from_secs(10);

/// Frame lifecycle, shared by the handoff and the writer; the compare-exchange out of
/// `QUEUED` decides, exactly once, whether the writer starts it or the handoff withdraws it.
const QUEUED: u8 = 0;
const WRITING: u8 = 1;
const WITHDRAWN: u8 = 2;

/// What the writer reports about one frame.
#[derive(Debug)]
enum Written {
    /// Written and flushed whole.
    Whole,
    /// The write started and broke off.
    Broken(String),
}

/// One delivery payload on its way to an attached session.
pub struct Frame {
    bytes: Vec<u8>,
    state: Arc<AtomicU8>,
    done: oneshot::Sender<Written>,
}

/// One session's frames, shared by the handoffs (which push) and its connection (which pops).
/// A plain deque rather than a channel, so a reconnect can take the unstarted frames over.
#[derive(Default)]
struct Queue {
    state: Mutex<QueueState>,
    wake: Notify,
}

#[derive(Default)]
struct QueueState {
    frames: VecDeque<Frame>,
    /// No frame is queued any more: the session was replaced or ended, or its connection
    /// went away. The connection writes what is left, then closes.
    sealed: bool,
}

impl Queue {
    /// Takes no more frames; the connection writes what is left, then closes.
    fn seal(&self) {
        self.state.lock().sealed = true;
        self.wake.notify_one();
    }

    fn is_sealed(&self) -> bool {
        self.state.lock().sealed
    }
}

/// Receiving end held by the attached connection. Dropping it fails every frame still queued
/// (its handoff records `failed`: never written).
pub struct SessionRx {
    q: Arc<Queue>,
}

impl SessionRx {
    /// The next frame to write; `None` once the session is sealed and nothing is left.
    pub async fn recv(&mut self) -> Option<Frame> {
        loop {
            {
                let mut st = self.q.state.lock();
                if let Some(f) = st.frames.pop_front() {
                    return Some(f);
                }
                if st.sealed {
                    return None;
                }
            }
            // `notify_one` keeps a permit when nobody waits, so a push between the check
            // above and this wait is not missed.
            self.q.wake.notified().await;
        }
    }

    /// Frames waiting.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.q.state.lock().frames.len()
    }

    /// Whether no frame is waiting.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for SessionRx {
    fn drop(&mut self) {
        let mut st = self.q.state.lock();
        st.sealed = true;
        // Dropped outside the lock: each drop completes a handoff with `failed`.
        let frames = std::mem::take(&mut st.frames);
        drop(st);
        drop(frames);
    }
}

/// An attached session: the id of its attach (a newer attach replaces it), the actor
/// generation it attached as, and its queue.
type SessionMap = HashMap<(String, String), (u64, u64, Arc<Queue>)>;

/// Attached sessions by (group, actor). A newer attach replaces an older one. A session
/// belongs to the actor generation it attached as: it never receives a later generation's
/// deliveries (an actor removed and added again under its id is another actor, §6.4).
pub struct Sessions {
    map: Mutex<SessionMap>,
    next_id: AtomicU64,
    queue: usize,
    timeout: Duration,
}

impl Default for Sessions {
    fn default() -> Self {
        Self::new(SESSION_QUEUE, SESSION_HANDOFF_TIMEOUT)
    }
}

/// One attach: its queue and the id to detach it with.
pub struct Attached {
    /// Frames for this connection to write.
    pub rx: SessionRx,
    /// This attach's id.
    pub id: u64,
}

impl Sessions {
    /// Sessions whose queues hold `queue` frames and whose handoffs wait at most `timeout`.
    pub fn new(queue: usize, timeout: Duration) -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            queue: queue.max(1),
            timeout,
        }
    }

    /// The bound on one handoff (and on one write to a session).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Attaches a session of the actor's `generation` and returns its queue. A session the
    /// same generation had attached is replaced: the frames it has not started move to the
    /// new one in order (their handoffs then wait for the new connection's report), and the
    /// old connection ends after the frame it is writing, if any.
    pub fn attach(&self, group_id: &str, actor_id: &str, generation: u64) -> Attached {
        let q = Arc::new(Queue::default());
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut map = self.map.lock();
        let old = map.insert(
            (group_id.to_string(), actor_id.to_string()),
            (id, generation, q.clone()),
        );
        if let Some((_, old_generation, old_q)) = old {
            let mut old_st = old_q.state.lock();
            old_st.sealed = true;
            if old_generation == generation {
                // Under the map lock, so no handoff queues on either session meanwhile.
                q.state.lock().frames = std::mem::take(&mut old_st.frames);
            }
            drop(old_st);
            old_q.wake.notify_one();
        }
        drop(map);
        q.wake.notify_one();
        Attached {
            rx: SessionRx { q },
            id,
        }
    }

    /// Ends the actor's session (its generation ended): the connection writes what is
    /// already queued for it, then closes.
    pub fn end_actor(&self, group_id: &str, actor_id: &str) {
        if let Some((_, _, q)) = self
            .map
            .lock()
            .remove(&(group_id.to_string(), actor_id.to_string()))
        {
            q.seal();
        }
    }

    /// Ends every session of a deleted group.
    pub fn end_group(&self, group_id: &str) {
        self.map.lock().retain(|(g, _), (_, _, q)| {
            let keep = g != group_id;
            if !keep {
                q.seal();
            }
            keep
        });
    }

    /// Forgets attach `id` if it is still the current one for the actor.
    pub fn detach(&self, group_id: &str, actor_id: &str, id: u64) {
        let key = (group_id.to_string(), actor_id.to_string());
        let mut map = self.map.lock();
        if map.get(&key).map(|(i, _, _)| *i == id).unwrap_or(false) {
            if let Some((_, _, q)) = map.remove(&key) {
                q.seal();
            }
        }
    }

    /// Whether a live session of the actor's `generation` is attached.
    pub fn is_attached(&self, group_id: &str, actor_id: &str, generation: u64) -> bool {
        self.map
            .lock()
            .get(&(group_id.to_string(), actor_id.to_string()))
            .map(|(_, g, q)| *g == generation && !q.is_sealed())
            .unwrap_or(false)
    }

    /// Hands one payload of the actor's `generation` to its session: queues it, then waits
    /// for what its writer reports.
    #[cfg(test)]
    pub(super) async fn hand_off(
        &self,
        group_id: &str,
        actor_id: &str,
        generation: u64,
        delivery_id: &str,
        event_json: &str,
    ) -> Handoff {
        match self.enqueue(group_id, actor_id, generation, delivery_id, event_json) {
            Ok(p) => p.outcome().await,
            Err(h) => h,
        }
    }

    /// Queues one payload of the actor's `generation` on its session, without waiting:
    /// frames queued one after another are written in that order. `Err` is a handoff that
    /// could not start.
    pub(super) fn enqueue(
        &self,
        group_id: &str,
        actor_id: &str,
        generation: u64,
        delivery_id: &str,
        event_json: &str,
    ) -> Result<Pending, Handoff> {
        let key = (group_id.to_string(), actor_id.to_string());
        // The map lock is held while queueing, so a reconnect's takeover sees every frame.
        let map = self.map.lock();
        let Some((_, attached_as, q)) = map.get(&key) else {
            return Err(Handoff::Failed("no session attached".into()));
        };
        let attached_as = *attached_as;
        if attached_as != generation {
            return Err(Handoff::Failed(format!(
                "no session attached for actor generation {generation} (the attached one is generation {attached_as})"
            )));
        }
        let state = Arc::new(AtomicU8::new(QUEUED));
        let (done, written) = oneshot::channel();
        let frame = Frame {
            bytes: payload(delivery_id, event_json),
            state: state.clone(),
            done,
        };
        {
            let mut st = q.state.lock();
            if st.sealed {
                return Err(Handoff::Failed("session detached".into()));
            }
            if st.frames.len() >= self.queue {
                return Err(Handoff::Failed(format!(
                    "session queue full ({} frames)",
                    self.queue
                )));
            }
            st.frames.push_back(frame);
        }
        q.wake.notify_one();
        drop(map);
        Ok(Pending {
            state,
            written,
            timeout: self.timeout,
        })
    }
}

/// A frame queued on a session, waiting for its writer's report.
pub(super) struct Pending {
    state: Arc<AtomicU8>,
    written: oneshot::Receiver<Written>,
    timeout: Duration,
}

impl Pending {
    /// What the writer established within the handoff bound.
    pub(super) async fn outcome(self) -> Handoff {
        let Pending {
            state,
            written,
            timeout,
        } = self;
        match tokio::time::timeout(timeout, written).await {
            Ok(Ok(Written::Whole)) => Handoff::Accepted,
            Ok(Ok(Written::Broken(e))) => {
                Handoff::Ambiguous(format!("session write broke off mid-frame: {e}"))
            }
            // The writer dropped the frame: unstarted when its connection ended with it still
            // queued; a started frame is always reported, so a drop mid-write means the
            // connection task itself was torn down.
            Ok(Err(_)) => match state.load(Ordering::Acquire) {
                QUEUED => Handoff::Failed("session closed before the payload was written".into()),
                _ => Handoff::Ambiguous("session ended while the payload was being written".into()),
            },
            Err(_) => {
                let secs = timeout.as_secs_f64();
                match state.compare_exchange(QUEUED, WITHDRAWN, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => Handoff::Failed(format!(
                        "not written to the session within {secs}s; withdrawn from its queue"
                    )),
                    Err(_) => {
                        Handoff::Ambiguous(format!("session write did not finish within {secs}s"))
                    }
                }
            }
        }
    }
}

/// Writes one queued frame to the attached connection and reports what happened. A frame
/// its handoff already withdrew is skipped. Returns the write error, if any: the connection
/// is then unusable, and dropping the queue fails every frame still in it.
pub async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    frame: Frame,
    timeout: Duration,
) -> std::io::Result<()> {
    if frame
        .state
        .compare_exchange(QUEUED, WRITING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return Ok(());
    }
    let res = tokio::time::timeout(timeout, async {
        w.write_all(&frame.bytes).await?;
        w.flush().await
    })
    .await
    .unwrap_or_else(|_| {
        Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the session did not take the frame in time",
        ))
    });
    let report = match &res {
        Ok(()) => Written::Whole,
        Err(e) => Written::Broken(e.to_string()),
    };
    let _ = frame.done.send(report);
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn full_queue_fails_the_handoff_and_drop_fails_queued_frames() {
        let s = Arc::new(Sessions::new(2, Duration::from_secs(30)));
        let att = s.attach("g", "a", 1);
        let mut tasks = Vec::new();
        for i in 0..2 {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                s.hand_off("g", "a", 1, &format!("d{i}"), "{}").await
            }));
        }
        // Both are queued (nobody drains): the third finds the queue full.
        while att.rx.len() < 2 {
            tokio::task::yield_now().await;
        }
        match s.hand_off("g", "a", 1, "d2", "{}").await {
            Handoff::Failed(r) => assert_eq!(r, "session queue full (2 frames)"),
            h => panic!("expected failed, got {h:?}"),
        }
        // The connection ends with both still queued: provably never written.
        drop(att);
        for t in tasks {
            match t.await.unwrap() {
                Handoff::Failed(r) => {
                    assert_eq!(r, "session closed before the payload was written")
                }
                h => panic!("expected failed, got {h:?}"),
            }
        }
    }

    #[tokio::test]
    async fn unstarted_frame_is_withdrawn_after_the_bound_and_never_written() {
        let s = Arc::new(Sessions::new(4, Duration::from_millis(50)));
        let mut att = s.attach("g", "a", 1);
        match s.hand_off("g", "a", 1, "d", "{}").await {
            Handoff::Failed(r) => assert!(r.contains("withdrawn"), "{r}"),
            h => panic!("expected failed, got {h:?}"),
        }
        let frame = att.rx.recv().await.unwrap();
        let mut out = Vec::new();
        write_frame(&mut out, frame, Duration::from_secs(1))
            .await
            .unwrap();
        assert!(out.is_empty(), "a withdrawn frame must not be written");
    }

    #[tokio::test]
    async fn another_generations_session_gets_nothing() {
        let s = Arc::new(Sessions::new(4, Duration::from_secs(30)));
        // Attached as generation 1 while generation 2's delivery is handed off (the actor
        // was removed and added again in between).
        let att = s.attach("g", "a", 1);
        match s.hand_off("g", "a", 2, "d", "{}").await {
            Handoff::Failed(r) => assert!(r.contains("generation 2"), "{r}"),
            h => panic!("expected failed, got {h:?}"),
        }
        assert!(
            att.rx.is_empty(),
            "nothing may be queued for the old generation"
        );
        assert!(!s.is_attached("g", "a", 2) && s.is_attached("g", "a", 1));
    }

    #[tokio::test]
    async fn a_reconnect_takes_over_the_unstarted_frames_in_order() {
        let s = Arc::new(Sessions::new(8, Duration::from_secs(30)));
        let mut old = s.attach("g", "a", 1);
        let mut tasks = Vec::new();
        for i in 0..3 {
            let p = s.enqueue("g", "a", 1, &format!("d{i}"), "{}").unwrap();
            tasks.push(tokio::spawn(p.outcome()));
        }
        // The old connection started d0; d1 and d2 wait behind it.
        let started = old.rx.recv().await.unwrap();
        let mut new = s.attach("g", "a", 1);
        assert_eq!(new.rx.len(), 2);
        let mut out = Vec::new();
        for _ in 0..2 {
            let f = new.rx.recv().await.unwrap();
            write_frame(&mut out, f, Duration::from_secs(1))
                .await
                .unwrap();
        }
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.find("\"d1\"").unwrap() < text.find("\"d2\"").unwrap(),
            "{text}"
        );
        // The old session ends after its started frame, which stays its own.
        assert!(old.rx.recv().await.is_none());
        let mut old_out = Vec::new();
        write_frame(&mut old_out, started, Duration::from_secs(1))
            .await
            .unwrap();
        for t in tasks {
            assert!(matches!(t.await.unwrap(), Handoff::Accepted));
        }
        assert!(s.is_attached("g", "a", 1));
    }

    #[tokio::test]
    async fn written_frame_is_accepted() {
        let s = Arc::new(Sessions::new(4, Duration::from_secs(30)));
        let mut att = s.attach("g", "a", 1);
        let s2 = s.clone();
        let h = tokio::spawn(async move { s2.hand_off("g", "a", 1, "d", "{}").await });
        let frame = att.rx.recv().await.unwrap();
        let mut out = Vec::new();
        write_frame(&mut out, frame, Duration::from_secs(1))
            .await
            .unwrap();
        assert!(matches!(h.await.unwrap(), Handoff::Accepted));
        assert!(out.ends_with(b"\n"));
    }
}
