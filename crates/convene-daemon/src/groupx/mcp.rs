//! The member MCP endpoint (`POST /mcp`, streamable HTTP answering `application/json`): the
//! tools an agent's structured session uses to send, publish, ask, collect and read (§6,
//! §12). The caller is the session binding carried in the `X-GroupX-Binding` header that the
//! broker itself gave the agent at `session/new`; nothing in a request names the sender.

use std::sync::Arc;
use std::time::Duration;

use convene_groupx::request::Recipients;
use convene_groupx::tools::{self, Post};
use convene_groupx::{ErrorCode, GroupxError, TurnStatus};
use serde_json::{json, Value};

use super::command::Origin;
use super::Face;

/// The header that carries the binding.
pub const BINDING_HEADER: &str = "x-groupx-binding";

/// MCP protocol revisions this endpoint speaks.
const PROTOCOLS: &[&str] = &["2025-06-18", "2025-03-26", "2024-11-05"];

pub(super) fn rpc_error(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// The protocol revision to answer an `initialize` with.
pub(super) fn protocol_for(params: &Value) -> &'static str {
    let asked = params["protocolVersion"].as_str().unwrap_or("");
    PROTOCOLS
        .iter()
        .find(|p| **p == asked)
        .copied()
        .unwrap_or(PROTOCOLS[0])
}

/// A tool's outcome as an MCP `tools/call` result (a failure is a result with `isError`).
pub(super) fn tool_result(r: Result<Value, GroupxError>) -> Value {
    match r {
        Ok(v) => json!({"content": [{"type": "text", "text": v.to_string()}],
            "structuredContent": v, "isError": false}),
        Err(e) => {
            let v = json!({"errorCode": e.code.as_str(), "message": e.message, "field": e.field});
            json!({"content": [{"type": "text", "text": v.to_string()}],
                "structuredContent": v, "isError": true})
        }
    }
}

/// What the HTTP layer sends back: a JSON-RPC answer, or nothing (a notification: 202).
pub(super) enum Answer {
    /// A response object.
    Json(Value),
    /// Accepted, no body.
    Accepted,
}

/// Resolves the binding to its agent, or the §12 refusal.
pub(super) fn caller(face: &Face, binding: Option<&str>) -> Result<(String, String), GroupxError> {
    let Some(b) = binding else {
        return Err(GroupxError::new(
            ErrorCode::McpUnavailable,
            "MCP is available only to agent sessions the broker started (no binding)",
        ));
    };
    face.bindings
        .lock()
        .get(b)
        .map(|agent| (b.to_string(), agent.clone()))
        .ok_or_else(|| {
            GroupxError::new(
                ErrorCode::McpBindingMismatch,
                "this binding names no live agent session",
            )
        })
}

/// Serves one JSON-RPC message.
pub(super) async fn handle(face: Arc<Face>, binding: String, agent: String, msg: Value) -> Answer {
    let Some(m) = msg.as_object() else {
        return Answer::Json(rpc_error(
            &Value::Null,
            -32600,
            "expected one JSON-RPC object",
        ));
    };
    let method = m.get("method").and_then(Value::as_str).unwrap_or("");
    let Some(id) = m.get("id").cloned() else {
        // Notifications (initialized, cancelled): nothing to answer.
        return Answer::Accepted;
    };
    let params = m.get("params").cloned().unwrap_or(json!({}));
    let result = match method {
        "initialize" => {
            let asked = params["protocolVersion"].as_str().unwrap_or("");
            let v = if PROTOCOLS.contains(&asked) {
                asked
            } else {
                PROTOCOLS[0]
            };
            json!({"protocolVersion": v, "capabilities": {"tools": {"listChanged": false}},
                "serverInfo": {"name": "convene-groupx", "version": env!("CARGO_PKG_VERSION")},
                "instructions": "You are in a GroupX room with other agents and a human. groupx.send wakes other agents (async); groupx.ask waits for their answers (bounded); groupx.publish posts without waking anyone; groupx.read reads the room. Your plain reply is posted to the room when your turn ends."})
        }
        "ping" => json!({}),
        "tools/list" => tools::list(),
        "tools/call" => {
            let name = params["name"].as_str().unwrap_or("").to_string();
            let args = params.get("arguments").cloned().unwrap_or(json!({}));
            match call(&face, &binding, &agent, &name, &args).await {
                Ok(v) => json!({"content": [{"type": "text", "text": v.to_string()}],
                    "structuredContent": v, "isError": false}),
                Err(e) => {
                    let v = json!({"errorCode": e.code.as_str(), "message": e.message, "field": e.field});
                    json!({"content": [{"type": "text", "text": v.to_string()}],
                        "structuredContent": v, "isError": true})
                }
            }
        }
        _ => {
            return Answer::Json(rpc_error(
                &id,
                -32601,
                &format!("method {method} not found"),
            ))
        }
    };
    Answer::Json(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

async fn call(
    face: &Arc<Face>,
    binding: &str,
    agent: &str,
    name: &str,
    args: &Value,
) -> Result<Value, GroupxError> {
    let max = face.cfg.limits.message_bytes;
    match name {
        "groupx.send" => {
            let p = tools::parse_post(args, true, false, max)?;
            let c = post(face, binding, agent, "mcp.send", &p).await?;
            let room = face.room.lock().await;
            Ok(face.post_answer(&room, &c))
        }
        "groupx.publish" => {
            let p = tools::parse_post(args, false, false, max)?;
            let c = post(face, binding, agent, "mcp.publish", &p).await?;
            Ok(json!({"messageEventId": c.message_event_id, "correlationId": c.correlation_id}))
        }
        "groupx.ask" => {
            let p = tools::parse_post(args, true, true, max)?;
            let c = post(face, binding, agent, "mcp.ask", &p).await?;
            let ahead = c.turns.iter().any(|(_, _, pos)| *pos > 0);
            let wait = if ahead {
                Duration::ZERO
            } else {
                face.wait_bound(p.timeout_ms)
            };
            face.collect(
                &c.message_event_id,
                &c.correlation_id,
                wait,
                p.cancel_on_timeout,
            )
            .await
        }
        "groupx.collect" => {
            let a = tools::parse_collect(args)?;
            let corr = {
                let room = face.room.lock().await;
                let turns = room.turns_of(&a.message_event_id);
                let Some(t) = turns.first() else {
                    return Err(GroupxError::new(
                        ErrorCode::InvalidEnvelope,
                        "that message created no turns",
                    )
                    .field("messageEventId"));
                };
                t.corr.correlation_id.clone()
            };
            face.collect(
                &a.message_event_id,
                &corr,
                face.wait_bound(a.timeout_ms),
                false,
            )
            .await
        }
        "groupx.watch" => {
            let w = tools::parse_watch(args)?;
            face.watch(agent, w).await
        }
        "groupx.steer" => {
            let st = tools::parse_steer(args, max)?;
            face.steer(binding, agent, st).await
        }
        "groupx.read" => {
            let r = tools::parse_read(args)?;
            face.read(r).await
        }
        "groupx.memory.search" => {
            face.memory_search(agent, tools::parse_memory_search(args)?)
                .await
        }
        "groupx.memory.remember" => {
            let p = tools::parse_memory_remember(args, max)?;
            face.agent_remember_memory(binding, agent, p).await
        }
        "groupx.core_memory_remember" => {
            let p = tools::parse_core_memory_remember(args, &format!("agent:{agent}"), max)?;
            face.agent_remember_memory(binding, agent, p).await
        }
        "groupx.identity.read" => face.identity_read(tools::parse_identity_read(args)?).await,
        "groupx.identity.remember" => {
            let p = tools::parse_identity_remember(args, &format!("agent:{agent}"), max)?;
            face.agent_remember_identity(binding, agent, p).await
        }
        _ => Err(
            GroupxError::new(ErrorCode::InvalidEnvelope, format!("no tool {name}")).field("name"),
        ),
    }
}

/// send / ask / publish: a message by the calling agent, descending from its current turn.
async fn post(
    face: &Arc<Face>,
    binding: &str,
    agent: &str,
    ty: &'static str,
    p: &Post,
) -> Result<super::room::CommandRec, GroupxError> {
    let targets = match &p.to {
        Some(to) => face.targets(to, Some(agent))?,
        None => Vec::new(),
    };
    if ty != "mcp.publish" && targets.is_empty() {
        return Err(
            GroupxError::new(ErrorCode::UnknownTarget, "no enabled agent to wake").field("to"),
        );
    }
    if matches!(&p.to, Some(Recipients::Agents(_))) && targets.iter().any(|t| t == agent) {
        return Err(
            GroupxError::new(ErrorCode::UnknownTarget, "you cannot give yourself a turn")
                .field("to"),
        );
    }
    let parent = {
        let room = face.room.lock().await;
        let current = face.current.lock().get(agent).cloned();
        let parent = current.and_then(|t| room.turns.get(&t).cloned());
        // Waking agents acts for the caller's current turn (§1): a send/ask that lands after
        // the turn ended (a tool call in flight when the user cancelled) would otherwise start
        // a new root chain at hop 0, outside every limit and after the user said stop. A
        // publish wakes nobody and stays possible.
        let running = parent
            .as_ref()
            .is_some_and(|p| !p.state.status.is_terminal());
        if ty != "mcp.publish" && !running {
            return Err(GroupxError::new(
                ErrorCode::McpBindingMismatch,
                "no turn of yours is running: groupx.send and groupx.ask act for your current turn",
            ));
        }
        // §6.7: a supervisor redirects the worker it watches with steer, not send/ask.
        if let Some(w) = parent
            .as_ref()
            .filter(|w| w.command_type == "supervision.watch")
        {
            let watched: Vec<&str> = w
                .subjects
                .iter()
                .filter_map(|s| room.turns.get(s))
                .map(|t| t.target.as_str())
                .collect();
            if let Some(t) = targets.iter().find(|t| watched.contains(&t.as_str())) {
                return Err(GroupxError::new(
                    ErrorCode::SupervisionSteerRequired,
                    format!("you watch agent:{t}: use groupx.steer to redirect it"),
                )
                .field("to"));
            }
        }
        parent
    };
    let observers = face.observers(p.supervision.as_ref())?;
    let origin = Origin {
        by: agent.to_string(),
        binding: binding.to_string(),
        client_command_id: p.client_command_id.clone(),
        canonical: p.canonical(ty),
        command_type: ty,
        parent,
        observers,
        steer: None,
        forwarded: p.forwarded_event_id.clone(),
    };
    face.create(
        origin,
        targets,
        p.content.clone(),
        p.reply_to_event_id.clone(),
    )
    .await
}

impl Face {
    /// The wait a tool may take: what it asked, within the configured bound.
    pub(super) fn wait_bound(&self, asked: Option<u64>) -> Duration {
        let cap = self.cfg.limits.ask_ms.min(tools::MAX_WAIT_MS);
        Duration::from_millis(asked.unwrap_or(cap).min(cap))
    }

    /// The results of the turns `message` created, after waiting up to `wait` for all of them
    /// to end (§6.3, §6.4). A wait that ends early reports `pending`, never a fake terminal.
    pub(super) async fn collect(
        &self,
        message: &str,
        corr: &str,
        wait: Duration,
        cancel_on_timeout: bool,
    ) -> Result<Value, GroupxError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let done = {
                let room = self.room.lock().await;
                room.turns_of(message)
                    .iter()
                    .all(|t| t.state.status.is_terminal())
            };
            if done || tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
        let turns: Vec<super::room::Turn> = {
            let room = self.room.lock().await;
            room.turns_of(message).into_iter().cloned().collect()
        };
        if cancel_on_timeout {
            for t in turns.iter().filter(|t| !t.state.status.is_terminal()) {
                let _ = self.cancel(&t.turn_id).await;
            }
        }
        let mut results = Vec::new();
        let mut all = true;
        for t in &turns {
            let (pos, active) = {
                let room = self.room.lock().await;
                let lane: Vec<&super::room::Turn> = room
                    .unfinished()
                    .into_iter()
                    .filter(|x| x.target == t.target)
                    .collect();
                let pos = lane
                    .iter()
                    .position(|x| x.turn_id == t.turn_id)
                    .unwrap_or(0);
                (pos, room.active(&t.target).map(|a| a.turn_id.clone()))
            };
            let status = match t.state.status {
                TurnStatus::Completed => "completed",
                TurnStatus::Failed => "failed",
                TurnStatus::Cancelled | TurnStatus::Interrupted => "cancelled",
                _ => {
                    all = false;
                    "pending"
                }
            };
            let mut r = json!({"target": format!("agent:{}", t.target), "turnId": t.turn_id, "status": status, "queuePosition": pos});
            if let Some(a) = active.filter(|a| a != &t.turn_id && !t.state.status.is_terminal()) {
                r["activeTurnId"] = a.into();
            }
            if t.state.status == TurnStatus::Interrupted {
                r["note"] = "interrupted: the broker restarted during this turn".into();
            }
            if let Some(code) = &t.error_code {
                r["errorCode"] = code.clone().into();
            }
            if let Some(rid) = &t.response_event_id {
                r["responseEventId"] = rid.clone().into();
                if let Some(text) = self.message_text(rid).await {
                    r["content"] = text.into();
                }
            }
            results.push(r);
        }
        let mut out = json!({"messageEventId": message, "correlationId": corr,
            "state": if all { "terminal" } else { "pending" }, "results": results});
        if !all {
            out["note"] = "Some targets have not finished. To keep waiting for this same request, call groupx.collect with this messageEventId; do not send it again.".into();
        }
        Ok(out)
    }

    /// The text of a message in the room.
    pub(super) async fn message_text(&self, event_id: &str) -> Option<String> {
        let (r, g, id) = (
            self.d.ledger.readers().clone(),
            self.group_id.clone(),
            event_id.to_string(),
        );
        let raw = tokio::task::spawn_blocking(move || r.event(&g, &id))
            .await
            .ok()?
            .ok()??;
        let env = self.project(&raw.json)?;
        env.body["content"].as_str().map(str::to_string)
    }

    /// `groupx.read`: room events after a seq, of one chain if asked; never reasoning or tool
    /// records (§2.2: those serve the timeline, not other agents' context).
    pub(super) async fn read(&self, q: tools::Read) -> Result<Value, GroupxError> {
        let mut after = q.after_seq;
        let mut out = Vec::new();
        let mut last = after;
        'pages: loop {
            let (r, g) = (self.d.ledger.readers().clone(), self.group_id.clone());
            let page = tokio::task::spawn_blocking(move || r.events_after(&g, after, 500, &[]))
                .await
                .map_err(|e| GroupxError::new(ErrorCode::StorageError, e.to_string()))?
                .map_err(|e| super::from_core(e.into()))?;
            let Some(end) = page.last().map(|e| e.seq) else {
                break;
            };
            for e in &page {
                last = e.seq;
                let Some(env) = self.project(&e.json) else {
                    continue;
                };
                if matches!(
                    env.kind.as_str(),
                    "turn.reasoning.recorded" | "tool.progress.recorded"
                ) {
                    continue;
                }
                if let Some(c) = &q.correlation_id {
                    if &env.correlation_id != c && &env.root_correlation_id != c {
                        continue;
                    }
                }
                out.push(env);
                if out.len() >= q.limit {
                    break 'pages;
                }
            }
            after = end;
        }
        Ok(json!({"events": out, "nextAfterSeq": last}))
    }
}
