//! Group commit for the evidence store: receipts issued at the same time by different
//! callers (the connections of `verifier serve`, the daemon's concurrent tool calls) share
//! one transaction and one fsync, instead of queueing for one fsync each.
//!
//! A caller queues its rows and waits. If no commit is running, it becomes the leader: it
//! takes everything queued, commits it in one transaction, settles every caller of that
//! batch with the result, and returns. Nobody returns before the commit that holds its rows
//! (§11.1: durable before the tool runs); a failed commit fails every caller of its batch.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use serde_json::Value;

use crate::error::EvidenceError;
use crate::receipt::Receipt;
use crate::store::EvidenceStore;

/// Rows of one caller: each receipt with the command that produced it.
pub(crate) type Rows = Vec<(Receipt, Option<Value>)>;

/// The queue callers wait on.
#[derive(Default)]
struct Queue {
    /// Rows not yet taken by a leader, with the ticket of the caller that queued them.
    rows: Vec<(u64, Rows)>,
    /// The last ticket handed out.
    issued: u64,
    /// A leader is committing.
    committing: bool,
    /// Results of finished commits not yet read by their caller, by ticket.
    settled: HashMap<u64, bool>,
}

/// An evidence store shared by concurrent issuers, committing their rows together.
pub(crate) struct GroupCommit {
    store: Mutex<EvidenceStore>,
    queue: Mutex<Queue>,
    done: Condvar,
}

impl GroupCommit {
    /// Wraps an open store.
    pub fn new(store: EvidenceStore) -> Self {
        Self {
            store: Mutex::new(store),
            queue: Mutex::new(Queue::default()),
            done: Condvar::new(),
        }
    }

    /// The store itself, for reads and single appends outside issuance.
    pub fn lock(&self) -> Result<MutexGuard<'_, EvidenceStore>, EvidenceError> {
        self.store
            .lock()
            .map_err(|_| EvidenceError::Invalid("store lock poisoned".into()))
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        // The queue holds no invariant a panicking holder could break half-way.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends `rows` durably, in one transaction with whatever other callers queued
    /// meanwhile; returns once that transaction committed (or failed).
    pub fn persist(&self, rows: Rows) -> Result<(), EvidenceError> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut q = self.queue();
        q.issued += 1;
        let ticket = q.issued;
        q.rows.push((ticket, rows));
        loop {
            if let Some(ok) = q.settled.remove(&ticket) {
                return if ok {
                    Ok(())
                } else {
                    Err(EvidenceError::Invalid(
                        "evidence could not be persisted".into(),
                    ))
                };
            }
            if !q.committing {
                q.committing = true;
                let batch = std::mem::take(&mut q.rows);
                drop(q);
                let ok = self.commit(&batch);
                q = self.queue();
                q.committing = false;
                for (t, _) in &batch {
                    q.settled.insert(*t, ok);
                }
                self.done.notify_all();
                continue;
            }
            q = self.done.wait(q).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// One transaction for every row of `batch`; true when it committed.
    fn commit(&self, batch: &[(u64, Rows)]) -> bool {
        let rows: Vec<(&Receipt, Option<&Value>)> = batch
            .iter()
            .flat_map(|(_, rows)| rows.iter().map(|(r, c)| (r, c.as_ref())))
            .collect();
        // A panic inside SQLite's wrapper must not leave the other callers waiting forever.
        catch_unwind(AssertUnwindSafe(|| {
            self.lock().and_then(|s| s.append_all(&rows)).is_ok()
        }))
        .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::KeyMaterial;
    use crate::rules::default_rules;
    use crate::{Verifier, VerifierSettings};
    use serde_json::json;
    use std::sync::Arc;

    fn intake(n: usize) -> Value {
        json!({"intake_version":"1.3","agent_id":"a","tool":"search_web",
               "params":{"query":"q"},"timestamp":1722384000.0,"trace_id":format!("t{n:06}")})
    }

    fn verifier(dir: &std::path::Path) -> Verifier {
        let store = EvidenceStore::open(&dir.join("ev.db")).expect("store");
        Verifier::new(
            VerifierSettings::default(),
            KeyMaterial::generate(None),
            default_rules(),
        )
        .expect("verifier")
        .with_store(store)
        .expect("with store")
    }

    /// Issues `per` receipts from each of `threads` threads at once; every result, in order.
    fn issue_concurrently(v: &Arc<Verifier>, threads: usize, per: usize) -> Vec<bool> {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let v = v.clone();
                std::thread::spawn(move || {
                    (0..per)
                        .map(|i| v.issue(&intake(t * per + i)).is_ok())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("issuer thread"))
            .collect()
    }

    #[test]
    fn ccs_11_1_concurrent_issuers_all_persist_before_they_return() {
        let dir = tempfile::tempdir().expect("tempdir");
        let v = Arc::new(verifier(dir.path()));
        let results = issue_concurrently(&v, 8, 40);
        assert!(results.iter().all(|ok| *ok));
        drop(v);
        // Reopened from the file: every receipt returned is there, once.
        let store = EvidenceStore::open(&dir.path().join("ev.db")).expect("reopen");
        assert_eq!(store.count().expect("count"), 320);
        for n in 0..320 {
            assert_eq!(
                store.by_trace(&format!("t{n:06}")).expect("by trace").len(),
                1
            );
        }
    }

    #[test]
    fn ccs_11_1_a_failed_group_commit_fails_every_caller_in_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let v = Arc::new(verifier(dir.path()));
        v.with_store_ref(|s| {
            s.execute_batch_for_test(
                "CREATE TRIGGER fail_insert BEFORE INSERT ON receipts
                 BEGIN SELECT RAISE(ABORT, 'disk full'); END;",
            )
        })
        .expect("store")
        .expect("trigger");
        let results = issue_concurrently(&v, 6, 20);
        assert!(
            results.iter().all(|ok| !ok),
            "a receipt was returned unpersisted"
        );
        assert_eq!(
            v.with_store_ref(|s| s.count())
                .expect("store")
                .expect("count"),
            0
        );
    }
}
