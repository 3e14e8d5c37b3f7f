//! HTTP/1.1 on loopback (hyper): routes, bodies, and the guard against other origins.
//!
//! Loopback is the product scope (§11), not a security boundary by itself: a web page from
//! anywhere can make the browser send requests to 127.0.0.1, and a DNS name can be rebound to
//! it. So every request must name a loopback `Host`, and a request carrying an `Origin` must
//! come from this server's own origin.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use convene_groupx::request::{parse_cancel, parse_post_message};
use convene_groupx::{ErrorCode, GroupxError};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;

use super::{sse, Face, MAX_BODY};

/// A response body: a whole JSON/HTML document or an event stream.
pub(super) type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

const PAGE: &str = include_str!("page.html");

/// Serves HTTP until shutdown.
pub async fn serve(face: Arc<Face>, listener: TcpListener) {
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let mut shutdown = face.d.shutdown_rx();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => return,
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "groupx: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let face = face.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let face = face.clone();
                async move { Ok::<_, Infallible>(route(face, req, peer, port).await) }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), svc)
                .await
            {
                tracing::debug!(error = %e, "groupx: connection ended");
            }
        });
    }
}

fn full(status: StatusCode, ctype: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()).boxed());
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(ctype));
    r.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

pub(super) fn json(status: u16, v: &Value) -> Response<Body> {
    full(
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        "application/json",
        v.to_string(),
    )
}

pub(super) fn error(e: &GroupxError) -> Response<Body> {
    json(e.code.http_status(), &e.to_body())
}

fn loopback_host(h: &str, port: u16) -> bool {
    let p = format!(":{port}");
    ["127.0.0.1", "localhost", "[::1]"]
        .iter()
        .any(|n| h == *n || h.strip_prefix(n) == Some(p.as_str()))
}

/// Refuses requests that did not come from this server's own page or a local client.
fn guard(req: &Request<Incoming>, port: u16) -> Result<(), GroupxError> {
    let forbidden = |m: &str| GroupxError::new(ErrorCode::InvalidEnvelope, m.to_string());
    let host = req
        .headers()
        .get(hyper::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if !loopback_host(host, port) {
        return Err(forbidden("Host must be this loopback server"));
    }
    if let Some(o) = req.headers().get(hyper::header::ORIGIN) {
        let ok = o
            .to_str()
            .ok()
            .and_then(|o| o.strip_prefix("http://"))
            .is_some_and(|h| loopback_host(h, port) && h.contains(':'));
        if !ok {
            return Err(forbidden("cross-origin requests are refused"));
        }
    }
    Ok(())
}

pub(super) async fn body(req: Request<Incoming>) -> Result<Bytes, GroupxError> {
    if let Some(ct) = req.headers().get(CONTENT_TYPE) {
        let ct = ct.to_str().unwrap_or("");
        if !ct.trim_start().starts_with("application/json") {
            return Err(GroupxError::new(
                ErrorCode::InvalidEnvelope,
                "Content-Type must be application/json",
            ));
        }
    }
    match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => Ok(b.to_bytes()),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(GroupxError::new(
                ErrorCode::MessageTooLarge,
                format!("request body over {MAX_BODY} bytes"),
            ))
        }
        Err(e) => Err(GroupxError::new(
            ErrorCode::InvalidEnvelope,
            format!("could not read the body: {e}"),
        )),
    }
}

/// One MCP JSON-RPC request over HTTP: parse the body, serve it in its own task (a client
/// that hangs up cannot cut a tool's write short), answer JSON or 202 for a notification.
async fn rpc(
    req: Request<Incoming>,
    serve: impl FnOnce(Value) -> tokio::task::JoinHandle<super::mcp::Answer>,
) -> Response<Body> {
    let b = match body(req).await {
        Ok(b) => b,
        Err(e) => return error(&e),
    };
    let msg: Value = match serde_json::from_slice(&b) {
        Ok(v) => v,
        Err(e) => {
            return json(
                400,
                &serde_json::json!({"jsonrpc": "2.0", "id": null,
                    "error": {"code": -32700, "message": format!("parse error: {e}")}}),
            )
        }
    };
    match serve(msg).await.unwrap_or_else(|_| {
        super::mcp::Answer::Json(serde_json::json!({"jsonrpc": "2.0", "id": null,
            "error": {"code": -32603, "message": "internal error"}}))
    }) {
        super::mcp::Answer::Json(v) => json(200, &v),
        super::mcp::Answer::Accepted => full(StatusCode::ACCEPTED, "application/json", ""),
    }
}

/// Awaits a face task spawned so that the caller hanging up cannot cancel it half-way.
async fn detached(
    h: tokio::task::JoinHandle<Result<Value, GroupxError>>,
) -> Result<Value, GroupxError> {
    h.await
        .unwrap_or_else(|e| Err(GroupxError::new(ErrorCode::Unavailable, e.to_string())))
}

/// The turn id of `/api/turns/:id/cancel` (slicing by hand panicked on `/api/turns/cancel`,
/// where the prefix and the suffix overlap).
fn cancel_target(path: &str) -> Option<&str> {
    path.strip_prefix("/api/turns/")?.strip_suffix("/cancel")
}

async fn route(
    face: Arc<Face>,
    req: Request<Incoming>,
    peer: SocketAddr,
    port: u16,
) -> Response<Body> {
    if let Err(e) = guard(&req, port) {
        tracing::debug!(%peer, "groupx: refused by the origin guard");
        let mut r = error(&e);
        *r.status_mut() = StatusCode::FORBIDDEN;
        return r;
    }
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let not_allowed = || {
        error(&GroupxError::new(
            ErrorCode::MethodNotAllowed,
            format!("{method} is not allowed on {path}"),
        ))
    };
    match path.as_str() {
        "/" | "/index.html" => match method {
            Method::GET | Method::HEAD => full(StatusCode::OK, "text/html; charset=utf-8", PAGE),
            _ => not_allowed(),
        },
        "/api/health" => match method {
            // 503 while draining, with the full identity, so a CLI does not take a closing
            // runtime for a foreign listener (§10.8).
            Method::GET => json(if face.is_closing() { 503 } else { 200 }, &face.health()),
            _ => not_allowed(),
        },
        "/api/runtime/shutdown" => match method {
            Method::POST => {
                let r = async {
                    let b = body(req).await?;
                    let key = convene_groupx::request::parse_shutdown(&b)?;
                    face.shutdown(&key)
                }
                .await;
                match r {
                    Ok(v) => json(202, &v),
                    Err(e) => error(&e),
                }
            }
            _ => not_allowed(),
        },
        _ if face.is_closing() => error(&GroupxError::new(
            ErrorCode::Unavailable,
            "the runtime is shutting down",
        )),
        super::setup::ROUTE => super::setup::route(face, req).await,
        "/api/bootstrap" => match method {
            Method::GET => match face.bootstrap().await {
                Ok(v) => json(200, &v),
                Err(e) => error(&e),
            },
            _ => not_allowed(),
        },
        "/api/messages" => match method {
            Method::POST => {
                let max = face.cfg.limits.message_bytes;
                let r = async {
                    let b = body(req).await?;
                    let p = parse_post_message(&b, max)?;
                    // In its own task: a client that hangs up must not cut off the fold of a
                    // commit that lands.
                    detached(tokio::spawn(async move { face.post_message(p).await })).await
                }
                .await;
                match r {
                    Ok(v) => json(202, &v),
                    Err(e) => error(&e),
                }
            }
            _ => not_allowed(),
        },
        "/mcp/operator" => match method {
            Method::POST => {
                rpc(req, move |msg| {
                    tokio::spawn(super::operator::handle(face, msg))
                })
                .await
            }
            _ => not_allowed(),
        },
        "/mcp" => match method {
            Method::POST => {
                let binding = req
                    .headers()
                    .get(super::mcp::BINDING_HEADER)
                    .and_then(|h| h.to_str().ok())
                    .map(str::to_string);
                let (binding, agent) = match super::mcp::caller(&face, binding.as_deref()) {
                    Ok(x) => x,
                    Err(e) => return error(&e),
                };
                rpc(req, move |msg| {
                    tokio::spawn(super::mcp::handle(face, binding, agent, msg))
                })
                .await
            }
            _ => not_allowed(),
        },
        "/api/events" => match method {
            Method::GET => sse::open(face, &req),
            _ => not_allowed(),
        },
        p if cancel_target(p).is_some() => {
            let id = cancel_target(p).unwrap_or_default();
            if method != Method::POST {
                return not_allowed();
            }
            let id = id.to_string();
            let r = async {
                let b = body(req).await?;
                parse_cancel(&b)?;
                detached(tokio::spawn(async move { face.cancel(&id).await })).await
            }
            .await;
            match r {
                Ok(v) => json(202, &v),
                Err(e) => error(&e),
            }
        }
        p if super::assistant::handles(p) => {
            // Detached: a hung-up client neither cuts a line's fold short nor stops the turn.
            let p = p.to_string();
            tokio::spawn(async move { super::assistant::route(face, req, &p).await })
                .await
                .unwrap_or_else(|e| error(&GroupxError::new(ErrorCode::Unavailable, e.to_string())))
        }
        p if super::memory_api::handles(p) => {
            // Detached like the other writes: a hung-up client cannot cut a fold short.
            let p = p.to_string();
            tokio::spawn(async move { super::memory_api::route(face, req, &p).await })
                .await
                .unwrap_or_else(|e| error(&GroupxError::new(ErrorCode::Unavailable, e.to_string())))
        }
        _ => error(&GroupxError::new(
            ErrorCode::NotFound,
            format!("no route {path}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_loopback_hosts_of_this_port_pass() {
        assert!(super::loopback_host("127.0.0.1:7390", 7390));
        assert!(super::loopback_host("localhost:7390", 7390));
        assert!(super::loopback_host("localhost", 7390));
        assert!(!super::loopback_host("localhost:80", 7390));
        assert!(!super::loopback_host("evil.example:7390", 7390));
        assert!(!super::loopback_host("127.0.0.1.evil.example:7390", 7390));
    }

    #[test]
    fn a_cancel_path_names_its_turn_and_never_overlaps_prefix_and_suffix() {
        assert_eq!(super::cancel_target("/api/turns/t1/cancel"), Some("t1"));
        assert_eq!(super::cancel_target("/api/turns//cancel"), Some(""));
        assert_eq!(super::cancel_target("/api/turns/cancel"), None);
        assert_eq!(super::cancel_target("/api/turns/t1"), None);
    }
}
