//! CCCC daemon IPC v1, the native wire format of Convene: one JSON object per line.
//! Request `{"v":1,"op":…,"args":{…}}`; response `{"v":1,"ok":true,"result":{…}}` or
//! `{"v":1,"ok":false,"result":{},"error":{"code","message","details"}}`.

pub mod client;

use serde_json::{json, Map, Value};

/// IPC version spoken.
pub const IPC_V: u64 = 1;

/// Largest request line accepted, newline included (CCCC's own limit is 16 MiB; the SDK
/// never sends more than 2 MB). Below the 4,000,000 bytes the SDK reads in one answer or
/// stream line, so no request can create an event that SDK clients cannot read back (such an
/// event stopped every SDK `events_stream` replaying past it, and its recipient's
/// `inbox_read` marked it read while the SDK refused the answer).
pub const MAX_REQUEST_BYTES: usize = 3_500_000;

/// A parsed request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Operation name.
    pub op: String,
    /// Arguments (an object; `{}` when omitted).
    pub args: Map<String, Value>,
}

/// Why a request line could not be parsed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ParseError {
    /// Wire code (`invalid_request`).
    pub code: &'static str,
    /// Explanation.
    pub message: String,
    /// The field at fault, when known.
    pub field: Option<&'static str>,
}

fn bad(message: impl Into<String>, field: Option<&'static str>) -> ParseError {
    ParseError {
        code: "invalid_request",
        message: message.into(),
        field,
    }
}

/// Parses one request line (without its newline). Unknown top-level keys are refused, as
/// CCCC does; `v`, when present, must be 1.
pub fn parse_request(line: &[u8]) -> Result<Request, ParseError> {
    let v: Value =
        serde_json::from_slice(line).map_err(|e| bad(format!("malformed JSON: {e}"), None))?;
    let Value::Object(mut o) = v else {
        return Err(bad("request must be a JSON object", None));
    };
    for k in o.keys() {
        if !matches!(k.as_str(), "v" | "op" | "args") {
            return Err(bad(
                format!("unknown field `{k}`, expected one of `v`, `op`, `args`"),
                None,
            ));
        }
    }
    match o.get("v") {
        None => {}
        Some(Value::Number(n)) if n.as_u64() == Some(IPC_V) => {}
        Some(other) => return Err(bad(format!("unsupported IPC version: {other}"), Some("v"))),
    }
    let op = match o.remove("op") {
        Some(Value::String(s)) if !s.is_empty() => s,
        Some(Value::String(_)) | None => return Err(bad("missing op", Some("op"))),
        Some(_) => return Err(bad("op must be a string", Some("op"))),
    };
    let args = match o.remove("args") {
        None => Map::new(),
        Some(Value::Object(m)) => m,
        Some(_) => return Err(bad("args must be an object", Some("args"))),
    };
    Ok(Request { op, args })
}

/// A success response line (with newline).
pub fn ok_line(result: Value) -> Vec<u8> {
    let mut v =
        serde_json::to_vec(&json!({"v": IPC_V, "ok": true, "result": result})).unwrap_or_default();
    v.push(b'\n');
    v
}

/// A success response line around an already-serialized `result` object (with newline).
pub fn ok_line_raw(result_json: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(result_json.len() + 32);
    v.extend_from_slice(b"{\"v\":1,\"ok\":true,\"result\":");
    v.extend_from_slice(result_json.as_bytes());
    v.extend_from_slice(b"}\n");
    v
}

/// An error response line (with newline).
pub fn err_line(code: &str, message: &str, details: Map<String, Value>) -> Vec<u8> {
    let mut v = serde_json::to_vec(&json!({
        "v": IPC_V, "ok": false, "result": {},
        "error": {"code": code, "message": message, "details": details}
    }))
    .unwrap_or_default();
    v.push(b'\n');
    v
}

/// A stream line carrying one stored event, spliced from its stored JSON without re-encoding.
pub fn event_line(event_json: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(event_json.len() + 24);
    v.extend_from_slice(b"{\"t\":\"event\",\"event\":");
    v.extend_from_slice(event_json.as_bytes());
    v.extend_from_slice(b"}\n");
    v
}

/// A stream heartbeat line.
pub fn heartbeat_line(ts: &str) -> Vec<u8> {
    let mut v = serde_json::to_vec(&json!({"t": "heartbeat", "ts": ts})).unwrap_or_default();
    v.push(b'\n');
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_a_plain_request() {
        let r = parse_request(br#"{"v":1,"op":"ping","args":{"x":1}}"#).unwrap();
        assert_eq!(r.op, "ping");
        assert_eq!(r.args.get("x"), Some(&json!(1)));
    }

    #[test]
    fn refuses_bad_shapes_with_invalid_request() {
        for line in [
            &b"not json"[..],
            b"[1,2]",
            br#"{"v":1}"#,
            br#"{"v":2,"op":"ping"}"#,
            br#"{"v":1,"op":"ping","args":[]}"#,
            br#"{"v":1,"op":"ping","extra":1}"#,
            br#"{"v":1,"op":7}"#,
        ] {
            let e = parse_request(line).unwrap_err();
            assert_eq!(
                e.code,
                "invalid_request",
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn raw_ok_line_equals_the_value_form() {
        let raw = ok_line_raw(r#"{"a":1}"#);
        let val = ok_line(json!({"a": 1}));
        let a: Value = serde_json::from_slice(&raw).unwrap();
        let b: Value = serde_json::from_slice(&val).unwrap();
        assert_eq!(a, b);
        assert!(raw.ends_with(b"\n"));
    }

    #[test]
    fn event_line_is_valid_json_wrapping_the_event() {
        let l = event_line(r#"{"v":1,"id":"a"}"#);
        let v: Value = serde_json::from_slice(&l).unwrap();
        assert_eq!(v["t"], "event");
        assert_eq!(v["event"]["id"], "a");
    }

    proptest! {
        #[test]
        fn parser_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse_request(&bytes);
        }

        #[test]
        fn parser_never_panics_on_json_like_text(s in r#"\{("(v|op|args|x)":(1|"ping"|\{\}|\[\]|null|-?[0-9]{1,20}|"[a-z]{0,5}"),?){0,4}\}"#) {
            let _ = parse_request(s.as_bytes());
        }
    }
}
