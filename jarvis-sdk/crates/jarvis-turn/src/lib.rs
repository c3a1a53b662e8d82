//! The turn layer: the turn orchestrator [`AgentSession`] directs one turn
//! (security pipeline → thinking → harness → loop) and is the one way a turn
//! runs. Around it: the input security pipeline ([`SecurityPipeline`]), the real tool-gate
//! stages (the per-agent [`AgentToolPolicy`] and the per-session
//! [`ApprovalBroker`] with layered rules), the per-session [`Sandbox`] and
//! the built-in tools ([`builtin_tools`]), the memory tools every agent gets
//! ([`memory_tools`]), the web tools (`web_fetch`, `web_search`), the MCP
//! client supervisor (`McpHub`, feature `mcp`), delegation between
//! agents ([`AskAgentTool`]), [`cassette`]s and the [`UsageLedger`] of every
//! turn's tokens and cost.
//!
//! It sits above `agent` and below `initiative` and `app`: it may use
//! `agent`, `memory`, `model` and `common`. What the turn needs from the
//! features above it comes in through traits: slash commands
//! ([`SlashCommands`]) and where a background answer goes when no screen
//! sees it ([`AnswerNotifier`]).

pub(crate) mod approval;
mod ask;
pub mod cassette;
mod commands;
mod mcp;
mod memory_tools;
mod orchestrator;
mod sandbox;
pub(crate) mod security;
pub(crate) mod supervise;
mod tool_policy;
mod tools;
mod usage;

pub use approval::{
    AgentApprover, ApprovalBroker, ApprovalError, ApprovalRule, Attachment, DEFAULT_APPROVAL_TIMEOUT,
    LayeredApprovalRules, RuleDecision, RuleSource, SharedRuleStore,
};
pub use ask::{
    AgentDirectory, AskAgentArgs, AskAgentTool, DEFAULT_ASK_TIMEOUT, Delegation, DelegationChain,
    DelegationError, DirectoryLink, MAX_CHAIN, PEER_REQUEST_RULE, RosterEntry, bigram_jaccard, is_bounce,
};
pub use commands::{CommandContext, SlashCommands, parse_command};
pub use mcp::{
    DEFAULT_MCP_CALL_TIMEOUT, MAX_TOOL_NAME, MCP_CONFIG_FILE, McpApproval, McpServerConfig, McpTransport,
    assign_tool_names, is_mcp_name, load_mcp_file, mcp_tool_name, parse_agent_servers, parse_mcp_file,
    pattern_matches, valid_server_name,
};
#[cfg(feature = "mcp")]
pub use mcp::{
    MCP_FIRST_BACKOFF, MCP_MAX_BACKOFF, MCP_START_TIMEOUT, McpHub, McpServeError, McpServer, McpServerState,
    McpServerStatus, McpTool, McpToolInfo, bridge_mcp_stdio,
};
pub use memory_tools::{
    RECALL_EPISODES_TOOL, REMEMBER_TASK_PATTERN_TOOL, memory_tools, register_memory_tools,
};
pub use orchestrator::{
    AgentSession, AgentSessionParts, AnswerNotifier, DualConfig, DualReply, PromptOptions, RECENT_TURNS,
    SessionAttachment, TurnError,
};
pub use sandbox::{
    DirEntryInfo, DirListing, EntryKind, FileContent, MAX_COMPONENT_LEN, MAX_PATH_LEN, Sandbox, SandboxError,
    validate_session_id,
};
pub use security::{
    Caller, SecurityError, SecurityInput, SecurityPipeline, SecurityStage, SessionPolicy, Slot, TokenAuth,
    Validation, ValidationConfig, html_escape,
};
pub use supervise::{Supervisor, TaskHealth, TaskStatus, panic_text};
pub use tool_policy::{AgentToolPolicy, Boundaries};
pub use tools::{
    BuiltinConfig, Confinement, DEFAULT_COMMAND_TIMEOUT, DEFAULT_LIST_CAP, DEFAULT_OUTPUT_CAP,
    DEFAULT_READ_CAP, DEFAULT_WRITE_CAP, SandboxSettings, builtin_tools, kernel_confinement,
    register_builtin_tools,
};
pub use tools::{
    DEFAULT_SEARCH_RESULTS, DEFAULT_WEB_FETCH_MAX_BYTES, DEFAULT_WEB_FETCH_MAX_CHARS,
    DEFAULT_WEB_FETCH_MAX_REDIRECTS, DEFAULT_WEB_TIMEOUT, MAX_SEARCH_RESULTS, SearchProvider,
    WEB_FETCH_ALLOW_PRIVATE_ENV, WEB_FETCH_TOOL, WEB_SEARCH_API_KEY_ENV, WEB_SEARCH_BASE_URL_ENV,
    WEB_SEARCH_PROVIDER_ENV, WEB_SEARCH_TOOL, WebFetchSettings, WebSearchSettings, non_public_address_kind,
};
#[cfg(feature = "http")]
pub use tools::{WebFetchArgs, WebFetchTool, WebSearchArgs, WebSearchTool, web_fetch_tool, web_search_tool};
pub use usage::{Spent, USAGE_FILE, UsageBy, UsageError, UsageLedger, UsageMeter, UsageRow, UsageSummary};
