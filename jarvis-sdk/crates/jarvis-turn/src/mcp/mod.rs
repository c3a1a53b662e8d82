//! Tools from MCP servers: which servers to start
//! ([`config`](self::config): `$JARVIS_HOME/mcp.yaml` and a definition's
//! `mcp`), the names their tools go by ([`mcp_tool_name`]), one server's
//! supervisor and tools ([`McpServer`], [`McpTool`]) and the app's set of
//! them ([`McpHub`]). Reading the configuration and naming tools is always
//! compiled (definitions are checked the same way in every build); talking
//! to servers needs the feature `mcp`. The other direction, the team as an
//! MCP server, lives in the app layer; what it needs of no app, the stdio
//! bridge to a running server's `/mcp` ([`bridge_mcp_stdio`]), lives here.
//!
//! MCP tools are ordinary [`Tool`](crate::Tool)s to the loop: they reach an
//! agent through a [`ToolSource`](crate::ToolSource) (servers list their
//! tools after the app starts and may change them), and every call passes
//! the same gate as every other tool: `boundaries.never` and the allow-list
//! (the policy), plugin hooks, `boundaries.ask` (always asks), the approval
//! rule files, and last the server's `approval` setting, which is what the
//! tool's [`requires_approval`](crate::Tool::requires_approval) says.

#[cfg(feature = "mcp")]
mod bridge;
mod config;
#[cfg(feature = "mcp")]
mod http;
#[cfg(feature = "mcp")]
mod hub;
mod names;
#[cfg(feature = "mcp")]
mod supervisor;

#[cfg(feature = "mcp")]
pub use bridge::{McpServeError, bridge_mcp_stdio};
pub use config::{
    DEFAULT_MCP_CALL_TIMEOUT, MCP_CONFIG_FILE, McpApproval, McpServerConfig, McpTransport, load_mcp_file,
    parse_agent_servers, parse_mcp_file, valid_server_name,
};
#[cfg(feature = "mcp")]
pub use hub::McpHub;
pub(crate) use names::SEPARATOR;
pub use names::{MAX_TOOL_NAME, assign_tool_names, is_mcp_name, mcp_tool_name, pattern_matches};
#[cfg(feature = "mcp")]
pub use supervisor::{
    MCP_FIRST_BACKOFF, MCP_MAX_BACKOFF, MCP_START_TIMEOUT, McpServer, McpServerState, McpServerStatus,
    McpTool, McpToolInfo,
};
