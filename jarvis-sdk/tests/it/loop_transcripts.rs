//! Transcript tests of `run_agent_loop`: one per ending and per overflow
//! path. Each snapshots the event stream as the WebSocket sees it and also
//! asserts the contract explicitly: the number of model calls, what the
//! summary calls carry, and what must never be recorded or shown.

use futures::StreamExt;
use jarvis_sdk::agent::{
    AgentEvent, AgentLoopConfig, ApprovalDecision, GateDecision, LoopContext, StopReason, ToolCallInfo,
    ToolGate, ToolPolicy, ToolResult, run_agent_loop,
};
use jarvis_sdk::agent::{prompts::ANSWER_SO_FAR, prompts::NUDGE_INSTRUCTION, prompts::SUMMARY_INSTRUCTION};
use jarvis_sdk::common::char_len;
use jarvis_sdk::model::{ChatRequest, FauxProvider, Message, Provider, ProviderStream, Purpose};
use jarvis_sdk::testing::{FixedApprover, FnTool, RecordingAdapter};
use serde_json::json;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use crate::support::{Run, Turn};

fn snapshot(name: &str, run: &Run) {
    insta::assert_snapshot!(name, run.ui.jsonl());
}

/// Every summary request: no tools, unstreamed, and its trailing message
/// ends with the literal R-LOOP-6 instruction.
#[track_caller]
fn assert_summary_requests(run: &Run, expected: usize) {
    let summaries: Vec<ChatRequest> = run
        .requests()
        .into_iter()
        .filter(|r| r.purpose == Purpose::Summary)
        .collect();
    assert_eq!(summaries.len(), expected, "summary calls");
    assert_eq!(run.outcome.summary_calls as usize, expected);
    for s in &summaries {
        assert!(s.tools.is_empty(), "a summary request offered tools");
        let instruction = s.instruction().expect("summary instruction");
        assert!(instruction.ends_with(SUMMARY_INSTRUCTION), "{instruction}");
        match s.messages.last() {
            Some(Message::User(u)) => assert!(u.content.ends_with(SUMMARY_INSTRUCTION)),
            other => panic!("the summary request must end with a user message, got {other:?}"),
        }
    }
    run.assert_not_leaked(SUMMARY_INSTRUCTION);
}

fn read_tool() -> FnTool {
    FnTool::new("read_file", |args| {
        Ok(ToolResult::ok(format!("contents of {}", args["path"])))
    })
}

#[tokio::test]
async fn plain_answer() {
    let run = Turn::new(
        "replies: [ { text: \"Hello there\", chunks: 3, usage: { input_tokens: 7, output_tokens: 2 } } ]",
    )
    .run()
    .await;
    snapshot("plain_answer", &run);
    assert_eq!(run.faux.request_count(), 1);
    assert_eq!(run.ui.text(), "Hello there");
    let o = &run.outcome;
    assert_eq!(o.final_message.content, "Hello there");
    assert_eq!(o.final_message.stop_reason, StopReason::Stop);
    assert_eq!((o.turns, o.overflows, o.summary_calls), (1, 0, 0));
    assert_eq!(o.final_message.usage.input_tokens, 7);
    assert_eq!(o.new_messages.len(), 1);
    assert_eq!(
        run.ui.kinds(),
        [
            "agent_start",
            "turn_start",
            "message_update",
            "message_update",
            "message_update",
            "agent_end"
        ]
    );
    // The request carried the prompt and the metadata.
    let req = &run.requests()[0];
    assert_eq!(req.purpose, Purpose::Step);
    assert_eq!(
        (req.metadata.agent_id.as_str(), req.metadata.session_id.as_str()),
        ("main", "s1")
    );
    assert_eq!(req.last_user_text(), Some("please help"));
    assert!(req.instruction().is_none());
}

#[tokio::test]
async fn tool_then_answer() {
    let run = Turn::new(
        r#"
replies:
  - { thinking: "need the file", tool_calls: [ { name: read_file, arguments: { path: "a.txt" } } ], usage: { input_tokens: 5, output_tokens: 1 } }
  - { text: "It says hi.", usage: { input_tokens: 9, output_tokens: 4 } }
"#,
    )
    .tool(read_tool())
    .run()
    .await;
    snapshot("tool_then_answer", &run);
    assert_eq!(run.faux.request_count(), 2);
    let o = &run.outcome;
    assert_eq!((o.turns, o.final_message.content.as_str()), (2, "It says hi."));
    assert_eq!(
        o.final_message.usage.input_tokens, 14,
        "usage is summed over the turn"
    );
    assert_eq!(o.final_message.usage.output_tokens, 5);
    // assistant(tool call, thinking) → tool result → assistant(answer)
    assert_eq!(o.new_messages.len(), 3);
    let Message::Tool(result) = &o.new_messages[1] else {
        panic!()
    };
    assert_eq!(result.content, "contents of \"a.txt\"");
    assert!(!result.is_error);
    let second = &run.requests()[1];
    assert_eq!(second.messages.last(), Some(&o.new_messages[1]));
    assert!(second.tools.iter().any(|t| t.name == "read_file"));
    assert!(run.ui.events().contains(&AgentEvent::MessageUpdate {
        delta: jarvis_sdk::agent::MessageDelta::ThinkingDelta("need the file".into())
    }));
}

#[tokio::test]
async fn parallel_tool_calls_return_in_call_order() {
    let run = Turn::new(
        r#"
replies:
  - tool_calls:
      - { name: read_file, arguments: { path: "1" } }
      - { name: read_file, arguments: { path: "2" } }
      - { name: list_dir, arguments: { path: "." } }
  - { text: "three done" }
"#,
    )
    .tool(read_tool())
    .tool(FnTool::constant("list_dir", "a.txt b.txt"))
    .run()
    .await;
    snapshot("parallel_tool_calls", &run);
    assert_eq!(run.faux.request_count(), 2);
    let second = &run.requests()[1];
    let results: Vec<(String, String)> = second
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(t) => Some((t.tool_call_id.clone(), t.content.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        [
            ("call_1".to_owned(), "contents of \"1\"".to_owned()),
            ("call_2".to_owned(), "contents of \"2\"".to_owned()),
            ("call_3".to_owned(), "a.txt b.txt".to_owned()),
        ]
    );
}

#[derive(Debug)]
struct DenyNamed(&'static str);

impl ToolPolicy for DenyNamed {
    fn check(&self, call: &ToolCallInfo<'_>) -> GateDecision {
        if call.tool_name == self.0 {
            GateDecision::Deny(format!("{} is not in this agent's allow-list", self.0))
        } else {
            GateDecision::Allow
        }
    }
}

#[tokio::test]
async fn a_denied_tool_is_an_error_result_and_the_loop_continues() {
    let mut turn = Turn::new(
        r#"
replies:
  - tool_calls: [ { name: run_command, arguments: { program: rm, args: ["-rf", "/"] } }, { name: read_file, arguments: { path: a } } ]
  - tool_calls: [ { name: write_file, arguments: { path: a, content: x } } ]
  - { text: "could not do it" }
"#,
    )
    .tool(FnTool::constant("run_command", "ran"))
    .tool(read_tool())
    .tool(FnTool::constant("write_file", "written").asking_approval());
    let approver = Arc::new(FixedApprover::new(ApprovalDecision::Deny));
    turn.gate = ToolGate::new()
        .with_policy(Arc::new(DenyNamed("run_command")))
        .with_approver(approver.clone());
    let run = turn.run().await;
    snapshot("denied_tool", &run);
    assert_eq!(run.faux.request_count(), 3);
    let o = &run.outcome;
    assert_eq!(o.final_message.content, "could not do it");
    let results: Vec<_> = o
        .new_messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(t) => Some(t),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 3);
    assert!(results[0].is_error);
    assert!(
        results[0].content.contains("refused by the tool policy"),
        "{}",
        results[0].content
    );
    assert!(!results[1].is_error, "the allowed sibling call still ran");
    assert!(results[2].is_error);
    assert!(
        results[2].content.contains("refused by approval"),
        "{}",
        results[2].content
    );
    assert_eq!(
        approver.asked(),
        ["write_file"],
        "only the tool that asks reaches a person"
    );
}

#[tokio::test]
async fn an_empty_answer_is_nudged_once_within_its_step() {
    let run = Turn::new("replies: [ { empty: true }, { text: \"here it is\" } ]")
        .run()
        .await;
    snapshot("empty_nudged", &run);
    assert_eq!(run.faux.request_count(), 2);
    assert_eq!(run.purposes(), [Purpose::Step, Purpose::Nudge]);
    let nudge = &run.requests()[1];
    assert_eq!(nudge.instruction(), Some(NUDGE_INSTRUCTION));
    assert!(!nudge.tools.is_empty() || run.outcome.new_messages.len() == 1);
    assert_eq!(run.outcome.turns, 1, "the nudge belongs to the same step");
    assert_eq!(run.outcome.final_message.content, "here it is");
    assert_eq!(run.outcome.new_messages.len(), 1);
    run.assert_not_leaked(NUDGE_INSTRUCTION);
    assert_eq!(run.ui.kinds().iter().filter(|k| **k == "turn_start").count(), 1);
}

#[tokio::test]
async fn empty_again_after_the_nudge_ends_with_an_empty_answer() {
    let run = Turn::new("replies: [ { empty: true }, { empty: true } ]\nfallback: { text: never }")
        .run()
        .await;
    snapshot("empty_twice", &run);
    assert_eq!(run.faux.request_count(), 2);
    let o = &run.outcome;
    assert_eq!(o.final_message.stop_reason, StopReason::Empty);
    assert_eq!(o.final_message.content, "");
    assert!(o.error.is_none());
    assert!(!run.ui.kinds().iter().any(|k| k == "agent_error"));
    assert!(o.new_messages.is_empty());
    run.assert_not_leaked(NUDGE_INSTRUCTION);
}

#[tokio::test]
async fn a_provider_error_sends_agent_error_then_agent_end() {
    let run = Turn::new("replies: [ { error: { message: \"upstream overloaded\", status: 529 } } ]")
        .run()
        .await;
    snapshot("provider_error", &run);
    assert_eq!(run.faux.request_count(), 1);
    assert_eq!(
        run.ui.kinds(),
        ["agent_start", "turn_start", "agent_error", "agent_end"]
    );
    let o = &run.outcome;
    assert_eq!(o.final_message.stop_reason, StopReason::Error);
    assert!(
        o.error
            .as_ref()
            .unwrap()
            .to_string()
            .contains("upstream overloaded")
    );
    assert!(o.new_messages.is_empty());
}

#[tokio::test]
async fn the_final_tool_ends_the_turn_with_its_answer() {
    let run = Turn::new(
        r#"
replies:
  - tool_calls: [ { name: read_file, arguments: { path: x } }, { name: final, arguments: { answer: "42, from x" } } ]
fallback: { text: "never reached" }
"#,
    )
    .tool(read_tool())
    .tool(jarvis_sdk::agent::Typed::new(jarvis_sdk::agent::FinalTool))
    .run()
    .await;
    snapshot("final_tool", &run);
    assert_eq!(run.faux.request_count(), 1);
    let o = &run.outcome;
    assert_eq!(o.final_message.stop_reason, StopReason::Final);
    assert_eq!(o.final_message.content, "42, from x");
    assert_eq!(run.ui.text(), "42, from x");
    assert!(matches!(o.new_messages.last(), Some(Message::Assistant(a)) if a.content == "42, from x"));
}

#[tokio::test]
async fn a_final_call_without_an_answer_is_an_error_result_and_the_loop_goes_on() {
    let run = Turn::new("replies: [ { tool_calls: [ { name: final, arguments: {} } ] }, { text: ok } ]")
        .tool(jarvis_sdk::agent::Typed::new(jarvis_sdk::agent::FinalTool))
        .run()
        .await;
    assert_eq!(run.faux.request_count(), 2);
    assert_eq!(run.outcome.final_message.stop_reason, StopReason::Stop);
    assert!(matches!(&run.outcome.new_messages[1], Message::Tool(t) if t.is_error));
}

/// A script that calls `read_file` at every step and answers summaries
/// from a rule.
fn overflow_script(summary: &str, continuation_reply: &str) -> String {
    format!(
        r#"
rules:
  - when: {{ purpose: summary }}
    reply: {summary}
  - when: {{ purpose: continuation }}
    reply: {continuation_reply}
fallback: {{ tool_calls: [ {{ name: read_file, arguments: {{ path: x }} }} ] }}
"#
    )
}

#[tokio::test]
async fn overflow_summarises_then_continues_then_answers() {
    let run = Turn::new(&overflow_script(
        "{ text: \"한 것: 파일 읽음\\n남은 단계: 계산\\n지금까지의 답: 아직\" }",
        "{ text: \"The answer is 7.\" }",
    ))
    .max_turns(4)
    .tool(read_tool())
    .run()
    .await;
    snapshot("overflow_continue_answer", &run);
    // 4 steps, 1 summary, 1 continuation step that answers.
    assert_eq!(run.faux.request_count(), 6);
    assert_eq!(
        run.purposes(),
        [
            Purpose::Step,
            Purpose::Step,
            Purpose::Step,
            Purpose::Step,
            Purpose::Summary,
            Purpose::Continuation
        ]
    );
    assert_summary_requests(&run, 1);
    let o = &run.outcome;
    assert_eq!((o.turns, o.overflows), (5, 1));
    assert_eq!(o.final_message.content, "The answer is 7.");
    assert_eq!(o.final_message.stop_reason, StopReason::Stop);
    // The continuation carries the summary and the remaining steps (max(1, 4/2) = 2).
    let cont = &run.requests()[5];
    let instruction = cont.instruction().unwrap();
    assert!(instruction.contains("지금까지의 답: 아직"), "{instruction}");
    assert!(instruction.contains("2번"), "{instruction}");
    assert!(!cont.tools.is_empty(), "continuation steps may call tools");
    // Steps are numbered on through the continuation.
    let turns: Vec<u32> = run
        .ui
        .events()
        .iter()
        .filter_map(|e| match e {
            AgentEvent::TurnStart { turn } => Some(*turn),
            _ => None,
        })
        .collect();
    assert_eq!(turns, [1, 2, 3, 4, 5]);
    // Neither the summary nor the instruction is shown or recorded.
    run.assert_not_leaked("지금까지의 답: 아직");
    run.assert_not_leaked("[이어가기]");
    // The continuation's second step would have counted down.
    assert_eq!(run.ui.text(), "The answer is 7.");
}

#[tokio::test]
async fn continuation_instructions_count_the_remaining_steps_down() {
    let run = Turn::new(&overflow_script(
        "{ text: \"S\" }",
        "{ tool_calls: [ { name: read_file, arguments: { path: y } } ] }",
    ))
    .max_turns(6)
    .tool(read_tool())
    .run()
    .await;
    let remaining: Vec<String> = run
        .requests()
        .iter()
        .filter(|r| r.purpose == Purpose::Continuation)
        .map(|r| r.instruction().unwrap().to_owned())
        .collect();
    assert_eq!(remaining.len(), 3);
    for (instruction, n) in remaining.iter().zip([3, 2, 1]) {
        assert!(
            instruction.contains(&format!("{n} tool-calling steps remain")),
            "{instruction}"
        );
    }
    assert_eq!(run.outcome.overflows, 2);
}

#[tokio::test]
async fn a_second_overflow_returns_the_summary_cut_to_2000_characters() {
    let long = "가".repeat(3_000);
    let run = Turn::new(&overflow_script(
        &format!("{{ text: \"{long}\" }}"),
        "{ tool_calls: [ { name: read_file, arguments: { path: y } } ] }",
    ))
    .max_turns(2)
    .tool(read_tool())
    .run()
    .await;
    // 2 steps, summary, 1 continuation step, summary.
    assert_eq!(run.faux.request_count(), 5);
    assert_summary_requests(&run, 2);
    let o = &run.outcome;
    assert_eq!((o.turns, o.overflows), (3, 2));
    assert_eq!(o.final_message.stop_reason, StopReason::Overflow);
    assert_eq!(char_len(&o.final_message.content), 2_000);
    assert_eq!(o.final_message.content, "가".repeat(2_000));
    // The first summary went into the continuation instruction, cut too.
    let cont = run.requests()[3].instruction().unwrap().to_owned();
    assert!(cont.contains(&"가".repeat(2_000)) && !cont.contains(&"가".repeat(2_001)));
    // Only the answer is shown (once, as one message_update) and recorded.
    let updates: Vec<_> = run
        .ui
        .kinds()
        .into_iter()
        .filter(|k| *k == "message_update")
        .collect();
    assert_eq!(updates.len(), 1);
    assert_eq!(run.ui.text(), "가".repeat(2_000));
    assert!(
        matches!(o.new_messages.last(), Some(Message::Assistant(a)) if a.content == o.final_message.content)
    );
    let recorded_summaries = o
        .new_messages
        .iter()
        .filter(|m| matches!(m, Message::Assistant(a) if a.content.contains('가')))
        .count();
    assert_eq!(recorded_summaries, 1, "the first summary is not recorded");
}

#[tokio::test]
async fn double_overflow_transcript() {
    let run = Turn::new(&overflow_script(
        "{ text: \"한 것: x\\n지금까지의 답: 모름\" }",
        "{ tool_calls: [ { name: read_file, arguments: { path: y } } ] }",
    ))
    .max_turns(2)
    .tool(read_tool())
    .run()
    .await;
    snapshot("double_overflow", &run);
    assert_eq!(run.faux.request_count(), 5);
    assert_eq!(run.outcome.final_message.content, "한 것: x\n지금까지의 답: 모름");
}

#[tokio::test]
async fn a_failing_summary_call_falls_back_to_a_summary_of_tool_names() {
    let run = Turn::new(&overflow_script(
        "{ error: \"tools are required when the history holds tool records\" }",
        "{ tool_calls: [ { name: list_dir, arguments: { path: . } } ] }",
    ))
    .max_turns(2)
    .tool(read_tool())
    .tool(FnTool::constant("list_dir", "a b"))
    .run()
    .await;
    snapshot("fallback_summary", &run);
    assert_eq!(run.faux.request_count(), 5);
    assert_summary_requests(&run, 2);
    let o = &run.outcome;
    assert_eq!(o.overflows, 2);
    assert!(o.error.is_none(), "a failed summary is not a turn error");
    assert!(!run.ui.kinds().iter().any(|k| k == "agent_error"));
    let answer = &o.final_message.content;
    assert!(answer.contains("read_file ×2"), "{answer}");
    assert!(answer.contains("list_dir"), "{answer}");
    assert!(answer.lines().any(|l| l.starts_with(ANSWER_SO_FAR)), "{answer}");
    let cont = run.requests()[3].instruction().unwrap().to_owned();
    assert!(
        cont.contains("read_file ×2") && cont.contains(ANSWER_SO_FAR),
        "{cont}"
    );
}

#[tokio::test]
async fn an_empty_summary_also_falls_back() {
    let run = Turn::new(&overflow_script("{ empty: true }", "{ text: done }"))
        .max_turns(1)
        .tool(read_tool())
        .run()
        .await;
    assert_eq!(run.faux.request_count(), 3);
    let cont = run.requests()[2].instruction().unwrap().to_owned();
    assert!(
        cont.contains("read_file") && cont.contains(ANSWER_SO_FAR),
        "{cont}"
    );
    assert_eq!(run.outcome.final_message.content, "done");
}

#[tokio::test]
async fn overflow_resume_off_stops_at_max_turns_with_the_last_text() {
    let mut turn = Turn::new(
        r#"
replies:
  - { text: "Looking at x first.", tool_calls: [ { name: read_file, arguments: { path: x } } ] }
  - { tool_calls: [ { name: read_file, arguments: { path: y } } ] }
fallback: { text: "never" }
"#,
    )
    .max_turns(2)
    .tool(read_tool());
    turn.config.overflow_resume = false;
    let run = turn.run().await;
    snapshot("overflow_resume_off", &run);
    assert_eq!(run.faux.request_count(), 2);
    assert_summary_requests(&run, 0);
    let o = &run.outcome;
    assert_eq!(o.final_message.stop_reason, StopReason::MaxTurns);
    assert_eq!(o.final_message.content, "Looking at x first.");
    assert_eq!((o.turns, o.overflows), (2, 1));
}

/// A tool that raises the abort signal while it runs.
fn aborting_tool(cancel: CancellationToken) -> FnTool {
    FnTool::new("read_file", move |_| {
        cancel.cancel();
        Ok(ToolResult::ok("read"))
    })
}

#[tokio::test]
async fn abort_before_the_summary_call() {
    let mut turn = Turn::new(&overflow_script("{ text: S }", "{ text: never }")).max_turns(1);
    let cancel = turn.cancel.clone();
    turn = turn.tool(aborting_tool(cancel));
    let run = turn.run().await;
    snapshot("abort_before_summary", &run);
    assert_eq!(run.faux.request_count(), 1, "no summary call after the abort");
    assert_summary_requests(&run, 0);
    let o = &run.outcome;
    assert_eq!(o.final_message.stop_reason, StopReason::Aborted);
    assert_eq!(o.overflows, 1);
    assert_eq!(run.ui.kinds().last().map(String::as_str), Some("agent_end"));
    // The history stays well formed: the call has its result.
    assert!(matches!(o.new_messages.last(), Some(Message::Tool(_))));
}

/// Wraps FauxProvider and raises the abort signal once a summary call has
/// streamed its last event.
#[derive(Debug)]
struct AbortAfterSummary {
    inner: Arc<FauxProvider>,
    cancel: CancellationToken,
}

impl Provider for AbortAfterSummary {
    fn stream(&self, request: ChatRequest) -> ProviderStream {
        let is_summary = request.purpose == Purpose::Summary;
        let cancel = self.cancel.clone();
        let inner = self.inner.stream(request);
        if !is_summary {
            return inner;
        }
        Box::pin(inner.chain(futures::stream::poll_fn(move |_| {
            cancel.cancel();
            std::task::Poll::Ready(None)
        })))
    }

    fn name(&self) -> &str {
        "abort-after-summary"
    }
}

#[tokio::test]
async fn abort_after_the_summary_call() {
    let mut turn = Turn::new(&overflow_script("{ text: S }", "{ text: never }"))
        .max_turns(2)
        .tool(read_tool());
    turn.provider = Some(Arc::new(AbortAfterSummary {
        inner: turn.faux.clone(),
        cancel: turn.cancel.clone(),
    }));
    let run = turn.run().await;
    snapshot("abort_after_summary", &run);
    assert_eq!(
        run.faux.request_count(),
        3,
        "two steps and the summary; no continuation"
    );
    assert_summary_requests(&run, 1);
    let o = &run.outcome;
    assert_eq!(o.final_message.stop_reason, StopReason::Aborted);
    assert_eq!((o.turns, o.overflows), (2, 1));
    run.assert_not_leaked("\"S\"");
}

#[tokio::test]
async fn abort_from_a_subscriber_cuts_the_stream() {
    let mut turn = Turn::new("replies: [ { text: \"a long answer\", chunks: 5 } ]");
    turn.ui = Arc::new(RecordingAdapter::breaking_on(|e| {
        matches!(e, AgentEvent::MessageUpdate { .. })
    }));
    let run = turn.run().await;
    assert_eq!(run.outcome.final_message.stop_reason, StopReason::Aborted);
    assert_eq!(run.ui.text(), "a l", "only the first delta was shown");
    assert!(run.outcome.new_messages.is_empty());
    assert_eq!(run.ui.kinds().last().map(String::as_str), Some("agent_end"));
}

#[tokio::test]
async fn an_already_aborted_turn_makes_no_call() {
    let turn = Turn::new("replies: [ { text: x } ]");
    turn.cancel.cancel();
    let run = turn.run().await;
    assert_eq!(run.faux.request_count(), 0);
    assert_eq!(run.ui.kinds(), ["agent_start", "agent_end"]);
    assert_eq!(run.outcome.turns, 0);
}

#[tokio::test]
async fn unknown_tools_bad_arguments_and_panics_become_error_results() {
    let run = Turn::new(
        r#"
replies:
  - tool_calls:
      - { name: no_such_tool, arguments: {} }
      - { name: read_file, arguments: "{\"path\": " }
      - { name: boom, arguments: {} }
  - { text: recovered }
"#,
    )
    .tool(read_tool())
    .tool(FnTool::new("boom", |_| panic!("kaboom")))
    .run()
    .await;
    let results: Vec<_> = run
        .outcome
        .new_messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(t) => Some(t.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 3);
    assert!(results.iter().all(|r| r.is_error));
    assert!(
        results[0].content.contains("no tool named"),
        "{}",
        results[0].content
    );
    assert!(
        results[1].content.contains("not valid JSON"),
        "{}",
        results[1].content
    );
    assert!(results[2].content.contains("kaboom"), "{}", results[2].content);
    assert_eq!(run.outcome.final_message.content, "recovered");
}

#[tokio::test]
async fn zero_max_turns_is_rejected() {
    let ctx = LoopContext::new(Arc::new(FauxProvider::demo()));
    let config = AgentLoopConfig {
        max_turns: 0,
        ..AgentLoopConfig::default()
    };
    let err = run_agent_loop(&ctx, &config, vec![Message::user("x")], &CancellationToken::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("max_turns"), "{err}");
}

#[tokio::test]
async fn missing_and_repeated_call_ids_are_replaced_with_unique_ones() {
    #[derive(Debug)]
    struct NoIds;
    impl Provider for NoIds {
        fn stream(&self, request: ChatRequest) -> ProviderStream {
            use jarvis_sdk::model::{FinishReason, ProviderEvent, Usage};
            let events = if request.messages.len() == 1 {
                vec![
                    ProviderEvent::ToolCallDelta {
                        index: 0,
                        id: None,
                        name: Some("read_file".into()),
                        arguments_delta: "{}".into(),
                    },
                    ProviderEvent::ToolCallDelta {
                        index: 1,
                        id: Some("dup".into()),
                        name: Some("read_file".into()),
                        arguments_delta: "{}".into(),
                    },
                    ProviderEvent::ToolCallDelta {
                        index: 2,
                        id: Some("dup".into()),
                        name: Some("read_file".into()),
                        arguments_delta: "{}".into(),
                    },
                    ProviderEvent::Stop {
                        reason: FinishReason::ToolUse,
                        usage: Usage::default(),
                    },
                ]
            } else {
                vec![
                    ProviderEvent::TextDelta("ok".into()),
                    ProviderEvent::Stop {
                        reason: FinishReason::Stop,
                        usage: Usage::default(),
                    },
                ]
            };
            Box::pin(futures::stream::iter(events.into_iter().map(Ok)))
        }
        fn name(&self) -> &str {
            "no-ids"
        }
    }
    let mut tools = jarvis_sdk::agent::ToolRegistry::new();
    tools.register(Arc::new(read_tool())).unwrap();
    let ctx = LoopContext::new(Arc::new(NoIds))
        .with_tools(tools)
        .with_ids(Arc::new(jarvis_sdk::common::SequentialIds::default()));
    let o = run_agent_loop(
        &ctx,
        &AgentLoopConfig::default(),
        vec![Message::user("x")],
        &CancellationToken::new(),
    )
    .await
    .unwrap();
    let Message::Assistant(a) = &o.new_messages[0] else {
        panic!()
    };
    let ids: Vec<&str> = a.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["call_1", "dup", "call_2"]);
    let result_ids: Vec<&str> = o.new_messages[1..4]
        .iter()
        .map(|m| match m {
            Message::Tool(t) => t.tool_call_id.as_str(),
            _ => panic!(),
        })
        .collect();
    assert_eq!(result_ids, ids);
    let _ = json!(null);
}

#[tokio::test]
async fn a_turn_instruction_rides_on_every_call_and_tools_see_extensions() {
    #[derive(Debug)]
    struct Chain(&'static str);
    struct SeeChain;
    #[async_trait::async_trait]
    impl jarvis_sdk::agent::Tool for SeeChain {
        fn name(&self) -> &str {
            "read_file"
        }
        fn description(&self) -> &str {
            "reports the chain it sees"
        }
        fn parameters(&self) -> serde_json::Value {
            json!({"type": "object"})
        }
        async fn call(
            &self,
            _args: serde_json::Value,
            ctx: &jarvis_sdk::agent::ToolContext,
        ) -> Result<ToolResult, jarvis_sdk::agent::ToolError> {
            Ok(ToolResult::ok(format!(
                "chain {}",
                ctx.extensions.get::<Chain>().map_or("?", |c| c.0)
            )))
        }
    }
    let faux = Arc::new(FauxProvider::from_yaml(&overflow_script("{ text: S }", "{ text: done }")).unwrap());
    let mut tools = jarvis_sdk::agent::ToolRegistry::new();
    tools.register(Arc::new(SeeChain)).unwrap();
    let mut ctx = LoopContext::new(faux.clone()).with_tools(tools);
    ctx.turn_instruction = Some("RULE: answer from tool results only.".into());
    ctx.extensions.insert(Chain("main>karen"));
    let config = AgentLoopConfig {
        max_turns: 1,
        ..AgentLoopConfig::default()
    };
    let outcome = run_agent_loop(
        &ctx,
        &config,
        vec![Message::user("go")],
        &CancellationToken::new(),
    )
    .await
    .unwrap();
    let requests = faux.requests();
    assert_eq!(requests.len(), 3, "step, summary, continuation");
    for r in &requests {
        let instruction = r.instruction().unwrap();
        assert!(
            instruction.starts_with("RULE: answer from tool results only."),
            "{instruction}"
        );
    }
    assert!(requests[1].instruction().unwrap().ends_with(SUMMARY_INSTRUCTION));
    let Message::Tool(result) = &outcome.new_messages[1] else {
        panic!()
    };
    assert_eq!(result.content, "chain main>karen");
    assert!(
        !serde_json::to_string(&outcome.new_messages)
            .unwrap()
            .contains("RULE:"),
        "the turn instruction is never recorded"
    );
}
