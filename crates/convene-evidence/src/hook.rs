//! Daemon hook: the gate called before any agent tool call, and the event payload.

use crate::error::EvidenceError;
use crate::issuer::{IssuedReceipt, Verifier};
use crate::receipt::{Receipt, Verdict};
use serde_json::{json, Value};

/// Extension event kind the daemon appends for every receipt.
pub const EVENT_KIND: &str = "x.convene.evidence.receipt";

/// Decides whether a tool call may run. Err or a non-allow receipt means: do not run it.
pub trait ToolGate: Send + Sync {
    /// Evaluate an intake object; blocks until a receipt or an error exists (§3.1).
    fn decide(&self, intake: &Value) -> Result<IssuedReceipt, EvidenceError>;
}

impl ToolGate for Verifier {
    fn decide(&self, intake: &Value) -> Result<IssuedReceipt, EvidenceError> {
        Ok(self.issue(intake)?)
    }
}

/// Fail-closed helper: true only for a receipt whose verdict is allow (§8.1).
pub fn permits(decision: &Result<IssuedReceipt, EvidenceError>) -> bool {
    matches!(decision, Ok(r) if r.receipt.verdict == Verdict::Allow)
}

/// Event data payload for kind [`EVENT_KIND`].
pub fn event_payload(r: &Receipt) -> Result<Value, EvidenceError> {
    Ok(json!({
        "kind": EVENT_KIND,
        "trace_id": r.trace_id,
        "tool": r.tool,
        "verdict": r.verdict.as_str(),
        "outcome_status": r.outcome_status,
        "receipt_hash": r.receipt_hash()?,
        "receipt": r.to_value()?,
    }))
}
