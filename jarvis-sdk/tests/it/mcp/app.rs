//! MCP tools inside the assembled app: the same gate as every tool (the
//! allow-list and `boundaries` first, then the server's `approval`),
//! `mcp.yaml` read from the home, and a definition's own servers.

use jarvis_sdk::agent::{AgentEvent, ApprovalDecision, ApprovalRequest, UIAdapter};
use jarvis_sdk::app::{AppAssembly, AppConfig, build_app};
use jarvis_sdk::model::FauxProvider;
use jarvis_sdk::turn::{Caller, McpApproval, McpServerConfig};
use std::sync::Arc;
use tokio::sync::mpsc;

use super::test_server::serve;

#[derive(Debug)]
pub(super) enum Seen {
    Approval(ApprovalRequest),
    ToolStart(String),
    ToolEnd {
        name: String,
        result: String,
        is_error: bool,
    },
}

pub(super) struct Screen(pub(super) mpsc::UnboundedSender<Seen>);

impl UIAdapter for Screen {
    fn on_event(&self, event: &AgentEvent) -> std::ops::ControlFlow<()> {
        if let AgentEvent::ToolExecutionStart { tool_name, .. } = event {
            let _ = self.0.send(Seen::ToolStart(tool_name.clone()));
        }
        if let AgentEvent::ToolExecutionEnd {
            tool_name,
            result,
            is_error,
            ..
        } = event
        {
            let _ = self.0.send(Seen::ToolEnd {
                name: tool_name.clone(),
                result: result.clone(),
                is_error: *is_error,
            });
        }
        std::ops::ControlFlow::Continue(())
    }
    fn on_approval_request(&self, request: &ApprovalRequest) {
        let _ = self.0.send(Seen::Approval(request.clone()));
    }
}

/// Calls `tool` with `args` for any agent's first step, then answers.
pub(super) fn script(calls: &[(&str, &str)]) -> String {
    let mut rules = String::from("rules:\n");
    for (prompt, call) in calls {
        rules.push_str(&format!(
            "  - when: {{ last_role: user, last_user: \"{prompt}\" }}\n    reply: {{ tool_calls: [ {call} ] }}\n"
        ));
    }
    rules.push_str(
        "  - when: { last_role: tool }\n    reply: { text: \"done\" }\nfallback: { text: \"ok\" }\n",
    );
    rules
}

pub(super) async fn app(
    home: &std::path::Path,
    script: &str,
    config: impl FnOnce(AppConfig) -> AppConfig,
) -> (AppAssembly, Arc<FauxProvider>) {
    let faux = Arc::new(FauxProvider::from_yaml(script).unwrap());
    let config = config(AppConfig::embedded(home).with_provider(faux.clone()));
    (build_app(config).await.unwrap(), faux)
}

/// Runs `prompt` in `agent`'s default session, answering approvals with
/// `decision`; returns what the screen saw.
pub(super) async fn turn(
    app: &AppAssembly,
    agent: &str,
    prompt: &str,
    decision: ApprovalDecision,
) -> Vec<Seen> {
    let meta = app.default_session(agent).await.unwrap();
    let session = app.session(&meta.id).await.unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let _attached = session.attach(Arc::new(Screen(tx)));
    let turn = {
        let session = session.clone();
        let prompt = prompt.to_owned();
        tokio::spawn(async move { session.prompt(prompt, Caller::Local).await })
    };
    let mut seen = Vec::new();
    loop {
        tokio::select! {
            Some(next) = rx.recv() => {
                if let Seen::Approval(request) = &next {
                    session.broker().decide(&request.request_id, decision);
                }
                seen.push(next);
            }
            ended = async { while !turn.is_finished() { tokio::task::yield_now().await } } => {
                let () = ended;
                break;
            }
        }
    }
    turn.await.unwrap().unwrap();
    while let Ok(next) = rx.try_recv() {
        seen.push(next);
    }
    seen
}

pub(super) fn approvals(seen: &[Seen]) -> Vec<&str> {
    seen.iter()
        .filter_map(|s| match s {
            Seen::Approval(r) => Some(r.tool_name.as_str()),
            _ => None,
        })
        .collect()
}

pub(super) fn result_of<'a>(seen: &'a [Seen], tool: &str) -> (&'a str, bool) {
    seen.iter()
        .find_map(|s| match s {
            Seen::ToolEnd {
                name,
                result,
                is_error,
            } if name == tool => Some((result.as_str(), *is_error)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{tool} did not run: {seen:#?}"))
}

#[tokio::test]
async fn an_mcp_tool_asks_by_default_and_runs_once_allowed() {
    let served = serve().await;
    let home = tempfile::tempdir().unwrap();
    let script = script(&[
        ("echo", "{ name: test__echo, arguments: { text: \"울림\" } }"),
        ("deny", "{ name: test__echo, arguments: { text: \"no\" } }"),
    ]);
    let url = served.url.clone();
    let (app, faux) = app(home.path(), &script, |c| {
        c.with_mcp_server(McpServerConfig::http("test", url))
    })
    .await;
    let seen = turn(&app, "main", "echo", ApprovalDecision::Allow).await;
    assert_eq!(approvals(&seen), ["test__echo"]);
    assert_eq!(result_of(&seen, "test__echo"), ("울림", false));
    // The model was offered the server's tools with their schemas.
    let offered = &faux.requests()[0].tools;
    let echo = offered.iter().find(|t| t.name == "test__echo").expect("offered");
    assert_eq!(echo.parameters["required"], serde_json::json!(["text"]));
    assert!(offered.iter().any(|t| t.name == "test__add"));

    let seen = turn(&app, "main", "deny", ApprovalDecision::Deny).await;
    let (result, is_error) = result_of(&seen, "test__echo");
    assert!(is_error && result.contains("refused by approval"), "{result}");
}

#[tokio::test]
async fn boundaries_and_the_allow_list_come_before_the_servers_setting() {
    let served = serve().await;
    let home = tempfile::tempdir().unwrap();
    let karen = r#"
tools: [read_file, test__echo, test__add, test__fail]
boundaries: { ask: [test__add], never: [test__fail] }
"#;
    let script = script(&[
        ("add", "{ name: test__add, arguments: { a: 1, b: 2 } }"),
        ("never", "{ name: test__fail, arguments: {} }"),
        ("echo", "{ name: test__echo, arguments: { text: \"hi\" } }"),
        ("unlisted", "{ name: test__grow, arguments: {} }"),
    ]);
    let url = served.url.clone();
    let (app, faux) = app(home.path(), &script, |c| {
        c.with_definition("karen", karen)
            .with_mcp_server(McpServerConfig::http("test", url).with_approval(McpApproval::Allow))
    })
    .await;
    // `approval: allow`, but `boundaries.ask` names it: it asks.
    let seen = turn(&app, "karen", "add", ApprovalDecision::Allow).await;
    assert_eq!(approvals(&seen), ["test__add"]);
    assert_eq!(result_of(&seen, "test__add"), (r#"{"sum":3.0}"#, false));
    // `boundaries.never` refuses before anything asks.
    let seen = turn(&app, "karen", "never", ApprovalDecision::Allow).await;
    assert!(approvals(&seen).is_empty());
    let (result, is_error) = result_of(&seen, "test__fail");
    assert!(is_error && result.contains("never allowed"), "{result}");
    // Allowed by the server's setting: runs unasked.
    let seen = turn(&app, "karen", "echo", ApprovalDecision::Deny).await;
    assert!(approvals(&seen).is_empty());
    assert_eq!(result_of(&seen, "test__echo"), ("hi", false));
    // Not in the definition's list: never offered, not callable.
    let offered: Vec<String> = faux
        .requests()
        .last()
        .unwrap()
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert!(
        offered.contains(&"test__echo".to_owned()) && !offered.contains(&"test__grow".to_owned()),
        "{offered:?}"
    );
    let seen = turn(&app, "karen", "unlisted", ApprovalDecision::Allow).await;
    let (result, is_error) = result_of(&seen, "test__grow");
    assert!(is_error && result.contains("no tool named"), "{result}");
}

#[tokio::test]
async fn mcp_yaml_in_the_home_and_a_definitions_own_servers_start_with_the_app() {
    let served = serve().await;
    let home = tempfile::tempdir().unwrap();
    // `${VAR}` is read from the process environment at start.
    let token_var = "PATH";
    std::fs::write(
        home.path().join("mcp.yaml"),
        format!(
            "servers:\n  shared:\n    url: {}\n    agents: [main]\n    approval: allow\n    headers: {{ X-Token: \"${{{token_var}}}\" }}\n  broken:\n    command: /nonexistent/server\n",
            served.url
        ),
    )
    .unwrap();
    let karen = format!(
        "tools: []\nmcp:\n  mine:\n    url: {}\n    approval: read_only_allow\n",
        served.url
    );
    let script = script(&[
        (
            "shared",
            "{ name: shared__echo, arguments: { text: \"from mcp.yaml\" } }",
        ),
        (
            "mine",
            "{ name: mine__echo, arguments: { text: \"karen's own\" } }",
        ),
    ]);
    let (app, faux) = app(home.path(), &script, |c| c.with_definition("karen", &karen)).await;
    let statuses = app.mcp().statuses();
    let names: Vec<(&str, Option<&str>)> = statuses
        .iter()
        .map(|s| (s.name.as_str(), s.owner.as_deref()))
        .collect();
    assert_eq!(
        names,
        [("broken", None), ("shared", None), ("mine", Some("karen"))]
    );
    let seen = turn(&app, "main", "shared", ApprovalDecision::Deny).await;
    assert_eq!(result_of(&seen, "shared__echo"), ("from mcp.yaml", false));
    assert!(
        faux.requests()
            .last()
            .unwrap()
            .tools
            .iter()
            .all(|t| !t.name.starts_with("mine__"))
    );
    let seen = turn(&app, "karen", "mine", ApprovalDecision::Deny).await;
    assert_eq!(result_of(&seen, "mine__echo"), ("karen's own", false));
    let karens = faux.requests().last().unwrap().tools.clone();
    assert!(
        karens.iter().all(|t| !t.name.starts_with("shared__")),
        "shared serves main only"
    );
}
