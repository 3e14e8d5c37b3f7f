//! Convene storage: the ledger and its projections in one SQLite file (WAL, `synchronous=FULL`,
//! so a commit is on disk before it returns). One [`Writer`] appends; any number of
//! [`Readers`] read committed data concurrently.

mod reader;
mod schema;
mod writer;

use std::path::Path;

use rusqlite::{Connection, OpenFlags};

pub use reader::{RawEvent, Readers, Since};
pub use writer::{apply, Writer, WriterView};

/// True for the kinds [`Readers::coordination_after`] returns: the same rule as the
/// `events_coord` index's SQL (a store test checks that the two agree).
pub fn is_coordination_kind(kind: &str) -> bool {
    kind.starts_with("x.cowchat.") && kind != "x.cowchat.thinking"
}

/// Storage failures.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite reported an error.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A stored record did not parse.
    #[error("corrupt record: {0}")]
    Corrupt(String),
    /// The database was written by a newer version.
    #[error("database schema v{found} is newer than this build (v{supported})")]
    TooNew {
        /// Found version.
        found: i64,
        /// Highest version this build knows.
        supported: i64,
    },
}

impl From<StoreError> for convene_core::CoreError {
    fn from(e: StoreError) -> Self {
        convene_core::CoreError::storage(e.to_string())
    }
}

/// How long a connection waits for a lock held by another.
pub(crate) const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Result alias.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

fn configure(conn: &Connection) -> Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // FULL: every commit syncs the WAL, so an acknowledged append survives power loss.
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "OFF")?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(())
}

/// Opens (creating and migrating) the ledger database and returns its writer.
pub fn open_writer(path: &Path) -> Result<Writer> {
    let conn = Connection::open(path)?;
    configure(&conn)?;
    // Checkpoints run on their own thread (`spawn_checkpointer`), never inside a commit.
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    migrate(&conn)?;
    Ok(Writer::new(conn))
}

/// Starts a thread that copies the WAL into the database file every `every`, with its own
/// connection, so the main file's fsync never sits on the write path. The thread ends when
/// `keep_running` turns false or the database goes away.
///
/// Each round is a PASSIVE checkpoint (copies what it can, never blocks anyone), then a
/// RESTART one that may hold new writers back for the last few frames and the database
/// fsync, so the next commit starts the WAL over from its beginning. Without that, steady
/// writes keep the WAL from ever being fully checkpointed at the moment a writer starts: it
/// grows without bound, and every commit appends past its end, which makes each commit's
/// fdatasync also write file metadata (about twice the latency on this VM). The RESTART
/// waits at most [`RESTART_WAIT`] for readers; when it cannot finish, the round ends as a
/// PASSIVE one and the next round tries again.
pub fn spawn_checkpointer(
    path: &Path,
    every: std::time::Duration,
    keep_running: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Result<()> {
    let conn = Connection::open(path)?;
    configure(&conn)?;
    conn.busy_timeout(RESTART_WAIT)?;
    std::thread::Builder::new()
        .name("convene-checkpoint".into())
        .spawn(move || {
            while keep_running.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(every);
                for mode in ["PASSIVE", "RESTART"] {
                    let sql = format!("PRAGMA wal_checkpoint({mode})");
                    if let Err(e) = conn.query_row(&sql, [], |_| Ok(())) {
                        tracing::warn!(error = %e, "checkpoint failed; checkpointer stops");
                        return;
                    }
                }
            }
        })
        .map_err(|e| StoreError::Corrupt(format!("cannot start checkpointer: {e}")))?;
    Ok(())
}

/// How long a RESTART checkpoint waits for the writer and for readers of old frames.
const RESTART_WAIT: std::time::Duration = std::time::Duration::from_millis(20);

/// Opens `n` read-only connections to the database (the pool opens more when reads overlap).
pub fn open_readers(path: &Path, n: usize) -> Result<Readers> {
    let conns = (0..n.max(1))
        .map(|_| open_reader(path))
        .collect::<Result<Vec<_>>>()?;
    Ok(Readers::new(conns))
}

/// One read-only connection, configured like every pooled one.
pub(crate) fn open_reader(path: &Path) -> Result<Connection> {
    let c = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    c.busy_timeout(std::time::Duration::from_secs(10))?;
    c.set_prepared_statement_cache_capacity(64);
    Ok(c)
}

fn migrate(conn: &Connection) -> Result<()> {
    let v: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let supported = schema::MIGRATIONS.len() as i64;
    if v > supported {
        return Err(StoreError::TooNew {
            found: v,
            supported,
        });
    }
    for (i, sql) in schema::MIGRATIONS.iter().enumerate().skip(v as usize) {
        let tx = conn.unchecked_transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        tx.commit()?;
        tracing::info!(version = i + 1, "migrated ledger schema");
    }
    Ok(())
}

/// The schema version this build writes.
pub fn schema_version() -> i64 {
    schema::MIGRATIONS.len() as i64
}
