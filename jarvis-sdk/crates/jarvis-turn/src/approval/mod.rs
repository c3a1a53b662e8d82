//! Approvals: the per-session [`ApprovalBroker`] (the tool gate's approval
//! stage) and the [`LayeredApprovalRules`] it consults and extends.

mod broker;
mod glob;
mod rules;

pub use broker::{AgentApprover, ApprovalBroker, Attachment, DEFAULT_APPROVAL_TIMEOUT};
pub use rules::{
    ApprovalError, ApprovalRule, LayeredApprovalRules, RuleDecision, RuleSource, SharedRuleStore,
};
