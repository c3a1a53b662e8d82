//! The AGENDA and slash commands in the assembled app: a promise opens a
//! loop with its session's agent and announces `agenda_changed`; a
//! cancellation closes it only in that session; slash commands answer
//! without the model and leave no trace in the session.

use jarvis_pack_housing::HousingPack;
use jarvis_sdk::agent::{AgendaChanged, AgentEvent};
use jarvis_sdk::app::{AppAssembly, AppConfig, build_app};
use jarvis_sdk::initiative::AgendaKind;
use jarvis_sdk::model::FauxProvider;
use jarvis_sdk::testing::ChannelAdapter;
use jarvis_sdk::turn::Caller;
use std::sync::Arc;

struct Home(std::path::PathBuf);

impl Drop for Home {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const SCRIPT: &str = r#"
rules:
  - when: { purpose: judgement }
    reply: { text: "not json at all" }
fallback: { text: "네, 그렇게 할게요." }
"#;

async fn app() -> (Home, AppAssembly, Arc<FauxProvider>) {
    let home = Home(tempfile::tempdir().unwrap().keep());
    let faux = Arc::new(FauxProvider::from_yaml(SCRIPT).unwrap());
    let mut config = AppConfig::for_home(&home.0).with_provider(faux.clone());
    config.packs = vec![std::sync::Arc::new(HousingPack::in_memory())];
    let app = build_app(config).await.unwrap();
    (home, app, faux)
}

/// The AGENDA's promises (KAREN's built-in `housing_watch` schedule is
/// always there too).
async fn promises(app: &AppAssembly) -> Vec<jarvis_sdk::initiative::AgendaItem> {
    let agenda = app.agenda().await;
    assert!(
        agenda
            .iter()
            .any(|i| i.kind == AgendaKind::Schedule && i.id == "housing_watch" && i.agent_id == "karen"),
        "{agenda:?}"
    );
    agenda
        .into_iter()
        .filter(|i| i.kind == AgendaKind::Promise)
        .collect()
}

fn is_agenda_changed(e: &AgentEvent) -> bool {
    e.as_notice::<AgendaChanged>().is_some()
}

#[tokio::test]
async fn a_promise_in_a_karen_session_lands_on_the_agenda_with_her_label() {
    let (_home, app, _) = app().await;
    let karen = app.create_session(Some("karen")).await.unwrap();
    let session = app.session(&karen.id).await.unwrap();
    let (screen, mut events) = ChannelAdapter::new();
    let _a = session.attach(screen);
    session
        .prompt("강서구 행복주택 공고 올라오면 바로 말해 줘", Caller::Local)
        .await
        .unwrap();
    let changed = events.next_matching(is_agenda_changed).await;
    let AgendaChanged { session_id } = changed.as_notice().unwrap();
    assert_eq!(session_id, karen.id.as_str());
    let agenda = promises(&app).await;
    assert_eq!(agenda.len(), 1, "{agenda:?}");
    let item = &agenda[0];
    assert_eq!(item.kind, AgendaKind::Promise);
    assert_eq!(item.agent_id, "karen");
    assert_eq!(item.agent_name, app.registry().get("karen").unwrap().name);
    assert_eq!(item.color, app.registry().get("karen").unwrap().palette.primary);
    assert_eq!(item.session_id.as_deref(), Some(karen.id.as_str()));

    // The same cancellation typed to JARVIS changes nothing ...
    let jarvis = app.default_session("main").await.unwrap();
    let main = app.session(&jarvis.id).await.unwrap();
    main.prompt("그 알림 취소해", Caller::Local).await.unwrap();
    main.settled().await;
    assert_eq!(promises(&app).await.len(), 1);
    // ... typed to KAREN's session it closes the promise.
    session.prompt("그 알림 취소해", Caller::Local).await.unwrap();
    events.next_matching(is_agenda_changed).await;
    assert!(promises(&app).await.is_empty());
}

#[tokio::test]
async fn slash_commands_answer_without_the_model_and_are_not_recorded() {
    let (_home, app, faux) = app().await;
    let jarvis = app.default_session("main").await.unwrap();
    let session = app.session(&jarvis.id).await.unwrap();
    let (screen, mut events) = ChannelAdapter::new();
    let _a = session.attach(screen);

    let help = session.prompt("/help", Caller::Local).await.unwrap();
    for name in ["/remember", "/schedule", "/agenda", "/help"] {
        assert!(
            help.final_message.content.contains(name),
            "{}",
            help.final_message.content
        );
    }
    let kinds: Vec<String> = events.drain().iter().map(|e| e.kind().to_owned()).collect();
    assert_eq!(kinds, ["agent_start", "message_update", "agent_end"]);

    let unknown = session.prompt("/dance", Caller::Local).await.unwrap();
    assert!(unknown.final_message.content.contains("/remember"));

    let remembered = session
        .prompt("/remember 나는 강서구에 산다", Caller::Local)
        .await
        .unwrap();
    assert!(
        remembered.final_message.content.contains("강서구"),
        "{}",
        remembered.final_message.content
    );
    assert!(faux.requests().is_empty(), "no command reached the model");

    // The fact is in the profile every agent reads: KAREN's next turn sees it.
    let karen = app.create_session(Some("karen")).await.unwrap();
    app.session(&karen.id)
        .await
        .unwrap()
        .prompt("강서구 공고 있어?", Caller::Local)
        .await
        .unwrap();
    let requests = faux.requests();
    let first = requests.iter().find(|r| r.metadata.agent_id == "karen").unwrap();
    let seen = serde_json::to_string(&first.messages).unwrap();
    assert!(
        seen.contains("[핵심 사실]") && seen.contains("나는 강서구에 산다"),
        "{seen}"
    );

    // Nothing of the commands is in JARVIS's session.
    let (_, entries) = app.session_entries(&jarvis.id).await.unwrap();
    assert!(entries.is_empty(), "{entries:?}");

    // A path is not a command: it goes to the model.
    let before = faux.requests().len();
    session.prompt("/tmp/a.txt 읽어 줘", Caller::Local).await.unwrap();
    assert!(faux.requests().len() > before);
}

#[tokio::test]
async fn agenda_lists_promises_for_the_person() {
    let (_home, app, _) = app().await;
    let jarvis = app.default_session("main").await.unwrap();
    let session = app.session(&jarvis.id).await.unwrap();
    let (screen, mut events) = ChannelAdapter::new();
    let _a = session.attach(screen);
    session
        .prompt("내일 오전 9시에 은행 가라고 알려 줘", Caller::Local)
        .await
        .unwrap();
    events.next_matching(is_agenda_changed).await;
    let listed = session.prompt("/agenda", Caller::Local).await.unwrap();
    let text = listed.final_message.content;
    assert!(text.contains("은행") && text.contains("09:00"), "{text}");
    assert!(text.contains(&app.registry().main().name), "{text}");
}
