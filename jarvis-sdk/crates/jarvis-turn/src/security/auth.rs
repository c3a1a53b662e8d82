//! [`TokenAuth`]: identifies the caller; web callers must present the
//! configured token (`JARVIS_WEB__TOKEN`) when there is one.

use async_trait::async_trait;
use std::collections::BTreeSet;

use super::{Caller, SecurityError, SecurityInput, SecurityStage};

/// The standard auth stage.
///
/// - the local person, MCP clients (their transport authenticated them) and
///   Jarvis's own components pass;
/// - a web client passes when no token is configured (the server binds to
///   127.0.0.1 by default), or when it presents the configured token
///   (compared in constant time);
/// - a peer agent passes when it is one of the known agents (or when no
///   list is set).
#[derive(Clone, Default)]
pub struct TokenAuth {
    token: Option<String>,
    agents: Option<BTreeSet<String>>,
}

impl std::fmt::Debug for TokenAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenAuth")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("agents", &self.agents)
            .finish()
    }
}

impl TokenAuth {
    /// Requires web callers to present `token` (`None`: no token required).
    pub fn new(token: Option<String>) -> Self {
        Self {
            token: token.filter(|t| !t.is_empty()),
            agents: None,
        }
    }

    /// Accepts peer callers only from these agents.
    pub fn with_agents(mut self, agents: impl IntoIterator<Item = String>) -> Self {
        self.agents = Some(agents.into_iter().collect());
        self
    }
}

/// Equal lengths and bytes, without an early exit on the first difference.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[async_trait]
impl SecurityStage for TokenAuth {
    fn name(&self) -> &str {
        "token-auth"
    }

    async fn check(&self, input: &mut SecurityInput) -> Result<(), SecurityError> {
        match &input.caller {
            Caller::Local | Caller::Mcp { .. } | Caller::System { .. } => Ok(()),
            Caller::Web { token: presented } => match (&self.token, presented) {
                (None, _) => Ok(()),
                (Some(_), None) => Err(SecurityError::Unauthenticated(
                    "this server requires a token".into(),
                )),
                (Some(expected), Some(given)) if constant_time_eq(expected.as_bytes(), given.as_bytes()) => {
                    Ok(())
                }
                (Some(_), Some(_)) => Err(SecurityError::Unauthenticated("the token is not valid".into())),
            },
            Caller::Peer { agent_id } => match &self.agents {
                Some(known) if !known.contains(agent_id) => Err(SecurityError::Unauthenticated(format!(
                    "{agent_id:?} is not an agent of this team"
                ))),
                _ => Ok(()),
            },
        }
    }
}
