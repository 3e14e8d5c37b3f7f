//! Cowchat webhook subscriptions (Standard Webhooks v1): the `subscribe`, `unsubscribe`,
//! `list_subscriptions` and `enable_subscription` frames, and the delivery tasks behind
//! them. Subscriptions live in `<home>/cowchat/webhooks.db`; see docs/cowchat-webhooks.md
//! for the semantics and limits.

mod deliver;
mod http;
mod ssrf;
mod store;
mod tls;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use convene_cowchat::{parse, ErrorCode, WireError};
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokio::task::JoinHandle;

pub use store::StoreError;
use store::{Status, Store, Sub};

use super::conn::Session;
use super::{rooms, Face};
use crate::Daemon;

/// Subscriptions one principal may own.
const MAX_SUBS: usize = 256;
/// Entries in `kinds`, `only_from` or `not_from`.
const MAX_LIST: usize = 64;
/// Longest accepted secret.
const MAX_SECRET: usize = 1024;
/// Default of [`Options::concurrency`].
pub const DEFAULT_CONCURRENCY: usize = 16;
/// Largest accepted [`Options::concurrency`] and [`Options::per_host`].
pub const MAX_CONCURRENCY: usize = 4096;
/// Default of [`Options::per_host`].
pub const DEFAULT_PER_HOST: usize = 4;

/// Webhook delivery settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// TEST ONLY: allow loopback/private targets (`serve --cowchat-webhooks-allow-local`).
    pub allow_local: bool,
    /// Unit of the retry schedule (+1, +4, +16, +64, +256 units); one second in production.
    pub retry_unit: Duration,
    /// One attempt's deadline (connect + TLS + send + status line).
    pub timeout: Duration,
    /// TEST ONLY: also trust the PEM CA certificates in this file for https targets
    /// (`serve --cowchat-webhooks-ca-file`).
    pub extra_ca: Option<PathBuf>,
    /// Delivery attempts in flight at once across all subscriptions (1 to
    /// [`MAX_CONCURRENCY`]; `serve --cowchat-webhook-concurrency`).
    pub concurrency: usize,
    /// Of those, attempts in flight to one host (host and port as written in the URL; 1 to
    /// [`MAX_CONCURRENCY`]; `serve --cowchat-webhook-per-host`).
    pub per_host: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            allow_local: false,
            retry_unit: Duration::from_secs(1),
            timeout: Duration::from_secs(10),
            extra_ca: None,
            concurrency: DEFAULT_CONCURRENCY,
            per_host: DEFAULT_PER_HOST,
        }
    }
}

/// Failures inside the webhook service.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// The subscriptions database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Reading the ledger failed.
    #[error(transparent)]
    Ledger(#[from] convene_core::CoreError),
    /// A body did not serialize.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// A stored subscription is unusable.
    #[error("{0}")]
    Config(String),
    /// A blocking task died.
    #[error("task: {0}")]
    Join(String),
    /// The TLS client could not be built.
    #[error("webhooks tls: {0}")]
    Tls(String),
}

/// The webhook service of a daemon: the store and one delivery task per active subscription.
pub struct Hooks {
    d: Arc<Daemon>,
    store: Arc<Store>,
    opts: Options,
    tls: tls::Tls,
    /// subscription id → (the row generation its task writes to, the task).
    tasks: Mutex<HashMap<String, (u64, JoinHandle<()>)>>,
    /// One permit per delivery attempt in flight (the global cap). Tokio's semaphore is
    /// fair (FIFO), so a busy subscription cannot starve the others.
    slots: tokio::sync::Semaphore,
    /// The per-host caps, one semaphore per `host:port` ever delivered to (bounded by the
    /// subscriptions' targets).
    hosts: Mutex<HashMap<String, Arc<tokio::sync::Semaphore>>>,
}

impl Hooks {
    /// The cap of attempts in flight to `t`'s host.
    fn host_slots(&self, t: &ssrf::Target) -> Arc<tokio::sync::Semaphore> {
        self.hosts
            .lock()
            .entry(format!("{}:{}", t.host.to_ascii_lowercase(), t.port))
            .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(self.opts.per_host)))
            .clone()
    }

    /// Runs a store call off the async threads.
    async fn db<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, HookError> {
        let st = self.store.clone();
        Ok(tokio::task::spawn_blocking(move || f(&st))
            .await
            .map_err(|e| HookError::Join(e.to_string()))??)
    }

    /// (Re)starts the delivery task of `sub`, replacing any running one of the same or an
    /// older generation. Two `enable_subscription`s racing can reach here in either order:
    /// the task of the newer re-arm stays (the other one's writes would land nowhere).
    fn run(self: &Arc<Self>, sub: Sub) {
        let mut tasks = self.tasks.lock();
        if tasks.get(&sub.id).is_some_and(|(g, _)| *g > sub.generation) {
            return;
        }
        let (id, generation) = (sub.id.clone(), sub.generation);
        let h = deliver::spawn(self.clone(), sub);
        if let Some((_, old)) = tasks.insert(id, (generation, h)) {
            old.abort();
        }
    }

    fn stop(&self, id: &str) {
        if let Some((_, h)) = self.tasks.lock().remove(id) {
            h.abort();
        }
    }

    /// Deletes (and stops) every subscription of a room that no longer exists, whatever its
    /// status: a failed or revoked subscription has no task to notice the room is gone.
    pub(in crate::cowchat) async fn forget_room(&self, room: &str) {
        let r = room.to_string();
        match self.db(move |st| st.delete_room(&r)).await {
            Ok(ids) => {
                for id in ids {
                    tracing::info!(subscription = %id, room, "room destroyed: webhook subscription removed");
                    self.stop(&id);
                }
            }
            Err(e) => {
                tracing::warn!(room, error = %e, "cannot remove a destroyed room's webhook subscriptions")
            }
        }
    }

    /// Revokes (and stops) the subscriptions made with a key that no longer authenticates as
    /// their principal; `valid` is every key's (fingerprint, principal) now.
    pub(in crate::cowchat) async fn revoke_stale(
        &self,
        valid: Vec<(String, String)>,
    ) -> Result<(), HookError> {
        for id in self.db(move |st| st.revoke_stale(&valid)).await? {
            tracing::info!(subscription = %id, "webhook subscription revoked: its API key was rotated or removed");
            self.stop(&id);
        }
        Ok(())
    }
}

/// Opens `<home>/cowchat/webhooks.db` and resumes every active subscription from its
/// persisted cursor.
pub fn start(d: Arc<Daemon>, home: &Path, opts: Options) -> Result<Arc<Hooks>, HookError> {
    if opts.allow_local {
        tracing::warn!(
            "cowchat webhooks may reach loopback and private addresses (test-only setting)"
        );
    }
    for (what, n) in [
        ("concurrency", opts.concurrency),
        ("per-host concurrency", opts.per_host),
    ] {
        if !(1..=MAX_CONCURRENCY).contains(&n) {
            return Err(HookError::Config(format!(
                "webhook {what} must be between 1 and {MAX_CONCURRENCY} (got {n})"
            )));
        }
    }
    let tls = tls::Tls::new(opts.extra_ca.as_deref()).map_err(HookError::Tls)?;
    let store = Arc::new(Store::open(&home.join("cowchat").join("webhooks.db"))?);
    // Keys removed or rotated while the daemon was down: nothing of theirs resumes.
    store.revoke_stale(&super::keys::fingerprints(home))?;
    // Rooms destroyed while a subscription of theirs was failed or revoked, or just before
    // a kill -9: their subscriptions go with them.
    for room in store.rooms()? {
        if d.ledger.engine().group(&room).is_none() {
            for id in store.delete_room(&room)? {
                tracing::info!(subscription = %id, room, "room destroyed: webhook subscription removed");
            }
        }
    }
    let active = store.active()?;
    let hooks = Arc::new(Hooks {
        d,
        store,
        slots: tokio::sync::Semaphore::new(opts.concurrency),
        hosts: Mutex::new(HashMap::new()),
        opts,
        tls,
        tasks: Mutex::new(HashMap::new()),
    });
    for sub in active {
        hooks.run(sub);
    }
    Ok(hooks)
}

/// Gives the face its webhook service (the frames answer `unavailable` without one).
pub fn attach(face: &Face, hooks: Arc<Hooks>) {
    let _ = face.hooks.set(hooks);
}

/// A list field given as one string or an array of strings.
#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn list(v: Option<Self>, field: &str) -> Result<Option<Vec<String>>, WireError> {
        let l = match v {
            None => return Ok(None),
            Some(Self::One(s)) => vec![s],
            Some(Self::Many(l)) => l,
        };
        let l: Vec<String> = l.into_iter().filter(|s| !s.is_empty()).collect();
        if l.len() > MAX_LIST {
            return Err(WireError::payload(format!(
                "{field} takes at most {MAX_LIST} entries"
            )));
        }
        Ok(if l.is_empty() { None } else { Some(l) })
    }
}

#[derive(Deserialize)]
struct Subscribe {
    room_id: String,
    webhook_url: String,
    secret: String,
    kinds: Option<OneOrMany>,
    only_from: Option<OneOrMany>,
    not_from: Option<OneOrMany>,
    exclude_thinking: Option<bool>,
    since_seq: Option<Value>,
}

#[derive(Deserialize)]
struct SubRef {
    subscription_id: String,
}

#[derive(Deserialize)]
struct ListSubs {
    room_id: Option<String>,
}

/// The wire form of a subscription (never the secret).
fn sub_value(s: &Sub) -> Value {
    json!({
        "subscription_id": s.id,
        "room_id": s.room_id,
        "webhook_url": s.url,
        "kinds": s.kinds,
        "only_from": s.only_from,
        "not_from": s.not_from,
        "exclude_thinking": s.exclude_thinking,
        "status": s.status.as_str(),
        "cursor_seq": s.cursor,
        "failures": s.failures,
        "created_at": s.created_at,
    })
}

/// The caller's API-key principal: subscriptions are owned per key.
fn principal(s: &Session) -> String {
    if s.principal.is_empty() {
        super::keys::PRIMARY.to_string()
    } else {
        s.principal.clone()
    }
}

fn hooks(s: &Session) -> Result<Arc<Hooks>, WireError> {
    s.face
        .hooks
        .get()
        .cloned()
        .ok_or_else(|| WireError::new(ErrorCode::Unavailable, "webhooks are not running"))
}

fn internal(e: HookError) -> WireError {
    WireError::new(ErrorCode::Internal, e.to_string())
}

fn not_found(id: &str) -> WireError {
    WireError::payload(format!("no subscription {id}"))
}

/// `subscribe`: validates the room, URL (SSRF guard), secret and filters, stores the
/// subscription and starts delivering after `since_seq` (default: the room's head).
pub(in crate::cowchat) async fn subscribe(
    s: &Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let h = hooks(s)?;
    let p: Subscribe = parse(payload)?;
    let me = s.agent.as_ref().map(|a| a.id.clone()).unwrap_or_default();
    let head = {
        let eng = s.face.d.ledger.engine();
        rooms::member_room(&s.face, &eng, &p.room_id, &s.principal, &me)
            .map_err(|e| match e.code {
                ErrorCode::NotInRoom => {
                    WireError::new(e.code, format!("join {} to subscribe to it", p.room_id))
                }
                _ => e,
            })?
            .last_seq
    };
    let cursor = match &p.since_seq {
        None | Some(Value::Null) => head,
        Some(Value::String(t)) if t == "tip" || t == "auto" => head,
        Some(Value::Number(n)) => n
            .as_u64()
            .ok_or_else(|| WireError::payload("since_seq must be >= 0, \"tip\" or \"auto\""))?,
        Some(_) => {
            return Err(WireError::payload(
                "since_seq must be an integer, \"tip\" or \"auto\"",
            ))
        }
    };
    if p.secret.len() > MAX_SECRET {
        return Err(WireError::payload(format!(
            "secret is longer than {MAX_SECRET} bytes"
        )));
    }
    http::secret_key(&p.secret).map_err(WireError::payload)?;
    let target = ssrf::parse_url(&p.webhook_url).map_err(|e| WireError::payload(e.to_string()))?;
    if target.tls && !tls::HTTPS {
        return Err(WireError::payload(
            "this daemon was built without https webhook support",
        ));
    }
    ssrf::resolve(&target, h.opts.allow_local)
        .await
        .map_err(|e| WireError::payload(e.to_string()))?;
    let sub = Sub {
        id: format!("sub_{}", uuid::Uuid::now_v7().simple()),
        principal: principal(s),
        room_id: p.room_id,
        url: p.webhook_url,
        secret: p.secret,
        kinds: OneOrMany::list(p.kinds, "kinds")?,
        only_from: OneOrMany::list(p.only_from, "only_from")?,
        not_from: OneOrMany::list(p.not_from, "not_from")?,
        exclude_thinking: p.exclude_thinking.unwrap_or(false),
        status: Status::Active,
        cursor,
        failures: 0,
        retry_seq: None,
        retry_at_ms: None,
        created_at: convene_core::event::format_ts(time::OffsetDateTime::now_utc()),
        key_sha256: session_key(s).as_deref().map(super::keys::fingerprint),
        generation: 0,
    };
    let row = sub.clone();
    let n = h
        .db(move |st| {
            let n = st.count(&row.principal)?;
            if n < MAX_SUBS {
                st.insert(&row)?;
            }
            Ok(n)
        })
        .await
        .map_err(internal)?;
    if n >= MAX_SUBS {
        return Err(WireError::payload(format!(
            "at most {MAX_SUBS} subscriptions per API key"
        )));
    }
    // The key may have been rotated or removed while this ran, after the revoker looked at
    // the stored subscriptions: check it again now that this one is stored.
    if !key_still_valid(s, &sub.principal) {
        let (who, id) = (sub.principal.clone(), sub.id.clone());
        h.db(move |st| st.delete(&who, &id))
            .await
            .map_err(internal)?;
        return Err(revoked_key());
    }
    let v = sub_value(&sub);
    h.run(sub);
    Ok(v)
}

/// The API key of the caller's connection (None: a keyless local client).
fn session_key(s: &Session) -> Option<String> {
    let id = s.conn_id?;
    s.face.live.lock().conns.get(&id)?.key.clone()
}

/// True when the caller's key still authenticates as `principal`.
fn key_still_valid(s: &Session, principal: &str) -> bool {
    super::keys::still_valid(&s.face.cfg.home, principal, session_key(s).as_deref())
}

fn revoked_key() -> WireError {
    WireError::new(
        ErrorCode::Unauthorized,
        "the API key of this connection was rotated or removed; register again with the current key",
    )
}

/// `unsubscribe`: deletes one of the caller's subscriptions and stops its deliveries.
pub(in crate::cowchat) async fn unsubscribe(
    s: &Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let h = hooks(s)?;
    let p: SubRef = parse(payload)?;
    let (id, who) = (p.subscription_id.clone(), principal(s));
    if !h
        .db(move |st| st.delete(&who, &id))
        .await
        .map_err(internal)?
    {
        return Err(not_found(&p.subscription_id));
    }
    h.stop(&p.subscription_id);
    Ok(json!({"subscription_id": p.subscription_id}))
}

/// `list_subscriptions`: the caller's subscriptions, of one room when `room_id` is given.
pub(in crate::cowchat) async fn list_subscriptions(
    s: &Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let h = hooks(s)?;
    let p: ListSubs = parse(payload)?;
    let (room, who) = (p.room_id.clone(), principal(s));
    let subs = h
        .db(move |st| st.list(&who, room.as_deref()))
        .await
        .map_err(internal)?;
    let list: Vec<Value> = subs.iter().map(sub_value).collect();
    Ok(json!({"subscriptions": list}))
}

/// `enable_subscription`: re-arms a subscription (`failed`, or `revoked` after its key was
/// rotated or removed), binds it to the caller's key and replays the backlog from its cursor.
pub(in crate::cowchat) async fn enable_subscription(
    s: &Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let h = hooks(s)?;
    let p: SubRef = parse(payload)?;
    let (id, who) = (p.subscription_id.clone(), principal(s));
    // Only the owner's call touches the task: another key's (refused) call must not stop it.
    let owned = h
        .db(move |st| Ok(st.get(&id)?.is_some_and(|x| x.principal == who)))
        .await
        .map_err(internal)?;
    if !owned {
        return Err(not_found(&p.subscription_id));
    }
    // Stop the old task first so it cannot mark the re-armed row failed behind our back.
    h.stop(&p.subscription_id);
    let (id, who) = (p.subscription_id.clone(), principal(s));
    let key = session_key(s).as_deref().map(super::keys::fingerprint);
    let sub = h
        .db(move |st| {
            if st.enable(&who, &id, key.as_deref())? {
                st.get(&id)
            } else {
                Ok(None)
            }
        })
        .await
        .map_err(internal)?
        .ok_or_else(|| not_found(&p.subscription_id))?;
    // As in `subscribe`: a key rotated meanwhile must not have re-armed it.
    if !key_still_valid(s, &sub.principal) {
        let valid = super::keys::fingerprints(&s.face.cfg.home);
        h.revoke_stale(valid).await.map_err(internal)?;
        return Err(revoked_key());
    }
    let v = sub_value(&sub);
    h.run(sub);
    Ok(v)
}
