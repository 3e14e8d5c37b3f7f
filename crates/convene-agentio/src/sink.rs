//! Hand-off of one turn's updates from the reader task to the consumer.
//!
//! The reader must never wait for a slow consumer (it also carries other threads' traffic and
//! the responses to every request). While the bounded channel has room, updates go straight in;
//! once it is full they wait in an in-memory queue that a per-turn forwarder task drains into
//! the channel. The queue stays small: adjacent chunks of the same kind are merged while they
//! wait (only their granularity changes, never their text), and past
//! [`QUEUE_SOFT_CAP`] waiting entries, `Other` updates are dropped and `ToolCallUpdate`s for a
//! tool call that already has one waiting are merged into it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{mpsc, oneshot, Notify};

use crate::{Update, UPDATE_CHANNEL_CAPACITY};

/// Waiting entries past which the queue starts dropping and merging non-chunk updates.
pub const QUEUE_SOFT_CAP: usize = 4096;

struct State<O> {
    items: VecDeque<Update>,
    outcome: Option<O>,
    dropped: u64,
    /// `None` once the consumer dropped its receiver or the run is over.
    tx: Option<mpsc::Sender<Update>>,
    /// The forwarder holds an update it took from `items` and has not delivered yet.
    forwarding: bool,
}

/// The consumer's ends of one turn.
pub struct RunEnds<O> {
    /// The turn's updates, in order.
    pub updates: mpsc::Receiver<Update>,
    /// Its outcome `O`, after the last update.
    pub done: oneshot::Receiver<O>,
}

/// The reader's side of one running turn whose outcome is an `O`.
pub struct TurnSink<O> {
    state: Mutex<State<O>>,
    wake: Notify,
}

impl<O: Send + 'static> TurnSink<O> {
    /// Creates the sink, its forwarder task and the consumer's ends (updates, outcome).
    pub fn start() -> (Arc<TurnSink<O>>, RunEnds<O>) {
        let (tx, updates) = mpsc::channel(UPDATE_CHANNEL_CAPACITY);
        let sink = Arc::new(TurnSink {
            state: Mutex::new(State {
                items: VecDeque::new(),
                outcome: None,
                dropped: 0,
                tx: Some(tx),
                forwarding: false,
            }),
            wake: Notify::new(),
        });
        let (done_tx, done) = oneshot::channel();
        tokio::spawn(forward(sink.clone(), done_tx));
        (sink, RunEnds { updates, done })
    }

    fn lock(&self) -> MutexGuard<'_, State<O>> {
        // A panic while holding this lock leaves a consistent queue; keep going.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues one update (never blocks).
    pub fn push(&self, update: Update) {
        let mut st = self.lock();
        if st.outcome.is_some() {
            return;
        }
        let Some(tx) = &st.tx else {
            return;
        };
        if st.items.is_empty() && !st.forwarding {
            match tx.try_send(update) {
                Ok(()) => return,
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    st.tx = None;
                    return;
                }
                Err(mpsc::error::TrySendError::Full(u)) => {
                    st.items.push_back(u);
                    drop(st);
                    self.wake.notify_one();
                    return;
                }
            }
        }
        match (st.items.back_mut(), &update) {
            (Some(Update::MessageChunk(prev)), Update::MessageChunk(next))
            | (Some(Update::ThoughtChunk(prev)), Update::ThoughtChunk(next)) => {
                prev.push_str(next);
                return;
            }
            _ => {}
        }
        if st.items.len() >= QUEUE_SOFT_CAP {
            match &update {
                Update::Other { .. } => {
                    st.dropped += 1;
                    return;
                }
                Update::ToolCallUpdate { id, title, status } => {
                    let waiting = st.items.iter_mut().rev().find_map(|u| match u {
                        Update::ToolCallUpdate {
                            id: wid,
                            title: wt,
                            status: ws,
                        } if wid == id => Some((wt, ws)),
                        _ => None,
                    });
                    if let Some((wt, ws)) = waiting {
                        if title.is_some() {
                            wt.clone_from(title);
                        }
                        if status.is_some() {
                            ws.clone_from(status);
                        }
                        st.dropped += 1;
                        return;
                    }
                }
                _ => {}
            }
        }
        st.items.push_back(update);
        drop(st);
        self.wake.notify_one();
    }

    /// Records the outcome; `done` fires once every queued update has been handed over.
    pub fn finish(&self, outcome: O) {
        let mut st = self.lock();
        if st.outcome.is_none() {
            st.outcome = Some(outcome);
        }
        drop(st);
        self.wake.notify_one();
    }
}

async fn forward<O: Send + 'static>(sink: Arc<TurnSink<O>>, done: oneshot::Sender<O>) {
    loop {
        let next = {
            let mut st = sink.lock();
            if let Some(update) = st.items.pop_front() {
                let tx = st.tx.clone();
                st.forwarding = tx.is_some();
                tx.map(|tx| (tx, update))
            } else if let Some(outcome) = st.outcome.take() {
                if st.dropped > 0 {
                    tracing::debug!(
                        dropped = st.dropped,
                        "turn updates dropped or merged under backlog"
                    );
                }
                // Closing the channel before `done`: the consumer sees the end of the
                // updates first.
                st.tx = None;
                drop(st);
                // The consumer may have dropped `done`; nothing to do then.
                let _ = done.send(outcome);
                return;
            } else {
                None
            }
        };
        match next {
            Some((tx, update)) => {
                let sent = tx.send(update).await.is_ok();
                let mut st = sink.lock();
                st.forwarding = false;
                if !sent {
                    st.tx = None;
                    st.items.clear();
                }
            }
            None => {
                // Items popped while the consumer is gone are discarded by the arm above.
                let idle = {
                    let st = sink.lock();
                    st.items.is_empty() && st.outcome.is_none()
                };
                if idle {
                    sink.wake.notified().await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PeerError;

    /// A turn outcome as a protocol crate would have it.
    #[derive(Debug, PartialEq)]
    enum End {
        Completed,
    }

    #[tokio::test]
    async fn slow_consumer_gets_all_text_in_order_then_done() {
        let (sink, mut run) = TurnSink::<Result<End, PeerError>>::start();
        for i in 0..(UPDATE_CHANNEL_CAPACITY * 3) {
            sink.push(Update::MessageChunk(format!("{i},")));
            sink.push(Update::Other {
                kind: "turn/plan/updated".into(),
            });
        }
        sink.finish(Ok(End::Completed));
        let mut text = String::new();
        while let Some(u) = run.updates.recv().await {
            if let Update::MessageChunk(t) = u {
                text.push_str(&t);
            }
        }
        let want: String = (0..UPDATE_CHANNEL_CAPACITY * 3)
            .map(|i| format!("{i},"))
            .collect();
        assert_eq!(text, want);
        assert_eq!(run.done.await.ok(), Some(Ok(End::Completed)));
    }

    #[tokio::test]
    async fn merges_tool_call_updates_and_drops_other_past_the_cap() {
        let (sink, mut run) = TurnSink::<Result<End, PeerError>>::start();
        // Fill the channel and the queue before the consumer reads anything.
        for i in 0..(UPDATE_CHANNEL_CAPACITY + QUEUE_SOFT_CAP + 10) {
            sink.push(Update::ToolCall {
                id: format!("c{i}"),
                title: String::new(),
                kind: None,
                status: None,
            });
        }
        tokio::task::yield_now().await;
        sink.push(Update::ToolCallUpdate {
            id: "x".into(),
            title: None,
            status: Some("in_progress".into()),
        });
        sink.push(Update::Other {
            kind: "turn/plan/updated".into(),
        });
        sink.push(Update::ToolCallUpdate {
            id: "x".into(),
            title: None,
            status: Some("completed".into()),
        });
        sink.finish(Ok(End::Completed));
        let mut last = None;
        let mut others = 0;
        while let Some(u) = run.updates.recv().await {
            match u {
                Update::ToolCallUpdate { status, .. } => last = Some((status, others)),
                Update::Other { .. } => others += 1,
                _ => {}
            }
        }
        assert_eq!(last, Some((Some("completed".into()), 0)));
        assert_eq!(others, 0);
    }
}
