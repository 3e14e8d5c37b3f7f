//! Message helpers shared by `history`, `wait` and `monitor`: normalizing the two server
//! spellings, transparent decryption, the wake filter and the human form.

use serde_json::{json, Value};

use crate::crypto;

/// `metadata.kind` of a message sent with `send --end`: the sender ends the conversation,
/// and a peer's `wait --follow` exits 0 after printing it.
pub const END_KIND: &str = "end";

/// Fills `agent_id` from the older `sender` field (and `agent_name` from `agent_id`), so
/// callers read one shape whichever server version answered.
pub fn normalize(m: &mut Value) {
    if !m.is_object() {
        return;
    }
    if m.get("agent_id").and_then(Value::as_str).is_none() {
        if let Some(s) = m.get("sender").cloned() {
            m["agent_id"] = s;
        }
    }
    if m.get("agent_name").and_then(Value::as_str).is_none() {
        let id = m.get("agent_id").cloned().unwrap_or(Value::Null);
        m["agent_name"] = id;
    }
}

/// The message's sequence number (0 when absent).
pub fn seq(m: &Value) -> u64 {
    m["seq"].as_u64().unwrap_or(0)
}

/// A thinking pulse (`metadata.type = "thinking"`): persisted, never wakes `wait`.
pub fn is_thinking(m: &Value) -> bool {
    m["metadata"]["type"].as_str() == Some("thinking")
}

/// A message sent with `--end`.
pub fn is_end(m: &Value) -> bool {
    m["metadata"]["kind"].as_str() == Some(END_KIND)
}

/// Replaces a sealed `content` with its plaintext when `secret` opens it, marking the
/// message `"encrypted": true`. A blob that does not open stays as is, with
/// `"decrypt_error"` saying why; plaintext content is left alone.
pub fn decrypt(m: &mut Value, secret: Option<&str>) {
    let (Some(secret), Some(content)) = (secret, m["content"].as_str()) else {
        return;
    };
    if !crypto::is_sealed(content) {
        return;
    }
    let room = m["room_id"].as_str().unwrap_or_default().to_string();
    match crypto::open(secret, &room, content) {
        Ok(pt) => {
            m["content"] = json!(pt);
            m["encrypted"] = json!(true);
        }
        Err(e) => m["decrypt_error"] = json!(e.to_string()),
    }
}

/// Which messages wake a waiter.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// The connection's agent id: its own messages never wake it.
    pub self_id: String,
    /// Senders (agent id or name) to ignore.
    pub not_from: Vec<String>,
    /// If not empty, only these senders (agent id or name) wake.
    pub only_from: Vec<String>,
}

impl Filter {
    /// True when `m` (normalized) is a chat message that should wake the waiter.
    pub fn wakes(&self, m: &Value) -> bool {
        if is_thinking(m) {
            return false;
        }
        let id = m["agent_id"].as_str().unwrap_or_default();
        let name = m["agent_name"].as_str().unwrap_or_default();
        let is = |x: &String| x == id || (!name.is_empty() && x == name);
        if !self.self_id.is_empty() && id == self.self_id {
            return false;
        }
        if self.not_from.iter().any(is) {
            return false;
        }
        self.only_from.is_empty() || self.only_from.iter().any(is)
    }

    /// True when `m` is someone else's thinking pulse (for `--show-thinking`).
    pub fn peer_thinking(&self, m: &Value) -> bool {
        is_thinking(m) && m["agent_id"].as_str() != Some(self.self_id.as_str())
    }
}

/// ` [undecryptable: why]` for a sealed message the room key did not open (so the raw blob
/// a human sees is not mistaken for a keyless read), else "".
pub fn undecryptable_note(m: &Value) -> String {
    match m["decrypt_error"].as_str() {
        Some(e) => format!(" [undecryptable: {e}]"),
        None => String::new(),
    }
}

/// One human-readable line: `[seq] name: content` (with markers for replies and ends).
pub fn text_line(m: &Value) -> String {
    let name = m["agent_name"]
        .as_str()
        .or_else(|| m["agent_id"].as_str())
        .unwrap_or("?");
    let mut s = format!("[{}] {}", seq(m), name);
    if is_thinking(m) {
        s.push_str(" (thinking)");
    } else if m["metadata"]["type"].as_str() == Some("decision") {
        s.push_str(" (decision)");
    }
    if let Some(r) = m["reply_to"].as_str() {
        s.push_str(&format!(" ↳{r}"));
    }
    s.push_str(": ");
    s.push_str(m["content"].as_str().unwrap_or_default());
    s.push_str(&undecryptable_note(m));
    if is_end(m) {
        s.push_str(" [end]");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_old_sender_field() {
        let mut m = json!({"sender": "a1", "content": "x", "seq": 3});
        normalize(&mut m);
        assert_eq!(m["agent_id"], "a1");
        assert_eq!(m["agent_name"], "a1");
        let mut m = json!({"agent_id": "a2", "agent_name": "Al", "sender": "zz"});
        normalize(&mut m);
        assert_eq!(m["agent_id"], "a2");
        assert_eq!(m["agent_name"], "Al");
    }

    #[test]
    fn filter_rules() {
        let f = Filter {
            self_id: "me".into(),
            not_from: vec!["noisy".into()],
            only_from: vec![],
        };
        let m = |id: &str, name: &str| json!({"agent_id": id, "agent_name": name, "metadata": {}});
        assert!(f.wakes(&m("peer", "Peer")));
        assert!(!f.wakes(&m("me", "Me")));
        assert!(!f.wakes(&m("x", "noisy")));
        let mut t = m("peer", "Peer");
        t["metadata"]["type"] = json!("thinking");
        assert!(!f.wakes(&t));
        assert!(f.peer_thinking(&t));
        let only = Filter {
            only_from: vec!["boss".into()],
            ..f.clone()
        };
        assert!(only.wakes(&m("boss", "B")));
        assert!(!only.wakes(&m("peer", "Peer")));
    }

    #[test]
    fn decrypts_when_key_opens_and_marks_failures() {
        let blob = crypto::seal("s", "r1", "hi").unwrap();
        let mut m = json!({"room_id": "r1", "content": blob});
        decrypt(&mut m, Some("s"));
        assert_eq!(m["content"], "hi");
        assert_eq!(m["encrypted"], true);
        let mut m = json!({"room_id": "r1", "content": blob});
        decrypt(&mut m, Some("wrong"));
        assert_eq!(m["content"], json!(blob));
        assert!(m["decrypt_error"].is_string());
        let mut m = json!({"room_id": "r1", "content": "plain"});
        decrypt(&mut m, Some("s"));
        assert_eq!(m["content"], "plain");
    }

    #[test]
    fn text_form() {
        let m =
            json!({"seq": 4, "agent_name": "al", "content": "bye", "metadata": {"kind": "end"}});
        assert_eq!(text_line(&m), "[4] al: bye [end]");
        let m = json!({"seq": 5, "agent_name": "al", "content": "cow1:AAAA", "decrypt_error": "crypto: x"});
        assert_eq!(
            text_line(&m),
            "[5] al: cow1:AAAA [undecryptable: crypto: x]"
        );
    }
}
