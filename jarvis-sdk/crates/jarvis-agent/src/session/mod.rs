//! Sessions: the [`SessionStore`] trait and its stores.
//!
//! A session is one conversation of one agent. Its agent is fixed when it is
//! created and never changes (R-SESS-1); a fork keeps its parent's agent
//! (R-SESS-5). Its history is a sequence of [`SessionEntry`]s: messages and
//! turn markers, numbered by `seq`. A **turn** begins at a user message; the
//! harness reads the last few turns ([`SessionStore::recent`]) before every
//! model call, so every store answers that from an index or a cache, at a
//! cost that does not grow with the session's length.
//!
//! Stores:
//!
//! | store | where | for |
//! |---|---|---|
//! | [`JsonlSessionStore`] | `$JARVIS_HOME/sessions/<id>.jsonl` + `<id>.meta.json` | one server on one machine (default) |
//! | [`PostgresSessionStore`] (feature `postgres`) | tables `jarvis_sessions`, `jarvis_entries` | several servers sharing a database, each session owned by one node at a time ([`lease`]) |
//! | [`MemorySessionStore`] | memory | tests, benchmarks |
//!
//! Timestamps come from the [`Clock`] a store was built with and session ids
//! from the caller (R-IDEM-4); stores never read the system clock themselves.

mod entry;
mod error;
mod id;
mod jsonl;
#[cfg(feature = "postgres")]
pub mod lease;
mod memory;
#[cfg(feature = "postgres")]
mod postgres;
mod wal;

use async_trait::async_trait;
use std::fmt;

pub use entry::{ENTRY_SCHEMA_VERSION, EntryBody, SessionEntry, SessionKind, SessionMeta, SubOrigin};
pub use error::SessionError;
pub use id::session_id_problem;
pub use id::{MAX_AGENT_ID_LEN, MAX_SESSION_ID_LEN, SessionId, validate_agent_id};
pub use jsonl::{JsonlOptions, JsonlSessionStore, LoadReport};
#[cfg(feature = "postgres")]
pub use lease::{Claim, NodeOptions};
pub use memory::MemorySessionStore;
#[cfg(feature = "postgres")]
pub use postgres::PostgresSessionStore;

use super::journal::PendingTurn;
use jarvis_common::{Clock, Timestamp, char_len};

/// The agent of sessions that predate agent ownership (R-SESS-4).
pub const LEGACY_AGENT_ID: &str = "main";

/// The longest session title, in characters.
pub const MAX_TITLE_CHARS: usize = 200;

/// Where a conversation's history lives.
///
/// Object-safe and held as `Arc<dyn SessionStore>`. Every method that names
/// a session fails with [`SessionError::NotFound`] when it does not exist,
/// except [`get`](SessionStore::get), which answers `None`, and
/// [`sync`](SessionStore::sync), which stores with nothing to flush may
/// answer `Ok` without looking.
#[async_trait]
pub trait SessionStore: Send + Sync + fmt::Debug {
    /// Creates a session; its agent is fixed from now on.
    /// [`SessionError::AlreadyExists`] when the id is taken.
    async fn create(&self, new: NewSession) -> Result<SessionMeta, SessionError>;

    /// The session's metadata, or `None` when there is no such session.
    async fn get(&self, id: &SessionId) -> Result<Option<SessionMeta>, SessionError>;

    /// The agent session `id` belongs to, or `None` when there is no such
    /// session. An agent is fixed when its session is created and sessions
    /// are never removed, so a store may keep the answer; the default reads
    /// the metadata.
    async fn agent_of(&self, id: &SessionId) -> Result<Option<String>, SessionError> {
        Ok(self.get(id).await?.map(|meta| meta.agent_id))
    }

    /// Appends `entries` in order, all or (on failure) none, and answers the
    /// `seq` of the last one (the current last `seq` when `entries` is empty).
    async fn append(&self, id: &SessionId, entries: Vec<EntryBody>) -> Result<u64, SessionError>;

    /// The entries of the last `turns` turns, oldest first: from the
    /// `turns`-th user message from the end, or the whole history when it
    /// has fewer turns. Empty when `turns` is 0.
    async fn recent(&self, id: &SessionId, turns: usize) -> Result<Vec<SessionEntry>, SessionError>;

    /// The whole history, oldest first.
    async fn entries(&self, id: &SessionId) -> Result<Vec<SessionEntry>, SessionError>;

    /// Every session's metadata, most recently updated first (ties by id).
    async fn list(&self) -> Result<Vec<SessionMeta>, SessionError>;

    /// Creates `child` as a copy of `parent`'s history so far, with the
    /// parent's agent and title, `parent_id` set and kind `user`.
    async fn fork(&self, parent: &SessionId, child: SessionId) -> Result<SessionMeta, SessionError>;

    /// Sets or (with `None` or a blank title) clears the title.
    async fn set_title(&self, id: &SessionId, title: Option<String>) -> Result<SessionMeta, SessionError>;

    /// Called by the harness at the end of every turn: makes the turn's
    /// entries durable as far as the store's durability setting asks. The
    /// default does nothing (stores whose appends are durable already).
    async fn sync(&self, id: &SessionId) -> Result<(), SessionError> {
        let _ = id;
        Ok(())
    }

    /// Called by the harness when turn `turn_id` of session `id` begins,
    /// with the person's prompt, before the model is asked. A store shared
    /// by several nodes records it (without making the turn wait), so that
    /// the node taking the session over after a crash can close the turn as
    /// interrupted. The default does nothing.
    fn turn_begins(&self, id: &SessionId, turn_id: &str, prompt: &str) {
        let _ = (id, turn_id, prompt);
    }

    /// Called by the turn journal when a person's turn of session `id`
    /// stops for a person and when it gets the answer, with what the turn
    /// recorded so far, before the request is shown or the answer acted
    /// on. A store shared by several nodes keeps it with the session's
    /// lease, so the node that takes the session over resumes the turn
    /// ([`SessionStore::adopted_turn`]). The default does nothing.
    async fn turn_progress(&self, id: &SessionId, turn: &PendingTurn) {
        let _ = (id, turn);
    }

    /// A turn waiting for a person that this store took over with session
    /// `id` from a node that stopped (see [`SessionStore::turn_progress`]),
    /// for the app to resume; answered once. The default has none.
    fn adopted_turn(&self, id: &SessionId) -> Option<PendingTurn> {
        let _ = id;
        None
    }

    /// Whether the history holds the block of turn `turn_id` (its
    /// `turn_start` carries the id). Recovery after a crash asks it, so a
    /// turn recorded just before the crash is not recorded twice. The
    /// default reads the whole history.
    async fn has_turn(&self, id: &SessionId, turn_id: &str) -> Result<bool, SessionError> {
        Ok(self
            .entries(id)
            .await?
            .iter()
            .rev()
            .any(|e| e.body.turn_id() == Some(turn_id)))
    }

    /// Appends `entry`, a record that must be in the history at most once
    /// (a proactive message, keyed by its message id), unless the history
    /// holds an entry with the same key already; answers whether it was
    /// appended. Entries without a key are always appended. The default
    /// reads the whole history; stores keep an index instead.
    async fn append_once(&self, id: &SessionId, entry: EntryBody) -> Result<bool, SessionError> {
        if let Some(key) = entry.proactive_id()
            && self
                .entries(id)
                .await?
                .iter()
                .any(|e| e.body.proactive_id() == Some(key))
        {
            return Ok(false);
        }
        self.append(id, vec![entry]).await?;
        Ok(true)
    }

    /// Forgets what the store keeps in memory for session `id` (caches,
    /// open files) when nothing is using it; the session is read again on
    /// its next use. Answers whether it was unloaded. The app calls it for
    /// the least recently used idle sessions when more than its limit are
    /// loaded. The default keeps everything (stores with no per-session
    /// memory to give back).
    async fn unload(&self, id: &SessionId) -> bool {
        let _ = id;
        false
    }

    /// How many sessions the store holds in memory, when it keeps track.
    fn loaded(&self) -> Option<usize> {
        None
    }

    /// The session's metadata, creating the session from `new` when it does
    /// not exist; `true` when it was created. An existing session keeps its
    /// own agent whatever `new` says (R-WEB-3).
    async fn get_or_create(&self, new: NewSession) -> Result<(SessionMeta, bool), SessionError> {
        if let Some(meta) = self.get(&new.id).await? {
            return Ok((meta, false));
        }
        let id = new.id.clone();
        match self.create(new).await {
            Ok(meta) => Ok((meta, true)),
            Err(e) if e.is_already_exists() => match self.get(&id).await? {
                Some(meta) => Ok((meta, false)),
                None => Err(SessionError::not_found(&id)),
            },
            Err(e) => Err(e),
        }
    }

    /// The sessions whose agent `is_known` does not recognise, each logged
    /// with a warning. The stores know no agents; the app layer calls this
    /// at start-up with its registry's lookup, and
    /// [`SessionMeta::check_agent`] when it opens one session.
    async fn unknown_agents(
        &self,
        is_known: &(dyn for<'a> Fn(&'a str) -> bool + Send + Sync),
    ) -> Result<Vec<SessionMeta>, SessionError> {
        let unknown: Vec<SessionMeta> = self
            .list()
            .await?
            .into_iter()
            .filter(|m| !is_known(&m.agent_id))
            .collect();
        for meta in &unknown {
            tracing::warn!(
                session_id = %meta.id,
                agent_id = %meta.agent_id,
                "session store: session {} belongs to agent {:?}, which is not defined",
                meta.id,
                meta.agent_id
            );
        }
        Ok(unknown)
    }
}

/// What a new session is: its id, agent, kind and title.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NewSession {
    /// The id.
    pub id: SessionId,
    /// The agent it belongs to.
    pub agent_id: String,
    /// What the session is for.
    pub kind: SessionKind,
    /// The delegating agent (peer sessions).
    pub caller: Option<String>,
    /// The agent delegated to (peer sessions; equal to `agent_id`).
    pub callee: Option<String>,
    /// An initial title.
    pub title: Option<String>,
    /// Where a sub-agent's run started (sub sessions).
    pub sub: Option<SubOrigin>,
}

impl NewSession {
    /// A person's session `id` with `agent_id`.
    pub fn user(id: SessionId, agent_id: impl Into<String>) -> Self {
        Self {
            id,
            agent_id: agent_id.into(),
            kind: SessionKind::User,
            caller: None,
            callee: None,
            title: None,
            sub: None,
        }
    }

    /// A peer session `id` in which `caller` delegates to `callee`, the
    /// session's agent.
    pub fn peer(id: SessionId, caller: impl Into<String>, callee: impl Into<String>) -> Self {
        let callee = callee.into();
        Self {
            id,
            agent_id: callee.clone(),
            kind: SessionKind::Peer,
            caller: Some(caller.into()),
            callee: Some(callee),
            title: None,
            sub: None,
        }
    }

    /// A scheduled job's session `id` of `agent_id` (read-only for people).
    pub fn job(id: SessionId, agent_id: impl Into<String>) -> Self {
        Self {
            kind: SessionKind::Job,
            ..Self::user(id, agent_id)
        }
    }

    /// An MCP client's session `id` with `agent_id`, where the client's
    /// calls of `ask_<agent>` run (read-only for people).
    pub fn mcp(id: SessionId, agent_id: impl Into<String>) -> Self {
        Self {
            kind: SessionKind::Mcp,
            ..Self::user(id, agent_id)
        }
    }

    /// The session `id` recording one run of a sub-agent of `agent_id`
    /// (read-only for people): the parent agent is both caller and callee.
    pub fn sub(id: SessionId, agent_id: impl Into<String>, origin: SubOrigin) -> Self {
        let agent_id = agent_id.into();
        Self {
            kind: SessionKind::Sub,
            caller: Some(agent_id.clone()),
            callee: Some(agent_id.clone()),
            sub: Some(origin),
            ..Self::user(id, agent_id)
        }
    }

    /// Sets the initial title.
    pub fn with_title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// Checks the agent ids and the title, and builds the metadata of the
    /// session created at `now`.
    pub(crate) fn into_meta(self, now: Timestamp) -> Result<SessionMeta, SessionError> {
        validate_agent_id(&self.agent_id)?;
        for agent in [&self.caller, &self.callee].into_iter().flatten() {
            validate_agent_id(agent)?;
        }
        let peer_ok = self.caller.is_some() && self.callee.as_deref() == Some(self.agent_id.as_str());
        let user_ok = self.caller.is_none() && self.callee.is_none();
        let consistent = match self.kind {
            SessionKind::Peer | SessionKind::Sub => peer_ok,
            SessionKind::User | SessionKind::Job | SessionKind::Mcp => user_ok,
        };
        if !consistent {
            return Err(SessionError::InvalidAgentId {
                agent_id: format!("{:?}", self.agent_id),
                reason: "a peer session needs a caller and the session's agent as callee; a user session has neither",
            });
        }
        Ok(SessionMeta {
            id: self.id,
            agent_id: self.agent_id,
            title: normalize_title(self.title)?,
            created_at: now,
            updated_at: now,
            parent_id: None,
            kind: self.kind,
            caller: self.caller,
            callee: self.callee,
            sub: self.sub,
        })
    }
}

/// The metadata of `child`, forked from `parent` at `now`.
pub(crate) fn fork_meta(parent: &SessionMeta, child: SessionId, now: Timestamp) -> SessionMeta {
    SessionMeta {
        id: child,
        agent_id: parent.agent_id.clone(),
        title: parent.title.clone(),
        created_at: now,
        updated_at: now,
        parent_id: Some(parent.id.clone()),
        kind: SessionKind::User,
        caller: None,
        callee: None,
        sub: None,
    }
}

/// A title trimmed, `None` when blank; too long or multi-line titles are refused.
pub(crate) fn normalize_title(title: Option<String>) -> Result<Option<String>, SessionError> {
    let Some(title) = title else { return Ok(None) };
    let trimmed = title.trim();
    if trimmed.is_empty() {
        return Ok(None);
    }
    if char_len(trimmed) > MAX_TITLE_CHARS {
        return Err(SessionError::InvalidTitle {
            reason: "it is longer than 200 characters",
        });
    }
    if trimmed.chars().any(char::is_control) {
        return Err(SessionError::InvalidTitle {
            reason: "it contains a line break or another control character",
        });
    }
    Ok(Some(trimmed.to_owned()))
}

/// The time now by `clock`.
pub(crate) fn now(clock: &dyn Clock) -> Timestamp {
    Timestamp::from_system_time(clock.now())
}

/// How hard the JSONL store works to keep a turn's entries through a crash
/// of the machine (a crash of the process alone never loses a completed
/// append: the entries are in the operating system's cache).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// `fsync` the session file at the end of every turn
    /// ([`SessionStore::sync`]): a turn that ended survives a power loss. Costs
    /// one `fsync` per turn, from well under a millisecond on an SSD to tens
    /// of milliseconds on a disk. The default.
    #[default]
    EndOfTurn,
    /// Never `fsync` entries: the operating system writes them back within
    /// seconds. A power loss or kernel crash can lose the last turns; a
    /// process crash loses nothing. For tests, benchmarks and throwaway homes.
    Never,
}
