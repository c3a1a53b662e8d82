//! Goals in Postgres (feature `postgres`): the table `jarvis_goals`, one
//! row per goal (`agent_id`, `number`, `status`, the goal as JSONB), shared
//! by every node of a deployment.
//!
//! A new goal takes the agent's highest number plus one in a transaction
//! holding an advisory lock on the agent's numbering, so two nodes setting
//! goals at once take turns and never pick the same number. A change reads the row `FOR
//! UPDATE` in a transaction, so two nodes changing one goal take turns and
//! neither change is lost. Rows are never deleted, so a number is never
//! given twice.

use deadpool_postgres::Pool;
use std::sync::Arc;
use tokio_postgres::types::Json;

use super::{Goal, GoalError, GoalStatus, checked_agent};
use jarvis_common::pg::{BoxError, PgSetupError, build_pool, connection, migrate_locked};

/// Key of the advisory lock the migrations hold (`jarvis` in ASCII, then 4).
const MIGRATION_LOCK: i64 = 0x6a61_7276_6973_0004;

const MIGRATIONS: &str = r#"
CREATE TABLE IF NOT EXISTS jarvis_goals (
    agent_id TEXT NOT NULL,
    number BIGINT NOT NULL,
    PRIMARY KEY (agent_id, number)
);
ALTER TABLE jarvis_goals ADD COLUMN IF NOT EXISTS status TEXT NOT NULL DEFAULT 'active';
ALTER TABLE jarvis_goals ADD COLUMN IF NOT EXISTS body JSONB NOT NULL DEFAULT '{}'::jsonb;
CREATE INDEX IF NOT EXISTS jarvis_goals_active ON jarvis_goals (agent_id) WHERE status = 'active';
"#;

/// The first key of the advisory lock numbering an agent's goals (`jarv`
/// in ASCII); the second is the agent id's hash.
const NUMBERING_LOCK: i32 = 0x6a61_7276;

/// The goals of every node of a deployment.
pub(super) struct PostgresGoals {
    pool: Pool,
    target: Arc<str>,
}

impl std::fmt::Debug for PostgresGoals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresGoals")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

fn setup_error(e: PgSetupError) -> GoalError {
    match e {
        PgSetupError::Unreachable { target, source } => GoalError::Database {
            op: "reach the database",
            source: format!("{target}: {source}").into(),
        },
        PgSetupError::Other { op, source } => GoalError::Database { op, source },
    }
}

fn db(op: &'static str) -> impl FnOnce(tokio_postgres::Error) -> GoalError {
    move |e| GoalError::Database {
        op,
        source: Box::new(e) as BoxError,
    }
}

fn status_name(status: GoalStatus) -> &'static str {
    match status {
        GoalStatus::Active => "active",
        GoalStatus::Done => "done",
        GoalStatus::Dropped => "dropped",
    }
}

/// The goals of `rows` (`body` first); damaged rows are skipped with a
/// warning, like damaged goal files.
fn goals(rows: &[tokio_postgres::Row]) -> Vec<Goal> {
    rows.iter()
        .filter_map(|row| match row.try_get::<_, Json<Goal>>(0) {
            Ok(Json(goal)) => Some(goal),
            Err(error) => {
                tracing::warn!(%error, "a goal row is not a goal; it is skipped");
                None
            }
        })
        .collect()
}

impl PostgresGoals {
    /// Connects to `url` and brings the schema up to date.
    pub(super) async fn connect(url: &str) -> Result<Self, GoalError> {
        let (pool, target) = build_pool(url, 2).map_err(setup_error)?;
        let goals = Self { pool, target };
        let mut client = goals.client().await?;
        migrate_locked(&mut client, MIGRATION_LOCK, MIGRATIONS)
            .await
            .map_err(setup_error)?;
        Ok(goals)
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, GoalError> {
        connection(&self.pool, &self.target).await.map_err(setup_error)
    }

    /// Every goal of `agent_id` (only the active ones with `active_only`).
    pub(super) async fn list(&self, agent_id: &str, active_only: bool) -> Result<Vec<Goal>, GoalError> {
        checked_agent(agent_id)?;
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "SELECT body FROM jarvis_goals WHERE agent_id = $1 AND (NOT $2 OR status = 'active') \
                 ORDER BY number",
            )
            .await
            .map_err(db("prepare a goal listing"))?;
        let rows = client
            .query(&stmt, &[&agent_id, &active_only])
            .await
            .map_err(db("list goals"))?;
        Ok(goals(&rows))
    }

    /// The agents that have a goal.
    pub(super) async fn agents(&self) -> Result<Vec<String>, GoalError> {
        let client = self.client().await?;
        let rows = client
            .query("SELECT DISTINCT agent_id FROM jarvis_goals", &[])
            .await
            .map_err(db("list the agents with goals"))?;
        rows.iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, _>>()
            .map_err(db("read an agent id"))
    }

    pub(super) async fn get(&self, agent_id: &str, number: u64) -> Result<Option<Goal>, GoalError> {
        checked_agent(agent_id)?;
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT body FROM jarvis_goals WHERE agent_id = $1 AND number = $2",
                &[&agent_id, &(number as i64)],
            )
            .await
            .map_err(db("read a goal"))?;
        Ok(row.and_then(|row| goals(std::slice::from_ref(&row)).pop()))
    }

    /// Writes the goal `make` builds from the next number of `agent_id`
    /// (the highest plus one), in a transaction holding the agent's
    /// numbering lock, so two nodes never take the same number and neither
    /// has to try again.
    pub(super) async fn insert(
        &self,
        agent_id: &str,
        make: impl FnOnce(u64) -> Goal,
    ) -> Result<Goal, GoalError> {
        checked_agent(agent_id)?;
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db("start a goal insert"))?;
        tx.execute(
            "SELECT pg_advisory_xact_lock($1, hashtext($2))",
            &[&NUMBERING_LOCK, &agent_id],
        )
        .await
        .map_err(db("lock the goal numbering"))?;
        // A statement after the lock sees every goal committed before it.
        let number = tx
            .query_one(
                "SELECT COALESCE(MAX(number), 0) + 1 FROM jarvis_goals WHERE agent_id = $1",
                &[&agent_id],
            )
            .await
            .map_err(db("number a goal"))?
            .get::<_, i64>(0);
        let goal = make(number as u64);
        tx.execute(
            "INSERT INTO jarvis_goals (agent_id, number, status, body) VALUES ($1, $2, $3, $4)",
            &[&agent_id, &number, &status_name(goal.status), &Json(&goal)],
        )
        .await
        .map_err(db("insert a goal"))?;
        tx.commit().await.map_err(db("commit a goal"))?;
        Ok(goal)
    }

    /// Reads goal `number` of `agent_id` for update, lets `change` edit it,
    /// and writes it when `change` answers `true`, in one transaction.
    pub(super) async fn modify(
        &self,
        agent_id: &str,
        number: u64,
        change: impl FnOnce(&mut Goal) -> Result<bool, GoalError>,
    ) -> Result<Option<Goal>, GoalError> {
        checked_agent(agent_id)?;
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db("start a goal change"))?;
        let row = tx
            .query_opt(
                "SELECT body FROM jarvis_goals WHERE agent_id = $1 AND number = $2 FOR UPDATE",
                &[&agent_id, &(number as i64)],
            )
            .await
            .map_err(db("read a goal"))?;
        let Some(mut goal) = row.and_then(|row| goals(std::slice::from_ref(&row)).pop()) else {
            return Ok(None);
        };
        if change(&mut goal)? {
            tx.execute(
                "UPDATE jarvis_goals SET status = $3, body = $4 WHERE agent_id = $1 AND number = $2",
                &[
                    &agent_id,
                    &(number as i64),
                    &status_name(goal.status),
                    &Json(&goal),
                ],
            )
            .await
            .map_err(db("write a goal"))?;
            tx.commit().await.map_err(db("commit a goal change"))?;
        }
        Ok(Some(goal))
    }
}
