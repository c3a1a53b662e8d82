//! The team as an MCP server (feature `mcp`): [`McpTeamServer`] offers one
//! tool per agent, `ask_<agent_id> {request}`, which runs one turn of that
//! agent and answers with its final answer.
//!
//! **Sessions.** Each client session (one [`McpConnection`]: a stdio
//! process, or a streamable HTTP session) talks to an agent in a session of
//! its own, `mcp-<agent_id>-<n>` (kind `mcp`), created by the client's first
//! call of that agent ([`AppAssembly::create_mcp_session`]) and titled after
//! the client. The calls of one client to one agent run one after another,
//! so the agent sees them as one conversation. A client without a session
//! (protocol 2026-07-28 over HTTP is stateless: every request is a client of
//! its own) gets a new session per call.
//!
//! **Approvals.** A tool that needs a person's approval asks on the screens
//! of the MCP session, which people may open read-only and answer approvals
//! in. When the client declared the elicitation capability (form mode), it
//! is asked as well, with `elicitation/create` and a choice of `allow`,
//! `always` or `deny` (declining the form denies; cancelling it leaves the
//! question to the screens). The session's approval broker keeps the first
//! answer and withdraws the other asks (the client's request is
//! cancelled). Protocol 2026-07-28 has no requests from server to client,
//! so its clients leave approvals to the screens.
//!
//! **Transports** are the caller's: [`serve_mcp_stdio`] speaks over this
//! process's stdin and stdout (nothing else may write to stdout then); the
//! web server serves [`McpTeamServer::connection`]s over streamable HTTP.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams,
    ElicitationAction, Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    ServerConfig, Tool as McpToolSpec,
};
use rmcp::service::{ElicitationMode, RequestContext, RoleServer};
use rmcp::{ErrorData, Peer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::assembly::AppAssembly;
use jarvis_agent::{ApprovalDecision, ApprovalRequest, SessionId, StopReason, UIAdapter};
use jarvis_common::truncate_with_marker;
use jarvis_turn::{AgentSession, ApprovalBroker, Caller, McpServeError, PromptOptions, TurnError};

/// The prefix of every tool's name: `ask_<agent_id>`.
pub const ASK_TOOL_PREFIX: &str = "ask_";

/// How long [`McpTeamServer::shutdown`] waits for aborted turns to end
/// when [`serve_mcp_stdio`] stops.
pub const MCP_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// The client name used when a client does not introduce itself.
const UNNAMED_CLIENT: &str = "an MCP client";

/// The team served over MCP; cheap to clone. One [`McpConnection`] per
/// client session shares it.
#[derive(Clone)]
pub struct McpTeamServer {
    inner: Arc<Team>,
}

struct Team {
    app: AppAssembly,
    /// The turns MCP calls started, so shutdown can wait for them.
    turns: TaskTracker,
    /// Set by [`McpTeamServer::shutdown`]: new calls are refused.
    closing: AtomicBool,
}

impl fmt::Debug for McpTeamServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpTeamServer")
            .field("app", &self.inner.app)
            .field("turns", &self.inner.turns.len())
            .finish()
    }
}

impl McpTeamServer {
    /// The team of `app`, to be served.
    pub fn new(app: AppAssembly) -> Self {
        Self {
            inner: Arc::new(Team {
                app,
                turns: TaskTracker::new(),
                closing: AtomicBool::new(false),
            }),
        }
    }

    /// The app.
    pub fn app(&self) -> &AppAssembly {
        &self.inner.app
    }

    /// The handler of one new client session (an rmcp [`ServerHandler`]).
    pub fn connection(&self) -> McpConnection {
        McpConnection {
            team: self.inner.clone(),
            sessions: tokio::sync::Mutex::default(),
        }
    }

    /// Stops serving: calls from now on are refused, running ones are
    /// aborted (each turn still ends and is recorded), and this waits for
    /// their turns to end, at most `grace`.
    pub async fn shutdown(&self, grace: Duration) {
        self.inner.closing.store(true, Ordering::SeqCst);
        for session in self.inner.app.open_sessions() {
            if session.kind() == jarvis_agent::SessionKind::Mcp {
                session.abort();
            }
        }
        self.inner.turns.close();
        if tokio::time::timeout(grace, self.inner.turns.wait())
            .await
            .is_err()
        {
            tracing::warn!("MCP turns still running after the grace period");
        }
    }
}

/// One client session's handler: the tools of the team, and the client's
/// sessions, one per agent it called.
pub struct McpConnection {
    team: Arc<Team>,
    /// The client's session of each agent it called.
    sessions: tokio::sync::Mutex<HashMap<String, Arc<Slot>>>,
}

impl fmt::Debug for McpConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpConnection").finish_non_exhaustive()
    }
}

/// A client's session of one agent.
struct Slot {
    id: SessionId,
    /// Held while a call runs: one call at a time per session.
    turn: tokio::sync::Mutex<()>,
}

/// The tool of one agent.
fn ask_tool(id: &str, name: &str, description: &str) -> Option<McpToolSpec> {
    let about = if description.trim().is_empty() {
        String::new()
    } else {
        format!(" ({})", description.trim())
    };
    serde_json::from_value(json!({
        "name": format!("{ASK_TOOL_PREFIX}{id}"),
        "title": format!("Ask {name}"),
        "description": format!(
            "Ask {name}{about}, an agent of the user's Jarvis team. It runs one turn of the agent, with \
             its own tools and memory, and answers with the agent's final answer. Calls of one client \
             continue one conversation."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "request": {
                    "type": "string",
                    "description": format!("What to ask {name}, in plain words."),
                },
            },
            "required": ["request"],
        },
    }))
    .ok()
}

/// A tool result saying what went wrong, for the calling model to read.
fn failure(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
}

/// The client's name, as it introduced itself.
fn client_name(context: &RequestContext<RoleServer>) -> String {
    context
        .client_info()
        .map(|info| info.name)
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| UNNAMED_CLIENT.to_owned())
}

/// Whether the client can be asked with a form (it declared elicitation in
/// a session that allows requests from the server).
fn asks_with_forms(context: &RequestContext<RoleServer>) -> bool {
    context
        .peer
        .supported_elicitation_modes()
        .contains(&ElicitationMode::Form)
}

impl McpConnection {
    /// The client's session of `agent`, created at its first call.
    async fn slot(&self, agent: &str, client: &str) -> Result<Arc<Slot>, String> {
        let mut sessions = self.sessions.lock().await;
        if let Some(slot) = sessions.get(agent) {
            return Ok(slot.clone());
        }
        let title = format!("MCP · {client}");
        let meta = self
            .team
            .app
            .create_mcp_session(agent, Some(&title))
            .await
            .map_err(|e| e.to_string())?;
        tracing::info!(session = %meta.id, %client, "an MCP client's session");
        let slot = Arc::new(Slot {
            id: meta.id,
            turn: tokio::sync::Mutex::new(()),
        });
        sessions.insert(agent.to_owned(), slot.clone());
        Ok(slot)
    }

    /// Runs one turn of `agent` for `request` in the client's session and
    /// answers with its final answer.
    async fn ask(
        &self,
        agent: &str,
        request: String,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let client = client_name(context);
        let slot = match self.slot(agent, &client).await {
            Ok(slot) => slot,
            Err(error) => {
                tracing::error!(agent, %error, "an MCP session could not be created");
                return failure(format!("the session could not be created: {error}"));
            }
        };
        let _one_at_a_time = tokio::select! {
            guard = slot.turn.lock() => guard,
            _ = context.ct.cancelled() => return failure("cancelled"),
        };
        let session = match self.team.app.session(&slot.id).await {
            Ok(session) => session,
            Err(error) => {
                tracing::error!(session = %slot.id, %error, "an MCP session could not be opened");
                return failure(format!("the session could not be opened: {error}"));
            }
        };
        if self.team.closing.load(Ordering::SeqCst) {
            return failure("Jarvis is shutting down");
        }
        // Asked before the turn starts, so no request is missed.
        let _client_asks =
            asks_with_forms(context).then(|| ClientAsks::attach(&self.team.app, &session, &context.peer));
        let options = PromptOptions::from(Caller::Mcp { client });
        let running = session.clone();
        let mut turn = self
            .team
            .turns
            .spawn(async move { running.prompt_with(request, options).await });
        // The client going away (its request cancelled, the connection
        // closed) aborts the turn; the turn still ends and is recorded.
        let abort = AbortTurn(Some(session.clone()));
        let joined = tokio::select! {
            joined = &mut turn => joined,
            _ = context.ct.cancelled() => {
                session.abort();
                (&mut turn).await
            }
        };
        abort.disarm();
        match joined {
            Ok(Ok(outcome)) => match outcome.final_message.stop_reason {
                StopReason::Error => failure(
                    outcome
                        .error
                        .map(|e| format!("the model failed: {e}"))
                        .unwrap_or_else(|| "the model failed".to_owned()),
                ),
                StopReason::Aborted => failure(format!(
                    "the turn was aborted{}",
                    if outcome.final_message.content.is_empty() {
                        String::new()
                    } else {
                        format!("; its answer so far: {}", outcome.final_message.content)
                    }
                )),
                _ => CallToolResult::success(vec![ContentBlock::text(outcome.final_message.content)]),
            },
            Ok(Err(TurnError::Rejected(error))) => failure(error.to_string()),
            Ok(Err(TurnError::BudgetExhausted(message))) => failure(format!("budget_exhausted: {message}")),
            Ok(Err(error)) => {
                tracing::error!(session = %slot.id, %error, "an MCP call's turn could not run");
                failure(format!("the turn could not run: {error}"))
            }
            Err(error) => {
                tracing::error!(session = %slot.id, %error, "an MCP call's turn was lost");
                failure("the turn was lost")
            }
        }
    }
}

/// Aborts the session's turn when a call is dropped before it ends.
struct AbortTurn(Option<Arc<AgentSession>>);

impl AbortTurn {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for AbortTurn {
    fn drop(&mut self) {
        if let Some(session) = self.0.take() {
            session.abort();
        }
    }
}

impl ServerHandler for McpConnection {
    fn get_info(&self) -> ServerConfig {
        let brand = self.team.app.registry().main().name.clone();
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("jarvis", env!("CARGO_PKG_VERSION")).with_title(brand))
            .with_instructions(
                "Each tool asks one agent of the user's Jarvis team (ask_main is the team lead) and \
                 answers with the agent's final answer. An agent may take a while, use its own tools, \
                 and ask the user to approve some of them.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self
            .team
            .app
            .registry()
            .agents()
            .iter()
            .filter_map(|agent| ask_tool(&agent.id, &agent.name, &agent.description))
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let registry = self.team.app.registry();
        let Some(agent) = request
            .name
            .strip_prefix(ASK_TOOL_PREFIX)
            .filter(|agent| registry.contains(agent))
        else {
            return Err(ErrorData::invalid_params(
                format!("there is no tool {:?}", request.name),
                None,
            ));
        };
        let text = match request.arguments.as_ref().and_then(|a| a.get("request")) {
            Some(Value::String(text)) if !text.trim().is_empty() => text.clone(),
            _ => {
                return Ok(failure("`request` must be a non-empty string: what to ask the agent").into());
            }
        };
        Ok(self.ask(agent, text, &context).await.into())
    }
}

/// Asks the client, with elicitation forms, the approval requests of one
/// call's session; attached to the session's broker for the call.
struct ClientAsks {
    peer: Peer<RoleServer>,
    broker: ApprovalBroker,
    app: AppAssembly,
    /// The asks in flight, by approval request id.
    asking: Mutex<HashMap<String, tokio::task::AbortHandle>>,
}

/// A [`ClientAsks`] attached to a broker; detached and every ask withdrawn
/// when dropped.
struct ClientAsking {
    asks: Arc<ClientAsks>,
    _attachment: jarvis_turn::Attachment,
}

impl Drop for ClientAsking {
    fn drop(&mut self) {
        self.asks.withdraw_all();
    }
}

impl ClientAsks {
    fn attach(app: &AppAssembly, session: &AgentSession, peer: &Peer<RoleServer>) -> ClientAsking {
        let asks = Arc::new(ClientAsks {
            peer: peer.clone(),
            broker: session.broker().clone(),
            app: app.clone(),
            asking: Mutex::default(),
        });
        let attachment = session.broker().attach(asks.clone());
        ClientAsking {
            asks,
            _attachment: attachment,
        }
    }

    fn withdraw_all(&self) {
        let asking = std::mem::take(&mut *self.asking.lock().unwrap_or_else(|e| e.into_inner()));
        for (_, task) in asking {
            task.abort();
        }
    }

    /// The form of `request`.
    fn form(&self, request: &ApprovalRequest) -> Option<ElicitRequestParams> {
        let agent = self
            .app
            .registry()
            .get(&request.agent_id)
            .map_or_else(|| request.agent_id.clone(), |p| p.name.clone());
        approval_form(&agent, request)
    }
}

/// The elicitation form that asks for a decision on `request` of `agent`
/// (its display name).
fn approval_form(agent: &str, request: &ApprovalRequest) -> Option<ElicitRequestParams> {
    let args = truncate_with_marker(&request.args.to_string(), 600);
    serde_json::from_value(json!({
        "mode": "form",
        "message": format!(
            "{agent} wants to run {} with {args} (session {}). Allow it?",
            request.tool_name, request.session_id
        ),
        "requestedSchema": {
            "type": "object",
            "properties": {
                "decision": {
                    "type": "string",
                    "title": "Decision",
                    "description": "allow: run it this time; always: run it and allow such calls of this agent from now on; deny: refuse it",
                    "enum": ["allow", "always", "deny"],
                },
            },
            "required": ["decision"],
        },
    }))
    .map_err(|error| tracing::warn!(%error, "an approval could not be put as a form"))
    .ok()
}

/// What the client's answer to a form decides, if anything: a choice
/// decides; declining the form denies; cancelling it leaves the question to
/// the screens.
fn decision_of(action: &ElicitationAction, content: Option<&Value>) -> Option<ApprovalDecision> {
    match action {
        ElicitationAction::Accept => match content.and_then(|c| c.get("decision")).and_then(Value::as_str) {
            Some("allow") => Some(ApprovalDecision::Allow),
            Some("always") => Some(ApprovalDecision::Always),
            Some("deny") => Some(ApprovalDecision::Deny),
            _ => None,
        },
        ElicitationAction::Decline => Some(ApprovalDecision::Deny),
        _ => None,
    }
}

impl UIAdapter for ClientAsks {
    fn on_approval_request(&self, request: &ApprovalRequest) {
        let Some(form) = self.form(request) else {
            return;
        };
        let peer = self.peer.clone();
        let broker = self.broker.clone();
        let id = request.request_id.clone();
        let task = tokio::spawn({
            let id = id.clone();
            async move {
                match peer.create_elicitation(form).await {
                    Ok(answer) => match decision_of(&answer.action, answer.content.as_ref()) {
                        Some(decision) => {
                            if broker.decide(&id, decision) {
                                tracing::info!(request_id = %id, ?decision, "the MCP client answered an approval");
                            }
                        }
                        None => {
                            tracing::debug!(request_id = %id, "the MCP client left an approval to the screens")
                        }
                    },
                    Err(error) => {
                        tracing::debug!(request_id = %id, %error, "the MCP client could not be asked")
                    }
                }
            }
        });
        self.asking
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, task.abort_handle());
    }

    fn on_approval_resolved(&self, request_id: &str, _decision: ApprovalDecision) {
        // Answered elsewhere (or by the client itself): the ask is withdrawn.
        if let Some(task) = self
            .asking
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(request_id)
        {
            task.abort();
        }
    }
}

/// Serves the team of `app` over this process's stdin and stdout (one
/// client session) until the client closes stdin or `shutdown` resolves;
/// then aborts the calls still running and waits for their turns
/// ([`MCP_SHUTDOWN_GRACE`]). stdout carries MCP messages only; the SDK
/// logs through `tracing`, which the caller sends elsewhere.
pub async fn serve_mcp_stdio(
    app: AppAssembly,
    shutdown: impl Future<Output = ()>,
) -> Result<(), McpServeError> {
    let team = McpTeamServer::new(app);
    let cancel = CancellationToken::new();
    let serving = async {
        let running = team
            .connection()
            .serve_with_ct(rmcp::transport::stdio_pipes(), cancel.clone())
            .await;
        match running {
            Ok(running) => running
                .waiting()
                .await
                .map(|_| ())
                .map_err(|e| McpServeError::Service(e.to_string())),
            // The client left before it said anything.
            Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => Ok(()),
            Err(rmcp::service::ServerInitializeError::Cancelled) => Ok(()),
            Err(error) => Err(McpServeError::Handshake(error.to_string())),
        }
    };
    let result = tokio::select! {
        result = serving => result,
        _ = shutdown => {
            cancel.cancel();
            Ok(())
        }
    };
    team.shutdown(MCP_SHUTDOWN_GRACE).await;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_agent_gets_a_tool_with_a_request_argument() {
        let tool = ask_tool("karen", "K.A.R.E.N.", "주거 (homes)").unwrap();
        assert_eq!(tool.name, "ask_karen");
        let schema = serde_json::to_value(&*tool.input_schema).unwrap();
        assert_eq!(schema["required"], json!(["request"]));
        assert_eq!(schema["properties"]["request"]["type"], "string");
        assert!(tool.description.unwrap().contains("K.A.R.E.N. (주거 (homes))"));
    }

    #[test]
    fn an_approval_becomes_a_form_with_three_choices() {
        let request = ApprovalRequest {
            request_id: "approval_1".into(),
            session_id: "mcp-karen-1".into(),
            agent_id: "karen".into(),
            tool_name: "write_file".into(),
            args: json!({"path": "note.txt"}),
        };
        let form = serde_json::to_value(approval_form("K.A.R.E.N.", &request).unwrap()).unwrap();
        assert_eq!(form["mode"], "form");
        let message = form["message"].as_str().unwrap();
        assert!(
            message.contains("K.A.R.E.N. wants to run write_file"),
            "{message}"
        );
        assert!(message.contains("mcp-karen-1"), "{message}");
        assert_eq!(
            form["requestedSchema"]["properties"]["decision"]["enum"],
            json!(["allow", "always", "deny"])
        );
    }

    #[test]
    fn a_form_answer_decides_declining_denies_and_cancelling_leaves_it() {
        let choice = |d: &str| json!({ "decision": d });
        assert_eq!(
            decision_of(&ElicitationAction::Accept, Some(&choice("allow"))),
            Some(ApprovalDecision::Allow)
        );
        assert_eq!(
            decision_of(&ElicitationAction::Accept, Some(&choice("always"))),
            Some(ApprovalDecision::Always)
        );
        assert_eq!(
            decision_of(&ElicitationAction::Accept, Some(&choice("deny"))),
            Some(ApprovalDecision::Deny)
        );
        assert_eq!(
            decision_of(&ElicitationAction::Accept, Some(&choice("maybe"))),
            None
        );
        assert_eq!(decision_of(&ElicitationAction::Accept, None), None);
        assert_eq!(
            decision_of(&ElicitationAction::Decline, None),
            Some(ApprovalDecision::Deny)
        );
        assert_eq!(decision_of(&ElicitationAction::Cancel, None), None);
    }
}
