//! The client: register, request/reply matched by `reply_to`, pushes queued in order, server
//! heartbeats answered. Works against both the spec's `ok` replies and the older per-op reply
//! types (`registered`, `room_joined`, …): any non-`error` frame whose `reply_to` is the
//! request id is its success reply.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use crate::transport::Conn;
use crate::{Endpoint, Error, Result, TlsConfig};

/// Default wait for a reply.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// Who the client registers as.
#[derive(Debug, Clone, Default)]
pub struct Identity {
    /// API key (`register.key`); empty for keyless local access.
    pub key: String,
    /// Display name.
    pub name: String,
    /// Stable agent id; `None` lets the server choose one.
    pub agent_id: Option<String>,
    /// Advertised capabilities.
    pub capabilities: Vec<String>,
}

/// One frame received from the server.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// Server frame id.
    pub id: Option<Value>,
    /// Frame type.
    pub ftype: String,
    /// The request it answers, if a reply.
    pub reply_to: Option<Value>,
    /// Payload (`{}` when absent).
    pub payload: Value,
}

impl Frame {
    /// Parses one frame text.
    pub fn parse(text: &str) -> Result<Self> {
        let v: Value = serde_json::from_str(text).map_err(|e| Error::BadFrame(e.to_string()))?;
        let Value::Object(mut o) = v else {
            return Err(Error::BadFrame("not an object".into()));
        };
        let ftype = match o.remove("type") {
            Some(Value::String(t)) => t,
            _ => return Err(Error::BadFrame("no type".into())),
        };
        let payload = match o.remove("payload") {
            None | Some(Value::Null) => json!({}),
            Some(p) => p,
        };
        Ok(Self {
            id: o.remove("id").filter(|v| !v.is_null()),
            ftype,
            reply_to: o.remove("reply_to").filter(|v| !v.is_null()),
            payload,
        })
    }

    /// The frame as the JSON object it came as (for `monitor --json`).
    pub fn to_value(&self) -> Value {
        let mut o = Map::new();
        if let Some(id) = &self.id {
            o.insert("id".into(), id.clone());
        }
        o.insert("type".into(), json!(self.ftype));
        if let Some(r) = &self.reply_to {
            o.insert("reply_to".into(), r.clone());
        }
        o.insert("payload".into(), self.payload.clone());
        Value::Object(o)
    }
}

/// A registered connection.
pub struct Client {
    conn: Conn,
    next: u64,
    pushes: VecDeque<Frame>,
    /// The agent id the server registered us under.
    pub agent_id: String,
    /// The registered display name.
    pub name: String,
    /// The `register` reply payload (server version, restored rooms, …).
    pub server: Value,
}

impl Client {
    /// Connects to `ep` and registers as `who` (protocol version 2; `reconnect` when a
    /// stable agent id is given, so the server restores that agent's rooms).
    pub fn connect(ep: &Endpoint, who: &Identity) -> Result<Self> {
        Self::connect_with(ep, who, None)
    }

    /// [`Client::connect`] with the trust settings for `wss://` (`None`: Mozilla's roots;
    /// ignored by the other transports).
    pub fn connect_with(ep: &Endpoint, who: &Identity, tls: Option<&TlsConfig>) -> Result<Self> {
        let conn = Conn::open(ep, tls)?;
        let mut c = Self {
            conn,
            next: 0,
            pushes: VecDeque::new(),
            agent_id: String::new(),
            name: String::new(),
            server: Value::Null,
        };
        let mut p = json!({
            "key": who.key,
            "name": who.name,
            "protocol_version": 2,
            "capabilities": who.capabilities,
        });
        if let Some(id) = &who.agent_id {
            p["agent_id"] = json!(id);
            p["reconnect"] = json!(true);
        }
        let reply = c.request("register", p)?;
        c.agent_id = reply["agent_id"]
            .as_str()
            .map(str::to_string)
            .or_else(|| who.agent_id.clone())
            .unwrap_or_default();
        c.name = reply["name"].as_str().unwrap_or(&who.name).to_string();
        c.server = reply;
        Ok(c)
    }

    /// Sends a request and returns its success payload (or the server's error).
    pub fn request(&mut self, ftype: &str, payload: Value) -> Result<Value> {
        self.request_timeout(ftype, payload, REPLY_TIMEOUT)
    }

    /// [`Client::request`] with an explicit reply timeout.
    pub fn request_timeout(&mut self, ftype: &str, payload: Value, t: Duration) -> Result<Value> {
        self.next += 1;
        let id = format!("c{}", self.next);
        let frame = json!({"id": id, "type": ftype, "payload": payload});
        self.conn.send(&frame.to_string())?;
        let deadline = Instant::now() + t;
        loop {
            let f = self.read_frame(Some(deadline))?.ok_or(Error::Timeout)?;
            if f.reply_to.as_ref().and_then(Value::as_str) == Some(id.as_str()) {
                if f.ftype == "error" {
                    return Err(Error::Server {
                        code: f.payload["code"].as_str().unwrap_or("error").to_string(),
                        message: f.payload["message"].as_str().unwrap_or("").to_string(),
                    });
                }
                return Ok(f.payload);
            }
            if f.reply_to.is_none() {
                self.pushes.push_back(f);
            }
            // A reply to an older, abandoned request: dropped.
        }
    }

    /// The next pushed frame, or `None` when `deadline` passes first (`None` = no deadline).
    pub fn next_push(&mut self, deadline: Option<Instant>) -> Result<Option<Frame>> {
        if let Some(f) = self.pushes.pop_front() {
            return Ok(Some(f));
        }
        loop {
            match self.read_frame(deadline)? {
                None => return Ok(None),
                Some(f) if f.reply_to.is_none() => return Ok(Some(f)),
                Some(_) => {} // a late reply
            }
        }
    }

    /// Reads one frame, answering server heartbeats on the way.
    fn read_frame(&mut self, deadline: Option<Instant>) -> Result<Option<Frame>> {
        loop {
            let Some(text) = self.conn.recv(deadline)? else {
                return Ok(None);
            };
            let f = Frame::parse(&text)?;
            if f.ftype == "ping" && f.reply_to.is_none() {
                let pong = json!({"type": "pong", "reply_to": f.id, "payload": {}});
                self.conn.send(&pong.to_string())?;
                continue;
            }
            if f.ftype == "error" && f.reply_to.is_none() {
                tracing::warn!(payload = %f.payload, "unsolicited error frame");
                continue;
            }
            return Ok(Some(f));
        }
    }

    /// Lists the rooms visible to this client.
    pub fn list_rooms(&mut self) -> Result<Vec<Value>> {
        let r = self.request("list_rooms", json!({}))?;
        Ok(r["rooms"].as_array().cloned().unwrap_or_default())
    }

    /// Resolves a room given by id or name to its `Room` object (ids win over names).
    pub fn resolve_room(&mut self, room: &str) -> Result<Value> {
        let rooms = self.list_rooms()?;
        rooms
            .iter()
            .find(|r| r["room_id"].as_str() == Some(room))
            .or_else(|| rooms.iter().find(|r| r["name"].as_str() == Some(room)))
            .cloned()
            .ok_or_else(|| Error::NoSuchRoom(room.to_string()))
    }

    /// Joins `room_id`; already being a member is not an error. Returns the join reply
    /// (`Value::Null` when already a member).
    pub fn ensure_joined(&mut self, room_id: &str) -> Result<Value> {
        match self.request("join_room", json!({"room_id": room_id})) {
            Ok(v) => Ok(v),
            Err(e) if e.code() == Some("already_in_room") => Ok(Value::Null),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_parse_keeps_envelope() {
        let f =
            Frame::parse(r#"{"id":"s1","type":"ok","reply_to":"c1","payload":{"a":1}}"#).unwrap();
        assert_eq!(f.ftype, "ok");
        assert_eq!(f.reply_to, Some(json!("c1")));
        assert_eq!(f.payload["a"], 1);
        let f = Frame::parse(r#"{"type":"ping"}"#).unwrap();
        assert_eq!(f.payload, json!({}));
        assert!(f.reply_to.is_none());
        assert!(Frame::parse("[]").is_err());
        assert!(Frame::parse(r#"{"payload":{}}"#).is_err());
    }
}
