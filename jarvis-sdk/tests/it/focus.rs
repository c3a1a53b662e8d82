//! Focus tasks end to end on FauxProvider: a scripted task over three
//! turns and a restart, its four files, `focus_state` and `focus_panel`,
//! the `[포커스]` section, and `/focus`.

use jarvis_sdk::agent::Durability;
use jarvis_sdk::app::{AppAssembly, AppConfig, StoreBackend, build_app};
use jarvis_sdk::common::ManualClock;
use jarvis_sdk::initiative::{FocusPanel, FocusPhase, FocusState, FocusStepStatus};
use jarvis_sdk::model::{FauxProvider, Message};
use jarvis_sdk::testing::RecordingAdapter;
use jarvis_sdk::turn::Caller;
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

const SCRIPT: &str = r#"
rules:
  - when: { agent: main, last_role: user, last_user: "분석 시작" }
    reply: { tool_calls: [ { name: start_focus, arguments: { title: "청약 분석", plan: ["공고 읽기", "자격 확인", "정리"] } } ] }
  - when: { agent: main, last_role: user, last_user: "계속 1" }
    reply: { tool_calls: [
      { name: focus_step, arguments: { status: done, note: "공고 3건" } },
      { name: focus_note, arguments: { kind: reference, text: "SH 공고 목록", url: "https://example.test/sh" } },
      { name: focus_note, arguments: { kind: finding, text: "소득 기준 충족" } } ] }
  - when: { agent: main, last_role: user, last_user: "계속 2" }
    reply: { tool_calls: [
      { name: focus_step, arguments: { status: skipped, note: "이미 확인" } },
      { name: focus_step, arguments: { status: done } },
      { name: end_focus, arguments: { summary: "두 건 지원 가능" } } ] }
fallback: { text: "네." }
"#;

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_083_200),
    ))
}

async fn app_at(home: &Path) -> (AppAssembly, Arc<FauxProvider>) {
    let faux = Arc::new(FauxProvider::from_yaml(SCRIPT).unwrap());
    let mut config = AppConfig::embedded(home).with_provider(faux.clone());
    config.store = StoreBackend::Jsonl;
    config.durability = Durability::Never;
    config.memory.enabled = false;
    config.clock = clock();
    (build_app(config).await.unwrap(), faux)
}

/// `(steps' statuses, current, state)` of every `focus_state` a screen saw.
fn states(screen: &RecordingAdapter) -> Vec<(Vec<FocusStepStatus>, Option<usize>, FocusPhase)> {
    screen
        .events()
        .into_iter()
        .filter_map(|e| e.as_notice::<FocusState>())
        .map(|s| (s.steps.iter().map(|s| s.status).collect(), s.current, s.state))
        .collect()
}

fn panels(screen: &RecordingAdapter) -> Vec<String> {
    screen
        .events()
        .into_iter()
        .filter_map(|e| e.as_notice::<FocusPanel>())
        .map(|FocusPanel { area, markdown, .. }| {
            assert_eq!(area, "focus");
            markdown
        })
        .collect()
}

#[tokio::test]
async fn a_scripted_task_survives_a_restart_and_ends_with_its_files_written() {
    use FocusStepStatus::{Active, Done, Pending, Skipped};
    let home = tempfile::tempdir().unwrap();
    let folder = home.path().join("focus/f-1");
    {
        let (app, faux) = app_at(home.path()).await;
        let session = app
            .session(&app.default_session("main").await.unwrap().id)
            .await
            .unwrap();
        let screen = Arc::new(RecordingAdapter::new());
        let _attached = session.attach(screen.clone());
        session
            .prompt("청약 분석 시작해 줘", Caller::Local)
            .await
            .unwrap();
        for file in ["state.json", "log.md", "references.md", "analysis.jsonl"] {
            assert!(folder.join(file).is_file(), "{file}");
        }
        assert_eq!(
            states(&screen),
            [(vec![Active, Pending, Pending], Some(0), FocusPhase::Active)]
        );
        session.prompt("계속 1", Caller::Local).await.unwrap();
        assert_eq!(
            states(&screen).last().unwrap(),
            &(vec![Done, Active, Pending], Some(1), FocusPhase::Active)
        );
        // The step, the reference and the finding each sent the state and the panel.
        assert_eq!((states(&screen).len(), panels(&screen).len()), (4, 4));
        assert!(panels(&screen).last().unwrap().contains("[x] 1. 공고 읽기"));
        // The request of the next turn carries the task.
        session.prompt("잠깐 다른 얘기", Caller::Local).await.unwrap();
        let last = faux.requests().last().unwrap().clone();
        let first = match &last.messages[0] {
            Message::User(u) => u.content.clone(),
            other => panic!("{other:?}"),
        };
        assert!(first.starts_with("[포커스]\n- f-1 청약 분석"), "{first}");
        assert!(first.contains("2. [active] 자격 확인 ← 지금"), "{first}");
        assert!(first.contains("1. [done] 공고 읽기 — 공고 3건"), "{first}");
    }
    // A restart: the task is still active and goes on.
    let (app, faux) = app_at(home.path()).await;
    let session = app
        .session(&app.default_session("main").await.unwrap().id)
        .await
        .unwrap();
    let shown = app.focus_events("default-main", false);
    assert!(
        matches!(shown[0].as_notice::<FocusState>(), Some(FocusState { task_id, current: Some(1), busy: false, .. }) if task_id == "f-1"),
        "{shown:?}"
    );
    assert!(shown[1].as_notice::<FocusPanel>().is_some());
    let screen = Arc::new(RecordingAdapter::new());
    let _attached = session.attach(screen.clone());
    session.prompt("계속 2", Caller::Local).await.unwrap();
    let first = match &faux.requests()[0].messages[0] {
        Message::User(u) => u.content.clone(),
        other => panic!("{other:?}"),
    };
    assert!(first.contains("2. [active] 자격 확인 ← 지금"), "{first}");
    assert_eq!(
        states(&screen).last().unwrap(),
        &(vec![Done, Skipped, Done], None, FocusPhase::Done)
    );
    assert!(app.focus().active("default-main").is_none());
    assert!(app.focus_events("default-main", false).is_empty());

    let state: Value = serde_json::from_slice(&std::fs::read(folder.join("state.json")).unwrap()).unwrap();
    assert_eq!(state["task_id"], "f-1");
    assert_eq!(state["title"], "청약 분석");
    assert_eq!(state["state"], "done");
    assert_eq!(state["current"], Value::Null);
    assert_eq!(state["started"], "2026-12-01T00:00:00.000Z");
    assert_eq!(state["summary"], "두 건 지원 가능");
    let steps: Vec<(&str, &str)> = state["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["title"].as_str().unwrap(), s["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        steps,
        [("공고 읽기", "done"), ("자격 확인", "skipped"), ("정리", "done")]
    );
    let log = std::fs::read_to_string(folder.join("log.md")).unwrap();
    assert!(log.starts_with("# 청약 분석\n"), "{log}");
    for line in [
        "step 1 \"공고 읽기\": done — 공고 3건",
        "step 2 \"자격 확인\": skipped — 이미 확인",
        "step 3 \"정리\": done",
        "## Summary\n\n두 건 지원 가능",
    ] {
        assert!(log.contains(line), "{line} in {log}");
    }
    let references = std::fs::read_to_string(folder.join("references.md")).unwrap();
    assert!(
        references.contains("- SH 공고 목록 <https://example.test/sh>"),
        "{references}"
    );
    let analysis = std::fs::read_to_string(folder.join("analysis.jsonl")).unwrap();
    let findings: Vec<Value> = analysis
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(findings.len(), 1);
    assert_eq!(
        (findings[0]["text"].as_str(), findings[0]["step"].as_u64()),
        (Some("소득 기준 충족"), Some(2))
    );
}

#[tokio::test]
async fn the_focus_command_starts_and_shows_a_task_without_the_model() {
    let home = tempfile::tempdir().unwrap();
    let (app, faux) = app_at(home.path()).await;
    let session = app
        .session(&app.default_session("main").await.unwrap().id)
        .await
        .unwrap();
    let screen = Arc::new(RecordingAdapter::new());
    let _attached = session.attach(screen.clone());
    let none = session.prompt("/focus", Caller::Local).await.unwrap();
    assert!(
        none.final_message.content.contains("usage"),
        "{}",
        none.final_message.content
    );
    let started = session.prompt("/focus 이사 준비", Caller::Local).await.unwrap();
    assert!(
        started.final_message.content.contains("f-1 이사 준비"),
        "{}",
        started.final_message.content
    );
    assert!(faux.requests().is_empty());
    assert_eq!(states(&screen).len(), 1);
    let shown = session.prompt("/focus", Caller::Local).await.unwrap();
    assert!(
        shown.final_message.content.contains("1. [active] 이사 준비"),
        "{}",
        shown.final_message.content
    );
    // Another session has its own task; this one cannot start a second.
    let again = session.prompt("/focus 또 다른 일", Caller::Local).await.unwrap();
    assert!(
        again.final_message.content.contains("f-1") && app.focus().get("f-2").is_none(),
        "{}",
        again.final_message.content
    );
}
