//! One delivery task per active subscription: follows the room's ledger feed from the
//! subscription's cursor, filters, and POSTs each matching message in order, retrying the
//! head of the queue until it succeeds or the retries run out.
//!
//! At-least-once: the cursor is persisted only after a delivery succeeded, so a crash
//! between the POST and the cursor write repeats that one delivery (same `webhook-id`).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tokio::task::JoinHandle;

use super::http;
use super::ssrf::{self, Target};
use super::store::{Status, Sub};
use super::{HookError, Hooks};
use crate::cowchat::messages;

/// Events read per page while catching up.
const PAGE: usize = 500;
/// Retry delays in units of `Options::retry_unit` (seconds by default): +1, +4, +16, +64,
/// +256. The attempt after the last retry that fails marks the subscription failed.
pub(super) const RETRIES: [u64; 5] = [1, 4, 16, 64, 256];
/// Pause before a task that hit a store error starts over from the persisted state.
const RESTART_PAUSE: Duration = Duration::from_secs(5);
/// How often an idle task checks that its room still exists (other holders of the room's
/// feed can keep its wake-up channel open after the room is destroyed).
const ROOM_CHECK: Duration = Duration::from_secs(5);

/// Starts the delivery task of `sub`.
pub(super) fn spawn(h: Arc<Hooks>, sub: Sub) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut sub = sub;
        loop {
            match run(&h, &mut sub).await {
                Ok(()) => return,
                Err(HookError::Config(e)) => {
                    tracing::error!(subscription = %sub.id, error = %e, "webhook subscription unusable");
                    return;
                }
                Err(e) => {
                    tracing::warn!(subscription = %sub.id, error = %e, "webhook delivery task restarting");
                    tokio::time::sleep(RESTART_PAUSE).await;
                    let id = sub.id.clone();
                    match h.db(move |st| st.get(&id)).await {
                        Ok(Some(s)) if s.status == Status::Active => sub = s,
                        Ok(_) => return, // deleted or failed meanwhile
                        Err(_) => {}
                    }
                }
            }
        }
    })
}

/// The message's sender as (agent id, agent name).
fn sender(m: &Value) -> (Option<&str>, Option<&str>) {
    (
        m.get("agent_id").and_then(Value::as_str),
        m.get("agent_name").and_then(Value::as_str),
    )
}

fn is_thinking(m: &Value) -> bool {
    m.pointer("/metadata/type").and_then(Value::as_str) == Some("thinking")
}

/// Filters compose with AND across fields and OR within a list.
pub(super) fn matches(sub: &Sub, m: &Value) -> bool {
    if sub.exclude_thinking && is_thinking(m) {
        return false;
    }
    if let Some(kinds) = &sub.kinds {
        let kind = m.pointer("/metadata/kind").and_then(Value::as_str);
        if !kind.is_some_and(|k| kinds.iter().any(|x| x == k)) {
            return false;
        }
    }
    let (id, name) = sender(m);
    let from = |list: &Vec<String>| {
        list.iter()
            .any(|x| Some(x.as_str()) == id || Some(x.as_str()) == name)
    };
    if sub.only_from.as_ref().is_some_and(|l| !from(l)) {
        return false;
    }
    if sub.not_from.as_ref().is_some_and(from) {
        return false;
    }
    true
}

/// The Cowchat Message of a stored `chat.message` or thinking pulse (not Mail). A pulse
/// always carries `metadata.type = "thinking"`, which `exclude_thinking` matches.
fn message_of(json: &str) -> Option<Value> {
    let s = messages::Stored::parse(json).filter(|s| s.is_message())?;
    let mut m = s.message_value();
    if s.is_thinking() && !is_thinking(&m) {
        if let Some(o) = m.as_object_mut() {
            let md = o.entry("metadata").or_insert_with(|| json!({}));
            if let Some(md) = md.as_object_mut() {
                md.insert("type".into(), json!("thinking"));
            }
        }
    }
    Some(m)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

async fn run(h: &Arc<Hooks>, sub: &mut Sub) -> Result<(), HookError> {
    // Both were validated at creation; an error here means the row was edited by hand.
    let key = http::secret_key(&sub.secret).map_err(|e| HookError::Config(e.into()))?;
    let target = ssrf::parse_url(&sub.url).map_err(|e| HookError::Config(e.to_string()))?;
    let gid = sub.room_id.clone();
    if h.d.ledger.engine().group(&gid).is_none() {
        return room_gone(h, sub).await;
    }
    let ledger = &h.d.ledger;
    let hub = ledger.hub();
    let gone = || h.d.ledger.engine().group(&gid).is_none();
    // Only the receiver is kept between pages: holding the feed would keep its channel
    // open after the room is destroyed.
    let mut head_rx = hub.feed(&gid, sub.cursor).subscribe();
    // `cursor`: last event handled; `persisted`: last cursor written to the store.
    let mut cursor = sub.cursor;
    let mut persisted = cursor;
    loop {
        let feed = match hub.get(&gid) {
            Some(f) => f,
            None if gone() => return room_gone(h, sub).await,
            None => {
                let f = hub.feed(&gid, cursor);
                head_rx = f.subscribe();
                f
            }
        };
        let page = ledger.page_after(&feed, &gid, cursor, PAGE).await?;
        drop(feed);
        if page.is_empty() {
            tokio::select! {
                r = head_rx.changed() => {
                    if r.is_err() {
                        if gone() {
                            return room_gone(h, sub).await;
                        }
                        // The feed was replaced while the room lives on: follow the new one.
                        head_rx = hub.feed(&gid, cursor).subscribe();
                    }
                }
                _ = tokio::time::sleep(ROOM_CHECK) => {
                    if gone() {
                        return room_gone(h, sub).await;
                    }
                }
            }
            continue;
        }
        for fe in page {
            if let Some(m) = message_of(&fe.json).filter(|m| matches(sub, m)) {
                // Persist the filtered-out stretch first, so a stored retry state always
                // belongs to the first event after the stored cursor.
                if cursor != persisted {
                    let (id, g, c) = (sub.id.clone(), sub.generation, cursor);
                    h.db(move |st| st.advance(&id, g, c)).await?;
                }
                if !deliver(h, sub, &target, &key, fe.seq, &m).await? {
                    return Ok(()); // failed: stop until enable_subscription
                }
                persisted = fe.seq;
            }
            cursor = fe.seq;
        }
        if cursor != persisted {
            let (id, g, c) = (sub.id.clone(), sub.generation, cursor);
            h.db(move |st| st.advance(&id, g, c)).await?;
            persisted = cursor;
        }
        sub.cursor = cursor;
    }
}

/// The room was destroyed (room ids are never reused): the subscription goes with it.
async fn room_gone(h: &Arc<Hooks>, sub: &Sub) -> Result<(), HookError> {
    tracing::info!(subscription = %sub.id, room = %sub.room_id, "room destroyed: webhook subscription removed");
    let (who, id) = (sub.principal.clone(), sub.id.clone());
    h.db(move |st| st.delete(&who, &id)).await?;
    Ok(())
}

/// Delivers one message, retrying on the schedule. Ok(false) when the retries ran out and
/// the subscription is now failed.
async fn deliver(
    h: &Arc<Hooks>,
    sub: &mut Sub,
    target: &Target,
    key: &[u8],
    seq: u64,
    msg: &Value,
) -> Result<bool, HookError> {
    let message_id = msg.get("message_id").and_then(Value::as_str).unwrap_or("");
    // Same id on every attempt (and after a restart), so receivers can de-duplicate.
    let wid = format!("{}_{}", sub.id, message_id);
    let body = serde_json::to_vec(&json!({
        "type": "cowchat.message.created",
        "subscription_id": sub.id,
        "room_id": sub.room_id,
        "message": msg,
    }))?;
    let mut failures = 0u32;
    // Resuming a retry that was pending when the daemon stopped: keep its count and due time.
    if sub.retry_seq == Some(seq) && sub.failures > 0 {
        failures = sub.failures;
        if let Some(at) = sub.retry_at_ms {
            let wait = at.saturating_sub(now_ms()).max(0) as u64;
            tokio::time::sleep(Duration::from_millis(wait)).await;
        }
    }
    loop {
        let ts = now_ms() / 1000;
        let sig = http::sign(key, &wid, ts, &body);
        let ts_s = ts.to_string();
        let headers = [
            ("Content-Type", "application/json"),
            ("webhook-id", wid.as_str()),
            ("webhook-timestamp", ts_s.as_str()),
            ("webhook-signature", sig.as_str()),
        ];
        // Slots for this attempt only (the name check and the POST): never held across
        // the store writes or a retry's wait, so a failing target ties up no slot between
        // attempts. The host's slot first: waiting for a busy host holds no global slot.
        // The semaphores are never closed.
        let host = h.host_slots(target);
        let host_slot = host
            .acquire()
            .await
            .map_err(|e| HookError::Join(e.to_string()))?;
        let slot = h
            .slots
            .acquire()
            .await
            .map_err(|e| HookError::Join(e.to_string()))?;
        let res = match ssrf::resolve(target, h.opts.allow_local).await {
            Ok(addr) => http::post(target, addr, &h.tls, &headers, &body, h.opts.timeout)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        drop(slot);
        drop(host_slot);
        match res {
            Ok(_) => {
                let (id, g, c) = (sub.id.clone(), sub.generation, seq);
                h.db(move |st| st.advance(&id, g, c)).await?;
                sub.cursor = seq;
                sub.failures = 0;
                sub.retry_seq = None;
                sub.retry_at_ms = None;
                return Ok(true);
            }
            Err(e) => {
                failures += 1;
                tracing::info!(subscription = %sub.id, seq, failures, error = %e, "webhook delivery failed");
                let Some(units) = RETRIES.get(failures as usize - 1) else {
                    let (id, g) = (sub.id.clone(), sub.generation);
                    h.db(move |st| st.fail(&id, g, failures)).await?;
                    sub.status = Status::Failed;
                    sub.failures = failures;
                    tracing::warn!(subscription = %sub.id, seq, "webhook subscription failed: retries exhausted");
                    return Ok(false);
                };
                let delay = h.opts.retry_unit.saturating_mul(*units as u32);
                let at = now_ms() + delay.as_millis() as i64;
                let (id, g) = (sub.id.clone(), sub.generation);
                h.db(move |st| st.retry(&id, g, seq, failures, at)).await?;
                sub.failures = failures;
                sub.retry_seq = Some(seq);
                sub.retry_at_ms = Some(at);
                tokio::time::sleep(delay).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub() -> Sub {
        Sub {
            id: "s".into(),
            principal: "primary".into(),
            room_id: "r".into(),
            url: String::new(),
            secret: String::new(),
            kinds: None,
            only_from: None,
            not_from: None,
            exclude_thinking: false,
            status: Status::Active,
            cursor: 0,
            failures: 0,
            retry_seq: None,
            retry_at_ms: None,
            created_at: String::new(),
            key_sha256: None,
            generation: 0,
        }
    }

    fn msg(id: &str, name: &str, kind: Option<&str>, thinking: bool) -> Value {
        let mut md = serde_json::Map::new();
        if let Some(k) = kind {
            md.insert("kind".into(), json!(k));
        }
        if thinking {
            md.insert("type".into(), json!("thinking"));
        }
        json!({"agent_id": id, "agent_name": name, "metadata": md})
    }

    #[test]
    fn filters_and_across_fields_or_within_kinds() {
        let mut s = sub();
        assert!(matches(&s, &msg("a1", "alice", None, true)));
        s.kinds = Some(vec!["review".into(), "verdict".into()]);
        s.only_from = Some(vec!["claude".into()]);
        assert!(matches(&s, &msg("c1", "claude", Some("verdict"), false)));
        assert!(matches(
            &s,
            &msg("claude", "Claude Bot", Some("review"), false)
        ));
        assert!(!matches(&s, &msg("c1", "claude", Some("chat"), false)));
        assert!(!matches(&s, &msg("c1", "claude", None, false)));
        assert!(!matches(&s, &msg("b1", "bob", Some("review"), false)));
        let mut s = sub();
        s.not_from = Some(vec!["noisy".into()]);
        s.exclude_thinking = true;
        assert!(!matches(&s, &msg("n1", "noisy", None, false)));
        assert!(!matches(&s, &msg("a1", "alice", None, true)));
        assert!(matches(&s, &msg("a1", "alice", None, false)));
    }
}
