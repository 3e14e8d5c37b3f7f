//! Subscriptions, their cursors and pending retry state in `<home>/cowchat/webhooks.db`.
//!
//! A separate SQLite file, not the ledger: subscriptions are face configuration, and a
//! delivery cursor moving must not append ledger events. All SQL lives here.

use std::path::Path;

use parking_lot::Mutex;
use rusqlite::{params, Connection, OptionalExtension, Row};

/// Store failures.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite failed.
    #[error("webhooks db: {0}")]
    Sql(#[from] rusqlite::Error),
    /// The directory could not be created.
    #[error("webhooks db dir: {0}")]
    Io(#[from] std::io::Error),
    /// A stored JSON column did not parse.
    #[error("webhooks db json: {0}")]
    Json(#[from] serde_json::Error),
}

/// Whether a subscription delivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Delivering.
    Active,
    /// Stopped after the retries ran out; `enable_subscription` re-arms it.
    Failed,
    /// Stopped because the API key it was made with was rotated or removed;
    /// `enable_subscription` with the principal's current key re-arms it.
    Revoked,
}

impl Status {
    /// Wire and column spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Failed => "failed",
            Self::Revoked => "revoked",
        }
    }
}

/// One subscription row.
#[derive(Debug, Clone)]
pub struct Sub {
    /// `sub_<uuid>`.
    pub id: String,
    /// Owner (the API-key principal; "primary" until per-key auth exists).
    pub principal: String,
    /// Room (group) id.
    pub room_id: String,
    /// Target URL, validated at creation.
    pub url: String,
    /// Signing secret as given (never leaves the daemon).
    pub secret: String,
    /// Match any of these `metadata.kind`s (None: any kind).
    pub kinds: Option<Vec<String>>,
    /// Only these senders (agent id or name).
    pub only_from: Option<Vec<String>>,
    /// Never these senders (agent id or name).
    pub not_from: Option<Vec<String>>,
    /// Drop thinking pulses.
    pub exclude_thinking: bool,
    /// Active or failed.
    pub status: Status,
    /// Every event with `seq <= cursor` is done (delivered or filtered out).
    pub cursor: u64,
    /// Failed attempts of the delivery at the head of the queue.
    pub failures: u32,
    /// The event `seq` being retried, if any.
    pub retry_seq: Option<u64>,
    /// When the next attempt of `retry_seq` is due (unix ms).
    pub retry_at_ms: Option<i64>,
    /// RFC 3339 creation time.
    pub created_at: String,
    /// SHA-256 (hex) of the API key it was made (or last re-armed) with; None for a keyless
    /// local client, whose subscriptions no key change revokes.
    pub key_sha256: Option<String>,
    /// Bumped by every `enable`: a delivery task writes only while the row still has the
    /// generation it was started with, so a replaced task's late write changes nothing.
    pub generation: u64,
}

/// The subscriptions database.
pub struct Store {
    c: Mutex<Connection>,
}

const COLS: &str = "subscription_id, principal, room_id, webhook_url, secret, kinds, only_from, \
                    not_from, exclude_thinking, status, cursor_seq, failures, retry_seq, \
                    retry_at_ms, created_at, key_sha256, generation";

/// `key_sha256` of a row made before keys were recorded (bound at the next check).
const LEGACY: &str = "legacy";
/// The status a delivery task's write leaves: `active`, except that a revoked row stays
/// revoked (the task may be finishing a write as it is stopped).
const UNLESS_REVOKED: &str = "CASE status WHEN 'revoked' THEN 'revoked' ELSE 'active' END";

fn list_col(v: &Option<Vec<String>>) -> Result<Option<String>, StoreError> {
    Ok(v.as_ref().map(serde_json::to_string).transpose()?)
}

fn from_row(r: &Row<'_>) -> rusqlite::Result<(Sub, [Option<String>; 3])> {
    let status: String = r.get(9)?;
    Ok((
        Sub {
            id: r.get(0)?,
            principal: r.get(1)?,
            room_id: r.get(2)?,
            url: r.get(3)?,
            secret: r.get(4)?,
            kinds: None,
            only_from: None,
            not_from: None,
            exclude_thinking: r.get::<_, i64>(8)? != 0,
            status: match status.as_str() {
                "failed" => Status::Failed,
                "revoked" => Status::Revoked,
                _ => Status::Active,
            },
            cursor: r.get::<_, i64>(10)?.max(0) as u64,
            failures: r.get::<_, i64>(11)?.max(0) as u32,
            retry_seq: r.get::<_, Option<i64>>(12)?.map(|s| s.max(0) as u64),
            retry_at_ms: r.get(13)?,
            created_at: r.get(14)?,
            key_sha256: r.get(15)?,
            generation: r.get::<_, i64>(16)?.max(0) as u64,
        },
        [r.get(5)?, r.get(6)?, r.get(7)?],
    ))
}

fn finish((mut s, lists): (Sub, [Option<String>; 3])) -> Result<Sub, StoreError> {
    let parse = |c: &Option<String>| -> Result<Option<Vec<String>>, StoreError> {
        Ok(c.as_deref().map(serde_json::from_str).transpose()?)
    };
    s.kinds = parse(&lists[0])?;
    s.only_from = parse(&lists[1])?;
    s.not_from = parse(&lists[2])?;
    Ok(s)
}

impl Store {
    /// Opens (creating) the database at `path`.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let c = Connection::open(path)?;
        c.execute_batch(
            "PRAGMA journal_mode=WAL;
             PRAGMA synchronous=NORMAL;
             CREATE TABLE IF NOT EXISTS subscriptions (
                subscription_id TEXT PRIMARY KEY,
                principal TEXT NOT NULL,
                room_id TEXT NOT NULL,
                webhook_url TEXT NOT NULL,
                secret TEXT NOT NULL,
                kinds TEXT,
                only_from TEXT,
                not_from TEXT,
                exclude_thinking INTEGER NOT NULL DEFAULT 0,
                status TEXT NOT NULL DEFAULT 'active',
                cursor_seq INTEGER NOT NULL,
                failures INTEGER NOT NULL DEFAULT 0,
                retry_seq INTEGER,
                retry_at_ms INTEGER,
                created_at TEXT NOT NULL
             );
             CREATE INDEX IF NOT EXISTS subscriptions_owner
                ON subscriptions(principal, room_id);",
        )?;
        let has_key_col = c
            .prepare("SELECT 1 FROM pragma_table_info('subscriptions') WHERE name = 'key_sha256'")?
            .exists([])?;
        if !has_key_col {
            // Rows from before keys were recorded: a keyed principal's are bound to the key it
            // has at the next check (LEGACY); `primary`'s may be keyless, so they stay unbound.
            c.execute_batch(&format!(
                "BEGIN;
                 ALTER TABLE subscriptions ADD COLUMN key_sha256 TEXT;
                 UPDATE subscriptions SET key_sha256 = '{LEGACY}' WHERE principal != 'primary';
                 COMMIT;"
            ))?;
        }
        let has_gen_col = c
            .prepare("SELECT 1 FROM pragma_table_info('subscriptions') WHERE name = 'generation'")?
            .exists([])?;
        if !has_gen_col {
            c.execute_batch(
                "ALTER TABLE subscriptions ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;",
            )?;
        }
        Ok(Self { c: Mutex::new(c) })
    }

    /// Stores a new subscription.
    pub fn insert(&self, s: &Sub) -> Result<(), StoreError> {
        self.c.lock().execute(
            &format!("INSERT INTO subscriptions ({COLS}) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17)"),
            params![
                s.id,
                s.principal,
                s.room_id,
                s.url,
                s.secret,
                list_col(&s.kinds)?,
                list_col(&s.only_from)?,
                list_col(&s.not_from)?,
                s.exclude_thinking as i64,
                s.status.as_str(),
                s.cursor as i64,
                s.failures as i64,
                s.retry_seq.map(|x| x as i64),
                s.retry_at_ms,
                s.created_at,
                s.key_sha256,
                s.generation as i64,
            ],
        )?;
        Ok(())
    }

    /// One subscription by id.
    pub fn get(&self, id: &str) -> Result<Option<Sub>, StoreError> {
        let c = self.c.lock();
        let row = c
            .query_row(
                &format!("SELECT {COLS} FROM subscriptions WHERE subscription_id = ?1"),
                [id],
                from_row,
            )
            .optional()?;
        row.map(finish).transpose()
    }

    /// A principal's subscriptions (of one room, when given), oldest first.
    pub fn list(&self, principal: &str, room: Option<&str>) -> Result<Vec<Sub>, StoreError> {
        let c = self.c.lock();
        let mut q = c.prepare(&format!(
            "SELECT {COLS} FROM subscriptions WHERE principal = ?1 AND (?2 IS NULL OR room_id = ?2) \
             ORDER BY created_at, subscription_id"
        ))?;
        let rows = q.query_map(params![principal, room], from_row)?;
        rows.map(|r| finish(r?)).collect()
    }

    /// Every active subscription (to resume after a restart).
    pub fn active(&self) -> Result<Vec<Sub>, StoreError> {
        let c = self.c.lock();
        let mut q = c.prepare(&format!(
            "SELECT {COLS} FROM subscriptions WHERE status = 'active'"
        ))?;
        let rows = q.query_map([], from_row)?;
        rows.map(|r| finish(r?)).collect()
    }

    /// How many subscriptions a principal owns.
    pub fn count(&self, principal: &str) -> Result<usize, StoreError> {
        let n: i64 = self.c.lock().query_row(
            "SELECT COUNT(*) FROM subscriptions WHERE principal = ?1",
            [principal],
            |r| r.get(0),
        )?;
        Ok(n.max(0) as usize)
    }

    /// The rooms that have subscriptions (any status).
    pub fn rooms(&self) -> Result<Vec<String>, StoreError> {
        let c = self.c.lock();
        let mut q = c.prepare("SELECT DISTINCT room_id FROM subscriptions")?;
        let rows = q.query_map([], |r| r.get::<_, String>(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Deletes every subscription of a room (any principal, any status); returns their ids.
    pub fn delete_room(&self, room: &str) -> Result<Vec<String>, StoreError> {
        let c = self.c.lock();
        let ids: Vec<String> = c
            .prepare("SELECT subscription_id FROM subscriptions WHERE room_id = ?1")?
            .query_map([room], |r| r.get::<_, String>(0))?
            .collect::<Result<_, _>>()?;
        c.execute("DELETE FROM subscriptions WHERE room_id = ?1", [room])?;
        Ok(ids)
    }

    /// Deletes a principal's subscription; false when it has none by that id.
    pub fn delete(&self, principal: &str, id: &str) -> Result<bool, StoreError> {
        let n = self.c.lock().execute(
            "DELETE FROM subscriptions WHERE principal = ?1 AND subscription_id = ?2",
            [principal, id],
        )?;
        Ok(n > 0)
    }

    /// Advances the cursor and clears any retry state (a delivery succeeded or the events
    /// up to `seq` were filtered out). Only a running delivery task advances, so the row is
    /// active: this also heals a `fail` written by a task that was being replaced by
    /// `enable_subscription` at that moment (its blocking write cannot be cancelled). A
    /// revoked row stays revoked (its task may be finishing this write as it is stopped).
    /// Like every task write, a no-op unless the row is still at the task's `generation`.
    pub fn advance(&self, id: &str, generation: u64, seq: u64) -> Result<(), StoreError> {
        self.c.lock().execute(
            &format!(
                "UPDATE subscriptions SET cursor_seq = MAX(cursor_seq, ?2), failures = 0, \
                 retry_seq = NULL, retry_at_ms = NULL, status = {UNLESS_REVOKED} \
                 WHERE subscription_id = ?1 AND generation = ?3"
            ),
            params![id, seq as i64, generation as i64],
        )?;
        Ok(())
    }

    /// Records a failed attempt of the delivery of event `seq`, due again at `at_ms`.
    pub fn retry(
        &self,
        id: &str,
        generation: u64,
        seq: u64,
        failures: u32,
        at_ms: i64,
    ) -> Result<(), StoreError> {
        self.c.lock().execute(
            &format!(
                "UPDATE subscriptions SET failures = ?2, retry_seq = ?3, retry_at_ms = ?4, \
                 status = {UNLESS_REVOKED} WHERE subscription_id = ?1 AND generation = ?5"
            ),
            params![id, failures as i64, seq as i64, at_ms, generation as i64],
        )?;
        Ok(())
    }

    /// Marks a subscription failed (retries ran out); the cursor stays where it was.
    pub fn fail(&self, id: &str, generation: u64, failures: u32) -> Result<(), StoreError> {
        self.c.lock().execute(
            "UPDATE subscriptions SET status = 'failed', failures = ?2, retry_seq = NULL, \
             retry_at_ms = NULL WHERE subscription_id = ?1 AND status != 'revoked' \
             AND generation = ?3",
            params![id, failures as i64, generation as i64],
        )?;
        Ok(())
    }

    /// Re-arms a principal's subscription, bound from now on to `key_sha256` (the key of
    /// the caller, None when keyless), in a new generation (writes of the task it replaces
    /// no longer land); false when it has none by that id.
    pub fn enable(
        &self,
        principal: &str,
        id: &str,
        key_sha256: Option<&str>,
    ) -> Result<bool, StoreError> {
        let n = self.c.lock().execute(
            "UPDATE subscriptions SET status = 'active', failures = 0, retry_seq = NULL, \
             retry_at_ms = NULL, key_sha256 = ?3, generation = generation + 1 \
             WHERE principal = ?1 AND subscription_id = ?2",
            params![principal, id, key_sha256],
        )?;
        Ok(n > 0)
    }

    /// Marks `revoked` every subscription bound to a key that no longer authenticates as
    /// its principal; `valid` is every key's (SHA-256 hex, principal) now. A row from before
    /// keys were recorded is bound to its principal's current key, or revoked when it has
    /// none. Returns the ids revoked.
    pub fn revoke_stale(&self, valid: &[(String, String)]) -> Result<Vec<String>, StoreError> {
        let mut c = self.c.lock();
        let tx = c.transaction()?;
        let rows: Vec<(String, String, String)> = {
            let mut q = tx.prepare(
                "SELECT subscription_id, principal, key_sha256 FROM subscriptions \
                 WHERE key_sha256 IS NOT NULL AND status != 'revoked'",
            )?;
            let rows = q.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        let mut revoked = Vec::new();
        for (id, principal, key) in rows {
            if key == LEGACY {
                if let Some((k, _)) = valid.iter().find(|(_, p)| *p == principal) {
                    tx.execute(
                        "UPDATE subscriptions SET key_sha256 = ?2 WHERE subscription_id = ?1",
                        [&id, k],
                    )?;
                    continue;
                }
            } else if valid.iter().any(|(k, p)| *p == principal && *k == key) {
                continue;
            }
            tx.execute(
                "UPDATE subscriptions SET status = 'revoked', retry_seq = NULL, \
                 retry_at_ms = NULL WHERE subscription_id = ?1",
                [&id],
            )?;
            revoked.push(id);
        }
        tx.commit()?;
        Ok(revoked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(id: &str, room: &str) -> Sub {
        Sub {
            id: id.into(),
            principal: "primary".into(),
            room_id: room.into(),
            url: "http://example.com/h".into(),
            secret: "s".into(),
            kinds: Some(vec!["a".into()]),
            only_from: None,
            not_from: Some(vec!["bot".into()]),
            exclude_thinking: true,
            status: Status::Active,
            cursor: 7,
            failures: 0,
            retry_seq: None,
            retry_at_ms: None,
            created_at: "2026-01-01T00:00:00Z".into(),
            key_sha256: Some("k1".into()),
            generation: 0,
        }
    }

    #[test]
    fn round_trip_and_state_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cowchat").join("webhooks.db");
        {
            let st = Store::open(&path).unwrap();
            st.insert(&sub("s1", "r1")).unwrap();
            st.insert(&sub("s2", "r2")).unwrap();
            st.retry("s1", 0, 9, 2, 1234).unwrap();
        }
        // Reopen: everything persisted.
        let st = Store::open(&path).unwrap();
        let s1 = st.get("s1").unwrap().unwrap();
        assert_eq!(s1.kinds, Some(vec!["a".to_string()]));
        assert_eq!(s1.not_from, Some(vec!["bot".to_string()]));
        assert_eq!(s1.only_from, None);
        assert!(s1.exclude_thinking);
        assert_eq!(
            (s1.failures, s1.retry_seq, s1.retry_at_ms),
            (2, Some(9), Some(1234))
        );
        assert_eq!(st.list("primary", Some("r2")).unwrap().len(), 1);
        assert_eq!(st.list("primary", None).unwrap().len(), 2);
        assert_eq!(st.list("other", None).unwrap().len(), 0);
        st.fail("s1", 0, 6).unwrap();
        assert_eq!(st.active().unwrap().len(), 1);
        assert_eq!(st.get("s1").unwrap().unwrap().cursor, 7);
        assert!(st.enable("primary", "s1", Some("k1")).unwrap());
        st.advance("s1", 1, 12).unwrap();
        st.advance("s1", 1, 10).unwrap(); // never regresses
        let s1 = st.get("s1").unwrap().unwrap();
        assert_eq!((s1.status, s1.cursor, s1.failures), (Status::Active, 12, 0));
        assert!(!st.delete("other", "s1").unwrap());
        assert!(st.delete("primary", "s1").unwrap());
        assert_eq!(st.count("primary").unwrap(), 1);
    }

    #[test]
    fn a_stale_key_revokes_and_nothing_a_task_writes_brings_it_back() {
        let dir = tempfile::tempdir().unwrap();
        let st = Store::open(&dir.path().join("w.db")).unwrap();
        let mut keyless = sub("s0", "r");
        keyless.key_sha256 = None;
        st.insert(&keyless).unwrap();
        st.insert(&sub("s1", "r")).unwrap(); // primary, key k1
        let mut team = sub("s2", "r");
        team.principal = "team".into();
        team.key_sha256 = Some("t1".into());
        st.insert(&team).unwrap();
        let valid = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(k, p)| (k.to_string(), p.to_string()))
                .collect()
        };
        // k1 now belongs to another principal: it does not authenticate as primary.
        assert_eq!(
            st.revoke_stale(&valid(&[("k1", "team"), ("t1", "team")]))
                .unwrap(),
            vec!["s1".to_string()]
        );
        assert_eq!(st.get("s1").unwrap().unwrap().status, Status::Revoked);
        assert_eq!(st.get("s2").unwrap().unwrap().status, Status::Active);
        assert_eq!(st.get("s0").unwrap().unwrap().status, Status::Active);
        // A delivery task finishing its writes as it is stopped leaves the row revoked.
        st.advance("s1", 0, 20).unwrap();
        st.retry("s1", 0, 21, 1, 5).unwrap();
        st.fail("s1", 0, 6).unwrap();
        let s1 = st.get("s1").unwrap().unwrap();
        assert_eq!((s1.status, s1.cursor), (Status::Revoked, 20));
        assert_eq!(st.active().unwrap().len(), 2);
        // Re-armed with the current key, it is bound to that key.
        assert!(st.enable("primary", "s1", Some("k2")).unwrap());
        assert_eq!(
            st.revoke_stale(&valid(&[("k2", "primary"), ("t2", "team")]))
                .unwrap(),
            vec!["s2".to_string()]
        );
        assert_eq!(st.get("s1").unwrap().unwrap().status, Status::Active);
    }

    #[test]
    fn writes_of_a_task_replaced_by_enable_land_nowhere() {
        let dir = tempfile::tempdir().unwrap();
        let st = Store::open(&dir.path().join("w.db")).unwrap();
        st.insert(&sub("s1", "r")).unwrap();
        st.retry("s1", 0, 8, 4, 99).unwrap();
        assert!(st.enable("primary", "s1", Some("k1")).unwrap());
        let armed = st.get("s1").unwrap().unwrap();
        assert_eq!(armed.generation, 1);
        // The old task's blocking writes, finishing after the re-arm.
        st.retry("s1", 0, 8, 5, 123).unwrap();
        st.fail("s1", 0, 6).unwrap();
        st.advance("s1", 0, 30).unwrap();
        let s1 = st.get("s1").unwrap().unwrap();
        assert_eq!(
            (
                s1.status,
                s1.failures,
                s1.retry_seq,
                s1.retry_at_ms,
                s1.cursor
            ),
            (Status::Active, 0, None, None, 7)
        );
        // The new task's own writes land.
        st.retry("s1", 1, 8, 1, 5).unwrap();
        assert_eq!(st.get("s1").unwrap().unwrap().failures, 1);
        st.advance("s1", 1, 8).unwrap();
        let s1 = st.get("s1").unwrap().unwrap();
        assert_eq!((s1.failures, s1.cursor), (0, 8));
    }

    #[test]
    fn rows_from_before_keys_were_recorded_are_bound_to_the_principals_current_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch(
                "CREATE TABLE subscriptions (subscription_id TEXT PRIMARY KEY, principal TEXT NOT NULL,
                 room_id TEXT NOT NULL, webhook_url TEXT NOT NULL, secret TEXT NOT NULL, kinds TEXT,
                 only_from TEXT, not_from TEXT, exclude_thinking INTEGER NOT NULL DEFAULT 0,
                 status TEXT NOT NULL DEFAULT 'active', cursor_seq INTEGER NOT NULL,
                 failures INTEGER NOT NULL DEFAULT 0, retry_seq INTEGER, retry_at_ms INTEGER,
                 created_at TEXT NOT NULL);
                 INSERT INTO subscriptions (subscription_id, principal, room_id, webhook_url, secret,
                 cursor_seq, created_at) VALUES ('p', 'primary', 'r', 'u', 's', 0, 't'),
                 ('a', 'team-a', 'r', 'u', 's', 0, 't'), ('b', 'team-b', 'r', 'u', 's', 0, 't');",
            )
            .unwrap();
        }
        let st = Store::open(&path).unwrap();
        let valid = vec![("ka".to_string(), "team-a".to_string())];
        assert_eq!(st.revoke_stale(&valid).unwrap(), vec!["b".to_string()]);
        assert_eq!(
            st.get("a").unwrap().unwrap().key_sha256.as_deref(),
            Some("ka")
        );
        // `primary`'s rows may be a keyless client's: not bound to any key.
        assert_eq!(st.get("p").unwrap().unwrap().key_sha256, None);
        assert_eq!(st.revoke_stale(&[]).unwrap(), vec!["a".to_string()]);
        assert_eq!(st.get("p").unwrap().unwrap().status, Status::Active);
    }
}
