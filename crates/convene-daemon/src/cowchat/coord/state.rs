//! The in-memory projection of the coordination events (`x.cowchat.vote.*`,
//! `x.cowchat.election.*`, `x.cowchat.leader.*`, `x.cowchat.task.*`). Pure: it only folds
//! ledger events, in ledger order, so the state after a restart is the state before it.
//!
//! Server-authored kinds (result, elected, cleared) count only when written by the face's
//! service principal, and a ballot only when written by the voter itself: another face
//! appending look-alike events cannot forge a result or a ballot.

use std::collections::{BTreeSet, HashMap};

use serde_json::{json, Value};

use super::super::SERVICE;

/// Kind of a vote's creation.
pub(crate) const VOTE_CREATED: &str = "x.cowchat.vote.created";
/// Kind of a sealed ballot.
pub(crate) const VOTE_BALLOT: &str = "x.cowchat.vote.ballot";
/// Kind of an eligible voter leaving the room (server-written): without a ballot it is no
/// longer eligible; with one, its name is kept for the reveal.
pub(crate) const VOTE_VOTER_LEFT: &str = "x.cowchat.vote.voter_left";
/// Kind of a vote's reveal.
pub(crate) const VOTE_RESULT: &str = "x.cowchat.vote.result";
/// Kind of an election's start.
pub(crate) const ELECTION_STARTED: &str = "x.cowchat.election.started";
/// Kind of a candidate opting out.
pub(crate) const ELECTION_DECLINED: &str = "x.cowchat.election.declined";
/// Kind of an elected leader.
pub(crate) const LEADER_ELECTED: &str = "x.cowchat.leader.elected";
/// Kind of a cleared leadership (or an election nobody won).
pub(crate) const LEADER_CLEARED: &str = "x.cowchat.leader.cleared";
/// Kind of a new task.
pub(crate) const TASK_ASSIGNED: &str = "x.cowchat.task.assigned";
/// Kind of a task change.
pub(crate) const TASK_UPDATED: &str = "x.cowchat.task.updated";

/// Every kind the projection folds (a test checks the start-up rebuild reads them all).
#[cfg(test)]
pub(crate) const KINDS: [&str; 10] = [
    VOTE_CREATED,
    VOTE_BALLOT,
    VOTE_VOTER_LEFT,
    VOTE_RESULT,
    ELECTION_STARTED,
    ELECTION_DECLINED,
    LEADER_ELECTED,
    LEADER_CLEARED,
    TASK_ASSIGNED,
    TASK_UPDATED,
];

/// A vote as the server knows it.
#[derive(Debug, Clone)]
pub(crate) struct Vote {
    pub vote_id: String,
    pub room_id: String,
    pub title: String,
    pub description: Option<String>,
    pub options: Vec<String>,
    pub eligible: Vec<String>,
    /// The actor generation each eligible voter had when the vote was created (empty for
    /// votes made by builds that did not record it): an agent removed and added again under
    /// its id is another actor (CCCS §6.4), not the voter the vote was created with.
    pub generations: HashMap<String, u64>,
    pub duration_secs: Option<u64>,
    pub deadline: Option<String>,
    pub created_by: String,
    pub created_at: String,
    /// (agent id, sealed ballot), in casting order.
    pub ballots: Vec<(String, String)>,
    /// The revealed result (the `x.cowchat.vote.result` data) once closed.
    pub result: Option<Value>,
    pub closed_at: Option<String>,
    /// Voters that voted and then left the room → their name then (the reveal names every
    /// ballot, and a former member's actor title is gone).
    pub left_names: HashMap<String, String>,
}

impl Vote {
    /// True until the result is revealed.
    pub fn is_open(&self) -> bool {
        self.result.is_none()
    }

    /// True when every eligible voter has cast a ballot.
    pub fn all_voted(&self) -> bool {
        self.eligible
            .iter()
            .all(|e| self.ballots.iter().any(|(a, _)| a == e))
    }

    /// True when `agent`, now at actor `generation`, is the member the vote was created with
    /// (always, for a vote that recorded no generations).
    pub fn same_voter(&self, agent: &str, generation: u64) -> bool {
        self.generations.get(agent).is_none_or(|g| *g == generation)
    }

    /// True when `agent` already voted.
    pub fn has_voted(&self, agent: &str) -> bool {
        self.ballots.iter().any(|(a, _)| a == agent)
    }

    /// The wire status: counts only while open; tally and ballots once closed.
    pub fn status_value(&self) -> Value {
        let mut v = json!({
            "vote_id": self.vote_id,
            "room_id": self.room_id,
            "title": self.title,
            "description": self.description,
            "options": self.options,
            "status": if self.is_open() { "open" } else { "closed" },
            "created_by": self.created_by,
            "created_at": self.created_at,
            "duration_secs": self.duration_secs,
            "deadline": self.deadline,
            "votes_cast": self.ballots.len(),
            "eligible_voters": self.eligible.len(),
        });
        if let Some(r) = &self.result {
            for k in ["tally", "ballots", "total_votes", "reason"] {
                v[k] = r.get(k).cloned().unwrap_or(Value::Null);
            }
            v["closed_at"] = json!(self.closed_at);
        }
        v
    }
}

/// An election inside its opt-out window.
#[derive(Debug, Clone)]
pub(crate) struct Election {
    pub candidates: Vec<String>,
    pub declined: BTreeSet<String>,
    pub ends_at: String,
}

impl Election {
    /// Candidates that did not decline, in candidate order.
    pub fn remaining(&self) -> Vec<String> {
        self.candidates
            .iter()
            .filter(|c| !self.declined.contains(*c))
            .cloned()
            .collect()
    }
}

/// A task.
#[derive(Debug, Clone)]
pub(crate) struct Task {
    pub task_id: String,
    pub room_id: String,
    pub title: String,
    pub description: Option<String>,
    pub assignee: Option<String>,
    pub status: String,
    pub created_by: String,
    pub created_at: String,
    pub updated_at: String,
    pub note: Option<String>,
    pub updated_by: Option<String>,
}

impl Task {
    /// The wire Task object.
    pub fn value(&self) -> Value {
        json!({
            "task_id": self.task_id,
            "room_id": self.room_id,
            "title": self.title,
            "description": self.description,
            "assignee": self.assignee,
            "status": self.status,
            "created_by": self.created_by,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "note": self.note,
            "updated_by": self.updated_by,
        })
    }
}

/// The coordination state of every room.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub votes: HashMap<String, Vote>,
    /// room id → vote ids, oldest first.
    pub room_votes: HashMap<String, Vec<String>>,
    /// room id → the election in its window.
    pub elections: HashMap<String, Election>,
    /// room id → (leader id, leader name).
    pub leaders: HashMap<String, (String, String)>,
    pub tasks: HashMap<String, Task>,
    /// room id → task ids, oldest first.
    pub room_tasks: HashMap<String, Vec<String>>,
}

fn s(d: &Value, k: &str) -> Option<String> {
    d.get(k).and_then(Value::as_str).map(str::to_string)
}

fn strings(d: &Value, k: &str) -> Vec<String> {
    d.get(k)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

impl State {
    /// Drops everything of a destroyed room: its votes, tasks, election and leader.
    pub fn forget_room(&mut self, room: &str) {
        for id in self.room_votes.remove(room).unwrap_or_default() {
            self.votes.remove(&id);
        }
        for id in self.room_tasks.remove(room).unwrap_or_default() {
            self.tasks.remove(&id);
        }
        self.elections.remove(room);
        self.leaders.remove(room);
    }

    /// Folds one event of `room` (its kind, principal, timestamp and data). Unknown kinds,
    /// malformed data and events that contradict the state are ignored.
    pub fn apply(&mut self, room: &str, kind: &str, by: &str, ts: &str, d: &Value) {
        match kind {
            VOTE_CREATED => {
                let Some(id) = s(d, "vote_id") else { return };
                if self.votes.contains_key(&id) {
                    return;
                }
                self.votes.insert(
                    id.clone(),
                    Vote {
                        vote_id: id.clone(),
                        room_id: room.to_string(),
                        title: s(d, "title").unwrap_or_default(),
                        description: s(d, "description"),
                        options: strings(d, "options"),
                        eligible: strings(d, "eligible_voters"),
                        generations: d
                            .get("eligible_generations")
                            .and_then(Value::as_object)
                            .map(|m| {
                                m.iter()
                                    .filter_map(|(k, v)| Some((k.clone(), v.as_u64()?)))
                                    .collect()
                            })
                            .unwrap_or_default(),
                        duration_secs: d.get("duration_secs").and_then(Value::as_u64),
                        deadline: s(d, "deadline"),
                        created_by: s(d, "created_by").unwrap_or_else(|| by.to_string()),
                        created_at: ts.to_string(),
                        ballots: Vec::new(),
                        result: None,
                        closed_at: None,
                        left_names: HashMap::new(),
                    },
                );
                self.room_votes
                    .entry(room.to_string())
                    .or_default()
                    .push(id);
            }
            VOTE_BALLOT => {
                let (Some(id), Some(agent), Some(sealed)) =
                    (s(d, "vote_id"), s(d, "agent_id"), s(d, "sealed"))
                else {
                    return;
                };
                let Some(v) = self.votes.get_mut(&id) else {
                    return;
                };
                if agent == by
                    && v.room_id == room
                    && v.is_open()
                    && v.eligible.contains(&agent)
                    && !v.has_voted(&agent)
                {
                    v.ballots.push((agent, sealed));
                }
            }
            VOTE_VOTER_LEFT if by == SERVICE => {
                let (Some(id), Some(agent)) = (s(d, "vote_id"), s(d, "agent_id")) else {
                    return;
                };
                let Some(v) = self.votes.get_mut(&id) else {
                    return;
                };
                if v.room_id != room || !v.is_open() {
                    return;
                }
                if v.has_voted(&agent) {
                    let name = s(d, "agent_name").unwrap_or_else(|| agent.clone());
                    v.left_names.insert(agent, name);
                } else {
                    v.eligible.retain(|e| *e != agent);
                }
            }
            VOTE_RESULT if by == SERVICE => {
                let Some(v) = s(d, "vote_id").and_then(|id| self.votes.get_mut(&id)) else {
                    return;
                };
                if v.room_id == room && v.is_open() {
                    v.result = Some(d.clone());
                    v.closed_at = Some(ts.to_string());
                }
            }
            ELECTION_STARTED => {
                self.elections.insert(
                    room.to_string(),
                    Election {
                        candidates: strings(d, "candidates"),
                        declined: BTreeSet::new(),
                        ends_at: s(d, "ends_at").unwrap_or_default(),
                    },
                );
            }
            ELECTION_DECLINED => {
                if let (Some(e), Some(a)) = (self.elections.get_mut(room), s(d, "agent_id")) {
                    if a == by {
                        e.declined.insert(a);
                    }
                }
            }
            LEADER_ELECTED if by == SERVICE => {
                self.elections.remove(room);
                if let Some(id) = s(d, "leader_id") {
                    let name = s(d, "leader_name").unwrap_or_else(|| id.clone());
                    self.leaders.insert(room.to_string(), (id, name));
                }
            }
            LEADER_CLEARED if by == SERVICE => {
                if d.get("ends_election").and_then(Value::as_bool) == Some(true) {
                    self.elections.remove(room);
                }
                self.leaders.remove(room);
            }
            TASK_ASSIGNED => {
                let Some(id) = s(d, "task_id") else { return };
                if self.tasks.contains_key(&id) {
                    return;
                }
                self.tasks.insert(
                    id.clone(),
                    Task {
                        task_id: id.clone(),
                        room_id: room.to_string(),
                        title: s(d, "title").unwrap_or_default(),
                        description: s(d, "description"),
                        assignee: s(d, "assignee"),
                        status: s(d, "status").unwrap_or_else(|| "pending".into()),
                        created_by: s(d, "created_by").unwrap_or_else(|| by.to_string()),
                        created_at: ts.to_string(),
                        updated_at: ts.to_string(),
                        note: None,
                        updated_by: None,
                    },
                );
                self.room_tasks
                    .entry(room.to_string())
                    .or_default()
                    .push(id);
            }
            TASK_UPDATED => {
                let Some(t) = s(d, "task_id").and_then(|id| self.tasks.get_mut(&id)) else {
                    return;
                };
                if t.room_id != room {
                    return;
                }
                if let Some(st) = s(d, "status") {
                    t.status = st;
                }
                if d.get("assignee").is_some() {
                    t.assignee = s(d, "assignee");
                }
                if let Some(n) = s(d, "note") {
                    t.note = Some(n);
                }
                t.updated_at = ts.to_string();
                t.updated_by = Some(by.to_string());
            }
            _ => {}
        }
    }

    /// The current leader of a room.
    pub fn leader(&self, room: &str) -> Option<&(String, String)> {
        self.leaders.get(room)
    }
}

/// The `x.cowchat.vote.result` data of a vote whose ballots were opened: every option with
/// its count (zero included), and every ballot in casting order.
pub(crate) fn result_data(v: &Vote, opened: &[(String, String, usize)], reason: &str) -> Value {
    let mut counts = vec![0u64; v.options.len()];
    for (_, _, i) in opened {
        if let Some(c) = counts.get_mut(*i) {
            *c += 1;
        }
    }
    let tally: Vec<Value> = v
        .options
        .iter()
        .zip(&counts)
        .enumerate()
        .map(|(i, (o, c))| json!({"option_index": i, "option_text": o, "count": c}))
        .collect();
    let ballots: Vec<Value> = opened
        .iter()
        .map(|(a, n, i)| json!({"agent_id": a, "agent_name": n, "option_index": i}))
        .collect();
    json!({
        "vote_id": v.vote_id,
        "title": v.title,
        "options": v.options,
        "tally": tally,
        "ballots": ballots,
        "total_votes": opened.len(),
        "eligible_voters": v.eligible.len(),
        "reason": reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const R: &str = "g_room";

    fn created(st: &mut State, eligible: &[&str]) {
        st.apply(
            R,
            VOTE_CREATED,
            "alice",
            "t0",
            &json!({"vote_id": "v1", "title": "q", "options": ["a", "b"],
                    "eligible_voters": eligible, "created_by": "alice"}),
        );
    }

    fn ballot(st: &mut State, by: &str, agent: &str) {
        st.apply(
            R,
            VOTE_BALLOT,
            by,
            "t1",
            &json!({"vote_id": "v1", "agent_id": agent, "sealed": "x"}),
        );
    }

    fn left(st: &mut State, by: &str, agent: &str, name: &str) {
        st.apply(
            R,
            VOTE_VOTER_LEFT,
            by,
            "t2",
            &json!({"vote_id": "v1", "agent_id": agent, "agent_name": name}),
        );
    }

    #[test]
    fn a_voter_that_left_is_no_longer_waited_for_and_keeps_its_ballot_and_name() {
        let mut st = State::default();
        created(&mut st, &["alice", "bob", "carol"]);
        ballot(&mut st, "bob", "bob");
        // Only the server's record counts.
        left(&mut st, "alice", "carol", "Carol");
        assert_eq!(st.votes["v1"].eligible.len(), 3);
        left(&mut st, SERVICE, "bob", "Bob B");
        left(&mut st, SERVICE, "carol", "Carol C");
        let v = &st.votes["v1"];
        assert_eq!(v.eligible, vec!["alice".to_string(), "bob".to_string()]);
        assert_eq!(v.left_names.get("bob").map(String::as_str), Some("Bob B"));
        assert!(!v.left_names.contains_key("carol") && !v.all_voted());
        // A ballot of the voter that left (folded in ledger order) no longer counts.
        ballot(&mut st, "carol", "carol");
        assert_eq!(st.votes["v1"].ballots.len(), 1);
        ballot(&mut st, "alice", "alice");
        assert!(st.votes["v1"].all_voted());
    }

    #[test]
    fn every_folded_kind_is_in_the_stores_coordination_index() {
        // The rebuild reads only what `Readers::coordination_after` returns: a kind outside
        // it would be lost at every restart.
        for k in KINDS {
            assert!(convene_store::is_coordination_kind(k), "{k}");
        }
        assert!(!convene_store::is_coordination_kind(
            super::super::super::THINKING_KIND
        ));
    }

    #[test]
    fn ballots_count_once_per_eligible_voter_and_only_by_the_voter() {
        let mut st = State::default();
        created(&mut st, &["alice", "bob"]);
        ballot(&mut st, "alice", "alice");
        ballot(&mut st, "alice", "alice"); // twice: ignored
        ballot(&mut st, "carol", "carol"); // not eligible
        ballot(&mut st, "alice", "bob"); // forged for bob
        let v = &st.votes["v1"];
        assert_eq!(v.ballots.len(), 1);
        assert!(!v.all_voted());
        ballot(&mut st, "bob", "bob");
        assert!(st.votes["v1"].all_voted());
    }

    #[test]
    fn open_status_has_counts_only_and_closed_status_reveals() {
        let mut st = State::default();
        created(&mut st, &["alice", "bob"]);
        ballot(&mut st, "alice", "alice");
        let open = st.votes["v1"].status_value();
        assert_eq!(open["status"], "open");
        assert_eq!(open["votes_cast"], 1);
        assert_eq!(open["eligible_voters"], 2);
        assert!(open.get("tally").is_none() && open.get("ballots").is_none());
        let r = result_data(
            &st.votes["v1"],
            &[("alice".into(), "Alice".into(), 1)],
            "deadline",
        );
        // Only the service may reveal.
        st.apply(R, VOTE_RESULT, "alice", "t2", &r);
        assert!(st.votes["v1"].is_open());
        st.apply(R, VOTE_RESULT, SERVICE, "t2", &r);
        let closed = st.votes["v1"].status_value();
        assert_eq!(closed["status"], "closed");
        assert_eq!(closed["reason"], "deadline");
        assert_eq!(closed["tally"][0]["count"], 0);
        assert_eq!(closed["tally"][1]["count"], 1);
        assert_eq!(closed["ballots"][0]["option_index"], 1);
        // A ballot after the reveal is ignored.
        ballot(&mut st, "bob", "bob");
        assert_eq!(st.votes["v1"].ballots.len(), 1);
    }

    #[test]
    fn elections_decline_elect_and_clear() {
        let mut st = State::default();
        st.apply(
            R,
            ELECTION_STARTED,
            "alice",
            "t0",
            &json!({"candidates": ["alice", "bob"], "started_by": "alice", "ends_at": "t2"}),
        );
        st.apply(
            R,
            ELECTION_DECLINED,
            "bob",
            "t1",
            &json!({"agent_id": "bob"}),
        );
        st.apply(
            R,
            ELECTION_DECLINED,
            "bob",
            "t1",
            &json!({"agent_id": "alice"}),
        );
        assert_eq!(st.elections[R].remaining(), vec!["alice".to_string()]);
        st.apply(
            R,
            LEADER_ELECTED,
            SERVICE,
            "t2",
            &json!({"leader_id": "alice", "leader_name": "Alice"}),
        );
        assert!(!st.elections.contains_key(R));
        assert_eq!(st.leader(R).map(|l| l.0.as_str()), Some("alice"));
        // A leaver's clear keeps any election running; an empty election ends.
        st.apply(
            R,
            LEADER_CLEARED,
            SERVICE,
            "t3",
            &json!({"reason": "leader left"}),
        );
        assert!(st.leader(R).is_none());
        st.apply(
            R,
            ELECTION_STARTED,
            "bob",
            "t4",
            &json!({"candidates": ["bob"]}),
        );
        st.apply(
            R,
            LEADER_CLEARED,
            SERVICE,
            "t5",
            &json!({"reason": "leader left"}),
        );
        assert!(st.elections.contains_key(R));
        st.apply(
            R,
            LEADER_CLEARED,
            SERVICE,
            "t6",
            &json!({"reason": "no candidates", "ends_election": true}),
        );
        assert!(!st.elections.contains_key(R));
    }

    #[test]
    fn tasks_are_assigned_then_updated() {
        let mut st = State::default();
        st.apply(
            R,
            TASK_ASSIGNED,
            "alice",
            "t0",
            &json!({"task_id": "t1", "title": "build", "assignee": "bob", "status": "pending"}),
        );
        st.apply(
            R,
            TASK_UPDATED,
            "bob",
            "t1",
            &json!({"task_id": "t1", "status": "in_progress", "assignee": "bob", "note": "on it"}),
        );
        st.apply(
            "g_other",
            TASK_UPDATED,
            "bob",
            "t2",
            &json!({"task_id": "t1", "status": "blocked"}),
        );
        let t = st.tasks["t1"].value();
        assert_eq!(t["status"], "in_progress");
        assert_eq!(t["note"], "on it");
        assert_eq!(t["updated_by"], "bob");
        assert_eq!(st.room_tasks[R], vec!["t1".to_string()]);
    }

    #[test]
    fn a_destroyed_room_leaves_nothing_behind() {
        let mut st = State::default();
        created(&mut st, &["alice"]);
        st.apply(
            "g_other",
            VOTE_CREATED,
            "bob",
            "t0",
            &json!({"vote_id": "v2", "title": "q", "options": ["a", "b"],
                    "eligible_voters": ["bob"], "created_by": "bob"}),
        );
        st.leaders
            .insert(R.into(), ("alice".into(), "Alice".into()));
        st.forget_room(R);
        assert!(!st.votes.contains_key("v1") && !st.room_votes.contains_key(R));
        assert!(!st.leaders.contains_key(R));
        assert!(st.votes.contains_key("v2"), "other rooms keep theirs");
    }
}
