//! Measures what the `events_coord` partial index (schema v2) costs on the write path and
//! saves at Cowchat start-up. Run on a release build:
//!
//! ```sh
//! cargo run --release -p convene-store --example coord_index -- [MESSAGES] [ROUNDS]
//! ```
//!
//! Each round fills three fresh databases through the real write path (engine + `apply`, one
//! transaction per 512 commands, as the daemon's writer batches) with MESSAGES messages
//! (default 200000) and a handful of vote events: schema v1 (the index dropped), v2 (the
//! partial index), and, for comparison, v2 plus a full index on (group_id, kind, seq). It
//! prints the write time per message, then the rebuild read (every coordination event of
//! the room) the v1 way (a kind-filtered scan of the group) and the v2 way
//! (`coordination_after`). Medians over ROUNDS (default 3); the variants take turns, each round
//! starting with the next one. Wall
//! time includes the fsync of every commit; CPU time is the write path's own work.

use std::path::Path;
use std::time::{Duration, Instant};

use convene_core::{Command, Engine, Limits, SendArgs};
use serde_json::json;

/// Commands per transaction (the daemon's `MAX_BATCH`).
const BATCH: usize = 512;
/// Rebuild page size (the daemon's coord `PAGE`).
const PAGE: usize = 1000;

#[derive(Clone, Copy, PartialEq)]
enum Variant {
    V1,
    V2,
    V2Full,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::V1 => "v1 (no coordination index)",
            Variant::V2 => "v2 (partial index)",
            Variant::V2Full => "v2 + full (group_id, kind, seq) index",
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(200_000);
    let rounds: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(3);
    let variants = [Variant::V1, Variant::V2, Variant::V2Full];
    let mut write: Vec<Vec<Duration>> = vec![Vec::new(); variants.len()];
    let mut cpu: Vec<Vec<Duration>> = vec![Vec::new(); variants.len()];
    let (mut old_read, mut new_read, mut v1_read) = (Vec::new(), Vec::new(), Vec::new());
    let mut found = (0, 0);
    for round in 0..rounds {
        // Each round starts with another variant, so none always runs on a cold start.
        for k in 0..variants.len() {
            let i = (round + k) % variants.len();
            let v = &variants[i];
            let dir = tempfile::tempdir()?;
            let p = dir.path().join("ledger.sqlite");
            let c0 = cpu_time();
            let (took, gid) = fill(&p, *v, n)?;
            write[i].push(took);
            cpu[i].push(cpu_time().saturating_sub(c0));
            let r = convene_store::open_readers(&p, 1)?;
            match v {
                Variant::V1 => {
                    let t = Instant::now();
                    found.0 = scan(&r, &gid)?;
                    v1_read.push(t.elapsed());
                }
                Variant::V2 => {
                    let t = Instant::now();
                    found.0 = scan(&r, &gid)?;
                    old_read.push(t.elapsed());
                    let t = Instant::now();
                    found.1 = indexed(&r, &gid)?;
                    new_read.push(t.elapsed());
                }
                Variant::V2Full => {}
            }
        }
    }
    println!("{n} messages, {rounds} rounds, medians");
    for (i, v) in variants.iter().enumerate() {
        let per = |d: &Duration| d.as_secs_f64() * 1e6 / n as f64;
        let all: Vec<String> = write[i].iter().map(|d| format!("{:.2}", per(d))).collect();
        let d = median(&mut write[i]);
        let c = median(&mut cpu[i]);
        println!(
            "write  {:<40} {:>6.2} µs/message wall, {:>6.2} CPU (wall by round: {})",
            v.name(),
            per(&d),
            per(&c),
            all.join(" ")
        );
    }
    println!(
        "rebuild read, kind-filtered scan, v1 database:  {:>9.2} ms ({} events)",
        ms(median(&mut v1_read)),
        found.0
    );
    println!(
        "rebuild read, kind-filtered scan, v2 database:  {:>9.2} ms",
        ms(median(&mut old_read))
    );
    println!(
        "rebuild read, coordination_after, v2 database:  {:>9.2} ms ({} events)",
        ms(median(&mut new_read)),
        found.1
    );
    Ok(())
}

/// CPU time of this process (user + system), from /proc (Linux; zero elsewhere). The write
/// path's own cost, without the fsync waits and the other load of a shared machine.
fn cpu_time() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    // Fields after the parenthesized command name; utime and stime are the 12th and 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|x| x.parse().ok())
        .collect();
    // Clock ticks are 100 per second on Linux.
    Duration::from_millis(f.iter().sum::<u64>() * 10)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Fills a fresh database with `n` messages and 5 votes (created, 2 ballots, result) spread
/// through them; returns the write time and the group id.
fn fill(p: &Path, v: Variant, n: usize) -> Result<(Duration, String), Box<dyn std::error::Error>> {
    let mut w = convene_store::open_writer(p)?;
    {
        let c = rusqlite::Connection::open(p)?;
        match v {
            Variant::V1 => c.execute_batch("DROP INDEX events_coord")?,
            Variant::V2 => {}
            Variant::V2Full => {
                c.execute_batch("CREATE INDEX events_kind ON events (group_id, kind, seq)")?
            }
        }
    }
    let mut eng = Engine::new(Vec::new(), Limits::default());
    let gid = batch(
        &mut w,
        &mut eng,
        vec![Command::GroupCreate {
            by: "user".into(),
            title: "big".into(),
            topic: String::new(),
            settings: Default::default(),
        }],
    )?;
    let body = "x".repeat(60);
    let vote_every = n / 5 + 1;
    let t = Instant::now();
    let mut i = 0;
    while i < n {
        let mut cmds = Vec::with_capacity(BATCH);
        while cmds.len() < BATCH && i < n {
            cmds.push(Command::Send(SendArgs {
                group_id: gid.clone(),
                by: "user".into(),
                text: Some(format!("message {i} {body}")),
                ..SendArgs::default()
            }));
            if i % vote_every == vote_every / 2 {
                for kind in ["created", "ballot", "ballot", "result"] {
                    cmds.push(Command::AppendExtension {
                        group_id: gid.clone(),
                        by: "user".into(),
                        kind: format!("x.cowchat.vote.{kind}"),
                        data: json!({"vote_id": format!("v{i}")}),
                    });
                }
            }
            i += 1;
        }
        batch(&mut w, &mut eng, cmds)?;
    }
    Ok((t.elapsed(), gid))
}

/// Commits `cmds` in one transaction; returns the group id of the first event.
fn batch(
    w: &mut convene_store::Writer,
    eng: &mut Engine,
    cmds: Vec<Command>,
) -> Result<String, Box<dyn std::error::Error>> {
    let tx = w.begin()?;
    let now = time::OffsetDateTime::now_utc();
    let mut gid = String::new();
    for cmd in cmds {
        let out = eng.execute(&convene_store::WriterView::new(&tx), cmd, now)?;
        convene_store::apply(&tx, &out)?;
        if gid.is_empty() {
            gid = out.events[0].group_id.clone();
        }
    }
    tx.commit()?;
    Ok(gid)
}

/// The v1 rebuild read: pages of the group filtered by the projection's nine kinds.
fn scan(r: &convene_store::Readers, gid: &str) -> Result<usize, convene_store::StoreError> {
    let kinds: Vec<String> = [
        "vote.created",
        "vote.ballot",
        "vote.result",
        "election.started",
        "election.declined",
        "leader.elected",
        "leader.cleared",
        "task.assigned",
        "task.updated",
    ]
    .iter()
    .map(|k| format!("x.cowchat.{k}"))
    .collect();
    let (mut at, mut n) = (0, 0);
    loop {
        let page = r.events_after(gid, at, PAGE, &kinds)?;
        n += page.len();
        match page.last() {
            Some(l) if page.len() == PAGE => at = l.seq,
            _ => return Ok(n),
        }
    }
}

/// The v2 rebuild read.
fn indexed(r: &convene_store::Readers, gid: &str) -> Result<usize, convene_store::StoreError> {
    let (mut at, mut n) = (0, 0);
    loop {
        let page = r.coordination_after(gid, at, PAGE)?;
        n += page.len();
        match page.last() {
            Some(l) if page.len() == PAGE => at = l.seq,
            _ => return Ok(n),
        }
    }
}
