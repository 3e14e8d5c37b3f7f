//! `convene-bench`: measures the ledger engine through the daemon IPC, against Convene and
//! (when a `cccc` binary is available) against CCCC, each started fresh in its own temp home.
//!
//! See docs/BENCHMARKS.md for what each number means.

mod conn;
mod daemon;
mod stats;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use conn::{send_line, text, Conn, Res};
use daemon::{Daemon, Kind};
use stats::{Acc, Cpu, Lat};

const USAGE: &str = "\
convene-bench: durable-send, concurrency and replay benchmark (Convene vs CCCC)

USAGE: convene-bench [OPTIONS]

OPTIONS:
  --n N              sequential sends per method (default 2000; warm-up 100)
  --quick            CI smoke: small sizes, Convene only, < 20 s
  --convene PATH     convene binary (default: `convene` next to this binary)
  --cccc PATH        cccc binary (default: `cccc` on PATH, if any)
  --skip-cccc        do not run CCCC
  --replay N         events pre-loaded into the Convene replay group (default 100000)
  --conc-total N     messages per concurrency level (default 4000)
  --levels LIST      concurrency levels (default 1,4,16,64)
  --json-out FILE    also write all results as JSON
  --keep             keep the temporary homes (daemon logs, databases)
  -h, --help         this text";

#[derive(Debug, Clone)]
struct Opts {
    n: usize,
    warmup: usize,
    fsync_n: usize,
    levels: Vec<usize>,
    conc_total: usize,
    replay: usize,
    preload_clients: usize,
    quick: bool,
    convene: Option<PathBuf>,
    cccc: Option<PathBuf>,
    skip_cccc: bool,
    json_out: Option<PathBuf>,
    keep: bool,
}

fn parse_opts() -> Result<Opts, String> {
    let mut o = Opts {
        n: 2000,
        warmup: 100,
        fsync_n: 2000,
        levels: vec![1, 4, 16, 64],
        conc_total: 4000,
        replay: 100_000,
        preload_clients: 64,
        quick: false,
        convene: None,
        cccc: None,
        skip_cccc: false,
        json_out: None,
        keep: false,
    };
    let mut n_set = None;
    let mut replay_set = None;
    let mut conc_set = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        let num = |s: String, name: &str| {
            s.parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{name}: not a positive integer: {s}"))
        };
        match a.as_str() {
            "--n" => n_set = Some(num(val("--n")?, "--n")?),
            "--replay" => replay_set = Some(num(val("--replay")?, "--replay")?),
            "--conc-total" => conc_set = Some(num(val("--conc-total")?, "--conc-total")?),
            "--levels" => {
                let v = val("--levels")?;
                o.levels = v
                    .split(',')
                    .map(|x| num(x.trim().to_string(), "--levels"))
                    .collect::<Result<_, _>>()?;
            }
            "--quick" => o.quick = true,
            "--convene" => o.convene = Some(PathBuf::from(val("--convene")?)),
            "--cccc" => o.cccc = Some(PathBuf::from(val("--cccc")?)),
            "--skip-cccc" => o.skip_cccc = true,
            "--json-out" => o.json_out = Some(PathBuf::from(val("--json-out")?)),
            "--keep" => o.keep = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown option {other}\n\n{USAGE}")),
        }
    }
    if o.quick {
        o.n = 200;
        o.warmup = 20;
        o.fsync_n = 200;
        o.conc_total = 400;
        o.replay = 5000;
        o.preload_clients = 16;
        o.skip_cccc = true;
    }
    if let Some(n) = n_set {
        o.n = n;
    }
    if let Some(n) = replay_set {
        o.replay = n;
    }
    if let Some(n) = conc_set {
        o.conc_total = n;
    }
    Ok(o)
}

/// Logs progress on stderr with the time since start.
fn progress(t0: Instant, msg: &str) {
    eprintln!("[{:6.1}s] {msg}", t0.elapsed().as_secs_f64());
}

fn main() -> ExitCode {
    let opts = match parse_opts() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("convene-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(o: &Opts) -> Res<()> {
    let t0 = Instant::now();
    let convene_bin = match &o.convene {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .map_err(|e| e.to_string())?
            .with_file_name("convene"),
    };
    if !convene_bin.is_file() {
        return Err(format!(
            "no convene binary at {} (build it: cargo build --release -p convene-cli, or pass --convene PATH)",
            convene_bin.display()
        ));
    }
    let cccc_bin = if o.skip_cccc {
        None
    } else {
        o.cccc.clone().or_else(|| daemon::which("cccc"))
    };
    if let Some(p) = &cccc_bin {
        if !p.is_file() {
            return Err(format!("no cccc binary at {}", p.display()));
        }
    }
    if cccc_bin.is_none() && !o.skip_cccc {
        eprintln!("no cccc binary on PATH (use --cccc PATH); CCCC column skipped");
    }
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let root = std::env::temp_dir().join(format!(
        "convene-bench-{}-{}",
        std::process::id(),
        nanos % 1_000_000_000
    ));
    std::fs::create_dir_all(&root).map_err(|e| format!("mkdir {}: {e}", root.display()))?;
    let _cleanup = Cleanup {
        root: root.clone(),
        keep: o.keep,
    };
    progress(t0, &format!("temp dir {}", root.display()));
    settle_disk(&root);

    // Both daemons run side by side and the sequential and concurrent phases alternate
    // between them in small rounds: the machine is shared, and interleaving makes both see
    // the same background load (and the same disk) instead of whatever each time slot had.
    let mut targets = vec![Target::start(Kind::Convene, &convene_bin, &root, t0)?];
    if let Some(bin) = &cccc_bin {
        match Target::start(Kind::Cccc, bin, &root, t0) {
            Ok(t) => targets.push(t),
            Err(e) => eprintln!("CCCC not measured: {e}"),
        }
    }

    let mut probe = FsyncProbe::open(&root)?;
    sequential_phase(o, &mut targets, &mut probe, t0)?;
    let fsync = std::mem::take(&mut probe.acc).finish();
    let fsync_over = std::mem::take(&mut probe.over_acc).finish();
    drop(probe);
    progress(
        t0,
        &format!(
            "fsync (interleaved): p50 {:.1} µs, {:.0} ops/s",
            fsync.p50_us, fsync.per_s
        ),
    );
    concurrency_phase(o, &mut targets, t0)?;

    let mut suites = Vec::new();
    for t in targets {
        suites.push(t.finish(o, &fsync, t0)?);
    }
    let convene = suites.remove(0);
    let cccc = suites.pop();
    let total = t0.elapsed();
    let report = Report {
        fsync,
        fsync_over,
        convene,
        cccc,
        opts: o.clone(),
        total,
    };
    report.print();
    if let Some(p) = &o.json_out {
        let text = serde_json::to_string_pretty(&report.json()).map_err(|e| e.to_string())?;
        std::fs::write(p, text + "\n").map_err(|e| format!("write {}: {e}", p.display()))?;
        eprintln!("wrote {}", p.display());
    }
    let c = &report.convene;
    if !c.replay.valid || c.replay_capped.as_ref().is_some_and(|r| !r.valid) {
        return Err("Convene replay check failed (see the replay notes)".into());
    }
    Ok(())
}

/// Removes the temp root at the end (unless --keep).
struct Cleanup {
    root: PathBuf,
    keep: bool,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if self.keep {
            eprintln!("kept {}", self.root.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

// ---------------------------------------------------------------------------------------
// 1. The machine's own fsync rate.

/// Flushes dirty data of the filesystem holding `dir` (`sync -f`), so that a probe or a run
/// does not pay for writeback left over by the previous phase (e.g. a 100k-event database
/// just written and closed): without it the fsync probe swings between ~0.2 and ~4 ms here.
fn settle_disk(dir: &Path) {
    let ok = std::process::Command::new("sync")
        .arg("-f")
        .arg(dir)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        let _ = std::process::Command::new("sync").status();
    }
}

/// Appends 256 bytes + fdatasync to a file in the temp dir (same filesystem as the homes).
/// Also measures the same 256-byte write + fdatasync as an overwrite inside a preallocated
/// file (what a reused WAL does): on ext4 an append changes the file size and needs a
/// journal commit, an overwrite does not, and the two can differ by 10x on a busy machine.
struct FsyncProbe {
    file: File,
    path: PathBuf,
    acc: Acc,
    over: File,
    over_path: PathBuf,
    over_off: u64,
    over_acc: Acc,
}

/// Size of the preallocated overwrite probe file.
const OVER_SIZE: u64 = 1 << 20;

impl FsyncProbe {
    fn open(dir: &Path) -> Res<Self> {
        let path = dir.join("fsync-probe.bin");
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| format!("open {}: {e}", path.display()))?;
        let over_path = dir.join("fsync-probe-prealloc.bin");
        let mut over = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&over_path)
            .map_err(|e| format!("open {}: {e}", over_path.display()))?;
        over.write_all(&vec![0u8; OVER_SIZE as usize])
            .and_then(|_| over.sync_all())
            .map_err(|e| e.to_string())?;
        let mut p = FsyncProbe {
            file,
            path,
            acc: Acc::default(),
            over,
            over_path,
            over_off: 0,
            over_acc: Acc::default(),
        };
        // Warm-up: the first appends allocate the file's first blocks.
        p.run(20)?;
        p.acc = Acc::default();
        p.over_acc = Acc::default();
        Ok(p)
    }

    fn run(&mut self, n: usize) -> Res<()> {
        use std::os::unix::fs::FileExt;
        let block = [b'x'; 256];
        let mut lats = Vec::with_capacity(n);
        let start = Instant::now();
        for _ in 0..n {
            let t = Instant::now();
            self.file.write_all(&block).map_err(|e| e.to_string())?;
            self.file.sync_data().map_err(|e| e.to_string())?;
            lats.push(t.elapsed());
        }
        self.acc
            .add(lats, start.elapsed(), &Vec::new(), &Vec::new());
        let mut lats = Vec::with_capacity(n);
        let start = Instant::now();
        for _ in 0..n {
            let t = Instant::now();
            self.over
                .write_all_at(&block, self.over_off)
                .map_err(|e| e.to_string())?;
            self.over.sync_data().map_err(|e| e.to_string())?;
            self.over_off = (self.over_off + 256) % OVER_SIZE;
            lats.push(t.elapsed());
        }
        self.over_acc
            .add(lats, start.elapsed(), &Vec::new(), &Vec::new());
        Ok(())
    }
}

impl Drop for FsyncProbe {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_file(&self.over_path);
    }
}

// ---------------------------------------------------------------------------------------
// The daemons under test.

struct Suite {
    kind: Kind,
    /// The machine's fsync rate (measured interleaved with the sequential phase).
    fsync: Lat,
    version: String,
    /// `ping` round trips (no ledger work): the IPC floor, new connection / persistent.
    ping_new_conn: Lat,
    ping_persistent: Lat,
    new_conn: Lat,
    persistent: Lat,
    levels: Vec<(usize, Lat)>,
    replay: Replay,
    /// Convene only: replay limited to CCCC's cap, for an equal-size comparison.
    replay_capped: Option<Replay>,
}

struct Replay {
    /// chat.message events in the group at the time of the replay.
    loaded: usize,
    /// Daemon CPU while pre-loading, and while replaying.
    preload_cpu: Option<Cpu>,
    cpu: Option<Cpu>,
    /// Seconds taken to load them (None when they came from the send benches).
    preload_secs: Option<f64>,
    /// Event lines received.
    received: usize,
    /// Request sent → last event line received.
    secs: f64,
    note: String,
    /// Convene: the count matched head_seq (or the limit) and the seqs were contiguous.
    valid: bool,
}

impl Replay {
    fn per_s(&self) -> f64 {
        if self.secs > 0.0 {
            self.received as f64 / self.secs
        } else {
            0.0
        }
    }
}

/// Creates a group, stops it (so no runtime is ever launched) and adds a custom actor.
/// Returns (group_id, created_at).
fn setup_group(d: &Daemon, title: &str) -> Res<(String, String)> {
    let mut c = d.connect()?;
    let r = c.call("group_create", json!({"title": title, "by": "user"}))?;
    let gid = r
        .get("group_id")
        .and_then(Value::as_str)
        .ok_or("group_create: no group_id")?
        .to_string();
    let created = r
        .pointer("/group/created_at")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    c.call("group_stop", json!({"group_id": gid, "by": "user"}))?;
    c.call(
        "actor_add",
        json!({"group_id": gid, "actor_id": "bench-peer", "runtime": "custom", "by": "user"}),
    )?;
    Ok((gid, created))
}

/// One running daemon with its send group and its measurements so far.
struct Target {
    kind: Kind,
    d: Daemon,
    gid: String,
    created_at: String,
    /// chat.message events sent into `gid` so far.
    sent: usize,
    /// Persistent connections for the sequential phase (one for ping, one for send).
    ping_conn: Conn,
    send_conn: Conn,
    ping_new_conn: Acc,
    ping_persistent: Acc,
    new_conn: Acc,
    persistent: Acc,
    levels: Vec<(usize, Acc)>,
}

impl Target {
    fn start(kind: Kind, bin: &Path, root: &Path, t0: Instant) -> Res<Self> {
        let name = kind.name();
        progress(t0, &format!("{name}: starting {}", bin.display()));
        let d = Daemon::start(kind, bin, &root.join(name.to_lowercase()))?;
        progress(t0, &format!("{name}: up (version {})", d.version));
        let (gid, created_at) = setup_group(&d, "bench-send")?;
        // Sanity: a send must come back with an event id.
        let mut c = d.connect()?;
        let r = c.call("send", json!({"group_id": gid, "by": "user", "to": ["bench-peer"], "message_mode": "mail", "text": "hello"}))?;
        r.pointer("/event/id")
            .and_then(Value::as_str)
            .ok_or("send: no event.id in result")?;
        let ping_conn = d.connect()?;
        Ok(Target {
            kind,
            d,
            gid,
            created_at,
            sent: 1,
            ping_conn,
            send_conn: c,
            ping_new_conn: Acc::default(),
            ping_persistent: Acc::default(),
            new_conn: Acc::default(),
            persistent: Acc::default(),
            levels: Vec::new(),
        })
    }

    /// `k` send request lines with unique texts.
    fn sends(&mut self, tag: &str, k: usize) -> Vec<Vec<u8>> {
        let base = self.sent;
        self.sent += k;
        (0..k)
            .map(|i| send_line(&self.gid, &text(tag, base + i)))
            .collect()
    }

    /// Runs the replay part and stops the daemon.
    fn finish(mut self, o: &Opts, fsync: &Lat, t0: Instant) -> Res<Suite> {
        let name = self.kind.name();
        let d = &self.d;
        let (replay, replay_capped) = match self.kind {
            Kind::Convene => {
                let (rgid, _) = setup_group(d, "bench-replay")?;
                let before = stats::snapshot(d.pid());
                let t = Instant::now();
                preload(d, &rgid, o.replay, o.preload_clients)?;
                let pre_wall = t.elapsed();
                let preload_cpu =
                    Cpu::between(&before, &stats::snapshot(d.pid()), pre_wall, o.replay);
                let pre = pre_wall.as_secs_f64();
                progress(
                    t0,
                    &format!(
                        "{name}: pre-loaded {} events in {pre:.1} s ({:.0}/s)",
                        o.replay,
                        o.replay as f64 / pre
                    ),
                );
                let mut r = replay_convene(d, &rgid, None)?;
                r.preload_secs = Some(pre);
                r.preload_cpu = preload_cpu;
                r.loaded = o.replay;
                progress(
                    t0,
                    &format!(
                        "{name}: replay {} events in {:.3} s ({:.0} events/s)",
                        r.received,
                        r.secs,
                        r.per_s()
                    ),
                );
                let mut capped = replay_convene(d, &rgid, Some(2000))?;
                capped.loaded = o.replay;
                (r, Some(capped))
            }
            Kind::Cccc => {
                // The send benches already put `sent` chat.message events into this group.
                let r = replay_cccc(d, &self.gid, &self.created_at, self.sent)?;
                progress(
                    t0,
                    &format!(
                        "{name}: stream since_ts gave {} of {} events in {:.3} s ({})",
                        r.received, r.loaded, r.secs, r.note
                    ),
                );
                (r, None)
            }
        };
        let version = self.d.version.clone();
        self.d.stop();
        progress(t0, &format!("{name}: stopped"));
        Ok(Suite {
            kind: self.kind,
            fsync: fsync.clone(),
            version,
            ping_new_conn: self.ping_new_conn.finish(),
            ping_persistent: self.ping_persistent.finish(),
            new_conn: self.new_conn.finish(),
            persistent: self.persistent.finish(),
            levels: self
                .levels
                .into_iter()
                .map(|(c, a)| (c, a.finish()))
                .collect(),
            replay,
            replay_capped,
        })
    }
}

// ---------------------------------------------------------------------------------------
// 2. Sequential durable send (and the ping floor), interleaved in rounds.

fn sequential_phase(
    o: &Opts,
    targets: &mut [Target],
    probe: &mut FsyncProbe,
    t0: Instant,
) -> Res<()> {
    let rounds = if o.quick { 4 } else { 10 };
    let pings = (o.n / 4).max(50);
    // Warm-up: connections, caches, the first pages of each ledger.
    for t in targets.iter_mut() {
        let ping = vec![conn::ping_line(); o.warmup];
        new_conn_chunk(&t.d, &ping, &mut Acc::default())?;
        persistent_chunk(&t.d, &mut t.ping_conn, &ping, &mut Acc::default())?;
        let reqs = t.sends("warm-new", o.warmup);
        new_conn_chunk(&t.d, &reqs, &mut Acc::default())?;
        let reqs = t.sends("warm-persist", o.warmup);
        persistent_chunk(&t.d, &mut t.send_conn, &reqs, &mut Acc::default())?;
    }
    let share = |total: usize, r: usize| total / rounds + usize::from(r < total % rounds);
    for r in 0..rounds {
        probe.run(share(o.fsync_n, r))?;
        // Alternate which daemon goes first.
        let order: Vec<usize> = if r % 2 == 0 {
            (0..targets.len()).collect()
        } else {
            (0..targets.len()).rev().collect()
        };
        for &i in &order {
            let t = &mut targets[i];
            let ping = vec![conn::ping_line(); share(pings, r)];
            new_conn_chunk(&t.d, &ping, &mut t.ping_new_conn)?;
            persistent_chunk(&t.d, &mut t.ping_conn, &ping, &mut t.ping_persistent)?;
            let reqs = t.sends("newconn", share(o.n, r));
            new_conn_chunk(&t.d, &reqs, &mut t.new_conn)?;
            let reqs = t.sends("persist", share(o.n, r));
            persistent_chunk(&t.d, &mut t.send_conn, &reqs, &mut t.persistent)?;
        }
    }
    for t in targets.iter() {
        let (a, b) = (t.new_conn.peek(), t.persistent.peek());
        progress(
            t0,
            &format!(
                "{}: send p50: new conn {:.0} µs, persistent {:.0} µs",
                t.kind.name(),
                a.p50_us,
                b.p50_us
            ),
        );
    }
    Ok(())
}

/// (a) One new connection per request, as the cccc-sdk Python client does.
fn new_conn_chunk(d: &Daemon, reqs: &[Vec<u8>], acc: &mut Acc) -> Res<()> {
    let mut lats = Vec::with_capacity(reqs.len());
    let before = stats::snapshot(d.pid());
    let start = Instant::now();
    for r in reqs {
        let t = Instant::now();
        let mut c = d.connect()?;
        c.roundtrip(r)?;
        drop(c);
        lats.push(t.elapsed());
    }
    let wall = start.elapsed();
    acc.add(lats, wall, &before, &stats::snapshot(d.pid()));
    Ok(())
}

/// (b) One persistent connection.
fn persistent_chunk(d: &Daemon, c: &mut Conn, reqs: &[Vec<u8>], acc: &mut Acc) -> Res<()> {
    let mut lats = Vec::with_capacity(reqs.len());
    let before = stats::snapshot(d.pid());
    let start = Instant::now();
    for r in reqs {
        let t = Instant::now();
        c.roundtrip(r)?;
        lats.push(t.elapsed());
    }
    let wall = start.elapsed();
    acc.add(lats, wall, &before, &stats::snapshot(d.pid()));
    Ok(())
}

// ---------------------------------------------------------------------------------------
// 3. Concurrent clients, in halves ordered A B B A.

fn concurrency_phase(o: &Opts, targets: &mut [Target], t0: Instant) -> Res<()> {
    for &clients in &o.levels {
        let per = o.conc_total.div_ceil(clients);
        let halves = [per / 2, per - per / 2];
        let n = targets.len();
        let order: Vec<(usize, usize)> = (0..n)
            .map(|i| (i, halves[0]))
            .chain((0..n).rev().map(|i| (i, halves[1])))
            .collect();
        for t in targets.iter_mut() {
            t.levels.push((clients, Acc::default()));
        }
        for (i, k) in order {
            if k == 0 {
                continue;
            }
            let t = &mut targets[i];
            let tag = format!("c{clients}");
            let base = t.sent;
            t.sent += clients * k;
            let gid = t.gid.clone();
            let acc = &mut t.levels.last_mut().expect("level").1;
            concurrent(&t.d, &gid, &tag, base, clients, k, acc)?;
        }
        for t in targets.iter() {
            let l = t.levels.last().expect("level").1.peek();
            progress(
                t0,
                &format!(
                    "{}: {clients:>2} clients x {per}: {:.0} msgs/s (p50 {:.0} µs, p99 {:.0} µs)",
                    t.kind.name(),
                    l.per_s,
                    l.p50_us,
                    l.p99_us
                ),
            );
        }
    }
    Ok(())
}

/// `clients` threads, each with its own persistent connection, each sending `per` messages.
fn concurrent(
    d: &Daemon,
    gid: &str,
    tag: &str,
    base: usize,
    clients: usize,
    per: usize,
    acc: &mut Acc,
) -> Res<()> {
    let barrier = Arc::new(Barrier::new(clients + 1));
    let mut handles = Vec::with_capacity(clients);
    for t in 0..clients {
        let reqs: Vec<Vec<u8>> = (0..per)
            .map(|i| send_line(gid, &text(tag, base + t * per + i)))
            .collect();
        let mut c = d.connect()?;
        let b = barrier.clone();
        handles.push(std::thread::spawn(move || -> Res<Vec<Duration>> {
            b.wait();
            let mut lats = Vec::with_capacity(reqs.len());
            for r in &reqs {
                let t = Instant::now();
                c.roundtrip(r)?;
                lats.push(t.elapsed());
            }
            Ok(lats)
        }));
    }
    let before = stats::snapshot(d.pid());
    barrier.wait();
    let start = Instant::now();
    let mut all = Vec::with_capacity(clients * per);
    let mut err = None;
    for h in handles {
        match h.join() {
            Ok(Ok(l)) => all.extend(l),
            Ok(Err(e)) => err = Some(e),
            Err(_) => err = Some("client thread panicked".into()),
        }
    }
    let wall = start.elapsed();
    if let Some(e) = err {
        return Err(format!("{clients} clients: {e}"));
    }
    acc.add(all, wall, &before, &stats::snapshot(d.pid()));
    Ok(())
}

// ---------------------------------------------------------------------------------------
// 4. Replay.

/// Loads `total` chat.message events with `clients` connections, each keeping a window of
/// requests in flight (the daemon answers a connection's requests in order).
fn preload(d: &Daemon, gid: &str, total: usize, clients: usize) -> Res<()> {
    const WINDOW: usize = 32;
    let per = total.div_ceil(clients);
    let mut handles = Vec::new();
    let mut left = total;
    for t in 0..clients {
        let mine = per.min(left);
        left -= mine;
        if mine == 0 {
            break;
        }
        let mut c = d.connect()?;
        let gid = gid.to_string();
        handles.push(std::thread::spawn(move || -> Res<()> {
            let mut i = 0;
            while i < mine {
                let k = WINDOW.min(mine - i);
                let mut buf = Vec::with_capacity(k * 256);
                for j in i..i + k {
                    buf.extend_from_slice(&send_line(&gid, &text(&format!("load{t}"), j)));
                }
                c.write(&buf)?;
                for _ in 0..k {
                    c.expect_ok()?;
                }
                i += k;
            }
            Ok(())
        }));
    }
    for h in handles {
        h.join()
            .map_err(|_| "preload thread panicked".to_string())??;
    }
    Ok(())
}

/// Convene: `events_stream` since_seq 0, follow=false; reads until EOF.
fn replay_convene(d: &Daemon, gid: &str, limit: Option<usize>) -> Res<Replay> {
    let mut c = d.connect()?;
    c.set_read_timeout(Some(Duration::from_secs(120)))?;
    let mut args = json!({"group_id": gid, "by": "user", "since_seq": 0, "follow": false});
    if let Some(l) = limit {
        args["limit"] = json!(l);
    }
    let mut req = serde_json::to_vec(&json!({"v": 1, "op": "events_stream", "args": args}))
        .map_err(|e| e.to_string())?;
    req.push(b'\n');
    let before = stats::snapshot(d.pid());
    let start = Instant::now();
    c.write(&req)?;
    let hs = c.read_line()?.to_vec();
    let hs: Value =
        serde_json::from_slice(&hs).map_err(|e| format!("events_stream handshake: {e}"))?;
    let hs = convene_ipc::client::into_result(hs).map_err(|e| format!("events_stream: {e}"))?;
    let head = hs.get("head_seq").and_then(Value::as_u64).unwrap_or(0) as usize;
    // Timed loop: count event lines only; content is checked on the first and last lines
    // afterwards (per-line parsing would measure the client, not the daemon).
    let mut received = 0usize;
    let mut last = start;
    let mut cur = Vec::with_capacity(4096);
    let mut prev = Vec::with_capacity(4096);
    let mut first = Vec::new();
    loop {
        if c.read_line_into(&mut cur)? == 0 {
            break;
        }
        if cur.starts_with(br#"{"t":"event""#) || cur.starts_with(br#"{"event":"#) {
            received += 1;
            last = Instant::now();
            if received == 1 {
                first = cur.clone();
            }
            std::mem::swap(&mut cur, &mut prev);
        }
    }
    let cpu = Cpu::between(
        &before,
        &stats::snapshot(d.pid()),
        start.elapsed(),
        received,
    );
    let secs = last.duration_since(start).as_secs_f64();
    let expected = limit.unwrap_or(head).min(head);
    let mut valid = true;
    let mut note = format!("{received} event lines of head_seq {head}");
    if received != expected {
        note.push_str(&format!("; EXPECTED {expected}"));
        valid = false;
    }
    let seq_of = |line: &[u8]| {
        serde_json::from_slice::<Value>(line)
            .ok()
            .and_then(|v| v.pointer("/event/seq").and_then(Value::as_u64))
    };
    match (seq_of(&first), seq_of(&prev)) {
        (Some(a), Some(b)) if received > 0 && b - a + 1 == received as u64 => {}
        (a, b) => {
            note.push_str(&format!("; seq check failed (first {a:?}, last {b:?})"));
            valid = false;
        }
    }
    if let Some(l) = limit {
        note.push_str(&format!("; limit {l} (CCCC's replay cap)"));
    }
    Ok(Replay {
        loaded: 0,
        preload_secs: None,
        preload_cpu: None,
        cpu,
        received,
        secs,
        note,
        valid,
    })
}

/// CCCC: `events_stream` since_ts = group created_at. Its stream never ends and caps replay,
/// so read until `expected` events or until no line came for 2 s.
fn replay_cccc(d: &Daemon, gid: &str, since_ts: &str, expected: usize) -> Res<Replay> {
    let mut c = d.connect()?;
    c.set_read_timeout(Some(Duration::from_millis(200)))?;
    let mut req = serde_json::to_vec(&json!({"v": 1, "op": "events_stream", "args": {"group_id": gid, "by": "user", "since_ts": since_ts}})).map_err(|e| e.to_string())?;
    req.push(b'\n');
    let before = stats::snapshot(d.pid());
    let start = Instant::now();
    c.write(&req)?;
    let mut received = 0usize;
    let mut handshake = false;
    let mut last = start;
    let hard_stop = start + Duration::from_secs(30);
    let mut buf = Vec::with_capacity(4096);
    loop {
        let now = Instant::now();
        if received >= expected
            || now > hard_stop
            || now.duration_since(last) > Duration::from_secs(2)
        {
            break;
        }
        // A read timeout leaves the partial line in `buf`; the next read completes it.
        match c.read_append(&mut buf) {
            Ok(0) => break,
            Ok(_) if !buf.ends_with(b"\n") => break, // EOF inside a line
            Ok(_) => {
                if !handshake {
                    handshake = true;
                    if !buf.starts_with(br#"{"v":1,"ok":true"#) {
                        return Err(format!("events_stream: {}", String::from_utf8_lossy(&buf)));
                    }
                } else if buf.starts_with(br#"{"event":"#) || buf.starts_with(br#"{"t":"event""#) {
                    received += 1;
                    last = Instant::now();
                }
                buf.clear();
            }
            Err(_) => continue, // idle: loop to check the limits
        }
    }
    let cpu = Cpu::between(
        &before,
        &stats::snapshot(d.pid()),
        last.duration_since(start),
        received,
    );
    let secs = last.duration_since(start).as_secs_f64();
    let note = if received < expected {
        format!("stream replay capped: {received} of {expected} events (CCCC replays at most 2000)")
    } else {
        format!("{received} events")
    };
    Ok(Replay {
        loaded: expected,
        preload_secs: None,
        preload_cpu: None,
        cpu,
        received,
        secs,
        note,
        valid: true,
    })
}

// ---------------------------------------------------------------------------------------
// Report.

struct Report {
    fsync: Lat,
    /// The same write + fdatasync as an overwrite in a preallocated file.
    fsync_over: Lat,
    convene: Suite,
    cccc: Option<Suite>,
    opts: Opts,
    total: Duration,
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| a / b)
}

impl Report {
    fn level(s: &Suite, n: usize) -> Option<&Lat> {
        s.levels.iter().find(|(c, _)| *c == n).map(|(_, l)| l)
    }

    /// (name, value, target text, pass)
    fn ratios(&self) -> Vec<(String, Option<f64>, &'static str, Option<bool>)> {
        let c = &self.convene;
        let mut v = Vec::new();
        let cc = self.cccc.as_ref();
        let r = cc.and_then(|k| ratio(c.persistent.p50_us, k.persistent.p50_us));
        v.push((
            "Convene p50 / CCCC p50 (send, persistent conn)".into(),
            r,
            "<= 0.6",
            r.map(|x| x <= 0.6),
        ));
        let r = cc.and_then(|k| ratio(c.new_conn.p50_us, k.new_conn.p50_us));
        v.push((
            "Convene p50 / CCCC p50 (send, new conn per request)".into(),
            r,
            "<= 0.6",
            r.map(|x| x <= 0.6),
        ));
        let r = ratio(c.persistent.p50_us, c.fsync.p50_us);
        v.push((
            "Convene p50 (persistent) / fsync p50 (append probe)".into(),
            r,
            "<= 2",
            r.map(|x| x <= 2.0),
        ));
        let r = ratio(c.persistent.p50_us, self.fsync_over.p50_us);
        v.push((
            "  same, vs overwrite-in-place fsync p50 (informational)".into(),
            r,
            "-",
            None,
        ));
        let top = *self.opts.levels.last().unwrap_or(&64);
        let r = cc.and_then(|k| ratio(Self::level(c, top)?.per_s, Self::level(k, top)?.per_s));
        v.push((
            format!("Convene {top}-client msgs/s / CCCC {top}-client msgs/s"),
            r,
            ">= 10",
            r.map(|x| x >= 10.0),
        ));
        let r = Some(c.replay.per_s());
        v.push((
            "Convene replay events/s".into(),
            r,
            ">= 500000",
            r.map(|x| x >= 500_000.0),
        ));
        v
    }

    fn print(&self) {
        let c = &self.convene;
        let k = self.cccc.as_ref();
        let w0 = 48;
        let cell = |s: &Suite, f: &dyn Fn(&Suite) -> String| f(s);
        let row = |label: &str, f: &dyn Fn(&Suite) -> String| {
            let kc = k.map(|s| cell(s, f)).unwrap_or_else(|| "-".into());
            println!("| {label:<w0$} | {:<30} | {:<30} |", cell(c, f), kc);
        };
        println!();
        println!(
            "## convene-bench results ({} s total, n={}, {} mode)",
            fmt0(self.total.as_secs_f64()),
            self.opts.n,
            if self.opts.quick { "quick" } else { "full" }
        );
        println!();
        println!(
            "machine fsync (append 256 B + fdatasync, n={}): p50 {} µs, p99 {} µs, {} ops/s",
            self.fsync.n,
            fmt1(self.fsync.p50_us),
            fmt1(self.fsync.p99_us),
            fmt0(self.fsync.per_s)
        );
        println!(
            "machine fsync (overwrite 256 B in a preallocated file + fdatasync, n={}): p50 {} µs, p99 {} µs, {} ops/s",
            self.fsync_over.n,
            fmt1(self.fsync_over.p50_us),
            fmt1(self.fsync_over.p99_us),
            fmt0(self.fsync_over.per_s)
        );
        println!();
        let kv = k
            .map(|s| format!("CCCC {}", s.version))
            .unwrap_or_else(|| "CCCC (not run)".into());
        println!(
            "| {:<w0$} | {:<30} | {:<30} |",
            "metric",
            format!("Convene {}", c.version),
            kv
        );
        println!("|{:-<w1$}|{:-<32}|{:-<32}|", "", "", "", w1 = w0 + 2);
        let lat = |l: &Lat| {
            format!(
                "{} / {} µs, {}/s",
                fmt0(l.p50_us),
                fmt0(l.p99_us),
                fmt0(l.per_s)
            )
        };
        row("machine fsync (interleaved): p50 / p99, ops/s", &|s| {
            lat(&s.fsync)
        });
        row("ping (no ledger), new conn: p50 / p99, ops/s", &|s| {
            lat(&s.ping_new_conn)
        });
        row("ping (no ledger), persistent: p50 / p99, ops/s", &|s| {
            lat(&s.ping_persistent)
        });
        row("send, new conn/request: p50 / p99, msgs/s", &|s| {
            lat(&s.new_conn)
        });
        row("send, persistent conn: p50 / p99, msgs/s", &|s| {
            lat(&s.persistent)
        });
        for &n in &self.opts.levels {
            row(
                &format!("{n:>2} clients: msgs/s (p50 / p99 µs)"),
                &|s| match Self::level(s, n) {
                    Some(l) => format!(
                        "{} ({} / {})",
                        fmt0(l.per_s),
                        fmt0(l.p50_us),
                        fmt0(l.p99_us)
                    ),
                    None => "-".into(),
                },
            );
        }
        row("daemon CPU, persistent conn: µs/msg, top thread", &|s| {
            cpu_cell(&s.persistent.cpu)
        });
        let top = *self.opts.levels.last().unwrap_or(&64);
        row(
            &format!("daemon CPU, {top} clients: µs/msg, top thread"),
            &|s| cpu_cell(&Self::level(s, top).and_then(|l| l.cpu.clone())),
        );
        row("replay: events received / seconds", &|s| {
            format!("{} / {} s", s.replay.received, fmt3(s.replay.secs))
        });
        row("replay: events/s", &|s| fmt0(s.replay.per_s()));
        if let Some(cap) = &c.replay_capped {
            let kc = k
                .map(|s| format!("{} ({} ev)", fmt0(s.replay.per_s()), s.replay.received))
                .unwrap_or_else(|| "-".into());
            println!(
                "| {:<w0$} | {:<30} | {:<30} |",
                "replay, first 2000 (CCCC's cap): events/s",
                format!("{} ({} ev)", fmt0(cap.per_s()), cap.received),
                kc
            );
        }
        println!();
        println!("replay notes:");
        println!(
            "  Convene: {} events pre-loaded{}; {}",
            c.replay.loaded,
            c.replay
                .preload_secs
                .map(|p| format!(" in {} s ({}/s)", fmt1(p), fmt0(c.replay.loaded as f64 / p)))
                .unwrap_or_default(),
            c.replay.note
        );
        println!(
            "  Convene daemon CPU: pre-load {}; replay {}",
            cpu_cell(&c.replay.preload_cpu),
            cpu_cell(&c.replay.cpu)
        );
        if let Some(s) = k {
            println!("  CCCC: group holds {} chat.message events from the send benches (not pre-loaded to 100k); {}", s.replay.loaded, s.replay.note);
        }
        println!();
        println!(
            "| {:<60} | {:>10} | {:<10} | {:<6} |",
            "ratio", "value", "target", ""
        );
        println!("|{:-<62}|{:-<12}|{:-<12}|{:-<8}|", "", "", "", "");
        for (name, val, target, pass) in self.ratios() {
            let v = val
                .map(|x| {
                    if x >= 100.0 {
                        fmt0(x)
                    } else {
                        format!("{x:.2}")
                    }
                })
                .unwrap_or_else(|| "n/a".into());
            let p = match pass {
                Some(true) => "ok",
                Some(false) => "MISS",
                None => "-",
            };
            println!("| {name:<60} | {v:>10} | {target:<10} | {p:<6} |");
        }
        println!();
    }

    fn json(&self) -> Value {
        let suite = |s: &Suite| {
            json!({
                "implementation": s.kind.name(),
                "version": s.version,
                                "ping_new_conn": s.ping_new_conn.json(),
                "ping_persistent": s.ping_persistent.json(),
                "send_new_conn": s.new_conn.json(),
                "send_persistent": s.persistent.json(),
                "concurrent": s.levels.iter().map(|(c, l)| { let mut v = l.json(); v["clients"] = json!(c); v }).collect::<Vec<_>>(),
                "replay": replay_json(&s.replay),
                "replay_first_2000": s.replay_capped.as_ref().map(replay_json),
            })
        };
        json!({
            "mode": if self.opts.quick { "quick" } else { "full" },
            "n": self.opts.n,
            "warmup": self.opts.warmup,
            "concurrency_total_per_level": self.opts.conc_total,
            "total_seconds": self.total.as_secs_f64(),
            "fsync": self.fsync.json(),
            "fsync_overwrite_prealloc": self.fsync_over.json(),
            "convene": suite(&self.convene),
            "cccc": self.cccc.as_ref().map(suite),
            "ratios": self.ratios().into_iter().map(|(n, v, t, p)| json!({"name": n, "value": v, "target": t, "pass": p})).collect::<Vec<_>>(),
        })
    }
}

fn replay_json(r: &Replay) -> Value {
    json!({
        "loaded": r.loaded,
        "preload_seconds": r.preload_secs,
        "preload_daemon_cpu": r.preload_cpu.as_ref().map(Cpu::json),
        "daemon_cpu": r.cpu.as_ref().map(Cpu::json),
        "received": r.received,
        "seconds": r.secs,
        "events_per_s": r.per_s(),
        "note": r.note,
    })
}

/// "12.3 µs, convene-writer 80%": daemon CPU per operation and the busiest thread's share of wall time.
fn cpu_cell(c: &Option<Cpu>) -> String {
    match c {
        Some(c) => format!(
            "{} µs, {} {}%",
            fmt1(c.us_per_op),
            c.busiest,
            fmt0(c.busiest_util * 100.0)
        ),
        None => "-".into(),
    }
}

fn fmt0(x: f64) -> String {
    format!("{x:.0}")
}

fn fmt1(x: f64) -> String {
    format!("{x:.1}")
}

fn fmt3(x: f64) -> String {
    format!("{x:.3}")
}
