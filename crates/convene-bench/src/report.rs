//! The result table (stdout) and the JSON file.

use std::time::Duration;

use serde_json::{json, Value};

use crate::opts::Opts;
use crate::replay::Replay;
use crate::stats::{Cpu, Lat};
use crate::target::Suite;

/// Everything one run measured.
pub struct Report {
    pub fsync: Lat,
    /// The same write + fdatasync as an overwrite in a preallocated file.
    pub fsync_over: Lat,
    pub convene: Suite,
    pub cccc: Option<Suite>,
    pub opts: Opts,
    pub total: Duration,
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

    /// Prints the result table and the ratio checks on stdout.
    pub fn print(&self) {
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

    /// All results as one JSON document (`--json-out`).
    pub fn json(&self) -> Value {
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
