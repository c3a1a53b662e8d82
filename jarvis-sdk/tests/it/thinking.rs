//! The inner thought engine through an `AgentSession`: the router's event on
//! every turn, a valid frame guiding the turn, and every failure (invalid
//! frame, provider error, timeout) ending in `thought_end {ok: false}` while
//! the turn still answers.

use jarvis_sdk::agent::{
    AgentEvent, AgentLoopConfig, Harness, HarnessConfig, LoopContext, MemorySessionStore, NewSession,
    ScreenHub, SessionId, SessionKind, SessionStore, ThoughtConfig, ThoughtEngine,
};
use jarvis_sdk::common::SequentialIds;
use jarvis_sdk::model::{FauxProvider, Purpose};
use jarvis_sdk::testing::RecordingAdapter;
use jarvis_sdk::turn::{
    AgentSession, AgentSessionParts, ApprovalBroker, Caller, LayeredApprovalRules, SecurityPipeline,
};
use std::sync::Arc;
use std::time::Duration;

const MULTI_STEP: &str = "먼저 예산을 정리하고 그다음에 맞는 공고를 찾아서 비교해 줘";

async fn session(script: &str) -> (AgentSession, Arc<FauxProvider>) {
    let faux = Arc::new(FauxProvider::from_yaml(script).unwrap());
    let store = Arc::new(MemorySessionStore::new());
    let id = SessionId::new("s1").unwrap();
    store.create(NewSession::user(id.clone(), "main")).await.unwrap();
    let screens = ScreenHub::new();
    let broker = ApprovalBroker::new(
        "s1",
        Arc::new(LayeredApprovalRules::new(std::env::temp_dir())),
        Arc::new(SequentialIds::default()),
    );
    let ctx = LoopContext::new(faux.clone()).with_ui(Arc::new(screens.clone()));
    let engine = ThoughtEngine::new(
        faux.clone(),
        store.clone(),
        ThoughtConfig {
            timeout: Duration::from_secs(5),
            ..ThoughtConfig::default()
        },
    );
    let session = AgentSession::new(
        AgentSessionParts::new(
            id,
            "main",
            SessionKind::User,
            SecurityPipeline::default(),
            Harness::new(store, ctx),
            screens,
            broker,
        )
        .with_thinking(Arc::new(engine)),
    );
    (session, faux)
}

fn thought_events(ui: &RecordingAdapter) -> Vec<AgentEvent> {
    ui.events()
        .into_iter()
        .filter(|e| matches!(e.kind(), "thought_route" | "inner_thought" | "thought_end"))
        .collect()
}

#[tokio::test]
async fn a_valid_frame_is_announced_and_guides_the_turn() {
    let (session, faux) = session(
        r#"
rules:
  - when: { purpose: thought }
    reply: { text: "```json\n{\"interpretation\": \"예산에 맞는 공고 비교\", \"decision\": \"use_tools\", \"confidence\": 0.7, \"plan\": [\"예산 확인\", \"공고 조회\", \"비교\"]}\n```" }
fallback: { text: "done" }
"#,
    )
    .await;
    let ui = Arc::new(RecordingAdapter::new());
    let _a = session.attach(ui.clone());
    let out = session.prompt(MULTI_STEP, Caller::Local).await.unwrap();
    assert_eq!(out.final_message.content, "done");
    let events = thought_events(&ui);
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(matches!(events[0], AgentEvent::ThoughtRoute { think: true, p_think } if p_think >= 0.5));
    match &events[1] {
        AgentEvent::InnerThought {
            interpretation,
            decision,
            confidence,
            frame,
        } => {
            assert_eq!(
                (interpretation.as_str(), decision.as_str()),
                ("예산에 맞는 공고 비교", "use_tools")
            );
            assert!((confidence - 0.7).abs() < 1e-6);
            assert_eq!(frame["plan"][2], "비교");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(events[2], AgentEvent::ThoughtEnd { ok: true });
    let requests = faux.requests();
    assert_eq!(requests[0].purpose, Purpose::Thought);
    assert!(requests[0].tools.is_empty(), "the thought call offers no tools");
    let step = &requests[1];
    assert!(
        step.instruction().unwrap().contains("3. 비교"),
        "the plan reaches the loop"
    );
    assert!(
        !serde_json::to_string(&out.new_messages)
            .unwrap()
            .contains("inner thought"),
        "never recorded"
    );
    // The order on screen: thinking before the loop starts.
    let kinds = ui.kinds();
    let end = kinds.iter().position(|k| *k == "thought_end").unwrap();
    let start = kinds.iter().position(|k| *k == "agent_start").unwrap();
    assert!(end < start);
}

#[tokio::test]
async fn failures_end_the_thought_and_the_turn_still_answers() {
    for (name, reply) in [
        ("invalid frame", "{ text: \"I think we should just answer.\" }"),
        (
            "bad values",
            "{ text: \"{\\\"interpretation\\\": \\\"x\\\", \\\"decision\\\": \\\"dance\\\", \\\"confidence\\\": 2}\" }",
        ),
        (
            "provider error",
            "{ error: { message: \"overloaded\", status: 529 } }",
        ),
    ] {
        let script = format!(
            "rules:\n  - when: {{ purpose: thought }}\n    reply: {reply}\nfallback: {{ text: answered }}\n"
        );
        let (session, faux) = session(&script).await;
        let ui = Arc::new(RecordingAdapter::new());
        let _a = session.attach(ui.clone());
        let out = session.prompt(MULTI_STEP, Caller::Local).await.unwrap();
        assert_eq!(out.final_message.content, "answered", "{name}");
        let events = thought_events(&ui);
        assert_eq!(events.len(), 2, "{name}: {events:?}");
        assert_eq!(events[1], AgentEvent::ThoughtEnd { ok: false }, "{name}");
        assert!(
            faux.requests()[1].instruction().is_none(),
            "{name}: no note without a frame"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_slow_thought_times_out() {
    let (session, _) = session(
        "rules:\n  - when: { purpose: thought }\n    reply: { delay_ms: 60000, text: \"{}\" }\nfallback: { text: answered }\n",
    )
    .await;
    let ui = Arc::new(RecordingAdapter::new());
    let _a = session.attach(ui.clone());
    let started = tokio::time::Instant::now();
    let out = session.prompt(MULTI_STEP, Caller::Local).await.unwrap();
    assert_eq!(out.final_message.content, "answered");
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(5),
        "waited exactly the timeout"
    );
    assert_eq!(
        thought_events(&ui).last(),
        Some(&AgentEvent::ThoughtEnd { ok: false })
    );
}

#[tokio::test]
async fn a_simple_request_is_routed_off_without_a_call() {
    let (session, faux) = session("fallback: { text: hi }").await;
    let ui = Arc::new(RecordingAdapter::new());
    let _a = session.attach(ui.clone());
    session.prompt("안녕", Caller::Local).await.unwrap();
    let events = thought_events(&ui);
    assert!(
        matches!(events.as_slice(), [AgentEvent::ThoughtRoute { think: false, .. }]),
        "{events:?}"
    );
    assert_eq!(faux.request_count(), 1, "no thought call");
}

/// Records what the thinking slot is told, before and after each turn.
struct Spy {
    failures: std::sync::Mutex<Vec<usize>>,
    reports: tokio::sync::mpsc::UnboundedSender<jarvis_sdk::agent::TurnReport>,
}

#[async_trait::async_trait]
impl jarvis_sdk::agent::ThinkingHook for Spy {
    async fn before_turn(
        &self,
        input: &jarvis_sdk::agent::ThinkingInput<'_>,
        _ui: &dyn jarvis_sdk::agent::UIAdapter,
    ) -> jarvis_sdk::agent::ThinkingOutcome {
        self.failures.lock().unwrap().push(input.recent_failures);
        jarvis_sdk::agent::ThinkingOutcome::default()
    }

    async fn after_turn(&self, report: &jarvis_sdk::agent::TurnReport) {
        let _ = self.reports.send(report.clone());
    }
}

#[tokio::test]
async fn the_slot_hears_of_every_finished_turn_and_counts_recent_failures() {
    // A request with "도구" keeps calling a tool, so with a budget of two
    // steps its turn overflows (a failure for the router); the others answer.
    let script = r#"
rules:
  - when: { last_user: "도구", purpose: step }
    reply: { tool_calls: [ { name: nothing, arguments: {} } ] }
  - when: { last_user: "도구", purpose: continuation }
    reply: { tool_calls: [ { name: nothing, arguments: {} } ] }
fallback: { text: "네." }
"#;
    let faux = Arc::new(FauxProvider::from_yaml(script).unwrap());
    let store = Arc::new(MemorySessionStore::new());
    let id = SessionId::new("s1").unwrap();
    store.create(NewSession::user(id.clone(), "main")).await.unwrap();
    let screens = ScreenHub::new();
    let broker = ApprovalBroker::new(
        "s1",
        Arc::new(LayeredApprovalRules::new(std::env::temp_dir())),
        Arc::new(SequentialIds::default()),
    );
    let ctx = LoopContext::new(faux.clone()).with_ui(Arc::new(screens.clone()));
    let (tx, mut reports) = tokio::sync::mpsc::unbounded_channel();
    let spy = Arc::new(Spy {
        failures: Default::default(),
        reports: tx,
    });
    let session = AgentSession::new(
        AgentSessionParts::new(
            id,
            "main",
            SessionKind::User,
            SecurityPipeline::default(),
            Harness::new(store, ctx).with_config(HarnessConfig::default().with_loop_config(
                AgentLoopConfig {
                    max_turns: 2,
                    ..AgentLoopConfig::default()
                },
            )),
            screens,
            broker,
        )
        .with_thinking(spy.clone()),
    );
    session.prompt("안녕", Caller::Local).await.unwrap();
    let first = reports.recv().await.unwrap();
    assert_eq!((first.prompt.as_str(), first.answer.as_str()), ("안녕", "네."));
    assert!(!first.failed());
    session.prompt("도구 써 봐", Caller::Local).await.unwrap();
    let second = reports.recv().await.unwrap();
    assert_eq!(second.tools, ["nothing"]);
    assert!(second.tool_calls >= 2 && second.overflows >= 1, "{second:?}");
    assert!(second.failed());
    session.prompt("또 안녕", Caller::Local).await.unwrap();
    reports.recv().await.unwrap();
    session.prompt("그리고?", Caller::Local).await.unwrap();
    reports.recv().await.unwrap();
    // Before each turn: the failures among the turns before it.
    assert_eq!(*spy.failures.lock().unwrap(), [0, 0, 1, 1]);
}
