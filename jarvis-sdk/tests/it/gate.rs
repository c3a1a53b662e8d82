//! The tool-call gate: the fixed order policy → plugin hooks → approval,
//! the first refusal deciding, every stage's refusal as a message, approval
//! by default, and the arguments every stage sees prepared once.

use async_trait::async_trait;
use jarvis_sdk::agent::{
    ApprovalDecision, Approver, BeforeToolCall, GateDecision, GateStage, GateVerdict, ToolCallInfo, ToolGate,
    ToolPolicy,
};
use serde_json::json;
use std::sync::{Arc, Mutex};

type Log = Arc<Mutex<Vec<String>>>;

struct Stage {
    name: &'static str,
    deny: bool,
    log: Log,
}

impl Stage {
    fn decide(&self) -> GateDecision {
        self.log.lock().unwrap().push(self.name.to_owned());
        if self.deny {
            GateDecision::Deny(format!("{} says no", self.name))
        } else {
            GateDecision::Allow
        }
    }
}

impl ToolPolicy for Stage {
    fn check(&self, _call: &ToolCallInfo<'_>) -> GateDecision {
        self.decide()
    }
}

#[async_trait]
impl BeforeToolCall for Stage {
    fn name(&self) -> &str {
        self.name
    }
    async fn before_tool_call(&self, _call: &ToolCallInfo<'_>) -> GateDecision {
        tokio::task::yield_now().await;
        self.decide()
    }
}

struct LoggingApprover {
    decision: ApprovalDecision,
    log: Log,
}

#[async_trait]
impl Approver for LoggingApprover {
    async fn approve(&self, _call: &ToolCallInfo<'_>) -> ApprovalDecision {
        self.log.lock().unwrap().push("approval".into());
        self.decision
    }
}

/// A gate whose stages deny where `deny` names them, logging every stage it reaches.
fn gate_with(deny: &[&str], decision: ApprovalDecision) -> (ToolGate, Log) {
    let log: Log = Arc::default();
    let stage = |name: &'static str| {
        Arc::new(Stage {
            name,
            deny: deny.contains(&name),
            log: log.clone(),
        })
    };
    let gate = ToolGate::new()
        .with_hook(stage("plugin-a"))
        .with_approver(Arc::new(LoggingApprover {
            decision,
            log: log.clone(),
        }))
        .with_hook(stage("plugin-b"))
        // The policy slot is filled last on purpose: the order of the
        // builder calls never changes the order of the stages.
        .with_policy(stage("policy"));
    (gate, log)
}

async fn check(gate: &ToolGate) -> GateVerdict {
    let args = json!({"program": "ls"});
    gate.check(&ToolCallInfo {
        session_id: "s",
        turn_id: "",
        agent_id: "main",
        tool_call_id: "c1",
        tool_name: "run_command",
        arguments: &args,
        programs: &[],
        requires_approval: true,
    })
    .await
}

#[tokio::test]
async fn every_stage_runs_in_the_fixed_order_when_all_allow() {
    let (gate, log) = gate_with(&[], ApprovalDecision::Allow);
    assert_eq!(check(&gate).await, GateVerdict::Allowed);
    assert_eq!(
        *log.lock().unwrap(),
        ["policy", "plugin-a", "plugin-b", "approval"]
    );
}

#[tokio::test]
async fn the_first_refusal_decides_and_later_stages_do_not_run() {
    let (gate, log) = gate_with(&["policy", "plugin-a"], ApprovalDecision::Allow);
    let verdict = check(&gate).await;
    assert_eq!(
        verdict,
        GateVerdict::Denied {
            stage: GateStage::Policy,
            reason: "policy says no".into()
        }
    );
    assert_eq!(*log.lock().unwrap(), ["policy"]);

    let (gate, log) = gate_with(&["plugin-b"], ApprovalDecision::Allow);
    let verdict = check(&gate).await;
    assert!(matches!(&verdict, GateVerdict::Denied { stage: GateStage::Plugin(p), .. } if p == "plugin-b"));
    assert_eq!(*log.lock().unwrap(), ["policy", "plugin-a", "plugin-b"]);
    let message = verdict.refusal_message("run_command").unwrap();
    assert!(
        message.contains("refused by the plugin \"plugin-b\": plugin-b says no"),
        "{message}"
    );
}

#[tokio::test]
async fn a_persons_denial_and_a_timeout_are_refusals() {
    for (decision, reason) in [
        (ApprovalDecision::Deny, "the person denied it"),
        (ApprovalDecision::Timeout, "nobody approved it in time"),
    ] {
        let (gate, log) = gate_with(&[], decision);
        assert_eq!(
            check(&gate).await,
            GateVerdict::Denied {
                stage: GateStage::Approval,
                reason: reason.into()
            }
        );
        assert_eq!(log.lock().unwrap().last().map(String::as_str), Some("approval"));
    }
    let (gate, _) = gate_with(&[], ApprovalDecision::Always);
    assert_eq!(check(&gate).await, GateVerdict::Allowed);
}

/// Rewrites `program` to `git` and records what it saw.
struct ForceGit {
    seen: Log,
    to: serde_json::Value,
}

#[async_trait]
impl BeforeToolCall for ForceGit {
    fn name(&self) -> &str {
        "force-git"
    }
    async fn before_tool_call(&self, call: &ToolCallInfo<'_>) -> GateDecision {
        self.seen.lock().unwrap().push(call.arguments.to_string());
        GateDecision::Rewrite(self.to.clone())
    }
}

struct SeeArgs(Log);

#[async_trait]
impl Approver for SeeArgs {
    async fn approve(&self, call: &ToolCallInfo<'_>) -> ApprovalDecision {
        self.0.lock().unwrap().push(call.arguments.to_string());
        ApprovalDecision::Allow
    }
}

#[tokio::test]
async fn a_hook_may_rewrite_arguments_for_the_stages_after_it_and_the_tool() {
    let log: Log = Arc::default();
    let gate = ToolGate::new()
        .with_hook(Arc::new(ForceGit {
            seen: log.clone(),
            to: json!({"program": "git", "args": ["status"]}),
        }))
        .with_approver(Arc::new(SeeArgs(log.clone())));
    assert_eq!(
        check(&gate).await,
        GateVerdict::AllowedWith(json!({"program": "git", "args": ["status"]}))
    );
    assert_eq!(
        *log.lock().unwrap(),
        [r#"{"program":"ls"}"#, r#"{"args":["status"],"program":"git"}"#],
        "approval sees the rewritten call"
    );

    let bad = ToolGate::new().with_hook(Arc::new(ForceGit {
        seen: Arc::default(),
        to: json!("rm -rf /"),
    }));
    assert!(matches!(
        check(&bad).await,
        GateVerdict::Denied {
            stage: GateStage::Plugin(_),
            ..
        }
    ));

    // Through the loop: the tool runs with the rewritten arguments; the
    // recorded call keeps what the model asked for.
    let mut turn = crate::support::Turn::new(
        "replies: [ { tool_calls: [ { name: run_command, arguments: { program: ls } } ] }, { text: done } ]",
    )
    .tool(jarvis_sdk::testing::FnTool::new("run_command", |args| {
        Ok(jarvis_sdk::agent::ToolResult::ok(format!(
            "ran {}",
            args["program"]
        )))
    }));
    turn.gate = ToolGate::new().with_hook(Arc::new(ForceGit {
        seen: Arc::default(),
        to: json!({"program": "git"}),
    }));
    let run = turn.run().await;
    let jarvis_sdk::model::Message::Tool(result) = &run.outcome.new_messages[1] else {
        panic!()
    };
    assert_eq!(result.content, "ran \"git\"");
    let jarvis_sdk::model::Message::Assistant(call) = &run.outcome.new_messages[0] else {
        panic!()
    };
    assert_eq!(call.tool_calls[0].arguments, json!({"program": "ls"}));
}

/// A tool that counts its calls.
fn counted(name: &str, asks: bool) -> (jarvis_sdk::testing::FnTool, Arc<std::sync::atomic::AtomicUsize>) {
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = calls.clone();
    let tool = jarvis_sdk::testing::FnTool::new(name, move |_| {
        seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(jarvis_sdk::agent::ToolResult::ok("ran"))
    });
    (if asks { tool.asking_approval() } else { tool }, calls)
}

#[tokio::test]
async fn the_default_gate_refuses_tools_that_need_approval_without_running_them() {
    let (asking, asking_calls) = counted("run_command", true);
    let (reading, reading_calls) = counted("read_file", false);
    let mut turn = crate::support::Turn::new(
        "replies: [ { tool_calls: [ { name: run_command, arguments: { program: rm } }, { name: read_file, arguments: { path: a } } ] }, { text: done } ]",
    )
    .tool(asking)
    .tool(reading);
    turn.gate = ToolGate::default();
    let run = turn.run().await;
    let results: Vec<_> = run
        .outcome
        .new_messages
        .iter()
        .filter_map(|m| match m {
            jarvis_sdk::model::Message::Tool(r) => Some(r.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2);
    assert!(results[0].is_error, "{results:?}");
    assert!(
        results[0]
            .content
            .contains("`run_command` needs approval and no approver is configured"),
        "{}",
        results[0].content
    );
    assert_eq!(
        asking_calls.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the tool never ran"
    );
    assert!(
        !results[1].is_error,
        "tools that do not ask still run: {results:?}"
    );
    assert_eq!(reading_calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(run.outcome.final_message.content, "done", "the loop went on");
    // The same for `ToolGate::new()` and a bare `LoopContext`.
    let args = json!({});
    let info = ToolCallInfo::new("s", "main", "c1", "write_file", &args, true);
    assert!(matches!(
        ToolGate::new().check(&info).await,
        GateVerdict::Denied {
            stage: GateStage::Approval,
            ..
        }
    ));
    let ctx = jarvis_sdk::agent::LoopContext::new(Arc::new(jarvis_sdk::model::FauxProvider::demo()));
    assert!(!ctx.gate.has_approver());
}

#[tokio::test]
async fn allow_all_unsafe_runs_everything_unasked() {
    let (asking, calls) = counted("run_command", true);
    let mut turn = crate::support::Turn::new(
        "replies: [ { tool_calls: [ { name: run_command, arguments: {} } ] }, { text: done } ]",
    )
    .tool(asking);
    turn.gate = ToolGate::allow_all_unsafe();
    let run = turn.run().await;
    let jarvis_sdk::model::Message::Tool(result) = &run.outcome.new_messages[1] else {
        panic!("{:?}", run.outcome.new_messages)
    };
    assert_eq!((result.is_error, result.content.as_str()), (false, "ran"));
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// Records the arguments every stage saw, as compact JSON.
struct Seen(Log, &'static str);

impl ToolPolicy for Seen {
    fn check(&self, call: &ToolCallInfo<'_>) -> GateDecision {
        self.0
            .lock()
            .unwrap()
            .push(format!("{}:{}", self.1, call.arguments));
        GateDecision::Allow
    }
}

#[async_trait]
impl BeforeToolCall for Seen {
    fn name(&self) -> &str {
        self.1
    }
    async fn before_tool_call(&self, call: &ToolCallInfo<'_>) -> GateDecision {
        self.0
            .lock()
            .unwrap()
            .push(format!("{}:{}", self.1, call.arguments));
        GateDecision::Allow
    }
}

#[async_trait]
impl Approver for Seen {
    async fn approve(&self, call: &ToolCallInfo<'_>) -> ApprovalDecision {
        self.0
            .lock()
            .unwrap()
            .push(format!("{}:{}", self.1, call.arguments));
        ApprovalDecision::Allow
    }
}

#[tokio::test]
async fn declared_sandbox_paths_are_normalised_once_for_every_stage_and_the_tool() {
    let log: Log = Arc::default();
    let got = log.clone();
    let tool = jarvis_sdk::testing::FnTool::new("save", move |args| {
        got.lock().unwrap().push(format!("tool:{args}"));
        Ok(jarvis_sdk::agent::ToolResult::ok("saved"))
    })
    .with_sandbox_path("path")
    .asking_approval();
    let mut turn = crate::support::Turn::new(
        "replies: [ { tool_calls: [ { name: save, arguments: { path: \"./notes/../x.txt\", note: \"a/../b\" } }, { name: save, arguments: { path: \"notes/../../x\" } } ] }, { text: done } ]",
    )
    .tool(tool);
    turn.gate = ToolGate::new()
        .with_policy(Arc::new(Seen(log.clone(), "policy")))
        .with_hook(Arc::new(Seen(log.clone(), "hook")))
        .with_approver(Arc::new(Seen(log.clone(), "approval")));
    let run = turn.run().await;
    let normal = r#"{"note":"a/../b","path":"x.txt"}"#;
    assert_eq!(
        *log.lock().unwrap(),
        [
            format!("policy:{normal}"),
            format!("hook:{normal}"),
            format!("approval:{normal}"),
            format!("tool:{normal}"),
        ],
        "undeclared arguments are left alone; the climbing call reached no stage"
    );
    let jarvis_sdk::model::Message::Tool(climbing) = &run.outcome.new_messages[2] else {
        panic!("{:?}", run.outcome.new_messages)
    };
    assert!(climbing.is_error, "{climbing:?}");
    assert!(
        climbing.content.contains("leads outside the sandbox"),
        "{}",
        climbing.content
    );
}

#[tokio::test]
async fn a_hooks_rewrite_is_prepared_again_before_approval() {
    let log: Log = Arc::default();
    let tool = jarvis_sdk::testing::FnTool::constant("save", "saved").with_sandbox_path("path");
    let mut turn = crate::support::Turn::new(
        "replies: [ { tool_calls: [ { name: save, arguments: { path: a } }, { name: save, arguments: { path: b } } ] }, { text: done } ]",
    )
    .tool(tool);
    /// Rewrites `a` to a path with `..` and `b` to one that climbs out.
    struct Sneaky;
    #[async_trait]
    impl BeforeToolCall for Sneaky {
        fn name(&self) -> &str {
            "sneaky"
        }
        async fn before_tool_call(&self, call: &ToolCallInfo<'_>) -> GateDecision {
            let to = if call.arguments["path"] == "a" {
                "notes/../y"
            } else {
                "../../etc/passwd"
            };
            GateDecision::Rewrite(json!({"path": to}))
        }
    }
    turn.gate = ToolGate::new()
        .with_hook(Arc::new(Sneaky))
        .with_approver(Arc::new(Seen(log.clone(), "approval")));
    let run = turn.run().await;
    assert_eq!(*log.lock().unwrap(), [r#"approval:{"path":"y"}"#]);
    let jarvis_sdk::model::Message::Tool(second) = &run.outcome.new_messages[2] else {
        panic!("{:?}", run.outcome.new_messages)
    };
    assert!(second.is_error, "{second:?}");
    assert!(
        second.content.contains("refused by the plugin \"sneaky\"")
            && second.content.contains("leads outside"),
        "{}",
        second.content
    );
}
