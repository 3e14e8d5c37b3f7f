//! LANTERN, the structured-reasoning overlay, carried inside message `content` as a JSON
//! envelope (so it is encrypted like any content in an encrypted room):
//!
//! `{"lantern": 1, "op": "<op>", …op fields}`
//!
//! | op | fields (required unless marked ?) |
//! |----|---|
//! | hello | provider?, model?, role?, capabilities? {name: description} |
//! | probe | question — opens a thread |
//! | assert | claim, falsifiable_by, confidence? (0..1) — opens a thread |
//! | challenge | thread, counter_claim, confidence (0..1), test, target_seq? |
//! | resolve | thread, observation, basis ∈ tool\|artifact\|human\|consensus\|stale |
//! | fuse | thread, synthesis, state_delta {object}, outcomes? [{seq, held}] |
//! | spark | idea |
//! | harvest / bury | spark (seq), note? |
//! | sync | state_hash (hex sha256 of the canonical shared state), diff? {merge patch} |
//!
//! A thread's id is the `seq` of the message that opened it. State is rebuilt from history
//! on the client: the shared state is the fuse deltas applied in order as JSON merge
//! patches (RFC 7386); calibration is each agent's mean Brier loss `(confidence − held)²`
//! over the staked claims a fuse scored, counted only in threads resolved on a `tool`,
//! `artifact` or `human` basis.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

/// Envelope version this client writes and reads.
pub const VERSION: u64 = 1;
/// Every op.
pub const OPS: &[&str] = &[
    "hello",
    "probe",
    "assert",
    "challenge",
    "resolve",
    "fuse",
    "spark",
    "harvest",
    "bury",
    "sync",
];
/// `resolve --basis` values.
pub const BASES: &[&str] = &["tool", "artifact", "human", "consensus", "stale"];
/// Bases whose threads are calibration-scored.
pub const SCORED_BASES: &[&str] = &["tool", "artifact", "human"];

/// A new envelope of `op` with `fields`.
pub fn envelope(op: &str, fields: Value) -> Value {
    let mut o = Map::new();
    o.insert("lantern".into(), json!(VERSION));
    o.insert("op".into(), json!(op));
    if let Value::Object(f) = fields {
        for (k, v) in f {
            if !v.is_null() {
                o.insert(k, v);
            }
        }
    }
    Value::Object(o)
}

fn need_str(e: &Value, k: &str, errs: &mut Vec<String>) {
    if e[k].as_str().is_none_or(|s| s.trim().is_empty()) {
        errs.push(format!(
            "{} needs a non-empty {k}",
            e["op"].as_str().unwrap_or("?")
        ));
    }
}

fn need_seq(e: &Value, k: &str, errs: &mut Vec<String>) {
    if e[k].as_u64().is_none() {
        errs.push(format!(
            "{} needs {k} (a message seq)",
            e["op"].as_str().unwrap_or("?")
        ));
    }
}

fn confidence(e: &Value, required: bool, errs: &mut Vec<String>) {
    match e.get("confidence") {
        None | Some(Value::Null) if !required => {}
        Some(c) if c.as_f64().is_some_and(|c| (0.0..=1.0).contains(&c)) => {}
        _ => errs.push(format!(
            "{} needs confidence in [0, 1]",
            e["op"].as_str().unwrap_or("?")
        )),
    }
}

/// Checks an envelope against the rules; `Err` lists every broken rule.
pub fn validate(e: &Value) -> Result<(), Vec<String>> {
    let mut errs = Vec::new();
    if !e.is_object() {
        return Err(vec!["an envelope is a JSON object".into()]);
    }
    if e["lantern"].as_u64() != Some(VERSION) {
        errs.push(format!("lantern must be {VERSION}"));
    }
    let op = e["op"].as_str().unwrap_or_default();
    match op {
        "hello" => {
            if !matches!(e.get("capabilities"), None | Some(Value::Object(_))) {
                errs.push("hello capabilities must be an object {name: description}".into());
            }
        }
        "probe" => need_str(e, "question", &mut errs),
        "assert" => {
            need_str(e, "claim", &mut errs);
            need_str(e, "falsifiable_by", &mut errs);
            confidence(e, false, &mut errs);
        }
        "challenge" => {
            need_seq(e, "thread", &mut errs);
            need_str(e, "counter_claim", &mut errs);
            need_str(e, "test", &mut errs);
            confidence(e, true, &mut errs);
            if !matches!(e.get("target_seq"), None | Some(Value::Null)) {
                need_seq(e, "target_seq", &mut errs);
            }
        }
        "resolve" => {
            need_seq(e, "thread", &mut errs);
            need_str(e, "observation", &mut errs);
            if !e["basis"].as_str().is_some_and(|b| BASES.contains(&b)) {
                errs.push(format!("resolve basis must be one of {}", BASES.join("|")));
            }
        }
        "fuse" => {
            need_seq(e, "thread", &mut errs);
            need_str(e, "synthesis", &mut errs);
            if !e["state_delta"].is_object() {
                errs.push("fuse needs state_delta (a JSON object)".into());
            }
            match e.get("outcomes") {
                None | Some(Value::Null) => {}
                Some(Value::Array(a))
                    if a.iter()
                        .all(|o| o["seq"].as_u64().is_some() && o["held"].is_boolean()) => {}
                _ => errs.push("fuse outcomes must be [{seq, held: bool}]".into()),
            }
        }
        "spark" => need_str(e, "idea", &mut errs),
        "harvest" | "bury" => need_seq(e, "spark", &mut errs),
        "sync" => {
            if !e["state_hash"]
                .as_str()
                .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
            {
                errs.push("sync needs state_hash (64 hex digits)".into());
            }
        }
        _ => errs.push(format!("op must be one of {}", OPS.join("|"))),
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs)
    }
}

/// Parses `N=true|false` (a `fuse --outcome`).
pub fn parse_outcome(s: &str) -> Result<Value, String> {
    let (n, v) = s
        .split_once('=')
        .ok_or_else(|| format!("outcome {s:?}: expected SEQ=true|false"))?;
    let seq: u64 = n
        .trim()
        .parse()
        .map_err(|_| format!("outcome {s:?}: {n:?} is not a seq"))?;
    let held = match v.trim() {
        "true" => true,
        "false" => false,
        _ => return Err(format!("outcome {s:?}: expected true or false")),
    };
    Ok(json!({"seq": seq, "held": held}))
}

/// The envelope inside a (decrypted) message content, if any.
pub fn parse_content(content: &str) -> Option<Value> {
    let v: Value = serde_json::from_str(content.trim()).ok()?;
    v.get("lantern")?;
    Some(v)
}

/// A LANTERN message as read back from history.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Message seq.
    pub seq: u64,
    /// Sender id.
    pub agent_id: String,
    /// Sender name.
    pub agent_name: String,
    /// The envelope.
    pub env: Value,
}

impl Entry {
    /// `{seq, agent_id, agent_name, …envelope}` for output.
    pub fn to_value(&self) -> Value {
        let mut v = self.env.clone();
        v["seq"] = json!(self.seq);
        v["agent_id"] = json!(self.agent_id);
        v["agent_name"] = json!(self.agent_name);
        v
    }

    fn op(&self) -> &str {
        self.env["op"].as_str().unwrap_or_default()
    }
}

/// One thread: the opener and everything that referenced it.
#[derive(Debug, Clone)]
pub struct Thread {
    /// Thread id (the opener's seq).
    pub id: u64,
    /// Messages in order, opener first.
    pub entries: Vec<Entry>,
    /// `open`, `challenged`, `resolved` or `fused` (the furthest step reached).
    pub state: &'static str,
    /// Basis of the latest resolve.
    pub basis: Option<String>,
}

impl Thread {
    /// The opener's claim or question.
    pub fn headline(&self) -> String {
        let e = &self.entries[0].env;
        e["claim"]
            .as_str()
            .or_else(|| e["question"].as_str())
            .unwrap_or_default()
            .to_string()
    }
}

/// A side-channel idea.
#[derive(Debug, Clone)]
pub struct Spark {
    /// The spark message.
    pub entry: Entry,
    /// `open`, `harvested` or `buried`.
    pub status: &'static str,
}

/// Everything rebuilt from a room's history.
#[derive(Debug, Clone, Default)]
pub struct View {
    /// HELLO announcements, latest per agent.
    pub participants: BTreeMap<String, Entry>,
    /// Threads by id.
    pub threads: BTreeMap<u64, Thread>,
    /// Committed deltas in order: (fuse seq, thread, delta).
    pub deltas: Vec<(u64, u64, Value)>,
    /// Shared state: the deltas merged in order.
    pub state: Value,
    /// Sparks by seq.
    pub sparks: BTreeMap<u64, Spark>,
    /// SYNC messages.
    pub syncs: Vec<Entry>,
    /// Envelopes that break a rule or reference nothing: (seq, reason).
    pub invalid: Vec<(u64, String)>,
}

/// Rebuilds the LANTERN view from messages (normalized and decrypted, oldest first).
pub fn reconstruct(messages: &[Value]) -> View {
    let mut v = View {
        state: json!({}),
        ..View::default()
    };
    for m in messages {
        let Some(env) = m["content"].as_str().and_then(parse_content) else {
            continue;
        };
        let seq = m["seq"].as_u64().unwrap_or(0);
        if let Err(errs) = validate(&env) {
            v.invalid.push((seq, errs.join("; ")));
            continue;
        }
        let e = Entry {
            seq,
            agent_id: m["agent_id"].as_str().unwrap_or_default().to_string(),
            agent_name: m["agent_name"].as_str().unwrap_or_default().to_string(),
            env,
        };
        match e.op() {
            "hello" => {
                v.participants.insert(e.agent_id.clone(), e);
            }
            "probe" | "assert" => {
                v.threads.insert(
                    seq,
                    Thread {
                        id: seq,
                        entries: vec![e],
                        state: "open",
                        basis: None,
                    },
                );
            }
            "challenge" | "resolve" | "fuse" => {
                let tid = e.env["thread"].as_u64().unwrap_or(0);
                let Some(t) = v.threads.get_mut(&tid) else {
                    v.invalid
                        .push((seq, format!("thread {tid} does not exist")));
                    continue;
                };
                match e.op() {
                    "challenge" if t.state == "open" => t.state = "challenged",
                    "resolve" => {
                        if t.state != "fused" {
                            t.state = "resolved";
                        }
                        t.basis = e.env["basis"].as_str().map(str::to_string);
                    }
                    "fuse" => {
                        t.state = "fused";
                        let delta = e.env["state_delta"].clone();
                        merge_patch(&mut v.state, &delta);
                        v.deltas.push((seq, tid, delta));
                    }
                    _ => {}
                }
                t.entries.push(e);
            }
            "spark" => {
                v.sparks.insert(
                    seq,
                    Spark {
                        entry: e,
                        status: "open",
                    },
                );
            }
            "harvest" | "bury" => {
                let sid = e.env["spark"].as_u64().unwrap_or(0);
                match v.sparks.get_mut(&sid) {
                    Some(s) => {
                        s.status = if e.op() == "harvest" {
                            "harvested"
                        } else {
                            "buried"
                        }
                    }
                    None => v.invalid.push((seq, format!("spark {sid} does not exist"))),
                }
            }
            "sync" => v.syncs.push(e),
            _ => {}
        }
    }
    v
}

/// Per-agent calibration: (scored outcomes, mean Brier loss).
pub fn calibration(v: &View) -> BTreeMap<String, (usize, f64)> {
    let mut sums: BTreeMap<String, (usize, f64)> = BTreeMap::new();
    for t in v.threads.values() {
        // A thread is scored on the basis of its latest resolve before each fuse.
        let mut basis: Option<&str> = None;
        for e in &t.entries {
            match e.op() {
                "resolve" => basis = e.env["basis"].as_str(),
                "fuse" if basis.is_some_and(|b| SCORED_BASES.contains(&b)) => {
                    for o in e.env["outcomes"].as_array().into_iter().flatten() {
                        let (Some(seq), Some(held)) = (o["seq"].as_u64(), o["held"].as_bool())
                        else {
                            continue;
                        };
                        let Some(staked) = t.entries.iter().find(|x| x.seq == seq) else {
                            continue;
                        };
                        let Some(c) = staked.env["confidence"].as_f64() else {
                            continue;
                        };
                        let y = if held { 1.0 } else { 0.0 };
                        let s = sums.entry(staked.agent_id.clone()).or_default();
                        s.0 += 1;
                        s.1 += (c - y) * (c - y);
                    }
                }
                _ => {}
            }
        }
    }
    sums.into_iter()
        .map(|(k, (n, sum))| (k, (n, sum / n as f64)))
        .collect()
}

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// The merge patch that turns `from` into `to`.
pub fn diff(from: &Value, to: &Value) -> Value {
    match (from, to) {
        (Value::Object(a), Value::Object(b)) => {
            let mut out = Map::new();
            for (k, bv) in b {
                match a.get(k) {
                    Some(av) if av == bv => {}
                    Some(av) if av.is_object() && bv.is_object() => {
                        out.insert(k.clone(), diff(av, bv));
                    }
                    _ => {
                        out.insert(k.clone(), bv.clone());
                    }
                }
            }
            for k in a.keys() {
                if !b.contains_key(k) {
                    out.insert(k.clone(), Value::Null);
                }
            }
            Value::Object(out)
        }
        _ => to.clone(),
    }
}

/// Canonical JSON (object keys sorted, no spaces), the input of [`state_hash`].
pub fn canonical(v: &Value) -> String {
    match v {
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::String(k.clone()), canonical(&o[k])))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        v => v.to_string(),
    }
}

/// Hex SHA-256 of the canonical shared state.
pub fn state_hash(state: &Value) -> String {
    hex::encode(Sha256::digest(canonical(state).as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(seq: u64, who: &str, env: Value) -> Value {
        json!({"seq": seq, "agent_id": who, "agent_name": who, "content": env.to_string()})
    }

    #[test]
    fn cli_rules_are_enforced() {
        let a = envelope("assert", json!({"claim": "x", "confidence": 0.7}));
        assert!(validate(&a).unwrap_err()[0].contains("falsifiable_by"));
        let a = envelope("assert", json!({"claim": "x", "falsifiable_by": "y"}));
        assert!(validate(&a).is_ok());
        let c = envelope(
            "challenge",
            json!({"thread": 3, "counter_claim": "z", "test": "t"}),
        );
        assert!(validate(&c)
            .unwrap_err()
            .iter()
            .any(|e| e.contains("confidence")));
        let c = envelope(
            "challenge",
            json!({"thread": 3, "counter_claim": "z", "confidence": 0.5}),
        );
        assert!(validate(&c).unwrap_err().iter().any(|e| e.contains("test")));
        let c = envelope(
            "challenge",
            json!({"thread": 3, "counter_claim": "z", "confidence": 1.5, "test": "t"}),
        );
        assert!(validate(&c).is_err());
        for b in BASES {
            let r = envelope(
                "resolve",
                json!({"thread": 3, "observation": "o", "basis": b}),
            );
            assert!(validate(&r).is_ok(), "{b}");
        }
        let r = envelope(
            "resolve",
            json!({"thread": 3, "observation": "o", "basis": "vibes"}),
        );
        assert!(validate(&r).is_err());
        let f = envelope(
            "fuse",
            json!({"thread": 3, "synthesis": "s", "state_delta": [1]}),
        );
        assert!(validate(&f).is_err());
        assert!(validate(&json!({"lantern": 2, "op": "spark", "idea": "i"})).is_err());
        assert!(validate(&json!({"lantern": 1, "op": "dance"})).is_err());
        assert!(validate(&json!({"lantern": 1, "op": "sync", "state_hash": "ab"})).is_err());
    }

    #[test]
    fn outcomes_parse() {
        assert_eq!(
            parse_outcome("12=true").unwrap(),
            json!({"seq": 12, "held": true})
        );
        assert_eq!(
            parse_outcome("3=false").unwrap(),
            json!({"seq": 3, "held": false})
        );
        assert!(parse_outcome("x=true").is_err());
        assert!(parse_outcome("3=maybe").is_err());
        assert!(parse_outcome("3").is_err());
    }

    #[test]
    fn reconstructs_threads_state_sparks_and_calibration() {
        let msgs = vec![
            msg(1, "a", envelope("hello", json!({"role": "reviewer"}))),
            msg(
                2,
                "a",
                envelope(
                    "assert",
                    json!({"claim": "no rollback gate", "confidence": 0.8, "falsifiable_by": "a documented rollback step"}),
                ),
            ),
            json!({"seq": 3, "agent_id": "b", "agent_name": "b", "content": "plain chat"}),
            msg(
                4,
                "b",
                envelope(
                    "challenge",
                    json!({"thread": 2, "target_seq": 2, "counter_claim": "it exists", "confidence": 0.6, "test": "grep"}),
                ),
            ),
            msg(
                5,
                "a",
                envelope(
                    "resolve",
                    json!({"thread": 2, "observation": "recovery exists, no gate", "basis": "artifact"}),
                ),
            ),
            msg(
                6,
                "a",
                envelope(
                    "fuse",
                    json!({"thread": 2, "synthesis": "add a gate", "state_delta": {"plan": {"gate": true, "x": 1}}, "outcomes": [{"seq": 2, "held": true}, {"seq": 4, "held": false}]}),
                ),
            ),
            msg(7, "b", envelope("spark", json!({"idea": "canary"}))),
            msg(8, "a", envelope("bury", json!({"spark": 7}))),
            msg(
                9,
                "a",
                envelope(
                    "resolve",
                    json!({"thread": 99, "observation": "o", "basis": "tool"}),
                ),
            ),
            msg(
                10,
                "b",
                envelope(
                    "assert",
                    json!({"claim": "c2", "confidence": 0.9, "falsifiable_by": "f"}),
                ),
            ),
            msg(
                11,
                "b",
                envelope(
                    "resolve",
                    json!({"thread": 10, "observation": "o", "basis": "consensus"}),
                ),
            ),
            msg(
                12,
                "b",
                envelope(
                    "fuse",
                    json!({"thread": 10, "synthesis": "s", "state_delta": {"plan": {"x": null}, "y": 2}, "outcomes": [{"seq": 10, "held": false}]}),
                ),
            ),
            msg(
                13,
                "b",
                json!({"lantern": 1, "op": "assert", "claim": "no falsifier"}),
            ),
        ];
        let v = reconstruct(&msgs);
        assert_eq!(v.participants.len(), 1);
        assert_eq!(v.threads.len(), 2);
        let t = &v.threads[&2];
        assert_eq!(t.state, "fused");
        assert_eq!(t.entries.len(), 4);
        assert_eq!(t.headline(), "no rollback gate");
        assert_eq!(v.state, json!({"plan": {"gate": true}, "y": 2}));
        assert_eq!(v.deltas.len(), 2);
        assert_eq!(v.sparks[&7].status, "buried");
        assert_eq!(v.invalid.len(), 2, "{:?}", v.invalid);
        let cal = calibration(&v);
        // a staked 0.8 and held: (0.2)² = 0.04; b staked 0.6, failed: 0.36. Thread 10
        // (consensus) is not scored.
        assert_eq!(cal["a"].0, 1);
        assert!((cal["a"].1 - 0.04).abs() < 1e-9);
        assert_eq!(cal["b"].0, 1);
        assert!((cal["b"].1 - 0.36).abs() < 1e-9);
    }

    #[test]
    fn diff_is_the_inverse_of_merge_and_hash_is_canonical() {
        let a = json!({"k": {"x": 1, "y": 2}, "gone": true});
        let b = json!({"k": {"x": 1, "y": 3}, "new": [1]});
        let p = diff(&a, &b);
        let mut c = a.clone();
        merge_patch(&mut c, &p);
        assert_eq!(c, b);
        let s1: Value = serde_json::from_str(r#"{"b":1,"a":{"d":2,"c":3}}"#).unwrap();
        let s2: Value = serde_json::from_str(r#"{"a":{"c":3,"d":2},"b":1}"#).unwrap();
        assert_eq!(state_hash(&s1), state_hash(&s2));
        assert_ne!(state_hash(&s1), state_hash(&json!({})));
    }
}
