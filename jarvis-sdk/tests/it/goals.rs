//! Goals end to end on FauxProvider: the three tools and the slash
//! commands, the `[목표]` section in the next request (memory off and on),
//! the AGENDA, and the reminder of a due goal, once across a restart.

use jarvis_pack_housing::{HousingPack, KAREN_DEFINITION};
use jarvis_sdk::agent::{Durability, EntryBody, SessionId};
use jarvis_sdk::app::{AppAssembly, AppConfig, StoreBackend, build_app};
use jarvis_sdk::common::ManualClock;
use jarvis_sdk::initiative::AgendaKind;
use jarvis_sdk::model::{ChatRequest, FauxProvider, Message};
use jarvis_sdk::turn::Caller;
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

const SCRIPT: &str = r#"
rules:
  - when: { agent: main, last_role: user, last_user: "목표를 세워" }
    reply: { tool_calls: [ { name: set_goal, arguments: { title: "청약 서류 준비", why: "12월 공고", due: "2026-12-24" } } ] }
  - when: { agent: main, last_role: user, last_user: "진행" }
    reply: { tool_calls: [ { name: update_goal, arguments: { id: "g-1", progress: 40, note: "등본 발급" } } ] }
  - when: { agent: main, last_role: user, last_user: "포기" }
    reply: { tool_calls: [ { name: close_goal, arguments: { id: "g-1", status: "dropped", note: "공고 취소" } } ] }
  - when: { agent: main, last_role: user, last_user: "없는" }
    reply: { tool_calls: [ { name: update_goal, arguments: { id: "g-9", progress: 10 } } ] }
fallback: { text: "네." }
"#;

/// 2026-12-01T00:00:00Z.
fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_083_200),
    ))
}

async fn app_at(home: &Path, memory: bool, clock: Arc<ManualClock>) -> (AppAssembly, Arc<FauxProvider>) {
    let faux = Arc::new(FauxProvider::from_yaml(SCRIPT).unwrap());
    let mut config = AppConfig::embedded(home)
        .with_definition("karen", KAREN_DEFINITION)
        .with_provider(faux.clone());
    config.store = StoreBackend::Jsonl;
    config.durability = Durability::Never;
    config.packs = vec![std::sync::Arc::new(HousingPack::in_memory())];
    config.memory.enabled = memory;
    config.clock = clock;
    (build_app(config).await.unwrap(), faux)
}

fn goal_file(home: &Path, agent: &str, id: &str) -> Value {
    let path = home.join("goals").join(agent).join(format!("{id}.json"));
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

/// The first message sent, when it is the injected one.
fn brief(request: &ChatRequest) -> String {
    match request.messages.first() {
        Some(Message::User(u)) if u.content.starts_with('[') => u.content.clone(),
        other => panic!("no injected message first: {other:?}"),
    }
}

#[tokio::test]
async fn tools_and_commands_set_change_and_close_goals_and_the_next_request_carries_them() {
    let home = tempfile::tempdir().unwrap();
    let (app, faux) = app_at(home.path(), false, clock()).await;
    let session = app
        .session(&app.default_session("main").await.unwrap().id)
        .await
        .unwrap();

    session.prompt("목표를 세워 줘", Caller::Local).await.unwrap();
    let file = goal_file(home.path(), "main", "g-1");
    assert_eq!(file["id"], "g-1");
    assert_eq!(file["agent_id"], "main");
    assert_eq!(file["title"], "청약 서류 준비");
    assert_eq!(file["why"], "12월 공고");
    assert_eq!(file["status"], "active");
    assert_eq!(file["progress"], 0);
    assert_eq!(file["due"], "2026-12-24");
    assert_eq!(file["created_at"], "2026-12-01T00:00:00.000Z");
    assert_eq!(file["notes"], serde_json::json!([]));
    let answered = faux.requests().last().unwrap().clone();
    let result = match answered.messages.last() {
        Some(Message::Tool(t)) => t.content.clone(),
        other => panic!("{other:?}"),
    };
    assert!(result.starts_with("g-1 "), "{result}");

    // A command is answered without the model.
    let before = faux.requests().len();
    let added = session
        .prompt("/goal add 책 한 권 읽기", Caller::Local)
        .await
        .unwrap();
    assert!(
        added.final_message.content.contains("g-2 책 한 권 읽기"),
        "{}",
        added.final_message.content
    );
    assert_eq!(faux.requests().len(), before);

    session
        .prompt("진행 상황 반영해 줘", Caller::Local)
        .await
        .unwrap();
    let file = goal_file(home.path(), "main", "g-1");
    assert_eq!(file["progress"], 40);
    assert_eq!(file["notes"][0]["text"], "등본 발급");

    // The next request opens with both active goals, nearest due first.
    session.prompt("안녕", Caller::Local).await.unwrap();
    let last = faux.requests().last().unwrap().clone();
    assert_eq!(
        brief(&last),
        "[목표]\n- g-1 청약 서류 준비 (40%, 마감 2026-12-24) — 12월 공고\n- g-2 책 한 권 읽기 (0%)"
    );
    // Memory is off: the whole history follows the section, first turn included.
    assert!(
        matches!(&last.messages[1], Message::User(u) if u.content == "목표를 세워 줘"),
        "{:?}",
        last.messages[1]
    );

    let done = session.prompt("/goal done g-2", Caller::Local).await.unwrap();
    assert!(
        done.final_message.content.contains("[done]"),
        "{}",
        done.final_message.content
    );
    assert_eq!(goal_file(home.path(), "main", "g-2")["status"], "done");
    let listed = session.prompt("/goals", Caller::Local).await.unwrap();
    assert!(
        listed.final_message.content.contains("g-1") && !listed.final_message.content.contains("g-2"),
        "{}",
        listed.final_message.content
    );

    // An unknown goal is an error the model reads; nothing changes.
    session.prompt("없는 목표 고쳐", Caller::Local).await.unwrap();
    let last = faux.requests().last().unwrap().clone();
    assert!(
        matches!(last.messages.last(), Some(Message::Tool(t)) if t.is_error && t.content.contains("g-9")),
        "{:?}",
        last.messages.last()
    );

    session.prompt("포기할게", Caller::Local).await.unwrap();
    let file = goal_file(home.path(), "main", "g-1");
    assert_eq!(file["status"], "dropped");
    assert_eq!(file["notes"][1]["text"], "공고 취소");
    // No active goal: no section at all.
    session.prompt("그럼 다음", Caller::Local).await.unwrap();
    let last = faux.requests().last().unwrap().clone();
    assert!(
        !matches!(last.messages.first(), Some(Message::User(u)) if u.content.contains("[목표]")),
        "{:?}",
        last.messages.first()
    );
    // Goals are per agent: KAREN has none of JARVIS's.
    assert!(app.goals().list("karen").await.unwrap().is_empty());
}

#[tokio::test]
async fn with_memory_on_the_goals_open_the_memory_message() {
    let home = tempfile::tempdir().unwrap();
    let (app, faux) = app_at(home.path(), true, clock()).await;
    let session = app
        .session(&app.default_session("main").await.unwrap().id)
        .await
        .unwrap();
    session
        .prompt("/goal add 매일 운동", Caller::Local)
        .await
        .unwrap();
    session
        .prompt("/remember 나는 서울에 산다", Caller::Local)
        .await
        .unwrap();
    session
        .prompt("나는 서울에 산다, 맞지?", Caller::Local)
        .await
        .unwrap();
    let message = brief(faux.requests().last().unwrap());
    assert!(
        message.starts_with("[목표]\n- g-1 매일 운동 (0%)\n\n["),
        "{message}"
    );
    assert!(message.contains("[핵심 사실]"), "{message}");
    // One injected message, not two.
    let injected = faux
        .requests()
        .last()
        .unwrap()
        .messages
        .iter()
        .filter(|m| matches!(m, Message::User(u) if u.content.contains("[목표]")))
        .count();
    assert_eq!(injected, 1);
}

#[tokio::test]
async fn the_agenda_lists_active_goals_with_the_agents_label() {
    let home = tempfile::tempdir().unwrap();
    let (app, _) = app_at(home.path(), false, clock()).await;
    let karen = app
        .session(&app.default_session("karen").await.unwrap().id)
        .await
        .unwrap();
    karen
        .prompt("/goal add 특별공급 자격 확인", Caller::Local)
        .await
        .unwrap();
    karen.prompt("/goal add 끝난 일", Caller::Local).await.unwrap();
    karen.prompt("/goal drop g-2", Caller::Local).await.unwrap();
    let goals: Vec<_> = app
        .agenda()
        .await
        .into_iter()
        .filter(|i| i.kind == AgendaKind::Goal)
        .collect();
    assert_eq!(goals.len(), 1, "{goals:?}");
    let karen_profile = app.registry().get("karen").unwrap();
    assert_eq!(goals[0].id, "g-1");
    assert_eq!(goals[0].agent_id, "karen");
    assert_eq!(goals[0].agent_name, karen_profile.name);
    assert_eq!(goals[0].color, karen_profile.palette.primary);
    assert_eq!(goals[0].text, "특별공급 자격 확인");
    let json = serde_json::to_value(&goals[0]).unwrap();
    assert_eq!(json["kind"], "goal");
}

fn reminders(entries: &[jarvis_sdk::agent::SessionEntry]) -> Vec<String> {
    entries
        .iter()
        .filter_map(|e| match &e.body {
            EntryBody::Proactive { message_id, .. } if message_id.starts_with("goal-") => {
                Some(message_id.clone())
            }
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_due_goal_is_reminded_once_across_a_restart_and_a_lost_mark() {
    let home = tempfile::tempdir().unwrap();
    let clock = clock();
    let id = SessionId::new("default-karen").unwrap();
    {
        let (app, _) = app_at(home.path(), false, clock.clone()).await;
        // Due on 12-02 (Seoul): more than 24 h away at 12-01 00:00 UTC.
        app.goals()
            .create("karen", "서류 제출", "", Some("2026-12-02"))
            .await
            .unwrap();
        app.goals()
            .create("karen", "먼 일", "", Some("2027-03-01"))
            .await
            .unwrap();
        app.proactive().tick().await;
        assert!(reminders(&app.store().entries(&id).await.unwrap_or_default()).is_empty());
        // 12-02 00:00 KST + a little: the end of 12-02 KST is within 24 h.
        clock.advance(Duration::from_secs(16 * 3600));
        app.proactive().tick().await;
        app.proactive().tick().await;
        let found = reminders(&app.store().entries(&id).await.unwrap());
        assert_eq!(found, ["goal-karen-g-1-20261202"]);
        assert_eq!(
            goal_file(home.path(), "karen", "g-1")["reminded_due"],
            "2026-12-02"
        );
    }
    // A crash between the record and the mark: the mark is lost.
    let path = home.path().join("goals/karen/g-1.json");
    let mut file = goal_file(home.path(), "karen", "g-1");
    file.as_object_mut().unwrap().remove("reminded_due");
    std::fs::write(&path, serde_json::to_vec(&file).unwrap()).unwrap();
    let (app, _) = app_at(home.path(), false, clock.clone()).await;
    clock.advance(Duration::from_secs(3600));
    app.proactive().tick().await;
    app.proactive().tick().await;
    assert_eq!(
        reminders(&app.store().entries(&id).await.unwrap()),
        ["goal-karen-g-1-20261202"],
        "reminded once across the restart"
    );
    assert_eq!(
        goal_file(home.path(), "karen", "g-1")["reminded_due"],
        "2026-12-02"
    );
    // A new due date is reminded again, once.
    let moved = jarvis_sdk::initiative::GoalPatch {
        due: Some("2026-12-03".into()),
        ..Default::default()
    };
    app.goals().update("karen", "g-1", moved).await.unwrap();
    clock.advance(Duration::from_secs(24 * 3600));
    app.proactive().tick().await;
    assert_eq!(reminders(&app.store().entries(&id).await.unwrap()).len(), 2);
}
