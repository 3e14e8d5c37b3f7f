//! The child process: spawning it in its own process group, keeping the tail of its
//! stderr, reading bounded lines from its stdout, and killing the whole group.

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::sync::watch;

use crate::{PeerError, STDERR_TAIL_BYTES};

/// A started child with its pipes taken apart.
pub struct Spawned {
    /// The child, for reaping it (killed when dropped).
    pub child: Child,
    /// Its process id, which is also its process group id.
    pub pid: u32,
    /// Its stdin.
    pub stdin: ChildStdin,
    /// Its stdout.
    pub stdout: ChildStdout,
    /// Its stderr.
    pub stderr: ChildStderr,
}

/// Starts `command` (program and arguments) in `cwd`, with `env` added to the inherited
/// environment, in a new process group with piped stdio.
pub fn spawn(
    command: &[String],
    cwd: &Path,
    env: &[(String, String)],
) -> Result<Spawned, PeerError> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| PeerError::Spawn("empty command".into()))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(cwd)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Own process group: shutdown can kill the child and every helper it started.
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .map_err(|e| PeerError::Spawn(format!("{program}: {e}")))?;
    let pid = child
        .id()
        .ok_or_else(|| PeerError::Spawn("child exited before it could be tracked".into()))?;
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(PeerError::Spawn("child stdio not piped".into()));
    };
    Ok(Spawned {
        child,
        pid,
        stdin,
        stdout,
        stderr,
    })
}

/// SIGKILL to the whole process group led by `pgid`.
pub fn kill_group(pgid: u32) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return;
    };
    if pgid <= 1 {
        return;
    }
    // SAFETY: killpg has no memory-safety preconditions; a stale group only yields ESRCH.
    let rc = unsafe { libc::killpg(pgid, libc::SIGKILL) };
    tracing::debug!(pgid, rc, "killed child process group");
}

/// The last [`STDERR_TAIL_BYTES`] of the child's stderr, and whether stderr reached EOF.
#[derive(Clone, Default)]
pub struct StderrTail {
    buf: Arc<Mutex<Vec<u8>>>,
}

impl StderrTail {
    /// Reads `stderr` to EOF in a task, keeping the tail; `closed` turns true at EOF.
    pub fn collect(stderr: ChildStderr) -> (StderrTail, watch::Receiver<bool>) {
        let tail = StderrTail::default();
        let (closed_tx, closed) = watch::channel(false);
        let keep = tail.clone();
        tokio::spawn(async move {
            let mut stderr = stderr;
            let mut chunk = [0u8; 4096];
            loop {
                match stderr.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => keep.append(&chunk[..n]),
                }
            }
            let _ = closed_tx.send(true);
        });
        (tail, closed)
    }

    fn append(&self, bytes: &[u8]) {
        let mut buf = self.buf.lock().unwrap_or_else(|e| e.into_inner());
        buf.extend_from_slice(bytes);
        if buf.len() > STDERR_TAIL_BYTES {
            let cut = buf.len() - STDERR_TAIL_BYTES;
            buf.drain(..cut);
        }
    }

    /// The tail as text (lossy UTF-8; a cut multi-byte character becomes U+FFFD).
    pub fn text(&self) -> String {
        let buf = self.buf.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&buf).into_owned()
    }
}

/// Result of reading one line.
pub enum Line {
    /// A line without its `\n` (and without a trailing `\r`).
    Data(Vec<u8>),
    /// End of stream.
    Eof,
    /// More than `max` bytes before a newline.
    TooLong,
}

/// Reads one `\n`-terminated line of at most `max` bytes.
pub async fn read_line<R: AsyncBufRead + AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Line> {
    buf.clear();
    loop {
        let available = r.fill_buf().await?;
        if available.is_empty() {
            // A final line without newline still counts; an empty tail is plain EOF.
            return Ok(if buf.is_empty() {
                Line::Eof
            } else {
                Line::Data(std::mem::take(buf))
            });
        }
        let (used, found) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        let take = if found { used - 1 } else { used };
        if buf.len() + take > max {
            return Ok(Line::TooLong);
        }
        buf.extend_from_slice(&available[..take]);
        r.consume(used);
        if found {
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            return Ok(Line::Data(std::mem::take(buf)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_bounded_lines() {
        let data: &[u8] = b"ab\r\ncdef\n\nlast";
        let mut r = tokio::io::BufReader::with_capacity(3, data);
        let mut buf = Vec::new();
        let mut got = Vec::new();
        loop {
            match read_line(&mut r, &mut buf, 4).await.ok() {
                Some(Line::Data(l)) => got.push(String::from_utf8_lossy(&l).into_owned()),
                Some(Line::Eof) => break,
                _ => panic!("unexpected"),
            }
        }
        assert_eq!(got, ["ab", "cdef", "", "last"]);
        let mut r = tokio::io::BufReader::with_capacity(3, &b"abcde\n"[..]);
        assert!(matches!(
            read_line(&mut r, &mut buf, 4).await,
            Ok(Line::TooLong)
        ));
    }
}
