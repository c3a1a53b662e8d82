//! The outbox of a deployment on Postgres (feature `postgres`): the table
//! `jarvis_outbox`, one row per message id, shared by every node.
//!
//! A node queues a message with one statement that inserts the row only
//! while fewer than the capacity wait (a message delivered before and
//! queued again waits again; one that waits already is left alone). Every
//! node's reflection daemon reads the waiting rows; only the node that owns
//! (or can claim) the message's session records it, and marks the row
//! delivered. Delivered rows stay until [`Outbox::compact`](super::Outbox::compact)
//! so a producer starting again sees what it queued before a crash, as with
//! the file.

use deadpool_postgres::Pool;
use std::sync::Arc;
use tokio_postgres::types::Json;

use super::{OutboxError, OutboxItem};
use jarvis_common::pg::{BoxError, PgSetupError, build_pool, connection, migrate_locked};

/// Key of the advisory lock the migrations hold (`jarvis` in ASCII, then 6).
const MIGRATION_LOCK: i64 = 0x6a61_7276_6973_0006;

const MIGRATIONS: &str = r#"
CREATE TABLE IF NOT EXISTS jarvis_outbox (
    message_id TEXT PRIMARY KEY,
    seq BIGINT GENERATED ALWAYS AS IDENTITY,
    session_id TEXT NOT NULL,
    item JSONB NOT NULL,
    delivered BOOLEAN NOT NULL DEFAULT false
);
CREATE INDEX IF NOT EXISTS jarvis_outbox_waiting ON jarvis_outbox (seq) WHERE NOT delivered;
"#;

/// Inserts the message while fewer than `$4` wait; a delivered row of the
/// same id waits again. No row back: it waits already, or the outbox is full.
const PUT: &str = "WITH room AS (SELECT count(*) < $4 AS ok FROM jarvis_outbox WHERE NOT delivered) \
     INSERT INTO jarvis_outbox (message_id, session_id, item) SELECT $1, $2, $3 FROM room WHERE ok \
     ON CONFLICT (message_id) DO UPDATE SET item = EXCLUDED.item, delivered = false \
     WHERE jarvis_outbox.delivered RETURNING 1";

/// The messages of every node of a deployment.
pub(super) struct PostgresOutbox {
    pool: Pool,
    target: Arc<str>,
}

impl std::fmt::Debug for PostgresOutbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresOutbox")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

fn setup_error(e: PgSetupError) -> OutboxError {
    match e {
        PgSetupError::Unreachable { target, source } => OutboxError::Database {
            op: "reach the database",
            source: format!("{target}: {source}").into(),
        },
        PgSetupError::Other { op, source } => OutboxError::Database { op, source },
    }
}

fn db(op: &'static str) -> impl FnOnce(tokio_postgres::Error) -> OutboxError {
    move |e| OutboxError::Database {
        op,
        source: Box::new(e) as BoxError,
    }
}

/// The items of `rows` (`item` first); a damaged row is skipped with a
/// warning, like a damaged line of the file.
fn items(rows: &[tokio_postgres::Row]) -> Vec<OutboxItem> {
    rows.iter()
        .filter_map(|row| match row.try_get::<_, Json<OutboxItem>>(0) {
            Ok(Json(item)) => Some(item),
            Err(error) => {
                tracing::warn!(%error, "outbox: a row is not a message; it is skipped");
                None
            }
        })
        .collect()
}

/// What [`PostgresOutbox::put`] did.
pub(super) enum Put {
    /// Queued (new, or delivered before and waiting again).
    Queued,
    /// A message with its id waits already.
    Waiting,
    /// The outbox is full.
    Full,
}

impl PostgresOutbox {
    /// Connects to `url` and brings the schema up to date.
    pub(super) async fn connect(url: &str) -> Result<Self, OutboxError> {
        let (pool, target) = build_pool(url, 2).map_err(setup_error)?;
        let outbox = Self { pool, target };
        let mut client = outbox.client().await?;
        migrate_locked(&mut client, MIGRATION_LOCK, MIGRATIONS)
            .await
            .map_err(setup_error)?;
        Ok(outbox)
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, OutboxError> {
        connection(&self.pool, &self.target).await.map_err(setup_error)
    }

    /// Queues `item` unless it waits already or `capacity` messages wait.
    pub(super) async fn put(&self, item: &OutboxItem, capacity: usize) -> Result<Put, OutboxError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(PUT)
            .await
            .map_err(db("prepare queuing a message"))?;
        let capacity = i64::try_from(capacity).unwrap_or(i64::MAX);
        let queued = client
            .query_opt(
                &stmt,
                &[&item.message_id, &item.session_id, &Json(item), &capacity],
            )
            .await
            .map_err(db("queue a message"))?;
        if queued.is_some() {
            return Ok(Put::Queued);
        }
        let waiting = client
            .query_opt(
                "SELECT 1 FROM jarvis_outbox WHERE message_id = $1 AND NOT delivered",
                &[&item.message_id],
            )
            .await
            .map_err(db("look for a queued message"))?;
        Ok(if waiting.is_some() {
            Put::Waiting
        } else {
            Put::Full
        })
    }

    /// The waiting messages, oldest first (at most `limit`).
    pub(super) async fn pending(&self, limit: usize) -> Result<Vec<OutboxItem>, OutboxError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached("SELECT item FROM jarvis_outbox WHERE NOT delivered ORDER BY seq LIMIT $1")
            .await
            .map_err(db("prepare reading the outbox"))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = client
            .query(&stmt, &[&limit])
            .await
            .map_err(db("read the outbox"))?;
        Ok(items(&rows))
    }

    /// Every message still in the table, delivered or not, oldest first.
    pub(super) async fn logged(&self) -> Result<Vec<OutboxItem>, OutboxError> {
        let client = self.client().await?;
        let rows = client
            .query("SELECT item FROM jarvis_outbox ORDER BY seq", &[])
            .await
            .map_err(db("read the outbox"))?;
        Ok(items(&rows))
    }

    /// Marks `message_id` delivered; answers whether it waited.
    pub(super) async fn done(&self, message_id: &str) -> Result<bool, OutboxError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "UPDATE jarvis_outbox SET delivered = true WHERE message_id = $1 AND NOT delivered",
            )
            .await
            .map_err(db("prepare marking a message delivered"))?;
        let changed = client
            .execute(&stmt, &[&message_id])
            .await
            .map_err(db("mark a message delivered"))?;
        Ok(changed > 0)
    }

    /// Removes the delivered rows.
    pub(super) async fn compact(&self) -> Result<(), OutboxError> {
        let client = self.client().await?;
        client
            .execute("DELETE FROM jarvis_outbox WHERE delivered", &[])
            .await
            .map_err(db("compact the outbox"))?;
        Ok(())
    }
}
