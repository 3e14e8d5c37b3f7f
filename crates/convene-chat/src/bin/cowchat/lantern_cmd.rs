//! `cowchat lantern …`: write side (envelopes sent as message content, sealed in encrypted
//! rooms) and read side (rebuilt from the room's whole history).

use std::path::PathBuf;

use anyhow::{bail, Context as _};
use clap::Subcommand;
use convene_chat::lantern::{self, envelope};
use serde_json::{json, Map, Value};

use crate::ctx::{print_json, Ctx};

fn unit(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err("confidence must be within [0, 1]".into())
    }
}

#[derive(Subcommand, Debug)]
pub enum LanternCmd {
    /// Announce provider, model, role and capabilities (self-attested)
    Hello {
        room: String,
        #[arg(long)]
        provider: Option<String>,
        #[arg(long)]
        model: Option<String>,
        #[arg(long)]
        role: Option<String>,
        /// NAME=description (repeatable)
        #[arg(long = "capability")]
        capabilities: Vec<String>,
    },
    /// Open a thread with a question
    Probe {
        room: String,
        #[arg(long)]
        question: String,
    },
    /// Open a thread with a falsifiable claim
    Assert {
        room: String,
        #[arg(long)]
        claim: String,
        #[arg(long, required = true)]
        falsifiable_by: String,
        #[arg(long, value_parser = unit)]
        confidence: Option<f64>,
    },
    /// Challenge a claim: stake a confidence and name a test
    Challenge {
        room: String,
        #[arg(long)]
        thread: u64,
        #[arg(long)]
        target_seq: Option<u64>,
        #[arg(long)]
        counter_claim: String,
        #[arg(long, required = true, value_parser = unit)]
        confidence: f64,
        #[arg(long, required = true)]
        test: String,
    },
    /// Record an observation that resolves a thread
    Resolve {
        room: String,
        #[arg(long)]
        thread: u64,
        #[arg(long)]
        observation: String,
        #[arg(long, value_parser = ["tool", "artifact", "human", "consensus", "stale"])]
        basis: String,
    },
    /// Commit: a state delta (JSON file) and outcomes of staked claims
    Fuse {
        room: String,
        #[arg(long)]
        thread: u64,
        #[arg(long)]
        synthesis: String,
        #[arg(long, required = true)]
        state_delta: PathBuf,
        /// SEQ=true|false (repeatable)
        #[arg(long = "outcome", value_parser = lantern::parse_outcome)]
        outcomes: Vec<Value>,
    },
    /// Side channel: a scarce orthogonal idea
    Spark {
        room: String,
        #[arg(long)]
        idea: String,
    },
    /// Take up a spark
    Harvest {
        room: String,
        #[arg(long)]
        spark: u64,
        #[arg(long)]
        note: Option<String>,
    },
    /// Drop a spark
    Bury {
        room: String,
        #[arg(long)]
        spark: u64,
        #[arg(long)]
        note: Option<String>,
    },
    /// Publish the shared-state hash (and the diff from your local state file)
    Sync {
        room: String,
        /// Your local view of the state (JSON); the diff to the shared state is posted
        #[arg(long)]
        state: Option<PathBuf>,
    },
    /// Participants and threads with their state and headline
    Threads { room: String },
    /// Every message of one thread
    Show { room: String, thread: u64 },
    /// Committed shared state and its deltas
    State { room: String },
    /// Per-agent mean Brier loss over scored outcomes (lower is better)
    Calibration { room: String },
    /// Check an envelope file before sending
    Validate { file: PathBuf },
}

fn read_json(p: &PathBuf) -> anyhow::Result<Value> {
    let s = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
    serde_json::from_str(&s).with_context(|| format!("{} is not JSON", p.display()))
}

/// Runs a lantern command.
pub fn run(ctx: &Ctx, cmd: LanternCmd) -> anyhow::Result<i32> {
    use LanternCmd as L;
    let (room, env) = match cmd {
        L::Validate { file } => {
            return match lantern::validate(&read_json(&file)?) {
                Ok(()) => {
                    println!("ok");
                    Ok(0)
                }
                Err(errs) => {
                    for e in errs {
                        eprintln!("invalid: {e}");
                    }
                    Ok(1)
                }
            };
        }
        L::Threads { room } => return read_side(ctx, &room, Read::Threads),
        L::State { room } => return read_side(ctx, &room, Read::State),
        L::Calibration { room } => return read_side(ctx, &room, Read::Calibration),
        L::Show { room, thread } => return read_side(ctx, &room, Read::Show(thread)),
        L::Hello {
            room,
            provider,
            model,
            role,
            capabilities,
        } => {
            let mut caps = Map::new();
            for c in capabilities {
                let (k, v) = c.split_once('=').unwrap_or((c.as_str(), ""));
                caps.insert(k.trim().to_string(), json!(v.trim()));
            }
            let caps = (!caps.is_empty()).then_some(Value::Object(caps));
            (
                room,
                envelope(
                    "hello",
                    json!({"provider": provider, "model": model, "role": role, "capabilities": caps}),
                ),
            )
        }
        L::Probe { room, question } => (room, envelope("probe", json!({"question": question}))),
        L::Assert {
            room,
            claim,
            falsifiable_by,
            confidence,
        } => (
            room,
            envelope(
                "assert",
                json!({"claim": claim, "falsifiable_by": falsifiable_by, "confidence": confidence}),
            ),
        ),
        L::Challenge {
            room,
            thread,
            target_seq,
            counter_claim,
            confidence,
            test,
        } => (
            room,
            envelope(
                "challenge",
                json!({"thread": thread, "target_seq": target_seq, "counter_claim": counter_claim, "confidence": confidence, "test": test}),
            ),
        ),
        L::Resolve {
            room,
            thread,
            observation,
            basis,
        } => (
            room,
            envelope(
                "resolve",
                json!({"thread": thread, "observation": observation, "basis": basis}),
            ),
        ),
        L::Fuse {
            room,
            thread,
            synthesis,
            state_delta,
            outcomes,
        } => {
            let delta = read_json(&state_delta)?;
            let outcomes = (!outcomes.is_empty()).then_some(Value::Array(outcomes));
            (
                room,
                envelope(
                    "fuse",
                    json!({"thread": thread, "synthesis": synthesis, "state_delta": delta, "outcomes": outcomes}),
                ),
            )
        }
        L::Spark { room, idea } => (room, envelope("spark", json!({"idea": idea}))),
        L::Harvest { room, spark, note } => (
            room,
            envelope("harvest", json!({"spark": spark, "note": note})),
        ),
        L::Bury { room, spark, note } => (
            room,
            envelope("bury", json!({"spark": spark, "note": note})),
        ),
        L::Sync { room, state } => {
            let mut c = ctx.connect()?;
            let r = ctx.room(&mut c, &room)?;
            let view = lantern::reconstruct(&ctx.history_after(&mut c, &r.id, 0)?);
            let hash = lantern::state_hash(&view.state);
            let diff = match &state {
                Some(p) => Some(lantern::diff(&read_json(p)?, &view.state)),
                None => None,
            };
            let env = envelope("sync", json!({"state_hash": hash, "diff": diff}));
            let v = send_env(ctx, &mut c, &r, &env)?;
            print_json(&json!({"seq": v["seq"], "state_hash": hash, "diff": diff}));
            return Ok(0);
        }
    };
    if let Err(errs) = lantern::validate(&env) {
        bail!("refusing to send: {}", errs.join("; "));
    }
    let mut c = ctx.connect()?;
    let r = ctx.room(&mut c, &room)?;
    let v = send_env(ctx, &mut c, &r, &env)?;
    let seq = v["seq"].as_u64().unwrap_or(0);
    match env["op"].as_str() {
        Some("assert" | "probe") => println!("thread id is {seq}"),
        Some(op) => println!("{op} sent, seq {seq}"),
        None => {}
    }
    Ok(0)
}

fn send_env(
    ctx: &Ctx,
    c: &mut convene_chat::Client,
    r: &crate::ctx::Room,
    env: &Value,
) -> anyhow::Result<Value> {
    let content = ctx.outgoing(r, &env.to_string())?;
    Ok(c.request(
        "send_message",
        json!({"room_id": r.id, "content": content, "metadata": {"kind": "lantern"}}),
    )?)
}

enum Read {
    Threads,
    Show(u64),
    State,
    Calibration,
}

/// The read side: one full history read, rebuilt client-side. JSON lines with `--json`.
fn read_side(ctx: &Ctx, room: &str, what: Read) -> anyhow::Result<i32> {
    let mut c = ctx.connect()?;
    let r = ctx.room(&mut c, room)?;
    let msgs = ctx.history_after(&mut c, &r.id, 0)?;
    let undecrypted = msgs
        .iter()
        .filter(|m| {
            m["decrypt_error"].is_string()
                || m["content"]
                    .as_str()
                    .is_some_and(convene_chat::crypto::is_sealed)
        })
        .count();
    if undecrypted > 0 {
        eprintln!(
            "lantern: {undecrypted} message(s) could not be decrypted (room key missing or wrong)"
        );
    }
    let v = lantern::reconstruct(&msgs);
    match what {
        Read::Threads => {
            if ctx.json {
                for p in v.participants.values() {
                    print_json(&json!({"participant": p.to_value()}));
                }
                for t in v.threads.values() {
                    print_json(
                        &json!({"thread": t.id, "state": t.state, "headline": t.headline(),
                        "opened_by": t.entries[0].agent_name, "messages": t.entries.len(), "basis": t.basis}),
                    );
                }
            } else {
                for p in v.participants.values() {
                    let e = &p.env;
                    println!(
                        "participant {} ({}) role={} provider={} model={}",
                        p.agent_name,
                        p.agent_id,
                        e["role"].as_str().unwrap_or("-"),
                        e["provider"].as_str().unwrap_or("-"),
                        e["model"].as_str().unwrap_or("-")
                    );
                }
                for t in v.threads.values() {
                    println!(
                        "thread {} [{}] {} — {} ({} messages)",
                        t.id,
                        t.state,
                        t.entries[0].agent_name,
                        t.headline(),
                        t.entries.len()
                    );
                }
                for s in v.sparks.values() {
                    println!(
                        "spark {} [{}] {}",
                        s.entry.seq,
                        s.status,
                        s.entry.env["idea"].as_str().unwrap_or("")
                    );
                }
            }
        }
        Read::Show(id) => {
            let Some(t) = v.threads.get(&id) else {
                bail!("no thread {id} in {room}");
            };
            for e in &t.entries {
                print_json(&e.to_value());
            }
        }
        Read::State => {
            print_json(
                &json!({"state": v.state, "state_hash": lantern::state_hash(&v.state),
                "deltas": v.deltas.iter().map(|(seq, t, d)| json!({"seq": seq, "thread": t, "delta": d})).collect::<Vec<_>>()}),
            );
        }
        Read::Calibration => {
            for (agent, (n, loss)) in lantern::calibration(&v) {
                if ctx.json {
                    print_json(&json!({"agent_id": agent, "scored": n, "mean_brier": loss}));
                } else {
                    println!("{agent}  scored={n}  mean_brier={loss:.4}");
                }
            }
        }
    }
    for (seq, why) in &v.invalid {
        eprintln!("lantern: ignored seq {seq}: {why}");
    }
    Ok(0)
}
