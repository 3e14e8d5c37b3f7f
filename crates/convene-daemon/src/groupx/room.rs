//! The broker's projection of its room: turns, lanes and client commands, folded from the
//! room's ledger events. The same `fold` runs on every event the broker commits and, at start,
//! over the whole room, so what the broker believes is always what the ledger says.

use std::collections::{HashMap, VecDeque};

use convene_groupx::envelope::{Correlation, KIND_PREFIX};
use convene_groupx::{TurnEvent, TurnState, TurnStatus};
use serde_json::Value;

/// One turn.
#[derive(Debug, Clone)]
pub struct Turn {
    /// Id.
    pub turn_id: String,
    /// Target agent (ledger id).
    pub target: String,
    /// The message that asked for it.
    pub source_event_id: String,
    /// Its seq.
    pub source_seq: u64,
    /// Chain fields.
    pub corr: Correlation,
    /// State machine.
    pub state: TurnState,
    /// Error code of a failed turn.
    pub error_code: Option<String>,
    /// The turn whose agent asked for this one (MCP send/ask), if any.
    pub parent_turn_id: Option<String>,
    /// Hops from the root interaction (a web message's turn is 0).
    pub hop: u64,
    /// `web.message`, `mcp.send`, `mcp.ask`.
    pub command_type: String,
    /// The response message of a completed turn.
    pub response_event_id: Option<String>,
    /// The seq of its `turn.queued` (its place in the lane).
    pub queued_seq: u64,
    /// A Watch Turn's worker turns, in order (a steer's re-routed turn is appended).
    pub subjects: Vec<String>,
    /// How often this turn was steered, and the latest reason.
    pub steers: u32,
    /// The latest steer's reason.
    pub last_steer_reason: Option<String>,
}

/// A `clientCommandId` already served, and what it answered.
#[derive(Debug, Clone)]
pub struct CommandRec {
    /// The payload it was used with.
    pub canonical: String,
    /// The message it created.
    pub message_event_id: String,
    /// Its seq.
    pub message_seq: u64,
    /// Its chain.
    pub correlation_id: String,
    /// `(target GroupX id, turn id, queue position)`, in creation order.
    pub turns: Vec<(String, String, usize)>,
    /// The `supervision.paired` event of a supervised command.
    pub pair_event_id: Option<String>,
    /// The worker turn a steer command steered (its answer names it again on a retry).
    pub steer_subject: Option<String>,
}

/// The projection.
#[derive(Debug, Default)]
pub struct Room {
    /// Turns by id.
    pub turns: HashMap<String, Turn>,
    /// Per agent: unfinished turns in enqueue order (the lane, FIFO).
    pub lanes: HashMap<String, VecDeque<String>>,
    /// Served commands by [`command_key`] (binding + clientCommandId).
    pub commands: HashMap<String, CommandRec>,
    /// Message event id → its command key.
    by_message: HashMap<String, String>,
    /// Per agent: the source seq of its last finished turn (what its context starts after).
    pub seen_up_to: HashMap<String, u64>,
    /// Highest seq folded.
    pub head: u64,
    /// Commands submitted to the ledger and not folded yet: key → target agents. Their
    /// retries wait for them, their targets count against capacity, and those lanes wait.
    pub pending: HashMap<String, Vec<String>>,
    /// Steer commands in `pending`: key → the turn they steer (they count against its limit).
    pub steering: HashMap<String, String>,
    /// Memory, identity and the context floor (§10.4, §10.5).
    pub memory: super::memory::Memory,
    /// Highest seq of a message from another face.
    pub foreign_head: u64,
    /// Agents whose lane has a turn transition committing (see `Face::append_released`).
    pub busy: std::collections::HashSet<String>,
    /// The room's imported seq ranges (the engine's `Group::imported_seqs`, read at start).
    pub imported: Vec<[u64; 2]>,
    /// Per root correlation: its turns, in all and per agent (§7 limits).
    roots: HashMap<String, (usize, HashMap<String, usize>)>,
}

fn body(data: &Value) -> &Value {
    data.get("body").unwrap_or(&Value::Null)
}

fn s(v: &Value, k: &str) -> String {
    v.get(k)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn correlation(data: &Value) -> Correlation {
    let g = data.get("groupx").cloned().unwrap_or(Value::Null);
    Correlation {
        correlation_id: s(&g, "correlationId"),
        root_correlation_id: s(&g, "rootCorrelationId"),
        causation_id: g
            .get("causationId")
            .and_then(Value::as_str)
            .map(str::to_string),
        to: Vec::new(),
    }
}

/// The idempotency key of a command: its source binding and its clientCommandId (§8.1).
pub fn command_key(binding: &str, client_command_id: &str) -> String {
    format!("{binding}\u{0}{client_command_id}")
}

impl Room {
    /// Folds one committed event of the room. Only broker-authored (`system`) turn events
    /// move turns: nothing another face appends can complete or cancel a turn.
    pub fn fold(&mut self, seq: u64, id: &str, kind: &str, by: &str, data: &Value) {
        self.head = self.head.max(seq);
        self.memory.fold(seq, id, kind, by, data);
        if kind == "chat.message" {
            let g = data.get("groupx");
            if g.is_none() {
                // A message from another face (CCCS IPC, an import): known by its id, so the
                // turns its recipients get can be found and never made twice (§8.2).
                let key = command_key("face", id);
                self.by_message.insert(id.to_string(), key.clone());
                self.commands.entry(key).or_insert(CommandRec {
                    canonical: String::new(),
                    message_event_id: id.to_string(),
                    message_seq: seq,
                    correlation_id: format!("corr_{id}"),
                    turns: Vec::new(),
                    pair_event_id: None,
                    steer_subject: None,
                });
                self.foreign_head = self.foreign_head.max(seq);
            }
            if let Some(g) = g {
                if let Some(cid) = g.get("clientCommandId").and_then(Value::as_str) {
                    let key = command_key(&s(g, "binding"), cid);
                    let rec = CommandRec {
                        canonical: s(g, "canonical"),
                        message_event_id: id.to_string(),
                        message_seq: seq,
                        correlation_id: s(g, "correlationId"),
                        turns: Vec::new(),
                        pair_event_id: None,
                        steer_subject: None,
                    };
                    self.by_message.insert(id.to_string(), key.clone());
                    self.commands.entry(key).or_insert(rec);
                }
            }
            return;
        }
        let Some(t) = kind.strip_prefix(KIND_PREFIX) else {
            return;
        };
        if by != convene_groupx::envelope::LEDGER_SYSTEM {
            return;
        }
        // Imported turn events are history (an exported room loaded again): they never put a
        // turn in a lane or move a live one.
        if self
            .imported
            .iter()
            .any(|[lo, hi]| (*lo..=*hi).contains(&seq))
        {
            return;
        }
        let b = body(data);
        let turn_id = s(b, "turnId");
        if t == "turn.queued" {
            let target = s(b, "target");
            let Some(agent) = convene_groupx::envelope::agent_ledger_id(&target) else {
                return;
            };
            let source = s(b, "sourceEventId");
            let pos = b.get("queuePosition").and_then(Value::as_u64).unwrap_or(0) as usize;
            let mut source_seq = 0;
            if let Some(key) = self.by_message.get(&source) {
                if let Some(c) = self.commands.get_mut(key) {
                    c.turns.push((target.clone(), turn_id.clone(), pos));
                    source_seq = c.message_seq;
                }
            }
            let turn = Turn {
                turn_id: turn_id.clone(),
                target: agent.to_string(),
                source_event_id: source,
                source_seq,
                corr: correlation(data),
                state: TurnState::new(),
                error_code: None,
                parent_turn_id: b
                    .get("parentTurnId")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                hop: b.get("hopCount").and_then(Value::as_u64).unwrap_or(0),
                command_type: s(b, "commandType"),
                response_event_id: None,
                queued_seq: seq,
                subjects: b
                    .get("subjectTurnIds")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default(),
                steers: 0,
                last_steer_reason: None,
            };
            // Folds of concurrent commands may come out of commit order: keep the lane in
            // enqueue (seq) order, which is its FIFO order (§8.3).
            let lane = self.lanes.entry(agent.to_string()).or_default();
            // The common case appends at the back: only a fold that came out of order scans.
            let behind = lane
                .back()
                .and_then(|id| self.turns.get(id))
                .is_none_or(|t| t.queued_seq < seq);
            if behind {
                lane.push_back(turn_id.clone());
            } else {
                let at = lane
                    .iter()
                    .position(|id| self.turns.get(id).is_some_and(|t| t.queued_seq > seq))
                    .unwrap_or(lane.len());
                lane.insert(at, turn_id.clone());
            }
            let root = self
                .roots
                .entry(turn.corr.root_correlation_id.clone())
                .or_default();
            root.0 += 1;
            *root.1.entry(turn.target.clone()).or_insert(0) += 1;
            self.turns.insert(turn_id, turn);
            return;
        }
        if t == "supervision.paired" {
            let src = s(b, "sourceEventId");
            if let Some(c) = self
                .by_message
                .get(&src)
                .and_then(|k| self.commands.get_mut(k))
            {
                c.pair_event_id = Some(id.to_string());
            }
            return;
        }
        if t == "supervision.steered" {
            let subject = s(b, "subjectTurnId");
            if let Some(c) = self
                .by_message
                .get(&s(b, "messageEventId"))
                .and_then(|k| self.commands.get_mut(k))
            {
                c.steer_subject = Some(subject.clone());
            }
            if let Some(x) = self.turns.get_mut(&subject) {
                x.steers += 1;
                x.last_steer_reason = Some(s(b, "reason"));
            }
            let new = s(b, "newTurnId");
            if let Some(w) = self.turns.get_mut(&s(b, "watchTurnId")) {
                if !new.is_empty() {
                    w.subjects.push(new);
                }
            }
            return;
        }
        let ev = match t {
            "turn.dispatched" => TurnEvent::Dispatched,
            "turn.started" => TurnEvent::Started,
            "turn.cancelling" => TurnEvent::CancelRequested,
            "turn.completed" => TurnEvent::Completed,
            "turn.failed" => TurnEvent::Failed,
            "turn.cancelled" => TurnEvent::Cancelled,
            "turn.interrupted" => TurnEvent::Interrupted,
            _ => return,
        };
        let Some(turn) = self.turns.get_mut(&turn_id) else {
            return;
        };
        if turn.state.apply(ev).is_err() {
            tracing::warn!(turn = %turn_id, event = t, "groupx: transition refused while folding");
            return;
        }
        if let Some(code) = b.get("errorCode").and_then(Value::as_str) {
            turn.error_code = Some(code.to_string());
        }
        if let Some(r) = b.get("responseEventId").and_then(Value::as_str) {
            turn.response_event_id = Some(r.to_string());
        }
        if turn.state.status.is_terminal() {
            let (agent, src) = (turn.target.clone(), turn.source_seq);
            if let Some(lane) = self.lanes.get_mut(&agent) {
                // Usually the front (the turn in flight); a cancelled queued one is anywhere.
                if lane.front() == Some(&turn_id) {
                    lane.pop_front();
                } else {
                    lane.retain(|x| x != &turn_id);
                }
            }
            let seen = self.seen_up_to.entry(agent).or_default();
            *seen = (*seen).max(src);
        }
    }

    /// Unfinished turns of an agent (its queue depth), counting commands not folded yet.
    pub fn depth(&self, agent: &str) -> usize {
        self.lanes.get(agent).map_or(0, VecDeque::len)
            + self
                .pending
                .values()
                .filter(|t| t.iter().any(|x| x == agent))
                .count()
    }

    /// Whether a command with a turn for `agent` is committing (its lane must wait for it).
    pub fn pending_for(&self, agent: &str) -> bool {
        self.pending.values().any(|t| t.iter().any(|x| x == agent))
    }

    /// The agent's next turn still waiting to be dispatched.
    pub fn next_queued(&self, agent: &str) -> Option<&Turn> {
        self.lanes
            .get(agent)?
            .iter()
            .filter_map(|id| self.turns.get(id))
            .find(|t| t.state.status == TurnStatus::Queued)
    }

    /// The agent's turn in flight (dispatched, running or cancelling). A lane dispatches in
    /// order, one at a time, so that turn is at its front: only the first few are looked at
    /// (a long queue must not make every post scan it).
    pub fn active(&self, agent: &str) -> Option<&Turn> {
        self.lanes
            .get(agent)?
            .iter()
            .take(4)
            .filter_map(|id| self.turns.get(id))
            .find(|t| t.state.status != TurnStatus::Queued)
    }

    /// The agents of a turn's ancestor chain (its own target first), from the folded parents.
    pub fn ancestors(&self, turn_id: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut cur = self.turns.get(turn_id);
        // Bounded: a parent is always an earlier turn, but a corrupt ledger must not hang us.
        while let Some(t) = cur {
            if out.len() > 256 {
                break;
            }
            out.push(t.target.clone());
            cur = t.parent_turn_id.as_ref().and_then(|p| self.turns.get(p));
        }
        out
    }

    /// How many turns one root chain has, in all and per agent (kept by the fold: a post
    /// must not scan every turn the room ever had).
    pub fn root_counts(&self, root: &str) -> (usize, HashMap<String, usize>) {
        self.roots.get(root).cloned().unwrap_or_default()
    }

    /// The turns a message created, in creation order.
    pub fn turns_of(&self, message_event_id: &str) -> Vec<&Turn> {
        self.by_message
            .get(message_event_id)
            .and_then(|k| self.commands.get(k))
            .map(|c| {
                c.turns
                    .iter()
                    .filter_map(|(_, id, _)| self.turns.get(id))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Where the follower of foreign messages resumes: before the first foreign message that
    /// has no turn yet and came after the last one that has (older ones were seen by an earlier
    /// run, which made their turns or found nobody to wake).
    pub fn foreign_resume_point(&self) -> u64 {
        let answered = self
            .turns
            .values()
            .filter(|t| t.command_type == "face.message")
            .map(|t| t.source_seq)
            .max()
            .unwrap_or(0);
        // At worst the follower re-reads the crash window; has_turn keeps it idempotent.
        answered.min(self.foreign_head)
    }

    /// Whether `target` already has a turn for this message.
    pub fn has_turn(&self, message_event_id: &str, target: &str) -> bool {
        self.turns_of(message_event_id)
            .iter()
            .any(|t| t.target == target)
    }

    /// The seq of a message the broker created.
    pub fn message_seq(&self, message_event_id: &str) -> Option<u64> {
        self.by_message
            .get(message_event_id)
            .and_then(|k| self.commands.get(k))
            .map(|c| c.message_seq)
    }

    /// Every unfinished turn, in lane order per agent.
    pub fn unfinished(&self) -> Vec<&Turn> {
        let mut v: Vec<&Turn> = self
            .lanes
            .values()
            .flatten()
            .filter_map(|id| self.turns.get(id))
            .collect();
        v.sort_by_key(|t| t.source_seq);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ext(turn: &str, extra: Value) -> Value {
        let mut b = json!({"turnId": turn});
        if let (Some(o), Some(e)) = (b.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        json!({"groupx": {"correlationId": "c", "rootCorrelationId": "c"}, "body": b})
    }

    #[test]
    fn a_turn_folds_from_queued_to_terminal_and_leaves_its_lane() {
        let mut r = Room::default();
        r.fold(1, "evt_1", "chat.message", "user", &json!({"text": "x", "groupx": {"clientCommandId": "k", "binding": "user:web", "canonical": "p", "correlationId": "c"}}));
        r.fold(
            2,
            "e2",
            "x.groupx.turn.queued",
            "system",
            &ext("t1", json!({"target": "agent:a", "sourceEventId": "evt_1"})),
        );
        assert_eq!(r.depth("a"), 1);
        assert_eq!(
            r.commands[&command_key("user:web", "k")].turns,
            vec![("agent:a".to_string(), "t1".to_string(), 0)]
        );
        assert_eq!(r.next_queued("a").unwrap().turn_id, "t1");
        assert_eq!(r.turns["t1"].source_seq, 1);
        r.fold(
            3,
            "e3",
            "x.groupx.turn.dispatched",
            "system",
            &ext("t1", json!({})),
        );
        assert!(r.next_queued("a").is_none());
        assert_eq!(r.active("a").unwrap().turn_id, "t1");
        // Another face cannot settle a turn.
        r.fold(
            4,
            "e4",
            "x.groupx.turn.completed",
            "user",
            &ext("t1", json!({})),
        );
        assert_eq!(r.depth("a"), 1);
        r.fold(
            5,
            "e5",
            "x.groupx.turn.failed",
            "system",
            &ext("t1", json!({"errorCode": "AGENT_EXITED"})),
        );
        assert_eq!(r.depth("a"), 0);
        assert_eq!(r.turns["t1"].error_code.as_deref(), Some("AGENT_EXITED"));
        assert_eq!(r.seen_up_to["a"], 1);
    }
}
