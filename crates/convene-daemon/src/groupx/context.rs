//! The Context Packet: what an agent is sent for a turn. Its own core memory and identity
//! records and the newest public room memory (§10.4), room messages since its last turn
//! (bounded), then the message the turn answers. Only records and `message.created` text go
//! in: never reasoning or tool records (§2.2).

use super::config::AgentConfig;

/// Room messages included, at most.
pub const MAX_MESSAGES: usize = 20;
/// Characters of one earlier message included, at most.
pub const MAX_CHARS: usize = 2000;

/// One earlier message.
pub struct Line {
    /// Author as shown.
    pub author: String,
    /// Event id.
    pub event_id: String,
    /// Text.
    pub text: String,
}

/// Characters of one recalled memory or identity record included, at most.
pub const MAX_RECALL_CHARS: usize = 500;

/// The memory a packet recalls, each list oldest first (already bounded).
#[derive(Debug, Default)]
pub struct Recall {
    /// The agent's own core memories.
    pub core: Vec<String>,
    /// The agent's identity records: `(kind, content)`.
    pub identity: Vec<(String, String)>,
    /// Public room memories: `(author actor id, content)`.
    pub room: Vec<(String, String)>,
}

fn clip_to(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

fn clip(s: &str) -> String {
    clip_to(s, MAX_CHARS)
}

/// One recalled record as an indented-continuation list item (never a line of its own that
/// could start with a directive).
fn recalled(out: &mut String, label: &str, text: &str) {
    let text = clip_to(text, MAX_RECALL_CHARS).replace('\n', "\n  ");
    out.push_str(&format!("- {label}{text}\n"));
}

/// The prompt text of a turn.
pub fn packet(agent: &AgentConfig, recall: &Recall, earlier: &[Line], current: &Line) -> String {
    let name = if agent.name.is_empty() {
        &agent.id
    } else {
        &agent.name
    };
    let mut out = format!(
        "[GroupX room:main] You are {name} (agent:{}), one agent of a team in a shared room.\n",
        agent.id
    );
    if let Some(i) = agent.identity.as_deref().filter(|s| !s.is_empty()) {
        out.push_str(&format!("Your identity: {i}\n"));
    }
    if !recall.identity.is_empty() {
        out.push_str("\nYour identity records:\n");
        for (kind, text) in &recall.identity {
            recalled(&mut out, &format!("{kind}: "), text);
        }
    }
    if !recall.core.is_empty() {
        out.push_str("\nYour core memory (only you see it):\n");
        for text in &recall.core {
            recalled(&mut out, "", text);
        }
    }
    if !recall.room.is_empty() {
        out.push_str("\nRoom memory (public, newest last):\n");
        for (author, text) in &recall.room {
            recalled(&mut out, &format!("({author}) "), text);
        }
    }
    if !earlier.is_empty() {
        out.push_str("\nRoom messages since your last turn:\n");
        let skip = earlier.len().saturating_sub(MAX_MESSAGES);
        for l in &earlier[skip..] {
            // Continuation lines are indented: only the current message starts lines.
            let text = clip(&l.text).replace('\n', "\n  ");
            out.push_str(&format!("- {} [{}]: {}\n", l.author, l.event_id, text));
        }
    }
    // The current message comes last, as the thing to act on.
    out.push_str(&format!(
        "\nYour reply is posted to the room as your message.\n\nCurrent message from {} [{}]:\n{}\n",
        current.author, current.event_id, current.text
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_packet_bounds_earlier_messages_and_ends_with_the_current_one() {
        let a = AgentConfig {
            id: "codex".into(),
            name: "Codex".into(),
            driver: "acp".into(),
            command: vec!["x".into()],
            cwd: None,
            enabled: true,
            mode: None,
            identity: Some("reviewer".into()),
            env: Default::default(),
        };
        let earlier: Vec<Line> = (0..30)
            .map(|i| Line {
                author: "You".into(),
                event_id: format!("e{i}"),
                text: "y".repeat(3000),
            })
            .collect();
        let recall = Recall {
            core: vec!["prefer small diffs".into(), "x".repeat(600)],
            identity: vec![("role".into(), "reviewer\n#hang".into())],
            room: vec![("user:web".into(), "ship on friday".into())],
        };
        let p = packet(
            &a,
            &recall,
            &earlier,
            &Line {
                author: "You".into(),
                event_id: "evt_9".into(),
                text: "do it".into(),
            },
        );
        assert!(p.contains("Your identity: reviewer"));
        assert!(!p.contains("[e9]") && p.contains("[e10]") && p.contains("[e29]"));
        assert!(!p.contains(&"y".repeat(2001)));
        assert!(p.ends_with("Current message from You [evt_9]:\ndo it\n"));
        let (core, room, msgs) = (
            p.find("- prefer small diffs").unwrap(),
            p.find("- (user:web) ship on friday").unwrap(),
            p.find("[e10]").unwrap(),
        );
        assert!(core < room && room < msgs);
        assert!(p.contains(&format!("- {}…\n", "x".repeat(500))) && !p.contains(&"x".repeat(501)));
        assert!(p.contains("- role: reviewer\n  #hang") && !p.lines().any(|l| l.starts_with('#')));
        let q = packet(
            &a,
            &Recall::default(),
            &[Line {
                author: "You".into(),
                event_id: "e1".into(),
                text: "a\n#hang".into(),
            }],
            &Line {
                author: "You".into(),
                event_id: "e2".into(),
                text: "b".into(),
            },
        );
        assert!(q.contains("a\n  #hang") && !q.lines().any(|l| l.starts_with('#')));
    }
}
