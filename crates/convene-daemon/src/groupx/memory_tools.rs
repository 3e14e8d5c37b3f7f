//! The agents' memory and identity tools (§12) and the memory an agent's Context Packet
//! recalls. A record an agent writes is authored by the ledger principal of its binding's
//! agent (the fold reads the author from the principal, never from the body), so an agent can
//! write room memory as itself and agent memory or identity only about itself.

use std::cmp::Reverse;

use convene_groupx::envelope;
use convene_groupx::memory::{Change, Family, RememberIdentity, RememberMemory, Scope};
use convene_groupx::tools::{IdentityRead, MemorySearch};
use convene_groupx::{ids, ErrorCode, GroupxError};
use serde_json::{json, Value};

use super::context::Recall;
use super::memory::{conflict, Memory, Record};
use super::room::{command_key, Room};
use super::Face;

/// Core memories recalled in a packet, at most (the newest).
pub const RECALL_CORE: usize = 20;
/// Identity records recalled in a packet, at most (the newest).
pub const RECALL_IDENTITY: usize = 20;
/// Room memories recalled in a packet, at most (the newest).
pub const RECALL_ROOM: usize = 10;

fn now() -> String {
    convene_core::event::format_ts(time::OffsetDateTime::now_utc())
}

fn attr<'a>(r: &'a Record, k: &str) -> Option<&'a str> {
    r.attrs.get(k).and_then(Value::as_str)
}

/// The answer of a key `binding` already used: its first answer for the same payload, a
/// conflict for another or for a key a message of the same binding used or is committing.
fn replay(
    room: &Room,
    binding: &str,
    cid: &str,
    canonical: &str,
) -> Option<Result<Value, GroupxError>> {
    let key = command_key(binding, cid);
    if let Some(a) = room.memory.commands.get(&key) {
        return Some(if a.canonical == canonical {
            Ok(a.body.clone())
        } else {
            Err(conflict())
        });
    }
    (room.commands.contains_key(&key) || room.pending.contains_key(&key)).then(|| Err(conflict()))
}

/// The newest `n` of `v`, oldest first.
fn newest(mut v: Vec<&Record>, n: usize) -> Vec<&Record> {
    v.sort_by_key(|r| r.seq);
    let skip = v.len().saturating_sub(n);
    v.split_off(skip)
}

/// What a packet recalls for `agent` (its ledger id): its own core memories and identity
/// records, and the newest public room memories, each oldest first.
pub(super) fn recall(mem: &Memory, agent: &str) -> Recall {
    let me = format!("agent:{agent}");
    let core: Vec<&Record> = mem
        .current_records(Family::Memory)
        .filter(|r| attr(r, "scope") == Some("agent") && attr(r, "agentMemoryType") == Some("core"))
        .filter(|r| r.subject_actor_id.as_deref() == Some(&me))
        .collect();
    let identity: Vec<&Record> = mem
        .current_records(Family::Identity)
        .filter(|r| r.subject_actor_id.as_deref() == Some(&me))
        .collect();
    let room: Vec<&Record> = mem
        .current_records(Family::Memory)
        .filter(|r| attr(r, "scope") == Some("room"))
        .collect();
    Recall {
        core: newest(core, RECALL_CORE)
            .into_iter()
            .map(|r| r.content.clone())
            .collect(),
        identity: newest(identity, RECALL_IDENTITY)
            .into_iter()
            .map(|r| (attr(r, "kind").unwrap_or("").to_string(), r.content.clone()))
            .collect(),
        room: newest(room, RECALL_ROOM)
            .into_iter()
            .map(|r| (r.author_actor_id.clone(), r.content.clone()))
            .collect(),
    }
}

impl Face {
    /// `groupx.memory.search`: room memory and the caller's own agent memory, newest first.
    pub(super) async fn memory_search(
        &self,
        agent: &str,
        q: MemorySearch,
    ) -> Result<Value, GroupxError> {
        let me = format!("agent:{agent}");
        let needle = q.query.map(|s| s.to_lowercase());
        let room = self.room.lock().await;
        let mut hits: Vec<&Record> = room
            .memory
            .current_records(Family::Memory)
            .filter(|r| match attr(r, "scope") {
                Some("room") => q.scope != Some(Scope::Agent),
                // Never another agent's agent-scope memory.
                Some("agent") => {
                    q.scope != Some(Scope::Room) && r.subject_actor_id.as_deref() == Some(&me)
                }
                _ => false,
            })
            .filter(|r| {
                needle
                    .as_deref()
                    .is_none_or(|n| r.content.to_lowercase().contains(n))
            })
            .collect();
        hits.sort_by_key(|r| Reverse(r.seq));
        let more = hits.len() > q.limit;
        hits.truncate(q.limit);
        let memories: Vec<Value> = hits.into_iter().map(Record::to_json).collect();
        Ok(json!({"memories": memories, "truncated": more}))
    }

    /// `groupx.identity.read`: current identity records of one roster agent or of all.
    pub(super) async fn identity_read(&self, q: IdentityRead) -> Result<Value, GroupxError> {
        if let Some(a) = &q.agent_id {
            let known = envelope::agent_ledger_id(a).is_some_and(|id| self.cfg.agent(id).is_some());
            if !known {
                return Err(GroupxError::new(
                    ErrorCode::UnknownActor,
                    format!("{a} is not an agent of this room"),
                )
                .field("agentId"));
            }
        }
        let room = self.room.lock().await;
        let identities: Vec<Value> = room
            .memory
            .current_records(Family::Identity)
            .filter(|r| {
                let subject = r.subject_actor_id.as_deref().unwrap_or("");
                match &q.agent_id {
                    Some(a) => subject == a,
                    None => envelope::agent_ledger_id(subject)
                        .is_some_and(|id| self.cfg.agent(id).is_some()),
                }
            })
            .map(Record::to_json)
            .collect();
        Ok(json!({ "identities": identities }))
    }

    /// `groupx.memory.remember` and `groupx.core_memory_remember`: a memory record authored
    /// by the calling agent (`agent`, its ledger id).
    pub(super) async fn agent_remember_memory(
        &self,
        binding: &str,
        agent: &str,
        p: RememberMemory,
    ) -> Result<Value, GroupxError> {
        self.check_source(p.source_event_id.as_deref()).await?;
        let canonical = p.canonical();
        let mut room = self.room.lock().await;
        if let Some(a) = replay(&room, binding, &p.client_command_id, &canonical) {
            return a;
        }
        let id = ids::new_id(Family::Memory.id_prefix());
        let body = json!({"memoryId": id, "lineageId": id, "version": 1, "supersedes": null,
            "scope": p.scope.as_str(), "subjectActorId": p.subject_actor_id,
            "authorActorId": format!("agent:{agent}"),
            "agentMemoryType": p.agent_memory_type.map(|t| t.as_str()),
            "content": p.content, "sourceEventId": p.source_event_id, "createdAt": now()});
        let ty = Family::Memory.event_type(Change::Remembered);
        let src = p.source_event_id.as_deref();
        self.commit_for(
            &mut room,
            agent,
            binding,
            &ty,
            (&p.client_command_id, &canonical),
            src,
            body,
        )
        .await
        .map(|(_, v)| v)
    }

    /// `groupx.identity.remember`: an identity record about, and by, the calling agent.
    pub(super) async fn agent_remember_identity(
        &self,
        binding: &str,
        agent: &str,
        p: RememberIdentity,
    ) -> Result<Value, GroupxError> {
        let canonical = p.canonical();
        let mut room = self.room.lock().await;
        if let Some(a) = replay(&room, binding, &p.client_command_id, &canonical) {
            return a;
        }
        let id = ids::new_id(Family::Identity.id_prefix());
        let body = json!({"identityId": id, "lineageId": id, "version": 1, "supersedes": null,
            "kind": p.kind, "subjectActorId": p.subject_actor_id,
            "authorActorId": format!("agent:{agent}"),
            "content": p.content, "sourceEventId": null, "createdAt": now()});
        let ty = Family::Identity.event_type(Change::Remembered);
        self.commit_for(
            &mut room,
            agent,
            binding,
            &ty,
            (&p.client_command_id, &canonical),
            None,
            body,
        )
        .await
        .map(|(_, v)| v)
    }
}
