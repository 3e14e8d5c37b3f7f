//! The store against a real SQLite file: migrations, transactional projections, readers.

use convene_core::view::LedgerView;
use convene_core::{Command, Engine, Limits, SendArgs};
use serde_json::{json, Map};

mod common;
use common::run;

fn setup() -> (tempfile::TempDir, std::path::PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("ledger.sqlite");
    (d, p)
}

#[test]
fn migrations_are_idempotent_and_a_newer_schema_is_refused() {
    let (_d, p) = setup();
    drop(convene_store::open_writer(&p).unwrap());
    drop(convene_store::open_writer(&p).unwrap());
    let c = rusqlite::Connection::open(&p).unwrap();
    let v: i64 = c
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, convene_store::schema_version());
    c.pragma_update(None, "user_version", v + 1).unwrap();
    drop(c);
    let err = convene_store::open_writer(&p)
        .err()
        .expect("newer schema must be refused");
    assert!(err.to_string().contains("newer"), "{err}");
}

#[test]
fn events_and_projections_commit_or_roll_back_together() {
    let (_d, p) = setup();
    let mut w = convene_store::open_writer(&p).unwrap();
    let mut eng = Engine::new(Vec::new(), Limits::default());
    let out = run(
        &mut w,
        &mut eng,
        Command::GroupCreate {
            by: "user".into(),
            title: "t".into(),
            topic: String::new(),
            settings: Default::default(),
        },
        true,
    );
    let gid = out.events[0].group_id.clone();
    let mut spec = Map::new();
    spec.insert("actor_id".into(), json!("a"));
    run(
        &mut w,
        &mut eng,
        Command::ActorAdd {
            group_id: gid.clone(),
            by: "user".into(),
            spec,
        },
        true,
    );
    let mail = |text: &str| {
        Command::Send(SendArgs {
            group_id: gid.clone(),
            by: "user".into(),
            text: Some(text.into()),
            message_mode: Some("mail".into()),
            to: vec!["a".into()],
            client_id: Some(format!("k-{text}")),
            ..Default::default()
        })
    };
    let kept = run(&mut w, &mut eng, mail("kept"), true);
    // A rolled-back batch leaves neither the event nor its Mail index or idempotency key.
    let lost = run(&mut w, &mut eng, mail("rolled back"), false);
    let readers = convene_store::open_readers(&p, 1).unwrap();
    let (inbox, _) = readers.inbox(&gid, "a", 10).unwrap();
    assert_eq!(
        inbox.iter().map(|e| e.id.clone()).collect::<Vec<_>>(),
        vec![kept.events[0].id.clone()]
    );
    assert!(readers.event(&gid, &lost.events[0].id).unwrap().is_none());
    let tx = w.begin().unwrap();
    let view = convene_store::WriterView::new(&tx);
    assert!(view
        .idempotent(&gid, "user", "k-rolled back", 0)
        .unwrap()
        .is_none());
    assert_eq!(
        view.idempotent(&gid, "user", "k-kept", 0).unwrap(),
        Some(kept.events[0].id.clone())
    );
    drop(tx);
    // A restart loads the group with its committed head.
    let groups = w.load_groups().unwrap();
    assert_eq!(groups[0].last_seq, kept.events[0].seq);
    assert_eq!(groups[0].actors[0].id, "a");
}

#[test]
fn readers_resolve_cursors_and_page_both_ways() {
    let (_d, p) = setup();
    let mut w = convene_store::open_writer(&p).unwrap();
    let mut eng = Engine::new(Vec::new(), Limits::default());
    let gid = run(
        &mut w,
        &mut eng,
        Command::GroupCreate {
            by: "user".into(),
            title: "t".into(),
            topic: String::new(),
            settings: Default::default(),
        },
        true,
    )
    .events[0]
        .group_id
        .clone();
    for i in 0..25 {
        run(
            &mut w,
            &mut eng,
            Command::Notify {
                group_id: gid.clone(),
                by: "system".into(),
                data: Map::from_iter([("message".to_string(), json!(format!("n{i}")))]),
            },
            true,
        );
    }
    let r = convene_store::open_readers(&p, 2).unwrap();
    assert_eq!(r.head_seq(&gid).unwrap(), 26);
    let after = r.events_after(&gid, 10, 5, &[]).unwrap();
    assert_eq!(
        after.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![11, 12, 13, 14, 15]
    );
    let before = r.events_before(&gid, 10, 3, &[]).unwrap();
    assert_eq!(
        before.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![7, 8, 9]
    );
    let id = after[0].id.clone();
    assert_eq!(
        r.resolve(&gid, &convene_store::Since::EventId(id)).unwrap(),
        Some(11)
    );
    assert_eq!(
        r.resolve(&gid, &convene_store::Since::EventId("nope".into()))
            .unwrap(),
        None
    );
    assert_eq!(
        r.resolve(&gid, &convene_store::Since::Seq(27)).unwrap(),
        None
    );
    assert_eq!(
        r.resolve(
            &gid,
            &convene_store::Since::Ts("2000-01-01T00:00:00.000000Z".into())
        )
        .unwrap(),
        Some(0)
    );
    let hits = r.search(&gid, "N2", 0, 10, &[]).unwrap();
    assert_eq!(hits.len(), 6, "n2 and n20..n24");
}

#[test]
fn steady_writes_do_not_grow_the_wal_without_bound() {
    let (_d, p) = setup();
    let mut w = convene_store::open_writer(&p).unwrap();
    let alive = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    convene_store::spawn_checkpointer(&p, std::time::Duration::from_millis(10), alive.clone())
        .unwrap();
    let mut eng = Engine::new(Vec::new(), Limits::default());
    let gid = run(
        &mut w,
        &mut eng,
        Command::GroupCreate {
            title: "wal".into(),
            topic: String::new(),
            by: "user".into(),
            settings: Default::default(),
        },
        true,
    )
    .events[0]
        .group_id
        .clone();
    // Commits with a short pause between them, as a sequential client makes them (the
    // daemon's writer thread covers back-to-back batches itself): each appends pages.
    let body = "x".repeat(900);
    let started = std::time::Instant::now();
    let mut n = 0;
    // Long enough that a loaded machine (CI runs tests in parallel) still sees restarts.
    while n < 400 || started.elapsed() < std::time::Duration::from_millis(1500) {
        std::thread::sleep(std::time::Duration::from_micros(200));
        run(
            &mut w,
            &mut eng,
            Command::Send(SendArgs {
                group_id: gid.clone(),
                by: "user".into(),
                text: Some(body.clone()),
                ..SendArgs::default()
            }),
            true,
        );
        n += 1;
    }
    alive.store(false, std::sync::atomic::Ordering::Relaxed);
    let wal = std::fs::metadata(p.with_extension("sqlite-wal"))
        .unwrap()
        .len();
    // Every commit wrote two or more 4 KiB pages: without the log restarting, the WAL would
    // hold all of them.
    assert!(
        wal < n as u64 * 4096,
        "WAL of {wal} bytes after {n} commits: the checkpointer never restarted it"
    );
}
