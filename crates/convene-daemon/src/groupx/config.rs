//! The broker's configuration: `<home>/groupx.json` (or `serve --groupx-config PATH`).
//!
//! ```json
//! {"agents": [{"id": "codex", "name": "Codex", "driver": "acp",
//!              "command": ["codex-acp"], "cwd": "/src/app", "enabled": true, "mode": "auto"}],
//!  "limits": {"messageBytes": 65536, "queuePerAgent": 32, "turnIdleMs": 600000,
//!             "contextCharacters": 200000}}
//! ```
//! Transport and access are not settings (§1: always structured, always unrestricted).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// One agent of the roster.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// Stable id: the agent is `agent:<id>` in GroupX and actor `<id>` in the ledger.
    pub id: String,
    /// Display name.
    #[serde(default)]
    pub name: String,
    /// Native driver: `acp` (Agent Client Protocol) or `codex` (the Codex app-server).
    #[serde(default = "acp")]
    pub driver: String,
    /// The agent CLI and its arguments.
    pub command: Vec<String>,
    /// Working directory of the agent (default: the home).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// Disabled agents are shown but get no turns.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// ACP session mode set after session/new|load, before the first prompt (Kimi: `auto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// A stable self-description given to the agent with every context packet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    /// Extra environment of the agent process (e.g. its API key variable).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub env: std::collections::BTreeMap<String, String>,
}

fn acp() -> String {
    "acp".into()
}
fn yes() -> bool {
    true
}

/// The optional room assistant (§10.7): a private agent beside the room that acts on it only
/// through the operator endpoint. Never a roster agent, a turn target or woken by `@all`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AssistantConfig {
    /// Native driver: `acp` or `codex`.
    pub driver: String,
    /// Display name (default `Assistant`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The assistant CLI and its arguments.
    pub command: Vec<String>,
    /// Working directory (default: the home).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// ACP session mode set before the first prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Extra environment of the process.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub env: std::collections::BTreeMap<String, String>,
    /// Whether the side conversation is offered.
    pub enabled: bool,
    /// Appended to the product's default prompt (never replaces it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_instructions: Option<String>,
}

/// Largest `extraInstructions`, bytes.
pub const MAX_EXTRA_INSTRUCTIONS: usize = 16 * 1024;

/// The adapter id of the assistant's private session (§3.1: never in the roster).
pub const ASSISTANT_ADAPTER_ID: &str = "__assistant__";

impl AssistantConfig {
    /// The display name.
    pub fn display_name(&self) -> &str {
        if self.name.is_empty() {
            "Assistant"
        } else {
            &self.name
        }
    }

    /// The same process settings as an agent card, for the shared driver code (its id is the
    /// reserved adapter id, which no roster agent can have).
    pub fn as_agent(&self) -> AgentConfig {
        AgentConfig {
            id: ASSISTANT_ADAPTER_ID.into(),
            name: self.display_name().into(),
            driver: self.driver.clone(),
            command: self.command.clone(),
            cwd: self.cwd.clone(),
            enabled: self.enabled,
            mode: self.mode.clone(),
            identity: None,
            env: self.env.clone(),
        }
    }
}

/// The assistant card's rules: a known driver, a command, bounded instructions.
pub fn validate_assistant(a: &AssistantConfig) -> Result<(), Invalid> {
    let bad = |field: &'static str, message: &str| Invalid {
        agent: None,
        field,
        message: message.into(),
    };
    if a.driver != "acp" && a.driver != "codex" {
        return Err(bad(
            "assistant.driver",
            "assistant driver must be `acp` or `codex`",
        ));
    }
    if a.command.is_empty() || a.command[0].is_empty() {
        return Err(bad("assistant.command", "assistant command is empty"));
    }
    if a.name.chars().count() > 64 {
        return Err(bad(
            "assistant.name",
            "assistant name is over 64 characters",
        ));
    }
    if a.extra_instructions
        .as_ref()
        .is_some_and(|t| t.len() > MAX_EXTRA_INSTRUCTIONS)
    {
        return Err(bad(
            "assistant.extraInstructions",
            "extraInstructions is over 16384 bytes",
        ));
    }
    Ok(())
}

/// Resource limits (§7).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Limits {
    /// Largest message content, bytes.
    #[serde(default = "d_message_bytes")]
    pub message_bytes: usize,
    /// Unfinished turns one agent may have queued or running.
    #[serde(default = "d_queue")]
    pub queue_per_agent: usize,
    /// A turn with no output for this long is cancelled and failed.
    #[serde(default = "d_idle")]
    pub turn_idle_ms: u64,
    /// Longest chain of agent-to-agent hops from a root message.
    #[serde(default = "d_hops")]
    pub max_hops: u64,
    /// Turns one root interaction may create in all.
    #[serde(default = "d_root_turns")]
    pub max_turns_per_root: usize,
    /// Turns one agent may be given within one root interaction.
    #[serde(default = "d_calls")]
    pub max_calls_per_agent_per_root: usize,
    /// The longest a groupx.ask / collect waits (the spec's cap is 60,000).
    #[serde(default = "d_ask")]
    pub ask_ms: u64,
    /// How often a supervisor may steer one worker turn (§6.7).
    #[serde(default = "d_steers")]
    pub steers_per_subject_turn: u32,
    /// Room context size `GET /api/context` measures against (characters, §10.5).
    #[serde(default = "d_context")]
    pub context_characters: usize,
}

fn d_hops() -> u64 {
    8
}
fn d_root_turns() -> usize {
    64
}
fn d_calls() -> usize {
    16
}
fn d_ask() -> u64 {
    60_000
}
fn d_steers() -> u32 {
    3
}

fn d_message_bytes() -> usize {
    64 * 1024
}
fn d_queue() -> usize {
    32
}
fn d_idle() -> u64 {
    600_000
}
fn d_context() -> usize {
    200_000
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            message_bytes: d_message_bytes(),
            queue_per_agent: d_queue(),
            turn_idle_ms: d_idle(),
            max_hops: d_hops(),
            max_turns_per_root: d_root_turns(),
            max_calls_per_agent_per_root: d_calls(),
            ask_ms: d_ask(),
            steers_per_subject_turn: d_steers(),
            context_characters: d_context(),
        }
    }
}

impl Limits {
    /// The idle bound as a duration.
    pub fn turn_idle(&self) -> Duration {
        Duration::from_millis(self.turn_idle_ms)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    agents: Vec<AgentConfig>,
    #[serde(default)]
    limits: Limits,
    #[serde(default)]
    assistant: Option<AssistantConfig>,
}

/// The loaded configuration.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Roster, in file order.
    pub agents: Vec<AgentConfig>,
    /// Limits.
    pub limits: Limits,
    /// The room assistant card, if any (§10.7).
    pub assistant: Option<AssistantConfig>,
    /// SHA-256 of the canonical config and its path (`runtimeKey`, §10.6).
    pub runtime_key: String,
    /// SHA-256 of the canonical path only (`runtimeScopeKey`).
    pub runtime_scope_key: String,
    /// The file this configuration was loaded from (`GET /api/setup`'s `configPath`).
    pub path: PathBuf,
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Unreadable file.
    #[error("groupx config {0}: {1}")]
    Io(PathBuf, std::io::Error),
    /// Not the expected JSON.
    #[error("groupx config {0}: {1}")]
    Parse(PathBuf, serde_json::Error),
    /// A rule of the roster or the limits is broken.
    #[error("groupx config {0}: {1}")]
    Invalid(PathBuf, Invalid),
}

/// A broken rule: which agent (index in the roster) and field, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Invalid {
    /// Index of the agent in `agents`; `None` for the limits.
    pub agent: Option<usize>,
    /// The field at fault (`id`, `driver`, `command`, or `limits`).
    pub field: &'static str,
    /// What is wrong.
    pub message: String,
}

/// Ids that name the broker's own parties, never a roster agent (§10.6).
const RESERVED: &[&str] = &["assistant", "__assistant__", "user", "system", "web"];

fn sha(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p);
    }
    hex::encode(h.finalize())
}

/// The roster and limits rules (§10.6: stable, unique, unreserved ids; a known driver; a command).
pub fn validate(agents: &[AgentConfig], l: &Limits) -> Result<(), Invalid> {
    let bad = |i: usize, field: &'static str, message: String| Invalid {
        agent: Some(i),
        field,
        message,
    };
    let mut seen = std::collections::HashSet::new();
    for (i, a) in agents.iter().enumerate() {
        let ok = !a.id.is_empty()
            && a.id.len() <= 64
            && a.id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !ok {
            return Err(bad(
                i,
                "id",
                format!("agent id {:?} must be 1-64 of [A-Za-z0-9_-]", a.id),
            ));
        }
        if RESERVED.contains(&a.id.as_str()) {
            return Err(bad(i, "id", format!("agent id {:?} is reserved", a.id)));
        }
        if !seen.insert(a.id.clone()) {
            return Err(bad(i, "id", format!("agent id {:?} appears twice", a.id)));
        }
        if a.driver != "acp" && a.driver != "codex" {
            return Err(bad(
                i,
                "driver",
                format!(
                    "agent {}: driver {:?} is not supported (`acp` or `codex`)",
                    a.id, a.driver
                ),
            ));
        }
        if a.command.is_empty() || a.command[0].is_empty() {
            return Err(bad(
                i,
                "command",
                format!("agent {}: command is empty", a.id),
            ));
        }
    }
    if l.message_bytes == 0
        || l.queue_per_agent == 0
        || l.max_turns_per_root == 0
        || l.max_calls_per_agent_per_root == 0
        || l.context_characters == 0
        || l.ask_ms > 60_000
    {
        return Err(Invalid {
            agent: None,
            field: "limits",
            message: "limits must be positive, and askMs at most 60000".into(),
        });
    }
    Ok(())
}

impl Config {
    /// Loads `path`; a missing file is an empty roster (the room works for the human alone).
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(ConfigError::Io(path.to_path_buf(), e)),
        };
        Self::from_text(path, &text)
    }

    /// Parses and validates `text` as the content of `path` (blank: an empty roster). The one
    /// place the rules live: `load` and `POST /api/setup` both come here.
    pub fn from_text(path: &Path, text: &str) -> Result<Self, ConfigError> {
        let canon_path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        let file: File = if text.trim().is_empty() {
            File::default()
        } else {
            serde_json::from_str(text).map_err(|e| ConfigError::Parse(path.to_path_buf(), e))?
        };
        validate(&file.agents, &file.limits)
            .map_err(|e| ConfigError::Invalid(path.to_path_buf(), e))?;
        if let Some(a) = &file.assistant {
            validate_assistant(a).map_err(|e| ConfigError::Invalid(path.to_path_buf(), e))?;
        }
        let canonical = serde_json::to_string(
            &serde_json::from_str::<serde_json::Value>(if text.trim().is_empty() {
                "{}"
            } else {
                text
            })
            .map_err(|e| ConfigError::Parse(path.to_path_buf(), e))?,
        )
        .unwrap_or_default();
        let p = canon_path.to_string_lossy();
        Ok(Self {
            runtime_key: sha(&[canonical.as_bytes(), p.as_bytes()]),
            runtime_scope_key: sha(&[p.as_bytes()]),
            agents: file.agents,
            limits: file.limits,
            assistant: file.assistant,
            path: path.to_path_buf(),
        })
    }

    /// An agent by its ledger id.
    pub fn agent(&self, id: &str) -> Option<&AgentConfig> {
        self.agents.iter().find(|a| a.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Config, ConfigError> {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("groupx.json");
        std::fs::write(&p, text).unwrap();
        Config::load(&p)
    }

    #[test]
    fn a_roster_loads_and_keys_are_stable_per_path() {
        let c = load(r#"{"agents":[{"id":"codex","command":["x"]}]}"#).unwrap();
        assert_eq!(c.agents[0].driver, "acp");
        assert!(c.agents[0].enabled);
        assert_eq!(c.runtime_key.len(), 64);
        assert_ne!(c.runtime_key, c.runtime_scope_key);
        assert!(c.assistant.is_none());
        let c = load(r#"{"assistant":{"driver":"acp","command":["x"],"enabled":true}}"#).unwrap();
        let a = c.assistant.unwrap();
        assert_eq!(a.display_name(), "Assistant");
        assert_eq!(a.as_agent().id, ASSISTANT_ADAPTER_ID);
    }

    #[test]
    fn bad_rosters_are_refused() {
        for t in [
            r#"{"agents":[{"id":"a","command":["x"]},{"id":"a","command":["y"]}]}"#,
            r#"{"agents":[{"id":"assistant","command":["x"]}]}"#,
            r#"{"agents":[{"id":"a b","command":["x"]}]}"#,
            r#"{"agents":[{"id":"a","command":[]}]}"#,
            r#"{"agents":[{"id":"a","command":["x"],"transport":"direct"}]}"#,
            r#"{"agents":[{"id":"a","command":["x"],"driver":"direct"}]}"#,
            r#"{"assistant":{"driver":"direct","command":["x"],"enabled":true}}"#,
            r#"{"assistant":{"driver":"acp","command":[],"enabled":true}}"#,
            r#"{"assistant":{"driver":"acp","command":["x"]}}"#,
            r#"{"assistant":{"driver":"acp","command":["x"],"enabled":true,"model":"m"}}"#,
        ] {
            assert!(load(t).is_err(), "{t}");
        }
    }
}
