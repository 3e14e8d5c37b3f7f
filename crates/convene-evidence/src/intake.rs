//! Evidence intake (§3): input contract, normalization, size limits, errors.

use crate::error::{IntakeError, IntakeErrorCode as C};
use crate::jcs::{canonicalize, MAX_SAFE_INTEGER};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde_json::{Map, Value};
use unicode_normalization::UnicodeNormalization;

/// The only intake_version this implementation supports.
pub const INTAKE_VERSION: &str = "1.3";
/// Figure 2: max canonical params bytes.
pub const MAX_PARAMS: usize = 64 * 1024;
/// Figure 2: max tool name bytes.
pub const MAX_TOOL: usize = 256;
/// Figure 2: max agent_id bytes.
pub const MAX_AGENT_ID: usize = 512;
/// Figure 2: max canonical runtime_context bytes.
pub const MAX_RUNTIME_CONTEXT: usize = 16 * 1024;
/// Figure 2: max total intake message bytes.
pub const MAX_TOTAL: usize = 128 * 1024;

/// A normalized, validated Command (§3.1).
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    /// Identifier of the invoking agent.
    pub agent_id: String,
    /// Tool name.
    pub tool: String,
    /// Structured tool parameters (NFC-normalized).
    pub params: Value,
    /// UTC Unix timestamp of the request, seconds.
    pub timestamp: f64,
    /// Trace id of this verification event.
    pub trace_id: String,
    /// Optional runtime context object.
    pub runtime_context: Option<Value>,
    /// Optional delegation chain information (parent envelope).
    pub delegation_chain: Option<Value>,
    /// Canonical params bytes (computed once, reused for hashing).
    pub canonical_params: String,
}

/// Encode binary data for params as padded standard base64 (§3.2).
pub fn binary_param(bytes: &[u8]) -> Value {
    Value::String(B64.encode(bytes))
}

fn err(
    code: crate::error::IntakeErrorCode,
    msg: impl Into<String>,
    trace: &Option<&str>,
) -> IntakeError {
    let mut e = IntakeError::new(code, msg);
    e.trace_id = trace.map(nfc);
    e
}

/// Parse raw intake bytes (§3.3: malformed JSON is INTAKE_MALFORMED).
pub fn parse_bytes(raw: &[u8]) -> Result<Command, IntakeError> {
    if raw.len() > MAX_TOTAL {
        return Err(IntakeError::new(
            C::IntakeOverflow,
            "intake message exceeds 128 KB",
        ));
    }
    let v: Value = serde_json::from_slice(raw)
        .map_err(|_| IntakeError::new(C::IntakeMalformed, "intake message is not valid JSON"))?;
    parse_value(&v)
}

/// Validate and normalize an intake JSON value into a Command.
pub fn parse_value(v: &Value) -> Result<Command, IntakeError> {
    let obj = v.as_object().ok_or_else(|| {
        IntakeError::new(C::IntakeMalformed, "intake message must be a JSON object")
    })?;
    // Best-effort trace id for error correlation (§3.4), taken before validation;
    // normalized only when an error is built.
    let trace = obj
        .get("trace_id")
        .and_then(Value::as_str)
        .filter(|s| s.len() <= 128);

    // Total size is measured on the canonical form so whitespace cannot hide bulk;
    // the exact form is only computed when a cheap upper bound could exceed the limit.
    if size_upper_bound(v) > MAX_TOTAL
        && canonicalize(v)
            .map_err(|e| err(C::IntakeMalformed, e.to_string(), &trace))?
            .len()
            > MAX_TOTAL
    {
        return Err(err(
            C::IntakeOverflow,
            "intake message exceeds 128 KB",
            &trace,
        ));
    }

    for f in [
        "intake_version",
        "agent_id",
        "tool",
        "params",
        "timestamp",
        "trace_id",
    ] {
        if !obj.contains_key(f) || obj.get(f) == Some(&Value::Null) {
            return Err(err(
                C::IntakeMissingField,
                format!("Required field '{f}' is missing"),
                &trace,
            ));
        }
    }
    for k in obj.keys() {
        if !matches!(
            k.as_str(),
            "intake_version"
                | "agent_id"
                | "tool"
                | "params"
                | "timestamp"
                | "trace_id"
                | "runtime_context"
                | "delegation_chain"
        ) {
            return Err(err(
                C::IntakeMalformed,
                format!("Unknown field '{}'", truncate(k)),
                &trace,
            ));
        }
    }
    let version = get_str(obj, "intake_version", &trace)?;
    if version != INTAKE_VERSION {
        return Err(err(
            C::IntakeVersionUnsupported,
            "intake_version is not supported (expected \"1.3\")",
            &trace,
        ));
    }
    let agent_id = get_str(obj, "agent_id", &trace)?;
    let tool = get_str(obj, "tool", &trace)?;
    let trace_id = get_str(obj, "trace_id", &trace)?;
    if agent_id.is_empty() || tool.is_empty() || trace_id.is_empty() {
        return Err(err(
            C::IntakeMalformed,
            "agent_id, tool and trace_id must be non-empty",
            &trace,
        ));
    }
    if tool.len() > MAX_TOOL {
        return Err(err(
            C::IntakeOverflow,
            "tool name exceeds 256 bytes",
            &trace,
        ));
    }
    if agent_id.len() > MAX_AGENT_ID {
        return Err(err(C::IntakeOverflow, "agent_id exceeds 512 bytes", &trace));
    }
    let Some(params) = obj.get("params").filter(|p| p.is_object()) else {
        return Err(err(
            C::IntakeMalformed,
            "params must be a JSON object",
            &trace,
        ));
    };
    // nfc_value builds the normalized copy; the input is not cloned first.
    let params = nfc_value(params).map_err(|m| err(C::IntakeMalformed, m, &trace))?;
    let canonical_params =
        canonicalize(&params).map_err(|e| err(C::IntakeMalformed, e.to_string(), &trace))?;
    if canonical_params.len() > MAX_PARAMS {
        return Err(err(C::IntakeOverflow, "params exceed 64 KB", &trace));
    }
    let timestamp = parse_timestamp(obj.get("timestamp"), &trace)?;
    let runtime_context = match obj.get("runtime_context") {
        None | Some(Value::Null) => None,
        Some(rc @ Value::Object(_)) => {
            let rc = nfc_value(rc).map_err(|m| err(C::IntakeMalformed, m, &trace))?;
            let c =
                canonicalize(&rc).map_err(|e| err(C::IntakeMalformed, e.to_string(), &trace))?;
            if c.len() > MAX_RUNTIME_CONTEXT {
                return Err(err(
                    C::IntakeOverflow,
                    "runtime_context exceeds 16 KB",
                    &trace,
                ));
            }
            Some(rc)
        }
        Some(_) => {
            return Err(err(
                C::IntakeMalformed,
                "runtime_context must be an object",
                &trace,
            ))
        }
    };
    let delegation_chain = match obj.get("delegation_chain") {
        None | Some(Value::Null) => None,
        Some(d @ Value::Object(_)) => {
            let d = nfc_value(d).map_err(|m| err(C::IntakeMalformed, m, &trace))?;
            check_delegation(&d).map_err(|m| err(C::IntakeMalformed, m, &trace))?;
            Some(d)
        }
        Some(_) => {
            return Err(err(
                C::IntakeMalformed,
                "delegation_chain must be an object",
                &trace,
            ))
        }
    };
    Ok(Command {
        agent_id,
        tool,
        params,
        timestamp,
        trace_id,
        runtime_context,
        delegation_chain,
        canonical_params,
    })
}

/// The linkage fields end up signed in the receipt, so their shape is checked here.
fn check_delegation(d: &Value) -> Result<(), String> {
    match d.get("previous_receipt_hash") {
        None => {}
        Some(Value::String(h))
            if h.len() == 71
                && h.starts_with("sha256:")
                && h[7..]
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) => {}
        Some(_) => {
            return Err("delegation_chain.previous_receipt_hash must be sha256:<64 hex>".into())
        }
    }
    match d.get("parent_trace_id") {
        None | Some(Value::String(_)) => {}
        Some(_) => return Err("delegation_chain.parent_trace_id must be a string".into()),
    }
    match d.get("hop_count") {
        None => Ok(()),
        // §11.2: chains beyond 16 hops are flagged, not extended.
        Some(h) if h.as_u64().is_some_and(|n| n <= 16) => Ok(()),
        Some(_) => Err("delegation_chain.hop_count must be an integer in 0..=16".into()),
    }
}

/// Over-estimate of the canonical length (every byte escaped as \\uXXXX, 32 per number).
fn size_upper_bound(v: &Value) -> usize {
    match v {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 32,
        Value::String(s) => s.len() * 6 + 2,
        Value::Array(a) => 2 + a.iter().map(|x| size_upper_bound(x) + 1).sum::<usize>(),
        Value::Object(m) => {
            2 + m
                .iter()
                .map(|(k, x)| k.len() * 6 + 4 + size_upper_bound(x))
                .sum::<usize>()
        }
    }
}

/// NFC form; ASCII is already NFC, so skip the normalizer for it.
fn nfc(s: &str) -> String {
    if s.is_ascii() {
        s.to_string()
    } else {
        s.nfc().collect()
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(64).collect()
}

fn get_str(obj: &Map<String, Value>, f: &str, trace: &Option<&str>) -> Result<String, IntakeError> {
    match obj.get(f) {
        Some(Value::String(s)) => Ok(nfc(s)),
        _ => Err(err(
            C::IntakeMalformed,
            format!("Field '{f}' must be a string"),
            trace,
        )),
    }
}

/// NFC-normalize every string (keys included) and refuse non-I-JSON numbers.
fn nfc_value(v: &Value) -> Result<Value, String> {
    Ok(match v {
        Value::String(s) => Value::String(nfc(s)),
        Value::Array(a) => Value::Array(a.iter().map(nfc_value).collect::<Result<_, _>>()?),
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, val) in m {
                let nk = nfc(k);
                // Two keys that normalize to the same NFC form would silently collapse.
                if out.insert(nk, nfc_value(val)?).is_some() {
                    return Err("duplicate key after NFC normalization".into());
                }
            }
            Value::Object(out)
        }
        Value::Number(n) => {
            if n.as_f64().is_some_and(|f| !f.is_finite()) {
                return Err("NaN/Infinity not permitted".into());
            }
            if !exact_number(n) {
                return Err("number beyond 2^53 is not permitted".into());
            }
            v.clone()
        }
        other => other.clone(),
    })
}

/// Whether a JSON number is bound exactly by its canonical form: magnitude at most 2^53−1.
///
/// Beyond that, distinct integers share one double (10^20 and 10^20+1 both parse to 1e20,
/// and integers past 2^64 arrive here as floats, indistinguishable from `1e20`), so one
/// receipt would bind several different requests.
pub fn exact_number(n: &serde_json::Number) -> bool {
    if let Some(u) = n.as_u64() {
        return u <= MAX_SAFE_INTEGER;
    }
    if let Some(i) = n.as_i64() {
        return i.unsigned_abs() <= MAX_SAFE_INTEGER;
    }
    n.as_f64()
        .is_some_and(|f| f.is_finite() && f.abs() <= MAX_SAFE_INTEGER as f64)
}

/// Timestamps: a Unix number, or an RFC 3339 string whose offset is UTC (§3.2).
fn parse_timestamp(v: Option<&Value>, trace: &Option<&str>) -> Result<f64, IntakeError> {
    match v {
        Some(Value::Number(n)) => {
            let f = n
                .as_f64()
                .filter(|f| f.is_finite() && *f >= 0.0)
                .ok_or_else(|| {
                    err(
                        C::IntakeMalformed,
                        "timestamp must be a non-negative number",
                        trace,
                    )
                })?;
            if !exact_number(n) {
                return Err(err(C::IntakeMalformed, "timestamp beyond 2^53", trace));
            }
            Ok(f)
        }
        Some(Value::String(s)) => {
            let dt = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
                .map_err(|_| err(C::IntakeMalformed, "timestamp is not RFC 3339", trace))?;
            if dt.offset() != time::UtcOffset::UTC {
                return Err(err(
                    C::IntakeMalformed,
                    "timestamp offset must be UTC",
                    trace,
                ));
            }
            Ok(dt.unix_timestamp_nanos() as f64 / 1e9)
        }
        _ => Err(err(
            C::IntakeMalformed,
            "timestamp must be a number or UTC RFC 3339 string",
            trace,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> Value {
        json!({"intake_version":"1.3","agent_id":"agent-001","tool":"search_web",
               "params":{"query":"weather in Tokyo"},"timestamp":1722384000.0,
               "trace_id":"a1b2c3d4e5f67890"})
    }

    #[test]
    fn ccs_3_1_1_valid_command_parses() {
        let c = parse_value(&base()).unwrap();
        assert_eq!(c.tool, "search_web");
        assert_eq!(c.canonical_params, r#"{"query":"weather in Tokyo"}"#);
    }

    #[test]
    fn ccs_10_3_6_missing_fields_each() {
        for f in [
            "intake_version",
            "agent_id",
            "tool",
            "params",
            "timestamp",
            "trace_id",
        ] {
            let mut v = base();
            v.as_object_mut().unwrap().remove(f);
            let e = parse_value(&v).unwrap_err();
            assert_eq!(e.code, C::IntakeMissingField, "{f}");
            assert!(e.message.contains(f));
        }
    }

    #[test]
    fn ccs_3_1_2_version_unsupported() {
        let mut v = base();
        v["intake_version"] = json!("1.2");
        let e = parse_value(&v).unwrap_err();
        assert_eq!(e.code, C::IntakeVersionUnsupported);
        assert!(!e.code.retry_allowed());
    }

    #[test]
    fn ccs_3_2_1_nfc_normalization_gives_same_params() {
        let mut a = base();
        a["params"] = json!({"q": "caf\u{0065}\u{0301}"});
        let mut b = base();
        b["params"] = json!({"q": "caf\u{00e9}"});
        assert_eq!(
            parse_value(&a).unwrap().canonical_params,
            parse_value(&b).unwrap().canonical_params
        );
        let mut d = base();
        d["params"] = json!({"e\u{0301}": 1, "\u{00e9}": 2});
        assert_eq!(parse_value(&d).unwrap_err().code, C::IntakeMalformed);
    }

    #[test]
    fn ccs_3_2_3_timestamps_utc_only() {
        let mut v = base();
        v["timestamp"] = json!("2024-07-31T00:00:00Z");
        assert_eq!(parse_value(&v).unwrap().timestamp, 1722384000.0);
        v["timestamp"] = json!("2024-07-31T00:00:00+00:00");
        assert_eq!(parse_value(&v).unwrap().timestamp, 1722384000.0);
        v["timestamp"] = json!("2024-07-31T09:00:00+09:00");
        assert_eq!(parse_value(&v).unwrap_err().code, C::IntakeMalformed);
        v["timestamp"] = json!(true);
        assert_eq!(parse_value(&v).unwrap_err().code, C::IntakeMalformed);
    }

    #[test]
    fn ccs_3_2_4_binary_is_base64() {
        let mut v = base();
        v["params"] = json!({"blob": binary_param(&[0, 1, 2, 255])});
        let c = parse_value(&v).unwrap();
        assert_eq!(c.canonical_params, r#"{"blob":"AAEC/w=="}"#);
    }

    #[test]
    fn big_ints_and_non_json_refused() {
        let raw = br#"{"intake_version":"1.3","agent_id":"a","tool":"t","params":{"n":9007199254740993},"timestamp":1,"trace_id":"x"}"#;
        assert_eq!(parse_bytes(raw).unwrap_err().code, C::IntakeMalformed);
        // Past 2^64 serde_json yields a float: refused all the same (no shared hash).
        for n in [
            "100000000000000000001",
            "-9223372036854775809",
            "1e20",
            "-1.5e300",
        ] {
            let raw = format!(
                r#"{{"intake_version":"1.3","agent_id":"a","tool":"t","params":{{"n":{n}}},"timestamp":1,"trace_id":"x"}}"#
            );
            assert_eq!(
                parse_bytes(raw.as_bytes()).unwrap_err().code,
                C::IntakeMalformed,
                "{n}"
            );
        }
        let mut v = base();
        v["params"] = json!({"n": 9007199254740991_u64, "m": -9007199254740991_i64, "f": 1.5e15});
        assert!(parse_value(&v).is_ok(), "2^53-1 and smaller are exact");
        let raw = br#"{"intake_version":"1.3","agent_id":"a","tool":"t","params":{"n":NaN},"timestamp":1,"trace_id":"x"}"#;
        assert_eq!(parse_bytes(raw).unwrap_err().code, C::IntakeMalformed);
        let raw = br#"{"intake_version":"1.3","agent_id":"a","tool":"t","params":{"n":1e400},"timestamp":1,"trace_id":"x"}"#;
        assert_eq!(parse_bytes(raw).unwrap_err().code, C::IntakeMalformed);
        assert_eq!(
            parse_bytes(b"not json").unwrap_err().code,
            C::IntakeMalformed
        );
        let mut v = base();
        v["params"] = json!("a string");
        assert_eq!(parse_value(&v).unwrap_err().code, C::IntakeMalformed);
    }

    #[test]
    fn delegation_chain_shape_checked() {
        let mut v = base();
        v["delegation_chain"] = json!({"previous_receipt_hash": format!("sha256:{}", "a".repeat(64)),
                                        "parent_trace_id": "p", "hop_count": 3});
        assert!(parse_value(&v).is_ok());
        v["delegation_chain"]["previous_receipt_hash"] = json!("sha256:XYZ");
        assert_eq!(parse_value(&v).unwrap_err().code, C::IntakeMalformed);
        v["delegation_chain"] = json!({"hop_count": 17});
        assert_eq!(parse_value(&v).unwrap_err().code, C::IntakeMalformed);
        v["delegation_chain"] = json!([1]);
        assert_eq!(parse_value(&v).unwrap_err().code, C::IntakeMalformed);
    }

    #[test]
    fn ccs_3_2_5_size_limits_figure_2() {
        let mut v = base();
        v["tool"] = json!("t".repeat(257));
        assert_eq!(parse_value(&v).unwrap_err().code, C::IntakeOverflow);
        v["tool"] = json!("t".repeat(256));
        assert!(parse_value(&v).is_ok());
        let mut v = base();
        v["agent_id"] = json!("a".repeat(513));
        assert_eq!(parse_value(&v).unwrap_err().code, C::IntakeOverflow);
        let mut v = base();
        v["params"] = json!({"q": "x".repeat(64 * 1024)});
        assert_eq!(parse_value(&v).unwrap_err().code, C::IntakeOverflow);
        let mut v = base();
        v["runtime_context"] = json!({"env": "x".repeat(16 * 1024)});
        assert_eq!(parse_value(&v).unwrap_err().code, C::IntakeOverflow);
        let mut v = base();
        v["params"] = json!({"q": "x".repeat(60 * 1024)});
        v["delegation_chain"] = json!({"pad": "y".repeat(70 * 1024)});
        assert_eq!(parse_value(&v).unwrap_err().code, C::IntakeOverflow);
        assert_eq!(
            parse_bytes(&vec![b' '; MAX_TOTAL + 1]).unwrap_err().code,
            C::IntakeOverflow
        );
    }

    #[test]
    fn ccs_3_4_1_error_response_format_no_leak() {
        let mut v = base();
        v.as_object_mut().unwrap().remove("tool");
        let e = parse_value(&v).unwrap_err();
        let r = e.to_response();
        assert_eq!(r["error_code"], "INTAKE_MISSING_FIELD");
        assert_eq!(r["error_message"], "Required field 'tool' is missing");
        assert_eq!(r["retry_after"], Value::Null);
        assert_eq!(r["trace_id"], "a1b2c3d4e5f67890");
        // CCS-3.4-3: never a receipt field; no internals.
        assert!(r.get("receipt").is_none());
        let s = r.to_string();
        assert!(!s.contains("src/") && !s.contains("panicked") && !s.contains("key-"));
    }
}
