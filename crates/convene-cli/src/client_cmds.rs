//! Client commands: thin wrappers over IPC ops, human output by default, `--json` for scripts.

use std::path::Path;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use convene_ipc::client::{Client, Endpoint};
use serde_json::{json, Value};

/// Group commands.
#[derive(Subcommand)]
pub enum GroupCmd {
    /// Create a group.
    Create {
        /// Title.
        title: String,
        /// Topic.
        #[arg(long, default_value = "")]
        topic: String,
    },
    /// List groups.
    List,
    /// Show one group.
    Show {
        /// Group id.
        group_id: String,
    },
    /// Set a group setting (e.g. default_send_to all).
    Set {
        /// Group id.
        group_id: String,
        /// Setting name.
        key: String,
        /// Value.
        value: String,
    },
    /// Delete a group and its ledger.
    Delete {
        /// Group id.
        group_id: String,
    },
}

/// Actor commands.
#[derive(Subcommand)]
pub enum ActorCmd {
    /// Add an actor (the first one is the foreman).
    Add {
        /// Group id.
        group_id: String,
        /// Actor id.
        actor_id: String,
        /// Runtime: session (default) or command.
        #[arg(long, default_value = "session")]
        runtime: String,
        /// Command for the command runtime (payload on stdin).
        #[arg(long, num_args = 1.., allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// List actors.
    List {
        /// Group id.
        group_id: String,
    },
    /// Remove an actor.
    Remove {
        /// Group id.
        group_id: String,
        /// Actor id.
        actor_id: String,
    },
}

/// `send` arguments.
#[derive(Args)]
pub struct SendArgs {
    /// Group id.
    pub group_id: String,
    /// Text.
    pub text: String,
    /// Recipients (repeatable): actor ids, @all, @peers, @foreman, user.
    #[arg(long = "to")]
    pub to: Vec<String>,
    /// send, request_reply or mail.
    #[arg(long, default_value = "send")]
    pub mode: String,
    /// Sender (local-trust hint).
    #[arg(long, default_value = "user")]
    pub by: String,
}

/// `reply` arguments.
#[derive(Args)]
pub struct ReplyArgs {
    /// Group id.
    pub group_id: String,
    /// Event replied to.
    pub reply_to: String,
    /// Text.
    pub text: String,
    /// send or mail.
    #[arg(long, default_value = "send")]
    pub mode: String,
    /// Sender.
    #[arg(long, default_value = "user")]
    pub by: String,
}

/// `inbox` arguments.
#[derive(Args)]
pub struct InboxArgs {
    /// Group id.
    pub group_id: String,
    /// Actor id.
    pub actor_id: String,
    /// Consume (move the Mail cursor) instead of peeking.
    #[arg(long)]
    pub read: bool,
    /// Reader principal.
    #[arg(long)]
    pub by: Option<String>,
}

/// `tail` arguments.
#[derive(Args)]
pub struct TailArgs {
    /// Group id.
    pub group_id: String,
    /// Keep streaming new events.
    #[arg(long)]
    pub follow: bool,
    /// Start after this seq (default: the last 20 events).
    #[arg(long)]
    pub since_seq: Option<u64>,
}

/// Client command set.
pub enum Cmd {
    Status,
    Group(GroupCmd),
    Actor(ActorCmd),
    Send(SendArgs),
    Reply(ReplyArgs),
    Inbox(InboxArgs),
    Tail(TailArgs),
}

/// Connects to the daemon of `home`.
pub fn connect(home: &Path) -> Result<Client> {
    let ep = Endpoint::discover(home);
    Client::connect(&ep).with_context(|| {
        format!(
            "no daemon at {} (start one with `convene serve`)",
            home.display()
        )
    })
}

fn line(ev: &Value) -> String {
    let d = &ev["data"];
    let body = match ev["kind"].as_str() {
        Some("chat.message") => format!(
            "[{}] {} -> {}: {}",
            d["message_mode"].as_str().unwrap_or(""),
            ev["by"].as_str().unwrap_or(""),
            d["to"]
                .as_array()
                .map(|a| a
                    .iter()
                    .filter_map(|x| x.as_str())
                    .collect::<Vec<_>>()
                    .join(","))
                .unwrap_or_default(),
            d["text"].as_str().unwrap_or("")
        ),
        _ => format!("{} {}", ev["by"].as_str().unwrap_or(""), d),
    };
    format!(
        "#{:<6} {} {:<28} {}",
        ev["seq"],
        ev["ts"].as_str().unwrap_or(""),
        ev["kind"].as_str().unwrap_or(""),
        body
    )
}

fn print(json_out: bool, v: &Value, human: impl FnOnce(&Value)) {
    if json_out {
        println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
    } else {
        human(v)
    }
}

/// Runs a client command.
pub fn run(home: &Path, json_out: bool, cmd: Cmd) -> Result<()> {
    let mut c = connect(home)?;
    match cmd {
        Cmd::Status => {
            let p = c.call("ping", json!({}))?;
            let g = c.call("groups", json!({}))?;
            print(json_out, &json!({"ping": p, "groups": g["groups"]}), |_| {
                println!(
                    "convene {} (pid {}) ipc_v {}",
                    p["version"].as_str().unwrap_or(""),
                    p["pid"],
                    p["ipc_v"]
                );
                for g in g["groups"].as_array().into_iter().flatten() {
                    println!(
                        "  {}  {:<24} actors={} events={}",
                        g["group_id"].as_str().unwrap_or(""),
                        g["title"].as_str().unwrap_or(""),
                        g["actors"],
                        g["last_seq"]
                    );
                }
            });
        }
        Cmd::Group(g) => {
            let v = match g {
                GroupCmd::Create { title, topic } => {
                    c.call("group_create", json!({"title": title, "topic": topic}))?
                }
                GroupCmd::List => c.call("groups", json!({}))?,
                GroupCmd::Show { group_id } => {
                    c.call("group_show", json!({"group_id": group_id}))?
                }
                GroupCmd::Set {
                    group_id,
                    key,
                    value,
                } => c.call(
                    "group_settings_update",
                    json!({"group_id": group_id, "patch": {key: value}}),
                )?,
                GroupCmd::Delete { group_id } => {
                    c.call("group_delete", json!({"group_id": group_id}))?
                }
            };
            print(json_out, &v, |v| {
                if let Some(gs) = v["groups"].as_array() {
                    for g in gs {
                        println!(
                            "{}  {}",
                            g["group_id"].as_str().unwrap_or(""),
                            g["title"].as_str().unwrap_or("")
                        );
                    }
                } else if let Some(id) = v["group_id"].as_str() {
                    println!("{id}");
                } else {
                    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
                }
            });
        }
        Cmd::Actor(a) => {
            let v = match a {
                ActorCmd::Add { group_id, actor_id, runtime, command } => {
                    c.call("actor_add", json!({"group_id": group_id, "actor_id": actor_id, "runtime": runtime, "command": command}))?
                }
                ActorCmd::List { group_id } => c.call("actor_list", json!({"group_id": group_id}))?,
                ActorCmd::Remove { group_id, actor_id } => c.call("actor_remove", json!({"group_id": group_id, "actor_id": actor_id}))?,
            };
            print(json_out, &v, |v| {
                if let Some(list) = v["actors"].as_array() {
                    for a in list {
                        println!(
                            "{:<20} {:<8} {}",
                            a["id"].as_str().unwrap_or(""),
                            a["role"].as_str().unwrap_or(""),
                            a["runtime"].as_str().unwrap_or("")
                        );
                    }
                } else if let Some(a) = v.get("actor") {
                    println!(
                        "{} ({})",
                        a["id"].as_str().unwrap_or(""),
                        a["role"].as_str().unwrap_or("")
                    );
                } else {
                    println!("removed {}", v["actor_id"].as_str().unwrap_or(""));
                }
            });
        }
        Cmd::Send(s) => {
            let v = c.call("send", json!({"group_id": s.group_id, "text": s.text, "to": s.to, "message_mode": s.mode, "by": s.by}))?;
            print(json_out, &v, |v| println!("{}", line(&v["event"])));
        }
        Cmd::Reply(r) => {
            let v = c.call("reply", json!({"group_id": r.group_id, "reply_to": r.reply_to, "text": r.text, "message_mode": r.mode, "by": r.by}))?;
            print(json_out, &v, |v| println!("{}", line(&v["event"])));
        }
        Cmd::Inbox(i) => {
            let op = if i.read { "inbox_read" } else { "inbox_peek" };
            let by = i.by.unwrap_or_else(|| i.actor_id.clone());
            let v = c.call(
                op,
                json!({"group_id": i.group_id, "actor_id": i.actor_id, "by": by}),
            )?;
            print(json_out, &v, |v| {
                for m in v["messages"].as_array().into_iter().flatten() {
                    println!("{}", line(m));
                }
            });
        }
        Cmd::Tail(t) => {
            let since = match t.since_seq {
                Some(s) => s,
                None => {
                    let tail =
                        c.call("ledger_tail", json!({"group_id": t.group_id, "limit": 20}))?;
                    tail["events"]
                        .as_array()
                        .and_then(|e| e.first())
                        .and_then(|e| e["seq"].as_u64())
                        .map(|s| s - 1)
                        .unwrap_or(0)
                }
            };
            let mut s = connect(home)?;
            let hs = convene_ipc::client::into_result(
                s.raw(&serde_json::to_vec(&json!({"v": 1, "op": "events_stream", "args": {"group_id": t.group_id, "since_seq": since, "follow": t.follow}}))?)?,
            )?;
            let _ = hs;
            loop {
                let item = match s.read_item() {
                    Ok(i) => i,
                    Err(_) => break,
                };
                if item["t"] == "event" {
                    if json_out {
                        println!("{}", item["event"]);
                    } else {
                        println!("{}", line(&item["event"]));
                    }
                }
            }
        }
    }
    Ok(())
}
