//! Frame envelope: parse one inbound line, serialize outbound frames.

use serde_json::{Map, Value};

use crate::{ErrorCode, WireError};

/// An inbound frame.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// Client-chosen id (string or number), echoed as `reply_to` in the answer.
    pub id: Option<Value>,
    /// Frame type (`register`, `send_message`, `pong`, …).
    pub ftype: String,
    /// Set when the frame answers a server frame (e.g. `pong` to a server `ping`).
    pub reply_to: Option<Value>,
    /// Payload object (`{}` when absent or null).
    pub payload: Map<String, Value>,
}

/// A line that is not a valid frame. `id` is kept when it could be read, so the error frame
/// can still be correlated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid frame: {reason}")]
pub struct FrameError {
    /// The frame's `id`, if the line was an object with a usable `id`.
    pub id: Option<Value>,
    /// What is wrong.
    pub reason: String,
}

impl FrameError {
    fn new(id: Option<Value>, reason: impl Into<String>) -> Self {
        Self {
            id,
            reason: reason.into(),
        }
    }

    /// As a wire error (`invalid_frame`).
    pub fn to_wire(&self) -> WireError {
        WireError::new(ErrorCode::InvalidFrame, self.to_string())
    }
}

fn usable_id(v: Option<&Value>) -> Result<Option<Value>, ()> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v @ (Value::String(_) | Value::Number(_))) => Ok(Some(v.clone())),
        Some(_) => Err(()),
    }
}

/// Parses one line (without its newline).
pub fn parse_frame(line: &[u8]) -> Result<Frame, FrameError> {
    let v: Value = serde_json::from_slice(line)
        .map_err(|e| FrameError::new(None, format!("not JSON: {e}")))?;
    let Value::Object(mut o) = v else {
        return Err(FrameError::new(None, "a frame must be a JSON object"));
    };
    let id = usable_id(o.get("id"))
        .map_err(|_| FrameError::new(None, "id must be a string or a number"))?;
    let reply_to = usable_id(o.get("reply_to"))
        .map_err(|_| FrameError::new(id.clone(), "reply_to must be a string or a number"))?;
    let ftype = match o.remove("type") {
        Some(Value::String(t)) if !t.is_empty() => t,
        _ => return Err(FrameError::new(id, "type must be a non-empty string")),
    };
    let payload = match o.remove("payload") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(p)) => p,
        Some(_) => return Err(FrameError::new(id, "payload must be an object")),
    };
    Ok(Frame {
        id,
        ftype,
        reply_to,
        payload,
    })
}

/// An outbound frame.
#[derive(Debug, Clone)]
pub struct OutFrame<'a> {
    /// Server-assigned id (unique per connection).
    pub id: &'a str,
    /// Frame type.
    pub ftype: &'a str,
    /// The request this answers (`None` for pushes and server pings).
    pub reply_to: Option<&'a Value>,
    /// Payload object.
    pub payload: Value,
}

impl OutFrame<'_> {
    /// The NDJSON line, newline included.
    pub fn to_line(&self) -> Vec<u8> {
        let mut o = Map::with_capacity(4);
        o.insert("id".into(), Value::String(self.id.to_string()));
        o.insert("type".into(), Value::String(self.ftype.to_string()));
        if let Some(r) = self.reply_to {
            o.insert("reply_to".into(), r.clone());
        }
        o.insert("payload".into(), self.payload.clone());
        // A map of strings and Values always serializes.
        let mut out = serde_json::to_vec(&Value::Object(o)).unwrap_or_default();
        out.push(b'\n');
        out
    }
}

/// A frame line around an already serialized payload object (large answers are built as
/// bytes, without an intermediate JSON tree).
pub fn raw_line(id: &str, ftype: &str, reply_to: Option<&Value>, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 96);
    write_raw_line(&mut out, id, ftype, reply_to, payload);
    out
}

/// Appends a frame line around an already serialized payload (several frames sent as one
/// write).
pub fn write_raw_line(
    out: &mut Vec<u8>,
    id: &str,
    ftype: &str,
    reply_to: Option<&Value>,
    payload: &[u8],
) {
    write_frame_head(out, id, ftype, reply_to);
    out.extend_from_slice(payload);
    write_frame_tail(out);
}

/// Appends the start of a frame line, up to and including `"payload":`; the payload is
/// written next, then [`write_frame_tail`] (a large answer is written once, in place).
pub fn write_frame_head(out: &mut Vec<u8>, id: &str, ftype: &str, reply_to: Option<&Value>) {
    out.extend_from_slice(b"{\"id\":");
    push_json_str(out, id);
    out.extend_from_slice(b",\"type\":");
    push_json_str(out, ftype);
    if let Some(r) = reply_to {
        out.extend_from_slice(b",\"reply_to\":");
        // A string or a number (checked at parse time) always serializes.
        let _ = serde_json::to_writer(&mut *out, r);
    }
    out.extend_from_slice(b",\"payload\":");
}

/// Ends a frame line begun with [`write_frame_head`].
pub fn write_frame_tail(out: &mut Vec<u8>) {
    out.extend_from_slice(b"}\n");
}

/// Appends `s` as a JSON string literal.
pub fn push_json_str(out: &mut Vec<u8>, s: &str) {
    // Serializing a &str cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// An `error` frame answering `reply_to` (or unsolicited when the request had no usable id).
pub fn error_frame(id: &str, reply_to: Option<&Value>, e: &WireError) -> Vec<u8> {
    OutFrame {
        id,
        ftype: "error",
        reply_to,
        payload: match &e.details {
            None => serde_json::json!({"code": e.code.as_str(), "message": e.message}),
            Some(d) => {
                serde_json::json!({"code": e.code.as_str(), "message": e.message, "details": d})
            }
        },
    }
    .to_line()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_envelope_and_defaults_payload() {
        let f = parse_frame(br#"{"id":"b1","type":"ping"}"#).unwrap();
        assert_eq!(f.id, Some(json!("b1")));
        assert_eq!(f.ftype, "ping");
        assert!(f.payload.is_empty());
        let f = parse_frame(br#"{"id":7,"reply_to":"s1","type":"pong","payload":{}}"#).unwrap();
        assert_eq!(f.id, Some(json!(7)));
        assert_eq!(f.reply_to, Some(json!("s1")));
    }

    #[test]
    fn refuses_bad_frames_keeping_the_id_when_possible() {
        assert_eq!(parse_frame(b"{nope").unwrap_err().id, None);
        assert_eq!(parse_frame(b"[1]").unwrap_err().id, None);
        let e = parse_frame(br#"{"id":"x","payload":{}}"#).unwrap_err();
        assert_eq!(e.id, Some(json!("x")));
        let e = parse_frame(br#"{"id":"x","type":"ping","payload":[]}"#).unwrap_err();
        assert_eq!(e.id, Some(json!("x")));
        assert_eq!(e.to_wire().code, ErrorCode::InvalidFrame);
    }

    #[test]
    fn raw_line_matches_the_tree_serializer() {
        let rt = json!(7);
        let a = raw_line("s3", "ok", Some(&rt), br#"{"x":[1,"\u00e9"]}"#);
        let b = OutFrame {
            id: "s3",
            ftype: "ok",
            reply_to: Some(&rt),
            payload: json!({"x": [1, "é"]}),
        }
        .to_line();
        let (va, vb): (Value, Value) = (
            serde_json::from_slice(&a).unwrap(),
            serde_json::from_slice(&b).unwrap(),
        );
        assert_eq!(va, vb);
        assert_eq!(a.last(), Some(&b'\n'));
    }

    #[test]
    fn serializes_one_line_with_reply_to() {
        let rt = json!("b1");
        let line = OutFrame {
            id: "s1",
            ftype: "pong",
            reply_to: Some(&rt),
            payload: json!({}),
        }
        .to_line();
        assert_eq!(
            line,
            b"{\"id\":\"s1\",\"type\":\"pong\",\"reply_to\":\"b1\",\"payload\":{}}\n"
        );
        let e = error_frame("s2", None, &WireError::payload("bad"));
        let v: Value = serde_json::from_slice(&e).unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["payload"]["code"], "invalid_payload");
        assert!(v.get("reply_to").is_none());
    }
}
