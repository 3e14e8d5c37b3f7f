//! The client against a real `codex app-server` (ignored unless a codex binary is given).

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use convene_codex::{CodexAgent, CodexConfig, CodexError, TurnEnd};

/// The same client against a real `codex app-server`, its model provider pointed at
/// `tests/fixtures/mock_responses_api.py` (no login, no network): run with
/// `CONVENE_CODEX_BIN=/path/to/codex cargo test -p convene-codex -- --ignored`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a codex binary in CONVENE_CODEX_BIN"]
async fn real_codex_app_server_round_trip_interrupt_and_resume() {
    use tokio::io::AsyncBufReadExt;
    let bin = std::env::var("CONVENE_CODEX_BIN").expect("set CONVENE_CODEX_BIN to a codex binary");
    let fx = Fixture::new();
    let mock =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/mock_responses_api.py");
    let mut provider = tokio::process::Command::new("python3")
        .arg(mock)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("mock provider");
    let mut first = String::new();
    tokio::io::BufReader::new(provider.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .await
        .expect("port line");
    let port = first
        .trim()
        .strip_prefix("PORT ")
        .expect("PORT <n>")
        .to_string();
    let home = fx.dir.path().join("codex-home");
    let work = fx.dir.path().join("work");
    std::fs::create_dir_all(&home).expect("home");
    std::fs::create_dir_all(&work).expect("work");
    std::fs::write(
        home.join("config.toml"),
        format!(
            "model = \"gpt-5-codex\"\nmodel_provider = \"mock\"\n\n[model_providers.mock]\nname = \"mock\"\n\
             base_url = \"http://127.0.0.1:{port}/v1\"\nwire_api = \"responses\"\n\
             request_max_retries = 0\nstream_max_retries = 0\nsupports_websockets = false\n"
        ),
    )
    .expect("config");
    let cfg = CodexConfig {
        command: vec![bin, "app-server".into()],
        cwd: work.clone(),
        env: vec![("CODEX_HOME".into(), home.to_string_lossy().into_owned())],
        request_timeout: Duration::from_secs(30),
    };
    let agent = CodexAgent::spawn(&cfg).await.expect("spawn");
    assert_eq!(agent.info()["codexHome"], home.to_string_lossy().as_ref());
    let tid = agent.start_thread(&work).await.expect("thread");

    let (updates, done) = collect(agent.start_turn(&tid, "say hello").await.expect("turn")).await;
    assert_eq!(done, Ok(TurnEnd::Completed), "{updates:?}");
    assert_eq!(message_text(&updates), "Hello from mock");
    assert!(chunk_count(&updates) >= 3, "{updates:?}");

    // Interrupted right after turn/start answered, before codex reports the turn running.
    let run = agent.start_turn(&tid, "MOCK_STALL").await.expect("turn");
    assert_eq!(
        agent.start_turn(&tid, "again").await.expect_err("busy"),
        CodexError::TurnBusy(tid.clone())
    );
    agent
        .interrupt(&tid, &run.turn_id)
        .await
        .expect("interrupt");
    let (_, done) = collect(run).await;
    assert_eq!(done, Ok(TurnEnd::Interrupted));

    agent.resume_thread(&tid).await.expect("resume");
    let (updates, done) = collect(agent.start_turn(&tid, "once more").await.expect("turn")).await;
    assert_eq!(done, Ok(TurnEnd::Completed));
    assert_eq!(message_text(&updates), "Hello from mock");
    let err = agent
        .resume_thread("00000000-0000-0000-0000-000000000000")
        .await
        .expect_err("unknown thread");
    assert!(
        matches!(err, CodexError::Rpc { code: -32600, .. }),
        "{err:?}"
    );
    let pid = agent.pid();
    agent.shutdown(Duration::from_secs(5)).await;
    assert!(wait_gone(pid).await);
}
