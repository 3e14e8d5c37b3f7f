//! The Cowchat face over WebSocket: `GET /ws` upgrades, then every text (or UTF-8 binary)
//! message is one NDJSON frame and every frame the face writes is one text message. The
//! connection handler is the same one the Unix socket and TCP use (`cowchat::serve`); this
//! module only bridges a WebSocket to a byte stream through an in-memory pipe.
//!
//! Size limit: an inbound message up to `convene_cowchat::MAX_FRAME_BYTES` is a frame; a larger
//! one up to [`HARD_MAX_MESSAGE`] is answered with `frame_too_large` by the handler and the
//! connection stays open; anything larger is refused by the WebSocket layer before it is
//! buffered, answered with `frame_too_large` and the connection is closed with 1009.

use std::sync::Arc;
use std::time::Duration;

use convene_cowchat::{ErrorCode, WireError};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, watch};
use tokio_tungstenite::tungstenite::error::{CapacityError, Error as WsError};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::cowchat::Face;
use crate::ipc::Trust;
use crate::Daemon;

/// The only path served; every other path is 404.
pub const PATH: &str = "/ws";
/// Messages above this are refused by the WebSocket layer without being buffered (the
/// connection then closes with 1009); between `MAX_FRAME_BYTES` and this the handler answers
/// `frame_too_large` and the connection stays.
pub const HARD_MAX_MESSAGE: usize = 4 * convene_cowchat::MAX_FRAME_BYTES;
/// Largest HTTP request head accepted before the upgrade.
const MAX_HEAD: usize = 16 * 1024;
/// A client must finish its HTTP request head within this time.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// After our close frame, how long we wait for the peer's before dropping the socket.
const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// Pipe between the bridge and the handler, each way.
const PIPE: usize = 64 * 1024;

type Ws = WebSocketStream<TcpStream>;

/// Serves one accepted TCP connection: HTTP upgrade on `/ws`, then the Cowchat handler.
/// A request carrying `Origin` comes from a browser page, which any web site can make point
/// at a loopback port: such peers are remote and must present the API key at `register`.
pub async fn serve(d: Arc<Daemon>, face: Arc<Face>, mut s: TcpStream, trust: Trust) {
    let head = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut s)).await {
        Ok(Ok(h)) => h,
        Ok(Err(status)) => {
            let _ = respond(&mut s, status, "", "").await;
            return;
        }
        Err(_) => return,
    };
    let (trust, key, rest) = match upgrade(&head.bytes, head.len) {
        Ok((origin, key)) => (
            if origin { Trust::Remote } else { trust },
            key,
            head.bytes[head.len..].to_vec(),
        ),
        Err((status, extra)) => {
            let _ = respond(&mut s, status, extra, "").await;
            return;
        }
    };
    let accept = derive_accept_key(key.as_bytes());
    let ok = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
    );
    if s.write_all(ok.as_bytes()).await.is_err() {
        return;
    }
    let cfg = WebSocketConfig::default()
        .read_buffer_size(16 * 1024)
        .write_buffer_size(16 * 1024)
        .max_message_size(Some(HARD_MAX_MESSAGE))
        .max_frame_size(Some(HARD_MAX_MESSAGE));
    let ws = WebSocketStream::from_partially_read(s, rest, Role::Server, Some(cfg)).await;
    bridge(d.shutdown_rx(), face, ws, trust).await;
}

/// A request head read off the socket (`bytes[..len]`; anything after it is WebSocket data).
struct Head {
    bytes: Vec<u8>,
    len: usize,
}

/// Reads until the blank line ending the head; `Err` carries the HTTP status to answer.
async fn read_head(s: &mut TcpStream) -> Result<Head, &'static str> {
    let mut bytes = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let n = s.read(&mut chunk).await.map_err(|_| "400 Bad Request")?;
        if n == 0 {
            return Err("400 Bad Request");
        }
        bytes.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 64];
        match httparse::Request::new(&mut headers).parse(&bytes) {
            Ok(httparse::Status::Complete(len)) => return Ok(Head { bytes, len }),
            Ok(httparse::Status::Partial) if bytes.len() < MAX_HEAD => {}
            Ok(httparse::Status::Partial) | Err(httparse::Error::TooManyHeaders) => {
                return Err("431 Request Header Fields Too Large")
            }
            Err(_) => return Err("400 Bad Request"),
        }
    }
}

/// Checks the upgrade request: `Ok((has_origin, sec_websocket_key))`, or the status (and
/// extra headers) to refuse it with.
fn upgrade(bytes: &[u8], len: usize) -> Result<(bool, String), (&'static str, &'static str)> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    if !matches!(req.parse(&bytes[..len]), Ok(httparse::Status::Complete(_))) {
        return Err(("400 Bad Request", ""));
    }
    let path = req.path.unwrap_or("");
    if path.split('?').next() != Some(PATH) {
        return Err(("404 Not Found", ""));
    }
    if req.method != Some("GET") {
        return Err(("405 Method Not Allowed", "Allow: GET\r\n"));
    }
    let header = |name: &str| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .and_then(|h| std::str::from_utf8(h.value).ok())
            .map(str::trim)
    };
    let has_token = |name: &str, token: &str| {
        header(name).is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    };
    let upgrade_required = (
        "426 Upgrade Required",
        "Upgrade: websocket\r\nConnection: Upgrade\r\n",
    );
    if !has_token("upgrade", "websocket") || !has_token("connection", "upgrade") {
        return Err(upgrade_required);
    }
    if header("sec-websocket-version") != Some("13") {
        return Err(("426 Upgrade Required", "Sec-WebSocket-Version: 13\r\n"));
    }
    let key = header("sec-websocket-key").filter(|k| !k.is_empty());
    let key = key.ok_or(("400 Bad Request", ""))?;
    Ok((header("origin").is_some(), key.to_string()))
}

/// A plain HTTP answer that closes the connection.
async fn respond(s: &mut TcpStream, status: &str, extra: &str, body: &str) -> std::io::Result<()> {
    let body = if body.is_empty() { status } else { body };
    let msg = format!(
        "HTTP/1.1 {status}\r\n{extra}Content-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}\n",
        body.len() + 1
    );
    s.write_all(msg.as_bytes()).await?;
    s.shutdown().await
}

/// Runs the handler on one end of a pipe and pumps messages between the WebSocket and the
/// other end, until either side ends; then closes the WebSocket with a close frame.
async fn bridge(stop: watch::Receiver<bool>, face: Arc<Face>, ws: Ws, trust: Trust) {
    let (ours, theirs) = tokio::io::duplex(PIPE);
    tokio::spawn(crate::cowchat::serve(face, theirs, trust));
    let (rd, wr) = tokio::io::split(ours);
    let (mut sink, stream) = ws.split();
    let (fatal_tx, fatal_rx) = oneshot::channel();
    let mut inbound = tokio::spawn(pump_in(stream, wr, fatal_tx));
    let close = pump_out(&mut sink, rd, fatal_rx).await;
    let fatal = close.is_some();
    let close = match close {
        Some(c) => c,
        None if *stop.borrow() => (CloseCode::Away, "daemon stopping"),
        None => (CloseCode::Normal, ""),
    };
    let frame = CloseFrame {
        code: close.0,
        reason: close.1.into(),
    };
    if sink.send(Message::Close(Some(frame))).await.is_err() {
        inbound.abort();
        return;
    }
    // Wait for the peer's close frame, so it reads ours before the socket goes away.
    match tokio::time::timeout(CLOSE_GRACE, &mut inbound).await {
        Ok(Ok(stream)) if fatal => {
            // The rest of the oversized message is still arriving: read and drop it, or
            // closing with unread data would reset the connection under our close frame.
            if let Ok(mut ws) = sink.reunite(stream) {
                let _ = tokio::time::timeout(CLOSE_GRACE, drain(ws.get_mut())).await;
            }
        }
        Ok(_) => {}
        Err(_) => inbound.abort(),
    }
}

/// Reads and discards until the peer closes (bounded by the caller's timeout).
async fn drain(s: &mut TcpStream) {
    let mut buf = vec![0u8; 64 * 1024];
    while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
}

/// WebSocket → handler: each data message becomes one line. A JSON text may contain
/// newlines only as whitespace, so they are turned into spaces (a pretty-printed frame still
/// is one frame). Ends at the peer's close, on error, or when the handler has gone.
async fn pump_in<W: AsyncWrite + Unpin>(
    mut stream: SplitStream<Ws>,
    mut wr: W,
    fatal: oneshot::Sender<(CloseCode, &'static str)>,
) -> SplitStream<Ws> {
    let mut handler_gone = false;
    while let Some(m) = stream.next().await {
        let data: &[u8] = match &m {
            Ok(Message::Text(t)) => t.as_bytes(),
            Ok(Message::Binary(b)) => b,
            Ok(Message::Close(_)) => break,
            // Pings are answered by the WebSocket layer; pongs need nothing.
            Ok(_) => continue,
            Err(WsError::Capacity(CapacityError::MessageTooLong { .. })) => {
                let _ = fatal.send((CloseCode::Size, "message too large"));
                break;
            }
            Err(e) => {
                tracing::debug!(error = %e, "cowchat ws read");
                break;
            }
        };
        if handler_gone {
            continue;
        }
        let line: std::borrow::Cow<[u8]> = if data.contains(&b'\n') {
            data.iter()
                .map(|&b| if b == b'\n' { b' ' } else { b })
                .collect::<Vec<u8>>()
                .into()
        } else {
            data.into()
        };
        let w = async {
            wr.write_all(&line).await?;
            wr.write_all(b"\n").await
        };
        if w.await.is_err() {
            handler_gone = true;
        }
    }
    let _ = wr.shutdown().await;
    stream
}

/// Handler → WebSocket: each line is one text message; lines already waiting are sent in
/// one flush. Returns the close code to use when the inbound side hit a fatal error, `None`
/// when the handler ended.
async fn pump_out<R: tokio::io::AsyncRead + Unpin>(
    sink: &mut SplitSink<Ws, Message>,
    rd: R,
    mut fatal: oneshot::Receiver<(CloseCode, &'static str)>,
) -> Option<(CloseCode, &'static str)> {
    let mut rd = BufReader::with_capacity(16 * 1024, rd);
    let mut line = Vec::with_capacity(1024);
    let mut inbound_done = false;
    loop {
        line.clear();
        let got = tokio::select! {
            r = rd.read_until(b'\n', &mut line) => r,
            f = &mut fatal, if !inbound_done => {
                let Ok(code) = f else {
                    // The inbound side ended normally; the handler sees EOF and ends too.
                    inbound_done = true;
                    continue;
                };
                let e = WireError::new(
                    ErrorCode::FrameTooLarge,
                    format!("message exceeds {HARD_MAX_MESSAGE} bytes; closing"),
                );
                let f = convene_cowchat::error_frame("ws-close", None, &e);
                let _ = sink.send(text(f)).await;
                return Some(code);
            }
        };
        match got {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
        while line.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            line.pop();
        }
        let msg = text(std::mem::take(&mut line));
        let more = rd.buffer().contains(&b'\n');
        let sent = if more {
            sink.feed(msg).await
        } else {
            sink.send(msg).await
        };
        if sent.is_err() {
            return None;
        }
    }
}

fn text(line: Vec<u8>) -> Message {
    match String::from_utf8(line) {
        Ok(s) => Message::text(s),
        Err(e) => Message::text(String::from_utf8_lossy(e.as_bytes()).into_owned()),
    }
}
