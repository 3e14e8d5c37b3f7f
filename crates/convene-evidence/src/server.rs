//! Out-of-process verifier (§7.4, §8): a Unix-socket server that alone holds the key.

use crate::error::{EvidenceError, IntakeError};
use crate::hook::ToolGate;
use crate::intake;
use crate::issuer::{IssuedReceipt, Verifier};
use crate::live::LiveVerifier;
use crate::receipt::Receipt;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Default out-of-process verifier timeout (§8.2).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(5000);
/// Largest accepted request line (intake limit plus envelope overhead).
const MAX_LINE: usize = 256 * 1024;

/// Handle one request object; never panics across the socket.
pub fn handle(v: &Verifier, req: &Value) -> Value {
    match req.get("op").and_then(Value::as_str) {
        Some("issue") => {
            let Some(i) = req.get("intake") else {
                return json!({"ok": false, "error": {"error_code": "INTAKE_MALFORMED",
                    "error_message": "missing intake", "retry_after": null, "trace_id": null}});
            };
            let r = match req.get("audience") {
                None | Some(Value::Null) => v.issue(i),
                Some(Value::String(a)) => v.issue_for(i, a),
                // Not silently the default audience: the caller named one we cannot read.
                Some(_) => {
                    return json!({"ok": false, "error": {"error_code": "INTAKE_MALFORMED",
                        "error_message": "audience must be an absolute URI",
                        "retry_after": null,
                        "trace_id": i.get("trace_id").and_then(Value::as_str)}})
                }
            };
            match r.map(|x| x.bundle()) {
                Ok(Ok(b)) => json!({"ok": true, "bundle": b}),
                Ok(Err(_)) => json!({"ok": false, "error": {"error_code": "INTAKE_FAILED",
                    "error_message": "intake processing failed", "retry_after": null, "trace_id": null}}),
                Err(e) => json!({"ok": false, "error": e.to_response()}),
            }
        }
        Some("finalize") => {
            let parsed = req
                .get("receipt")
                .map(Receipt::from_value)
                .transpose()
                .ok()
                .flatten();
            match (parsed, req.get("response")) {
                (Some(r), Some(resp)) => match v.finalize(&r, resp).and_then(|f| f.to_value()) {
                    Ok(f) => json!({"ok": true, "receipt": f}),
                    Err(_) => refusal(
                        "REJECTED",
                        "the receipt cannot be finalized by this verifier",
                        Some(&r.trace_id),
                    ),
                },
                _ => refusal(
                    "MALFORMED",
                    "finalize needs a receipt issued by this verifier and a response",
                    None,
                ),
            }
        }
        Some("public") => json!({
            "ok": true,
            "issuer": v.settings().issuer,
            "public_key": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, v.keys().public().to_bytes()),
            "fingerprint": v.keys().fingerprint(),
            "config": v.config(),
            "config_hash": v.config_hash(),
            "manifest": v.manifest(),
        }),
        _ => refusal(
            "MALFORMED",
            "unknown op: one of issue, finalize, public",
            None,
        ),
    }
}

/// An error answer with the §3.4 fields (`error_code`, `error_message`, `retry_after`,
/// `trace_id`), like intake errors, so clients parse one shape.
fn refusal(code: &str, message: &str, trace_id: Option<&str>) -> Value {
    json!({"ok": false, "error": {"error_code": code, "error_message": message,
        "retry_after": null, "trace_id": trace_id}})
}

/// Connections `verifier serve` handles at once (a thread each); one more is answered with a
/// refusal and closed, so a client that opens connections without end cannot exhaust the
/// key-holding process.
pub const MAX_CONCURRENT_CONNS: usize = 128;

fn serve_conn(v: &LiveVerifier, stream: UnixStream) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    // A client that stops reading its answers does not pin this thread for good.
    stream.set_write_timeout(Some(Duration::from_secs(30)))?;
    let mut w = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    loop {
        // Bytes, not a String: a line that is not UTF-8 is a malformed request to answer,
        // not a read error that drops the connection unanswered.
        let mut line = Vec::new();
        let n = reader
            .by_ref()
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut line)?;
        if n == 0 {
            return Ok(());
        }
        if !line.ends_with(b"\n") && n >= MAX_LINE {
            // Beyond the §3.2 total limit. Reading on would serve the rest of this line as
            // a request of its own, so it is skipped (bounded) and the connection ends.
            skip_line(&mut reader, DRAIN_MAX)?;
            let e = IntakeError::new(
                crate::error::IntakeErrorCode::IntakeOverflow,
                "intake message exceeds 128 KB",
            );
            let mut s = json!({"ok": false, "error": e.to_response()}).to_string();
            s.push('\n');
            w.write_all(s.as_bytes())?;
            return Ok(());
        }
        let resp = match serde_json::from_slice::<Value>(&line) {
            Ok(req) => handle(&v.get(), &req),
            Err(_) => json!({"ok": false, "error": {"error_code": "INTAKE_MALFORMED",
                "error_message": "request is not valid JSON", "retry_after": null, "trace_id": null}}),
        };
        let mut s = resp.to_string();
        s.push('\n');
        w.write_all(s.as_bytes())?;
    }
}

/// How much of an oversize request line is read and dropped before the connection closes
/// (closing on unread data would reset it before the client reads the refusal).
const DRAIN_MAX: usize = 16 * 1024 * 1024;

/// Drop input up to and including the next newline, at most `max` bytes.
fn skip_line(r: &mut impl BufRead, max: usize) -> std::io::Result<()> {
    let mut skipped = 0;
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        if let Some(i) = buf.iter().position(|&b| b == b'\n') {
            r.consume(i + 1);
            return Ok(());
        }
        let n = buf.len();
        r.consume(n);
        skipped += n;
        if skipped > max {
            return Ok(());
        }
    }
}

/// Serve forever (or for `max_conns` connections) on a Unix socket.
pub fn serve(
    v: Arc<LiveVerifier>,
    socket: &Path,
    max_conns: Option<usize>,
) -> Result<(), EvidenceError> {
    if socket.exists() {
        std::fs::remove_file(socket)?;
    }
    let listener = UnixListener::bind(socket)?;
    // Only the owner may talk to the key-holding process.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))?;
    }
    let mut served = 0usize;
    let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for conn in listener.incoming() {
        let Ok(mut stream) = conn else { continue };
        if open.load(std::sync::atomic::Ordering::Acquire) >= MAX_CONCURRENT_CONNS {
            let mut s = refusal(
                "BUSY",
                "too many connections to the verifier; retry later",
                None,
            )
            .to_string();
            s.push('\n');
            let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
            let _ = std::io::Write::write_all(&mut stream, s.as_bytes());
            continue;
        }
        open.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let v = v.clone();
        let open = open.clone();
        std::thread::spawn(move || {
            let _ = serve_conn(&v, stream);
            open.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        });
        served += 1;
        if max_conns.is_some_and(|m| served >= m) {
            break;
        }
    }
    Ok(())
}

/// Client for the out-of-process verifier; every failure blocks the invocation.
pub struct RemoteVerifier {
    socket: PathBuf,
    timeout: Duration,
    pinned: Option<ed25519_dalek::VerifyingKey>,
}

impl RemoteVerifier {
    /// Client with the §8.2 default timeout of 5000 ms.
    pub fn new(socket: &Path) -> Self {
        Self {
            socket: socket.to_path_buf(),
            timeout: DEFAULT_TIMEOUT,
            pinned: None,
        }
    }

    /// Only accept receipts signed by this key (guards against a spoofed socket).
    pub fn with_pinned_key(mut self, pk: ed25519_dalek::VerifyingKey) -> Self {
        self.pinned = Some(pk);
        self
    }

    fn check_pin(&self, r: &Receipt) -> Result<(), EvidenceError> {
        match &self.pinned {
            Some(pk) if !r.verify_signature(pk) => Err(EvidenceError::SignatureInvalid),
            _ => Ok(()),
        }
    }

    /// Override the timeout.
    pub fn with_timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// Send one request and wait (bounded) for its answer.
    pub fn call(&self, req: &Value) -> Result<Value, EvidenceError> {
        let stream = UnixStream::connect(&self.socket)
            .map_err(|_| EvidenceError::Unreachable("verifier socket".into()))?;
        stream.set_read_timeout(Some(self.timeout))?;
        stream.set_write_timeout(Some(self.timeout))?;
        let mut w = stream.try_clone()?;
        let mut s = req.to_string();
        s.push('\n');
        if let Err(e) = w.write_all(s.as_bytes()) {
            // A verifier that refuses the connection (BUSY) answers and closes before reading
            // the request; its answer is the better error, so read it if it is there.
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                return Err(map_io(e));
            }
        }
        let mut line = String::new();
        let n = BufReader::new(stream)
            .read_line(&mut line)
            .map_err(map_io)?;
        if n == 0 {
            return Err(EvidenceError::Unreachable(
                "verifier closed the connection".into(),
            ));
        }
        Ok(serde_json::from_str(&line)?)
    }

    /// Ask the verifier to bind a response to a receipt.
    pub fn finalize(&self, r: &Receipt, response: &Value) -> Result<Receipt, EvidenceError> {
        let resp =
            self.call(&json!({"op": "finalize", "receipt": r.to_value()?, "response": response}))?;
        match resp.get("receipt") {
            Some(x) if resp["ok"] == true => {
                let r = Receipt::from_value(x)?;
                self.check_pin(&r)?;
                Ok(r)
            }
            _ => Err(EvidenceError::Rejected("finalize refused".into())),
        }
    }
}

fn map_io(e: std::io::Error) -> EvidenceError {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => EvidenceError::Timeout,
        _ => EvidenceError::Unreachable("verifier i/o".into()),
    }
}

impl ToolGate for RemoteVerifier {
    fn decide(&self, intake_v: &Value) -> Result<IssuedReceipt, EvidenceError> {
        let resp = self.call(&json!({"op": "issue", "intake": intake_v}))?;
        if resp.get("ok") != Some(&Value::Bool(true)) {
            let code = resp["error"]["error_code"]
                .as_str()
                .unwrap_or("INTAKE_FAILED");
            let msg = resp["error"]["error_message"]
                .as_str()
                .unwrap_or("verifier refused");
            let c = match code {
                "INTAKE_MISSING_FIELD" => crate::IntakeErrorCode::IntakeMissingField,
                "INTAKE_OVERFLOW" => crate::IntakeErrorCode::IntakeOverflow,
                "INTAKE_TIMEOUT" => crate::IntakeErrorCode::IntakeTimeout,
                "INTAKE_VERSION_UNSUPPORTED" => crate::IntakeErrorCode::IntakeVersionUnsupported,
                "INTAKE_MALFORMED" => crate::IntakeErrorCode::IntakeMalformed,
                _ => crate::IntakeErrorCode::IntakeFailed,
            };
            return Err(IntakeError::new(c, msg).into());
        }
        let b = &resp["bundle"];
        let receipt = Receipt::from_value(&b["receipt"])?;
        self.check_pin(&receipt)?;
        let command = intake::parse_value(&b["command"])?;
        // The receipt must be about the call we asked for, not some other one.
        let asked = intake::parse_value(intake_v)?;
        if command.canonical_params != asked.canonical_params
            || command.tool != asked.tool
            || receipt.trace_id != asked.trace_id
        {
            return Err(EvidenceError::Rejected(
                "verifier answered for another call".into(),
            ));
        }
        Ok(IssuedReceipt {
            receipt,
            command,
            latency_us: b["latency_us"].as_u64().unwrap_or(0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::KeyMaterial;
    use crate::receipt::Verdict;
    use crate::rules::default_rules;
    use crate::VerifierSettings;

    #[test]
    fn ccs_3_1_4_out_of_process_round_trip_and_pinning() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("v.sock");
        let keys = KeyMaterial::generate(None);
        let v = Arc::new(crate::live::LiveVerifier::new(
            Verifier::new(VerifierSettings::default(), keys.clone(), default_rules()).unwrap(),
        ));
        let s2 = sock.clone();
        let h = std::thread::spawn(move || serve(v, &s2, Some(3)));
        for _ in 0..100 {
            if sock.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let intake = json!({"intake_version":"1.3","agent_id":"a","tool":"search_web",
            "params":{"q":"x"},"timestamp":1.0,"trace_id":"t1"});
        let client = RemoteVerifier::new(&sock).with_pinned_key(keys.public());
        let got = client.decide(&intake).unwrap();
        assert_eq!(got.receipt.verdict, Verdict::Allow);
        let fin = client.finalize(&got.receipt, &json!({"ok": 1})).unwrap();
        assert!(fin.response_hash.starts_with("sha256:"));
        // A different pinned key (spoofed verifier) is refused.
        let other = KeyMaterial::generate(None);
        let spoofed = RemoteVerifier::new(&sock).with_pinned_key(other.public());
        assert!(matches!(
            spoofed.decide(&intake),
            Err(EvidenceError::SignatureInvalid)
        ));
        h.join().unwrap().unwrap();
    }
}
