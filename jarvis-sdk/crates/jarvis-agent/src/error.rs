//! [`AgentError`]: failures of the agent layer itself (not of the model,
//! which end a turn with an `agent_error` event instead).

use super::session::SessionError;

/// A failure of the agent layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The loop configuration cannot run (for example `max_turns = 0`).
    #[error("agent loop configuration error: {0}")]
    InvalidConfig(String),
    /// The session store failed or refused (the harness).
    #[error(transparent)]
    Session(#[from] SessionError),
}
