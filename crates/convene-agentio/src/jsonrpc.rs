//! JSON-RPC framing, one object per line: parsing what the peer sends and building what we
//! send. The protocols differ only in the [`Dialect`] (whether `"jsonrpc": "2.0"` is written,
//! and how the peer is named in error messages).
//!
//! Incoming messages are parsed leniently (unknown members are ignored, a `"jsonrpc"` member is
//! neither required nor checked), but a line that is not a JSON-RPC message at all is a
//! protocol violation.

use serde_json::{json, Map, Value};

use crate::PeerError;

/// How one protocol writes JSON-RPC.
#[derive(Debug, Clone, Copy)]
pub struct Dialect {
    /// Whether outgoing messages carry `"jsonrpc": "2.0"` (ACP does, Codex omits it).
    pub jsonrpc_member: bool,
    /// The peer as named in "invalid JSON from ..." errors.
    pub peer: &'static str,
}

/// One message read from the peer; `E` is the protocol crate's error.
#[derive(Debug)]
pub enum Incoming<E> {
    /// Peer→client request: must be answered.
    Request {
        /// Its id, echoed in the answer.
        id: Value,
        /// Its method.
        method: String,
        /// Its params (`Null` when absent).
        params: Value,
    },
    /// Peer→client notification.
    Notification {
        /// Its method.
        method: String,
        /// Its params (`Null` when absent).
        params: Value,
    },
    /// Answer to one of our requests; `id` is `None` when not one of ours (not a u64).
    Response {
        /// Our request id.
        id: Option<u64>,
        /// The `result`, or the `error` as [`PeerError::Rpc`].
        result: Result<Value, E>,
    },
}

impl Dialect {
    /// Parses one line. `Err` means the line is not a JSON-RPC message.
    pub fn parse_line<E: From<PeerError>>(&self, line: &[u8]) -> Result<Incoming<E>, E> {
        let protocol = |m: String| E::from(PeerError::Protocol(m));
        let value: Value = serde_json::from_slice(line)
            .map_err(|e| protocol(format!("invalid JSON from {}: {e}", self.peer)))?;
        let Value::Object(mut obj) = value else {
            return Err(protocol("JSON-RPC message is not an object".into()));
        };
        let method = match obj.remove("method") {
            None => None,
            Some(Value::String(m)) => Some(m),
            Some(_) => return Err(protocol("JSON-RPC method is not a string".into())),
        };
        let id = obj.remove("id");
        let params = obj.remove("params").unwrap_or(Value::Null);
        match (method, id) {
            (Some(method), Some(id)) => Ok(Incoming::Request { id, method, params }),
            (Some(method), None) => Ok(Incoming::Notification { method, params }),
            (None, Some(id)) => {
                let result = if let Some(err) = obj.remove("error") {
                    Err(E::from(rpc_error(&err)))
                } else if let Some(result) = obj.remove("result") {
                    Ok(result)
                } else {
                    return Err(protocol(
                        "JSON-RPC response has neither result nor error".into(),
                    ));
                };
                Ok(Incoming::Response {
                    id: id.as_u64(),
                    result,
                })
            }
            (None, None) => Err(protocol(
                "JSON-RPC message has neither method nor id".into(),
            )),
        }
    }

    /// Serializes a request line (with the trailing newline).
    pub fn request_line(&self, id: u64, method: &str, params: &Value) -> Vec<u8> {
        self.line(json!({"id": id, "method": method, "params": params}))
    }

    /// Serializes a notification line; `None` writes no `params` member at all.
    pub fn notification_line(&self, method: &str, params: Option<&Value>) -> Vec<u8> {
        match params {
            Some(params) => self.line(json!({"method": method, "params": params})),
            None => self.line(json!({"method": method})),
        }
    }

    /// Serializes a successful response to a peer request.
    pub fn result_line(&self, id: &Value, result: &Value) -> Vec<u8> {
        self.line(json!({"id": id, "result": result}))
    }

    /// Serializes an error response to a peer request.
    pub fn error_line(&self, id: &Value, code: i64, message: &str) -> Vec<u8> {
        self.line(json!({"id": id, "error": {"code": code, "message": message}}))
    }

    fn line(&self, body: Value) -> Vec<u8> {
        let v = match body {
            Value::Object(members) if self.jsonrpc_member => {
                // `"jsonrpc"` first, as peers that log raw lines print it.
                let mut m = Map::with_capacity(members.len() + 1);
                m.insert("jsonrpc".into(), json!("2.0"));
                m.extend(members);
                Value::Object(m)
            }
            other => other,
        };
        // Serializing a Value cannot fail (keys are strings); an empty object is a safe fallback.
        let mut out = serde_json::to_vec(&v).unwrap_or_else(|_| b"{}".to_vec());
        out.push(b'\n');
        out
    }
}

fn rpc_error(err: &Value) -> PeerError {
    let code = err.get("code").and_then(Value::as_i64);
    let message = err.get("message").and_then(Value::as_str);
    // Agents put the reason in `data` ("Internal error" + data.details: "Cannot enable
    // privileged approval modes in an untrusted folder."): keep it, bounded.
    let detail = err
        .get("data")
        .map(|d| match d.get("details").and_then(Value::as_str) {
            Some(s) => s.to_string(),
            None => d.to_string(),
        });
    match (code, message) {
        (Some(code), message) => PeerError::Rpc {
            code,
            message: match detail.filter(|d| !d.is_empty() && d != "null") {
                Some(d) => {
                    let d: String = d.chars().take(500).collect();
                    format!("{}: {d}", message.unwrap_or_default())
                }
                None => message.unwrap_or_default().to_string(),
            },
        },
        _ => PeerError::Protocol(format!("malformed JSON-RPC error object: {err}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_keeps_the_reason_the_agent_put_in_data() {
        let e = rpc_error(
            &serde_json::json!({"code": -32603, "message": "Internal error",
            "data": {"details": "Cannot enable privileged approval modes in an untrusted folder."}}),
        );
        assert_eq!(
            e,
            PeerError::Rpc {
                code: -32603,
                message: "Internal error: Cannot enable privileged approval modes in an untrusted folder.".into()
            }
        );
        let plain = rpc_error(&serde_json::json!({"code": 1, "message": "m"}));
        assert_eq!(
            plain,
            PeerError::Rpc {
                code: 1,
                message: "m".into()
            }
        );
    }

    const WITH: Dialect = Dialect {
        jsonrpc_member: true,
        peer: "agent",
    };
    const WITHOUT: Dialect = Dialect {
        jsonrpc_member: false,
        peer: "app-server",
    };

    #[test]
    fn writes_both_dialects_byte_for_byte() {
        assert_eq!(
            WITH.request_line(1, "m", &json!({"a": 1})),
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":{\"a\":1}}\n"
        );
        assert_eq!(
            WITHOUT.request_line(1, "m", &json!({"a": 1})),
            b"{\"id\":1,\"method\":\"m\",\"params\":{\"a\":1}}\n"
        );
        assert_eq!(
            WITH.error_line(&json!("x"), -1, "no"),
            b"{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"error\":{\"code\":-1,\"message\":\"no\"}}\n"
        );
        assert_eq!(
            WITHOUT.notification_line("initialized", None),
            b"{\"method\":\"initialized\"}\n"
        );
    }

    #[test]
    fn classifies_messages_with_or_without_jsonrpc() {
        for d in [WITH, WITHOUT] {
            let parse = |l: &[u8]| d.parse_line::<PeerError>(l);
            assert!(matches!(
                parse(br#"{"id":3,"result":{"a":1}}"#),
                Ok(Incoming::Response {
                    id: Some(3),
                    result: Ok(_)
                })
            ));
            assert!(matches!(
                parse(br#"{"jsonrpc":"2.0","id":3,"error":{"code":-32000,"message":"x"}}"#),
                Ok(Incoming::Response {
                    result: Err(PeerError::Rpc { code: -32000, .. }),
                    ..
                })
            ));
            assert!(matches!(
                parse(br#"{"jsonrpc":"2.0","id":"a","method":"fs/read_text_file"}"#),
                Ok(Incoming::Request { .. })
            ));
            assert!(matches!(
                parse(br#"{"method":"turn/started","params":{}}"#),
                Ok(Incoming::Notification { .. })
            ));
            for bad in [
                &b"not json"[..],
                b"[1]",
                b"{}",
                br#"{"id":1}"#,
                br#"{"method":3}"#,
            ] {
                assert!(matches!(parse(bad), Err(PeerError::Protocol(_))), "{bad:?}");
            }
        }
    }

    #[test]
    fn names_the_peer_in_parse_errors() {
        let r: Result<Incoming<PeerError>, PeerError> = WITHOUT.parse_line(b"nope");
        assert!(
            matches!(r, Err(PeerError::Protocol(m)) if m.starts_with("invalid JSON from app-server"))
        );
    }
}
