//! [`SqliteMemoryStore`] (feature `sqlite`, on by default): long-term and
//! working memory in one SQLite file, `$JARVIS_HOME/memory.sqlite3`, so
//! memory outlives the process without a database server.
//!
//! The rules are documented on [`SqliteMemoryStore`].
//!
//! Files: `sqlite/schema.rs` (opening and migrating the file),
//! `sqlite/load.rs` (the index rebuilt at open), `sqlite/commit.rs` (group
//! commit), `sqlite/rows.rs` (the rows a write writes).

use async_trait::async_trait;
use rusqlite::{Connection, ErrorCode, OptionalExtension};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::ann::AnnOptions;
use super::error::MemoryError;
use super::graph_file::graphs_dir;
use super::index::Index;
use super::record::{MemoryFilter, MemoryRecord, SearchHit, SearchQuery};
use super::store::MemoryStore;
use super::working::WorkingMemory;

mod commit;
mod load;
mod rows;
mod schema;

use commit::{Queue, write_rehearsals};
use load::load;
use rows::{save_working, upsert};
use schema::connect;

/// The file name under `JARVIS_HOME`.
pub const MEMORY_DB_FILE: &str = "memory.sqlite3";

/// The schema version this code writes and reads (`PRAGMA user_version`).
pub const SQLITE_SCHEMA_VERSION: i64 = 1;

/// What opening a store found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct SqliteOpenReport {
    /// Records loaded into the index.
    pub records: usize,
    /// Rows skipped because they could not be read as records (an unknown
    /// layer, a vector whose length is not a whole number of floats); they
    /// stay in the file and are logged.
    pub skipped: usize,
    /// How long the open took, the index rebuilt included.
    pub elapsed: Duration,
    /// Records in partitions whose recall graph was taken back from the
    /// graphs the last run saved, so recall walks it from the start
    /// (other large partitions are scanned exactly while theirs builds).
    pub graph_records: usize,
}

struct Inner {
    path: PathBuf,
    /// The one connection; used only on blocking threads, one call at a time.
    conn: Mutex<Connection>,
    /// The records, searched in the process (the database is the truth;
    /// this is rebuilt from it at open and changed after each commit).
    index: Mutex<Index>,
    /// Working memories read or written since the open (`None`: the
    /// database has none for the session).
    working: Mutex<HashMap<String, Option<WorkingMemory>>>,
    /// Rehearsals counted in the index and not written yet: they go to the
    /// database with the next write.
    rehearsals: Mutex<HashMap<String, u32>>,
    /// Writes waiting for the committer.
    queue: Mutex<Queue>,
    report: SqliteOpenReport,
}

/// Long-term and working memory in a SQLite file (feature `sqlite`, on by
/// default), the embedded sibling of
/// `PostgresMemoryStore` (feature `postgres`).
///
/// **Tables.** `ltm_entries` (id, user_id, agent_id, layer, kind, source,
/// text, metadata as JSON text, created_at in milliseconds since the
/// epoch, rehearsal, embedding as a little-endian `f32` BLOB, embedder)
/// and `working_memory` (session_id, user_id, agent_id, body as JSON,
/// updated_at).
///
/// **Schema.** `PRAGMA user_version` holds the schema version
/// ([`SQLITE_SCHEMA_VERSION`]) and `PRAGMA application_id` marks the file
/// as a memory database. Opening brings an older file up to date in one
/// transaction with idempotent statements (`CREATE TABLE IF NOT EXISTS`);
/// opening a current file writes nothing. A file from a newer version is
/// refused ([`MemoryError::SchemaTooNew`]), and so is a SQLite file of
/// another program or a damaged one ([`MemoryError::SqliteDamaged`]):
/// nothing is changed in either.
///
/// **Durability.** The journal is a write-ahead log (WAL) with
/// `synchronous=NORMAL`: every write call is one transaction, committed to
/// the log before it returns, so it survives the process being killed
/// (`SIGKILL`) at once; the log is flushed to disk (`fsync`) at each
/// checkpoint (SQLite's automatic one every 1,000 pages, and after every
/// delete), so a power loss or an OS crash loses at most the writes since
/// the last checkpoint, and never leaves the file damaged.
///
/// **Group commit.** Writes are committed by one committer on a blocking
/// thread: the writes that arrive while it commits wait and go together in
/// its next transaction, each in a savepoint of its own, so one write that
/// fails is rolled back alone and the others stand. A caller's write is
/// answered (and applied to the index) only after the transaction holding
/// it has committed, so what every caller is told still holds after
/// `SIGKILL`; under load, many turns share one commit instead of queueing
/// for one each.
///
/// **Deletes really delete** (forgetting relies on it): `secure_delete` is
/// on, so a deleted row's bytes are overwritten with zeros in its page, not
/// just unlinked, and every [`delete`](MemoryStore::delete) ends with a
/// `TRUNCATE` checkpoint, which copies the zeroed pages into the database
/// file and empties the log, so the text leaves every file at once.
///
/// **Search.** At open the in-process index (the one every store searches,
/// milliseconds for 100,000 records) is rebuilt from `ltm_entries` in one
/// sequential scan; reads are answered from it, and every write changes it
/// after its commit. The connection holds the file exclusively
/// (`locking_mode=EXCLUSIVE`), so the index is always the truth: a second
/// process (or store) opening the same file gets
/// [`MemoryError::SqliteLocked`] instead of a copy that would drift. The
/// app's home lock already gives a `JARVIS_HOME` one process.
///
/// **Rehearsals.** What recall rehearses ([`touch`](MemoryStore::touch))
/// is counted in the index at once and written to the database with the
/// next write (a turn's episode follows its recall), so recalling costs no
/// write of its own before the model is called; a crash may lose the
/// rehearsals of the last recall, never a record.
///
/// **Threads.** Every SQLite call runs on tokio's blocking threads, never
/// on the async ones; prepared statements are cached.
///
/// Cheap to clone; clones share the connection and the index.
#[derive(Clone)]
pub struct SqliteMemoryStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SqliteMemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteMemoryStore")
            .field("path", &self.inner.path)
            .field("records", &self.len())
            .finish_non_exhaustive()
    }
}

/// The error of a failed SQLite call while trying to `op` the file `path`.
fn sqlite_error(op: &'static str, path: &Path, e: rusqlite::Error) -> MemoryError {
    file_state_error(path, &e).unwrap_or_else(|| MemoryError::Sqlite {
        op,
        path: path.to_owned(),
        source: Box::new(e),
    })
}

/// [`sqlite_error`] for an error shared by every write of a failed batch.
fn shared_sqlite_error(op: &'static str, path: &Path, e: &rusqlite::Error) -> MemoryError {
    file_state_error(path, e).unwrap_or_else(|| MemoryError::Sqlite {
        op,
        path: path.to_owned(),
        source: e.to_string().into(),
    })
}

/// The error for a file another connection holds or a damaged file, when
/// `e` says so.
fn file_state_error(path: &Path, e: &rusqlite::Error) -> Option<MemoryError> {
    match e.sqlite_error_code()? {
        ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => Some(MemoryError::SqliteLocked {
            path: path.to_owned(),
        }),
        ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt => Some(MemoryError::SqliteDamaged {
            path: path.to_owned(),
            reason: e.to_string(),
        }),
        _ => None,
    }
}

/// Runs `f` on a blocking thread.
async fn blocking<T, F>(op: &'static str, path: &Path, f: F) -> Result<T, MemoryError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, MemoryError> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result,
        Err(e) => Err(MemoryError::Sqlite {
            op,
            path: path.to_owned(),
            source: Box::new(e),
        }),
    }
}

impl SqliteMemoryStore {
    /// Opens (creating when missing) the memory database at `path`, brings
    /// its schema up to date and rebuilds the index from it, on a blocking
    /// thread.
    ///
    /// Fails with [`MemoryError::SqliteLocked`] when another process (or
    /// store) has the file open, [`MemoryError::SchemaTooNew`] for a file of
    /// a newer version, [`MemoryError::SqliteDamaged`] for a damaged file or
    /// another program's, and [`MemoryError::Sqlite`] or
    /// [`MemoryError::File`] when it cannot be created or written.
    pub async fn open(path: impl Into<PathBuf>) -> Result<Self, MemoryError> {
        let path = path.into();
        let at = path.clone();
        blocking("open", &at, move || Self::open_blocking(path)).await
    }

    /// The database `<home>/memory.sqlite3` ([`MEMORY_DB_FILE`]), opened as
    /// [`open`](Self::open) does.
    pub async fn open_in_home(home: &Path) -> Result<Self, MemoryError> {
        Self::open(home.join(MEMORY_DB_FILE)).await
    }

    /// [`open`](Self::open) with graphs made as `ann` says from the start
    /// (a later [`set_ann`](Self::set_ann) also works, but graphs saved by
    /// the last run under other options would be dropped and built again).
    pub async fn open_with_ann(path: impl Into<PathBuf>, ann: AnnOptions) -> Result<Self, MemoryError> {
        let path = path.into();
        let at = path.clone();
        blocking("open", &at, move || Self::open_blocking_with_ann(path, ann)).await
    }

    /// [`open`](Self::open) on the calling thread, for callers outside an
    /// async runtime.
    pub fn open_blocking(path: impl Into<PathBuf>) -> Result<Self, MemoryError> {
        Self::open_blocking_with_ann(path, AnnOptions::default())
    }

    /// [`open_with_ann`](Self::open_with_ann) on the calling thread.
    pub fn open_blocking_with_ann(path: impl Into<PathBuf>, ann: AnnOptions) -> Result<Self, MemoryError> {
        let path = path.into();
        let started = Instant::now();
        let conn = connect(&path)?;
        let (index, skipped) = load(&path, &conn, ann)?;
        let report = SqliteOpenReport {
            records: index.len(),
            skipped,
            elapsed: started.elapsed(),
            graph_records: index.graph_stats().0,
        };
        tracing::debug!(
            path = %path.display(),
            records = report.records,
            graph_records = report.graph_records,
            ms = report.elapsed.as_secs_f64() * 1e3,
            "memory store (sqlite): opened"
        );
        Ok(Self {
            inner: Arc::new(Inner {
                path,
                conn: Mutex::new(conn),
                index: Mutex::new(index),
                working: Mutex::new(HashMap::new()),
                rehearsals: Mutex::new(HashMap::new()),
                queue: Mutex::new(Queue::default()),
                report,
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// What the open found (records loaded, rows skipped, time taken).
    pub fn open_report(&self) -> SqliteOpenReport {
        self.inner.report
    }

    /// How many records it holds.
    pub fn len(&self) -> usize {
        self.index().len()
    }

    /// Whether it holds no records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies the write-ahead log into the database file, flushes both to
    /// disk and empties the log (`PRAGMA wal_checkpoint(TRUNCATE)`).
    /// Deletes do it themselves; call it before copying the file.
    pub async fn checkpoint(&self) -> Result<(), MemoryError> {
        let inner = self.inner.clone();
        blocking("checkpoint", &self.inner.path, move || {
            let conn = inner.conn();
            checkpoint(&inner.path, &conn)
        })
        .await
    }

    /// Changes when memory partitions get an approximate index
    /// ([`AnnOptions`]; the default needs no call).
    pub fn set_ann(&self, options: AnnOptions) {
        self.index().set_ann(options);
    }

    /// Blocks until every approximate index being built in the background
    /// is ready (for tests and benchmarks; the store waits meanwhile).
    pub fn wait_for_graphs(&self) {
        self.index().wait_for_graphs();
    }

    /// How many records are searched through an approximate index, and
    /// those indexes' memory in bytes.
    pub fn graph_stats(&self) -> (usize, usize) {
        self.index().graph_stats()
    }

    /// The folder where the recall graphs of large partitions are kept
    /// between runs (`<database>-graphs`, beside the database). It is a
    /// cache: deleting it while the store is closed only costs the next
    /// open a rebuild in the background.
    pub fn graphs_path(&self) -> PathBuf {
        graphs_dir(&self.inner.path)
    }

    fn index(&self) -> MutexGuard<'_, Index> {
        self.inner.index()
    }
}

impl Drop for Inner {
    /// Writes the rehearsals no write has carried yet (a clean close loses
    /// none), and the recall graphs that changed since they were saved.
    fn drop(&mut self) {
        self.index().save_graphs();
        let rehearsals = std::mem::take(&mut *self.rehearsals());
        if rehearsals.is_empty() {
            return;
        }
        if let Err(e) = write_rehearsals(&self.conn(), &rehearsals) {
            tracing::warn!(path = %self.path.display(), error = %e, "memory store (sqlite): rehearsals not written at close");
        }
    }
}

impl Inner {
    fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn index(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn rehearsals(&self) -> MutexGuard<'_, HashMap<String, u32>> {
        self.rehearsals.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn working(&self) -> MutexGuard<'_, HashMap<String, Option<WorkingMemory>>> {
        self.working.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `PRAGMA wal_checkpoint(TRUNCATE)`; a checkpoint another connection
/// blocked is reported, not hidden.
fn checkpoint(path: &Path, conn: &Connection) -> Result<(), MemoryError> {
    let (busy, _log, _done): (i64, i64, i64) = conn
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .map_err(|e| sqlite_error("checkpoint", path, e))?;
    if busy != 0 {
        return Err(MemoryError::SqliteLocked {
            path: path.to_owned(),
        });
    }
    Ok(())
}

#[async_trait]
impl MemoryStore for SqliteMemoryStore {
    async fn put(&self, record: MemoryRecord) -> Result<(), MemoryError> {
        self.write(
            "write a memory to",
            move |tx| upsert(tx, &record).map(|()| record),
            |index, record| index.upsert(record),
        )
        .await
    }

    async fn get(&self, ids: &[String]) -> Result<Vec<MemoryRecord>, MemoryError> {
        let index = self.index();
        Ok(ids.iter().filter_map(|id| index.get(id)).collect())
    }

    async fn get_texts(&self, ids: &[String]) -> Result<Vec<MemoryRecord>, MemoryError> {
        let index = self.index();
        Ok(ids.iter().filter_map(|id| index.get_text(id)).collect())
    }

    async fn list(&self, filter: &MemoryFilter) -> Result<Vec<MemoryRecord>, MemoryError> {
        Ok(self.index().list(filter))
    }

    async fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, MemoryError> {
        Ok(self.index().search(query))
    }

    async fn search_many(&self, queries: &[SearchQuery]) -> Result<Vec<Vec<SearchHit>>, MemoryError> {
        Ok(self.index().search_many(queries))
    }

    async fn touch(&self, ids: &[String]) -> Result<(), MemoryError> {
        let mut index = self.inner.index();
        let mut rehearsals = self.inner.rehearsals();
        let mut seen = HashSet::with_capacity(ids.len());
        for id in ids {
            if seen.insert(id.as_str()) && index.contains(id) {
                index.touch(id);
                *rehearsals.entry(id.clone()).or_insert(0) += 1;
            }
        }
        Ok(())
    }

    async fn delete(&self, ids: &[String]) -> Result<usize, MemoryError> {
        if ids.is_empty() {
            return Ok(0);
        }
        let gone = ids.to_vec();
        let count = self
            .write(
                "forget memories in",
                move |tx| {
                    let mut stmt = tx.prepare_cached("DELETE FROM ltm_entries WHERE id = ?1 RETURNING id")?;
                    let mut removed = Vec::new();
                    for id in &gone {
                        if let Some(id) = stmt.query_row([id], |r| r.get::<_, String>(0)).optional()? {
                            removed.push(id);
                        }
                    }
                    Ok(removed)
                },
                |index, removed| {
                    for id in &removed {
                        index.remove(id);
                    }
                    removed.len()
                },
            )
            .await?;
        // The zeroed pages go into the file and the log is emptied, so the
        // deleted text is in no file any more.
        self.checkpoint().await?;
        Ok(count)
    }

    async fn stale(&self, embedder: &str, limit: usize) -> Result<Vec<MemoryRecord>, MemoryError> {
        Ok(self.index().stale(embedder, limit))
    }

    async fn load_working(&self, session_id: &str) -> Result<Option<WorkingMemory>, MemoryError> {
        if let Some(cached) = self.inner.working().get(session_id) {
            return Ok(cached.clone());
        }
        let inner = self.inner.clone();
        let session = session_id.to_owned();
        blocking("read working memory from", &self.inner.path, move || {
            let body: Option<String> = {
                let conn = inner.conn();
                // Checked again under the connection's lock: a save may have
                // landed since.
                if let Some(cached) = inner.working().get(&session) {
                    return Ok(cached.clone());
                }
                conn.prepare_cached("SELECT body FROM working_memory WHERE session_id = ?1")
                    .and_then(|mut stmt| stmt.query_row([&session], |r| r.get(0)).optional())
                    .map_err(|e| sqlite_error("read working memory from", &inner.path, e))?
            };
            let memory = body.and_then(|body| match serde_json::from_str::<WorkingMemory>(&body) {
                Ok(memory) => Some(memory),
                Err(e) => {
                    tracing::warn!(
                        session_id = %session,
                        "memory store (sqlite): the working memory of session {session} is damaged ({e}); starting it afresh"
                    );
                    None
                }
            });
            inner.working().entry(session).or_insert(memory.clone());
            Ok(memory)
        })
        .await
    }

    async fn save_working(&self, memory: &WorkingMemory) -> Result<(), MemoryError> {
        let saved = self.encode_working(memory)?;
        let inner = self.inner.clone();
        self.write(
            "write working memory to",
            move |tx| save_working(tx, &saved).map(|()| saved),
            move |_, saved| {
                inner
                    .working()
                    .insert(saved.memory.session_id.clone(), Some(saved.memory));
            },
        )
        .await
    }

    async fn put_with_working(
        &self,
        record: MemoryRecord,
        memory: &WorkingMemory,
    ) -> Result<(), MemoryError> {
        let saved = self.encode_working(memory)?;
        let inner = self.inner.clone();
        self.write(
            "write a turn's memories to",
            move |tx| {
                upsert(tx, &record)?;
                save_working(tx, &saved)?;
                Ok((record, saved))
            },
            move |index, (record, saved)| {
                index.upsert(record);
                inner
                    .working()
                    .insert(saved.memory.session_id.clone(), Some(saved.memory));
            },
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::commit::{Job, WriteJob};
    use super::rows::vector_bytes;
    use super::*;
    use crate::record::Layer;
    use rusqlite::{Transaction, params};

    #[test]
    fn vectors_are_little_endian_floats() {
        let v = vec![1.0f32, -0.5, 0.0, f32::MIN_POSITIVE];
        let bytes = vector_bytes(&v).unwrap();
        assert_eq!(bytes.len(), 16);
        assert_eq!(bytes[..4], 1.0f32.to_le_bytes());
        assert_eq!(bytes[4..8], (-0.5f32).to_le_bytes());
        assert_eq!(vector_bytes(&[]), None);
    }

    fn fact(id: &str) -> MemoryRecord {
        MemoryRecord {
            layer: Layer::Semantic,
            kind: "fact".into(),
            ..crate::learn::test_episode(id)
        }
    }

    /// A job writing `record` whose answer comes on the returned receiver.
    #[allow(clippy::type_complexity)]
    fn put_job(
        store: &SqliteMemoryStore,
        record: MemoryRecord,
        table: &'static str,
    ) -> (
        Box<dyn Job>,
        tokio::sync::oneshot::Receiver<Result<String, MemoryError>>,
    ) {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job = Box::new(WriteJob {
            op: "write a memory to",
            path: store.inner.path.clone(),
            write: Some(move |tx: &Transaction<'_>| {
                tx.execute(
                    &format!(
                        "INSERT INTO {table} (id, user_id, agent_id, layer, kind, source, text, created_at) \
                              VALUES (?1, 'u', 'main', 'semantic', 'fact', 'remember', 'text', 1)"
                    ),
                    [&record.id],
                )?;
                Ok(record)
            }),
            written: None,
            apply: |index: &mut Index, record: MemoryRecord| {
                let id = record.id.clone();
                index.upsert(record);
                id
            },
            reply,
        });
        (job, answer)
    }

    #[test]
    fn a_write_that_fails_in_a_batch_is_rolled_back_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(MEMORY_DB_FILE);
        let store = SqliteMemoryStore::open_blocking(&path).unwrap();
        let (first, mut first_answer) = put_job(&store, fact("first"), "ltm_entries");
        let (bad, mut bad_answer) = put_job(&store, fact("bad"), "no_such_table");
        let (last, mut last_answer) = put_job(&store, fact("last"), "ltm_entries");
        store.inner.commit_batch(vec![first, bad, last]);
        assert_eq!(first_answer.try_recv().unwrap().unwrap(), "first");
        assert_eq!(last_answer.try_recv().unwrap().unwrap(), "last");
        let error = format!("{:?}", bad_answer.try_recv().unwrap().unwrap_err());
        assert!(error.contains("no_such_table"), "{error}");
        assert_eq!(store.len(), 2);
        drop(store);
        let reopened = SqliteMemoryStore::open_blocking(&path).unwrap();
        assert_eq!(reopened.len(), 2);
        assert!(reopened.index().contains("first") && reopened.index().contains("last"));
    }

    #[test]
    fn a_failed_batch_fails_every_write_and_keeps_the_rehearsals() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(MEMORY_DB_FILE);
        let store = SqliteMemoryStore::open_blocking(&path).unwrap();
        let (job, mut answer) = put_job(&store, fact("kept"), "ltm_entries");
        store.inner.commit_batch(vec![job]);
        answer.try_recv().unwrap().unwrap();
        store.inner.rehearsals().insert("kept".into(), 3);
        // Another transaction open on the connection: the batch cannot begin.
        store.inner.conn().execute_batch("BEGIN").unwrap();
        let (one, mut one_answer) = put_job(&store, fact("one"), "ltm_entries");
        let (two, mut two_answer) = put_job(&store, fact("two"), "ltm_entries");
        store.inner.commit_batch(vec![one, two]);
        assert!(one_answer.try_recv().unwrap().is_err());
        assert!(two_answer.try_recv().unwrap().is_err());
        assert_eq!(store.inner.rehearsals().get("kept"), Some(&3));
        store.inner.conn().execute_batch("ROLLBACK").unwrap();
        assert_eq!(store.len(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_writes_are_all_committed_and_answered_after_their_commit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(MEMORY_DB_FILE);
        let store = SqliteMemoryStore::open(&path).await.unwrap();
        let mut writers = tokio::task::JoinSet::new();
        for i in 0..200 {
            let store = store.clone();
            writers.spawn(async move {
                let id = format!("fact-{i}");
                if i % 2 == 0 {
                    store.put(fact(&id)).await.unwrap();
                } else {
                    let memory = WorkingMemory::new(format!("session-{i}"), "u", "main");
                    store.put_with_working(fact(&id), &memory).await.unwrap();
                }
                id
            });
        }
        let mut written = Vec::new();
        while let Some(id) = writers.join_next().await {
            written.push(id.unwrap());
        }
        assert_eq!(store.len(), 200);
        drop(store);
        let reopened = SqliteMemoryStore::open(&path).await.unwrap();
        assert_eq!(reopened.len(), 200);
        for id in &written {
            assert!(reopened.index().contains(id), "{id} lost");
        }
        for i in (1..200).step_by(2) {
            let session = format!("session-{i}");
            assert!(
                reopened.load_working(&session).await.unwrap().is_some(),
                "{session}"
            );
        }
    }

    #[test]
    fn damaged_rows_are_skipped_and_counted_and_the_rest_loads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(MEMORY_DB_FILE);
        drop(SqliteMemoryStore::open_blocking(&path).unwrap());
        let conn = Connection::open(&path).unwrap();
        let insert = |id: &str, layer: &str, metadata: &str, vector: &[u8]| {
            conn.execute(
                "INSERT INTO ltm_entries (id, user_id, agent_id, layer, kind, source, text, metadata, \
                 created_at, rehearsal, embedding, embedder) VALUES (?1, 'u', 'main', ?2, 'fact', 'remember', \
                 'text', ?3, 5, 2, ?4, 'e')",
                params![id, layer, metadata, vector],
            )
            .unwrap();
        };
        insert("good", "semantic", r#"{"key": "v"}"#, &1.0f32.to_le_bytes());
        insert("bad-layer", "working", "null", &1.0f32.to_le_bytes());
        insert("bad-json", "semantic", "{not json", &1.0f32.to_le_bytes());
        insert("bad-vector", "semantic", "null", &[1, 2, 3, 4, 5]);
        drop(conn);
        let store = SqliteMemoryStore::open_blocking(&path).unwrap();
        let report = store.open_report();
        assert_eq!((report.records, report.skipped), (1, 3), "{report:?}");
        let good = store.index().get("good").unwrap();
        assert_eq!(good.metadata, serde_json::json!({"key": "v"}));
        assert_eq!((good.embedding, good.rehearsal), (vec![1.0], 2));
    }
}
