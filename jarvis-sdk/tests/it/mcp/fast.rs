//! The MCP client against the server written here: tool names and schemas,
//! results and errors, timeouts and cancellation, `tools/list_changed`, a
//! server that does not start.

use jarvis_sdk::agent::{Tool, ToolContext};
use jarvis_sdk::turn::{McpHub, McpServerConfig, McpServerState, McpServerStatus};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use super::test_server::{Heard, serve};

fn tool_named(hub: &McpHub, name: &str) -> Arc<dyn Tool> {
    hub.servers()[0]
        .tools()
        .into_iter()
        .find(|t| t.name() == name)
        .unwrap_or_else(|| panic!("no tool {name}"))
}

fn running(status: &McpServerStatus) -> bool {
    status.state == McpServerState::Running
}

#[tokio::test]
async fn a_servers_tools_are_named_described_and_called() {
    let served = serve().await;
    let hub = McpHub::start(vec![McpServerConfig::http("test", &served.url)]);
    let status = hub.servers()[0].wait_for(running).await;
    let names: Vec<&str> = status.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "test__echo",
            "test__add",
            "test__fail",
            "test__refuse",
            "test__slow",
            "test__grow",
            "test__odd_name_v2"
        ]
    );
    assert_eq!(status.tools[6].remote, "odd name/v2");
    assert!(status.tools[0].read_only && !status.tools[1].read_only);

    let echo = tool_named(&hub, "test__echo");
    assert_eq!(echo.description(), "Says the text back");
    assert_eq!(echo.parameters()["properties"]["text"]["type"], "string");
    // `approval` defaults to ask.
    assert!(echo.requires_approval());
    let ctx = ToolContext::new("s", "main");
    let said = echo.call(json!({"text": "안녕"}), &ctx).await.unwrap();
    assert!(!said.is_error);
    assert_eq!(said.content, "안녕");

    let sum = tool_named(&hub, "test__add")
        .call(json!({"a": 2, "b": 3.5}), &ctx)
        .await
        .unwrap();
    assert!(!sum.is_error, "{sum:?}");
    assert_eq!(sum.content, r#"{"sum":5.5}"#);
    let odd = tool_named(&hub, "test__odd_name_v2")
        .call(json!({}), &ctx)
        .await
        .unwrap();
    assert_eq!(odd.content, "odd");

    let failed = tool_named(&hub, "test__fail")
        .call(json!({}), &ctx)
        .await
        .unwrap();
    assert!(failed.is_error);
    assert_eq!(failed.content, "it failed on purpose");
    let refused = tool_named(&hub, "test__refuse")
        .call(json!({}), &ctx)
        .await
        .unwrap();
    assert!(refused.is_error);
    assert!(
        refused.content.contains("the MCP server test refused the call")
            && refused.content.contains("nothing to refuse"),
        "{}",
        refused.content
    );
    let bad = tool_named(&hub, "test__echo").call(json!([1]), &ctx).await;
    assert!(bad.unwrap_err().to_string().contains("JSON object"));
}

#[tokio::test]
async fn approval_follows_the_servers_setting() {
    let served = serve().await;
    let hub = McpHub::start(vec![
        McpServerConfig::http("test", &served.url)
            .with_approval(jarvis_sdk::turn::McpApproval::ReadOnlyAllow),
    ]);
    hub.servers()[0].wait_for(running).await;
    assert!(!tool_named(&hub, "test__echo").requires_approval());
    assert!(tool_named(&hub, "test__add").requires_approval());
    let allow = McpHub::start(vec![
        McpServerConfig::http("test", &served.url).with_approval(jarvis_sdk::turn::McpApproval::Allow),
    ]);
    allow.servers()[0].wait_for(running).await;
    assert!(!tool_named(&allow, "test__add").requires_approval());
}

#[tokio::test]
async fn a_changed_tool_list_is_followed() {
    let served = serve().await;
    let hub = McpHub::start(vec![McpServerConfig::http("test", &served.url)]);
    hub.servers()[0].wait_for(running).await;
    assert!(hub.servers()[0].tools().iter().all(|t| t.name() != "test__extra"));
    let ctx = ToolContext::new("s", "main");
    tool_named(&hub, "test__grow")
        .call(json!({}), &ctx)
        .await
        .unwrap();
    let status = tokio::time::timeout(
        Duration::from_secs(20),
        hub.servers()[0].wait_for(|s| s.tools.iter().any(|t| t.name == "test__extra")),
    )
    .await
    .expect("the new tool is listed after tools/list_changed");
    assert_eq!(status.tools.len(), 8);
    let extra = tool_named(&hub, "test__extra")
        .call(json!({}), &ctx)
        .await
        .unwrap();
    assert_eq!(extra.content, "extra");
}

#[tokio::test]
async fn a_call_past_its_timeout_is_cancelled_at_the_server() {
    let mut served = serve().await;
    let hub = McpHub::start(vec![
        McpServerConfig::http("test", &served.url).with_timeout(Duration::from_millis(500)),
    ]);
    hub.servers()[0].wait_for(running).await;
    let ctx = ToolContext::new("s", "main");
    let result = tool_named(&hub, "test__slow")
        .call(json!({}), &ctx)
        .await
        .unwrap();
    assert!(result.is_error);
    assert!(
        result.content.contains("did not answer within 0.5s"),
        "{}",
        result.content
    );
    assert_eq!(served.heard.recv().await, Some(Heard::SlowStarted));
    let heard = tokio::time::timeout(Duration::from_secs(20), served.heard.recv()).await;
    assert_eq!(
        heard.unwrap(),
        Some(Heard::SlowCancelled),
        "the server heard notifications/cancelled"
    );
}

#[tokio::test]
async fn an_aborted_call_is_cancelled_at_the_server() {
    let mut served = serve().await;
    let hub = McpHub::start(vec![McpServerConfig::http("test", &served.url)]);
    hub.servers()[0].wait_for(running).await;
    let cancel = CancellationToken::new();
    let ctx = ToolContext::new("s", "main").with_cancel(cancel.clone());
    let slow = tool_named(&hub, "test__slow");
    let call = tokio::spawn(async move { slow.call(json!({}), &ctx).await });
    assert_eq!(served.heard.recv().await, Some(Heard::SlowStarted));
    cancel.cancel();
    let ended = call.await.unwrap();
    assert!(ended.unwrap_err().to_string().contains("cancelled"));
    let heard = tokio::time::timeout(Duration::from_secs(20), served.heard.recv()).await;
    assert_eq!(heard.unwrap(), Some(Heard::SlowCancelled));
}

#[tokio::test]
async fn a_server_that_does_not_start_is_left_out_and_the_others_run() {
    let served = serve().await;
    let hub = McpHub::start(vec![
        McpServerConfig::stdio("broken", "/nonexistent/mcp-server", vec![]),
        McpServerConfig::http("nothere", "http://127.0.0.1:1/mcp"),
        McpServerConfig::http("test", &served.url),
    ]);
    assert!(hub.wait_started(Duration::from_secs(30)).await);
    let statuses = hub.statuses();
    assert_eq!(statuses[0].state, McpServerState::Restarting);
    assert!(
        statuses[0]
            .error
            .as_deref()
            .unwrap()
            .contains("cannot run /nonexistent/mcp-server"),
        "{:?}",
        statuses[0].error
    );
    assert!(statuses[0].tools.is_empty());
    assert_eq!(statuses[1].state, McpServerState::Restarting);
    assert!(
        statuses[1].error.as_deref().unwrap().contains("127.0.0.1:1"),
        "{:?}",
        statuses[1].error
    );
    assert_eq!(statuses[2].state, McpServerState::Running);
    let offered: Vec<String> = hub
        .source_for("main", None)
        .tools()
        .iter()
        .map(|t| t.name().to_owned())
        .collect();
    assert_eq!(offered.len(), 7);
    assert!(offered.iter().all(|n| n.starts_with("test__")));
    hub.shutdown();
    let stopped = hub.servers()[2]
        .wait_for(|s| s.state == McpServerState::Stopped)
        .await;
    assert_eq!(stopped.state, McpServerState::Stopped);
}

#[tokio::test]
async fn agents_get_the_tools_their_servers_and_patterns_allow() {
    let served = serve().await;
    let hub = McpHub::start(vec![
        McpServerConfig::http("test", &served.url).with_agents(vec!["main".into()]),
        McpServerConfig::http("own", &served.url).owned_by("karen"),
    ]);
    hub.wait_started(Duration::from_secs(30)).await;
    let names = |agent: &str, patterns: Option<Vec<String>>| -> Vec<String> {
        hub.source_for(agent, patterns)
            .tools()
            .iter()
            .map(|t| t.name().to_owned())
            .collect()
    };
    assert_eq!(names("main", None).len(), 7);
    assert!(names("main", None).iter().all(|n| n.starts_with("test__")));
    assert_eq!(names("karen", None).len(), 7);
    assert!(names("karen", None).iter().all(|n| n.starts_with("own__")));
    assert!(names("other", None).is_empty());
    assert_eq!(
        names("main", Some(vec!["test__echo".into(), "own__*".into()])),
        ["test__echo"]
    );
    assert_eq!(names("karen", Some(vec!["own__*".into()])).len(), 7);
    assert!(names("main", Some(vec![])).is_empty());
}
