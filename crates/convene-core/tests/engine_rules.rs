//! Engine rules against an in-memory ledger view: unit tests named by the MUST they hold, and
//! property tests over random inputs.

use std::cell::RefCell;
use std::collections::HashMap;

use convene_core::view::{Change, DeliveryRow, LedgerView, Obligation, ObligationStatus};
use convene_core::{
    ClaimKind, Command, CoreError, DeliveryState, Engine, ErrorCode, Event, Limits, SendArgs,
};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

/// (group, source/by, actor/client_id) keys.
type Key3 = (String, String, String);

/// A faithful in-memory projection store: applies outcomes as the SQLite writer does.
#[derive(Default)]
struct Mem {
    events: RefCell<Vec<Event>>,
    obligations: RefCell<HashMap<Key3, (ObligationStatus, Option<String>)>>,
    mail: RefCell<Vec<(String, String, u64, String)>>,
    cursors: RefCell<HashMap<(String, String), u64>>,
    deliveries: RefCell<HashMap<(String, String), DeliveryRow>>,
    idem: RefCell<HashMap<Key3, (String, i64)>>,
}

impl Mem {
    fn apply(&self, out: &convene_core::Outcome) {
        self.events.borrow_mut().extend(out.events.iter().cloned());
        for c in &out.changes {
            match c {
                Change::Obligation {
                    group_id,
                    source_event_id,
                    actor_id,
                    status,
                    closed_by,
                } => {
                    self.obligations.borrow_mut().insert(
                        (group_id.clone(), source_event_id.clone(), actor_id.clone()),
                        (*status, closed_by.clone()),
                    );
                }
                Change::MailIndex {
                    group_id,
                    actor_id,
                    seq,
                    event_id,
                } => self.mail.borrow_mut().push((
                    group_id.clone(),
                    actor_id.clone(),
                    *seq,
                    event_id.clone(),
                )),
                Change::MailCursor {
                    group_id,
                    actor_id,
                    seq,
                    ..
                } => {
                    let mut c = self.cursors.borrow_mut();
                    let e = c.entry((group_id.clone(), actor_id.clone())).or_insert(0);
                    *e = (*e).max(*seq);
                }
                Change::Delivery { group_id, row } => {
                    self.deliveries
                        .borrow_mut()
                        .insert((group_id.clone(), row.delivery_id.clone()), row.clone());
                }
                Change::Idempotency {
                    group_id,
                    by,
                    client_id,
                    event_id,
                    at_unix,
                } => {
                    self.idem.borrow_mut().insert(
                        (group_id.clone(), by.clone(), client_id.clone()),
                        (event_id.clone(), *at_unix),
                    );
                }
                Change::ActorRetire {
                    group_id,
                    actor_id,
                    closed_by,
                } => {
                    self.mail
                        .borrow_mut()
                        .retain(|(g, a, _, _)| !(g == group_id && a == actor_id));
                    self.cursors
                        .borrow_mut()
                        .remove(&(group_id.clone(), actor_id.clone()));
                    for ((g, _, a), (st, by)) in self.obligations.borrow_mut().iter_mut() {
                        if g == group_id && a == actor_id && *st == ObligationStatus::Requested {
                            *st = ObligationStatus::Cancelled;
                            *by = Some(closed_by.clone());
                        }
                    }
                }
                // Read back by the daemon's recovery, not through the view.
                Change::GroupUpsert(_) | Change::GroupDelete(_) | Change::DeliveryDue { .. } => {}
            }
        }
    }
}

impl LedgerView for Mem {
    fn event(&self, g: &str, id: &str) -> Result<Option<Event>, CoreError> {
        Ok(self
            .events
            .borrow()
            .iter()
            .find(|e| e.group_id == g && e.id == id)
            .cloned())
    }
    fn obligations(&self, g: &str, s: &str) -> Result<Vec<Obligation>, CoreError> {
        Ok(self
            .obligations
            .borrow()
            .iter()
            .filter(|((gg, ss, _), _)| gg == g && ss == s)
            .map(|((_, _, a), (st, cb))| Obligation {
                actor_id: a.clone(),
                status: *st,
                closed_by: cb.clone(),
            })
            .collect())
    }
    fn mail_addressed(&self, g: &str, a: &str, e: &str) -> Result<Option<u64>, CoreError> {
        Ok(self
            .mail
            .borrow()
            .iter()
            .find(|(gg, aa, _, ee)| gg == g && aa == a && ee == e)
            .map(|m| m.2))
    }
    fn mail_cursor(&self, g: &str, a: &str) -> Result<u64, CoreError> {
        Ok(*self
            .cursors
            .borrow()
            .get(&(g.to_string(), a.to_string()))
            .unwrap_or(&0))
    }
    fn delivery(&self, g: &str, d: &str) -> Result<Option<DeliveryRow>, CoreError> {
        Ok(self
            .deliveries
            .borrow()
            .get(&(g.to_string(), d.to_string()))
            .cloned())
    }
    fn idempotent(
        &self,
        g: &str,
        by: &str,
        c: &str,
        since: i64,
    ) -> Result<Option<String>, CoreError> {
        Ok(self
            .idem
            .borrow()
            .get(&(g.to_string(), by.to_string(), c.to_string()))
            .filter(|(_, t)| *t >= since)
            .map(|(e, _)| e.clone()))
    }
}

struct World {
    eng: Engine,
    mem: Mem,
    gid: String,
}

impl World {
    fn new(actors: &[&str]) -> Self {
        let mut w = World {
            eng: Engine::new(Vec::new(), Limits::default()),
            mem: Mem::default(),
            gid: String::new(),
        };
        let out = w
            .run(Command::GroupCreate {
                by: "user".into(),
                title: "t".into(),
                topic: String::new(),
                settings: Default::default(),
            })
            .unwrap();
        w.gid = out.events[0].group_id.clone();
        for a in actors {
            let mut spec = Map::new();
            spec.insert("actor_id".into(), json!(a));
            w.run(Command::ActorAdd {
                group_id: w.gid.clone(),
                by: "user".into(),
                spec,
            })
            .unwrap();
        }
        w
    }

    fn run(&mut self, cmd: Command) -> Result<convene_core::Outcome, CoreError> {
        let out = self
            .eng
            .execute(&self.mem, cmd, time::OffsetDateTime::now_utc())?;
        self.mem.apply(&out);
        Ok(out)
    }

    fn send(&mut self, by: &str, mode: &str, to: &[&str], text: &str) -> Result<Event, CoreError> {
        let args = SendArgs {
            group_id: self.gid.clone(),
            by: by.into(),
            text: Some(text.into()),
            message_mode: Some(mode.into()),
            to: to.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        Ok(self.run(Command::Send(args))?.events[0].clone())
    }

    fn reply(&mut self, by: &str, reply_to: &str, mode: &str) -> Result<Event, CoreError> {
        let args = SendArgs {
            group_id: self.gid.clone(),
            by: by.into(),
            text: Some("re".into()),
            message_mode: Some(mode.into()),
            reply_to: Some(reply_to.into()),
            ..Default::default()
        };
        Ok(self.run(Command::Send(args))?.events[0].clone())
    }

    fn status(&self, src: &str, actor: &str) -> ObligationStatus {
        self.mem
            .obligations(&self.gid, src)
            .unwrap()
            .into_iter()
            .find(|o| o.actor_id == actor)
            .unwrap()
            .status
    }

    fn seqs(&self) -> Vec<u64> {
        self.mem
            .events
            .borrow()
            .iter()
            .filter(|e| e.group_id == self.gid)
            .map(|e| e.seq)
            .collect()
    }
}

#[test]
fn cccs_3_3_first_actor_is_foreman() {
    let w = World::new(&["a", "b"]);
    let g = w.eng.group(&w.gid).unwrap();
    assert_eq!(g.actors[0].role, convene_core::Role::Foreman);
    assert_eq!(g.actors[1].role, convene_core::Role::Peer);
}

#[test]
fn cccs_5_1_1_empty_to_materializes_default() {
    let mut w = World::new(&["a", "b"]);
    let e = w.send("user", "send", &[], "x").unwrap();
    assert_eq!(e.data["to"], json!(["@foreman"]));
}

#[test]
fn cccs_5_2_2_mixed_audience_rejected_and_nothing_appended() {
    let mut w = World::new(&["a", "b"]);
    let before = w.seqs().len();
    let err = w.send("user", "send", &["user", "a"], "x").unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidRequest);
    assert_eq!(w.seqs().len(), before);
}

#[test]
fn cccs_5_4_2_by_is_set_from_the_principal_and_members_only() {
    let mut w = World::new(&["a"]);
    assert_eq!(w.send("a", "send", &["user"], "x").unwrap().by, "a");
    assert_eq!(
        w.send("ghost", "send", &["a"], "x").unwrap_err().code,
        ErrorCode::PermissionDenied
    );
}

#[test]
fn cccs_6_1_5_reply_closes_obligation_and_cannot_request_reply() {
    let mut w = World::new(&["a", "b"]);
    let src = w.send("user", "request_reply", &["a", "b"], "q").unwrap();
    assert_eq!(
        w.reply("a", &src.id, "request_reply").unwrap_err().code,
        ErrorCode::InvalidRequest
    );
    // A Mail reply back to the user is refused (no human inbox); a Send reply closes it.
    assert_eq!(
        w.reply("a", &src.id, "mail").unwrap_err().code,
        ErrorCode::InvalidRequest
    );
    w.reply("a", &src.id, "send").unwrap();
    assert_eq!(w.status(&src.id, "a"), ObligationStatus::Replied);
    assert_eq!(w.status(&src.id, "b"), ObligationStatus::Requested);
}

#[test]
fn cccs_6_3_3_cancel_then_late_reply_stays_cancelled() {
    let mut w = World::new(&["a", "b"]);
    let src = w.send("user", "request_reply", &["a", "b"], "q").unwrap();
    w.reply("a", &src.id, "send").unwrap();
    w.run(Command::CancelReplyRequest {
        group_id: w.gid.clone(),
        by: "user".into(),
        source_event_id: src.id.clone(),
    })
    .unwrap();
    w.reply("b", &src.id, "send").unwrap();
    assert_eq!(w.status(&src.id, "a"), ObligationStatus::Replied);
    assert_eq!(w.status(&src.id, "b"), ObligationStatus::Cancelled);
}

#[test]
fn cccs_6_2_2_mail_read_only_by_recipient_or_privileged() {
    let mut w = World::new(&["a", "b"]);
    let m = w.send("user", "mail", &["a"], "m").unwrap();
    let read = |by: &str| Command::MailRead {
        group_id: String::new(),
        by: by.into(),
        actor_id: "a".into(),
        event_id: m.id.clone(),
    };
    let mut c = read("b");
    if let Command::MailRead { group_id, .. } = &mut c {
        *group_id = w.gid.clone();
    }
    assert_eq!(w.run(c).unwrap_err().code, ErrorCode::PermissionDenied);
    let mut c = read("a");
    if let Command::MailRead { group_id, .. } = &mut c {
        *group_id = w.gid.clone();
    }
    w.run(c).unwrap();
    assert_eq!(w.mem.mail_cursor(&w.gid, "a").unwrap(), m.seq);
}

#[test]
fn cccs_6_4_claims_results_and_retry_rules() {
    let mut w = World::new(&["a"]);
    let src = w.send("user", "send", &["a"], "x").unwrap();
    let claim = |w: &World, kind| Command::DeliveryClaim {
        group_id: w.gid.clone(),
        actor_id: "a".into(),
        source_event_id: src.id.clone(),
        transport: "t".into(),
        kind,
    };
    let out = w.run(claim(&w, ClaimKind::Automatic)).unwrap();
    let did = out.events[0].data["delivery_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(out.events[0].by, "system");
    // CCCS-6.4-3: a concurrent claimant sees claimed and does not retry
    assert_eq!(
        w.run(claim(&w, ClaimKind::Automatic)).unwrap_err().code,
        ErrorCode::DeliveryConflict
    );
    let result = |w: &World, state| Command::DeliveryResult {
        group_id: w.gid.clone(),
        delivery_id: did.clone(),
        state,
        reason: None,
    };
    w.run(result(&w, DeliveryState::Ambiguous)).unwrap();
    // exactly one result per attempt
    assert_eq!(
        w.run(result(&w, DeliveryState::Accepted)).unwrap_err().code,
        ErrorCode::DeliveryConflict
    );
    // CCCS-6.4-5: no automatic retry after ambiguous; manual needs force
    assert_eq!(
        w.run(claim(&w, ClaimKind::Automatic)).unwrap_err().code,
        ErrorCode::DeliveryConflict
    );
    assert_eq!(
        w.run(claim(
            &w,
            ClaimKind::Manual {
                force_ambiguous: false
            }
        ))
        .unwrap_err()
        .code,
        ErrorCode::DeliveryConflict
    );
    let again = w
        .run(claim(
            &w,
            ClaimKind::Manual {
                force_ambiguous: true,
            },
        ))
        .unwrap();
    // CCCS-6.4-1: a retry reuses the identity
    assert_eq!(again.events[0].data["delivery_id"].as_str().unwrap(), did);
}

#[test]
fn cccs_6_4_1_removed_actor_generation_takes_its_mail_and_open_obligations_along() {
    let mut w = World::new(&["lead", "p1"]);
    let mail = w.send("lead", "mail", &["p1"], "m").unwrap();
    let ask = w.send("lead", "request_reply", &["p1"], "q").unwrap();
    let gid = w.gid.clone();
    let removed = w
        .run(Command::ActorRemove {
            group_id: gid.clone(),
            by: "user".into(),
            actor_id: "p1".into(),
        })
        .unwrap();
    assert_eq!(w.status(&ask.id, "p1"), ObligationStatus::Cancelled);
    assert!(w
        .mem
        .mail_addressed(&gid, "p1", &mail.id)
        .unwrap()
        .is_none());
    // The same in one import: the retire applies to what the import itself indexed, and a
    // later generation can neither consume the old Mail nor reply the obligation open again.
    let evs: Vec<Value> = w
        .mem
        .events
        .borrow()
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .chain([
            json!({"id": "readd", "kind": "actor.add", "by": "user", "data": {"actor_id": "p1"}}),
            json!({"id": "late", "kind": "chat.message", "by": "p1",
                   "data": {"text": "r", "message_mode": "send", "to": ["lead"], "reply_to": ask.id}}),
            json!({"id": "rd", "kind": "mail.read", "by": "p1",
                   "data": {"actor_id": "p1", "event_id": mail.id}}),
        ])
        .collect();
    w.run(Command::Import {
        group_id: "g_copy".into(),
        events: evs,
    })
    .unwrap();
    let ob = w.mem.obligations("g_copy", &ask.id).unwrap();
    assert_eq!(ob.len(), 1);
    assert_eq!(ob[0].status, ObligationStatus::Cancelled);
    assert_eq!(
        ob[0].closed_by.as_deref(),
        Some(removed.events[0].id.as_str())
    );
    assert!(w
        .mem
        .mail_addressed("g_copy", "p1", &mail.id)
        .unwrap()
        .is_none());
    assert_eq!(w.mem.mail_cursor("g_copy", "p1").unwrap(), 0);
}

#[test]
fn cccs_12_4_clients_cannot_append_runtime_delivery() {
    let mut w = World::new(&["a"]);
    let err = w
        .run(Command::AppendExtension {
            group_id: w.gid.clone(),
            by: "user".into(),
            kind: "runtime.delivery".into(),
            data: json!({}),
        })
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::PermissionDenied);
}

#[test]
fn failed_command_leaves_seq_untouched() {
    let mut w = World::new(&["a"]);
    let head = *w.seqs().last().unwrap();
    assert!(w.send("user", "mail", &["user"], "x").is_err());
    let e = w.send("user", "send", &["a"], "x").unwrap();
    assert_eq!(e.seq, head + 1);
}

#[test]
fn an_all_command_commits_every_step_or_none_and_keeps_a_face_minted_id() {
    let mut w = World::new(&["a"]);
    let before = w.seqs();
    let gid = w.gid.clone();
    let ext = |kind: &str| Command::AppendExtension {
        group_id: gid.clone(),
        by: "system".into(),
        kind: kind.into(),
        data: json!({"x": 1}),
    };
    let send = Command::Send(SendArgs {
        group_id: w.gid.clone(),
        by: "user".into(),
        text: Some("hi".into()),
        to: vec!["a".into()],
        event_id: Some("evt_face_minted".into()),
        ..Default::default()
    });
    // The last step is refused: the message and the first extension do not commit either.
    let bad = Command::All {
        steps: vec![send.clone(), ext("x.t.ok"), ext("not.an.extension")],
    };
    assert!(w.run(bad).is_err());
    assert_eq!(w.seqs(), before);
    // A group-changing step is not allowed inside.
    let nested = Command::All {
        steps: vec![Command::GroupDelete {
            group_id: w.gid.clone(),
            by: "user".into(),
        }],
    };
    assert_eq!(
        w.run(nested).unwrap_err().code,
        convene_core::ErrorCode::InvalidRequest
    );
    let out = w
        .run(Command::All {
            steps: vec![send, ext("x.t.ok")],
        })
        .unwrap();
    assert_eq!(out.events.len(), 2);
    assert_eq!(out.events[0].id, "evt_face_minted");
    assert_eq!(out.events[1].seq, out.events[0].seq + 1);
    assert_eq!(w.seqs().len(), before.len() + 2);
}

#[test]
fn revision_moves_with_group_changes_not_with_messages() {
    // Faces cache what they derive from groups per revision (Cowchat room attributes).
    let mut w = World::new(&["a"]);
    let r0 = w.eng.revision();
    w.send("user", "send", &["a"], "x").unwrap();
    assert_eq!(w.eng.revision(), r0, "a message changes no group");
    let mut patch = Map::new();
    patch.insert("cowchat".into(), json!({"public": false}));
    w.run(Command::GroupSettingsUpdate {
        group_id: w.gid.clone(),
        by: "user".into(),
        patch,
    })
    .unwrap();
    let r1 = w.eng.revision();
    assert_ne!(r1, r0);
    w.run(Command::ActorRemove {
        group_id: w.gid.clone(),
        by: "user".into(),
        actor_id: "a".into(),
    })
    .unwrap();
    assert_ne!(w.eng.revision(), r1);
    // A reloaded engine never reuses a revision.
    let seen = [r0, r1, w.eng.revision()];
    let reloaded = Engine::new(Vec::new(), Limits::default());
    assert!(!seen.contains(&reloaded.revision()));
}

#[test]
fn changed_since_names_the_groups_each_change_touched_and_gives_up_when_it_cannot() {
    // A face's index of groups (Cowchat room names) follows these instead of rescanning.
    let mut w = World::new(&["a"]);
    let changed = |w: &World, since| {
        w.eng
            .changed_since(since)
            .map(|i| i.map(str::to_string).collect::<Vec<_>>())
    };
    let r0 = w.eng.revision();
    assert_eq!(changed(&w, r0), Some(vec![]));
    w.send("user", "send", &["a"], "x").unwrap();
    assert_eq!(changed(&w, r0), Some(vec![]), "a message changes no group");
    let other = w
        .run(Command::GroupCreate {
            by: "user".into(),
            title: "o".into(),
            topic: String::new(),
            settings: Default::default(),
        })
        .unwrap()
        .events[0]
        .group_id
        .clone();
    let r1 = w.eng.revision();
    w.run(Command::GroupDelete {
        group_id: w.gid.clone(),
        by: "user".into(),
    })
    .unwrap();
    assert_eq!(changed(&w, r0), Some(vec![other.clone(), w.gid.clone()]));
    assert_eq!(changed(&w, r1), Some(vec![w.gid.clone()]));
    // A refused command changes no group (it is undone), so readers keep up for free.
    let r2 = w.eng.revision();
    assert!(w
        .send("user", "send", &["a"], "to a deleted group")
        .is_err());
    assert!(w
        .run(Command::GroupCreate {
            by: "user".into(),
            title: "refused".into(),
            topic: String::new(),
            settings: [("default_send_to".to_string(), json!("bogus"))]
                .into_iter()
                .collect(),
        })
        .is_err());
    assert_eq!(w.eng.revision(), r2);
    assert_eq!(changed(&w, r2), Some(vec![]));
    // An index taken from another engine (before a reload) starts over too.
    let reloaded = Engine::new(Vec::new(), Limits::default());
    assert!(reloaded.changed_since(w.eng.revision()).is_none());
}

const TOKENS: &[&str] = &[
    "a", "b", "c", "user", "@user", "@all", "@peers", "@foreman", "ghost", "@bogus", "",
];

proptest! {
    /// CCCS-5.2-1/5.2-2: every accepted message addresses exactly one audience domain.
    #[test]
    fn accepted_messages_have_one_audience(idx in proptest::collection::vec(0..TOKENS.len(), 0..5), mode in 0..3usize) {
        let mut w = World::new(&["a", "b", "c"]);
        let to: Vec<&str> = idx.iter().map(|i| TOKENS[*i]).collect();
        let mode = ["send", "request_reply", "mail"][mode];
        match w.send("user", mode, &to, "x") {
            Ok(e) => {
                let stored: Vec<String> = serde_json::from_value(e.data["to"].clone()).unwrap();
                prop_assert!(!stored.is_empty());
                let human = stored.iter().any(|t| t == "user");
                prop_assert!(!human || stored.len() == 1, "mixed audience stored: {stored:?}");
                if mode == "mail" { prop_assert!(!human); }
                if mode == "request_reply" {
                    prop_assert!(stored.iter().all(|t| !t.starts_with('@')), "broadcast request_reply: {stored:?}");
                }
            }
            Err(e) => prop_assert!(matches!(e.code, ErrorCode::InvalidRequest | ErrorCode::ActorNotFound)),
        }
    }

    /// Per-group seq is gap-free and increasing whatever mix of valid and invalid commands runs.
    #[test]
    fn seq_is_gap_free(ops in proptest::collection::vec((0..TOKENS.len(), 0..3usize, any::<bool>()), 1..30)) {
        let mut w = World::new(&["a", "b"]);
        for (t, m, reply) in ops {
            let mode = ["send", "request_reply", "mail"][m];
            let last = w.mem.events.borrow().iter().rev().find(|e| e.kind == "chat.message").map(|e| e.id.clone());
            let _ = match (reply, last) {
                (true, Some(id)) => w.reply("a", &id, mode),
                _ => w.send("user", mode, &[TOKENS[t]], "x"),
            };
        }
        let seqs = w.seqs();
        prop_assert_eq!(seqs, (1..=w.mem.events.borrow().len() as u64).collect::<Vec<_>>());
    }

    /// Unknown data fields of extension events are preserved byte-for-byte in meaning.
    #[test]
    fn extension_data_is_preserved(k in "[a-z]{1,8}", v in "[ -~]{0,20}", n in any::<i32>()) {
        let mut w = World::new(&["a"]);
        let data: Value = json!({k.clone(): v, "n": n, "nested": {"k": [1, 2, 3]}});
        let out = w.run(Command::AppendExtension { group_id: w.gid.clone(), by: "a".into(), kind: "x.test.prop".into(), data: data.clone() }).unwrap();
        prop_assert_eq!(&out.events[0].data, &data);
    }
}

/// Settings and patch values the refusal property draws from: valid ones and broken ones.
const KEYS: &[&str] = &[
    "default_send_to",
    "title",
    "topic",
    "runtime",
    "actor_id",
    "enabled",
    "x.face.attr",
];
const VALUES: &[&str] = &[
    "\"bogus\"",
    "\"foreman\"",
    "\"\"",
    "7",
    "null",
    "true",
    "\"a\"",
    "[1]",
];

fn map_of(pairs: &[(usize, usize)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|&(k, v)| {
            (
                KEYS[k].to_string(),
                serde_json::from_str(VALUES[v]).unwrap(),
            )
        })
        .collect()
}

/// One group-changing command (or a message), drawn from indexes (`g` picks the world's group or a ghost).
fn group_command(
    w: &World,
    op: usize,
    by: usize,
    g: bool,
    pairs: &[(usize, usize)],
    t: usize,
) -> Command {
    let group_id = if g {
        w.gid.clone()
    } else {
        "g_ghost".to_string()
    };
    let by = ["user", "a", "", "svc:x", "system"][by].to_string();
    let token = TOKENS[t].to_string();
    match op {
        0 => Command::GroupCreate {
            by,
            title: token,
            topic: String::new(),
            settings: map_of(pairs),
        },
        1 => Command::GroupSettingsUpdate {
            group_id,
            by,
            patch: map_of(pairs),
        },
        2 => Command::GroupUpdate {
            group_id,
            by,
            patch: map_of(pairs),
        },
        3 => Command::ActorAdd {
            group_id,
            by,
            spec: map_of(pairs),
        },
        4 => Command::ActorUpdate {
            group_id,
            by,
            actor_id: token,
            patch: map_of(pairs),
        },
        5 => Command::ActorRemove {
            group_id,
            by,
            actor_id: token,
        },
        6 => Command::GroupSetState {
            group_id,
            by,
            state: token,
        },
        7 => Command::Attach {
            group_id,
            by,
            url: token,
        },
        _ => Command::Send(SendArgs {
            group_id,
            by,
            text: Some("x".into()),
            to: vec![token],
            ..Default::default()
        }),
    }
}

proptest! {
    /// "On error nothing has changed": a refused command leaves every group as it was, so the
    /// engine's memory never holds what the store will not (the engine's own contract).
    #[test]
    fn a_refused_command_changes_no_group(
        ops in proptest::collection::vec(
            (0..9usize, 0..5usize, any::<bool>(), proptest::collection::vec((0..KEYS.len(), 0..VALUES.len()), 0..3), 0..TOKENS.len()),
            1..25)
    ) {
        let mut w = World::new(&["a", "b"]);
        for (op, by, g, pairs, t) in ops {
            let cmd = group_command(&w, op, by, g, &pairs, t);
            let before: Vec<convene_core::Group> = w.eng.groups().into_iter().cloned().collect();
            if let Err(e) = w.run(cmd.clone()) {
                let after: Vec<convene_core::Group> = w.eng.groups().into_iter().cloned().collect();
                prop_assert_eq!(&before, &after, "refused ({}) {:?} left a change", e.code.as_str(), cmd);
            }
        }
    }
}

/// The automatic deliveries a command's outcome records as due (recipient ids, sorted).
fn due_of(out: &convene_core::Outcome) -> Vec<String> {
    let mut v: Vec<String> = out
        .changes
        .iter()
        .filter_map(|c| match c {
            Change::DeliveryDue { actor_id, .. } => Some(actor_id.clone()),
            _ => None,
        })
        .collect();
    v.sort();
    v
}

#[test]
fn cccs_6_4_2_a_prompt_message_records_its_automatic_deliveries_as_due_with_it() {
    let mut w = World::new(&["lead", "p1", "p2"]);
    let send = |w: &mut World, mode: &str, to: &[&str]| {
        let args = SendArgs {
            group_id: w.gid.clone(),
            by: "lead".into(),
            text: Some("x".into()),
            message_mode: Some(mode.into()),
            to: to.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        w.run(Command::Send(args)).unwrap()
    };
    // To every driven recipient but the sender, in the message's own outcome.
    assert_eq!(due_of(&send(&mut w, "send", &["@all"])), ["p1", "p2"]);
    assert_eq!(due_of(&send(&mut w, "request_reply", &["p2"])), ["p2"]);
    // Mail gets no runtime delivery (§6.4), so nothing is due.
    assert!(due_of(&send(&mut w, "mail", &["p1"])).is_empty());
    // An imported message is history: delivered (or not) where it was sent.
    let evs: Vec<Value> = w
        .mem
        .events
        .borrow()
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect();
    let imported = w
        .run(Command::Import {
            group_id: "g_copy".into(),
            events: evs,
        })
        .unwrap();
    assert!(due_of(&imported).is_empty());
}
