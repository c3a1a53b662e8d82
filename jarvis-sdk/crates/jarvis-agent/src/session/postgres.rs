//! [`PostgresSessionStore`] (feature `postgres`): sessions in the tables
//! `jarvis_sessions` (one row per session) and `jarvis_entries` (one row per
//! entry, the body as JSONB), for several servers sharing one database.
//!
//! The schema is brought up to date when the store connects, idempotently
//! (R-IDEM-2): `CREATE TABLE IF NOT EXISTS`, `ADD COLUMN IF NOT EXISTS` for
//! every column (so a table from an older version gains what it lacks, and
//! its sessions read as `main`'s, R-SESS-3), all in one transaction that
//! holds an advisory lock, so two processes starting at once take turns.
//!
//! Every append is one prepared statement, so one round trip: updating the
//! session's row moves its `last_seq` and `updated_at` and locks it
//! (concurrent appends to one session take turns), and the same statement
//! inserts the batch numbered from there. The recent window is one
//! indexed query (a partial index over the rows that begin turns), so a
//! turn's cost does not grow with the session's length.
//!
//! The window is also kept in the process, per session, with the `last_seq`
//! it ends at; appends made here extend it. A read first asks the session's
//! row for its `last_seq` (a primary-key read) and answers from the kept
//! window when they agree, so a turn does not read back what this process
//! wrote; any write elsewhere (another server) changes `last_seq` and the
//! window is read again.
//!
//! Queries whose best plan depends on how many entries there are (the
//! window, the next `seq`, the whole history) are planned on every call
//! (`query_typed`, unnamed statements) rather than prepared once: a plan
//! cached while the tables were small would go on scanning every turn start
//! of a session for as long as the connection lives.

use async_trait::async_trait;
use deadpool_postgres::Pool;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio_postgres::Row;
use tokio_postgres::types::{Json, Type};

use super::error::BoxError;
use super::lease::{Claim, Node, NodeOptions, RunningTurn};
use super::{
    ENTRY_SCHEMA_VERSION, EntryBody, NewSession, SessionEntry, SessionError, SessionId, SessionKind,
    SessionMeta, SessionStore, fork_meta, normalize_title, now,
};
use crate::PendingTurn;
use jarvis_common::pg::{PgSetupError, build_pool, connection, migrate_locked};
use jarvis_common::{Clock, SystemClock, Timestamp};

/// Key of the advisory lock the migrations hold (`jarvis` in ASCII, then 1).
const MIGRATION_LOCK: i64 = 0x6a61_7276_6973_0001;

const MIGRATIONS: &str = r#"
CREATE TABLE IF NOT EXISTS jarvis_sessions (
    id TEXT PRIMARY KEY
);
ALTER TABLE jarvis_sessions ADD COLUMN IF NOT EXISTS agent_id TEXT NOT NULL DEFAULT 'main';
ALTER TABLE jarvis_sessions ADD COLUMN IF NOT EXISTS title TEXT;
ALTER TABLE jarvis_sessions ADD COLUMN IF NOT EXISTS created_at TIMESTAMPTZ NOT NULL DEFAULT now();
ALTER TABLE jarvis_sessions ADD COLUMN IF NOT EXISTS updated_at TIMESTAMPTZ NOT NULL DEFAULT now();
ALTER TABLE jarvis_sessions ADD COLUMN IF NOT EXISTS parent_id TEXT;
ALTER TABLE jarvis_sessions ADD COLUMN IF NOT EXISTS kind TEXT NOT NULL DEFAULT 'user';
CREATE TABLE IF NOT EXISTS jarvis_migrations (
    name TEXT PRIMARY KEY,
    at TIMESTAMPTZ NOT NULL DEFAULT now()
);
WITH first AS (
    INSERT INTO jarvis_migrations (name) VALUES ('sessions-job-kind') ON CONFLICT DO NOTHING RETURNING name
)
UPDATE jarvis_sessions SET kind = 'job'
WHERE kind = 'user' AND id LIKE 'sched-%' AND EXISTS (SELECT 1 FROM first);
ALTER TABLE jarvis_sessions ADD COLUMN IF NOT EXISTS caller TEXT;
ALTER TABLE jarvis_sessions ADD COLUMN IF NOT EXISTS callee TEXT;
ALTER TABLE jarvis_sessions ADD COLUMN IF NOT EXISTS sub_origin TEXT;
ALTER TABLE jarvis_sessions ADD COLUMN IF NOT EXISTS last_seq BIGINT;
CREATE TABLE IF NOT EXISTS jarvis_entries (
    session_id TEXT NOT NULL REFERENCES jarvis_sessions (id) ON DELETE CASCADE,
    seq BIGINT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
ALTER TABLE jarvis_entries ADD COLUMN IF NOT EXISTS ts TIMESTAMPTZ NOT NULL DEFAULT now();
ALTER TABLE jarvis_entries ADD COLUMN IF NOT EXISTS v INTEGER NOT NULL DEFAULT 1;
ALTER TABLE jarvis_entries ADD COLUMN IF NOT EXISTS starts_turn BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE jarvis_entries ADD COLUMN IF NOT EXISTS body JSONB NOT NULL DEFAULT '{}'::jsonb;
CREATE INDEX IF NOT EXISTS jarvis_entries_turns ON jarvis_entries (session_id, seq) WHERE starts_turn;
"#;

/// A session's last `seq`: the larger of its row's `last_seq` (unset on
/// rows from before it existed) and its highest entry (one step down the
/// primary key), so entries written without moving `last_seq` (by an older
/// version) are counted too. A macro, so the statements using it are
/// constants.
macro_rules! last_seq {
    () => {
        "GREATEST(COALESCE(last_seq, 0), (SELECT COALESCE(MAX(seq), 0) FROM jarvis_entries WHERE session_id = $1))"
    };
}

/// A session's last `seq` ([`last_seq!`]); no row when there is no such
/// session.
const LAST_SEQ: &str = concat!("SELECT ", last_seq!(), " FROM jarvis_sessions WHERE id = $1");

/// The append statement, with `$lease` (a CTE before the others), `$last`
/// (the session's last `seq`) and `$guard` (a condition on the session's
/// row) for the fenced one.
macro_rules! append {
    ($lease:literal, $last:expr, $guard:literal) => {
        concat!(
            "WITH ",
            $lease,
            "s AS ( \
               UPDATE jarvis_sessions SET updated_at = GREATEST(updated_at, $2), last_seq = ",
            $last,
            " + cardinality($4::BOOLEAN[]) \
               WHERE id = $1",
            $guard,
            " RETURNING last_seq - cardinality($4::BOOLEAN[]) AS base \
             ), ins AS ( \
               INSERT INTO jarvis_entries (session_id, seq, ts, v, starts_turn, body) \
               SELECT $1, s.base + u.n, $2, $3, u.starts, u.body \
               FROM s, UNNEST($4::BOOLEAN[], $5::JSONB[]) WITH ORDINALITY AS u(starts, body, n) \
             ) SELECT base FROM s"
        )
    };
}

/// Appends a batch in one statement: `$1` session, `$2` time, `$3` schema
/// version, `$4` which entries start a turn, `$5` the bodies. Answers the
/// `seq` before the batch; no row when there is no such session. Updating
/// the row locks it, so a concurrent append waits, and then sees the
/// `last_seq` the other one left (Postgres re-reads a row updated under a
/// waiting update), never a number already taken.
const APPEND: &str = append!("", last_seq!(), "");

/// [`APPEND`] for a node holding a lease: `$6` the node, `$7` its token,
/// `$8` the ids of the turns whose blocks the batch holds. The statement
/// locks the lease row (`FOR SHARE`): a takeover (an update of the row)
/// waits for a write under way, and a write after a takeover re-reads the
/// row, finds another token and writes nothing (no row answered). The row
/// is rewritten only to clear the running turn once its block is written
/// (`c`), so most appends add no version of the lease row. Every writer of
/// a deployment moves `last_seq`, so the highest entry is read only for a
/// row that has none yet.
const APPEND_FENCED: &str = append!(
    "l AS (SELECT 1 FROM jarvis_leases WHERE session_id = $1 AND node = $6 AND token = $7 FOR SHARE), \
     c AS (UPDATE jarvis_leases SET turn = NULL \
       WHERE session_id = $1 AND node = $6 AND token = $7 AND turn->>'turn_id' = ANY($8::TEXT[]) \
       AND EXISTS (SELECT 1 FROM l)), ",
    "COALESCE(last_seq, (SELECT COALESCE(MAX(seq), 0) FROM jarvis_entries WHERE session_id = $1))",
    " AND EXISTS (SELECT 1 FROM l)"
);

/// Sessions whose recent window (and, apart, whose agent) a store keeps at
/// most; past it, any one is let go (it is read again when next needed).
const MAX_KEPT_WINDOWS: usize = 4_096;

const META_COLUMNS: &str =
    "id, agent_id, title, created_at, updated_at, parent_id, kind, caller, callee, sub_origin";

/// Sessions in Postgres. See the module docs.
///
/// Cheap to clone; clones share one connection pool.
#[derive(Clone)]
pub struct PostgresSessionStore {
    pool: Pool,
    /// A pool of one connection for the node's heartbeat (made only once
    /// used).
    beats: Pool,
    target: Arc<str>,
    clock: Arc<dyn Clock>,
    windows: Arc<Mutex<HashMap<SessionId, Window>>>,
    /// Each session's agent, fixed at creation, as read once.
    agents: Arc<Mutex<HashMap<SessionId, String>>>,
    /// This process as a node of a deployment, when it is one: every
    /// history write is fenced by a lease ([`super::lease`]).
    node: Option<Arc<Node>>,
    /// Turns waiting for a person that this node took over with their
    /// sessions, until the app takes them ([`SessionStore::adopted_turn`]).
    adopted: Arc<Mutex<HashMap<SessionId, PendingTurn>>>,
}

/// A session's recent entries as this process last saw them; see the
/// module docs.
#[derive(Debug, Clone)]
struct Window {
    /// The session's last `seq` when the window was read or extended.
    last_seq: u64,
    /// How many turns it holds (it starts at the start of the `turns`-th
    /// last turn), unless `whole`.
    turns: usize,
    /// It holds the whole session (fewer turns than asked for).
    whole: bool,
    entries: Vec<SessionEntry>,
}

impl Window {
    /// The window `recent(turns)` answers, when this one holds it.
    fn tail(&self, turns: usize) -> Option<Vec<SessionEntry>> {
        if !self.whole && self.turns < turns {
            return None;
        }
        let start = self
            .entries
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, e)| e.body.starts_turn())
            .nth(turns - 1)
            .map_or(0, |(i, _)| i);
        Some(self.entries[start..].to_vec())
    }

    /// Adds what was appended after `last_seq`, and lets go of turns older
    /// than the window keeps.
    fn extend(&mut self, entries: impl IntoIterator<Item = SessionEntry>) {
        self.entries.extend(entries);
        self.last_seq = self.entries.last().map_or(self.last_seq, |e| e.seq);
        let starts: Vec<usize> = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.body.starts_turn())
            .map(|(i, _)| i)
            .collect();
        if starts.len() > self.turns {
            self.entries.drain(..starts[starts.len() - self.turns]);
            self.whole = false;
        }
    }
}

impl std::fmt::Debug for PostgresSessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresSessionStore")
            .field("target", &self.target)
            .field("pool", &self.pool.status())
            .finish_non_exhaustive()
    }
}

impl PostgresSessionStore {
    /// Connects to the database at `url` (`postgres://user@host/db` or
    /// `host=/run/postgresql user=jarvis dbname=jarvis`; no TLS) and brings
    /// the schema up to date.
    ///
    /// Fails with [`SessionError::Unreachable`], naming host, port and
    /// database (never the password), when no connection can be made.
    pub async fn connect(url: &str) -> Result<Self, SessionError> {
        let (pool, target) = build_pool(url, 16).map_err(setup_error)?;
        // The heartbeat's own connection: a node busy enough to hold every
        // connection of its pool must still renew its lease in time.
        let (beats, _) = build_pool(url, 1).map_err(setup_error)?;
        let store = Self {
            pool,
            beats,
            target,
            clock: Arc::new(SystemClock),
            windows: Arc::default(),
            agents: Arc::default(),
            node: None,
            adopted: Arc::default(),
        };
        store.migrate().await?;
        Ok(store)
    }

    /// Makes this store a node of a deployment (see [`super::lease`]):
    /// registers the node, starts its heartbeat, and from now on claims a
    /// session before writing it and fences every history write with the
    /// session's lease. A session another live node owns refuses writes
    /// with [`SessionError::OwnedElsewhere`]; a write whose lease was taken
    /// over fails with [`SessionError::Fenced`].
    ///
    /// While the node's lease certainly runs, the recent window of a
    /// session it holds is answered from the process without a round trip.
    pub async fn with_node(mut self, options: NodeOptions) -> Result<Self, SessionError> {
        self.node = Some(
            Node::start(
                options,
                self.pool.clone(),
                self.beats.clone(),
                self.target.clone(),
            )
            .await?,
        );
        Ok(self)
    }

    /// This store's node, when it is one.
    pub fn node_id(&self) -> Option<&str> {
        self.node.as_deref().map(|n| n.options.id.as_str())
    }

    /// Claims `id` for this store's node ([`Claim::Held`] with the token
    /// its writes carry), or says which live node owns it. A store that is
    /// not a node holds every session.
    ///
    /// A session taken from a node that died during a turn gets that turn
    /// closed as interrupted (its question, what it recorded and a
    /// `turn_end` with `interrupted`), once, before the claim answers;
    /// unless the turn was a person's and waited for a person: that one is
    /// kept for the app to resume here ([`SessionStore::adopted_turn`]).
    pub async fn claim(&self, id: &SessionId) -> Result<Claim, SessionError> {
        match &self.node {
            Some(node) => self.claim_node(node, id).await,
            None => Ok(Claim::Held { token: 0 }),
        }
    }

    async fn claim_node(&self, node: &Node, id: &SessionId) -> Result<Claim, SessionError> {
        let (claim, left) = node.claim_with_turn(id).await?;
        if let Some(turn) = left {
            let waiting = turn
                .records
                .as_deref()
                .and_then(PendingTurn::from_records)
                .filter(|p| {
                    p.begin.resumable
                        && p.begin.parent.is_none()
                        && p.waits_for_a_person()
                        && !p.steps.is_empty()
                });
            match waiting {
                Some(pending) if !self.has_turn(id, &turn.turn_id).await? => {
                    // Recorded as this node's from now on, so a node taking
                    // the session from this one resumes it in turn.
                    let from = turn.node.clone();
                    let mine = RunningTurn {
                        node: node.options.id.clone(),
                        ..turn
                    };
                    let text = serde_json::to_string(&mine).map_err(SessionError::Encode)?;
                    self.execute(
                        "UPDATE jarvis_leases SET turn = $3::TEXT::JSONB WHERE session_id = $1 AND node = $2",
                        &[&id.as_str(), &node.options.id, &text],
                    )
                    .await?;
                    tracing::info!(session_id = %id, turn_id = %mine.turn_id, %from,
                        "session store (postgres): took over a turn waiting for a person");
                    keep(&self.adopted, id, pending);
                }
                _ => Box::pin(self.close_interrupted(node, id, turn)).await?,
            }
        }
        Ok(claim)
    }

    /// Closes a turn another node left running as interrupted, unless its
    /// block is in the history already; clears it from the lease either way.
    async fn close_interrupted(
        &self,
        node: &Node,
        id: &SessionId,
        turn: RunningTurn,
    ) -> Result<(), SessionError> {
        if self.has_turn(id, &turn.turn_id).await? {
            self.execute(
                "UPDATE jarvis_leases SET turn = NULL WHERE session_id = $1 AND node = $2 AND turn->>'turn_id' = $3",
                &[&id.as_str(), &node.options.id, &turn.turn_id],
            )
            .await?;
            return Ok(());
        }
        // With what it recorded, when it stopped for a person at least once.
        let block = match turn.records.as_deref().and_then(PendingTurn::from_records) {
            Some(recorded) if recorded.turn_id() == turn.turn_id => recorded.interrupted_block(),
            _ => vec![
                EntryBody::turn_start(turn.turn_id.clone()),
                EntryBody::message(jarvis_model::Message::user(turn.prompt)),
                EntryBody::TurnEnd {
                    stop_reason: crate::StopReason::Interrupted,
                    turns: 0,
                    overflows: 0,
                },
            ],
        };
        self.append(id, block).await?;
        tracing::warn!(session_id = %id, turn_id = %turn.turn_id, from = %turn.node,
            "session store (postgres): a turn left running by node {} was closed as interrupted", turn.node);
        Ok(())
    }

    /// Records that turn `turn_id` of `id` runs on this node (see
    /// [`SessionStore::turn_begins`]); the fenced write of its block clears
    /// it. Does nothing for a store that is not a node.
    pub async fn record_turn(&self, id: &SessionId, turn_id: &str, prompt: &str) -> Result<(), SessionError> {
        let Some(node) = &self.node else {
            return Ok(());
        };
        let Claim::Held { token } = self.claim_node(node, id).await? else {
            return Ok(());
        };
        let turn = serde_json::to_string(&RunningTurn {
            node: node.options.id.clone(),
            turn_id: turn_id.to_owned(),
            prompt: prompt.to_owned(),
            records: None,
        })
        .map_err(SessionError::Encode)?;
        let token = i64::try_from(token).unwrap_or(i64::MAX);
        // Runs on a task of its own: never over what the same turn
        // recorded later (`turn_progress`).
        self.execute(
            "UPDATE jarvis_leases SET turn = $3::TEXT::JSONB WHERE session_id = $1 AND node = $2 AND token = $4 \
             AND (turn IS NULL OR turn->>'turn_id' IS DISTINCT FROM $5)",
            &[&id.as_str(), &node.options.id, &turn, &token, &turn_id],
        )
        .await?;
        Ok(())
    }

    /// Keeps what a person's turn recorded with the session's lease (see
    /// [`SessionStore::turn_progress`]); fenced like a history write.
    async fn keep_progress(
        &self,
        node: &Node,
        id: &SessionId,
        turn: &PendingTurn,
    ) -> Result<(), SessionError> {
        let Claim::Held { token } = self.claim_node(node, id).await? else {
            return Ok(());
        };
        let text = serde_json::to_string(&RunningTurn {
            node: node.options.id.clone(),
            turn_id: turn.turn_id().to_owned(),
            prompt: turn.begin.prompt.clone(),
            records: Some(turn.to_records()),
        })
        .map_err(SessionError::Encode)?;
        let token = i64::try_from(token).unwrap_or(i64::MAX);
        self.execute(
            "UPDATE jarvis_leases SET turn = $3::TEXT::JSONB WHERE session_id = $1 AND node = $2 AND token = $4",
            &[&id.as_str(), &node.options.id, &text, &token],
        )
        .await?;
        Ok(())
    }

    /// Whether this store's node holds `id`'s lease (as far as it knows;
    /// a store that is not a node holds nothing).
    pub fn holds(&self, id: &SessionId) -> bool {
        self.node.as_ref().is_some_and(|node| node.token(id).is_some())
    }

    /// The node owning `id` now and how long its lease has left, if a live
    /// node owns it.
    pub async fn owner(&self, id: &SessionId) -> Result<Option<(String, Duration)>, SessionError> {
        let node = match &self.node {
            Some(node) => node.clone(),
            None => return Ok(None),
        };
        Ok(node
            .owner(id)
            .await?
            .filter(|(_, _, left)| !left.is_zero())
            .map(|(owner, _, left)| (owner, left)))
    }

    /// Leaves the deployment: the node's row is removed, so
    /// other nodes can take its sessions at once (a clean stop; a crash
    /// waits for the lease). The store writes no history afterwards.
    pub async fn leave(&self) -> Result<(), SessionError> {
        match &self.node {
            Some(node) => node.leave().await,
            None => Ok(()),
        }
    }

    /// Takes timestamps from `clock` instead of the system clock.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Brings the schema up to date. Idempotent, and safe when several
    /// processes run it at once; [`connect`](Self::connect) runs it.
    pub async fn migrate(&self) -> Result<(), SessionError> {
        let mut client = self.client().await?;
        let migrations = format!("{MIGRATIONS}{}", super::lease::MIGRATIONS);
        migrate_locked(&mut client, MIGRATION_LOCK, &migrations)
            .await
            .map_err(setup_error)
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, SessionError> {
        connection(&self.pool, &self.target).await.map_err(setup_error)
    }

    /// Runs one statement on the store's pool (the cluster link's tables).
    pub async fn execute(
        &self,
        statement: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<u64, SessionError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(statement)
            .await
            .map_err(db("prepare a statement"))?;
        client.execute(&stmt, params).await.map_err(db("run a statement"))
    }

    /// Runs one query on the store's pool and answers its first column.
    pub async fn query_strings(
        &self,
        statement: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<String>, SessionError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(statement)
            .await
            .map_err(db("prepare a query"))?;
        let rows = client.query(&stmt, params).await.map_err(db("run a query"))?;
        rows.iter()
            .map(|row| row.try_get::<_, String>(0))
            .collect::<Result<_, _>>()
            .map_err(db("read a query's rows"))
    }

    /// Why a fenced append wrote nothing: the lease was taken over
    /// ([`SessionError::Fenced`], and the node forgets it), or there is
    /// no such session.
    async fn refused(&self, node: &Node, id: &SessionId, token: i64) -> SessionError {
        match node.owner(id).await {
            Ok(Some((owner, current, _))) if owner != node.options.id || current != token => {
                node.forget(id);
                self.windows.lock().unwrap_or_else(|e| e.into_inner()).remove(id);
                tracing::warn!(session_id = %id, node = %node.options.id, owner = %owner,
                    "session store (postgres): a write was fenced off: node {owner} owns session {id} now");
                SessionError::Fenced {
                    id: id.to_string(),
                    owner,
                }
            }
            Ok(_) => SessionError::not_found(id),
            Err(error) => error,
        }
    }

    async fn exists(&self, client: &deadpool_postgres::Object, id: &SessionId) -> Result<bool, SessionError> {
        let stmt = client
            .prepare_cached("SELECT 1 FROM jarvis_sessions WHERE id = $1")
            .await
            .map_err(db("read a session"))?;
        let rows = client
            .query(&stmt, &[&id.as_str()])
            .await
            .map_err(db("read a session"))?;
        Ok(!rows.is_empty())
    }
}

/// Keeps `value` for `id` in `map`, letting any other one go when
/// [`MAX_KEPT_WINDOWS`] are kept already.
fn keep<T>(map: &Mutex<HashMap<SessionId, T>>, id: &SessionId, value: T) {
    let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
    if map.len() >= MAX_KEPT_WINDOWS
        && !map.contains_key(id)
        && let Some(other) = map.keys().next().cloned()
    {
        map.remove(&other);
    }
    map.insert(id.clone(), value);
}

/// `t` without its nanoseconds past the microsecond.
fn whole_micros(t: SystemTime) -> SystemTime {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => SystemTime::UNIX_EPOCH + std::time::Duration::from_micros(d.as_micros() as u64),
        Err(_) => t,
    }
}

fn setup_error(e: PgSetupError) -> SessionError {
    match e {
        PgSetupError::Unreachable { target, source } => SessionError::Unreachable { target, source },
        PgSetupError::Other { op, source } => SessionError::Database { op, source },
    }
}

fn db(op: &'static str) -> impl FnOnce(tokio_postgres::Error) -> SessionError {
    move |e| SessionError::Database {
        op,
        source: Box::new(e) as BoxError,
    }
}

fn meta_from_row(row: &Row) -> Result<SessionMeta, SessionError> {
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
fn entries_from_rows(id: &SessionId, rows: &[Row]) -> Vec<SessionEntry> {
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

#[async_trait]
impl SessionStore for PostgresSessionStore {
    async fn create(&self, new: NewSession) -> Result<SessionMeta, SessionError> {
        let meta = new.into_meta(now(&*self.clock))?;
        let sub_origin = meta
            .sub
            .as_ref()
            .map(|origin| serde_json::to_string(origin).unwrap_or_default());
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "INSERT INTO jarvis_sessions (id, agent_id, title, created_at, updated_at, parent_id, kind, caller, callee, sub_origin) \
                 VALUES ($1, $2, $3, $4, $4, NULL, $5, $6, $7, $8) ON CONFLICT (id) DO NOTHING",
            )
            .await
            .map_err(db("create a session"))?;
        let created = client
            .execute(
                &stmt,
                &[
                    &meta.id.as_str(),
                    &meta.agent_id,
                    &meta.title,
                    &meta.created_at.to_system_time(),
                    &meta.kind.as_str(),
                    &meta.caller,
                    &meta.callee,
                    &sub_origin,
                ],
            )
            .await
            .map_err(db("create a session"))?;
        if created == 0 {
            return Err(SessionError::AlreadyExists {
                id: meta.id.to_string(),
            });
        }
        Ok(meta)
    }

    async fn get(&self, id: &SessionId) -> Result<Option<SessionMeta>, SessionError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&format!(
                "SELECT {META_COLUMNS} FROM jarvis_sessions WHERE id = $1"
            ))
            .await
            .map_err(db("read a session"))?;
        let row = client
            .query_opt(&stmt, &[&id.as_str()])
            .await
            .map_err(db("read a session"))?;
        row.as_ref().map(meta_from_row).transpose()
    }

    /// Read once per session and kept: a session's agent never changes
    /// and sessions are never removed.
    async fn agent_of(&self, id: &SessionId) -> Result<Option<String>, SessionError> {
        if let Some(agent) = self.agents.lock().unwrap_or_else(|e| e.into_inner()).get(id) {
            return Ok(Some(agent.clone()));
        }
        let Some(meta) = self.get(id).await? else {
            return Ok(None);
        };
        keep(&self.agents, id, meta.agent_id.clone());
        Ok(Some(meta.agent_id))
    }

    async fn append(&self, id: &SessionId, entries: Vec<EntryBody>) -> Result<u64, SessionError> {
        // The lease first: a claim takes connections of its own, which must
        // not wait while this one is held (a busy pool would starve).
        let token = match &self.node {
            Some(node) if !entries.is_empty() => match self.claim_node(node, id).await? {
                Claim::Held { token } => Some(i64::try_from(token).unwrap_or(i64::MAX)),
                Claim::Elsewhere { node, .. } => {
                    return Err(SessionError::OwnedElsewhere {
                        id: id.to_string(),
                        node,
                    });
                }
            },
            _ => None,
        };
        let client = self.client().await?;
        if entries.is_empty() {
            let stmt = client
                .prepare_cached(LAST_SEQ)
                .await
                .map_err(db("append entries"))?;
            let row = client
                .query_opt(&stmt, &[&id.as_str()])
                .await
                .map_err(db("append entries"))?
                .ok_or_else(|| SessionError::not_found(id))?;
            let last: i64 = row.try_get(0).map_err(db("append entries"))?;
            return Ok(u64::try_from(last).unwrap_or(0));
        }
        // To the microsecond Postgres keeps, so the kept window and a read
        // agree to the last digit.
        let ts = whole_micros(now(&*self.clock).to_system_time());
        let starts: Vec<bool> = entries.iter().map(EntryBody::starts_turn).collect();
        let bodies: Vec<Json<&EntryBody>> = entries.iter().map(Json).collect();
        let version = ENTRY_SCHEMA_VERSION as i32;
        let row = match &self.node {
            None => {
                let stmt = client
                    .prepare_cached(APPEND)
                    .await
                    .map_err(db("append entries"))?;
                client
                    .query_opt(&stmt, &[&id.as_str(), &ts, &version, &starts, &bodies])
                    .await
                    .map_err(db("append entries"))?
                    .ok_or_else(|| SessionError::not_found(id))?
            }
            Some(node) => {
                let token = token.unwrap_or_default();
                let stmt = client
                    .prepare_cached(APPEND_FENCED)
                    .await
                    .map_err(db("append entries"))?;
                let turns: Vec<&str> = entries.iter().filter_map(EntryBody::turn_id).collect();
                let row = client
                    .query_opt(
                        &stmt,
                        &[
                            &id.as_str(),
                            &ts,
                            &version,
                            &starts,
                            &bodies,
                            &node.options.id,
                            &token,
                            &turns,
                        ],
                    )
                    .await
                    .map_err(db("append entries"))?;
                match row {
                    Some(row) => row,
                    None => {
                        drop(client);
                        return Err(self.refused(node, id, token).await);
                    }
                }
            }
        };
        let base = u64::try_from(row.try_get::<_, i64>(0).map_err(db("append entries"))?).unwrap_or(0);
        drop(bodies);
        let count = entries.len() as u64;
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        match windows.get_mut(id) {
            Some(window) if window.last_seq == base => {
                let ts = Timestamp::from_system_time(ts);
                window.extend(
                    entries
                        .into_iter()
                        .zip(base + 1..)
                        .map(|(body, seq)| SessionEntry {
                            v: ENTRY_SCHEMA_VERSION,
                            seq,
                            ts,
                            body,
                        }),
                );
            }
            Some(_) => {
                windows.remove(id);
            }
            None => {}
        }
        Ok(base + count)
    }

    async fn recent(&self, id: &SessionId, turns: usize) -> Result<Vec<SessionEntry>, SessionError> {
        // A session this node holds while its lease certainly runs was
        // written by nobody else: the kept window is the session's, and no
        // connection is needed.
        if turns > 0 && self.node.as_ref().is_some_and(|node| node.owns_now(id)) {
            let windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(entries) = windows.get(id).and_then(|w| w.tail(turns)) {
                return Ok(entries);
            }
        }
        let client = self.client().await?;
        if turns == 0 {
            return if self.exists(&client, id).await? {
                Ok(Vec::new())
            } else {
                Err(SessionError::not_found(id))
            };
        }
        let stmt = client
            .prepare_cached(LAST_SEQ)
            .await
            .map_err(db("read recent entries"))?;
        let last: i64 = client
            .query_opt(&stmt, &[&id.as_str()])
            .await
            .map_err(db("read recent entries"))?
            .ok_or_else(|| SessionError::not_found(id))?
            .try_get(0)
            .map_err(db("read recent entries"))?;
        let last = u64::try_from(last).ok();
        if let Some(last) = last {
            let windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(window) = windows.get(id).filter(|w| w.last_seq == last)
                && let Some(entries) = window.tail(turns)
            {
                return Ok(entries);
            }
        }
        let offset = i64::try_from(turns - 1).unwrap_or(i64::MAX);
        let rows = client
            .query_typed(
                "SELECT seq, ts, v, body FROM jarvis_entries WHERE session_id = $1 AND seq >= COALESCE(\
                   (SELECT seq FROM jarvis_entries WHERE session_id = $1 AND starts_turn \
                    ORDER BY seq DESC OFFSET $2 LIMIT 1), 0) \
                 ORDER BY seq",
                &[(&id.as_str(), Type::TEXT), (&offset, Type::INT8)],
            )
            .await
            .map_err(db("read recent entries"))?;
        let entries = entries_from_rows(id, &rows);
        // Kept only when nothing was skipped and it ends where the row said
        // (no append landed between the two reads).
        let read_last = rows
            .last()
            .and_then(|r| r.try_get::<_, i64>(0).ok())
            .and_then(|s| u64::try_from(s).ok())
            .unwrap_or(0);
        if entries.len() == rows.len() && last == Some(read_last) {
            let starts = entries.iter().filter(|e| e.body.starts_turn()).count();
            keep(
                &self.windows,
                id,
                Window {
                    last_seq: read_last,
                    turns,
                    whole: starts < turns,
                    entries: entries.clone(),
                },
            );
        }
        Ok(entries)
    }

    async fn entries(&self, id: &SessionId) -> Result<Vec<SessionEntry>, SessionError> {
        let client = self.client().await?;
        let rows = client
            .query_typed(
                "SELECT seq, ts, v, body FROM jarvis_entries WHERE session_id = $1 ORDER BY seq",
                &[(&id.as_str(), Type::TEXT)],
            )
            .await
            .map_err(db("read entries"))?;
        if rows.is_empty() && !self.exists(&client, id).await? {
            return Err(SessionError::not_found(id));
        }
        Ok(entries_from_rows(id, &rows))
    }

    async fn list(&self) -> Result<Vec<SessionMeta>, SessionError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&format!(
                "SELECT {META_COLUMNS} FROM jarvis_sessions ORDER BY updated_at DESC, id"
            ))
            .await
            .map_err(db("list sessions"))?;
        let rows = client.query(&stmt, &[]).await.map_err(db("list sessions"))?;
        let mut metas = Vec::with_capacity(rows.len());
        for row in &rows {
            match meta_from_row(row) {
                Ok(meta) => metas.push(meta),
                Err(e) => tracing::warn!("session store (postgres): left a session out of the list: {e}"),
            }
        }
        Ok(metas)
    }

    async fn fork(&self, parent: &SessionId, child: SessionId) -> Result<SessionMeta, SessionError> {
        let ts = now(&*self.clock);
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db("start a fork"))?;
        let read = tx
            .prepare_cached(&format!(
                "SELECT {META_COLUMNS} FROM jarvis_sessions WHERE id = $1 FOR SHARE"
            ))
            .await
            .map_err(db("fork a session"))?;
        let row = tx
            .query_opt(&read, &[&parent.as_str()])
            .await
            .map_err(db("fork a session"))?
            .ok_or_else(|| SessionError::not_found(parent))?;
        let meta = fork_meta(&meta_from_row(&row)?, child, ts);
        let insert = tx
            .prepare_cached(
                "INSERT INTO jarvis_sessions (id, agent_id, title, created_at, updated_at, parent_id, kind, caller, callee) \
                 VALUES ($1, $2, $3, $4, $4, $5, $6, NULL, NULL) ON CONFLICT (id) DO NOTHING",
            )
            .await
            .map_err(db("fork a session"))?;
        let created = tx
            .execute(
                &insert,
                &[
                    &meta.id.as_str(),
                    &meta.agent_id,
                    &meta.title,
                    &meta.created_at.to_system_time(),
                    &parent.as_str(),
                    &meta.kind.as_str(),
                ],
            )
            .await
            .map_err(db("fork a session"))?;
        if created == 0 {
            return Err(SessionError::AlreadyExists {
                id: meta.id.to_string(),
            });
        }
        let copy = tx
            .prepare_cached(
                "INSERT INTO jarvis_entries (session_id, seq, ts, v, starts_turn, body) \
                 SELECT $1, seq, ts, v, starts_turn, body FROM jarvis_entries WHERE session_id = $2",
            )
            .await
            .map_err(db("fork a session"))?;
        tx.execute(&copy, &[&meta.id.as_str(), &parent.as_str()])
            .await
            .map_err(db("fork a session"))?;
        tx.commit().await.map_err(db("commit a fork"))?;
        Ok(meta)
    }

    /// A node records the turn in its lease, on a task of its own.
    fn turn_begins(&self, id: &SessionId, turn_id: &str, prompt: &str) {
        if self.node.is_none() {
            return;
        }
        let (store, id, turn_id, prompt) = (self.clone(), id.clone(), turn_id.to_owned(), prompt.to_owned());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(error) = store.record_turn(&id, &turn_id, &prompt).await {
                    tracing::warn!(session_id = %id, %error, "session store (postgres): a running turn could not be recorded");
                }
            });
        }
    }

    async fn turn_progress(&self, id: &SessionId, turn: &PendingTurn) {
        let Some(node) = &self.node else { return };
        if let Err(error) = self.keep_progress(node, id, turn).await {
            tracing::warn!(session_id = %id, turn_id = %turn.turn_id(), %error,
                "session store (postgres): a turn waiting for a person could not be recorded with its lease; another node would close it as interrupted");
        }
    }

    fn adopted_turn(&self, id: &SessionId) -> Option<PendingTurn> {
        self.adopted.lock().unwrap_or_else(|e| e.into_inner()).remove(id)
    }

    async fn unload(&self, id: &SessionId) -> bool {
        self.windows
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id)
            .is_some()
    }

    async fn set_title(&self, id: &SessionId, title: Option<String>) -> Result<SessionMeta, SessionError> {
        let title = normalize_title(title)?;
        let ts = now(&*self.clock).to_system_time();
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&format!(
                "UPDATE jarvis_sessions SET title = $2, updated_at = GREATEST(updated_at, $3) WHERE id = $1 \
                 RETURNING {META_COLUMNS}"
            ))
            .await
            .map_err(db("set a title"))?;
        let row = client
            .query_opt(&stmt, &[&id.as_str(), &title, &ts])
            .await
            .map_err(db("set a title"))?
            .ok_or_else(|| SessionError::not_found(id))?;
        meta_from_row(&row)
    }
}
