//! Resuming without losing a message: cursor files that record where a waiter started,
//! `--follow --idle-timeout` counted from the last message, `history --follow` starting
//! exactly after what it printed, and messages a room key cannot open shown as such.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn cursor_file_records_the_start_so_a_resume_misses_nothing() {
    let d = Daemon::start();
    create_room(&d, "alice", "inbox", &[]);
    join(&d, "bob", "inbox");
    send(&d, "alice", "inbox", "old", &[]);
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bob.cursor");
    // Nothing arrives: the waiter exits 2 without having processed a row.
    let mut c = d.cow("bob");
    c.args([
        "wait",
        "inbox",
        "--loop",
        "--idle-timeout",
        "1",
        "--cursor-file",
    ])
    .arg(&f);
    let o = run(c);
    assert_eq!(o.status.code(), Some(2));
    let resume: u64 = String::from_utf8(o.stdout).unwrap().trim().parse().unwrap();
    assert_eq!(read_cursor(&f), resume, "the file holds the resume seq");
    // A message sent between two waits is the next waiter's, resuming from the file.
    send(&d, "alice", "inbox", "sent between waits", &[]);
    let mut c = d.cow("bob");
    c.args(["wait", "inbox", "--loop", "--cursor-file"]).arg(&f);
    assert_eq!(contents(&json_lines(&ok(c))), vec!["sent between waits"]);

    // A follower killed while blocked, before any row: its file says where it started.
    let g = dir.path().join("follow.cursor");
    let mut c = d.cow("bob");
    c.args([
        "wait",
        "inbox",
        "--follow",
        "--since-seq",
        "tip",
        "--cursor-file",
    ])
    .arg(&g);
    let mut w = c
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the follower's cursor file", || g.exists());
    w.kill().unwrap();
    w.wait().unwrap();
    send(
        &d,
        "alice",
        "inbox",
        "sent while the follower was down",
        &[],
    );
    let mut c = d.cow("bob");
    c.args([
        "wait",
        "inbox",
        "--loop",
        "--since-seq",
        "auto",
        "--cursor-file",
    ])
    .arg(&g);
    assert_eq!(
        contents(&json_lines(&ok(c))),
        vec!["sent while the follower was down"]
    );
}

#[test]
fn follow_idle_timeout_counts_from_the_last_matching_message() {
    let d = Daemon::start();
    create_room(&d, "alice", "steady", &[]);
    join(&d, "bob", "steady");
    let mut c = d.cow("bob");
    c.args([
        "wait",
        "steady",
        "--follow",
        "--since-seq",
        "tip",
        "--idle-timeout",
        "4",
    ]);
    let w = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A message every second for longer than the idle limit: the stream must not stop.
    let mut last = 0;
    for i in 0..7 {
        std::thread::sleep(Duration::from_secs(1));
        last = send(&d, "alice", "steady", &format!("tick {i}"), &[])["seq"]
            .as_u64()
            .unwrap();
    }
    let o = w.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let out = String::from_utf8(o.stdout).unwrap();
    let mut lines: Vec<&str> = out.lines().collect();
    // The resume seq comes last, after every message.
    assert_eq!(lines.pop(), Some(last.to_string().as_str()), "{out}");
    let got: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let want: Vec<String> = (0..7).map(|i| format!("tick {i}")).collect();
    assert_eq!(contents(&got), want, "{err}");
}

/// A Unix-socket proxy in front of the daemon that, once a `get_history` answer has gone
/// back to the client, holds the client's next frame until `hook` has run: whatever the
/// hook sends lands exactly between the client's history read and its next request.
fn proxy_with_hook(
    daemon: PathBuf,
    hook: impl Fn() + Send + Sync + 'static,
) -> (tempfile::TempDir, PathBuf, Arc<AtomicBool>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxy.sock");
    let l = UnixListener::bind(&path).unwrap();
    let answered = Arc::new(AtomicBool::new(false));
    let fired = Arc::new(AtomicBool::new(false));
    let hook = Arc::new(hook);
    let fired_out = fired.clone();
    std::thread::spawn(move || {
        for client in l.incoming().flatten() {
            let server = UnixStream::connect(&daemon).unwrap();
            let (answered, fired, hook) = (answered.clone(), fired.clone(), hook.clone());
            let mut to_client = client.try_clone().unwrap();
            let from_server = BufReader::new(server.try_clone().unwrap());
            let a = answered.clone();
            std::thread::spawn(move || {
                for line in from_server.lines() {
                    let Ok(line) = line else { break };
                    // Set before the answer goes out, so the client's next frame sees it.
                    if line.contains("\"messages\":[") {
                        a.store(true, Ordering::SeqCst);
                    }
                    if writeln!(to_client, "{line}").is_err() {
                        break;
                    }
                }
            });
            let mut to_server = server;
            std::thread::spawn(move || {
                for line in BufReader::new(client).lines() {
                    let Ok(line) = line else { break };
                    if answered.load(Ordering::SeqCst) && !fired.swap(true, Ordering::SeqCst) {
                        hook();
                    }
                    if writeln!(to_server, "{line}").is_err() {
                        break;
                    }
                }
            });
        }
    });
    (dir, path, fired_out)
}

#[test]
fn history_follow_shows_a_message_sent_just_after_its_history_read() {
    for since in [None, Some("0")] {
        let d = Daemon::start();
        let room = create_room(&d, "alice", "fresh", &[]);
        let rid = room["room_id"].as_str().unwrap().to_string();
        join(&d, "bob", "fresh");
        let alice = Arc::new(std::sync::Mutex::new(connect_as(&d, "alice")));
        let (a, r) = (alice.clone(), rid.clone());
        let (_dir, proxy, fired) = proxy_with_hook(d.sock(), move || {
            let p = json!({"room_id": r, "content": "just after the read"});
            a.lock().unwrap().request("send_message", p).unwrap();
        });
        let mut c = d.cow_at(&format!("unix:{}", proxy.display()), "bob");
        c.args(["history", "fresh", "--follow"]);
        if let Some(s) = since {
            c.args(["--since-seq", s]);
        }
        let w = c
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_until("the proxy's hook", || fired.load(Ordering::SeqCst));
        let p = json!({"room_id": rid, "content": "bye", "metadata": {"kind": "end"}});
        alice.lock().unwrap().request("send_message", p).unwrap();
        let o = w.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        let got = json_lines(&String::from_utf8(o.stdout).unwrap());
        assert_eq!(
            contents(&got),
            vec!["just after the read", "bye"],
            "since {since:?}: {err}"
        );
    }
}

/// A `clw1:` blob (the older prefix, HKDF info "clawchat-e2e-v1:"), sealed by hand.
fn seal_legacy(secret: &str, room_id: &str, text: &str) -> String {
    use base64::Engine as _;
    use chacha20poly1305::aead::{Aead, KeyInit};
    let hk = hkdf::Hkdf::<sha2::Sha256>::new(None, secret.as_bytes());
    let mut key = [0u8; 32];
    hk.expand(format!("clawchat-e2e-v1:{room_id}").as_bytes(), &mut key)
        .unwrap();
    let nonce = [7u8; 12];
    let ct = chacha20poly1305::ChaCha20Poly1305::new(&chacha20poly1305::Key::from(key))
        .encrypt(chacha20poly1305::Nonce::from_slice(&nonce), text.as_bytes())
        .unwrap();
    let mut blob = nonce.to_vec();
    blob.extend_from_slice(&ct);
    format!(
        "clw1:{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(blob)
    )
}

#[test]
fn wait_shows_messages_its_key_cannot_open_in_order_and_keeps_waiting() {
    let d = Daemon::start();
    let secret = "correct horse battery staple";
    let mut c = d.cow("alice");
    c.args([
        "--room-key",
        secret,
        "rooms",
        "create",
        "vault",
        "--encrypted",
    ]);
    let room: Value = serde_json::from_str(ok(c).trim()).unwrap();
    let rid = room["room_id"].as_str().unwrap().to_string();
    join(&d, "bob", "vault");
    let start = tip(&d, "bob", "vault").to_string();
    let mut alice = connect_as(&d, "alice");
    let seal = |k: &str, r: &str, t: &str| convene_chat::crypto::seal(k, r, t).unwrap();
    for content in [
        seal(secret, &rid, "one"),
        seal(secret, "another-room", "foreign blob"), // replayed from another room
        seal_legacy(secret, &rid, "legacy"),
        seal("not our secret", &rid, "wrong key"),
        seal(secret, &rid, "two"),
    ] {
        alice
            .request("send_message", json!({"room_id": rid, "content": content}))
            .unwrap();
    }
    let mut c = d.cow("bob");
    c.args(["--room-key", secret, "wait", "vault", "--loop", "--drain"])
        .args(["--since-seq", &start]);
    let got = json_lines(&ok(c));
    assert_eq!(got.len(), 5, "{got:?}");
    let seqs: Vec<u64> = got.iter().map(|m| m["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert_eq!(got[0]["content"], "one");
    assert_eq!(got[2]["content"], "legacy");
    assert_eq!(got[4]["content"], "two");
    for bad in [&got[1], &got[3]] {
        assert!(
            bad["content"].as_str().unwrap().starts_with("cow1:"),
            "{bad}"
        );
        assert!(bad["decrypt_error"].is_string(), "{bad}");
        assert!(bad.get("encrypted").is_none(), "{bad}");
    }
    // The human form says which ones could not be opened.
    let mut c = d.cow("bob");
    c.args([
        "--room-key",
        secret,
        "wait",
        "vault",
        "--loop",
        "--drain",
        "--text",
    ])
    .args(["--since-seq", &start]);
    let out = ok(c);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5, "{out}");
    assert!(lines[0].ends_with("alice: one"), "{out}");
    for i in [1, 3] {
        assert!(
            lines[i].contains(": cow1:") && lines[i].contains("[undecryptable: "),
            "{out}"
        );
    }
    assert!(lines[2].ends_with("alice: legacy"), "{out}");
    assert!(!lines[4].contains("undecryptable"), "{out}");
}

#[test]
fn ws_catch_up_too_big_for_one_frame_still_delivers_every_message() {
    let d = Daemon::start_args(None, &["--cowchat-ws", "127.0.0.1:0"]);
    let room = create_room(&d, "alice", "diffs", &[]);
    join(&d, "bob", "diffs");
    let start = tip(&d, "bob", "diffs").to_string();
    let mut alice = connect_as(&d, "alice");
    // 900 messages of 20 KB: one 1000-row history page is 18 MB, more than the WebSocket
    // layer takes in one message (16 MiB).
    let body = "d".repeat(20_000);
    for i in 0..900 {
        let p = json!({"room_id": room["room_id"], "content": format!("{i} {body}")});
        alice.request("send_message", p).unwrap();
    }
    let mut c = d.cow_at(&d.ws_url(), "bob");
    // The idle limit only bounds a failure (a waiter stuck reconnecting exits 2).
    c.args(["wait", "diffs", "--loop", "--drain", "--since-seq", &start])
        .args(["--idle-timeout", "60"]);
    let o = c.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let got = json_lines(&String::from_utf8(o.stdout).unwrap());
    let firsts: Vec<&str> = got
        .iter()
        .map(|m| m["content"].as_str().unwrap().split(' ').next().unwrap())
        .collect();
    let want: Vec<String> = (0..900).map(|i| i.to_string()).collect();
    assert_eq!(firsts, want, "{err}");
}

#[test]
fn history_follow_survives_a_daemon_restart_with_own_and_peer_messages_once_in_order() {
    let mut d = Daemon::start();
    create_room(&d, "alice", "log", &[]);
    join(&d, "bob", "log");
    send(&d, "alice", "log", "before", &[]);
    let mut c = d.cow("bob");
    c.args(["history", "log", "--follow", "--text"]);
    let f = follow(c);
    assert!(f.first.trim_end().ends_with("alice: before"), "{}", f.first);
    d.restart();
    // Right after the restart, maybe before the follower is back: each line once, in order.
    send(&d, "bob", "log", "mine, from another process", &[]);
    send(&d, "alice", "log", "after the restart", &[]);
    send(&d, "alice", "log", "bye", &["--end"]);
    let (status, rest, err) = f.finish();
    assert!(status.success(), "{err}");
    let lines: Vec<&str> = rest.lines().collect();
    assert_eq!(lines.len(), 3, "{rest}\n{err}");
    assert!(
        lines[0].ends_with("bob: mine, from another process"),
        "{rest}"
    );
    assert!(lines[1].ends_with("alice: after the restart"), "{rest}");
    assert!(lines[2].ends_with("alice: bye [end]"), "{rest}");
    assert!(
        err.contains("reconnecting"),
        "the follower saw the restart: {err}"
    );
}

/// A Unix-socket proxy in front of the daemon that can be cut: open connections are shut
/// down and new ones closed at once until it is up again.
struct CutProxy {
    _dir: tempfile::TempDir,
    path: PathBuf,
    up: Arc<AtomicBool>,
    conns: Arc<std::sync::Mutex<Vec<UnixStream>>>,
}

impl CutProxy {
    fn start(daemon: PathBuf) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cut.sock");
        let l = UnixListener::bind(&path).unwrap();
        let up = Arc::new(AtomicBool::new(true));
        let conns = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (u, cs) = (up.clone(), conns.clone());
        std::thread::spawn(move || {
            for client in l.incoming().flatten() {
                if !u.load(Ordering::SeqCst) {
                    continue; // dropped: closed
                }
                let server = UnixStream::connect(&daemon).unwrap();
                let mut v = cs.lock().unwrap();
                v.push(client.try_clone().unwrap());
                v.push(server.try_clone().unwrap());
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Self {
            _dir: dir,
            path,
            up,
            conns,
        }
    }

    fn url(&self) -> String {
        format!("unix:{}", self.path.display())
    }

    fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
        if !up {
            for s in self.conns.lock().unwrap().drain(..) {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

#[test]
fn follower_stops_when_its_room_was_replaced_while_it_was_cut_off() {
    let d = Daemon::start();
    create_room(&d, "alice", "ops", &[]);
    join(&d, "bob", "ops");
    for i in 0..6 {
        send(&d, "alice", "ops", &format!("old {i}"), &[]);
    }
    let proxy = CutProxy::start(d.sock());
    let mut c = d.cow_at(&proxy.url(), "bob");
    c.args(["wait", "ops", "--follow", "--text", "--since-seq", "0"]);
    let mut f = follow(c);
    let mut line = f.first.clone();
    while !line.contains("old 5") {
        line.clear();
        f.out.read_line(&mut line).unwrap();
    }
    // While the follower is cut off, "ops" is destroyed and a new room takes its name: its
    // seqs start again from 1, below the follower's cursor.
    proxy.set_up(false);
    let mut c = d.cow("alice");
    c.args(["rooms", "destroy", "ops", "--yes"]);
    ok(c);
    create_room(&d, "alice", "ops", &[]);
    send(&d, "alice", "ops", "first in the new room", &[]);
    proxy.set_up(true);
    // Following another room from the old one's cursor would skip its first messages: the
    // follower says its room is gone instead.
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = f.child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = f.child.kill();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (_, rest, err) = f.finish();
    assert_eq!(status.code(), Some(1), "{rest}\n{err}");
    assert!(rest.is_empty(), "{rest}");
    assert!(err.contains("no room named or with id"), "{err}");
}

#[test]
fn a_start_past_the_rooms_newest_row_waits_from_the_newest_row_and_says_so() {
    let d = Daemon::start();
    create_room(&d, "alice", "fresh", &[]);
    join(&d, "bob", "fresh");
    send(&d, "alice", "fresh", "old", &[]);
    // A cursor left over from another room of that name, far ahead of this one.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bob.cursor");
    std::fs::write(&f, "5000\n").unwrap();
    let mut c = d.cow("bob");
    c.args(["wait", "fresh", "--loop", "--cursor-file"]).arg(&f);
    let w = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the waiter's clamped cursor", || read_cursor(&f) < 5000);
    send(&d, "alice", "fresh", "new", &[]);
    let o = w.wait_with_output().unwrap();
    assert!(o.status.success(), "{o:?}");
    assert_eq!(
        contents(&json_lines(&String::from_utf8_lossy(&o.stdout))),
        vec!["new"]
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("past the newest row"), "{err}");
}

#[test]
fn history_follow_shows_an_own_message_from_another_process_with_no_traffic_after_it() {
    let d = Daemon::start();
    create_room(&d, "alice", "quiet", &[]);
    join(&d, "bob", "quiet");
    send(&d, "alice", "quiet", "hello", &[]);
    let mut c = d.cow("bob");
    c.args(["history", "quiet", "--follow", "--text"]);
    let Follower {
        mut child,
        mut out,
        first,
    } = follow(c);
    assert!(first.trim_end().ends_with("alice: hello"), "{first}");
    // The server pushes a message to everyone but its sender, so nothing wakes the follower:
    // it must still show bob's own line, long before its 30 s catch-all re-check.
    send(&d, "bob", "quiet", "mine", &[]);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = out.read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(10));
    let _ = child.kill();
    let _ = child.wait();
    let line = line.expect("own message not shown within 10 s");
    assert!(line.trim_end().ends_with("bob: mine"), "{line}");
}
