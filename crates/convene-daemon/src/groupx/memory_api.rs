//! REST for memory and identity (§10.4) and for room context usage and reset (§10.5).
//!
//! Every write is one `x.groupx.<type>` event committed under the room lock after the
//! checks that depend on room state, and answered from what the fold made of it, so a retry
//! with the same `clientCommandId` answers the same thing even after a restart (§8.1). One
//! key names one command of the `user:web` binding, whichever route used it first.

use std::sync::Arc;

use convene_core::Command;
use convene_groupx::envelope::{self, LEDGER_SYSTEM, LEDGER_USER, USER_WEB};
use convene_groupx::memory::{
    self as req, Change, Family, RememberIdentity, RememberMemory, Retract, Supersede,
};
use convene_groupx::{ids, ErrorCode, GroupxError};
use hyper::body::Incoming;
use hyper::{Method, Request, Response};
use serde_json::{json, Map, Value};
use tokio::sync::MutexGuard;

use super::http::{body, error, json as json_response, Body};
use super::memory::conflict;
use super::room::{command_key, Room};
use super::Face;

/// Room context counts only these kinds (`message.created`; §10.5).
const CONTEXT_KINDS: &[&str] = &["chat.message"];

/// Events read per page while measuring context.
const PAGE: usize = 500;

/// Whether `path` is one of this module's routes.
pub(super) fn handles(path: &str) -> bool {
    ["/api/memory", "/api/identity", "/api/context"]
        .iter()
        .any(|p| path == *p || path.starts_with(&format!("{p}/")))
}

fn now() -> String {
    convene_core::event::format_ts(time::OffsetDateTime::now_utc())
}

fn storage(e: impl std::fmt::Display) -> GroupxError {
    GroupxError::new(ErrorCode::StorageError, e.to_string())
}

/// Serves one request under [`handles`].
pub(super) async fn route(face: Arc<Face>, req: Request<Incoming>, path: &str) -> Response<Body> {
    let method = req.method().clone();
    let query = req.uri().query().map(str::to_string);
    let r: Result<(u16, Value), GroupxError> = async {
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let max = face.cfg.limits.message_bytes;
        let family = |f: &str| match f {
            "memory" => Some(Family::Memory),
            "identity" => Some(Family::Identity),
            _ => None,
        };
        let not_allowed = || {
            Err(GroupxError::new(
                ErrorCode::MethodNotAllowed,
                format!("{method} is not allowed on {path}"),
            ))
        };
        match parts[..] {
            ["api", "context"] => match method {
                Method::GET => Ok((200, face.context_usage().await?)),
                _ => not_allowed(),
            },
            ["api", "context", "reset"] => match method {
                Method::POST => {
                    let p = req::parse_reset_context(&body(req).await?)?;
                    face.reset_context(p).await
                }
                _ => not_allowed(),
            },
            ["api", f] => {
                let Some(fam) = family(f) else {
                    return Err(GroupxError::new(
                        ErrorCode::NotFound,
                        format!("no route {path}"),
                    ));
                };
                match method {
                    Method::GET => {
                        let q = req::parse_query(fam, query.as_deref())?;
                        let room = face.room.lock().await;
                        Ok((200, json!({ fam.plural(): room.memory.list(fam, &q) })))
                    }
                    Method::POST if fam == Family::Memory => {
                        let p = req::parse_remember_memory(&body(req).await?, max)?;
                        face.remember_memory(p).await
                    }
                    Method::POST => {
                        let p = req::parse_remember_identity(&body(req).await?, max)?;
                        face.remember_identity(p).await
                    }
                    _ => not_allowed(),
                }
            }
            ["api", f, id, op] => {
                let Some(fam) = family(f) else {
                    return Err(GroupxError::new(
                        ErrorCode::NotFound,
                        format!("no route {path}"),
                    ));
                };
                if method != Method::POST {
                    return not_allowed();
                }
                match op {
                    "supersede" => {
                        let p = req::parse_supersede(&body(req).await?, max)?;
                        face.supersede(fam, id, p).await
                    }
                    "retract" => {
                        let p = req::parse_retract(&body(req).await?, max)?;
                        face.retract(fam, id, p).await
                    }
                    _ => Err(GroupxError::new(
                        ErrorCode::NotFound,
                        format!("no route {path}"),
                    )),
                }
            }
            _ => Err(GroupxError::new(
                ErrorCode::NotFound,
                format!("no route {path}"),
            )),
        }
    }
    .await;
    match r {
        Ok((status, v)) => json_response(status, &v),
        Err(e) => error(&e),
    }
}

impl Face {
    /// The answer of a served key: the first answer for the same payload, a conflict for
    /// another (including a key a message already used).
    fn replay(
        room: &Room,
        cid: &str,
        canonical: &str,
    ) -> Option<Result<(u16, Value), GroupxError>> {
        let key = command_key(USER_WEB, cid);
        if let Some(a) = room.memory.commands.get(&key) {
            return Some(if a.canonical == canonical {
                Ok((a.status, a.body.clone()))
            } else {
                Err(conflict())
            });
        }
        // A message with this key may still be committing (it is in `pending`, not yet in
        // `commands`): the key is taken all the same.
        (room.commands.contains_key(&key) || room.pending.contains_key(&key))
            .then(|| Err(conflict()))
    }

    /// Refuses a `sourceEventId` that is not an event of this room.
    pub(super) async fn check_source(&self, source: Option<&str>) -> Result<(), GroupxError> {
        let Some(src) = source else {
            return Ok(());
        };
        let (r, g, id) = (
            self.d.ledger.readers().clone(),
            self.group_id.clone(),
            src.to_string(),
        );
        let found = tokio::task::spawn_blocking(move || r.event(&g, &id))
            .await
            .map_err(storage)?
            .map_err(storage)?;
        match found {
            Some(_) => Ok(()),
            None => Err(GroupxError::new(
                ErrorCode::InvalidEnvelope,
                format!("sourceEventId {src} is not an event of this room"),
            )
            .field("sourceEventId")),
        }
    }

    /// Refuses a subject that is not an agent of the roster (enabled or not).
    fn check_subject(&self, subject: &str) -> Result<(), GroupxError> {
        if subject == USER_WEB {
            return Ok(());
        }
        let known = envelope::agent_ledger_id(subject).is_some_and(|a| self.cfg.agent(a).is_some());
        if known {
            Ok(())
        } else {
            Err(GroupxError::new(
                ErrorCode::UnknownActor,
                format!("{subject} is not an agent of this room"),
            )
            .field("subjectActorId"))
        }
    }

    /// Commits one `x.groupx.<ty>` event for the web client's command `cid` and answers what
    /// the fold recorded for it.
    #[allow(clippy::too_many_arguments)]
    async fn commit_command(
        &self,
        room: &mut MutexGuard<'_, Room>,
        by: &str,
        ty: &str,
        cid: &str,
        canonical: &str,
        causation: Option<&str>,
        body: Value,
    ) -> Result<(u16, Value), GroupxError> {
        self.commit_for(room, by, USER_WEB, ty, (cid, canonical), causation, body)
            .await
    }

    /// Commits one `x.groupx.<ty>` event by ledger principal `by` for the command
    /// `(clientCommandId, canonical)` of `binding`, and answers what the fold recorded for it.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn commit_for(
        &self,
        room: &mut MutexGuard<'_, Room>,
        by: &str,
        binding: &str,
        ty: &str,
        (cid, canonical): (&str, &str),
        causation: Option<&str>,
        body: Value,
    ) -> Result<(u16, Value), GroupxError> {
        let corr = ids::correlation_id();
        let mut gx = Map::new();
        gx.insert("correlationId".into(), corr.clone().into());
        gx.insert("rootCorrelationId".into(), corr.into());
        if let Some(c) = causation {
            gx.insert("causationId".into(), c.into());
        }
        gx.insert("to".into(), Value::Array(Vec::new()));
        gx.insert("clientCommandId".into(), cid.into());
        gx.insert("canonical".into(), canonical.into());
        gx.insert("binding".into(), binding.into());
        let cmd = Command::AppendExtension {
            group_id: self.group_id.clone(),
            by: by.into(),
            kind: format!("{}{ty}", envelope::KIND_PREFIX),
            data: json!({"groupx": gx, "body": body}),
        };
        self.append(room, vec![cmd]).await?;
        room.memory
            .commands
            .get(&command_key(binding, cid))
            .map(|a| (a.status, a.body.clone()))
            .ok_or_else(|| GroupxError::new(ErrorCode::StorageError, "command not folded"))
    }

    /// `POST /api/memory`.
    async fn remember_memory(&self, p: RememberMemory) -> Result<(u16, Value), GroupxError> {
        if let Some(s) = &p.subject_actor_id {
            self.check_subject(s)?;
        }
        self.check_source(p.source_event_id.as_deref()).await?;
        let canonical = p.canonical();
        let mut room = self.room.lock().await;
        if let Some(a) = Self::replay(&room, &p.client_command_id, &canonical) {
            return a;
        }
        let id = ids::new_id(Family::Memory.id_prefix());
        let body = json!({"memoryId": id, "lineageId": id, "version": 1, "supersedes": null,
            "scope": p.scope.as_str(), "subjectActorId": p.subject_actor_id,
            "authorActorId": USER_WEB,
            "agentMemoryType": p.agent_memory_type.map(|t| t.as_str()),
            "content": p.content, "sourceEventId": p.source_event_id, "createdAt": now()});
        let ty = Family::Memory.event_type(Change::Remembered);
        let src = p.source_event_id.as_deref();
        self.commit_command(
            &mut room,
            LEDGER_USER,
            &ty,
            &p.client_command_id,
            &canonical,
            src,
            body,
        )
        .await
    }

    /// `POST /api/identity`.
    async fn remember_identity(&self, p: RememberIdentity) -> Result<(u16, Value), GroupxError> {
        self.check_subject(&p.subject_actor_id)?;
        self.check_source(p.source_event_id.as_deref()).await?;
        let canonical = p.canonical();
        let mut room = self.room.lock().await;
        if let Some(a) = Self::replay(&room, &p.client_command_id, &canonical) {
            return a;
        }
        let id = ids::new_id(Family::Identity.id_prefix());
        let body = json!({"identityId": id, "lineageId": id, "version": 1, "supersedes": null,
            "kind": p.kind, "subjectActorId": p.subject_actor_id, "authorActorId": USER_WEB,
            "content": p.content, "sourceEventId": p.source_event_id, "createdAt": now()});
        let ty = Family::Identity.event_type(Change::Remembered);
        let src = p.source_event_id.as_deref();
        self.commit_command(
            &mut room,
            LEDGER_USER,
            &ty,
            &p.client_command_id,
            &canonical,
            src,
            body,
        )
        .await
    }

    /// `POST /api/{memory|identity}/:id/supersede`: the next version of the lineage.
    async fn supersede(
        &self,
        family: Family,
        target: &str,
        p: Supersede,
    ) -> Result<(u16, Value), GroupxError> {
        let canonical = p.canonical(family, target);
        let mut room = self.room.lock().await;
        if let Some(a) = Self::replay(&room, &p.client_command_id, &canonical) {
            return a;
        }
        let old = room.memory.current(family, target)?.clone();
        let id = ids::new_id(family.id_prefix());
        let mut body = Map::new();
        body.insert(family.id_field().into(), id.into());
        body.insert("lineageId".into(), old.lineage_id.clone().into());
        body.insert("version".into(), (old.version + 1).into());
        body.insert("supersedes".into(), old.id.clone().into());
        body.extend(old.attrs.clone());
        body.insert("subjectActorId".into(), old.subject_actor_id.clone().into());
        body.insert("authorActorId".into(), USER_WEB.into());
        body.insert("content".into(), p.content.into());
        body.insert("sourceEventId".into(), old.source_event_id.clone().into());
        body.insert("createdAt".into(), now().into());
        let ty = family.event_type(Change::Superseded);
        self.commit_command(
            &mut room,
            LEDGER_USER,
            &ty,
            &p.client_command_id,
            &canonical,
            Some(&old.event_id),
            Value::Object(body),
        )
        .await
    }

    /// `POST /api/{memory|identity}/:id/retract`: a tombstone on the current version.
    async fn retract(
        &self,
        family: Family,
        target: &str,
        p: Retract,
    ) -> Result<(u16, Value), GroupxError> {
        let canonical = p.canonical(family, target);
        let mut room = self.room.lock().await;
        if let Some(a) = Self::replay(&room, &p.client_command_id, &canonical) {
            return a;
        }
        let old = room.memory.current(family, target)?.clone();
        let body = json!({ family.id_field(): old.id, "lineageId": old.lineage_id,
            "version": old.version, "reason": p.reason, "authorActorId": USER_WEB,
            "retractedAt": now()});
        let ty = family.event_type(Change::Retracted);
        self.commit_command(
            &mut room,
            LEDGER_USER,
            &ty,
            &p.client_command_id,
            &canonical,
            Some(&old.event_id),
            body,
        )
        .await
    }

    /// Messages after `floor`: `(count, estimated characters)`. A message counts its text
    /// plus the line framing the Context Packet gives it (`- Name (actor) [eventId]: …\n`).
    async fn measure(&self, floor: u64) -> Result<(u64, u64), GroupxError> {
        let (mut count, mut chars, mut after) = (0u64, 0u64, floor);
        loop {
            let (r, g) = (self.d.ledger.readers().clone(), self.group_id.clone());
            let kinds: Vec<String> = CONTEXT_KINDS.iter().map(|k| k.to_string()).collect();
            let page = tokio::task::spawn_blocking(move || r.events_after(&g, after, PAGE, &kinds))
                .await
                .map_err(storage)?
                .map_err(storage)?;
            let Some(last) = page.last().map(|e| e.seq) else {
                break;
            };
            for e in &page {
                if let Some(env) = self.project(&e.json) {
                    let text = env.body["content"].as_str().unwrap_or_default();
                    let frame = format!(
                        "- {} ({}) [{}]: \n",
                        env.actor.display_name, env.actor.actor_id, env.event_id
                    );
                    count += 1;
                    chars += (frame.chars().count() + text.chars().count()) as u64;
                }
            }
            after = last;
        }
        Ok((count, chars))
    }

    /// `GET /api/context` (§10.5): a character estimate of room context since the floor.
    async fn context_usage(&self) -> Result<Value, GroupxError> {
        let floor = self.room.lock().await.memory.context.clone();
        let (messages, chars) = self.measure(floor.floor_seq).await?;
        let max = self.cfg.limits.context_characters;
        let pct = if max == 0 {
            0.0
        } else {
            (chars as f64 * 10000.0 / max as f64).round() / 100.0
        };
        Ok(
            json!({"roomId": envelope::ROOM_ID, "floorSeq": floor.floor_seq,
            "resetEventId": floor.reset_event_id, "messages": messages,
            "estimatedCharacters": chars, "maxCharacters": max, "utilizationPercent": pct}),
        )
    }

    /// `POST /api/context/reset` (§10.5): moves the floor to the room's head; with no
    /// message since the floor there is nothing to reset and nothing is appended.
    async fn reset_context(&self, p: req::ResetContext) -> Result<(u16, Value), GroupxError> {
        let canonical = p.canonical();
        let mut room = self.room.lock().await;
        if let Some(a) = Self::replay(&room, &p.client_command_id, &canonical) {
            return a;
        }
        let floor = room.memory.context.floor_seq;
        let (r, g) = (self.d.ledger.readers().clone(), self.group_id.clone());
        let kinds: Vec<String> = CONTEXT_KINDS.iter().map(|k| k.to_string()).collect();
        let (newer, head) = tokio::task::spawn_blocking(move || {
            Ok::<_, convene_store::StoreError>((
                r.events_after(&g, floor, 1, &kinds)?,
                r.head_seq(&g)?,
            ))
        })
        .await
        .map_err(storage)?
        .map_err(storage)?;
        if newer.is_empty() {
            return Ok((200, json!({"reset": false, "floorSeq": floor})));
        }
        let body = json!({"floorSeq": head.max(room.head), "previousFloorSeq": floor,
            "requestedBy": USER_WEB});
        self.commit_command(
            &mut room,
            LEDGER_SYSTEM,
            "context.reset",
            &p.client_command_id,
            &canonical,
            None,
            body,
        )
        .await
    }
}
