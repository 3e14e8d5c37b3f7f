//! Sealed-ballot votes: `create_vote`, `cast_vote`, `get_vote_status`, `list_votes`, and
//! the close (reveal) when every eligible voter voted or the deadline passed.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use convene_cowchat::{parse, CastVote, CreateVote, ErrorCode, ListVotes, VoteRef, WireError};
use serde_json::{json, Map, Value};
use time::OffsetDateTime;

use super::super::conn::{After, Session};
use super::super::{Face, SERVICE};
use super::state::{self, Vote};
use super::{append, check_member, member_name, seal, sealer};

/// Longest vote deadline accepted (30 days).
const MAX_DURATION_SECS: u64 = 30 * 24 * 3600;
/// `list_votes` without `limit`.
const DEFAULT_LIST: u64 = 20;
/// Largest `list_votes` `limit` (larger values are clamped).
const MAX_LIST: u64 = 1000;

fn not_found(id: &str) -> WireError {
    WireError::new(ErrorCode::VoteNotFound, format!("no vote {id}"))
}

/// The vote, if its room still exists.
fn vote(face: &Face, id: &str) -> Result<Vote, WireError> {
    let v = face
        .coord
        .state
        .lock()
        .votes
        .get(id)
        .cloned()
        .ok_or_else(|| not_found(id))?;
    if face.d.ledger.engine().group(&v.room_id).is_none() {
        return Err(not_found(id));
    }
    Ok(v)
}

/// The vote, if its room still exists and `principal` may see it: a vote of a room the
/// caller cannot see answers as an unknown one, so its id tells nothing.
fn visible_vote(face: &Face, id: &str, principal: &str) -> Result<Vote, WireError> {
    let v = vote(face, id)?;
    let eng = face.d.ledger.engine();
    match eng.group(&v.room_id) {
        Some(g) if super::super::rooms::visible(face, &eng, g, principal) => Ok(v),
        _ => Err(not_found(id)),
    }
}

/// `create_vote`: the room's members now are its eligible voters.
pub(in super::super) async fn create_vote(
    s: &mut Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let c: CreateVote = parse(payload)?;
    c.validate()?;
    if let Some(d) = c.duration_secs {
        if d == 0 || d > MAX_DURATION_SECS {
            return Err(WireError::payload(format!(
                "duration_secs must be 1-{MAX_DURATION_SECS}"
            )));
        }
    }
    let me = s.me().to_string();
    check_member(s, &c.room_id, &me)?;
    let face = s.face.clone();
    let _one = face.coord.write.lock().await;
    // The members now, with their actor generations: one removed and added again before the
    // change follower saw it is another actor, not this voter.
    let (eligible, generations): (Vec<String>, Map<String, Value>) = {
        let eng = face.d.ledger.engine();
        let g = super::super::rooms::room(&eng, &c.room_id)?;
        (
            g.collaborators().map(|a| a.id.clone()).collect(),
            g.collaborators()
                .map(|a| (a.id.clone(), json!(a.generation)))
                .collect(),
        )
    };
    let id = seal::new_id("vote");
    let deadline = c.duration_secs.map(|d| {
        convene_core::event::format_ts(
            OffsetDateTime::now_utc() + time::Duration::seconds(d as i64),
        )
    });
    let data = json!({
        "vote_id": id, "title": c.title, "description": c.description, "options": c.options,
        "eligible_voters": eligible, "eligible_generations": generations,
        "duration_secs": c.duration_secs, "deadline": deadline,
        "created_by": me,
    });
    append(&face, &c.room_id, &me, state::VOTE_CREATED, data).await?;
    if let Some(d) = &deadline {
        arm(face.clone(), id.clone(), d.clone());
    }
    Ok(vote(&face, &id)?.status_value())
}

/// `cast_vote`: stores the sealed ballot; answers counts only. The last eligible ballot
/// closes the vote right after the answer.
pub(in super::super) async fn cast_vote(
    s: &mut Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let c: CastVote = parse(payload)?;
    let me = s.me().to_string();
    let face = s.face.clone();
    let _one = face.coord.write.lock().await;
    // Eligibility is by agent id: the id must also be this key's to use in that room.
    let v = visible_vote(&face, &c.vote_id, &s.principal)?;
    if !v.is_open() {
        return Err(WireError::new(
            ErrorCode::VoteClosed,
            format!("vote {} is closed", v.vote_id),
        ));
    }
    if c.option_index >= v.options.len() as u64 {
        return Err(WireError::new(
            ErrorCode::InvalidOption,
            format!("option_index must be 0-{}", v.options.len() - 1),
        ));
    }
    let generation = {
        let eng = face.d.ledger.engine();
        eng.group(&v.room_id)
            .and_then(|g| g.actor(&me))
            .map(|a| a.generation)
    };
    if !v.eligible.contains(&me) || !generation.is_some_and(|g| v.same_voter(&me, g)) {
        return Err(WireError::new(
            ErrorCode::NotInRoom,
            format!(
                "{me} is not an eligible voter (not a member when the vote was created, or left the room since)"
            ),
        ));
    }
    if v.has_voted(&me) {
        return Err(WireError::new(
            ErrorCode::AlreadyVoted,
            format!("{me} already voted"),
        ));
    }
    let sealed = sealer(&face)?
        .seal(&v.vote_id, &me, c.option_index as u32)
        .map_err(|e| WireError::new(ErrorCode::Internal, e.to_string()))?;
    let data = json!({"vote_id": v.vote_id, "agent_id": me, "sealed": sealed});
    append(&face, &v.room_id, &me, state::VOTE_BALLOT, data).await?;
    // A voter removed over another face is seen here at the latest: this and the room's
    // other open votes stop waiting for it.
    let mut done = reconcile_locked(&face, Some(&v.room_id)).await;
    let v = vote(&face, &c.vote_id)?;
    if v.all_voted() && !done.contains(&v.vote_id) {
        done.push(v.vote_id.clone());
    }
    for id in done {
        let f = face.clone();
        s.after.push(After::Run(Box::new(move || {
            tokio::spawn(async move { close(f, id, "all_voted").await });
        })));
    }
    Ok(json!({
        "vote_id": v.vote_id,
        "votes_cast": v.ballots.len(),
        "eligible_voters": v.eligible.len(),
    }))
}

/// `get_vote_status`: counts while open; tally and ballots once closed.
pub(in super::super) async fn get_vote_status(
    s: &Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let r: VoteRef = parse(payload)?;
    // A push of this vote may have overtaken the fold of its event: wait for writes.
    let _settled = s.face.coord.write.lock().await;
    let v = visible_vote(&s.face, &r.vote_id, &s.principal)?;
    check_member(s, &v.room_id, s.me())?;
    Ok(v.status_value())
}

/// `list_votes`: the room's votes, newest first.
pub(in super::super) async fn list_votes(
    s: &Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let l: ListVotes = parse(payload)?;
    check_member(s, &l.room_id, s.me())?;
    let limit = l.limit.unwrap_or(DEFAULT_LIST).clamp(1, MAX_LIST) as usize;
    let _settled = s.face.coord.write.lock().await;
    let st = s.face.coord.state.lock();
    let votes: Vec<Value> = st
        .room_votes
        .get(&l.room_id)
        .map(|ids| {
            ids.iter()
                .rev()
                .filter_map(|id| st.votes.get(id))
                .take(limit)
                .map(Vote::status_value)
                .collect()
        })
        .unwrap_or_default();
    Ok(json!({"room_id": l.room_id, "votes": votes}))
}

/// `agent` (named `name` while a member) left `room`: each open vote it was eligible in and
/// had not voted in no longer waits for it (`x.cowchat.vote.voter_left`), and closes when
/// everyone still eligible has voted; a vote it had voted in keeps the ballot and records
/// its name for the reveal. Rejoining does not make it eligible again.
pub(in super::super) async fn voter_gone(face: &Face, room: &str, agent: &str, name: &str) {
    let settled = {
        let _one = face.coord.write.lock().await;
        let open: Vec<String> = {
            let st = face.coord.state.lock();
            st.room_votes
                .get(room)
                .into_iter()
                .flatten()
                .filter_map(|id| st.votes.get(id))
                .filter(|v| v.is_open() && v.eligible.iter().any(|e| e == agent))
                .map(|v| v.vote_id.clone())
                .collect()
        };
        let mut settled = Vec::new();
        for id in open {
            let data = json!({"vote_id": id, "agent_id": agent, "agent_name": name});
            if let Err(e) = append(face, room, SERVICE, state::VOTE_VOTER_LEFT, data).await {
                tracing::debug!(vote = %id, error = %e, "cowchat: could not record a voter leaving");
                continue;
            }
            let done = face
                .coord
                .state
                .lock()
                .votes
                .get(&id)
                .is_some_and(|v| v.is_open() && v.all_voted());
            if done {
                settled.push(id);
            }
        }
        settled
    };
    for id in settled {
        close_vote(face, id, "all_voted").await;
    }
}

/// Eligible voters of open votes that are no longer members of the vote's room and had not
/// voted, recorded as gone (`x.cowchat.vote.voter_left`): the removal and that record are
/// two commits (a kill -9 can fall between them), and a removal over another face (the CCCS
/// IPC's `actor_remove`, an import) is not seen by this face as it happens. Run at start-up,
/// after an import and after each ballot, before the votes everyone still eligible voted in
/// are closed; `room` limits it to one room.
pub(in super::super) async fn reconcile_departed(face: &Face, room: Option<&str>) {
    let _one = face.coord.write.lock().await;
    // The caller closes what this settled (start-up: `arm_all` closes every vote all voted in).
    reconcile_locked(face, room).await;
}

/// As the group changes (the face's change follower, `follow.rs`): records the voters of the
/// room's open votes that are no longer members, then closes the votes that now wait for
/// nobody. Takes the coordination lock only when there is such a voter.
pub(in super::super) async fn settle_departed(face: &Face, room: &str) {
    if departed(face, Some(room)).is_empty() {
        return;
    }
    let settled = {
        let _one = face.coord.write.lock().await;
        reconcile_locked(face, Some(room)).await
    };
    for id in settled {
        close_vote(face, id, "all_voted").await;
    }
}

/// (room, vote, agent) of each eligible voter of an open vote that had not voted and is no
/// longer a member of the vote's room, leaving out the members this face is removing right
/// now (their removal records them itself, with their name).
fn departed(face: &Face, room: Option<&str>) -> Vec<(String, String, String)> {
    let st = face.coord.state.lock();
    let eng = face.d.ledger.engine();
    // One room's votes through its index: the change follower asks on every group change.
    let votes: Vec<&Vote> = match room {
        Some(r) => st
            .room_votes
            .get(r)
            .into_iter()
            .flatten()
            .filter_map(|id| st.votes.get(id))
            .collect(),
        None => st.votes.values().collect(),
    };
    votes
        .into_iter()
        .filter(|v| v.is_open())
        .flat_map(|v| {
            let g = eng.group(&v.room_id);
            v.eligible
                .iter()
                .filter(|e| {
                    // Gone, or back as a later generation (removed and added again).
                    let gone = g
                        .is_some_and(|g| g.actor(e).is_none_or(|a| !v.same_voter(e, a.generation)));
                    !v.has_voted(e) && gone && !face.departing.contains(&v.room_id, e)
                })
                .map(|e| (v.room_id.clone(), v.vote_id.clone(), e.clone()))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// [`reconcile_departed`] for a caller holding the coordination write lock. Returns the open
/// votes now waiting for nobody (every voter still eligible voted), to be closed.
pub(in super::super) async fn reconcile_locked(face: &Face, room: Option<&str>) -> Vec<String> {
    let gone = departed(face, room);
    let mut settled: Vec<String> = Vec::new();
    for (room, id, agent) in gone {
        let data = json!({"vote_id": id, "agent_id": agent, "agent_name": agent});
        if let Err(e) = append(face, &room, SERVICE, state::VOTE_VOTER_LEFT, data).await {
            tracing::debug!(vote = %id, error = %e, "cowchat: could not record a departed voter");
        }
        let st = face.coord.state.lock();
        if !settled.contains(&id)
            && st
                .votes
                .get(&id)
                .is_some_and(|v| v.is_open() && v.all_voted())
        {
            settled.push(id);
        }
    }
    settled
}

/// Reveals a vote ([`close_vote`]), from a spawned task.
pub(super) async fn close(face: Arc<Face>, id: String, reason: &str) {
    close_vote(&face, id, reason).await
}

/// Reveals a vote: opens every ballot and appends `x.cowchat.vote.result` (no-op when it is
/// already closed). A ballot that does not open under this daemon's key (the key file was
/// replaced) is left out of the tally and logged. A voter that left is named as it was
/// called in the room.
async fn close_vote(face: &Face, id: String, reason: &str) {
    let _one = face.coord.write.lock().await;
    let Some(v) = face.coord.state.lock().votes.get(&id).cloned() else {
        return;
    };
    if !v.is_open() || face.d.ledger.engine().group(&v.room_id).is_none() {
        return;
    }
    let sealer = match sealer(face) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(vote = %id, error = %e, "cowchat: cannot open ballots");
            return;
        }
    };
    let mut opened = Vec::with_capacity(v.ballots.len());
    for (agent, blob) in &v.ballots {
        match sealer.open(&v.vote_id, agent, blob) {
            Ok(i) if (i as usize) < v.options.len() => {
                // A member now is named as it is now; a voter that left, as it was then (as
                // recorded when it left, or, removed over another face, as it joined).
                let member = is_member(face, &v.room_id, agent);
                let name = match v.left_names.get(agent) {
                    Some(then) if !member => then.clone(),
                    _ if !member => joined_as(face, &v.room_id, agent)
                        .await
                        .unwrap_or_else(|| agent.clone()),
                    _ => member_name(face, &v.room_id, agent),
                };
                opened.push((agent.clone(), name, i as usize));
            }
            _ => tracing::warn!(vote = %id, agent, "cowchat: a sealed ballot does not open"),
        }
    }
    let data = state::result_data(&v, &opened, reason);
    if let Err(e) = append(face, &v.room_id, SERVICE, state::VOTE_RESULT, data).await {
        tracing::warn!(vote = %id, error = %e, "cowchat: could not reveal a vote");
    }
}

/// Events read per page while looking for a former member's join.
const JOIN_PAGE: usize = 256;

/// The name `agent` last joined `room` under (the title of its latest `actor.add`), for a
/// voter removed without a `voter_left` record naming it (removed over another face).
async fn joined_as(face: &Face, room: &str, agent: &str) -> Option<String> {
    let readers = face.d.ledger.readers().clone();
    let (gid, who) = (room.to_string(), agent.to_string());
    super::super::messages::blocking(move || {
        let kinds = [convene_core::event::kinds::ACTOR_ADD.to_string()];
        let mut before = 0;
        loop {
            let page = readers.events_before(&gid, before, JOIN_PAGE, &kinds)?;
            for e in page.iter().rev() {
                let Ok(ev) = serde_json::from_str::<Value>(&e.json) else {
                    continue;
                };
                let d = &ev["data"];
                if d["actor_id"].as_str() == Some(who.as_str()) {
                    let title = d["title"].as_str().filter(|t| !t.is_empty());
                    return Ok(title.map(str::to_string));
                }
            }
            match page.first() {
                Some(oldest) if page.len() == JOIN_PAGE => before = oldest.seq,
                _ => return Ok(None),
            }
        }
    })
    .await
    .ok()
    .flatten()
}

fn is_member(face: &Face, room: &str, agent: &str) -> bool {
    let eng = face.d.ledger.engine();
    eng.group(room).is_some_and(|g| g.actor(agent).is_some())
}

/// Closes the vote at its deadline (at once when it already passed).
fn arm(face: Arc<Face>, id: String, deadline: String) {
    tokio::spawn(async move {
        let due = convene_core::event::parse_ts(&deadline)
            .map(|d| d - OffsetDateTime::now_utc())
            .and_then(|left| Duration::try_from(left).ok())
            .unwrap_or(Duration::ZERO);
        let mut stop = face.d.shutdown_rx();
        tokio::select! {
            _ = tokio::time::sleep(due) => close(face, id, "deadline").await,
            _ = stop.changed() => {}
        }
    });
}

/// At startup: arms every open vote's deadline (closing the overdue ones now) and closes
/// votes whose last ballot landed just before the daemon stopped.
pub(super) fn arm_all(face: &Arc<Face>) {
    arm_open(face, |_| true, |_| true);
}

/// After an import into `room`: closes its votes the imported ballots completed and arms the
/// deadlines of the votes it brought (`known`: the room's votes before, already armed).
pub(super) fn arm_room(face: &Arc<Face>, room: &str, known: &HashSet<String>) {
    arm_open(face, |v| v.room_id == room, |v| !known.contains(&v.vote_id));
}

/// Closes the open votes `pick` selects that every eligible voter voted in, and arms the
/// deadline of those of them that are `fresh` (have no timer yet).
fn arm_open(face: &Arc<Face>, pick: impl Fn(&Vote) -> bool, fresh: impl Fn(&Vote) -> bool) {
    let open: Vec<(String, Option<String>, bool)> = {
        let st = face.coord.state.lock();
        st.votes
            .values()
            .filter(|v| v.is_open() && pick(v))
            .map(|v| {
                let deadline = v.deadline.clone().filter(|_| fresh(v));
                (v.vote_id.clone(), deadline, v.all_voted())
            })
            .collect()
    };
    for (id, deadline, all) in open {
        if all {
            let f = face.clone();
            tokio::spawn(async move { close(f, id, "all_voted").await });
        } else if let Some(d) = deadline {
            arm(face.clone(), id, d);
        }
    }
}
