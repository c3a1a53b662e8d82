//! Usage accounting in the assembled app: every turn that called the model
//! writes one row of its own calls to `$JARVIS_HOME/usage.jsonl`, priced by
//! `$JARVIS_HOME/prices.yaml` (a model without a price costs `null`), a
//! delegated turn writes its own row in its peer session, and turns that
//! never reach the model write none.

use jarvis_pack_housing::HousingPack;
use jarvis_sdk::agent::{SessionId, SessionKind};
use jarvis_sdk::app::{AppConfig, build_app};
use jarvis_sdk::common::{ManualClock, Timestamp};
use jarvis_sdk::model::{FauxProvider, PRICES_FILE, Usage};
use jarvis_sdk::turn::{Caller, Spent, USAGE_FILE, UsageBy, UsageLedger, UsageSummary};
use std::path::PathBuf;
use std::sync::Arc;

struct TempHome(PathBuf);

impl TempHome {
    fn new() -> Self {
        TempHome(tempfile::tempdir().unwrap().keep())
    }

    fn write(&self, name: &str, text: &str) {
        let path = self.0.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

impl Drop for TempHome {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// JARVIS (on `lead-model`) asks K.A.R.E.N. (on `field-model`), who looks
/// a notice up; every call reports its usage.
const DELEGATION: &str = r#"
rules:
  - when: { agent: main, last_role: user }
    reply:
      tool_calls: [ { name: ask_agent, arguments: { agent: karen, request: "서울 공고 찾아 줘" } } ]
      usage: { input_tokens: 1000, output_tokens: 20, cached_input_tokens: 400 }
  - when: { agent: karen, last_role: user }
    reply:
      tool_calls: [ { name: sh_notice, arguments: { region: "서울" } } ]
      usage: { input_tokens: 300, output_tokens: 10 }
  - when: { agent: karen, last_role: tool }
    reply: { text: "찾았습니다", usage: { input_tokens: 350, output_tokens: 15 } }
  - when: { agent: main, last_role: tool }
    reply: { text: "KAREN 이 찾았습니다", usage: { input_tokens: 1100, output_tokens: 30 } }
"#;

const PRICES: &str = "
# USD per million tokens
lead-model: { input: 2.5, output: 10, cached_input: 1.25 }
";

/// 2026-11-29T15:30:00Z: already the 30th in the person's zone (+09:00).
const NOW: i64 = 1_795_966_200_000;

/// An app on `script` whose clock stands at [`NOW`], JARVIS on `lead-model`.
async fn app(home: &TempHome, script: &str) -> jarvis_sdk::app::AppAssembly {
    let faux = Arc::new(FauxProvider::from_yaml(script).unwrap());
    let mut config = AppConfig::for_home(&home.0).with_provider(faux).without_memory();
    config.packs = vec![std::sync::Arc::new(HousingPack::in_memory())];
    config.llm.model = "lead-model".into();
    config.clock = Arc::new(ManualClock::new(Timestamp::from_millis(NOW).to_system_time()));
    build_app(config).await.unwrap()
}

#[tokio::test]
async fn each_turn_writes_one_priced_row_of_its_own_calls_and_delegation_is_not_counted_twice() {
    let home = TempHome::new();
    home.write(PRICES_FILE, PRICES);
    home.write(
        "team/karen.yaml",
        "name: K.A.R.E.N.\nmodel: field-model\ntools: [sh_notice]\n",
    );
    let app = app(&home, DELEGATION).await;
    let session = app
        .open_or_create(&SessionId::new("default-main").unwrap(), Some("main"))
        .await
        .unwrap();
    let outcome = session.prompt("서울 공고 알려 줘", Caller::Local).await.unwrap();
    // `final_message.usage` is the turn's own calls: JARVIS's two, not K.A.R.E.N.'s.
    assert_eq!(
        outcome.final_message.usage,
        Usage::new(2100, 50).with_cached_input(400)
    );
    let peer = app
        .list_sessions()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.kind == SessionKind::Peer)
        .expect("the delegation has its peer session");

    // 1,700 fresh × 2.5 + 400 cached × 1.25 + 50 out × 10, per million.
    let main = UsageSummary {
        key: "main".into(),
        turns: 1,
        input_tokens: 2100,
        output_tokens: 50,
        cached_input_tokens: 400,
        cost_usd: Some(0.00525),
    };
    let karen = UsageSummary {
        key: "karen".into(),
        turns: 1,
        input_tokens: 650,
        output_tokens: 25,
        cached_input_tokens: 0,
        cost_usd: None,
    };
    assert_eq!(app.usage_summary(UsageBy::Agent), [karen.clone(), main.clone()]);
    let by_session = app.usage_summary(UsageBy::Session);
    assert_eq!(
        by_session,
        [
            UsageSummary {
                key: "default-main".into(),
                ..main.clone()
            },
            UsageSummary {
                key: peer.id.to_string(),
                ..karen.clone()
            },
        ]
    );
    let days = app.usage_summary(UsageBy::Day);
    assert_eq!(days.len(), 1);
    assert_eq!(
        (
            days[0].key.as_str(),
            days[0].turns,
            days[0].input_tokens,
            days[0].cost_usd
        ),
        ("2026-11-30", 2, 2750, None),
        "every call once, on the person's day; one unpriced turn makes the day's cost unknown"
    );
    assert_eq!(
        app.usage().session_spent("default-main"),
        Spent {
            tokens: 2150,
            usd: Some(0.00525),
            turns: 1
        }
    );
    let now = Timestamp::from_millis(NOW);
    assert_eq!(app.usage().agent_day_spent("karen", now, 540).tokens, 675);
    assert_eq!(
        app.usage()
            .agent_day_spent("karen", Timestamp::from_millis(NOW - 86_400_000), 540)
            .turns,
        0,
        "nothing the day before"
    );

    // A slash command and a refused input never reach the model: no row.
    session.prompt("/help", Caller::Local).await.unwrap();
    assert!(
        session
            .prompt("<script>alert(1)</script>", Caller::Local)
            .await
            .is_err()
    );
    assert_eq!(app.usage_summary(UsageBy::Session).len(), 2);

    // The file holds one line per turn and reads back to the same sums.
    let path = home.0.join(USAGE_FILE);
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2, "{text}");
    let lead = lines.iter().find(|l| l["agent_id"] == "main").unwrap();
    assert_eq!(lead["v"], 1);
    assert_eq!(lead["model"], "lead-model");
    assert_eq!(lead["session_id"], "default-main");
    assert!(lead["turn_id"].as_str().is_some_and(|t| !t.is_empty()));
    assert_eq!(lead["estimated"], false);
    let field = lines.iter().find(|l| l["agent_id"] == "karen").unwrap();
    assert_eq!(field["model"], "field-model");
    assert!(field["cost_usd"].is_null(), "unknown, never 0: {field}");
    let reread = UsageLedger::open(&path).unwrap();
    assert_eq!(reread.summary(UsageBy::Agent, 540), [karen, main]);
}

#[tokio::test]
async fn a_model_without_a_name_is_recorded_under_its_providers_name() {
    let home = TempHome::new();
    std::fs::create_dir_all(home.0.join("team")).unwrap();
    let faux = Arc::new(
        FauxProvider::from_yaml("fallback: { text: ok, usage: { input_tokens: 4, output_tokens: 1 } }")
            .unwrap(),
    );
    let mut config = AppConfig::for_home(&home.0).with_provider(faux).without_memory();
    config.packs = vec![std::sync::Arc::new(HousingPack::in_memory())];
    let app = build_app(config).await.unwrap();
    let session = app
        .session(&app.create_session(None).await.unwrap().id)
        .await
        .unwrap();
    session.prompt("hi", Caller::Local).await.unwrap();
    let text = std::fs::read_to_string(home.0.join(USAGE_FILE)).unwrap();
    let row: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(row["model"], "faux");
    assert!(row["cost_usd"].is_null());
}

#[tokio::test]
async fn an_embedded_app_keeps_its_usage_in_the_process() {
    let home = TempHome::new();
    let faux = Arc::new(
        FauxProvider::from_yaml("fallback: { text: ok, usage: { input_tokens: 4, output_tokens: 1 } }")
            .unwrap(),
    );
    let app = build_app(AppConfig::embedded(&home.0).with_provider(faux))
        .await
        .unwrap();
    let session = app
        .session(&app.create_session(None).await.unwrap().id)
        .await
        .unwrap();
    session.prompt("hi", Caller::Local).await.unwrap();
    assert_eq!(app.usage_summary(UsageBy::Agent)[0].input_tokens, 4);
    assert!(app.usage().path().is_none());
    assert!(!home.0.join(USAGE_FILE).exists());
}

#[tokio::test]
async fn a_malformed_price_table_stops_the_app_naming_the_file() {
    let home = TempHome::new();
    home.write(PRICES_FILE, "lead-model: { input: -1, output: 10 }\n");
    let faux = Arc::new(FauxProvider::from_yaml("fallback: { text: ok }").unwrap());
    let error = build_app(AppConfig::for_home(&home.0).with_provider(faux))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(&home.0.join(PRICES_FILE).display().to_string()),
        "{error}"
    );
    assert!(error.contains("`lead-model.input` is -1"), "{error}");
}
