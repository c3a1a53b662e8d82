//! [`ServerState`]: the app's one [`AppAssembly`] plus what the server keeps
//! per connection: the open connections, the agent activity, the running
//! turns and the shutdown signal.

use jarvis_sdk::app::{AppAssembly, McpTeamServer};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cluster::Cluster;
use crate::config::ServerConfig;
use crate::fanout::{Activity, Connections};
use crate::mcp::McpService;

/// Everything the routes share. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ServerState {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) app: AppAssembly,
    pub(crate) config: ServerConfig,

    pub(crate) connections: Arc<Connections>,
    pub(crate) activity: Arc<Activity>,
    /// This node's side of a deployment on Postgres.
    pub(crate) cluster: Option<Arc<Cluster>>,
    /// Cancelled when the server shuts down: connections close.
    pub(crate) shutdown: CancellationToken,
    /// Set when shutdown begins: no new turns start.
    pub(crate) closing: AtomicBool,
    /// Running turns started from connections.
    pub(crate) turns: TaskTracker,
    /// Open WebSocket connections' tasks.
    pub(crate) sockets: TaskTracker,
    /// The team as an MCP server.
    pub(crate) mcp: McpTeamServer,
    /// `/mcp`: the team over streamable HTTP, with its MCP sessions.
    pub(crate) mcp_http: McpService,
    /// Cancelled when shutdown begins: `/mcp`'s sessions and streams end
    /// (an open stream would hold the graceful shutdown up).
    pub(crate) mcp_stop: CancellationToken,
}

impl ServerState {
    /// The state of a server for `app`. It observes every session of the
    /// app (for `agent_activity`) from now on.
    pub fn new(app: AppAssembly, config: ServerConfig) -> Self {
        let connections = Arc::new(Connections::default());
        let order = app.registry().ids().map(str::to_owned).collect();
        let activity = Activity::new(connections.clone(), order);
        app.observe(activity.clone());
        let cluster = app.cluster().cloned().map(Cluster::new);
        let mcp = McpTeamServer::new(app.clone());
        let mcp_stop = CancellationToken::new();
        let mcp_http = crate::mcp::service(&mcp, &mcp_stop, &config.limits);
        Self {
            inner: Arc::new(Inner {
                mcp,
                mcp_http,
                mcp_stop,
                app,
                config,

                connections,
                activity,
                cluster,
                shutdown: CancellationToken::new(),
                closing: AtomicBool::new(false),
                turns: TaskTracker::new(),
                sockets: TaskTracker::new(),
            }),
        }
    }

    /// The app.
    pub fn app(&self) -> &AppAssembly {
        &self.inner.app
    }

    /// The server's settings.
    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    /// WebSocket connections open now.
    pub fn connection_count(&self) -> usize {
        self.inner.connections.len()
    }

    /// The agents running a loop now, in team order.
    pub fn active_agents(&self) -> Vec<String> {
        self.inner.activity.active()
    }

    /// Whether shutdown has begun.
    pub fn is_closing(&self) -> bool {
        self.inner.closing.load(Ordering::SeqCst)
    }

    /// Shuts the connections down: no new turns (and no MCP calls, whose
    /// sessions end); running turns are aborted (each still ends with `agent_end` and is recorded); once they
    /// ended, or the grace period passed, every WebSocket gets what was
    /// queued for it and a close frame (1001), and this waits for them
    /// (again at most the grace period). [`serve`](crate::serve) calls it
    /// after the listener stopped accepting.
    pub async fn shutdown(&self) {
        let inner = &self.inner;
        inner.closing.store(true, Ordering::SeqCst);
        inner.mcp_stop.cancel();
        let grace = inner.config.limits.shutdown_grace;
        let mut aborted = 0;
        for session in inner.app.open_sessions() {
            if session.abort() {
                aborted += 1;
            }
        }
        if aborted > 0 {
            tracing::info!(turns = aborted, "shutdown: aborting running turns");
        }
        inner.turns.close();
        let turns = async {
            tokio::join!(inner.turns.wait(), inner.mcp.shutdown(grace));
        };
        if tokio::time::timeout(grace, turns).await.is_err() {
            tracing::warn!("shutdown: turns still running after the grace period");
        }
        inner.shutdown.cancel();
        inner.sockets.close();
        if tokio::time::timeout(grace, inner.sockets.wait()).await.is_err() {
            tracing::warn!("shutdown: connections still open after the grace period");
        }
    }
}
