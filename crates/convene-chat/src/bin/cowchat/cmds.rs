//! The request/response commands: send, thinking, rooms, agents, presence, history, monitor,
//! status, votes, elections, tasks, webhook subscriptions.

use anyhow::bail;
use convene_chat::message;
use serde_json::{json, Map, Value};

use crate::ctx::{print_json, Ctx};
use crate::{Cmd, ElectionCmd, RoomsCmd, SinceSeq, SubCmd, TaskCmd, VoteCmd};

/// Runs a command that is neither `wait`, `lantern` nor `keygen`.
pub fn run(ctx: &Ctx, cmd: Cmd) -> anyhow::Result<i32> {
    let mut c = ctx.connect()?;
    match cmd {
        Cmd::Send {
            room,
            text,
            reply_to,
            end,
            mentions,
            kind,
        } => {
            let r = ctx.room(&mut c, &room)?;
            let mut p = json!({"room_id": r.id, "content": ctx.outgoing(&r, &text)?});
            if let Some(id) = reply_to {
                p["reply_to"] = json!(id);
            }
            if !mentions.is_empty() {
                p["mentions"] = json!(mentions);
            }
            let mut md = Map::new();
            if let Some(k) = kind {
                md.insert("kind".into(), json!(k));
            }
            if end {
                md.insert("kind".into(), json!(message::END_KIND));
            }
            if !md.is_empty() {
                p["metadata"] = Value::Object(md);
            }
            let v = c.request("send_message", p)?;
            print_json(&json!({"message_id": v["message_id"], "room_id": r.id, "seq": v["seq"]}));
        }
        Cmd::Thinking { room, text } => {
            let r = ctx.room(&mut c, &room)?;
            let content = ctx.outgoing(&r, &text)?;
            let v = c.request("thinking", json!({"room_id": r.id, "content": content}))?;
            print_json(&json!({"message_id": v["message_id"], "room_id": r.id, "seq": v["seq"]}));
        }
        Cmd::Rooms(rc) => rooms(ctx, &mut c, rc)?,
        Cmd::Agents { room } => {
            let mut p = json!({});
            if let Some(room) = room {
                p["room_id"] = json!(c.resolve_room(&room)?["room_id"]);
            }
            let v = c.request("list_agents", p)?;
            if ctx.json {
                print_json(&v);
            } else {
                for a in v["agents"].as_array().into_iter().flatten() {
                    println!("{}", agent_line(a));
                }
            }
        }
        Cmd::Presence {
            status,
            detail,
            progress,
        } => {
            if !["idle", "waiting", "working", "thinking"].contains(&status.as_str()) {
                bail!("status must be idle, waiting, working or thinking");
            }
            let mut p = json!({"status": status});
            if let Some(d) = detail {
                p["status_detail"] = json!(d);
            }
            if let Some(n) = progress {
                p["progress"] = json!(n);
            }
            c.request("set_presence", p)?;
            print_json(&json!({"status": status}));
        }
        Cmd::History {
            room,
            limit,
            since,
            since_seq,
            follow,
            text,
        } => {
            let r = ctx.room(&mut c, &room)?;
            // Where following starts when the page is empty: the given seq, else the tip
            // read *before* the page (a tip read after it would skip a message that landed
            // between the two reads).
            let mut last = match since_seq {
                Some(n) => n,
                None if follow => ctx.tip(&mut c, &r.id)?,
                None => 0,
            };
            let mut p = json!({"room_id": r.id, "limit": limit});
            if let Some(s) = since {
                p["since"] = json!(s);
            }
            if let Some(n) = since_seq {
                p["since_seq"] = json!(n);
            }
            let v = c.request("get_history", p)?;
            let page = v["messages"].as_array().cloned().unwrap_or_default();
            if let Some(newest) = page.iter().map(message::seq).max() {
                // Follow on from what was printed (with --since and a limit, that can be
                // well below the tip).
                last = newest;
            }
            for m in page {
                let m = ctx.incoming(m);
                if text {
                    println!("{}", message::text_line(&m));
                } else {
                    print_json(&m);
                }
            }
            if follow {
                drop(c);
                return crate::wait::follow_history(ctx, &r.id, last, text);
            }
        }
        Cmd::Monitor { room, raw } => return monitor(ctx, &mut c, room, raw),
        Cmd::Status => {
            let rooms = c.list_rooms()?;
            let agents = c.request("list_agents", json!({}))?;
            let s = json!({
                "url": ctx.ep.to_string(),
                "agent_id": c.agent_id,
                "name": c.name,
                "server": c.server,
                "rooms": rooms.len(),
                "agents_online": agents["agents"].as_array().map_or(0, Vec::len),
                "room_key": ctx.room_key.is_some(),
            });
            if ctx.json {
                print_json(&s);
            } else {
                println!(
                    "connected to {} as {} ({})",
                    s["url"].as_str().unwrap_or(""),
                    c.name,
                    c.agent_id
                );
                println!(
                    "server {} protocol {}",
                    c.server["server"].as_str().unwrap_or("?"),
                    c.server["protocol_version"]
                );
                println!(
                    "rooms visible: {}, agents online: {}",
                    s["rooms"], s["agents_online"]
                );
                println!(
                    "room key: {}",
                    if ctx.room_key.is_some() {
                        "set"
                    } else {
                        "not set"
                    }
                );
            }
        }
        Cmd::Vote(v) => vote(&mut c, v)?,
        Cmd::Election(e) => election(ctx, &mut c, e)?,
        Cmd::Task(t) => task(ctx, &mut c, t)?,
        Cmd::Sub(s) => sub(ctx, &mut c, s)?,
        Cmd::Wait(_) | Cmd::Lantern(_) | Cmd::Keygen => unreachable!("dispatched in main"),
    }
    Ok(0)
}

fn agent_line(a: &Value) -> String {
    let mut s = format!(
        "{} ({})",
        a["name"].as_str().unwrap_or("?"),
        a["agent_id"].as_str().unwrap_or("?")
    );
    if let Some(st) = a["status"].as_str() {
        s.push_str(&format!(" {st}"));
    }
    if let Some(d) = a["status_detail"].as_str() {
        s.push_str(&format!(" — {d}"));
    }
    if let Some(p) = a["progress"].as_u64() {
        s.push_str(&format!(" [{p}%]"));
    }
    if a["online"].as_bool() == Some(false) {
        s.push_str(" (offline)");
    }
    s
}

fn room_line(r: &Value) -> String {
    let mut flags = vec![];
    for f in ["public", "ephemeral", "encrypted"] {
        if r[f].as_bool() == Some(true) {
            flags.push(f);
        }
    }
    format!(
        "{}  {}  members={}{}",
        r["room_id"].as_str().unwrap_or("?"),
        r["name"].as_str().unwrap_or("?"),
        r["member_count"].as_u64().unwrap_or(0),
        if flags.is_empty() {
            String::new()
        } else {
            format!("  [{}]", flags.join(","))
        }
    )
}

fn rooms(ctx: &Ctx, c: &mut convene_chat::Client, rc: RoomsCmd) -> anyhow::Result<()> {
    match rc {
        RoomsCmd::List { parent } => {
            let mut p = json!({});
            if let Some(parent) = parent {
                p["parent_id"] = c.resolve_room(&parent)?["room_id"].clone();
            }
            let v = c.request("list_rooms", p)?;
            if ctx.json {
                print_json(&v);
            } else {
                for r in v["rooms"].as_array().into_iter().flatten() {
                    println!("{}", room_line(r));
                }
            }
        }
        RoomsCmd::Create {
            name,
            description,
            parent,
            ephemeral,
            public,
            encrypted,
        } => {
            // Only flags that are set: an absent flag is the server's default.
            let mut p = json!({"name": name});
            for (k, on) in [
                ("ephemeral", ephemeral),
                ("public", public),
                ("encrypted", encrypted),
            ] {
                if on {
                    p[k] = json!(true);
                }
            }
            if let Some(d) = description {
                p["description"] = json!(d);
            }
            if let Some(parent) = parent {
                p["parent_id"] = c.resolve_room(&parent)?["room_id"].clone();
            }
            if encrypted && ctx.room_key.is_none() {
                eprintln!("cowchat: note: no room key set; you will not be able to send to this room until COWCHAT_ROOM_KEY is set");
            }
            let room = c.request("create_room", p)?;
            let rid = room["room_id"].as_str().unwrap_or_default().to_string();
            c.ensure_joined(&rid)?;
            print_json(&room);
        }
        RoomsCmd::Info { room } => {
            let id = c.resolve_room(&room)?["room_id"].clone();
            let v = c.request("room_info", json!({"room_id": id}))?;
            if ctx.json {
                print_json(&v);
            } else {
                let r = if v["room"].is_object() {
                    &v["room"]
                } else {
                    &v
                };
                println!("{}", room_line(r));
                if let Some(d) = r["description"].as_str().filter(|d| !d.is_empty()) {
                    println!("  {d}");
                }
                let members = v["agents"].as_array().or_else(|| v["members"].as_array());
                for a in members.into_iter().flatten() {
                    println!("  member {}", agent_line(a));
                }
                for s in v["sub_rooms"].as_array().into_iter().flatten() {
                    println!("  sub-room {}", room_line(s));
                }
                if let Some(h) = v["current_turn_holder"].as_str() {
                    println!("  turn: {h}");
                }
            }
        }
        RoomsCmd::Rename { room, name } => {
            let id = c.resolve_room(&room)?["room_id"].clone();
            print_json(&c.request("rename_room", json!({"room_id": id, "name": name}))?);
        }
        RoomsCmd::Destroy { room, yes } => {
            if !yes {
                bail!("destroying a room is irreversible: pass --yes");
            }
            let id = c.resolve_room(&room)?["room_id"].clone();
            print_json(&c.request("destroy_room", json!({"room_id": id}))?);
        }
        RoomsCmd::Tip { room } => {
            let id = c.resolve_room(&room)?["room_id"].clone();
            let v = c.request("room_tip", json!({"room_id": id}))?;
            if ctx.json {
                print_json(&v);
            } else {
                println!("{}", v["seq"].as_u64().unwrap_or(0));
            }
        }
    }
    Ok(())
}

fn monitor(
    ctx: &Ctx,
    c: &mut convene_chat::Client,
    room: Option<String>,
    raw: bool,
) -> anyhow::Result<i32> {
    // Pushes flow only for joined rooms: join the one asked for, or every visible room.
    let ids: Vec<String> = match room {
        Some(r) => vec![ctx.room(c, &r)?.id],
        None => c
            .list_rooms()?
            .iter()
            .filter_map(|r| r["room_id"].as_str().map(String::from))
            .collect(),
    };
    for id in &ids {
        c.ensure_joined(id)?;
    }
    eprintln!("monitor: watching {} room(s)", ids.len());
    loop {
        let Some(f) = c.next_push(None)? else {
            continue;
        };
        let mut f = f;
        if matches!(f.ftype.as_str(), "message_received" | "thinking") {
            f.payload = ctx.incoming(f.payload);
        }
        if raw {
            print_json(&f.to_value());
            continue;
        }
        let p = &f.payload;
        let room = p["room_id"].as_str().unwrap_or("-");
        let line = match f.ftype.as_str() {
            "message_received" | "thinking" => format!("{room} {}", message::text_line(p)),
            "mention" => format!(
                "{room} mention: {}",
                p["message"]["content"].as_str().unwrap_or("")
            ),
            "agent_joined" => format!(
                "{room} joined: {}",
                p["agent"]["name"]
                    .as_str()
                    .or_else(|| p["name"].as_str())
                    .unwrap_or("?")
            ),
            "agent_left" => format!("{room} left: {}", p["agent_id"].as_str().unwrap_or("?")),
            "presence_update" => format!("presence: {}", agent_line(p)),
            "decision_made" => format!(
                "{room} decision by {}: {}",
                p["leader_name"].as_str().unwrap_or("?"),
                p["content"].as_str().unwrap_or("")
            ),
            t => format!("{room} {t}: {p}"),
        };
        println!("{line}");
    }
}

fn vote(c: &mut convene_chat::Client, v: VoteCmd) -> anyhow::Result<()> {
    let reply = match v {
        VoteCmd::Create {
            room,
            title,
            options,
            description,
            duration,
        } => {
            let id = c.resolve_room(&room)?["room_id"].clone();
            let mut p = json!({"room_id": id, "title": title, "options": options});
            if let Some(d) = description {
                p["description"] = json!(d);
            }
            if let Some(d) = duration {
                p["duration_secs"] = json!(d);
            }
            c.request("create_vote", p)?
        }
        VoteCmd::Cast { vote_id, option } => c.request(
            "cast_vote",
            json!({"vote_id": vote_id, "option_index": option}),
        )?,
        VoteCmd::Status { vote_id } => c.request("get_vote_status", json!({"vote_id": vote_id}))?,
        VoteCmd::History { room, limit } => {
            let id = c.resolve_room(&room)?["room_id"].clone();
            c.request("list_votes", json!({"room_id": id, "limit": limit}))?
        }
    };
    print_json(&reply);
    Ok(())
}

fn election(ctx: &Ctx, c: &mut convene_chat::Client, e: ElectionCmd) -> anyhow::Result<()> {
    let reply = match e {
        ElectionCmd::Start { room } => {
            let r = ctx.room(c, &room)?;
            c.request("elect_leader", json!({"room_id": r.id}))?
        }
        ElectionCmd::Decline { room } => {
            let r = ctx.room(c, &room)?;
            c.request("decline_election", json!({"room_id": r.id}))?
        }
        ElectionCmd::Decide { room, text } => {
            let r = ctx.room(c, &room)?;
            let content = ctx.outgoing(&r, &text)?;
            c.request(
                "decision",
                json!({"room_id": r.id, "content": content, "metadata": {}}),
            )?
        }
    };
    print_json(&reply);
    Ok(())
}

fn task(ctx: &Ctx, c: &mut convene_chat::Client, t: TaskCmd) -> anyhow::Result<()> {
    // Tasks are for members: every form joins the room first.
    let reply = match t {
        TaskCmd::Assign {
            room,
            title,
            description,
            assignee,
        } => {
            let r = ctx.room(c, &room)?;
            let mut p = json!({"room_id": r.id, "title": title});
            if let Some(d) = description {
                p["description"] = json!(d);
            }
            if let Some(a) = assignee {
                p["assignee"] = json!(a);
            }
            c.request("assign_task", p)?
        }
        TaskCmd::Update {
            room,
            task_id,
            status,
            assignee,
            note,
        } => {
            let r = ctx.room(c, &room)?;
            // `update_task` names no room: check the task is this room's, so a task id
            // given with the wrong room is refused instead of changing another room's task.
            let tasks = c.request("list_tasks", json!({"room_id": r.id}))?;
            let here = tasks["tasks"]
                .as_array()
                .is_some_and(|ts| ts.iter().any(|t| t["task_id"] == task_id.as_str()));
            if !here {
                bail!("task_not_found: no task {task_id} in room {room}");
            }
            let mut p = json!({"task_id": task_id});
            for (k, v) in [("status", status), ("assignee", assignee), ("note", note)] {
                if let Some(v) = v {
                    p[k] = json!(v);
                }
            }
            c.request("update_task", p)?
        }
        TaskCmd::List { room, status, text } => {
            let r = ctx.room(c, &room)?;
            let mut p = json!({"room_id": r.id});
            if let Some(s) = status {
                p["status"] = json!(s);
            }
            let v = c.request("list_tasks", p)?;
            if text {
                for t in v["tasks"].as_array().into_iter().flatten() {
                    println!("{}", task_line(t));
                }
                return Ok(());
            }
            v
        }
    };
    print_json(&reply);
    Ok(())
}

/// `task list --text`: `ID [status] title -> assignee (note)`.
fn task_line(t: &Value) -> String {
    let mut s = format!(
        "{} [{}] {}",
        t["task_id"].as_str().unwrap_or("?"),
        t["status"].as_str().unwrap_or("?"),
        t["title"].as_str().unwrap_or("")
    );
    match t["assignee"].as_str() {
        Some(a) => s.push_str(&format!(" -> {a}")),
        None => s.push_str(" (unassigned)"),
    }
    if let Some(n) = t["note"].as_str().filter(|n| !n.is_empty()) {
        s.push_str(&format!(" ({n})"));
    }
    s
}

fn sub(ctx: &Ctx, c: &mut convene_chat::Client, s: SubCmd) -> anyhow::Result<()> {
    let reply = match s {
        SubCmd::Create {
            room,
            url,
            secret,
            kinds,
            only_from,
            not_from,
            exclude_thinking,
            since_seq,
        } => {
            let r = ctx.room(c, &room)?;
            let mut p = json!({"room_id": r.id, "webhook_url": url, "secret": secret,
                "exclude_thinking": exclude_thinking});
            if !kinds.is_empty() {
                p["kinds"] = json!(kinds);
            }
            if let Some(x) = only_from {
                p["only_from"] = json!(x);
            }
            if let Some(x) = not_from {
                p["not_from"] = json!(x);
            }
            p["since_seq"] = match since_seq.unwrap_or(SinceSeq::Tip) {
                SinceSeq::N(n) => json!(n),
                SinceSeq::Tip => json!("tip"),
                SinceSeq::Auto => json!("auto"),
            };
            c.request("subscribe", p)?
        }
        SubCmd::List { room } => {
            let mut p = json!({});
            if let Some(room) = room {
                p["room_id"] = c.resolve_room(&room)?["room_id"].clone();
            }
            c.request("list_subscriptions", p)?
        }
        SubCmd::Delete { id } => c.request("unsubscribe", json!({"subscription_id": id}))?,
        SubCmd::Enable { id } => {
            c.request("enable_subscription", json!({"subscription_id": id}))?
        }
    };
    print_json(&reply);
    Ok(())
}
