//! The Postgres memory store against a real server: migrations and the
//! R-MEM-14 backfill of a legacy table, run once, twice and from several
//! connections at once, give the same rows and the same schema; legacy rows
//! become recallable; bad connections and damaged rows are clear, never
//! panics.

use std::sync::Arc;

use jarvis_sdk::memory::{
    Layer, MemoryError, MemoryFilter, MemoryScope, MemoryService, MemoryStore, PostgresMemoryStore,
};
use jarvis_sdk::model::{Embedder, HashEmbedder};
use jarvis_sdk::testing::TempPostgres;

use crate::capture::capture;
use crate::pg::{admin, fresh_schema};

/// A table as it was before agent scoping: no `agent_id`, no `kind`, a
/// `layer` only on some rows, and an `embedding` column of another type
/// (here text, as a pgvector literal would print) that must never be read.
const LEGACY: &str = "
CREATE TABLE {s}.jarvis_ltm_entries (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    layer TEXT,
    source TEXT NOT NULL,
    text TEXT NOT NULL,
    metadata JSONB NOT NULL DEFAULT '{}',
    created_at TIMESTAMPTZ NOT NULL,
    embedding TEXT
);
INSERT INTO {s}.jarvis_ltm_entries (id, user_id, layer, source, text, created_at, embedding) VALUES
  ('m1', 'u', 'semantic', 'remember', 'the user is allergic to peanuts', '2025-01-01T00:00:01Z', '[0.1,0.2]'),
  ('m2', 'u', NULL, 'user_model', 'name: Ada', '2025-01-01T00:00:02Z', NULL),
  ('m3', 'u', NULL, 'episode_fact', 'Ada lives in Seoul', '2025-01-01T00:00:03Z', NULL),
  ('m4', 'u', 'episodic', 'turn', 'find the SH housing notice', '2025-01-01T00:00:04Z', NULL),
  ('m5', 'u', NULL, 'task_pattern', 'notice lookup: use sh_notice', '2025-01-01T00:00:05Z', NULL),
  ('m6', 'u', NULL, 'procedure', 'weekly report steps', '2025-01-01T00:00:06Z', NULL),
  ('m7', 'u', NULL, 'chat', 'an old free-form note', '2025-01-01T00:00:07Z', NULL);
";

/// Columns, indexes and constraints of the memory tables of `schema`.
async fn schema_of(schema: &str) -> Vec<String> {
    let client = admin(TempPostgres::shared().unwrap()).await;
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
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relkind = 'S' ORDER BY 1",
            &[&schema],
        )
        .await
        .unwrap()
    {
        out.push(format!("sequence {}", row.get::<_, String>(0)));
    }
    out
}

/// Every row of the memory tables of `schema`, as text.
async fn rows_of(schema: &str) -> Vec<String> {
    let client = admin(TempPostgres::shared().unwrap()).await;
    let mut out = Vec::new();
    for row in client
        .query(
            &format!(
                "SELECT concat_ws(' | ', id, user_id, agent_id, layer, kind, source, text, metadata::text, \
                 created_at::text, rehearsal::text, coalesce(embedding_f32::text, '-'), embedder, seq::text) \
                 FROM {schema}.jarvis_ltm_entries ORDER BY id"
            ),
            &[],
        )
        .await
        .unwrap()
    {
        out.push(row.get::<_, String>(0));
    }
    out
}

async fn legacy_schema(what: &str) -> Option<(String, String)> {
    let (url, schema) = fresh_schema(what).await?;
    admin(TempPostgres::shared().unwrap())
        .await
        .batch_execute(&LEGACY.replace("{s}", &schema))
        .await
        .unwrap();
    Some((url, schema))
}

#[tokio::test]
async fn the_backfill_and_migrations_run_twice_or_at_once_give_the_same_rows_and_schema() {
    let Some((once_url, once)) = legacy_schema("memory backfill").await else {
        return;
    };
    let Some((twice_url, twice)) = legacy_schema("memory backfill").await else {
        return;
    };
    let Some((racing_url, racing)) = legacy_schema("memory backfill").await else {
        return;
    };

    PostgresMemoryStore::connect(&once_url).await.unwrap();
    let rows = rows_of(&once).await;
    let schema = schema_of(&once).await;

    let store = PostgresMemoryStore::connect(&twice_url).await.unwrap();
    let after_one = rows_of(&twice).await;
    store.migrate().await.unwrap();
    PostgresMemoryStore::connect(&twice_url).await.unwrap();
    assert_eq!(rows_of(&twice).await, after_one, "a second run changes no row");
    assert_eq!(after_one, rows, "the same legacy rows give the same result");
    assert_eq!(schema_of(&twice).await, schema);

    // Two connections at once (and six more), on a legacy table.
    let racers = (0..8).map(|_| PostgresMemoryStore::connect(&racing_url));
    for result in futures::future::join_all(racers).await {
        result.unwrap();
    }
    assert_eq!(rows_of(&racing).await, rows);
    assert_eq!(schema_of(&racing).await, schema);

    // What the backfill made of each legacy row.
    let summary: Vec<String> = rows
        .iter()
        .map(|r| {
            let f: Vec<&str> = r.split(" | ").collect();
            format!("{} {} {} {} seq={}", f[0], f[2], f[3], f[4], f[12])
        })
        .collect();
    assert_eq!(
        summary,
        [
            "m1 main semantic fact seq=1",
            "m2 main semantic user_model seq=2",
            "m3 main semantic fact seq=3",
            "m4 main episodic episode seq=4",
            "m5 main procedural task_pattern seq=5",
            "m6 main procedural procedure seq=6",
            "m7 main episodic note seq=7",
        ]
    );
    assert!(
        rows.iter().all(|r| r.contains(" | - | ")),
        "no vector was made up: {rows:#?}"
    );
    for needle in [
        "column jarvis_ltm_entries agent_id text NO 'main'::text",
        "column jarvis_ltm_entries kind text NO",
        "column jarvis_ltm_entries embedding text YES",
        "column jarvis_working_memory body jsonb NO",
        "index jarvis_ltm_entries_by_seq",
        "sequence jarvis_ltm_entries_seq",
    ] {
        assert!(
            schema.iter().any(|l| l.starts_with(needle)),
            "{needle:?} not in {schema:#?}"
        );
    }
}

#[tokio::test]
async fn an_empty_database_migrates_the_same_once_twice_and_at_once() {
    let Some((once_url, once)) = fresh_schema("memory migrations").await else {
        return;
    };
    let Some((twice_url, twice)) = fresh_schema("memory migrations").await else {
        return;
    };
    let Some((racing_url, racing)) = fresh_schema("memory migrations").await else {
        return;
    };
    PostgresMemoryStore::connect(&once_url).await.unwrap();
    let store = PostgresMemoryStore::connect(&twice_url).await.unwrap();
    store.migrate().await.unwrap();
    let (a, b) = tokio::join!(
        PostgresMemoryStore::connect(&racing_url),
        PostgresMemoryStore::connect(&racing_url)
    );
    a.unwrap();
    b.unwrap();
    let expected = schema_of(&once).await;
    assert_eq!(schema_of(&twice).await, expected);
    assert_eq!(schema_of(&racing).await, expected);
}

#[tokio::test]
async fn legacy_rows_become_mains_and_recallable_after_reembedding() {
    let Some((url, _)) = legacy_schema("memory legacy recall").await else {
        return;
    };
    let store = Arc::new(PostgresMemoryStore::connect(&url).await.unwrap());
    let service = MemoryService::new(store.clone(), Arc::new(HashEmbedder::default()));
    let main = MemoryScope::new("u", "main", "s");
    // Before re-embedding, legacy rows have no vector: their words find them.
    let by_words = service
        .search(&main, "peanuts allergic", Layer::Semantic, 3)
        .await
        .unwrap();
    assert_eq!(by_words[0].record.id, "m1");
    assert_eq!(by_words[0].similarity, 0.0, "no vector to compare");
    assert_eq!(service.reembed_stale().await.unwrap(), 7);
    assert_eq!(
        service.reembed_stale().await.unwrap(),
        0,
        "nothing is stale any more"
    );
    let found = service
        .search(&main, "allergic to peanuts", Layer::Semantic, 3)
        .await
        .unwrap();
    assert_eq!(found[0].record.id, "m1");
    let episodes = service
        .search(&main, "SH housing notice", Layer::Episodic, 3)
        .await
        .unwrap();
    assert_eq!(episodes[0].record.id, "m4");
    // Another agent reads the shared profile but not main's legacy episodes.
    let karen = MemoryScope::new("u", "karen", "k");
    assert_eq!(
        service
            .search(&karen, "allergic to peanuts", Layer::Semantic, 3)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        service
            .search(&karen, "SH housing notice", Layer::Episodic, 3)
            .await
            .unwrap()
            .is_empty()
    );
    // A new connection re-runs the migration and keeps the vectors.
    let again = PostgresMemoryStore::connect(&url).await.unwrap();
    let name = HashEmbedder::default().name().to_owned();
    assert!(again.stale(&name, 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn damaged_rows_and_working_memory_are_skipped_with_a_warning() {
    let Some((url, schema)) = fresh_schema("memory damaged rows").await else {
        return;
    };
    let store = PostgresMemoryStore::connect(&url).await.unwrap();
    admin(TempPostgres::shared().unwrap())
        .await
        .batch_execute(&format!(
            "INSERT INTO {schema}.jarvis_ltm_entries (id, user_id, agent_id, layer, kind, source, text) \
               VALUES ('bad', 'u', 'main', 'dreams', 'x', 'x', 'x'), ('good', 'u', 'main', 'episodic', 'note', 'x', 'fine');
             INSERT INTO {schema}.jarvis_working_memory (session_id, body) VALUES ('s', '[1, 2]');"
        ))
        .await
        .unwrap();
    let (logs, _guard) = capture();
    let all = store.list(&MemoryFilter::for_user("u")).await.unwrap();
    assert_eq!(all.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), ["good"]);
    assert!(
        logs.warned(&["skipped a damaged row", "unknown layer"]),
        "{:?}",
        logs.lines()
    );
    assert_eq!(store.load_working("s").await.unwrap(), None);
    assert!(
        logs.warned(&["working memory of session s is damaged"]),
        "{:?}",
        logs.lines()
    );
}

#[tokio::test]
async fn an_unreachable_database_is_a_clear_error() {
    let err = PostgresMemoryStore::connect("host=/nonexistent/jarvis port=5999 user=jarvis dbname=jarvis")
        .await
        .unwrap_err();
    assert!(matches!(err, MemoryError::Unreachable { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "memory store (postgres): cannot reach the database at host=/nonexistent/jarvis port=5999 dbname=jarvis user=jarvis"
    );
    let err = PostgresMemoryStore::connect("postgres://jarvis:secret@127.0.0.1:notaport/db")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("could not be read"), "{err}");
    assert!(!format!("{err:?}").contains("secret"), "the password never shows");
}

/// A mirror catches up in pages of 10,000 rows of each table: an instance
/// that starts beside more rows than one page, with tombstones after them,
/// ends with every live row and none of the deleted ones.
#[tokio::test]
async fn a_mirror_catches_up_across_pages() {
    let Some((url, schema)) = fresh_schema("memory store, paged catch-up").await else {
        return;
    };
    let writer = PostgresMemoryStore::connect(&url).await.unwrap();
    admin(TempPostgres::shared().unwrap())
        .await
        .batch_execute(&format!(
            "INSERT INTO {schema}.jarvis_ltm_entries (id, user_id, agent_id, layer, kind, source, text, embedder) \
             SELECT 'r' || n, 'u', 'main', 'episodic', 'note', 'note', 'row ' || n, '' \
             FROM generate_series(1, 10050) AS n"
        ))
        .await
        .unwrap();
    let gone = ["r1".to_owned(), "r10000".to_owned(), "r10050".to_owned()];
    assert_eq!(writer.delete(&gone).await.unwrap(), 3);

    let reader = PostgresMemoryStore::connect(&url).await.unwrap();
    let mut filter = MemoryFilter::for_user("u");
    filter.limit = Some(20_000);
    let ids: std::collections::HashSet<String> = reader
        .list(&filter)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(ids.len(), 10_047);
    for id in &gone {
        assert!(!ids.contains(id), "{id} was deleted");
    }
    assert!(ids.contains("r9999") && ids.contains("r10001") && ids.contains("r10049"));
}

/// A row of `jarvis_ltm_entries` for `insert_sql`.
fn insert_row(schema: &str, id: &str) -> String {
    format!(
        "INSERT INTO {schema}.jarvis_ltm_entries (id, user_id, agent_id, layer, kind, source, text, embedder) \
         VALUES ('{id}', 'u', 'main', 'episodic', 'note', 'note', 'row {id}', '')"
    )
}

/// What a recall sees of `ids` after its catch-up.
async fn recalled(store: &PostgresMemoryStore, ids: &[&str]) -> Vec<String> {
    store.catch_up().await.unwrap();
    let ids: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
    let mut seen: Vec<String> = store
        .get_texts_cached(&ids)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    seen.sort();
    seen
}

/// A recall's catch-up asks the database only when another writer was
/// heard or the mirror lacks a change before one of its own: a row
/// written without a notice (triggers off) stays out of what a recall
/// sees until a read that always asks; one written with a notice is seen
/// once it is heard; the store's own write is seen at once; and an own
/// write stamped after a row the mirror lacks brings that row too.
#[tokio::test]
async fn a_recall_asks_the_database_only_after_a_notice() {
    let Some((url, schema)) = fresh_schema("memory store, notices").await else {
        return;
    };
    let store = PostgresMemoryStore::connect(&url).await.unwrap();
    assert!(store.listening());
    let admin = admin(TempPostgres::shared().unwrap()).await;
    let unheard = |id: &str| {
        format!(
            "SET session_replication_role = replica; {}; SET session_replication_role = origin",
            insert_row(&schema, id)
        )
    };
    let all = ["quiet", "heard", "own", "gap", "after-gap"];

    admin.batch_execute(&unheard("quiet")).await.unwrap();
    assert!(
        recalled(&store, &all).await.is_empty(),
        "no notice, no round trip"
    );
    assert_eq!(
        store.get(&["quiet".into()]).await.unwrap().len(),
        1,
        "a read that asks"
    );
    assert_eq!(recalled(&store, &all).await, ["quiet"]);

    let heard = store.heard();
    admin.batch_execute(&insert_row(&schema, "heard")).await.unwrap();
    store.hear(heard).await;
    assert_eq!(recalled(&store, &all).await, ["heard", "quiet"]);

    let own = |id: &str| jarvis_sdk::memory::MemoryRecord {
        id: id.into(),
        user: "u".into(),
        agent_id: "main".into(),
        layer: Layer::Episodic,
        kind: "note".into(),
        source: "note".into(),
        text: format!("row {id}"),
        metadata: serde_json::json!({}),
        created_at: jarvis_sdk::common::Timestamp::from_millis(1_795_910_400_000),
        rehearsal: 0,
        embedder: String::new(),
        embedding: Vec::new(),
    };
    store.put(own("own")).await.unwrap();
    assert_eq!(
        recalled(&store, &all).await,
        ["heard", "own", "quiet"],
        "an own write at once"
    );

    admin.batch_execute(&unheard("gap")).await.unwrap();
    store.put(own("after-gap")).await.unwrap();
    assert_eq!(
        recalled(&store, &all).await,
        ["after-gap", "gap", "heard", "own", "quiet"],
        "the change before the own one is read"
    );
}

/// Without its listening connection a store catches up on every recall,
/// and it makes the connection again: a cut link loses no write.
#[tokio::test]
async fn a_store_whose_listening_connection_broke_asks_every_time_and_listens_again() {
    let Some(cluster) = TempPostgres::shared_or_skip("memory store, listening cut") else {
        return;
    };
    let admin = admin(cluster).await;
    let db = "memory_listen_cut";
    for statement in [
        format!("DROP DATABASE IF EXISTS {db}"),
        format!("CREATE DATABASE {db}"),
    ] {
        admin.batch_execute(&statement).await.unwrap();
    }
    let url = cluster.url_for(db);
    let store = PostgresMemoryStore::connect(&url).await.unwrap();
    let (other, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);

    admin
        .batch_execute(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = '{db}' AND application_name = 'jarvis-memory-notices'"
        ))
        .await
        .unwrap();
    store.until_listening(false).await;
    let heard = store.heard();
    other
        .batch_execute(&format!(
            "SET session_replication_role = replica; {}; SET session_replication_role = origin",
            insert_row("public", "meanwhile")
        ))
        .await
        .unwrap();
    if !store.listening() {
        assert_eq!(
            recalled(&store, &["meanwhile"]).await,
            ["meanwhile"],
            "not listening: the recall asked"
        );
    }
    store.until_listening(true).await;
    store.hear(heard).await;
    assert_eq!(recalled(&store, &["meanwhile"]).await, ["meanwhile"]);
    let heard = store.heard();
    other.batch_execute(&insert_row("public", "after")).await.unwrap();
    store.hear(heard).await;
    assert_eq!(
        recalled(&store, &["after", "meanwhile"]).await,
        ["after", "meanwhile"]
    );
}
