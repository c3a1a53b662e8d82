//! [`MemoryError`]: failures of the memory layer.

use std::path::PathBuf;

use jarvis_model::ProviderError;

/// The boxed error of a database driver or another lower-level failure.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A failure of the memory layer: a [`MemoryStore`](super::MemoryStore),
/// the [`MemoryService`](super::MemoryService), the user-model file or the
/// procedure files.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// A memory with no text was written.
    #[error("memory: refused to write an empty memory (source {source_name:?})")]
    EmptyText {
        /// The write path it came from.
        source_name: String,
    },
    /// A memory contains something the user asked to forget.
    #[error(
        "memory: refused to write a memory that contains something the user asked to forget (source {source_name:?})"
    )]
    Forgotten {
        /// The write path it came from.
        source_name: String,
    },
    /// A text to forget is too short to forget safely.
    #[error(
        "memory: will not forget a text shorter than {min} characters (every fact containing it would be refused)"
    )]
    ForgetTooShort {
        /// The fewest characters allowed.
        min: usize,
    },
    /// A name (a procedure, a task pattern) that is not allowed.
    #[error("memory: invalid {what} name {name}: {reason}")]
    InvalidName {
        /// What was being named: `procedure`, `task pattern`.
        what: &'static str,
        /// The name, quoted and shortened.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An agent id that cannot name a scope or a directory.
    #[error("memory: invalid agent id {agent_id}: {reason}")]
    InvalidAgentId {
        /// The id, quoted and shortened.
        agent_id: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A `memory.read` entry names agents nobody defined.
    #[error("memory: memory.read of agent {agent_id:?} names unknown agents: {unknown}")]
    UnknownAgents {
        /// The agent whose definition lists them.
        agent_id: String,
        /// The unknown names, comma-separated.
        unknown: String,
    },
    /// The embedder failed.
    #[error("memory: the embedder failed")]
    Embed(#[source] ProviderError),
    /// A file (user model, procedure) could not be read or written.
    #[error("memory: cannot {op} {path}")]
    File {
        /// What was being done: `read`, `write`, `list`.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The user-model file exists but is not a user model; it is left as it
    /// is rather than overwritten.
    #[error(
        "memory: the user model {path} is damaged ({reason}); it is left as it is until fixed or removed"
    )]
    DamagedUserModel {
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        reason: String,
    },
    /// Something needs `JARVIS_HOME` and the service was built without one.
    #[error("memory: no JARVIS_HOME was configured, so there is no {what}")]
    NoHome {
        /// What is missing: `user model`, `procedure directory`.
        what: &'static str,
    },
    /// The database cannot be reached.
    #[error("memory store (postgres): cannot reach the database at {target}")]
    Unreachable {
        /// Host, port and database, never the password.
        target: String,
        /// The cause.
        #[source]
        source: BoxError,
    },
    /// A store of the embedding app (a custom [`MemoryStore`](super::MemoryStore))
    /// failed; the text says what and where.
    #[error("memory store: {0}")]
    Store(String),
    /// The SQLite memory database failed.
    #[error("memory store (sqlite): cannot {op} {path}")]
    Sqlite {
        /// What was being done (`open`, `write a memory to`, …).
        op: &'static str,
        /// The database file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: BoxError,
    },
    /// The SQLite memory database is open in another process or store,
    /// which holds it exclusively.
    #[error(
        "memory store (sqlite): {path} is in use by another process or store (it is held exclusively); stop that one first"
    )]
    SqliteLocked {
        /// The database file.
        path: PathBuf,
    },
    /// The SQLite memory database is damaged, or is not a memory database;
    /// it is left as it is.
    #[error(
        "memory store (sqlite): {path} is damaged or not a memory database ({reason}); it is left as it is: move it away to start with empty memory, or restore a copy"
    )]
    SqliteDamaged {
        /// The database file.
        path: PathBuf,
        /// What was found.
        reason: String,
    },
    /// The memory database was written by a newer version; it is left as it
    /// is.
    #[error(
        "memory store (sqlite): {path} has schema version {found}, newer than version {supported} which this build knows; use a newer Jarvis"
    )]
    SchemaTooNew {
        /// The database file.
        path: PathBuf,
        /// The version found.
        found: i64,
        /// The newest version this build reads.
        supported: i64,
    },
    /// A database operation failed.
    #[error("memory store (postgres): database error while trying to {op}")]
    Database {
        /// What was being done.
        op: &'static str,
        /// The cause.
        #[source]
        source: BoxError,
    },
}

/// `s` quoted and cut to 64 characters, for error messages.
pub(crate) fn printable(s: &str) -> String {
    let short: String = s.chars().take(64).collect();
    if short.len() < s.len() {
        format!("{short:?}…")
    } else {
        format!("{short:?}")
    }
}
