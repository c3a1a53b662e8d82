//! `jarvis mcp …`: the team and MCP. `jarvis mcp serve` serves the team to
//! an MCP client (Claude Desktop and the like) on stdin and stdout: one
//! tool per agent, `ask_<agent_id> {request}`; `jarvis mcp list` shows the
//! MCP servers the team uses, their state and tools.
//!
//! When a server already runs for this home (`server.json` and its
//! `/healthz`), it holds the home, so `serve` bridges stdio to that
//! server's `/mcp` with the token (`JARVIS_WEB__TOKEN`); otherwise it
//! assembles the app and holds the home lock while it runs. stdout carries
//! MCP messages only: every log line and notice goes to stderr.

use clap::Subcommand;
use std::process::ExitCode;

use crate::home;
use crate::serve::shutdown_signal;

/// What `jarvis mcp` does.
#[derive(Debug, Subcommand)]
pub(crate) enum McpCommand {
    /// Serve the team as an MCP server on stdin and stdout, for a desktop
    /// MCP client (through the running server when there is one).
    Serve,
    /// List the MCP servers the team uses (`mcp.yaml` and the
    /// definitions), their state and tools.
    List,
}

/// Runs `command`.
pub(crate) async fn run(command: McpCommand) -> anyhow::Result<ExitCode> {
    match command {
        McpCommand::Serve => serve().await,
        McpCommand::List => crate::lists::mcp_servers().await,
    }
}

/// `jarvis mcp serve`: until the client closes stdin, or Ctrl-C / SIGTERM.
async fn serve() -> anyhow::Result<ExitCode> {
    let config = home::config_from_env()?;
    if let Some(client) = home::running_server(&config).await {
        tracing::info!(
            server = client.base_url(),
            "a Jarvis server runs for this home: serving MCP through its /mcp"
        );
        client.bridge_mcp_stdio(shutdown_signal()).await?;
        return Ok(ExitCode::SUCCESS);
    }
    let app = home::assemble(config).await?;
    if app.is_demo() {
        tracing::warn!("{}", jarvis_server::DEMO_HELP);
    } else if let Some(notice) = app.notice() {
        tracing::info!("model: {notice}");
    }
    jarvis_sdk::app::serve_mcp_stdio(app, shutdown_signal()).await?;
    Ok(ExitCode::SUCCESS)
}
