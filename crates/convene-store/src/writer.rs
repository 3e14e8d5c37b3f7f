//! The single writer: applies engine outcomes inside one transaction per batch.

use convene_core::{
    Change, CoreError, DeliveryRow, Event, Group, LedgerView, Obligation, ObligationStatus, Outcome,
};
use rusqlite::{params, Connection, OptionalExtension, Transaction};

use crate::{Result, StoreError};

/// Owns the write connection. Only one exists per database (the daemon's home lock
/// guarantees one process; this type guarantees one writer inside it).
pub struct Writer {
    conn: Connection,
}

impl Writer {
    pub(crate) fn new(conn: Connection) -> Self {
        Self { conn }
    }

    /// Starts a batch transaction.
    pub fn begin(&mut self) -> Result<Transaction<'_>> {
        Ok(self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?)
    }

    /// Loads every group with its `last_seq` from the ledger.
    pub fn load_groups(&self) -> Result<Vec<Group>> {
        let mut st = self.conn.prepare("SELECT g.json, (SELECT COALESCE(MAX(seq),0) FROM events e WHERE e.group_id = g.group_id) FROM groups g")?;
        let rows = st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
        let mut out = Vec::new();
        for row in rows {
            let (json, last) = row?;
            let mut g: Group = serde_json::from_str(&json)
                .map_err(|e| StoreError::Corrupt(format!("group: {e}")))?;
            g.last_seq = last as u64;
            out.push(g);
        }
        Ok(out)
    }

    /// Deliveries whose latest state is `claimed` (left by a previous process).
    pub fn claimed_deliveries(&self) -> Result<Vec<(String, String)>> {
        let mut st = self
            .conn
            .prepare("SELECT group_id, delivery_id FROM deliveries WHERE state = 'claimed'")?;
        let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// Automatic deliveries due and never recorded (their claim did not commit before the
    /// previous process ended): (group, source event, actor), in ledger order.
    pub fn due_deliveries(&self) -> Result<Vec<(String, String, String)>> {
        let mut st = self.conn.prepare(
            "SELECT group_id, source_event_id, actor_id FROM deliveries_due ORDER BY seq, group_id, actor_id",
        )?;
        let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// Forgets due deliveries that can no longer be made (the actor or group is gone, or no
    /// longer driven): recovery does not look at them again.
    pub fn drop_due(&mut self, rows: &[(String, String, String)]) -> Result<()> {
        let tx = self.conn.transaction()?;
        {
            let mut st = tx.prepare(
                "DELETE FROM deliveries_due WHERE group_id = ?1 AND source_event_id = ?2 AND actor_id = ?3",
            )?;
            for (g, s, a) in rows {
                st.execute(params![g, s, a])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Checkpoints the WAL into the main file (called when idle and at shutdown).
    pub fn checkpoint(&self) -> Result<()> {
        self.conn.execute_batch("PRAGMA wal_checkpoint(PASSIVE)")?;
        Ok(())
    }

    /// Checkpoints and makes the next commit start the WAL over (RESTART), waiting at most
    /// `wait` for readers of old frames or another checkpointer; past that it does what it
    /// can without blocking (the caller tries again later).
    pub fn checkpoint_restart(&self, wait: std::time::Duration) -> Result<()> {
        self.conn.busy_timeout(wait)?;
        let r = self
            .conn
            .query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(()));
        self.conn.busy_timeout(crate::BUSY_TIMEOUT)?;
        r?;
        Ok(())
    }
}

/// Writes one outcome's events and projection changes into the open transaction.
pub fn apply(tx: &Transaction<'_>, out: &Outcome) -> Result<Vec<String>> {
    let mut jsons = Vec::with_capacity(out.events.len());
    {
        let mut ins = tx.prepare_cached("INSERT INTO events (group_id, seq, id, ts, kind, by_, json) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)")?;
        for e in &out.events {
            let json = e.to_json();
            ins.execute(params![
                e.group_id,
                e.seq as i64,
                e.id,
                e.ts,
                e.kind,
                e.by,
                json
            ])?;
            jsons.push(json);
        }
    }
    for c in &out.changes {
        match c {
            Change::GroupUpsert(g) => {
                let json = serde_json::to_string(g.as_ref())
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?;
                tx.prepare_cached("INSERT INTO groups (group_id, json) VALUES (?1, ?2) ON CONFLICT(group_id) DO UPDATE SET json = excluded.json")?
                    .execute(params![g.group_id, json])?;
            }
            Change::GroupDelete(gid) => {
                for t in [
                    "groups",
                    "events",
                    "obligations",
                    "mail_index",
                    "mail_cursors",
                    "deliveries",
                    "deliveries_due",
                    "idempotency",
                ] {
                    tx.execute(
                        &format!("DELETE FROM {t} WHERE group_id = ?1"),
                        params![gid],
                    )?;
                }
            }
            Change::Obligation {
                group_id,
                source_event_id,
                actor_id,
                status,
                closed_by,
            } => {
                tx.prepare_cached(
                    "INSERT INTO obligations (group_id, source_event_id, actor_id, status, closed_by) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT(group_id, source_event_id, actor_id) DO UPDATE SET status = excluded.status, closed_by = excluded.closed_by",
                )?
                .execute(params![group_id, source_event_id, actor_id, status.as_str(), closed_by])?;
            }
            Change::MailIndex {
                group_id,
                actor_id,
                seq,
                event_id,
            } => {
                tx.prepare_cached("INSERT OR IGNORE INTO mail_index (group_id, actor_id, seq, event_id) VALUES (?1, ?2, ?3, ?4)")?
                    .execute(params![group_id, actor_id, *seq as i64, event_id])?;
            }
            Change::MailCursor {
                group_id,
                actor_id,
                seq,
                event_id,
            } => {
                tx.prepare_cached(
                    "INSERT INTO mail_cursors (group_id, actor_id, seq, event_id) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT(group_id, actor_id) DO UPDATE SET seq = excluded.seq, event_id = excluded.event_id WHERE excluded.seq > mail_cursors.seq",
                )?
                .execute(params![group_id, actor_id, *seq as i64, event_id])?;
            }
            Change::ActorRetire {
                group_id,
                actor_id,
                closed_by,
            } => {
                tx.prepare_cached("DELETE FROM mail_index WHERE group_id = ?1 AND actor_id = ?2")?
                    .execute(params![group_id, actor_id])?;
                // A later actor of the same id is another generation: not its deliveries.
                tx.prepare_cached(
                    "DELETE FROM deliveries_due WHERE group_id = ?1 AND actor_id = ?2",
                )?
                .execute(params![group_id, actor_id])?;
                tx.prepare_cached(
                    "DELETE FROM mail_cursors WHERE group_id = ?1 AND actor_id = ?2",
                )?
                .execute(params![group_id, actor_id])?;
                tx.prepare_cached(
                    "UPDATE obligations SET status = 'cancelled', closed_by = ?3
                     WHERE group_id = ?1 AND actor_id = ?2 AND status = 'requested'",
                )?
                .execute(params![group_id, actor_id, closed_by])?;
            }
            Change::DeliveryDue {
                group_id,
                source_event_id,
                actor_id,
                seq,
            } => {
                tx.prepare_cached("INSERT OR IGNORE INTO deliveries_due (group_id, source_event_id, actor_id, seq) VALUES (?1, ?2, ?3, ?4)")?
                    .execute(params![group_id, source_event_id, actor_id, *seq as i64])?;
            }
            Change::Delivery { group_id, row } => {
                // The first record of a delivery (its claim, or a manual attempt) settles
                // what was due.
                tx.prepare_cached(
                    "DELETE FROM deliveries_due WHERE group_id = ?1 AND source_event_id = ?2 AND actor_id = ?3",
                )?
                .execute(params![group_id, row.source_event_id, row.actor_id])?;
                tx.prepare_cached(
                    "INSERT INTO deliveries (group_id, delivery_id, actor_id, source_event_id, state, transport) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                     ON CONFLICT(group_id, delivery_id) DO UPDATE SET state = excluded.state, transport = excluded.transport",
                )?
                .execute(params![group_id, row.delivery_id, row.actor_id, row.source_event_id, row.state, row.transport])?;
            }
            Change::Idempotency {
                group_id,
                by,
                client_id,
                event_id,
                at_unix,
            } => {
                tx.prepare_cached(
                    "INSERT INTO idempotency (group_id, by_, client_id, event_id, at_unix) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT(group_id, by_, client_id) DO UPDATE SET event_id = excluded.event_id, at_unix = excluded.at_unix",
                )?
                .execute(params![group_id, by, client_id, event_id, at_unix])?;
            }
        }
    }
    Ok(jsons)
}

/// [`LedgerView`] over the writer's open transaction: sees earlier commands of the batch.
pub struct WriterView<'a> {
    tx: &'a Transaction<'a>,
}

impl<'a> WriterView<'a> {
    /// A view over `tx`.
    pub fn new(tx: &'a Transaction<'a>) -> Self {
        Self { tx }
    }
}

fn core(e: rusqlite::Error) -> CoreError {
    CoreError::storage(e.to_string())
}

impl LedgerView for WriterView<'_> {
    fn event(&self, group_id: &str, event_id: &str) -> Result<Option<Event>, CoreError> {
        let json: Option<String> = self
            .tx
            .prepare_cached("SELECT json FROM events WHERE group_id = ?1 AND id = ?2")
            .and_then(|mut s| {
                s.query_row(params![group_id, event_id], |r| r.get(0))
                    .optional()
            })
            .map_err(core)?;
        json.map(|j| {
            serde_json::from_str(&j).map_err(|e| CoreError::storage(format!("corrupt event: {e}")))
        })
        .transpose()
    }

    fn obligations(
        &self,
        group_id: &str,
        source_event_id: &str,
    ) -> Result<Vec<Obligation>, CoreError> {
        let mut st = self
            .tx
            .prepare_cached("SELECT actor_id, status, closed_by FROM obligations WHERE group_id = ?1 AND source_event_id = ?2")
            .map_err(core)?;
        let rows = st
            .query_map(params![group_id, source_event_id], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, Option<String>>(2)?,
                ))
            })
            .map_err(core)?;
        let mut out = Vec::new();
        for row in rows {
            let (actor_id, status, closed_by) = row.map_err(core)?;
            let status = ObligationStatus::parse(&status)
                .ok_or_else(|| CoreError::storage("bad obligation status"))?;
            out.push(Obligation {
                actor_id,
                status,
                closed_by,
            });
        }
        Ok(out)
    }

    fn mail_addressed(
        &self,
        group_id: &str,
        actor_id: &str,
        event_id: &str,
    ) -> Result<Option<u64>, CoreError> {
        self.tx
            .prepare_cached(
                "SELECT m.seq FROM events e JOIN mail_index m ON m.group_id = e.group_id AND m.actor_id = ?3 AND m.seq = e.seq
                 WHERE e.group_id = ?1 AND e.id = ?2",
            )
            .and_then(|mut s| s.query_row(params![group_id, event_id, actor_id], |r| r.get::<_, i64>(0)).optional())
            .map(|o| o.map(|v| v as u64))
            .map_err(core)
    }

    fn mail_cursor(&self, group_id: &str, actor_id: &str) -> Result<u64, CoreError> {
        self.tx
            .prepare_cached("SELECT seq FROM mail_cursors WHERE group_id = ?1 AND actor_id = ?2")
            .and_then(|mut s| {
                s.query_row(params![group_id, actor_id], |r| r.get::<_, i64>(0))
                    .optional()
            })
            .map(|o| o.unwrap_or(0) as u64)
            .map_err(core)
    }

    fn delivery(
        &self,
        group_id: &str,
        delivery_id: &str,
    ) -> Result<Option<DeliveryRow>, CoreError> {
        self.tx
            .prepare_cached("SELECT actor_id, source_event_id, state, transport FROM deliveries WHERE group_id = ?1 AND delivery_id = ?2")
            .and_then(|mut s| {
                s.query_row(params![group_id, delivery_id], |r| {
                    Ok(DeliveryRow {
                        delivery_id: delivery_id.to_string(),
                        actor_id: r.get(0)?,
                        source_event_id: r.get(1)?,
                        state: r.get(2)?,
                        transport: r.get(3)?,
                    })
                })
                .optional()
            })
            .map_err(core)
    }

    fn idempotent(
        &self,
        group_id: &str,
        by: &str,
        client_id: &str,
        since_unix: i64,
    ) -> Result<Option<String>, CoreError> {
        self.tx
            .prepare_cached("SELECT event_id FROM idempotency WHERE group_id = ?1 AND by_ = ?2 AND client_id = ?3 AND at_unix >= ?4")
            .and_then(|mut s| s.query_row(params![group_id, by, client_id, since_unix], |r| r.get(0)).optional())
            .map_err(core)
    }
}
