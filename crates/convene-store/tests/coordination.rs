//! The coordination-event index (schema v2): `Readers::coordination_after` returns exactly a
//! group's coordination events, in order, and a v1 database is upgraded to it.

use convene_core::{Command, Engine, Limits, SendArgs};
use convene_store::{is_coordination_kind, RawEvent, Readers};
use serde_json::json;

mod common;

fn run(w: &mut convene_store::Writer, eng: &mut Engine, cmd: Command) -> convene_core::Outcome {
    common::run(w, eng, cmd, true)
}

fn group(w: &mut convene_store::Writer, eng: &mut Engine, title: &str) -> String {
    run(
        w,
        eng,
        Command::GroupCreate {
            by: "user".into(),
            title: title.into(),
            topic: String::new(),
            settings: Default::default(),
        },
    )
    .events[0]
        .group_id
        .clone()
}

fn ext(w: &mut convene_store::Writer, eng: &mut Engine, gid: &str, kind: &str, n: usize) {
    run(
        w,
        eng,
        Command::AppendExtension {
            group_id: gid.into(),
            by: "user".into(),
            kind: kind.into(),
            data: json!({"n": n}),
        },
    );
}

/// Every coordination event of the group, by reading all of it in one page.
fn expected(r: &Readers, gid: &str) -> Vec<(u64, String)> {
    r.events_after(gid, 0, usize::MAX >> 1, &[])
        .unwrap()
        .into_iter()
        .filter(|e| is_coordination_kind(&e.kind))
        .map(|e| (e.seq, e.kind))
        .collect()
}

/// Pages through `coordination_after` the way the daemon's rebuild does.
fn paged(r: &Readers, gid: &str, page: usize) -> Vec<RawEvent> {
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let p = r.coordination_after(gid, at, page).unwrap();
        let full = p.len() == page;
        if let Some(l) = p.last() {
            at = l.seq;
        }
        out.extend(p);
        if !full {
            return out;
        }
    }
}

#[test]
fn coordination_after_returns_exactly_the_coordination_events_in_order() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("ledger.sqlite");
    let mut w = convene_store::open_writer(&p).unwrap();
    let mut eng = Engine::new(Vec::new(), Limits::default());
    let a = group(&mut w, &mut eng, "a");
    let b = group(&mut w, &mut eng, "b");
    // Messages, thinking pulses and other extension namespaces around the coordination
    // events, in two groups; kinds that only look alike (case, a missing dot) are not
    // coordination events.
    let noise = [
        "x.cowchat.thinking",
        "x.other.vote.created",
        "x.COWCHAT.vote.created",
        "x.cowchatvote.created",
        "vendor.cowchat.task",
    ];
    let coord = [
        "x.cowchat.vote.created",
        "x.cowchat.vote.ballot",
        "x.cowchat.vote.result",
        "x.cowchat.election.started",
        "x.cowchat.election.declined",
        "x.cowchat.leader.elected",
        "x.cowchat.leader.cleared",
        "x.cowchat.task.assigned",
        "x.cowchat.task.updated",
    ];
    for i in 0..60 {
        let gid = if i % 3 == 0 { &b } else { &a };
        run(
            &mut w,
            &mut eng,
            Command::Send(SendArgs {
                group_id: gid.clone(),
                by: "user".into(),
                text: Some(format!("m{i}")),
                ..SendArgs::default()
            }),
        );
        ext(&mut w, &mut eng, gid, noise[i % noise.len()], i);
        if i % 4 == 0 {
            ext(&mut w, &mut eng, gid, coord[i % coord.len()], i);
        }
    }
    let r = convene_store::open_readers(&p, 1).unwrap();
    for gid in [&a, &b] {
        let want = expected(&r, gid);
        assert!(want.len() >= 5, "{gid}: {want:?}");
        // Page sizes that split the list, match it exactly, and hold it whole.
        for page in [1, 2, want.len(), 1000] {
            let got: Vec<(u64, String)> = paged(&r, gid, page)
                .into_iter()
                .map(|e| (e.seq, e.kind))
                .collect();
            assert_eq!(got, want, "{gid}, pages of {page}");
        }
        // Starting after a seq skips what came before it, and the events are whole.
        let mid = want[want.len() / 2].0;
        let after = r.coordination_after(gid, mid, 1000).unwrap();
        assert_eq!(after[0].seq, want[want.len() / 2 + 1].0);
        let env: serde_json::Value = serde_json::from_str(&after[0].json).unwrap();
        assert_eq!(env["group_id"], json!(gid));
        assert_eq!(env["kind"], json!(after[0].kind));
    }
    assert!(r.coordination_after("g_nope", 0, 10).unwrap().is_empty());
}

#[test]
fn a_v1_database_is_upgraded_and_its_coordination_events_found() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("ledger.sqlite");
    {
        let c = rusqlite::Connection::open(&p).unwrap();
        c.execute_batch(include_str!("data/ledger-v1.sql")).unwrap();
    }
    let w = convene_store::open_writer(&p).unwrap();
    let c = rusqlite::Connection::open(&p).unwrap();
    let v: i64 = c
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, convene_store::schema_version());
    assert!(v >= 2);
    // The old rows are intact: the groups load with their heads.
    let groups = w.load_groups().unwrap();
    let room = groups
        .iter()
        .find(|g| g.settings.extra.get("cowchat_room") == Some(&json!("big")))
        .expect("the fixture's room");
    assert_eq!(room.last_seq, 40);
    // The new index covers the rows written before it existed.
    let r = convene_store::open_readers(&p, 1).unwrap();
    let got: Vec<(u64, String)> = paged(&r, &room.group_id, 4)
        .into_iter()
        .map(|e| (e.seq, e.kind))
        .collect();
    assert_eq!(got, expected(&r, &room.group_id));
    let kinds: Vec<&str> = got.iter().map(|(_, k)| k.as_str()).collect();
    assert_eq!(
        kinds.len(),
        15,
        "3 votes × (created, 2 ballots, result) + 3 task events"
    );
    assert_eq!(kinds[0], "x.cowchat.vote.created");
    assert_eq!(kinds.last(), Some(&"x.cowchat.task.assigned"));
    assert!(!kinds.contains(&"x.cowchat.thinking"));
    // Opening again does not migrate twice.
    drop(w);
    drop(convene_store::open_writer(&p).unwrap());
}
