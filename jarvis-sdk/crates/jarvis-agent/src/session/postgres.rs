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

mod node;
mod rows;
mod schema;
mod window;

use async_trait::async_trait;
use deadpool_postgres::Pool;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio_postgres::types::{Json, Type};

use super::lease::{Claim, Node};
use super::{
    ENTRY_SCHEMA_VERSION, EntryBody, NewSession, SessionEntry, SessionError, SessionId, SessionMeta,
    SessionStore, fork_meta, normalize_title, now,
};
use crate::PendingTurn;
use jarvis_common::pg::{build_pool, connection, migrate_locked};
use jarvis_common::{Clock, SystemClock, Timestamp};
use rows::{db, entries_from_rows, meta_from_row, setup_error, whole_micros};
use schema::{APPEND, APPEND_FENCED, LAST_SEQ, META_COLUMNS, MIGRATION_LOCK, MIGRATIONS};
use window::{Window, keep};

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
