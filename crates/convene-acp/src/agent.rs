//! [`AcpAgent`]: ACP over a `convene-agentio` [`Peer`] (which owns the child, the request table
//! and the dead-connection handling): the ACP methods, and routing of `session/update`
//! notifications to the running prompt of their session.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use convene_agentio::jsonrpc::Dialect;
use convene_agentio::peer::{ConnState, Peer, Pending, Protocol};
use convene_agentio::sink::TurnSink;
use serde_json::{json, Value};

use crate::wire;
use crate::{AcpConfig, AcpError, AgentInfo, PromptRun, SessionInfo, StopReason, Update};

/// The reader's side of one running prompt.
type PromptSink = TurnSink<Result<StopReason, AcpError>>;

/// JSON-RPC "method not found".
const METHOD_NOT_FOUND: i64 = -32601;

/// One agent process and its ACP connection. `Send + Sync`; all methods take `&self`.
pub struct AcpAgent {
    inner: Arc<Inner>,
    info: AgentInfo,
}

/// ACP over a [`Peer`]: prompts run per session; a `session/prompt` answer ends its prompt.
struct Acp;

type Inner = Peer<Acp>;

/// Running prompt per session: its request id and sink.
type Prompts = HashMap<String, (u64, Arc<PromptSink>)>;

impl AcpAgent {
    /// Starts the agent process and runs `initialize`.
    pub async fn spawn(cfg: &AcpConfig) -> Result<AcpAgent, AcpError> {
        let inner = Inner::start(&cfg.command, &cfg.cwd, &cfg.env, cfg.request_timeout, 1)?;
        // If initialize fails, dropping the half-built agent kills the process group.
        let mut agent = AcpAgent {
            inner,
            info: AgentInfo {
                protocol_version: 0,
                load_session: false,
                raw: Value::Null,
            },
        };
        let result = agent
            .inner
            .request("initialize", wire::initialize_params())
            .await?;
        agent.info = wire::agent_info(result)?;
        tracing::debug!(
            pid = agent.inner.pid(),
            protocol_version = agent.info.protocol_version,
            load_session = agent.info.load_session,
            "ACP agent initialized"
        );
        Ok(agent)
    }

    /// What the agent reported in `initialize`.
    pub fn capabilities(&self) -> &AgentInfo {
        &self.info
    }

    /// The child's process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.inner.pid()
    }

    /// `session/new`; returns the session id.
    pub async fn new_session(
        &self,
        cwd: &Path,
        mcp_servers: Vec<Value>,
    ) -> Result<String, AcpError> {
        Ok(self.new_session_full(cwd, mcp_servers).await?.session_id)
    }

    /// `session/new`; returns the session id and the modes the agent offers.
    pub async fn new_session_full(
        &self,
        cwd: &Path,
        mcp_servers: Vec<Value>,
    ) -> Result<SessionInfo, AcpError> {
        let result = self
            .inner
            .request(
                "session/new",
                json!({"cwd": cwd.to_string_lossy(), "mcpServers": mcp_servers}),
            )
            .await?;
        wire::session_info(&result)
    }

    /// `session/load`. The history the agent replays before answering is discarded.
    pub async fn load_session(
        &self,
        session_id: &str,
        cwd: &Path,
        mcp_servers: Vec<Value>,
    ) -> Result<(), AcpError> {
        self.inner
            .request(
                "session/load",
                json!({"sessionId": session_id, "cwd": cwd.to_string_lossy(), "mcpServers": mcp_servers}),
            )
            .await
            .map(drop)
    }

    /// `session/set_mode`.
    pub async fn set_mode(&self, session_id: &str, mode_id: &str) -> Result<(), AcpError> {
        self.inner
            .request(
                "session/set_mode",
                json!({"sessionId": session_id, "modeId": mode_id}),
            )
            .await
            .map(drop)
    }

    /// Sends `session/prompt` and returns once the request is written and flushed.
    ///
    /// The turn's updates then arrive on [`PromptRun::updates`] in order and its outcome on
    /// [`PromptRun::done`], after the last update. The reader never waits for the consumer:
    /// while the channel is full, updates wait in memory, adjacent chunks of one kind merged;
    /// under a very large backlog `Other` updates are dropped and repeated `ToolCallUpdate`s
    /// of one tool call merged. Text is never lost. The prompt has no timeout (only writing
    /// it is bounded by `request_timeout`).
    pub async fn prompt(&self, session_id: &str, text: &str) -> Result<PromptRun, AcpError> {
        let (sink, ends) = PromptSink::start();
        let run = PromptRun {
            updates: ends.updates,
            done: ends.done,
        };
        let id = self.inner.next_id();
        {
            let mut st = self.inner.lock();
            if let Some(dead) = &st.dead {
                let err = dead.clone();
                drop(st);
                sink.finish(Err(err.clone()));
                return Err(err);
            }
            if st.turns.contains_key(session_id) {
                drop(st);
                let err = AcpError::SessionBusy(session_id.to_string());
                sink.finish(Err(err.clone()));
                return Err(err);
            }
            st.turns.insert(session_id.to_string(), (id, sink.clone()));
            st.pending.insert(id, Pending::Own(session_id.to_string()));
        }
        let params = json!({"sessionId": session_id, "prompt": [{"type": "text", "text": text}]});
        tracing::debug!(id, session_id, "-> session/prompt");
        let line = wire::RPC.request_line(id, "session/prompt", &params);
        if let Err(e) = self.inner.write_bounded(&line, "session/prompt").await {
            let mut st = self.inner.lock();
            st.pending.remove(&id);
            if st.turns.get(session_id).is_some_and(|(pid, _)| *pid == id) {
                st.turns.remove(session_id);
            }
            drop(st);
            sink.finish(Err(e.clone()));
            return Err(e);
        }
        Ok(run)
    }

    /// Sends the `session/cancel` notification; the prompt then ends with `Cancelled`.
    pub async fn cancel(&self, session_id: &str) -> Result<(), AcpError> {
        if let Some(dead) = self.inner.dead() {
            return Err(dead);
        }
        tracing::debug!(session_id, "-> session/cancel");
        let line =
            wire::RPC.notification_line("session/cancel", Some(&json!({"sessionId": session_id})));
        self.inner.write_bounded(&line, "session/cancel").await
    }

    /// Closes the agent's stdin, waits up to `grace` for it to exit, then kills its process
    /// group. Running prompts and requests fail with [`AcpError::Closed`].
    pub async fn shutdown(self, grace: Duration) {
        self.inner.shutdown(grace).await;
    }

    /// False once the process exited or the connection broke (or was shut down).
    pub fn is_alive(&self) -> bool {
        self.inner.is_alive()
    }
}

impl Drop for AcpAgent {
    fn drop(&mut self) {
        self.inner.close();
    }
}

impl Protocol for Acp {
    type Error = AcpError;
    type Turns = Prompts;
    /// The session of a `session/prompt`.
    type Pending = String;
    const DIALECT: Dialect = wire::RPC;
    const NAME: &'static str = "ACP agent";

    /// The `session/prompt` answer: the prompt's outcome.
    fn on_response(
        _peer: &Arc<Inner>,
        mut st: MutexGuard<'_, ConnState<Acp>>,
        id: u64,
        session: String,
        result: Result<Value, AcpError>,
    ) {
        let sink = match st.turns.get(&session) {
            Some((pid, _)) if *pid == id => st.turns.remove(&session),
            _ => None,
        };
        drop(st);
        let outcome = result.and_then(|v| wire::stop_reason(&v));
        tracing::debug!(id, session_id = %session, outcome = ?outcome, "<- prompt done");
        if let Some((_, sink)) = sink {
            sink.finish(outcome);
        }
    }

    fn on_notification(peer: &Arc<Inner>, method: String, params: Value) {
        if method != "session/update" {
            tracing::debug!(%method, "agent notification ignored");
            return;
        }
        let Some(session) = wire::session_id(&params) else {
            tracing::debug!("session/update without sessionId ignored");
            return;
        };
        let Some(update) = params.get("update").and_then(wire::update) else {
            tracing::debug!(
                session_id = session,
                "session/update without sessionUpdate ignored"
            );
            return;
        };
        let kind = params
            .pointer("/update/sessionUpdate")
            .and_then(serde_json::Value::as_str);
        match prompt_sink(peer, session) {
            Some(sink) => sink.push(update),
            None => tracing::debug!(
                session_id = session,
                kind,
                "update outside a prompt dropped"
            ),
        }
    }

    fn on_request(peer: &Arc<Inner>, id: Value, method: String, params: Value) {
        answer_request(peer, id, method, params);
    }

    fn on_fail(prompts: Prompts, _sessions: Vec<String>, err: &AcpError) {
        for (_, (_, sink)) in prompts {
            sink.finish(Err(err.clone()));
        }
    }
}

/// The sink of the running prompt of `session`.
fn prompt_sink(peer: &Inner, session: &str) -> Option<Arc<PromptSink>> {
    peer.lock().turns.get(session).map(|(_, s)| s.clone())
}

/// Agent→client requests: interactions are refused and their session cancelled (GroupX §9);
/// everything else (fs/*, terminal/*, extensions) is "method not found", since `initialize`
/// advertised none of it.
fn answer_request(peer: &Arc<Inner>, id: Value, method: String, params: Value) {
    let session = wire::session_id(&params).map(str::to_string);
    let mut lines = Vec::new();
    if wire::is_interaction(&method) {
        tracing::debug!(%method, session_id = ?session, "<- interaction request refused");
        lines.push(match wire::interaction_refusal(&method) {
            Some(result) => wire::RPC.result_line(&id, &result),
            None => wire::RPC.error_line(&id, METHOD_NOT_FOUND, "interactions are not supported"),
        });
        if let Some(session) = &session {
            if let Some(sink) = prompt_sink(peer, session) {
                sink.push(Update::UnexpectedInteraction {
                    method: method.clone(),
                });
            }
            lines.push(
                wire::RPC.notification_line("session/cancel", Some(&json!({"sessionId": session}))),
            );
        }
    } else {
        tracing::debug!(%method, "<- unsupported agent request");
        lines.push(wire::RPC.error_line(&id, METHOD_NOT_FOUND, "method not found"));
    }
    // Written from a task: the reader must keep reading even if the agent is not reading
    // its stdin right now (both pipes full would deadlock). One write keeps the answer and
    // the cancel adjacent and in order.
    let inner = peer.clone();
    tokio::spawn(async move {
        let _ = inner
            .write_bounded(&lines.concat(), "agent request answer")
            .await;
    });
}
