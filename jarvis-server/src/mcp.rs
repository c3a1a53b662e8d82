//! `/mcp`: the team as an MCP server over streamable HTTP (rmcp's
//! [`StreamableHttpService`] mounted in the router). Every request passes
//! `auth::guard` first, so `/mcp` has the API's rules: the token, the
//! origin rule and the `Host` rule. Each MCP session of a client (the
//! `Mcp-Session-Id` of the `initialize` handshake) is one
//! [`McpConnection`](jarvis_sdk::app::McpConnection), talking to each agent in a
//! session `mcp-<agent>-<n>` of its own; a stateless request (protocol
//! 2026-07-28) is a client of its own.

use jarvis_sdk::app::{McpConnection, McpTeamServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use crate::config::Limits;

/// How long an MCP session may go without a message before it is closed: a
/// call may wait this long for a person's approval.
const SESSION_IDLE: Duration = Duration::from_secs(30 * 60);

/// The service behind `/mcp`, one per server (it holds the MCP sessions).
#[derive(Clone)]
pub(crate) struct McpService(pub(crate) StreamableHttpService<McpConnection, LocalSessionManager>);

impl std::fmt::Debug for McpService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpService").finish_non_exhaustive()
    }
}

/// The service for `team`; its sessions and streams end when `stop` is
/// cancelled.
pub(crate) fn service(team: &McpTeamServer, stop: &CancellationToken, limits: &Limits) -> McpService {
    let team = team.clone();
    let config = StreamableHttpServerConfig::default()
        // `auth::guard` checks the Host (and the origin) for every route.
        .disable_allowed_hosts()
        .with_cancellation_token(stop.clone())
        .with_max_request_body_bytes(limits.max_body_bytes);
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(SESSION_IDLE);
    McpService(StreamableHttpService::new(
        move || Ok(team.connection()),
        Arc::new(sessions),
        config,
    ))
}
