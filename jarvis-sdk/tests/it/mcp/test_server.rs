//! An MCP server written here with rmcp, served over streamable HTTP on
//! loopback: tools that answer, fail, refuse, wait until cancelled, and
//! change the tool list.

use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::StreamableHttpService;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::mpsc;

/// What the server reports to the test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Heard {
    /// `slow` began.
    SlowStarted,
    /// `slow` was cancelled by the client.
    SlowCancelled,
}

#[derive(Clone)]
struct TestServer {
    grown: Arc<AtomicBool>,
    heard: mpsc::UnboundedSender<Heard>,
}

fn tool(name: &str, description: &str, schema: Value, read_only: bool) -> Tool {
    let Value::Object(schema) = schema else {
        unreachable!()
    };
    let mut tool = Tool::new(name.to_owned(), description.to_owned(), Arc::new(schema));
    if read_only {
        let mut hints = ToolAnnotations::default();
        hints.read_only_hint = Some(true);
        tool.annotations = Some(hints);
    }
    tool
}

impl TestServer {
    fn tools(&self) -> Vec<Tool> {
        let mut tools = vec![
            tool(
                "echo",
                "Says the text back",
                json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
                true,
            ),
            tool(
                "add",
                "Adds two numbers",
                json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}),
                false,
            ),
            tool("fail", "Fails", json!({"type": "object"}), true),
            tool(
                "refuse",
                "Refuses at the protocol level",
                json!({"type": "object"}),
                true,
            ),
            tool("slow", "Waits until cancelled", json!({"type": "object"}), true),
            tool("grow", "Adds the tool `extra`", json!({"type": "object"}), false),
            tool(
                "odd name/v2",
                "A name with characters tools cannot have",
                json!({"type": "object"}),
                true,
            ),
        ];
        if self.grown.load(Ordering::SeqCst) {
            tools.push(tool(
                "extra",
                "Appears after grow",
                json!({"type": "object"}),
                true,
            ));
        }
        tools
    }
}

fn text(s: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(s)])
}

impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.clone().unwrap_or_default();
        let result = match request.name.as_ref() {
            "echo" => text(args.get("text").and_then(Value::as_str).unwrap_or_default()),
            "add" => {
                let sum = args.get("a").and_then(Value::as_f64).unwrap_or(0.0)
                    + args.get("b").and_then(Value::as_f64).unwrap_or(0.0);
                CallToolResult::structured(json!({"sum": sum}))
            }
            "fail" => CallToolResult::error(vec![ContentBlock::text("it failed on purpose")]),
            "refuse" => return Err(ErrorData::invalid_params("nothing to refuse here", None)),
            "slow" => {
                let _ = self.heard.send(Heard::SlowStarted);
                context.ct.cancelled().await;
                let _ = self.heard.send(Heard::SlowCancelled);
                CallToolResult::error(vec![ContentBlock::text("cancelled")])
            }
            "grow" => {
                self.grown.store(true, Ordering::SeqCst);
                let _ = context.peer.notify_tool_list_changed().await;
                text("grown")
            }
            "odd name/v2" => text("odd"),
            "extra" => text("extra"),
            other => return Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        };
        Ok(CallToolResponse::Complete(result))
    }
}

/// A running test server.
pub(super) struct Served {
    /// Its `/mcp` URL.
    pub url: String,
    /// What it reports.
    pub heard: mpsc::UnboundedReceiver<Heard>,
    _task: tokio::task::JoinHandle<()>,
}

/// Serves a fresh test server on 127.0.0.1.
pub(super) async fn serve() -> Served {
    let (tx, heard) = mpsc::unbounded_channel();
    let server = TestServer {
        grown: Arc::default(),
        heard: tx,
    };
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    Served {
        url,
        heard,
        _task: task,
    }
}
