//! [`AppError`]: why the app could not be assembled or a session opened.

use jarvis_agent::SessionError;
use jarvis_common::HomeLockError;
use jarvis_memory::MemoryError;

use jarvis_model::ProviderError;

/// An assembly-layer failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppError {
    /// The configuration cannot work.
    #[error("app configuration error: {0}")]
    Config(String),
    /// The model provider could not be set up.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// Another process owns `JARVIS_HOME`.
    #[error(transparent)]
    Home(#[from] HomeLockError),
    /// A session store failure.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The memory store failed while the app started.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// The scheduler could not start (its run ledger).
    #[error(transparent)]
    Schedule(#[from] jarvis_initiative::ScheduleError),
    /// No agent of the team has this id.
    #[error("app: there is no agent {0:?} in the team")]
    UnknownAgent(String),
    /// A file of the app could not be read or written.
    #[error("app: {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl AppError {
    /// Whether a session or agent was not found.
    pub fn is_not_found(&self) -> bool {
        matches!(self, AppError::UnknownAgent(_)) || matches!(self, AppError::Session(e) if e.is_not_found())
    }
}
