//! `evidence chain build|verify|prune|seal`: evidence chains (§11.4) as JSON files.
//!
//! Exit codes: 0 built / valid / pruned / sealed; 1 refused or invalid (the JSON answer says
//! why); 2 usage; 5 a file could not be read or written.

use super::{
    load_key, now_flag, read_json, receipt_of, trust_from, write_out, Args, Fail, EXIT_OK,
    EXIT_REJECTED,
};
use crate::chain::EvidenceChain;
use crate::error::EvidenceError;
use crate::issuer::{now_unix, VerifierSettings};
use crate::seal::ChainSeal;
use serde_json::json;

/// Dispatch one chain subcommand.
pub(super) fn run(step: &str, a: &Args) -> Result<i32, Fail> {
    match step {
        "build" => build(a),
        "verify" => verify(a),
        "prune" => prune(a),
        "seal" => seal(a),
        _ => Err(Fail::Usage(format!("unknown subcommand chain {step}"))),
    }
}

fn build(a: &Args) -> Result<i32, Fail> {
    let mut it = a.pos.iter();
    let first = it
        .next()
        .ok_or_else(|| Fail::Usage("no receipts given".into()))?;
    // A receipt that does not link to the one before it is refused (exit 1), not built in.
    let refused = |e: EvidenceError| match e {
        EvidenceError::Chain(m) => Fail::Code(EXIT_REJECTED, json!({"built": false, "reason": m})),
        other => other.into(),
    };
    let mut c = EvidenceChain::new(receipt_of(&read_json(first)?)?).map_err(refused)?;
    for p in it {
        c.append(receipt_of(&read_json(p)?)?).map_err(refused)?;
    }
    write_out(a.get("out"), &serde_json::to_value(&c)?)?;
    Ok(EXIT_OK)
}

fn verify(a: &Args) -> Result<i32, Fail> {
    let c: EvidenceChain = serde_json::from_value(read_json(a.req("chain")?)?)?;
    let hint = c.receipts.first().map(|e| e.receipt.issuer.clone());
    let (ts, _) = trust_from(a, hint.as_deref())?;
    let now = now_flag(a)?;
    let mut res = match a.get("mode").unwrap_or("full") {
        "full" => c.verify_full(&ts, now),
        "spot" => {
            let hop = a
                .req("hop")?
                .parse()
                .map_err(|_| Fail::Usage("bad --hop".into()))?;
            c.verify_spot(hop, &ts, now)
        }
        m => return Err(Fail::Usage(format!("unknown mode {m}"))),
    };
    if a.has("require-seal") && res.chain_valid && !res.sealed {
        res.chain_valid = false;
        res.failure_reason = Some("chain is not sealed: its end is not proven".into());
    }
    write_out(None, &serde_json::to_value(&res)?)?;
    Ok(if res.chain_valid {
        EXIT_OK
    } else {
        EXIT_REJECTED
    })
}

fn prune(a: &Args) -> Result<i32, Fail> {
    let p = a.req("chain")?;
    let mut c: EvidenceChain = serde_json::from_value(read_json(p)?)?;
    let hop = a
        .req("hop")?
        .parse()
        .map_err(|_| Fail::Usage("bad --hop".into()))?;
    c.prune(hop)?;
    write_out(Some(a.get("out").unwrap_or(p)), &serde_json::to_value(&c)?)?;
    Ok(EXIT_OK)
}

/// Verify the chain, then sign where it ends (with the last receipt's issuer unless
/// `--issuer`); a chain that does not verify is not sealed (exit 1).
fn seal(a: &Args) -> Result<i32, Fail> {
    let p = a.req("chain")?;
    let mut c: EvidenceChain = serde_json::from_value(read_json(p)?)?;
    let keys = load_key(a.req("key")?)?;
    let issuer = a
        .get("issuer")
        .map(String::from)
        .or_else(|| c.receipts.last().map(|e| e.receipt.issuer.clone()))
        .unwrap_or(VerifierSettings::default().issuer);
    let hint = c.receipts.first().map(|e| e.receipt.issuer.clone());
    let (ts, _) = trust_from(a, hint.as_deref())?;
    let now = now_flag(a)?.unwrap_or_else(now_unix);
    // An old seal says nothing about what is attested now.
    c.seal = None;
    let res = c.verify_full(&ts, None);
    if !res.chain_valid {
        write_out(
            None,
            &json!({"sealed": false, "reason": res.failure_reason, "broken_at": res.broken_at}),
        )?;
        return Ok(EXIT_REJECTED);
    }
    let seal = match ChainSeal::sign(&c, &keys, &issuer, now) {
        Ok(s) => s,
        Err(EvidenceError::Chain(m)) => {
            write_out(None, &json!({"sealed": false, "reason": m}))?;
            return Ok(EXIT_REJECTED);
        }
        Err(e) => return Err(e.into()),
    };
    c.seal = Some(seal);
    write_out(Some(a.get("out").unwrap_or(p)), &serde_json::to_value(&c)?)?;
    Ok(EXIT_OK)
}
