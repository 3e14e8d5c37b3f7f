//! Append-only local evidence store (§11.1) on SQLite.

use crate::error::EvidenceError;
use crate::receipt::{Receipt, Verdict};
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;
use std::path::Path;

/// Durable, append-only, indexed receipt log.
pub struct EvidenceStore {
    conn: Connection,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS receipts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    receipt_hash TEXT NOT NULL UNIQUE,
    trace_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    verdict TEXT NOT NULL,
    issuer TEXT NOT NULL,
    sequence INTEGER NOT NULL,
    issued_at REAL NOT NULL,
    previous_receipt_hash TEXT,
    outcome_status TEXT,
    body TEXT NOT NULL,
    command TEXT
);
CREATE INDEX IF NOT EXISTS receipts_trace ON receipts(trace_id);
CREATE INDEX IF NOT EXISTS receipts_tool ON receipts(tool);
CREATE INDEX IF NOT EXISTS receipts_verdict ON receipts(verdict);
CREATE INDEX IF NOT EXISTS receipts_time ON receipts(issued_at);
CREATE TRIGGER IF NOT EXISTS receipts_no_update BEFORE UPDATE ON receipts
BEGIN SELECT RAISE(ABORT, 'evidence store is append-only'); END;
CREATE TRIGGER IF NOT EXISTS receipts_no_delete BEFORE DELETE ON receipts
BEGIN SELECT RAISE(ABORT, 'evidence store is append-only'); END;
";

impl EvidenceStore {
    /// Open (or create) a store file.
    pub fn open(path: &Path) -> Result<Self, EvidenceError> {
        let conn = Connection::open(path)?;
        // FULL sync: the receipt must survive a crash before the tool runs (§11.1).
        conn.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;")?;
        conn.execute_batch(SCHEMA)?;
        Ok(Self { conn })
    }

    /// In-memory store (tests, benchmarks).
    pub fn in_memory() -> Result<Self, EvidenceError> {
        let conn = Connection::open_in_memory()?;
        conn.execute_batch(SCHEMA)?;
        Ok(Self { conn })
    }

    /// Append receipts (each with the command that produced it, if any) in one
    /// transaction: all or none are stored, with one durable commit.
    pub fn append_all(&self, rows: &[(&Receipt, Option<&Value>)]) -> Result<(), EvidenceError> {
        if rows.is_empty() {
            return Ok(());
        }
        if let [(r, c)] = rows {
            // A single row commits on its own (autocommit): no explicit transaction needed.
            return self.append(r, *c).map(|_| ());
        }
        let tx = self.conn.unchecked_transaction()?;
        for (r, c) in rows {
            self.append(r, *c)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Run raw SQL on the store (tests: installing failure triggers).
    #[cfg(test)]
    pub(crate) fn execute_batch_for_test(&self, sql: &str) -> Result<(), EvidenceError> {
        Ok(self.conn.execute_batch(sql)?)
    }

    /// Append a receipt (and optionally the command that produced it).
    pub fn append(&self, r: &Receipt, command: Option<&Value>) -> Result<String, EvidenceError> {
        let h = r.receipt_hash()?;
        let body = serde_json::to_string(r)?;
        let cmd = command.map(|c| c.to_string());
        let outcome = r.outcome_status.map(|o| o.as_str());
        self.conn.prepare_cached(
            "INSERT INTO receipts (receipt_hash, trace_id, tool, verdict, issuer, sequence, issued_at,
             previous_receipt_hash, outcome_status, body, command) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11)",
        )?
        .execute(params![
                h,
                r.trace_id,
                r.tool,
                r.verdict.as_str(),
                r.issuer,
                r.sequence as i64,
                r.issued_at,
                r.previous_receipt_hash,
                outcome,
                body,
                cmd
            ],
        )?;
        Ok(h)
    }

    fn query(&self, sql: &str, p: &[&dyn rusqlite::ToSql]) -> Result<Vec<Receipt>, EvidenceError> {
        let mut st = self.conn.prepare(sql)?;
        let rows = st.query_map(p, |row| row.get::<_, String>(0))?;
        let mut out = Vec::new();
        for b in rows {
            out.push(serde_json::from_str(&b?)?);
        }
        Ok(out)
    }

    /// Receipts of a trace, in insertion order (issued, then finalized versions).
    pub fn by_trace(&self, trace_id: &str) -> Result<Vec<Receipt>, EvidenceError> {
        self.query(
            "SELECT body FROM receipts WHERE trace_id=?1 ORDER BY id",
            &[&trace_id],
        )
    }

    /// Receipts for a tool.
    pub fn by_tool(&self, tool: &str) -> Result<Vec<Receipt>, EvidenceError> {
        self.query(
            "SELECT body FROM receipts WHERE tool=?1 ORDER BY id",
            &[&tool],
        )
    }

    /// Receipts with a verdict.
    pub fn by_verdict(&self, v: Verdict) -> Result<Vec<Receipt>, EvidenceError> {
        self.query(
            "SELECT body FROM receipts WHERE verdict=?1 ORDER BY id",
            &[&v.as_str()],
        )
    }

    /// Receipts issued within [from, to].
    pub fn by_time(&self, from: f64, to: f64) -> Result<Vec<Receipt>, EvidenceError> {
        self.query(
            "SELECT body FROM receipts WHERE issued_at>=?1 AND issued_at<=?2 ORDER BY id",
            &[&from, &to],
        )
    }

    /// Receipt by its hash.
    pub fn by_hash(&self, h: &str) -> Result<Option<Receipt>, EvidenceError> {
        Ok(self
            .query("SELECT body FROM receipts WHERE receipt_hash=?1", &[&h])?
            .pop())
    }

    /// The command stored with a receipt hash.
    pub fn command_for(&self, h: &str) -> Result<Option<Value>, EvidenceError> {
        let s: Option<Option<String>> = self
            .conn
            .query_row(
                "SELECT command FROM receipts WHERE receipt_hash=?1",
                [h],
                |r| r.get(0),
            )
            .optional()?;
        match s.flatten() {
            Some(s) => Ok(Some(serde_json::from_str(&s)?)),
            None => Ok(None),
        }
    }

    /// Highest sequence stored for an issuer.
    pub fn max_sequence(&self, issuer: &str) -> Result<Option<u64>, EvidenceError> {
        let v: Option<i64> = self.conn.query_row(
            "SELECT MAX(sequence) FROM receipts WHERE issuer=?1",
            [issuer],
            |r| r.get(0),
        )?;
        Ok(v.map(|x| x as u64))
    }

    /// Number of stored receipts.
    pub fn count(&self) -> Result<u64, EvidenceError> {
        let n: i64 = self
            .conn
            .query_row("SELECT COUNT(*) FROM receipts", [], |r| r.get(0))?;
        Ok(n as u64)
    }

    /// Raw connection (tests that try to break append-only).
    pub fn raw(&self) -> &Connection {
        &self.conn
    }
}
