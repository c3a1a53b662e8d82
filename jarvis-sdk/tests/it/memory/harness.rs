//! The harness with memory on (R-MEM-2..4, R-LOOP-14): recall before the
//! turn reaches every model call of it, summaries and nudges included, and
//! nothing else; the model sees the last three turns and older ones come
//! back by recall; every turn writes an episode whose metadata says
//! `overflow: true` when it overflowed; memory failures never fail a turn.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use jarvis_sdk::CancellationToken;
use jarvis_sdk::agent::{
    AgentIdentity, AgentLoopConfig, Harness, HarnessConfig, LoopContext, MemorySessionStore, NewSession,
    SessionStore, ToolRegistry, ToolResult,
};
use jarvis_sdk::common::SequentialIds;
use jarvis_sdk::memory::{
    InMemoryMemoryStore, Layer, MemoryFilter, MemoryRead, MemoryScope, MemoryService, MemoryStore,
};
use jarvis_sdk::model::{EmbedRole, Embedder, FauxProvider, HashEmbedder, Message, ProviderError, Purpose};
use jarvis_sdk::testing::{FnTool, RecordingAdapter};
use serde_json::json;

use super::fixed_clock;
use crate::capture::capture;
use crate::sessions_contract::id;

struct Setup {
    harness: Harness,
    faux: Arc<FauxProvider>,
    service: Arc<MemoryService>,
    memory: Arc<InMemoryMemoryStore>,
    sessions: Arc<MemorySessionStore>,
    ui: Arc<RecordingAdapter>,
}

async fn setup(script: &str, max_turns: u32) -> Setup {
    let clock = fixed_clock();
    let memory = Arc::new(InMemoryMemoryStore::new());
    let service = Arc::new(
        MemoryService::new(memory.clone(), Arc::new(HashEmbedder::default()))
            .with_clock(clock.clone())
            .with_ids(Arc::new(SequentialIds::default())),
    );
    let faux = Arc::new(FauxProvider::from_yaml(script).unwrap());
    let ui = Arc::new(RecordingAdapter::new());
    // A tool that takes 250 ms of the (manual) clock, so durations are exact.
    let tool_clock = clock.clone();
    let mut tools = ToolRegistry::new();
    tools
        .register(Arc::new(FnTool::new("read_file", move |_| {
            tool_clock.advance(Duration::from_millis(250));
            Ok(ToolResult::ok("file contents"))
        })))
        .unwrap();
    let ctx = LoopContext::new(faux.clone())
        .with_tools(tools)
        .with_ui(ui.clone())
        .with_identity(AgentIdentity {
            agent_id: "main".into(),
            agent_name: "J.A.R.V.I.S.".into(),
            session_id: "unset".into(),
        });
    let sessions = Arc::new(MemorySessionStore::new());
    sessions.create(NewSession::user(id("s"), "main")).await.unwrap();
    let harness = Harness::new(sessions.clone(), ctx)
        .with_config(HarnessConfig::default().with_loop_config(AgentLoopConfig {
            max_turns,
            ..AgentLoopConfig::default()
        }))
        .with_memory(service.clone(), "u", MemoryRead::own_only());
    Setup {
        harness,
        faux,
        service,
        memory,
        sessions,
        ui,
    }
}

const OVERFLOW_SCRIPT: &str = r#"
rules:
  - when: { last_user: "^plain" }
    reply: { text: "a plain answer" }
  - when: { purpose: summary }
    reply: { text: "한 것: 파일 읽기\n지금까지의 답: 모름" }
fallback: { tool_calls: [ { name: read_file, arguments: { path: x } } ] }
"#;

#[tokio::test]
async fn turn_episodes_say_overflow_when_the_turn_overflowed() {
    let s = setup(OVERFLOW_SCRIPT, 2).await;
    let cancel = CancellationToken::new();
    let overflowed = s
        .harness
        .run_turn(&id("s"), "dig through every file", &cancel)
        .await
        .unwrap();
    assert_eq!(overflowed.overflows, 2);
    let plain = s
        .harness
        .run_turn(&id("s"), "plain question", &cancel)
        .await
        .unwrap();
    assert_eq!(plain.overflows, 0);

    let episodes = s
        .memory
        .list(&MemoryFilter::for_user("u").layer(Layer::Episodic, jarvis_sdk::memory::Agents::only(["main"])))
        .await
        .unwrap();
    let by_prompt = |p: &str| {
        episodes
            .iter()
            .find(|e| e.text.starts_with(p))
            .unwrap_or_else(|| panic!("no episode for {p:?} in {episodes:#?}"))
            .clone()
    };
    let first = by_prompt("dig through every file");
    assert_eq!(first.source, "turn");
    assert_eq!(
        first.metadata,
        json!({
            "session_id": "s",
            "tools": ["read_file"],
            "duration_ms": 750,
            "turns": 3,
            "overflows": 2,
            "overflow": true,
            "stop_reason": "overflow",
        })
    );
    assert!(first.text.contains("지금까지의 답: 모름"), "{}", first.text);
    let second = by_prompt("plain question");
    assert_eq!(second.metadata["overflow"], false);
    assert_eq!(second.metadata["overflows"], 0);
    assert_eq!(second.metadata["tools"], json!([]));
    assert_eq!(second.metadata["stop_reason"], "stop");

    let working = s
        .service
        .working(&MemoryScope::new("u", "main", "s"))
        .await
        .unwrap();
    assert_eq!(working.items.len(), 2);
    assert_eq!(working.recent_episodes, [first.id, second.id]);
}

#[tokio::test]
async fn memory_reaches_every_model_call_and_is_never_recorded() {
    let script = r#"
rules:
  - when: { purpose: summary }
    reply: { text: "지금까지의 답: 모름" }
  - when: { purpose: continuation }
    reply: { text: "done" }
replies:
  - { empty: true }
  - { tool_calls: [ { name: read_file, arguments: { path: x } } ] }
  - { tool_calls: [ { name: read_file, arguments: { path: y } } ] }
"#;
    let s = setup(script, 2).await;
    let scope = MemoryScope::new("u", "main", "s");
    s.service
        .remember(&scope, "The user's name is Ada Lovelace")
        .await
        .unwrap();
    let outcome = s
        .harness
        .run_turn(&id("s"), "remind me of my name, Ada?", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(outcome.final_message.content, "done");

    let requests = s.faux.requests();
    let purposes: Vec<Purpose> = requests.iter().map(|r| r.purpose).collect();
    assert_eq!(
        purposes,
        [
            Purpose::Step,
            Purpose::Nudge,
            Purpose::Step,
            Purpose::Summary,
            Purpose::Continuation
        ]
    );
    for (i, request) in requests.iter().enumerate() {
        let memory_messages: Vec<&Message> = request
            .messages
            .iter()
            .filter(|m| matches!(m, Message::User(u) if u.content.starts_with("[핵심 사실]")))
            .collect();
        assert_eq!(memory_messages.len(), 1, "request {i} ({:?})", request.purpose);
        assert_eq!(
            request.messages[0],
            Message::user("[핵심 사실]\n- The user's name is Ada Lovelace"),
            "request {i}: the memory message comes first"
        );
        assert_eq!(request.last_user_text(), Some("remind me of my name, Ada?"));
    }
    // The memory message is never recorded, streamed or sent as an event.
    let entries = serde_json::to_string(&s.sessions.entries(&id("s")).await.unwrap()).unwrap();
    assert!(
        !entries.contains("[핵심 사실]") && !entries.contains("Lovelace"),
        "{entries}"
    );
    assert!(!s.ui.jsonl().contains("Lovelace"));
}

#[tokio::test]
async fn the_model_sees_three_turns_and_recall_brings_back_older_ones() {
    let s = setup("fallback: { text: noted }", 20).await;
    let cancel = CancellationToken::new();
    let prompts = [
        "the lighthouse keeper novel is due at the book club",
        "what's the weather",
        "set a timer",
        "play some music",
        "thanks",
    ];
    for p in prompts {
        s.harness.run_turn(&id("s"), p, &cancel).await.unwrap();
    }
    s.harness
        .run_turn(&id("s"), "which novel was the book club reading?", &cancel)
        .await
        .unwrap();
    let last = s.faux.requests().pop().unwrap();
    let users: Vec<&str> = last
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::User(u) => Some(u.content.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(users.len(), 4, "the memory message and three turns: {users:#?}");
    assert_eq!(
        users[1..],
        [
            "play some music",
            "thanks",
            "which novel was the book club reading?"
        ]
    );
    assert!(
        users[0].starts_with("[장기 기억]\n- [2026-11-29] the lighthouse keeper novel"),
        "{}",
        users[0]
    );
    assert!(users[0].contains("[작업 공유 메모리]"));
}

/// An embedder that always fails, as a remote one does when its server is down.
#[derive(Debug)]
struct DownEmbedder;

impl Embedder for DownEmbedder {
    fn embed(
        &self,
        _texts: Vec<String>,
        _role: EmbedRole,
    ) -> BoxFuture<'static, Result<Vec<Vec<f32>>, ProviderError>> {
        Box::pin(async { Err(ProviderError::stream("embedder", "connection refused")) })
    }
    fn name(&self) -> &str {
        "down"
    }
}

#[tokio::test]
async fn a_memory_failure_never_fails_the_turn() {
    let s = setup("fallback: { text: fine }", 20).await;
    let store = Arc::new(InMemoryMemoryStore::new());
    let broken = Arc::new(MemoryService::new(store.clone(), Arc::new(DownEmbedder)));
    let harness = s.harness.clone().with_memory(broken, "u", MemoryRead::own_only());
    let (logs, _guard) = capture();
    let outcome = harness
        .run_turn(&id("s"), "hello", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(outcome.final_message.content, "fine");
    assert!(
        logs.warned(&[
            "the query could not be embedded",
            "connection refused",
            "recall goes by its words alone"
        ]),
        "{:?}",
        logs.lines()
    );
    assert!(
        logs.warned(&["kept and embedded when it answers again"]),
        "{:?}",
        logs.lines()
    );
    let request = s.faux.requests().pop().unwrap();
    assert_eq!(request.messages, [Message::user("hello")]);
    // The episode is kept un-embedded, for re-embedding to embed later.
    let stale = store.stale("down", 10).await.unwrap();
    assert_eq!(stale.len(), 1, "{stale:?}");
    assert!(stale[0].text.starts_with("hello") && stale[0].embedder.is_empty());
}
