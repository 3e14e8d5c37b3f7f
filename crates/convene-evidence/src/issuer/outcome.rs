//! After the tool ran: outcome records (§4.5, §6.2), re-sealed and stored like receipts.

use super::Verifier;
use crate::error::EvidenceError;
use crate::jcs::{canonicalize, sha256_hex};
use crate::receipt::{OutcomeStatus, Receipt};
use serde_json::Value;

impl Verifier {
    /// Bind the tool response after invocation (§6.2) and re-seal as confirmed.
    pub fn finalize(&self, issued: &Receipt, response: &Value) -> Result<Receipt, EvidenceError> {
        self.check_own(issued)?;
        let mut r = issued.clone();
        r.response_hash = format!("sha256:{}", sha256_hex(canonicalize(response)?.as_bytes()));
        r.outcome_status = Some(OutcomeStatus::Confirmed);
        self.seal_and_store(&mut r)?;
        if let Ok(mut open) = self.open_indeterminate.lock() {
            open.retain(|_, t| t != &r.trace_id);
        }
        Ok(r)
    }

    /// Record that the outcome is unknown; the action stays blocked until reconciled (§4.5).
    pub fn mark_indeterminate(
        &self,
        issued: &Receipt,
        agent_id: &str,
    ) -> Result<Receipt, EvidenceError> {
        self.check_own(issued)?;
        let mut r = issued.clone();
        r.outcome_status = Some(OutcomeStatus::Indeterminate);
        self.seal_and_store(&mut r)?;
        let mut open = self
            .open_indeterminate
            .lock()
            .map_err(|_| EvidenceError::Invalid("lock poisoned".into()))?;
        open.insert(format!("{agent_id}|{}", r.action), r.trace_id.clone());
        Ok(r)
    }

    /// Reconcile an indeterminate record with the observed response.
    pub fn reconcile(
        &self,
        indeterminate: &Receipt,
        response: &Value,
    ) -> Result<Receipt, EvidenceError> {
        self.finalize(indeterminate, response)
    }

    fn check_own(&self, r: &Receipt) -> Result<(), EvidenceError> {
        // After a cutover, receipts issued during the overlap carry our key as cosigner.
        let pk = self.keys.public();
        if r.issuer != self.settings.issuer
            || !(r.verify_signature(&pk) || r.verify_cosignature(&pk))
        {
            return Err(EvidenceError::SignatureInvalid);
        }
        Ok(())
    }

    /// Re-seals an outcome record and appends it to the store, if there is one.
    fn seal_and_store(&self, r: &mut Receipt) -> Result<(), EvidenceError> {
        r.seal_dual(&self.keys, self.next_keys())?;
        if let Some(store) = &self.store {
            store.lock()?.append(r, None)?;
        }
        Ok(())
    }
}
