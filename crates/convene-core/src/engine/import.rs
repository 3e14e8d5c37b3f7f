//! Import of exported or foreign (CCCC `ledger.jsonl`) events into a group.

use serde_json::{Map, Value};

use std::collections::HashMap;

use super::{chat, chat::project_message, get_str, groups, Ctx};
use crate::error::CoreError;
use crate::event::{format_ts, kinds, new_event_id, Event, ENVELOPE_V};
use crate::model::{Actor, Group, Role};
use crate::view::{Change, DeliveryRow};

/// Imports events in order. The group is created when absent (from the first
/// `group.create`, else bare). Events whose id is already in the group are skipped, so an
/// import can be repeated. `seq` is reassigned; `id`, `ts`, `by`, `kind`, `data` are kept.
/// The outcome is history ([`Outcome::replayed`](super::Outcome)): nothing is delivered for
/// it. Imported `runtime.delivery` events set their deliveries' states; one whose latest
/// state is `claimed` was left in flight by the process that exported it and is settled to
/// `ambiguous` here, as at startup (§6.4). A delivery the group already has is never changed
/// by an imported event (so an import cannot settle an attempt in flight in this process),
/// and an imported delivery record never names a delivery of a message appended live here
/// (it is kept as an event and sets nothing): the group remembers the `seq` ranges its
/// imports appended ([`Group::imported_seqs`]), so only history speaks for history, and a
/// live message's deliveries are this daemon's alone (claimed, settled, retried by it).
pub(super) fn import(
    ctx: &mut Ctx<'_>,
    group_id: &str,
    events: Vec<Value>,
) -> Result<(), CoreError> {
    if group_id.is_empty() {
        return Err(CoreError::invalid("missing group_id").with("field", "group_id"));
    }
    let mut parsed = Vec::with_capacity(events.len());
    for (i, raw) in events.into_iter().enumerate() {
        let o = raw
            .as_object()
            .ok_or_else(|| CoreError::invalid(format!("line {}: not an object", i + 1)))?;
        let kind = get_str(o, "kind")
            .filter(|k| !k.is_empty())
            .ok_or_else(|| CoreError::invalid(format!("line {}: missing kind", i + 1)))?;
        if o.get("data").map(|d| !d.is_object()).unwrap_or(false) {
            return Err(CoreError::invalid(format!(
                "line {}: data must be an object",
                i + 1
            )));
        }
        parsed.push((kind.to_string(), o.clone()));
    }
    if !ctx.groups.contains_key(group_id) {
        let ts = format_ts(ctx.now);
        let (title, topic, created_at) = parsed
            .iter()
            .find(|(k, _)| k == kinds::GROUP_CREATE)
            .map(|(_, o)| {
                let d = o.get("data").and_then(Value::as_object);
                (
                    d.and_then(|d| get_str(d, "title"))
                        .unwrap_or_default()
                        .to_string(),
                    d.and_then(|d| get_str(d, "topic"))
                        .unwrap_or_default()
                        .to_string(),
                    get_str(o, "ts").unwrap_or(&ts).to_string(),
                )
            })
            .unwrap_or_else(|| (group_id.to_string(), String::new(), ts.clone()));
        ctx.groups.insert(
            group_id.to_string(),
            Group::new(group_id.to_string(), title, topic, created_at, ts),
        );
    }
    ctx.out.replayed = true;
    let first_seq = ctx.groups.get(group_id).map_or(1, |g| g.last_seq + 1);
    // Deliveries this import set, by id: the view does not see this command's own changes.
    let mut deliveries: HashMap<String, DeliveryRow> = HashMap::new();
    for (kind, o) in parsed {
        let id = get_str(&o, "id")
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .unwrap_or_else(new_event_id);
        if ctx.view.event(group_id, &id)?.is_some()
            || ctx
                .out
                .events
                .iter()
                .any(|e| e.id == id && e.group_id == group_id)
        {
            continue;
        }
        let data = o
            .get("data")
            .cloned()
            .unwrap_or_else(|| Value::Object(Map::new()));
        apply_management(ctx, group_id, &kind, &data);
        let g = ctx
            .groups
            .get_mut(group_id)
            .ok_or_else(|| CoreError::no_group(group_id))?;
        g.last_seq += 1;
        let ev = Event {
            v: ENVELOPE_V,
            id,
            ts: get_str(&o, "ts")
                .map(str::to_string)
                .unwrap_or_else(|| format_ts(ctx.now)),
            seq: g.last_seq,
            kind: kind.clone(),
            group_id: group_id.to_string(),
            scope_key: get_str(&o, "scope_key").unwrap_or_default().to_string(),
            by: get_str(&o, "by").unwrap_or("system").to_string(),
            data,
        };
        ctx.out.events.push(ev.clone());
        // The projections a live append would have made, so read state, replies and
        // cancellations survive an export and import.
        match kind.as_str() {
            kinds::CHAT_MESSAGE => project_message(ctx, &ev)?,
            kinds::REPLY_CANCELLED => {
                if let Some(src) = ev.data_str("source_event_id") {
                    chat::close_open_obligations(ctx, group_id, src, &ev.id)?;
                }
            }
            kinds::RUNTIME_DELIVERY => {
                // A delivery the group already had before this import is this daemon's own
                // (possibly in flight): an imported event is kept but never changes it.
                // Nor does one whose message was appended live here: that delivery is this
                // daemon's to claim and settle (an imported `accepted` would stop its
                // automatic attempt, an imported `claimed` would be settled `ambiguous`).
                let row = match delivery_row(&ev) {
                    Some(r) if deliveries.contains_key(&r.delivery_id) => Some(r),
                    Some(r)
                        if ctx.view.delivery(group_id, &r.delivery_id)?.is_none()
                            && !live_here(ctx, group_id, &r.source_event_id)? =>
                    {
                        Some(r)
                    }
                    _ => None,
                };
                if let Some(row) = row {
                    deliveries.insert(row.delivery_id.clone(), row.clone());
                    ctx.out.changes.push(Change::Delivery {
                        group_id: group_id.to_string(),
                        row,
                    });
                }
            }
            kinds::ACTOR_REMOVE => {
                if let Some(actor) = ev.data_str("actor_id") {
                    ctx.out.changes.push(Change::ActorRetire {
                        group_id: group_id.to_string(),
                        actor_id: actor.to_string(),
                        closed_by: ev.id.clone(),
                    });
                }
            }
            kinds::MAIL_READ => {
                if let (Some(actor), Some(mail)) =
                    (ev.data_str("actor_id"), ev.data_str("event_id"))
                {
                    if let Some(seq) = chat::mail_seq_now(ctx, group_id, actor, mail)? {
                        chat::advance_mail_cursor(ctx, group_id, actor, mail, seq)?;
                    }
                }
            }
            _ => {}
        }
    }
    settle_in_flight(ctx, group_id, deliveries)?;
    if let Some(g) = ctx.groups.get_mut(group_id) {
        if g.last_seq >= first_seq {
            let last = g.last_seq;
            g.mark_imported(first_seq, last);
        }
    }
    ctx.upsert(group_id);
    Ok(())
}

/// Whether `source` is a message this group appended live (not brought by an import: neither
/// this one, whose events are not in the view yet, nor an earlier one).
fn live_here(ctx: &Ctx<'_>, group_id: &str, source: &str) -> Result<bool, CoreError> {
    let Some(ev) = ctx.view.event(group_id, source)? else {
        return Ok(false);
    };
    Ok(!ctx
        .groups
        .get(group_id)
        .is_some_and(|g| g.is_imported(ev.seq)))
}

/// The `reason` of the `ambiguous` an import appends for a delivery it found in flight.
pub const IMPORT_SETTLED: &str = "claimed in an imported ledger; handoff cannot be proven";

/// The delivery row an imported `runtime.delivery` event sets, if it names one.
fn delivery_row(ev: &Event) -> Option<DeliveryRow> {
    let field = |k: &str| ev.data_str(k).filter(|s| !s.is_empty()).map(str::to_string);
    let state = field("state")?;
    if !matches!(
        state.as_str(),
        "claimed" | "accepted" | "failed" | "ambiguous"
    ) {
        return None;
    }
    Some(DeliveryRow {
        delivery_id: field("delivery_id")?,
        actor_id: field("actor_id")?,
        source_event_id: field("source_event_id")?,
        state,
        transport: field("transport").unwrap_or_default(),
    })
}

/// Appends `ambiguous` for every imported delivery whose latest state is `claimed`: no
/// process of this daemon runs that attempt, so nothing else would ever settle it.
fn settle_in_flight(
    ctx: &mut Ctx<'_>,
    group_id: &str,
    deliveries: HashMap<String, DeliveryRow>,
) -> Result<(), CoreError> {
    let mut claimed: Vec<DeliveryRow> = deliveries
        .into_values()
        .filter(|r| r.state == "claimed")
        .collect();
    claimed.sort_by(|a, b| a.delivery_id.cmp(&b.delivery_id));
    for row in claimed {
        let scope = ctx
            .out
            .events
            .iter()
            .find(|e| e.id == row.source_event_id)
            .map(|e| e.scope_key.clone())
            .unwrap_or_default();
        let data = serde_json::json!({
            "actor_id": row.actor_id,
            "source_event_id": row.source_event_id,
            "delivery_id": row.delivery_id,
            "state": "ambiguous",
            "transport": row.transport,
            "reason": IMPORT_SETTLED,
        });
        ctx.append(group_id, kinds::RUNTIME_DELIVERY, "system", scope, data)?;
        ctx.out.changes.push(Change::Delivery {
            group_id: group_id.to_string(),
            row: DeliveryRow {
                state: "ambiguous".into(),
                ..row
            },
        });
    }
    Ok(())
}

/// Rebuilds actors and settings from management events (best effort for foreign shapes).
fn apply_management(ctx: &mut Ctx<'_>, group_id: &str, kind: &str, data: &Value) {
    let Some(g) = ctx.groups.get_mut(group_id) else {
        return;
    };
    let Some(d) = data.as_object() else { return };
    let actor_id = get_str(d, "actor_id")
        .or_else(|| {
            d.get("actor")
                .and_then(|a| a.get("id"))
                .and_then(Value::as_str)
        })
        .unwrap_or_default()
        .to_string();
    match kind {
        kinds::ACTOR_ADD
            if !actor_id.is_empty()
                && g.actor(&actor_id).is_none()
                && groups::validate_actor_id(&actor_id).is_ok() =>
        {
            let src = d.get("actor").and_then(Value::as_object).unwrap_or(d);
            // The generation the event records (Convene's own), never one a removed actor
            // of this id already had here: delivery ids stay apart between generations.
            let after_retired = g
                .retired_generations
                .get(&actor_id)
                .and_then(Value::as_u64)
                .map_or(1, |n| n + 1);
            let generation = src
                .get("generation")
                .and_then(Value::as_u64)
                .map_or(after_retired, |n| n.max(after_retired));
            g.actors.push(Actor {
                id: actor_id,
                role: Role::Peer,
                title: get_str(src, "title").unwrap_or_default().to_string(),
                runtime: get_str(src, "runtime").unwrap_or("session").to_string(),
                command: Vec::new(),
                enabled: true,
                internal: src
                    .get("internal")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                generation,
                default_scope_key: String::new(),
                created_at: String::new(),
                updated_at: String::new(),
                extra: Map::new(),
            });
            g.fix_roles();
        }
        kinds::ACTOR_REMOVE if !actor_id.is_empty() => {
            if let Some(a) = g.actor(&actor_id) {
                let generation = a.generation;
                g.retired_generations
                    .insert(actor_id.clone(), Value::from(generation));
            }
            g.actors.retain(|a| a.id != actor_id);
            g.fix_roles();
        }
        kinds::GROUP_UPDATE => {
            let p = d.get("patch").and_then(Value::as_object).unwrap_or(d);
            if let Some(t) = get_str(p, "title") {
                g.title = t.to_string();
            }
            if let Some(t) = get_str(p, "topic") {
                g.topic = t.to_string();
            }
        }
        _ => {}
    }
}
