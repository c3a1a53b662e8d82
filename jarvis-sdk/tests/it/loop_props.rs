//! Property tests of the loop's bounds (R-LOOP-12) over generated scripts
//! that reach single and double overflows, empty answers, errors and aborts.

use jarvis_sdk::agent::prompts::SUMMARY_INSTRUCTION;
use jarvis_sdk::agent::{AgentEvent, StopReason, ToolResult};
use jarvis_sdk::model::{FauxProvider, FauxReply, FauxScript, Message, Purpose};
use jarvis_sdk::testing::FnTool;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::json;
use std::collections::HashMap;

use crate::support::Turn;

#[derive(Debug, Clone)]
enum Kind {
    Text,
    Tool,
    TwoTools,
    Abort,
    Empty,
    Error,
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        2 => Just(Kind::Text),
        6 => Just(Kind::Tool),
        1 => Just(Kind::TwoTools),
        1 => Just(Kind::Abort),
        2 => Just(Kind::Empty),
        1 => Just(Kind::Error),
    ]
}

fn reply(kind: &Kind) -> FauxReply {
    match kind {
        Kind::Text => FauxReply::text("an answer"),
        Kind::Tool => FauxReply::tool_call("read_file", json!({"path": "a"})),
        Kind::TwoTools => {
            FauxReply::tool_call("read_file", json!({"path": "a"})).and_tool_call("read_file", json!({}))
        }
        Kind::Abort => FauxReply::tool_call("abort", json!({})),
        Kind::Empty => FauxReply::empty(),
        Kind::Error => FauxReply::error("boom"),
    }
}

#[derive(Debug, Clone)]
struct Case {
    max_turns: u32,
    resume: bool,
    replies: Vec<Kind>,
    fallback: Option<Kind>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        1u32..=6,
        prop::bool::weighted(0.85),
        prop::collection::vec(kind(), 0..24),
        prop::option::weighted(
            0.8,
            prop_oneof![4 => Just(Kind::Tool), 1 => Just(Kind::Text), 1 => Just(Kind::Empty)],
        ),
    )
        .prop_map(|(max_turns, resume, replies, fallback)| Case {
            max_turns,
            resume,
            replies,
            fallback,
        })
}

/// Runs one case and checks every bound; returns the category it reached.
fn check(case: &Case) -> Result<&'static str, TestCaseError> {
    let mut script = FauxScript::new();
    for k in &case.replies {
        script = script.reply(reply(k));
    }
    if let Some(f) = &case.fallback {
        script = script.fallback(reply(f));
    }
    let mut turn = Turn::with_faux(FauxProvider::new(script).unwrap()).max_turns(case.max_turns);
    turn.config.overflow_resume = case.resume;
    let cancel = turn.cancel.clone();
    turn = turn
        .tool(FnTool::constant("read_file", "data"))
        .tool(FnTool::new("abort", move |_| {
            cancel.cancel();
            Ok(ToolResult::ok("aborting"))
        }));
    let config = turn.config.clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let run = rt.block_on(turn.run());
    let o = &run.outcome;
    let requests = run.requests();
    let continuation = (case.max_turns / 2).max(1);

    // R-LOOP-12 bounds.
    prop_assert_eq!(o.provider_calls as usize, requests.len());
    prop_assert!(o.provider_calls <= 2 * (case.max_turns + continuation) + 2);
    prop_assert!(o.provider_calls <= config.max_provider_calls());
    prop_assert!(o.summary_calls <= 2);
    prop_assert!(o.overflows <= 2);
    prop_assert!(o.turns <= case.max_turns + continuation);
    let summaries: Vec<_> = requests
        .iter()
        .filter(|r| r.purpose == Purpose::Summary)
        .collect();
    prop_assert_eq!(summaries.len(), o.summary_calls as usize);
    for s in &summaries {
        prop_assert!(s.tools.is_empty());
        prop_assert!(s.instruction().is_some_and(|i| i.ends_with(SUMMARY_INSTRUCTION)));
    }
    if !case.resume {
        prop_assert_eq!(o.summary_calls, 0);
        prop_assert!(o.overflows <= 1);
        prop_assert!(o.turns <= case.max_turns);
    }
    // At most two calls per step (the nudge).
    let mut per_step: HashMap<usize, usize> = HashMap::new();
    let mut step = 0;
    for r in &requests {
        match r.purpose {
            Purpose::Step | Purpose::Continuation => {
                step += 1;
                *per_step.entry(step).or_default() += 1;
            }
            Purpose::Nudge => *per_step.entry(step).or_default() += 1,
            _ => {}
        }
    }
    prop_assert!(per_step.values().all(|n| *n <= 2));
    prop_assert_eq!(step as u32, o.turns, "every step begun made its call");

    // One agent_start, one agent_end, last; steps numbered 1..=turns.
    let events = run.ui.events();
    let first_is_start = matches!(events.first(), Some(AgentEvent::AgentStart { .. }));
    prop_assert!(first_is_start);
    let last_is_end = matches!(events.last(), Some(AgentEvent::AgentEnd { .. }));
    prop_assert!(last_is_end);
    prop_assert_eq!(events.iter().filter(|e| e.kind() == "agent_start").count(), 1);
    prop_assert_eq!(events.iter().filter(|e| e.kind() == "agent_end").count(), 1);
    let turns: Vec<u32> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::TurnStart { turn } => Some(*turn),
            _ => None,
        })
        .collect();
    prop_assert_eq!(turns, (1..=o.turns).collect::<Vec<_>>());

    // The recorded history is well formed: nothing injected, every call answered in order.
    let mut pending: Vec<String> = Vec::new();
    for m in &o.new_messages {
        match m {
            Message::User(_) => prop_assert!(false, "an injected instruction was recorded"),
            Message::Assistant(a) => {
                prop_assert!(pending.is_empty(), "calls left unanswered");
                pending = a.tool_calls.iter().map(|c| c.id.clone()).rev().collect();
            }
            Message::Tool(t) => prop_assert_eq!(Some(t.tool_call_id.clone()), pending.pop()),
        }
    }
    prop_assert!(pending.is_empty());

    let stop = o.final_message.stop_reason;
    prop_assert_eq!(
        stop == StopReason::Overflow,
        o.overflows == 2 && stop != StopReason::Aborted
    );
    let nudged = requests.iter().any(|r| r.purpose == Purpose::Nudge);
    Ok(match stop {
        StopReason::Aborted if o.summary_calls > 0 => "aborted after a summary",
        StopReason::Aborted => "aborted",
        StopReason::Error => "error",
        StopReason::Empty => "empty after nudge",
        StopReason::Overflow => "double overflow",
        StopReason::MaxTurns => "overflow without resume",
        _ if o.overflows == 1 => "single overflow, answered",
        _ if nudged => "nudged, answered",
        _ => "answered",
    })
}

#[test]
fn loop_bounds_hold_for_generated_scripts() {
    let mut runner = TestRunner::new(Config {
        cases: 600,
        failure_persistence: None,
        ..Config::default()
    });
    let seen = std::cell::RefCell::new(HashMap::<&'static str, usize>::new());
    runner
        .run(&case(), |c| {
            let category = check(&c)?;
            *seen.borrow_mut().entry(category).or_default() += 1;
            Ok(())
        })
        .unwrap();
    let seen = seen.into_inner();
    for category in [
        "single overflow, answered",
        "double overflow",
        "overflow without resume",
        "empty after nudge",
        "nudged, answered",
        "error",
        "aborted",
        "aborted after a summary",
        "answered",
    ] {
        assert!(
            seen.get(category).copied().unwrap_or(0) > 0,
            "never generated: {category} (saw {seen:?})"
        );
    }
}
