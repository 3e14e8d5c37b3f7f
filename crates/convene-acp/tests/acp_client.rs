//! The ACP client against real child processes: the fake agent
//! (`tests/fixtures/fake_acp_agent.py`) and a few tiny inline agents for misbehaviour.

use std::path::{Path, PathBuf};
use std::time::Duration;

use convene_acp::{AcpAgent, AcpConfig, AcpError, PromptRun, StopReason, Update};
use serde_json::Value;

fn fake_agent() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/fake_acp_agent.py")
}

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("fake.log")
    }

    /// Config for the fake agent, logging what it receives.
    fn fake(&self, extra_env: &[(&str, &str)]) -> AcpConfig {
        let mut env = vec![(
            "FAKE_ACP_LOG".to_string(),
            self.log_path().to_string_lossy().into_owned(),
        )];
        env.extend(
            extra_env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        AcpConfig {
            command: vec![
                "python3".into(),
                fake_agent().to_string_lossy().into_owned(),
            ],
            cwd: self.dir.path().to_path_buf(),
            env,
            request_timeout: Duration::from_secs(20),
        }
    }

    /// Config for an inline python agent script.
    fn inline(&self, script: &str, args: &[&str], timeout: Duration) -> AcpConfig {
        let mut command = vec!["python3".to_string(), "-c".to_string(), script.to_string()];
        command.extend(args.iter().map(|a| a.to_string()));
        AcpConfig {
            command,
            cwd: self.dir.path().to_path_buf(),
            env: Vec::new(),
            request_timeout: timeout,
        }
    }

    /// Every message the fake agent received, in order.
    fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(self.log_path())
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("log line is JSON"))
            .collect()
    }

    /// `received()`, polled (bounded) until one message matches `pred`.
    async fn received_until(&self, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        for _ in 0..100 {
            let log = self.received();
            if log.iter().any(&pred) {
                return log;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.received()
    }

    fn cwd(&self) -> &Path {
        self.dir.path()
    }
}

/// All updates of a run, then its outcome. The fake's `available_commands_update`, sent right
/// after `session/new` answered, may land in the first prompt's updates: it is left out.
async fn collect(mut run: PromptRun) -> (Vec<Update>, Result<StopReason, AcpError>) {
    let mut updates = Vec::new();
    while let Some(u) = run.updates.recv().await {
        if !matches!(&u, Update::Other { kind } if kind == "available_commands_update") {
            updates.push(u);
        }
    }
    let done = run.done.await.expect("done is always sent");
    (updates, done)
}

fn message_text(updates: &[Update]) -> String {
    updates
        .iter()
        .filter_map(|u| match u {
            Update::MessageChunk(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

fn chunk_count(updates: &[Update]) -> usize {
    updates
        .iter()
        .filter(|u| matches!(u, Update::MessageChunk(_)))
        .count()
}

/// A minimal agent header for inline scripts: answers initialize, calls `on(msg)` otherwise.
const INLINE_PRELUDE: &str = r#"
import json, sys
def send(m):
    m["jsonrpc"] = "2.0"
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
def serve(on):
    for line in sys.stdin:
        m = json.loads(line)
        if m.get("method") == "initialize":
            send({"id": m["id"], "result": {"protocolVersion": 1, "agentCapabilities": {}}})
        else:
            on(m)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_streams_ordered_chunks_and_advertises_no_client_capabilities() {
    let fx = Fixture::new();
    let agent = AcpAgent::spawn(&fx.fake(&[])).await.expect("spawn");
    assert!(agent.is_alive());
    assert_eq!(agent.capabilities().protocol_version, 1);
    assert!(agent.capabilities().load_session);
    assert_eq!(
        agent.capabilities().raw["agentInfo"]["name"],
        "fake-acp-agent"
    );
    let sid = agent.new_session(fx.cwd(), vec![]).await.expect("session");
    assert_eq!(sid, "sess_1");
    let run = agent
        .prompt(&sid, "#think\nfirst line\n\nhello there\n")
        .await
        .expect("prompt written");
    let (updates, done) = collect(run).await;
    assert_eq!(done, Ok(StopReason::EndTurn));
    assert_eq!(
        updates[..2],
        [
            Update::ThoughtChunk("thinking about it".into()),
            Update::ThoughtChunk(" some more".into())
        ]
    );
    assert_eq!(message_text(&updates), "echo: hello there");
    assert!(chunk_count(&updates) >= 2, "{updates:?}");

    let log = fx.received();
    assert_eq!(log[0]["method"], "initialize");
    assert_eq!(log[0]["params"]["protocolVersion"], 1);
    assert_eq!(
        log[0]["params"]["clientCapabilities"],
        serde_json::json!({"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false})
    );
    assert_eq!(log[1]["method"], "session/new");
    assert_eq!(log[1]["params"]["mcpServers"], serde_json::json!([]));
    assert_eq!(log[2]["method"], "session/prompt");
    assert_eq!(
        log[2]["params"]["prompt"],
        serde_json::json!([{"type": "text", "text": "#think\nfirst line\n\nhello there\n"}])
    );
    agent.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn tool_calls_map_to_tool_updates_before_the_reply() {
    let fx = Fixture::new();
    let agent = AcpAgent::spawn(&fx.fake(&[])).await.expect("spawn");
    let sid = agent.new_session(fx.cwd(), vec![]).await.expect("session");
    let (updates, done) = collect(agent.prompt(&sid, "look\n#tool").await.expect("prompt")).await;
    assert_eq!(done, Ok(StopReason::EndTurn));
    assert_eq!(
        updates[..2],
        [
            Update::ToolCall {
                id: "call_1".into(),
                title: "read file".into(),
                kind: Some("read".into()),
                status: Some("pending".into()),
            },
            Update::ToolCallUpdate {
                id: "call_1".into(),
                title: None,
                status: Some("completed".into()),
            },
        ]
    );
    assert_eq!(message_text(&updates), "echo: look");
    let (updates, _) = collect(
        agent
            .prompt(&sid, "#reply exactly this")
            .await
            .expect("prompt"),
    )
    .await;
    assert_eq!(message_text(&updates), "exactly this");
}

#[tokio::test]
async fn set_mode_and_modes_of_a_new_session() {
    let fx = Fixture::new();
    let agent = AcpAgent::spawn(&fx.fake(&[])).await.expect("spawn");
    let info = agent
        .new_session_full(fx.cwd(), vec![])
        .await
        .expect("session");
    assert_eq!(info.current_mode.as_deref(), Some("default"));
    assert_eq!(info.available_modes, ["default", "auto"]);
    agent
        .set_mode(&info.session_id, "auto")
        .await
        .expect("set_mode");
    let err = agent
        .set_mode(&info.session_id, "bogus")
        .await
        .expect_err("unknown mode");
    assert!(matches!(err, AcpError::Rpc { code: -32602, .. }), "{err:?}");
    let set: Vec<Value> = fx
        .received()
        .into_iter()
        .filter(|m| m["method"] == "session/set_mode")
        .collect();
    assert_eq!(
        set[0]["params"],
        serde_json::json!({"sessionId": info.session_id, "modeId": "auto"})
    );
}

#[tokio::test]
async fn load_session_known_and_unknown() {
    let fx = Fixture::new();
    let agent = AcpAgent::spawn(&fx.fake(&[])).await.expect("spawn");
    let sid = agent.new_session(fx.cwd(), vec![]).await.expect("session");
    let (_, done) = collect(agent.prompt(&sid, "remember me").await.expect("prompt")).await;
    assert_eq!(done, Ok(StopReason::EndTurn));
    // The agent replays history as session/update before answering; none of it leaks into
    // the next prompt's updates.
    agent
        .load_session(&sid, fx.cwd(), vec![])
        .await
        .expect("load");
    let (updates, done) = collect(agent.prompt(&sid, "again").await.expect("prompt")).await;
    assert_eq!(done, Ok(StopReason::EndTurn));
    assert_eq!(message_text(&updates), "echo: again");
    let err = agent
        .load_session("sess_404", fx.cwd(), vec![])
        .await
        .expect_err("unknown session");
    assert!(matches!(err, AcpError::Rpc { code: -32002, .. }), "{err:?}");
    let load = fx
        .received()
        .into_iter()
        .find(|m| m["method"] == "session/load")
        .expect("load logged");
    assert_eq!(load["params"]["sessionId"], sid);
    assert_eq!(load["params"]["cwd"], fx.cwd().to_string_lossy().as_ref());
}

#[tokio::test]
async fn cancel_during_slow_prompt_ends_cancelled_with_fewer_chunks() {
    let fx = Fixture::new();
    let agent = AcpAgent::spawn(&fx.fake(&[])).await.expect("spawn");
    let sid = agent.new_session(fx.cwd(), vec![]).await.expect("session");
    let mut run = agent.prompt(&sid, "#slow 50").await.expect("prompt");
    loop {
        match run.updates.recv().await.expect("first chunk") {
            Update::Other { .. } => continue,
            first => {
                assert_eq!(first, Update::MessageChunk("part0 ".into()));
                break;
            }
        }
    }
    agent.cancel(&sid).await.expect("cancel");
    let (rest, done) = collect(run).await;
    assert_eq!(done, Ok(StopReason::Cancelled));
    assert!(chunk_count(&rest) + 1 < 50, "{rest:?}");
    assert!(fx
        .received()
        .iter()
        .any(|m| m["method"] == "session/cancel" && m["params"]["sessionId"] == sid.as_str()));
    // The session takes prompts again after a cancelled turn.
    let (_, done) = collect(agent.prompt(&sid, "next").await.expect("prompt")).await;
    assert_eq!(done, Ok(StopReason::EndTurn));
}

#[tokio::test]
async fn hanging_prompt_blocks_the_session_until_cancelled() {
    let fx = Fixture::new();
    let agent = AcpAgent::spawn(&fx.fake(&[])).await.expect("spawn");
    let sid = agent.new_session(fx.cwd(), vec![]).await.expect("session");
    let run = agent.prompt(&sid, "#hang").await.expect("prompt");
    let err = agent.prompt(&sid, "second").await.expect_err("busy");
    assert_eq!(err, AcpError::SessionBusy(sid.clone()));
    agent.cancel(&sid).await.expect("cancel");
    let (updates, done) = collect(run).await;
    assert_eq!(done, Ok(StopReason::Cancelled));
    assert!(updates.is_empty(), "{updates:?}");
}

#[tokio::test]
async fn permission_request_is_refused_cancelled_and_reported() {
    let fx = Fixture::new();
    let agent = AcpAgent::spawn(&fx.fake(&[])).await.expect("spawn");
    let sid = agent.new_session(fx.cwd(), vec![]).await.expect("session");
    let (updates, done) = collect(agent.prompt(&sid, "#permission").await.expect("prompt")).await;
    assert_eq!(done, Ok(StopReason::Cancelled));
    assert!(
        updates.contains(&Update::UnexpectedInteraction {
            method: "session/request_permission".into()
        }),
        "{updates:?}"
    );
    // The cancel notification follows the answer; the turn may end before the fake logs it.
    let log = fx.received_until(|m| m["method"] == "session/cancel").await;
    let answer = log
        .iter()
        .position(|m| m["method"].is_null())
        .expect("permission answered");
    assert_eq!(
        log[answer]["result"],
        serde_json::json!({"outcome": {"outcome": "cancelled"}})
    );
    let cancel = log
        .iter()
        .position(|m| m["method"] == "session/cancel")
        .expect("session cancelled");
    assert!(answer < cancel, "answer first, then cancel: {log:?}");
    assert_eq!(log[cancel]["params"]["sessionId"], sid.as_str());
    assert!(agent.is_alive());
}

#[tokio::test]
async fn crash_mid_turn_is_exited_with_code_and_stderr() {
    let fx = Fixture::new();
    let agent = AcpAgent::spawn(&fx.fake(&[])).await.expect("spawn");
    let sid = agent.new_session(fx.cwd(), vec![]).await.expect("session");
    let (updates, done) = collect(agent.prompt(&sid, "#crash").await.expect("prompt")).await;
    assert_eq!(updates, [Update::MessageChunk("about to crash".into())]);
    match done {
        Err(AcpError::Exited { code, stderr_tail }) => {
            assert_eq!(code, Some(3));
            assert!(stderr_tail.contains("crashing on purpose"), "{stderr_tail}");
        }
        other => panic!("expected Exited, got {other:?}"),
    }
    assert!(!agent.is_alive());
    let err = agent
        .new_session(fx.cwd(), vec![])
        .await
        .expect_err("dead agent");
    assert!(
        matches!(err, AcpError::Exited { code: Some(3), .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn non_json_line_is_a_protocol_error_and_ends_the_connection() {
    let fx = Fixture::new();
    let agent = AcpAgent::spawn(&fx.fake(&[])).await.expect("spawn");
    let sid = agent.new_session(fx.cwd(), vec![]).await.expect("session");
    let (_, done) = collect(agent.prompt(&sid, "#garbage").await.expect("prompt")).await;
    assert!(matches!(done, Err(AcpError::Protocol(_))), "{done:?}");
    assert!(!agent.is_alive());
    assert!(matches!(
        agent.cancel(&sid).await,
        Err(AcpError::Protocol(_))
    ));
}

#[test]
fn agent_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<AcpAgent>();
    check::<AcpError>();
}

#[tokio::test]
async fn agent_exiting_before_initialize_is_exited_with_stderr() {
    let fx = Fixture::new();
    let cfg = fx.inline(
        "import sys\nsys.stderr.write('unknown flag --acp\\n')\nsys.exit(2)",
        &[],
        Duration::from_secs(20),
    );
    let err = AcpAgent::spawn(&cfg).await.err().expect("exits");
    match err {
        AcpError::Exited { code, stderr_tail } => {
            assert_eq!(code, Some(2));
            assert_eq!(stderr_tail, "unknown flag --acp\n");
        }
        other => panic!("expected Exited, got {other:?}"),
    }
}

#[tokio::test]
async fn other_protocol_version_is_refused() {
    let fx = Fixture::new();
    let script = r#"
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": {"protocolVersion": 2}}), flush=True)
"#;
    let err = AcpAgent::spawn(&fx.inline(script, &[], Duration::from_secs(20)))
        .await
        .err()
        .expect("version 2");
    assert!(matches!(err, AcpError::Protocol(_)), "{err:?}");
}

#[tokio::test]
async fn initialize_error_is_rpc() {
    let fx = Fixture::new();
    let err = AcpAgent::spawn(&fx.fake(&[("FAKE_ACP_FAIL_INIT", "1")]))
        .await
        .err()
        .expect("initialize fails");
    assert!(matches!(err, AcpError::Rpc { code: -32000, .. }), "{err:?}");
}

#[tokio::test]
async fn missing_program_is_spawn_error() {
    let fx = Fixture::new();
    let mut cfg = fx.fake(&[]);
    cfg.command = vec!["/nonexistent/acp-agent".into()];
    let err = AcpAgent::spawn(&cfg).await.err().expect("no such program");
    assert!(matches!(err, AcpError::Spawn(_)), "{err:?}");
}

#[tokio::test]
async fn silent_agent_times_out_initialize() {
    let fx = Fixture::new();
    let cfg = fx.inline(
        "import sys\nfor _ in sys.stdin: pass",
        &[],
        Duration::from_millis(500),
    );
    let err = AcpAgent::spawn(&cfg).await.err().expect("no answer");
    assert_eq!(err, AcpError::Timeout("initialize"));
}

/// True while `pid` exists and is not a zombie.
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

async fn wait_gone(pid: u32) -> bool {
    for _ in 0..100 {
        if !running(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test]
async fn shutdown_kills_an_agent_that_ignores_stdin_close_and_its_helpers() {
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
        print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": {"protocolVersion": 1}}), flush=True)
while True:
    time.sleep(1)
"#;
    let cfg = fx.inline(
        script,
        &[&pid_file.to_string_lossy()],
        Duration::from_secs(20),
    );
    let agent = AcpAgent::spawn(&cfg).await.expect("spawn");
    let pid = agent.pid();
    let helper: u32 = std::fs::read_to_string(&pid_file)
        .expect("helper pid")
        .trim()
        .parse()
        .expect("pid");
    assert!(running(pid) && running(helper));
    agent.shutdown(Duration::from_millis(300)).await;
    assert!(wait_gone(pid).await, "agent still running");
    assert!(wait_gone(helper).await, "helper still running");
}

#[tokio::test]
async fn shutdown_of_a_well_behaved_agent_and_drop_kill() {
    let fx = Fixture::new();
    let agent = AcpAgent::spawn(&fx.fake(&[])).await.expect("spawn");
    let pid = agent.pid();
    agent.shutdown(Duration::from_secs(5)).await;
    assert!(wait_gone(pid).await);

    let agent = AcpAgent::spawn(&fx.fake(&[])).await.expect("spawn");
    let pid = agent.pid();
    drop(agent);
    assert!(wait_gone(pid).await, "dropping the agent kills it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lagging_consumer_blocks_neither_other_sessions_nor_loses_text() {
    const N: usize = 5000; // well past the 1024-entry channel
    let fx = Fixture::new();
    let agent = AcpAgent::spawn(&fx.fake(&[])).await.expect("spawn");
    let a = agent
        .new_session(fx.cwd(), vec![])
        .await
        .expect("session a");
    let b = agent
        .new_session(fx.cwd(), vec![])
        .await
        .expect("session b");
    let run_a = agent
        .prompt(&a, &format!("#burst {N}"))
        .await
        .expect("prompt a");
    // Nobody reads `a` yet. Once the fake has written all of it, `b` still completes: its
    // answer comes after every line of `a`, so the reader got past a full channel.
    fx.received_until(|m| m["sent"] == "stopReason" && m["sessionId"] == a.as_str())
        .await;
    let run_b = agent.prompt(&b, "#reply bee").await.expect("prompt b");
    let (ub, db) = tokio::time::timeout(Duration::from_secs(30), collect(run_b))
        .await
        .expect("session b is not held up by session a's backlog");
    assert_eq!(db, Ok(StopReason::EndTurn));
    assert_eq!(message_text(&ub), "bee");
    let (ua, da) = collect(run_a).await;
    assert_eq!(da, Ok(StopReason::EndTurn));
    let want: String = (0..N).map(|i| format!("c{i} ")).collect();
    assert_eq!(message_text(&ua), want);
    assert!(chunk_count(&ua) < N, "backlog was merged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sessions_on_one_agent_do_not_mix_updates() {
    let fx = Fixture::new();
    let agent = AcpAgent::spawn(&fx.fake(&[])).await.expect("spawn");
    let a = agent
        .new_session(fx.cwd(), vec![])
        .await
        .expect("session a");
    let b = agent
        .new_session(fx.cwd(), vec![])
        .await
        .expect("session b");
    assert_ne!(a, b);
    let run_a = agent.prompt(&a, "#slow 6").await.expect("prompt a");
    let run_b = agent.prompt(&b, "#slow 4").await.expect("prompt b");
    let ((ua, da), (ub, db)) = tokio::join!(collect(run_a), collect(run_b));
    assert_eq!(da, Ok(StopReason::EndTurn));
    assert_eq!(db, Ok(StopReason::EndTurn));
    assert_eq!(message_text(&ua), "part0 part1 part2 part3 part4 part5 ");
    assert_eq!(message_text(&ub), "part0 part1 part2 part3 ");
}

#[tokio::test]
async fn file_system_requests_get_method_not_found() {
    let fx = Fixture::new();
    // On session/new the agent asks for a file first and names the session after the answer.
    let script = format!(
        "{INLINE_PRELUDE}\n{}",
        r#"
def on(m):
    if m.get("method") == "session/new":
        send({"id": "fs1", "method": "fs/read_text_file", "params": {"sessionId": "s", "path": "/etc/hostname"}})
        answer = json.loads(sys.stdin.readline())
        code = answer.get("error", {}).get("code")
        send({"id": m["id"], "result": {"sessionId": "answered_%s_%s" % (answer.get("id"), code)}})
serve(on)
"#
    );
    let agent = AcpAgent::spawn(&fx.inline(&script, &[], Duration::from_secs(20)))
        .await
        .expect("spawn");
    let sid = agent.new_session(fx.cwd(), vec![]).await.expect("session");
    assert_eq!(sid, "answered_fs1_-32601");
}

#[tokio::test]
async fn exit_while_a_request_waits_fails_it_with_exited() {
    let fx = Fixture::new();
    let script = format!(
        "{INLINE_PRELUDE}\n{}",
        r#"
def on(m):
    sys.stderr.write("out of credits\n"); sys.stderr.flush()
    sys.exit(7)
serve(on)
"#
    );
    let agent = AcpAgent::spawn(&fx.inline(&script, &[], Duration::from_secs(20)))
        .await
        .expect("spawn");
    let err = agent
        .new_session(fx.cwd(), vec![])
        .await
        .expect_err("agent exits");
    assert_eq!(
        err,
        AcpError::Exited {
            code: Some(7),
            stderr_tail: "out of credits\n".into()
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
    let agent = AcpAgent::spawn(&fx.inline(&script, &[], Duration::from_secs(20)))
        .await
        .expect("spawn");
    let err = agent
        .new_session(fx.cwd(), vec![])
        .await
        .expect_err("too long");
    assert_eq!(err, AcpError::LineTooLong);
    assert!(!agent.is_alive());
}

#[tokio::test]
async fn malformed_prompt_result_is_protocol_error_for_that_prompt() {
    let fx = Fixture::new();
    let script = format!(
        "{INLINE_PRELUDE}\n{}",
        r#"
def on(m):
    if m.get("method") == "session/new":
        send({"id": m["id"], "result": {"sessionId": "s1"}})
    elif m.get("method") == "session/prompt":
        send({"method": "session/update", "params": {"sessionId": "s1", "update": {"sessionUpdate": "plan", "entries": []}}})
        send({"method": "session/update", "params": {"sessionId": "s1", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "image", "data": "", "mimeType": "image/png"}}}})
        send({"method": "session/update", "params": {"sessionId": "other", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "not yours"}}}})
        send({"id": m["id"], "result": {"stop": "end_turn"}})
serve(on)
"#
    );
    let agent = AcpAgent::spawn(&fx.inline(&script, &[], Duration::from_secs(20)))
        .await
        .expect("spawn");
    let sid = agent.new_session(fx.cwd(), vec![]).await.expect("session");
    let (updates, done) = collect(agent.prompt(&sid, "hi").await.expect("prompt")).await;
    assert_eq!(
        updates,
        [
            Update::Other {
                kind: "plan".into()
            },
            Update::Other {
                kind: "agent_message_chunk".into()
            },
        ]
    );
    assert!(matches!(done, Err(AcpError::Protocol(_))), "{done:?}");
}
