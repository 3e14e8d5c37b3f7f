//! 3. Concurrent clients, in halves ordered A B B A.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crate::conn::{send_line, text, Res};
use crate::daemon::Daemon;
use crate::opts::Opts;
use crate::progress;
use crate::stats::{self, Acc};
use crate::target::Target;

/// Measures each concurrency level on every daemon, in halves ordered A B B A.
pub fn concurrency_phase(o: &Opts, targets: &mut [Target], t0: Instant) -> Res<()> {
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
