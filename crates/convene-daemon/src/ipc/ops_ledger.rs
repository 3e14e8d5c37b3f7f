//! Ledger reads: tail, search, window, statuses.

use convene_core::CoreError;
use convene_store::RawEvent;
use serde_json::{json, Map, Value};

use super::args::Args;
use super::{fitting, raw_value};
use crate::Daemon;

const MAX_PAGE: u64 = 1000;

fn group_exists(d: &Daemon, gid: &str) -> Result<(), CoreError> {
    d.ledger
        .engine()
        .group(gid)
        .map(|_| ())
        .ok_or_else(|| CoreError::no_group(gid))
}

/// `kind` category (CCCC: all | chat | notify) or an explicit `kinds` list.
fn kinds(a: &Args) -> Result<Vec<String>, CoreError> {
    if let Some(k) = a.str_list("kinds")? {
        return Ok(k);
    }
    Ok(match a.opt_str("kind")?.as_deref() {
        None | Some("all") | Some("") => Vec::new(),
        Some("chat") => vec!["chat.message".into()],
        Some("notify") => vec!["system.notify".into()],
        Some(k) => vec![k.to_string()],
    })
}

fn values(evs: &[RawEvent]) -> Vec<Value> {
    evs.iter().map(|r| raw_value(&r.json)).collect()
}

pub(super) fn tail(d: &Daemon, a: &Args) -> Result<Value, CoreError> {
    let gid = a.req("group_id")?;
    group_exists(d, &gid)?;
    let limit = a.limit(50, MAX_PAGE)?;
    let k = kinds(a)?;
    let before = match a.opt_str("before")?.filter(|s| !s.is_empty()) {
        Some(id) => seq_of(d, &gid, &id)?,
        None => 0,
    };
    let r = d.ledger.readers();
    let mut evs = r
        .events_before(&gid, before, limit, &k)
        .map_err(CoreError::from)?;
    // The newest events that fit one answer; the rest is older, so `has_more` covers it and
    // the caller pages on with `before` = the first event returned.
    let keep = fitting(evs.iter().rev().map(|e| e.json.len()));
    let evs = evs.split_off(evs.len() - keep);
    let has_more = match evs.first() {
        Some(f) => !r
            .events_before(&gid, f.seq, 1, &k)
            .map_err(CoreError::from)?
            .is_empty(),
        None => false,
    };
    Ok(
        json!({"count": evs.len(), "events": values(&evs), "has_more": has_more, "head_seq": r.head_seq(&gid).map_err(CoreError::from)?}),
    )
}

fn seq_of(d: &Daemon, gid: &str, id: &str) -> Result<u64, CoreError> {
    Ok(d.ledger
        .readers()
        .event(gid, id)
        .map_err(CoreError::from)?
        .ok_or_else(|| CoreError::no_event(id))?
        .seq)
}

pub(super) fn search(d: &Daemon, a: &Args) -> Result<Value, CoreError> {
    let gid = a.req("group_id")?;
    group_exists(d, &gid)?;
    let limit = a.limit(50, MAX_PAGE)?;
    let k = kinds(a)?;
    let q = a.opt_str("q")?.filter(|s| !s.is_empty());
    let mut senders: Vec<String> = a.str_list("by_any")?.unwrap_or_default();
    if let Some(b) = a.opt_str("by")?.filter(|s| !s.is_empty()) {
        // ledger_search's `by` filters by sender, as in CCCC.
        senders.push(b);
    }
    let r = d.ledger.readers();
    let keep = |e: &RawEvent| senders.is_empty() || senders.contains(&e.by);
    if let Some(after) = a.opt_str("after")?.filter(|s| !s.is_empty()) {
        let mut cur = seq_of(d, &gid, &after)?;
        let mut out = Vec::new();
        loop {
            let page = r
                .events_after(&gid, cur, 500, &k)
                .map_err(CoreError::from)?;
            let Some(last) = page.last() else { break };
            cur = last.seq;
            for e in page {
                let hit = q
                    .as_ref()
                    .map(|q| e.json.to_lowercase().contains(&q.to_lowercase()))
                    .unwrap_or(true);
                if keep(&e) && hit {
                    out.push(e);
                }
            }
            if out.len() > limit {
                break;
            }
        }
        // Oldest first: the first events that fit one answer; the caller pages on with
        // `after` = the last event returned.
        let keep = fitting(out.iter().take(limit).map(|e| e.json.len()));
        let has_more = out.len() > keep;
        out.truncate(keep);
        return Ok(json!({"count": out.len(), "events": values(&out), "has_more": has_more}));
    }
    let mut before = match a.opt_str("before")?.filter(|s| !s.is_empty()) {
        Some(id) => seq_of(d, &gid, &id)?,
        None => 0,
    };
    let mut out: Vec<RawEvent> = Vec::new();
    loop {
        let page = match &q {
            Some(q) => r.search(&gid, q, before, 500, &k),
            None => r.events_before(&gid, before, 500, &k),
        }
        .map_err(CoreError::from)?;
        let Some(first) = page.first() else { break };
        before = first.seq;
        let mut hits: Vec<RawEvent> = page.into_iter().filter(|e| keep(e)).collect();
        hits.append(&mut out);
        out = hits;
        if out.len() > limit || before <= 1 {
            break;
        }
    }
    // The newest `limit` that fit one answer; the caller pages on with `before` = the first.
    let start = out.len().saturating_sub(limit);
    let keep = fitting(out[start..].iter().rev().map(|e| e.json.len()));
    let has_more = out.len() > keep;
    let out = out.split_off(out.len() - keep);
    Ok(json!({"count": out.len(), "events": values(&out), "has_more": has_more}))
}

pub(super) fn window(d: &Daemon, a: &Args) -> Result<Value, CoreError> {
    let center = a.req("center")?;
    let gid = a.req("group_id")?;
    group_exists(d, &gid)?;
    let k = match a.opt_str("kind")?.as_deref() {
        None | Some("chat") => vec!["chat.message".to_string()],
        _ => kinds(a)?,
    };
    let nb = a.uint("before", 30)?.min(MAX_PAGE) as usize;
    let na = a.uint("after", 30)?.min(MAX_PAGE) as usize;
    let r = d.ledger.readers();
    let c = r
        .event(&gid, &center)
        .map_err(CoreError::from)?
        .ok_or_else(|| CoreError::no_event(&center))?;
    if !k.is_empty() && !k.contains(&c.kind) {
        return Err(
            CoreError::invalid("center event is not of the window's kind")
                .with("reason", "invalid_center_kind"),
        );
    }
    let before = r
        .events_before(&gid, c.seq, nb + 1, &k)
        .map_err(CoreError::from)?;
    let after = r
        .events_after(&gid, c.seq, na + 1, &k)
        .map_err(CoreError::from)?;
    let before = &before[before.len().saturating_sub(nb + 1)..];
    let after = &after[..after.len().min(na + 1)];
    // The events nearest the center that fit one answer beside it (taken alternately from
    // each side), so `has_more_before`/`has_more_after` page on from the window's ends.
    let (mut nb_fit, mut na_fit) = (0, 0);
    let mut total = c.json.len();
    let (mut b_open, mut a_open) = (true, true);
    while b_open || a_open {
        if b_open {
            match before.len().checked_sub(nb_fit + 1) {
                Some(i) if nb_fit < nb && total + before[i].json.len() <= super::ANSWER_BYTES => {
                    total += before[i].json.len();
                    nb_fit += 1;
                }
                _ => b_open = false,
            }
        }
        if a_open {
            match after.get(na_fit) {
                Some(e) if na_fit < na && total + e.json.len() <= super::ANSWER_BYTES => {
                    total += e.json.len();
                    na_fit += 1;
                }
                _ => a_open = false,
            }
        }
    }
    let hb = before.len() > nb_fit;
    let ha = after.len() > na_fit;
    let before = &before[before.len() - nb_fit..];
    let after = &after[..na_fit];
    let mut evs: Vec<Value> = values(before);
    let center_index = evs.len();
    evs.push(raw_value(&c.json));
    evs.extend(values(after));
    Ok(
        json!({"center_id": center, "center_index": center_index, "count": evs.len(), "events": evs, "has_more_before": hb, "has_more_after": ha}),
    )
}

/// The delivery that speaks for `actor` now: its current generation's (§6.4), not one of an
/// earlier actor removed under the same id; for an actor no longer in the group, its last.
fn delivery_of<'a>(
    group: &convene_core::Group,
    rows: &'a [convene_core::DeliveryRow],
    actor: &str,
    source: &str,
) -> Option<&'a convene_core::DeliveryRow> {
    if let Some(a) = group.actor(actor) {
        let did = convene_core::engine::delivery_id(actor, a.generation, source);
        return rows.iter().find(|x| x.delivery_id == did);
    }
    // `delivery:<actor>:<generation>:<source>`; actor ids hold no `:`.
    let generation = |x: &convene_core::DeliveryRow| -> u64 {
        x.delivery_id
            .split(':')
            .nth(2)
            .and_then(|g| g.parse().ok())
            .unwrap_or(0)
    };
    rows.iter()
        .filter(|x| x.actor_id == actor)
        .max_by_key(|x| generation(x))
}

pub(super) fn statuses(d: &Daemon, a: &Args) -> Result<Value, CoreError> {
    let gid = a.req("group_id")?;
    let group = d
        .ledger
        .engine()
        .group(&gid)
        .cloned()
        .ok_or_else(|| CoreError::no_group(&gid))?;
    let ids = a.str_list("event_ids")?.unwrap_or_default();
    if ids.len() > MAX_PAGE as usize {
        return Err(
            CoreError::invalid(format!("at most {MAX_PAGE} event_ids")).with("field", "event_ids")
        );
    }
    let r = d.ledger.readers();
    let mut out = Map::new();
    for id in ids {
        let Some(raw) = r.event(&gid, &id).map_err(CoreError::from)? else {
            continue;
        };
        if raw.kind != "chat.message" {
            continue;
        }
        let v = raw_value(&raw.json);
        let to = convene_core::routing::recipients_of(&v["data"]);
        let mode = v["data"]["message_mode"]
            .as_str()
            .unwrap_or("send")
            .to_string();
        let obligations = r.obligations(&gid, &id).map_err(CoreError::from)?;
        let deliveries = r.deliveries(&gid, &id).map_err(CoreError::from)?;
        let mut recips: Vec<String> = convene_core::routing::expand(&group, &to)
            .into_iter()
            .filter(|x| *x != raw.by)
            .collect();
        for o in &obligations {
            if !recips.contains(&o.actor_id) {
                recips.push(o.actor_id.clone());
            }
        }
        let mut ob = Map::new();
        let mut read = Map::new();
        for actor in &recips {
            let o = obligations.iter().find(|o| &o.actor_id == actor);
            let dstate = delivery_of(&group, &deliveries, actor, &id)
                .map(|x| json!(x.state))
                .unwrap_or(Value::Null);
            ob.insert(
                actor.clone(),
                json!({
                    "reply_requested": o.is_some(),
                    "replied": o.map(|o| o.status.as_str() == "replied").unwrap_or(false),
                    "cancelled": o.map(|o| o.status.as_str() == "cancelled").unwrap_or(false),
                    "status": o.map(|o| json!(o.status.as_str())).unwrap_or(Value::Null),
                    "closed_by": o.and_then(|o| o.closed_by.clone()),
                    "delivery_state": dstate,
                }),
            );
            // Read state belongs to the inboxes the Mail is in: not to an actor added after
            // it was sent, nor to a later generation of a removed recipient.
            if mode == "mail"
                && actor != "user"
                && r.mail_indexed(&gid, actor, raw.seq)
                    .map_err(CoreError::from)?
            {
                read.insert(
                    actor.clone(),
                    json!(r.mail_cursor(&gid, actor).map_err(CoreError::from)? >= raw.seq),
                );
            }
        }
        let mut st = json!({"obligation_status": ob});
        if mode == "mail" {
            st["read_status"] = Value::Object(read);
        }
        out.insert(id, st);
    }
    Ok(json!({"statuses": out}))
}
