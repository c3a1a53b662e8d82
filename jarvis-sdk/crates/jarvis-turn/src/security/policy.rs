//! [`SessionPolicy`]: the standard input policy.

use async_trait::async_trait;

use super::{Caller, SecurityError, SecurityInput, SecurityStage};

/// Only `user` sessions are a person's to write: peer sessions
/// (`peer-<caller>-<callee>`) are written by the calling agent, job sessions
/// by the scheduler, MCP and sub-agent sessions by their callers; people may
/// open and read them, not prompt in them. Everything else passes;
/// tool-level policy (allow-lists, `boundaries`) is the tool gate's job.
#[derive(Debug, Default, Clone, Copy)]
pub struct SessionPolicy;

#[async_trait]
impl SecurityStage for SessionPolicy {
    fn name(&self) -> &str {
        "session-policy"
    }

    async fn check(&self, input: &mut SecurityInput) -> Result<(), SecurityError> {
        let read_only = input.peer_session || input.session_kind.is_read_only();
        if read_only && matches!(input.caller, Caller::Local | Caller::Web { .. }) {
            return Err(SecurityError::Forbidden(format!(
                "{} is a {} session, written by Jarvis itself; it can be read but not written",
                input.session_id,
                if input.peer_session {
                    "peer"
                } else {
                    input.session_kind.as_str()
                }
            )));
        }
        Ok(())
    }
}
