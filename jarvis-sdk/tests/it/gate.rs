//! The tool-call gate: the fixed order policy → plugin hooks → approval,
//! the first refusal deciding, and every stage's refusal as a message.

use async_trait::async_trait;
use jarvis_sdk::{
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
        Ok(jarvis_sdk::ToolResult::ok(format!("ran {}", args["program"])))
    }));
    turn.gate = ToolGate::new().with_hook(Arc::new(ForceGit {
        seen: Arc::default(),
        to: json!({"program": "git"}),
    }));
    let run = turn.run().await;
    let jarvis_sdk::Message::Tool(result) = &run.outcome.new_messages[1] else {
        panic!()
    };
    assert_eq!(result.content, "ran \"git\"");
    let jarvis_sdk::Message::Assistant(call) = &run.outcome.new_messages[0] else {
        panic!()
    };
    assert_eq!(call.tool_calls[0].arguments, json!({"program": "ls"}));
}
