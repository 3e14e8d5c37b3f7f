//! 4. Replay: pre-loading a group, then reading its whole history back over `events_stream`.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::conn::{send_line, text, Res};
use crate::daemon::Daemon;
use crate::stats::{self, Cpu};

/// The outcome of one replay of a group's history.
pub struct Replay {
    /// chat.message events in the group at the time of the replay.
    pub loaded: usize,
    /// Daemon CPU while pre-loading, and while replaying.
    pub preload_cpu: Option<Cpu>,
    pub cpu: Option<Cpu>,
    /// Seconds taken to load them (None when they came from the send benches).
    pub preload_secs: Option<f64>,
    /// Event lines received.
    pub received: usize,
    /// Request sent → last event line received.
    pub secs: f64,
    pub note: String,
    /// Convene: the count matched head_seq (or the limit) and the seqs were contiguous.
    pub valid: bool,
}

impl Replay {
    /// Event lines received per second of replay.
    pub fn per_s(&self) -> f64 {
        if self.secs > 0.0 {
            self.received as f64 / self.secs
        } else {
            0.0
        }
    }
}

/// Loads `total` chat.message events with `clients` connections, each keeping a window of
/// requests in flight (the daemon answers a connection's requests in order).
pub fn preload(d: &Daemon, gid: &str, total: usize, clients: usize) -> Res<()> {
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
pub fn replay_convene(d: &Daemon, gid: &str, limit: Option<usize>) -> Res<Replay> {
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
pub fn replay_cccc(d: &Daemon, gid: &str, since_ts: &str, expected: usize) -> Res<Replay> {
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
