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
    convene_core::engine::transport_for(runtime)
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

    /// Consumes committed batches and starts automatic deliveries: per batch, every claim in
    /// one run and every handoff started in ledger order, so an attached session receives
    /// its messages in the order the ledger holds them.
    pub fn spawn_worker(&self, mut feed: CommitFeed) {
        let rt = self.clone();
        tokio::spawn(async move {
            while let Some(first) = feed.recv().await {
                // Every commit published meanwhile joins this run (one claim transaction).
                let mut batches = vec![first];
                while let Ok(more) = feed.try_recv() {
                    batches.push(more);
                }
                let targets: Vec<Target> = batches
                    .iter()
                    .flat_map(|b| b.iter())
                    .flat_map(|ev| {
                        rt.automatic_targets(ev)
                            .into_iter()
                            .map(move |actor_id| Target {
                                group_id: ev.group_id.clone(),
                                actor_id,
                                source_event_id: ev.id.clone(),
                            })
                    })
                    .collect();
                if targets.is_empty() {
                    continue;
                }
                for (t, res) in rt.deliver_all(targets, ClaimKind::Automatic).await {
                    if let Err(e) = res {
                        if e.code != ErrorCode::DeliveryConflict {
                            tracing::warn!(error = %e, actor = t.actor_id, "delivery failed to start");
                        }
                    }
                }
            }
        });
    }

    fn automatic_targets(&self, ev: &Event) -> Vec<String> {
        // The same rule that recorded them as due with the message (the engine's).
        let eng = self.ledger.engine();
        eng.group(&ev.group_id)
            .map(|g| convene_core::engine::automatic_targets(g, ev))
            .unwrap_or_default()
    }

    /// Runtime recovery (§6.4), after the previous process's claims were settled: makes the
    /// automatic deliveries it owed and never claimed (`Ledger::take_recovery`), in ledger
    /// order, as ordinary attempts (claim, hand off, result).
    pub fn recover(&self, due: Vec<(String, String, String)>) {
        if due.is_empty() {
            return;
        }
        let rt = self.clone();
        tokio::spawn(async move {
            let targets = due
                .into_iter()
                .map(|(group_id, source_event_id, actor_id)| Target {
                    group_id,
                    actor_id,
                    source_event_id,
                })
                .collect();
            for (t, res) in rt.deliver_all(targets, ClaimKind::Automatic).await {
                if let Err(e) = res {
                    tracing::warn!(error = %e, actor = t.actor_id, "recovered delivery failed to start");
                }
            }
        });
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
        let t = Target {
            group_id: group_id.to_string(),
            actor_id: actor_id.to_string(),
            source_event_id: source_event_id.to_string(),
        };
        self.deliver_all(vec![t], kind)
            .await
            .pop()
            .map(|(_, r)| r)
            .unwrap_or_else(|| Err(CoreError::new(ErrorCode::Internal, "no attempt made")))
    }

    /// One attempt per target, in order: the claims are committed as one run (`claimed`
    /// before any runtime I/O), then each handoff is started in the same order (a session's
    /// frame is queued before the next one's), and each records its result when it ends.
    async fn deliver_all(
        &self,
        targets: Vec<Target>,
        kind: ClaimKind,
    ) -> Vec<(Target, Result<String, CoreError>)> {
        let mut out: Vec<(Target, Result<String, CoreError>)> = Vec::with_capacity(targets.len());
        let mut plans = Vec::with_capacity(targets.len());
        for t in targets {
            match self.plan(&t) {
                Ok(p) => plans.push((t, p)),
                Err(e) => out.push((t, Err(e))),
            }
        }
        if plans.is_empty() {
            return out;
        }
        let claims = plans
            .iter()
            .map(|(t, p)| Command::DeliveryClaim {
                group_id: t.group_id.clone(),
                actor_id: t.actor_id.clone(),
                source_event_id: t.source_event_id.clone(),
                transport: p.transport.to_string(),
                kind,
            })
            .collect();
        let answers = match self.ledger.submit_many(claims).await {
            Ok(rx) => rx.await.unwrap_or_default(),
            Err(e) => {
                out.extend(plans.into_iter().map(|(t, _)| (t, Err(e.clone()))));
                return out;
            }
        };
        let mut answers = answers.into_iter();
        for (t, p) in plans {
            let res = match answers.next() {
                Some(Ok(c)) => match c
                    .events
                    .first()
                    .and_then(|(e, _)| e.data_str("delivery_id"))
                {
                    Some(did) => {
                        let did = did.to_string();
                        self.start(&t, p, &did);
                        Ok(did)
                    }
                    None => Err(CoreError::new(
                        ErrorCode::Internal,
                        "claim appended nothing",
                    )),
                },
                Some(Err(e)) => Err(e),
                None => Err(crate::ledger::stopped()),
            };
            out.push((t, res));
        }
        out
    }

    /// What a target's attempt needs, read before its claim (the source event is immutable).
    fn plan(&self, t: &Target) -> Result<Plan, CoreError> {
        let (runtime, command) = {
            let eng = self.ledger.engine();
            let g = eng
                .group(&t.group_id)
                .ok_or_else(|| CoreError::no_group(&t.group_id))?;
            let a = g
                .actor(&t.actor_id)
                .ok_or_else(|| CoreError::no_actor(&t.actor_id))?;
            (a.runtime.clone(), a.command.clone())
        };
        let source = self
            .ledger
            .readers()
            .event(&t.group_id, &t.source_event_id)
            .map_err(CoreError::from)?
            .map(|r| r.json)
            .ok_or_else(|| CoreError::no_event(&t.source_event_id))?;
        Ok(Plan {
            transport: transport_for(&runtime).unwrap_or("none"),
            runtime,
            command,
            source,
        })
    }

    /// Starts a claimed attempt's handoff and records its result when it ends. A session
    /// frame is queued before this returns (so the caller's order is the session's order).
    fn start(&self, t: &Target, p: Plan, delivery_id: &str) {
        let attempt = Attempt::start(&self.in_flight);
        // The session frame is queued now; other transports start in the task.
        let queued = (p.transport == "session").then(|| {
            match convene_core::engine::delivery_generation(delivery_id) {
                Some(generation) => self.sessions.enqueue(
                    &t.group_id,
                    &t.actor_id,
                    generation,
                    delivery_id,
                    &p.source,
                ),
                None => Err(Handoff::Failed(format!(
                    "malformed delivery id {delivery_id}"
                ))),
            }
        });
        let rt = self.clone();
        let (gid, aid, did) = (
            t.group_id.clone(),
            t.actor_id.clone(),
            delivery_id.to_string(),
        );
        tokio::spawn(async move {
            let handoff = match (p.transport, queued) {
                (_, Some(Ok(pending))) => pending.outcome().await,
                (_, Some(Err(h))) => h,
                ("command", None) => {
                    command::run(&p.command, &gid, &aid, &did, &p.source, rt.command_timeout).await
                }
                _ => Handoff::Failed(format!("no runtime adapter for runtime {:?}", p.runtime)),
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
    }
}

/// One delivery to attempt: a message to one recipient actor.
#[derive(Debug, Clone)]
pub struct Target {
    /// Group.
    pub group_id: String,
    /// Recipient actor.
    pub actor_id: String,
    /// The `chat.message` to deliver.
    pub source_event_id: String,
}

/// What an attempt needs besides its target.
struct Plan {
    transport: &'static str,
    runtime: String,
    command: Vec<String>,
    source: String,
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
