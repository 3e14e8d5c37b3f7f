//! Messages other faces post into the room wake the agents they name: a CCCC actor's
//! `send(to=["codex"])` into the GroupX room gives `agent:codex` a turn, just as the web composer
//! would. One task follows the room's committed events in seq order (a cursor, like every
//! subscriber) and queues the turns; the fold's per-message record makes it idempotent
//! (§8.2: one turn per message and target), also across restarts.

use std::sync::Arc;

use convene_groupx::envelope::Correlation;
use convene_groupx::ids;
use serde_json::{json, Value};

use super::{Face, Raw};

/// Events read per page.
const PAGE: usize = 500;

/// Follows the room from `cursor`.
pub(super) fn spawn(face: Arc<Face>, cursor: u64) {
    tokio::spawn(async move {
        let feed = face.d.ledger.hub().feed(&face.group_id, cursor);
        let mut head = feed.subscribe();
        let mut shutdown = face.d.shutdown_rx();
        let mut cursor = cursor;
        loop {
            loop {
                let page = match face
                    .d
                    .ledger
                    .page_after(&feed, &face.group_id, cursor, PAGE)
                    .await
                {
                    Ok(p) => p,
                    Err(e) => {
                        tracing::warn!(error = %e, "groupx follower: read failed");
                        break;
                    }
                };
                let Some(last) = page.last().map(|e| e.seq) else {
                    break;
                };
                for e in page.iter().filter(|e| e.kind == "chat.message") {
                    if let Ok(raw) = serde_json::from_str::<Raw>(&e.json) {
                        face.wake_for(&raw).await;
                    }
                }
                cursor = last;
            }
            tokio::select! {
                c = head.changed() => if c.is_err() { return },
                _ = shutdown.changed() => return,
            }
        }
    });
}

impl Face {
    /// The agents a foreign message names, by its CCCS recipients.
    fn named_agents(&self, data: &Value, by: &str) -> Vec<String> {
        let to: Vec<&str> = data["to"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let enabled = self.cfg.agents.iter().filter(|a| a.enabled && a.id != by);
        if to.contains(&"@all") {
            return enabled.map(|a| a.id.clone()).collect();
        }
        enabled
            .filter(|a| to.contains(&a.id.as_str()))
            .map(|a| a.id.clone())
            .collect()
    }

    /// Queues a turn per named agent that has none for this message yet.
    async fn wake_for(&self, m: &Raw) {
        if m.data.get("groupx").is_some() {
            return; // the broker's own message: its turns were made with it
        }
        let imported = self
            .d
            .ledger
            .engine()
            .group(&self.group_id)
            .is_some_and(|g| g.is_imported(m.seq));
        if imported {
            return; // history wakes nobody
        }
        let named = self.named_agents(&m.data, &m.by);
        if named.is_empty() {
            return;
        }
        let mut room = self.room.lock().await;
        // Another face committed it, so the room has not folded it: without its record the
        // turns get no source seq (their Context Packet had no earlier messages) and
        // `has_turn` could not see them. Folding a chat message again changes nothing.
        room.fold(m.seq, &m.id, &m.kind, &m.by, &m.data);
        let cap = self.cfg.limits.queue_per_agent;
        let corr_id = format!("corr_{}", m.id);
        let mut cmds = Vec::new();
        let mut refused = Vec::new();
        for t in named.iter().filter(|t| !room.has_turn(&m.id, t)) {
            if room.depth(t) >= cap {
                refused.push(format!("agent:{t}"));
                continue;
            }
            let corr = Correlation {
                correlation_id: corr_id.clone(),
                root_correlation_id: corr_id.clone(),
                causation_id: Some(m.id.clone()),
                to: vec![format!("agent:{t}")],
            };
            let body = json!({"turnId": ids::turn_id(), "target": format!("agent:{t}"),
                "sourceEventId": m.id, "queuePosition": room.depth(t), "status": "queued",
                "transport": "structured", "commandType": "face.message", "hopCount": 0});
            cmds.push(self.ext("turn.queued", &corr, body));
        }
        if !refused.is_empty() {
            // Visible, never silent (§7).
            let corr = Correlation {
                correlation_id: corr_id.clone(),
                root_correlation_id: corr_id.clone(),
                causation_id: Some(m.id.clone()),
                to: Vec::new(),
            };
            cmds.push(self.ext(
                "routing.loop_stopped",
                &corr,
                json!({"errorCode": "QUEUE_CAPACITY_REACHED",
                "reason": "the agents' lanes are full", "targets": refused, "sourceEventId": m.id}),
            ));
        }
        if cmds.is_empty() {
            return;
        }
        if let Err(e) = self.append(&mut room, cmds).await {
            tracing::warn!(error = %e, message = %m.id, "groupx follower: could not queue turns");
            return;
        }
        drop(room);
        for t in &named {
            if let Some(w) = self.wake.get(t) {
                w.notify_one();
            }
        }
    }
}
