//! Messages: `send_message` → `Command::Send`, `thinking` → an `x.cowchat.thinking` event,
//! `get_history` / `room_tip` from the store's read side, and the one conversion from a
//! stored event to a Cowchat message.
//!
//! Mapping: `content` = `data.text`; `reply_to` = the engine's `data.reply_to` (message ids
//! are event ids); the sender's name, `mentions`, `metadata` and the decision mark live under
//! `data.cowchat`. `seq` is the event's per-group ledger `seq`: it never regresses, but it has
//! gaps (membership and other events share the sequence). Mail is private, never shown.
//!
//! Messages are rendered straight from the stored JSON into bytes (a borrowed view, no JSON
//! tree): a history of 10,000 messages is one reply, and it has to be cheap.

use std::borrow::Cow;
use std::sync::Arc;

use convene_core::{event::kinds, Command, Event, SendArgs};
use convene_cowchat::frame::push_json_str;
use convene_cowchat::{
    e2e, parse, ErrorCode, GetHistory, RoomContent, RoomRef, SendMessage, WireError,
    MAX_HISTORY_BYTES,
};
use convene_store::{RawEvent, Readers};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use super::conn::Session;
use super::{live, push, rooms, wire, Face, DATA_KEY, THINKING_KIND};
use crate::hub::FeedEvent;

/// A stored event, borrowed from its JSON: only what a message needs.
#[derive(Deserialize)]
pub(super) struct Stored<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(borrow)]
    pub kind: Cow<'a, str>,
    #[serde(borrow)]
    group_id: Cow<'a, str>,
    #[serde(borrow)]
    pub by: Cow<'a, str>,
    #[serde(borrow)]
    ts: Cow<'a, str>,
    pub seq: u64,
    #[serde(borrow, default)]
    data: StoredData<'a>,
}

#[derive(Deserialize, Default)]
struct StoredData<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    message_mode: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reply_to: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    actor_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    title: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    cowchat: Option<CowData<'a>>,
}

#[derive(Deserialize, Default)]
struct CowData<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    mentions: Option<Vec<Cow<'a, str>>>,
    #[serde(borrow, default)]
    metadata: Option<&'a RawValue>,
    #[serde(default)]
    decision: bool,
}

impl<'a> Stored<'a> {
    /// Parses a stored event.
    pub fn parse(json: &'a str) -> Option<Self> {
        serde_json::from_str(json).ok()
    }

    /// True for a message or thinking pulse that members may read (not Mail).
    pub fn is_message(&self) -> bool {
        (self.kind == kinds::CHAT_MESSAGE && self.data.message_mode.as_deref() != Some("mail"))
            || self.kind == THINKING_KIND
    }

    /// True for a thinking pulse.
    pub fn is_thinking(&self) -> bool {
        self.kind == THINKING_KIND
    }

    /// True for a leader's decision.
    pub fn is_decision(&self) -> bool {
        self.data.cowchat.as_ref().is_some_and(|c| c.decision)
    }

    /// Mentioned agent ids.
    pub fn mentions(&self) -> impl Iterator<Item = &str> {
        self.data
            .cowchat
            .iter()
            .flat_map(|c| c.mentions.iter().flatten())
            .map(|m| m.as_ref())
    }

    /// The sender's display name.
    pub fn name(&self) -> &str {
        self.data
            .cowchat
            .as_ref()
            .and_then(|c| c.name.as_deref())
            .unwrap_or(&self.by)
    }

    /// For membership events: the actor and its title.
    pub fn actor(&self) -> Option<(&str, &str)> {
        let a = self.data.actor_id.as_deref()?;
        Some((a, self.data.title.as_deref().unwrap_or(a)))
    }

    /// The room id.
    pub fn room(&self) -> &str {
        &self.group_id
    }

    /// Appends the wire Message object.
    pub fn write_message(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"message_id\":");
        push_json_str(out, &self.id);
        out.extend_from_slice(b",\"room_id\":");
        push_json_str(out, &self.group_id);
        out.extend_from_slice(b",\"seq\":");
        out.extend_from_slice(self.seq.to_string().as_bytes());
        out.extend_from_slice(b",\"agent_id\":");
        push_json_str(out, &self.by);
        out.extend_from_slice(b",\"agent_name\":");
        push_json_str(out, self.name());
        out.extend_from_slice(b",\"content\":");
        push_json_str(out, self.data.text.as_deref().unwrap_or_default());
        out.extend_from_slice(b",\"timestamp\":");
        push_json_str(out, &self.ts);
        if let Some(r) = self.data.reply_to.as_deref().filter(|r| !r.is_empty()) {
            out.extend_from_slice(b",\"reply_to\":");
            push_json_str(out, r);
        }
        if let Some(c) = &self.data.cowchat {
            if let Some(m) = c.mentions.as_ref().filter(|m| !m.is_empty()) {
                out.extend_from_slice(b",\"mentions\":[");
                for (i, x) in m.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    push_json_str(out, x);
                }
                out.push(b']');
            }
            if let Some(md) = c.metadata {
                out.extend_from_slice(b",\"metadata\":");
                out.extend_from_slice(md.get().as_bytes());
            }
        }
        out.push(b'}');
    }

    /// The wire Message object as a JSON value.
    pub fn message_value(&self) -> Value {
        let mut b = Vec::with_capacity(256);
        self.write_message(&mut b);
        serde_json::from_slice(&b).unwrap_or(Value::Null)
    }
}

/// The Cowchat message of a stored event, if it is a visible message or thinking pulse
/// (for consumers outside the push path, such as webhooks).
#[allow(dead_code)]
pub(crate) fn message_payload(e: &Event) -> Option<Value> {
    let json = e.to_json();
    let s = Stored::parse(&json)?;
    s.is_message().then(|| s.message_value())
}

/// Refuses plaintext in an end-to-end encrypted room.
fn check_sealed(encrypted: bool, content: &str) -> Result<(), WireError> {
    if encrypted && !e2e::is_sealed(content) {
        return Err(WireError::new(
            ErrorCode::PlaintextInEncryptedRoom,
            "this room is end-to-end encrypted: content must be a cow1:/clw1: sealed blob (set a room key)",
        ));
    }
    Ok(())
}

/// Checks that the agent may post `content` to `room_id` now: member, sealed when the room
/// is encrypted, then one token of its key's message rate. Sizes are checked before (a
/// refused size takes no token).
pub(super) fn check_post(s: &Session, room_id: &str, content: &str) -> Result<(), WireError> {
    check_may_post(s, room_id, content)?;
    take_message_token(s)
}

/// Membership and the sealed-blob rule of an encrypted room (no rate token taken).
pub(super) fn check_may_post(s: &Session, room_id: &str, content: &str) -> Result<(), WireError> {
    let me = s.me();
    {
        let eng = s.face.d.ledger.engine();
        let g = rooms::member_room(&s.face, &eng, room_id, &s.principal, me)?;
        check_sealed(rooms::is_encrypted(g), content)?;
    }
    Ok(())
}

/// One token of the key's message rate (send, thinking and decision share it).
pub(super) fn take_message_token(s: &Session) -> Result<(), WireError> {
    let allowed = s
        .face
        .live
        .lock()
        .allow_message(&s.principal, &s.face.cfg.limits);
    allowed.map_err(|rate| {
        WireError::new(
            ErrorCode::RateLimitMessages,
            format!("message rate limit of this API key exceeded ({rate}/s)"),
        )
    })
}

fn cow_data(
    s: &Session,
    mentions: Vec<String>,
    metadata: Option<Map<String, Value>>,
) -> Map<String, Value> {
    let mut cc = Map::new();
    if let Some(a) = &s.agent {
        cc.insert("name".into(), json!(a.name));
    }
    if !mentions.is_empty() {
        cc.insert("mentions".into(), json!(mentions));
    }
    if let Some(md) = metadata {
        cc.insert("metadata".into(), Value::Object(md));
    }
    cc
}

/// Builds the engine command for a `send_message` frame (checks mentions are members).
pub(super) fn send_command(s: &Session, payload: Map<String, Value>) -> Result<Command, WireError> {
    let m: SendMessage = parse(payload)?;
    m.validate_with(&s.limits().sizes())?;
    check_post(s, &m.room_id, &m.content)?;
    let mentions = m.mentions.unwrap_or_default();
    if !mentions.is_empty() {
        let eng = s.face.d.ledger.engine();
        let g = rooms::room(&eng, &m.room_id)?;
        if let Some(x) = mentions.iter().find(|x| g.actor(x).is_none()) {
            return Err(WireError::new(
                ErrorCode::NotInRoom,
                format!("mention {x} is not a member of {}", m.room_id),
            ));
        }
    }
    Ok(message_command(
        s,
        m.room_id,
        m.content,
        m.reply_to,
        cow_data(s, mentions, m.metadata),
    ))
}

/// A `chat.message` to the whole room.
pub(super) fn message_command(
    s: &Session,
    room_id: String,
    content: String,
    reply_to: Option<String>,
    cc: Map<String, Value>,
) -> Command {
    let mut extra = Map::new();
    extra.insert(DATA_KEY.into(), Value::Object(cc));
    Command::Send(SendArgs {
        group_id: room_id,
        by: s.me().to_string(),
        text: Some(content),
        message_mode: Some("send".into()),
        to: vec!["@all".into()],
        reply_to: reply_to.filter(|r| !r.is_empty()),
        extra,
        ..SendArgs::default()
    })
}

/// A turn-token move owed after an answer is queued: (room, sender, the message's seq).
pub(super) type TurnMove = Option<(String, String, u64)>;

/// The `ok` payload (the Message) of a committed send, and the turn move it causes (applied
/// by the caller after the answer, so the sender sees its answer first).
pub(super) fn sent_payload(c: crate::ledger::Committed) -> Result<(Vec<u8>, TurnMove), WireError> {
    // A fresh message: its rendering is made here once and shared with every push of it.
    if let (None, Some(fe), Some((ev, _))) = (&c.existing, c.feed.first(), c.events.first()) {
        if let Some(Some(m)) = push::message_memo(fe) {
            let turn = (m.ftype != "thinking").then(|| (ev.group_id.clone(), m.by.clone(), ev.seq));
            return Ok((m.message.clone(), turn));
        }
    }
    let json = match (&c.existing, c.events.first()) {
        (Some(e), _) => e.to_json(),
        (None, Some((_, j))) => j.clone(),
        (None, None) => return Err(WireError::new(ErrorCode::Internal, "send appended nothing")),
    };
    let st = Stored::parse(&json)
        .ok_or_else(|| WireError::new(ErrorCode::Internal, "unreadable stored message"))?;
    let seq = c.events.first().map(|(e, _)| e.seq).unwrap_or(0);
    let turn = (c.existing.is_none() && !st.is_thinking())
        .then(|| (st.room().to_string(), st.by.to_string(), seq));
    let mut out = Vec::with_capacity(json.len() + 64);
    st.write_message(&mut out);
    Ok((out, turn))
}

/// Applies a turn move owed by a send.
pub(super) fn apply_turn(face: &Face, t: TurnMove) {
    if let Some((room, by, seq)) = t {
        live::turn_sent(face, &room, &by, seq);
    }
}

/// `thinking`: a persisted pulse pushed as `thinking`; it does not advance the turn token
/// and never wakes `wait` (it is not a `chat.message`).
pub(super) async fn thinking(s: &Session, payload: Map<String, Value>) -> Result<Value, WireError> {
    let t: RoomContent = parse(payload)?;
    t.validate_with(&s.limits().sizes())?;
    check_post(s, &t.room_id, &t.content)?;
    let mut md = t.metadata.unwrap_or_default();
    md.insert("type".into(), json!("thinking"));
    let mut data = Map::new();
    data.insert("text".into(), json!(t.content));
    data.insert(
        DATA_KEY.into(),
        Value::Object(cow_data(s, Vec::new(), Some(md))),
    );
    let c = s
        .face
        .d
        .ledger
        .execute(Command::AppendExtension {
            group_id: t.room_id,
            by: s.me().to_string(),
            kind: THINKING_KIND.into(),
            data: Value::Object(data),
        })
        .await
        .map_err(wire)?;
    let (raw, _) = sent_payload(c)?;
    serde_json::from_slice(&raw).map_err(|e| WireError::new(ErrorCode::Internal, e.to_string()))
}

/// History kinds: messages and thinking pulses.
pub(super) fn msg_kinds() -> Vec<String> {
    vec![kinds::CHAT_MESSAGE.to_string(), THINKING_KIND.to_string()]
}

pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, convene_store::StoreError> + Send + 'static,
) -> Result<T, WireError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| WireError::new(ErrorCode::Internal, e.to_string()))?
        .map_err(|e| wire(e.into()))
}

/// Checks that the agent is a member of the room it reads.
fn check_reader(s: &Session, room_id: &str) -> Result<(), WireError> {
    let eng = s.face.d.ledger.engine();
    rooms::member_room(&s.face, &eng, room_id, &s.principal, s.me()).map_err(|e| match e.code {
        ErrorCode::NotInRoom => {
            WireError::new(e.code, format!("join {room_id} to read its history"))
        }
        _ => e,
    })?;
    Ok(())
}

async fn seq_of(readers: &Arc<Readers>, gid: &str, id: &str) -> Result<u64, WireError> {
    let (r, g, id2) = (readers.clone(), gid.to_string(), id.to_string());
    let ev = blocking(move || r.event(&g, &id2)).await?;
    ev.map(|e| e.seq).ok_or_else(|| {
        WireError::new(
            ErrorCode::MessageNotFound,
            format!("no message {id} in this room"),
        )
    })
}

/// `get_history`: without a lower bound, the newest `limit` messages (before `before`);
/// with `since` (a message id) or `since_seq` (not both), the oldest `limit` messages after it (and
/// before `before`, when both are given). Always
/// oldest first. Returns the whole `ok` frame line answering `reply_to`, written in one
/// buffer (a page of 10,000 messages is ~2.5 MB: it is not copied again).
pub(super) async fn get_history(
    s: &Session,
    payload: Map<String, Value>,
    reply_to: Option<&Value>,
) -> Result<Vec<u8>, WireError> {
    let h: GetHistory = parse(payload)?;
    h.validate()?;
    check_reader(s, &h.room_id)?;
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
        Some(Value::String(id)) => Some(seq_of(&readers, &gid, id).await?),
        Some(_) => return Err(WireError::payload("before must be a seq or a message id")),
    };
    let after = match (h.since_seq, &h.since) {
        (Some(n), _) => Some(n), // beside a non-empty `since`: refused by `validate`
        (None, Some(id)) if !id.is_empty() => Some(seq_of(&readers, &gid, id).await?),
        _ => None,
    };
    let head = FrameHead {
        id: s.out.next_id(),
        reply_to: reply_to.cloned(),
        room: h.room_id,
    };
    if let Some(feed) = s.face.d.ledger.hub().get(&gid) {
        let head = head.clone();
        let scan = move || history_from_memory(&feed, &head, after, before, limit);
        // Rendering a long page for the first time is real work: off the connection's thread.
        let got = if limit > 256 {
            tokio::task::spawn_blocking(scan)
                .await
                .map_err(|e| WireError::new(ErrorCode::Internal, e.to_string()))?
        } else {
            scan()
        };
        if let Some(raw) = got {
            return Ok(raw);
        }
    }
    blocking(move || {
        let rows = match after {
            Some(a) => readers.events_between(&gid, a, before.unwrap_or(0), limit, &msg_kinds())?,
            None => readers.events_before(&gid, before.unwrap_or(0), limit, &msg_kinds())?,
        };
        Ok(render_history(&head, &rows, limit, after.is_some()))
    })
    .await
}

/// `get_history` answered from the group's recent events in memory, with the renderings
/// pushes already made; `None` when memory does not reach back far enough (the store
/// answers). Same rows as the store path: Mail takes a slot but is not shown.
fn history_from_memory(
    feed: &crate::hub::Feed,
    head: &FrameHead,
    after: Option<u64>,
    before: Option<u64>,
    limit: usize,
) -> Option<Vec<u8>> {
    let is_msg = |e: &FeedEvent| e.kind == kinds::CHAT_MESSAGE || e.kind == THINKING_KIND;
    let evs = match after {
        Some(a) => feed.scan_between(a, before.unwrap_or(0), limit, is_msg)?,
        None => feed.scan_before(before.unwrap_or(0), limit, is_msg)?,
    };
    let msgs: Vec<_> = evs
        .iter()
        .filter_map(|e| push::message_memo(e).flatten())
        .collect();
    let page = budgeted_page(
        head,
        &msgs,
        |m| m.message.len(),
        |m, out| out.extend_from_slice(&m.message),
        after.is_some(),
        evs.len() == limit,
    );
    Some(page)
}

fn render_history(head: &FrameHead, rows: &[RawEvent], limit: usize, forward: bool) -> Vec<u8> {
    let msgs: Vec<(Stored<'_>, usize)> = rows
        .iter()
        .filter_map(|r| {
            Stored::parse(&r.json)
                .filter(|st| st.is_message())
                .map(|st| (st, r.json.len()))
        })
        .collect();
    // The stored event is a little longer than the message it renders to: a safe estimate.
    budgeted_page(
        head,
        &msgs,
        |m| m.1,
        |m, out| m.0.write_message(out),
        forward,
        rows.len() == limit,
    )
}

/// The answer frame of a page of `msgs`, cut to [`MAX_HISTORY_BYTES`] by [`within_budget`];
/// `has_more` when the read filled its `limit` (`full`) or the cut left messages out.
fn budgeted_page<T>(
    head: &FrameHead,
    msgs: &[T],
    size: impl Fn(&T) -> usize,
    write: impl Fn(&T, &mut Vec<u8>),
    forward: bool,
    full: bool,
) -> Vec<u8> {
    let sizes: Vec<usize> = msgs.iter().map(&size).collect();
    let keep = within_budget(&sizes, forward);
    let cut = keep.len() < msgs.len();
    let mut page = HistoryPage::new(head, sizes[keep.clone()].iter().sum());
    for m in &msgs[keep] {
        page.push(|out| write(m, out));
    }
    page.finish(full || cut)
}

/// The messages of a page to send: all, or past [`MAX_HISTORY_BYTES`] the run that fits at
/// the end the client pages from (the oldest after `since`, else the newest); never none of
/// a non-empty page, so paging always moves.
fn within_budget(sizes: &[usize], forward: bool) -> std::ops::Range<usize> {
    let n = sizes.len();
    let mut total = 0;
    if forward {
        let mut end = 0;
        while end < n && (end == 0 || total + sizes[end] <= MAX_HISTORY_BYTES) {
            total += sizes[end];
            end += 1;
        }
        0..end
    } else {
        let mut start = n;
        while start > 0 && (start == n || total + sizes[start - 1] <= MAX_HISTORY_BYTES) {
            total += sizes[start - 1];
            start -= 1;
        }
        start..n
    }
}

/// What the `get_history` answer frame starts with.
#[derive(Clone)]
struct FrameHead {
    id: String,
    reply_to: Option<Value>,
    room: String,
}

/// The `get_history` answer frame, written message by message (from memory or the store).
struct HistoryPage {
    out: Vec<u8>,
    first: bool,
}

impl HistoryPage {
    fn new(head: &FrameHead, size_hint: usize) -> Self {
        let mut out = Vec::with_capacity(size_hint + 160);
        convene_cowchat::frame::write_frame_head(&mut out, &head.id, "ok", head.reply_to.as_ref());
        out.extend_from_slice(b"{\"room_id\":");
        push_json_str(&mut out, &head.room);
        out.extend_from_slice(b",\"messages\":[");
        Self { out, first: true }
    }

    /// Appends one message object, written by `write`.
    fn push(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        write(&mut self.out);
    }

    fn finish(mut self, has_more: bool) -> Vec<u8> {
        self.out.extend_from_slice(b"],\"has_more\":");
        self.out
            .extend_from_slice(if has_more { b"true" } else { b"false" });
        self.out.push(b'}');
        convene_cowchat::frame::write_frame_tail(&mut self.out);
        self.out
    }
}

/// `room_tip`: the newest visible message's `seq` (0 when none).
pub(super) async fn room_tip(s: &Session, payload: Map<String, Value>) -> Result<Value, WireError> {
    let r: RoomRef = parse(payload)?;
    let gid = {
        let eng = s.face.d.ledger.engine();
        rooms::resolve_visible(&s.face, &eng, &r, &s.principal)?
            .group_id
            .clone()
    };
    let readers = s.face.d.ledger.readers().clone();
    let g = gid.clone();
    let tip = blocking(move || {
        let mut before = 0;
        let kinds = vec![kinds::CHAT_MESSAGE.to_string()];
        // Walk back past Mail (private) until a visible message or the start.
        loop {
            let page = readers.events_before(&g, before, 64, &kinds)?;
            if let Some(m) = page
                .iter()
                .rev()
                .find(|r| Stored::parse(&r.json).is_some_and(|s| s.is_message()))
            {
                return Ok(Some((m.seq, m.id.clone(), m.ts.clone())));
            }
            match page.first() {
                Some(f) if page.len() == 64 => before = f.seq,
                _ => return Ok(None),
            }
        }
    })
    .await?;
    Ok(match tip {
        Some((seq, id, ts)) => {
            json!({"room_id": gid, "seq": seq, "message_id": id, "timestamp": ts})
        }
        None => json!({"room_id": gid, "seq": 0, "message_id": null, "timestamp": null}),
    })
}
