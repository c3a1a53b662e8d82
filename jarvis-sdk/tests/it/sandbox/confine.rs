//! Kernel confinement of `run_command` and `run_python`, through the loop
//! with approval given: a program cannot read `$JARVIS_HOME/approvals.yaml`,
//! another session's sandbox, the server's home or `/etc/shadow`, cannot
//! write outside its sandbox, cannot reach a TCP server on 127.0.0.1,
//! cannot read the server's `/proc/<pid>/environ` and has no capabilities;
//! it can read and write its sandbox, use `TMPDIR`, and run `python3` and
//! `git`. With `network` on, the connection succeeds. The assembled app
//! confines each agent as its definition (or, for JARVIS, the environment)
//! says.
//!
//! Without Landlock and seccomp these tests print a loud SKIPPED line and
//! pass, unless `JARVIS_REQUIRE_SANDBOX=1`, which makes them fail instead.

use jarvis_pack_housing::HousingPack;
use jarvis_sdk::agent::{
    AgentEvent, AgentIdentity, AgentLoopConfig, ApprovalDecision, LoopContext, ToolGate, ToolRegistry,
    run_agent_loop,
};
use jarvis_sdk::app::{AppAssembly, AppConfig, build_app};
use jarvis_sdk::model::{FauxProvider, Message};
use jarvis_sdk::testing::{FixedApprover, RecordingAdapter};
use jarvis_sdk::turn::{BuiltinConfig, Caller, SandboxSettings, builtin_tools};
use serde_json::{Value, json};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Makes the confinement tests fail instead of skip where the kernel
/// cannot confine programs.
pub(crate) const REQUIRE_SANDBOX_ENV: &str = "JARVIS_REQUIRE_SANDBOX";

/// The text of every file a program must not read.
const SECRET: &str = "SECRET-c0ffee";

/// Whether programs are fully confined here. Prints a loud SKIPPED line
/// when not, or fails the test under `JARVIS_REQUIRE_SANDBOX=1`.
pub(crate) fn confined_or_skip(test: &str) -> bool {
    let confinement = jarvis_sdk::turn::kernel_confinement();
    if confinement.full {
        return true;
    }
    let note = confinement.note().unwrap_or_default();
    assert!(
        std::env::var(REQUIRE_SANDBOX_ENV).as_deref() != Ok("1"),
        "{test}: {REQUIRE_SANDBOX_ENV}=1 but programs cannot be confined here: {note}"
    );
    eprintln!(
        "\n!!!!!!!!!! SKIPPED {test}: programs cannot be confined on this machine ({note}); \
         set {REQUIRE_SANDBOX_ENV}=1 to fail instead !!!!!!!!!!\n"
    );
    false
}

/// A temporary `JARVIS_HOME` with secrets where no program may look:
///
/// ```text
/// <home>/approvals.yaml               SECRET
/// <home>/sandboxes/other/secret.txt   SECRET (another session's file)
/// <home>/sandboxes/mine/              the session under test
/// ```
pub(crate) struct Home {
    tmp: tempfile::TempDir,
}

impl Home {
    pub(crate) fn new() -> Self {
        let tmp = tempfile::tempdir().expect("temp dir");
        std::fs::write(
            tmp.path().join("approvals.yaml"),
            format!("# {SECRET}\n- {{ tool: run_command, args: {{ program: git }}, decision: allow }}\n"),
        )
        .unwrap();
        let other = tmp.path().join("sandboxes/other");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("secret.txt"), SECRET).unwrap();
        Self { tmp }
    }

    pub(crate) fn path(&self) -> &Path {
        self.tmp.path()
    }

    fn config(&self, sandbox: SandboxSettings) -> BuiltinConfig {
        BuiltinConfig::for_home(self.path())
            .with_sandbox(sandbox)
            .with_require_confinement(true)
    }

    fn sandbox(&self, session: &str) -> PathBuf {
        self.path().join("sandboxes").join(session)
    }
}

/// One tool call through the loop (prepared, gated with approval given,
/// run); returns the result the model read.
async fn call(config: &BuiltinConfig, session: &str, tool: &str, args: Value) -> (bool, String) {
    let script = json!({
        "replies": [
            {"tool_calls": [{"name": tool, "arguments": args}]},
            {"text": "done"}
        ]
    });
    let faux = FauxProvider::from_yaml(&script.to_string()).expect("valid script");
    let mut tools = ToolRegistry::new();
    for tool in builtin_tools(config.clone()) {
        tools.register(tool).unwrap();
    }
    let approver = Arc::new(FixedApprover::new(ApprovalDecision::Allow));
    let ctx = LoopContext::new(Arc::new(faux))
        .with_tools(tools)
        .with_gate(ToolGate::new().with_approver(approver.clone()))
        .with_identity(AgentIdentity {
            agent_id: "main".into(),
            agent_name: "J.A.R.V.I.S.".into(),
            session_id: session.into(),
        });
    let outcome = run_agent_loop(
        &ctx,
        &AgentLoopConfig::default(),
        vec![Message::user("go")],
        &CancellationToken::new(),
    )
    .await
    .expect("valid loop config");
    let result = outcome
        .new_messages
        .iter()
        .find_map(|m| match m {
            Message::Tool(r) => Some(r.clone()),
            _ => None,
        })
        .expect("the tool ran");
    assert_eq!(approver.asked(), [tool], "approval was asked and given");
    (result.is_error, result.content)
}

async fn sh(config: &BuiltinConfig, session: &str, script: &str) -> (bool, String) {
    call(
        config,
        session,
        "run_command",
        json!({"program": "sh", "args": ["-c", script]}),
    )
    .await
}

async fn python(config: &BuiltinConfig, session: &str, code: &str) -> (bool, String) {
    call(config, session, "run_python", json!({"code": code})).await
}

/// A TCP server on 127.0.0.1 that reports every connection it accepts.
pub(crate) struct Listener {
    pub(crate) port: u16,
    accepted: mpsc::Receiver<()>,
}

impl Listener {
    pub(crate) fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let port = listener.local_addr().unwrap().port();
        let (tx, accepted) = mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stream.is_ok() && tx.send(()).is_err() {
                    return;
                }
            }
        });
        Self { port, accepted }
    }

    /// Whether a connection arrived by now (the client has finished, so
    /// the accept has happened or never will; a short grace covers the
    /// listener thread's scheduling).
    pub(crate) fn was_reached(&self) -> bool {
        self.accepted.recv_timeout(Duration::from_secs(2)).is_ok()
    }

    /// Python that connects to the listener and prints `connected`.
    pub(crate) fn python_client(&self) -> String {
        format!(
            "import socket\ns = socket.create_connection(('127.0.0.1', {}), timeout=10)\nprint('connected')\ns.close()",
            self.port
        )
    }
}

#[tokio::test]
async fn commands_cannot_read_outside_their_sandbox() {
    if !confined_or_skip("commands_cannot_read_outside_their_sandbox") {
        return;
    }
    let home = Home::new();
    let config = home.config(SandboxSettings::new());
    let approvals = home.path().join("approvals.yaml");
    let other = home.sandbox("other").join("secret.txt");
    for target in [&approvals, &other] {
        let (is_error, text) = sh(&config, "mine", &format!("cat '{}'", target.display())).await;
        assert!(is_error, "{text}");
        assert!(text.contains("Permission denied"), "{text}");
        assert!(!text.contains(SECRET), "{text}");

        let code = format!("print(open({:?}).read())", target.display().to_string());
        let (is_error, text) = python(&config, "mine", &code).await;
        assert!(is_error && text.contains("PermissionError"), "{text}");
        assert!(!text.contains(SECRET), "{text}");
    }
    // Nor list JARVIS_HOME, the server's home, or read the system's secrets.
    let server_home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    for dir in [home.path().display().to_string(), server_home] {
        let (is_error, text) = sh(&config, "mine", &format!("ls '{dir}'")).await;
        assert!(is_error && text.contains("Permission denied"), "{dir}: {text}");
    }
    if Path::new("/etc/shadow").exists() {
        let (is_error, text) = sh(&config, "mine", "cat /etc/shadow").await;
        assert!(is_error && text.contains("Permission denied"), "{text}");
    }
    // The system's public files stay readable.
    let (is_error, text) = sh(&config, "mine", "head -n 1 /etc/passwd").await;
    assert!(!is_error && text.contains("root:"), "{text}");
}

#[tokio::test]
async fn commands_cannot_read_the_servers_environment_through_proc() {
    if !confined_or_skip("commands_cannot_read_the_servers_environment_through_proc") {
        return;
    }
    let home = Home::new();
    let config = home.config(SandboxSettings::new());
    let server = std::process::id();
    for entry in ["environ", "mem"] {
        let (is_error, text) = sh(&config, "mine", &format!("head -c 64 /proc/{server}/{entry}")).await;
        assert!(is_error && text.contains("Permission denied"), "{entry}: {text}");
    }
    // Its own /proc entries are readable, and say what binds it: no
    // capabilities (also when the server runs as root), no_new_privs and a
    // seccomp filter.
    let (is_error, text) = sh(&config, "mine", "cat /proc/self/status").await;
    assert!(!is_error, "{text}");
    assert!(text.contains("CapEff:\t0000000000000000"), "{text}");
    assert!(text.contains("CapPrm:\t0000000000000000"), "{text}");
    assert!(text.contains("NoNewPrivs:\t1"), "{text}");
    assert!(text.contains("Seccomp:\t2"), "{text}");
}

#[tokio::test]
async fn commands_cannot_write_outside_their_sandbox() {
    if !confined_or_skip("commands_cannot_write_outside_their_sandbox") {
        return;
    }
    let home = Home::new();
    let config = home.config(SandboxSettings::new());
    let outside = home.path().join("pwned.txt");
    let other = home.sandbox("other").join("secret.txt");
    let (is_error, text) = sh(&config, "mine", &format!("echo x > '{}'", outside.display())).await;
    assert!(is_error && text.contains("Permission denied"), "{text}");
    let code = format!("open({:?}, 'w').write('x')", other.display().to_string());
    let (is_error, text) = python(&config, "mine", &code).await;
    assert!(is_error && text.contains("PermissionError"), "{text}");
    let (is_error, text) = sh(&config, "mine", &format!("rm -f '{}'", other.display())).await;
    assert!(is_error, "{text}");
    assert!(!outside.exists(), "a file was written outside the sandbox");
    assert_eq!(std::fs::read_to_string(&other).unwrap(), SECRET);
}

#[tokio::test]
async fn commands_cannot_reach_the_network_unless_allowed() {
    if !confined_or_skip("commands_cannot_reach_the_network_unless_allowed") {
        return;
    }
    let home = Home::new();
    let listener = Listener::start();
    let closed = home.config(SandboxSettings::new());
    let (is_error, text) = python(&closed, "mine", &listener.python_client()).await;
    assert!(is_error && text.contains("PermissionError"), "{text}");
    assert!(!text.contains("connected\n"), "{text}");
    if Path::new("/bin/bash").exists() {
        let (is_error, text) = call(
            &closed,
            "mine",
            "run_command",
            json!({"program": "bash", "args": ["-c", format!("echo hi > /dev/tcp/127.0.0.1/{}", listener.port)]}),
        )
        .await;
        assert!(is_error, "{text}");
    }
    assert!(!listener.was_reached(), "a confined program reached the listener");

    let open = home.config(SandboxSettings::new().with_network(true));
    let (is_error, text) = python(&open, "mine", &listener.python_client()).await;
    assert!(!is_error && text.contains("connected"), "{text}");
    assert!(listener.was_reached(), "the listener saw no connection");
}

#[tokio::test]
async fn commands_work_in_their_sandbox_and_run_python_and_git() {
    if !confined_or_skip("commands_work_in_their_sandbox_and_run_python_and_git") {
        return;
    }
    let home = Home::new();
    let config = home.config(SandboxSettings::new());
    let (is_error, text) = sh(
        &config,
        "mine",
        "mkdir -p notes && echo hello > notes/a.txt && cat notes/a.txt && echo \"$TMPDIR\"",
    )
    .await;
    assert!(!is_error, "{text}");
    assert!(text.contains("hello"), "{text}");
    let tmp = home.sandbox("mine").join(".tmp");
    assert!(text.contains(&tmp.display().to_string()), "{text}");
    assert!(!text.contains("not confined"), "{text}");

    let (is_error, text) = python(
        &config,
        "mine",
        "import tempfile, os\nwith tempfile.NamedTemporaryFile(delete=False) as f:\n    f.write(b'x')\nprint(os.path.dirname(f.name))\nprint(open('notes/a.txt').read())",
    )
    .await;
    assert!(!is_error, "{text}");
    assert!(text.contains(&tmp.display().to_string()), "{text}");
    assert!(text.contains("hello"), "{text}");

    let (is_error, text) = call(
        &config,
        "mine",
        "run_command",
        json!({"program": "python3", "args": ["-c", "print(6 * 7)"]}),
    )
    .await;
    assert!(!is_error && text.contains("42"), "{text}");

    let (is_error, text) = call(
        &config,
        "mine",
        "run_command",
        json!({"program": "git", "args": ["init", "repo"]}),
    )
    .await;
    assert!(!is_error, "{text}");
    assert!(home.sandbox("mine").join("repo/.git/HEAD").is_file(), "{text}");
}

#[tokio::test]
async fn widened_paths_are_readable_and_writable() {
    if !confined_or_skip("widened_paths_are_readable_and_writable") {
        return;
    }
    let home = Home::new();
    let shared = tempfile::tempdir().unwrap();
    std::fs::write(shared.path().join("data.txt"), "shared data").unwrap();
    let out = tempfile::tempdir().unwrap();
    let config = home.config(
        SandboxSettings::new()
            .with_read(shared.path())
            .with_write(out.path()),
    );
    let script = format!(
        "cat '{}' && echo written > '{}' && echo no > '{}'",
        shared.path().join("data.txt").display(),
        out.path().join("result.txt").display(),
        shared.path().join("nope.txt").display(),
    );
    let (is_error, text) = sh(&config, "mine", &script).await;
    assert!(is_error, "the read-only path refused the last write: {text}");
    assert!(text.contains("shared data"), "{text}");
    assert_eq!(
        std::fs::read_to_string(out.path().join("result.txt")).unwrap(),
        "written\n"
    );
    assert!(!shared.path().join("nope.txt").exists());
}

/// What each tool call of a turn ended with, as the screens saw it.
fn tool_ends(screen: &RecordingAdapter) -> Vec<(String, bool, String)> {
    screen
        .events()
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::ToolExecutionEnd {
                tool_name,
                is_error,
                result,
                ..
            } => Some((tool_name, is_error, result)),
            _ => None,
        })
        .collect()
}

/// An app whose every agent calls `run_python` with `code` when prompted
/// `python`, and `run_command` with `cat <home>/approvals.yaml` when
/// prompted `cat`; rules allow both, so nobody is asked.
async fn app_running(config: AppConfig, code: &str) -> AppAssembly {
    let approvals = config.home.join("approvals.yaml");
    let cat = json!({"program": "cat", "args": [approvals.display().to_string()]});
    let script = json!({
        "rules": [
            {"when": {"purpose": "step", "last_role": "user", "last_user": "^python$"},
             "reply": {"tool_calls": [{"name": "run_python", "arguments": {"code": code}}]}},
            {"when": {"purpose": "step", "last_role": "user", "last_user": "^cat$"},
             "reply": {"tool_calls": [{"name": "run_command", "arguments": cat}]}},
        ],
        "fallback": {"text": "done"}
    });
    let faux = Arc::new(FauxProvider::from_yaml(&script.to_string()).expect("valid script"));
    let config = config.with_provider(faux).without_memory();
    build_app(config).await.expect("the app builds")
}

/// Runs the prompts `python` and `cat` in a new session of `agent` and
/// returns what its tool calls ended with.
async fn turn_of(app: &AppAssembly, agent: &str) -> Vec<(String, bool, String)> {
    let meta = app.create_session(Some(agent)).await.unwrap();
    let session = app.session(&meta.id).await.unwrap();
    let screen = Arc::new(RecordingAdapter::new());
    let _attached = session.attach(screen.clone());
    for prompt in ["python", "cat"] {
        session
            .prompt(prompt, Caller::Local)
            .await
            .expect("the turn runs");
    }
    tool_ends(&screen)
}

fn rules_allowing_the_tools(home: &Path) {
    std::fs::write(
        home.join("approvals.yaml"),
        format!(
            "# {SECRET}\n- {{ tool: run_python, decision: allow }}\n\
             - {{ tool: run_command, args: {{ program: cat }}, decision: allow }}\n"
        ),
    )
    .unwrap();
}

#[tokio::test]
async fn the_assembled_app_confines_each_agent_as_its_definition_says() {
    if !confined_or_skip("the_assembled_app_confines_each_agent_as_its_definition_says") {
        return;
    }
    let home = Home::new();
    rules_allowing_the_tools(home.path());
    let listener = Listener::start();
    let config = AppConfig::embedded(home.path())
        .with_definition("netty", "sandbox: { network: true }\n")
        .with_definition("closed", "description: no sandbox key\n");
    let app = app_running(config, &listener.python_client()).await;

    for agent in ["closed", "main"] {
        let ends = turn_of(&app, agent).await;
        assert_eq!(ends.len(), 2, "{agent}: {ends:?}");
        let (tool, is_error, text) = &ends[0];
        assert_eq!(tool, "run_python");
        assert!(*is_error && text.contains("PermissionError"), "{agent}: {text}");
        let (tool, is_error, text) = &ends[1];
        assert_eq!(tool, "run_command");
        assert!(*is_error && text.contains("Permission denied"), "{agent}: {text}");
        assert!(!text.contains(SECRET), "{agent}: {text}");
    }
    assert!(!listener.was_reached(), "a confined agent reached the listener");

    let ends = turn_of(&app, "netty").await;
    assert!(!ends[0].1 && ends[0].2.contains("connected"), "{ends:?}");
    assert!(listener.was_reached(), "netty's program reached the listener");
    assert!(ends[1].1 && !ends[1].2.contains(SECRET), "{ends:?}");
}

#[tokio::test]
async fn jarvis_is_widened_by_the_environment() {
    if !confined_or_skip("jarvis_is_widened_by_the_environment") {
        return;
    }
    let home = Home::new();
    rules_allowing_the_tools(home.path());
    let listener = Listener::start();
    let home_text = home.path().display().to_string();
    let vars = [
        ("JARVIS_HOME", home_text.as_str()),
        ("JARVIS_SANDBOX__NETWORK", "1"),
        ("JARVIS_SANDBOX__REQUIRE", "1"),
    ];
    let mut config =
        AppConfig::from_lookup(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())).unwrap();
    config.packs = vec![std::sync::Arc::new(HousingPack::in_memory())];
    assert!(config.sandbox.network && config.require_sandbox);
    let app = app_running(config, &listener.python_client()).await;
    let ends = turn_of(&app, "main").await;
    assert!(!ends[0].1 && ends[0].2.contains("connected"), "{ends:?}");
    assert!(listener.was_reached());
    // KAREN (the built-in team) is not widened by JARVIS's settings; she
    // has no process tools at all.
    let karen = app.registry().get("karen").expect("the built-in team loads");
    assert_eq!(karen.sandbox, SandboxSettings::default());
}
