//! Runtime delivery (§6.4): after a `send` / `request_reply` commits, each concrete actor
//! recipient with a runtime adapter gets one attempt: `claimed` is appended (durably) before
//! any runtime I/O, the transport runs, and exactly one result is appended.

mod command;
mod session;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use convene_core::{ClaimKind, Command, CoreError, DeliveryState, ErrorCode, Event};
use serde_json::Value;
use tokio::sync::Notify;

use crate::ledger::{CommitFeed, Ledger};
pub use session::{
    write_frame, Attached, SessionRx, Sessions, SESSION_HANDOFF_TIMEOUT, SESSION_QUEUE,
};

/// What a transport established about a handoff.
#[derive(Debug)]
pub enum Handoff {
    /// The runtime accepted the payload.
    Accepted,
    /// The handoff did not occur.
    Failed(String),
    /// It may have occurred but cannot be proven.
    Ambiguous(String),
}

/// Runtime adapters, by actor `runtime` name.
#[derive(Clone)]
pub struct Runtime {
    ledger: Ledger,
    /// Connected actor sessions (the `session` transport).
    pub sessions: Arc<Sessions>,
    command_timeout: std::time::Duration,
    /// Claimed attempts whose result is not recorded yet.
    in_flight: Arc<InFlight>,
}

/// A count of handoffs in progress, and a wake-up when it changes.
#[derive(Default)]
struct InFlight {
    n: AtomicUsize,
    changed: Notify,
}

/// Counts one handoff from its claim until its result is recorded (or the task ends).
struct Attempt(Arc<InFlight>);

impl Attempt {
    fn start(f: &Arc<InFlight>) -> Self {
        f.n.fetch_add(1, Ordering::AcqRel);
        Self(f.clone())
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        self.0.n.fetch_sub(1, Ordering::AcqRel);
        self.0.changed.notify_waiters();
    }
}

/// The transport name an actor's runtime maps to, if Convene drives it.
pub fn transport_for(runtime: &str) -> Option<&'static str> {
    match runtime {
        "session" | "" => Some("session"),
        "command" => Some("command"),
        _ => None,
    }
}

impl Runtime {
    /// A runtime over the ledger; `sessions` carries the session transport's queue depth
    /// and handoff bound.
    pub fn new(ledger: Ledger, command_timeout: std::time::Duration, sessions: Sessions) -> Self {
        Self {
            ledger,
            sessions: Arc::new(sessions),
            command_timeout,
            in_flight: Arc::default(),
        }
    }

    /// At shutdown (sessions already told to stop): waits at most `bound` for the results of
    /// handoffs in progress to be recorded, so an attempt this process can still settle
    /// (a queued frame never written is `failed`) is not left `claimed` for the next start
    /// to settle as `ambiguous`. Returns how many are still unsettled.
    pub async fn settle_in_flight(&self, bound: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            let changed = self.in_flight.changed.notified();
            let n = self.in_flight.n.load(Ordering::Acquire);
            if n == 0 {
                return 0;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return self.in_flight.n.load(Ordering::Acquire);
            }
        }
    }

    /// Consumes committed batches and starts automatic deliveries.
    pub fn spawn_worker(&self, mut feed: CommitFeed) {
        let rt = self.clone();
        tokio::spawn(async move {
            while let Some(events) = feed.recv().await {
                for ev in events.iter() {
                    for actor in rt.automatic_targets(ev) {
                        let rt = rt.clone();
                        let ev = ev.clone();
                        tokio::spawn(async move {
                            if let Err(e) = rt
                                .deliver(&ev.group_id, &actor, &ev.id, ClaimKind::Automatic)
                                .await
                            {
                                if e.code != ErrorCode::DeliveryConflict {
                                    tracing::warn!(error = %e, actor, "delivery failed to start");
                                }
                            }
                        });
                    }
                }
            }
        });
    }

    fn automatic_targets(&self, ev: &Event) -> Vec<String> {
        let eng = self.ledger.engine();
        let Some(g) = eng.group(&ev.group_id) else {
            return Vec::new();
        };
        if g.state == "stopped" {
            return Vec::new();
        }
        convene_core::engine::delivery_targets(g, ev)
            .into_iter()
            .filter(|a| {
                g.actor(a)
                    .map(|x| transport_for(&x.runtime).is_some())
                    .unwrap_or(false)
            })
            .collect()
    }

    /// One attempt: claim (durable), hand off, record the result. Returns the claim's
    /// `delivery_id` once claimed; the handoff continues in the background.
    pub async fn deliver(
        &self,
        group_id: &str,
        actor_id: &str,
        source_event_id: &str,
        kind: ClaimKind,
    ) -> Result<String, CoreError> {
        let (runtime, command) = {
            let eng = self.ledger.engine();
            let g = eng
                .group(group_id)
                .ok_or_else(|| CoreError::no_group(group_id))?;
            let a = g
                .actor(actor_id)
                .ok_or_else(|| CoreError::no_actor(actor_id))?;
            (a.runtime.clone(), a.command.clone())
        };
        let transport = transport_for(&runtime).unwrap_or("none");
        let claimed = self
            .ledger
            .execute(Command::DeliveryClaim {
                group_id: group_id.to_string(),
                actor_id: actor_id.to_string(),
                source_event_id: source_event_id.to_string(),
                transport: transport.to_string(),
                kind,
            })
            .await?;
        let (claim, _) = claimed
            .events
            .first()
            .ok_or_else(|| CoreError::new(ErrorCode::Internal, "claim appended nothing"))?;
        let delivery_id = claim
            .data_str("delivery_id")
            .unwrap_or_default()
            .to_string();
        let source = self
            .ledger
            .readers()
            .event(group_id, source_event_id)
            .map_err(CoreError::from)?
            .map(|r| r.json)
            .unwrap_or_default();
        let rt = self.clone();
        let attempt = Attempt::start(&self.in_flight);
        let (gid, aid, did) = (
            group_id.to_string(),
            actor_id.to_string(),
            delivery_id.clone(),
        );
        tokio::spawn(async move {
            let handoff = match transport {
                "session" => match convene_core::engine::delivery_generation(&did) {
                    Some(generation) => {
                        rt.sessions
                            .hand_off(&gid, &aid, generation, &did, &source)
                            .await
                    }
                    None => Handoff::Failed(format!("malformed delivery id {did}")),
                },
                "command" => {
                    command::run(&command, &gid, &aid, &did, &source, rt.command_timeout).await
                }
                _ => Handoff::Failed(format!("no runtime adapter for runtime {runtime:?}")),
            };
            let (state, reason) = match handoff {
                Handoff::Accepted => (DeliveryState::Accepted, None),
                Handoff::Failed(r) => (DeliveryState::Failed, Some(r)),
                Handoff::Ambiguous(r) => (DeliveryState::Ambiguous, Some(r)),
            };
            let res = rt
                .ledger
                .execute(Command::DeliveryResult {
                    group_id: gid,
                    delivery_id: did,
                    state,
                    reason,
                })
                .await;
            if let Err(e) = res {
                tracing::error!(error = %e, "could not record delivery result");
            }
            drop(attempt);
        });
        Ok(delivery_id)
    }
}

/// The payload handed to a runtime: the delivery id and the stored event.
pub fn payload(delivery_id: &str, event_json: &str) -> Vec<u8> {
    let ev: Value = serde_json::from_str(event_json).unwrap_or(Value::Null);
    let mut v = serde_json::to_vec(
        &serde_json::json!({"t": "delivery", "delivery_id": delivery_id, "event": ev}),
    )
    .unwrap_or_default();
    v.push(b'\n');
    v
}
