//! What the nodes of a deployment share besides sessions and memory, on a
//! real Postgres: goals, the user model and the proactive outbox. Two apps,
//! each with its own home, on one database: what one sets, the other reads;
//! numbering and concurrent changes hold across both; a message queued on
//! either is recorded once, by the node owning its session; nothing lands
//! in either home.

use jarvis_sdk::agent::{EntryBody, ProactiveKind};
use jarvis_sdk::app::{AppAssembly, AppConfig, StoreBackend, build_app};
use jarvis_sdk::common::{Clock, ManualClock, TimeZone, Timestamp};
use jarvis_sdk::initiative::{GoalPatch, GoalStatus, GoalStore, OUTBOX_FILE, Outbox, OutboxItem};
use jarvis_sdk::memory::{DEFAULT_USER, MemoryError, MemoryScope, PostgresUserModel, UserModelStore};
use jarvis_sdk::model::FauxProvider;
use jarvis_sdk::turn::Caller;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::pg::fresh_schema;

const SCRIPT: &str = r#"
rules:
  - when: { agent: main, last_role: user, last_user: "목표를 세워" }
    reply: { tool_calls: [ { name: set_goal, arguments: { title: "청약 서류 준비", due: "2026-12-24" } } ] }
  - when: { agent: main, last_role: user, last_user: "진행" }
    reply: { tool_calls: [ { name: update_goal, arguments: { id: "g-1", progress: 40, note: "등본 발급" } } ] }
fallback: { text: "네." }
"#;

fn clock() -> Arc<ManualClock> {
    // 2026-12-01T00:00:00Z.
    Arc::new(ManualClock::new(
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_083_200),
    ))
}

async fn node(home: &Path, url: &str, name: &str, faux: Arc<FauxProvider>) -> AppAssembly {
    node_at(home, url, name, faux, clock()).await
}

async fn node_at(
    home: &Path,
    url: &str,
    name: &str,
    faux: Arc<FauxProvider>,
    clock: Arc<ManualClock>,
) -> AppAssembly {
    let mut config = AppConfig::embedded(home).with_provider(faux);
    config.store = StoreBackend::Postgres { url: url.to_owned() };
    config.memory.backend = jarvis_sdk::app::MemoryBackend::Auto;
    config.node.id = Some(name.to_owned());
    config.clock = clock;
    build_app(config).await.unwrap()
}

fn scope() -> MemoryScope {
    MemoryScope::new(DEFAULT_USER, "main", "s1")
}

#[tokio::test]
async fn goals_and_the_user_model_set_on_one_node_hold_on_every_node() {
    let Some((url, _)) = fresh_schema("shared goals and user model").await else {
        return;
    };
    let (home_a, home_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let faux = Arc::new(FauxProvider::from_yaml(SCRIPT).unwrap());
    let a = node(home_a.path(), &url, "a", faux.clone()).await;
    let b = node(home_b.path(), &url, "b", faux.clone()).await;

    // A goal set by a turn on A is B's goal too: B's next request opens
    // with it, B's AGENDA lists it, and B's tool changes it.
    let on_a = a
        .session(&a.default_session("main").await.unwrap().id)
        .await
        .unwrap();
    on_a.prompt("목표를 세워 줘", Caller::Local).await.unwrap();
    let goals = b.goals().active("main").await.unwrap();
    assert_eq!(goals.len(), 1, "{goals:?}");
    assert_eq!(
        (goals[0].id.as_str(), goals[0].title.as_str()),
        ("g-1", "청약 서류 준비")
    );
    assert!(
        b.agenda().await.iter().any(|item| item.text == "청약 서류 준비"),
        "B's AGENDA lists A's goal"
    );
    // (The default session is A's; B opens one of its own.)
    let on_b = b
        .session(&b.create_session(Some("main")).await.unwrap().id)
        .await
        .unwrap();
    on_b.prompt("진행 상황 적어 줘", Caller::Local).await.unwrap();
    let request = faux.requests().last().cloned().unwrap();
    let brief = serde_json::to_string(&request.messages).unwrap();
    assert!(
        brief.contains("청약 서류 준비"),
        "B's request carries the goal: {brief}"
    );
    let changed = a.goals().get("main", "g-1").await.unwrap();
    assert_eq!((changed.progress, changed.notes.len()), (40, 1));
    // Numbering is shared: B's next goal is g-2.
    let second = b.goals().create("main", "책 읽기", "", None).await.unwrap();
    assert_eq!(second.id, "g-2");
    assert_eq!(a.goals().list("main").await.unwrap().len(), 2);

    // The user model: an entry set on A is read on B; what B forgets, A
    // refuses to learn again.
    let memory_a = a.memory().unwrap();
    let memory_b = b.memory().unwrap();
    let entries = BTreeMap::from([("friend".to_owned(), "민지 (Minji)".to_owned())]);
    memory_a
        .update_user_model(&scope(), entries.clone())
        .await
        .unwrap();
    assert_eq!(memory_b.user_model().await.entries, entries);
    let forgot = memory_b.forget(&scope(), "민지").await.unwrap();
    assert_eq!(forgot.entries, 1);
    assert!(memory_a.user_model().await.entries.is_empty());
    assert_eq!(memory_a.forgotten().await.len(), 1);
    let again = BTreeMap::from([("best friend".to_owned(), "민지".to_owned())]);
    let refused = memory_a.update_user_model(&scope(), again).await.unwrap_err();
    assert!(matches!(refused, MemoryError::Forgotten { .. }), "{refused}");

    // Nothing of it is kept in either home.
    for home in [home_a.path(), home_b.path()] {
        assert!(!home.join("goals").exists(), "{}", home.display());
        assert!(!home.join("user_model.json").exists(), "{}", home.display());
    }
}

#[tokio::test]
async fn goals_numbered_and_changed_on_two_nodes_at_once_lose_nothing() {
    let Some((url, _)) = fresh_schema("concurrent goals").await else {
        return;
    };
    let zone = TimeZone::from_offset_minutes(9 * 60);
    let a = Arc::new(GoalStore::postgres(&url, clock(), zone.clone()).await.unwrap());
    let b = Arc::new(GoalStore::postgres(&url, clock(), zone).await.unwrap());
    // Twenty goals from each store at once: forty numbers, none twice.
    let mut tasks = Vec::new();
    for (store, name) in [(a.clone(), "a"), (b.clone(), "b")] {
        for i in 0..20 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                store
                    .create("main", &format!("{name}{i}"), "", None)
                    .await
                    .unwrap()
                    .id
            }));
        }
    }
    let mut ids = Vec::new();
    for task in tasks {
        ids.push(task.await.unwrap());
    }
    ids.sort_by_key(|id| id[2..].parse::<u32>().unwrap());
    let expected: Vec<String> = (1..=40).map(|n| format!("g-{n}")).collect();
    assert_eq!(ids, expected);
    let listed: Vec<String> = b
        .list("main")
        .await
        .unwrap()
        .into_iter()
        .map(|g| g.title)
        .collect();
    assert_eq!(listed.len(), 40);

    // Notes added to one goal from both stores at once all land.
    let mut tasks = Vec::new();
    for (store, name) in [(a.clone(), "a"), (b.clone(), "b")] {
        for i in 0..10 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let patch = GoalPatch {
                    note: Some(format!("{name}{i}")),
                    ..GoalPatch::default()
                };
                store.update("main", "g-1", patch).await.unwrap();
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(a.get("main", "g-1").await.unwrap().notes.len(), 20);
    // Closing holds on the other store, and closing again changes nothing.
    let closed = a.close("main", "g-2", GoalStatus::Done, None).await.unwrap();
    assert_eq!(
        b.close("main", "g-2", GoalStatus::Done, None).await.unwrap(),
        closed
    );
    assert_eq!(b.active("main").await.unwrap().len(), 39);
    assert!(b.get("main", "g-41").await.is_err());
    assert!(b.create("../x", "a", "", None).await.is_err());
}

#[tokio::test]
async fn user_model_updates_from_two_nodes_at_once_both_land() {
    let Some((url, schema)) = fresh_schema("concurrent user model").await else {
        return;
    };
    let a = Arc::new(UserModelStore::Postgres(
        PostgresUserModel::connect(&url).await.unwrap(),
    ));
    let b = Arc::new(UserModelStore::Postgres(
        PostgresUserModel::connect(&url).await.unwrap(),
    ));
    assert!(a.load().await.entries.is_empty(), "no row yet reads as empty");
    let now = jarvis_sdk::common::Timestamp::from_millis(1_796_083_200_000);
    let mut tasks = Vec::new();
    for (store, name) in [(a.clone(), "a"), (b.clone(), "b")] {
        for i in 0..20 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                store
                    .update(now, |m| {
                        m.entries.insert(format!("{name}{i}"), "v".into());
                    })
                    .await
                    .unwrap();
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(b.load().await.entries.len(), 40);

    // A refused change leaves the row as it was.
    let refused = a
        .try_update(now, |m| {
            m.entries.clear();
            Err::<(), _>(MemoryError::Store("no".into()))
        })
        .await;
    assert!(refused.is_err());
    assert_eq!(b.load().await.entries.len(), 40);

    // A damaged row reads as empty and is never overwritten.
    let admin = crate::pg::admin(jarvis_sdk::testing::TempPostgres::shared().unwrap()).await;
    admin
        .batch_execute(&format!(
            "UPDATE {schema}.jarvis_user_model SET body = '[1, 2]'::jsonb"
        ))
        .await
        .unwrap();
    assert!(a.load().await.entries.is_empty());
    let err = a.update(now, |_| {}).await.unwrap_err();
    assert!(matches!(err, MemoryError::DamagedUserModel { .. }), "{err}");
    let body: String = admin
        .query_one(&format!("SELECT body::TEXT FROM {schema}.jarvis_user_model"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(body, "[1, 2]");
}

#[tokio::test]
async fn a_message_queued_on_any_node_is_recorded_once_by_the_node_owning_its_session() {
    let Some((url, _)) = fresh_schema("shared outbox").await else {
        return;
    };
    let (home_a, home_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let faux = Arc::new(FauxProvider::from_yaml(SCRIPT).unwrap());
    let clock_a = clock();
    let a = node_at(home_a.path(), &url, "a", faux.clone(), clock_a.clone()).await;
    let b = node(home_b.path(), &url, "b", faux).await;
    // A owns main's default session: a turn ran there.
    let id = a.default_session("main").await.unwrap().id;
    a.session(&id)
        .await
        .unwrap()
        .prompt("안녕", Caller::Local)
        .await
        .unwrap();
    let item = |n: u32| OutboxItem {
        message_id: format!("watch-{n}"),
        session_id: id.to_string(),
        agent_id: "main".into(),
        kind: ProactiveKind::Proactive,
        text: format!("새 공고 {n}건"),
        at: Timestamp::from_system_time(clock_a.now()),
        meta: serde_json::Value::Null,
    };

    assert!(b.proactive().enqueue(item(1)).await.unwrap());
    assert!(
        !a.proactive().enqueue(item(1)).await.unwrap(),
        "an id waits once across the nodes"
    );
    // B does not own the session: the message waits for its owner.
    let report = b.proactive().tick().await;
    assert!(report.recorded.is_empty(), "{report:?}");
    assert_eq!(a.proactive().queued("main").await, 1);
    let report = a.proactive().tick().await;
    assert_eq!(report.recorded, vec![(id.to_string(), "watch-1".to_owned())]);
    assert!(b.proactive().tick().await.recorded.is_empty());
    assert_eq!(b.proactive().queued("main").await, 0);

    // A message outlives the node that queued it: B ends, A records it.
    assert!(b.proactive().enqueue(item(2)).await.unwrap());
    drop(b);
    clock_a.advance(Duration::from_secs(24 * 3600));
    let report = a.proactive().tick().await;
    assert_eq!(report.recorded, vec![(id.to_string(), "watch-2".to_owned())]);
    let (_, entries) = a.session_entries(&id).await.unwrap();
    let recorded: Vec<&str> = entries.iter().filter_map(|e| e.body.proactive_id()).collect();
    assert_eq!(recorded, ["watch-1", "watch-2"], "each once");
    assert!(
        entries
            .iter()
            .any(|e| matches!(&e.body, EntryBody::Proactive { text, .. } if text == "새 공고 2건"))
    );
    for home in [home_a.path(), home_b.path()] {
        let file = std::fs::read(home.join(OUTBOX_FILE)).unwrap_or_default();
        assert!(file.is_empty(), "{} keeps no outbox", home.display());
    }
}

#[tokio::test]
async fn the_shared_outbox_bounds_the_deployment_and_keeps_what_was_queued() {
    let Some((url, _)) = fresh_schema("shared outbox capacity").await else {
        return;
    };
    let (one, two) = (
        Arc::new(Outbox::postgres(&url, 2).await.unwrap()),
        Arc::new(Outbox::postgres(&url, 2).await.unwrap()),
    );
    let item = |id: &str| OutboxItem {
        message_id: id.to_owned(),
        session_id: "default-main".into(),
        agent_id: "main".into(),
        kind: ProactiveKind::Proactive,
        text: format!("message {id}"),
        at: Timestamp::from_millis(1_796_083_200_000),
        meta: serde_json::json!({ "watch": "w1" }),
    };
    assert!(one.put(item("a")).await.unwrap());
    assert!(two.put(item("b")).await.unwrap());
    // Two wait in the deployment: a third producer, on either node, waits.
    let waiting = tokio::spawn({
        let two = two.clone();
        async move { two.put(item("c")).await.unwrap() }
    });
    let ids = |items: Vec<OutboxItem>| items.into_iter().map(|i| i.message_id).collect::<Vec<_>>();
    assert_eq!(ids(one.pending().await), ["a", "b"]);
    assert!(!waiting.is_finished());
    // Delivered on the other node: the producer gets its room.
    one.done("a").await;
    assert!(waiting.await.unwrap());
    assert_eq!(ids(two.pending().await), ["b", "c"]);
    assert_eq!(two.len(), 2);
    // What was queued stays readable, as read back (meta included), until
    // compacted; a delivered id queued again waits again.
    let logged = one.logged().await;
    assert_eq!(ids(logged.clone()), ["a", "b", "c"]);
    assert_eq!(logged[0], item("a"));
    one.compact().await;
    assert_eq!(ids(two.logged().await), ["b", "c"]);
    two.done("b").await;
    assert!(one.put(item("b")).await.unwrap(), "delivered, then queued again");
    assert!(!two.put(item("b")).await.unwrap(), "waiting already");
}
