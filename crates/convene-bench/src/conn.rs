//! A minimal blocking NDJSON client over a Unix socket, shaped for measurement: requests are
//! pre-encoded byte lines, responses are checked with a byte-prefix test on the hot path and
//! only parsed when something looks wrong (or when the caller needs the result).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

/// The prefix of every successful response line of both daemons.
const OK_PREFIX: &[u8] = br#"{"v":1,"ok":true"#;

/// Errors are plain strings: the bench reports them and stops.
pub type Res<T> = Result<T, String>;

/// One connection; requests on it are answered in order.
pub struct Conn {
    reader: BufReader<UnixStream>,
    line: Vec<u8>,
}

impl Conn {
    /// Connects to the socket at `path`.
    pub fn connect(path: &Path) -> Res<Self> {
        let s =
            UnixStream::connect(path).map_err(|e| format!("connect {}: {e}", path.display()))?;
        Ok(Self {
            reader: BufReader::with_capacity(1 << 20, s),
            line: Vec::with_capacity(4096),
        })
    }

    /// Sets a read timeout (None = block forever).
    pub fn set_read_timeout(&self, t: Option<Duration>) -> Res<()> {
        self.reader
            .get_ref()
            .set_read_timeout(t)
            .map_err(|e| e.to_string())
    }

    /// Writes raw bytes (one or more request lines).
    pub fn write(&mut self, bytes: &[u8]) -> Res<()> {
        self.reader
            .get_mut()
            .write_all(bytes)
            .map_err(|e| format!("write: {e}"))
    }

    /// Reads one line into the internal buffer and returns it (without checking it).
    /// Returns an empty slice at EOF.
    pub fn read_line(&mut self) -> Res<&[u8]> {
        self.line.clear();
        self.reader
            .read_until(b'\n', &mut self.line)
            .map_err(|e| format!("read: {e}"))?;
        Ok(&self.line)
    }

    /// Reads one line into `buf` (cleared first); returns its length (0 at EOF).
    pub fn read_line_into(&mut self, buf: &mut Vec<u8>) -> Res<usize> {
        buf.clear();
        self.reader
            .read_until(b'\n', buf)
            .map_err(|e| format!("read: {e}"))
    }

    /// Appends bytes up to and including the next newline to `buf` (kept on error, so a
    /// read timeout in the middle of a line loses nothing); returns the bytes added.
    pub fn read_append(&mut self, buf: &mut Vec<u8>) -> std::io::Result<usize> {
        self.reader.read_until(b'\n', buf)
    }

    /// Reads one response line and checks that it is a success.
    pub fn expect_ok(&mut self) -> Res<()> {
        let line = self.read_line()?;
        if line.starts_with(OK_PREFIX) {
            return Ok(());
        }
        Err(describe_failure(line))
    }

    /// Sends one pre-encoded request line and waits for a successful answer.
    pub fn roundtrip(&mut self, req: &[u8]) -> Res<()> {
        self.write(req)?;
        self.expect_ok()
    }

    /// Calls `op` with `args` and returns the parsed `result`.
    pub fn call(&mut self, op: &str, args: Value) -> Res<Value> {
        let mut req = serde_json::to_vec(&json!({"v": 1, "op": op, "args": args}))
            .map_err(|e| e.to_string())?;
        req.push(b'\n');
        self.write(&req)?;
        let line = self.read_line()?;
        if line.is_empty() {
            return Err(format!("{op}: connection closed"));
        }
        let v: Value =
            serde_json::from_slice(line).map_err(|e| format!("{op}: bad response ({e})"))?;
        convene_ipc::client::into_result(v).map_err(|e| format!("{op}: {e}"))
    }
}

/// Explains a response line that is not a success.
fn describe_failure(line: &[u8]) -> String {
    if line.is_empty() {
        return "connection closed by daemon".into();
    }
    match serde_json::from_slice::<Value>(line) {
        Ok(v) => match convene_ipc::client::into_result(v) {
            Ok(_) => "unexpected response layout (ok but not in the expected key order)".into(),
            Err(e) => format!("daemon error: {e}"),
        },
        Err(_) => format!(
            "unparsable response: {}",
            String::from_utf8_lossy(&line[..line.len().min(300)])
        ),
    }
}

/// Encodes a mail `send` request line to `bench-peer`.
pub fn send_line(group_id: &str, text: &str) -> Vec<u8> {
    let mut v = serde_json::to_vec(&json!({
        "v": 1,
        "op": "send",
        "args": {"group_id": group_id, "by": "user", "to": ["bench-peer"], "message_mode": "mail", "text": text}
    }))
    .expect("json");
    v.push(b'\n');
    v
}

/// Encodes a `ping` request line.
pub fn ping_line() -> Vec<u8> {
    b"{\"v\":1,\"op\":\"ping\",\"args\":{}}\n".to_vec()
}

/// A message body: unique, ~100 bytes, like a short agent note.
pub fn text(tag: &str, i: usize) -> String {
    format!("bench {tag} #{i:07}: the quick brown fox jumps over the lazy dog; status ok, next step queued.")
}
