//! One loop turn on a FauxProvider script that writes a file with
//! `write_file` and reads it back with `read_file`, through a gate whose
//! approver allows everything: the tools work as the model sees them.

use jarvis_sdk::agent::{AgentEvent, ApprovalDecision, StopReason, ToolGate};
use jarvis_sdk::model::Message;
use jarvis_sdk::testing::FixedApprover;
use std::sync::Arc;

use super::Fixture;
use crate::support::Turn;

#[tokio::test]
async fn write_then_read_through_the_loop() {
    let fx = Fixture::new();
    let script = r#"
replies:
  - tool_calls: [ { name: write_file, arguments: { path: "메모/note.txt", content: "안녕, 42" } } ]
  - tool_calls: [ { name: read_file, arguments: { path: "메모/note.txt" } } ]
  - text: "The note says 42."
"#;
    let mut turn = Turn::new(script);
    let approver = Arc::new(FixedApprover::new(ApprovalDecision::Allow));
    turn.gate = ToolGate::new().with_approver(approver.clone());
    for tool in jarvis_sdk::turn::builtin_tools(fx.config.clone()) {
        turn.tools.register(tool).unwrap();
    }
    let run = turn.run().await;

    assert_eq!(run.outcome.final_message.stop_reason, StopReason::Stop);
    assert_eq!(run.outcome.final_message.content, "The note says 42.");
    let results: Vec<_> = run
        .outcome
        .new_messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some(r.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(results[0].tool_name, "write_file");
    assert!(!results[0].is_error, "{results:?}");
    assert_eq!(results[1].tool_name, "read_file");
    assert!(!results[1].is_error, "{results:?}");
    assert_eq!(results[1].content, "안녕, 42");
    // The support turn runs as session "s1": the file is in its sandbox.
    let on_disk = std::fs::read_to_string(fx.base().join("s1/메모/note.txt")).unwrap();
    assert_eq!(on_disk, "안녕, 42");
    let ends = run
        .ui
        .events()
        .into_iter()
        .filter(|e| matches!(e, AgentEvent::ToolExecutionEnd { is_error: false, .. }))
        .count();
    assert_eq!(ends, 2);
    assert_eq!(approver.asked(), ["write_file"], "only the write asks");
}
