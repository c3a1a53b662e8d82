//! The agent layer: the loop ([`run_agent_loop`]) with its overflow resume,
//! the events it pushes ([`AgentEvent`]) to a [`UIAdapter`], tools, the
//! tool-call gate, sessions ([`SessionStore`] and its stores) and the
//! [`Harness`] that runs one turn of a session.
//!
//! `agent` knows no vendor, no security stage and no HTTP: providers come in
//! as `Arc<dyn Provider>`, the real gate stages as trait objects. It is a
//! crate of its own over `jarvis-memory`, `jarvis-model` and
//! `jarvis-common`, so the compiler keeps it from the layers above;
//! `jarvis-sdk` re-exports it.

mod error;
mod event;
mod gate;
mod harness;
mod journal;
mod openloop;
mod run;
mod session;
mod tap;
mod thinking;
mod tool;
mod ui;

pub use error::AgentError;
pub use event::{AgentEvent, FinalMessage, MessageDelta, Notice, ProactiveKind, ScreenNotice, StopReason};
pub use gate::{
    AllowAll, ApprovalDecision, ApprovalRequest, Approver, BeforeToolCall, GateDecision, GateStage,
    GateVerdict, ToolCallInfo, ToolGate, ToolPolicy,
};
pub use harness::record_turn_outcome;
pub use harness::{Harness, HarnessConfig, TurnBrief, TurnOptions};
pub use journal::{
    INTERRUPTED_RESULT, JournalError, JournalStep, JournaledApproval, PendingTurn, TURN_JOURNAL_FILE,
    TurnBegin, TurnJournal, descendants,
};
#[cfg(feature = "postgres")]
pub use openloop::PostgresOpenLoopStore;
pub use openloop::{
    AgendaChanged, Detected, JUDGE_INSTRUCTION, JsonlOpenLoopStore, JudgeInput, Judgement, LoopError,
    LoopFilter, LoopJudge, LoopKind, MemoryOpenLoopStore, ModelJudge, NewLoop, OPEN_LOOPS_FILE, OpenLoop,
    OpenLoopStore, OpenLoops, RuleJudge, cancels, detect, due_time, has_cue,
};
pub use run::prompts;
pub use run::{
    AgentIdentity, AgentLoopConfig, Allowance, Budget, BudgetReached, LoopContext, LoopOutcome, LoopState,
    ModelSettings, TurnRecorder, UsageTally, UsageTotal, run_agent_loop,
};
pub use session::session_id_problem;
#[cfg(feature = "postgres")]
pub use session::{Claim, NodeOptions, PostgresSessionStore, lease};
pub use session::{
    Durability, ENTRY_SCHEMA_VERSION, EntryBody, JsonlOptions, JsonlSessionStore, LEGACY_AGENT_ID,
    LoadReport, MAX_AGENT_ID_LEN, MAX_SESSION_ID_LEN, MAX_TITLE_CHARS, MemorySessionStore, NewSession,
    SessionEntry, SessionError, SessionId, SessionKind, SessionMeta, SessionStore, SubOrigin,
    validate_agent_id,
};
pub use tap::TurnTap;
pub use thinking::{
    APPLIES_TO, DEFAULT_REFLECTION_TEMPLATE, DISTILL_INSTRUCTION, DISTILL_PROMPT, DistillConfig, Distiller,
    LearnError, ProcedureDraft, REFLECTION_INSTRUCTION, Reflection, ReflectionConfig, Reflector, parse_facts,
};
pub use thinking::{
    DEFAULT_THINK_THRESHOLD, DEFAULT_THOUGHT_TEMPLATE, FRAME_INSTRUCTION, NoThinking, Route, RouteFeatures,
    RouterSignals, ThinkingHook, ThinkingInput, ThinkingOutcome, ThoughtConfig, ThoughtDecision,
    ThoughtEngine, ThoughtFrame, ThoughtRouter, TurnReport,
};
pub use tool::{
    FINAL_TOOL_NAME, FinalArgs, FinalTool, MAX_SANDBOX_COMPONENT_LEN, MAX_SANDBOX_PATH_LEN, PreparedCall,
    ResolvedProgram, SandboxPathError, Tool, ToolContext, ToolError, ToolRegistry, ToolResult, ToolSource,
    Typed, TypedTool, normalize_sandbox_path, prepare_call, schema_for,
};
pub use ui::{FanoutAdapter, HubAttachment, NoopAdapter, ScreenHub, UIAdapter};
