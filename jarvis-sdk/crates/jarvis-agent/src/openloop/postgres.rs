//! [`PostgresOpenLoopStore`] (feature `postgres`): open loops in the table
//! `jarvis_open_loops`, beside the sessions of `JARVIS_STORE__BACKEND=postgres`.
//!
//! The schema is created idempotently (`CREATE TABLE IF NOT EXISTS`, `ADD
//! COLUMN IF NOT EXISTS`) under an advisory lock, so several processes may
//! start at once. A close is one `UPDATE … WHERE id AND session_id AND open`,
//! so only the session that opened a loop can close it, also when two
//! processes race.

use async_trait::async_trait;
use deadpool_postgres::Pool;
use std::sync::Arc;
use std::time::SystemTime;
use tokio_postgres::Row;

use super::{LoopError, LoopFilter, LoopKind, OpenLoop, OpenLoopStore};
use jarvis_common::Timestamp;
use jarvis_common::pg::{BoxError, PgSetupError, build_pool, connection, migrate_locked};

/// Key of the advisory lock the migrations hold (`jarvis` in ASCII, then 3).
const MIGRATION_LOCK: i64 = 0x6a61_7276_6973_0003;

const MIGRATIONS: &str = r#"
CREATE TABLE IF NOT EXISTS jarvis_open_loops (
    id TEXT PRIMARY KEY
);
ALTER TABLE jarvis_open_loops ADD COLUMN IF NOT EXISTS session_id TEXT NOT NULL DEFAULT '';
ALTER TABLE jarvis_open_loops ADD COLUMN IF NOT EXISTS agent_id TEXT NOT NULL DEFAULT 'main';
ALTER TABLE jarvis_open_loops ADD COLUMN IF NOT EXISTS text TEXT NOT NULL DEFAULT '';
ALTER TABLE jarvis_open_loops ADD COLUMN IF NOT EXISTS kind TEXT NOT NULL DEFAULT 'request';
ALTER TABLE jarvis_open_loops ADD COLUMN IF NOT EXISTS due TIMESTAMPTZ;
ALTER TABLE jarvis_open_loops ADD COLUMN IF NOT EXISTS condition TEXT;
ALTER TABLE jarvis_open_loops ADD COLUMN IF NOT EXISTS created_at TIMESTAMPTZ NOT NULL DEFAULT now();
ALTER TABLE jarvis_open_loops ADD COLUMN IF NOT EXISTS closed_at TIMESTAMPTZ;
ALTER TABLE jarvis_open_loops ADD COLUMN IF NOT EXISTS reminded_at TIMESTAMPTZ;
CREATE INDEX IF NOT EXISTS jarvis_open_loops_open ON jarvis_open_loops (session_id) WHERE closed_at IS NULL;
"#;

const COLUMNS: &str =
    "id, session_id, agent_id, text, kind, due, condition, created_at, closed_at, reminded_at";

/// Open loops in Postgres; see the module docs. Cheap to clone.
#[derive(Clone)]
pub struct PostgresOpenLoopStore {
    pool: Pool,
    target: Arc<str>,
}

impl std::fmt::Debug for PostgresOpenLoopStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresOpenLoopStore")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

fn setup_error(e: PgSetupError) -> LoopError {
    match e {
        PgSetupError::Unreachable { target, source } => LoopError::Unreachable { target, source },
        PgSetupError::Other { op, source } => LoopError::Database { op, source },
    }
}

fn db(op: &'static str) -> impl FnOnce(tokio_postgres::Error) -> LoopError {
    move |e| LoopError::Database {
        op,
        source: Box::new(e) as BoxError,
    }
}

fn kind_name(kind: LoopKind) -> &'static str {
    match kind {
        LoopKind::Promise => "promise",
        LoopKind::Request => "request",
    }
}

fn from_row(row: &Row) -> Result<OpenLoop, tokio_postgres::Error> {
    let time = |t: SystemTime| Timestamp::from_system_time(t);
    Ok(OpenLoop {
        id: row.try_get(0)?,
        session_id: row.try_get(1)?,
        agent_id: row.try_get(2)?,
        text: row.try_get(3)?,
        kind: if row.try_get::<_, String>(4)? == "promise" {
            LoopKind::Promise
        } else {
            LoopKind::Request
        },
        due: row.try_get::<_, Option<SystemTime>>(5)?.map(time),
        condition: row.try_get(6)?,
        created_at: time(row.try_get(7)?),
        closed_at: row.try_get::<_, Option<SystemTime>>(8)?.map(time),
        reminded_at: row.try_get::<_, Option<SystemTime>>(9)?.map(time),
    })
}

impl PostgresOpenLoopStore {
    /// Connects to `url` and brings the schema up to date.
    pub async fn connect(url: &str) -> Result<Self, LoopError> {
        let (pool, target) = build_pool(url, 4).map_err(setup_error)?;
        let store = Self { pool, target };
        store.migrate().await?;
        Ok(store)
    }

    /// Brings the schema up to date. Idempotent, and safe when several
    /// processes run it at once.
    pub async fn migrate(&self) -> Result<(), LoopError> {
        let mut client = self.client().await?;
        migrate_locked(&mut client, MIGRATION_LOCK, MIGRATIONS)
            .await
            .map_err(setup_error)
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, LoopError> {
        connection(&self.pool, &self.target).await.map_err(setup_error)
    }
}

#[async_trait]
impl OpenLoopStore for PostgresOpenLoopStore {
    async fn open(&self, l: OpenLoop) -> Result<(), LoopError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&format!(
                "INSERT INTO jarvis_open_loops ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
                 ON CONFLICT (id) DO NOTHING"
            ))
            .await
            .map_err(db("prepare an insert"))?;
        client
            .execute(
                &stmt,
                &[
                    &l.id,
                    &l.session_id,
                    &l.agent_id,
                    &l.text,
                    &kind_name(l.kind),
                    &l.due.map(Timestamp::to_system_time),
                    &l.condition,
                    &l.created_at.to_system_time(),
                    &l.closed_at.map(Timestamp::to_system_time),
                    &l.reminded_at.map(Timestamp::to_system_time),
                ],
            )
            .await
            .map_err(db("record an open loop"))?;
        Ok(())
    }

    async fn close(&self, id: &str, session_id: &str, at: Timestamp) -> Result<bool, LoopError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "UPDATE jarvis_open_loops SET closed_at = $3 \
                 WHERE id = $1 AND session_id = $2 AND closed_at IS NULL",
            )
            .await
            .map_err(db("prepare a close"))?;
        let n = client
            .execute(&stmt, &[&id, &session_id, &at.to_system_time()])
            .await
            .map_err(db("close an open loop"))?;
        Ok(n == 1)
    }

    async fn list(&self, filter: &LoopFilter) -> Result<Vec<OpenLoop>, LoopError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM jarvis_open_loops \
                 WHERE ($1::TEXT IS NULL OR session_id = $1) \
                   AND ($2::TEXT IS NULL OR agent_id = $2) \
                   AND (NOT $3 OR closed_at IS NULL) \
                 ORDER BY created_at, id"
            ))
            .await
            .map_err(db("prepare a listing"))?;
        let rows = client
            .query(&stmt, &[&filter.session_id, &filter.agent_id, &filter.open_only])
            .await
            .map_err(db("list open loops"))?;
        rows.iter()
            .map(from_row)
            .collect::<Result<_, _>>()
            .map_err(db("read an open-loop row"))
    }

    async fn mark_reminded(&self, id: &str, at: Timestamp) -> Result<bool, LoopError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "UPDATE jarvis_open_loops SET reminded_at = $2 WHERE id = $1 AND reminded_at IS NULL",
            )
            .await
            .map_err(db("prepare a reminder mark"))?;
        let n = client
            .execute(&stmt, &[&id, &at.to_system_time()])
            .await
            .map_err(db("mark a loop reminded"))?;
        Ok(n == 1)
    }
}
