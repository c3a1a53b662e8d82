//! Session leases (feature `postgres`): which node of a deployment owns a
//! session now, so that several `jarvis` processes can share one database
//! without two of them ever writing one session's history.
//!
//! A **node** is one process, named by [`NodeOptions::id`]
//! (`JARVIS_NODE__ID`, default the host name plus the pid). It keeps a row
//! in `jarvis_nodes` alive with a heartbeat every third of its lease
//! (`JARVIS_NODE__LEASE_SECS`, default 5 s): the row's `expires_at` is the
//! database's clock plus the lease, so nodes never compare their own clocks.
//!
//! A session is owned through its row in `jarvis_leases` (`node`, `token`).
//! A node **claims** a session before its first write: the claim succeeds
//! when the session has no owner, is already its own, or its owner's row has
//! expired; taking a session from another node increments the token. Every
//! history write of a leased store carries the node and token it holds and
//! locks the lease row (`FOR SHARE`) in the same statement, so a write and a
//! takeover are strictly ordered: once another node took the session, a
//! write with the old token finds no lease and fails with
//! [`SessionError::Fenced`](super::SessionError::Fenced), however long the
//! old node was paused.
//!
//! The heartbeat also tells the node, on its own monotonic clock, until when
//! no other node can have taken its sessions: the time it sent a successful
//! heartbeat plus the lease, less a tenth for clock drift. Until then, a
//! session it holds cannot have been written elsewhere, so the session
//! store answers the recent window from its cache without asking the
//! database. When a heartbeat finds that the node's row had lapsed, the node
//! forgets every lease it held; it claims them again (keeping its token when
//! nobody took them meanwhile).
//!
//! A node records the turn it is running in the lease row (`turn`: node,
//! turn id, prompt; written off the turn's path), and the fenced write of
//! the turn's block clears it; a node that takes the session over closes a
//! turn left there as interrupted, unless its block is in the history.
//!
//! A node starting with the home of a process that died (same host, same
//! `JARVIS_HOME`, which only one live process can hold) removes that
//! process's row, so a restart after a crash need not wait for the lease to
//! run out.
//!
//! The migrations here also create the tables of the nodes' link
//! (`jarvis_watchers`, `jarvis_node_payloads`), of the schedule's slots
//! and shared jobs (`jarvis_schedule_slots`, `jarvis_jobs`) and of the
//! shared "always allow" rules (`jarvis_approval_rules`), so that one advisory-locked migration brings
//! a deployment's whole schema up.

use deadpool_postgres::Pool;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use super::SessionId;
use super::error::{BoxError, SessionError};
use jarvis_common::pg::connection;

/// The default lease of a node (`JARVIS_NODE__LEASE_SECS`).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(5);

/// The shortest lease accepted: a heartbeat every third of it must fit
/// a round trip to the database with room to spare.
pub const MIN_LEASE: Duration = Duration::from_millis(300);

pub(crate) const MIGRATIONS: &str = r#"
CREATE TABLE IF NOT EXISTS jarvis_nodes (
    id TEXT PRIMARY KEY
);
ALTER TABLE jarvis_nodes ADD COLUMN IF NOT EXISTS expires_at TIMESTAMPTZ NOT NULL DEFAULT now();
ALTER TABLE jarvis_nodes ADD COLUMN IF NOT EXISTS started_at TIMESTAMPTZ NOT NULL DEFAULT now();
ALTER TABLE jarvis_nodes ADD COLUMN IF NOT EXISTS host TEXT NOT NULL DEFAULT '';
ALTER TABLE jarvis_nodes ADD COLUMN IF NOT EXISTS home TEXT NOT NULL DEFAULT '';
CREATE TABLE IF NOT EXISTS jarvis_leases (
    session_id TEXT PRIMARY KEY
);
ALTER TABLE jarvis_leases ADD COLUMN IF NOT EXISTS node TEXT NOT NULL DEFAULT '';
ALTER TABLE jarvis_leases ADD COLUMN IF NOT EXISTS token BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jarvis_leases ADD COLUMN IF NOT EXISTS turn JSONB;
CREATE INDEX IF NOT EXISTS jarvis_leases_node ON jarvis_leases (node);
CREATE TABLE IF NOT EXISTS jarvis_watchers (
    session_id TEXT NOT NULL,
    node TEXT NOT NULL,
    PRIMARY KEY (session_id, node)
);
CREATE TABLE IF NOT EXISTS jarvis_schedule_slots (
    job TEXT NOT NULL,
    slot TIMESTAMPTZ NOT NULL,
    node TEXT NOT NULL,
    at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (job, slot)
);
CREATE TABLE IF NOT EXISTS jarvis_node_payloads (
    id BIGSERIAL PRIMARY KEY,
    body TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS jarvis_approval_rules (
    id BIGSERIAL PRIMARY KEY,
    agent_id TEXT NOT NULL,
    rule TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (agent_id, rule)
);
CREATE TABLE IF NOT EXISTS jarvis_jobs (
    id TEXT PRIMARY KEY,
    seq BIGSERIAL,
    spec TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
"#;

/// Renews the node's row and says whether it was still alive (`false` when
/// it is new or had lapsed). `$1` id, `$2` lease in seconds, `$3` host, `$4`
/// home.
const HEARTBEAT: &str = "WITH prev AS (SELECT expires_at > clock_timestamp() AS alive FROM jarvis_nodes WHERE id = $1) \
     INSERT INTO jarvis_nodes (id, expires_at, started_at, host, home) \
     VALUES ($1, clock_timestamp() + $2::FLOAT8 * interval '1 second', clock_timestamp(), $3, $4) \
     ON CONFLICT (id) DO UPDATE SET expires_at = EXCLUDED.expires_at \
     RETURNING COALESCE((SELECT alive FROM prev), false)";

/// Claims a session for a live node: `$1` session, `$2` node. Answers the
/// token and the turn the session's owner recorded as running (`turn`:
/// `{node, turn_id, prompt}`, cleared when the turn's block is written); no
/// row when another live node owns it (or this node's own row has lapsed).
/// The node keeps its token when it owns the session already.
const CLAIM: &str = "WITH me AS (SELECT 1 FROM jarvis_nodes WHERE id = $2 AND expires_at > clock_timestamp()) \
     INSERT INTO jarvis_leases AS l (session_id, node, token) SELECT $1, $2, 1 FROM me \
     ON CONFLICT (session_id) DO UPDATE SET node = EXCLUDED.node, \
       token = CASE WHEN l.node = EXCLUDED.node THEN l.token ELSE l.token + 1 END \
     WHERE EXISTS (SELECT 1 FROM me) AND (l.node = EXCLUDED.node OR NOT EXISTS \
       (SELECT 1 FROM jarvis_nodes n WHERE n.id = l.node AND n.expires_at > clock_timestamp())) \
     RETURNING token, turn::TEXT";

/// A session's owner and how long its lease has left (0 when it lapsed).
const OWNER: &str = "SELECT l.node, l.token, \
       GREATEST(COALESCE(EXTRACT(EPOCH FROM (n.expires_at - clock_timestamp())), 0), 0)::FLOAT8 \
     FROM jarvis_leases l LEFT JOIN jarvis_nodes n ON n.id = l.node WHERE l.session_id = $1";

/// Who a node is and how long its leases last.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeOptions {
    /// The node's name in the deployment (`JARVIS_NODE__ID`); unique among
    /// live nodes.
    pub id: String,
    /// How long the node's sessions stay its own after its last heartbeat
    /// (`JARVIS_NODE__LEASE_SECS`, default [`DEFAULT_LEASE`]).
    pub lease: Duration,
    /// The node's home directory, if it has one: a node starting with the
    /// same host and home removes the row a crashed predecessor left.
    pub home: Option<String>,
}

impl NodeOptions {
    /// A node named `id` with the default lease and no home.
    pub fn new(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            lease: DEFAULT_LEASE,
            home: None,
        }
    }

    /// The same node with another lease (at least [`MIN_LEASE`]).
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease.max(MIN_LEASE);
        self
    }

    /// The same node with its home directory.
    pub fn with_home(mut self, home: impl Into<String>) -> Self {
        self.home = Some(home.into());
        self
    }

    /// The default node id: this machine's host name, a dash, and the pid.
    pub fn default_id() -> String {
        format!("{}-{}", host_name(), std::process::id())
    }
}

/// This machine's host name (`localhost` when it cannot be read).
pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Who owns a session, as a claim found it: this node or another (a claim
/// has no third answer, so callers match both).
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// This node owns it, with this fencing token.
    Held {
        /// The token every write carries.
        token: u64,
    },
    /// Another live node owns it.
    Elsewhere {
        /// The owner's id.
        node: String,
        /// How long its lease has left unless it renews it.
        expires_in: Duration,
    },
}

/// The turn a node recorded as running in a session it owns
/// (`jarvis_leases.turn`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct RunningTurn {
    /// The node running it.
    pub(crate) node: String,
    /// The turn's id.
    pub(crate) turn_id: String,
    /// The person's prompt.
    pub(crate) prompt: String,
    /// What the turn recorded, as turn journal records, once it stopped
    /// for a person ([`crate::PendingTurn::to_records`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) records: Option<Vec<serde_json::Value>>,
}

/// A node's leases: the heartbeat, the tokens it holds and until when they
/// are certainly its own. Shared by the clones of a store.
pub(crate) struct Node {
    pub(crate) options: NodeOptions,
    host: String,
    pool: Pool,
    /// The heartbeat's own connection, never taken by the store's work.
    beats: Pool,
    target: Arc<str>,
    state: Mutex<NodeState>,
    heartbeat: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

#[derive(Debug, Default)]
struct NodeState {
    /// No other node can own this node's sessions before this instant.
    valid_until: Option<Instant>,
    /// Tokens of the sessions this node claimed.
    held: HashMap<SessionId, i64>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.options.id)
            .field("lease", &self.options.lease)
            .finish_non_exhaustive()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(task) = self.heartbeat.get_mut().ok().and_then(Option::take) {
            task.abort();
        }
    }
}

fn db(op: &'static str) -> impl FnOnce(tokio_postgres::Error) -> SessionError {
    move |e| SessionError::Database {
        op,
        source: Box::new(e) as BoxError,
    }
}

impl Node {
    /// Registers the node (removing a crashed predecessor with the same
    /// host and home) and starts its heartbeat.
    pub(crate) async fn start(
        options: NodeOptions,
        pool: Pool,
        beats: Pool,
        target: Arc<str>,
    ) -> Result<Arc<Self>, SessionError> {
        let node = Arc::new(Self {
            options,
            host: host_name(),
            pool,
            beats,
            target,
            state: Mutex::default(),
            heartbeat: Mutex::new(None),
        });
        if let Some(home) = &node.options.home {
            let client = node.client().await?;
            let gone = client
                .execute(
                    "DELETE FROM jarvis_nodes WHERE host = $1 AND home = $2 AND id <> $3",
                    &[&node.host, home, &node.options.id],
                )
                .await
                .map_err(db("remove a crashed node"))?;
            if gone > 0 {
                tracing::info!(node = %node.options.id, "took over from a previous process of this home");
            }
        }
        node.beat().await?;
        let weak = Arc::downgrade(&node);
        let period = node.options.lease / 3;
        let task = tokio::spawn(heartbeat(weak, period));
        *node.heartbeat.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
        Ok(node)
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, SessionError> {
        self.client_of(&self.pool).await
    }

    async fn client_of(&self, pool: &Pool) -> Result<deadpool_postgres::Object, SessionError> {
        connection(pool, &self.target).await.map_err(|e| match e {
            jarvis_common::pg::PgSetupError::Unreachable { target, source } => {
                SessionError::Unreachable { target, source }
            }
            jarvis_common::pg::PgSetupError::Other { op, source } => SessionError::Database { op, source },
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, NodeState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One heartbeat: renews the node's row; a row that had lapsed loses
    /// every lease this node held.
    pub(crate) async fn beat(&self) -> Result<(), SessionError> {
        let sent = Instant::now();
        let client = self.client_of(&self.beats).await?;
        let stmt = client
            .prepare_cached(HEARTBEAT)
            .await
            .map_err(db("renew the node's lease"))?;
        let home = self.options.home.clone().unwrap_or_default();
        let row = client
            .query_one(
                &stmt,
                &[
                    &self.options.id,
                    &self.options.lease.as_secs_f64(),
                    &self.host,
                    &home,
                ],
            )
            .await
            .map_err(db("renew the node's lease"))?;
        let alive: bool = row.try_get(0).map_err(db("renew the node's lease"))?;
        let mut state = self.lock();
        if !alive && !state.held.is_empty() {
            tracing::warn!(
                node = %self.options.id,
                sessions = state.held.len(),
                "this node's lease lapsed; its sessions are claimed again before their next write"
            );
            state.held.clear();
        }
        state.valid_until = Some(sent + self.options.lease - self.options.lease / 10);
        Ok(())
    }

    /// The token this node holds for `id`, if any.
    pub(crate) fn token(&self, id: &SessionId) -> Option<i64> {
        self.lock().held.get(id).copied()
    }

    /// Whether `id` is this node's and no other node can have written it
    /// (the lease is certainly still running).
    pub(crate) fn owns_now(&self, id: &SessionId) -> bool {
        let state = self.lock();
        state.held.contains_key(id) && state.valid_until.is_some_and(|until| Instant::now() < until)
    }

    /// Forgets the lease of `id` (a write found it superseded).
    pub(crate) fn forget(&self, id: &SessionId) {
        self.lock().held.remove(id);
    }

    /// Claims `id` for this node (see [`Claim`]), and answers the turn another node left
    /// running in it, when this claim took the session from that node.
    pub(crate) async fn claim_with_turn(
        &self,
        id: &SessionId,
    ) -> Result<(Claim, Option<RunningTurn>), SessionError> {
        if let Some(token) = self.token(id) {
            let token = u64::try_from(token).unwrap_or(0);
            return Ok((Claim::Held { token }, None));
        }
        for attempt in 0..2 {
            // One connection at a time: holding this one while `owner` or
            // `beat` takes another could starve a busy pool.
            let claimed = {
                let client = self.client().await?;
                let stmt = client
                    .prepare_cached(CLAIM)
                    .await
                    .map_err(db("claim a session"))?;
                client
                    .query_opt(&stmt, &[&id.as_str(), &self.options.id])
                    .await
                    .map_err(db("claim a session"))?
            };
            if let Some(row) = claimed {
                let token: i64 = row.try_get(0).map_err(db("claim a session"))?;
                let turn: Option<String> = row.try_get(1).map_err(db("claim a session"))?;
                self.lock().held.insert(id.clone(), token);
                let left = turn
                    .and_then(|text| serde_json::from_str::<RunningTurn>(&text).ok())
                    .filter(|t| t.node != self.options.id);
                let token = u64::try_from(token).unwrap_or(0);
                return Ok((Claim::Held { token }, left));
            }
            let owner = self.owner(id).await?;
            match owner {
                Some((node, _, expires_in)) if node != self.options.id && !expires_in.is_zero() => {
                    return Ok((Claim::Elsewhere { node, expires_in }, None));
                }
                // This node's own row lapsed (a heartbeat was late): renew
                // it and try once more.
                _ if attempt == 0 => self.beat().await?,
                _ => {}
            }
        }
        Err(SessionError::Database {
            op: "claim a session",
            source: "the node's lease could not be renewed".into(),
        })
    }

    /// The owner of `id`, its token, and how long its lease has left.
    pub(crate) async fn owner(
        &self,
        id: &SessionId,
    ) -> Result<Option<(String, i64, Duration)>, SessionError> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(OWNER).await.map_err(db("read a lease"))?;
        let row = client
            .query_opt(&stmt, &[&id.as_str()])
            .await
            .map_err(db("read a lease"))?;
        row.map(|row| {
            let node: String = row.try_get(0)?;
            let token: i64 = row.try_get(1)?;
            let left: f64 = row.try_get(2)?;
            Ok((node, token, Duration::from_secs_f64(left.max(0.0))))
        })
        .transpose()
        .map_err(db("read a lease"))
    }

    /// Leaves the deployment: removes the node's row, so its sessions can
    /// be claimed at once. The lease rows stay, so the next owner's token
    /// is still higher than any this node wrote with.
    pub(crate) async fn leave(&self) -> Result<(), SessionError> {
        if let Some(task) = self.heartbeat.lock().unwrap_or_else(|e| e.into_inner()).take() {
            task.abort();
        }
        {
            let mut state = self.lock();
            state.held.clear();
            state.valid_until = None;
        }
        let client = self.client().await?;
        client
            .execute("DELETE FROM jarvis_nodes WHERE id = $1", &[&self.options.id])
            .await
            .map_err(db("remove the node"))?;
        Ok(())
    }
}

/// Renews `node`'s row every `period` until the node is dropped. A failed
/// heartbeat is logged and tried again at the next period; meanwhile the
/// node's cached windows stop being trusted once its lease may have run out.
async fn heartbeat(node: Weak<Node>, period: Duration) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(node) = node.upgrade() else { return };
        if let Err(error) = node.beat().await {
            tracing::warn!(node = %node.options.id, %error, "a heartbeat failed; retrying");
        }
    }
}
