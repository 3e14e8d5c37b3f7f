//! Streaming upgrades: `events_stream` (CCCS §10) and `runtime_attach` (session transport).

use std::time::Duration;

use convene_core::{CoreError, ErrorCode};
use convene_store::Since;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};

use super::args::Args;
use crate::Daemon;

/// Events read from the store per page while catching up.
const PAGE: usize = 1000;

/// Resolved stream parameters.
struct Plan {
    group_id: String,
    cursor: u64,
    kinds: Vec<String>,
    limit: Option<u64>,
    follow: bool,
}

fn plan(d: &Daemon, a: &Args) -> Result<Plan, CoreError> {
    let gid = a.req("group_id")?;
    if d.ledger.engine().group(&gid).is_none() {
        return Err(CoreError::no_group(&gid));
    }
    // One cursor names the replay start. CCCS §10.1 defines no combination, so `since_seq`
    // (Convene's own cursor) beside another is refused rather than one silently winning.
    // CCCC's pair is kept for its clients: `since_event_id` when this ledger has that event,
    // else `since_ts` (a reconnect that sends both never replays less than the timestamp).
    let given = |k: &str| {
        a.0.get(k)
            .is_some_and(|v| !v.is_null() && v.as_str() != Some(""))
    };
    if given("since_seq") && (given("since_event_id") || given("since_ts")) {
        let other = if given("since_event_id") {
            "since_event_id"
        } else {
            "since_ts"
        };
        let mut cursors = vec!["since_seq"];
        cursors.extend(
            ["since_event_id", "since_ts"]
                .into_iter()
                .filter(|k| given(k)),
        );
        return Err(CoreError::invalid(format!(
            "give one replay cursor, not since_seq and {other}"
        ))
        .with("field", other)
        .with("reason", "conflicting_cursors")
        .with("cursors", serde_json::Value::from(cursors)));
    }
    let ts_cursor = |a: &Args| -> Result<Option<Since>, CoreError> {
        let Some(ts) = a.opt_str("since_ts")?.filter(|s| !s.is_empty()) else {
            return Ok(None);
        };
        let t = convene_core::event::parse_ts(&ts).ok_or_else(|| {
            CoreError::invalid(format!("since_ts is not RFC 3339: {ts}")).with("field", "since_ts")
        })?;
        // Events from the first one stamped at or after since_ts are replayed.
        Ok(Some(Since::Ts(convene_core::event::format_ts(t))))
    };
    // Parsed up front: an unparsable since_ts is refused even beside a known event id.
    let ts = ts_cursor(a)?;
    let since = if let Some(s) = a.0.get("since_seq").filter(|v| !v.is_null()) {
        Since::Seq(s.as_u64().ok_or_else(|| {
            CoreError::invalid("since_seq must be a non-negative integer")
                .with("field", "since_seq")
        })?)
    } else if let Some(id) = a.opt_str("since_event_id")?.filter(|s| !s.is_empty()) {
        Since::EventId(id)
    } else if let Some(t) = ts.clone() {
        t
    } else {
        Since::Seq(d.ledger.hub().get(&gid).map(|f| f.head()).unwrap_or(0))
    };
    let readers = d.ledger.readers();
    let mut cursor = readers.resolve(&gid, &since).map_err(CoreError::from)?;
    if cursor.is_none() && matches!(since, Since::EventId(_)) {
        if let Some(t) = &ts {
            cursor = readers.resolve(&gid, t).map_err(CoreError::from)?;
        }
    }
    let cursor = cursor.ok_or_else(|| match &since {
        Since::EventId(id) => CoreError::new(
            ErrorCode::EventNotFound,
            format!("since_event_id not in this group's ledger: {id}"),
        )
        .with("field", "since_event_id")
        .with("event_id", id.as_str()),
        _ => CoreError::new(
            ErrorCode::InvalidCursor,
            "since_seq is beyond the ledger head",
        )
        .with("field", "since_seq"),
    })?;
    let kinds = a.str_list("kinds")?.unwrap_or_default();
    if kinds.iter().any(|k| k.is_empty()) {
        return Err(CoreError::invalid("kinds must be non-empty strings").with("field", "kinds"));
    }
    let limit = match a.0.get("limit").filter(|v| !v.is_null()) {
        Some(v) => Some(v.as_u64().filter(|n| *n > 0).ok_or_else(|| {
            CoreError::invalid("limit must be a positive integer").with("field", "limit")
        })?),
        None => None,
    };
    Ok(Plan {
        group_id: gid,
        cursor,
        kinds,
        limit,
        follow: a.bool("follow", true)?,
    })
}

/// Serves `events_stream` on this connection until the client leaves, the limit is reached,
/// replay ends without `follow`, the group is deleted, or the daemon shuts down.
pub(super) async fn events_stream<R, W>(
    d: &Daemon,
    a: Args,
    reader: &mut R,
    w: &mut W,
) -> std::io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let p = match plan(d, &a) {
        Ok(p) => p,
        Err(e) => return w.write_all(&super::error_line(&e)).await,
    };
    let feed = d.ledger.hub().feed(&p.group_id, p.cursor);
    let mut head_rx = feed.subscribe();
    let head = feed.head();
    w.write_all(&convene_ipc::ok_line(
        serde_json::json!({"group_id": p.group_id, "since_seq": p.cursor, "head_seq": head}),
    ))
    .await?;
    w.flush().await?;
    let mut cursor = p.cursor;
    let mut sent: u64 = 0;
    let mut shutdown = d.shutdown_rx();
    let hb = d.heartbeat;
    let mut next_hb = tokio::time::Instant::now() + hb;
    loop {
        // Catch up: memory buffer first, store when the buffer no longer reaches back.
        loop {
            let page = d
                .ledger
                .page_after(&feed, &p.group_id, cursor, PAGE)
                .await
                .map_err(std::io::Error::other)?;
            let Some(last) = page.last().map(|e| e.seq) else {
                break;
            };
            cursor = last;
            for e in page
                .iter()
                .filter(|e| p.kinds.is_empty() || p.kinds.contains(&e.kind))
            {
                w.write_all(&convene_ipc::event_line(&e.json)).await?;
                sent += 1;
                if p.limit.map(|l| sent >= l).unwrap_or(false) {
                    return w.flush().await;
                }
            }
            w.flush().await?;
        }
        if !p.follow {
            return Ok(());
        }
        tokio::select! {
            changed = head_rx.changed() => {
                if changed.is_err() {
                    return Ok(()); // group deleted
                }
            }
            _ = tokio::time::sleep_until(next_hb) => {
                w.write_all(&convene_ipc::heartbeat_line(&convene_core::event::format_ts(time::OffsetDateTime::now_utc()))).await?;
                w.flush().await?;
                next_hb = tokio::time::Instant::now() + hb;
            }
            n = reader.fill_buf() => {
                match n {
                    Ok([]) => return Ok(()),
                    Ok(b) => { let l = b.len(); reader.consume(l); }
                    Err(e) => return Err(e),
                }
            }
            _ = shutdown.changed() => return Ok(()),
        }
    }
}

/// Attaches the caller as the actor's live session: deliveries arrive as
/// `{"t":"delivery","delivery_id":…,"event":…}` lines.
pub(super) async fn runtime_attach<R, W>(
    d: &Daemon,
    a: Args,
    reader: &mut R,
    w: &mut W,
) -> std::io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let check = (|| -> Result<(String, String, u64), CoreError> {
        let gid = a.req("group_id")?;
        let actor = a.req("actor_id")?;
        let by = a
            .opt_str("by")?
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| actor.clone());
        let eng = d.ledger.engine();
        let g = eng.group(&gid).ok_or_else(|| CoreError::no_group(&gid))?;
        let generation = g
            .actor(&actor)
            .ok_or_else(|| CoreError::no_actor(&actor))?
            .generation;
        if by != actor && by != "user" {
            return Err(CoreError::denied(
                "only the actor itself or the user may attach its session",
            )
            .with("by", by));
        }
        Ok((gid, actor, generation))
    })();
    let (gid, actor, generation) = match check {
        Ok(x) => x,
        Err(e) => return w.write_all(&super::error_line(&e)).await,
    };
    let sessions = &d.runtime.sessions;
    let attached = sessions.attach(&gid, &actor, generation);
    let id = attached.id;
    let res = attached_loop(d, attached.rx, &gid, &actor, reader, w).await;
    // Frames still queued are dropped with the queue (their handoffs record failed).
    sessions.detach(&gid, &actor, id);
    res
}

/// Writes the attached session's frames and heartbeats until either side ends it. Every
/// write is bounded: a consumer that stops reading is disconnected rather than holding its
/// deliveries forever.
async fn attached_loop<R, W>(
    d: &Daemon,
    mut rx: crate::runtime::SessionRx,
    gid: &str,
    actor: &str,
    reader: &mut R,
    w: &mut W,
) -> std::io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let bound = d.runtime.sessions.timeout();
    let ok = convene_ipc::ok_line(
        serde_json::json!({"group_id": gid, "actor_id": actor, "attached": true}),
    );
    write_bounded(w, &ok, bound).await?;
    let mut shutdown = d.shutdown_rx();
    let hb: Duration = d.heartbeat;
    loop {
        tokio::select! {
            m = rx.recv() => match m {
                Some(frame) => tokio::select! {
                    r = crate::runtime::write_frame(w, frame, bound) => r?,
                    // Shutdown does not wait out a stalled write: the frame is dropped
                    // mid-write and its handoff records ambiguous.
                    _ = shutdown.changed() => return Ok(()),
                },
                None => return Ok(()),
            },
            _ = tokio::time::sleep(hb) => {
                let line = convene_ipc::heartbeat_line(&convene_core::event::format_ts(time::OffsetDateTime::now_utc()));
                write_bounded(w, &line, bound).await?;
            }
            n = reader.fill_buf() => match n {
                Ok([]) => return Ok(()),
                Ok(b) => { let l = b.len(); reader.consume(l); }
                Err(e) => return Err(e),
            },
            _ = shutdown.changed() => return Ok(()),
        }
    }
}

/// Writes and flushes `bytes` within `bound`.
async fn write_bounded<W: AsyncWrite + Unpin>(
    w: &mut W,
    bytes: &[u8],
    bound: Duration,
) -> std::io::Result<()> {
    tokio::time::timeout(bound, async {
        w.write_all(bytes).await?;
        w.flush().await
    })
    .await
    .unwrap_or_else(|_| {
        Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the session did not take a write in time",
        ))
    })
}
