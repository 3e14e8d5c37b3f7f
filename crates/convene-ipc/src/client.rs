//! A blocking IPC client, used by the CLI, tests and benchmarks.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

/// Where the daemon listens.
#[derive(Debug, Clone)]
pub enum Endpoint {
    /// A Unix socket path.
    Unix(PathBuf),
    /// A TCP address `host:port`.
    Tcp(String),
}

impl Endpoint {
    /// Reads `<home>/daemon/ccccd.addr.json`, falling back to `<home>/daemon/ccccd.sock`.
    pub fn discover(home: &Path) -> Endpoint {
        let addr = home.join("daemon").join("ccccd.addr.json");
        if let Ok(text) = std::fs::read_to_string(&addr) {
            if let Ok(v) = serde_json::from_str::<Value>(&text) {
                match v.get("transport").and_then(Value::as_str) {
                    Some("tcp") => {
                        let host = v.get("host").and_then(Value::as_str).unwrap_or("127.0.0.1");
                        let port = v.get("port").and_then(Value::as_u64).unwrap_or(0);
                        return Endpoint::Tcp(format!("{host}:{port}"));
                    }
                    Some("unix") => {
                        if let Some(p) = v.get("path").and_then(Value::as_str) {
                            return Endpoint::Unix(PathBuf::from(p));
                        }
                    }
                    _ => {}
                }
            }
        }
        Endpoint::Unix(home.join("daemon").join("ccccd.sock"))
    }
}

/// Client failures.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Could not connect or talk to the daemon.
    #[error("daemon unreachable: {0}")]
    Io(#[from] std::io::Error),
    /// The daemon answered something that is not a response.
    #[error("bad response: {0}")]
    BadResponse(String),
    /// The daemon answered `ok: false`.
    #[error("{code}: {message}")]
    Api {
        /// Error code.
        code: String,
        /// Message.
        message: String,
        /// Details.
        details: Value,
    },
}

trait Stream: std::io::Read + Write + Send {}
impl Stream for UnixStream {}
impl Stream for TcpStream {}

/// One connection to the daemon; requests on it are answered in order.
pub struct Client {
    reader: BufReader<Box<dyn Stream>>,
}

impl Client {
    /// Connects.
    pub fn connect(ep: &Endpoint) -> Result<Self, ClientError> {
        let s: Box<dyn Stream> = match ep {
            Endpoint::Unix(p) => Box::new(UnixStream::connect(p)?),
            Endpoint::Tcp(a) => {
                let s = TcpStream::connect(a)?;
                s.set_nodelay(true)?;
                Box::new(s)
            }
        };
        Ok(Self {
            reader: BufReader::new(s),
        })
    }

    /// Sends one raw request line and reads one response object.
    pub fn raw(&mut self, line: &[u8]) -> Result<Value, ClientError> {
        let w = self.reader.get_mut();
        w.write_all(line)?;
        if !line.ends_with(b"\n") {
            w.write_all(b"\n")?;
        }
        w.flush()?;
        self.read_item()
    }

    /// Reads one line as JSON (responses and stream items).
    pub fn read_item(&mut self) -> Result<Value, ClientError> {
        let mut buf = Vec::new();
        let n = self.reader.read_until(b'\n', &mut buf)?;
        if n == 0 {
            return Err(ClientError::BadResponse("connection closed".into()));
        }
        serde_json::from_slice(&buf).map_err(|e| ClientError::BadResponse(e.to_string()))
    }

    /// Calls `op` and returns `result`, or the API error.
    pub fn call(&mut self, op: &str, args: Value) -> Result<Value, ClientError> {
        let args = if args.is_null() {
            Value::Object(Map::new())
        } else {
            args
        };
        let line = serde_json::to_vec(&json!({"v": 1, "op": op, "args": args}))
            .map_err(|e| ClientError::BadResponse(e.to_string()))?;
        let resp = self.raw(&line)?;
        into_result(resp)
    }
}

/// Turns a response object into its result or its error.
pub fn into_result(resp: Value) -> Result<Value, ClientError> {
    if resp.get("ok").and_then(Value::as_bool) == Some(true) {
        return Ok(resp.get("result").cloned().unwrap_or(Value::Null));
    }
    let e = resp.get("error").cloned().unwrap_or(Value::Null);
    Err(ClientError::Api {
        code: e
            .get("code")
            .and_then(Value::as_str)
            .unwrap_or("error")
            .to_string(),
        message: e
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        details: e.get("details").cloned().unwrap_or(Value::Null),
    })
}
