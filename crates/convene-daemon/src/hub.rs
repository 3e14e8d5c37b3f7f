//! Wake-ups for subscribers. Subscriptions are cursors, not pub/sub: a commit stores its
//! events in a per-group recent buffer and bumps the group's head `seq`; a subscriber holding
//! a cursor reads `seq > cursor` from the buffer (or the store when it fell behind), so replay
//! and live cut over with no gap and no duplicate.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;

/// A committed event as subscribers see it.
pub struct FeedEvent {
    /// Per-group sequence.
    pub seq: u64,
    /// Kind (for filters).
    pub kind: String,
    /// Stored JSON.
    pub json: String,
    /// A face's derived form of the event (the Cowchat face keeps its rendered message
    /// here), computed once by whichever reader needs it first: ten receivers of a message
    /// and every later history read share one rendering.
    pub memo: OnceLock<Box<dyn Any + Send + Sync>>,
}

impl FeedEvent {
    /// A committed event with no memo yet.
    pub fn new(seq: u64, kind: String, json: String) -> Self {
        Self {
            seq,
            kind,
            json,
            memo: OnceLock::new(),
        }
    }

    /// Bytes this event holds in a buffer (its JSON, and room for a rendering of about the
    /// same size).
    fn weight(&self) -> usize {
        2 * self.json.len() + 128
    }
}

impl std::fmt::Debug for FeedEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeedEvent")
            .field("seq", &self.seq)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// One group's recent events and head.
pub struct Feed {
    buf: Mutex<Buffer>,
    head: watch::Sender<u64>,
    cap: usize,
    /// When this group last published (the hub's publish counter): the groups idle longest
    /// give back memory first.
    stamp: AtomicU64,
}

#[derive(Default)]
struct Buffer {
    events: VecDeque<Arc<FeedEvent>>,
    /// Sum of the events' weights.
    bytes: usize,
}

impl Buffer {
    fn pop_front(&mut self) -> usize {
        let w = self.events.pop_front().map(|e| e.weight()).unwrap_or(0);
        self.bytes -= w;
        w
    }
}

impl Feed {
    fn new(head: u64, cap: usize) -> Self {
        Self {
            buf: Mutex::new(Buffer {
                events: VecDeque::with_capacity(cap.min(1024)),
                bytes: 0,
            }),
            head: watch::channel(head).0,
            cap,
            stamp: AtomicU64::new(0),
        }
    }

    /// Watches the head `seq`.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.head.subscribe()
    }

    /// Current head `seq`.
    pub fn head(&self) -> u64 {
        *self.head.borrow()
    }

    /// Up to `max` events after `cursor` from memory; `None` when the buffer no longer holds
    /// `cursor + 1` (read the store instead).
    pub fn after(&self, cursor: u64, max: usize) -> Option<Vec<Arc<FeedEvent>>> {
        self.scan_after(cursor, max, |_| true)
    }

    /// The events after `cursor` in order, until `take` has accepted `max` of them (it
    /// sees each event and says whether it counts); `None` when the buffer no longer holds
    /// `cursor + 1`. Only clones under the lock: the caller does the real work outside.
    pub fn scan_after(
        &self,
        cursor: u64,
        max: usize,
        take: impl Fn(&FeedEvent) -> bool,
    ) -> Option<Vec<Arc<FeedEvent>>> {
        self.scan_between(cursor, 0, max, take)
    }

    /// As [`Feed::scan_after`], stopping before `seq == before` (no bound when it is 0).
    pub fn scan_between(
        &self,
        cursor: u64,
        before: u64,
        max: usize,
        take: impl Fn(&FeedEvent) -> bool,
    ) -> Option<Vec<Arc<FeedEvent>>> {
        let buf = self.buf.lock();
        let first = buf.events.front().map(|e| e.seq)?;
        if cursor + 1 < first {
            return None;
        }
        let skip = (cursor + 1 - first) as usize;
        let mut out = Vec::new();
        for e in buf.events.iter().skip(skip) {
            if out.len() == max || (before != 0 && e.seq >= before) {
                break;
            }
            if take(e) {
                out.push(e.clone());
            }
        }
        Some(out)
    }

    /// The newest `max` events with `seq < before` (all when `before` is 0) that `take`
    /// accepts, oldest first; `None` when the buffer might not hold them all (it starts
    /// after the group's first event and fewer than `max` were found).
    pub fn scan_before(
        &self,
        before: u64,
        max: usize,
        take: impl Fn(&FeedEvent) -> bool,
    ) -> Option<Vec<Arc<FeedEvent>>> {
        let buf = self.buf.lock();
        let mut out = Vec::new();
        for e in buf.events.iter().rev() {
            if out.len() == max {
                break;
            }
            if (before == 0 || e.seq < before) && take(e) {
                out.push(e.clone());
            }
        }
        let whole = buf.events.front().is_some_and(|f| f.seq <= 1);
        if out.len() < max && !whole {
            return None;
        }
        out.reverse();
        Some(out)
    }
}

/// All groups' feeds.
pub struct Hub {
    feeds: RwLock<HashMap<String, Arc<Feed>>>,
    cap: usize,
    /// Weight of every buffered event, all groups together.
    total: AtomicUsize,
    /// Above this total, the groups that published least recently give back their oldest
    /// events (each down to [`FLOOR`]) until the total is 7/8 of it.
    budget: usize,
    /// Publishes so far (orders groups by recency).
    publishes: AtomicU64,
}

/// Events a group keeps however tight the budget: subscribers that are a little behind
/// still read from memory.
const FLOOR: usize = 256;

impl Hub {
    /// A hub keeping up to `cap` recent events per group and about `budget` bytes in all.
    pub fn new(cap: usize, budget: usize) -> Self {
        Self {
            feeds: RwLock::new(HashMap::new()),
            cap,
            total: AtomicUsize::new(0),
            budget,
            publishes: AtomicU64::new(0),
        }
    }

    /// Bytes buffered across all groups (approximate weight).
    pub fn buffered_bytes(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }

    /// The feed of a group, created at `head` when new.
    pub fn feed(&self, group_id: &str, head: u64) -> Arc<Feed> {
        if let Some(f) = self.feeds.read().get(group_id) {
            return f.clone();
        }
        self.feeds
            .write()
            .entry(group_id.to_string())
            .or_insert_with(|| Arc::new(Feed::new(head, self.cap)))
            .clone()
    }

    /// The feed of a group if it exists.
    pub fn get(&self, group_id: &str) -> Option<Arc<Feed>> {
        self.feeds.read().get(group_id).cloned()
    }

    /// Publishes committed events of one group (ascending `seq`), then wakes subscribers.
    pub fn publish(&self, group_id: &str, events: Vec<Arc<FeedEvent>>) {
        let Some(last) = events.last().map(|e| e.seq) else {
            return;
        };
        let first = events.first().map(|e| e.seq).unwrap_or(last);
        let feed = self.feed(group_id, first.saturating_sub(1));
        {
            let mut buf = feed.buf.lock();
            let (mut added, mut freed) = (0, 0);
            // Imports may reset a group; keep the buffer contiguous.
            if buf.events.back().is_some_and(|b| b.seq + 1 != first) {
                freed += buf.bytes;
                *buf = Buffer::default();
            }
            for e in events {
                if buf.events.len() == feed.cap {
                    freed += buf.pop_front();
                }
                let w = e.weight();
                buf.bytes += w;
                added += w;
                buf.events.push_back(e);
            }
            self.total.fetch_add(added, Ordering::Relaxed);
            self.total.fetch_sub(freed, Ordering::Relaxed);
        }
        feed.stamp.store(
            self.publishes.fetch_add(1, Ordering::Relaxed) + 1,
            Ordering::Relaxed,
        );
        if self.total.load(Ordering::Relaxed) > self.budget {
            self.trim();
        }
        feed.head.send_replace(last);
    }

    /// Brings the total under 7/8 of the budget, taking the oldest events of the groups that
    /// published least recently first (an idle room's history does not starve a busy one),
    /// never below [`FLOOR`] events a group. The margin makes this rare: a sort per 1/8 of
    /// the budget published, not per publish.
    fn trim(&self) {
        let target = self.budget / 8 * 7;
        let feeds: Vec<Arc<Feed>> = {
            let mut v: Vec<Arc<Feed>> = self.feeds.read().values().cloned().collect();
            v.sort_by_key(|f| f.stamp.load(Ordering::Relaxed));
            v
        };
        for f in feeds {
            let mut buf = f.buf.lock();
            while buf.events.len() > FLOOR && self.total.load(Ordering::Relaxed) > target {
                let w = buf.pop_front();
                self.total.fetch_sub(w, Ordering::Relaxed);
            }
            if self.total.load(Ordering::Relaxed) <= target {
                return;
            }
        }
    }

    /// Drops a deleted group's feed; its subscribers see the channel close.
    pub fn remove(&self, group_id: &str) {
        if let Some(f) = self.feeds.write().remove(group_id) {
            self.total.fetch_sub(f.buf.lock().bytes, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(seq: u64) -> Arc<FeedEvent> {
        Arc::new(FeedEvent::new(seq, "k".into(), format!("{seq:08}")))
    }

    #[test]
    fn buffer_serves_contiguous_suffix_or_defers_to_store() {
        let hub = Hub::new(3, usize::MAX);
        hub.publish("g", (1..=5).map(ev).collect());
        let f = hub.get("g").unwrap();
        assert_eq!(f.head(), 5);
        assert!(f.after(1, 10).is_none(), "seq 2 fell out of the buffer");
        let got: Vec<u64> = f.after(2, 10).unwrap().iter().map(|e| e.seq).collect();
        assert_eq!(got, vec![3, 4, 5]);
        assert!(f.after(5, 10).unwrap().is_empty());
    }

    #[test]
    fn scans_answer_from_memory_only_when_the_buffer_reaches_far_enough() {
        let hub = Hub::new(4, usize::MAX);
        hub.publish("g", (1..=3).map(ev).collect());
        let f = hub.get("g").unwrap();
        let seqs = |v: Vec<Arc<FeedEvent>>| v.iter().map(|e| e.seq).collect::<Vec<_>>();
        // The whole group is buffered: a short answer is complete.
        assert_eq!(seqs(f.scan_before(0, 10, |_| true).unwrap()), vec![1, 2, 3]);
        assert_eq!(seqs(f.scan_before(3, 1, |_| true).unwrap()), vec![2]);
        assert_eq!(seqs(f.scan_after(1, 10, |e| e.seq != 2).unwrap()), vec![3]);
        hub.publish("g", (4..=6).map(ev).collect());
        // Seq 1 and 2 fell out: only answers fully inside the buffer come from memory.
        assert!(f.scan_before(0, 10, |_| true).is_none());
        assert_eq!(seqs(f.scan_before(0, 2, |_| true).unwrap()), vec![5, 6]);
        assert!(f.scan_after(1, 10, |_| true).is_none());
        assert_eq!(seqs(f.scan_after(2, 2, |_| true).unwrap()), vec![3, 4]);
        assert_eq!(seqs(f.scan_between(2, 4, 9, |_| true).unwrap()), vec![3]);
        assert_eq!(
            seqs(f.scan_between(2, 0, 9, |_| true).unwrap()),
            vec![3, 4, 5, 6]
        );
    }

    #[test]
    fn over_budget_the_least_recently_published_groups_give_back_first() {
        let f = FLOOR as u64;
        let one = ev(1).weight();
        let budget = one * (2 * FLOOR + 120);
        let target = budget / 8 * 7;
        let hub = Hub::new(10_000, budget);
        let len = |g: &str| hub.get(g).unwrap().buf.lock().events.len();
        hub.publish("idle", (1..=f + 100).map(ev).collect());
        hub.publish("busy", (1..=f).map(ev).collect());
        assert_eq!(len("idle") + len("busy"), 2 * FLOOR + 100);
        // Over budget: the idle group gives back its oldest events, the busy one keeps all.
        hub.publish("busy", (f + 1..=f + 40).map(ev).collect());
        assert_eq!(len("busy"), FLOOR + 40);
        assert!(len("idle") < FLOOR + 100 && len("idle") >= FLOOR);
        assert!(hub.buffered_bytes() <= target);
        // The idle one at its floor and still over: the busy one gives back too.
        hub.publish("busy", (f + 41..=f + 140).map(ev).collect());
        assert_eq!(len("idle"), FLOOR);
        assert!(len("busy") < FLOOR + 140 && hub.buffered_bytes() <= target);
        let total: usize = ["idle", "busy"]
            .iter()
            .map(|g| hub.get(g).unwrap().buf.lock().bytes)
            .sum();
        assert_eq!(hub.buffered_bytes(), total);
        hub.remove("idle");
        assert_eq!(
            hub.buffered_bytes(),
            hub.get("busy").unwrap().buf.lock().bytes
        );
    }
}
