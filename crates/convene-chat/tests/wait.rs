//! `cowchat wait` (plain, --loop, --drain, --follow) against a real daemon.

mod common;

use std::io::Read as _;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

#[test]
fn wait_loop_drain_returns_backlog_then_a_live_message() {
    let d = Daemon::start();
    create_room(&d, "alice", "work", &[]);
    join(&d, "bob", "work");
    let start = tip(&d, "bob", "work");
    send(&d, "alice", "work", "one", &[]);
    send(&d, "alice", "work", "two", &[]);
    // Backlog after --since-seq: everything unread, in order.
    let mut c = d.cow("bob");
    c.args([
        "wait",
        "work",
        "--loop",
        "--drain",
        "--since-seq",
        &start.to_string(),
    ]);
    let got = json_lines(&ok(c));
    assert_eq!(contents(&got), vec!["one", "two"]);
    // Without --drain: only the first.
    let mut c = d.cow("bob");
    c.args(["wait", "work", "--loop", "--since-seq", &start.to_string()]);
    assert_eq!(contents(&json_lines(&ok(c))), vec!["one"]);
    // Live: the waiter is blocked at the tip when the message is sent (or, if it is slow
    // to start, finds it in its catch-up: both are correct).
    let t = tip(&d, "bob", "work");
    let mut c = d.cow("bob");
    c.args([
        "wait",
        "work",
        "--loop",
        "--drain",
        "--since-seq",
        &t.to_string(),
        "--idle-timeout",
        "60",
        "--timeout",
        "60",
    ]);
    let got = woken_by(c, &d, "alice", "work", "three");
    assert_eq!(contents(&got), vec!["three"]);
    assert_eq!(got[0]["agent_id"], "alice");
}

#[test]
fn idle_timeout_exits_2_with_the_resume_seq_and_plain_timeout_exits_3() {
    let d = Daemon::start();
    create_room(&d, "alice", "quiet", &[]);
    send(&d, "alice", "quiet", "before", &[]);
    let t = tip(&d, "alice", "quiet");
    let mut c = d.cow("bob");
    c.args([
        "wait",
        "quiet",
        "--loop",
        "--since-seq",
        "tip",
        "--idle-timeout",
        "1",
    ]);
    let o = run(c);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(String::from_utf8(o.stdout).unwrap().trim(), t.to_string());
    let mut c = d.cow("bob");
    c.args(["wait", "quiet", "--timeout", "1"]);
    let o = run(c);
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.stdout.is_empty());
    // Usage errors are 64, not 2.
    let mut c = d.cow("bob");
    c.args(["wait", "quiet", "--since-seq", "soon"]);
    assert_eq!(run(c).status.code(), Some(64));
}

#[test]
fn self_and_not_from_filtering() {
    let d = Daemon::start();
    create_room(&d, "alice", "pair", &[]);
    join(&d, "bob", "pair");
    let start = tip(&d, "bob", "pair").to_string();
    send(&d, "bob", "pair", "mine", &[]);
    send(&d, "carol", "pair", "noise", &[]);
    send(&d, "alice", "pair", "theirs", &[]);
    send(&d, "bob", "pair", "mine again", &[]);
    // The connection's own agent id never wakes it; --not-from drops carol.
    let mut c = d.cow("bob");
    c.args([
        "wait",
        "pair",
        "--loop",
        "--drain",
        "--since-seq",
        &start,
        "--not-from",
        "carol",
    ]);
    assert_eq!(contents(&json_lines(&ok(c))), vec!["theirs"]);
    // --only-from carol.
    let mut c = d.cow("bob");
    c.args([
        "wait",
        "pair",
        "--loop",
        "--drain",
        "--since-seq",
        &start,
        "--only-from",
        "carol",
    ]);
    assert_eq!(contents(&json_lines(&ok(c))), vec!["noise"]);
    // Nothing but filtered rows: idle timeout.
    let mut c = d.cow("bob");
    c.args([
        "wait",
        "pair",
        "--loop",
        "--since-seq",
        &start,
        "--not-from",
        "alice",
        "carol",
        "--idle-timeout",
        "1",
    ]);
    assert_eq!(run(c).status.code(), Some(2));
}

#[test]
fn cursor_file_advances_past_filtered_rows_and_resumes() {
    let d = Daemon::start();
    create_room(&d, "alice", "cur", &[]);
    join(&d, "bob", "cur");
    let start = tip(&d, "bob", "cur").to_string();
    send(&d, "alice", "cur", "a1", &[]);
    let last = send(&d, "bob", "cur", "own row", &[]);
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bob.cursor");
    let mut c = d.cow("bob");
    c.args([
        "wait",
        "cur",
        "--loop",
        "--drain",
        "--since-seq",
        &start,
        "--cursor-file",
    ])
    .arg(&f);
    assert_eq!(contents(&json_lines(&ok(c))), vec!["a1"]);
    // The own (filtered) row was processed too: the cursor is past it.
    assert_eq!(read_cursor(&f), last["seq"].as_u64().unwrap());
    let only: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(only.len(), 1, "no temporary files left behind");
    // auto resumes from the file: nothing new → idle, printing that seq.
    let mut c = d.cow("bob");
    c.args([
        "wait",
        "cur",
        "--loop",
        "--since-seq",
        "auto",
        "--idle-timeout",
        "1",
        "--cursor-file",
    ])
    .arg(&f);
    let o = run(c);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        String::from_utf8(o.stdout).unwrap().trim(),
        last["seq"].to_string()
    );
    let next = send(&d, "alice", "cur", "a2", &[]);
    let mut c = d.cow("bob");
    c.args([
        "wait",
        "cur",
        "--loop",
        "--since-seq",
        "auto",
        "--cursor-file",
    ])
    .arg(&f);
    assert_eq!(contents(&json_lines(&ok(c))), vec!["a2"]);
    assert_eq!(read_cursor(&f), next["seq"].as_u64().unwrap());
}

#[test]
fn follow_streams_until_a_peer_ends_the_conversation() {
    let d = Daemon::start();
    create_room(&d, "alice", "talk", &[]);
    join(&d, "bob", "talk");
    let start = tip(&d, "bob", "talk").to_string();
    send(&d, "alice", "talk", "hi", &[]);
    let mut c = d.cow("bob");
    c.args(["wait", "talk", "--follow", "--text", "--since-seq", &start]);
    let mut w = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    send(&d, "alice", "talk", "still here", &[]);
    send(&d, "alice", "talk", "bye", &["--end"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = w.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "follower did not exit on --end");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut out = String::new();
    w.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    assert!(status.success());
    let lines: Vec<_> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].ends_with("alice: hi"));
    assert!(lines[2].ends_with("bye [end]"));
}

#[test]
fn heartbeats_are_answered_so_a_long_wait_keeps_its_connection() {
    // The server pings every 100 ms and drops peers silent for four intervals: a waiter that
    // did not answer would be cut off and print "reconnecting".
    let d = Daemon::start_args(None, &["--heartbeat-ms", "100"]);
    create_room(&d, "alice", "hb", &[]);
    let mut c = d.cow("bob");
    c.args([
        "wait",
        "hb",
        "--loop",
        "--since-seq",
        "tip",
        "--idle-timeout",
        "2",
    ]);
    let o = run(c);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(!err.contains("reconnecting"), "{err}");
}

#[test]
fn follow_survives_a_daemon_restart_and_resumes_from_its_cursor() {
    let mut d = Daemon::start();
    create_room(&d, "alice", "durable", &[]);
    join(&d, "bob", "durable");
    let start = tip(&d, "bob", "durable").to_string();
    send(&d, "alice", "durable", "before restart", &[]);
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("cursor");
    let mut c = d.cow("bob");
    c.args([
        "wait",
        "durable",
        "--follow",
        "--since-seq",
        &start,
        "--cursor-file",
    ])
    .arg(&f);
    let w = follow(c);
    assert!(w.first.contains("before restart"), "{}", w.first);
    d.restart();
    // Sent while the follower may still be reconnecting: it must arrive exactly once.
    send(&d, "alice", "durable", "after restart", &[]);
    send(&d, "alice", "durable", "the end", &["--end"]);
    let (status, rest, err) = w.finish();
    assert!(status.success(), "{err}");
    assert_eq!(
        contents(&json_lines(&rest)),
        vec!["after restart", "the end"],
        "{err}"
    );
    assert!(
        err.contains("reconnecting"),
        "the follower saw the restart: {err}"
    );
    let end = tip(&d, "bob", "durable");
    assert_eq!(read_cursor(&f), end);
}

#[test]
fn thinking_never_wakes_but_shows_on_stderr() {
    let d = Daemon::start();
    create_room(&d, "alice", "minds", &[]);
    join(&d, "bob", "minds");
    let start = tip(&d, "bob", "minds").to_string();
    let mut c = d.cow("bob");
    c.args(["thinking", "minds", "my own pulse"]);
    ok(c);
    let mut c = d.cow("bob");
    c.args([
        "wait",
        "minds",
        "--loop",
        "--show-thinking",
        "--since-seq",
        &start,
        "--idle-timeout",
        "60",
    ]);
    let w = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut c = d.cow("alice");
    c.args(["thinking", "minds", "checking file X"]);
    ok(c);
    send(&d, "alice", "minds", "the answer", &[]);
    let o = w.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    // The pulse (live or caught up) is on stderr exactly once; the wake is the message.
    assert_eq!(
        err.matches("wait: thinking alice: checking file X").count(),
        1,
        "{err}"
    );
    assert!(!err.contains("my own pulse"), "{err}");
    assert_eq!(
        contents(&json_lines(&String::from_utf8(o.stdout).unwrap())),
        vec!["the answer"]
    );
    // In history the pulses are rows with metadata.type = "thinking".
    let mut c = d.cow("bob");
    c.args(["history", "minds"]);
    let h = json_lines(&ok(c));
    assert_eq!(h.len(), 3);
    assert_eq!(h[1]["metadata"]["type"], "thinking");
    // Only pulses since the cursor: idle.
    let mut c = d.cow("bob");
    c.args(["thinking", "minds", "more"]);
    ok(c);
    let t = h[2]["seq"].to_string();
    let mut c = d.cow("bob");
    c.args([
        "wait",
        "minds",
        "--loop",
        "--since-seq",
        &t,
        "--idle-timeout",
        "1",
    ]);
    assert_eq!(run(c).status.code(), Some(2));
}

#[test]
fn follow_delivers_every_message_once_in_order_across_catch_up_and_pushes() {
    let d = Daemon::start();
    create_room(&d, "alice", "stream", &[]);
    join(&d, "bob", "stream");
    let start = tip(&d, "bob", "stream").to_string();
    let mut alice = connect_as(&d, "alice");
    let rid = alice.resolve_room("stream").unwrap()["room_id"].clone();
    let mut say = |text: String, end: bool| {
        let mut p = serde_json::json!({"room_id": rid, "content": text});
        if end {
            p["metadata"] = serde_json::json!({"kind": "end"});
        }
        alice.request("send_message", p).unwrap();
    };
    // A backlog before the follower starts, more while it catches up and blocks.
    for i in 0..100 {
        say(format!("m{i}"), false);
    }
    let mut c = d.cow("bob");
    c.args(["wait", "stream", "--follow", "--since-seq", &start]);
    let w = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    for i in 100..300 {
        say(format!("m{i}"), false);
    }
    say("done".into(), true);
    let o = w.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = json_lines(&String::from_utf8(o.stdout).unwrap());
    let mut want: Vec<String> = (0..300).map(|i| format!("m{i}")).collect();
    want.push("done".into());
    assert_eq!(contents(&got), want);
}

#[test]
fn history_follow_shows_own_messages_sent_from_another_process_in_order() {
    // The server never pushes an agent's own messages to it (Cowchat's rule), so a follower
    // with the same agent id reads them from history when a later seq shows a gap.
    let d = Daemon::start();
    create_room(&d, "alice", "log", &[]);
    join(&d, "bob", "log");
    send(&d, "alice", "log", "first", &[]);
    let mut c = d.cow("bob");
    c.args(["history", "log", "--follow", "--text"]);
    let f = follow(c);
    assert!(f.first.trim_end().ends_with("alice: first"), "{}", f.first);
    send(&d, "bob", "log", "mine", &[]);
    send(&d, "alice", "log", "after", &[]);
    send(&d, "alice", "log", "bye", &["--end"]);
    let mut f = f;
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = f.child.try_wait().unwrap() {
            break s;
        }
        // Well under the client's 30 s re-check: the gap is filled when it shows.
        assert!(Instant::now() < deadline, "follower did not exit on --end");
        std::thread::sleep(Duration::from_millis(50));
    };
    let (_, rest, err) = f.finish();
    assert!(status.success(), "{err}");
    let lines: Vec<_> = rest.lines().collect();
    assert_eq!(lines.len(), 3, "{rest}");
    assert!(lines[0].ends_with("bob: mine"), "{rest}");
    assert!(lines[1].ends_with("alice: after"), "{rest}");
    assert!(lines[2].ends_with("bye [end]"), "{rest}");
}
