//! The assembly layer (SPEC.md §10): [`AgentProfile`] (one agent's worth of
//! settings), team definitions, the [`AgentRegistry`], [`build_app`] and
//! [`AppAssembly`], the one assembly result every screen receives. Screens
//! never assemble agents themselves. With the feature `mcp`,
//! `McpTeamServer` serves the team to MCP clients. Domain packs plug in
//! through [`Pack`].
//!
//! It is the top layer of the SDK and may use every layer below it.

mod assembly;
mod cluster;
pub use cluster::{ClusterLink, NodeMessage, SessionRoute};
#[cfg(feature = "postgres")]
pub use cluster::{PgCluster, PostgresApprovalRules, PostgresJobs, PostgresSlotClaim};
mod config;
mod definition;
mod embedder;
mod error;
mod eval;
#[cfg(feature = "mcp")]
mod mcp_server;
#[cfg(feature = "otel")]
mod otel;
mod pack;
mod profile;
mod registry;
mod replay;
mod subagent;

#[cfg(feature = "mcp")]
pub use assembly::MCP_START_WAIT;
pub use assembly::{
    AppAssembly, REFLECTION_TEMPLATE_FILE, SessionObserver, THOUGHT_TEMPLATE_FILE, build_app,
};
pub use config::{
    AgendaSettings, AppConfig, BrandConfig, DEFAULT_MAX_LOADED_SESSIONS, JARVIS_SYSTEM_PROMPT, MemoryBackend,
    MemorySettings, NodeSettings, ReflectionSettings, StoreBackend, parse_utc_offset,
};
pub use definition::{
    ALWAYS_ATTACHED, MAIN_DEFINITION_KEYS, Skipped, TeamContext, apply_main_definition, load_team,
    parse_definition, seed_team_dir, valid_agent_id,
};
pub use embedder::{EMBEDDER_FILE, EmbedderChoice};
pub use error::AppError;
pub use eval::{
    CaseResult, EvalApprovals, EvalCase, EvalChecks, EvalError, EvalReport, EvalSuite, run_eval,
    run_eval_on_cassette,
};
#[cfg(feature = "mcp")]
pub use mcp_server::{ASK_TOOL_PREFIX, MCP_SHUTDOWN_GRACE, McpConnection, McpTeamServer, serve_mcp_stdio};
#[cfg(feature = "otel")]
pub use otel::{
    OTLP_ENDPOINT_ENV, OTLP_TRACES_ENDPOINT_ENV, OtelError, OtelGuard, OtelLayer, otel_layer,
    otel_layer_from_env,
};
pub use pack::{Pack, PackContext, PackParts};
pub use profile::{AgentProfile, MAIN_AGENT, Palette, ThinkingSettings, wordmark};
pub use registry::AgentRegistry;
pub use replay::{Difference, ReplayAgainst, ReplayReport, TurnReplay, replay_cassette};
pub use subagent::{
    DEFAULT_SUBAGENT_MAX_TURNS, MAX_SUBAGENT_DEPTH, RUN_SUBAGENT_TOOL, RunSubagentArgs, RunSubagentTool,
    SubagentBuilder, SubagentDefinition, SubagentRuntime, SubagentSpec, last_sub_number,
};
