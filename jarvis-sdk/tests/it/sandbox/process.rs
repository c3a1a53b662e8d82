//! The process tools: a program that sleeps past its timeout is killed with
//! everything it started; so is one whose turn is aborted or whose call is
//! dropped; no API key reaches a child; output is capped; no shell reads
//! the arguments; non-zero exits are errors; `run_python` runs code.

use jarvis_sdk::CancellationToken;
use jarvis_sdk::agent::{ToolContext, ToolError, ToolResult};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

use super::{Fixture, eventually};

/// Generous bound for things that should happen at once on an idle machine.
const PATIENCE: Duration = Duration::from_secs(20);

/// Starts `sh -c script` through `run_command` in a task.
fn spawn_sh(
    fx: &Fixture,
    session: &str,
    script: &str,
    cancel: CancellationToken,
) -> tokio::task::JoinHandle<Result<ToolResult, ToolError>> {
    let tool = fx.tool("run_command");
    let ctx = ToolContext::new(session, "main").with_cancel(cancel);
    let args = json!({"program": "sh", "args": ["-c", script]});
    tokio::spawn(async move { tool.call(args, &ctx).await })
}

/// The pid the program wrote to `file` in its sandbox, once written whole.
async fn pid_in(file: &Path) -> u32 {
    eventually(&format!("{}", file.display()), PATIENCE, || {
        let text = std::fs::read_to_string(file).ok()?;
        text.strip_suffix('\n')?.trim().parse().ok()
    })
    .await
}

/// Whether `pid` is a live process (a zombie awaiting its reaper is dead).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let state = stat.rsplit(") ").next().and_then(|rest| rest.chars().next());
            !matches!(state, Some('Z' | 'X' | 'x'))
        }
    }
}

async fn assert_dies(pid: u32, what: &str) {
    eventually(&format!("{what} (pid {pid}) to die"), PATIENCE, || {
        (!alive(pid)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_program_past_its_timeout_is_killed_with_its_children() {
    let fx = Fixture::new().with(|c| c.command_timeout = Duration::from_millis(1000));
    let root = fx.sandbox("t");
    let call = spawn_sh(
        &fx,
        "t",
        "echo $$ > sh.pid; sleep 300 & echo $! > child.pid; echo started; sleep 300",
        CancellationToken::new(),
    );
    let shell = pid_in(&root.join("sh.pid")).await;
    let grandchild = pid_in(&root.join("child.pid")).await;
    assert!(alive(grandchild), "the background sleep should be running");

    let result = tokio::time::timeout(PATIENCE, call)
        .await
        .expect("the call ends soon after its timeout")
        .unwrap()
        .expect("a timeout is a result, not a tool error");
    assert!(result.is_error, "{result:?}");
    assert!(
        result.content.starts_with("timed out after 1s"),
        "{}",
        result.content
    );
    assert!(
        result.content.contains("--- stdout ---\nstarted"),
        "{}",
        result.content
    );
    assert_dies(shell, "the program").await;
    assert_dies(grandchild, "the program's background child").await;
}

#[tokio::test]
async fn aborting_the_turn_kills_the_group() {
    let fx = Fixture::new();
    let root = fx.sandbox("c");
    let cancel = CancellationToken::new();
    let call = spawn_sh(
        &fx,
        "c",
        "sleep 300 & echo $! > child.pid; sleep 300",
        cancel.clone(),
    );
    let grandchild = pid_in(&root.join("child.pid")).await;
    cancel.cancel();
    let result = tokio::time::timeout(PATIENCE, call)
        .await
        .expect("cancel ends the call")
        .unwrap();
    assert!(matches!(result, Err(ToolError::Cancelled)), "{result:?}");
    assert_dies(grandchild, "the background child").await;
}

#[tokio::test]
async fn dropping_the_call_kills_the_group() {
    // The loop drops a tool's future when the turn is aborted mid-call.
    let fx = Fixture::new();
    let root = fx.sandbox("d");
    let call = spawn_sh(
        &fx,
        "d",
        "sleep 300 & echo $! > child.pid; sleep 300",
        CancellationToken::new(),
    );
    let grandchild = pid_in(&root.join("child.pid")).await;
    call.abort();
    let ended = call.await;
    assert!(ended.as_ref().is_err_and(|e| e.is_cancelled()), "{ended:?}");
    assert_dies(grandchild, "the background child").await;
}

#[tokio::test]
async fn background_processes_do_not_outlive_a_clean_exit() {
    let fx = Fixture::new();
    let root = fx.sandbox("b");
    let result = tokio::time::timeout(
        PATIENCE,
        spawn_sh(
            &fx,
            "b",
            "sleep 300 & echo $! > bg.pid; echo done",
            CancellationToken::new(),
        ),
    )
    .await
    .expect("the call does not wait for the background sleep")
    .unwrap()
    .unwrap();
    assert_eq!(result, ToolResult::ok("exit status 0\n--- stdout ---\ndone\n"));
    let bg = pid_in(&root.join("bg.pid")).await;
    assert_dies(bg, "the background sleep").await;
}

async fn run(fx: &Fixture, session: &str, program: &str, args: Value) -> ToolResult {
    fx.call("run_command", session, json!({"program": program, "args": args}))
        .await
}

/// Re-runs this test binary with API keys in its environment, so the probe
/// below can show that a child started from such a process sees none of
/// them (a test may not change its own environment: `unsafe` is forbidden).
#[test]
fn no_api_key_reaches_a_child() {
    let tmp = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["sandbox::process::env_probe", "--exact", "--nocapture"])
        .env("JARVIS_TEST_ENV_PROBE", tmp.path())
        .env("OPENAI_API_KEY", "sk-canary-openai")
        .env("ANTHROPIC_API_KEY", "sk-canary-anthropic")
        .env("JARVIS_LLM__API_KEY", "sk-canary-jarvis")
        .env("AWS_SECRET_ACCESS_KEY", "sk-canary-aws")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "probe failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("1 passed"), "the probe did not run:\n{stdout}");
}

/// The probe run by [`no_api_key_reaches_a_child`]; does nothing otherwise.
#[tokio::test]
async fn env_probe() {
    let Some(base) = std::env::var_os("JARVIS_TEST_ENV_PROBE") else {
        return;
    };
    assert_eq!(std::env::var("OPENAI_API_KEY").unwrap(), "sk-canary-openai");
    let fx = Fixture::new().with(|c| c.sandboxes_dir = Path::new(&base).join("sandboxes"));
    let root = fx.sandbox("e");

    let env = run(&fx, "e", "env", json!([])).await;
    assert!(!env.is_error, "{env:?}");
    assert!(!env.content.contains("sk-canary"), "{}", env.content);
    assert!(!env.content.contains("API_KEY"), "{}", env.content);
    assert!(!env.content.contains("JARVIS"), "{}", env.content);
    assert!(
        env.content.contains(&format!("HOME={}\n", root.display())),
        "{}",
        env.content
    );
    assert!(env.content.contains("PATH="), "{}", env.content);

    let py = fx
        .call(
            "run_python",
            "e",
            json!({"code": "import os\nprint(sorted(os.environ))\nprint(os.getcwd())"}),
        )
        .await;
    assert!(!py.is_error, "{py:?}");
    assert!(
        !py.content.contains("sk-canary") && !py.content.contains("API_KEY"),
        "{}",
        py.content
    );
    assert!(py.content.contains(&root.display().to_string()), "{}", py.content);
}

#[tokio::test]
async fn output_is_capped_and_the_pipe_is_drained() {
    let fx = Fixture::new().with(|c| c.output_cap = 1000);
    // 200,000 bytes would fill a pipe: the program only finishes because
    // the rest is read and counted.
    let r = run(
        &fx,
        "o",
        "sh",
        json!([
            "-c",
            "head -c 200000 /dev/zero | tr '\\0' x; echo oops >&2; exit 3"
        ]),
    )
    .await;
    assert!(r.is_error, "{r:?}");
    assert!(
        r.content.starts_with("exit status 3\n--- stdout ---\n"),
        "{}",
        r.content
    );
    assert!(r.content.contains(&format!(
        "{}\n[stdout truncated: showing the first 1000 of 200000 bytes]",
        "x".repeat(1000)
    )));
    assert!(r.content.ends_with("--- stderr ---\noops\n"), "{}", r.content);
    assert!(r.content.len() < 1200, "{} bytes", r.content.len());
}

#[tokio::test]
async fn arguments_reach_the_program_verbatim() {
    let fx = Fixture::new();
    let r = run(
        &fx,
        "a",
        "printf",
        json!(["%s|", "$HOME", "; rm -rf /", "$(id)", "`id`", "*", "a b"]),
    )
    .await;
    assert_eq!(
        r,
        ToolResult::ok("exit status 0\n--- stdout ---\n$HOME|; rm -rf /|$(id)|`id`|*|a b|")
    );
}

#[tokio::test]
async fn failures_are_error_results() {
    let fx = Fixture::new();
    let r = run(&fx, "f", "false", json!([])).await;
    assert_eq!(r, ToolResult::error("exit status 1\n(no output)"));

    let r = run(&fx, "f", "sh", json!(["-c", "kill -9 $$"])).await;
    assert_eq!(r, ToolResult::error("terminated by signal 9\n(no output)"));

    let r = run(&fx, "f", "jarvis-no-such-program", json!([])).await;
    assert!(r.is_error && r.content.starts_with("could not start"), "{r:?}");

    let r = run(&fx, "f", "../../bin/sh", json!([])).await;
    assert!(
        r.is_error && r.content.contains("leads outside the sandbox"),
        "{r:?}"
    );

    let r = run(&fx, "f", "", json!([])).await;
    assert!(r.is_error && r.content.contains("empty"), "{r:?}");

    let r = fx.call("run_command", "../x", json!({"program": "true"})).await;
    assert!(r.is_error && r.content.contains("invalid session id"), "{r:?}");

    let r = fx.call("run_command", "f", json!({"args": ["x"]})).await;
    assert!(
        r.is_error && r.content.contains("missing field `program`"),
        "{r:?}"
    );
}

#[tokio::test]
async fn programs_run_in_the_sandbox() {
    let fx = Fixture::new();
    let root = fx.sandbox("w");
    let r = run(&fx, "w", "pwd", json!([])).await;
    assert_eq!(
        r.content,
        format!("exit status 0\n--- stdout ---\n{}\n", root.display())
    );
    // A relative program path is resolved in the sandbox.
    std::fs::write(root.join("hello.sh"), "#!/bin/sh\necho hello from $0\n").unwrap();
    let r = run(&fx, "w", "sh", json!(["hello.sh"])).await;
    assert_eq!(r.content, "exit status 0\n--- stdout ---\nhello from hello.sh\n");
}

#[tokio::test]
async fn run_python_runs_code() {
    let fx = Fixture::new();
    let r = fx.call("run_python", "p", json!({"code": "print(6*7)"})).await;
    assert_eq!(r, ToolResult::ok("exit status 0\n--- stdout ---\n42\n"));

    let r = fx
        .call(
            "run_python",
            "p",
            json!({"code": "open('out.txt', 'w').write('한글')\nprint(open('out.txt').read())"}),
        )
        .await;
    assert!(!r.is_error, "{r:?}");
    assert!(r.content.contains("한글"), "{}", r.content);
    assert_eq!(
        std::fs::read_to_string(fx.base().join("p/out.txt")).unwrap(),
        "한글"
    );

    let r = fx
        .call(
            "run_python",
            "p",
            json!({"code": "raise SystemExit('bad input')"}),
        )
        .await;
    assert_eq!(r, ToolResult::error("exit status 1\n--- stderr ---\nbad input\n"));

    let r = fx.call("run_python", "p", json!({"code": "1/0"})).await;
    assert!(r.is_error && r.content.contains("ZeroDivisionError"), "{r:?}");
}

#[tokio::test]
async fn run_python_honours_the_timeout_and_the_interpreter_setting() {
    let fx = Fixture::new().with(|c| c.command_timeout = Duration::from_millis(500));
    let r = fx
        .call("run_python", "p", json!({"code": "import time\ntime.sleep(300)"}))
        .await;
    assert!(
        r.is_error && r.content.starts_with("timed out after 500ms"),
        "{r:?}"
    );

    let fx = Fixture::new().with(|c| c.python = "jarvis-no-such-python".into());
    let r = fx.call("run_python", "p", json!({"code": "print(1)"})).await;
    assert!(
        r.is_error && r.content.contains("could not start \"jarvis-no-such-python\""),
        "{r:?}"
    );
}

#[test]
fn names_schemas_and_approval_defaults() {
    let fx = Fixture::new();
    let tools = jarvis_sdk::turn::builtin_tools(fx.config.clone());
    let table: Vec<(String, bool, Value)> = tools
        .iter()
        .map(|t| {
            (
                t.name().to_owned(),
                t.requires_approval(),
                t.parameters()["required"].clone(),
            )
        })
        .collect();
    assert_eq!(
        table,
        vec![
            ("list_dir".to_owned(), false, Value::Null),
            ("read_file".to_owned(), false, json!(["path"])),
            ("run_command".to_owned(), true, json!(["program"])),
            ("run_python".to_owned(), true, json!(["code"])),
            ("write_file".to_owned(), true, json!(["path", "content"])),
        ]
    );
    let mut registry = jarvis_sdk::agent::ToolRegistry::new();
    jarvis_sdk::turn::register_builtin_tools(&mut registry, fx.config.clone()).unwrap();
    assert_eq!(registry.len(), 5);
    assert!(jarvis_sdk::turn::register_builtin_tools(&mut registry, fx.config.clone()).is_err());
}
