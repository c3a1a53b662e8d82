//! Session kinds and the sessions an app holds: `sched-…` sessions become
//! `job` sessions once, every kind but `user` is read-only for people, MCP
//! sessions are numbered per agent without reusing an id, and
//! an app holds at most its limit of sessions in memory, never unloading one
//! in use.

use jarvis_pack_housing::{HousingPack, KAREN_DEFINITION};
use jarvis_sdk::agent::{Durability, JsonlSessionStore, NewSession, SessionId, SessionKind, SessionStore};
use jarvis_sdk::app::{AppConfig, StoreBackend, build_app};
use jarvis_sdk::model::FauxProvider;
use jarvis_sdk::testing::ChannelAdapter;
use jarvis_sdk::turn::{Caller, TurnError};
use std::sync::Arc;

#[tokio::test]
async fn scheduled_jobs_sessions_become_job_sessions_once_at_start() {
    let home = tempfile::tempdir().unwrap();
    let sched = SessionId::new("sched-karen-weekly").unwrap();
    let user = SessionId::new("sched-main-daily").unwrap();
    {
        let store = JsonlSessionStore::open(home.path()).unwrap();
        store
            .create(NewSession::user(sched.clone(), "karen"))
            .await
            .unwrap();
        store
            .create(NewSession::peer(
                SessionId::new("peer-main-karen").unwrap(),
                "main",
                "karen",
            ))
            .await
            .unwrap();
        store
            .create(NewSession::user(user.clone(), "main"))
            .await
            .unwrap();
    }
    // These files are from before kinds: the home has not been migrated.
    std::fs::remove_file(home.path().join("sessions/.kinds-migrated")).unwrap();
    for _ in 0..2 {
        let store = JsonlSessionStore::open(home.path()).unwrap();
        assert_eq!(store.get(&sched).await.unwrap().unwrap().kind, SessionKind::Job);
        let peer = store
            .get(&SessionId::new("peer-main-karen").unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(peer.kind, SessionKind::Peer, "other kinds are left alone");
        let meta =
            std::fs::read_to_string(home.path().join("sessions/sched-karen-weekly.meta.json")).unwrap();
        assert!(meta.contains("\"kind\": \"job\""), "{meta}");
    }
    // Once: a person's session made afterwards with such an id stays theirs.
    let store = JsonlSessionStore::open(home.path()).unwrap();
    let mine = SessionId::new("sched-my-own").unwrap();
    store
        .create(NewSession::user(mine.clone(), "main"))
        .await
        .unwrap();
    drop(store);
    let store = JsonlSessionStore::open(home.path()).unwrap();
    assert_eq!(store.get(&mine).await.unwrap().unwrap().kind, SessionKind::User);
    assert_eq!(store.get(&user).await.unwrap().unwrap().kind, SessionKind::Job);
}

#[test]
fn kinds_have_stable_names_and_only_user_is_writable() {
    for (kind, name) in [
        (SessionKind::User, "user"),
        (SessionKind::Peer, "peer"),
        (SessionKind::Job, "job"),
        (SessionKind::Mcp, "mcp"),
        (SessionKind::Sub, "sub"),
    ] {
        assert_eq!(kind.as_str(), name);
        assert_eq!(SessionKind::parse(name), Some(kind));
        assert_eq!(serde_json::to_value(kind).unwrap(), name);
        assert_eq!(kind.is_read_only(), kind != SessionKind::User);
    }
    assert_eq!(SessionKind::parse("admin"), None);
}

async fn app(home: &std::path::Path, max_loaded: usize) -> jarvis_sdk::app::AppAssembly {
    let script = r#"
rules:
  - when: { last_user: "천천히" }
    reply: { delay_ms: 3000, text: "느려요." }
fallback: { text: "네." }
"#;
    let faux = Arc::new(FauxProvider::from_yaml(script).unwrap());
    let mut config = AppConfig::embedded(home)
        .with_provider(faux)
        .with_definition("karen", KAREN_DEFINITION);
    config.store = StoreBackend::Jsonl;
    config.durability = Durability::Never;
    config.packs = vec![std::sync::Arc::new(HousingPack::in_memory())];
    config.memory.enabled = false;
    config.agenda.model_judge = false;
    config.max_loaded_sessions = max_loaded;
    build_app(config).await.unwrap()
}

#[tokio::test]
async fn people_cannot_prompt_in_a_job_session() {
    let home = tempfile::tempdir().unwrap();
    let app = app(home.path(), 10).await;
    let id = SessionId::new("sched-main-daily").unwrap();
    app.store()
        .create(NewSession::job(id.clone(), "main"))
        .await
        .unwrap();
    let session = app.session(&id).await.unwrap();
    assert!(session.kind().is_read_only());
    let refused = session.prompt("내가 써 볼게", Caller::Local).await.unwrap_err();
    assert!(matches!(refused, TurnError::Rejected(_)), "{refused}");
    assert!(refused.to_string().contains("job session"), "{refused}");
    let system = Caller::System {
        name: "scheduler:daily".into(),
    };
    session.prompt("오늘 일정 정리", system).await.unwrap();
}

#[tokio::test]
async fn mcp_sessions_are_numbered_per_agent_never_reuse_an_id_and_take_only_mcp_callers() {
    let home = tempfile::tempdir().unwrap();
    let ids = |metas: &[jarvis_sdk::agent::SessionMeta]| -> Vec<String> {
        metas.iter().map(|m| m.id.to_string()).collect()
    };
    {
        let app = app(home.path(), 10).await;
        let mut made = Vec::new();
        for agent in ["karen", "main", "karen"] {
            made.push(app.create_mcp_session(agent, Some("MCP · desk")).await.unwrap());
        }
        assert_eq!(ids(&made), ["mcp-karen-1", "mcp-main-1", "mcp-karen-2"]);
        assert!(made.iter().all(|m| m.kind == SessionKind::Mcp));
        assert_eq!(made[0].title.as_deref(), Some("MCP · desk"));
        assert!(app.create_mcp_session("nobody", None).await.is_err());

        // People may read it, not write in it; an MCP client may.
        let session = app.session(&made[0].id).await.unwrap();
        let refused = session.prompt("나도", Caller::Local).await.unwrap_err();
        assert!(refused.to_string().contains("mcp session"), "{refused}");
        let client = Caller::Mcp {
            client: "desk".into(),
        };
        let answer = session.prompt("안녕", client).await.unwrap();
        assert_eq!(answer.final_message.content, "네.");
        // An id taken by another session is passed over.
        app.store()
            .create(NewSession::user(SessionId::new("mcp-karen-3").unwrap(), "karen"))
            .await
            .unwrap();
        let next = app.create_mcp_session("karen", None).await.unwrap();
        assert_eq!(next.id.as_str(), "mcp-karen-4");
    }
    // After a restart the numbers go on from what the store holds.
    let app = app(home.path(), 10).await;
    let next = app.create_mcp_session("karen", None).await.unwrap();
    assert_eq!(next.id.as_str(), "mcp-karen-5");
    let next = app.create_mcp_session("main", None).await.unwrap();
    assert_eq!(next.id.as_str(), "mcp-main-2");
}

#[tokio::test]
async fn an_app_holds_at_most_its_limit_of_sessions_and_never_unloads_one_in_use() {
    let home = tempfile::tempdir().unwrap();
    let app = app(home.path(), 2).await;
    let mut ids = Vec::new();
    for n in 0..5 {
        let meta = app.create_session(None).await.unwrap();
        ids.push(meta.id);
        let _ = n;
    }
    // A screen stays attached to the first; the second runs a turn.
    let first = app.session(&ids[0]).await.unwrap();
    let (screen, _events) = ChannelAdapter::new();
    let _attached = first.attach(screen);
    drop(first);
    let second = app.session(&ids[1]).await.unwrap();
    let turn = tokio::spawn({
        let second = second.clone();
        async move { second.prompt("천천히", Caller::Local).await }
    });
    while !second.is_busy() {
        tokio::task::yield_now().await;
    }
    drop(second);
    for id in &ids[2..] {
        let session = app.session(id).await.unwrap();
        session.prompt("안녕", Caller::Local).await.unwrap();
        session.settled().await;
    }
    let open: Vec<String> = app.open_sessions().iter().map(|s| s.id().to_string()).collect();
    assert!(
        open.contains(&ids[0].to_string()),
        "a session with a screen stays: {open:?}"
    );
    assert!(
        open.contains(&ids[1].to_string()),
        "a session with a turn stays: {open:?}"
    );
    assert!(open.len() <= 3, "two in use plus the one just opened: {open:?}");
    assert!(
        app.store().loaded().unwrap() <= open.len(),
        "the store gave back what the app unloaded"
    );
    turn.await.unwrap().unwrap();

    // An unloaded session comes back with its history.
    let gone = &ids[2];
    let again = app.session(gone).await.unwrap();
    let entries = app.store().entries(gone).await.unwrap();
    assert_eq!(entries.len(), 4, "turn_start, prompt, answer, turn_end");
    again.prompt("또 안녕", Caller::Local).await.unwrap();
    assert_eq!(app.store().entries(gone).await.unwrap().len(), 8);
    assert!(app.open_sessions().len() <= 3);
    // Listing every session loads none of them.
    let listed = app.list_sessions().await.unwrap();
    assert_eq!(listed.len(), 5);
    assert!(app.store().loaded().unwrap() <= 3);
}
