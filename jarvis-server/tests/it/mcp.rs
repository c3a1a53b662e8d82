//! `/mcp`: the team as an MCP server over streamable HTTP, spoken as raw
//! JSON-RPC over HTTP against a server on 127.0.0.1:0: the API's token and
//! origin rules, the tools, a call's session, and its approval answered on
//! that session's screen.

use jarvis_sdk::agent::SessionKind;
use jarvis_server::ServerConfig;
use serde_json::{Value, json};

use crate::support::{Server, TempHome, WAIT, Ws, app, app_with};
use crate::ws::APPROVAL;

const KAREN: &str = r#"
rules:
  - when: { agent: karen }
    reply: { text: "KAREN: the rent fits your budget" }
fallback: { text: "JARVIS here" }
"#;

/// One MCP client session, spoken by hand.
pub(crate) struct Mcp {
    http: reqwest::Client,
    url: String,
    token: Option<String>,
    session: Option<String>,
    next_id: u64,
}

impl Mcp {
    pub(crate) fn new(server: &Server, token: Option<&str>) -> Self {
        Self {
            http: reqwest::Client::new(),
            url: format!("http://{}/mcp", server.addr),
            token: token.map(str::to_owned),
            session: None,
            next_id: 1,
        }
    }

    async fn post(&self, body: &Value, extra: &[(&str, &str)]) -> reqwest::Response {
        let mut request = self
            .http
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .json(body);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(session) = &self.session {
            request = request.header("mcp-session-id", session);
        }
        for (name, value) in extra {
            request = request.header(*name, *value);
        }
        tokio::time::timeout(WAIT, request.send())
            .await
            .expect("the server answers in time")
            .unwrap()
    }

    /// Sends a request and answers its response (from a JSON body or the
    /// event stream).
    pub(crate) async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let response = self.post(&body, &[]).await;
        assert!(response.status().is_success(), "{method}: {}", response.status());
        if let Some(session) = response.headers().get("mcp-session-id") {
            self.session = Some(session.to_str().unwrap().to_owned());
        }
        let text = tokio::time::timeout(WAIT, response.text())
            .await
            .expect("the answer ends in time")
            .unwrap();
        let messages: Vec<Value> = match serde_json::from_str(&text) {
            Ok(message) => vec![message],
            Err(_) => text
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .filter_map(|data| serde_json::from_str(data.trim()).ok())
                .collect(),
        };
        messages
            .into_iter()
            .find(|m| m["id"] == json!(id))
            .unwrap_or_else(|| panic!("no answer to {method} in {text:?}"))
    }

    async fn notify(&self, method: &str) {
        let response = self.post(&json!({"jsonrpc": "2.0", "method": method}), &[]).await;
        assert_eq!(response.status(), 202, "{method}");
    }

    pub(crate) async fn initialize(&mut self) -> Value {
        let answer = self
            .request(
                "initialize",
                json!({
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "test-client", "version": "1"},
                }),
            )
            .await;
        self.notify("notifications/initialized").await;
        answer
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_needs_the_token_and_the_servers_own_origin_like_the_api() {
    let home = TempHome::new();
    let config = ServerConfig::loopback(0).with_token("s3cret");
    let server = Server::start(app_with(&home, KAREN, Some("s3cret")).await, config).await;
    let hello = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    for token in [None, Some("wrong")] {
        let response = Mcp::new(&server, token).post(&hello, &[]).await;
        assert_eq!(response.status(), 401, "{token:?}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "unauthorized");
    }
    // The URL is no place for the token, here either.
    let mut query = Mcp::new(&server, None);
    query.url.push_str("?token=s3cret");
    assert_eq!(query.post(&hello, &[]).await.status(), 401);
    // A page of another origin is refused, token or not.
    let foreign = Mcp::new(&server, Some("s3cret"))
        .post(&hello, &[("origin", "http://evil.example")])
        .await;
    assert_eq!(foreign.status(), 403);
    // With the token: the team's tools.
    let mut client = Mcp::new(&server, Some("s3cret"));
    let info = client.initialize().await;
    assert_eq!(info["result"]["serverInfo"]["name"], "jarvis", "{info}");
    assert!(info["result"]["capabilities"]["tools"].is_object(), "{info}");
    let listed = client.request("tools/list", json!({})).await;
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ask_main", "ask_karen"], "{listed}");
    assert_eq!(
        listed["result"]["tools"][1]["inputSchema"]["required"],
        json!(["request"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_runs_a_turn_in_the_clients_own_mcp_session() {
    let home = TempHome::new();
    let server = Server::start(app(&home, KAREN).await, ServerConfig::loopback(0)).await;
    let mut client = Mcp::new(&server, None);
    client.initialize().await;
    for _ in 0..2 {
        let answer = client
            .request(
                "tools/call",
                json!({"name": "ask_karen", "arguments": {"request": "can I afford it?"}}),
            )
            .await;
        assert_eq!(answer["result"]["isError"], false, "{answer}");
        assert_eq!(
            answer["result"]["content"][0]["text"],
            "KAREN: the rent fits your budget"
        );
    }
    // A wrong call: an unknown tool is a protocol error, a missing request
    // a tool error the calling model can read.
    let unknown = client
        .request(
            "tools/call",
            json!({"name": "ask_nobody", "arguments": {"request": "x"}}),
        )
        .await;
    assert!(
        unknown["error"]["message"]
            .as_str()
            .unwrap()
            .contains("ask_nobody"),
        "{unknown}"
    );
    let empty = client
        .request("tools/call", json!({"name": "ask_main", "arguments": {}}))
        .await;
    assert_eq!(empty["result"]["isError"], true, "{empty}");

    // Both calls went to one session of this client, listed as kind `mcp`.
    let sessions = server.state.app().list_sessions().await.unwrap();
    let mcp: Vec<_> = sessions.iter().filter(|s| s.kind == SessionKind::Mcp).collect();
    assert_eq!(mcp.len(), 1, "{sessions:?}");
    assert_eq!(mcp[0].id.as_str(), "mcp-karen-1");
    assert_eq!(mcp[0].agent_id, "karen");
    assert_eq!(mcp[0].title.as_deref(), Some("MCP · test-client"));
    let (_, entries) = server.state.app().session_entries(&mcp[0].id).await.unwrap();
    assert_eq!(entries.iter().filter(|e| e.starts_turn()).count(), 2);
    // A second client gets a session of its own.
    let mut other = Mcp::new(&server, None);
    other.initialize().await;
    other
        .request(
            "tools/call",
            json!({"name": "ask_karen", "arguments": {"request": "hi"}}),
        )
        .await;
    let ids: Vec<String> = server
        .state
        .app()
        .list_sessions()
        .await
        .unwrap()
        .into_iter()
        .filter(|s| s.kind == SessionKind::Mcp)
        .map(|s| s.id.to_string())
        .collect();
    assert!(ids.contains(&"mcp-karen-2".to_owned()), "{ids:?}");
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_sessions_approval_is_answered_on_its_screen_which_is_otherwise_read_only() {
    let home = TempHome::new();
    let server = Server::start(app(&home, APPROVAL).await, ServerConfig::loopback(0)).await;
    // A screen elsewhere sees J.A.R.V.I.S. start working for the client.
    let mut watcher = Ws::connect(&server.ws_url("session_id=s-watch")).await;
    let mut client = Mcp::new(&server, None);
    client.initialize().await;
    let call = tokio::spawn(async move {
        client
            .request(
                "tools/call",
                json!({"name": "ask_main", "arguments": {"request": "write a file"}}),
            )
            .await
    });
    watcher
        .until_match(|f| f["type"] == "agent_activity" && f["active"] == json!(["main"]))
        .await;
    // The client declared no elicitation: the question waits on the screens
    // of its session, which a person opens (it was created for the call).
    let mut screen = Ws::connect(&server.ws_url("session_id=mcp-main-1")).await;
    let request = screen.until("approval_request").await.pop().unwrap();
    assert_eq!(request["tool_name"], "write_file");
    assert_eq!(request["session_id"], "mcp-main-1");
    // Aborting the client's turn is not the screen's to do.
    screen.send(json!({"type": "abort"})).await;
    let refused = screen.until_match(|f| f["type"] == "error").await;
    assert_eq!(refused.last().unwrap()["code"], "forbidden", "{refused:?}");
    screen
        .send(json!({"type": "approval", "request_id": request["request_id"], "decision": "allow"}))
        .await;
    screen.until("approval_resolved").await;
    let answer = tokio::time::timeout(WAIT, call).await.unwrap().unwrap();
    assert_eq!(answer["result"]["content"][0]["text"], "written", "{answer}");
    assert_eq!(
        std::fs::read_to_string(home.0.join("sandboxes/mcp-main-1/a.txt")).unwrap(),
        "x"
    );
    // Nor is prompting in it: the session is the client's.
    screen.send(json!({"type": "prompt", "text": "me too"})).await;
    let refused = screen.until_match(|f| f["type"] == "error").await;
    assert_eq!(refused.last().unwrap()["code"], "forbidden", "{refused:?}");
    server.stop().await.unwrap();
}
