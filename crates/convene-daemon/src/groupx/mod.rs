//! The GroupX face (spec `groupx-protocol.md`): a broker for one room, `room:main`, with REST +
//! SSE and a web page for the human on loopback HTTP, and turns that drive agent CLIs over ACP.
//!
//! The room is a ledger group (settings key [`ROOM_SETTING`]); agents are its actors (runtime
//! `groupx`, so the CCCS runtime never delivers to them); `message.created` is the stored
//! `chat.message`, every other GroupX type is an `x.groupx.<type>` event (see
//! `convene_groupx::envelope`). What the broker knows of turns and commands is folded from
//! those events ([`room::Room`]); every broker write happens under the room lock and re-checks
//! the turn's state first, so the ledger never holds a transition the machine refuses.

mod assistant;
mod command;
pub mod config;
mod context;
mod driver;
mod follow;
mod http;
mod lane;
mod mcp;
mod memory;
mod memory_api;
mod memory_tools;
mod native_sessions;
mod operator;
pub mod room;
mod setup;
mod sse;
mod supervise;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use convene_core::{Command, CoreError, ErrorCode as CoreCode};
use convene_groupx::envelope::{
    self, extension_data, Correlation, Stored, LEDGER_SYSTEM, LEDGER_USER,
};
use convene_groupx::request::{PostMessage, Recipients};
use convene_groupx::{Envelope, ErrorCode, GroupxError, TurnStatus};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokio::sync::{broadcast, Mutex, MutexGuard, Notify};

use crate::Daemon;
pub use config::Config;
use room::Room;

/// Group setting that marks the GroupX room.
pub const ROOM_SETTING: &str = "x_groupx_room";

/// Default HTTP address (`convene serve`), used when it is free.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7390";

/// Transient events buffered for slow SSE readers before they miss some.
const TRANSIENT_BUFFER: usize = 4096;

/// Largest request body.
const MAX_BODY: usize = 256 * 1024;

/// How far back bootstrap reads.
const BOOTSTRAP_EVENTS: usize = 200;

/// The face.
pub struct Face {
    d: Arc<Daemon>,
    /// The daemon's home (an agent's default working directory).
    home: std::path::PathBuf,
    group_id: String,
    cfg: Config,
    room: Mutex<Room>,
    /// Live-only events (deltas, progress): never stored, dropped for a lagging reader.
    transient: broadcast::Sender<Arc<str>>,
    /// Per agent: wake-up of its lane worker.
    wake: HashMap<String, Arc<Notify>>,
    /// Per agent: asks its running turn to cancel.
    cancel: HashMap<String, Arc<Notify>>,
    /// Per agent: `idle`, `starting`, `ready`, `failed`.
    sessions: parking_lot::Mutex<HashMap<String, &'static str>>,
    /// MCP binding → the agent whose live session holds it (§3.3).
    bindings: parking_lot::Mutex<HashMap<String, String>>,
    /// Agent → its turn in flight (the parent of what its MCP calls create).
    current: parking_lot::Mutex<HashMap<String, String>>,
    /// Woken after every commit of the face (waiting asks re-check).
    changed: Notify,
    /// Where HTTP listens (the MCP URL given to agents).
    addr: Option<SocketAddr>,
    /// Live progress of running turns, for watchers (§6.7).
    progress: parking_lot::Mutex<HashMap<String, supervise::Progress>>,
    /// Woken at each progress milestone.
    progressed: Notify,
    /// A runtime shutdown was accepted: product requests are refused while the daemon drains.
    closing: std::sync::atomic::AtomicBool,
    /// Envelope JSON by seq, shared by the SSE readers (`sse::rendered`).
    rendered: parking_lot::Mutex<std::collections::BTreeMap<u64, Option<Arc<str>>>>,
    /// The room assistant's side conversation (§10.7).
    assistant: assistant::Assistant,
}

/// A stored event as the face reads it.
#[derive(Debug, Deserialize)]
pub(crate) struct Raw {
    pub id: String,
    pub seq: u64,
    pub kind: String,
    pub by: String,
    pub ts: String,
    #[serde(default)]
    pub data: Value,
}

impl Raw {
    fn stored(&self) -> Stored<'_> {
        Stored {
            id: &self.id,
            seq: self.seq,
            kind: &self.kind,
            by: &self.by,
            ts: &self.ts,
            data: &self.data,
        }
    }
}

/// A started face.
pub struct Started {
    /// The face.
    pub face: Arc<Face>,
    /// Where HTTP listens.
    pub addr: Option<SocketAddr>,
}

/// Maps a refusal of the engine to the GroupX code a client sees.
pub(super) fn from_core(e: CoreError) -> GroupxError {
    let code = match e.code {
        CoreCode::EventNotFound => {
            return GroupxError::new(ErrorCode::InvalidEnvelope, e.message).field("replyToEventId")
        }
        CoreCode::LimitExceeded => ErrorCode::MessageTooLarge,
        CoreCode::StorageError | CoreCode::Internal => ErrorCode::StorageError,
        CoreCode::DaemonUnavailable => ErrorCode::Unavailable,
        _ => ErrorCode::InvalidEnvelope,
    };
    GroupxError::new(code, e.message)
}

impl Face {
    /// Opens the room (creating it and syncing the roster), folds its history, settles turns
    /// a previous process left unfinished (§5), and starts one lane worker per agent.
    pub async fn start(
        d: Arc<Daemon>,
        home: std::path::PathBuf,
        cfg: Config,
        addr: Option<SocketAddr>,
    ) -> Result<Arc<Face>, CoreError> {
        let group_id = ensure_room(&d).await?;
        sync_roster(&d, &group_id, &cfg).await?;
        let mut room = Room::default();
        room.imported = d
            .ledger
            .engine()
            .group(&group_id)
            .map(|g| g.imported_seqs.clone())
            .unwrap_or_default();
        let mut after = 0;
        loop {
            let (r, g) = (d.ledger.readers().clone(), group_id.clone());
            let page = tokio::task::spawn_blocking(move || r.events_after(&g, after, 1000, &[]))
                .await
                .map_err(|e| CoreError::storage(e.to_string()))??;
            let Some(last) = page.last().map(|e| e.seq) else {
                break;
            };
            for e in &page {
                if let Ok(raw) = serde_json::from_str::<Raw>(&e.json) {
                    room.fold(raw.seq, &raw.id, &raw.kind, &raw.by, &raw.data);
                }
            }
            after = last;
        }
        let assistant = assistant::Assistant::open(&d, &cfg).await?;
        let agents: Vec<String> = cfg.agents.iter().map(|a| a.id.clone()).collect();
        let (transient, _) = broadcast::channel(TRANSIENT_BUFFER);
        let face = Arc::new(Face {
            d,
            home,
            group_id,
            room: Mutex::new(room),
            transient,
            wake: agents
                .iter()
                .map(|a| (a.clone(), Arc::new(Notify::new())))
                .collect(),
            cancel: agents
                .iter()
                .map(|a| (a.clone(), Arc::new(Notify::new())))
                .collect(),
            sessions: parking_lot::Mutex::new(agents.iter().map(|a| (a.clone(), "idle")).collect()),
            bindings: parking_lot::Mutex::new(HashMap::new()),
            current: parking_lot::Mutex::new(HashMap::new()),
            changed: Notify::new(),
            addr,
            progress: parking_lot::Mutex::new(HashMap::new()),
            progressed: Notify::new(),
            closing: std::sync::atomic::AtomicBool::new(false),
            rendered: parking_lot::Mutex::new(std::collections::BTreeMap::new()),
            assistant,
            cfg,
        });
        face.recover().await;
        // Foreign messages are followed from the last one already answered by a turn (or the
        // room's start): one committed just before a crash is not missed.
        let from = {
            let room = face.room.lock().await;
            room.foreign_resume_point()
        };
        follow::spawn(face.clone(), from);
        assistant::spawn_reaper(face.clone());
        for a in face.cfg.agents.iter().filter(|a| a.enabled) {
            lane::spawn(face.clone(), a.clone());
        }
        Ok(face)
    }

    /// §5 recovery: never re-run what may have reached an agent.
    async fn recover(&self) {
        let mut room = self.room.lock().await;
        let todo: Vec<(String, String, convene_groupx::Recovery, Correlation)> = room
            .unfinished()
            .into_iter()
            .map(|t| {
                (
                    t.turn_id.clone(),
                    t.target.clone(),
                    t.state.recovery(),
                    t.corr.clone(),
                )
            })
            .collect();
        for (turn_id, target, rec, corr) in todo {
            // A queued turn of an agent that is no longer enabled has no lane to run it: left
            // queued it would stay unfinished forever (and count against its chain's limits).
            let laneless = !self.cfg.agent(&target).is_some_and(|a| a.enabled);
            let (ty, status, code, note) = match rec {
                convene_groupx::Recovery::Requeue if laneless => (
                    "turn.failed",
                    "failed",
                    Some(ErrorCode::UnknownTarget.as_str()),
                    "the agent is no longer enabled in this room's configuration; the turn was never run",
                ),
                convene_groupx::Recovery::Cancel => ("turn.cancelled", "cancelled", None, "cancelled before it reached the agent"),
                convene_groupx::Recovery::Interrupt => (
                    "turn.interrupted",
                    "interrupted",
                    Some(ErrorCode::InterruptedByRestart.as_str()),
                    "the broker stopped while this turn was dispatched; it is not re-run (retry it if needed)",
                ),
                _ => continue,
            };
            let mut body = json!({"turnId": turn_id, "target": format!("agent:{target}"), "status": status, "note": note});
            if let Some(c) = code {
                body["errorCode"] = c.into();
            }
            if let Err(e) = self
                .append(&mut room, vec![self.ext(ty, &corr, body)])
                .await
            {
                tracing::warn!(error = %e, turn = %turn_id, "groupx: could not settle a turn at start");
            }
        }
    }

    /// The ledger group of the room.
    pub fn group_id(&self) -> &str {
        &self.group_id
    }

    /// Display name of a GroupX actor id.
    fn name_of(&self, actor_id: &str) -> Option<String> {
        let id = envelope::agent_ledger_id(actor_id)?;
        self.cfg.agent(id).map(|a| {
            if a.name.is_empty() {
                a.id.clone()
            } else {
                a.name.clone()
            }
        })
    }

    /// The GroupX envelope of a stored event, if it has one.
    pub(crate) fn project(&self, json: &str) -> Option<Envelope> {
        let raw: Raw = serde_json::from_str(json).ok()?;
        envelope::project(raw.stored(), &|id| self.name_of(id))
    }

    /// An `x.groupx.<ty>` append by the broker.
    fn ext(&self, ty: &str, corr: &Correlation, body: Value) -> Command {
        Command::AppendExtension {
            group_id: self.group_id.clone(),
            by: LEDGER_SYSTEM.into(),
            kind: format!("{}{ty}", envelope::KIND_PREFIX),
            data: extension_data(corr, body),
        }
    }

    /// Commits `cmds` all together or not at all (one `Command::All`, one transaction) and
    /// folds what committed. Callers hold the room lock.
    async fn append(
        &self,
        room: &mut MutexGuard<'_, Room>,
        cmds: Vec<Command>,
    ) -> Result<Vec<(u64, String)>, GroupxError> {
        let c = self
            .d
            .ledger
            .execute(Command::All { steps: cmds })
            .await
            .map_err(from_core)?;
        let mut out = Vec::new();
        for (ev, _) in &c.events {
            room.fold(ev.seq, &ev.id, &ev.kind, &ev.by, &ev.data);
            out.push((ev.seq, ev.id.clone()));
        }
        self.changed.notify_waiters();
        Ok(out)
    }

    /// Like [`Face::append`], but gives the room lock back while the commit is made (the
    /// caller validated under it). `agent` is marked busy until the commit is folded: the only
    /// other writer of that agent's turns (cancel) waits for it.
    pub(super) async fn append_released(
        &self,
        mut room: MutexGuard<'_, Room>,
        agent: &str,
        cmds: Vec<Command>,
    ) -> Result<(), GroupxError> {
        let rx = self
            .d
            .ledger
            .submit(Command::All { steps: cmds })
            .await
            .map_err(from_core)?;
        room.busy.insert(agent.to_string());
        drop(room);
        let res = rx.await;
        let mut room = self.room.lock().await;
        room.busy.remove(agent);
        let out = match res {
            Ok(Ok(c)) => {
                for (ev, _) in &c.events {
                    room.fold(ev.seq, &ev.id, &ev.kind, &ev.by, &ev.data);
                }
                Ok(())
            }
            Ok(Err(e)) => Err(from_core(e)),
            Err(_) => Err(GroupxError::new(
                ErrorCode::Unavailable,
                "the ledger stopped",
            )),
        };
        drop(room);
        self.changed.notify_waiters();
        out
    }

    /// Publishes a transient envelope to live readers.
    fn publish(&self, env: &Envelope) {
        if let Ok(s) = serde_json::to_string(env) {
            let _ = self.transient.send(Arc::from(s));
        }
    }

    fn set_session(&self, agent: &str, state: &'static str) {
        self.sessions.lock().insert(agent.to_string(), state);
    }

    /// `POST /api/messages` (§10.2): the message and one queued turn per target, in one
    /// commit; a retry with the same clientCommandId answers the first result.
    pub async fn post_message(&self, p: PostMessage) -> Result<Value, GroupxError> {
        let targets = self.targets(&p.to, None)?;
        let observers = self.observers(p.supervision.as_ref())?;
        let origin = command::Origin {
            by: LEDGER_USER.into(),
            binding: envelope::USER_WEB.into(),
            client_command_id: p.client_command_id.clone(),
            canonical: p.canonical(),
            command_type: "web.message",
            parent: None,
            observers,
            steer: None,
            forwarded: p.forwarded_event_id.clone(),
        };
        let c = self
            .create(origin, targets, p.content, p.reply_to_event_id)
            .await?;
        let room = self.room.lock().await;
        Ok(self.post_answer(&room, &c))
    }

    /// Resolves recipients to enabled roster agents (`@all` leaves out `exclude`, the caller).
    pub(super) fn targets(
        &self,
        to: &Recipients,
        exclude: Option<&str>,
    ) -> Result<Vec<String>, GroupxError> {
        Ok(match to {
            Recipients::All => self
                .cfg
                .agents
                .iter()
                .filter(|a| a.enabled && Some(a.id.as_str()) != exclude)
                .map(|a| a.id.clone())
                .collect(),
            Recipients::Agents(list) => {
                let mut v = Vec::new();
                for t in list {
                    let id = envelope::agent_ledger_id(t).unwrap_or_default();
                    match self.cfg.agent(id) {
                        Some(a) if a.enabled => v.push(a.id.clone()),
                        Some(_) => {
                            return Err(GroupxError::new(
                                ErrorCode::UnknownTarget,
                                format!("{t} is disabled"),
                            )
                            .field("to"))
                        }
                        None => {
                            return Err(GroupxError::new(
                                ErrorCode::UnknownTarget,
                                format!("{t} is not an agent of this room"),
                            )
                            .field("to"))
                        }
                    }
                }
                v
            }
        })
    }

    pub(super) fn post_answer(&self, room: &Room, c: &room::CommandRec) -> Value {
        let (msg, corr) = (&c.message_event_id, &c.correlation_id);
        let is_watch = |id: &str| {
            room.turns
                .get(id)
                .is_some_and(|t| t.command_type == "supervision.watch")
        };
        let shape = |list: Vec<&(String, String, usize)>| -> Vec<Value> {
            list.into_iter()
                .map(|(target, turn_id, pos)| {
                    let mut t = json!({"target": target, "turnId": turn_id, "status": "queued",
                    "transport": "structured", "queuePosition": pos});
                    let agent = envelope::agent_ledger_id(target).unwrap_or_default();
                    if let Some(a) = room.active(agent).filter(|a| &a.turn_id != turn_id) {
                        t["activeTurnId"] = a.turn_id.clone().into();
                    }
                    t
                })
                .collect()
        };
        let (watch, work): (Vec<_>, Vec<_>) = c.turns.iter().partition(|(_, id, _)| is_watch(id));
        let mut out = json!({"messageEventId": msg, "correlationId": corr, "turns": shape(work)});
        if let Some(p) = &c.pair_event_id {
            out["watchTurns"] = shape(watch).into();
            out["pairEventId"] = p.clone().into();
            // The watch turns' task reference: the pair record (§4.3).
            out["watchEventId"] = p.clone().into();
        }
        out
    }

    /// `POST /api/turns/:id/cancel` (§10.3): records the intent; a queued turn is cancelled at
    /// once, a dispatched one is asked to stop and settles through its terminal event.
    pub async fn cancel(&self, turn_id: &str) -> Result<Value, GroupxError> {
        let answer = self.cancel_one(turn_id).await?;
        // §6.3: cancelling the turn that asked also cancels the synchronous asks it is
        // waiting on (best effort); asynchronous sends live on.
        let children: Vec<String> = {
            let room = self.room.lock().await;
            room.turns
                .values()
                .filter(|t| {
                    t.parent_turn_id.as_deref() == Some(turn_id)
                        && t.command_type == "mcp.ask"
                        && !t.state.status.is_terminal()
                })
                .map(|t| t.turn_id.clone())
                .collect()
        };
        for c in children {
            let _ = Box::pin(self.cancel(&c)).await;
        }
        Ok(answer)
    }

    async fn cancel_one(&self, turn_id: &str) -> Result<Value, GroupxError> {
        let mut room = loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let room = self.room.lock().await;
            let busy = room
                .turns
                .get(turn_id)
                .is_some_and(|t| room.busy.contains(&t.target));
            if !busy {
                break room;
            }
            // The lane is committing a transition of this agent's turn: decide on its result.
            drop(room);
            changed.await;
        };
        let Some(t) = room.turns.get(turn_id).cloned() else {
            return Err(GroupxError::new(
                ErrorCode::UnknownTurn,
                format!("no turn {turn_id}"),
            ));
        };
        let status = match t.state.status {
            TurnStatus::Queued => {
                let body = json!({"turnId": turn_id, "target": format!("agent:{}", t.target),
                    "status": "cancelled", "note": "cancelled before dispatch"});
                self.append(&mut room, vec![self.ext("turn.cancelled", &t.corr, body)])
                    .await?;
                TurnStatus::Cancelled
            }
            TurnStatus::Dispatching | TurnStatus::Running => {
                let body = json!({"turnId": turn_id, "target": format!("agent:{}", t.target)});
                self.append(&mut room, vec![self.ext("turn.cancelling", &t.corr, body)])
                    .await?;
                if let Some(c) = self.cancel.get(&t.target) {
                    c.notify_one();
                }
                TurnStatus::Cancelling
            }
            TurnStatus::Cancelling => {
                // Ask again: the agent may have missed it.
                if let Some(c) = self.cancel.get(&t.target) {
                    c.notify_one();
                }
                TurnStatus::Cancelling
            }
            done => done,
        };
        Ok(json!({"turnId": turn_id, "status": status.as_str(), "transport": "structured"}))
    }

    /// `GET /api/bootstrap` (§10.1).
    pub async fn bootstrap(&self) -> Result<Value, GroupxError> {
        let room = self.room.lock().await;
        let cursor = self
            .d
            .ledger
            .hub()
            .get(&self.group_id)
            .map(|f| f.head())
            .unwrap_or(room.head)
            .max(room.head);
        let turns: Vec<Value> = room
            .unfinished()
            .into_iter()
            .map(|t| {
                json!({"turnId": t.turn_id, "targetActorId": format!("agent:{}", t.target),
                "status": t.state.status.as_str(), "sourceEventId": t.source_event_id})
            })
            .collect();
        drop(room);
        let (r, g) = (self.d.ledger.readers().clone(), self.group_id.clone());
        let raw = tokio::task::spawn_blocking(move || {
            r.events_before(&g, cursor + 1, BOOTSTRAP_EVENTS * 2, &[])
        })
        .await
        .map_err(|e| GroupxError::new(ErrorCode::StorageError, e.to_string()))?
        .map_err(|e| from_core(e.into()))?;
        let mut events: Vec<Envelope> = raw.iter().filter_map(|e| self.project(&e.json)).collect();
        if events.len() > BOOTSTRAP_EVENTS {
            events.drain(..events.len() - BOOTSTRAP_EVENTS);
        }
        let sessions = self.sessions.lock().clone();
        let agents: Vec<Value> = self
            .cfg
            .agents
            .iter()
            .map(|a| {
                json!({"actorId": format!("agent:{}", a.id),
                "displayName": if a.name.is_empty() { &a.id } else { &a.name },
                "enabled": a.enabled, "driver": a.driver,
                "session": sessions.get(&a.id).copied().unwrap_or("idle")})
            })
            .collect();
        Ok(
            json!({"room": {"roomId": envelope::ROOM_ID, "title": "main"},
            "self": {"actorId": envelope::USER_WEB}, "agents": agents,
            "events": events, "turns": turns, "cursor": cursor}),
        )
    }

    /// `GET /api/health` (§10.6).
    pub fn health(&self) -> Value {
        let status = if self.is_closing() { "closing" } else { "ok" };
        json!({"service": "groupx", "protocol": "groupx.runtime/1", "status": status,
            "runtimeKey": self.cfg.runtime_key, "runtimeScopeKey": self.cfg.runtime_scope_key})
    }

    /// Whether the runtime is draining (§10.8): a shutdown was accepted, or the daemon stops.
    pub fn is_closing(&self) -> bool {
        self.closing.load(std::sync::atomic::Ordering::Acquire) || *self.d.shutdown_rx().borrow()
    }

    /// `POST /api/runtime/shutdown` (§10.8): only for this runtime's scope key; the answer
    /// goes out first, then the daemon drains and stops (every face, like the IPC `shutdown`).
    pub fn shutdown(self: &Arc<Self>, scope_key: &str) -> Result<Value, GroupxError> {
        if scope_key != self.cfg.runtime_scope_key {
            return Err(GroupxError::new(
                ErrorCode::RuntimeConflict,
                "runtimeScopeKey does not match this runtime",
            )
            .field("runtimeScopeKey"));
        }
        self.closing
            .store(true, std::sync::atomic::Ordering::Release);
        let face = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            face.d.request_shutdown();
        });
        Ok(json!({"accepted": true, "runtimeKey": self.cfg.runtime_key,
            "runtimeScopeKey": self.cfg.runtime_scope_key}))
    }
}

/// The room's group: found by its setting, created on first start.
async fn ensure_room(d: &Daemon) -> Result<String, CoreError> {
    ensure_group(d, ROOM_SETTING, "groupx main", "GroupX room:main").await
}

/// A group of the face marked by setting `key = room:main`: found, or created on first start.
pub(super) async fn ensure_group(
    d: &Daemon,
    key: &str,
    title: &str,
    topic: &str,
) -> Result<String, CoreError> {
    let found = d
        .ledger
        .engine()
        .groups()
        .into_iter()
        .find(|g| g.settings.extra.get(key).and_then(Value::as_str) == Some(envelope::ROOM_ID))
        .map(|g| g.group_id.clone());
    if let Some(g) = found {
        return Ok(g);
    }
    let mut settings = Map::new();
    settings.insert(key.into(), envelope::ROOM_ID.into());
    let c = d
        .ledger
        .execute(Command::GroupCreate {
            by: LEDGER_SYSTEM.into(),
            title: title.into(),
            topic: topic.into(),
            settings,
        })
        .await?;
    c.primary()
        .map(|e| e.group_id.clone())
        .ok_or_else(|| CoreError::storage("group create answered no event"))
}

/// Every configured agent is an actor of the room (runtime `groupx`: the broker drives it,
/// the CCCS runtime never does); enabled as configured. Agents no longer configured stay
/// (their history is theirs) but are disabled.
async fn sync_roster(d: &Daemon, gid: &str, cfg: &Config) -> Result<(), CoreError> {
    let actors: Vec<(String, bool)> = d
        .ledger
        .engine()
        .group(gid)
        .map(|g| g.actors.iter().map(|a| (a.id.clone(), a.enabled)).collect())
        .unwrap_or_default();
    for a in &cfg.agents {
        match actors.iter().find(|(id, _)| id == &a.id) {
            None => {
                let mut spec = Map::new();
                spec.insert("actor_id".into(), a.id.clone().into());
                spec.insert(
                    "title".into(),
                    if a.name.is_empty() {
                        a.id.clone()
                    } else {
                        a.name.clone()
                    }
                    .into(),
                );
                spec.insert("runtime".into(), "groupx".into());
                spec.insert("enabled".into(), a.enabled.into());
                d.ledger
                    .execute(Command::ActorAdd {
                        group_id: gid.into(),
                        by: LEDGER_SYSTEM.into(),
                        spec,
                    })
                    .await?;
            }
            Some((_, en)) if *en != a.enabled => {
                let mut patch = Map::new();
                patch.insert("enabled".into(), a.enabled.into());
                d.ledger
                    .execute(Command::ActorUpdate {
                        group_id: gid.into(),
                        by: LEDGER_SYSTEM.into(),
                        actor_id: a.id.clone(),
                        patch,
                    })
                    .await?;
            }
            _ => {}
        }
    }
    for (id, en) in actors {
        if en && cfg.agent(&id).is_none() {
            let mut patch = Map::new();
            patch.insert("enabled".into(), false.into());
            d.ledger
                .execute(Command::ActorUpdate {
                    group_id: gid.into(),
                    by: LEDGER_SYSTEM.into(),
                    actor_id: id,
                    patch,
                })
                .await?;
        }
    }
    Ok(())
}

pub use http::serve;
