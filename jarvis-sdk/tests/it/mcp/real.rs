//! Real MCP servers nobody here wrote, installed by `.ci/run` at pinned
//! versions into `target/mcp-cache/`: `mcp-server-time` (PyPI, stdio) and
//! `@modelcontextprotocol/server-everything` (npm, stdio and streamable
//! HTTP). Without the cache these tests print a loud SKIPPED line; with
//! `JARVIS_REQUIRE_MCP=1` they fail instead.

use jarvis_sdk::agent::{ApprovalDecision, Tool, ToolContext};
use jarvis_sdk::turn::{Caller, McpApproval, McpHub, McpServerConfig, McpServerState};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncBufReadExt;
use tokio::sync::mpsc;

use super::app::{Screen, Seen, app, approvals, result_of, script, turn};

const EVERYTHING: &str = "npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js";

/// The cache of test servers, or `None` (after saying so) without it.
fn cache() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .join("target/mcp-cache");
    if dir.join("py/bin/python").exists() && dir.join(EVERYTHING).exists() {
        return Some(dir);
    }
    let what = format!(
        "the MCP test servers are not installed in {} (.ci/run installs them)",
        dir.display()
    );
    if std::env::var("JARVIS_REQUIRE_MCP").as_deref() == Ok("1") {
        panic!("JARVIS_REQUIRE_MCP=1 but {what}");
    }
    eprintln!("\n!!!!!!!! SKIPPED: {what} !!!!!!!!\n");
    None
}

fn time_server(cache: &Path) -> McpServerConfig {
    McpServerConfig::stdio(
        "time",
        cache.join("py/bin/python").display().to_string(),
        ["-m", "mcp_server_time", "--local-timezone", "Asia/Seoul"]
            .map(String::from)
            .to_vec(),
    )
}

fn everything_stdio(cache: &Path) -> McpServerConfig {
    McpServerConfig::stdio(
        "everything",
        "node",
        vec![cache.join(EVERYTHING).display().to_string(), "stdio".into()],
    )
}

/// Starts `server-everything` over streamable HTTP on a free port; the
/// child is killed when the returned handle drops.
async fn everything_http(cache: &Path) -> (tokio::process::Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = tokio::process::Command::new("node")
        .arg(cache.join(EVERYTHING))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs");
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let listening = tokio::time::timeout(Duration::from_secs(60), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("listening on port") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(listening, Ok(true), "server-everything did not start over HTTP");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, format!("http://127.0.0.1:{port}/mcp"))
}

fn tool(hub: &McpHub, index: usize, name: &str) -> Arc<dyn Tool> {
    hub.servers()[index]
        .tools()
        .into_iter()
        .find(|t| t.name() == name)
        .unwrap_or_else(|| panic!("no tool {name} in {:?}", hub.statuses()[index]))
}

#[tokio::test]
async fn the_time_server_tells_the_time_in_seoul_through_a_turn() {
    let Some(cache) = cache() else { return };
    let home = tempfile::tempdir().unwrap();
    let script = script(&[(
        "몇 시",
        "{ name: time__get_current_time, arguments: { timezone: \"Asia/Seoul\" } }",
    )]);
    let server = time_server(&cache).with_approval(McpApproval::Allow);
    let (app, _faux) = app(home.path(), &script, |c| c.with_mcp_server(server)).await;
    assert_eq!(
        app.mcp().statuses()[0].state,
        McpServerState::Running,
        "{:?}",
        app.mcp().statuses()
    );
    let seen = turn(&app, "main", "몇 시야?", ApprovalDecision::Deny).await;
    let (result, is_error) = result_of(&seen, "time__get_current_time");
    assert!(!is_error, "{result}");
    assert!(
        result.contains("\"timezone\": \"Asia/Seoul\"") && result.contains("+09:00"),
        "{result}"
    );
}

#[tokio::test]
async fn everythings_echo_and_sum_work_over_stdio_and_streamable_http() {
    let Some(cache) = cache() else { return };
    let (_child, url) = everything_http(&cache).await;
    let hub = McpHub::start(vec![
        everything_stdio(&cache),
        McpServerConfig::http("everything", url),
    ]);
    assert!(hub.wait_started(Duration::from_secs(60)).await);
    let ctx = ToolContext::new("s", "main");
    for index in 0..2 {
        let status = &hub.statuses()[index];
        assert_eq!(status.state, McpServerState::Running, "{status:?}");
        let echo = tool(&hub, index, "everything__echo");
        let said = echo.call(json!({"message": "안녕 MCP"}), &ctx).await.unwrap();
        assert!(!said.is_error && said.content.contains("안녕 MCP"), "{said:?}");
        let sum = tool(&hub, index, "everything__get-sum")
            .call(json!({"a": 2, "b": 40}), &ctx)
            .await
            .unwrap();
        assert!(!sum.is_error && sum.content.contains("42"), "{sum:?}");
        let wrong = tool(&hub, index, "everything__get-sum")
            .call(json!({"a": "x"}), &ctx)
            .await
            .unwrap();
        assert!(wrong.is_error, "{wrong:?}");
    }
}

#[tokio::test]
async fn a_killed_server_is_restarted_and_the_next_call_works() {
    let Some(cache) = cache() else { return };
    let hub = McpHub::start(vec![everything_stdio(&cache)]);
    let server = &hub.servers()[0];
    let up = server.wait_for(|s| s.state == McpServerState::Running).await;
    let pid = up.pid.expect("a stdio server has a pid");
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    // The death is noticed and the server started again.
    let back = tokio::time::timeout(
        Duration::from_secs(60),
        server.wait_for(|s| s.state == McpServerState::Running && s.restarts >= 1),
    )
    .await
    .expect("the server is restarted");
    assert!(back.error.is_none());
    let ctx = ToolContext::new("s", "main");
    let echo = tool(&hub, 0, "everything__echo");
    let said = tokio::time::timeout(
        Duration::from_secs(60),
        echo.call(json!({"message": "again"}), &ctx),
    )
    .await
    .expect("the call ends")
    .unwrap();
    assert!(!said.is_error && said.content.contains("again"), "{said:?}");
    let status = server.status();
    assert!(status.restarts >= 1, "{status:?}");
    let second = status.pid.expect("running again");
    assert_ne!(second, pid);
    // Shut down with the app: the process is gone once the server stopped.
    hub.shutdown();
    server.wait_for(|s| s.state == McpServerState::Stopped).await;
    let alive = std::fs::read_to_string(format!("/proc/{second}/stat"))
        .is_ok_and(|stat| stat.split_whitespace().nth(2).is_none_or(|state| state != "Z"));
    assert!(!alive, "the server process {second} outlived its shutdown");
}

#[tokio::test]
async fn a_tool_that_asks_asks_on_the_screen_and_an_abort_cancels_a_long_operation() {
    let Some(cache) = cache() else { return };
    let home = tempfile::tempdir().unwrap();
    let script = script(&[
        ("sum", "{ name: everything__get-sum, arguments: { a: 1, b: 2 } }"),
        (
            "long",
            "{ name: everything__trigger-long-running-operation, arguments: { duration: 120, steps: 120 } }",
        ),
    ]);
    let server = everything_stdio(&cache).with_approval(McpApproval::ReadOnlyAllow);
    let karen = "boundaries: { ask: [everything__get-sum] }\n";
    let (app, _faux) = app(home.path(), &script, |c| {
        c.with_mcp_server(server).with_definition("karen", karen)
    })
    .await;
    // get-sum is read-only, so the server's setting would let it run; KAREN's
    // boundaries.ask names it: it asks on her screen.
    let seen = turn(&app, "karen", "sum", ApprovalDecision::Allow).await;
    assert_eq!(approvals(&seen), ["everything__get-sum"]);
    let (result, is_error) = result_of(&seen, "everything__get-sum");
    assert!(!is_error && result.contains('3'), "{result}");

    // The long operation takes 120 s; the abort ends the turn at once.
    let meta = app.default_session("main").await.unwrap();
    let session = app.session(&meta.id).await.unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let _attached = session.attach(Arc::new(Screen(tx)));
    let turn = {
        let session = session.clone();
        tokio::spawn(async move { session.prompt("long", Caller::Local).await })
    };
    let long = "everything__trigger-long-running-operation";
    loop {
        match tokio::time::timeout(Duration::from_secs(60), rx.recv()).await {
            Ok(Some(Seen::ToolStart(name))) if name == long => break,
            Ok(Some(Seen::Approval(_))) => panic!("read-only tools run unasked here"),
            Ok(Some(_)) => {}
            _ => panic!("the long operation did not start"),
        }
    }
    assert!(session.abort());
    tokio::time::timeout(Duration::from_secs(30), turn)
        .await
        .expect("the aborted turn ends long before the operation would")
        .unwrap()
        .unwrap();
    let ended = std::iter::from_fn(|| rx.try_recv().ok()).find_map(|s| match s {
        Seen::ToolEnd {
            name,
            result,
            is_error,
        } if name == long => Some((result, is_error)),
        _ => None,
    });
    let (result, is_error) = ended.expect("the call ended");
    assert!(is_error && result.contains("cancelled"), "{result}");
}
