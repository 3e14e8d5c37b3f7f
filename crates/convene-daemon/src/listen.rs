//! Accept loops shared by every face: until shutdown, each accepted connection is served on
//! its own task with the trust its address earns (Unix socket and loopback TCP are local,
//! unless the operator requires the key; any other TCP peer is remote).

use std::future::Future;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

use crate::ipc::Trust;
use crate::Daemon;

/// Serves a Unix socket listener with `serve(stream, Trust::Local)`.
pub fn unix<F, Fut>(d: &Daemon, l: UnixListener, face: &'static str, serve: F)
where
    F: Fn(UnixStream, Trust) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut stop = d.shutdown_rx();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                r = l.accept() => match r {
                    Ok((s, _)) => { tokio::spawn(serve(s, Trust::Local)); }
                    Err(e) => backoff(face, &e).await,
                },
                _ = stop.changed() => return,
            }
        }
    });
}

/// Serves a TCP listener; every socket gets TCP_NODELAY (small request/response frames:
/// Nagle plus delayed ACK would add ~40 ms).
pub fn tcp<F, Fut>(d: &Daemon, l: TcpListener, require_key: bool, face: &'static str, serve: F)
where
    F: Fn(TcpStream, Trust) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut stop = d.shutdown_rx();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                r = l.accept() => match r {
                    Ok((s, peer)) => {
                        let _ = s.set_nodelay(true);
                        let trust = if peer.ip().is_loopback() && !require_key { Trust::Local } else { Trust::Remote };
                        tokio::spawn(serve(s, trust));
                    }
                    Err(e) => backoff(face, &e).await,
                },
                _ = stop.changed() => return,
            }
        }
    });
}

/// An accept error (e.g. out of file descriptors) is logged and retried after a pause.
async fn backoff(face: &str, e: &std::io::Error) {
    tracing::warn!(face, error = %e, "accept failed");
    tokio::time::sleep(Duration::from_millis(50)).await;
}
