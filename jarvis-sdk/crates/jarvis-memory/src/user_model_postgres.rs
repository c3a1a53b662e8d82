//! [`PostgresUserModel`] (feature `postgres`): the user model in the table
//! `jarvis_user_model`, one row per deployment, shared by every node.
//!
//! The row holds the same JSON as `user_model.json`. An update is one
//! transaction: an `INSERT … ON CONFLICT DO UPDATE … RETURNING` that
//! creates the row when missing and locks it, the change, and the write;
//! so two nodes updating at once (a distillation and a forgetting) take
//! turns and neither loses the other's change. A row that is not a user
//! model is read as empty with a warning and never overwritten, like a
//! damaged file.

use deadpool_postgres::Pool;
use std::path::PathBuf;
use std::sync::Arc;

use super::error::{BoxError, MemoryError};
use super::user_model::{UserModel, stamp};
use jarvis_common::Timestamp;
use jarvis_common::pg::{PgSetupError, build_pool, connection, migrate_locked};

/// Key of the advisory lock the migrations hold (`jarvis` in ASCII, then 5).
const MIGRATION_LOCK: i64 = 0x6a61_7276_6973_0005;

const MIGRATIONS: &str = r#"
CREATE TABLE IF NOT EXISTS jarvis_user_model (
    key TEXT PRIMARY KEY
);
ALTER TABLE jarvis_user_model ADD COLUMN IF NOT EXISTS body JSONB NOT NULL DEFAULT '{}'::jsonb;
"#;

/// The row's key: one user model per deployment, as per home.
const KEY: &str = "user";

/// The user model in Postgres; see the module docs.
pub struct PostgresUserModel {
    pool: Pool,
    target: Arc<str>,
}

impl std::fmt::Debug for PostgresUserModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresUserModel")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

fn setup_error(e: PgSetupError) -> MemoryError {
    match e {
        PgSetupError::Unreachable { target, source } => MemoryError::Unreachable { target, source },
        PgSetupError::Other { op, source } => MemoryError::Database { op, source },
    }
}

fn db(op: &'static str) -> impl FnOnce(tokio_postgres::Error) -> MemoryError {
    move |e| MemoryError::Database {
        op,
        source: Box::new(e) as BoxError,
    }
}

/// Where a damaged row is, for [`MemoryError::DamagedUserModel`].
fn row_name() -> PathBuf {
    PathBuf::from(format!("jarvis_user_model[{KEY}]"))
}

impl PostgresUserModel {
    /// Connects to `url` and brings the schema up to date.
    pub async fn connect(url: &str) -> Result<Self, MemoryError> {
        let (pool, target) = build_pool(url, 2).map_err(setup_error)?;
        let model = Self { pool, target };
        let mut client = model.client().await?;
        migrate_locked(&mut client, MIGRATION_LOCK, MIGRATIONS)
            .await
            .map_err(setup_error)?;
        Ok(model)
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, MemoryError> {
        connection(&self.pool, &self.target).await.map_err(setup_error)
    }

    /// The model, `None` when there is no row yet; an error when the row
    /// is damaged or the database fails.
    pub async fn read(&self) -> Result<Option<UserModel>, MemoryError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached("SELECT body::TEXT FROM jarvis_user_model WHERE key = $1")
            .await
            .map_err(db("prepare a user-model read"))?;
        let row = client
            .query_opt(&stmt, &[&KEY])
            .await
            .map_err(db("read the user model"))?;
        row.map(|row| parse(row.get(0))).transpose()
    }

    /// Reads the model under the row's lock, lets `change` edit it, stamps
    /// it with `now` and writes it, in one transaction; answers what was
    /// written and what `change` answered. `change`'s error, or a damaged
    /// row, leaves the row as it is.
    pub async fn try_update<T>(
        &self,
        now: Timestamp,
        change: impl FnOnce(&mut UserModel) -> Result<T, MemoryError>,
    ) -> Result<(UserModel, T), MemoryError> {
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(db("start a user-model update"))?;
        // Creates the row when missing; either way the row is locked until
        // the transaction ends.
        let row = tx
            .query_one(
                "INSERT INTO jarvis_user_model (key) VALUES ($1) \
                 ON CONFLICT (key) DO UPDATE SET key = EXCLUDED.key RETURNING body::TEXT",
                &[&KEY],
            )
            .await
            .map_err(db("lock the user model"))?;
        let mut model = parse(row.get(0))?;
        let out = change(&mut model)?;
        stamp(&mut model, now);
        let body = serde_json::to_string(&model).map_err(|e| MemoryError::Database {
            op: "encode the user model",
            source: Box::new(e),
        })?;
        tx.execute(
            "UPDATE jarvis_user_model SET body = $2::TEXT::JSONB WHERE key = $1",
            &[&KEY, &body],
        )
        .await
        .map_err(db("write the user model"))?;
        tx.commit().await.map_err(db("commit the user model"))?;
        Ok((model, out))
    }
}

fn parse(body: &str) -> Result<UserModel, MemoryError> {
    serde_json::from_str::<UserModel>(body).map_err(|e| MemoryError::DamagedUserModel {
        path: row_name(),
        reason: e.to_string(),
    })
}
