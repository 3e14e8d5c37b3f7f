//! `cowchat` commands other than wait, against a real daemon: send/history, rooms, transports,
//! encryption, LANTERN, votes and elections.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

#[test]
fn send_then_history_by_room_name() {
    let d = Daemon::start();
    let room = create_room(&d, "alice", "general", &["--description", "chat"]);
    assert_eq!(room["name"], "general");
    let sent = send(&d, "alice", "general", "hello world", &[]);
    assert!(sent["seq"].as_u64().unwrap() > 0);
    let reply = send(
        &d,
        "alice",
        "general",
        "second",
        &["--reply-to", sent["message_id"].as_str().unwrap()],
    );
    // By id as well as by name.
    let mut c = d.cow("bob");
    c.args(["history", room["room_id"].as_str().unwrap()]);
    let h = json_lines(&ok(c));
    assert_eq!(contents(&h), vec!["hello world", "second"]);
    assert_eq!(h[0]["agent_id"], "alice");
    assert_eq!(h[1]["reply_to"], sent["message_id"]);
    assert_eq!(h[1]["seq"], reply["seq"]);
    let mut c = d.cow("bob");
    c.args([
        "history",
        "general",
        "--text",
        "--since-seq",
        sent["seq"].to_string().as_str(),
    ]);
    let t = ok(c);
    assert_eq!(t.lines().count(), 1, "{t}");
    assert!(t.contains("alice") && t.contains("second"), "{t}");
    let mut c = d.cow("bob");
    c.args([
        "history",
        "general",
        "--since",
        sent["message_id"].as_str().unwrap(),
    ]);
    assert_eq!(contents(&json_lines(&ok(c))), vec!["second"]);
    // Unknown room: exit 1 with a message.
    let mut c = d.cow("bob");
    c.args(["history", "nope"]);
    let o = run(c);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("nope"));
}

#[test]
fn tcp_transport_and_lantern_round_trip() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    let d = Daemon::start_with(Some(addr.clone()));
    let tcp = format!("tcp {addr}");
    let mut c = d.cow_at(&tcp, "alice");
    c.args(["rooms", "create", "war-room"]);
    ok(c);
    let lantern = |who: &str, args: &[&str]| {
        let mut c = d.cow_at(&tcp, who);
        c.arg("lantern").args(args);
        ok(c)
    };
    lantern(
        "alice",
        &[
            "hello",
            "war-room",
            "--role",
            "reviewer",
            "--capability",
            "code_review=findings",
        ],
    );
    let out = lantern(
        "alice",
        &[
            "assert",
            "war-room",
            "--claim",
            "no rollback gate",
            "--confidence",
            "0.75",
            "--falsifiable-by",
            "a rollback step",
        ],
    );
    let thread: u64 = out
        .trim()
        .strip_prefix("thread id is ")
        .unwrap()
        .parse()
        .unwrap();
    let th = thread.to_string();
    let out = lantern(
        "bob",
        &[
            "challenge",
            "war-room",
            "--thread",
            &th,
            "--counter-claim",
            "it exists",
            "--confidence",
            "0.5",
            "--test",
            "grep",
        ],
    );
    let challenge: u64 = out.trim().rsplit(' ').next().unwrap().parse().unwrap();
    lantern(
        "alice",
        &[
            "resolve",
            "war-room",
            "--thread",
            &th,
            "--observation",
            "no gate",
            "--basis",
            "artifact",
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let delta = dir.path().join("delta.json");
    std::fs::write(&delta, r#"{"plan":{"rollback_gate":true}}"#).unwrap();
    lantern(
        "alice",
        &[
            "fuse",
            "war-room",
            "--thread",
            &th,
            "--synthesis",
            "add a gate",
            "--state-delta",
            delta.to_str().unwrap(),
            "--outcome",
            &format!("{thread}=true"),
            "--outcome",
            &format!("{challenge}=false"),
        ],
    );
    // A rule broken at the command line never reaches the server.
    let mut c = d.cow_at(&tcp, "bob");
    c.args(["lantern", "assert", "war-room", "--claim", "x"]);
    assert_eq!(run(c).status.code(), Some(64));

    let mut c = d.cow("carol");
    c.args(["--json", "lantern", "threads", "war-room"]);
    let rows = json_lines(&ok(c));
    let t = rows.iter().find(|r| r["thread"] == thread).unwrap();
    assert_eq!(t["state"], "fused");
    assert_eq!(t["messages"], 4);
    let state: Value =
        serde_json::from_str(lantern("carol", &["state", "war-room"]).trim()).unwrap();
    assert_eq!(state["state"]["plan"]["rollback_gate"], true);
    let mut c = d.cow("carol");
    c.args(["--json", "lantern", "calibration", "war-room"]);
    let cal = json_lines(&ok(c));
    let alice = cal.iter().find(|r| r["agent_id"] == "alice").unwrap();
    assert!((alice["mean_brier"].as_f64().unwrap() - 0.0625).abs() < 1e-9);
    let bob = cal.iter().find(|r| r["agent_id"] == "bob").unwrap();
    assert!((bob["mean_brier"].as_f64().unwrap() - 0.25).abs() < 1e-9);
    let shown = json_lines(&lantern("carol", &["show", "war-room", &th]));
    assert_eq!(shown.len(), 4);
    assert_eq!(shown[1]["op"], "challenge");
}

#[test]
fn encrypted_room_round_trip() {
    let d = Daemon::start();
    let secret = "correct horse battery staple";
    let mut c = d.cow("alice");
    c.env("COWCHAT_ROOM_KEY", secret)
        .args(["rooms", "create", "vault", "--encrypted"]);
    let room: Value = serde_json::from_str(ok(c).trim()).unwrap();
    assert_eq!(room["encrypted"], true);
    let mut c = d.cow("alice");
    c.args([
        "--room-key",
        secret,
        "send",
        "vault",
        "the eagle lands at dawn",
    ]);
    ok(c);
    // Without a key: the stored blob, and a plaintext send is refused.
    let mut c = d.cow("bob");
    c.args(["history", "vault"]);
    let raw = json_lines(&ok(c));
    let blob = raw[0]["content"].as_str().unwrap().to_string();
    assert!(blob.starts_with("cow1:"), "{blob}");
    assert_eq!(
        convene_chat::crypto::open(secret, room["room_id"].as_str().unwrap(), &blob).unwrap(),
        "the eagle lands at dawn"
    );
    let mut c = d.cow("bob");
    c.args(["send", "vault", "oops plaintext"]);
    assert_eq!(run(c).status.code(), Some(1));
    // With the key: plaintext, in history and in wait.
    let mut c = d.cow("bob");
    c.env("COWCHAT_ROOM_KEY", secret).args(["history", "vault"]);
    assert_eq!(
        contents(&json_lines(&ok(c))),
        vec!["the eagle lands at dawn"]
    );
    let mut c = d.cow("bob");
    c.env("COWCHAT_ROOM_KEY", secret)
        .args(["wait", "vault", "--loop", "--since-seq", "0"]);
    assert_eq!(
        contents(&json_lines(&ok(c))),
        vec!["the eagle lands at dawn"]
    );
    // The wrong key leaves the blob and says so.
    let mut c = d.cow("bob");
    c.env("COWCHAT_ROOM_KEY", "wrong")
        .args(["history", "vault"]);
    let h = json_lines(&ok(c));
    assert!(h[0]["content"].as_str().unwrap().starts_with("cow1:"));
    assert!(h[0]["decrypt_error"].is_string());
}

/// A WebSocket front for the daemon's Unix socket: one text message per NDJSON line, each
/// way. Stands in for `convene serve --cowchat-ws` (not on main yet) so the client's WS
/// transport runs against the real server logic.
#[test]
fn websocket_transport_send_history_and_wait() {
    // The daemon's own `/ws` when this build has it; else a bridge to its Unix socket.
    let (d, url) = if daemon_has_ws() {
        let d = Daemon::start_args(None, &["--cowchat-ws", "127.0.0.1:0"]);
        let url = d.ws_url();
        (d, url)
    } else {
        let d = Daemon::start();
        let url = ws_bridge(d.sock());
        (d, url)
    };
    let mut c = d.cow_at(&url, "alice");
    c.args(["rooms", "create", "wsroom"]);
    ok(c);
    let mut c = d.cow_at(&url, "alice");
    c.args(["send", "wsroom", "over websocket"]);
    ok(c);
    let mut c = d.cow_at(&url, "bob");
    c.args(["history", "wsroom"]);
    assert_eq!(contents(&json_lines(&ok(c))), vec!["over websocket"]);
    // A live push over WS: the waiter blocks at the tip, alice sends on the Unix socket.
    let t = tip(&d, "bob", "wsroom").to_string();
    let mut c = d.cow_at(&url, "bob");
    c.args([
        "wait",
        "wsroom",
        "--loop",
        "--since-seq",
        &t,
        "--idle-timeout",
        "60",
        "--timeout",
        "60",
    ]);
    assert_eq!(
        contents(&woken_by(c, &d, "alice", "wsroom", "pushed")),
        vec!["pushed"]
    );
}

#[test]
fn rooms_agents_status_keygen_and_monitor() {
    let d = Daemon::start();
    let room = create_room(&d, "alice", "hub", &["--description", "the hub"]);
    let rid = room["room_id"].as_str().unwrap().to_string();
    let mut c = d.cow("alice");
    c.args(["rooms", "list"]);
    let out = ok(c);
    assert!(
        out.lines().any(|l| l.contains(&rid) && l.contains("hub")),
        "{out}"
    );
    let mut c = d.cow("alice");
    c.args(["--json", "rooms", "list"]);
    let v: Value = serde_json::from_str(ok(c).trim()).unwrap();
    assert!(v["rooms"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["room_id"] == rid.as_str()));
    let mut c = d.cow("alice");
    c.args(["rooms", "info", "hub"]);
    let out = ok(c);
    assert!(out.contains("member alice (alice)"), "{out}");
    let mut c = d.cow("bob");
    c.args(["agents", "--room", "hub"]);
    assert!(ok(c).contains("alice (alice)"));
    let mut c = d.cow("bob");
    c.args(["--json", "status"]);
    let s: Value = serde_json::from_str(ok(c).trim()).unwrap();
    assert_eq!(s["agent_id"], "bob");
    assert_eq!(s["server"]["protocol_version"], 2);
    let k1 = ok(d.cow("x").tap(|c| {
        c.arg("keygen");
    }));
    let k2 = ok(d.cow("x").tap(|c| {
        c.arg("keygen");
    }));
    assert_eq!(k1.trim().len(), 43);
    assert_ne!(k1, k2);
    // monitor --json prints raw pushed frames; stop it once it has shown the message.
    let mut c = d.cow("bob");
    c.args(["monitor", "--room", "hub", "--json"]);
    let mut m = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(m.stderr.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut err, &mut first).unwrap();
    assert!(first.contains("watching 1 room"), "{first}");
    send(&d, "alice", "hub", "seen by monitor", &[]);
    let mut out = std::io::BufReader::new(m.stdout.take().unwrap());
    let frame = loop {
        let mut line = String::new();
        assert!(std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0);
        let f: Value = serde_json::from_str(&line).unwrap();
        if f["type"] == "message_received" {
            break f;
        }
    };
    let _ = m.kill();
    let _ = m.wait();
    assert_eq!(frame["payload"]["content"], "seen by monitor");
    assert_eq!(frame["payload"]["agent_id"], "alice");
}

#[test]
fn presence_rename_and_destroy() {
    let d = Daemon::start();
    create_room(&d, "alice", "old-name", &[]);
    // Presence is live state: keep alice connected with a waiter while she sets it.
    let mut c = d.cow("alice");
    c.args([
        "wait",
        "old-name",
        "--loop",
        "--since-seq",
        "tip",
        "--idle-timeout",
        "60",
    ]);
    let mut waiter = c
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let alice = |d: &Daemon| {
        let mut c = d.cow("bob");
        c.args(["--json", "agents", "--room", "old-name"]);
        let v: Value = serde_json::from_str(ok(c).trim()).unwrap();
        v["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["agent_id"] == "alice")
            .cloned()
            .unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while alice(&d)["online"] != true {
        assert!(
            Instant::now() < deadline,
            "alice's waiter never came online"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut c = d.cow("alice");
    c.args([
        "presence",
        "working",
        "--detail",
        "reviewing section 3",
        "--progress",
        "57",
    ]);
    ok(c);
    let mut c = d.cow("alice");
    c.args(["presence", "dancing"]);
    assert_eq!(run(c).status.code(), Some(1));
    let a = alice(&d);
    let _ = waiter.kill();
    let _ = waiter.wait();
    assert_eq!(a["status"], "working", "{a}");
    assert_eq!(a["status_detail"], "reviewing section 3");
    assert_eq!(a["progress"], 57);
    let mut c = d.cow("alice");
    c.args(["rooms", "rename", "old-name", "new-name"]);
    let r: Value = serde_json::from_str(ok(c).trim()).unwrap();
    assert_eq!(r["name"], "new-name");
    // Only the creator may destroy; and only with --yes.
    let mut c = d.cow("mallory");
    c.args(["rooms", "destroy", "new-name", "--yes"]);
    let o = run(c);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("access_denied"));
    let mut c = d.cow("alice");
    c.args(["rooms", "destroy", "new-name"]);
    assert_eq!(run(c).status.code(), Some(1));
    let mut c = d.cow("alice");
    c.args(["rooms", "destroy", "new-name", "--yes"]);
    ok(c);
    let mut c = d.cow("alice");
    c.args(["history", "new-name"]);
    assert_eq!(run(c).status.code(), Some(1));
}

#[test]
fn sealed_vote_through_the_cli() {
    let d = Daemon::start();
    create_room(&d, "alice", "ballot", &["--public"]);
    join(&d, "bob", "ballot");
    let mut c = d.cow("alice");
    c.args([
        "vote",
        "create",
        "ballot",
        "Which approach?",
        "--options",
        "A",
        "B",
    ]);
    let v: Value = serde_json::from_str(ok(c).trim()).unwrap();
    let id = v["vote_id"].as_str().unwrap().to_string();
    let mut c = d.cow("alice");
    c.args(["vote", "cast", &id, "0"]);
    let cast: Value = serde_json::from_str(ok(c).trim()).unwrap();
    assert_eq!(cast["votes_cast"], 1);
    let mut c = d.cow("bob");
    c.args(["vote", "cast", &id, "0"]);
    ok(c);
    let mut c = d.cow("bob");
    c.args(["vote", "status", &id]);
    let st: Value = serde_json::from_str(ok(c).trim()).unwrap();
    assert_eq!(st["tally"][0]["count"], 2, "{st}");
    let mut c = d.cow("bob");
    c.args(["vote", "history", "ballot"]);
    assert!(ok(c).contains(&id));
}

#[test]
fn election_and_leader_only_decision() {
    let d = Daemon::start();
    create_room(&d, "alice", "lead", &[]);
    let mut c = d.cow("alice");
    c.args(["election", "start", "lead"]);
    ok(c);
    // Alice is the only candidate: she leads once the 2-second opt-out window closes.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut c = d.cow("alice");
        c.args(["election", "decide", "lead", "we go with A"]);
        if run(c).status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "alice never became leader");
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut c = d.cow("bob");
    c.args(["election", "decide", "lead", "rogue"]);
    let o = run(c);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not_leader"));
    let mut c = d.cow("bob");
    c.args(["history", "lead"]);
    let h = json_lines(&ok(c));
    assert!(h
        .iter()
        .any(|m| m["metadata"]["type"] == "decision" && m["content"] == "we go with A"));
}

/// Runs `cowchat task ARGS` as `who` and parses its one JSON line.
fn task(d: &Daemon, who: &str, args: &[&str]) -> Value {
    let mut c = d.cow(who);
    c.arg("task").args(args);
    serde_json::from_str(ok(c).trim()).unwrap()
}

fn task_ids(list: &Value) -> Vec<&str> {
    list["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["task_id"].as_str().unwrap())
        .collect()
}

#[test]
fn tasks_assign_update_and_list_through_the_cli() {
    let mut d = Daemon::start();
    create_room(&d, "alice", "work", &["--public"]);
    join(&d, "bob", "work");
    let first = task(
        &d,
        "alice",
        &[
            "assign",
            "work",
            "--title",
            "write tests",
            "--description",
            "at the CLI",
            "--assignee",
            "bob",
        ],
    );
    assert_eq!(first["status"], "pending");
    assert_eq!(first["assignee"], "bob");
    assert_eq!(first["title"], "write tests");
    assert_eq!(first["description"], "at the CLI");
    assert_eq!(first["created_by"], "alice");
    let id = first["task_id"].as_str().unwrap().to_string();
    let second = task(&d, "alice", &["assign", "work", "--title", "docs"]);
    assert_eq!(second["assignee"], Value::Null);
    let id2 = second["task_id"].as_str().unwrap().to_string();
    // The assignee moves it along; status, note and assignee come back whole.
    let u = task(
        &d,
        "bob",
        &[
            "update",
            "work",
            &id,
            "--status",
            "in_progress",
            "--note",
            "on it",
        ],
    );
    assert_eq!(u["status"], "in_progress");
    assert_eq!(u["note"], "on it");
    assert_eq!(u["assignee"], "bob");
    assert_eq!(u["updated_by"], "bob");
    let all = task(&d, "bob", &["list", "work"]);
    assert_eq!(task_ids(&all), vec![id.as_str(), id2.as_str()]);
    let busy = task(&d, "bob", &["list", "work", "--status", "in_progress"]);
    assert_eq!(task_ids(&busy), vec![id.as_str()]);
    let waiting = task(&d, "bob", &["list", "work", "--status", "pending"]);
    assert_eq!(task_ids(&waiting), vec![id2.as_str()]);
    let mut c = d.cow("bob");
    c.args(["task", "list", "work", "--text"]);
    let text = ok(c);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(
        lines[0],
        format!("{id} [in_progress] write tests -> bob (on it)")
    );
    assert_eq!(lines[1], format!("{id2} [pending] docs (unassigned)"));
    // Tasks outlive a daemon restart (rebuilt from the ledger).
    d.restart();
    let after = task(&d, "bob", &["list", "work"]);
    assert_eq!(after["tasks"], all["tasks"]);
    let done = task(
        &d,
        "alice",
        &["update", "work", &id2, "--status", "completed"],
    );
    assert_eq!(done["status"], "completed");
}

#[test]
fn task_commands_refuse_bad_input() {
    let d = Daemon::start();
    create_room(&d, "alice", "work", &[]);
    create_room(&d, "alice", "elsewhere", &[]);
    let there = task(&d, "alice", &["assign", "elsewhere", "--title", "theirs"]);
    let there_id = there["task_id"].as_str().unwrap();
    let fails = |args: &[&str]| {
        let mut c = d.cow("alice");
        c.arg("task").args(args);
        let o = run(c);
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    };
    // A status outside the spec's four is a usage error, before any connection.
    let (code, err) = fails(&["update", "work", there_id, "--status", "done"]);
    assert_eq!(code, Some(64), "{err}");
    let (code, err) = fails(&["list", "work", "--status", "open"]);
    assert_eq!(code, Some(64), "{err}");
    // A task of another room is refused and left as it was.
    let (code, err) = fails(&["update", "work", there_id, "--status", "completed"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("task_not_found"), "{err}");
    let list = task(&d, "alice", &["list", "elsewhere"]);
    assert_eq!(list["tasks"][0]["status"], "pending");
    let (code, err) = fails(&["update", "work", "task_nope", "--note", "x"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("task_not_found"), "{err}");
    // The server's own refusals come through with their codes.
    let (code, err) = fails(&["assign", "work", "--title", "t", "--assignee", "stranger"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("not_in_room"), "{err}");
    let (code, err) = fails(&["assign", "work", "--title", ""]);
    assert_eq!(code, Some(1));
    assert!(err.contains("invalid_payload"), "{err}");
    assert!(task(&d, "alice", &["list", "work"])["tasks"]
        .as_array()
        .unwrap()
        .is_empty());
}

/// A local HTTP receiver: answers every request 204 and hands each request (head and body)
/// to the test.
fn webhook_receiver() -> (String, std::sync::mpsc::Receiver<String>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://127.0.0.1:{}/hook", l.local_addr().unwrap().port());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let mut r = BufReader::new(s);
            let (mut head, mut len) = (String::new(), 0usize);
            loop {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
                head.push_str(&line);
            }
            let mut body = vec![0; len];
            let _ = r.read_exact(&mut body);
            let _ = r
                .get_mut()
                .write_all(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
            let _ = tx.send(head + "\r\n" + &String::from_utf8_lossy(&body));
        }
    });
    (url, rx)
}

#[test]
fn sub_create_list_and_delete_through_the_cli() {
    let d = Daemon::start_args(None, &["--cowchat-webhooks-allow-local"]);
    create_room(&d, "alice", "hooks", &[]);
    send(&d, "alice", "hooks", "before the subscription", &[]);
    let (url, got) = webhook_receiver();
    let sub = |args: &[&str]| -> Value {
        let mut c = d.cow("alice");
        c.arg("sub").args(args);
        serde_json::from_str(ok(c).trim()).unwrap()
    };
    let s = sub(&[
        "create",
        "hooks",
        "--url",
        &url,
        "--secret",
        "s3cret",
        "--since-seq",
        "0",
    ]);
    let id = s["subscription_id"].as_str().unwrap().to_string();
    assert_eq!(s["status"], "active", "{s}");
    // The backlog (--since-seq 0) is delivered: a signed Standard Webhooks POST.
    let req = got.recv_timeout(Duration::from_secs(30)).unwrap();
    let lower = req.to_ascii_lowercase();
    assert!(lower.starts_with("post /hook "), "{req}");
    assert!(lower.contains("webhook-signature: v1,"), "{req}");
    assert!(req.contains("before the subscription"), "{req}");
    let listed = sub(&["list", "--room", "hooks"]);
    let ids: Vec<&str> = listed["subscriptions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["subscription_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![id.as_str()]);
    sub(&["delete", &id]);
    assert_eq!(sub(&["list"])["subscriptions"], Value::Array(vec![]));
    // Nothing is delivered after the delete.
    send(&d, "alice", "hooks", "after the delete", &[]);
    assert!(got.recv_timeout(Duration::from_millis(500)).is_err());
}

#[test]
fn a_plain_wait_wakes_on_a_leaders_decision() {
    let d = Daemon::start();
    create_room(&d, "alice", "plain", &[]);
    join(&d, "bob", "plain");
    let mut c = d.cow("alice");
    c.args(["election", "start", "plain"]);
    ok(c);
    // A plain wait (no --since-seq: no catch-up) only sees what is pushed after it started,
    // so decisions are repeated until it has seen one.
    let mut c = d.cow("bob");
    c.args(["wait", "plain", "--timeout", "60"]);
    let mut w = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(45);
    let mut k = 0;
    while w.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the plain wait never woke");
        let mut c = d.cow("alice");
        c.args(["election", "decide", "plain", &format!("decision {k}")]);
        k += usize::from(run(c).status.success());
        std::thread::sleep(Duration::from_millis(200));
    }
    let o = w.wait_with_output().unwrap();
    assert!(o.status.success(), "{o:?}");
    let rows = json_lines(&String::from_utf8_lossy(&o.stdout));
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(rows[0]["content"]
        .as_str()
        .is_some_and(|t| t.starts_with("decision ")));
}
