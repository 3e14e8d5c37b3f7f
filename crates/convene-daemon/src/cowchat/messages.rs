//! Messages: `send_message` → `Command::Send`; `get_history` / `room_tip` from the store's
//! read side; and the one conversion from a stored `chat.message` to a Cowchat message.
//!
//! Mapping: `content` = `data.text`; `reply_to` = the engine's `data.reply_to` (message ids
//! are event ids); `mentions` and `metadata` live under `data.cowchat`. `seq` is the event's
//! per-group ledger `seq`: it never regresses, but it has gaps (membership and other
//! events share the sequence). Mail (`message_mode: mail`) is private and never shown.

use convene_core::{event::kinds, Command, Event, SendArgs};
use convene_cowchat::{parse, ErrorCode, GetHistory, RoomRef, SendMessage, WireError};
use convene_store::{RawEvent, Readers, Since};
use serde_json::{json, Map, Value};
use std::sync::Arc;

use super::conn::Session;
use super::{rooms, wire, DATA_KEY};

/// The Cowchat message of a stored event, if it is a visible `chat.message`.
pub(super) fn message_payload(e: &Event) -> Option<Value> {
    if e.kind != kinds::CHAT_MESSAGE || e.data_str("message_mode") == Some("mail") {
        return None;
    }
    let cc = e.data.get(DATA_KEY);
    Some(json!({
        "room_id": e.group_id,
        "message_id": e.id,
        "seq": e.seq,
        "sender": e.by,
        "content": e.data_str("text").unwrap_or_default(),
        "reply_to": e.data.get("reply_to").cloned().unwrap_or(Value::Null),
        "mentions": cc.and_then(|c| c.get("mentions")).cloned().unwrap_or_else(|| json!([])),
        "metadata": cc.and_then(|c| c.get("metadata")).cloned().unwrap_or_else(|| json!({})),
        "timestamp": e.ts,
    }))
}

fn raw_message(r: &RawEvent) -> Option<Value> {
    serde_json::from_str::<Event>(&r.json)
        .ok()
        .and_then(|e| message_payload(&e))
}

/// Builds the engine command for a `send_message` frame (checks membership of mentions).
pub(super) fn send_command(s: &Session, payload: Map<String, Value>) -> Result<Command, WireError> {
    let m: SendMessage = parse(payload)?;
    m.validate()?;
    let me = s.agent.as_ref().map(|a| a.id.clone()).unwrap_or_default();
    let mentions = m.mentions.unwrap_or_default();
    {
        let eng = s.face.d.ledger.engine();
        let g = rooms::room(&eng, &m.room_id)?;
        if g.actor(&me).is_none() {
            return Err(WireError::new(
                ErrorCode::NotMember,
                format!("{me} is not a member of {}", m.room_id),
            ));
        }
        if let Some(x) = mentions.iter().find(|x| g.actor(x).is_none()) {
            return Err(WireError::new(
                ErrorCode::NotMember,
                format!("mention {x} is not a member of {}", m.room_id),
            ));
        }
    }
    let mut extra = Map::new();
    let mut cc = Map::new();
    if !mentions.is_empty() {
        cc.insert("mentions".into(), json!(mentions));
    }
    if let Some(md) = m.metadata {
        cc.insert("metadata".into(), Value::Object(md));
    }
    if !cc.is_empty() {
        extra.insert(DATA_KEY.into(), Value::Object(cc));
    }
    Ok(Command::Send(SendArgs {
        group_id: m.room_id,
        by: me,
        text: Some(m.content),
        message_mode: Some("send".into()),
        to: vec!["@all".into()],
        reply_to: m.reply_to.filter(|r| !r.is_empty()),
        extra,
        ..SendArgs::default()
    }))
}

/// The `message_sent` payload of a committed send.
pub(super) fn sent_payload(c: crate::ledger::Committed) -> Result<Value, WireError> {
    let e = c
        .primary()
        .ok_or_else(|| WireError::new(ErrorCode::Internal, "send appended nothing"))?;
    Ok(json!({"room_id": e.group_id, "message_id": e.id, "seq": e.seq, "timestamp": e.ts}))
}

fn msg_kinds() -> Vec<String> {
    vec![kinds::CHAT_MESSAGE.to_string()]
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, convene_store::StoreError> + Send + 'static,
) -> Result<T, WireError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| WireError::new(ErrorCode::Internal, e.to_string()))?
        .map_err(|e| wire(e.into()))
}

/// `get_history`: without a lower bound, the newest `limit` messages (before `before`);
/// with `since_seq` or `since`, the oldest `limit` messages after it. Always oldest first.
pub(super) async fn get_history(
    s: &Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let h: GetHistory = parse(payload)?;
    let me = s.agent.as_ref().map(|a| a.id.clone()).unwrap_or_default();
    {
        let eng = s.face.d.ledger.engine();
        let g = rooms::room(&eng, &h.room_id)?;
        if g.actor(&me).is_none() {
            return Err(WireError::new(
                ErrorCode::NotMember,
                format!("join {} to read its history", h.room_id),
            ));
        }
    }
    let limit = h
        .limit
        .map(|l| l as usize)
        .unwrap_or(convene_cowchat::DEFAULT_HISTORY_LIMIT)
        .clamp(1, convene_cowchat::MAX_HISTORY_LIMIT);
    let readers: Arc<Readers> = s.face.d.ledger.readers().clone();
    let gid = h.room_id.clone();
    let before = match &h.before {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => Some(
            n.as_u64()
                .ok_or_else(|| WireError::payload("before must be a seq or a message id"))?,
        ),
        Some(Value::String(id)) => {
            let (r, g, id2) = (readers.clone(), gid.clone(), id.clone());
            let ev = blocking(move || r.event(&g, &id2)).await?;
            Some(ev.map(|e| e.seq).ok_or_else(|| {
                WireError::new(
                    ErrorCode::MessageNotFound,
                    format!("no message {id} in this room"),
                )
            })?)
        }
        Some(_) => return Err(WireError::payload("before must be a seq or a message id")),
    };
    let after = match (h.since_seq, &h.since) {
        (Some(n), _) => Some(n),
        (None, Some(ts)) => {
            let t = convene_core::event::parse_ts(ts)
                .ok_or_else(|| WireError::payload("since must be an RFC 3339 time"))?;
            // Messages at or after `since`: resolve to the last seq strictly before it.
            let t = convene_core::event::format_ts(t - time::Duration::microseconds(1));
            let (r, g) = (readers.clone(), gid.clone());
            Some(
                blocking(move || r.resolve(&g, &Since::Ts(t)))
                    .await?
                    .unwrap_or(0),
            )
        }
        (None, None) => None,
    };
    let rows = blocking(move || match after {
        Some(a) => readers.events_after(&gid, a, limit, &msg_kinds()),
        None => readers.events_before(&gid, before.unwrap_or(0), limit, &msg_kinds()),
    })
    .await?;
    let full = rows.len() == limit;
    let messages: Vec<Value> = rows
        .iter()
        .filter(|r| before.map(|b| r.seq < b).unwrap_or(true))
        .filter_map(raw_message)
        .collect();
    Ok(json!({"room_id": h.room_id, "messages": messages, "has_more": full}))
}

/// `room_tip`: the newest visible message's `seq` (0 when none) and the ledger head.
pub(super) async fn room_tip(s: &Session, payload: Map<String, Value>) -> Result<Value, WireError> {
    let r: RoomRef = parse(payload)?;
    let gid = {
        let eng = s.face.d.ledger.engine();
        rooms::resolve(&eng, &r)?.group_id.clone()
    };
    let readers = s.face.d.ledger.readers().clone();
    let g = gid.clone();
    let (tip, head) = blocking(move || {
        let mut before = 0;
        // Walk back past Mail (private) until a visible message or the start.
        loop {
            let page = readers.events_before(&g, before, 64, &msg_kinds())?;
            if let Some(m) = page.iter().rev().find_map(|r| raw_message(r).map(|_| r)) {
                return Ok((
                    Some((m.seq, m.id.clone(), m.ts.clone())),
                    readers.head_seq(&g)?,
                ));
            }
            match page.first() {
                Some(f) if page.len() == 64 => before = f.seq,
                _ => return Ok((None, readers.head_seq(&g)?)),
            }
        }
    })
    .await?;
    Ok(match tip {
        Some((seq, id, ts)) => {
            json!({"room_id": gid, "seq": seq, "message_id": id, "timestamp": ts, "head_seq": head})
        }
        None => {
            json!({"room_id": gid, "seq": 0, "message_id": null, "timestamp": null, "head_seq": head})
        }
    })
}
