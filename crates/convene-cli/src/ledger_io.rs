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
    let mut chunk: Vec<Value> = Vec::new();
    let mut chunk_bytes = 0usize;
    let (mut imported, mut skipped, mut torn) = (0u64, 0u64, 0u64);
    let mut flush =
        |c: &mut convene_ipc::client::Client, gid: &str, chunk: &mut Vec<Value>| -> Result<()> {
            if chunk.is_empty() {
                return Ok(());
            }
            let v = c.call(
                "ledger_import",
                json!({"group_id": gid, "events": std::mem::take(chunk)}),
            )?;
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
        if !chunk.is_empty() && chunk_bytes + line.len() > IMPORT_CHUNK_BYTES {
            let g = gid.clone().unwrap_or_default();
            flush(&mut c, &g, &mut chunk)?;
            chunk_bytes = 0;
        }
        chunk_bytes += line.len() + 1;
        chunk.push(v);
        if chunk.len() >= IMPORT_CHUNK {
            let g = gid.clone().unwrap_or_default();
            flush(&mut c, &g, &mut chunk)?;
            chunk_bytes = 0;
        }
    }
    let Some(g) = gid else {
        bail!("no group_id in the file; pass --group-id")
    };
    flush(&mut c, &g, &mut chunk)?;
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
