//! Byte transports carrying one JSON frame per line (Unix socket, TCP) or per WebSocket
//! text message (plain or over TLS). Reads take a deadline; a read that times out keeps its partial line, so
//! the next read resumes where it stopped.

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use crate::endpoint::url_host_port;
use crate::tls::{TlsConfig, TlsStream};
use crate::{Endpoint, Error, Result};

/// Largest frame the client accepts from a server (the server's own limit is 1 MiB inbound;
/// history replies can be larger).
const MAX_LINE: usize = 64 << 20;
/// How long a connect may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) enum Raw {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Raw {
    fn set_read_timeout(&self, d: Option<Duration>) -> std::io::Result<()> {
        match self {
            Raw::Unix(s) => s.set_read_timeout(d),
            Raw::Tcp(s) => s.set_read_timeout(d),
        }
    }
}

impl std::io::Read for Raw {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Raw::Unix(s) => s.read(buf),
            Raw::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Raw {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Raw::Unix(s) => s.write(buf),
            Raw::Tcp(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Raw::Unix(s) => s.flush(),
            Raw::Tcp(s) => s.flush(),
        }
    }
}

/// What a WebSocket runs over: TCP, or TLS over TCP.
pub(crate) enum WsStream {
    Plain(TcpStream),
    Tls(Box<TlsStream>),
}

impl WsStream {
    /// The socket, for read timeouts (TLS keeps a partial record across a timed-out read,
    /// so a deadline never corrupts the stream).
    fn tcp(&self) -> &TcpStream {
        match self {
            WsStream::Plain(s) => s,
            WsStream::Tls(s) => s.get_ref(),
        }
    }
}

impl std::io::Read for WsStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            WsStream::Plain(s) => s.read(buf),
            WsStream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for WsStream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            WsStream::Plain(s) => s.write(buf),
            WsStream::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            WsStream::Plain(s) => s.flush(),
            WsStream::Tls(s) => s.flush(),
        }
    }
}

/// One open connection.
pub(crate) enum Conn {
    Lines {
        r: BufReader<Raw>,
        w: Raw,
        partial: Vec<u8>,
    },
    Ws(Box<tungstenite::WebSocket<WsStream>>),
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

fn tcp(addr: &str) -> Result<TcpStream> {
    use std::net::ToSocketAddrs;
    let mut last = None;
    for a in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&a, CONNECT_TIMEOUT) {
            Ok(s) => {
                // Frames are small and latency-bound.
                s.set_nodelay(true)?;
                return Ok(s);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last
        .map(Error::Io)
        .unwrap_or_else(|| Error::BadUrl(addr.into())))
}

/// Remaining time until `deadline`, at least 1 ms (a zero timeout means "block forever").
fn remaining(deadline: Option<Instant>) -> Option<Duration> {
    deadline.map(|d| {
        d.saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    })
}

impl Conn {
    /// Opens a connection to `ep`; `tls` is the trust configuration of `wss://` (Mozilla's
    /// roots only when `None`).
    pub(crate) fn open(ep: &Endpoint, tls: Option<&TlsConfig>) -> Result<Self> {
        match ep {
            Endpoint::Unix(p) => {
                let s = UnixStream::connect(p)?;
                let w = Raw::Unix(s.try_clone()?);
                Ok(Self::lines(Raw::Unix(s), w))
            }
            Endpoint::Tcp(a) => {
                let s = tcp(a)?;
                let w = Raw::Tcp(s.try_clone()?);
                Ok(Self::lines(Raw::Tcp(s), w))
            }
            Endpoint::Ws(url) | Endpoint::Wss(url) => {
                let (host, port) = url_host_port(url)?;
                // An IPv6 literal needs its brackets back to be resolved with a port.
                let addr = if host.contains(':') {
                    format!("[{host}]:{port}")
                } else {
                    format!("{host}:{port}")
                };
                let s = tcp(&addr)?;
                s.set_read_timeout(Some(CONNECT_TIMEOUT))?;
                let stream = match ep {
                    Endpoint::Wss(_) => {
                        let default;
                        let tls = match tls {
                            Some(t) => t,
                            None => {
                                default = TlsConfig::new(None)?;
                                &default
                            }
                        };
                        WsStream::Tls(Box::new(tls.connect(&host, s)?))
                    }
                    _ => WsStream::Plain(s),
                };
                let (ws, _resp) = tungstenite::client(url.as_str(), stream)
                    .map_err(|e| Error::Ws(e.to_string()))?;
                Ok(Self::Ws(Box::new(ws)))
            }
        }
    }

    fn lines(r: Raw, w: Raw) -> Self {
        Self::Lines {
            r: BufReader::with_capacity(64 * 1024, r),
            w,
            partial: Vec::new(),
        }
    }

    /// Sends one frame (a JSON text without newline).
    pub(crate) fn send(&mut self, text: &str) -> Result<()> {
        match self {
            Conn::Lines { w, .. } => {
                let mut line = Vec::with_capacity(text.len() + 1);
                line.extend_from_slice(text.as_bytes());
                line.push(b'\n');
                w.write_all(&line)?;
                w.flush()?;
                Ok(())
            }
            Conn::Ws(ws) => ws.send(tungstenite::Message::text(text)).map_err(ws_err),
        }
    }

    /// Reads one frame's text; `Ok(None)` when `deadline` passed first.
    pub(crate) fn recv(&mut self, deadline: Option<Instant>) -> Result<Option<String>> {
        match self {
            Conn::Lines { r, partial, .. } => loop {
                // A full line may already be buffered: no syscall, no timeout needed.
                if !r.buffer().contains(&b'\n') {
                    r.get_ref().set_read_timeout(remaining(deadline))?;
                }
                match r.read_until(b'\n', partial) {
                    Ok(0) => return Err(Error::Closed),
                    Ok(_) if partial.last() == Some(&b'\n') => {
                        let line = std::mem::take(partial);
                        let text =
                            String::from_utf8(line).map_err(|e| Error::BadFrame(e.to_string()))?;
                        let text = text.trim();
                        if text.is_empty() {
                            continue;
                        }
                        return Ok(Some(text.to_string()));
                    }
                    Ok(_) => return Err(Error::Closed), // EOF inside a line
                    Err(e) if is_timeout(&e) => {
                        if partial.len() > MAX_LINE {
                            return Err(Error::TooLarge(format!("over {MAX_LINE} bytes")));
                        }
                        if deadline.is_some_and(|d| Instant::now() >= d) {
                            return Ok(None);
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(e.into()),
                }
            },
            Conn::Ws(ws) => loop {
                ws.get_ref().tcp().set_read_timeout(remaining(deadline))?;
                match ws.read() {
                    Ok(tungstenite::Message::Text(t)) => {
                        let t = t.as_str().trim();
                        if !t.is_empty() {
                            return Ok(Some(t.to_string()));
                        }
                    }
                    Ok(tungstenite::Message::Binary(b)) => {
                        let t = String::from_utf8(b.to_vec())
                            .map_err(|e| Error::BadFrame(e.to_string()))?;
                        return Ok(Some(t.trim().to_string()));
                    }
                    Ok(tungstenite::Message::Close(_)) => return Err(Error::Closed),
                    Ok(_) => {} // ping/pong/raw frames: tungstenite answers pings itself
                    Err(tungstenite::Error::Io(e)) if is_timeout(&e) => {
                        if deadline.is_some_and(|d| Instant::now() >= d) {
                            return Ok(None);
                        }
                    }
                    Err(e) => return Err(ws_err(e)),
                }
            },
        }
    }
}

fn ws_err(e: tungstenite::Error) -> Error {
    match e {
        tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed => Error::Closed,
        tungstenite::Error::Io(e) => Error::Io(e),
        tungstenite::Error::Capacity(e) => Error::TooLarge(e.to_string()),
        e => Error::Ws(e.to_string()),
    }
}
