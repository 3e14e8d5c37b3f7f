//! `wait` (plain, `--loop`, `--follow`) and `history --follow`.
//!
//! The cursor is the seq of the last processed row (every row: matching, filtered, self,
//! thinking). `--loop` and `--follow` join the room first (so pushes start), then catch up
//! with `get_history since_seq=<cursor>`, then block on `message_received` pushes. Rows
//! are de-duplicated by seq, so the overlap between catch-up and pushes is harmless. Every
//! internal timeout repeats the catch-up (a missed push costs at most one interval);
//! transport failures reconnect with capped exponential backoff and resume from the cursor.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use convene_chat::message::{self, Filter};
use convene_chat::{cursor, Client};
use serde_json::Value;

use crate::ctx::Ctx;
use crate::{SinceSeq, WaitArgs, EXIT_IDLE, EXIT_TIMEOUT};

/// Default internal re-check interval of `--loop` / `--follow`.
const RECHECK: Duration = Duration::from_secs(30);
/// Re-check interval of `history --follow`: the server pushes a message to everyone but its
/// sender, so this agent's own messages sent from another process reach the follower only
/// through a history read (one `get_history` a second per follower; empty when idle).
const OWN_RECHECK: Duration = Duration::from_secs(1);
/// Plain `wait --timeout 0` cap.
const FOREVER: Duration = Duration::from_secs(24 * 3600);
/// Reconnect backoff bounds.
const BACKOFF_MIN: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(15);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Plain,
    Loop,
    Follow,
}

/// Why a session ended.
enum End {
    /// Returned with messages (exit 0).
    Woke,
    /// A plain wait's timeout (exit 3).
    Timeout,
    /// The idle timeout (exit 2).
    Idle,
}

struct Waiter<'a> {
    ctx: &'a Ctx,
    mode: Mode,
    drain: bool,
    text: bool,
    show_thinking: bool,
    filter: Filter,
    cursor_file: Option<PathBuf>,
    /// Last processed seq; `None` until resolved against the room (tip).
    cursor: Option<u64>,
    since: SinceSeq,
    /// Plain mode without --since-seq: no catch-up at all.
    catch_up: bool,
    recheck: Duration,
    /// `--idle-timeout`: how long without a matching message before exit 2.
    idle: Option<Duration>,
    idle_deadline: Option<Instant>,
    plain_deadline: Option<Instant>,
    woke: bool,
    /// Seqs of pulses already shown (above the cursor).
    thinking_shown: BTreeSet<u64>,
    /// `--follow` saw a peer's `--end` message.
    ended: bool,
    /// Own messages are shown (`history --follow`), so they are read from history.
    own_included: bool,
    /// The room's id once resolved: a reconnect must not follow another room that took
    /// its name meanwhile (its seqs start again, below this cursor).
    room_id: Option<String>,
}

/// `cowchat wait`.
pub fn run(ctx: &Ctx, a: &WaitArgs) -> anyhow::Result<i32> {
    let mode = if a.loop_ {
        Mode::Loop
    } else if a.follow {
        Mode::Follow
    } else {
        Mode::Plain
    };
    let now = Instant::now();
    let plain_deadline = (mode == Mode::Plain).then(|| {
        now + match a.timeout {
            None | Some(0) => FOREVER,
            Some(s) => Duration::from_secs(s),
        }
    });
    let recheck = match (mode, a.timeout) {
        (Mode::Plain, _) | (_, None) | (_, Some(0)) => RECHECK,
        (_, Some(s)) => Duration::from_secs(s),
    };
    let mut not_from: Vec<String> = a
        .not_from
        .iter()
        .flat_map(|s| s.split(',').map(str::trim).map(String::from))
        .filter(|s| !s.is_empty())
        .collect();
    not_from.dedup();
    let only_from = a
        .only_from
        .iter()
        .flat_map(|s| s.split(',').map(str::trim).map(String::from))
        .filter(|s| !s.is_empty())
        .collect();
    let idle = match mode {
        Mode::Plain => None,
        _ => a.idle_timeout.map(Duration::from_secs),
    };
    let mut w = Waiter {
        ctx,
        mode,
        drain: a.drain,
        text: a.text,
        show_thinking: a.show_thinking,
        filter: Filter {
            self_id: String::new(),
            not_from,
            only_from,
        },
        cursor_file: a.cursor_file.clone(),
        cursor: None,
        since: a.since_seq.unwrap_or(SinceSeq::Auto),
        catch_up: mode != Mode::Plain || a.since_seq.is_some(),
        recheck,
        idle,
        idle_deadline: idle.map(|d| now + d),
        plain_deadline,
        woke: false,
        thinking_shown: BTreeSet::new(),
        ended: false,
        own_included: false,
        room_id: None,
    };
    w.run(&a.room)
}

/// `history ROOM --follow`: stream every message (own included) after `after`.
pub fn follow_history(ctx: &Ctx, room: &str, after: u64, text: bool) -> anyhow::Result<i32> {
    let mut w = Waiter {
        ctx,
        mode: Mode::Follow,
        drain: false,
        text,
        show_thinking: false,
        filter: Filter::default(),
        cursor_file: None,
        cursor: Some(after),
        since: SinceSeq::N(after),
        catch_up: true,
        recheck: OWN_RECHECK,
        idle: None,
        idle_deadline: None,
        plain_deadline: None,
        woke: false,
        thinking_shown: BTreeSet::new(),
        ended: false,
        own_included: true,
        room_id: None,
    };
    w.run(room)
}

impl Waiter<'_> {
    fn run(&mut self, room: &str) -> anyhow::Result<i32> {
        let mut backoff = BACKOFF_MIN;
        let mut first = true;
        loop {
            match self.session(room) {
                Ok(End::Woke) => return Ok(0),
                Ok(End::Timeout) => {
                    eprintln!("wait: timed out");
                    return Ok(EXIT_TIMEOUT);
                }
                Ok(End::Idle) => {
                    let seq = self.cursor.unwrap_or(0);
                    println!("{seq}");
                    eprintln!("wait: idle timeout; resume with --since-seq {seq}");
                    return Ok(EXIT_IDLE);
                }
                Err(e) => {
                    let err = e.downcast_ref::<convene_chat::Error>();
                    let transport = err.is_some_and(convene_chat::Error::is_transport);
                    // Logic errors (no such room, refused) and a first connection that never
                    // worked are reported, not retried: a typo must not hang forever.
                    if self.mode == Mode::Plain || !transport || first && self.cursor.is_none() {
                        return Err(e);
                    }
                    if self.woke && self.mode == Mode::Loop {
                        return Ok(0); // drained what we could; the batch is out
                    }
                    if self.idle_deadline.is_some_and(|d| Instant::now() >= d) {
                        let seq = self.cursor.unwrap_or(0);
                        println!("{seq}");
                        eprintln!("wait: idle timeout; resume with --since-seq {seq}");
                        return Ok(EXIT_IDLE);
                    }
                    // A catch-up page too large to receive would fail the same way forever:
                    // ask for smaller pages, at once (nothing is wrong with the server).
                    if matches!(err, Some(convene_chat::Error::TooLarge(_)))
                        && self.ctx.shrink_page()
                    {
                        eprintln!("wait: {e:#}; reconnecting for smaller history pages");
                        first = false;
                        continue;
                    }
                    eprintln!("wait: {e:#}; reconnecting in {backoff:?}");
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
            }
            first = false;
        }
    }

    /// One connection's worth of waiting.
    fn session(&mut self, room: &str) -> anyhow::Result<End> {
        let mut c = self.ctx.connect()?;
        // Own messages are filtered unless they are shown (`history --follow`).
        if !self.own_included {
            self.filter.self_id = c.agent_id.clone();
        }
        let r = self
            .ctx
            .room(&mut c, self.room_id.as_deref().unwrap_or(room))?;
        self.room_id = Some(r.id.clone());
        if self.cursor.is_none() {
            let from_file = self.cursor_file.as_deref().and_then(cursor::read);
            let at = match (self.since, from_file) {
                (SinceSeq::N(n), _) | (SinceSeq::Auto, Some(n)) => {
                    // A start past the room's newest row (a cursor file of a room destroyed
                    // and made again under the same name) would skip its next messages.
                    let tip = self.ctx.tip(&mut c, &r.id)?;
                    if n > tip {
                        eprintln!(
                            "wait: start seq {n} is past the newest row of {room} ({tip}); \
                             waiting from {tip}"
                        );
                    }
                    n.min(tip)
                }
                (SinceSeq::Auto | SinceSeq::Tip, _) => self.ctx.tip(&mut c, &r.id)?,
            };
            // Record the start at once: a waiter that ends (idle, killed) before its first
            // row must not leave `auto` to resolve to a later tip and skip what came between.
            if from_file != Some(at) {
                self.save_cursor(at)?;
            }
            self.cursor = Some(at);
        }
        loop {
            if self.catch_up {
                let rows = self
                    .ctx
                    .history_after(&mut c, &r.id, self.cursor.unwrap_or(0))?;
                for m in rows {
                    if self.process(m)? || self.ended {
                        return Ok(End::Woke);
                    }
                }
            }
            if self.woke && self.drain {
                return Ok(End::Woke);
            }
            if self.ended {
                return Ok(End::Woke);
            }
            if let Some(end) = self.block(&mut c, &r.id)? {
                return Ok(end);
            }
        }
    }

    /// Blocks for pushes until one re-check interval passes. `Some` ends the session.
    fn block(&mut self, c: &mut Client, room_id: &str) -> anyhow::Result<Option<End>> {
        let mut deadline = Instant::now() + self.recheck;
        for d in [self.idle_deadline, self.plain_deadline]
            .into_iter()
            .flatten()
        {
            deadline = deadline.min(d);
        }
        loop {
            let Some(f) = c.next_push(Some(deadline))? else {
                if self.plain_deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok(Some(End::Timeout));
                }
                if self.idle_deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok(Some(End::Idle));
                }
                return Ok(None); // re-check: catch up from history again
            };
            let p = &f.payload;
            let in_room = p["room_id"].as_str().is_none_or(|r| r == room_id);
            match f.ftype.as_str() {
                // `history --follow` shows own messages, which the server never pushes to
                // their sender (another process with the same agent id included): a seq
                // past the next one may hide some, so the catch-up reads them in order.
                "message_received"
                    if in_room
                        && self.own_included
                        && message::seq(p) > self.cursor.unwrap_or(0) + 1 =>
                {
                    return Ok(None);
                }
                // The turn moved because someone spoke, maybe this agent elsewhere.
                "turn_changed" if in_room && self.own_included && p["reason"] == "message_sent" => {
                    return Ok(None);
                }
                "message_received" if in_room => {
                    if self.process(p.clone())? {
                        return Ok(Some(End::Woke));
                    }
                    if self.woke && self.drain {
                        return Ok(None); // collect the rest through one catch-up
                    }
                    if self.ended {
                        return Ok(Some(End::Woke));
                    }
                }
                "thinking" if in_room => {
                    let m = self.ctx.incoming(p.clone());
                    self.show_thinking(&m);
                }
                // Decisions are history rows; fetch them in order through the catch-up, or,
                // for a plain wait (no catch-up), take the push as the row it is.
                "decision_made" if in_room && self.catch_up => return Ok(None),
                "decision_made" if in_room => {
                    let woke = self.process(p.clone())?;
                    if woke || self.ended {
                        return Ok(Some(End::Woke));
                    }
                }
                "agent_joined" if in_room && self.mode != Mode::Plain => {
                    let id = p["agent"]["agent_id"]
                        .as_str()
                        .or_else(|| p["agent_id"].as_str())
                        .unwrap_or("?");
                    if id != self.filter.self_id {
                        let name = p["agent"]["name"]
                            .as_str()
                            .or_else(|| p["name"].as_str())
                            .unwrap_or(id);
                        eprintln!("wait: peer joined {name} ({id})");
                    }
                }
                "room_destroyed" if in_room => {
                    anyhow::bail!("room {room_id} was destroyed");
                }
                _ => {}
            }
        }
    }

    /// `--show-thinking`: a peer's pulse on stderr, once (it can come as a push and again
    /// as a catch-up row, since pushes of pulses do not move the cursor).
    fn show_thinking(&mut self, m: &Value) {
        let seq = message::seq(m);
        if !self.show_thinking
            || !self.filter.peer_thinking(m)
            || seq <= self.cursor.unwrap_or(0)
            || !self.thinking_shown.insert(seq)
        {
            return;
        }
        let name = m["agent_name"].as_str().unwrap_or("?");
        let content = m["content"].as_str().unwrap_or_default();
        let note = message::undecryptable_note(m);
        eprintln!("wait: thinking {name}: {content}{note}");
    }

    /// Handles one message row. Returns true when the wait should return now.
    fn process(&mut self, m: Value) -> anyhow::Result<bool> {
        let m = self.ctx.incoming(m);
        let seq = message::seq(&m);
        let cur = self.cursor.unwrap_or(0);
        if seq != 0 && seq <= cur {
            return Ok(false); // already seen (catch-up and pushes overlap)
        }
        self.show_thinking(&m);
        let wakes = self.filter.wakes(&m);
        if wakes {
            self.emit(&m)?;
            self.woke = true;
            if self.mode == Mode::Follow {
                self.ended |= message::is_end(&m);
                // Idle means no matching message for that long: a stream restarts the clock.
                self.idle_deadline = self.idle.map(|d| Instant::now() + d);
            }
        }
        if seq > cur {
            self.cursor = Some(seq);
            // Pulses at or below the cursor can no longer come back.
            self.thinking_shown = self.thinking_shown.split_off(&(seq + 1));
            self.save_cursor(seq)?;
        }
        Ok(wakes && matches!(self.mode, Mode::Plain | Mode::Loop) && !self.drain)
    }

    /// Replaces the `--cursor-file`, if any, with `seq`.
    fn save_cursor(&self, seq: u64) -> anyhow::Result<()> {
        if let Some(p) = &self.cursor_file {
            cursor::write(p, seq).with_context(|| format!("writing {}", p.display()))?;
        }
        Ok(())
    }

    fn emit(&self, m: &Value) -> anyhow::Result<()> {
        let line = if self.text {
            message::text_line(m)
        } else {
            m.to_string()
        };
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}")?;
        out.flush()?;
        Ok(())
    }
}
