//! [`SessionError`]: failures of the session stores.

use std::path::PathBuf;

use jarvis_common::HomeLockError;

/// The boxed error of a database driver.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A failure of a [`SessionStore`](super::SessionStore).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// A session id that is not allowed ([`SessionId`](super::SessionId)).
    #[error("session store: invalid session id {id}: {reason}")]
    InvalidId {
        /// The id, quoted and shortened.
        id: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An agent id that is not allowed.
    #[error("session store: invalid agent id {agent_id}: {reason}")]
    InvalidAgentId {
        /// The id, quoted and shortened.
        agent_id: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A title that is not allowed.
    #[error("session store: invalid title: {reason}")]
    InvalidTitle {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// No session has this id.
    #[error("session store: no session {id}")]
    NotFound {
        /// The id.
        id: String,
    },
    /// A session with this id exists already.
    #[error("session store: session {id} exists already")]
    AlreadyExists {
        /// The id.
        id: String,
    },
    /// The session's metadata names an agent the caller does not know.
    #[error("session store: session {session_id} belongs to agent {agent_id:?}, which is not defined")]
    UnknownAgent {
        /// The session.
        session_id: String,
        /// The agent its metadata names.
        agent_id: String,
    },
    /// A turn was asked of a session that belongs to another agent (R-SESS-1:
    /// a session's agent never changes).
    #[error("session store: session {session_id} belongs to agent {session_agent:?}, not {agent_id:?}")]
    WrongAgent {
        /// The session.
        session_id: String,
        /// The agent the session belongs to.
        session_agent: String,
        /// The agent that asked.
        agent_id: String,
    },
    /// One entry is larger than the store accepts.
    #[error("session store: an entry of session {id} is {bytes} bytes, more than the limit of {limit}")]
    EntryTooLarge {
        /// The session.
        id: String,
        /// The entry's size as stored.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// A session's metadata file cannot be read as metadata.
    #[error("session store: the metadata of session {id} in {path} is damaged")]
    CorruptMeta {
        /// The session.
        id: String,
        /// The metadata file.
        path: PathBuf,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// A write failed and could not be undone; the session refuses further
    /// writes until the store is opened again.
    #[error("session store: session {id} is unusable after a failed write; reopen the store")]
    Poisoned {
        /// The session.
        id: String,
    },
    /// The home directory is owned by another process.
    #[error("session store: cannot own the home directory")]
    Lock(#[from] HomeLockError),
    /// A file operation failed.
    #[error("session store: cannot {op} {path}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Entries could not be encoded.
    #[error("session store: cannot encode an entry")]
    Encode(#[source] serde_json::Error),
    /// The database could not be reached.
    #[error("session store (postgres): cannot reach the database at {target}")]
    Unreachable {
        /// Where it was looked for (host and port, never the password).
        target: String,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
    /// A database operation failed.
    #[error("session store (postgres): cannot {op}")]
    Database {
        /// What was being done.
        op: &'static str,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
    /// Another live node of the deployment owns the session: its turns run
    /// there (feature `postgres`, a store with a node).
    #[error("session store (postgres): session {id} is owned by node {node}")]
    OwnedElsewhere {
        /// The session.
        id: String,
        /// The node owning it.
        node: String,
    },
    /// A write carried a lease another node has taken over since: this
    /// node lost the session (it was paused or cut off for longer than its
    /// lease) and wrote nothing.
    #[error("session store (postgres): a write to session {id} was fenced off: node {owner} owns it now")]
    Fenced {
        /// The session.
        id: String,
        /// The node owning it now.
        owner: String,
    },
    /// A blocking task of the store was cancelled or panicked.
    #[error("session store: a background task failed")]
    Task(#[source] BoxError),
}

impl SessionError {
    /// Whether the session does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, SessionError::NotFound { .. })
    }

    /// Whether the session exists already.
    pub fn is_already_exists(&self) -> bool {
        matches!(self, SessionError::AlreadyExists { .. })
    }

    /// Whether the caller gave bad input (an id, agent id, title or entry
    /// the store refuses) rather than the store failing.
    pub fn is_invalid_input(&self) -> bool {
        matches!(
            self,
            SessionError::InvalidId { .. }
                | SessionError::InvalidAgentId { .. }
                | SessionError::InvalidTitle { .. }
                | SessionError::EntryTooLarge { .. }
        )
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| SessionError::Io { op, path, source }
    }

    /// The error for a session `id` that does not exist.
    pub fn not_found(id: &super::SessionId) -> Self {
        SessionError::NotFound {
            id: id.as_str().to_owned(),
        }
    }
}
