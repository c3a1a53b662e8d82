//! The core layer: `AgentSession` directs one turn (security pipeline →
//! thinking → harness → loop); the input [`security`] pipeline, the real
//! tool-gate stages (the per-agent [`AgentToolPolicy`] and the per-session
//! [`ApprovalBroker`] with layered rules) live here.
//!
//! It sits above `agent` and below `app`: it may use `agent`, `memory`,
//! `model` and `common`, never `app`.

pub(crate) mod approval;
pub(crate) mod security;
mod tool_policy;

pub use approval::{
    ApprovalBroker, ApprovalError, ApprovalRule, Attachment, DEFAULT_APPROVAL_TIMEOUT, LayeredApprovalRules,
    RuleDecision, RuleSource,
};
pub use security::{
    Caller, SecurityError, SecurityInput, SecurityPipeline, SecurityStage, SessionPolicy, Slot, TokenAuth,
    Validation, ValidationConfig, html_escape,
};
pub use tool_policy::{AgentToolPolicy, Boundaries};
