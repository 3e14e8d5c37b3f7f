//! RFC 8785 JSON Canonicalization Scheme and hashing helpers.

use crate::error::EvidenceError;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Largest integer magnitude that survives IEEE-754 round trips (I-JSON).
pub const MAX_SAFE_INTEGER: u64 = (1u64 << 53) - 1;

/// Canonicalize a JSON value to its RFC 8785 string.
pub fn canonicalize(v: &Value) -> Result<String, EvidenceError> {
    let mut out = String::with_capacity(128);
    write_value(v, &mut out)?;
    Ok(out)
}

/// Canonical bytes of a JSON value.
pub fn canonical_bytes(v: &Value) -> Result<Vec<u8>, EvidenceError> {
    canonicalize(v).map(String::into_bytes)
}

/// Lowercase hex SHA-256 of arbitrary bytes.
pub fn sha256_hex(data: &[u8]) -> String {
    hex_lower(&Sha256::digest(data))
}

/// Lowercase hex of bytes (hot path: one table lookup per nibble, one allocation).
pub fn hex_lower(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = Vec::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)]);
        out.push(DIGITS[usize::from(b & 0x0f)]);
    }
    // Only ASCII digits were pushed.
    String::from_utf8(out).unwrap_or_default()
}

/// Lowercase hex SHA-256 of the JCS form of a value.
pub fn jcs_sha256_hex(v: &Value) -> Result<String, EvidenceError> {
    Ok(sha256_hex(canonicalize(v)?.as_bytes()))
}

/// Append the canonical form of a value.
pub(crate) fn write_value(v: &Value, out: &mut String) -> Result<(), EvidenceError> {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(n, out)?,
        Value::String(s) => write_string(s, out),
        Value::Array(a) => {
            out.push('[');
            for (i, item) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out)?;
            }
            out.push(']');
        }
        Value::Object(m) => {
            // RFC 8785 §3.2.3: sort by UTF-16 code units, not by UTF-8 bytes.
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort_unstable_by(|a, b| cmp_utf16(a, b));
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(k, out);
                out.push(':');
                if let Some(val) = m.get(*k) {
                    write_value(val, out)?;
                }
            }
            out.push('}');
        }
    }
    Ok(())
}

/// Compare two keys by UTF-16 code units (byte order is identical for ASCII).
pub(crate) fn cmp_utf16(a: &str, b: &str) -> std::cmp::Ordering {
    if a.is_ascii() && b.is_ascii() {
        a.cmp(b)
    } else {
        a.encode_utf16().cmp(b.encode_utf16())
    }
}

/// Append a JSON string literal with RFC 8785 escaping.
pub(crate) fn write_string(s: &str, out: &mut String) {
    out.push('"');
    let bytes = s.as_bytes();
    // Fast path (hashes, ids, URIs): a branch-free scan the compiler can vectorize.
    let needs_escape = bytes.iter().fold(false, |acc, &b| {
        acc | (b < 0x20) | (b == b'"') | (b == b'\\')
    });
    if !needs_escape {
        out.push_str(s);
        out.push('"');
        return;
    }
    // Copy unescaped runs in one go; only control characters, '"' and '\\' need work.
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: Option<&str> = match b {
            b'"' => Some("\\\""),
            b'\\' => Some("\\\\"),
            0x08 => Some("\\b"),
            0x0C => Some("\\f"),
            b'\n' => Some("\\n"),
            b'\r' => Some("\\r"),
            b'\t' => Some("\\t"),
            0..=0x1f => None,
            _ => continue,
        };
        out.push_str(&s[start..i]);
        match esc {
            Some(e) => out.push_str(e),
            None => out.push_str(&format!("\\u{:04x}", b)),
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

fn write_number(n: &serde_json::Number, out: &mut String) -> Result<(), EvidenceError> {
    if let Some(u) = n.as_u64() {
        if u > MAX_SAFE_INTEGER {
            return Err(EvidenceError::Canonical(
                "integer beyond 2^53 is not I-JSON".into(),
            ));
        }
        out.push_str(&u.to_string());
        return Ok(());
    }
    if let Some(i) = n.as_i64() {
        if i.unsigned_abs() > MAX_SAFE_INTEGER {
            return Err(EvidenceError::Canonical(
                "integer beyond 2^53 is not I-JSON".into(),
            ));
        }
        out.push_str(&i.to_string());
        return Ok(());
    }
    let f = n
        .as_f64()
        .ok_or_else(|| EvidenceError::Canonical("unrepresentable number".into()))?;
    write_es6(f, out)?;
    Ok(())
}

/// Format an f64 like ECMAScript `Number.prototype.toString` (RFC 8785 §3.2.2.3).
pub fn format_es6(f: f64) -> Result<String, EvidenceError> {
    if !f.is_finite() {
        return Err(EvidenceError::Canonical(
            "NaN/Infinity not permitted".into(),
        ));
    }
    if f == 0.0 {
        // -0 serializes as 0 in ECMAScript.
        return Ok("0".into());
    }
    // ryu-js implements ECMAScript Number::toString exactly, including the
    // round-half-even choice between two shortest candidates that plain
    // shortest-roundtrip formatters (ryu, Rust's `{:e}`) resolve differently.
    let mut buf = ryu_js::Buffer::new();
    Ok(buf.format_finite(f).to_string())
}

/// Format an f64 like Python's `repr(float)`, used by the §4.2 HMAC payload.
pub fn format_python_float(f: f64) -> String {
    let mut s = String::new();
    write_python_float(f, &mut s);
    s
}

/// Append an f64 formatted like Python's `repr(float)` (no intermediate allocation in the
/// common range).
pub fn write_python_float(f: f64, out: &mut String) {
    use std::fmt::Write;
    if f.is_nan() {
        out.push_str("nan");
        return;
    }
    if f.is_infinite() {
        out.push_str(if f > 0.0 { "inf" } else { "-inf" });
        return;
    }
    let a = f.abs();
    if a == 0.0 || (1e-4..1e16).contains(&a) {
        // Rust's Debug prints the shortest round-trip repr with a ".0" suffix
        // for integral values, exactly like Python in this range.
        let _ = write!(out, "{:?}", f);
        return;
    }
    let sci = format!("{:e}", f);
    match sci.split_once('e') {
        Some((m, e)) => {
            let ev: i32 = e.parse().unwrap_or(0);
            let _ = write!(
                out,
                "{}e{}{:02}",
                m,
                if ev < 0 { '-' } else { '+' },
                ev.abs()
            );
        }
        None => out.push_str(&sci),
    }
}

/// Append an f64 in ECMAScript Number::toString form (RFC 8785 §3.2.2.3).
pub fn write_es6(f: f64, out: &mut String) -> Result<(), EvidenceError> {
    if !f.is_finite() {
        return Err(EvidenceError::Canonical(
            "NaN/Infinity not permitted".into(),
        ));
    }
    if f == 0.0 {
        out.push('0');
        return Ok(());
    }
    let mut buf = ryu_js::Buffer::new();
    out.push_str(buf.format_finite(f));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_lower_matches_hex_crate() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(hex_lower(&all), hex::encode(&all));
        assert_eq!(hex_lower(&[]), "");
    }
    use serde_json::json;

    #[test]
    fn rfc8785_number_examples() {
        // Sample values from RFC 8785 Appendix B.
        let cases: &[(u64, &str)] = &[
            (0x0000000000000000, "0"),
            (0x8000000000000000, "0"),
            (0x0000000000000001, "5e-324"),
            (0x8000000000000001, "-5e-324"),
            (0x7fefffffffffffff, "1.7976931348623157e+308"),
            (0xffefffffffffffff, "-1.7976931348623157e+308"),
            (0x4340000000000000, "9007199254740992"),
            (0xc340000000000000, "-9007199254740992"),
            (0x4430000000000000, "295147905179352830000"),
            (0x44b52d02c7e14af5, "9.999999999999997e+22"),
            (0x44b52d02c7e14af6, "1e+23"),
            (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
            (0x444b1ae4d6e2ef4e, "999999999999999700000"),
            (0x444b1ae4d6e2ef4f, "999999999999999900000"),
            (0x444b1ae4d6e2ef50, "1e+21"),
            (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
            (0x3eb0c6f7a0b5ed8d, "0.000001"),
            (0x41b3de4355555553, "333333333.3333332"),
            (0x41b3de4355555554, "333333333.33333325"),
            (0x41b3de4355555555, "333333333.3333333"),
            (0x41b3de4355555556, "333333333.3333334"),
            (0x41b3de4355555557, "333333333.33333343"),
            (0xbecbf647612f3696, "-0.0000033333333333333333"),
            (0x43143ff3c1cb0959, "1424953923781206.2"),
        ];
        for (bits, want) in cases {
            assert_eq!(
                format_es6(f64::from_bits(*bits)).unwrap(),
                *want,
                "{bits:x}"
            );
        }
        assert!(format_es6(f64::NAN).is_err());
        assert!(format_es6(f64::INFINITY).is_err());
    }

    #[test]
    fn rfc8785_structure_example() {
        // RFC 8785 §3.2.2 example input/output.
        let v: Value = serde_json::from_str(
            r#"{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],
               "string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
               "literals":[null,true,false]}"#,
        )
        .unwrap();
        assert_eq!(
            canonicalize(&v).unwrap(),
            "{\"literals\":[null,true,false],\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],\"string\":\"€$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}"
        );
    }

    #[test]
    fn rfc8785_utf16_key_sorting() {
        // RFC 8785 §3.2.3 sorting example.
        let v: Value = serde_json::from_str(
            r#"{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}"#,
        )
        .unwrap();
        let c = canonicalize(&v).unwrap();
        let order: Vec<&str> = [
            "Carriage Return",
            "One",
            "Control",
            "Latin Small",
            "Euro Sign",
            "Emoji",
            "Hebrew",
        ]
        .to_vec();
        let mut last = 0;
        for o in order {
            let p = c.find(o).unwrap();
            assert!(p >= last, "{o} out of order in {c}");
            last = p;
        }
    }

    #[test]
    fn big_integers_refused() {
        assert!(canonicalize(&json!(9007199254740993u64)).is_err());
        assert!(canonicalize(&json!(-9007199254740993i64)).is_err());
        assert_eq!(
            canonicalize(&json!(9007199254740991u64)).unwrap(),
            "9007199254740991"
        );
    }

    #[test]
    fn python_repr() {
        assert_eq!(format_python_float(1722384000.0), "1722384000.0");
        assert_eq!(format_python_float(1722384000.123456), "1722384000.123456");
        assert_eq!(format_python_float(1e16), "1e+16");
        assert_eq!(format_python_float(1.5e-5), "1.5e-05");
        assert_eq!(format_python_float(30.0), "30.0");
    }

    #[test]
    fn write_string_fast_and_escaping_paths_agree_with_serde() {
        for s in [
            "",
            "sha256:abc",
            "https://v.example/x?y=1",
            "\"",
            "a\\",
            "\u{1f}end",
            "mid\tdle",
            "\u{7f}\u{e9}\u{20ac}",
            "x\u{0}y",
        ] {
            let mut out = String::new();
            write_string(s, &mut out);
            assert_eq!(out, serde_json::to_string(s).unwrap(), "{s:?}");
        }
    }
}
