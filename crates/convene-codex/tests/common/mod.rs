//! Helpers shared by the test files: the fake app-server fixture, run collection, and
//! process checks.
#![allow(dead_code)] // each test file uses its own subset

use std::path::{Path, PathBuf};
use std::time::Duration;

use convene_codex::{CodexConfig, CodexError, TurnEnd, TurnRun, Update};
use serde_json::Value;

pub fn fake_server() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/fake_codex_app_server.py")
}

pub struct Fixture {
    pub dir: tempfile::TempDir,
}

impl Fixture {
    pub fn new() -> Fixture {
        Fixture {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("fake.log")
    }

    /// Config for the fake app-server, logging what it receives.
    pub fn fake(&self, extra_env: &[(&str, &str)]) -> CodexConfig {
        let mut env = vec![(
            "FAKE_CODEX_LOG".to_string(),
            self.log_path().to_string_lossy().into_owned(),
        )];
        env.extend(
            extra_env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        CodexConfig {
            command: vec![
                "python3".into(),
                fake_server().to_string_lossy().into_owned(),
            ],
            cwd: self.dir.path().to_path_buf(),
            env,
            request_timeout: Duration::from_secs(20),
        }
    }

    /// Config for an inline python app-server script.
    pub fn inline(&self, script: &str, args: &[&str], timeout: Duration) -> CodexConfig {
        let mut command = vec!["python3".to_string(), "-c".to_string(), script.to_string()];
        command.extend(args.iter().map(|a| a.to_string()));
        CodexConfig {
            command,
            cwd: self.dir.path().to_path_buf(),
            env: Vec::new(),
            request_timeout: timeout,
        }
    }

    /// Every message the fake received, in order.
    pub fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(self.log_path())
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("log line is JSON"))
            .collect()
    }

    /// `received()`, polled (bounded) until one message matches `pred`.
    pub async fn received_until(&self, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        for _ in 0..100 {
            let log = self.received();
            if log.iter().any(&pred) {
                return log;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.received()
    }

    pub fn cwd(&self) -> &Path {
        self.dir.path()
    }
}

/// All updates of a run, then its outcome.
pub async fn collect(mut run: TurnRun) -> (Vec<Update>, Result<TurnEnd, CodexError>) {
    let mut updates = Vec::new();
    while let Some(u) = run.updates.recv().await {
        updates.push(u);
    }
    let done = run.done.await.expect("done is always sent");
    (updates, done)
}

/// The updates that are not `Other`.
pub fn modelled(updates: &[Update]) -> Vec<Update> {
    updates
        .iter()
        .filter(|u| !matches!(u, Update::Other { .. }))
        .cloned()
        .collect()
}

pub fn message_text(updates: &[Update]) -> String {
    updates
        .iter()
        .filter_map(|u| match u {
            Update::MessageChunk(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

pub fn chunk_count(updates: &[Update]) -> usize {
    updates
        .iter()
        .filter(|u| matches!(u, Update::MessageChunk(_)))
        .count()
}

/// True while `pid` exists and is not a zombie.
pub fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

pub async fn wait_gone(pid: u32) -> bool {
    for _ in 0..100 {
        if !running(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}
