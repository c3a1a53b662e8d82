//! The stdio side of a running Jarvis server's MCP endpoint
//! ([`bridge_mcp_stdio`]): when a server already holds the home, `jarvis
//! mcp serve` cannot assemble the app, so it speaks MCP on stdin and stdout
//! and forwards to the server's `/mcp` over streamable HTTP.
//!
//! It is an MCP server on stdio and an MCP client of the web server, each
//! side negotiating its own protocol version with rmcp, rather than a copy
//! of bytes: `tools/list` and `tools/call` are forwarded (cancelling a call
//! cancels the forwarded one), and the server's `elicitation/create`
//! requests (approvals) go to the stdio client. The HTTP side uses the
//! `initialize` handshake, so the server keeps one session for this process
//! and its calls of an agent continue one conversation. It connects at the
//! stdio client's `initialize` (or first request), declaring the
//! elicitation capability only when the stdio client did, and under the
//! stdio client's name. When the server goes away the bridge ends.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, Implementation, InitializeRequestParams, InitializeResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleClient, RoleServer};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ErrorData, Peer, ServerHandler, ServiceError, ServiceExt};
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

use super::http::McpHttpClient;

/// Why serving MCP on stdio failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpServeError {
    /// The client's opening of the session failed.
    #[error("the MCP client's handshake failed: {0}")]
    Handshake(String),
    /// The service stopped abnormally.
    #[error("the MCP service failed: {0}")]
    Service(String),
}

/// Serves MCP on this process's stdin and stdout, forwarding to the MCP
/// endpoint `url` (a Jarvis server's `/mcp`) with `http` (which carries the
/// TLS trust; it should have no overall timeout, since a call lasts as long
/// as the agent's turn) and `token` as `Authorization: Bearer …`. It ends
/// when the stdio client closes stdin, the server goes away, or `shutdown`
/// resolves.
pub async fn bridge_mcp_stdio(
    http: reqwest::Client,
    url: &str,
    token: Option<String>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), McpServeError> {
    let stop = CancellationToken::new();
    let bridge = Bridge {
        remote: Arc::new(Remote {
            http,
            url: url.to_owned(),
            token,
            stop: stop.clone(),
            peer: tokio::sync::Mutex::default(),
            info: Mutex::default(),
            session: Mutex::default(),
        }),
    };
    let remote = bridge.remote.clone();
    let serving = async {
        match bridge
            .serve_with_ct(rmcp::transport::stdio_pipes(), stop.clone())
            .await
        {
            Ok(running) => running
                .waiting()
                .await
                .map(|_| ())
                .map_err(|e| McpServeError::Service(e.to_string())),
            Err(rmcp::service::ServerInitializeError::ConnectionClosed(_))
            | Err(rmcp::service::ServerInitializeError::Cancelled) => Ok(()),
            Err(error) => Err(McpServeError::Handshake(error.to_string())),
        }
    };
    let result = tokio::select! {
        result = serving => result,
        _ = shutdown => Ok(()),
    };
    // Ends the HTTP session too (the server's running calls are aborted).
    stop.cancel();
    remote.close().await;
    result
}

/// The stdio side: an MCP server whose every answer comes from the remote.
struct Bridge {
    remote: Arc<Remote>,
}

/// The HTTP side, connected once.
struct Remote {
    http: reqwest::Client,
    url: String,
    token: Option<String>,
    /// Cancelled when the bridge ends, from either side.
    stop: CancellationToken,
    peer: tokio::sync::Mutex<Option<Peer<RoleClient>>>,
    /// What the server said of itself.
    info: Mutex<Option<ServerConfig>>,
    /// The HTTP session's service, until it ends.
    session: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl fmt::Debug for Remote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Remote")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// The client side's handler: the server's questions go to the stdio client.
struct Forward {
    stdio: Peer<RoleServer>,
    config: ClientConfig,
}

impl ClientHandler for Forward {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        tokio::select! {
            answer = self.stdio.create_elicitation(request) => answer.map_err(forwarded),
            _ = context.ct.cancelled() => Err(ErrorData::internal_error("withdrawn", None)),
        }
    }

    fn get_info(&self) -> ClientConfig {
        self.config.clone()
    }
}

/// A failure of the other side as this side's error.
fn forwarded(error: ServiceError) -> ErrorData {
    match error {
        ServiceError::McpError(error) => error,
        other => ErrorData::internal_error(format!("the Jarvis server: {other}"), None),
    }
}

impl Remote {
    /// The connected server, connecting first for the stdio client of
    /// `context` (whose capabilities and name the connection mirrors).
    async fn peer(&self, context: &RequestContext<RoleServer>) -> Result<Peer<RoleClient>, ErrorData> {
        let mut peer = self.peer.lock().await;
        if let Some(peer) = peer.as_ref() {
            return Ok(peer.clone());
        }
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation = context.client_capabilities().and_then(|c| c.elicitation);
        let client = context
            .client_info()
            .unwrap_or_else(|| Implementation::new("jarvis-mcp-bridge", env!("CARGO_PKG_VERSION")));
        let forward = Forward {
            stdio: context.peer.clone(),
            config: ClientConfig::new(capabilities, client),
        };
        let mut config = StreamableHttpClientTransportConfig::with_uri(self.url.as_str());
        config.auth_header = self.token.clone();
        let transport =
            StreamableHttpClientTransport::with_client(McpHttpClient::new(self.http.clone()), config);
        let remote_stop = self.stop.child_token();
        let running = forward
            .serve_with_ct(transport, remote_stop)
            .await
            .map_err(|e| {
                tracing::error!(url = %self.url, error = %e, "the Jarvis server's MCP endpoint could not be reached");
                ErrorData::internal_error(format!("cannot reach the Jarvis server at {}: {e}", self.url), None)
            })?;
        let connected = running.peer().clone();
        if let Some(info) = connected.peer_info() {
            let mut config = ServerConfig::new(info.capabilities.clone());
            if let Some(server) = &info.server_info {
                config = config.with_server_info(server.clone());
            }
            if let Some(instructions) = &info.instructions {
                config = config.with_instructions(instructions.clone());
            }
            *self.info.lock().unwrap_or_else(|e| e.into_inner()) = Some(config);
        }
        // The server going away ends the bridge: its client restarts it.
        let stop = self.stop.clone();
        let session = tokio::spawn(async move {
            let _ = running.waiting().await;
            if !stop.is_cancelled() {
                tracing::warn!("the Jarvis server closed the MCP session; the bridge stops");
                stop.cancel();
            }
        });
        *self.session.lock().unwrap_or_else(|e| e.into_inner()) = Some(session);
        *peer = Some(connected.clone());
        Ok(connected)
    }

    /// Ends the HTTP session (once [`Remote::stop`] is cancelled) and waits
    /// a moment for the server to hear of it.
    async fn close(&self) {
        self.peer.lock().await.take();
        let session = self.session.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(session) = session {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(3), session).await;
        }
    }
}

impl ServerHandler for Bridge {
    fn get_info(&self) -> ServerConfig {
        self.remote
            .info
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_else(|| {
                ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
                    .with_server_info(Implementation::new("jarvis", env!("CARGO_PKG_VERSION")))
            })
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        self.remote.peer(&context).await?;
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let remote = self.remote.peer(&context).await?;
        tokio::select! {
            listed = remote.list_tools(request) => listed.map_err(forwarded),
            _ = context.ct.cancelled() => Err(ErrorData::internal_error("cancelled", None)),
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let remote = self.remote.peer(&context).await?;
        // Dropping the forwarded call cancels it on the server.
        tokio::select! {
            answer = remote.call_tool_once(request) => answer.map_err(forwarded),
            _ = context.ct.cancelled() => Err(ErrorData::internal_error("cancelled", None)),
        }
    }
}
