//! [`PostgresMemoryStore`] (feature `postgres`): long-term memory in
//! `jarvis_ltm_entries`, working memory in `jarvis_working_memory`, for
//! several server instances sharing one database. No pgvector needed.
//!
//! The rules are documented on [`PostgresMemoryStore`].
//!
//! Files: `postgres/schema.rs` (the schema and the backfill),
//! `postgres/statements.rs` (the SQL of reads and writes),
//! `postgres/mirror.rs` (the mirror of the tables in the index).

use async_trait::async_trait;
use deadpool_postgres::Pool;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio_postgres::types::{Json, ToSql};

use super::error::{BoxError, MemoryError};
use super::postgres_notices::{Listener, WRITER_SETTING, writer_token};
use super::record::{MemoryFilter, MemoryRecord, SearchHit, SearchQuery};
use super::store::MemoryStore;
use super::working::WorkingMemory;
use jarvis_common::pg::{PgSetupError, build_pool_with, config_with, connection};

mod mirror;
mod schema;
mod statements;

use mirror::Mirror;
use statements::{RecordColumns, TOUCH, UPSERT_WITH_WORKING, upsert};

/// Key of the advisory lock every write holds (`jarvis`, then 3).
const WRITE_LOCK: i64 = 0x6a61_7276_6973_0003;

/// Server settings of the store's connections. Every statement a turn
/// sends is prepared once per connection, and Postgres keeps the plan it
/// makes for it: a plan made while the table was small is a sequential
/// scan (measured: the rehearsal's plan scanned the table to update four
/// rows), and no automatic `ANALYZE` comes in time to replace it while a
/// busy session grows the table. Every statement of the store finds its
/// rows by an index (`id`, `seq`, `session_id`), so the planner is told to
/// take one; statements no index serves (the backfill) still scan.
const PLANNER_SETTINGS: &[(&str, &str)] = &[("enable_seqscan", "off")];

/// Working memories by session, as this store last wrote or read them,
/// with the notices' generation of that moment (see
/// [`PostgresMemoryStore::load_working`]).
type WorkingCache = HashMap<String, (u64, WorkingMemory)>;

/// `ids` with each named once (a call rehearses a record once however
/// often it names it), in their first order.
fn once_each(ids: &[String]) -> Vec<String> {
    let mut seen = std::collections::HashSet::with_capacity(ids.len());
    ids.iter()
        .filter(|id| seen.insert(id.as_str()))
        .cloned()
        .collect()
}

/// Rehearsals a store leaves for the end of a turn at most
/// ([`MemoryStore::touch_soon`]).
const REHEARSALS_LEFT: usize = 256;

/// Sessions whose working memory a store keeps at most; past it, the
/// cache starts afresh.
const WORKING_CACHE: usize = 4_096;

/// Long-term and working memory in Postgres.
///
/// **Schema.** Brought up to date when the store connects, idempotently
/// (R-IDEM-2): `CREATE TABLE IF NOT EXISTS`, then `ADD COLUMN IF NOT EXISTS`
/// for every column, so a table from before agent scoping gains `agent_id`,
/// `kind` and the rest. Everything runs in one transaction holding an
/// advisory lock, so two processes starting at once take turns.
///
/// **Backfill (R-MEM-14).** In the same transaction, rows without an
/// `agent_id` become `main`'s, rows without a `kind` (or `layer`) get the
/// one [`WRITE_RULES`](super::WRITE_RULES) gives their `source`, and rows
/// without a `seq` get one. Every statement only touches rows whose value
/// is missing, so a second run changes nothing.
///
/// **Search.** Each process keeps a mirror of the table in the shared
/// in-process index and searches that (milliseconds for 100,000 rows).
/// Every write takes a second advisory lock for the length of its
/// transaction and stamps the rows it writes with the next value of a
/// sequence (`seq`), so rows become visible in `seq` order; before each
/// read the mirror fetches the rows with a `seq` above the highest it has
/// seen. Writes of other instances are therefore seen by the next read,
/// with one exception: a recall's [`catch_up`](MemoryStore::catch_up)
/// asks the database only when a notice says another instance wrote
/// since (`postgres_notices.rs`: triggers `NOTIFY`, each store `LISTEN`s
/// on a connection of its own), so it sees another instance's write from
/// the moment its notice arrives, a fraction of a millisecond after the
/// commit, and costs no round trip while no one else writes. The store's
/// own writes return the `seq` they were stamped with and go into the
/// mirror at once. Working memory is kept the same way: a session's
/// working memory as this store last wrote or read it answers until a
/// notice of another writer arrives.
/// A rehearsal moves a row to a new `seq` but keeps the `seq` its content
/// was written at (`written_seq`), so a mirror that already holds that
/// content fetches only the new count; a fresh mirror, or a row written
/// again, gets the whole row.
/// **Deletes** ([`MemoryStore::delete`], which forgetting uses) remove the
/// rows and, in the same transaction, leave a tombstone in
/// `jarvis_ltm_deleted (id, seq)` stamped from the same sequence; a mirror
/// that reads a tombstone drops the record, so another process stops
/// answering it at its next read. A tombstone keeps only the record's id,
/// never its text. One statement reads new rows and new tombstones, so both
/// come from one snapshot and are applied in `seq` order (a record written
/// again after its delete comes back).
///
/// Rows whose embedding is missing or comes from another embedder (legacy
/// rows) are not searched until
/// [`MemoryService::reembed_stale`](super::MemoryService::reembed_stale)
/// re-embeds them; the legacy column `embedding`, whatever its type, is
/// never read (vectors live in `embedding_f32`).
///
/// Cheap to clone; clones share one connection pool and one mirror.
#[derive(Clone)]
pub struct PostgresMemoryStore {
    pool: Pool,
    target: Arc<str>,
    mirror: Arc<Mutex<Mirror>>,
    refreshing: Arc<tokio::sync::Mutex<()>>,
    /// The rehearsals [`MemoryStore::touch_soon`] left for the end of the
    /// turn to write (a record once per rehearsal), which the store's
    /// next read or other write sends first.
    rehearsing: Arc<Mutex<Vec<String>>>,
    listener: Arc<Listener>,
    working: Arc<Mutex<WorkingCache>>,
}

impl std::fmt::Debug for PostgresMemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresMemoryStore")
            .field("target", &self.target)
            .field("pool", &self.pool.status())
            .finish_non_exhaustive()
    }
}

fn db(op: &'static str) -> impl FnOnce(tokio_postgres::Error) -> MemoryError {
    move |e| MemoryError::Database {
        op,
        source: Box::new(e) as BoxError,
    }
}

impl PostgresMemoryStore {
    /// Connects to the database at `url` (`postgres://user@host/db` or
    /// `host=/run/postgresql user=jarvis dbname=jarvis`; no TLS), brings the
    /// schema up to date (with the backfill) and loads the mirror.
    ///
    /// Fails with [`MemoryError::Unreachable`], naming host, port and
    /// database (never the password), when no connection can be made.
    pub async fn connect(url: &str) -> Result<Self, MemoryError> {
        let writer = writer_token();
        let mut settings = PLANNER_SETTINGS.to_vec();
        settings.push((WRITER_SETTING, &writer));
        let (pool, target) = build_pool_with(url, 8, &settings).map_err(setup_error)?;
        let config = config_with(url, &settings).map_err(setup_error)?;
        // Reached first: a failure names the target as any other does.
        drop(connection(&pool, &target).await.map_err(setup_error)?);
        let store = Self {
            pool,
            target,
            mirror: Arc::new(Mutex::new(Mirror::default())),
            refreshing: Arc::new(tokio::sync::Mutex::new(())),
            rehearsing: Arc::new(Mutex::new(Vec::new())),
            listener: Arc::new(Listener::start(config, writer).await),
            working: Arc::new(Mutex::new(HashMap::new())),
        };
        store.migrate().await?;
        // After the listening began: what others write from here on is
        // noticed, and what they wrote before, this brings.
        store.refresh().await?;
        Ok(store)
    }
    async fn client(&self) -> Result<deadpool_postgres::Object, MemoryError> {
        connection(&self.pool, &self.target).await.map_err(setup_error)
    }

    /// The rehearsals left by recalls and not yet written, taken.
    fn take_rehearsals(&self) -> Vec<String> {
        std::mem::take(&mut *self.rehearsing.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Writes the rehearsals recalls left ([`MemoryStore::touch_soon`]),
    /// if any, so what comes next comes after them. A failure is logged:
    /// the recall that left them has long answered.
    async fn settle(&self) {
        let pending = self.take_rehearsals();
        if pending.is_empty() {
            return;
        }
        if let Err(e) = self.rehearse(&pending).await {
            tracing::warn!("memory store (postgres): a recall's rehearsal was not written: {e}");
        }
    }

    /// One rehearsal more for `ids`: one statement ([`TOUCH`]), caught up
    /// by the next read.
    async fn rehearse(&self, ids: &[String]) -> Result<(), MemoryError> {
        let client = self.client().await?;
        let op = "rehearse memories";
        let statement = client.prepare_cached(TOUCH).await.map_err(db(op))?;
        let rows = client
            .query(&statement, &[&ids, &WRITE_LOCK])
            .await
            .map_err(db(op))?;
        let mut touched = (Vec::new(), Vec::new(), Vec::new());
        for row in rows {
            if let (Ok(id), Ok(seq), Ok(count)) = (
                row.try_get::<_, String>(0),
                row.try_get::<_, i64>(1),
                row.try_get::<_, i32>(2),
            ) {
                touched.0.push(id);
                touched.1.push(seq);
                touched.2.push(count);
            }
        }
        Self::rehearsed(&mut self.mirror(), &touched.0, &touched.1, &touched.2);
        Ok(())
    }

    fn working_cache(&self) -> MutexGuard<'_, WorkingCache> {
        self.working.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `memory` as the session's working memory as of `generation`.
    fn keep_working(&self, generation: u64, memory: &WorkingMemory) {
        let mut cache = self.working_cache();
        if cache.len() >= WORKING_CACHE && !cache.contains_key(&memory.session_id) {
            cache.clear();
        }
        cache.insert(memory.session_id.clone(), (generation, memory.clone()));
    }

    /// How many notices of other instances' writes this store has heard
    /// (see the type's docs): a recall sees such a write once its notice
    /// is counted here.
    pub fn heard(&self) -> u64 {
        self.listener.notices().heard()
    }

    /// Waits until more than `after` notices of other instances' writes
    /// were heard ([`heard`](Self::heard)).
    pub async fn hear(&self, after: u64) {
        self.listener.notices().hear(after).await;
    }

    /// Whether the store's listening connection is up: while it is not,
    /// every recall catches up with the database (it is made again after
    /// 0.5 s, then after twice as long each time, up to 10 s).
    pub fn listening(&self) -> bool {
        self.listener.notices().listening()
    }

    /// Waits until [`listening`](Self::listening) is `listening`.
    pub async fn until_listening(&self, listening: bool) {
        self.listener.notices().until_listening(listening).await;
    }
    /// Runs `write` in a transaction holding the write lock, then refreshes.
    async fn write<T, F>(&self, op: &'static str, write: F) -> Result<T, MemoryError>
    where
        F: for<'t> FnOnce(
            &'t deadpool_postgres::Transaction<'t>,
        ) -> futures::future::BoxFuture<'t, Result<T, tokio_postgres::Error>>,
    {
        self.settle().await;
        let out = {
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(db(op))?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&WRITE_LOCK])
                .await
                .map_err(db(op))?;
            let out = write(&tx).await.map_err(db(op))?;
            tx.commit().await.map_err(db(op))?;
            out
        };
        self.refresh().await?;
        Ok(out)
    }
}

fn setup_error(e: PgSetupError) -> MemoryError {
    match e {
        PgSetupError::Unreachable { target, source } => MemoryError::Unreachable { target, source },
        PgSetupError::Other { op, source } => MemoryError::Database { op, source },
    }
}

#[async_trait]
impl MemoryStore for PostgresMemoryStore {
    // One statement, and no refresh after it: the record goes into the
    // mirror as written.
    async fn put(&self, record: MemoryRecord) -> Result<(), MemoryError> {
        self.settle().await;
        let client = self.client().await?;
        let seq = upsert(&client, &record).await.map_err(db("write a memory"))?;
        Self::applied(&mut self.mirror(), seq, |index| index.upsert(record));
        Ok(())
    }

    // One statement for both, as `put`.
    async fn put_with_working(
        &self,
        record: MemoryRecord,
        memory: &WorkingMemory,
    ) -> Result<(), MemoryError> {
        let client = self.client().await?;
        let op = "write a turn's memory";
        let rehearsals = self.take_rehearsals();
        let stmt = client.prepare_cached(UPSERT_WITH_WORKING).await.map_err(db(op))?;
        let columns = RecordColumns::of(&record);
        let body = Json(memory);
        let mut params = columns.params();
        params.extend([
            &WRITE_LOCK as &(dyn ToSql + Sync),
            &memory.session_id,
            &memory.user,
            &memory.agent_id,
            &body,
            &rehearsals,
        ]);
        let generation = self.listener.notices().generation();
        let row = match client.query_one(&stmt, &params).await {
            Ok(row) => row,
            Err(e) => {
                // Left again for the next write.
                self.rehearsing
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend(rehearsals.iter().cloned());
                return Err(db(op)(e));
            }
        };
        let (seq, ids, seqs, counts): (i64, Vec<String>, Vec<i64>, Vec<i32>) = (|| {
            Ok::<_, tokio_postgres::Error>((
                row.try_get(0)?,
                row.try_get(1)?,
                row.try_get(2)?,
                row.try_get(3)?,
            ))
        })()
        .map_err(db(op))?;
        drop(params);
        let mut mirror = self.mirror();
        Self::rehearsed(&mut mirror, &ids, &seqs, &counts);
        Self::applied(&mut mirror, seq, |index| index.upsert(record));
        drop(mirror);
        self.keep_working(generation, memory);
        Ok(())
    }

    async fn get(&self, ids: &[String]) -> Result<Vec<MemoryRecord>, MemoryError> {
        self.refresh().await?;
        let mirror = self.mirror();
        Ok(ids.iter().filter_map(|id| mirror.index.get(id)).collect())
    }

    async fn get_texts(&self, ids: &[String]) -> Result<Vec<MemoryRecord>, MemoryError> {
        self.refresh().await?;
        let mirror = self.mirror();
        Ok(ids.iter().filter_map(|id| mirror.index.get_text(id)).collect())
    }

    async fn list(&self, filter: &MemoryFilter) -> Result<Vec<MemoryRecord>, MemoryError> {
        self.refresh().await?;
        Ok(self.mirror().index.list(filter))
    }

    async fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, MemoryError> {
        self.refresh().await?;
        Ok(self.mirror().index.search(query))
    }

    async fn search_many(&self, queries: &[SearchQuery]) -> Result<Vec<Vec<SearchHit>>, MemoryError> {
        self.refresh().await?;
        let mirror = self.mirror();
        Ok(mirror.index.search_many(queries))
    }

    // No round trip while listening and nothing was heard since the last
    // refresh, and the mirror lacks none of the changes before this
    // store's own (see the type's docs).
    async fn catch_up(&self) -> Result<(), MemoryError> {
        let notices = self.listener.notices();
        let quiet = {
            let mirror = self.mirror();
            notices.listening() && mirror.heard_at == notices.generation() && mirror.own.is_empty()
        };
        if quiet {
            return Ok(());
        }
        self.refresh().await
    }

    async fn search_many_cached(&self, queries: &[SearchQuery]) -> Result<Vec<Vec<SearchHit>>, MemoryError> {
        Ok(self.mirror().index.search_many(queries))
    }

    async fn get_texts_cached(&self, ids: &[String]) -> Result<Vec<MemoryRecord>, MemoryError> {
        let mirror = self.mirror();
        Ok(ids.iter().filter_map(|id| mirror.index.get_text(id)).collect())
    }

    async fn touch(&self, ids: &[String]) -> Result<(), MemoryError> {
        if ids.is_empty() {
            return Ok(());
        }
        self.settle().await;
        self.rehearse(&once_each(ids)).await
    }

    // Left for the end of the turn, whose write carries them in its one
    // statement ([`UPSERT_WITH_WORKING`]); any other read or write of the
    // store sends them first ([`settle`](Self::settle)). Rehearsals add
    // up in any order. Past [`REHEARSALS_LEFT`] left, they are sent in the
    // background.
    async fn touch_soon(&self, ids: &[String]) -> Result<(), MemoryError> {
        if ids.is_empty() {
            return Ok(());
        }
        let many = {
            let mut rehearsing = self.rehearsing.lock().unwrap_or_else(|e| e.into_inner());
            rehearsing.extend(once_each(ids));
            rehearsing.len() > REHEARSALS_LEFT
        };
        if many {
            let store = self.clone();
            tokio::spawn(async move { store.settle().await });
        }
        Ok(())
    }

    // ponytail: tombstones are never pruned; they are a few bytes each and
    // only forgetting writes them.
    async fn delete(&self, ids: &[String]) -> Result<usize, MemoryError> {
        if ids.is_empty() {
            return Ok(0);
        }
        let ids = ids.to_vec();
        self.write("forget memories", |tx| {
            Box::pin(async move {
                let gone: Vec<String> = tx
                    .query(
                        "DELETE FROM jarvis_ltm_entries WHERE id = ANY($1) RETURNING id",
                        &[&ids],
                    )
                    .await?
                    .iter()
                    .map(|row| row.get(0))
                    .collect();
                tx.execute(
                    "INSERT INTO jarvis_ltm_deleted (id, seq) \
                     SELECT id, nextval('jarvis_ltm_entries_seq') FROM unnest($1::text[]) AS id \
                     ON CONFLICT (id) DO UPDATE SET seq = EXCLUDED.seq",
                    &[&gone],
                )
                .await?;
                Ok(gone.len())
            })
        })
        .await
    }

    async fn stale(&self, embedder: &str, limit: usize) -> Result<Vec<MemoryRecord>, MemoryError> {
        self.refresh().await?;
        Ok(self.mirror().index.stale(embedder, limit))
    }

    // From the cache while no other writer was heard since it was kept.
    async fn load_working(&self, session_id: &str) -> Result<Option<WorkingMemory>, MemoryError> {
        let notices = self.listener.notices();
        let generation = notices.generation();
        if notices.listening()
            && let Some((kept, memory)) = self.working_cache().get(session_id)
            && *kept == generation
        {
            return Ok(Some(memory.clone()));
        }
        let client = self.client().await?;
        let stmt = client
            .prepare_cached("SELECT body FROM jarvis_working_memory WHERE session_id = $1")
            .await
            .map_err(db("read working memory"))?;
        let Some(row) = client
            .query_opt(&stmt, &[&session_id])
            .await
            .map_err(db("read working memory"))?
        else {
            return Ok(None);
        };
        match row.try_get::<_, Json<WorkingMemory>>(0) {
            Ok(Json(memory)) => {
                self.keep_working(generation, &memory);
                Ok(Some(memory))
            }
            Err(e) => {
                tracing::warn!(
                    session_id,
                    "memory store (postgres): the working memory of session {session_id} is damaged ({e}); starting it afresh"
                );
                Ok(None)
            }
        }
    }

    async fn save_working(&self, memory: &WorkingMemory) -> Result<(), MemoryError> {
        self.settle().await;
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "INSERT INTO jarvis_working_memory (session_id, user_id, agent_id, body, updated_at) \
                 VALUES ($1, $2, $3, $4, now()) ON CONFLICT (session_id) DO UPDATE SET \
                 user_id = EXCLUDED.user_id, agent_id = EXCLUDED.agent_id, body = EXCLUDED.body, \
                 updated_at = EXCLUDED.updated_at",
            )
            .await
            .map_err(db("write working memory"))?;
        let generation = self.listener.notices().generation();
        client
            .execute(
                &stmt,
                &[&memory.session_id, &memory.user, &memory.agent_id, &Json(memory)],
            )
            .await
            .map_err(db("write working memory"))?;
        self.keep_working(generation, memory);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::statements::{REFRESH_PAGE, refresh_statement};
    use super::*;
    use jarvis_common::testing::TempPostgres;

    /// The plans Postgres keeps for the store's prepared statements, made
    /// while the table is small (where scanning it is the cheapest plan),
    /// still find rows by an index: the plans a busy session keeps while
    /// its table grows.
    #[tokio::test]
    async fn kept_plans_find_rows_by_an_index_even_when_made_on_a_small_table() {
        let Some(cluster) = TempPostgres::shared_or_skip("memory store, kept plans") else {
            return;
        };
        let (admin, connection) = tokio_postgres::connect(&cluster.url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        admin
            .batch_execute("CREATE SCHEMA IF NOT EXISTS kept_plans")
            .await
            .unwrap();
        let url = format!("{} options='-c search_path=kept_plans'", cluster.url());
        let store = PostgresMemoryStore::connect(&url).await.unwrap();
        let client = store.client().await.unwrap();
        client
            .batch_execute(
                "INSERT INTO jarvis_ltm_entries (id, layer, kind, text) \
                 SELECT 'm' || n, 'episodic', 'episode', repeat('words ', 40) FROM generate_series(1, 150) AS n; \
                 ANALYZE jarvis_ltm_entries; SET plan_cache_mode = force_generic_plan",
            )
            .await
            .unwrap();
        let plan = |sql: String| {
            let client = &client;
            async move {
                let rows = client.query(&sql, &[]).await.unwrap();
                rows.iter()
                    .map(|r| r.get::<_, String>(0))
                    .collect::<Vec<_>>()
                    .join("\n")
            }
        };
        client
            .batch_execute(&format!(
                "PREPARE touch (TEXT[], BIGINT) AS {TOUCH}; PREPARE refresh (BIGINT, BIGINT, BIGINT) AS {}",
                refresh_statement()
            ))
            .await
            .unwrap();
        let touch = plan("EXPLAIN EXECUTE touch('{a,b}', 1)".into()).await;
        let refresh = plan(format!(
            "EXPLAIN EXECUTE refresh(0, {REFRESH_PAGE}, {})",
            i64::MAX
        ))
        .await;
        for (name, plan) in [("touch", &touch), ("refresh", &refresh)] {
            assert!(
                !plan.contains("Seq Scan on jarvis_ltm"),
                "{name} scans the table:\n{plan}"
            );
            assert!(plan.contains("Index"), "{name} uses no index:\n{plan}");
        }
        // Without the store's settings the same statement on the same small
        // table is planned as a scan: the check above can fail.
        client
            .batch_execute(&format!(
                "SET enable_seqscan = on; DEALLOCATE touch; PREPARE touch (TEXT[], BIGINT) AS {TOUCH}"
            ))
            .await
            .unwrap();
        let unset = plan("EXPLAIN EXECUTE touch('{a,b}', 1)".into()).await;
        assert!(unset.contains("Seq Scan on jarvis_ltm_entries"), "{unset}");
    }
}
