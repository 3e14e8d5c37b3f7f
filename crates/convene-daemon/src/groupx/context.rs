//! The Context Packet: what an agent is sent for a turn. Room messages since its last turn
//! (bounded), then the message the turn answers. Only `message.created` text goes in: never
//! reasoning or tool records (§2.2).

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

fn clip(s: &str) -> String {
    match s.char_indices().nth(MAX_CHARS) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// The prompt text of a turn.
pub fn packet(agent: &AgentConfig, earlier: &[Line], current: &Line) -> String {
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
        let p = packet(
            &a,
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
        assert!(p.contains("Current message from You [evt_9]:\ndo it\n"));
        let q = packet(
            &a,
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
