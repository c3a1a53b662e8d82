//! The agent layer: the loop ([`run_agent_loop`]) with its overflow resume,
//! the events it pushes ([`AgentEvent`]) to a [`UIAdapter`], tools and the
//! tool-call gate.
//!
//! `agent` knows no vendor, no security stage and no HTTP: providers come in
//! as `Arc<dyn Provider>`, the real gate stages as trait objects.

mod error;
mod event;
mod gate;
mod run;
mod tool;
mod ui;

pub use error::AgentError;
pub use event::{AgentEvent, FinalMessage, MessageDelta, StopReason};
pub use gate::{
    AllowAll, ApprovalDecision, ApprovalRequest, Approver, BeforeToolCall, GateDecision, GateStage,
    GateVerdict, ToolCallInfo, ToolGate, ToolPolicy,
};
pub use run::prompts;
pub use run::{AgentIdentity, AgentLoopConfig, LoopContext, LoopOutcome, ModelSettings, run_agent_loop};
pub use tool::{
    FINAL_TOOL_NAME, FinalArgs, FinalTool, Tool, ToolContext, ToolError, ToolRegistry, ToolResult, Typed,
    TypedTool, schema_for,
};
pub use ui::{FanoutAdapter, NoopAdapter, UIAdapter};
