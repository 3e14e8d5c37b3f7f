//! Supervision pairs (§4.3, §6.7): a Watch Turn follows a worker turn's public progress with
//! `groupx.watch` and redirects it with `groupx.steer`. It is room collaboration, not approval:
//! nothing here allows or denies a tool, and the worker stays unrestricted.

use std::collections::HashMap;
use std::time::Duration;

use convene_groupx::tools::{Steer, Watch};
use convene_groupx::{ErrorCode, GroupxError, TurnStatus};
use serde_json::{json, Value};

use super::command::{Origin, SteerInfo};
use super::room::Turn;
use super::Face;

/// Most characters of live text a snapshot carries (thinned: the tail).
const SNAPSHOT_TEXT: usize = 1000;
/// Most characters of the task summary.
const TASK_SUMMARY: usize = 300;
/// A watch with no timeout waits this long at most.
const DEFAULT_WATCH: Duration = Duration::from_secs(30);

/// A running turn's public progress, kept while it runs (for watchers).
#[derive(Debug, Default, Clone)]
pub struct Progress {
    /// Bumped at each milestone: started, a tool call or its new status, more text.
    pub milestone: u64,
    /// Characters of content so far.
    pub text_chars: usize,
    /// The last [`SNAPSHOT_TEXT`] characters of content.
    pub tail: String,
    /// `(toolCallId, title, status)`, first-seen order.
    pub tools: Vec<(String, String, String)>,
}

impl Progress {
    /// More content. Milestones are thinned: the first text, then every 200 characters.
    pub fn text(&mut self, t: &str) {
        let first = self.text_chars == 0;
        let before = self.text_chars / 200;
        self.text_chars += t.chars().count();
        self.tail.push_str(t);
        let n = self.tail.chars().count();
        if n > SNAPSHOT_TEXT {
            self.tail = self.tail.chars().skip(n - SNAPSHOT_TEXT).collect();
        }
        if first || self.text_chars / 200 != before {
            self.milestone += 1;
        }
    }

    /// A tool call or a change of its status.
    pub fn tool(&mut self, id: &str, title: &str, status: &str) {
        match self.tools.iter_mut().find(|t| t.0 == id) {
            Some(t) if t.2 == status && t.1 == title => return,
            Some(t) => {
                t.1 = title.to_string();
                t.2 = status.to_string();
            }
            None => self.tools.push((id.into(), title.into(), status.into())),
        }
        self.milestone += 1;
    }
}

fn clip(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

impl Face {
    /// The caller's Watch Turn and the worker turn it means.
    async fn watch_context(
        &self,
        agent: &str,
        subject: Option<&str>,
    ) -> Result<(Turn, Turn), GroupxError> {
        let room = self.room.lock().await;
        let cur = self.current.lock().get(agent).cloned();
        let Some(w) = cur.and_then(|t| room.turns.get(&t).cloned()) else {
            return Err(GroupxError::new(
                ErrorCode::SupervisionWatchRequired,
                "watch and steer work only inside a Watch Turn",
            ));
        };
        if w.command_type != "supervision.watch" {
            return Err(GroupxError::new(
                ErrorCode::SupervisionWatchRequired,
                "this turn is not a Watch Turn of a supervision pair",
            ));
        }
        let id = match subject {
            Some(s) if w.subjects.iter().any(|x| x == s) => s.to_string(),
            Some(s) => {
                return Err(GroupxError::new(
                    ErrorCode::InvalidEnvelope,
                    format!("{s} is not a turn this Watch Turn observes"),
                )
                .field("subjectTurnId"))
            }
            None => w
                .subjects
                .iter()
                .rev()
                .find(|s| {
                    room.turns
                        .get(*s)
                        .is_some_and(|t| !t.state.status.is_terminal())
                })
                .or(w.subjects.last())
                .cloned()
                .unwrap_or_default(),
        };
        let subject = room.turns.get(&id).cloned().ok_or_else(|| {
            GroupxError::new(ErrorCode::UnknownTurn, "the watched turn is not known yet")
        })?;
        Ok((w, subject))
    }

    /// `groupx.watch`: waits for the subject's next milestone (or its end) and snapshots it.
    pub(super) async fn watch(&self, agent: &str, w: Watch) -> Result<Value, GroupxError> {
        let (_, subject) = self
            .watch_context(agent, w.subject_turn_id.as_deref())
            .await?;
        let id = subject.turn_id.clone();
        let start_mark = self.progress.lock().get(&id).map_or(0, |p| p.milestone);
        let start_status = subject.state.status;
        let bound = w.timeout_ms.map_or(DEFAULT_WATCH, Duration::from_millis);
        let deadline = tokio::time::Instant::now() + bound;
        let mut timed_out = false;
        loop {
            let changed = self.changed.notified();
            let progressed = self.progressed.notified();
            tokio::pin!(changed, progressed);
            changed.as_mut().enable();
            progressed.as_mut().enable();
            let status = self
                .room
                .lock()
                .await
                .turns
                .get(&id)
                .map(|t| t.state.status);
            let mark = self.progress.lock().get(&id).map_or(0, |p| p.milestone);
            let ended = status.is_some_and(TurnStatus::is_terminal);
            if ended || (!w.until_terminal && (mark != start_mark || status != Some(start_status)))
            {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                timed_out = true;
                break;
            }
            tokio::select! {
                _ = changed => {}
                _ = progressed => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
        let mut snap = self.snapshot(&id).await?;
        snap["timedOut"] = timed_out.into();
        Ok(snap)
    }

    /// What a watcher may see of a worker turn (§6.7): never reasoning, tool arguments or
    /// results, stderr or native payloads.
    async fn snapshot(&self, id: &str) -> Result<Value, GroupxError> {
        let t = self
            .room
            .lock()
            .await
            .turns
            .get(id)
            .cloned()
            .ok_or_else(|| GroupxError::new(ErrorCode::UnknownTurn, "no such turn"))?;
        let p = self.progress.lock().get(id).cloned().unwrap_or_default();
        let certainty = match t.state.certainty {
            convene_groupx::Certainty::NotDelivered => "not_delivered",
            convene_groupx::Certainty::Unknown => "unknown",
            convene_groupx::Certainty::Delivered => "delivered",
        };
        let task = self
            .message_text(&t.source_event_id)
            .await
            .unwrap_or_default();
        let mut out = json!({"subjectTurnId": t.turn_id, "worker": format!("agent:{}", t.target),
            "status": t.state.status.as_str(), "deliveryCertainty": certainty,
            "task": {"eventId": t.source_event_id, "summary": clip(&task, TASK_SUMMARY)},
            "liveText": p.tail, "textCharacters": p.text_chars,
            "tools": p.tools.iter().map(|(i, ti, st)| json!({"toolCallId": i, "title": ti, "status": st})).collect::<Vec<_>>(),
            "steers": t.steers, "lastSteerReason": t.last_steer_reason});
        if let Some(r) = &t.response_event_id {
            out["response"] = json!({"eventId": r, "content": clip(&self.message_text(r).await.unwrap_or_default(), 2000)});
        }
        if let Some(c) = &t.error_code {
            out["errorCode"] = c.clone().into();
        }
        if t.state.status.is_terminal() {
            out["ended"] = format!("subject_{}", t.state.status.as_str()).into();
        }
        Ok(out)
    }

    /// `groupx.steer`: the guidance is a public message by the observer; `interrupt` cancels
    /// the whole worker turn and queues a new one whose task is that message.
    pub(super) async fn steer(
        &self,
        binding: &str,
        agent: &str,
        s: Steer,
    ) -> Result<Value, GroupxError> {
        // A retry answers the first result (§8.1) before anything is re-validated: the default
        // subject is now the re-routed turn, and an interrupt must not cancel that one too.
        let key = super::room::command_key(binding, &s.client_command_id);
        if let Some(c) = self.room.lock().await.commands.get(&key) {
            if c.canonical != s.canonical() {
                return Err(GroupxError::new(
                    ErrorCode::ClientCommandConflict,
                    "this clientCommandId was used for another command",
                )
                .field("clientCommandId"));
            }
            let action = if s.interrupt { "interrupt" } else { "nudge" };
            return Ok(json!({"messageEventId": c.message_event_id,
                "subjectTurnId": c.steer_subject, "action": action,
                "newTurnId": c.turns.first().map(|(_, id, _)| id.clone())}));
        }
        let (watch, subject) = self
            .watch_context(agent, s.subject_turn_id.as_deref())
            .await?;
        let limit = self.cfg.limits.steers_per_subject_turn;
        if subject.steers >= limit {
            return Err(GroupxError::new(
                ErrorCode::SteerLimitReached,
                format!("turn {} was steered {limit} times already", subject.turn_id),
            ));
        }
        if s.interrupt && subject.state.status == TurnStatus::Cancelling {
            return Err(GroupxError::new(
                ErrorCode::InvalidEnvelope,
                "the watched turn is already being stopped: wait for it to end",
            )
            .field("action"));
        }
        if s.interrupt && subject.state.status.is_terminal() {
            return Err(GroupxError::new(
                ErrorCode::InvalidEnvelope,
                "the watched turn already ended: nudge, or send a new task",
            )
            .field("action"));
        }
        let origin = Origin {
            by: agent.to_string(),
            binding: binding.to_string(),
            client_command_id: s.client_command_id.clone(),
            canonical: s.canonical(),
            command_type: "supervision.steer",
            parent: Some(watch.clone()),
            observers: Vec::new(),
            steer: Some(SteerInfo {
                subject_turn_id: subject.turn_id.clone(),
                watch_turn_id: watch.turn_id.clone(),
                action: if s.interrupt { "interrupt" } else { "nudge" },
                reason: s.reason.clone(),
            }),
            forwarded: None,
        };
        let targets = if s.interrupt {
            vec![subject.target.clone()]
        } else {
            Vec::new()
        };
        let c = self
            .create(
                origin,
                targets,
                format!("[steer: {}] {}", s.reason, s.content),
                Some(subject.source_event_id.clone()),
            )
            .await?;
        if s.interrupt {
            // The native cancel acts on the whole turn; the new turn waits behind it (§6.7).
            self.cancel(&subject.turn_id).await?;
        }
        let new_turn = c.turns.first().map(|(_, id, _)| id.clone());
        Ok(
            json!({"messageEventId": c.message_event_id, "subjectTurnId": subject.turn_id,
            "action": if s.interrupt { "interrupt" } else { "nudge" }, "newTurnId": new_turn}),
        )
    }

    /// Records a running turn's progress for watchers.
    pub(super) fn note_progress(&self, turn_id: &str, f: impl FnOnce(&mut Progress)) {
        let mut map = self.progress.lock();
        f(map.entry(turn_id.to_string()).or_default());
        drop(map);
        self.progressed.notify_waiters();
    }

    /// Forgets a finished turn's live progress (the durable records remain).
    pub(super) fn end_progress(&self, turn_id: &str) {
        let mut map: parking_lot::MutexGuard<'_, HashMap<String, Progress>> = self.progress.lock();
        map.remove(turn_id);
    }
}

#[cfg(test)]
mod tests {
    use super::Progress;

    #[test]
    fn milestones_are_thinned_and_the_tail_is_bounded() {
        let mut p = Progress::default();
        p.text(&"x".repeat(150));
        let m = p.milestone;
        p.text(&"x".repeat(10));
        assert_eq!(p.milestone, m, "small chunks are not milestones");
        p.text(&"y".repeat(2000));
        assert!(p.milestone > m);
        assert_eq!(p.tail.chars().count(), 1000);
        let m = p.milestone;
        p.tool("c1", "read", "pending");
        p.tool("c1", "read", "pending");
        assert_eq!(p.milestone, m + 1);
        p.tool("c1", "read", "completed");
        assert_eq!(p.milestone, m + 2);
    }
}
