//! `convene-bench`: measures the ledger engine through the daemon IPC, against Convene and
//! (when a `cccc` binary is available) against CCCC, each started fresh in its own temp home.
//!
//! See docs/BENCHMARKS.md for what each number means.

mod concurrency;
mod conn;
mod daemon;
mod fsync;
mod opts;
mod replay;
mod report;
mod send;
mod stats;
mod target;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use concurrency::concurrency_phase;
use conn::Res;
use daemon::Kind;
use fsync::{settle_disk, FsyncProbe};
use opts::{parse_opts, Opts};
use report::Report;
use send::sequential_phase;
use target::Target;

/// Logs progress on stderr with the time since start.
pub fn progress(t0: Instant, msg: &str) {
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
