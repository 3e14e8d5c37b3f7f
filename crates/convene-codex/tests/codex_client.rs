//! The Codex app-server client against real child processes: the fake app-server
//! (`tests/fixtures/fake_codex_app_server.py`) and a few tiny inline servers for misbehaviour.

mod common;

use std::time::Duration;

use common::*;
use convene_codex::{CodexAgent, CodexError, TurnEnd, Update};
use serde_json::json;

/// A minimal app-server header for inline scripts: answers initialize, ignores
/// `initialized`, calls `on(msg)` otherwise.
const INLINE_PRELUDE: &str = r#"
import json, sys
def send(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
def serve(on):
    for line in sys.stdin:
        m = json.loads(line)
        if m.get("method") == "initialize":
            send({"id": m["id"], "result": {"userAgent": "inline"}})
        elif m.get("method") != "initialized":
            on(m)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_streams_ordered_deltas_and_speaks_the_codex_handshake() {
    let fx = Fixture::new();
    let agent = CodexAgent::spawn(&fx.fake(&[])).await.expect("spawn");
    assert!(agent.is_alive());
    assert_eq!(agent.info()["platformOs"], "linux");
    let tid = agent.start_thread(fx.cwd()).await.expect("thread");
    assert_eq!(tid, "thr_1");
    let run = agent
        .start_turn(&tid, "#think\nfirst line\n\nhello there\n")
        .await
        .expect("turn started");
    assert!(run.turn_id.starts_with("turn_"), "{}", run.turn_id);
    let (updates, done) = collect(run).await;
    assert_eq!(done, Ok(TurnEnd::Completed));
    let modelled = modelled(&updates);
    assert_eq!(
        modelled[..2],
        [
            Update::ThoughtChunk("thinking about it".into()),
            Update::ThoughtChunk(" some more".into())
        ]
    );
    assert_eq!(message_text(&updates), "echo: hello there");
    assert!(chunk_count(&updates) >= 2, "{updates:?}");
    assert!(updates.contains(&Update::Other {
        kind: "turn/started".into()
    }));

    let log = fx.received();
    assert_eq!(log[0]["method"], "initialize");
    assert_eq!(log[0]["params"]["clientInfo"]["name"], "convene");
    assert!(log[0]["params"]["clientInfo"]["title"].is_string());
    assert!(log[0]["params"]["clientInfo"]["version"].is_string());
    assert!(log.iter().all(|m| m.get("jsonrpc").is_none()), "{log:?}");
    assert_eq!(log[1]["method"], "initialized");
    assert!(log[1].get("id").is_none());
    assert_eq!(log[2]["method"], "thread/start");
    assert_eq!(
        log[2]["params"],
        json!({"cwd": fx.cwd().to_string_lossy(), "approvalPolicy": "never", "sandbox": "danger-full-access"})
    );
    assert_eq!(log[3]["method"], "turn/start");
    assert_eq!(
        log[3]["params"],
        json!({"threadId": tid, "input": [{"type": "text", "text": "#think\nfirst line\n\nhello there\n"}]})
    );
    agent.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn jsonrpc_member_on_the_wire_is_accepted() {
    let fx = Fixture::new();
    let agent = CodexAgent::spawn(&fx.fake(&[("FAKE_CODEX_JSONRPC", "1")]))
        .await
        .expect("spawn");
    let tid = agent.start_thread(fx.cwd()).await.expect("thread");
    let (updates, done) = collect(agent.start_turn(&tid, "hi").await.expect("turn")).await;
    assert_eq!(done, Ok(TurnEnd::Completed));
    assert_eq!(message_text(&updates), "echo: hi");
}

#[tokio::test]
async fn command_items_map_to_tool_calls_before_the_reply() {
    let fx = Fixture::new();
    let agent = CodexAgent::spawn(&fx.fake(&[])).await.expect("spawn");
    let tid = agent.start_thread(fx.cwd()).await.expect("thread");
    let (updates, done) = collect(agent.start_turn(&tid, "look\n#tool").await.expect("turn")).await;
    assert_eq!(done, Ok(TurnEnd::Completed));
    let modelled = modelled(&updates);
    let Update::ToolCall { id, .. } = &modelled[0] else {
        panic!("expected a tool call first: {updates:?}");
    };
    assert_eq!(
        modelled[..2],
        [
            Update::ToolCall {
                id: id.clone(),
                title: "/bin/bash -lc 'cat /tmp/x'".into(),
                kind: Some("commandExecution".into()),
                status: Some("inProgress".into()),
            },
            Update::ToolCallUpdate {
                id: id.clone(),
                title: None,
                status: Some("completed".into()),
            },
        ]
    );
    assert!(updates.contains(&Update::Other {
        kind: "item/commandExecution/outputDelta".into()
    }));
    assert_eq!(message_text(&updates), "echo: look");
    let (updates, _) = collect(
        agent
            .start_turn(&tid, "#reply exactly this")
            .await
            .expect("turn"),
    )
    .await;
    assert_eq!(message_text(&updates), "exactly this");
}

#[tokio::test]
async fn resume_known_and_unknown_threads() {
    let fx = Fixture::new();
    let agent = CodexAgent::spawn(&fx.fake(&[])).await.expect("spawn");
    let tid = agent.start_thread(fx.cwd()).await.expect("thread");
    let (_, done) = collect(agent.start_turn(&tid, "remember me").await.expect("turn")).await;
    assert_eq!(done, Ok(TurnEnd::Completed));
    agent.resume_thread(&tid).await.expect("resume");
    let (updates, done) = collect(agent.start_turn(&tid, "again").await.expect("turn")).await;
    assert_eq!(done, Ok(TurnEnd::Completed));
    assert_eq!(message_text(&updates), "echo: again");
    let err = agent
        .resume_thread("thr_404")
        .await
        .expect_err("unknown thread");
    assert!(
        matches!(err, CodexError::Rpc { code: -32600, .. }),
        "{err:?}"
    );
    let resume = fx
        .received()
        .into_iter()
        .find(|m| m["method"] == "thread/resume")
        .expect("resume logged");
    assert_eq!(
        resume["params"],
        json!({"threadId": tid, "approvalPolicy": "never", "sandbox": "danger-full-access", "excludeTurns": true})
    );
}

#[tokio::test]
async fn interrupt_during_slow_turn_ends_interrupted_with_fewer_chunks() {
    let fx = Fixture::new();
    let agent = CodexAgent::spawn(&fx.fake(&[])).await.expect("spawn");
    let tid = agent.start_thread(fx.cwd()).await.expect("thread");
    let mut run = agent.start_turn(&tid, "#slow 50").await.expect("turn");
    loop {
        match run.updates.recv().await.expect("first chunk") {
            Update::Other { .. } => continue,
            first => {
                assert_eq!(first, Update::MessageChunk("part0 ".into()));
                break;
            }
        }
    }
    agent
        .interrupt(&tid, &run.turn_id)
        .await
        .expect("interrupt");
    let turn_id = run.turn_id.clone();
    let (rest, done) = collect(run).await;
    assert_eq!(done, Ok(TurnEnd::Interrupted));
    assert!(chunk_count(&rest) + 1 < 50, "{rest:?}");
    assert!(fx.received().iter().any(|m| m["method"] == "turn/interrupt"
        && m["params"] == json!({"threadId": tid, "turnId": turn_id})));
    // The thread takes turns again after an interrupted one.
    let (_, done) = collect(agent.start_turn(&tid, "next").await.expect("turn")).await;
    assert_eq!(done, Ok(TurnEnd::Completed));
}

#[tokio::test]
async fn hanging_turn_keeps_the_thread_busy_until_interrupted() {
    let fx = Fixture::new();
    let agent = CodexAgent::spawn(&fx.fake(&[])).await.expect("spawn");
    let tid = agent.start_thread(fx.cwd()).await.expect("thread");
    let run = agent.start_turn(&tid, "#hang").await.expect("turn");
    let err = agent.start_turn(&tid, "second").await.expect_err("busy");
    assert_eq!(err, CodexError::TurnBusy(tid.clone()));
    // Refused before the wire: codex would steer the text into the running turn.
    let starts = fx
        .received()
        .iter()
        .filter(|m| m["method"] == "turn/start")
        .count();
    assert_eq!(starts, 1);
    let err = agent
        .interrupt(&tid, "turn_404")
        .await
        .expect_err("not the running turn");
    assert!(matches!(err, CodexError::Rpc { .. }), "{err:?}");
    agent
        .interrupt(&tid, &run.turn_id)
        .await
        .expect("interrupt");
    let (updates, done) = collect(run).await;
    assert_eq!(done, Ok(TurnEnd::Interrupted));
    assert_eq!(message_text(&updates), "");
}

#[tokio::test]
async fn interrupt_right_after_start_waits_for_the_turn_to_run() {
    let fx = Fixture::new();
    let agent = CodexAgent::spawn(&fx.fake(&[("FAKE_CODEX_START_DELAY_MS", "300")]))
        .await
        .expect("spawn");
    let tid = agent.start_thread(fx.cwd()).await.expect("thread");
    let run = agent.start_turn(&tid, "#hang").await.expect("turn");
    // Sent at once, codex would answer "no active turn to interrupt".
    agent
        .interrupt(&tid, &run.turn_id)
        .await
        .expect("interrupt");
    let (updates, done) = collect(run).await;
    assert_eq!(done, Ok(TurnEnd::Interrupted));
    assert_eq!(
        updates.first(),
        Some(&Update::Other {
            kind: "turn/started".into()
        })
    );
    // A turn that already ended needs no interrupt; the server says so.
    let run = agent.start_turn(&tid, "quick").await.expect("turn");
    let turn_id = run.turn_id.clone();
    assert_eq!(collect(run).await.1, Ok(TurnEnd::Completed));
    let err = agent.interrupt(&tid, &turn_id).await.expect_err("ended");
    assert!(
        matches!(err, CodexError::Rpc { code: -32600, .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn approval_request_is_cancelled_interrupted_and_reported() {
    let fx = Fixture::new();
    let agent = CodexAgent::spawn(&fx.fake(&[])).await.expect("spawn");
    let tid = agent.start_thread(fx.cwd()).await.expect("thread");
    let run = agent.start_turn(&tid, "#permission").await.expect("turn");
    let turn_id = run.turn_id.clone();
    let (updates, done) = collect(run).await;
    assert_eq!(done, Ok(TurnEnd::Interrupted));
    let modelled = modelled(&updates);
    assert!(
        matches!(&modelled[..], [
            Update::ToolCall { kind: Some(k), .. },
            Update::UnexpectedInteraction { method },
            Update::ToolCallUpdate { status: Some(s), .. },
        ] if k == "commandExecution" && method == "item/commandExecution/requestApproval" && s == "declined"),
        "{updates:?}"
    );
    let log = fx.received_until(|m| m["method"] == "turn/interrupt").await;
    let answer = log
        .iter()
        .position(|m| m["method"].is_null())
        .expect("approval answered");
    assert_eq!(log[answer]["result"], json!({"decision": "cancel"}));
    let interrupt = log
        .iter()
        .position(|m| m["method"] == "turn/interrupt")
        .expect("turn interrupted");
    assert!(answer < interrupt, "answer first, then interrupt: {log:?}");
    assert_eq!(
        log[interrupt]["params"],
        json!({"threadId": tid, "turnId": turn_id})
    );
    assert!(agent.is_alive());
    // The thread takes turns again.
    let (_, done) = collect(agent.start_turn(&tid, "next").await.expect("turn")).await;
    assert_eq!(done, Ok(TurnEnd::Completed));
}

#[tokio::test]
async fn user_input_request_gets_an_error_and_the_turn_is_interrupted() {
    let fx = Fixture::new();
    let agent = CodexAgent::spawn(&fx.fake(&[])).await.expect("spawn");
    let tid = agent.start_thread(fx.cwd()).await.expect("thread");
    let (updates, done) = collect(agent.start_turn(&tid, "#input").await.expect("turn")).await;
    assert_eq!(done, Ok(TurnEnd::Interrupted));
    assert!(
        updates.contains(&Update::UnexpectedInteraction {
            method: "item/tool/requestUserInput".into()
        }),
        "{updates:?}"
    );
    let log = fx.received();
    let answer = log
        .iter()
        .find(|m| m["method"].is_null())
        .expect("request answered");
    assert_eq!(answer["error"]["code"], -32000);
    assert!(answer.get("result").is_none());
}

#[tokio::test]
async fn failed_turn_carries_the_error_message() {
    let fx = Fixture::new();
    let agent = CodexAgent::spawn(&fx.fake(&[])).await.expect("spawn");
    let tid = agent.start_thread(fx.cwd()).await.expect("thread");
    let (updates, done) = collect(agent.start_turn(&tid, "#fail").await.expect("turn")).await;
    assert_eq!(
        done,
        Ok(TurnEnd::Failed(
            "fake upstream failure: usage limit reached".into()
        ))
    );
    assert!(updates.contains(&Update::Other {
        kind: "error".into()
    }));
    assert!(agent.is_alive());
    // Without turn.error the last final `error` notification names the failure, not the
    // "Reconnecting..." one before it.
    let (_, done) = collect(agent.start_turn(&tid, "#fail quiet").await.expect("turn")).await;
    assert_eq!(
        done,
        Ok(TurnEnd::Failed(
            "fake upstream failure: usage limit reached".into()
        ))
    );
}

#[tokio::test]
async fn crash_mid_turn_is_exited_with_code_and_stderr() {
    let fx = Fixture::new();
    let agent = CodexAgent::spawn(&fx.fake(&[])).await.expect("spawn");
    let tid = agent.start_thread(fx.cwd()).await.expect("thread");
    let (updates, done) = collect(agent.start_turn(&tid, "#crash").await.expect("turn")).await;
    assert_eq!(message_text(&updates), "about to crash");
    match done {
        Err(CodexError::Exited { code, stderr_tail }) => {
            assert_eq!(code, Some(3));
            assert!(stderr_tail.contains("crashing on purpose"), "{stderr_tail}");
        }
        other => panic!("expected Exited, got {other:?}"),
    }
    assert!(!agent.is_alive());
    let err = agent.start_thread(fx.cwd()).await.expect_err("dead server");
    assert!(
        matches!(err, CodexError::Exited { code: Some(3), .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn non_json_line_is_a_protocol_error_and_ends_the_connection() {
    let fx = Fixture::new();
    let agent = CodexAgent::spawn(&fx.fake(&[])).await.expect("spawn");
    let tid = agent.start_thread(fx.cwd()).await.expect("thread");
    let run = agent.start_turn(&tid, "#garbage").await.expect("turn");
    let turn_id = run.turn_id.clone();
    let (_, done) = collect(run).await;
    assert!(matches!(done, Err(CodexError::Protocol(_))), "{done:?}");
    assert!(!agent.is_alive());
    assert!(matches!(
        agent.interrupt(&tid, &turn_id).await,
        Err(CodexError::Protocol(_))
    ));
}

#[test]
fn agent_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<CodexAgent>();
    check::<CodexError>();
}

#[tokio::test]
async fn server_exiting_before_initialize_is_exited_with_stderr() {
    let fx = Fixture::new();
    let cfg = fx.inline(
        "import sys\nsys.stderr.write('error: unrecognized subcommand app-server\\n')\nsys.exit(2)",
        &[],
        Duration::from_secs(20),
    );
    let err = CodexAgent::spawn(&cfg).await.err().expect("exits");
    match err {
        CodexError::Exited { code, stderr_tail } => {
            assert_eq!(code, Some(2));
            assert_eq!(stderr_tail, "error: unrecognized subcommand app-server\n");
        }
        other => panic!("expected Exited, got {other:?}"),
    }
}

#[tokio::test]
async fn initialize_error_is_rpc() {
    let fx = Fixture::new();
    let err = CodexAgent::spawn(&fx.fake(&[("FAKE_CODEX_FAIL_INIT", "1")]))
        .await
        .err()
        .expect("initialize fails");
    assert!(
        matches!(err, CodexError::Rpc { code: -32000, .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn missing_program_is_spawn_error() {
    let fx = Fixture::new();
    let mut cfg = fx.fake(&[]);
    cfg.command = vec!["/nonexistent/codex".into()];
    let err = CodexAgent::spawn(&cfg)
        .await
        .err()
        .expect("no such program");
    assert!(matches!(err, CodexError::Spawn(_)), "{err:?}");
}

#[tokio::test]
async fn silent_server_times_out_initialize() {
    let fx = Fixture::new();
    let cfg = fx.inline(
        "import sys\nfor _ in sys.stdin: pass",
        &[],
        Duration::from_millis(500),
    );
    let err = CodexAgent::spawn(&cfg).await.err().expect("no answer");
    assert_eq!(err, CodexError::Timeout("initialize"));
}

#[tokio::test]
async fn unanswered_request_times_out_and_the_connection_stays_up() {
    let fx = Fixture::new();
    // thread/start is never answered; turn/start on any thread is.
    let script = format!(
        "{INLINE_PRELUDE}\n{}",
        r#"
def on(m):
    if m.get("method") == "turn/start":
        send({"id": m["id"], "result": {"turn": {"id": "u1", "status": "inProgress", "items": [], "error": None}}})
        send({"method": "turn/completed", "params": {"threadId": m["params"]["threadId"], "turn": {"id": "u1", "status": "completed", "items": [], "error": None}}})
serve(on)
"#
    );
    let agent = CodexAgent::spawn(&fx.inline(&script, &[], Duration::from_secs(3)))
        .await
        .expect("spawn");
    let err = agent.start_thread(fx.cwd()).await.expect_err("no answer");
    assert_eq!(err, CodexError::Timeout("thread/start"));
    assert!(agent.is_alive());
    let (_, done) = collect(agent.start_turn("t", "hi").await.expect("turn")).await;
    assert_eq!(done, Ok(TurnEnd::Completed));
}

#[tokio::test]
async fn shutdown_kills_a_server_that_ignores_stdin_close_and_its_helpers() {
    let fx = Fixture::new();
    let pid_file = fx.dir.path().join("helper.pid");
    let script = r#"
import json, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
helper = subprocess.Popen(["sleep", "1000"])
open(sys.argv[1], "w").write(str(helper.pid))
for line in sys.stdin:
    m = json.loads(line)
    if m.get("method") == "initialize":
        print(json.dumps({"id": m["id"], "result": {"userAgent": "x"}}), flush=True)
while True:
    time.sleep(1)
"#;
    let cfg = fx.inline(
        script,
        &[&pid_file.to_string_lossy()],
        Duration::from_secs(20),
    );
    let agent = CodexAgent::spawn(&cfg).await.expect("spawn");
    let pid = agent.pid();
    let helper: u32 = std::fs::read_to_string(&pid_file)
        .expect("helper pid")
        .trim()
        .parse()
        .expect("pid");
    assert!(running(pid) && running(helper));
    agent.shutdown(Duration::from_millis(300)).await;
    assert!(wait_gone(pid).await, "server still running");
    assert!(wait_gone(helper).await, "helper still running");
}

#[tokio::test]
async fn shutdown_of_a_well_behaved_server_and_drop_kill() {
    let fx = Fixture::new();
    let agent = CodexAgent::spawn(&fx.fake(&[])).await.expect("spawn");
    let pid = agent.pid();
    agent.shutdown(Duration::from_secs(5)).await;
    assert!(wait_gone(pid).await);

    let agent = CodexAgent::spawn(&fx.fake(&[])).await.expect("spawn");
    let pid = agent.pid();
    drop(agent);
    assert!(wait_gone(pid).await, "dropping the agent kills it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lagging_consumer_blocks_neither_other_threads_nor_loses_text() {
    const N: usize = 5000; // well past the 1024-entry channel
    let fx = Fixture::new();
    let agent = CodexAgent::spawn(&fx.fake(&[])).await.expect("spawn");
    let a = agent.start_thread(fx.cwd()).await.expect("thread a");
    let b = agent.start_thread(fx.cwd()).await.expect("thread b");
    let run_a = agent
        .start_turn(&a, &format!("#burst {N}"))
        .await
        .expect("turn a");
    // Nobody reads `a` yet. Once the fake has written all of it, `b` still completes: its
    // answer comes after every line of `a`, so the reader got past a full channel.
    fx.received_until(|m| m["sent"] == "turn/completed" && m["threadId"] == a.as_str())
        .await;
    let run_b = agent.start_turn(&b, "#reply bee").await.expect("turn b");
    let (ub, db) = tokio::time::timeout(Duration::from_secs(30), collect(run_b))
        .await
        .expect("thread b is not held up by thread a's backlog");
    assert_eq!(db, Ok(TurnEnd::Completed));
    assert_eq!(message_text(&ub), "bee");
    let (ua, da) = collect(run_a).await;
    assert_eq!(da, Ok(TurnEnd::Completed));
    let want: String = (0..N).map(|i| format!("c{i} ")).collect();
    assert_eq!(message_text(&ua), want);
    assert!(chunk_count(&ua) < N, "backlog was merged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_threads_on_one_server_do_not_mix_updates() {
    let fx = Fixture::new();
    let agent = CodexAgent::spawn(&fx.fake(&[])).await.expect("spawn");
    let a = agent.start_thread(fx.cwd()).await.expect("thread a");
    let b = agent.start_thread(fx.cwd()).await.expect("thread b");
    assert_ne!(a, b);
    let run_a = agent.start_turn(&a, "#slow 6").await.expect("turn a");
    let run_b = agent.start_turn(&b, "#slow 4").await.expect("turn b");
    let ((ua, da), (ub, db)) = tokio::join!(collect(run_a), collect(run_b));
    assert_eq!(da, Ok(TurnEnd::Completed));
    assert_eq!(db, Ok(TurnEnd::Completed));
    assert_eq!(message_text(&ua), "part0 part1 part2 part3 part4 part5 ");
    assert_eq!(message_text(&ub), "part0 part1 part2 part3 ");
}

#[tokio::test]
async fn other_server_requests_get_method_not_found() {
    let fx = Fixture::new();
    // On thread/start the server first calls a dynamic tool and names the thread after the
    // answer.
    let script = format!(
        "{INLINE_PRELUDE}\n{}",
        r#"
def on(m):
    if m.get("method") == "thread/start":
        send({"id": 90, "method": "item/tool/call", "params": {"threadId": "t", "turnId": "u", "callId": "c", "tool": "x", "arguments": {}}})
        answer = json.loads(sys.stdin.readline())
        code = answer.get("error", {}).get("code")
        send({"id": m["id"], "result": {"thread": {"id": "answered_%s_%s" % (answer.get("id"), code)}}})
serve(on)
"#
    );
    let agent = CodexAgent::spawn(&fx.inline(&script, &[], Duration::from_secs(20)))
        .await
        .expect("spawn");
    let tid = agent.start_thread(fx.cwd()).await.expect("thread");
    assert_eq!(tid, "answered_90_-32601");
}

#[tokio::test]
async fn exit_while_a_request_waits_fails_it_with_exited() {
    let fx = Fixture::new();
    let script = format!(
        "{INLINE_PRELUDE}\n{}",
        r#"
def on(m):
    sys.stderr.write("not logged in\n"); sys.stderr.flush()
    sys.exit(7)
serve(on)
"#
    );
    let agent = CodexAgent::spawn(&fx.inline(&script, &[], Duration::from_secs(20)))
        .await
        .expect("spawn");
    let err = agent
        .start_thread(fx.cwd())
        .await
        .expect_err("server exits");
    assert_eq!(
        err,
        CodexError::Exited {
            code: Some(7),
            stderr_tail: "not logged in\n".into()
        }
    );
    assert!(!agent.is_alive());
}

#[tokio::test]
async fn overlong_line_is_line_too_long() {
    let fx = Fixture::new();
    let script = format!(
        "{INLINE_PRELUDE}\n{}",
        r#"
def on(m):
    sys.stdout.write("x" * (17 * 1024 * 1024) + "\n"); sys.stdout.flush()
serve(on)
"#
    );
    let agent = CodexAgent::spawn(&fx.inline(&script, &[], Duration::from_secs(20)))
        .await
        .expect("spawn");
    let err = agent.start_thread(fx.cwd()).await.expect_err("too long");
    assert_eq!(err, CodexError::LineTooLong);
    assert!(!agent.is_alive());
}

#[tokio::test]
async fn unstreamed_messages_stale_turns_and_a_bad_status() {
    let fx = Fixture::new();
    // One turn: a stale delta of another turn, an agent message that arrives only on
    // completion, a second streamed message, then a turn/completed with a bogus status.
    let script = format!(
        "{INLINE_PRELUDE}\n{}",
        r#"
def note(method, params):
    send({"method": method, "params": dict(params, threadId="t1", turnId=params.get("turnId", "u1"))})
def on(m):
    if m.get("method") == "thread/start":
        send({"id": m["id"], "result": {"thread": {"id": "t1"}}})
    elif m.get("method") == "turn/start":
        send({"id": m["id"], "result": {"turn": {"id": "u1", "status": "inProgress", "items": [], "error": None}}})
        note("item/agentMessage/delta", {"turnId": "u0", "itemId": "old", "delta": "stale"})
        note("item/completed", {"item": {"type": "agentMessage", "id": "a1", "text": "first"}})
        note("item/agentMessage/delta", {"itemId": "a2", "delta": "sec"})
        note("item/agentMessage/delta", {"itemId": "a2", "delta": "ond"})
        note("item/completed", {"item": {"type": "agentMessage", "id": "a2", "text": "second"}})
        send({"method": "turn/completed", "params": {"threadId": "t1", "turn": {"id": "u1", "status": "weird"}}})
    elif m.get("method") == "turn/interrupt":
        send({"id": m["id"], "result": {}})
serve(on)
"#
    );
    let agent = CodexAgent::spawn(&fx.inline(&script, &[], Duration::from_secs(20)))
        .await
        .expect("spawn");
    let tid = agent.start_thread(fx.cwd()).await.expect("thread");
    let (updates, done) = collect(agent.start_turn(&tid, "hi").await.expect("turn")).await;
    assert_eq!(message_text(&updates), "first\n\nsecond");
    assert!(matches!(done, Err(CodexError::Protocol(_))), "{done:?}");
    assert!(agent.is_alive(), "a bad turn status fails that turn only");
}

#[tokio::test]
async fn turn_start_without_a_turn_id_is_protocol_and_frees_the_thread() {
    let fx = Fixture::new();
    let script = format!(
        "{INLINE_PRELUDE}\n{}",
        r#"
calls = [0]
def on(m):
    if m.get("method") == "turn/start":
        calls[0] += 1
        if calls[0] == 1:
            send({"id": m["id"], "result": {"turn": {"status": "inProgress"}}})
        else:
            send({"id": m["id"], "result": {"turn": {"id": "u2", "status": "inProgress"}}})
            send({"method": "turn/completed", "params": {"threadId": "t1", "turn": {"id": "u2", "status": "completed"}}})
serve(on)
"#
    );
    let agent = CodexAgent::spawn(&fx.inline(&script, &[], Duration::from_secs(20)))
        .await
        .expect("spawn");
    let err = agent.start_turn("t1", "hi").await.expect_err("no turn id");
    assert!(matches!(err, CodexError::Protocol(_)), "{err:?}");
    let run = agent
        .start_turn("t1", "again")
        .await
        .expect("thread is free");
    assert_eq!(run.turn_id, "u2");
    assert_eq!(collect(run).await.1, Ok(TurnEnd::Completed));
}
