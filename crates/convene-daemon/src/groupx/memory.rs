//! Memory and identity records and the room's context floor (§10.4, §10.5), folded from the
//! room's ledger events by the same `Room::fold` as turns, so they survive a restart exactly
//! as the ledger holds them.
//!
//! A record lineage starts with `<family>.remembered` (version 1); `<family>.superseded`
//! appends the next version (the old one stays in history, marked superseded);
//! `<family>.retracted` puts a tombstone on the current version. What a stored event claims
//! about lineage and version is not trusted: the fold derives both, takes the author from the
//! ledger principal (the binding, never the body), and ignores a change to a record that is
//! unknown, already retracted or not current.

use std::collections::HashMap;

use convene_groupx::envelope::{actor_id_of, KIND_PREFIX, LEDGER_SYSTEM, LEDGER_USER, USER_WEB};
use convene_groupx::memory::{Change, Family, RecordQuery};
use convene_groupx::{ErrorCode, GroupxError};
use serde_json::{json, Map, Value};

use super::room::command_key;

/// The tombstone of a retracted record.
#[derive(Debug, Clone)]
pub struct Retraction {
    /// The `…retracted` event.
    pub event_id: String,
    /// When.
    pub retracted_at: String,
    /// Why, if given.
    pub reason: Option<String>,
    /// Who retracted it.
    pub author_actor_id: String,
}

/// One version of a memory or identity record.
#[derive(Debug, Clone)]
pub struct Record {
    /// Memory or identity.
    pub family: Family,
    /// `mem_…` / `idn_…`.
    pub id: String,
    /// The id of version 1 of this lineage.
    pub lineage_id: String,
    /// 1, 2, …
    pub version: u64,
    /// The version this one replaced.
    pub supersedes: Option<String>,
    /// The version that replaced this one.
    pub superseded_by: Option<String>,
    /// Whom it is about.
    pub subject_actor_id: Option<String>,
    /// Who wrote this version (from the ledger principal).
    pub author_actor_id: String,
    /// Text.
    pub content: String,
    /// The room event it comes from.
    pub source_event_id: Option<String>,
    /// When this version was written.
    pub created_at: String,
    /// Family fields: `scope` and `agentMemoryType` (memory), `kind` (identity).
    pub attrs: Map<String, Value>,
    /// The event that wrote this version.
    pub event_id: String,
    /// Its seq.
    pub seq: u64,
    /// Set when the lineage was retracted at this version.
    pub retraction: Option<Retraction>,
}

impl Record {
    /// The public shape (`GET` answers and write answers).
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert(self.family.id_field().into(), self.id.clone().into());
        m.insert("lineageId".into(), self.lineage_id.clone().into());
        m.insert("version".into(), self.version.into());
        m.insert("supersedes".into(), self.supersedes.clone().into());
        m.extend(self.attrs.clone());
        m.insert(
            "subjectActorId".into(),
            self.subject_actor_id.clone().into(),
        );
        m.insert("authorActorId".into(), self.author_actor_id.clone().into());
        m.insert("content".into(), self.content.clone().into());
        m.insert("sourceEventId".into(), self.source_event_id.clone().into());
        m.insert("createdAt".into(), self.created_at.clone().into());
        m.insert("eventId".into(), self.event_id.clone().into());
        m.insert("seq".into(), self.seq.into());
        m.insert("retracted".into(), self.retraction.is_some().into());
        if let Some(r) = &self.retraction {
            m.insert("retractedAt".into(), r.retracted_at.clone().into());
            m.insert("retractReason".into(), r.reason.clone().into());
            m.insert("retractEventId".into(), r.event_id.clone().into());
            m.insert("retractedBy".into(), r.author_actor_id.clone().into());
        }
        Value::Object(m)
    }

    fn attr(&self, k: &str) -> Option<&str> {
        self.attrs.get(k).and_then(Value::as_str)
    }
}

/// What a served `clientCommandId` answered: a retry with the same payload gets it again.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The payload it was used with.
    pub canonical: String,
    /// HTTP status.
    pub status: u16,
    /// Body.
    pub body: Value,
}

/// The active context floor: room context is what comes after `floor_seq`.
#[derive(Debug, Clone, Default)]
pub struct ContextFloor {
    /// Messages with a seq above this count.
    pub floor_seq: u64,
    /// The `context.reset` that set it.
    pub reset_event_id: Option<String>,
}

/// The folded memory, identity and context state of the room.
#[derive(Debug, Default)]
pub struct Memory {
    /// Every version of every record, by id.
    records: HashMap<String, Record>,
    /// Lineage ids, in creation order.
    lineages: Vec<String>,
    /// Lineage id → its current version.
    heads: HashMap<String, String>,
    /// Served commands by [`command_key`] (binding + clientCommandId).
    pub commands: HashMap<String, Answer>,
    /// The context floor.
    pub context: ContextFloor,
}

fn s(v: &Value, k: &str) -> Option<String> {
    v.get(k).and_then(Value::as_str).map(str::to_string)
}

impl Memory {
    /// Folds one committed event; events of other kinds are ignored.
    pub fn fold(&mut self, seq: u64, id: &str, kind: &str, by: &str, data: &Value) {
        let Some(t) = kind.strip_prefix(KIND_PREFIX) else {
            return;
        };
        let body = data.get("body").unwrap_or(&Value::Null);
        let answer = if t == "context.reset" {
            if by != LEDGER_SYSTEM {
                return;
            }
            let floor = body.get("floorSeq").and_then(Value::as_u64).unwrap_or(0);
            self.context = ContextFloor {
                floor_seq: self.context.floor_seq.max(floor),
                reset_event_id: Some(id.to_string()),
            };
            Some((
                200,
                json!({"reset": true, "floorSeq": self.context.floor_seq,
                    "previousFloorSeq": body.get("previousFloorSeq").cloned().unwrap_or(Value::Null),
                    "eventId": id}),
            ))
        } else if let Some((family, change)) = Family::of_type(t) {
            self.fold_record(family, change, seq, id, by, body)
                .map(|(status, rec)| (status, json!({ family.name(): rec })))
        } else {
            return;
        };
        let gx = data.get("groupx").unwrap_or(&Value::Null);
        let binding = s(gx, "binding").unwrap_or_default();
        // Only the broker writes for the web binding: another principal claiming it would
        // otherwise take over the web client's keys.
        if binding == USER_WEB && by != LEDGER_USER && by != LEDGER_SYSTEM {
            return;
        }
        if let (Some((status, body)), Some(cid)) = (answer, s(gx, "clientCommandId")) {
            let key = command_key(&binding, &cid);
            let canonical = s(gx, "canonical").unwrap_or_default();
            self.commands.entry(key).or_insert(Answer {
                canonical,
                status,
                body,
            });
        }
    }

    /// Applies a record change; the status and record a command answers, if it applied.
    fn fold_record(
        &mut self,
        family: Family,
        change: Change,
        seq: u64,
        event_id: &str,
        by: &str,
        body: &Value,
    ) -> Option<(u16, Value)> {
        let rid = s(body, family.id_field()).filter(|r| !self.records.contains_key(r));
        let author = actor_id_of(by);
        // An agent writes only about itself in its own scope (§12) and changes only what it
        // wrote; what it appends otherwise is not folded.
        let agent = author.starts_with("agent:");
        let created_at = s(body, "createdAt").unwrap_or_default();
        match change {
            Change::Remembered => {
                let rid = rid?;
                let keys: &[&str] = match family {
                    Family::Memory => &["scope", "agentMemoryType"],
                    Family::Identity => &["kind"],
                };
                let attrs: Map<String, Value> = keys
                    .iter()
                    .map(|k| (k.to_string(), body.get(*k).cloned().unwrap_or(Value::Null)))
                    .collect();
                let private = family == Family::Identity
                    || attrs.get("scope").and_then(Value::as_str) == Some("agent");
                if agent && private && s(body, "subjectActorId").as_deref() != Some(&author) {
                    return None;
                }
                let rec = Record {
                    family,
                    id: rid.clone(),
                    lineage_id: rid.clone(),
                    version: 1,
                    supersedes: None,
                    superseded_by: None,
                    subject_actor_id: s(body, "subjectActorId"),
                    author_actor_id: author,
                    content: s(body, "content").unwrap_or_default(),
                    source_event_id: s(body, "sourceEventId"),
                    created_at,
                    attrs,
                    event_id: event_id.to_string(),
                    seq,
                    retraction: None,
                };
                let out = rec.to_json();
                self.lineages.push(rid.clone());
                self.heads.insert(rid.clone(), rid.clone());
                self.records.insert(rid, rec);
                Some((201, out))
            }
            Change::Superseded => {
                let rid = rid?;
                let old_id = s(body, "supersedes")?;
                let old = self.current(family, &old_id).ok()?.clone();
                if agent && old.author_actor_id != author {
                    return None;
                }
                let rec = Record {
                    id: rid.clone(),
                    version: old.version + 1,
                    supersedes: Some(old.id.clone()),
                    author_actor_id: author,
                    content: s(body, "content").unwrap_or_default(),
                    source_event_id: s(body, "sourceEventId").or(old.source_event_id.clone()),
                    created_at,
                    event_id: event_id.to_string(),
                    seq,
                    ..old
                };
                let out = rec.to_json();
                if let Some(o) = self.records.get_mut(&old_id) {
                    o.superseded_by = Some(rid.clone());
                }
                self.heads.insert(rec.lineage_id.clone(), rid.clone());
                self.records.insert(rid, rec);
                Some((201, out))
            }
            Change::Retracted => {
                let target = s(body, family.id_field())?;
                let old = self.current(family, &target).ok()?;
                if agent && old.author_actor_id != author {
                    return None;
                }
                let rec = self.records.get_mut(&target)?;
                rec.retraction = Some(Retraction {
                    event_id: event_id.to_string(),
                    retracted_at: s(body, "retractedAt").unwrap_or_default(),
                    reason: s(body, "reason"),
                    author_actor_id: author,
                });
                Some((200, rec.to_json()))
            }
        }
    }

    /// The record `id` if it is the current, unretracted version of its lineage; otherwise
    /// the refusal a supersede or retract of it gets.
    pub fn current(&self, family: Family, id: &str) -> Result<&Record, GroupxError> {
        let Some(r) = self.records.get(id).filter(|r| r.family == family) else {
            return Err(GroupxError::new(
                family.unknown(),
                format!("no {} record {id}", family.name()),
            ));
        };
        if let Some(newer) = &r.superseded_by {
            return Err(GroupxError::new(
                family.superseded(),
                format!(
                    "{id} was superseded by {}; change the current version",
                    self.heads.get(&r.lineage_id).unwrap_or(newer)
                ),
            ));
        }
        if r.retraction.is_some() {
            return Err(GroupxError::new(
                family.retracted(),
                format!("{id} was retracted"),
            ));
        }
        Ok(r)
    }

    /// The current, unretracted version of every lineage of `family`, in creation order.
    pub fn current_records(&self, family: Family) -> impl Iterator<Item = &Record> {
        self.lineages
            .iter()
            .filter_map(|l| self.heads.get(l).and_then(|h| self.records.get(h)))
            .filter(move |r| r.family == family && r.retraction.is_none())
    }

    /// Current versions matching `q`, lineages in creation order.
    pub fn list(&self, family: Family, q: &RecordQuery) -> Vec<Value> {
        self.lineages
            .iter()
            .filter_map(|l| self.heads.get(l).and_then(|h| self.records.get(h)))
            .filter(|r| r.family == family)
            .filter(|r| q.include_retracted || r.retraction.is_none())
            .filter(|r| {
                q.scope
                    .is_none_or(|sc| r.attr("scope") == Some(sc.as_str()))
            })
            .filter(|r| {
                q.agent_memory_type
                    .is_none_or(|t| r.attr("agentMemoryType") == Some(t.as_str()))
            })
            .filter(|r| q.kind.as_deref().is_none_or(|k| r.attr("kind") == Some(k)))
            .filter(|r| {
                q.agent_id
                    .as_deref()
                    .is_none_or(|a| r.subject_actor_id.as_deref() == Some(a))
            })
            .map(Record::to_json)
            .collect()
    }
}

/// Refusal of a `clientCommandId` already used for another payload.
pub fn conflict() -> GroupxError {
    GroupxError::new(
        ErrorCode::ClientCommandConflict,
        "this clientCommandId was used for another command",
    )
    .field("clientCommandId")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(cid: &str, body: Value) -> Value {
        json!({"groupx": {"clientCommandId": cid, "canonical": cid, "binding": "user:web"}, "body": body})
    }

    #[test]
    fn a_lineage_supersedes_and_retracts_and_the_fold_trusts_no_claimed_version() {
        let mut m = Memory::default();
        let q = RecordQuery::default();
        m.fold(1, "e1", "x.groupx.memory.remembered", "user",
            &ev("k1", json!({"memoryId": "mem_1", "scope": "room", "content": "v1", "authorActorId": "agent:x"})));
        assert_eq!(m.commands[&command_key("user:web", "k1")].status, 201);
        assert_eq!(
            m.commands[&command_key("user:web", "k1")].body["memory"]["authorActorId"],
            "user:web"
        );
        m.fold(2, "e2", "x.groupx.memory.superseded", "user",
            &ev("k2", json!({"memoryId": "mem_2", "supersedes": "mem_1", "content": "v2", "version": 9, "scope": "agent"})));
        let [cur] = &m.list(Family::Memory, &q)[..] else {
            panic!("one lineage")
        };
        assert_eq!(
            (
                &cur["memoryId"],
                &cur["version"],
                &cur["lineageId"],
                &cur["scope"]
            ),
            (&json!("mem_2"), &json!(2), &json!("mem_1"), &json!("room"))
        );
        assert_eq!(
            m.current(Family::Memory, "mem_1").unwrap_err().code,
            ErrorCode::MemorySuperseded
        );
        // A second supersede of the old version is not folded.
        m.fold(
            3,
            "e3",
            "x.groupx.memory.superseded",
            "user",
            &ev(
                "k3",
                json!({"memoryId": "mem_3", "supersedes": "mem_1", "content": "fork"}),
            ),
        );
        assert!(!m.commands.contains_key(&command_key("user:web", "k3")));
        m.fold(
            4,
            "e4",
            "x.groupx.memory.retracted",
            "user",
            &ev("k4", json!({"memoryId": "mem_2", "reason": "wrong"})),
        );
        assert!(m.list(Family::Memory, &q).is_empty());
        assert_eq!(
            m.current(Family::Memory, "mem_2").unwrap_err().code,
            ErrorCode::MemoryRetracted
        );
        let all = m.list(
            Family::Memory,
            &RecordQuery {
                include_retracted: true,
                ..q.clone()
            },
        );
        assert_eq!(all[0]["retractReason"], "wrong");
        assert_eq!(
            m.current(Family::Identity, "mem_2").unwrap_err().code,
            ErrorCode::UnknownIdentity
        );
    }

    #[test]
    fn only_the_broker_answers_for_the_web_binding() {
        let mut m = Memory::default();
        m.fold(
            1,
            "e1",
            "x.groupx.memory.remembered",
            "codex",
            &ev(
                "k",
                json!({"memoryId": "mem_1", "scope": "room", "content": "x"}),
            ),
        );
        assert!(!m.commands.contains_key(&command_key("user:web", "k")));
        // The record itself stands, authored by who wrote it.
        assert_eq!(
            m.list(Family::Memory, &RecordQuery::default())[0]["authorActorId"],
            "agent:codex"
        );
    }

    #[test]
    fn an_agent_writes_only_about_itself_and_changes_only_its_own_records() {
        let mut m = Memory::default();
        let agent_ev = |cid: &str, body: Value| json!({"groupx": {"clientCommandId": cid, "canonical": cid, "binding": "bind_a"}, "body": body});
        let core = json!({"memoryId": "mem_1", "scope": "agent", "agentMemoryType": "core",
            "subjectActorId": "agent:a", "content": "mine"});
        m.fold(
            1,
            "e1",
            "x.groupx.memory.remembered",
            "a",
            &agent_ev("k1", core),
        );
        let rec = &m.commands[&command_key("bind_a", "k1")].body["memory"];
        assert_eq!(
            (&rec["authorActorId"], &rec["subjectActorId"]),
            (&json!("agent:a"), &json!("agent:a"))
        );
        // Agent memory or identity about another agent is not folded.
        let other = json!({"memoryId": "mem_2", "scope": "agent", "agentMemoryType": "core",
            "subjectActorId": "agent:b", "content": "theirs"});
        m.fold(
            2,
            "e2",
            "x.groupx.memory.remembered",
            "a",
            &agent_ev("k2", other),
        );
        let idn = json!({"identityId": "idn_1", "kind": "role", "subjectActorId": "agent:b", "content": "x"});
        m.fold(
            3,
            "e3",
            "x.groupx.identity.remembered",
            "a",
            &agent_ev("k3", idn),
        );
        assert!(!m.commands.contains_key(&command_key("bind_a", "k2")));
        assert!(!m.commands.contains_key(&command_key("bind_a", "k3")));
        // A room record by the web client is not the agent's to retract.
        m.fold(
            4,
            "e4",
            "x.groupx.memory.remembered",
            "user",
            &ev(
                "k4",
                json!({"memoryId": "mem_3", "scope": "room", "content": "web"}),
            ),
        );
        m.fold(
            5,
            "e5",
            "x.groupx.memory.retracted",
            "a",
            &agent_ev("k5", json!({"memoryId": "mem_3"})),
        );
        assert_eq!(m.current_records(Family::Memory).count(), 2);
        m.fold(
            6,
            "e6",
            "x.groupx.memory.retracted",
            "a",
            &agent_ev("k6", json!({"memoryId": "mem_1"})),
        );
        assert_eq!(m.current_records(Family::Memory).count(), 1);
    }

    #[test]
    fn the_context_floor_only_moves_by_broker_resets() {
        let mut m = Memory::default();
        m.fold(
            5,
            "e5",
            "x.groupx.context.reset",
            "codex",
            &ev("k", json!({"floorSeq": 4})),
        );
        assert_eq!(m.context.floor_seq, 0);
        m.fold(
            6,
            "e6",
            "x.groupx.context.reset",
            "system",
            &ev("k", json!({"floorSeq": 4})),
        );
        assert_eq!(m.context.floor_seq, 4);
        assert_eq!(
            m.commands[&command_key("user:web", "k")].body["reset"],
            true
        );
    }
}
