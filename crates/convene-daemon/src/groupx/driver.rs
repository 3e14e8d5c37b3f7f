//! One interface over the native drivers a lane can run (§3.3: structured sessions only):
//! ACP (`convene-acp`) and the Codex app-server (`convene-codex`). Both stream the same
//! `Update` (from `convene-agentio`); a Codex turn's outcome is mapped onto the ACP shapes the
//! lane consumes, so the turn logic is written once.

use std::path::Path;
use std::time::Duration;

use convene_acp::{AcpAgent, AcpConfig, AcpError, PromptRun, StopReason};
use convene_codex::{CodexAgent, CodexConfig, CodexError, TurnEnd};
use serde_json::Value;
use tokio::sync::oneshot;

use super::config::AgentConfig;
use super::native_sessions;

/// How long starting an agent and its session may take.
const START_BOUND: Duration = Duration::from_secs(60);

/// Starts `cfg`'s session within a bound, resuming the native session kept under `cfg.id` in
/// `home` when the agent can load it, and keeps the new native id for the next start. Shared
/// by the lanes and the room assistant.
pub(super) async fn open(
    home: &Path,
    cfg: &AgentConfig,
    mcp: Option<Value>,
) -> Result<Started, String> {
    let cwd = cfg.cwd.clone().unwrap_or_else(|| home.to_path_buf());
    let previous = native_sessions::get(home, &cfg.id);
    match tokio::time::timeout(START_BOUND, Native::start(cfg, &cwd, previous, mcp)).await {
        Ok(Ok(st)) => {
            native_sessions::put(home, &cfg.id, &st.native_id);
            Ok(st)
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(format!(
            "agent did not start within {}s",
            START_BOUND.as_secs()
        )),
    }
}

/// A live native session.
pub(super) enum Native {
    /// An ACP agent and its session.
    Acp {
        /// The agent process.
        agent: AcpAgent,
        /// `sessionId`.
        session: String,
    },
    /// A Codex app-server and its thread.
    Codex {
        /// The app-server process.
        agent: CodexAgent,
        /// `threadId`.
        thread: String,
        /// The running turn's id (what `turn/interrupt` needs).
        turn: parking_lot::Mutex<Option<String>>,
    },
}

/// A started session.
pub(super) struct Started {
    /// The session.
    pub native: Native,
    /// Whether it is the agent's earlier session, loaded again.
    pub resumed: bool,
    /// Its native id (kept broker-internal for the next resume).
    pub native_id: String,
}

fn codex_err(e: CodexError) -> AcpError {
    match e {
        CodexError::Spawn(s) => AcpError::Spawn(s),
        CodexError::Exited { code, stderr_tail } => AcpError::Exited { code, stderr_tail },
        CodexError::Protocol(s) => AcpError::Protocol(s),
        CodexError::Rpc { code, message } => AcpError::Rpc { code, message },
        CodexError::Timeout(m) => AcpError::Timeout(m),
        CodexError::LineTooLong => AcpError::LineTooLong,
        CodexError::Closed => AcpError::Closed,
        CodexError::TurnBusy(s) => AcpError::SessionBusy(s),
    }
}

impl Native {
    /// Spawns the agent and opens (or resumes `previous`) its session. `mcp` is the GroupX MCP
    /// server entry to attach where the driver can attach one.
    pub async fn start(
        cfg: &AgentConfig,
        cwd: &Path,
        previous: Option<String>,
        mcp: Option<Value>,
    ) -> Result<Started, String> {
        let env: Vec<(String, String)> = cfg
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let timeout = Duration::from_secs(30);
        if cfg.driver == "codex" {
            let agent = CodexAgent::spawn(&CodexConfig {
                command: cfg.command.clone(),
                cwd: cwd.to_path_buf(),
                env,
                request_timeout: timeout,
            })
            .await
            .map_err(|e| e.to_string())?;
            if let Some(old) = previous {
                if agent.resume_thread(&old).await.is_ok() {
                    return Ok(Started {
                        native: Native::Codex {
                            agent,
                            thread: old.clone(),
                            turn: parking_lot::Mutex::new(None),
                        },
                        resumed: true,
                        native_id: old,
                    });
                }
            }
            let thread = agent.start_thread(cwd).await.map_err(|e| e.to_string())?;
            return Ok(Started {
                native: Native::Codex {
                    agent,
                    thread: thread.clone(),
                    turn: parking_lot::Mutex::new(None),
                },
                resumed: false,
                native_id: thread,
            });
        }
        let agent = AcpAgent::spawn(&AcpConfig {
            command: cfg.command.clone(),
            cwd: cwd.to_path_buf(),
            env,
            request_timeout: timeout,
        })
        .await
        .map_err(|e| e.to_string())?;
        // GroupX tools only for agents that can attach an HTTP MCP server (§6, §12).
        let http_mcp = agent.capabilities().raw["agentCapabilities"]["mcpCapabilities"]["http"]
            == Value::Bool(true);
        let servers: Vec<Value> = mcp.filter(|_| http_mcp).into_iter().collect();
        let mut resumed = None;
        if let Some(old) = previous {
            if agent.capabilities().load_session
                && agent.load_session(&old, cwd, servers.clone()).await.is_ok()
            {
                resumed = Some(old);
            }
        }
        let (session, was_resumed) = match resumed {
            Some(s) => (s, true),
            None => (
                agent
                    .new_session(cwd, servers)
                    .await
                    .map_err(|e| e.to_string())?,
                false,
            ),
        };
        if let Some(m) = &cfg.mode {
            agent
                .set_mode(&session, m)
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(Started {
            native: Native::Acp {
                agent,
                session: session.clone(),
            },
            resumed: was_resumed,
            native_id: session,
        })
    }

    /// Starts a turn; returns once the prompt is handed over.
    pub async fn prompt(&self, text: &str) -> Result<PromptRun, AcpError> {
        match self {
            Native::Acp { agent, session } => agent.prompt(session, text).await,
            Native::Codex {
                agent,
                thread,
                turn,
            } => {
                let run = agent.start_turn(thread, text).await.map_err(codex_err)?;
                *turn.lock() = Some(run.turn_id.clone());
                // Updates are one type in both crates (convene-agentio); only the outcome maps.
                let (done_tx, done_rx) = oneshot::channel();
                let done = run.done;
                tokio::spawn(async move {
                    let end = match done.await {
                        Ok(Ok(TurnEnd::Completed)) => Ok(StopReason::EndTurn),
                        Ok(Ok(TurnEnd::Interrupted)) => Ok(StopReason::Cancelled),
                        Ok(Ok(TurnEnd::Failed(m))) => Err(AcpError::Rpc {
                            code: 0,
                            message: m,
                        }),
                        Ok(Err(e)) => Err(codex_err(e)),
                        Err(_) => Err(AcpError::Closed),
                    };
                    let _ = done_tx.send(end);
                });
                Ok(PromptRun {
                    updates: run.updates,
                    done: done_rx,
                })
            }
        }
    }

    /// Asks the running turn to stop (native cancel / interrupt).
    pub async fn cancel(&self) {
        match self {
            Native::Acp { agent, session } => {
                let _ = agent.cancel(session).await;
            }
            Native::Codex {
                agent,
                thread,
                turn,
            } => {
                let t = turn.lock().clone();
                if let Some(t) = t {
                    let _ = agent.interrupt(thread, &t).await;
                }
            }
        }
    }

    /// Whether the process and its connection are still usable.
    pub fn is_alive(&self) -> bool {
        match self {
            Native::Acp { agent, .. } => agent.is_alive(),
            Native::Codex { agent, .. } => agent.is_alive(),
        }
    }

    /// Stops the agent process (group).
    pub async fn shutdown(self, grace: Duration) {
        match self {
            Native::Acp { agent, .. } => agent.shutdown(grace).await,
            Native::Codex { agent, .. } => agent.shutdown(grace).await,
        }
    }
}
