//! The core layer: `AgentSession` directs one turn (security pipeline →
//! thinking → harness → loop); the input [`security`] pipeline, the real
//! tool-gate stages (the per-agent [`AgentToolPolicy`] and the per-session
//! [`ApprovalBroker`] with layered rules) live here.
//!
//! It sits above `agent` and below `app`: it may use `agent`, `memory`,
//! `model` and `common`, never `app`. The per-session [`Sandbox`] and the
//! built-in tools ([`builtin_tools`]) live here too, and so do the memory
//! tools every agent gets ([`memory_tools`]).

pub(crate) mod approval;
mod memory_tools;
mod sandbox;
pub(crate) mod security;
mod tool_policy;
mod tools;

pub use approval::{
    ApprovalBroker, ApprovalError, ApprovalRule, Attachment, DEFAULT_APPROVAL_TIMEOUT, LayeredApprovalRules,
    RuleDecision, RuleSource,
};
pub use memory_tools::{
    RECALL_EPISODES_TOOL, REMEMBER_TASK_PATTERN_TOOL, memory_tools, register_memory_tools,
};
pub use sandbox::{
    DirEntryInfo, DirListing, EntryKind, FileContent, MAX_COMPONENT_LEN, MAX_PATH_LEN, Sandbox, SandboxError,
    validate_session_id,
};
pub use security::{
    Caller, SecurityError, SecurityInput, SecurityPipeline, SecurityStage, SessionPolicy, Slot, TokenAuth,
    Validation, ValidationConfig, html_escape,
};
pub use tool_policy::{AgentToolPolicy, Boundaries};
pub use tools::{
    BuiltinConfig, DEFAULT_COMMAND_TIMEOUT, DEFAULT_LIST_CAP, DEFAULT_OUTPUT_CAP, DEFAULT_READ_CAP,
    DEFAULT_WRITE_CAP, builtin_tools, register_builtin_tools,
};
