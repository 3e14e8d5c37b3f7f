//! `cowchat-floor`: the least a Cowchat server can do for `shared/bench/cowchat_bench.py`, to
//! measure what the benchmark's own Python client costs on this machine.
//!
//! A yardstick, never a product: in memory only (no durability), no auth, no validation
//! beyond what the bench sends. It answers `register`, `create_room`, `join_room`,
//! `send_message`, `get_history`, `room_tip` and `ping` with frames of the shape Convene sends
//! (same fields, same lengths), and pushes `message_received` to a room's other members.
//! Each read is handled whole before anything is written, and every peer gets one write per
//! read: the cheapest delivery a server can make. Whatever time the bench still measures
//! against it is the client's and the kernel's (docs/cowchat.md, "Bench results").
//!
//! Usage: `cowchat-floor 127.0.0.1:PORT` (prints the bound address, then serves until killed).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// A connection's write half, shared with the connections that push to it.
type Peer = Arc<Mutex<TcpStream>>;

/// One room: members in join order, and each message rendered once.
#[derive(Default)]
struct Room {
    members: Vec<u64>,
    messages: Vec<(u64, String)>,
}

/// Everything the floor server remembers.
#[derive(Default)]
struct State {
    rooms: HashMap<String, Room>,
    peers: HashMap<u64, Peer>,
}

/// Shared by every connection thread.
struct Server {
    state: Mutex<State>,
    ids: AtomicU64,
}

impl Server {
    /// The state, even after a connection thread panicked holding it.
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A fresh number for ids.
    fn next(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed) + 1
    }
}

fn main() -> ExitCode {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let listener = match TcpListener::bind(&addr) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("cowchat-floor: bind {addr}: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Ok(a) = listener.local_addr() {
        println!("{a}");
    }
    let server = Arc::new(Server {
        state: Mutex::new(State::default()),
        ids: AtomicU64::new(0),
    });
    for stream in listener.incoming().flatten() {
        let server = server.clone();
        std::thread::spawn(move || {
            // A client that goes away ends its thread; nothing else depends on it.
            let _ = serve(&server, stream);
        });
    }
    ExitCode::SUCCESS
}

/// What one connection says it is.
struct Me {
    conn: u64,
    agent_id: String,
    name: String,
}

/// Reads frames until the peer closes; answers in order, pushes after each read.
fn serve(server: &Server, stream: TcpStream) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let conn = server.next();
    let own: Peer = Arc::new(Mutex::new(stream.try_clone()?));
    server.state().peers.insert(conn, own.clone());
    let mut me = Me {
        conn,
        agent_id: String::new(),
        name: String::new(),
    };
    let mut reader = stream;
    let mut buf = Vec::with_capacity(1 << 16);
    let mut chunk = vec![0u8; 1 << 16];
    let result = loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) => break Ok(()),
            Ok(n) => n,
            Err(e) => break Err(e),
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut out = Vec::new();
        let mut pushes: HashMap<u64, Vec<u8>> = HashMap::new();
        let mut start = 0;
        while let Some(i) = buf[start..].iter().position(|&b| b == b'\n') {
            let line = &buf[start..start + i];
            start += i + 1;
            if let Ok(frame) = serde_json::from_slice::<Value>(line) {
                handle(server, &mut me, &frame, &mut out, &mut pushes);
            }
        }
        buf.drain(..start);
        if !out.is_empty() {
            write_to(&own, &out);
        }
        let peers: Vec<(Peer, Vec<u8>)> = {
            let st = server.state();
            pushes
                .into_iter()
                .filter_map(|(id, bytes)| st.peers.get(&id).map(|p| (p.clone(), bytes)))
                .collect()
        };
        for (peer, bytes) in peers {
            write_to(&peer, &bytes);
        }
    };
    server.state().peers.remove(&conn);
    result
}

/// Writes all of `bytes`; a peer that is gone is simply skipped.
fn write_to(peer: &Peer, bytes: &[u8]) {
    let mut s = peer.lock().unwrap_or_else(PoisonError::into_inner);
    let _ = s.write_all(bytes);
}

/// Answers one frame into `out`, and queues its pushes.
fn handle(
    server: &Server,
    me: &mut Me,
    frame: &Value,
    out: &mut Vec<u8>,
    pushes: &mut HashMap<u64, Vec<u8>>,
) {
    let rid = frame["id"].as_str().unwrap_or("");
    let p = &frame["payload"];
    let room_id = p["room_id"].as_str().unwrap_or("").to_owned();
    let payload = match frame["type"].as_str().unwrap_or("") {
        "register" => {
            me.name = p["name"].as_str().unwrap_or("agent").to_owned();
            me.agent_id = match p["agent_id"].as_str() {
                Some(a) => a.to_owned(),
                None => format!("{}-{:010x}", me.name, server.next()),
            };
            format!(
                "{{\"agent_id\":{},\"name\":{},\"protocol_version\":2}}",
                quote(&me.agent_id),
                quote(&me.name)
            )
        }
        "ping" => return reply(server, out, "pong", rid, "{}"),
        "pong" => return,
        "create_room" => {
            let id = format!("g_{:012x}", server.next());
            server.state().rooms.insert(id.clone(), Room::default());
            let name = p["name"].as_str().unwrap_or("");
            format!("{{\"room_id\":{},\"name\":{}}}", quote(&id), quote(name))
        }
        "join_room" => {
            let mut st = server.state();
            let Some(room) = st.rooms.get_mut(&room_id) else {
                return error(server, out, rid, "room_not_found");
            };
            room.members.push(me.conn);
            format!("{{\"room_id\":{}}}", quote(&room_id))
        }
        "room_tip" => {
            let st = server.state();
            let seq = st
                .rooms
                .get(&room_id)
                .map_or(0, |r| r.messages.len() as u64);
            format!("{{\"room_id\":{},\"seq\":{seq}}}", quote(&room_id))
        }
        "send_message" => {
            let mut st = server.state();
            let Some(room) = st.rooms.get_mut(&room_id) else {
                return error(server, out, rid, "room_not_found");
            };
            let seq = room.messages.len() as u64 + 1;
            let msg = render(
                server,
                me,
                &room_id,
                seq,
                p["content"].as_str().unwrap_or(""),
            );
            for &m in room.members.iter().filter(|&&m| m != me.conn) {
                let line = pushes.entry(m).or_default();
                let _ = writeln!(
                    Bytes(line),
                    "{{\"id\":\"s{}\",\"type\":\"message_received\",\"payload\":{msg}}}",
                    server.next()
                );
            }
            room.messages.push((seq, msg.clone()));
            msg
        }
        "get_history" => {
            let st = server.state();
            let Some(room) = st.rooms.get(&room_id) else {
                return error(server, out, rid, "room_not_found");
            };
            let limit = p["limit"].as_u64().unwrap_or(50) as usize;
            let all = &room.messages;
            let picked = match p["since_seq"].as_u64() {
                Some(s) => {
                    let from = all.partition_point(|(q, _)| *q <= s);
                    &all[from..all.len().min(from + limit)]
                }
                None => &all[all.len().saturating_sub(limit)..],
            };
            let mut s =
                String::with_capacity(picked.iter().map(|m| m.1.len() + 1).sum::<usize>() + 64);
            let _ = write!(s, "{{\"room_id\":{},\"messages\":[", quote(&room_id));
            for (i, (_, m)) in picked.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                s.push_str(m);
            }
            let _ = write!(s, "],\"has_more\":{}}}", picked.len() == limit);
            s
        }
        _ => return error(server, out, rid, "invalid_payload"),
    };
    reply(server, out, "ok", rid, &payload);
}

/// A message object as Convene renders it (same fields, same value lengths).
fn render(server: &Server, me: &Me, room_id: &str, seq: u64, content: &str) -> String {
    format!(
        "{{\"message_id\":\"{:032x}\",\"room_id\":{},\"seq\":{seq},\"agent_id\":{},\"agent_name\":{},\"content\":{},\"timestamp\":\"{}\"}}",
        server.next(),
        quote(room_id),
        quote(&me.agent_id),
        quote(&me.name),
        quote(content),
        timestamp()
    )
}

/// Appends a reply frame.
fn reply(server: &Server, out: &mut Vec<u8>, ty: &str, rid: &str, payload: &str) {
    let _ = writeln!(
        Bytes(out),
        "{{\"id\":\"s{}\",\"type\":\"{ty}\",\"reply_to\":{},\"payload\":{payload}}}",
        server.next(),
        quote(rid)
    );
}

/// Appends an error frame.
fn error(server: &Server, out: &mut Vec<u8>, rid: &str, code: &str) {
    let payload = format!("{{\"code\":\"{code}\",\"message\":\"{code}\"}}");
    reply(server, out, "error", rid, &payload);
}

/// A JSON string literal.
fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// `std::fmt::Write` over a byte buffer.
struct Bytes<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Bytes<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// Now as `YYYY-MM-DDTHH:MM:SS.ffffffZ`, the length of Convene's timestamps.
fn timestamp() -> String {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_micros()
    )
}
