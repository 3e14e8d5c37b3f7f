//! Versioned migrations. `PRAGMA user_version` holds the applied version.

/// The rows of the `events_coord` partial index: Cowchat coordination events (votes,
/// elections, leaders, tasks), i.e. every `x.cowchat.*` kind but the frequent thinking pulse.
/// A macro so the migration (a `&'static str`) and the reader's query repeat it verbatim: SQLite
/// uses a partial index only for a query whose WHERE contains the index's terms as written.
macro_rules! coord_where {
    () => {
        "kind GLOB 'x.cowchat.*' AND kind <> 'x.cowchat.thinking'"
    };
}
pub(crate) use coord_where;

/// Migrations in order; index + 1 is the version each one brings the database to.
pub const MIGRATIONS: &[&str] = &[
    // v1: the ledger and its projections.
    r#"
    CREATE TABLE groups (
        group_id TEXT PRIMARY KEY,
        json     TEXT NOT NULL
    );
    CREATE TABLE events (
        group_id TEXT NOT NULL,
        seq      INTEGER NOT NULL,
        id       TEXT NOT NULL,
        ts       TEXT NOT NULL,
        kind     TEXT NOT NULL,
        by_      TEXT NOT NULL,
        json     TEXT NOT NULL,
        PRIMARY KEY (group_id, seq)
    ) WITHOUT ROWID;
    CREATE UNIQUE INDEX events_by_id ON events (group_id, id);
    CREATE INDEX events_by_ts ON events (group_id, ts);
    CREATE TABLE obligations (
        group_id        TEXT NOT NULL,
        source_event_id TEXT NOT NULL,
        actor_id        TEXT NOT NULL,
        status          TEXT NOT NULL,
        closed_by       TEXT,
        PRIMARY KEY (group_id, source_event_id, actor_id)
    ) WITHOUT ROWID;
    CREATE TABLE mail_index (
        group_id TEXT NOT NULL,
        actor_id TEXT NOT NULL,
        seq      INTEGER NOT NULL,
        event_id TEXT NOT NULL,
        PRIMARY KEY (group_id, actor_id, seq)
    ) WITHOUT ROWID;
    CREATE TABLE mail_cursors (
        group_id TEXT NOT NULL,
        actor_id TEXT NOT NULL,
        seq      INTEGER NOT NULL,
        event_id TEXT NOT NULL,
        PRIMARY KEY (group_id, actor_id)
    ) WITHOUT ROWID;
    CREATE TABLE deliveries (
        group_id        TEXT NOT NULL,
        delivery_id     TEXT NOT NULL,
        actor_id        TEXT NOT NULL,
        source_event_id TEXT NOT NULL,
        state           TEXT NOT NULL,
        transport       TEXT NOT NULL,
        PRIMARY KEY (group_id, delivery_id)
    ) WITHOUT ROWID;
    CREATE INDEX deliveries_by_state ON deliveries (state);
    CREATE INDEX deliveries_by_source ON deliveries (group_id, source_event_id);
    CREATE TABLE idempotency (
        group_id  TEXT NOT NULL,
        by_       TEXT NOT NULL,
        client_id TEXT NOT NULL,
        event_id  TEXT NOT NULL,
        at_unix   INTEGER NOT NULL,
        PRIMARY KEY (group_id, by_, client_id)
    ) WITHOUT ROWID;
    "#,
    // v2: the coordination events indexed apart, so the Cowchat start-up rebuild reads only
    // them instead of every message of every room. Partial, so a message insert pays one
    // GLOB on its kind and adds no index entry.
    concat!(
        "CREATE INDEX events_coord ON events (group_id, seq) WHERE ",
        coord_where!(),
        ";"
    ),
    // v3: automatic runtime deliveries due and not yet claimed, written with their message
    // and removed by the delivery's first record, so a start after a kill -9 finds the ones
    // whose claim never committed.
    r#"
    CREATE TABLE deliveries_due (
        group_id        TEXT NOT NULL,
        source_event_id TEXT NOT NULL,
        actor_id        TEXT NOT NULL,
        seq             INTEGER NOT NULL,
        PRIMARY KEY (group_id, source_event_id, actor_id)
    ) WITHOUT ROWID;
    "#,
];
