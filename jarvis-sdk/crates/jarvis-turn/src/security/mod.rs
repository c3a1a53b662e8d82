//! The input security pipeline (SPEC.md §7.1): every input passes
//! validation → authentication → policy, in that fixed order.
//!
//! Each slot holds a replaceable [`SecurityStage`]; the order cannot change
//! and no slot can be left out or skipped. All three stages always run (also
//! after a rejection, so every stage sees and logs every input) and the
//! first rejection decides.
//!
//! The type leaves no way to build a pipeline without all three slots:
//!
//! ```compile_fail
//! use jarvis_turn::{SecurityPipeline, Validation, TokenAuth};
//! use std::sync::Arc;
//! // Every slot is required: there is no two-stage pipeline.
//! let p = SecurityPipeline::new(Arc::new(Validation::default()), Arc::new(TokenAuth::default()));
//! ```
//!
//! nor to reach in and reorder or drop its stages:
//!
//! ```compile_fail
//! use jarvis_turn::SecurityPipeline;
//! let mut p = SecurityPipeline::default();
//! std::mem::swap(&mut p.validation, &mut p.policy); // the slots are private
//! ```

mod auth;
mod error;
mod policy;
mod validation;

pub use auth::TokenAuth;
pub use error::SecurityError;
pub use policy::SessionPolicy;
pub use validation::{Validation, ValidationConfig, html_escape};

use async_trait::async_trait;
use tracing::Instrument;

use jarvis_common::trace;
use std::fmt;
use std::sync::Arc;

/// Who sent an input.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Caller {
    /// The person at this machine (terminal, in-process embedding).
    Local,
    /// A web client, with the token it presented.
    Web {
        /// The presented token.
        token: Option<String>,
    },
    /// Another agent delegating a task (`ask_agent`).
    Peer {
        /// The calling agent's id.
        agent_id: String,
    },
    /// An MCP client calling an agent's `ask_<agent>` tool. Its transport
    /// authenticated it: stdio is the local person's own process, and the
    /// web server's `/mcp` checks the token before any request reaches the
    /// team.
    Mcp {
        /// The client's name, as it introduced itself (`clientInfo.name`).
        client: String,
    },
    /// Jarvis itself: the scheduler, reflection, proactive messages.
    System {
        /// Which component.
        name: String,
    },
}

impl fmt::Debug for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Caller::Local => f.write_str("Local"),
            Caller::Web { token } => f
                .debug_struct("Web")
                .field("token", &token.as_ref().map(|_| "<redacted>"))
                .finish(),
            Caller::Peer { agent_id } => f.debug_struct("Peer").field("agent_id", agent_id).finish(),
            Caller::Mcp { client } => f.debug_struct("Mcp").field("client", client).finish(),
            Caller::System { name } => f.debug_struct("System").field("name", name).finish(),
        }
    }
}

/// One input on its way through the pipeline. Stages may rewrite `text`
/// (validation normalises it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecurityInput {
    /// What was said.
    pub text: String,
    /// Who said it.
    pub caller: Caller,
    /// The agent of the target session.
    pub agent_id: String,
    /// The target session.
    pub session_id: String,
    /// Whether the target is a peer session (`peer-<caller>-<callee>`).
    pub peer_session: bool,
    /// What the target session is for; every kind but `user` is read-only
    /// for people.
    pub session_kind: jarvis_agent::SessionKind,
}

impl SecurityInput {
    /// Input from the local person to `session_id` of `agent_id`.
    pub fn local(
        text: impl Into<String>,
        agent_id: impl Into<String>,
        session_id: impl Into<String>,
    ) -> Self {
        Self {
            text: text.into(),
            caller: Caller::Local,
            agent_id: agent_id.into(),
            session_id: session_id.into(),
            peer_session: false,
            session_kind: jarvis_agent::SessionKind::User,
        }
    }
}

/// One stage's check of an input.
#[async_trait]
pub trait SecurityStage: Send + Sync {
    /// The stage's name, for logs.
    fn name(&self) -> &str;
    /// Checks (and may normalise) the input.
    async fn check(&self, input: &mut SecurityInput) -> Result<(), SecurityError>;
}

/// The three slots of the pipeline, in their fixed order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// Validation: empty, length, script patterns, NFC.
    Validation,
    /// Authentication: who is calling.
    Auth,
    /// Policy: may this caller do this.
    Policy,
}

impl Slot {
    /// `validation`, `auth` or `policy`.
    pub fn name(self) -> &'static str {
        match self {
            Slot::Validation => "validation",
            Slot::Auth => "auth",
            Slot::Policy => "policy",
        }
    }
}

/// validation → auth → policy; see the module docs.
#[derive(Clone)]
pub struct SecurityPipeline {
    validation: Arc<dyn SecurityStage>,
    auth: Arc<dyn SecurityStage>,
    policy: Arc<dyn SecurityStage>,
}

impl fmt::Debug for SecurityPipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecurityPipeline")
            .field("validation", &self.validation.name())
            .field("auth", &self.auth.name())
            .field("policy", &self.policy.name())
            .finish()
    }
}

impl Default for SecurityPipeline {
    /// The standard stages: [`Validation`] with a 10,000-character limit,
    /// [`TokenAuth`] with no token, [`SessionPolicy`].
    fn default() -> Self {
        Self::new(
            Arc::new(Validation::default()),
            Arc::new(TokenAuth::default()),
            Arc::new(SessionPolicy),
        )
    }
}

impl SecurityPipeline {
    /// A pipeline with these three stages, which run in this order.
    pub fn new(
        validation: Arc<dyn SecurityStage>,
        auth: Arc<dyn SecurityStage>,
        policy: Arc<dyn SecurityStage>,
    ) -> Self {
        Self {
            validation,
            auth,
            policy,
        }
    }

    /// The same pipeline with another validation stage.
    pub fn with_validation(mut self, stage: Arc<dyn SecurityStage>) -> Self {
        self.validation = stage;
        self
    }

    /// The same pipeline with another auth stage.
    pub fn with_auth(mut self, stage: Arc<dyn SecurityStage>) -> Self {
        self.auth = stage;
        self
    }

    /// The same pipeline with another policy stage.
    pub fn with_policy(mut self, stage: Arc<dyn SecurityStage>) -> Self {
        self.policy = stage;
        self
    }

    /// Runs all three stages in order; the first rejection decides. On
    /// success, returns the input as the stages left it (normalised).
    pub async fn run(&self, mut input: SecurityInput) -> Result<SecurityInput, SecurityError> {
        let mut first: Option<SecurityError> = None;
        for (slot, stage) in [
            (Slot::Validation, &self.validation),
            (Slot::Auth, &self.auth),
            (Slot::Policy, &self.policy),
        ] {
            let span = trace::security_span(slot.name(), stage.name());
            match stage.check(&mut input).instrument(span.clone()).await {
                Ok(()) => {
                    tracing::debug!(?slot, stage = stage.name(), session = %input.session_id, "security stage passed")
                }
                Err(error) => {
                    trace::record_error(&span, "rejected");
                    tracing::info!(?slot, stage = stage.name(), session = %input.session_id, %error, "security stage rejected");
                    first.get_or_insert(error);
                }
            }
        }
        match first {
            Some(error) => Err(error),
            None => Ok(input),
        }
    }
}
