//! [`McpHub`]: every MCP server of the app, started together, stopped
//! together, and the tools each agent gets from them ([`McpHub::source_for`]).

use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use super::config::McpServerConfig;
use super::names::pattern_matches;
use super::supervisor::{McpServer, McpServerStatus};
use jarvis_agent::{Tool, ToolSource};

/// The app's MCP servers. Dropping the hub (or [`McpHub::shutdown`]) stops
/// them all.
#[derive(Debug)]
pub struct McpHub {
    servers: Vec<Arc<McpServer>>,
    shutdown: CancellationToken,
}

impl Default for McpHub {
    fn default() -> Self {
        Self::start(Vec::new())
    }
}

impl McpHub {
    /// Starts a supervisor for every server in `configs` (on the current
    /// runtime). A server that fails to start is logged and tried again
    /// later; it never stops the others.
    pub fn start(configs: Vec<McpServerConfig>) -> Self {
        let shutdown = CancellationToken::new();
        let servers = configs
            .into_iter()
            .map(|config| Arc::new(McpServer::start(config, shutdown.child_token())))
            .collect();
        Self { servers, shutdown }
    }

    /// The servers, in configuration order.
    pub fn servers(&self) -> &[Arc<McpServer>] {
        &self.servers
    }

    /// Every server's state and tools.
    pub fn statuses(&self) -> Vec<McpServerStatus> {
        self.servers.iter().map(|s| s.status()).collect()
    }

    /// The server named `name` that `agent` sees: the agent's own server of
    /// that name, else the shared one.
    pub fn server_for(&self, agent: &str, name: &str) -> Option<&Arc<McpServer>> {
        let named = |owned: bool| {
            self.servers.iter().find(|s| {
                let c = s.config();
                c.name == name && c.owner.is_some() == owned && c.serves(agent)
            })
        };
        named(true).or_else(|| named(false))
    }

    /// Waits until every server's first start attempt ended, at most
    /// `limit`; returns whether all of them got that far.
    pub async fn wait_started(&self, limit: Duration) -> bool {
        let all = futures::future::join_all(self.servers.iter().map(|s| s.started()));
        tokio::time::timeout(limit, all).await.is_ok()
    }

    /// The tools `agent` gets: of every server serving it (its own servers
    /// hide shared ones of the same name), those `patterns` allow (`None`:
    /// all; otherwise names `<server>__<tool>` and globs `<server>__*`).
    pub fn source_for(&self, agent: &str, patterns: Option<Vec<String>>) -> Arc<dyn ToolSource> {
        let servers = self
            .servers
            .iter()
            .filter(|s| {
                let c = s.config();
                match &c.owner {
                    Some(owner) => owner == agent,
                    None => {
                        c.serves(agent)
                            && !self.servers.iter().any(|o| {
                                o.config().owner.as_deref() == Some(agent) && o.config().name == c.name
                            })
                    }
                }
            })
            .cloned()
            .collect();
        Arc::new(AgentMcpTools { servers, patterns })
    }

    /// Stops every server (also done when the hub is dropped).
    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }
}

impl Drop for McpHub {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// The MCP tools of one agent.
struct AgentMcpTools {
    servers: Vec<Arc<McpServer>>,
    patterns: Option<Vec<String>>,
}

impl ToolSource for AgentMcpTools {
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        let mut tools = Vec::new();
        for server in &self.servers {
            let name = &server.config().name;
            for tool in server.tools() {
                let allowed = self
                    .patterns
                    .as_ref()
                    .is_none_or(|p| p.iter().any(|p| pattern_matches(p, name, tool.name())));
                if allowed {
                    tools.push(tool);
                }
            }
        }
        tools
    }
}
