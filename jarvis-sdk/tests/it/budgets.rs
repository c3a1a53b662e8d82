//! A turn's `usage_total` (its own calls, its sub-agents' and its
//! delegations'), and budgets: the wrap-up when a turn limit is reached, a
//! sub-agent bound by its parent's remainder, and a day limit that refuses
//! the next turn until the next day.

use jarvis_sdk::agent::{AgentEvent, Budget, StopReason, UsageTotal};
use jarvis_sdk::app::{AppAssembly, AppConfig, build_app};
use jarvis_sdk::common::ManualClock;
use jarvis_sdk::model::{ChatRequest, FauxProvider, PRICES_FILE, Purpose};
use jarvis_sdk::testing::RecordingAdapter;
use jarvis_sdk::turn::{Caller, TurnError};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

struct App {
    app: AppAssembly,
    faux: Arc<FauxProvider>,
    _home: tempfile::TempDir,
}

/// An embedded app on `script` with JARVIS's `main.yaml`, other agents'
/// definitions, `prices.yaml` and budget defaults.
async fn app(
    script: &str,
    main_yaml: &str,
    definitions: &[(&str, &str)],
    prices: &str,
    budget: Budget,
    clock: Option<Arc<ManualClock>>,
) -> App {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join(PRICES_FILE), prices).unwrap();
    let faux = Arc::new(FauxProvider::from_yaml(script).unwrap());
    let mut config = AppConfig::embedded(home.path())
        .with_provider(faux.clone())
        .with_definition("main", main_yaml);
    for (id, yaml) in definitions {
        config = config.with_definition(*id, *yaml);
    }
    config.budget = budget;
    config.llm.model = "lead-model".into();
    if let Some(clock) = clock {
        config.clock = clock;
    }
    App {
        app: build_app(config).await.unwrap(),
        faux,
        _home: home,
    }
}

fn purposes(requests: &[ChatRequest], agent: &str) -> Vec<Purpose> {
    requests
        .iter()
        .filter(|r| r.metadata.agent_id == agent)
        .map(|r| r.purpose)
        .collect()
}

fn usage_total(screen: &RecordingAdapter) -> UsageTotal {
    screen
        .events()
        .into_iter()
        .find_map(|e| match e {
            AgentEvent::AgentEnd { usage_total, .. } => Some(usage_total),
            _ => None,
        })
        .expect("the turn's agent_end")
}

/// JARVIS runs a researcher and asks KAREN; every call reports usage.
const SPREAD: &str = r#"
rules:
  - when: { agent: main, last_role: user }
    reply:
      tool_calls: [ { name: run_subagent, arguments: { name: researcher, task: "찾아 봐" } } ]
      usage: { input_tokens: 100, output_tokens: 10, cached_input_tokens: 40 }
  - when: { agent: main.researcher, last_role: user }
    reply: { tool_calls: [ { name: list_dir, arguments: { path: "." } } ], usage: { input_tokens: 20, output_tokens: 2 } }
  - when: { agent: main.researcher, last_role: tool }
    reply: { text: "연구 결과", usage: { input_tokens: 30, output_tokens: 3 } }
  - when: { agent: main, last_role: tool }
    times: 1
    reply:
      tool_calls: [ { name: ask_agent, arguments: { agent: karen, request: "대출 이자를 계산해 줘" } } ]
      usage: { input_tokens: 40, output_tokens: 4 }
  - when: { agent: karen, last_role: user }
    reply: { text: "karen 의 답", usage: { input_tokens: 50, output_tokens: 5 } }
  - when: { agent: main, last_role: tool }
    reply: { text: "모두 끝", usage: { input_tokens: 60, output_tokens: 6 } }
"#;

const RESEARCHER: &str = "subagents:\n  - { name: researcher, tools: [list_dir] }\n";

#[tokio::test]
async fn usage_total_adds_steps_subagents_and_a_delegation_exactly_and_prices_them() {
    // $1 a token in, $2 out, $0.5 cached: sums of whole dollars stay exact.
    let prices = "lead-model: {input: 1000000, output: 2000000, cached_input: 500000}\n";
    let t = app(
        SPREAD,
        RESEARCHER,
        &[("karen", "name: K.A.R.E.N.\ntools: [list_dir]\n")],
        prices,
        Budget::default(),
        None,
    )
    .await;
    let meta = t.app.default_session("main").await.unwrap();
    let session = t.app.session(&meta.id).await.unwrap();
    let screen = Arc::new(RecordingAdapter::new());
    let _s = session.attach(screen.clone());
    let out = session.prompt("해 줘", Caller::Local).await.unwrap();
    assert_eq!(out.final_message.content, "모두 끝");
    // The turn's own calls: 100 + 40 + 60 in, 10 + 4 + 6 out.
    assert_eq!(
        (
            out.final_message.usage.input_tokens,
            out.final_message.usage.output_tokens
        ),
        (200, 20)
    );
    let total = usage_total(&screen);
    assert_eq!(
        total,
        UsageTotal {
            input_tokens: 100 + 20 + 30 + 40 + 50 + 60,
            output_tokens: 10 + 2 + 3 + 4 + 5 + 6,
            cached_input_tokens: 40,
            estimated: false,
            // (300 − 40) × $1 + 40 × $0.5 + 30 × $2
            cost_usd: Some(260.0 + 20.0 + 60.0),
        }
    );
    assert_eq!(out.usage_total, total);
    let json =
        serde_json::to_value(screen.events().iter().find(|e| e.kind() == "agent_end").unwrap()).unwrap();
    assert_eq!(json["usage_total"]["cost_usd"], 340.0);
    assert_eq!(json["usage_total"]["input_tokens"], 300);
    assert_eq!(
        json["final_message"]["usage"]["input_tokens"], 200,
        "final_message.usage keeps its meaning"
    );
}

#[tokio::test]
async fn a_model_without_a_price_makes_the_total_cost_null_not_zero() {
    let t = app(
        SPREAD,
        RESEARCHER,
        &[(
            "karen",
            "name: K.A.R.E.N.\ntools: [list_dir]\nmodel: unpriced-model\n",
        )],
        "lead-model: {input: 1, output: 1}\n",
        Budget::default(),
        None,
    )
    .await;
    let meta = t.app.default_session("main").await.unwrap();
    let session = t.app.session(&meta.id).await.unwrap();
    let screen = Arc::new(RecordingAdapter::new());
    let _s = session.attach(screen.clone());
    session.prompt("해 줘", Caller::Local).await.unwrap();
    let json =
        serde_json::to_value(screen.events().iter().find(|e| e.kind() == "agent_end").unwrap()).unwrap();
    assert_eq!(json["usage_total"]["input_tokens"], 300);
    assert!(json["usage_total"]["cost_usd"].is_null(), "{json}");
}

#[tokio::test]
async fn a_turn_budget_reached_in_step_3_ends_with_one_wrap_up_call() {
    let script = r#"
rules:
  - when: { agent: main, purpose: wrap_up }
    reply: { text: "예산 안에서 여기까지 했습니다", usage: { input_tokens: 90, output_tokens: 10 } }
  - when: { agent: main }
    reply: { tool_calls: [ { name: list_dir, arguments: { path: "." } } ], usage: { input_tokens: 90, output_tokens: 10 } }
"#;
    let budget = Budget {
        turn_tokens: Some(250),
        ..Budget::default()
    };
    let t = app(script, "", &[], "", budget, None).await;
    let meta = t.app.default_session("main").await.unwrap();
    let out = t
        .app
        .session(&meta.id)
        .await
        .unwrap()
        .prompt("끝없이 봐", Caller::Local)
        .await
        .unwrap();
    assert_eq!(out.final_message.stop_reason, StopReason::Budget);
    assert_eq!(out.final_message.content, "예산 안에서 여기까지 했습니다");
    let requests = t.faux.requests();
    assert_eq!(
        purposes(&requests, "main"),
        [Purpose::Step, Purpose::Step, Purpose::Step, Purpose::WrapUp],
        "step 3 reached 300 of 250 tokens; exactly one wrap-up"
    );
    let wrap_up = requests.last().unwrap();
    assert!(wrap_up.tools.is_empty(), "the wrap-up offers no tools");
    let last = serde_json::to_string(wrap_up.messages.last().unwrap()).unwrap();
    assert!(last.contains("the turn budget (250 tokens)"), "{last}");
    assert_eq!(out.turns, 3);
    let json = serde_json::to_value(out.end_event()).unwrap();
    assert_eq!(json["final_message"]["stop_reason"], "budget");
}

#[tokio::test]
async fn a_subagent_cannot_spend_more_than_its_parent_has_left() {
    let script = r#"
rules:
  - when: { purpose: wrap_up, agent: main.researcher }
    reply: { text: "연구원 정리", usage: { input_tokens: 5, output_tokens: 5 } }
  - when: { purpose: wrap_up, agent: main }
    reply: { text: "자비스 정리", usage: { input_tokens: 5, output_tokens: 5 } }
  - when: { agent: main, last_role: user }
    reply:
      tool_calls: [ { name: run_subagent, arguments: { name: researcher, task: "계속 봐" } } ]
      usage: { input_tokens: 90, output_tokens: 10 }
  - when: { agent: main.researcher }
    reply: { tool_calls: [ { name: list_dir, arguments: { path: "." } } ], usage: { input_tokens: 50, output_tokens: 10 } }
  - when: { agent: main, last_role: tool }
    reply: { text: "never: the budget is spent", usage: { input_tokens: 1, output_tokens: 1 } }
"#;
    let budget = Budget {
        turn_tokens: Some(150),
        ..Budget::default()
    };
    let t = app(script, RESEARCHER, &[], "", budget, None).await;
    let meta = t.app.default_session("main").await.unwrap();
    let out = t
        .app
        .session(&meta.id)
        .await
        .unwrap()
        .prompt("연구해", Caller::Local)
        .await
        .unwrap();
    let requests = t.faux.requests();
    assert_eq!(
        purposes(&requests, "main.researcher"),
        [Purpose::Step, Purpose::WrapUp],
        "100 of 150 left 50: one step of 60 and the researcher wraps up"
    );
    assert_eq!(purposes(&requests, "main"), [Purpose::Step, Purpose::WrapUp]);
    assert_eq!(out.final_message.stop_reason, StopReason::Budget);
    assert_eq!(out.final_message.content, "자비스 정리");
    assert_eq!(
        out.usage_total.input_tokens + out.usage_total.output_tokens,
        100 + 60 + 10 + 10
    );
}

#[tokio::test]
async fn a_day_limit_refuses_the_next_turn_until_the_next_day() {
    let script = r#"
fallback: { text: "답", usage: { input_tokens: 120, output_tokens: 30 } }
"#;
    // Noon in Seoul (the person's zone by default): 03:00 UTC.
    let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000 / 86_400 * 86_400 + 3 * 3_600);
    let clock = Arc::new(ManualClock::new(start));
    let budget = Budget {
        day_tokens: Some(100),
        ..Budget::default()
    };
    let t = app(script, "", &[], "", budget, Some(clock.clone())).await;
    let meta = t.app.default_session("main").await.unwrap();
    let session = t.app.session(&meta.id).await.unwrap();
    let first = session.prompt("하나", Caller::Local).await.unwrap();
    assert_eq!(
        first.final_message.stop_reason,
        StopReason::Stop,
        "the answer that crossed the limit stands"
    );
    let refused = session.prompt("둘", Caller::Local).await.unwrap_err();
    let TurnError::BudgetExhausted(message) = &refused else {
        panic!("{refused:?}")
    };
    assert!(
        message.contains("today's budget") && message.contains("150 tokens used"),
        "{message}"
    );
    assert_eq!(
        t.faux.request_count(),
        1,
        "the refused turn never reached the model"
    );
    // Another session of the agent is refused too: the day is the agent's.
    let other = t.app.create_session(None).await.unwrap();
    assert!(matches!(
        t.app
            .session(&other.id)
            .await
            .unwrap()
            .prompt("셋", Caller::Local)
            .await,
        Err(TurnError::BudgetExhausted(_))
    ));
    clock.advance(Duration::from_secs(24 * 3_600));
    let next_day = session.prompt("다음 날", Caller::Local).await.unwrap();
    assert_eq!(next_day.final_message.content, "답");
}
