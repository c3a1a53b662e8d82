//! Between the database and the store: sessions and entries read from
//! rows, the driver's errors as [`SessionError`], and times cut to the
//! microsecond Postgres keeps.

use std::time::SystemTime;
use tokio_postgres::Row;
use tokio_postgres::types::Json;

use crate::session::error::BoxError;
use crate::session::{
    ENTRY_SCHEMA_VERSION, EntryBody, SessionEntry, SessionError, SessionId, SessionKind, SessionMeta,
};
use jarvis_common::Timestamp;
use jarvis_common::pg::PgSetupError;

/// `t` without its nanoseconds past the microsecond.
pub(super) fn whole_micros(t: SystemTime) -> SystemTime {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => SystemTime::UNIX_EPOCH + std::time::Duration::from_micros(d.as_micros() as u64),
        Err(_) => t,
    }
}

pub(super) fn setup_error(e: PgSetupError) -> SessionError {
    match e {
        PgSetupError::Unreachable { target, source } => SessionError::Unreachable { target, source },
        PgSetupError::Other { op, source } => SessionError::Database { op, source },
    }
}

pub(super) fn db(op: &'static str) -> impl FnOnce(tokio_postgres::Error) -> SessionError {
    move |e| SessionError::Database {
        op,
        source: Box::new(e) as BoxError,
    }
}

pub(super) fn meta_from_row(row: &Row) -> Result<SessionMeta, SessionError> {
    let get_err = |e: tokio_postgres::Error| SessionError::Database {
        op: "read a session row",
        source: Box::new(e),
    };
    let id: String = row.try_get(0).map_err(get_err)?;
    let id = SessionId::new(id)?;
    let kind: String = row.try_get(6).map_err(get_err)?;
    let parent: Option<String> = row.try_get(5).map_err(get_err)?;
    let parent_id = match parent.map(SessionId::new).transpose() {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(session_id = %id, "session store (postgres): ignored the parent of session {id}: {e}");
            None
        }
    };
    Ok(SessionMeta {
        agent_id: row.try_get(1).map_err(get_err)?,
        title: row.try_get(2).map_err(get_err)?,
        created_at: Timestamp::from_system_time(row.try_get::<_, SystemTime>(3).map_err(get_err)?),
        updated_at: Timestamp::from_system_time(row.try_get::<_, SystemTime>(4).map_err(get_err)?),
        parent_id,
        kind: SessionKind::parse(&kind).unwrap_or_else(|| {
            tracing::warn!(session_id = %id, "session store (postgres): session {id} has unknown kind {kind:?}; read as user");
            SessionKind::User
        }),
        caller: row.try_get(7).map_err(get_err)?,
        callee: row.try_get(8).map_err(get_err)?,
        sub: match row.try_get::<_, Option<String>>(9).map_err(get_err)? {
            None => None,
            Some(text) => match serde_json::from_str(&text) {
                Ok(origin) => Some(origin),
                Err(e) => {
                    tracing::warn!(session_id = %id, "session store (postgres): ignored the sub-agent origin of session {id}: {e}");
                    None
                }
            },
        },
        id,
    })
}

/// The entries of `rows` (`seq, ts, v, body`); damaged rows are skipped with
/// a warning.
pub(super) fn entries_from_rows(id: &SessionId, rows: &[Row]) -> Vec<SessionEntry> {
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let entry = (|| -> Result<SessionEntry, tokio_postgres::Error> {
            let seq: i64 = row.try_get(0)?;
            let ts: SystemTime = row.try_get(1)?;
            let v: i32 = row.try_get(2)?;
            let Json(body): Json<EntryBody> = row.try_get(3)?;
            Ok(SessionEntry {
                v: u32::try_from(v).unwrap_or(0),
                seq: u64::try_from(seq).unwrap_or(0),
                ts: Timestamp::from_system_time(ts),
                body,
            })
        })();
        match entry {
            Ok(e) if e.v == ENTRY_SCHEMA_VERSION => out.push(e),
            Ok(e) => tracing::warn!(
                session_id = %id,
                "session store (postgres): skipped entry {} of session {id}: unknown schema version {}",
                e.seq,
                e.v
            ),
            Err(e) => tracing::warn!(
                session_id = %id,
                "session store (postgres): skipped a damaged entry of session {id}: {e}"
            ),
        }
    }
    out
}
