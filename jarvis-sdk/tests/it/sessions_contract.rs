//! The contract every `SessionStore` keeps: one set of cases, run unchanged
//! against the in-memory store, the JSONL store and a real Postgres server.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use jarvis_sdk::agent::{
    EntryBody, JsonlOptions, JsonlSessionStore, MemorySessionStore, NewSession, PostgresSessionStore,
    SessionEntry, SessionError, SessionId, SessionKind, SessionStore, StopReason,
};
use jarvis_sdk::common::{ManualClock, Timestamp};
use jarvis_sdk::model::{AssistantMessage, Message, ThinkingBlock, ToolCall, ToolResultMessage, Usage};
use serde_json::json;

/// Which store a case runs against.
#[derive(Clone, Copy)]
pub(crate) enum Backend {
    Memory,
    Jsonl,
    Postgres,
}

/// A store under test, its clock, and a way to open it again.
pub(crate) struct Fixture {
    pub(crate) store: Arc<dyn SessionStore>,
    pub(crate) clock: Arc<ManualClock>,
    backend: Backend,
    home: Option<tempfile::TempDir>,
    url: Option<String>,
}

/// 2026-11-29T19:45:05.123Z.
pub(crate) fn start_time() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(1_795_981_505_123)
}

impl Fixture {
    pub(crate) async fn new(backend: Backend, what: &str) -> Option<Self> {
        let clock = Arc::new(ManualClock::new(start_time()));
        let mut fixture = Fixture {
            store: Arc::new(MemorySessionStore::with_clock(clock.clone())),
            clock,
            backend,
            home: None,
            url: None,
        };
        match backend {
            Backend::Memory => {}
            Backend::Jsonl => fixture.home = Some(tempfile::tempdir().unwrap()),
            Backend::Postgres => fixture.url = Some(crate::pg::fresh_schema(what).await?.0),
        }
        fixture.store = fixture.open().await;
        Some(fixture)
    }

    async fn open(&self) -> Arc<dyn SessionStore> {
        match self.backend {
            Backend::Memory => self.store.clone(),
            Backend::Jsonl => {
                let options = JsonlOptions::default().clock(self.clock.clone());
                let home = self.home.as_ref().unwrap().path();
                Arc::new(JsonlSessionStore::open_with(home, options).unwrap())
            }
            Backend::Postgres => {
                let store = PostgresSessionStore::connect(self.url.as_ref().unwrap())
                    .await
                    .unwrap();
                Arc::new(store.with_clock(self.clock.clone()))
            }
        }
    }

    /// Drops the store and opens it again over the same data (the
    /// in-memory store stays as it is).
    pub(crate) async fn reopen(mut self) -> Self {
        if !matches!(self.backend, Backend::Memory) {
            let placeholder: Arc<dyn SessionStore> = Arc::new(MemorySessionStore::new());
            drop(std::mem::replace(&mut self.store, placeholder));
            self.store = self.open().await;
        }
        self
    }

    pub(crate) fn tick(&self) {
        self.clock.advance(Duration::from_secs(1));
    }

    pub(crate) fn now(&self) -> Timestamp {
        Timestamp::from(jarvis_sdk::common::Clock::now(&*self.clock))
    }
}

pub(crate) fn id(s: &str) -> SessionId {
    SessionId::new(s).unwrap()
}

pub(crate) fn msg(m: Message) -> EntryBody {
    EntryBody::message(m)
}

/// One whole turn as the harness records it, with a tool call.
pub(crate) fn turn(n: usize) -> Vec<EntryBody> {
    vec![
        EntryBody::TurnStart { turn_id: None },
        msg(Message::user(format!("question {n}"))),
        msg(Message::Assistant(AssistantMessage {
            content: String::new(),
            thinking: vec![ThinkingBlock {
                text: format!("think {n}"),
                signature: Some("sig".into()),
                redacted: None,
            }],
            tool_calls: vec![ToolCall {
                id: format!("call_{n}"),
                name: "lookup".into(),
                arguments: json!({"n": n, "text": "한글 ✓"}),
            }],
            usage: Some(Usage::new(10, 2)),
        })),
        msg(Message::Tool(ToolResultMessage {
            tool_call_id: format!("call_{n}"),
            tool_name: "lookup".into(),
            content: format!("result {n}"),
            is_error: n.is_multiple_of(2),
        })),
        msg(Message::assistant_text(format!("answer {n}"))),
        EntryBody::TurnEnd {
            stop_reason: StopReason::Stop,
            turns: 2,
            overflows: 0,
        },
    ]
}

fn bodies(entries: &[SessionEntry]) -> Vec<EntryBody> {
    entries.iter().map(|e| e.body.clone()).collect()
}

fn seqs(entries: &[SessionEntry]) -> Vec<u64> {
    entries.iter().map(|e| e.seq).collect()
}

async fn create_then_get(fx: Fixture) {
    let store = &fx.store;
    let meta = store.create(NewSession::user(id("s1"), "karen")).await.unwrap();
    assert_eq!(meta.id.as_str(), "s1");
    assert_eq!(meta.agent_id, "karen");
    assert_eq!(meta.kind, SessionKind::User);
    assert_eq!((meta.title.clone(), meta.parent_id.clone()), (None, None));
    assert_eq!(meta.created_at, Timestamp::from(start_time()));
    assert_eq!(meta.updated_at, meta.created_at);
    assert_eq!(store.get(&id("s1")).await.unwrap(), Some(meta.clone()));
    assert_eq!(store.get(&id("nope")).await.unwrap(), None);
    assert_eq!(
        serde_json::to_value(&meta).unwrap(),
        json!({"id": "s1", "agent_id": "karen", "title": null, "created_at": "2026-11-29T19:45:05.123Z",
               "updated_at": "2026-11-29T19:45:05.123Z", "parent_id": null, "kind": "user"})
    );
    let fx = fx.reopen().await;
    assert_eq!(fx.store.get(&id("s1")).await.unwrap(), Some(meta));
}

async fn the_agent_is_fixed_at_creation(fx: Fixture) {
    let store = &fx.store;
    let meta = store.create(NewSession::user(id("s1"), "karen")).await.unwrap();
    let err = store
        .create(NewSession::user(id("s1"), "main"))
        .await
        .unwrap_err();
    assert!(err.is_already_exists(), "{err}");
    assert_eq!(err.to_string(), "session store: session s1 exists already");
    let (again, created) = store
        .get_or_create(NewSession::user(id("s1"), "main"))
        .await
        .unwrap();
    assert!(!created);
    assert_eq!(again, meta, "an existing session keeps its agent");
    let (fresh, created) = store
        .get_or_create(NewSession::user(id("s2"), "main"))
        .await
        .unwrap();
    assert!(created);
    assert_eq!(fresh.agent_id, "main");
}

async fn peer_sessions_record_caller_and_callee(fx: Fixture) {
    let sid = SessionId::peer("main", "karen").unwrap();
    let meta = fx
        .store
        .create(NewSession::peer(sid.clone(), "main", "karen"))
        .await
        .unwrap();
    assert_eq!(meta.kind, SessionKind::Peer);
    assert_eq!(meta.agent_id, "karen");
    assert_eq!(meta.caller.as_deref(), Some("main"));
    assert_eq!(meta.callee.as_deref(), Some("karen"));
    let json = serde_json::to_value(&meta).unwrap();
    assert_eq!(
        (json["kind"].clone(), json["caller"].clone()),
        (json!("peer"), json!("main"))
    );
    let fx = fx.reopen().await;
    assert_eq!(fx.store.get(&sid).await.unwrap(), Some(meta));
}

async fn bad_new_sessions_are_refused(fx: Fixture) {
    let store = &fx.store;
    let err = store
        .create(NewSession::user(id("s1"), "ka/ren"))
        .await
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    let mut peer = NewSession::peer(id("s2"), "main", "karen");
    peer.agent_id = "main".into();
    assert!(store.create(peer).await.unwrap_err().is_invalid_input());
    let long = NewSession::user(id("s3"), "main").with_title("x".repeat(201));
    let err = store.create(long).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "session store: invalid title: it is longer than 200 characters"
    );
    assert!(store.list().await.unwrap().is_empty(), "nothing was created");
}

async fn appends_number_entries_and_read_back(fx: Fixture) {
    let store = &fx.store;
    store.create(NewSession::user(id("s1"), "main")).await.unwrap();
    assert_eq!(store.append(&id("s1"), vec![]).await.unwrap(), 0);
    assert_eq!(store.append(&id("s1"), turn(1)).await.unwrap(), 6);
    fx.tick();
    assert_eq!(store.append(&id("s1"), turn(2)).await.unwrap(), 12);
    assert_eq!(store.append(&id("s1"), vec![]).await.unwrap(), 12);
    let all = store.entries(&id("s1")).await.unwrap();
    assert_eq!(seqs(&all), (1..=12).collect::<Vec<_>>());
    assert_eq!(bodies(&all), [turn(1), turn(2)].concat());
    assert!(all.iter().all(|e| e.v == 1));
    assert_eq!(all[0].ts, Timestamp::from(start_time()));
    assert_eq!(all[6].ts, fx.now());
    assert_eq!(store.get(&id("s1")).await.unwrap().unwrap().updated_at, fx.now());
    store.sync(&id("s1")).await.unwrap();

    let err = store.append(&id("nope"), turn(1)).await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert_eq!(err.to_string(), "session store: no session nope");
    assert!(store.entries(&id("nope")).await.unwrap_err().is_not_found());
    assert!(
        store.get(&id("nope")).await.unwrap().is_none(),
        "a failed append creates nothing"
    );

    let fx = fx.reopen().await;
    let again = fx.store.entries(&id("s1")).await.unwrap();
    assert_eq!(again, all);
    assert_eq!(
        fx.store.append(&id("s1"), turn(3)).await.unwrap(),
        18,
        "numbering goes on"
    );
}

async fn the_recent_window_is_whole_turns(fx: Fixture) {
    let store = &fx.store;
    store.create(NewSession::user(id("s1"), "main")).await.unwrap();
    assert!(store.recent(&id("s1"), 3).await.unwrap().is_empty());
    for n in 1..=12 {
        store.append(&id("s1"), turn(n)).await.unwrap();
    }
    let check = |window: Vec<SessionEntry>, turns: usize| {
        // A window starts at a user message and holds whole turns.
        assert_eq!(window.len(), turns * 6 - 1, "{window:?}");
        let first = 12 - turns + 1;
        assert_eq!(window[0].body, msg(Message::user(format!("question {first}"))));
        assert_eq!(window.last().unwrap().seq, 72);
    };
    assert!(store.recent(&id("s1"), 0).await.unwrap().is_empty());
    check(store.recent(&id("s1"), 1).await.unwrap(), 1);
    check(store.recent(&id("s1"), 3).await.unwrap(), 3);
    check(store.recent(&id("s1"), 10).await.unwrap(), 10);
    let all = store.recent(&id("s1"), 100).await.unwrap();
    assert_eq!(
        all,
        store.entries(&id("s1")).await.unwrap(),
        "fewer turns than asked: everything"
    );
    assert!(store.recent(&id("nope"), 3).await.unwrap_err().is_not_found());
    assert!(store.recent(&id("nope"), 0).await.unwrap_err().is_not_found());

    let fx = fx.reopen().await;
    check(fx.store.recent(&id("s1"), 3).await.unwrap(), 3);
    check(fx.store.recent(&id("s1"), 11).await.unwrap(), 11);
}

async fn list_is_newest_first(fx: Fixture) {
    let store = &fx.store;
    for name in ["b", "a", "c"] {
        store.create(NewSession::user(id(name), "main")).await.unwrap();
    }
    fx.tick();
    store.create(NewSession::user(id("d"), "karen")).await.unwrap();
    fx.tick();
    store.append(&id("c"), turn(1)).await.unwrap();
    fx.tick();
    store.set_title(&id("b"), Some("renamed".into())).await.unwrap();
    let order = |metas: Vec<jarvis_sdk::agent::SessionMeta>| {
        metas.into_iter().map(|m| m.id.to_string()).collect::<Vec<_>>()
    };
    assert_eq!(order(store.list().await.unwrap()), ["b", "c", "d", "a"]);
    let fx = fx.reopen().await;
    assert_eq!(order(fx.store.list().await.unwrap()), ["b", "c", "d", "a"]);
}

async fn forks_keep_the_agent_and_the_history(fx: Fixture) {
    let store = &fx.store;
    store
        .create(NewSession::user(id("parent"), "karen").with_title("Loans"))
        .await
        .unwrap();
    store.append(&id("parent"), turn(1)).await.unwrap();
    store.append(&id("parent"), turn(2)).await.unwrap();
    fx.tick();
    let child = store.fork(&id("parent"), id("child")).await.unwrap();
    assert_eq!(child.agent_id, "karen");
    assert_eq!(child.parent_id, Some(id("parent")));
    assert_eq!(child.kind, SessionKind::User);
    assert_eq!(child.title.as_deref(), Some("Loans"));
    assert_eq!(child.created_at, fx.now());
    let parent_entries = store.entries(&id("parent")).await.unwrap();
    assert_eq!(store.entries(&id("child")).await.unwrap(), parent_entries);

    assert_eq!(store.append(&id("child"), turn(3)).await.unwrap(), 18);
    assert_eq!(
        store.entries(&id("parent")).await.unwrap(),
        parent_entries,
        "the parent is untouched"
    );
    store.append(&id("parent"), turn(4)).await.unwrap();
    assert_eq!(
        store.recent(&id("child"), 1).await.unwrap()[0].body,
        msg(Message::user("question 3"))
    );
    assert_eq!(
        store.recent(&id("parent"), 1).await.unwrap()[0].body,
        msg(Message::user("question 4"))
    );

    assert!(
        store
            .fork(&id("parent"), id("child"))
            .await
            .unwrap_err()
            .is_already_exists()
    );
    assert!(
        store
            .fork(&id("nope"), id("other"))
            .await
            .unwrap_err()
            .is_not_found()
    );
    assert!(store.get(&id("other")).await.unwrap().is_none());

    let peer = SessionId::peer("main", "karen").unwrap();
    store
        .create(NewSession::peer(peer.clone(), "main", "karen"))
        .await
        .unwrap();
    let from_peer = store.fork(&peer, id("from-peer")).await.unwrap();
    assert_eq!(
        (from_peer.agent_id.as_str(), from_peer.kind),
        ("karen", SessionKind::User)
    );
    assert_eq!((from_peer.caller, from_peer.callee), (None, None));

    let fx = fx.reopen().await;
    let child_after = fx.store.get(&id("child")).await.unwrap().unwrap();
    assert_eq!(
        (child_after.agent_id.as_str(), child_after.parent_id),
        ("karen", Some(id("parent")))
    );
    assert_eq!(fx.store.entries(&id("child")).await.unwrap().len(), 18);
}

async fn titles_are_set_trimmed_and_cleared(fx: Fixture) {
    let store = &fx.store;
    store.create(NewSession::user(id("s1"), "main")).await.unwrap();
    fx.tick();
    let meta = store
        .set_title(&id("s1"), Some("  Housing  ".into()))
        .await
        .unwrap();
    assert_eq!(meta.title.as_deref(), Some("Housing"));
    assert_eq!(meta.updated_at, fx.now());
    assert_eq!(
        store.get(&id("s1")).await.unwrap().unwrap().title.as_deref(),
        Some("Housing")
    );
    let err = store.set_title(&id("s1"), Some("a\nb".into())).await.unwrap_err();
    assert!(matches!(err, SessionError::InvalidTitle { .. }), "{err}");
    assert!(
        store
            .set_title(&id("nope"), None)
            .await
            .unwrap_err()
            .is_not_found()
    );
    let fx = fx.reopen().await;
    assert_eq!(
        fx.store.get(&id("s1")).await.unwrap().unwrap().title.as_deref(),
        Some("Housing")
    );
    let cleared = fx.store.set_title(&id("s1"), Some("   ".into())).await.unwrap();
    assert_eq!(cleared.title, None);
    let fx = fx.reopen().await;
    assert_eq!(fx.store.get(&id("s1")).await.unwrap().unwrap().title, None);
}

async fn unknown_agents_are_reported(fx: Fixture) {
    let store = &fx.store;
    store.create(NewSession::user(id("a"), "main")).await.unwrap();
    store.create(NewSession::user(id("b"), "ghost")).await.unwrap();
    let (logs, _guard) = crate::capture::capture();
    let known = |agent: &str| agent == "main" || agent == "karen";
    let unknown = store.unknown_agents(&known).await.unwrap();
    assert_eq!(unknown.len(), 1);
    assert_eq!(unknown[0].agent_id, "ghost");
    assert!(
        logs.warned(&["session b", "\"ghost\"", "not defined"]),
        "{:?}",
        logs.lines()
    );
    let err = unknown[0].check_agent(known).unwrap_err();
    assert!(matches!(err, SessionError::UnknownAgent { .. }));
}

async fn concurrent_appends_never_interleave(fx: Fixture) {
    let store = fx.store.clone();
    store.create(NewSession::user(id("s1"), "main")).await.unwrap();
    let tasks = (0..8).map(|n| {
        let store = store.clone();
        tokio::spawn(async move { store.append(&id("s1"), turn(n)).await.unwrap() })
    });
    let mut lasts: Vec<u64> = futures::future::join_all(tasks)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    lasts.sort();
    assert_eq!(lasts, (1..=8).map(|k| k * 6).collect::<Vec<u64>>());
    let all = store.entries(&id("s1")).await.unwrap();
    assert_eq!(seqs(&all), (1..=48).collect::<Vec<_>>());
    for batch in all.chunks(6) {
        let EntryBody::Message {
            message: Message::User(u),
        } = &batch[1].body
        else {
            panic!("a batch was split: {batch:?}")
        };
        let n: usize = u.content.trim_start_matches("question ").parse().unwrap();
        assert_eq!(bodies(batch), turn(n), "batches are whole and in order");
    }
}

/// Runs `case` against `backend`; Postgres cases are skipped loudly when no
/// server can be started (and fail with `JARVIS_REQUIRE_POSTGRES=1`).
pub(crate) async fn run<F, Fut>(backend: Backend, what: &str, case: F)
where
    F: FnOnce(Fixture) -> Fut,
    Fut: Future<Output = ()>,
{
    if let Some(fx) = Fixture::new(backend, what).await {
        case(fx).await;
    }
}

macro_rules! contract {
    ($($case:ident),* $(,)?) => {
        mod memory {
            $(#[tokio::test]
            async fn $case() {
                super::run(super::Backend::Memory, stringify!($case), super::$case).await;
            })*
        }
        mod jsonl {
            $(#[tokio::test]
            async fn $case() {
                super::run(super::Backend::Jsonl, stringify!($case), super::$case).await;
            })*
        }
        mod postgres {
            $(#[tokio::test]
            async fn $case() {
                super::run(super::Backend::Postgres, concat!("postgres contract ", stringify!($case)), super::$case).await;
            })*
        }
    };
}

contract!(
    create_then_get,
    the_agent_is_fixed_at_creation,
    peer_sessions_record_caller_and_callee,
    bad_new_sessions_are_refused,
    appends_number_entries_and_read_back,
    the_recent_window_is_whole_turns,
    list_is_newest_first,
    forks_keep_the_agent_and_the_history,
    titles_are_set_trimmed_and_cleared,
    unknown_agents_are_reported,
    concurrent_appends_never_interleave,
);
