//! The `command` transport: runs the actor's configured command with the payload on stdin.
//! Spawn failure or a refused stdin = failed (nothing handed off); exit 0 = accepted; any
//! other ending after the payload was written = ambiguous (the process may have acted).

use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use super::{payload, Handoff};

pub(super) async fn run(argv: &[String], group_id: &str, actor_id: &str, delivery_id: &str, event_json: &str, timeout: Duration) -> Handoff {
    let Some((prog, args)) = argv.split_first() else {
        return Handoff::Failed("actor has no command".into());
    };
    let mut child = match Command::new(prog)
        .args(args)
        .env("CONVENE_GROUP_ID", group_id)
        .env("CONVENE_ACTOR_ID", actor_id)
        .env("CONVENE_DELIVERY_ID", delivery_id)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return Handoff::Failed(format!("spawn {prog}: {e}")),
    };
    let body = payload(delivery_id, event_json);
    if let Some(mut stdin) = child.stdin.take() {
        if let Err(e) = stdin.write_all(&body).await {
            let _ = child.kill().await;
            return Handoff::Failed(format!("stdin refused: {e}"));
        }
        drop(stdin);
    }
    match tokio::time::timeout(timeout, child.wait()).await {
        Ok(Ok(st)) if st.success() => Handoff::Accepted,
        Ok(Ok(st)) => Handoff::Ambiguous(format!("command exited with {st} after reading the payload")),
        Ok(Err(e)) => Handoff::Ambiguous(format!("wait failed: {e}")),
        Err(_) => {
            let _ = child.kill().await;
            Handoff::Ambiguous(format!("command timed out after {}s", timeout.as_secs()))
        }
    }
}
