//! The `command` transport: runs the actor's configured command with the payload on stdin.
//! Spawn failure = failed (nothing ran); exit 0 = accepted; any other ending of a process
//! that ran = ambiguous (it may have acted on the payload).

use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use super::{payload, Handoff};

pub(super) async fn run(
    argv: &[String],
    group_id: &str,
    actor_id: &str,
    delivery_id: &str,
    event_json: &str,
    timeout: Duration,
) -> Handoff {
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
        // A command that exits without reading stdin closes the pipe (EPIPE); it still ran,
        // so its exit status decides, not the write.
        let _ = stdin.write_all(&body).await;
        drop(stdin);
    }
    match tokio::time::timeout(timeout, child.wait()).await {
        Ok(Ok(st)) if st.success() => Handoff::Accepted,
        Ok(Ok(st)) => Handoff::Ambiguous(format!(
            "command exited with {st} after reading the payload"
        )),
        Ok(Err(e)) => Handoff::Ambiguous(format!("wait failed: {e}")),
        Err(_) => {
            let _ = child.kill().await;
            Handoff::Ambiguous(format!("command timed out after {}s", timeout.as_secs()))
        }
    }
}
