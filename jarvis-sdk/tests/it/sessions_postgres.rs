//! The Postgres store against a real server: idempotent and concurrent
//! migrations, a legacy table without `agent_id`, damaged rows, and clear
//! errors when the database cannot be reached.

use jarvis_sdk::agent::{NewSession, PostgresSessionStore, SessionError, SessionStore};
use jarvis_sdk::testing::TempPostgres;

use crate::capture::capture;
use crate::pg::{admin, fresh_schema};
use crate::sessions_contract::{id, turn};

/// Columns, indexes and constraints of the `jarvis_*` tables of `schema`.
async fn schema_of(schema: &str) -> Vec<String> {
    let cluster = TempPostgres::shared().unwrap();
    let client = admin(cluster).await;
    let mut out = Vec::new();
    for row in client
        .query(
            "SELECT table_name, column_name, data_type, is_nullable, coalesce(column_default, '') \
             FROM information_schema.columns WHERE table_schema = $1 ORDER BY table_name, column_name",
            &[&schema],
        )
        .await
        .unwrap()
    {
        let cols: Vec<String> = (0..5).map(|i| row.get::<_, String>(i)).collect();
        // A serial column's default names its sequence with the schema.
        out.push(format!("column {}", cols.join(" ").replace(schema, "S")));
    }
    for row in client
        .query(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1 ORDER BY indexname",
            &[&schema],
        )
        .await
        .unwrap()
    {
        let def: String = row.get(1);
        out.push(format!(
            "index {} {}",
            row.get::<_, String>(0),
            def.replace(schema, "S")
        ));
    }
    for row in client
        .query(
            "SELECT conname, pg_get_constraintdef(c.oid) FROM pg_constraint c \
             JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = $1 ORDER BY conname",
            &[&schema],
        )
        .await
        .unwrap()
    {
        let def: String = row.get(1);
        out.push(format!(
            "constraint {} {}",
            row.get::<_, String>(0),
            def.replace(schema, "S")
        ));
    }
    out
}

#[tokio::test]
async fn migrations_twice_and_at_once_leave_the_same_schema() {
    let Some((once_url, once)) = fresh_schema("postgres migrations").await else {
        return;
    };
    let Some((twice_url, twice)) = fresh_schema("postgres migrations").await else {
        return;
    };
    let Some((racing_url, racing)) = fresh_schema("postgres migrations").await else {
        return;
    };

    PostgresSessionStore::connect(&once_url).await.unwrap();
    let store = PostgresSessionStore::connect(&twice_url).await.unwrap();
    store.migrate().await.unwrap();
    PostgresSessionStore::connect(&twice_url).await.unwrap();
    // Eight processes' worth of start-ups on one empty schema at once.
    let racers = (0..8).map(|_| PostgresSessionStore::connect(&racing_url));
    for result in futures::future::join_all(racers).await {
        result.unwrap();
    }

    let expected = schema_of(&once).await;
    assert!(
        expected
            .iter()
            .any(|l| l.starts_with("column jarvis_sessions agent_id text NO 'main'")),
        "{expected:#?}"
    );
    assert!(
        expected
            .iter()
            .any(|l| l.starts_with("index jarvis_entries_turns")),
        "{expected:#?}"
    );
    assert_eq!(schema_of(&twice).await, expected);
    assert_eq!(schema_of(&racing).await, expected);
}

#[tokio::test]
async fn a_legacy_table_gains_agent_id_and_its_rows_read_as_main() {
    let Some((url, schema)) = fresh_schema("postgres legacy migration").await else {
        return;
    };
    let client = admin(TempPostgres::shared().unwrap()).await;
    client
        .batch_execute(&format!(
            "CREATE TABLE {schema}.jarvis_sessions (id TEXT PRIMARY KEY, title TEXT, \
               created_at TIMESTAMPTZ NOT NULL DEFAULT '2025-01-02T03:04:05Z');
             INSERT INTO {schema}.jarvis_sessions (id, title) VALUES ('old-1', 'Old chat'), ('old-2', NULL);"
        ))
        .await
        .unwrap();

    let store = PostgresSessionStore::connect(&url).await.unwrap();
    let old = store.get(&id("old-1")).await.unwrap().unwrap();
    assert_eq!(old.agent_id, "main");
    assert_eq!(old.title.as_deref(), Some("Old chat"));
    assert_eq!(old.created_at.to_string(), "2025-01-02T03:04:05.000Z");
    let all = store.list().await.unwrap();
    assert_eq!(all.len(), 2);
    assert!(all.iter().all(|m| m.agent_id == "main"));
    store.append(&id("old-2"), turn(1)).await.unwrap();
    store.create(NewSession::user(id("new"), "karen")).await.unwrap();

    // Migrating again changes nobody's agent.
    let store = PostgresSessionStore::connect(&url).await.unwrap();
    assert_eq!(store.get(&id("old-1")).await.unwrap().unwrap().agent_id, "main");
    assert_eq!(store.get(&id("new")).await.unwrap().unwrap().agent_id, "karen");
    assert_eq!(store.entries(&id("old-2")).await.unwrap().len(), 6);
}

#[tokio::test]
async fn damaged_rows_are_skipped_with_a_warning() {
    let Some((url, schema)) = fresh_schema("postgres damaged rows").await else {
        return;
    };
    let store = PostgresSessionStore::connect(&url).await.unwrap();
    store.create(NewSession::user(id("s"), "main")).await.unwrap();
    store.append(&id("s"), turn(1)).await.unwrap();
    admin(TempPostgres::shared().unwrap())
        .await
        .batch_execute(&format!(
            "INSERT INTO {schema}.jarvis_entries (session_id, seq, ts, v, starts_turn, body) VALUES \
               ('s', 7, now(), 1, false, '{{\"kind\": \"alien\"}}'), \
               ('s', 8, now(), 2, false, '{{\"kind\": \"turn_start\"}}');"
        ))
        .await
        .unwrap();
    let (logs, _guard) = capture();
    assert_eq!(store.entries(&id("s")).await.unwrap().len(), 6);
    assert!(
        logs.warned(&["skipped a damaged entry of session s"]),
        "{:?}",
        logs.lines()
    );
    assert!(logs.warned(&["skipped entry 8 of session s: unknown schema version 2"]));
    assert_eq!(
        store.append(&id("s"), turn(2)).await.unwrap(),
        14,
        "numbering goes past them"
    );
}

#[tokio::test]
async fn an_unreachable_database_is_a_clear_error() {
    let err = PostgresSessionStore::connect("host=/nonexistent/jarvis port=5999 user=jarvis dbname=jarvis")
        .await
        .unwrap_err();
    assert!(matches!(err, SessionError::Unreachable { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "session store (postgres): cannot reach the database at host=/nonexistent/jarvis port=5999 dbname=jarvis user=jarvis"
    );
    assert!(std::error::Error::source(&err).is_some());

    let err = PostgresSessionStore::connect("postgres://jarvis:secret@127.0.0.1:notaport/db")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("could not be read"), "{err}");
    assert!(!format!("{err:?}").contains("secret"), "the password never shows");
}

#[tokio::test]
async fn a_server_that_goes_away_gives_clear_errors() {
    if TempPostgres::shared_or_skip("postgres server going away").is_none() {
        return;
    }
    let cluster = TempPostgres::start().unwrap();
    let store = PostgresSessionStore::connect(&cluster.url()).await.unwrap();
    store.create(NewSession::user(id("s"), "main")).await.unwrap();
    drop(cluster);
    let err = store.append(&id("s"), turn(1)).await.unwrap_err();
    assert!(
        matches!(
            err,
            SessionError::Unreachable { .. } | SessionError::Database { .. }
        ),
        "{err:?}"
    );
    assert!(err.to_string().starts_with("session store (postgres): "), "{err}");
}

/// The window a store keeps in the process answers exactly what a read of
/// the tables answers (every field, timestamps included), and a write by
/// another store (another server) is seen at the next read.
#[tokio::test]
async fn the_kept_window_matches_the_tables_and_sees_other_writers() {
    let Some((url, _schema)) = fresh_schema("postgres kept window").await else {
        return;
    };
    let a = PostgresSessionStore::connect(&url).await.unwrap();
    let b = PostgresSessionStore::connect(&url).await.unwrap();
    a.create(NewSession::user(id("s"), "main")).await.unwrap();
    assert!(a.recent(&id("s"), 2).await.unwrap().is_empty());
    for n in 1..=5 {
        a.append(&id("s"), turn(n)).await.unwrap();
        for k in 1..=3 {
            let kept = a.recent(&id("s"), k).await.unwrap();
            let fresh = PostgresSessionStore::connect(&url).await.unwrap();
            let read = fresh.recent(&id("s"), k).await.unwrap();
            assert_eq!(
                serde_json::to_value(&kept).unwrap(),
                serde_json::to_value(&read).unwrap(),
                "turn {n}, window {k}"
            );
        }
    }
    // Another server appends: the first sees it at its next read.
    b.append(&id("s"), turn(6)).await.unwrap();
    let window = a.recent(&id("s"), 1).await.unwrap();
    assert_eq!(window.first().unwrap().seq, 32, "turn 6's question: {window:?}");
    assert_eq!(a.append(&id("s"), turn(7)).await.unwrap(), 42);
    let all = b.entries(&id("s")).await.unwrap();
    let seqs: Vec<u64> = all.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=42).collect::<Vec<u64>>());
    assert_eq!(
        serde_json::to_value(a.recent(&id("s"), 2).await.unwrap()).unwrap(),
        serde_json::to_value(&all[31..]).unwrap()
    );
    assert_eq!(a.agent_of(&id("s")).await.unwrap().as_deref(), Some("main"));
    assert_eq!(
        a.agent_of(&id("s")).await.unwrap().as_deref(),
        Some("main"),
        "kept"
    );
    assert_eq!(a.agent_of(&id("nobody")).await.unwrap(), None);
    assert!(a.unload(&id("s")).await, "the kept window is let go");
    assert!(!a.unload(&id("s")).await);
}

/// Appends from two stores at once to one session number their entries
/// 1, 2, 3 … without a gap or a number taken twice, each batch in one piece.
#[tokio::test]
async fn concurrent_appends_from_two_stores_never_share_a_number() {
    let Some((url, _schema)) = fresh_schema("postgres concurrent appends").await else {
        return;
    };
    let a = PostgresSessionStore::connect(&url).await.unwrap();
    let b = PostgresSessionStore::connect(&url).await.unwrap();
    a.create(NewSession::user(id("s"), "main")).await.unwrap();
    let mut tasks = Vec::new();
    for n in 0..16 {
        let store = if n % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move {
            store.append(&id("s"), turn(n)).await.unwrap()
        }));
    }
    let mut ends: Vec<u64> = Vec::new();
    for task in tasks {
        ends.push(task.await.unwrap());
    }
    ends.sort_unstable();
    assert_eq!(ends, (1..=16).map(|n| n * 6).collect::<Vec<u64>>());
    let all = a.entries(&id("s")).await.unwrap();
    assert_eq!(
        all.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=96).collect::<Vec<u64>>()
    );
    for batch in all.chunks(6) {
        let starts: Vec<bool> = batch.iter().map(|e| e.body.starts_turn()).collect();
        assert_eq!(
            starts,
            [false, true, false, false, false, false],
            "a batch stays in one piece"
        );
    }
    assert!(
        a.append(&id("missing"), turn(1)).await.is_err(),
        "no session, no entries"
    );
}
