//! The core layer: `AgentSession` directs one turn (security pipeline →
//! thinking → harness → loop); the input [`security`] pipeline, the real
//! tool-gate stages and the approval broker live here.
//!
//! It sits above `agent` and below `app`: it may use `agent`, `memory`,
//! `model` and `common`, never `app`.

pub(crate) mod security;

pub use security::{
    Caller, SecurityError, SecurityInput, SecurityPipeline, SecurityStage, SessionPolicy, Slot, TokenAuth,
    Validation, ValidationConfig, html_escape,
};
