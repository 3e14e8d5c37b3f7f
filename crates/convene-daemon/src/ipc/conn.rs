//! One IPC connection. Requests are read as they arrive and answered in request order.
//! `send` and `reply` are queued to the ledger in arrival order without waiting for earlier
//! answers, so a client that pipelines shares group commits with itself; every other op
//! first waits until the answers before it are out (read-your-writes); stream ops take the
//! connection over once everything before them is answered.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use convene_core::{Command, CoreError, ErrorCode};
use serde_json::{json, Map};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, BufWriter, WriteHalf};
use tokio::sync::{mpsc, oneshot, Notify};

use super::args::Args;
use super::{dispatch, error_line, ops_chat, stream, Trust};
use crate::ledger::Committed;
use crate::lines::{read_frame, Frame};
use crate::Daemon;

/// Answers a connection may owe at once; a client pipelining more waits (back-pressure).
pub const MAX_IN_FLIGHT: usize = 256;

/// An answer owed, in request order.
enum Out {
    /// Bytes ready to write.
    Ready(Vec<u8>),
    /// A queued `send`/`reply`, answered when durable.
    Commit(oneshot::Receiver<Result<Committed, CoreError>>),
}

/// Count of answers not yet written, and a wake-up when it reaches zero.
#[derive(Default)]
struct InFlight {
    n: AtomicUsize,
    closed: std::sync::atomic::AtomicBool,
    zero: Notify,
}

impl InFlight {
    fn done(&self) {
        if self.n.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.zero.notify_waiters();
        }
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.zero.notify_waiters();
    }

    /// Waits until every earlier answer is written (or the writer is gone).
    async fn drained(&self) {
        loop {
            let wait = self.zero.notified();
            if self.n.load(Ordering::Acquire) == 0 || self.closed.load(Ordering::Acquire) {
                return;
            }
            wait.await;
        }
    }
}

type Writer<S> = BufWriter<WriteHalf<S>>;

async fn write_answers<S: AsyncWrite>(
    mut w: Writer<S>,
    mut rx: mpsc::Receiver<Out>,
    inflight: Arc<InFlight>,
) -> Option<Writer<S>> {
    let ok = loop {
        let Some(out) = rx.recv().await else {
            break true;
        };
        let bytes = match out {
            Out::Ready(b) => b,
            Out::Commit(answer) => match answer.await {
                Ok(Ok(c)) => convene_ipc::ok_line_raw(&ops_chat::sent(&c)),
                Ok(Err(e)) => error_line(&e),
                Err(_) => error_line(&crate::ledger::stopped()),
            },
        };
        if w.write_all(&bytes).await.is_err() {
            break false;
        }
        inflight.done();
        // Flush when nothing else is ready to go, so pipelined answers share a write.
        if rx.is_empty() && w.flush().await.is_err() {
            break false;
        }
    };
    inflight.close();
    if ok && w.flush().await.is_ok() {
        Some(w)
    } else {
        None
    }
}

/// Commits on the spot when nothing is owed on this connection and the ledger is idle (no
/// hand-off to the writer thread and back); otherwise queues the command in order.
async fn queue_or_commit(d: &Daemon, cmd: Command, idle_conn: bool) -> Out {
    let mut cmd = Some(cmd);
    if idle_conn {
        match d.ledger.try_inline(&mut cmd) {
            Some(Ok(c)) => return Out::Ready(convene_ipc::ok_line_raw(&ops_chat::sent(&c))),
            Some(Err(e)) => return Out::Ready(error_line(&e)),
            None => {}
        }
    }
    let Some(cmd) = cmd else {
        return Out::Ready(error_line(&crate::ledger::stopped()));
    };
    match d.ledger.submit(cmd).await {
        Ok(answer) => Out::Commit(answer),
        Err(e) => Out::Ready(error_line(&e)),
    }
}

/// Serves one connection until the client leaves.
pub async fn serve_conn<S>(d: Arc<Daemon>, stream: S, trust: Trust)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (r, w) = tokio::io::split(stream);
    let mut r = BufReader::with_capacity(64 * 1024, r);
    let (tx, rx) = mpsc::channel::<Out>(MAX_IN_FLIGHT);
    let inflight = Arc::new(InFlight::default());
    let writer = tokio::spawn(write_answers(
        BufWriter::with_capacity(64 * 1024, w),
        rx,
        inflight.clone(),
    ));
    let mut buf = Vec::with_capacity(4096);
    loop {
        let frame = match read_frame(&mut r, &mut buf, d.max_request_bytes).await {
            Ok(f) => f,
            Err(_) => break,
        };
        let out = match frame {
            Frame::Eof => break,
            Frame::TooLarge => Out::Ready(convene_ipc::err_line(
                ErrorCode::LimitExceeded.as_str(),
                &format!("request exceeds {} bytes", d.max_request_bytes),
                json!({"limit": d.max_request_bytes, "reason": "request_too_large"})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            )),
            Frame::Line if buf.iter().all(u8::is_ascii_whitespace) => continue,
            Frame::Line if crate::lines::is_http_request(&buf) => {
                // A web page can make a browser POST to the loopback TCP port with request
                // lines as its body; loopback is trusted, so they must never run. Close.
                let line = convene_ipc::err_line(
                    ErrorCode::InvalidRequest.as_str(),
                    "an HTTP request is not an IPC request; closing",
                    Map::new(),
                );
                let _ = tx.send(Out::Ready(line)).await;
                break;
            }
            Frame::Line => match convene_ipc::parse_request(&buf) {
                Err(e) => {
                    let mut det = Map::new();
                    if let Some(f) = e.field {
                        det.insert("field".into(), json!(f));
                    }
                    Out::Ready(convene_ipc::err_line(e.code, &e.message, det))
                }
                Ok(mut req) => {
                    let key = req.args.remove("api_key");
                    if trust == Trust::Remote
                        && key.as_ref().and_then(|v| v.as_str()) != Some(d.api_key.as_str())
                    {
                        Out::Ready(error_line(&CoreError::denied(
                            "this endpoint requires args.api_key",
                        )))
                    } else {
                        match req.op.as_str() {
                            "send" | "reply" => {
                                match ops_chat::prepare_send(&d, &req.op, &Args(req.args)) {
                                    Ok(cmd) => {
                                        // Sequential client: nothing owed and nothing more
                                        // buffered. A pipelining client is queued instead so
                                        // its requests share group commits.
                                        let idle = inflight.n.load(Ordering::Acquire) == 0
                                            && r.buffer().is_empty();
                                        queue_or_commit(&d, cmd, idle).await
                                    }
                                    Err(e) => Out::Ready(error_line(&e)),
                                }
                            }
                            "events_stream" | "runtime_attach" => {
                                // Everything before the stream is answered, then the stream owns the socket.
                                drop(tx);
                                let Ok(Some(mut w)) = writer.await else {
                                    return;
                                };
                                let args = Args(req.args);
                                if req.op == "events_stream" {
                                    let _ = stream::events_stream(&d, args, &mut r, &mut w).await;
                                    let _ = w.flush().await;
                                } else {
                                    let _ = stream::runtime_attach(&d, args, &mut r, &mut w).await;
                                    // A stalled session was cut off for not taking writes:
                                    // the last flush is bounded too.
                                    let bound = d.runtime.sessions.timeout();
                                    let _ = tokio::time::timeout(bound, w.flush()).await;
                                }
                                return;
                            }
                            op => {
                                inflight.drained().await;
                                match dispatch(&d, op, Args(req.args)).await {
                                    Ok(v) => Out::Ready(convene_ipc::ok_line(v)),
                                    Err(e) => Out::Ready(error_line(&e)),
                                }
                            }
                        }
                    }
                }
            },
        };
        inflight.n.fetch_add(1, Ordering::AcqRel);
        if tx.send(out).await.is_err() {
            break; // the client stopped reading
        }
    }
    // Answer what was asked before the client half-closed.
    drop(tx);
    let _ = writer.await;
}
