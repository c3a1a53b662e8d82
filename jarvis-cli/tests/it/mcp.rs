//! `jarvis mcp serve` under a real MCP client: the `mcp` Python SDK,
//! driven by `tests/fixtures/mcp_client.py`, from the virtual environment
//! `<workspace>/target/mcp-cache/py`. Without it every test here prints a
//! loud `SKIPPED` line and passes, unless `JARVIS_REQUIRE_MCP=1`, which
//! makes it a failure.

use jarvis_sdk::agent::SessionKind;
use jarvis_server::client::Client;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{TempHome, WAIT, jarvis_env, scripted, text, wait_output};

/// The Python of the virtual environment with the `mcp` SDK, if there is one.
fn mcp_python(test: &str) -> Option<PathBuf> {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/mcp-cache/py/bin/python");
    let usable = python.exists()
        && Command::new(&python)
            .args(["-c", "import mcp"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    if usable {
        return Some(python);
    }
    let why = format!(
        "no Python with the `mcp` SDK at {} (create the virtual environment there and `pip install mcp`)",
        python.display()
    );
    if std::env::var("JARVIS_REQUIRE_MCP").as_deref() == Ok("1") {
        panic!("JARVIS_REQUIRE_MCP=1: {why}");
    }
    eprintln!("SKIPPED {test}: {why}; JARVIS_REQUIRE_MCP=1 makes this a failure");
    None
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp_client.py")
}

/// The client over stdio, starting `jarvis mcp serve` for `home` with
/// `env`; its report (see the fixture).
fn over_stdio(python: &Path, home: &TempHome, env: &[(&str, &str)], args: &[&str]) -> Value {
    let log = home.0.join(format!("mcp-stdout-{}.log", std::process::id()));
    let mut cmd = Command::new(python);
    jarvis_env(&mut cmd, &home.0);
    for (name, value) in env {
        cmd.env(name, value);
    }
    cmd.arg(fixture())
        .arg("stdio")
        .arg(&log)
        .args(args)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_jarvis"))
        .args(["mcp", "serve"]);
    report(cmd)
}

/// Runs the client and reads its report, the last line of its stdout.
fn report(mut cmd: Command) -> Value {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_output(child);
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "the MCP client failed\nstdout: {stdout}\nstderr: {}",
        text(&out.stderr)
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {stdout}\n{}", text(&out.stderr)))
}

fn answers(report: &Value) -> Vec<(String, bool)> {
    report["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["text"].as_str().unwrap().to_owned(),
                c["is_error"].as_bool().unwrap(),
            )
        })
        .collect()
}

#[track_caller]
fn assert_only_mcp_on_stdout(report: &Value, at_least: u64) {
    assert_eq!(report["stdout_bad"], serde_json::json!([]), "{report}");
    assert!(report["stdout_lines"].as_u64().unwrap() >= at_least, "{report}");
}

const KAREN: &str = r#"
rules:
  - when: { agent: karen }
    reply: { text: "KAREN: the rent fits your budget", chunks: 3 }
fallback: { text: "JARVIS here" }
"#;

/// J.A.R.V.I.S. writes a file, which needs a person's approval.
const WRITE: &str = r#"
rules:
  - when: { agent: main, last_role: user, last_user: "write" }
    reply: { tool_calls: [ { name: write_file, arguments: { path: "note.txt", content: "hi" } } ] }
  - when: { agent: main, last_role: tool }
    reply: { text: "JARVIS is done" }
fallback: { text: "JARVIS here" }
"#;

fn faux_env(home: &TempHome, script: &str) -> Vec<(&'static str, String)> {
    vec![
        ("JARVIS_LLM__PROVIDER", "faux".to_owned()),
        ("JARVIS_FAUX__SCRIPT", home.script(script).display().to_string()),
    ]
}

fn env_refs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

#[test]
fn mcp_serve_alone_assembles_the_app_and_answers_as_karen() {
    let Some(python) = mcp_python("mcp_serve_alone_assembles_the_app_and_answers_as_karen") else {
        return;
    };
    let home = TempHome::new();
    let env = faux_env(&home, KAREN);
    let report = over_stdio(
        &python,
        &home,
        &env_refs(&env),
        &[
            "--call",
            "ask_karen=can I afford the flat?",
            "--call",
            "ask_karen=and the deposit?",
            "--call",
            "ask_main=hello",
        ],
    );
    let tools = report["tools"].as_array().unwrap();
    assert!(
        tools.contains(&"ask_main".into()) && tools.contains(&"ask_karen".into()),
        "{report}"
    );
    assert_eq!(
        answers(&report),
        [
            ("KAREN: the rent fits your budget".to_owned(), false),
            ("KAREN: the rent fits your budget".to_owned(), false),
            ("JARVIS here".to_owned(), false),
        ]
    );
    // initialize, tools/list and three calls answered; nothing else.
    assert_only_mcp_on_stdout(&report, 5);
    // One session per agent for this client, kind `mcp`.
    let meta: Value = serde_json::from_str(
        &std::fs::read_to_string(home.0.join("sessions/mcp-karen-1.meta.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        (meta["kind"].as_str(), meta["agent_id"].as_str()),
        (Some("mcp"), Some("karen"))
    );
    let history = std::fs::read_to_string(home.0.join("sessions/mcp-karen-1.jsonl")).unwrap();
    assert_eq!(history.matches("\"turn_start\"").count(), 2, "{history}");
    assert!(home.0.join("sessions/mcp-main-1.meta.json").exists());

    // The home lock went with the process; the next client's session does
    // not reuse the first one's id.
    let report = over_stdio(&python, &home, &env_refs(&env), &["--call", "ask_karen=again"]);
    assert!(!answers(&report)[0].1, "{report}");
    assert!(home.0.join("sessions/mcp-karen-2.meta.json").exists());
    let out = crate::jarvis(&home.0).arg("sessions").output().unwrap();
    let listed = text(&out.stdout);
    assert!(
        listed.contains("mcp-karen-1") && listed.contains("mcp-karen-2"),
        "{listed}"
    );
}

#[test]
fn mcp_serve_asks_the_client_for_approvals_it_can_answer() {
    let Some(python) = mcp_python("mcp_serve_asks_the_client_for_approvals_it_can_answer") else {
        return;
    };
    let home = TempHome::new();
    let env = faux_env(&home, WRITE);
    let report = over_stdio(
        &python,
        &home,
        &env_refs(&env),
        &["--elicit", "allow", "--call", "ask_main=write a note"],
    );
    assert_eq!(answers(&report), [("JARVIS is done".to_owned(), false)]);
    let asked = report["elicitations"][0].as_str().unwrap_or_default();
    assert!(
        asked.contains("wants to run write_file") && asked.contains("mcp-main-1"),
        "{report}"
    );
    assert_eq!(
        std::fs::read_to_string(home.0.join("sandboxes/mcp-main-1/note.txt")).unwrap(),
        "hi"
    );
    assert_only_mcp_on_stdout(&report, 4);

    // Declining the form denies the call; the agent hears so.
    let report = over_stdio(
        &python,
        &home,
        &env_refs(&env),
        &["--elicit", "decline", "--call", "ask_main=write again"],
    );
    assert_eq!(report["elicitations"].as_array().unwrap().len(), 1, "{report}");
    let history = std::fs::read_to_string(home.0.join("sessions/mcp-main-2.jsonl")).unwrap();
    assert!(history.contains("the person denied it"), "{history}");
    assert!(!home.0.join("sandboxes/mcp-main-2/note.txt").exists());
}

#[test]
fn mcp_serve_goes_through_the_running_server_with_its_token() {
    let Some(python) = mcp_python("mcp_serve_goes_through_the_running_server_with_its_token") else {
        return;
    };
    let home = TempHome::new();
    let mut server = crate::Running::start(scripted(&home, KAREN).env("JARVIS_WEB__TOKEN", "s3cret").args([
        "--port",
        "0",
        "--no-open",
    ]));
    server.expect(0, "HUD: http://127.0.0.1:");
    // The server holds the home: `mcp serve` must not assemble the app (it
    // could not take the lock) but talk to the server's `/mcp`.
    let env = [("JARVIS_WEB__TOKEN", "s3cret")];
    let report = over_stdio(&python, &home, &env, &["--call", "ask_karen=can I afford it?"]);
    assert_eq!(
        answers(&report),
        [("KAREN: the rent fits your budget".to_owned(), false)]
    );
    let tools = report["tools"].as_array().unwrap();
    assert!(
        tools.contains(&"ask_main".into()) && tools.contains(&"ask_karen".into()),
        "{report}"
    );
    assert_only_mcp_on_stdout(&report, 3);
    // The session is the server's, listed by its API.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let sessions = runtime.block_on(async {
        let client = tokio::time::timeout(WAIT, Client::discover(&home.0, Some("s3cret".to_owned())))
            .await
            .unwrap()
            .expect("the server answers for its home");
        client.sessions().await.unwrap()
    });
    let session = sessions
        .iter()
        .find(|s| s.id.as_str() == "mcp-karen-1")
        .unwrap_or_else(|| panic!("no mcp-karen-1 in {sessions:?}"));
    assert_eq!(session.kind, SessionKind::Mcp);
    assert_eq!(session.agent_id, "karen");

    crate::signal(server.pid(), "TERM");
    let (status, out, err) = server.finish();
    assert!(status.success(), "{out}\n{err}");
}
