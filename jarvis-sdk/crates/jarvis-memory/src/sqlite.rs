//! [`SqliteMemoryStore`] (feature `sqlite`, on by default): long-term and
//! working memory in one SQLite file, `$JARVIS_HOME/memory.sqlite3`, so
//! memory outlives the process without a database server.
//!
//! The rules are documented on [`SqliteMemoryStore`].

use async_trait::async_trait;
use rusqlite::{
    Connection, ErrorCode, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params,
};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::ann::AnnOptions;
use super::error::MemoryError;
use super::graph_file::graphs_dir;
use super::index::{Index, IndexLoader, LoadBatch, LoadKey, LoadedRow};
use super::record::{Layer, MemoryFilter, MemoryRecord, SearchHit, SearchQuery};
use super::store::MemoryStore;
use super::working::WorkingMemory;
use jarvis_common::Timestamp;

/// The file name under `JARVIS_HOME`.
pub const MEMORY_DB_FILE: &str = "memory.sqlite3";

/// The schema version this code writes and reads (`PRAGMA user_version`).
pub const SQLITE_SCHEMA_VERSION: i64 = 1;

/// `PRAGMA application_id` of a memory database (`JRVM` in ASCII), so a
/// SQLite file of another program is not taken for one.
const APPLICATION_ID: i64 = 0x4a52_564d;

/// How long opening waits for another connection's lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(1);

/// Schema version 1. Every statement is idempotent, so running it again
/// (two processes opening a new file at once) changes nothing.
const SCHEMA_V1: &str = "
CREATE TABLE IF NOT EXISTS ltm_entries (
    id TEXT NOT NULL UNIQUE,
    user_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    layer TEXT NOT NULL,
    kind TEXT NOT NULL,
    source TEXT NOT NULL,
    text TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    created_at INTEGER NOT NULL,
    rehearsal INTEGER NOT NULL DEFAULT 0,
    embedding BLOB,
    embedder TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS working_memory (
    session_id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    body TEXT NOT NULL,
    updated_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))
);
";

const SELECT_ALL: &str = "SELECT id, user_id, agent_id, layer, kind, source, text, metadata, created_at, \
                          rehearsal, embedding, embedder FROM ltm_entries";

const UPSERT: &str = "INSERT INTO ltm_entries \
      (id, user_id, agent_id, layer, kind, source, text, metadata, created_at, rehearsal, embedding, embedder) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) \
    ON CONFLICT (id) DO UPDATE SET user_id = excluded.user_id, agent_id = excluded.agent_id, \
      layer = excluded.layer, kind = excluded.kind, source = excluded.source, text = excluded.text, \
      metadata = excluded.metadata, created_at = excluded.created_at, rehearsal = excluded.rehearsal, \
      embedding = excluded.embedding, embedder = excluded.embedder";

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

/// The writes waiting to be committed, and whether a committer is running.
#[derive(Default)]
struct Queue {
    jobs: Vec<Box<dyn Job>>,
    committing: bool,
}

/// One caller's write, run inside the committer's batch. A job dropped
/// without [`finish`](Job::finish) (the committer panicked) drops its reply,
/// and the caller gets an error.
trait Job: Send {
    /// Writes (inside a savepoint of the batch's transaction).
    fn write(&mut self, tx: &Transaction<'_>) -> rusqlite::Result<()>;
    /// Tells the caller: `Ok` once the batch is committed, with the index
    /// to apply the write to; `Err` when the write or the batch failed.
    fn finish(self: Box<Self>, outcome: Result<&mut Index, &rusqlite::Error>);
}

/// A [`Job`] of [`SqliteMemoryStore::write`]: `write`'s output is kept until
/// the commit, then handed to `apply` and the result sent back.
struct WriteJob<T, R, W, A> {
    op: &'static str,
    path: PathBuf,
    write: Option<W>,
    written: Option<T>,
    apply: A,
    reply: tokio::sync::oneshot::Sender<Result<R, MemoryError>>,
}

impl<T, R, W, A> Job for WriteJob<T, R, W, A>
where
    T: Send,
    R: Send,
    W: FnOnce(&Transaction<'_>) -> rusqlite::Result<T> + Send,
    A: FnOnce(&mut Index, T) -> R + Send,
{
    fn write(&mut self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
        let write = self.write.take().expect("a job is written once");
        self.written = Some(write(tx)?);
        Ok(())
    }

    fn finish(self: Box<Self>, outcome: Result<&mut Index, &rusqlite::Error>) {
        let this = *self;
        let result = match (outcome, this.written) {
            (Ok(index), Some(written)) => Ok((this.apply)(index, written)),
            (Err(e), _) => Err(shared_sqlite_error(this.op, &this.path, e)),
            (Ok(_), None) => Err(MemoryError::Sqlite {
                op: this.op,
                path: this.path,
                source: "the write was not run".into(),
            }),
        };
        // The caller may have stopped waiting; the write stands anyway.
        let _ = this.reply.send(result);
    }
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

/// `vector` as little-endian bytes (`None` for an empty one).
fn vector_bytes(vector: &[f32]) -> Option<Vec<u8>> {
    if vector.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(vector.len() * 4);
    for value in vector {
        out.extend_from_slice(&value.to_le_bytes());
    }
    Some(out)
}

/// Reads a row of [`SELECT_ALL`] into `batch` (its key into `keys` and,
/// when new, `batch.new_keys`); `Err` names what is wrong with the row,
/// which is then left out. Borrows what it can from the row: only the id,
/// the source, the text and non-null metadata are copied.
fn load_row(row: &rusqlite::Row<'_>, keys: &mut Vec<LoadKey>, batch: &mut LoadBatch) -> Result<(), String> {
    let text_at = |i: usize| -> Result<&str, String> {
        row.get_ref(i)
            .map_err(|e| e.to_string())?
            .as_str()
            .map_err(|e| format!("column {i}: {e}"))
    };
    let id = text_at(0)?;
    let layer_name = text_at(3)?;
    let layer =
        Layer::parse(layer_name).ok_or_else(|| format!("row {id} has unknown layer {layer_name:?}"))?;
    let metadata: Box<str> = match row
        .get_ref(7)
        .map_err(|e| e.to_string())?
        .as_str_or_null()
        .map_err(|e| e.to_string())?
    {
        None | Some("") | Some("null") => "null".into(),
        Some(text) => {
            serde_json::from_str::<serde::de::IgnoredAny>(text)
                .map_err(|e| format!("row {id} has damaged metadata: {e}"))?;
            text.into()
        }
    };
    let created_at: i64 = row.get(8).map_err(|e| e.to_string())?;
    let rehearsal: i64 = row.get(9).map_err(|e| e.to_string())?;
    let vector = row
        .get_ref(10)
        .map_err(|e| e.to_string())?
        .as_blob_or_null()
        .map_err(|e| e.to_string())?
        .unwrap_or_default();
    if !vector.len().is_multiple_of(4) {
        return Err(format!("row {id} has a damaged vector"));
    }
    let dims = vector.len() / 4;
    let embedder = if dims == 0 { "" } else { text_at(11)? };
    let (user, agent_id, kind) = (text_at(1)?, text_at(2)?, text_at(4)?);
    let (source, text) = (text_at(5)?, text_at(6)?);
    let same = |k: &LoadKey| {
        k.dims == dims
            && k.layer == layer
            && k.user == user
            && k.agent_id == agent_id
            && k.kind == kind
            && k.embedder == embedder
    };
    let key = match keys.iter().rposition(same) {
        Some(k) => k,
        None => {
            let key = LoadKey {
                user: user.to_owned(),
                agent_id: agent_id.to_owned(),
                layer,
                kind: kind.to_owned(),
                embedder: embedder.to_owned(),
                dims,
            };
            keys.push(key.clone());
            batch.new_keys.push(key);
            keys.len() - 1
        }
    };
    let start = batch.vectors.len();
    batch.vectors.extend(
        vector
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
    );
    batch.rows.push(LoadedRow {
        id: Arc::from(id),
        key,
        source: source.to_owned(),
        text: text.to_owned(),
        terms: super::lexical::terms(text),
        metadata,
        created_at: Timestamp::from_millis(created_at),
        rehearsal: u32::try_from(rehearsal.max(0)).unwrap_or(u32::MAX),
        vector: start,
    });
    Ok(())
}

fn upsert(tx: &Transaction<'_>, record: &MemoryRecord) -> rusqlite::Result<()> {
    let metadata = record.metadata.to_string();
    let rehearsal = i64::from(record.rehearsal);
    tx.prepare_cached(UPSERT)?.execute(params![
        record.id,
        record.user,
        record.agent_id,
        record.layer.as_str(),
        record.kind,
        record.source,
        record.text,
        metadata,
        record.created_at.as_millis(),
        rehearsal,
        vector_bytes(&record.embedding),
        record.embedder,
    ])?;
    Ok(())
}

/// Opens `path`, sets the connection up and brings the schema up to date.
fn connect(path: &Path) -> Result<Connection, MemoryError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| MemoryError::File {
            op: "create the directory of",
            path: path.to_owned(),
            source,
        })?;
    }
    let err = |op| move |e| sqlite_error(op, path, e);
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(err("open"))?;
    if conn.is_readonly(rusqlite::MAIN_DB).map_err(err("open"))? {
        return Err(MemoryError::Sqlite {
            op: "open for writing",
            path: path.to_owned(),
            source: "the file is read-only".into(),
        });
    }
    conn.busy_timeout(BUSY_TIMEOUT).map_err(err("open"))?;
    conn.set_prepared_statement_cache_capacity(32);
    // The exclusive lock is taken by the first read below and held until
    // the connection closes; the OS drops it if the process dies.
    conn.pragma_update(None, "locking_mode", "EXCLUSIVE")
        .map_err(err("set up"))?;
    let application_id: i64 = conn
        .pragma_query_value(None, "application_id", |r| r.get(0))
        .map_err(err("read the header of"))?;
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(err("read the schema version of"))?;
    check_header(path, application_id, version, &conn)?;
    let mode: String = conn
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .map_err(err("read the journal mode of"))?;
    if !mode.eq_ignore_ascii_case("wal") {
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(err("switch to the write-ahead log"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(MemoryError::Sqlite {
                op: "switch to the write-ahead log",
                path: path.to_owned(),
                source: format!("the journal mode stayed {mode}").into(),
            });
        }
    }
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(err("set up"))?;
    conn.pragma_update(None, "secure_delete", "ON")
        .map_err(err("set up"))?;
    if version < SQLITE_SCHEMA_VERSION {
        migrate(path, &conn)?;
    }
    Ok(conn)
}

/// Refuses another program's file and a newer schema.
fn check_header(
    path: &Path,
    application_id: i64,
    version: i64,
    conn: &Connection,
) -> Result<(), MemoryError> {
    if application_id != 0 && application_id != APPLICATION_ID {
        return Err(MemoryError::SqliteDamaged {
            path: path.to_owned(),
            reason: format!("application id {application_id:#x} is another program's"),
        });
    }
    if version > SQLITE_SCHEMA_VERSION {
        return Err(MemoryError::SchemaTooNew {
            path: path.to_owned(),
            found: version,
            supported: SQLITE_SCHEMA_VERSION,
        });
    }
    if application_id == 0 && version == 0 {
        // A new file, or a SQLite file of another program that never set
        // an id: only an empty one is taken.
        let tables: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE type = 'table' \
                 AND name NOT IN ('ltm_entries', 'working_memory')",
                [],
                |r| r.get(0),
            )
            .map_err(|e| sqlite_error("read the tables of", path, e))?;
        if tables > 0 {
            return Err(MemoryError::SqliteDamaged {
                path: path.to_owned(),
                reason: "it is another program's database (it has other tables)".into(),
            });
        }
    }
    Ok(())
}

/// Brings the schema up to date in one transaction.
fn migrate(path: &Path, conn: &Connection) -> Result<(), MemoryError> {
    let err = |e| sqlite_error("migrate", path, e);
    let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate).map_err(err)?;
    let version: i64 = tx
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(err)?;
    if version < 1 {
        tx.execute_batch(SCHEMA_V1).map_err(err)?;
    }
    tx.pragma_update(None, "application_id", APPLICATION_ID)
        .map_err(err)?;
    tx.pragma_update(None, "user_version", SQLITE_SCHEMA_VERSION)
        .map_err(err)?;
    tx.commit().map_err(err)
}

/// Records handed from the scan to the index builder at a time.
const LOAD_BATCH: usize = 512;

/// Bytes of the file mapped into memory while the index is rebuilt (reads
/// without a system call per page); unmapped again after the load.
const LOAD_MMAP_BYTES: i64 = 1 << 34;

/// Reads every record into a new index; answers it and the rows skipped.
///
/// Two threads share the work: this one steps through the table in one
/// sequential scan (the file mapped into memory) and decodes rows into
/// batches, a second one puts them into the index, so the two overlap.
fn load(path: &Path, conn: &Connection, ann: AnnOptions) -> Result<(Index, usize), MemoryError> {
    let err = |e| sqlite_error("read the memories of", path, e);
    let estimate: i64 = conn
        .query_row("SELECT coalesce(max(rowid), 0) FROM ltm_entries", [], |r| {
            r.get(0)
        })
        .map_err(err)?;
    conn.pragma_update(None, "mmap_size", LOAD_MMAP_BYTES)
        .map_err(err)?;
    let (batches, received) = std::sync::mpsc::sync_channel::<LoadBatch>(16);
    let graphs = graphs_dir(path);
    let loaded = std::thread::scope(|s| {
        let builder = s.spawn(move || {
            let mut loader =
                IndexLoader::with_capacity(usize::try_from(estimate).unwrap_or(0)).with_graphs(&graphs);
            for batch in received {
                loader.add(batch);
            }
            loader.finish(ann)
        });
        let started = Instant::now();
        let scanned = scan(path, conn, |batch| batches.send(batch).is_ok());
        let scan_took = started.elapsed();
        drop(batches);
        let joined = builder.join();
        tracing::debug!(
            scan_ms = scan_took.as_secs_f64() * 1e3,
            index_ms = started.elapsed().as_secs_f64() * 1e3,
            "memory store (sqlite): index rebuilt"
        );
        match joined {
            Ok(index) => scanned.map(|skipped| (index, skipped)),
            Err(_) => Err(MemoryError::Sqlite {
                op: "rebuild the index of",
                path: path.to_owned(),
                source: "the index builder failed".into(),
            }),
        }
    });
    conn.pragma_update(None, "mmap_size", 0).map_err(err)?;
    loaded
}

/// Steps through `ltm_entries` and hands the records to `deliver` in
/// batches (stopping when it answers false); answers the rows skipped.
fn scan(
    path: &Path,
    conn: &Connection,
    mut deliver: impl FnMut(LoadBatch) -> bool,
) -> Result<usize, MemoryError> {
    let err = |e| sqlite_error("read the memories of", path, e);
    let mut skipped = 0;
    let mut stmt = conn.prepare(SELECT_ALL).map_err(err)?;
    let mut rows = stmt.query([]).map_err(err)?;
    let mut keys = Vec::new();
    let mut batch = LoadBatch::default();
    while let Some(row) = rows.next().map_err(err)? {
        if let Err(reason) = load_row(row, &mut keys, &mut batch) {
            skipped += 1;
            tracing::warn!(path = %path.display(), "memory store (sqlite): skipped a damaged row: {reason}");
        }
        if batch.rows.len() == LOAD_BATCH && !deliver(std::mem::take(&mut batch)) {
            return Ok(skipped);
        }
    }
    if !batch.rows.is_empty() || !batch.new_keys.is_empty() {
        deliver(batch);
    }
    Ok(skipped)
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

    /// Queues `write` for the committer, which runs it in a savepoint of
    /// its next transaction and, once that has committed, `apply` to the
    /// index; answers what `apply` answered. Starts the committer when none
    /// is running.
    async fn write<T, R, W, A>(&self, op: &'static str, write: W, apply: A) -> Result<R, MemoryError>
    where
        T: Send + 'static,
        R: Send + 'static,
        W: FnOnce(&Transaction<'_>) -> rusqlite::Result<T> + Send + 'static,
        A: FnOnce(&mut Index, T) -> R + Send + 'static,
    {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job = Box::new(WriteJob {
            op,
            path: self.inner.path.clone(),
            write: Some(write),
            written: None,
            apply,
            reply,
        });
        let start = {
            let mut queue = self.inner.queue();
            queue.jobs.push(job);
            !std::mem::replace(&mut queue.committing, true)
        };
        if start {
            let committer = Committer {
                inner: self.inner.clone(),
                done: false,
            };
            tokio::task::spawn_blocking(move || committer.run());
        }
        answer.await.unwrap_or_else(|_| {
            Err(MemoryError::Sqlite {
                op,
                path: self.inner.path.clone(),
                source: "the committer stopped before committing the write".into(),
            })
        })
    }
}

/// The committer: commits queued writes in batches until the queue is
/// empty. Dropped without finishing (it panicked, or the runtime shut down
/// before it ran), it drops the writes still queued, whose callers get an
/// error, and lets the next write start a new one.
struct Committer {
    inner: Arc<Inner>,
    done: bool,
}

impl Committer {
    fn run(mut self) {
        loop {
            let jobs = {
                let mut queue = self.inner.queue();
                if queue.jobs.is_empty() {
                    queue.committing = false;
                    break;
                }
                std::mem::take(&mut queue.jobs)
            };
            self.inner.commit_batch(jobs);
        }
        self.done = true;
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let dropped = {
            let mut queue = self.inner.queue();
            queue.committing = false;
            std::mem::take(&mut queue.jobs)
        };
        tracing::error!(
            path = %self.inner.path.display(),
            writes = dropped.len(),
            "memory store (sqlite): the committer stopped; its writes failed"
        );
    }
}

/// Adds the rehearsals recall counted to their records.
fn write_rehearsals(conn: &Connection, rehearsals: &HashMap<String, u32>) -> rusqlite::Result<()> {
    if rehearsals.is_empty() {
        return Ok(());
    }
    let mut stmt = conn.prepare_cached("UPDATE ltm_entries SET rehearsal = rehearsal + ?2 WHERE id = ?1")?;
    for (id, n) in rehearsals {
        stmt.execute(rusqlite::params![id, n])?;
    }
    Ok(())
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
    /// Commits `jobs` (and the rehearsals waiting) in one immediate
    /// transaction, each job in a savepoint; then, under the connection's
    /// lock so the index changes in commit order, answers each job: applied
    /// to the index when its write stood, its own error when it was rolled
    /// back, the batch's error (and the rehearsals kept for the next batch)
    /// when the transaction failed.
    fn commit_batch(&self, mut jobs: Vec<Box<dyn Job>>) {
        let mut conn = self.conn();
        let rehearsals = std::mem::take(&mut *self.rehearsals());
        let committed = (|| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            write_rehearsals(&tx, &rehearsals)?;
            let mut failed = Vec::with_capacity(jobs.len());
            for job in &mut jobs {
                tx.execute_batch("SAVEPOINT job")?;
                match job.write(&tx) {
                    Ok(()) => {
                        tx.execute_batch("RELEASE job")?;
                        failed.push(None);
                    }
                    Err(e) => {
                        tx.execute_batch("ROLLBACK TO job; RELEASE job")?;
                        failed.push(Some(e));
                    }
                }
            }
            tx.commit()?;
            Ok::<_, rusqlite::Error>(failed)
        })();
        match committed {
            Ok(failed) => {
                let mut index = self.index();
                for (job, failure) in jobs.into_iter().zip(failed) {
                    match failure {
                        None => job.finish(Ok(&mut index)),
                        Some(e) => job.finish(Err(&e)),
                    }
                }
            }
            Err(e) => {
                // Not written: they go with the next batch.
                let mut pending = self.rehearsals();
                for (id, n) in rehearsals {
                    *pending.entry(id).or_insert(0) += n;
                }
                drop(pending);
                for job in jobs {
                    job.finish(Err(&e));
                }
            }
        }
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

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

/// A working memory and its JSON body, ready to write.
struct SavedWorking {
    memory: WorkingMemory,
    body: String,
}

impl SqliteMemoryStore {
    fn encode_working(&self, memory: &WorkingMemory) -> Result<SavedWorking, MemoryError> {
        let body = serde_json::to_string(memory).map_err(|e| MemoryError::Sqlite {
            op: "encode working memory for",
            path: self.inner.path.clone(),
            source: Box::new(e),
        })?;
        Ok(SavedWorking {
            memory: memory.clone(),
            body,
        })
    }
}

fn save_working(tx: &Transaction<'_>, saved: &SavedWorking) -> rusqlite::Result<()> {
    let memory = &saved.memory;
    tx.prepare_cached(
        "INSERT INTO working_memory (session_id, user_id, agent_id, body) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT (session_id) DO UPDATE SET user_id = excluded.user_id, \
         agent_id = excluded.agent_id, body = excluded.body, updated_at = excluded.updated_at",
    )?
    .execute(params![
        memory.session_id,
        memory.user,
        memory.agent_id,
        saved.body
    ])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
