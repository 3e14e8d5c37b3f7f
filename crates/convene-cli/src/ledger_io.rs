//! `convene ledger export|import`: NDJSON in and out, with a progress bar.

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};

use crate::client_cmds::connect;

/// Events per import request (keeps each request well under the frame limit).
const IMPORT_CHUNK: usize = 500;
/// Bytes of events per `ledger_import` request: well inside the daemon's request line limit
/// (a chunk of 500 big messages used to exceed it, and the import stopped there).
const IMPORT_CHUNK_BYTES: usize = convene_ipc::MAX_REQUEST_BYTES / 2;
/// How far a request may grow past the soft bounds above to keep a delivery's claim with its
/// result ([`Chunker`]): still well inside the request line limit.
const IMPORT_HARD_BYTES: usize = convene_ipc::MAX_REQUEST_BYTES / 7 * 6;
/// Events a request may grow to for the same reason.
const IMPORT_HARD_EVENTS: usize = 4 * IMPORT_CHUNK;

/// Groups the file's events into `ledger_import` requests without cutting a delivery's claim
/// off from its result where it can: the daemon settles a claim left without a result in one
/// request `ambiguous` (it was in flight when the export was taken), so a cut between them
/// turned an `accepted` delivery into `ambiguous` in the copy. A request ends before the
/// first claim still open and never between a claim and its result; only when that leaves
/// nothing to send and the hard bounds are reached is it cut anyway (a claim whose result is that far away, or never comes, is then
/// settled `ambiguous`, as an in-flight one is).
#[derive(Default)]
struct Chunker {
    events: Vec<Value>,
    sizes: Vec<usize>,
    bytes: usize,
    /// Delivery id → index in `events` of its claim that has no result yet.
    open: std::collections::HashMap<String, usize>,
    /// (claim, result) indexes in `events` of the deliveries settled within them.
    pairs: Vec<(usize, usize)>,
}

impl Chunker {
    /// Adds one event of `size` bytes; returns the requests now due, in order.
    fn push(&mut self, v: Value, size: usize) -> Vec<Vec<Value>> {
        let mut due = Vec::new();
        if !self.events.is_empty() {
            if self.bytes + size > IMPORT_HARD_BYTES {
                due.push(self.take(self.events.len()));
            } else if self.bytes + size > IMPORT_CHUNK_BYTES {
                due.extend(self.cut());
            }
        }
        if v["kind"] == "runtime.delivery" {
            if let Some(did) = v["data"]["delivery_id"].as_str() {
                match v["data"]["state"].as_str() {
                    Some("claimed") => {
                        self.open
                            .entry(did.to_string())
                            .or_insert(self.events.len());
                    }
                    Some(_) => {
                        if let Some(i) = self.open.remove(did) {
                            self.pairs.push((i, self.events.len()));
                        }
                    }
                    None => {}
                }
            }
        }
        self.events.push(v);
        self.sizes.push(size);
        self.bytes += size;
        if self.events.len() >= IMPORT_CHUNK {
            match self.cut() {
                Some(c) => due.push(c),
                None if self.events.len() >= IMPORT_HARD_EVENTS => {
                    due.push(self.take(self.events.len()))
                }
                None => {}
            }
        }
        due
    }

    /// The longest run of events that holds no claim without its result: before the first
    /// claim still open, and moved back before every claim whose result would fall after it
    /// (`None` when that is no event at all).
    fn cut(&mut self) -> Option<Vec<Value>> {
        let mut at = self
            .open
            .values()
            .copied()
            .min()
            .unwrap_or(self.events.len());
        while let Some(i) = self
            .pairs
            .iter()
            .filter(|(i, j)| *i < at && at <= *j)
            .map(|(i, _)| *i)
            .min()
        {
            at = i;
        }
        (at > 0).then(|| self.take(at))
    }

    /// Takes the first `n` events as one request.
    fn take(&mut self, n: usize) -> Vec<Value> {
        let rest_events = self.events.split_off(n);
        let rest_sizes = self.sizes.split_off(n);
        self.bytes = rest_sizes.iter().sum();
        self.sizes = rest_sizes;
        self.open.retain(|_, i| *i >= n);
        for i in self.open.values_mut() {
            *i -= n;
        }
        // A pair cut apart (only by the hard bounds) is no longer this chunker's to keep.
        self.pairs.retain(|(i, _)| *i >= n);
        for (i, j) in &mut self.pairs {
            *i -= n;
            *j -= n;
        }
        std::mem::replace(&mut self.events, rest_events)
    }

    /// What is left, as the last request.
    fn finish(&mut self) -> Vec<Value> {
        self.take(self.events.len())
    }
}

/// Ledger commands.
#[derive(Subcommand)]
pub enum LedgerCmd {
    /// Append a group's ledger to an NDJSON file (or stdout).
    Export {
        /// Group id.
        group_id: String,
        /// Output file (appended to; `-` for stdout).
        #[arg(long, short, default_value = "-")]
        out: String,
    },
    /// Import an NDJSON ledger (ours, or a CCCC group's ledger.jsonl) into a group.
    Import {
        /// Input file, or a CCCC group directory holding ledger.jsonl.
        path: PathBuf,
        /// Destination group id (default: the file's group_id, or a new id).
        #[arg(long)]
        group_id: Option<String>,
    },
}

/// Opens `path` for appending, first terminating an unterminated last record (CCCS §4.3):
/// the existing bytes are kept and a newline separates them from what follows.
pub fn open_ndjson_append(path: &Path) -> Result<std::fs::File> {
    let mut f = OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(path)
        .with_context(|| format!("open {}", path.display()))?;
    let len = f.metadata()?.len();
    if len > 0 {
        let mut last = [0u8; 1];
        f.seek(SeekFrom::Start(len - 1))?;
        f.read_exact(&mut last)?;
        if last[0] != b'\n' {
            f.write_all(b"\n")?;
        }
    }
    Ok(f)
}

/// Runs a ledger command.
pub fn run(home: &Path, json_out: bool, cmd: LedgerCmd) -> Result<()> {
    match cmd {
        LedgerCmd::Export { group_id, out } => export(home, json_out, &group_id, &out),
        LedgerCmd::Import { path, group_id } => import(home, json_out, &path, group_id),
    }
}

fn export(home: &Path, json_out: bool, gid: &str, out: &str) -> Result<()> {
    let mut c = connect(home)?;
    let total = c.call("ledger_tail", json!({"group_id": gid, "limit": 1}))?["head_seq"]
        .as_u64()
        .unwrap_or(0);
    let sink: Box<dyn Write> = if out == "-" {
        Box::new(std::io::stdout().lock())
    } else {
        Box::new(open_ndjson_append(Path::new(out))?)
    };
    let mut w = BufWriter::new(sink);
    let pb = if out == "-" {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(total)
    };
    pb.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} events {per_sec}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut s = connect(home)?;
    convene_ipc::client::into_result(s.raw(&serde_json::to_vec(&json!({"v":1,"op":"events_stream","args":{"group_id": gid, "since_seq": 0, "follow": false}}))?)?)?;
    let mut n = 0u64;
    while let Ok(item) = s.read_item() {
        if item["t"] == "event" {
            // Each record is written whole and newline-terminated.
            serde_json::to_writer(&mut w, &item["event"])?;
            w.write_all(b"\n")?;
            n += 1;
            pb.inc(1);
        }
    }
    w.flush()?;
    pb.finish_and_clear();
    if out != "-" {
        if json_out {
            println!("{}", json!({"group_id": gid, "exported": n, "file": out}));
        } else {
            eprintln!("exported {n} events of {gid} to {out}");
        }
    }
    Ok(())
}

fn import(home: &Path, json_out: bool, path: &Path, group_id: Option<String>) -> Result<()> {
    let file = if path.is_dir() {
        path.join("ledger.jsonl")
    } else {
        path.to_path_buf()
    };
    let size = std::fs::metadata(&file)
        .with_context(|| format!("read {}", file.display()))?
        .len();
    let r = BufReader::new(std::fs::File::open(&file)?);
    let pb = ProgressBar::new(size);
    pb.set_style(
        ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut c = connect(home)?;
    let mut gid = group_id;
    let mut chunker = Chunker::default();
    let (mut imported, mut skipped, mut torn) = (0u64, 0u64, 0u64);
    let mut send =
        |c: &mut convene_ipc::client::Client, gid: &str, events: Vec<Value>| -> Result<()> {
            if events.is_empty() {
                return Ok(());
            }
            let v = c.call("ledger_import", json!({"group_id": gid, "events": events}))?;
            imported += v["imported"].as_u64().unwrap_or(0);
            skipped += v["skipped"].as_u64().unwrap_or(0);
            Ok(())
        };
    for line in r.split(b'\n') {
        let line = line?;
        pb.inc(line.len() as u64 + 1);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let v: Value = match serde_json::from_slice(&line) {
            Ok(v) => v,
            Err(_) => {
                // A torn (incomplete) record, e.g. the unterminated tail of a crashed writer.
                torn += 1;
                continue;
            }
        };
        if gid.is_none() {
            gid = v["group_id"].as_str().map(str::to_string);
        }
        for events in chunker.push(v, line.len() + 1) {
            let g = gid.clone().unwrap_or_default();
            send(&mut c, &g, events)?;
        }
    }
    let Some(g) = gid else {
        bail!("no group_id in the file; pass --group-id")
    };
    send(&mut c, &g, chunker.finish())?;
    pb.finish_and_clear();
    if json_out {
        println!(
            "{}",
            json!({"group_id": g, "imported": imported, "skipped": skipped, "torn": torn})
        );
    } else {
        println!("imported {imported} events into {g} ({skipped} already present, {torn} torn lines skipped)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(did: &str, state: &str) -> Value {
        json!({"kind": "runtime.delivery", "data": {"delivery_id": did, "state": state}})
    }

    fn requests(events: Vec<Value>) -> Vec<Vec<Value>> {
        let mut c = Chunker::default();
        let mut out: Vec<Vec<Value>> = events.into_iter().flat_map(|e| c.push(e, 10)).collect();
        out.push(c.finish());
        out.retain(|r| !r.is_empty());
        out
    }

    #[test]
    fn a_claim_and_its_result_go_in_one_request() {
        let mut events: Vec<Value> = (0..IMPORT_CHUNK - 1)
            .map(|i| json!({"kind": "chat.message", "n": i}))
            .collect();
        events.push(delivery("d1", "claimed"));
        events.push(delivery("d1", "accepted"));
        let reqs = requests(events);
        let with = |r: &Vec<Value>, s: &str| r.iter().any(|e| e["data"]["state"] == s);
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[0].len(), IMPORT_CHUNK - 1);
        assert!(with(&reqs[1], "claimed") && with(&reqs[1], "accepted"));
    }

    #[test]
    fn interleaved_claims_each_stay_with_their_result() {
        // As a live export has them: a run's claims, then their results.
        let mut events: Vec<Value> = (0..IMPORT_CHUNK - 5)
            .map(|i| json!({"kind": "chat.message", "n": i}))
            .collect();
        events.push(delivery("d1", "claimed")); // 495
        events.push(json!({"kind": "chat.message"}));
        events.push(json!({"kind": "chat.message"}));
        events.push(delivery("d2", "claimed")); // 498
        events.push(delivery("d1", "accepted")); // 499: the soft bound
        events.push(json!({"kind": "chat.message"}));
        events.push(json!({"kind": "chat.message"}));
        events.push(delivery("d2", "accepted"));
        let reqs = requests(events);
        for did in ["d1", "d2"] {
            let holding: Vec<usize> = reqs
                .iter()
                .enumerate()
                .filter(|(_, r)| r.iter().any(|e| e["data"]["delivery_id"] == did))
                .map(|(n, _)| n)
                .collect();
            assert_eq!(holding.len(), 1, "{did} split over requests {holding:?}");
        }
        assert_eq!(reqs[0].len(), IMPORT_CHUNK - 5);
    }

    #[test]
    fn a_claim_that_never_settles_holds_requests_only_up_to_the_hard_bound() {
        let mut events = vec![delivery("d1", "claimed")];
        events.extend((0..3 * IMPORT_HARD_EVENTS).map(|i| json!({"kind": "chat.message", "n": i})));
        let reqs = requests(events);
        assert!(reqs.iter().all(|r| r.len() <= IMPORT_HARD_EVENTS));
        assert_eq!(reqs[0].len(), IMPORT_HARD_EVENTS);
        assert_eq!(
            reqs.iter().map(Vec::len).sum::<usize>(),
            3 * IMPORT_HARD_EVENTS + 1
        );
        // Once the open claim went, requests are back to the soft size.
        assert_eq!(reqs[1].len(), IMPORT_CHUNK);
    }
}
