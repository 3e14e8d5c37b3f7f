//! Wake-ups for subscribers. Subscriptions are cursors, not pub/sub: a commit stores its
//! events in a per-group recent buffer and bumps the group's head `seq`; a subscriber holding
//! a cursor reads `seq > cursor` from the buffer (or the store when it fell behind), so replay
//! and live cut over with no gap and no duplicate.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;

/// A committed event as subscribers see it.
#[derive(Debug)]
pub struct FeedEvent {
    /// Per-group sequence.
    pub seq: u64,
    /// Kind (for filters).
    pub kind: String,
    /// Stored JSON.
    pub json: String,
}

/// One group's recent events and head.
pub struct Feed {
    buf: Mutex<VecDeque<Arc<FeedEvent>>>,
    head: watch::Sender<u64>,
    cap: usize,
}

impl Feed {
    fn new(head: u64, cap: usize) -> Self {
        Self {
            buf: Mutex::new(VecDeque::with_capacity(cap.min(1024))),
            head: watch::channel(head).0,
            cap,
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
        let buf = self.buf.lock();
        let first = buf.front().map(|e| e.seq)?;
        if cursor + 1 < first {
            return None;
        }
        let skip = (cursor + 1 - first) as usize;
        Some(buf.iter().skip(skip).take(max).cloned().collect())
    }
}

/// All groups' feeds.
pub struct Hub {
    feeds: RwLock<HashMap<String, Arc<Feed>>>,
    cap: usize,
}

impl Hub {
    /// A hub keeping `cap` recent events per group.
    pub fn new(cap: usize) -> Self {
        Self {
            feeds: RwLock::new(HashMap::new()),
            cap,
        }
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
    pub fn publish(&self, group_id: &str, events: Vec<FeedEvent>) {
        let Some(last) = events.last().map(|e| e.seq) else {
            return;
        };
        let first = events.first().map(|e| e.seq).unwrap_or(last);
        let feed = self.feed(group_id, first.saturating_sub(1));
        {
            let mut buf = feed.buf.lock();
            // Imports may reset a group; keep the buffer contiguous.
            if buf.back().map(|b| b.seq + 1 != first).unwrap_or(false) {
                buf.clear();
            }
            for e in events {
                if buf.len() == feed.cap {
                    buf.pop_front();
                }
                buf.push_back(Arc::new(e));
            }
        }
        feed.head.send_replace(last);
    }

    /// Drops a deleted group's feed; its subscribers see the channel close.
    pub fn remove(&self, group_id: &str) {
        self.feeds.write().remove(group_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(seq: u64) -> FeedEvent {
        FeedEvent {
            seq,
            kind: "k".into(),
            json: format!("{seq}"),
        }
    }

    #[test]
    fn buffer_serves_contiguous_suffix_or_defers_to_store() {
        let hub = Hub::new(3);
        hub.publish("g", (1..=5).map(ev).collect());
        let f = hub.get("g").unwrap();
        assert_eq!(f.head(), 5);
        assert!(f.after(1, 10).is_none(), "seq 2 fell out of the buffer");
        let got: Vec<u64> = f.after(2, 10).unwrap().iter().map(|e| e.seq).collect();
        assert_eq!(got, vec![3, 4, 5]);
        assert!(f.after(5, 10).unwrap().is_empty());
    }
}
