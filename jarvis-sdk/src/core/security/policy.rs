//! [`SessionPolicy`]: the standard input policy.

use async_trait::async_trait;

use super::{Caller, SecurityError, SecurityInput, SecurityStage};

/// Peer sessions (`peer-<caller>-<callee>`) are written only by the calling
/// agent: people may open and read them, not prompt in them. Everything
/// else passes; tool-level policy (allow-lists, `boundaries`) is the tool
/// gate's job.
#[derive(Debug, Default, Clone, Copy)]
pub struct SessionPolicy;

#[async_trait]
impl SecurityStage for SessionPolicy {
    fn name(&self) -> &str {
        "session-policy"
    }

    async fn check(&self, input: &mut SecurityInput) -> Result<(), SecurityError> {
        if input.peer_session && !matches!(input.caller, Caller::Peer { .. }) {
            return Err(SecurityError::Forbidden(format!(
                "{} is a conversation between agents; it can be read but not written",
                input.session_id
            )));
        }
        Ok(())
    }
}
