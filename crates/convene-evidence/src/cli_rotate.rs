//! `evidence rotate announce|cutover|retire|status`: §7.3 phases on an issuer's key file.
//!
//! Exit codes: 0 the step was taken (or status printed); 1 refused — wrong phase, or the
//! phase's waiting time has not elapsed (the JSON answer says from when it is allowed);
//! 2 usage; 5 the key file could not be read or written.

use super::{
    load_key, load_key_file, manifest_for, ttl_flag, write_out, Args, Fail, EXIT_OK, EXIT_REJECTED,
};
use crate::issuer::{now_unix, VerifierSettings};
use crate::keys::{KeyFile, KeyMaterial};
use crate::rotation::{self, Refused, Rotation};
use serde_json::{json, Value};
use std::path::Path;

/// Dispatch one rotation step.
pub(super) fn run(step: &str, a: &Args) -> Result<i32, Fail> {
    let path = a.req("key")?;
    let mut file = load_key_file(path)?;
    let now = now_unix();
    let outcome = match step {
        "announce" => {
            let (next, ttl) = announce_args(a)?;
            rotation::announce(&mut file, &next, now, ttl)
        }
        "cutover" => rotation::cutover(&file, now).map(|f| file = f),
        "retire" => rotation::retire(&mut file, now).map(|_| ()),
        "status" => Ok(()),
        other => return Err(Fail::Usage(format!("unknown rotate step {other}"))),
    };
    match outcome {
        Ok(()) => {
            if step != "status" {
                write_key_file(Path::new(path), &file)?;
            }
            let mut out = status(&file)?;
            let manifest = manifest_for(a, &file)?;
            out["manifest_hash"] = json!(manifest.hash()?);
            match a.get("manifest") {
                Some(p) => write_out(Some(p), &serde_json::to_value(&manifest)?)?,
                None => out["manifest"] = serde_json::to_value(&manifest)?,
            }
            write_out(None, &out)?;
            Ok(EXIT_OK)
        }
        Err(Refused::WrongPhase(reason)) => {
            let mut out = status(&file)?;
            out["refused"] = json!(reason);
            write_out(None, &out)?;
            Ok(EXIT_REJECTED)
        }
        Err(Refused::TooEarly { not_before }) => {
            let mut out = status(&file)?;
            out["refused"] = json!(format!("{step} is allowed from {not_before}"));
            out["not_before"] = json!(not_before);
            write_out(None, &out)?;
            Ok(EXIT_REJECTED)
        }
    }
}

/// The incoming key (`--next` file, or a fresh one from the OS CSPRNG) and lifetime.
fn announce_args(a: &Args) -> Result<(KeyMaterial, f64), Fail> {
    let next = match a.get("next") {
        Some(p) => load_key(p)?,
        None => KeyMaterial::generate(None),
    };
    let ttl = ttl_flag(a)?.unwrap_or(VerifierSettings::default().ttl_secs);
    Ok((next, ttl))
}

/// Public view of where the file stands (no secrets).
fn status(f: &KeyFile) -> Result<Value, Fail> {
    let mut out = json!({"key_id": f.key_id, "fingerprint": f.fingerprint,
                         "public_key": f.public_key, "phase": Value::Null});
    match &f.rotation {
        None => {}
        Some(
            r @ Rotation::DualSign {
                next,
                since,
                ttl_secs,
            },
        ) => {
            out["phase"] = json!(r.phase());
            out["next"] = json!({"key_id": next.key_id, "fingerprint": next.fingerprint,
                                 "public_key": next.public_key});
            out["dual_sign_since"] = json!(since);
            out["ttl_secs"] = json!(ttl_secs);
            out["cutover_not_before"] = json!(r.cutover_not_before());
        }
        Some(
            r @ Rotation::CutOver {
                previous_key_id,
                previous_public_key,
                previous_fingerprint,
                cutover_at,
                ttl_secs,
            },
        ) => {
            out["phase"] = json!(r.phase());
            out["previous"] = json!({"key_id": previous_key_id,
                "fingerprint": previous_fingerprint, "public_key": previous_public_key});
            out["cutover_at"] = json!(cutover_at);
            out["ttl_secs"] = json!(ttl_secs);
            out["retire_not_before"] = json!(r.retire_not_before());
        }
    }
    Ok(out)
}

/// Replace the key file atomically; it holds secrets, so it is owner-only from creation.
fn write_key_file(path: &Path, f: &KeyFile) -> Result<(), Fail> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("json.tmp");
    let body = serde_json::to_string_pretty(f)? + "\n";
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    out.write_all(body.as_bytes())?;
    out.sync_all()?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}
