//! Leader elections and decisions: `elect_leader` (candidates = the room's connected
//! members, a 2-second opt-out window), `decline_election`, and `decision` (leader only,
//! an ordinary `chat.message` marked as a decision).

use std::sync::Arc;
use std::time::Duration;

use convene_cowchat::{parse, ErrorCode, RoomContent, RoomId, WireError};
use serde_json::{json, Map, Value};
use time::OffsetDateTime;

use super::super::conn::{After, Session};
use super::super::{messages, wire, Face, SERVICE};
use super::{append, check_member, member_name, seal, state, who};

/// The opt-out window, in seconds.
pub(crate) const OPT_OUT_SECONDS: u64 = 2;

/// `elect_leader`: starts an election among the room's connected members.
pub(in super::super) async fn elect_leader(
    s: &mut Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let r: RoomId = parse(payload)?;
    let (me, _) = who(s);
    check_member(s, &r.room_id, &me)?;
    let face = s.face.clone();
    let _one = face.coord.write.lock().await;
    if face.coord.state.lock().elections.contains_key(&r.room_id) {
        return Err(WireError::new(
            ErrorCode::ElectionInProgress,
            format!("an election is already running in {}", r.room_id),
        ));
    }
    let candidates = super::super::live::turn_order(&face, &r.room_id);
    let ends_at = convene_core::event::format_ts(
        OffsetDateTime::now_utc() + time::Duration::seconds(OPT_OUT_SECONDS as i64),
    );
    let data = json!({
        "candidates": candidates, "started_by": me,
        "opt_out_seconds": OPT_OUT_SECONDS, "ends_at": ends_at,
    });
    append(
        &face,
        &r.room_id,
        &me,
        state::ELECTION_STARTED,
        data.clone(),
    )
    .await?;
    arm(face.clone(), r.room_id.clone(), ends_at);
    let mut v = data;
    v["room_id"] = json!(r.room_id);
    Ok(v)
}

/// `decline_election`: opts out of the running election.
pub(in super::super) async fn decline_election(
    s: &mut Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let r: RoomId = parse(payload)?;
    let (me, _) = who(s);
    check_member(s, &r.room_id, &me)?;
    let face = s.face.clone();
    let _one = face.coord.write.lock().await;
    let declined = match face.coord.state.lock().elections.get(&r.room_id) {
        None => {
            return Err(WireError::new(
                ErrorCode::NoElectionActive,
                format!("no election is running in {}", r.room_id),
            ))
        }
        Some(e) => e.declined.contains(&me),
    };
    if !declined {
        append(
            &face,
            &r.room_id,
            &me,
            state::ELECTION_DECLINED,
            json!({"agent_id": me}),
        )
        .await?;
    }
    Ok(json!({"room_id": r.room_id, "agent_id": me, "declined": true}))
}

/// Ends the room's election: a random candidate that did not decline and is still a member
/// leads (`x.cowchat.leader.elected`); when there is none, the room has no leader
/// (`x.cowchat.leader.cleared`, reason `no candidates`).
async fn complete(face: Arc<Face>, room: String) {
    let _one = face.coord.write.lock().await;
    let Some(e) = face.coord.state.lock().elections.get(&room).cloned() else {
        return;
    };
    let members: Vec<String> = {
        let eng = face.d.ledger.engine();
        match eng.group(&room) {
            Some(g) => g.collaborators().map(|a| a.id.clone()).collect(),
            None => {
                face.coord.state.lock().elections.remove(&room);
                return;
            }
        }
    };
    let pool: Vec<String> = e
        .remaining()
        .into_iter()
        .filter(|c| members.contains(c))
        .collect();
    let (kind, data) = if pool.is_empty() {
        (
            state::LEADER_CLEARED,
            json!({"reason": "no candidates", "ends_election": true}),
        )
    } else {
        let leader = pool[seal::pick(pool.len())].clone();
        let name = member_name(&face, &room, &leader);
        (
            state::LEADER_ELECTED,
            json!({"leader_id": leader, "leader_name": name}),
        )
    };
    if let Err(err) = append(&face, &room, SERVICE, kind, data).await {
        tracing::warn!(room, error = %err, "cowchat: could not end an election");
        face.coord.state.lock().elections.remove(&room);
    }
}

/// Ends the election when its window closes (at once when it already did).
fn arm(face: Arc<Face>, room: String, ends_at: String) {
    tokio::spawn(async move {
        let due = convene_core::event::parse_ts(&ends_at)
            .map(|d| d - OffsetDateTime::now_utc())
            .and_then(|left| Duration::try_from(left).ok())
            .unwrap_or(Duration::ZERO);
        let mut stop = face.d.shutdown_rx();
        tokio::select! {
            _ = tokio::time::sleep(due) => complete(face, room).await,
            _ = stop.changed() => {}
        }
    });
}

/// At startup: arms every election still in its window (ending the overdue ones now).
pub(super) fn arm_all(face: &Arc<Face>) {
    let running: Vec<(String, String)> = {
        let st = face.coord.state.lock();
        st.elections
            .iter()
            .map(|(r, e)| (r.clone(), e.ends_at.clone()))
            .collect()
    };
    for (room, ends_at) in running {
        arm(face.clone(), room, ends_at);
    }
}

/// After an import into `room`: arms its election when the import started one (its window
/// differs from the one running before, `before`, which has its timer).
pub(super) fn arm_room(face: &Arc<Face>, room: &str, before: Option<&str>) {
    let ends_at = face
        .coord
        .state
        .lock()
        .elections
        .get(room)
        .map(|e| e.ends_at.clone())
        .filter(|e| Some(e.as_str()) != before);
    if let Some(ends_at) = ends_at {
        arm(face.clone(), room.to_string(), ends_at);
    }
}

/// `decision`: a leader-only message with `metadata.type = "decision"`, pushed to the other
/// members as `decision_made` and kept in history.
pub(in super::super) async fn decision(
    s: &mut Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let d: RoomContent = parse(payload)?;
    d.validate_with(&s.limits().sizes())?;
    messages::check_may_post(s, &d.room_id, &d.content)?;
    let (me, name) = who(s);
    // `leader_elected` may have reached the leader before its event was folded.
    let _settled = s.face.coord.write.lock().await;
    let leads = s
        .face
        .coord
        .state
        .lock()
        .leader(&d.room_id)
        .is_some_and(|(l, _)| *l == me);
    if !leads {
        return Err(WireError::new(
            ErrorCode::NotLeader,
            format!("{me} is not the elected leader of {}", d.room_id),
        ));
    }
    // Only now: a refused decision does not use up the key's message rate.
    messages::take_message_token(s)?;
    let mut md = d.metadata.unwrap_or_default();
    md.insert("type".into(), json!("decision"));
    let mut cc = Map::new();
    cc.insert("name".into(), json!(name));
    cc.insert("metadata".into(), Value::Object(md));
    cc.insert("decision".into(), json!(true));
    let cmd = messages::message_command(s, d.room_id, d.content, None, cc);
    let c = s.face.d.ledger.execute(cmd).await.map_err(wire)?;
    let (raw, turn) = messages::sent_payload(c)?;
    if let Some(t) = turn {
        s.after.push(After::Sent(t));
    }
    serde_json::from_slice(&raw).map_err(|e| WireError::new(ErrorCode::Internal, e.to_string()))
}
