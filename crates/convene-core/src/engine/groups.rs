//! Management Profile (§13.2): groups, scopes and actors.

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::{get_str, is_privileged, Ctx};
use crate::error::{CoreError, ErrorCode};
use crate::event::{kinds, new_event_id};
use crate::model::{Actor, DefaultSendTo, Group, Role, Scope, Settings};

/// Group states a client may set.
const STATES: &[&str] = &["active", "idle", "paused", "stopped"];

fn new_group_id() -> String {
    let h = Sha256::digest(new_event_id().as_bytes());
    format!("g_{}", &hex::encode(h)[..12])
}

/// The daemon-assigned opaque scope key for a URL.
pub fn scope_key_for(url: &str) -> String {
    let h = Sha256::digest(url.as_bytes());
    format!("s_{}", &hex::encode(h)[..12])
}

/// Management changes need a privileged principal, the foreman, or (for itself) the actor.
fn check_manager(
    ctx: &Ctx<'_>,
    group_id: &str,
    by: &str,
    subject: Option<&str>,
) -> Result<(), CoreError> {
    let g = ctx.group(group_id)?;
    if is_privileged(by) || by.starts_with("svc:") {
        return Ok(());
    }
    match g.actor(by) {
        Some(a) if a.role == Role::Foreman => Ok(()),
        Some(a) if subject == Some(a.id.as_str()) => Ok(()),
        Some(_) => {
            Err(CoreError::denied(format!("{by} may not manage group {group_id}")).with("by", by))
        }
        None => Err(CoreError::denied(format!(
            "principal {by} is not a member of group {group_id}"
        ))
        .with("by", by)),
    }
}

/// Applies a change to a group's state, bumps `updated_at` and records the snapshot.
fn touch(ctx: &mut Ctx<'_>, group_id: &str, f: impl FnOnce(&mut Group)) {
    let ts = ctx.ts();
    if let Some(g) = ctx.groups.get_mut(group_id) {
        f(g);
        g.updated_at = ts;
    }
    ctx.upsert(group_id);
}

/// Creates a group; returns its id.
pub(super) fn create(
    ctx: &mut Ctx<'_>,
    by: &str,
    title: String,
    topic: String,
    scope: Option<Scope>,
) -> Result<String, CoreError> {
    if by.is_empty() {
        return Err(CoreError::invalid("missing principal (by)").with("field", "by"));
    }
    if !(is_privileged(by) || by.starts_with("svc:")) {
        return Err(
            CoreError::denied("only user, system or a service may create groups").with("by", by),
        );
    }
    let gid = new_group_id();
    let ts = ctx.ts();
    let mut g = Group::new(gid.clone(), title.clone(), topic.clone(), ts.clone(), ts);
    if let Some(s) = &scope {
        g.active_scope_key = s.scope_key.clone();
        g.scopes.push(s.clone());
    }
    ctx.groups.insert(gid.clone(), g);
    let scope_key = scope
        .as_ref()
        .map(|s| s.scope_key.clone())
        .unwrap_or_default();
    ctx.append(
        &gid,
        kinds::GROUP_CREATE,
        by,
        scope_key.clone(),
        json!({"group_id": gid, "title": title, "topic": topic}),
    )?;
    if let Some(s) = scope {
        ctx.append(
            &gid,
            kinds::GROUP_ATTACH,
            by,
            scope_key,
            json!({"scope_key": s.scope_key, "url": s.url, "label": s.label}),
        )?;
    }
    ctx.upsert(&gid);
    Ok(gid)
}

pub(super) fn update(
    ctx: &mut Ctx<'_>,
    group_id: &str,
    by: &str,
    patch: Map<String, Value>,
) -> Result<(), CoreError> {
    check_manager(ctx, group_id, by, None)?;
    for (k, v) in &patch {
        match k.as_str() {
            "title" | "topic" => {
                if !v.is_string() {
                    return Err(CoreError::invalid(format!("{k} must be a string"))
                        .with("field", k.as_str()));
                }
            }
            _ => {
                return Err(CoreError::invalid(format!("unknown group field: {k}"))
                    .with("field", k.as_str()))
            }
        }
    }
    if patch.is_empty() {
        return Err(CoreError::invalid("empty patch").with("field", "patch"));
    }
    let scope = ctx.scope_for(group_id, by);
    ctx.append(
        group_id,
        kinds::GROUP_UPDATE,
        by,
        scope,
        json!({"patch": patch}),
    )?;
    touch(ctx, group_id, |g| {
        if let Some(t) = get_str(&patch, "title") {
            g.title = t.to_string();
        }
        if let Some(t) = get_str(&patch, "topic") {
            g.topic = t.to_string();
        }
    });
    Ok(())
}

pub(super) fn settings(
    ctx: &mut Ctx<'_>,
    group_id: &str,
    by: &str,
    patch: Map<String, Value>,
) -> Result<(), CoreError> {
    check_manager(ctx, group_id, by, None)?;
    if patch.is_empty() {
        return Err(CoreError::invalid("empty patch").with("field", "patch"));
    }
    let mut next: Settings = ctx.group(group_id)?.settings.clone();
    for (k, v) in &patch {
        if k == "default_send_to" {
            next.default_send_to = match v.as_str() {
                Some("foreman") | Some("@foreman") => DefaultSendTo::Foreman,
                Some("all") | Some("@all") => DefaultSendTo::All,
                _ => {
                    return Err(CoreError::invalid("default_send_to must be foreman or all")
                        .with("field", "default_send_to"))
                }
            };
        } else {
            next.extra.insert(k.clone(), v.clone());
        }
    }
    let scope = ctx.scope_for(group_id, by);
    ctx.append(
        group_id,
        kinds::GROUP_SETTINGS_UPDATE,
        by,
        scope,
        json!({"patch": patch}),
    )?;
    touch(ctx, group_id, |g| {
        g.settings = next;
    });
    Ok(())
}

pub(super) fn set_state(
    ctx: &mut Ctx<'_>,
    group_id: &str,
    by: &str,
    state: &str,
) -> Result<(), CoreError> {
    check_manager(ctx, group_id, by, None)?;
    if !STATES.contains(&state) {
        return Err(
            CoreError::invalid(format!("state must be one of {}", STATES.join(", ")))
                .with("field", "state"),
        );
    }
    let scope = ctx.scope_for(group_id, by);
    ctx.append(
        group_id,
        kinds::GROUP_SET_STATE,
        by,
        scope,
        json!({"state": state}),
    )?;
    touch(ctx, group_id, |g| {
        g.state = state.to_string();
        g.running = state != "stopped";
    });
    Ok(())
}

pub(super) fn delete(ctx: &mut Ctx<'_>, group_id: &str, by: &str) -> Result<(), CoreError> {
    ctx.group(group_id)?;
    if !(is_privileged(by) || by.starts_with("svc:")) {
        return Err(CoreError::denied("only user or system may delete a group").with("by", by));
    }
    ctx.groups.remove(group_id);
    ctx.out
        .changes
        .push(crate::view::Change::GroupDelete(group_id.to_string()));
    Ok(())
}

pub(super) fn attach(
    ctx: &mut Ctx<'_>,
    group_id: &str,
    by: &str,
    url: &str,
) -> Result<(), CoreError> {
    let url = url.trim();
    if url.is_empty() {
        return Err(CoreError::invalid("missing path").with("field", "path"));
    }
    let scope = Scope {
        scope_key: scope_key_for(url),
        url: url.to_string(),
        label: url
            .rsplit('/')
            .find(|s| !s.is_empty())
            .unwrap_or(url)
            .to_string(),
    };
    if group_id.is_empty() {
        // Attaching to no group creates one named after the scope, as CCCC does.
        create(ctx, by, scope.label.clone(), String::new(), Some(scope))?;
        return Ok(());
    }
    check_manager(ctx, group_id, by, None)?;
    let exists = ctx
        .group(group_id)?
        .scopes
        .iter()
        .any(|s| s.scope_key == scope.scope_key);
    ctx.append(
        group_id,
        kinds::GROUP_ATTACH,
        by,
        scope.scope_key.clone(),
        json!({"scope_key": scope.scope_key, "url": scope.url, "label": scope.label}),
    )?;
    touch(ctx, group_id, |g| {
        if !exists {
            g.scopes.push(scope.clone());
        }
        g.active_scope_key = scope.scope_key;
    });
    Ok(())
}

pub(super) fn detach(
    ctx: &mut Ctx<'_>,
    group_id: &str,
    by: &str,
    scope_key: &str,
) -> Result<(), CoreError> {
    check_manager(ctx, group_id, by, None)?;
    if scope_key.is_empty() {
        return Err(CoreError::invalid("missing scope_key").with("field", "scope_key"));
    }
    if !ctx
        .group(group_id)?
        .scopes
        .iter()
        .any(|s| s.scope_key == scope_key)
    {
        return Err(
            CoreError::invalid(format!("scope not attached: {scope_key}"))
                .with("scope_key", scope_key),
        );
    }
    ctx.append(
        group_id,
        kinds::GROUP_DETACH_SCOPE,
        by,
        scope_key.to_string(),
        json!({"scope_key": scope_key}),
    )?;
    touch(ctx, group_id, |g| {
        g.scopes.retain(|s| s.scope_key != scope_key);
        if g.active_scope_key == scope_key {
            g.active_scope_key = g
                .scopes
                .first()
                .map(|s| s.scope_key.clone())
                .unwrap_or_default();
        }
    });
    Ok(())
}

/// Actor ids: 1–64 of `[A-Za-z0-9._-]`, not a reserved principal.
pub fn validate_actor_id(id: &str) -> Result<(), CoreError> {
    let ok_chars = id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if id.is_empty()
        || id.len() > 64
        || !ok_chars
        || matches!(id, "user" | "system" | "all" | "peers" | "foreman")
    {
        return Err(CoreError::invalid(format!(
            "invalid actor_id: {id:?} (1-64 of A-Z a-z 0-9 . _ -, not reserved)"
        ))
        .with("field", "actor_id"));
    }
    Ok(())
}

fn string_list(v: &Value, field: &str) -> Result<Vec<String>, CoreError> {
    match v {
        Value::Array(a) => a
            .iter()
            .map(|x| {
                x.as_str().map(str::to_string).ok_or_else(|| {
                    CoreError::invalid(format!("{field} must be a list of strings"))
                        .with("field", field)
                })
            })
            .collect(),
        Value::Null => Ok(Vec::new()),
        _ => Err(
            CoreError::invalid(format!("{field} must be a list of strings")).with("field", field),
        ),
    }
}

/// Applies actor fields from a spec or patch; unknown fields are kept in `extra`.
fn apply_actor_fields(a: &mut Actor, fields: &Map<String, Value>) -> Result<(), CoreError> {
    for (k, v) in fields {
        match k.as_str() {
            "actor_id" | "id" | "group_id" | "by" | "role" | "generation" | "created_at"
            | "updated_at" => {}
            "title" => {
                a.title = v
                    .as_str()
                    .ok_or_else(|| {
                        CoreError::invalid("title must be a string").with("field", "title")
                    })?
                    .to_string()
            }
            "runtime" => {
                a.runtime = v
                    .as_str()
                    .ok_or_else(|| {
                        CoreError::invalid("runtime must be a string").with("field", "runtime")
                    })?
                    .to_string()
            }
            "command" => a.command = string_list(v, "command")?,
            "enabled" => {
                a.enabled = v.as_bool().ok_or_else(|| {
                    CoreError::invalid("enabled must be a boolean").with("field", "enabled")
                })?
            }
            "internal" => {
                a.internal = v.as_bool().ok_or_else(|| {
                    CoreError::invalid("internal must be a boolean").with("field", "internal")
                })?
            }
            "default_scope_key" => a.default_scope_key = v.as_str().unwrap_or_default().to_string(),
            // Secrets never enter the ledger.
            "env_private" => {}
            _ => {
                a.extra.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(())
}

pub(super) fn actor_add(
    ctx: &mut Ctx<'_>,
    group_id: &str,
    by: &str,
    spec: Map<String, Value>,
) -> Result<(), CoreError> {
    check_manager(ctx, group_id, by, None)?;
    let g = ctx.group(group_id)?;
    if g.actors.len() >= ctx.limits.max_actors {
        return Err(CoreError::new(
            ErrorCode::LimitExceeded,
            format!("a group holds at most {} actors", ctx.limits.max_actors),
        ));
    }
    let id = match get_str(&spec, "actor_id").filter(|s| !s.is_empty()) {
        Some(id) => id.to_string(),
        None => (1..)
            .map(|n| format!("agent-{n}"))
            .find(|c| g.actor(c).is_none())
            .unwrap_or_default(),
    };
    validate_actor_id(&id)?;
    if g.actor(&id).is_some() {
        return Err(CoreError::new(
            ErrorCode::AlreadyExists,
            format!("actor already exists: {id}"),
        )
        .with("actor_id", id.as_str()));
    }
    let generation = g
        .retired_generations
        .get(&id)
        .and_then(Value::as_u64)
        .map(|n| n + 1)
        .unwrap_or(1);
    let ts = ctx.ts();
    let mut a = Actor {
        id: id.clone(),
        role: Role::Peer,
        title: String::new(),
        runtime: "session".into(),
        command: Vec::new(),
        enabled: true,
        internal: false,
        generation,
        default_scope_key: String::new(),
        created_at: ts.clone(),
        updated_at: ts.clone(),
        extra: Map::new(),
    };
    apply_actor_fields(&mut a, &spec)?;
    if let Some(g) = ctx.groups.get_mut(group_id) {
        g.actors.push(a);
        g.fix_roles();
        g.updated_at = ts;
    }
    let actor = ctx.group(group_id)?.actor(&id).cloned();
    let mut data = serde_json::to_value(&actor).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut data {
        m.insert("actor_id".into(), Value::String(id.clone()));
    }
    let scope = ctx.scope_for(group_id, by);
    ctx.append(group_id, kinds::ACTOR_ADD, by, scope, data)?;
    ctx.upsert(group_id);
    Ok(())
}

/// Keys an `actor_update` patch may carry: Convene's own actor fields, and the fields CCCC's
/// `actor_update` accepts (kept as given in `extra`; `role` is accepted and ignored, as the
/// role follows from position). Anything else is refused before anything changes.
const ACTOR_PATCH_KEYS: &[&str] = &[
    "title",
    "runtime",
    "command",
    "enabled",
    "internal",
    "default_scope_key",
    "env_private",
    "role",
    "avatar_asset_path",
    "env",
    "submit",
    "capability_autoload",
    "capability_hidden",
    "runner",
    "runtime_state_source",
];

fn check_actor_patch(patch: &Map<String, Value>) -> Result<(), CoreError> {
    if patch.is_empty() {
        return Err(CoreError::invalid("empty patch")
            .with("field", "patch")
            .with("reason", "invalid_patch"));
    }
    let unknown: Vec<&str> = patch
        .keys()
        .map(String::as_str)
        .filter(|k| !ACTOR_PATCH_KEYS.contains(k))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    Err(
        CoreError::invalid(format!("unknown actor patch keys: {}", unknown.join(", ")))
            .with("field", "patch")
            .with("reason", "invalid_patch")
            .with("unknown_keys", Value::from(unknown))
            .with("allowed_keys", Value::from(ACTOR_PATCH_KEYS.to_vec())),
    )
}

pub(super) fn actor_update(
    ctx: &mut Ctx<'_>,
    group_id: &str,
    by: &str,
    actor_id: &str,
    patch: Map<String, Value>,
) -> Result<(), CoreError> {
    check_manager(ctx, group_id, by, Some(actor_id))?;
    let mut a = ctx
        .group(group_id)?
        .actor(actor_id)
        .cloned()
        .ok_or_else(|| CoreError::no_actor(actor_id))?;
    check_actor_patch(&patch)?;
    apply_actor_fields(&mut a, &patch)?;
    a.updated_at = ctx.ts();
    let scope = ctx.scope_for(group_id, by);
    let mut clean = patch.clone();
    clean.remove("env_private");
    ctx.append(
        group_id,
        kinds::ACTOR_UPDATE,
        by,
        scope,
        json!({"actor_id": actor_id, "patch": clean}),
    )?;
    if let Some(g) = ctx.groups.get_mut(group_id) {
        if let Some(slot) = g.actors.iter_mut().find(|x| x.id == actor_id) {
            *slot = a;
        }
        g.fix_roles();
    }
    ctx.upsert(group_id);
    Ok(())
}

pub(super) fn actor_remove(
    ctx: &mut Ctx<'_>,
    group_id: &str,
    by: &str,
    actor_id: &str,
) -> Result<(), CoreError> {
    check_manager(ctx, group_id, by, Some(actor_id))?;
    let generation = ctx
        .group(group_id)?
        .actor(actor_id)
        .map(|a| a.generation)
        .ok_or_else(|| CoreError::no_actor(actor_id))?;
    let scope = ctx.scope_for(group_id, by);
    let ev = ctx.append(
        group_id,
        kinds::ACTOR_REMOVE,
        by,
        scope,
        json!({"actor_id": actor_id}),
    )?;
    // The generation ends here: its Mail and open reply obligations are not handed on to an
    // actor added later under the same id (as its deliveries are not, §6.4).
    ctx.out.changes.push(crate::view::Change::ActorRetire {
        group_id: group_id.to_string(),
        actor_id: actor_id.to_string(),
        closed_by: ev.id,
    });
    touch(ctx, group_id, |g| {
        g.actors.retain(|a| a.id != actor_id);
        g.retired_generations
            .insert(actor_id.to_string(), Value::from(generation));
        g.fix_roles();
    });
    Ok(())
}
