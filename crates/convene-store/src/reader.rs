//! Read side: a small pool of read-only connections that see committed data only.

use std::path::PathBuf;

use convene_core::{DeliveryRow, Obligation, ObligationStatus};
use parking_lot::Mutex;
use rusqlite::{params, params_from_iter, Connection, OptionalExtension};

use crate::{Result, StoreError};

/// A stored event with its serialized JSON (served to clients byte for byte).
#[derive(Debug, Clone)]
pub struct RawEvent {
    /// Per-group sequence.
    pub seq: u64,
    /// Event id.
    pub id: String,
    /// Kind.
    pub kind: String,
    /// Timestamp.
    pub ts: String,
    /// Principal.
    pub by: String,
    /// The full envelope as stored.
    pub json: String,
}

/// A replay starting point, resolved to a `seq` by [`Readers::resolve`].
#[derive(Debug, Clone)]
pub enum Since {
    /// From the beginning.
    Start,
    /// After this `seq`.
    Seq(u64),
    /// After this event.
    EventId(String),
    /// From the first event (in `seq` order) stamped at or after this timestamp. Imported
    /// events keep their `ts`, so `ts` need not rise with `seq`: everything after that event
    /// follows, whatever its stamp, so no later event is skipped.
    Ts(String),
}

/// Pool of read connections.
pub struct Readers {
    pool: Mutex<Vec<Connection>>,
    path: Option<PathBuf>,
}

const COLS: &str = "seq, id, kind, ts, by_, json";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawEvent> {
    Ok(RawEvent {
        seq: r.get::<_, i64>(0)? as u64,
        id: r.get(1)?,
        kind: r.get(2)?,
        ts: r.get(3)?,
        by: r.get(4)?,
        json: r.get(5)?,
    })
}

fn kinds_clause(kinds: &[String], first_param: usize) -> String {
    if kinds.is_empty() {
        return String::new();
    }
    let ph: Vec<String> = (0..kinds.len())
        .map(|i| format!("?{}", first_param + i))
        .collect();
    format!(" AND kind IN ({})", ph.join(","))
}

/// An exclusive upper `seq` bound: 0 means "from the end".
fn upper(before: u64) -> i64 {
    if before == 0 {
        i64::MAX
    } else {
        before as i64
    }
}

/// `SELECT … WHERE filter [AND kind IN (…)] ORDER BY seq {order} LIMIT n`, where `filter`
/// uses `?1..?k` for the `k` values in `params`; the limit and kinds are bound after them.
fn select(
    c: &Connection,
    filter: &str,
    order: &str,
    mut params: Vec<rusqlite::types::Value>,
    limit: usize,
    kinds: &[String],
) -> Result<Vec<RawEvent>> {
    let n = params.len();
    let sql = format!(
        "SELECT {COLS} FROM events WHERE {filter}{} ORDER BY seq {order} LIMIT ?{}",
        kinds_clause(kinds, n + 2),
        n + 1
    );
    params.push((limit as i64).into());
    params.extend(kinds.iter().map(|k| k.clone().into()));
    let mut st = c.prepare_cached(&sql)?;
    let rows = st.query_map(params_from_iter(params), row)?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

impl Readers {
    pub(crate) fn new(conns: Vec<Connection>) -> Self {
        let path = conns.first().and_then(|c| c.path().map(PathBuf::from));
        Self {
            pool: Mutex::new(conns),
            path,
        }
    }

    /// Runs `f` with a pooled connection (opening another when all are busy).
    pub fn with<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let conn = match self.pool.lock().pop() {
            Some(c) => c,
            None => {
                let p = self
                    .path
                    .as_deref()
                    .ok_or_else(|| StoreError::Corrupt("no database path".into()))?;
                crate::open_reader(p)?
            }
        };
        let out = f(&conn);
        let mut pool = self.pool.lock();
        if pool.len() < 16 {
            pool.push(conn);
        }
        out
    }

    /// Events with `seq > after`, ascending, at most `limit`, optionally filtered by kind.
    pub fn events_after(
        &self,
        group_id: &str,
        after: u64,
        limit: usize,
        kinds: &[String],
    ) -> Result<Vec<RawEvent>> {
        self.events_between(group_id, after, 0, limit, kinds)
    }

    /// Events with `after < seq < before` (no upper bound when `before` is 0), ascending, at
    /// most `limit`, optionally filtered by kind.
    pub fn events_between(
        &self,
        group_id: &str,
        after: u64,
        before: u64,
        limit: usize,
        kinds: &[String],
    ) -> Result<Vec<RawEvent>> {
        let p = vec![
            group_id.to_string().into(),
            (after as i64).into(),
            upper(before).into(),
        ];
        self.with(|c| {
            select(
                c,
                "group_id = ?1 AND seq > ?2 AND seq < ?3",
                "ASC",
                p,
                limit,
                kinds,
            )
        })
    }

    /// Cowchat coordination events (every `x.cowchat.*` kind but `x.cowchat.thinking`) with
    /// `seq > after`, ascending, at most `limit`. Reads the `events_coord` partial index, so
    /// the cost follows the number of coordination events, not the size of the group.
    pub fn coordination_after(
        &self,
        group_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<RawEvent>> {
        // INDEXED BY: the plan never falls back to scanning the group (an error instead).
        const SQL: &str = concat!(
            "SELECT seq, id, kind, ts, by_, json FROM events INDEXED BY events_coord
             WHERE group_id = ?1 AND seq > ?2 AND ",
            crate::schema::coord_where!(),
            " ORDER BY seq LIMIT ?3"
        );
        self.with(|c| {
            let mut st = c.prepare_cached(SQL)?;
            let rows = st.query_map(params![group_id, after as i64, limit as i64], row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// Events with `seq < before` (0 = from the end), newest page first, returned ascending.
    pub fn events_before(
        &self,
        group_id: &str,
        before: u64,
        limit: usize,
        kinds: &[String],
    ) -> Result<Vec<RawEvent>> {
        let p = vec![group_id.to_string().into(), upper(before).into()];
        let mut v =
            self.with(|c| select(c, "group_id = ?1 AND seq < ?2", "DESC", p, limit, kinds))?;
        v.reverse();
        Ok(v)
    }

    /// Events whose text or JSON contains `query` (case-insensitive), before `before`.
    pub fn search(
        &self,
        group_id: &str,
        query: &str,
        before: u64,
        limit: usize,
        kinds: &[String],
    ) -> Result<Vec<RawEvent>> {
        let p = vec![
            group_id.to_string().into(),
            upper(before).into(),
            query.to_string().into(),
        ];
        let filter = "group_id = ?1 AND seq < ?2 AND instr(lower(json), lower(?3)) > 0";
        let mut v = self.with(|c| select(c, filter, "DESC", p, limit, kinds))?;
        v.reverse();
        Ok(v)
    }

    /// One event by id.
    pub fn event(&self, group_id: &str, event_id: &str) -> Result<Option<RawEvent>> {
        self.with(|c| {
            let sql = format!("SELECT {COLS} FROM events WHERE group_id = ?1 AND id = ?2");
            Ok(c.prepare_cached(&sql)?
                .query_row(params![group_id, event_id], row)
                .optional()?)
        })
    }

    /// Resolves a cursor to the `seq` to replay after; `None` when the cursor names nothing.
    pub fn resolve(&self, group_id: &str, since: &Since) -> Result<Option<u64>> {
        match since {
            Since::Start => Ok(Some(0)),
            Since::Seq(s) => {
                let head = self.head_seq(group_id)?;
                Ok((*s <= head).then_some(*s))
            }
            Since::EventId(id) => Ok(self.event(group_id, id)?.map(|e| e.seq)),
            Since::Ts(ts) => self.with(|c| {
                let first: Option<i64> = c
                    .prepare_cached("SELECT MIN(seq) FROM events WHERE group_id = ?1 AND ts >= ?2")?
                    .query_row(params![group_id, ts], |r| r.get(0))?;
                match first {
                    Some(n) => Ok(Some(n.saturating_sub(1) as u64)),
                    // Nothing at or after it yet: live from the head.
                    None => {
                        let head: i64 = c
                            .prepare_cached(
                                "SELECT COALESCE(MAX(seq), 0) FROM events WHERE group_id = ?1",
                            )?
                            .query_row(params![group_id], |r| r.get(0))?;
                        Ok(Some(head as u64))
                    }
                }
            }),
        }
    }

    /// Highest committed `seq` of a group (0 when empty).
    pub fn head_seq(&self, group_id: &str) -> Result<u64> {
        self.with(|c| {
            let n: i64 = c
                .prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM events WHERE group_id = ?1")?
                .query_row(params![group_id], |r| r.get(0))?;
            Ok(n as u64)
        })
    }

    /// Number of events of a group.
    pub fn count(&self, group_id: &str) -> Result<u64> {
        self.with(|c| {
            let n: i64 = c
                .prepare_cached("SELECT COUNT(*) FROM events WHERE group_id = ?1")?
                .query_row(params![group_id], |r| r.get(0))?;
            Ok(n as u64)
        })
    }

    /// Mail addressed to `actor_id` after its cursor: (items, cursor seq).
    pub fn inbox(
        &self,
        group_id: &str,
        actor_id: &str,
        limit: usize,
    ) -> Result<(Vec<RawEvent>, u64)> {
        self.with(|c| {
            let cursor: i64 = c
                .prepare_cached("SELECT seq FROM mail_cursors WHERE group_id = ?1 AND actor_id = ?2")?
                .query_row(params![group_id, actor_id], |r| r.get(0))
                .optional()?
                .unwrap_or(0);
            let mut st = c.prepare_cached(
                "SELECT e.seq, e.id, e.kind, e.ts, e.by_, e.json FROM mail_index m JOIN events e ON e.group_id = m.group_id AND e.seq = m.seq
                 WHERE m.group_id = ?1 AND m.actor_id = ?2 AND m.seq > ?3 ORDER BY m.seq LIMIT ?4",
            )?;
            let rows = st.query_map(params![group_id, actor_id, cursor, limit as i64], row)?;
            Ok((rows.collect::<Result<Vec<_>, _>>()?, cursor as u64))
        })
    }

    /// Count of unread Mail for an actor.
    pub fn unread(&self, group_id: &str, actor_id: &str) -> Result<u64> {
        self.with(|c| {
            let n: i64 = c
                .prepare_cached(
                    "SELECT COUNT(*) FROM mail_index WHERE group_id = ?1 AND actor_id = ?2
                     AND seq > COALESCE((SELECT seq FROM mail_cursors WHERE group_id = ?1 AND actor_id = ?2), 0)",
                )?
                .query_row(params![group_id, actor_id], |r| r.get(0))?;
            Ok(n as u64)
        })
    }

    /// Obligations of one `request_reply` message.
    pub fn obligations(&self, group_id: &str, source_event_id: &str) -> Result<Vec<Obligation>> {
        self.with(|c| {
            let mut st = c.prepare_cached(
                "SELECT actor_id, status, closed_by FROM obligations WHERE group_id = ?1 AND source_event_id = ?2 ORDER BY actor_id",
            )?;
            let rows = st.query_map(params![group_id, source_event_id], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, Option<String>>(2)?))
            })?;
            let mut out = Vec::new();
            for r in rows {
                let (actor_id, status, closed_by) = r?;
                let status = ObligationStatus::parse(&status).ok_or_else(|| StoreError::Corrupt("obligation status".into()))?;
                out.push(Obligation { actor_id, status, closed_by });
            }
            Ok(out)
        })
    }

    /// Latest delivery rows for one source message.
    pub fn deliveries(&self, group_id: &str, source_event_id: &str) -> Result<Vec<DeliveryRow>> {
        self.with(|c| {
            let mut st = c.prepare_cached(
                "SELECT delivery_id, actor_id, source_event_id, state, transport FROM deliveries WHERE group_id = ?1 AND source_event_id = ?2 ORDER BY actor_id",
            )?;
            let rows = st.query_map(params![group_id, source_event_id], |r| {
                Ok(DeliveryRow { delivery_id: r.get(0)?, actor_id: r.get(1)?, source_event_id: r.get(2)?, state: r.get(3)?, transport: r.get(4)? })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }
}

impl Readers {
    /// Whether the Mail at `seq` is in `actor_id`'s inbox index (it was addressed to the
    /// actor's current generation).
    pub fn mail_indexed(&self, group_id: &str, actor_id: &str, seq: u64) -> Result<bool> {
        self.with(|c| {
            let n: Option<i64> = c
                .prepare_cached(
                    "SELECT seq FROM mail_index WHERE group_id = ?1 AND actor_id = ?2 AND seq = ?3",
                )?
                .query_row(params![group_id, actor_id, seq as i64], |r| r.get(0))
                .optional()?;
            Ok(n.is_some())
        })
    }

    /// An actor's Mail cursor `seq` (0 when none).
    pub fn mail_cursor(&self, group_id: &str, actor_id: &str) -> Result<u64> {
        self.with(|c| {
            let n: Option<i64> = c
                .prepare_cached(
                    "SELECT seq FROM mail_cursors WHERE group_id = ?1 AND actor_id = ?2",
                )?
                .query_row(params![group_id, actor_id], |r| r.get(0))
                .optional()?;
            Ok(n.unwrap_or(0) as u64)
        })
    }
}
