//! The schema of the Postgres store and its backfill, brought up to date
//! when a store connects ([`PostgresMemoryStore::migrate`]).

use super::{PostgresMemoryStore, WRITE_LOCK, db};
use crate::error::MemoryError;
use crate::postgres_notices::TRIGGERS;
use crate::rules::sql_case;

/// Key of the advisory lock migrations hold (`jarvis` in ASCII, then 2).
const MIGRATION_LOCK: i64 = 0x6a61_7276_6973_0002;

/// The schema and the backfill, in order.
fn migrations() -> String {
    format!(
        r#"
CREATE TABLE IF NOT EXISTS jarvis_ltm_entries (
    id TEXT PRIMARY KEY
);
ALTER TABLE jarvis_ltm_entries ADD COLUMN IF NOT EXISTS user_id TEXT NOT NULL DEFAULT 'default';
ALTER TABLE jarvis_ltm_entries ADD COLUMN IF NOT EXISTS agent_id TEXT;
ALTER TABLE jarvis_ltm_entries ADD COLUMN IF NOT EXISTS layer TEXT;
ALTER TABLE jarvis_ltm_entries ADD COLUMN IF NOT EXISTS kind TEXT;
ALTER TABLE jarvis_ltm_entries ADD COLUMN IF NOT EXISTS source TEXT NOT NULL DEFAULT '';
ALTER TABLE jarvis_ltm_entries ADD COLUMN IF NOT EXISTS text TEXT NOT NULL DEFAULT '';
ALTER TABLE jarvis_ltm_entries ADD COLUMN IF NOT EXISTS metadata JSONB NOT NULL DEFAULT '{{}}'::jsonb;
ALTER TABLE jarvis_ltm_entries ADD COLUMN IF NOT EXISTS created_at TIMESTAMPTZ NOT NULL DEFAULT now();
ALTER TABLE jarvis_ltm_entries ADD COLUMN IF NOT EXISTS rehearsal INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jarvis_ltm_entries ADD COLUMN IF NOT EXISTS embedding_f32 REAL[];
ALTER TABLE jarvis_ltm_entries ADD COLUMN IF NOT EXISTS embedder TEXT NOT NULL DEFAULT '';
CREATE SEQUENCE IF NOT EXISTS jarvis_ltm_entries_seq;
ALTER TABLE jarvis_ltm_entries ADD COLUMN IF NOT EXISTS seq BIGINT;
ALTER TABLE jarvis_ltm_entries ADD COLUMN IF NOT EXISTS written_seq BIGINT;
UPDATE jarvis_ltm_entries SET agent_id = 'main' WHERE agent_id IS NULL;
UPDATE jarvis_ltm_entries SET layer = {layer} WHERE layer IS NULL;
UPDATE jarvis_ltm_entries SET kind = {kind} WHERE kind IS NULL;
UPDATE jarvis_ltm_entries AS t SET seq = o.n FROM (
    SELECT id, nextval('jarvis_ltm_entries_seq') AS n FROM (
        SELECT id FROM jarvis_ltm_entries WHERE seq IS NULL ORDER BY created_at, id
    ) AS ordered
) AS o WHERE t.id = o.id;
ALTER TABLE jarvis_ltm_entries
    ALTER COLUMN agent_id SET DEFAULT 'main',
    ALTER COLUMN agent_id SET NOT NULL,
    ALTER COLUMN layer SET NOT NULL,
    ALTER COLUMN kind SET NOT NULL,
    ALTER COLUMN seq SET DEFAULT nextval('jarvis_ltm_entries_seq'),
    ALTER COLUMN seq SET NOT NULL;
ALTER SEQUENCE jarvis_ltm_entries_seq OWNED BY jarvis_ltm_entries.seq;
CREATE INDEX IF NOT EXISTS jarvis_ltm_entries_by_seq ON jarvis_ltm_entries (seq);
CREATE INDEX IF NOT EXISTS jarvis_ltm_entries_by_scope ON jarvis_ltm_entries (user_id, layer, agent_id, kind);
CREATE TABLE IF NOT EXISTS jarvis_ltm_deleted (
    id TEXT PRIMARY KEY,
    seq BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS jarvis_ltm_deleted_by_seq ON jarvis_ltm_deleted (seq);
CREATE TABLE IF NOT EXISTS jarvis_working_memory (
    session_id TEXT PRIMARY KEY
);
ALTER TABLE jarvis_working_memory ADD COLUMN IF NOT EXISTS user_id TEXT NOT NULL DEFAULT 'default';
ALTER TABLE jarvis_working_memory ADD COLUMN IF NOT EXISTS agent_id TEXT NOT NULL DEFAULT 'main';
ALTER TABLE jarvis_working_memory ADD COLUMN IF NOT EXISTS body JSONB NOT NULL DEFAULT '{{}}'::jsonb;
ALTER TABLE jarvis_working_memory ADD COLUMN IF NOT EXISTS updated_at TIMESTAMPTZ NOT NULL DEFAULT now();
"#,
        layer = sql_case("layer"),
        kind = sql_case("kind"),
    )
}

impl PostgresMemoryStore {
    /// Brings the schema up to date and backfills legacy rows. Idempotent,
    /// and safe when several processes run it at once;
    /// [`connect`](Self::connect) runs it.
    pub async fn migrate(&self) -> Result<(), MemoryError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db("start the migration"))?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await
            .map_err(db("lock the schema for migration"))?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&WRITE_LOCK])
            .await
            .map_err(db("lock writes for the backfill"))?;
        tx.batch_execute(&migrations())
            .await
            .map_err(db("migrate the memory tables"))?;
        tx.batch_execute(TRIGGERS)
            .await
            .map_err(db("create the memory tables' triggers"))?;
        tx.commit().await.map_err(db("commit the migration"))
    }
}
