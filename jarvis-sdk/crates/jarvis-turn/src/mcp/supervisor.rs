//! One MCP server as the app sees it ([`McpServer`]): a supervisor task
//! that starts it, lists its tools, follows `notifications/tools/list_changed`,
//! restarts it with backoff when it dies and stops it with the app; and its
//! tools as [`Tool`]s ([`McpTool`]).
//!
//! A call made while the server restarts waits for it (within the call's
//! timeout) instead of failing at once; a call the turn abandons (abort,
//! timeout) sends the server `notifications/cancelled`, because rmcp does
//! so when a request's future is dropped.

use async_trait::async_trait;
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, JsonObject};
use rmcp::service::{NotificationContext, Peer, RoleClient, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ServiceExt};
use serde_json::Value;
use std::fmt;
use std::process::Stdio;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::io::AsyncBufReadExt;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::config::{McpApproval, McpServerConfig, McpTransport};
use super::http::McpHttpClient;
use super::names::assign_tool_names;
use crate::tools::DEFAULT_OUTPUT_CAP;
use jarvis_agent::{Tool, ToolContext, ToolError, ToolResult};
use jarvis_common::truncate_with_marker;

/// The longest a server may take to start and list its tools.
pub const MCP_START_TIMEOUT: Duration = Duration::from_secs(30);
/// The first wait before a restart; it doubles up to [`MCP_MAX_BACKOFF`].
pub const MCP_FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// The longest wait between restarts.
pub const MCP_MAX_BACKOFF: Duration = Duration::from_secs(60);
/// A server that ran this long before it died restarts after the first
/// backoff again.
const STABLE: Duration = Duration::from_secs(60);

/// Where a server is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum McpServerState {
    /// Starting for the first time.
    Starting,
    /// Up; its tools can be called.
    Running,
    /// Stopped or failed to start; it is started again after a backoff.
    Restarting,
    /// Shut down with the app.
    Stopped,
}

impl fmt::Display for McpServerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            McpServerState::Starting => "starting",
            McpServerState::Running => "running",
            McpServerState::Restarting => "restarting",
            McpServerState::Stopped => "stopped",
        })
    }
}

/// One tool of a server, as listed.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct McpToolInfo {
    /// The name agents call it by (`<server>__<tool>`).
    pub name: String,
    /// The name the server gave it.
    pub remote: String,
    /// Its description.
    pub description: String,
    /// Whether the server annotates it `readOnlyHint: true`.
    pub read_only: bool,
}

/// A server's state, tools and last problem, for people.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct McpServerStatus {
    /// The server's name.
    pub name: String,
    /// The agent whose definition declares it (`None`: `mcp.yaml`).
    pub owner: Option<String>,
    /// The program or URL.
    pub transport: String,
    /// Where it is in its life.
    pub state: McpServerState,
    /// The process id of a running stdio server.
    pub pid: Option<u32>,
    /// Why it last stopped or failed to start.
    pub error: Option<String>,
    /// How many times it was started again.
    pub restarts: u32,
    /// Its tools (the last list, also while it restarts).
    pub tools: Vec<McpToolInfo>,
}

/// What changes while a server lives.
#[derive(Clone)]
struct Live {
    state: McpServerState,
    peer: Option<Peer<RoleClient>>,
    pid: Option<u32>,
    error: Option<String>,
    restarts: u32,
    tools: Arc<Vec<Arc<McpTool>>>,
    /// Bumped at the end of every start attempt (for [`McpServer::started`]).
    attempts: u64,
}

pub(super) struct Shared {
    config: McpServerConfig,
    live: watch::Sender<Live>,
    relist: Notify,
}

/// One configured MCP server and its supervisor.
pub struct McpServer {
    shared: Arc<Shared>,
}

impl fmt::Debug for McpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.shared.config.name)
            .field("state", &self.shared.live.borrow().state)
            .finish()
    }
}

impl McpServer {
    /// Starts the supervisor of `config` on the current runtime; it runs
    /// until `shutdown` fires.
    pub fn start(config: McpServerConfig, shutdown: CancellationToken) -> Self {
        let (live, _) = watch::channel(Live {
            state: McpServerState::Starting,
            peer: None,
            pid: None,
            error: None,
            restarts: 0,
            tools: Arc::default(),
            attempts: 0,
        });
        let shared = Arc::new(Shared {
            config,
            live,
            relist: Notify::new(),
        });
        tokio::spawn(supervise(shared.clone(), shutdown));
        Self { shared }
    }

    /// Its configuration.
    pub fn config(&self) -> &McpServerConfig {
        &self.shared.config
    }

    /// Its tools, as [`Tool`]s (the last list, also while it restarts).
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.shared
            .live
            .borrow()
            .tools
            .iter()
            .map(|t| t.clone() as Arc<dyn Tool>)
            .collect()
    }

    /// Its state and tools now.
    pub fn status(&self) -> McpServerStatus {
        let live = self.shared.live.borrow();
        McpServerStatus {
            name: self.shared.config.name.clone(),
            owner: self.shared.config.owner.clone(),
            transport: self.shared.config.transport.describe(),
            state: live.state,
            pid: live.pid,
            error: live.error.clone(),
            restarts: live.restarts,
            tools: live.tools.iter().map(|t| t.info.clone()).collect(),
        }
    }

    /// Waits until its first start attempt ended (up, or failed) or it
    /// stopped.
    pub async fn started(&self) {
        let mut rx = self.shared.live.subscribe();
        let _ = rx
            .wait_for(|l| l.attempts > 0 || l.state == McpServerState::Stopped)
            .await;
    }

    /// Waits until its status satisfies `done` (for example a tool listed
    /// after `tools/list_changed`, or running again after a crash); returns
    /// the status that did.
    pub async fn wait_for(&self, done: impl Fn(&McpServerStatus) -> bool) -> McpServerStatus {
        let mut rx = self.shared.live.subscribe();
        loop {
            let status = self.status();
            if done(&status) {
                return status;
            }
            if rx.changed().await.is_err() {
                return self.status();
            }
        }
    }
}

impl Shared {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn update(&self, change: impl FnOnce(&mut Live)) {
        self.live.send_modify(change);
    }

    /// The peer once the server runs, or `None` when it stopped.
    async fn running_peer(&self) -> Option<Peer<RoleClient>> {
        let mut rx = self.live.subscribe();
        let live = rx
            .wait_for(|l| l.peer.is_some() || l.state == McpServerState::Stopped)
            .await
            .ok()?;
        live.peer.clone()
    }
}

/// The client side's handler: asks for a new tool list when the server
/// says it changed.
#[derive(Clone)]
struct Handler {
    shared: Weak<Shared>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        if let Some(shared) = self.shared.upgrade() {
            tracing::info!(server = shared.name(), "MCP server says its tools changed");
            shared.relist.notify_one();
        }
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("jarvis", env!("CARGO_PKG_VERSION")),
        )
    }
}

type Running = RunningService<RoleClient, Handler>;

/// Starts the server process or connects to its URL and initialises.
async fn connect(shared: &Arc<Shared>) -> Result<(Running, Option<u32>), String> {
    let handler = Handler {
        shared: Arc::downgrade(shared),
    };
    match &shared.config.transport {
        McpTransport::Stdio { command, args, env } => {
            let mut cmd = tokio::process::Command::new(command);
            // Killed when dropped, also when the runtime shuts down.
            cmd.args(args).env_clear().kill_on_drop(true);
            if let Some(path) = std::env::var_os("PATH") {
                cmd.env("PATH", path);
            }
            cmd.envs(env);
            let (transport, stderr) = TokioChildProcess::builder(cmd)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot run {command}: {e}"))?;
            let pid = transport.id();
            if let Some(stderr) = stderr {
                let name = shared.name().to_owned();
                tokio::spawn(async move {
                    let mut lines = tokio::io::BufReader::new(stderr).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        tracing::debug!(server = %name, "{line}");
                    }
                });
            }
            let running = handler
                .serve(transport)
                .await
                .map_err(|e| format!("the MCP handshake failed: {e}"))?;
            Ok((running, pid))
        }
        McpTransport::Http { url, headers } => {
            let http = reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .build()
                .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            for (name, value) in headers {
                let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| format!("{name:?} is not a header name"))?;
                let value = reqwest::header::HeaderValue::from_str(value)
                    .map_err(|_| format!("the value of header {name} is not a header value"))?;
                config.custom_headers.insert(name, value);
            }
            let transport = StreamableHttpClientTransport::with_client(McpHttpClient::new(http), config);
            let running = handler
                .serve(transport)
                .await
                .map_err(|e| format!("the MCP handshake with {url} failed: {e}"))?;
            Ok((running, None))
        }
    }
}

/// Lists the server's tools and publishes them under their agent names.
async fn refresh(shared: &Arc<Shared>, peer: &Peer<RoleClient>) -> Result<usize, String> {
    let listed = peer
        .list_all_tools()
        .await
        .map_err(|e| format!("tools/list failed: {e}"))?;
    let listed: Vec<Value> = listed
        .iter()
        .filter_map(|t| serde_json::to_value(t).ok())
        .collect();
    let remote: Vec<String> = listed
        .iter()
        .map(|t| t["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    let names = assign_tool_names(shared.name(), remote.iter().map(String::as_str));
    let tools: Vec<Arc<McpTool>> = listed
        .iter()
        .zip(remote)
        .zip(names)
        .map(|((tool, remote), name)| {
            let mut schema = tool.get("inputSchema").cloned().unwrap_or_default();
            if !schema.is_object() {
                schema = serde_json::json!({"type": "object"});
            }
            Arc::new(McpTool {
                info: McpToolInfo {
                    name,
                    remote,
                    description: tool["description"].as_str().unwrap_or_default().to_owned(),
                    read_only: tool["annotations"]["readOnlyHint"].as_bool() == Some(true),
                },
                schema,
                approval: shared.config.approval,
                server: Arc::downgrade(shared),
            })
        })
        .collect();
    let count = tools.len();
    shared.update(|l| l.tools = Arc::new(tools));
    Ok(count)
}

async fn supervise(shared: Arc<Shared>, shutdown: CancellationToken) {
    let name = shared.name().to_owned();
    let mut delay = MCP_FIRST_BACKOFF;
    loop {
        let attempt = tokio::select! {
            _ = shutdown.cancelled() => break,
            attempt = tokio::time::timeout(MCP_START_TIMEOUT, async {
                let (running, pid) = connect(&shared).await?;
                let peer = running.peer().clone();
                match refresh(&shared, &peer).await {
                    Ok(count) => Ok((running, pid, peer, count)),
                    Err(e) => {
                        let _ = running.cancel().await;
                        Err(e)
                    }
                }
            }) => attempt.unwrap_or_else(|_| Err(format!("it did not start within {}s", MCP_START_TIMEOUT.as_secs()))),
        };
        let (running, pid, peer, count) = match attempt {
            Ok(up) => up,
            Err(error) => {
                tracing::warn!(server = %name, %error, "MCP server did not start; its tools are left out until it does (next try in {:.1}s)", delay.as_secs_f32());
                shared.update(|l| {
                    l.state = McpServerState::Restarting;
                    l.error = Some(error);
                    l.attempts += 1;
                });
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(MCP_MAX_BACKOFF);
                shared.update(|l| l.restarts += 1);
                continue;
            }
        };
        tracing::info!(server = %name, tools = count, "MCP server started");
        shared.update(|l| {
            l.state = McpServerState::Running;
            l.peer = Some(peer.clone());
            l.pid = pid;
            l.error = None;
            l.attempts += 1;
        });
        let up_since = Instant::now();
        let cancel = running.cancellation_token();
        let waiting = running.waiting();
        tokio::pin!(waiting);
        let reason = loop {
            tokio::select! {
                _ = shutdown.cancelled() => {
                    cancel.cancel();
                    let _ = waiting.await;
                    shared.update(|l| {
                        l.state = McpServerState::Stopped;
                        l.peer = None;
                        l.pid = None;
                    });
                    tracing::debug!(server = %name, "MCP server shut down");
                    return;
                }
                _ = shared.relist.notified() => {
                    match refresh(&shared, &peer).await {
                        Ok(count) => tracing::info!(server = %name, tools = count, "MCP server's tools listed again"),
                        Err(error) => tracing::warn!(server = %name, %error, "MCP server's tools could not be listed again"),
                    }
                }
                reason = &mut waiting => break reason,
            }
        };
        let why = match reason {
            Ok(reason) => format!("the connection ended ({reason:?})"),
            Err(e) => format!("its client task failed: {e}"),
        };
        if up_since.elapsed() >= STABLE {
            delay = MCP_FIRST_BACKOFF;
        }
        tracing::warn!(server = %name, reason = %why, "MCP server stopped; restarting in {:.1}s", delay.as_secs_f32());
        shared.update(|l| {
            l.state = McpServerState::Restarting;
            l.peer = None;
            l.pid = None;
            l.error = Some(format!("stopped: {why}"));
        });
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(MCP_MAX_BACKOFF);
        shared.update(|l| l.restarts += 1);
    }
    shared.update(|l| {
        l.state = McpServerState::Stopped;
        l.peer = None;
        l.pid = None;
    });
}

/// One tool of an MCP server. Whether it asks follows the server's
/// `approval` setting ([`McpApproval`]); the gate's other stages come first
/// as for every tool.
pub struct McpTool {
    info: McpToolInfo,
    schema: Value,
    approval: McpApproval,
    server: Weak<Shared>,
}

impl fmt::Debug for McpTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpTool")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

impl McpTool {
    /// What the server listed.
    pub fn info(&self) -> &McpToolInfo {
        &self.info
    }
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.info.name
    }

    fn description(&self) -> &str {
        &self.info.description
    }

    fn parameters(&self) -> Value {
        self.schema.clone()
    }

    fn requires_approval(&self) -> bool {
        match self.approval {
            McpApproval::Ask => true,
            McpApproval::Allow => false,
            McpApproval::ReadOnlyAllow => !self.info.read_only,
        }
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let Some(shared) = self.server.upgrade() else {
            return Ok(ToolResult::error(format!(
                "{} cannot run: its MCP server was shut down",
                self.info.name
            )));
        };
        let arguments: Option<JsonObject> = match args {
            Value::Object(map) => Some(map),
            Value::Null => None,
            _ => {
                return Err(ToolError::InvalidArguments(
                    "the arguments must be a JSON object".into(),
                ));
            }
        };
        let server = shared.name().to_owned();
        let timeout = shared.config.timeout;
        let deadline = Instant::now() + timeout;
        let call = async {
            let Some(peer) = shared.running_peer().await else {
                return ToolResult::error(format!("the MCP server {server} was shut down"));
            };
            let mut params = CallToolRequestParams::new(self.info.remote.clone());
            if let Some(arguments) = arguments {
                params = params.with_arguments(arguments);
            }
            match peer.call_tool(params).await {
                Ok(result) => result_of(&serde_json::to_value(&result).unwrap_or_default()),
                Err(ServiceError::McpError(error)) => ToolResult::error(format!(
                    "the MCP server {server} refused the call: {}",
                    error.message
                )),
                Err(ServiceError::TransportClosed | ServiceError::TransportSend(_)) => ToolResult::error(
                    format!("the MCP server {server} stopped during the call; it is being restarted"),
                ),
                Err(error) => {
                    ToolResult::error(format!("the call to the MCP server {server} failed: {error}"))
                }
            }
        };
        // Dropping `call` (abort or timeout) sends `notifications/cancelled`.
        tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => Err(ToolError::Cancelled),
            result = tokio::time::timeout_at(deadline, call) => Ok(result.unwrap_or_else(|_| {
                ToolResult::error(format!(
                    "{} did not answer within {}s; the call was cancelled",
                    self.info.name,
                    timeout.as_secs_f32()
                ))
            })),
        }
    }
}

/// The tool result of a `CallToolResult` (as JSON): text blocks and
/// structured content as text, images, audio and resources as a short
/// note, capped like the built-in tools' output.
pub(crate) fn result_of(result: &Value) -> ToolResult {
    let mut parts: Vec<String> = Vec::new();
    let mut texts: Vec<&str> = Vec::new();
    for block in result["content"].as_array().into_iter().flatten() {
        let mime = block["mimeType"].as_str().unwrap_or("unknown type");
        match block["type"].as_str().unwrap_or_default() {
            "text" => {
                let text = block["text"].as_str().unwrap_or_default();
                texts.push(text);
                parts.push(text.to_owned());
            }
            kind @ ("image" | "audio") => {
                let bytes = block["data"].as_str().map_or(0, |d| d.len() / 4 * 3);
                parts.push(format!("[{kind}: {mime}, about {bytes} bytes, not shown]"));
            }
            "resource" => {
                let resource = &block["resource"];
                let uri = resource["uri"].as_str().unwrap_or("?");
                let mime = resource["mimeType"].as_str().unwrap_or("unknown type");
                parts.push(format!("[resource {uri} ({mime}), not shown]"));
            }
            "resource_link" => {
                let uri = block["uri"].as_str().unwrap_or("?");
                let name = block["name"].as_str().unwrap_or_default();
                parts.push(format!("[resource link {uri}: {name}]"));
            }
            other => parts.push(format!("[{other} content, not shown]")),
        }
    }
    if let Some(structured) = result.get("structuredContent").filter(|v| !v.is_null()) {
        // Servers usually repeat structured content as JSON text; say it once.
        let repeated = texts
            .iter()
            .any(|t| serde_json::from_str::<Value>(t).is_ok_and(|v| &v == structured));
        if !repeated {
            parts.push(structured.to_string());
        }
    }
    let text = truncate_with_marker(&parts.join("\n"), DEFAULT_OUTPUT_CAP);
    if result["isError"].as_bool() == Some(true) {
        ToolResult::error(text)
    } else {
        ToolResult::ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn results_become_text_with_notes_for_media() {
        let result = result_of(&json!({
            "content": [
                {"type": "text", "text": "hello"},
                {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "file:///a.txt", "mimeType": "text/plain", "text": "x"}},
                {"type": "resource_link", "uri": "file:///b", "name": "b"},
            ],
        }));
        assert!(!result.is_error);
        assert_eq!(
            result.content,
            "hello\n[image: image/png, about 3 bytes, not shown]\n[resource file:///a.txt (text/plain), not shown]\n[resource link file:///b: b]"
        );
    }

    #[test]
    fn structured_content_is_said_once_and_errors_stay_errors() {
        let once = result_of(&json!({
            "content": [{"type": "text", "text": "{\"sum\":3}"}],
            "structuredContent": {"sum": 3},
        }));
        assert_eq!(once.content, "{\"sum\":3}");
        let only = result_of(&json!({"content": [], "structuredContent": {"sum": 3}}));
        assert_eq!(only.content, "{\"sum\":3}");
        let error = result_of(&json!({"content": [{"type": "text", "text": "bad"}], "isError": true}));
        assert!(error.is_error);
        assert_eq!(error.content, "bad");
    }

    #[test]
    fn long_results_are_capped() {
        let long = "x".repeat(DEFAULT_OUTPUT_CAP * 2);
        let result = result_of(&json!({"content": [{"type": "text", "text": long}]}));
        assert!(result.content.len() < DEFAULT_OUTPUT_CAP + 200);
    }
}
