//! Daemon, group, scope and actor ops.

use convene_core::{Command, CoreError, Event, Group};
use serde_json::{json, Value};

use super::args::Args;
use super::{ev_value, OPS};
use crate::Daemon;

pub(super) fn group_value(g: &Group) -> Value {
    let mut v = serde_json::to_value(g).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.insert("last_seq".into(), json!(g.last_seq));
        m.insert("default_scope_key".into(), json!(g.active_scope_key));
        m.remove("retired_generations");
        m.remove("imported_seqs");
    }
    v
}

fn group_summary(g: &Group) -> Value {
    json!({
        "group_id": g.group_id, "title": g.title, "topic": g.topic,
        "created_at": g.created_at, "updated_at": g.updated_at,
        "state": g.state, "running": g.state != "stopped",
        "default_scope_key": g.active_scope_key, "actors": g.actors.len(), "last_seq": g.last_seq,
    })
}

fn show(d: &Daemon, gid: &str) -> Result<Value, CoreError> {
    let eng = d.ledger.engine();
    eng.group(gid)
        .map(group_value)
        .ok_or_else(|| CoreError::no_group(gid))
}

fn first(c: &crate::ledger::Committed) -> Value {
    c.primary().map(ev_value).unwrap_or(Value::Null)
}

pub(super) fn ping(_d: &Daemon) -> Value {
    let mut caps = serde_json::Map::new();
    for op in OPS {
        caps.insert((*op).to_string(), Value::Bool(true));
    }
    json!({
        "ipc_v": 1,
        "version": env!("CARGO_PKG_VERSION"),
        "implementation": "convene",
        "compatibility": "cccc-daemon-ipc-v1",
        "pid": std::process::id(),
        "ts": convene_core::event::format_ts(time::OffsetDateTime::now_utc()),
        "capabilities": caps,
        "stream": {
            "cursors": ["since_seq", "since_event_id", "since_ts"],
            "filters": ["kinds", "limit"],
            "follow": true,
            "replay_cap": null
        },
        "limits": {"max_request_bytes": convene_ipc::MAX_REQUEST_BYTES}
    })
}

pub(super) fn version() -> Value {
    json!({"version": env!("CARGO_PKG_VERSION"), "implementation": "convene", "compatibility": "cccc-daemon-ipc-v1"})
}

pub(super) fn groups(d: &Daemon) -> Value {
    let eng = d.ledger.engine();
    json!({"groups": eng.groups().into_iter().map(group_summary).collect::<Vec<_>>()})
}

pub(super) async fn group_create(d: &Daemon, a: &Args) -> Result<Value, CoreError> {
    let title = a
        .opt_str("title")?
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| "working-group".into());
    let c = d
        .ledger
        .execute(Command::GroupCreate {
            by: a.by()?,
            title,
            topic: a.str("topic")?,
            settings: Default::default(),
        })
        .await?;
    let gid = c.primary().map(|e| e.group_id.clone()).unwrap_or_default();
    Ok(json!({"group_id": gid, "group": show(d, &gid)?, "event": first(&c)}))
}

pub(super) fn group_show(d: &Daemon, a: &Args) -> Result<Value, CoreError> {
    let gid = a.req("group_id")?;
    Ok(json!({"group": show(d, &gid)?}))
}

pub(super) async fn group_update(d: &Daemon, a: &Args) -> Result<Value, CoreError> {
    let gid = a.req("group_id")?;
    let c = d
        .ledger
        .execute(Command::GroupUpdate {
            group_id: gid.clone(),
            by: a.by()?,
            patch: a.obj("patch")?,
        })
        .await?;
    Ok(json!({"group_id": gid, "event": first(&c), "group": show(d, &gid)?}))
}

pub(super) async fn group_settings_update(d: &Daemon, a: &Args) -> Result<Value, CoreError> {
    let gid = a.req("group_id")?;
    let c = d
        .ledger
        .execute(Command::GroupSettingsUpdate {
            group_id: gid.clone(),
            by: a.by()?,
            patch: a.obj("patch")?,
        })
        .await?;
    let settings = d
        .ledger
        .engine()
        .group(&gid)
        .map(|g| serde_json::to_value(&g.settings).unwrap_or(Value::Null))
        .unwrap_or(Value::Null);
    Ok(json!({"group_id": gid, "event": first(&c), "settings": settings}))
}

pub(super) async fn group_set_state(
    d: &Daemon,
    a: &Args,
    state: Option<&str>,
) -> Result<Value, CoreError> {
    let gid = a.req("group_id")?;
    let state = match state {
        Some(s) => s.to_string(),
        None => a.req("state")?,
    };
    let c = d
        .ledger
        .execute(Command::GroupSetState {
            group_id: gid.clone(),
            by: a.by()?,
            state: state.clone(),
        })
        .await?;
    Ok(
        json!({"group_id": gid, "event": first(&c), "running": state != "stopped", "group": show(d, &gid)?}),
    )
}

pub(super) async fn group_delete(d: &Daemon, a: &Args) -> Result<Value, CoreError> {
    let gid = a.req("group_id")?;
    d.ledger
        .execute(Command::GroupDelete {
            group_id: gid.clone(),
            by: a.by()?,
        })
        .await?;
    d.runtime.sessions.end_group(&gid);
    Ok(json!({"deleted": true, "group_id": gid}))
}

pub(super) async fn attach(d: &Daemon, a: &Args) -> Result<Value, CoreError> {
    let path = a.req("path")?;
    let url = if path.contains("://") {
        path
    } else {
        let p = std::path::Path::new(&path);
        let abs = p
            .canonicalize()
            .map_err(|e| CoreError::invalid(format!("path {path}: {e}")).with("field", "path"))?;
        abs.to_string_lossy().into_owned()
    };
    let c = d
        .ledger
        .execute(Command::Attach {
            group_id: a.str("group_id")?,
            by: a.by()?,
            url,
        })
        .await?;
    let e: Option<&Event> = c
        .events
        .iter()
        .map(|(e, _)| e)
        .find(|e| e.kind == "group.attach");
    let gid = c.primary().map(|e| e.group_id.clone()).unwrap_or_default();
    let title = d
        .ledger
        .engine()
        .group(&gid)
        .map(|g| g.title.clone())
        .unwrap_or_default();
    Ok(
        json!({"group_id": gid, "scope_key": e.map(|e| e.scope_key.clone()).unwrap_or_default(), "title": title, "event": e.map(ev_value)}),
    )
}

pub(super) async fn detach_scope(d: &Daemon, a: &Args) -> Result<Value, CoreError> {
    let gid = a.req("group_id")?;
    let c = d
        .ledger
        .execute(Command::DetachScope {
            group_id: gid.clone(),
            by: a.by()?,
            scope_key: a.req("scope_key")?,
        })
        .await?;
    Ok(json!({"group_id": gid, "event": first(&c)}))
}

fn actor_value(d: &Daemon, gid: &str, id: &str) -> Value {
    let eng = d.ledger.engine();
    let actor = eng.group(gid).and_then(|g| g.actor(id));
    let generation = actor.map(|a| a.generation).unwrap_or_default();
    let mut v = actor
        .map(|a| serde_json::to_value(a).unwrap_or(Value::Null))
        .unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.insert(
            "attached".into(),
            json!(d.runtime.sessions.is_attached(gid, id, generation)),
        );
        if let Ok(n) = d.ledger.readers().unread(gid, id) {
            m.insert("unread_mail".into(), json!(n));
        }
    }
    v
}

pub(super) async fn actor_add(d: &Daemon, a: &Args) -> Result<Value, CoreError> {
    let gid = a.req("group_id")?;
    let mut spec = a.0.clone();
    spec.remove("group_id");
    spec.remove("by");
    let c = d
        .ledger
        .execute(Command::ActorAdd {
            group_id: gid.clone(),
            by: a.by()?,
            spec,
        })
        .await?;
    let id = c
        .primary()
        .and_then(|e| e.data_str("actor_id"))
        .unwrap_or_default()
        .to_string();
    Ok(json!({"actor": actor_value(d, &gid, &id), "event": first(&c)}))
}

pub(super) async fn actor_update(d: &Daemon, a: &Args) -> Result<Value, CoreError> {
    let gid = a.req("group_id")?;
    let id = a.req("actor_id")?;
    let c = d
        .ledger
        .execute(Command::ActorUpdate {
            group_id: gid.clone(),
            by: a.by()?,
            actor_id: id.clone(),
            patch: a.obj("patch")?,
        })
        .await?;
    Ok(json!({"actor": actor_value(d, &gid, &id), "event": first(&c)}))
}

pub(super) async fn actor_remove(d: &Daemon, a: &Args) -> Result<Value, CoreError> {
    let gid = a.req("group_id")?;
    let id = a.req("actor_id")?;
    let c = d
        .ledger
        .execute(Command::ActorRemove {
            group_id: gid.clone(),
            by: a.by()?,
            actor_id: id.clone(),
        })
        .await?;
    // The generation ended: so does its session (no later generation's delivery reaches it).
    d.runtime.sessions.end_actor(&gid, &id);
    Ok(json!({"actor_id": id, "event": first(&c)}))
}

pub(super) fn actor_list(d: &Daemon, a: &Args) -> Result<Value, CoreError> {
    let gid = a.req("group_id")?;
    let ids: Vec<String> = {
        let eng = d.ledger.engine();
        let g = eng.group(&gid).ok_or_else(|| CoreError::no_group(&gid))?;
        g.actors.iter().map(|x| x.id.clone()).collect()
    };
    Ok(json!({"actors": ids.iter().map(|id| actor_value(d, &gid, id)).collect::<Vec<_>>()}))
}
