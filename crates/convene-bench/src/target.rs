//! The daemons under test: one running Convene or CCCC with its send group, its measurements
//! so far, and the per-daemon results once its replay part has run.

use std::path::Path;
use std::time::Instant;

use serde_json::{json, Value};

use crate::conn::{send_line, text, Conn, Res};
use crate::daemon::{Daemon, Kind};
use crate::opts::Opts;
use crate::progress;
use crate::replay::{preload, replay_cccc, replay_convene, Replay};
use crate::stats::{self, Acc, Cpu, Lat};

/// The results of one daemon, ready for the report.
pub struct Suite {
    pub kind: Kind,
    /// The machine's fsync rate (measured interleaved with the sequential phase).
    pub fsync: Lat,
    pub version: String,
    /// `ping` round trips (no ledger work): the IPC floor, new connection / persistent.
    pub ping_new_conn: Lat,
    pub ping_persistent: Lat,
    pub new_conn: Lat,
    pub persistent: Lat,
    pub levels: Vec<(usize, Lat)>,
    pub replay: Replay,
    /// Convene only: replay limited to CCCC's cap, for an equal-size comparison.
    pub replay_capped: Option<Replay>,
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
pub struct Target {
    pub kind: Kind,
    pub d: Daemon,
    pub gid: String,
    pub created_at: String,
    /// chat.message events sent into `gid` so far.
    pub sent: usize,
    /// Persistent connections for the sequential phase (one for ping, one for send).
    pub ping_conn: Conn,
    pub send_conn: Conn,
    pub ping_new_conn: Acc,
    pub ping_persistent: Acc,
    pub new_conn: Acc,
    pub persistent: Acc,
    pub levels: Vec<(usize, Acc)>,
}

impl Target {
    /// Starts the daemon in its own home under `root` and checks that a send works.
    pub fn start(kind: Kind, bin: &Path, root: &Path, t0: Instant) -> Res<Self> {
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
    pub fn sends(&mut self, tag: &str, k: usize) -> Vec<Vec<u8>> {
        let base = self.sent;
        self.sent += k;
        (0..k)
            .map(|i| send_line(&self.gid, &text(tag, base + i)))
            .collect()
    }

    /// Runs the replay part and stops the daemon.
    pub fn finish(mut self, o: &Opts, fsync: &Lat, t0: Instant) -> Res<Suite> {
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
