//! Chat events (§6), system notifications (§7), attachments (§8) and relay (§9).

use serde_json::{json, Map, Value};
use unicode_normalization::UnicodeNormalization;

use super::{get_str, is_privileged, Ctx};
use crate::command::{RelayArgs, SendArgs};
use crate::error::{CoreError, ErrorCode};
use crate::event::{kinds, Event};
use crate::routing::{self, Audience};
use crate::view::{Change, Obligation, ObligationStatus};

/// Max normalized characters of `insight` (§6.1).
pub const MAX_INSIGHT_CHARS: usize = 1200;

const MODES: &[&str] = &["send", "request_reply", "mail"];

/// Normalized length of an insight: NFC, trimmed, whitespace runs collapsed, in characters.
pub fn insight_len(s: &str) -> usize {
    normalize_insight(s).chars().count()
}

fn normalize_insight(s: &str) -> String {
    let nfc: String = s.nfc().collect();
    nfc.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The runtime transport that drives an actor of this `runtime` automatically (`session`:
/// its attached connection; `command`: a spawned process), if any.
pub fn transport_for(runtime: &str) -> Option<&'static str> {
    match runtime {
        "session" | "" => Some("session"),
        "command" => Some("command"),
        _ => None,
    }
}

/// Whether `actor_id` gets automatic deliveries in `group`: the group is not stopped and the
/// actor is there, enabled, with a driven runtime.
pub fn drives(group: &crate::model::Group, actor_id: &str) -> bool {
    group.state != "stopped"
        && group
            .actor(actor_id)
            .is_some_and(|x| x.enabled && transport_for(&x.runtime).is_some())
}

/// The recipients an appended message is delivered to automatically: prompt-delivery
/// targets that [`drives`] holds for.
pub fn automatic_targets(group: &crate::model::Group, ev: &Event) -> Vec<String> {
    delivery_targets(group, ev)
        .into_iter()
        .filter(|a| drives(group, a))
        .collect()
}

/// Concrete actor recipients that get a runtime delivery for a `chat.message`:
/// `send` and `request_reply` to agents, excluding the sender; never `mail` (§6.4).
pub fn delivery_targets(group: &crate::model::Group, ev: &Event) -> Vec<String> {
    if ev.kind != kinds::CHAT_MESSAGE {
        return Vec::new();
    }
    match ev.data_str("message_mode") {
        Some("send") | Some("request_reply") => {}
        _ => return Vec::new(),
    }
    let to = routing::recipients_of(&ev.data);
    routing::expand(group, &to)
        .into_iter()
        .filter(|a| a != routing::USER && a != &ev.by)
        .filter(|a| group.actor(a).map(|x| x.enabled).unwrap_or(false))
        .collect()
}

fn check_objects(items: &[Value], field: &str, needs_path: bool) -> Result<(), CoreError> {
    for (i, it) in items.iter().enumerate() {
        let Some(o) = it.as_object() else {
            return Err(
                CoreError::invalid(format!("{field}[{i}] must be an object")).with("field", field),
            );
        };
        if needs_path && !o.get("path").map(Value::is_string).unwrap_or(false) {
            return Err(
                CoreError::invalid(format!("{field}[{i}].path must be a string"))
                    .with("field", field),
            );
        }
        if let Some(kind) = o.get("kind").and_then(Value::as_str) {
            let ok = match kind {
                "presentation_ref" => o.get("slot_id").map(Value::is_string).unwrap_or(false),
                "task_ref" => o.get("task_id").map(Value::is_string).unwrap_or(false),
                _ => true,
            };
            if !ok {
                return Err(CoreError::invalid(format!(
                    "{field}[{i}] of kind {kind} lacks its identifier"
                ))
                .with("field", field));
            }
        }
    }
    Ok(())
}

/// Validates a send and builds its `data` (with `to` materialized).
fn build_message(ctx: &Ctx<'_>, a: &SendArgs) -> Result<Map<String, Value>, CoreError> {
    let g = ctx.group(&a.group_id)?;
    ctx.check_principal(&a.group_id, &a.by)?;
    let mode = a.message_mode.clone().unwrap_or_else(|| "send".into());
    if !MODES.contains(&mode.as_str()) {
        return Err(
            CoreError::invalid("message_mode must be send, request_reply or mail")
                .with("field", "message_mode"),
        );
    }
    let text = match &a.text {
        Some(t) => t.clone(),
        None => return Err(CoreError::invalid("text is required").with("field", "text")),
    };
    if text.is_empty() && a.attachments.is_empty() {
        return Err(CoreError::invalid(
            "text may be empty only when attachments convey the message",
        )
        .with("field", "text"));
    }
    let lim = ctx.limits;
    if text.len() > lim.max_text_bytes {
        return Err(CoreError::new(
            ErrorCode::LimitExceeded,
            format!("text exceeds {} bytes", lim.max_text_bytes),
        )
        .with("field", "text")
        .with("limit", lim.max_text_bytes as u64));
    }
    if a.attachments.len() + a.refs.len() > lim.max_attachments {
        return Err(CoreError::new(
            ErrorCode::LimitExceeded,
            format!("at most {} attachments and refs", lim.max_attachments),
        ));
    }
    if a.to.len() > lim.max_recipients {
        return Err(CoreError::new(
            ErrorCode::LimitExceeded,
            format!("at most {} recipients", lim.max_recipients),
        ));
    }
    if let Some(f) = &a.format {
        if f != "plain" && f != "markdown" {
            return Err(
                CoreError::invalid("format must be plain or markdown").with("field", "format")
            );
        }
    }
    let insight = match &a.insight {
        Some(s) if !s.trim().is_empty() => {
            let n = normalize_insight(s);
            if n.chars().count() > MAX_INSIGHT_CHARS {
                return Err(CoreError::invalid(format!(
                    "insight exceeds {MAX_INSIGHT_CHARS} characters"
                ))
                .with("field", "insight")
                .with("limit", MAX_INSIGHT_CHARS as u64));
            }
            Some(n)
        }
        _ => None,
    };
    if a.src_group_id.is_some() != a.src_event_id.is_some() {
        return Err(
            CoreError::invalid("src_group_id and src_event_id must be given together")
                .with("field", "src_event_id"),
        );
    }
    if let Some(c) = &a.client_id {
        if c.is_empty() || c.len() > lim.max_client_id_bytes {
            return Err(CoreError::invalid(format!(
                "client_id must be 1-{} bytes",
                lim.max_client_id_bytes
            ))
            .with("field", "client_id"));
        }
    }
    check_objects(&a.attachments, "attachments", true)?;
    check_objects(&a.refs, "refs", false)?;

    let mut to_in = a.to.clone();
    if let Some(rt) = &a.reply_to {
        if mode == "request_reply" {
            return Err(
                CoreError::invalid("a reply may not use message_mode request_reply")
                    .with("field", "message_mode"),
            );
        }
        let target = ctx
            .view
            .event(&a.group_id, rt)?
            .ok_or_else(|| CoreError::no_event(rt))?;
        if target.kind != kinds::CHAT_MESSAGE {
            return Err(CoreError::invalid("reply_to must reference a chat.message")
                .with("field", "reply_to"));
        }
        // A reply with no recipients goes back to the original sender.
        if routing::normalize(&to_in).is_empty() {
            let back = if target.by == "system" || target.by.starts_with("svc:") {
                "user".to_string()
            } else {
                target.by.clone()
            };
            if back != a.by {
                to_in = vec![back];
            }
        }
    }
    if mode == "request_reply" {
        let n = routing::normalize(&to_in);
        if n.is_empty() || n.iter().any(|t| routing::is_broadcast_selector(t)) {
            return Err(CoreError::invalid("request_reply needs concrete recipients, not an empty list or @all/@peers/@foreman")
                .with("field", "to")
                .with("reason", "request_reply_needs_concrete_recipients"));
        }
    }
    let (to, aud) = routing::materialize(g, &to_in)?;
    // The concrete set must hold someone besides the sender, or no obligation opens (§6.1).
    if mode == "request_reply" && routing::expand(g, &to).iter().all(|r| r == &a.by) {
        return Err(
            CoreError::invalid("request_reply needs a recipient other than the sender")
                .with("field", "to")
                .with("reason", "request_reply_needs_concrete_recipients"),
        );
    }
    if mode == "mail" && aud == Audience::Human {
        return Err(
            CoreError::invalid("the user has no Mail inbox: use send or request_reply")
                .with("field", "message_mode")
                .with("reason", "mail_to_user"),
        );
    }
    let mut d = Map::new();
    d.insert("text".into(), Value::String(text));
    d.insert(
        "format".into(),
        Value::String(a.format.clone().unwrap_or_else(|| "plain".into())),
    );
    if let Some(i) = insight {
        d.insert("insight".into(), Value::String(i));
    }
    d.insert("message_mode".into(), Value::String(mode.clone()));
    d.insert("to".into(), json!(to));
    if let Some(v) = &a.reply_to {
        d.insert("reply_to".into(), Value::String(v.clone()));
    }
    if let Some(v) = &a.quote_text {
        d.insert("quote_text".into(), Value::String(v.clone()));
    }
    if let (Some(gid), Some(eid)) = (&a.src_group_id, &a.src_event_id) {
        d.insert("src_group_id".into(), Value::String(gid.clone()));
        d.insert("src_event_id".into(), Value::String(eid.clone()));
    }
    if !a.attachments.is_empty() {
        d.insert("attachments".into(), Value::Array(a.attachments.clone()));
    }
    if !a.refs.is_empty() {
        d.insert("refs".into(), Value::Array(a.refs.clone()));
    }
    if let Some(v) = &a.client_id {
        d.insert("client_id".into(), Value::String(v.clone()));
    }
    if let Some(v) = &a.client_ts {
        d.insert("client_ts".into(), Value::String(v.clone()));
    }
    for (k, v) in &a.extra {
        d.entry(k.clone()).or_insert_with(|| v.clone());
    }
    Ok(d)
}

/// Projections of one appended `chat.message`: obligations, Mail index, reply closing.
pub(super) fn project_message(ctx: &mut Ctx<'_>, ev: &Event) -> Result<(), CoreError> {
    let Some(g) = ctx.groups.get(&ev.group_id) else {
        return Ok(());
    };
    let to = routing::recipients_of(&ev.data);
    let recipients: Vec<String> = routing::expand(g, &to)
        .into_iter()
        .filter(|r| r != &ev.by)
        .collect();
    match ev.data_str("message_mode") {
        Some("request_reply") => {
            for r in &recipients {
                ctx.out.changes.push(Change::Obligation {
                    group_id: ev.group_id.clone(),
                    source_event_id: ev.id.clone(),
                    actor_id: r.clone(),
                    status: ObligationStatus::Requested,
                    closed_by: None,
                });
            }
        }
        Some("mail") => {
            for r in recipients.iter().filter(|r| r.as_str() != routing::USER) {
                ctx.out.changes.push(Change::MailIndex {
                    group_id: ev.group_id.clone(),
                    actor_id: r.clone(),
                    seq: ev.seq,
                    event_id: ev.id.clone(),
                });
            }
        }
        _ => {}
    }
    // Imported messages are history: delivered (or not) where they were sent.
    if !ctx.out.replayed {
        for actor_id in automatic_targets(g, ev) {
            ctx.out.changes.push(Change::DeliveryDue {
                group_id: ev.group_id.clone(),
                source_event_id: ev.id.clone(),
                actor_id,
                seq: ev.seq,
            });
        }
    }
    if let Some(rt) = ev.data_str("reply_to") {
        // Only an open obligation of this replier closes; cancelled stays cancelled (§6.3).
        let now = obligations_now(ctx, &ev.group_id, rt)?;
        if now
            .iter()
            .any(|o| o.actor_id == ev.by && o.status == ObligationStatus::Requested)
        {
            ctx.out.changes.push(Change::Obligation {
                group_id: ev.group_id.clone(),
                source_event_id: rt.to_string(),
                actor_id: ev.by.clone(),
                status: ObligationStatus::Replied,
                closed_by: Some(ev.id.clone()),
            });
        }
    }
    Ok(())
}

/// The message an idempotency key already produced in `group_id`, within the window.
fn duplicate_of(
    ctx: &Ctx<'_>,
    group_id: &str,
    idem_by: &str,
    client_id: Option<&str>,
) -> Result<Option<Event>, CoreError> {
    let Some(cid) = client_id else {
        return Ok(None);
    };
    let since = ctx.now.unix_timestamp() - ctx.limits.idempotency_window_s;
    match ctx.view.idempotent(group_id, idem_by, cid, since)? {
        Some(orig) => ctx.view.event(group_id, &orig),
        None => Ok(None),
    }
}

/// A request's obligations as they stand, counting this command's changes not yet written:
/// an import projects a request, its replies and its cancellation in one command.
fn obligations_now(
    ctx: &Ctx<'_>,
    group_id: &str,
    source: &str,
) -> Result<Vec<Obligation>, CoreError> {
    let mut list = ctx.view.obligations(group_id, source)?;
    for c in &ctx.out.changes {
        if let Change::ActorRetire {
            group_id: g,
            actor_id,
            closed_by,
        } = c
        {
            if g == group_id {
                for o in list
                    .iter_mut()
                    .filter(|o| &o.actor_id == actor_id && o.status == ObligationStatus::Requested)
                {
                    o.status = ObligationStatus::Cancelled;
                    o.closed_by = Some(closed_by.clone());
                }
            }
            continue;
        }
        let Change::Obligation {
            group_id: g,
            source_event_id,
            actor_id,
            status,
            closed_by,
        } = c
        else {
            continue;
        };
        if g != group_id || source_event_id != source {
            continue;
        }
        match list.iter_mut().find(|o| &o.actor_id == actor_id) {
            Some(o) => {
                o.status = *status;
                o.closed_by = closed_by.clone();
            }
            None => list.push(Obligation {
                actor_id: actor_id.clone(),
                status: *status,
                closed_by: closed_by.clone(),
            }),
        }
    }
    Ok(list)
}

/// Closes every still-open obligation of `source` by the cancellation `cancel_id` (§6.3).
pub(super) fn close_open_obligations(
    ctx: &mut Ctx<'_>,
    group_id: &str,
    source: &str,
    cancel_id: &str,
) -> Result<(), CoreError> {
    for o in obligations_now(ctx, group_id, source)? {
        if o.status == ObligationStatus::Requested {
            ctx.out.changes.push(Change::Obligation {
                group_id: group_id.to_string(),
                source_event_id: source.to_string(),
                actor_id: o.actor_id,
                status: ObligationStatus::Cancelled,
                closed_by: Some(cancel_id.to_string()),
            });
        }
    }
    Ok(())
}

/// The `seq` of Mail `event_id` addressed to `actor_id`, counting this command's changes.
pub(super) fn mail_seq_now(
    ctx: &Ctx<'_>,
    group_id: &str,
    actor_id: &str,
    event_id: &str,
) -> Result<Option<u64>, CoreError> {
    // Only what this command indexed after retiring the actor's generation counts.
    let changes = since_retire(ctx, group_id, actor_id);
    if changes.len() == ctx.out.changes.len() {
        if let Some(seq) = ctx.view.mail_addressed(group_id, actor_id, event_id)? {
            return Ok(Some(seq));
        }
    }
    Ok(changes.iter().find_map(|c| match c {
        Change::MailIndex {
            group_id: g,
            actor_id: a,
            seq,
            event_id: e,
        } if g == group_id && a == actor_id && e == event_id => Some(*seq),
        _ => None,
    }))
}

/// This command's changes after its last `ActorRetire` of `actor_id` (all of them if none):
/// the stored Mail state from before such a retire no longer applies either.
fn since_retire<'c>(ctx: &'c Ctx<'_>, group_id: &str, actor_id: &str) -> &'c [Change] {
    let all = &ctx.out.changes;
    let last = all.iter().rposition(|c| {
        matches!(c, Change::ActorRetire { group_id: g, actor_id: a, .. } if g == group_id && a == actor_id)
    });
    match last {
        Some(i) => &all[i + 1..],
        None => all,
    }
}

/// Moves `actor_id`'s Mail cursor to `seq`, never backwards (counting this command's changes).
pub(super) fn advance_mail_cursor(
    ctx: &mut Ctx<'_>,
    group_id: &str,
    actor_id: &str,
    event_id: &str,
    seq: u64,
) -> Result<(), CoreError> {
    let changes = since_retire(ctx, group_id, actor_id);
    let mut cur = if changes.len() == ctx.out.changes.len() {
        ctx.view.mail_cursor(group_id, actor_id)?
    } else {
        0
    };
    for c in changes {
        if let Change::MailCursor {
            group_id: g,
            actor_id: a,
            seq: s,
            ..
        } = c
        {
            if g == group_id && a == actor_id {
                cur = cur.max(*s);
            }
        }
    }
    if seq > cur {
        ctx.out.changes.push(Change::MailCursor {
            group_id: group_id.to_string(),
            actor_id: actor_id.to_string(),
            seq,
            event_id: event_id.to_string(),
        });
    }
    Ok(())
}

/// Appends a validated message; returns the event, or `None` for a `client_id` already
/// used by `idem_by` (the principal the key belongs to) in the window.
fn append_message(
    ctx: &mut Ctx<'_>,
    a: &SendArgs,
    idem_by: &str,
) -> Result<Option<Event>, CoreError> {
    if let Some(ev) = duplicate_of(ctx, &a.group_id, idem_by, a.client_id.as_deref())? {
        ctx.out.existing = Some(ev);
        return Ok(None);
    }
    let data = build_message(ctx, a)?;
    let scope = ctx.scope_for(&a.group_id, &a.by);
    if let Some(id) = &a.event_id {
        if id.is_empty() || id.len() > 64 {
            return Err(CoreError::invalid("event_id must be 1-64 bytes").with("field", "event_id"));
        }
    }
    let ev = ctx.append_with_id(
        &a.group_id,
        kinds::CHAT_MESSAGE,
        &a.by,
        scope,
        Value::Object(data),
        a.event_id.clone(),
    )?;
    project_message(ctx, &ev)?;
    if let Some(cid) = &a.client_id {
        ctx.out.changes.push(Change::Idempotency {
            group_id: a.group_id.clone(),
            by: idem_by.to_string(),
            client_id: cid.clone(),
            event_id: ev.id.clone(),
            at_unix: ctx.now.unix_timestamp(),
        });
    }
    Ok(Some(ev))
}

pub(super) fn send(ctx: &mut Ctx<'_>, a: SendArgs) -> Result<(), CoreError> {
    let by = a.by.clone();
    append_message(ctx, &a, &by).map(|_| ())
}

/// Relay (§9): a message in the destination with provenance, and the optional send record.
pub(super) fn relay(ctx: &mut Ctx<'_>, r: RelayArgs) -> Result<(), CoreError> {
    let src = ctx.group(&r.src_group_id)?.group_id.clone();
    ctx.check_principal(&src, &r.send.by)?;
    let dst = r.send.group_id.clone();
    ctx.group(&dst)?;
    if dst == src {
        return Err(CoreError::invalid("destination group equals source group")
            .with("field", "dst_group_id"));
    }
    // A relay's key belongs to its sender in the source group: in the destination every
    // non-member sender is `svc:relay`, and their keys must not answer for each other.
    let idem_by = format!("relay:{src}:{}", r.send.by);
    // A retried relay appends nothing, not even the local send record (§9.2).
    if let Some(ev) = duplicate_of(ctx, &dst, &idem_by, r.send.client_id.as_deref())? {
        ctx.out.existing = Some(ev);
        return Ok(());
    }
    let mut send = r.send.clone();
    // Actors belong to their group: the destination's actor of the same id is someone else
    // (its obligations must not close), so every actor sender appears as the relay service.
    if !super::is_privileged(&send.by) && !send.by.starts_with("svc:") {
        send.extra
            .insert("relay_by".into(), Value::String(send.by.clone()));
        send.by = "svc:relay".into();
    }
    if let Some(eid) = &r.src_event_id {
        let orig = ctx
            .view
            .event(&src, eid)?
            .ok_or_else(|| CoreError::no_event(eid))?;
        let text = orig.data_str("text").unwrap_or_default().to_string();
        send.text = Some(if r.summarized {
            format!(
                "[Summarized] {}",
                send.text
                    .clone()
                    .filter(|t| !t.is_empty())
                    .unwrap_or_else(|| summarize(&text))
            )
        } else {
            text
        });
        send.src_group_id = Some(src.clone());
        send.src_event_id = Some(eid.clone());
    } else {
        // A new message authored here: its source record is the local send record below.
        send.src_group_id = None;
        send.src_event_id = None;
    }
    // Validate the destination message fully before appending anything.
    build_message(ctx, &send)?;
    let mut record_data = None;
    if r.record || r.src_event_id.is_none() {
        let mut rec = Map::new();
        rec.insert(
            "text".into(),
            Value::String(send.text.clone().unwrap_or_default()),
        );
        rec.insert("format".into(), Value::String("plain".into()));
        rec.insert("message_mode".into(), Value::String("send".into()));
        rec.insert("to".into(), json!(["user"]));
        rec.insert("dst_group_id".into(), Value::String(dst.clone()));
        rec.insert("dst_to".into(), json!(send.to));
        rec.insert(
            "dst_message_mode".into(),
            Value::String(send.message_mode.clone().unwrap_or_else(|| "send".into())),
        );
        record_data = Some(rec);
    }
    let mut rec_ev = None;
    if let Some(mut rec) = record_data.clone() {
        if r.src_event_id.is_none() {
            // The local record is the source of a freshly authored relay (§9.1 provenance).
            let scope = ctx.scope_for(&src, &r.send.by);
            let ev = ctx.append(
                &src,
                kinds::CHAT_MESSAGE,
                &r.send.by,
                scope,
                Value::Object(std::mem::take(&mut rec)),
            )?;
            send.src_group_id = Some(src.clone());
            send.src_event_id = Some(ev.id.clone());
            rec_ev = Some(ev);
        }
    }
    let Some(dst_ev) = append_message(ctx, &send, &idem_by)? else {
        return Ok(());
    };
    if let Some(rec) = record_data {
        if rec_ev.is_none() {
            let mut rec = rec;
            rec.insert("dst_event_id".into(), Value::String(dst_ev.id.clone()));
            let scope = ctx.scope_for(&src, &r.send.by);
            ctx.append(
                &src,
                kinds::CHAT_MESSAGE,
                &r.send.by,
                scope,
                Value::Object(rec),
            )?;
        }
    }
    Ok(())
}

/// A short summary: the first 280 characters.
fn summarize(text: &str) -> String {
    let s: String = text.chars().take(280).collect();
    if s.len() < text.len() {
        format!("{s}…")
    } else {
        s
    }
}

pub(super) fn mail_read(
    ctx: &mut Ctx<'_>,
    group_id: &str,
    by: &str,
    actor_id: &str,
    event_id: &str,
) -> Result<(), CoreError> {
    ctx.group(group_id)?;
    if actor_id == routing::USER {
        return Err(CoreError::invalid("the user has no Mail inbox").with("field", "actor_id"));
    }
    if ctx.group(group_id)?.actor(actor_id).is_none() {
        return Err(CoreError::no_actor(actor_id));
    }
    if by != actor_id && !is_privileged(by) {
        return Err(CoreError::denied(format!(
            "only {actor_id} or the user may move {actor_id}'s Mail cursor"
        ))
        .with("by", by));
    }
    let seq = mail_seq_now(ctx, group_id, actor_id, event_id)?.ok_or_else(|| {
        CoreError::invalid(format!(
            "{event_id} is not a Mail message addressed to {actor_id}"
        ))
        .with("field", "event_id")
    })?;
    let scope = ctx.scope_for(group_id, by);
    ctx.append(
        group_id,
        kinds::MAIL_READ,
        by,
        scope,
        json!({"actor_id": actor_id, "event_id": event_id}),
    )?;
    advance_mail_cursor(ctx, group_id, actor_id, event_id, seq)
}

pub(super) fn cancel(
    ctx: &mut Ctx<'_>,
    group_id: &str,
    by: &str,
    source_event_id: &str,
) -> Result<(), CoreError> {
    ctx.group(group_id)?;
    ctx.check_principal(group_id, by)?;
    let src = ctx
        .view
        .event(group_id, source_event_id)?
        .ok_or_else(|| CoreError::no_event(source_event_id))?;
    if src.kind != kinds::CHAT_MESSAGE || src.data_str("message_mode") != Some("request_reply") {
        return Err(
            CoreError::invalid("target must be a request_reply chat.message")
                .with("field", "source_event_id"),
        );
    }
    if by != src.by && by != routing::USER {
        return Err(
            CoreError::denied("only the original sender or the user may cancel").with("by", by),
        );
    }
    let scope = ctx.scope_for(group_id, by);
    let ev = ctx.append(
        group_id,
        kinds::REPLY_CANCELLED,
        by,
        scope,
        json!({"source_event_id": source_event_id}),
    )?;
    close_open_obligations(ctx, group_id, source_event_id, &ev.id)
}

/// Whether a `system.notify` may leave for an external IM bridge (§7.1, fail-closed).
pub fn im_eligible(data: &Value) -> bool {
    let public = data.get("im_visibility").and_then(Value::as_str) == Some("public");
    // Fail closed on imported events too: any target that is not empty counts as one.
    let targeted = match data.get("target_actor_id") {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) => !s.is_empty(),
        Some(_) => true,
    };
    public && !targeted
}

pub(super) fn notify(
    ctx: &mut Ctx<'_>,
    group_id: &str,
    by: &str,
    mut data: Map<String, Value>,
) -> Result<(), CoreError> {
    ctx.group(group_id)?;
    ctx.check_principal(group_id, by)?;
    match data.get("kind") {
        None => {
            data.insert("kind".into(), Value::String("info".into()));
        }
        Some(Value::String(k)) if !k.is_empty() => {}
        _ => {
            return Err(CoreError::invalid("kind must be a non-empty string").with("field", "kind"))
        }
    }
    match get_str(&data, "priority") {
        None => {
            data.insert("priority".into(), Value::String("normal".into()));
        }
        Some("low" | "normal" | "high" | "urgent") => {}
        Some(_) => {
            return Err(
                CoreError::invalid("priority must be low, normal, high or urgent")
                    .with("field", "priority"),
            )
        }
    }
    // A non-string target would read as "no target" and let a public notice out (§7.1).
    for f in ["title", "message", "target_actor_id", "related_event_id"] {
        if data.get(f).is_some_and(|v| !v.is_string()) {
            return Err(CoreError::invalid(format!("{f} must be a string")).with("field", f));
        }
    }
    if let Some(t) = get_str(&data, "target_actor_id") {
        if !t.is_empty() && ctx.group(group_id)?.actor(t).is_none() {
            return Err(CoreError::no_actor(t));
        }
    }
    let scope = ctx.scope_for(group_id, by);
    ctx.append(
        group_id,
        kinds::SYSTEM_NOTIFY,
        by,
        scope,
        Value::Object(data),
    )?;
    Ok(())
}

pub(super) fn reaction(
    ctx: &mut Ctx<'_>,
    group_id: &str,
    by: &str,
    event_id: &str,
    emoji: &str,
) -> Result<(), CoreError> {
    ctx.group(group_id)?;
    ctx.check_principal(group_id, by)?;
    if emoji.is_empty() || emoji.chars().count() > 16 {
        return Err(CoreError::invalid("emoji must be 1-16 characters").with("field", "emoji"));
    }
    ctx.view
        .event(group_id, event_id)?
        .ok_or_else(|| CoreError::no_event(event_id))?;
    let scope = ctx.scope_for(group_id, by);
    ctx.append(
        group_id,
        kinds::CHAT_REACTION,
        by,
        scope,
        json!({"event_id": event_id, "actor_id": by, "emoji": emoji}),
    )?;
    Ok(())
}

pub(super) fn extension(
    ctx: &mut Ctx<'_>,
    group_id: &str,
    by: &str,
    kind: &str,
    data: Value,
) -> Result<(), CoreError> {
    ctx.group(group_id)?;
    ctx.check_principal(group_id, by)?;
    if kind == kinds::RUNTIME_DELIVERY {
        return Err(
            CoreError::denied("runtime.delivery is daemon-authored only").with("kind", kind),
        );
    }
    if !(kind.starts_with("x.") || kind.starts_with("vendor.")) || kind.len() > 128 {
        return Err(
            CoreError::invalid("extension kinds must start with x. or vendor.").with("kind", kind),
        );
    }
    if !data.is_object() {
        return Err(CoreError::invalid("data must be an object").with("field", "data"));
    }
    let scope = ctx.scope_for(group_id, by);
    ctx.append(group_id, kind, by, scope, data)?;
    Ok(())
}
