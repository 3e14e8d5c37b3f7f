//! [`Update`]: one step of a running turn, the same for every protocol this crate serves.

/// One update of a running turn, reduced to what the broker uses.
///
/// ACP maps `session/update` kinds onto it, Codex its item and turn notifications; the
/// comments name both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Update {
    /// Agent message text (ACP `agent_message_chunk`; Codex `item/agentMessage/delta`, and
    /// `"\n\n"` between two agent messages of one turn).
    MessageChunk(String),
    /// Reasoning text (ACP `agent_thought_chunk`; Codex `item/reasoning/*Delta`).
    ThoughtChunk(String),
    /// A new tool call (ACP `tool_call`; Codex `item/started` of a tool-like item).
    ToolCall {
        /// `toolCallId` (ACP) or the item id (Codex).
        id: String,
        /// Human-readable title (Codex: the command, the changed paths, `server/tool`, ...).
        title: String,
        /// ACP `kind` (read, edit, execute, ...) or the Codex item type (`commandExecution`, ...).
        kind: Option<String>,
        /// ACP `status` (pending, in_progress, ...) or the Codex item status (`inProgress`, ...).
        status: Option<String>,
    },
    /// Changed fields of an earlier tool call (ACP `tool_call_update`; Codex `item/completed`
    /// of a tool-like item).
    ToolCallUpdate {
        /// `toolCallId` (ACP) or the item id (Codex).
        id: String,
        /// New title, if changed.
        title: Option<String>,
        /// New or final status (Codex: `completed`, `failed`, `declined`).
        status: Option<String>,
    },
    /// The peer asked for permission, approval or user input; it was refused and the turn
    /// cancelled (ACP) or interrupted (Codex).
    UnexpectedInteraction {
        /// The JSON-RPC method of the peer's request.
        method: String,
    },
    /// Any other update (plans, non-text chunks, mode changes, non-tool items, `error`,
    /// future kinds).
    Other {
        /// ACP: the `sessionUpdate` discriminator. Codex: the notification method, with
        /// `:<item type>` for `item/started` / `item/completed`.
        kind: String,
    },
}
