//! Messaging ops: send, reply, cancel, deliver, inbox, history, notify, relay, blobs.

use convene_core::{ClaimKind, Command, CoreError, RelayArgs, SendArgs};
use serde_json::{json, Map, Value};

use super::args::Args;
use super::{ev_value, raw_value};
use super::{fitting, ANSWER_BYTES, BLOB_CHUNK_BYTES};
use crate::Daemon;

/// Message fields read from `args` (shared by send, reply and relay).
fn send_args(d: &Daemon, a: &Args, group_id: String) -> Result<SendArgs, CoreError> {
    let attachments = d.blobs.check_attachments(a.obj_list("attachments")?)?;
    let text = match a.opt_str("text")? {
        Some(t) => Some(t),
        None if !attachments.is_empty() => Some(String::new()),
        None => None,
    };
    let mut extra = Map::new();
    for k in ["thread", "suggested_user_message"] {
        if let Some(v) = a.0.get(k).filter(|v| !v.is_null()) {
            extra.insert(k.to_string(), v.clone());
        }
    }
    Ok(SendArgs {
        group_id,
        by: a.by()?,
        text,
        format: a.opt_str("format")?,
        insight: a.opt_str("insight")?,
        message_mode: a.opt_str("message_mode")?,
        to: a.str_list("to")?.unwrap_or_default(),
        reply_to: a.opt_str("reply_to")?.filter(|s| !s.is_empty()),
        quote_text: a.opt_str("quote_text")?,
        src_group_id: a.opt_str("src_group_id")?.filter(|s| !s.is_empty()),
        src_event_id: a.opt_str("src_event_id")?.filter(|s| !s.is_empty()),
        attachments,
        refs: a.obj_list("refs")?,
        client_id: a.opt_str("client_id")?.filter(|s| !s.is_empty()),
        client_ts: a.opt_str("client_ts")?,
        extra,
        event_id: None,
    })
}

/// `{event, message_mode[, duplicate]}`, splicing the stored event JSON when it is fresh.
pub(super) fn sent(c: &crate::ledger::Committed) -> String {
    if let Some((e, json)) = c.events.first().filter(|_| c.existing.is_none()) {
        let mode = Value::String(e.data_str("message_mode").unwrap_or("send").to_string());
        return format!("{{\"event\":{json},\"message_mode\":{mode}}}");
    }
    let e = c.primary();
    let mode = e
        .and_then(|e| e.data_str("message_mode"))
        .unwrap_or("send")
        .to_string();
    let mut v = json!({"event": e.map(ev_value), "message_mode": mode});
    if c.existing.is_some() {
        v["duplicate"] = json!(true);
    }
    v.to_string()
}

/// Builds the command of a `send` or `reply` (no I/O but a read of the replied-to text), so
/// the connection can queue it in arrival order without waiting for earlier answers.
pub(super) fn prepare_send(d: &Daemon, op: &str, a: &Args) -> Result<Command, CoreError> {
    if op == "reply" {
        let reply_to = a.req("reply_to")?;
        let gid = a.req("group_id")?;
        let mut args = send_args(d, a, gid.clone())?;
        args.message_mode = Some(args.message_mode.unwrap_or_else(|| "send".into()));
        if args.quote_text.is_none() {
            args.quote_text = d
                .ledger
                .readers()
                .event(&gid, &reply_to)
                .ok()
                .flatten()
                .and_then(|r| {
                    let v: Value = serde_json::from_str(&r.json).ok()?;
                    v["data"]["text"]
                        .as_str()
                        .map(|t| t.chars().take(200).collect())
                });
        }
        args.reply_to = Some(reply_to);
        return Ok(Command::Send(args));
    }
    let gid = a.req("group_id")?;
    Ok(Command::Send(send_args(d, a, gid)?))
}

pub(super) async fn cancel(d: &Daemon, a: &Args) -> Result<Value, CoreError> {
    let gid = a.req("group_id")?;
    let source = a.req("source_event_id")?;
    let c = d
        .ledger
        .execute(Command::CancelReplyRequest {
            group_id: gid.clone(),
            by: a.by()?,
            source_event_id: source.clone(),
        })
        .await?;
    let obligations = d
        .ledger
        .readers()
        .obligations(&gid, &source)
        .map_err(CoreError::from)?;
    let status: Map<String, Value> = obligations
        .iter()
        .map(|o| (o.actor_id.clone(), json!(o.status.as_str())))
        .collect();
    Ok(json!({"event": c.primary().map(ev_value), "obligations": status}))
}

pub(super) async fn deliver(d: &Daemon, a: &Args) -> Result<Value, CoreError> {
    let gid = a.req("group_id")?;
    let source = a.req("source_event_id")?;
    let listed = a.str_list("actor_ids")?.unwrap_or_default();
    if listed.is_empty() || listed.iter().any(|x| x.trim().is_empty()) {
        return Err(
            CoreError::invalid("actor_ids must list one or more actors").with("field", "actor_ids")
        );
    }
    // An actor listed twice is one attempt, not an attempt followed by a conflict.
    let mut actors: Vec<String> = Vec::with_capacity(listed.len());
    for x in listed {
        if !actors.contains(&x) {
            actors.push(x);
        }
    }
    let by = a.by()?;
    let force = a.bool("force_ambiguous", false)?;
    let raw = d
        .ledger
        .readers()
        .event(&gid, &source)
        .map_err(CoreError::from)?;
    if d.ledger.engine().group(&gid).is_none() {
        return Err(CoreError::no_group(&gid));
    }
    let raw = raw.ok_or_else(|| CoreError::no_event(&source))?;
    let ev: convene_core::Event =
        serde_json::from_str(&raw.json).map_err(|e| CoreError::storage(e.to_string()))?;
    if ev.kind != "chat.message" {
        return Err(
            CoreError::invalid("only chat.message events can be delivered")
                .with("field", "source_event_id"),
        );
    }
    if by != ev.by && by != "user" {
        return Err(
            CoreError::denied("only the source sender or the user may request delivery")
                .with("by", by.as_str()),
        );
    }
    let rows = d
        .ledger
        .readers()
        .deliveries(&gid, &source)
        .map_err(CoreError::from)?;
    {
        let eng = d.ledger.engine();
        let g = eng.group(&gid).ok_or_else(|| CoreError::no_group(&gid))?;
        let to = convene_core::routing::recipients_of(&ev.data);
        for actor in &actors {
            let Some(x) = g.actor(actor) else {
                return Err(CoreError::no_actor(actor));
            };
            // Refuse the whole request before claiming any actor when one attempt would be
            // refused (§6.4): an error must not stand for handoffs that did happen. The claim
            // itself checks again, atomically.
            let did = convene_core::engine::delivery_id(actor, x.generation, &source);
            if let Some(r) = rows.iter().find(|r| r.delivery_id == did) {
                if r.state == "claimed" || (r.state == "ambiguous" && !force) {
                    return Err(CoreError::new(
                        convene_core::ErrorCode::DeliveryConflict,
                        if r.state == "claimed" {
                            "delivery in progress"
                        } else {
                            "last attempt is ambiguous: pass force_ambiguous to deliver again"
                        },
                    )
                    .with("delivery_id", did.as_str())
                    .with("state", r.state.as_str()));
                }
            }
            if !convene_core::routing::addresses(g, &to, actor) {
                return Err(
                    CoreError::invalid(format!("{source} is not addressed to {actor}"))
                        .with("reason", "event_not_for_actor")
                        .with("actor_id", actor.as_str()),
                );
            }
        }
    }
    let mut deliveries = Vec::new();
    for actor in &actors {
        let did = d
            .runtime
            .deliver(
                &gid,
                actor,
                &source,
                ClaimKind::Manual {
                    force_ambiguous: force,
                },
            )
            .await?;
        deliveries.push(json!({"actor_id": actor, "delivery_id": did}));
    }
    Ok(
        json!({"actor_ids": actors, "delivery_state": "claimed", "deliveries": deliveries, "event": raw_value(&raw.json)}),
    )
}

fn cursor_value(d: &Daemon, gid: &str, seq: u64) -> Result<Value, CoreError> {
    if seq == 0 {
        return Ok(json!({"event_id": null, "ts": null, "seq": 0}));
    }
    let e = d
        .ledger
        .readers()
        .events_after(gid, seq - 1, 1, &[])
        .map_err(CoreError::from)?;
    Ok(match e.first() {
        Some(r) => json!({"event_id": r.id, "ts": r.ts, "seq": r.seq}),
        None => json!({"event_id": null, "ts": null, "seq": seq}),
    })
}

fn inbox_common(d: &Daemon, a: &Args) -> Result<(String, String, usize), CoreError> {
    let gid = a.req("group_id")?;
    let actor = a.req("actor_id")?;
    let limit = a.limit(50, 200)?;
    if actor == "user" {
        return Err(CoreError::invalid("the user has no Mail inbox").with("field", "actor_id"));
    }
    let eng = d.ledger.engine();
    let g = eng.group(&gid).ok_or_else(|| CoreError::no_group(&gid))?;
    if g.actor(&actor).is_none() {
        return Err(CoreError::no_actor(&actor));
    }
    Ok((gid, actor, limit))
}

/// The longest prefix of `items` within [`ANSWER_BYTES`] (never empty when `items` is not:
/// one message always goes). An `inbox_read` that moved the cursor over more than the SDK can
/// read would mark Mail read that nobody received.
fn fit_answer(items: &mut Vec<convene_store::RawEvent>) {
    let keep = fitting(items.iter().map(|r| r.json.len()));
    items.truncate(keep);
}

pub(super) fn inbox_peek(d: &Daemon, a: &Args) -> Result<Value, CoreError> {
    let (gid, actor, limit) = inbox_common(d, a)?;
    let (mut items, cursor) = d
        .ledger
        .readers()
        .inbox(&gid, &actor, limit)
        .map_err(CoreError::from)?;
    fit_answer(&mut items);
    Ok(
        json!({"cursor": cursor_value(d, &gid, cursor)?, "messages": items.iter().map(|r| raw_value(&r.json)).collect::<Vec<_>>()}),
    )
}

pub(super) async fn inbox_read(d: &Daemon, a: &Args) -> Result<Value, CoreError> {
    let (gid, actor, limit) = inbox_common(d, a)?;
    let by = a.by()?;
    let (mut items, cursor) = d
        .ledger
        .readers()
        .inbox(&gid, &actor, limit)
        .map_err(CoreError::from)?;
    // The cursor moves only over what this answer carries.
    fit_answer(&mut items);
    let mut event = Value::Null;
    let mut cursor_seq = cursor;
    if let Some(last) = items.last() {
        let c = d
            .ledger
            .execute(Command::MailRead {
                group_id: gid.clone(),
                by,
                actor_id: actor.clone(),
                event_id: last.id.clone(),
            })
            .await?;
        event = c.primary().map(ev_value).unwrap_or(Value::Null);
        // A concurrent read may have moved the cursor past `last` before this commit: the
        // stored cursor never moves back, so the answer reports it, not `last`.
        let stored = d
            .ledger
            .readers()
            .mail_cursor(&gid, &actor)
            .map_err(CoreError::from)?;
        cursor_seq = last.seq.max(stored);
    }
    Ok(
        json!({"cursor": cursor_value(d, &gid, cursor_seq)?, "event": event, "messages": items.iter().map(|r| raw_value(&r.json)).collect::<Vec<_>>()}),
    )
}

pub(super) fn history(d: &Daemon, a: &Args) -> Result<Value, CoreError> {
    let gid = a.req("group_id")?;
    let actor = a.req("actor_id")?;
    let mode = a.opt_str("mode")?.unwrap_or_else(|| "all".into());
    if !matches!(mode.as_str(), "all" | "send" | "request_reply" | "mail") {
        return Err(
            CoreError::invalid("mode must be all, send, request_reply or mail")
                .with("field", "mode"),
        );
    }
    let query = a.str("query")?.to_lowercase();
    let limit = a.limit(50, 200)?;
    let group = d
        .ledger
        .engine()
        .group(&gid)
        .cloned()
        .ok_or_else(|| CoreError::no_group(&gid))?;
    let mut before = match a.opt_str("before_event_id")?.filter(|s| !s.is_empty()) {
        Some(id) => {
            d.ledger
                .readers()
                .event(&gid, &id)
                .map_err(CoreError::from)?
                .ok_or_else(|| CoreError::no_event(&id))?
                .seq
        }
        None => 0,
    };
    let kinds = vec!["chat.message".to_string()];
    let mut out = Vec::new();
    let mut has_more = false;
    let mut bytes = 0;
    'scan: loop {
        let page = d
            .ledger
            .readers()
            .events_before(&gid, before, 500, &kinds)
            .map_err(CoreError::from)?;
        if page.is_empty() {
            break;
        }
        before = page[0].seq;
        for r in page.iter().rev() {
            let v = raw_value(&r.json);
            let data = &v["data"];
            let to = convene_core::routing::recipients_of(data);
            let visible = r.by == actor
                || actor == "user" && to.iter().any(|t| t == "user")
                || convene_core::routing::addresses(&group, &to, &actor);
            let m = data["message_mode"].as_str().unwrap_or("send");
            let text_hit = query.is_empty()
                || data["text"]
                    .as_str()
                    .map(|t| t.to_lowercase().contains(&query))
                    .unwrap_or(false);
            if visible && (mode == "all" || mode == m) && text_hit {
                // The byte bound ends the page like the count does: the caller pages on
                // with `before_event_id` = the last message returned.
                bytes += r.json.len();
                if out.len() == limit || (!out.is_empty() && bytes > ANSWER_BYTES) {
                    has_more = true;
                    break 'scan;
                }
                out.push(v);
            }
        }
    }
    Ok(json!({"has_more": has_more, "messages": out}))
}

pub(super) async fn notify(d: &Daemon, a: &Args) -> Result<Value, CoreError> {
    let gid = a.req("group_id")?;
    let mut data = Map::new();
    for k in [
        "kind",
        "priority",
        "title",
        "message",
        "target_actor_id",
        "im_visibility",
        "context",
        "related_event_id",
    ] {
        if let Some(v) = a.0.get(k).filter(|v| !v.is_null()) {
            data.insert(k.to_string(), v.clone());
        }
    }
    let c = d
        .ledger
        .execute(Command::Notify {
            group_id: gid,
            by: a.by()?,
            data,
        })
        .await?;
    let e = c.primary().map(ev_value).unwrap_or(Value::Null);
    let im = convene_core::engine::im_eligible(&e["data"]);
    Ok(json!({"event": e, "im_eligible": im}))
}

pub(super) async fn cross_group(d: &Daemon, a: &Args) -> Result<Value, CoreError> {
    let src = a.req("group_id")?;
    let dst = a.req("dst_group_id")?;
    let mut send = send_args(d, a, dst.clone())?;
    send.src_group_id = None;
    send.src_event_id = None;
    let relay = RelayArgs {
        send,
        src_group_id: src.clone(),
        src_event_id: a.opt_str("src_event_id")?.filter(|s| !s.is_empty()),
        summarized: a.bool("summarized", false)?,
        record: a.bool("record", true)?,
    };
    let c = d.ledger.execute(Command::Relay(relay)).await?;
    if let Some(orig) = &c.existing {
        // A retried relay: the original destination message and the source its provenance
        // names (the local send record of a freshly authored relay), nothing new.
        let source = match (orig.data_str("src_group_id"), orig.data_str("src_event_id")) {
            (Some(sg), Some(se)) => d
                .ledger
                .readers()
                .event(sg, se)
                .map_err(CoreError::from)?
                .map(|r| raw_value(&r.json))
                .unwrap_or(Value::Null),
            _ => Value::Null,
        };
        let dst_ev = ev_value(orig);
        return Ok(
            json!({"dst_event": dst_ev, "event": dst_ev, "source_event": source,
            "src_event": source, "transport": "local", "duplicate": true}),
        );
    }
    let dst_ev = c
        .events
        .iter()
        .map(|(e, _)| e)
        .find(|e| e.group_id == dst)
        .map(ev_value)
        .unwrap_or(Value::Null);
    let src_ev = c
        .events
        .iter()
        .map(|(e, _)| e)
        .find(|e| e.group_id == src)
        .map(ev_value)
        .unwrap_or(Value::Null);
    Ok(
        json!({"dst_event": dst_ev, "event": dst_ev, "source_event": src_ev, "src_event": src_ev, "transport": "local"}),
    )
}

/// Resolves a relayed message's provenance: the source event, or a clear "source unavailable".
pub(super) fn source_of(d: &Daemon, a: &Args) -> Result<Value, CoreError> {
    let gid = a.req("group_id")?;
    let eid = a.req("event_id")?;
    let raw = d
        .ledger
        .readers()
        .event(&gid, &eid)
        .map_err(CoreError::from)?
        .ok_or_else(|| CoreError::no_event(&eid))?;
    let v = raw_value(&raw.json);
    let (Some(sg), Some(se)) = (
        v["data"]["src_group_id"].as_str(),
        v["data"]["src_event_id"].as_str(),
    ) else {
        return Err(
            CoreError::invalid("event has no cross-group provenance").with("field", "event_id")
        );
    };
    match d.ledger.readers().event(sg, se).map_err(CoreError::from)? {
        Some(src) => Ok(
            json!({"available": true, "src_group_id": sg, "src_event_id": se, "event": raw_value(&src.json)}),
        ),
        None => Ok(
            json!({"available": false, "src_group_id": sg, "src_event_id": se, "state": "source_unavailable",
            "message": "source unavailable: the source group or event no longer exists or is not visible"}),
        ),
    }
}

pub(super) async fn reaction(d: &Daemon, a: &Args) -> Result<Value, CoreError> {
    let c = d
        .ledger
        .execute(Command::Reaction {
            group_id: a.req("group_id")?,
            by: a.by()?,
            event_id: a.req("event_id")?,
            emoji: a.req("emoji")?,
        })
        .await?;
    Ok(json!({"event": c.primary().map(ev_value)}))
}

/// Extension namespaces that Convene's own faces write: the Cowchat face's votes, ballots,
/// elections, tasks and pulses (`x.cowchat.`), the tool gate's receipts (`x.convene.`), the
/// GroupX broker's turns and room records (`x.groupx.`, broker-authored like
/// `runtime.delivery`). The same kinds appended by an IPC client would read as records of
/// those faces.
const RESERVED_KIND_PREFIXES: &[&str] = &["x.cowchat.", "x.convene.", "x.groupx."];

pub(super) async fn append(d: &Daemon, a: &Args) -> Result<Value, CoreError> {
    let kind: String = a.req("kind")?;
    if let Some(p) = RESERVED_KIND_PREFIXES
        .iter()
        .find(|p| kind.starts_with(**p))
    {
        return Err(CoreError::denied(format!(
            "kinds under {p} are written by Convene's own faces, not through append_event"
        ))
        .with("kind", kind.as_str()));
    }
    let data = a.0.get("data").cloned().unwrap_or_else(|| json!({}));
    let c = d
        .ledger
        .execute(Command::AppendExtension {
            group_id: a.req("group_id")?,
            by: a.by()?,
            kind,
            data,
        })
        .await?;
    Ok(json!({"event": c.primary().map(ev_value)}))
}

pub(super) fn blob_put(d: &Daemon, a: &Args) -> Result<Value, CoreError> {
    let gid = a.req("group_id")?;
    if d.ledger.engine().group(&gid).is_none() {
        return Err(CoreError::no_group(&gid));
    }
    d.blobs.put_b64(
        &a.req("content_b64")?,
        &a.str("name")?,
        &a.str("mime_type")?,
    )
}

pub(super) fn blob_get(d: &Daemon, a: &Args) -> Result<Value, CoreError> {
    let gid = a.req("group_id")?;
    if d.ledger.engine().group(&gid).is_none() {
        return Err(CoreError::no_group(&gid));
    }
    let chunk = BLOB_CHUNK_BYTES as u64;
    // Without `offset` the blob comes whole or not at all (CCCC's shape); with it, in parts.
    let (offset, length) = match a.0.get("offset").filter(|v| !v.is_null()) {
        Some(_) => (
            Some(a.uint("offset", 0)?),
            a.uint("length", chunk)?.min(chunk),
        ),
        None => (None, chunk),
    };
    d.blobs.get_b64(&a.req("path")?, offset, length)
}

/// Gates an agent tool call: a signed CCS receipt, stored, then appended to the ledger.
pub(super) async fn tool_gate(d: &Daemon, a: &Args) -> Result<Value, CoreError> {
    let gid = a.req("group_id")?;
    if d.ledger.engine().group(&gid).is_none() {
        return Err(CoreError::no_group(&gid));
    }
    let intake =
        a.0.get("intake")
            .cloned()
            .ok_or_else(|| CoreError::invalid("intake is required").with("field", "intake"))?;
    let gate = d.gate.clone();
    let decision = tokio::task::spawn_blocking(move || crate::gate::decide(&gate, &intake))
        .await
        .map_err(|e| CoreError::new(convene_core::ErrorCode::Internal, e.to_string()))??;
    let c = d
        .ledger
        .execute(Command::AppendExtension {
            group_id: gid,
            by: "system".into(),
            kind: convene_evidence::EVENT_KIND.into(),
            data: decision.event_data.clone(),
        })
        .await?;
    Ok(json!({
        "permitted": decision.permitted,
        "verdict": decision.event_data["verdict"],
        "receipt": decision.event_data["receipt"],
        "event": c.primary().map(ev_value),
    }))
}
