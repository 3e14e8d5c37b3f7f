//! Latency summaries.

use std::time::Duration;

use serde_json::{json, Value};

/// Per-operation latency percentiles plus the rate over the whole run.
#[derive(Debug, Clone)]
pub struct Lat {
    pub n: usize,
    pub p50_us: f64,
    pub p99_us: f64,
    pub mean_us: f64,
    pub max_us: f64,
    /// Operations per second over the wall time of the run (not 1/mean).
    pub per_s: f64,
    /// Daemon CPU during the run, when measured.
    pub cpu: Option<Cpu>,
}

impl Lat {
    /// Summarises `lats`, measured over `wall`.
    pub fn from(mut lats: Vec<Duration>, wall: Duration) -> Self {
        lats.sort_unstable();
        let n = lats.len();
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let pct = |p: f64| {
            if n == 0 {
                return 0.0;
            }
            // Nearest-rank percentile.
            let rank = ((p / 100.0) * n as f64).ceil() as usize;
            us(lats[rank.clamp(1, n) - 1])
        };
        let sum: f64 = lats.iter().map(|d| us(*d)).sum();
        let wall_s = wall.as_secs_f64();
        Lat {
            n,
            p50_us: pct(50.0),
            p99_us: pct(99.0),
            mean_us: if n > 0 { sum / n as f64 } else { 0.0 },
            max_us: lats.last().map(|d| us(*d)).unwrap_or(0.0),
            per_s: if wall_s > 0.0 { n as f64 / wall_s } else { 0.0 },
            cpu: None,
        }
    }

    pub fn json(&self) -> Value {
        json!({
            "n": self.n,
            "p50_us": self.p50_us,
            "p99_us": self.p99_us,
            "mean_us": self.mean_us,
            "max_us": self.max_us,
            "per_s": self.per_s,
            "daemon_cpu": self.cpu.as_ref().map(Cpu::json),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let lats: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        let l = Lat::from(lats, Duration::from_secs(1));
        assert_eq!(l.n, 100);
        assert!((l.p50_us - 50.0).abs() < 1e-6);
        assert!((l.p99_us - 99.0).abs() < 1e-6);
        assert!((l.per_s - 100.0).abs() < 1e-6);
    }

    #[test]
    fn empty_is_zero() {
        let l = Lat::from(Vec::new(), Duration::ZERO);
        assert_eq!(l.p50_us, 0.0);
        assert_eq!(l.per_s, 0.0);
    }
}

/// CPU a daemon spent during one phase, from /proc/<pid>/task/*/schedstat (ns resolution).
#[derive(Debug, Clone)]
pub struct Cpu {
    /// Daemon CPU time per operation, µs.
    pub us_per_op: f64,
    /// Daemon CPU time / wall time (1.0 = one core busy).
    pub cores: f64,
    /// The busiest thread's name and its share of the wall time (1.0 = saturated).
    pub busiest: String,
    pub busiest_util: f64,
}

/// Per-thread CPU counters of a process: (tid, name, ns on CPU).
pub type Snapshot = Vec<(u32, String, u64)>;

/// Reads the per-thread CPU counters of `pid` (empty when /proc is unavailable).
pub fn snapshot(pid: u32) -> Snapshot {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let p = e.path();
        let name = std::fs::read_to_string(p.join("comm"))
            .unwrap_or_default()
            .trim()
            .to_string();
        let ns = std::fs::read_to_string(p.join("schedstat"))
            .ok()
            .and_then(|s| {
                s.split_whitespace()
                    .next()
                    .and_then(|x| x.parse::<u64>().ok())
            });
        if let Some(ns) = ns {
            out.push((tid, name, ns));
        }
    }
    out
}

/// Adds the per-thread CPU used between `before` and `after` into `into`.
fn add_deltas(into: &mut Snapshot, before: &Snapshot, after: &Snapshot) {
    for (tid, name, ns) in after {
        let was = before
            .iter()
            .find(|(t, _, _)| t == tid)
            .map(|(_, _, n)| *n)
            .unwrap_or(0);
        let d = ns.saturating_sub(was);
        match into.iter_mut().find(|(t, _, _)| t == tid) {
            Some(e) => e.2 += d,
            None => into.push((*tid, name.clone(), d)),
        }
    }
}

/// Measurements of one kind accumulated over several interleaved chunks.
#[derive(Debug, Default)]
pub struct Acc {
    lats: Vec<Duration>,
    wall: Duration,
    /// Per-thread CPU used during the chunks (deltas).
    threads: Snapshot,
    cpu_measured: bool,
}

impl Acc {
    /// Adds one chunk: its latencies, its wall time and the daemon's CPU snapshots around it.
    pub fn add(
        &mut self,
        lats: Vec<Duration>,
        wall: Duration,
        before: &Snapshot,
        after: &Snapshot,
    ) {
        self.lats.extend(lats);
        self.wall += wall;
        if !after.is_empty() {
            self.cpu_measured = true;
            add_deltas(&mut self.threads, before, after);
        }
    }

    /// The summary so far.
    pub fn peek(&self) -> Lat {
        let mut l = Lat::from(self.lats.clone(), self.wall);
        if self.cpu_measured {
            l.cpu = Cpu::from_deltas(&self.threads, self.wall, l.n);
        }
        l
    }

    /// The summary.
    pub fn finish(self) -> Lat {
        self.peek()
    }
}

impl Cpu {
    /// The CPU used between two snapshots over `wall`, for `ops` operations.
    pub fn between(before: &Snapshot, after: &Snapshot, wall: Duration, ops: usize) -> Option<Cpu> {
        if after.is_empty() {
            return None;
        }
        let mut d = Vec::new();
        add_deltas(&mut d, before, after);
        Cpu::from_deltas(&d, wall, ops)
    }

    /// Summarises per-thread CPU deltas over `wall`, for `ops` operations.
    pub fn from_deltas(deltas: &Snapshot, wall: Duration, ops: usize) -> Option<Cpu> {
        if wall.is_zero() {
            return None;
        }
        let mut total = 0u64;
        let mut busiest = (String::new(), 0u64);
        for (_, name, d) in deltas {
            total += d;
            if *d > busiest.1 {
                busiest = (name.clone(), *d);
            }
        }
        let wall_ns = wall.as_nanos() as f64;
        Some(Cpu {
            us_per_op: if ops > 0 {
                total as f64 / 1e3 / ops as f64
            } else {
                0.0
            },
            cores: total as f64 / wall_ns,
            busiest: busiest.0,
            busiest_util: busiest.1 as f64 / wall_ns,
        })
    }

    pub fn json(&self) -> Value {
        json!({"us_per_op": self.us_per_op, "cores": self.cores, "busiest_thread": self.busiest, "busiest_util": self.busiest_util})
    }
}
