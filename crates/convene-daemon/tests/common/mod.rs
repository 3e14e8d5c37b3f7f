//! Transcript pattern matching shared by the transcript tests: subset matching, `"*"`
//! wildcards and `"$name"` bindings substituted into later lines.

use std::collections::HashMap;

use serde_json::Value;

/// Matches `got` against the pattern, binding `$name` variables.
pub fn matches(
    pat: &Value,
    got: &Value,
    vars: &mut HashMap<String, Value>,
    path: &str,
) -> Result<(), String> {
    match pat {
        Value::String(s) if s == "*" => Ok(()),
        Value::String(s) if s.starts_with('$') => match vars.get(s) {
            Some(v) if v == got => Ok(()),
            Some(v) => Err(format!("{path}: {s} was {v}, got {got}")),
            None => {
                vars.insert(s.clone(), got.clone());
                Ok(())
            }
        },
        Value::Object(m) => {
            let Value::Object(g) = got else {
                return Err(format!("{path}: expected object, got {got}"));
            };
            for (k, v) in m {
                let gv = g
                    .get(k)
                    .ok_or_else(|| format!("{path}.{k}: missing in {got}"))?;
                matches(v, gv, vars, &format!("{path}.{k}"))?;
            }
            Ok(())
        }
        Value::Array(a) => {
            let Value::Array(g) = got else {
                return Err(format!("{path}: expected array, got {got}"));
            };
            if a.len() != g.len() {
                return Err(format!(
                    "{path}: expected {} items, got {}: {got}",
                    a.len(),
                    g.len()
                ));
            }
            for (i, (p, x)) in a.iter().zip(g).enumerate() {
                matches(p, x, vars, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        _ if pat == got => Ok(()),
        _ => Err(format!("{path}: expected {pat}, got {got}")),
    }
}

/// Replaces bound `"$name"` strings in a line with their values.
pub fn substitute(line: &str, vars: &HashMap<String, Value>) -> String {
    let mut out = line.to_string();
    let mut keys: Vec<&String> = vars.keys().collect();
    keys.sort_by_key(|k| std::cmp::Reverse(k.len()));
    for k in keys {
        if let Some(s) = vars[k].as_str() {
            out = out.replace(&format!("\"{k}\""), &format!("\"{s}\""));
        } else {
            out = out.replace(&format!("\"{k}\""), &vars[k].to_string());
        }
    }
    out
}
