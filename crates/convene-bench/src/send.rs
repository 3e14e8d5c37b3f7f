//! 2. Sequential durable send (and the ping floor), interleaved in rounds.

use std::time::Instant;

use crate::conn::{self, Conn, Res};
use crate::daemon::Daemon;
use crate::fsync::FsyncProbe;
use crate::opts::Opts;
use crate::progress;
use crate::stats::{self, Acc};
use crate::target::Target;

/// Measures ping and send, new connection and persistent, alternating the daemons per round.
pub fn sequential_phase(
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
