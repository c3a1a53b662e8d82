//! Opening the file: the connection's settings, the header check that
//! refuses another program's file or a newer schema, and the migration.

use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};
use std::path::Path;
use std::time::Duration;

use super::{SQLITE_SCHEMA_VERSION, sqlite_error};
use crate::error::MemoryError;

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

/// Opens `path`, sets the connection up and brings the schema up to date.
pub(super) fn connect(path: &Path) -> Result<Connection, MemoryError> {
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
