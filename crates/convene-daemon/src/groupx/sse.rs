//! `GET /api/events` (§11): durable events from `seq > cursor`, read again after every commit
//! wake-up (never "history, then live": no window to lose an event in), with transient deltas
//! interleaved as they happen.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use convene_groupx::{ErrorCode, GroupxError};
use http_body::Frame;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Request, Response};
use tokio::sync::{broadcast, mpsc};

use super::http::{error, Body};
use super::Face;

/// Frames a reader may have unsent before the stream waits for it.
const STREAM_BUFFER: usize = 256;
/// A reader that takes nothing for this long is cut off; it reconnects with Last-Event-ID.
const STALL: Duration = Duration::from_secs(30);
/// Keep-alive comment interval.
const PING: Duration = Duration::from_secs(15);
/// Durable events read per page while catching up.
const PAGE: usize = 500;

/// A body fed by a channel.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b))))
    }
}

fn parse_cursor(s: &str, what: &str) -> Result<u64, GroupxError> {
    // Seqs are stored as SQLite integers: a cursor past i64::MAX names no point.
    s.trim()
        .parse::<i64>()
        .ok()
        .and_then(|n| u64::try_from(n).ok())
        .ok_or(())
        .map_err(|_| {
            GroupxError::new(
                ErrorCode::InvalidEnvelope,
                format!("{what} must be a non-negative integer"),
            )
            .field(what)
        })
}

/// The stream's start: `afterSeq` or `Last-Event-ID`; both must agree (§11).
fn cursor(face: &Face, req: &Request<Incoming>) -> Result<u64, GroupxError> {
    let q = req.uri().query().unwrap_or("");
    let after = q
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == "afterSeq")
        .map(|(_, v)| parse_cursor(v, "afterSeq"))
        .transpose()?;
    let last = req
        .headers()
        .get("last-event-id")
        .map(|h| parse_cursor(h.to_str().unwrap_or("x"), "Last-Event-ID"))
        .transpose()?;
    match (after, last) {
        (Some(a), Some(l)) if a != l => Err(GroupxError::new(
            ErrorCode::InvalidEnvelope,
            format!("afterSeq {a} and Last-Event-ID {l} disagree"),
        )),
        (Some(a), _) | (None, Some(a)) => Ok(a),
        // No cursor: live from now.
        (None, None) => Ok(face
            .d
            .ledger
            .hub()
            .get(&face.group_id)
            .map_or(0, |f| f.head())),
    }
}

/// Opens the stream.
pub(super) fn open(face: Arc<Face>, req: &Request<Incoming>) -> Response<Body> {
    let start = match cursor(&face, req) {
        Ok(c) => c,
        Err(e) => return error(&e),
    };
    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
    let transient = face.transient.subscribe();
    tokio::spawn(pump(face, start, tx, transient));
    let mut r = Response::new(ChannelBody(rx).boxed());
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// Rendered envelopes kept for readers that come after the first.
const RENDER_CACHE: usize = 4096;

/// The envelope JSON of a committed event, made once and shared by every reader of the room
/// (ten readers parse and render each event once, not ten times). The face keeps its own
/// cache, by seq (one room): the hub's per-event memo belongs to the Cowchat face.
fn rendered(face: &Face, e: &crate::hub::FeedEvent) -> Option<Arc<str>> {
    if let Some(r) = face.rendered.lock().get(&e.seq) {
        return r.clone();
    }
    let r = face
        .project(&e.json)
        .and_then(|env| serde_json::to_string(&env).ok())
        .map(Arc::<str>::from);
    let mut cache = face.rendered.lock();
    cache.insert(e.seq, r.clone());
    while cache.len() > RENDER_CACHE {
        cache.pop_first();
    }
    r
}

async fn send(tx: &mpsc::Sender<Bytes>, b: String) -> bool {
    matches!(
        tokio::time::timeout(STALL, tx.send(Bytes::from(b))).await,
        Ok(Ok(()))
    )
}

async fn pump(
    face: Arc<Face>,
    mut cursor: u64,
    tx: mpsc::Sender<Bytes>,
    mut transient: broadcast::Receiver<Arc<str>>,
) {
    let feed = face.d.ledger.hub().feed(&face.group_id, cursor);
    let mut head = feed.subscribe();
    let mut shutdown = face.d.shutdown_rx();
    // Tell EventSource how soon to come back after a cut.
    if !send(&tx, "retry: 1000\n\n".into()).await {
        return;
    }
    loop {
        loop {
            let page = match face
                .d
                .ledger
                .page_after(&feed, &face.group_id, cursor, PAGE)
                .await
            {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(error = %e, "groupx: event stream read failed");
                    return;
                }
            };
            let Some(last) = page.last().map(|e| e.seq) else {
                break;
            };
            for e in &page {
                if let Some(s) = rendered(&face, e) {
                    if !send(&tx, format!("id: {}\ndata: {s}\n\n", e.seq)).await {
                        return;
                    }
                }
            }
            cursor = last;
        }
        tokio::select! {
            changed = head.changed() => if changed.is_err() { return },
            t = transient.recv() => match t {
                // A full buffer drops the delta, never a durable event (§11).
                Ok(s) => match tx.try_send(Bytes::from(format!("data: {s}\n\n"))) {
                    Ok(()) | Err(mpsc::error::TrySendError::Full(_)) => {}
                    Err(mpsc::error::TrySendError::Closed(_)) => return,
                },
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = tokio::time::sleep(PING) => if !send(&tx, ": ping\n\n".into()).await { return },
            _ = shutdown.changed() => return,
        }
    }
}
