//! The harness: one turn of one session, read from and written to a store.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use jarvis_sdk::CancellationToken;
use jarvis_sdk::agent::{
    AgentError, AgentEvent, AgentIdentity, AgentLoopConfig, EntryBody, Harness, HarnessConfig, JsonlOptions,
    JsonlSessionStore, LoopContext, MemorySessionStore, NewSession, SessionEntry, SessionError, SessionId,
    SessionMeta, SessionStore, StopReason, ToolRegistry,
};
use jarvis_sdk::model::{AssistantMessage, FauxProvider, FauxReply, FauxScript, Message, ToolCall};
use jarvis_sdk::testing::{FnTool, RecordingAdapter};
use serde_json::json;

use crate::sessions_contract::{id, msg};

fn faux(script: FauxScript) -> Arc<FauxProvider> {
    Arc::new(FauxProvider::new(script).unwrap())
}

fn echo() -> FauxScript {
    FauxScript::new().fallback(FauxReply::text("noted"))
}

fn context(faux: Arc<FauxProvider>, agent: &str) -> LoopContext {
    LoopContext::new(faux).with_identity(AgentIdentity {
        agent_id: agent.into(),
        agent_name: agent.to_uppercase(),
        session_id: "unset".into(),
    })
}

async fn session(store: &dyn SessionStore, name: &str, agent: &str) -> SessionId {
    store.create(NewSession::user(id(name), agent)).await.unwrap();
    id(name)
}

fn users(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::User(u) => Some(u.content.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_turn_is_recorded_between_markers() {
    let store = Arc::new(MemorySessionStore::new());
    let sid = session(&*store, "s", "main").await;
    let script = FauxScript::new()
        .reply(FauxReply::tool_call("lookup", json!({"key": "k"})))
        .reply(FauxReply::text("found it"));
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(FnTool::constant("lookup", "v"))).unwrap();
    let ui = Arc::new(RecordingAdapter::new());
    let ctx = context(faux(script), "main")
        .with_tools(tools)
        .with_ui(ui.clone());
    let harness = Harness::new(store.clone(), ctx);

    let outcome = harness
        .run_turn(&sid, "find k", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(outcome.final_message.content, "found it");
    let entries = store.entries(&sid).await.unwrap();
    let kinds: Vec<String> = entries
        .iter()
        .map(|e| match &e.body {
            EntryBody::Message { message } => format!("{:?}", message.role()),
            EntryBody::TurnStart { .. } => "turn_start".into(),
            EntryBody::TurnEnd {
                stop_reason,
                turns,
                overflows,
            } => {
                format!("turn_end {stop_reason:?} {turns} {overflows}")
            }
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "turn_start",
            "User",
            "Assistant",
            "Tool",
            "Assistant",
            "turn_end Stop 2 0"
        ]
    );
    assert_eq!(entries[1].body, msg(Message::user("find k")));
    let recorded: Vec<Message> = entries.iter().filter_map(|e| e.message().cloned()).collect();
    assert_eq!(recorded[1..], outcome.new_messages[..]);
    match &ui.events()[0] {
        AgentEvent::AgentStart {
            session_id, agent_id, ..
        } => {
            assert_eq!((session_id.as_str(), agent_id.as_str()), ("s", "main"));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn the_model_sees_the_last_three_turns() {
    let store = Arc::new(MemorySessionStore::new());
    let sid = session(&*store, "s", "main").await;
    let provider = faux(echo());
    let harness = Harness::new(store.clone(), context(provider.clone(), "main"));
    for n in 1..=5 {
        harness
            .run_turn(&sid, format!("q{n}"), &CancellationToken::new())
            .await
            .unwrap();
    }
    let requests = provider.requests();
    assert_eq!(users(requests[0].recorded_messages()), ["q1"]);
    assert_eq!(users(requests[4].recorded_messages()), ["q3", "q4", "q5"]);
    assert_eq!(requests[4].recorded_messages().len(), 5, "with their answers");

    let one = Harness::new(store.clone(), context(provider.clone(), "main"))
        .with_config(HarnessConfig::default().with_history_turns(1));
    one.run_turn(&sid, "q6", &CancellationToken::new()).await.unwrap();
    assert_eq!(users(provider.requests()[5].recorded_messages()), ["q6"]);
}

#[tokio::test]
async fn a_session_of_another_agent_is_refused() {
    let store = Arc::new(MemorySessionStore::new());
    let sid = session(&*store, "s", "karen").await;
    let provider = faux(echo());
    let harness = Harness::new(store.clone(), context(provider.clone(), "main"));
    let err = harness
        .run_turn(&sid, "hi", &CancellationToken::new())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, AgentError::Session(SessionError::WrongAgent { .. })),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "session store: session s belongs to agent \"karen\", not \"main\""
    );
    assert!(store.entries(&sid).await.unwrap().is_empty());
    assert_eq!(provider.request_count(), 0);

    let err = harness
        .run_turn(&id("nope"), "hi", &CancellationToken::new())
        .await
        .unwrap_err();
    assert!(
        matches!(err, AgentError::Session(SessionError::NotFound { .. })),
        "{err:?}"
    );
    assert!(store.get(&id("nope")).await.unwrap().is_none());
}

#[tokio::test]
async fn a_bad_loop_configuration_records_nothing() {
    let store = Arc::new(MemorySessionStore::new());
    let sid = session(&*store, "s", "main").await;
    let config = HarnessConfig::default().with_loop_config(AgentLoopConfig {
        max_turns: 0,
        ..AgentLoopConfig::default()
    });
    let harness = Harness::new(store.clone(), context(faux(echo()), "main")).with_config(config);
    let err = harness
        .run_turn(&sid, "hi", &CancellationToken::new())
        .await
        .unwrap_err();
    assert!(matches!(err, AgentError::InvalidConfig(_)), "{err:?}");
    assert!(store.entries(&sid).await.unwrap().is_empty());
}

/// A store that records the operations the harness makes and can fail one.
#[derive(Debug)]
struct Spy {
    inner: MemorySessionStore,
    calls: Mutex<Vec<String>>,
    fail_append: Mutex<Option<usize>>,
}

impl Spy {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            inner: MemorySessionStore::new(),
            calls: Mutex::default(),
            fail_append: Mutex::default(),
        })
    }

    fn note(&self, call: String) {
        self.calls.lock().unwrap().push(call);
    }

    fn calls(&self) -> Vec<String> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }
}

#[async_trait]
impl SessionStore for Spy {
    async fn create(&self, new: NewSession) -> Result<SessionMeta, SessionError> {
        self.inner.create(new).await
    }
    async fn get(&self, id: &SessionId) -> Result<Option<SessionMeta>, SessionError> {
        self.note("get".into());
        self.inner.get(id).await
    }
    async fn append(&self, id: &SessionId, entries: Vec<EntryBody>) -> Result<u64, SessionError> {
        self.note(format!("append {}", entries.len()));
        let fail_now = {
            let mut fail = self.fail_append.lock().unwrap();
            match fail.as_mut() {
                Some(0) => fail.take().is_some(),
                Some(n) => {
                    *n -= 1;
                    false
                }
                None => false,
            }
        };
        if fail_now {
            return Err(SessionError::Io {
                op: "append to",
                path: "disk".into(),
                source: std::io::Error::other("disk full"),
            });
        }
        self.inner.append(id, entries).await
    }
    async fn recent(&self, id: &SessionId, turns: usize) -> Result<Vec<SessionEntry>, SessionError> {
        self.note(format!("recent {turns}"));
        self.inner.recent(id, turns).await
    }
    async fn entries(&self, id: &SessionId) -> Result<Vec<SessionEntry>, SessionError> {
        self.inner.entries(id).await
    }
    async fn list(&self) -> Result<Vec<SessionMeta>, SessionError> {
        self.inner.list().await
    }
    async fn fork(&self, parent: &SessionId, child: SessionId) -> Result<SessionMeta, SessionError> {
        self.inner.fork(parent, child).await
    }
    async fn set_title(&self, id: &SessionId, title: Option<String>) -> Result<SessionMeta, SessionError> {
        self.inner.set_title(id, title).await
    }
    async fn sync(&self, id: &SessionId) -> Result<(), SessionError> {
        self.note("sync".into());
        self.inner.sync(id).await
    }
}

#[tokio::test]
async fn every_turn_reads_once_writes_one_block_and_syncs_last() {
    let store = Spy::new();
    let sid = session(&*store, "s", "main").await;
    let harness = Harness::new(store.clone(), context(faux(echo()), "main"));
    harness
        .run_turn(&sid, "hi", &CancellationToken::new())
        .await
        .unwrap();
    // The whole turn is one block (turn_start, prompt, answer, turn_end),
    // written when it ends.
    assert_eq!(store.calls(), ["get", "recent 2", "append 4", "sync"]);

    // A store failure is the turn's error.
    *store.fail_append.lock().unwrap() = Some(0);
    let err = harness
        .run_turn(&sid, "again", &CancellationToken::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("cannot append to disk"), "{err}");
    assert_eq!(
        store.calls(),
        ["get", "recent 2", "append 4"],
        "no sync after a failure"
    );
}

#[tokio::test]
async fn an_aborted_turn_is_recorded_too() {
    let store = Arc::new(MemorySessionStore::new());
    let sid = session(&*store, "s", "main").await;
    let harness = Harness::new(store.clone(), context(faux(echo()), "main"));
    let cancel = CancellationToken::new();
    cancel.cancel();
    let outcome = harness.run_turn(&sid, "hi", &cancel).await.unwrap();
    assert_eq!(outcome.final_message.stop_reason, StopReason::Aborted);
    let last = store.entries(&sid).await.unwrap().pop().unwrap();
    assert!(
        matches!(
            last.body,
            EntryBody::TurnEnd {
                stop_reason: StopReason::Aborted,
                ..
            }
        ),
        "{last:?}"
    );
}

#[tokio::test]
async fn a_turn_cut_short_by_a_crash_does_not_poison_the_next() {
    let store = Arc::new(MemorySessionStore::new());
    let sid = session(&*store, "s", "main").await;
    let dangling = Message::Assistant(AssistantMessage {
        tool_calls: vec![ToolCall {
            id: "call_9".into(),
            name: "lookup".into(),
            arguments: json!({}),
        }],
        ..AssistantMessage::default()
    });
    // What a crash between the loop's steps and the end of the turn leaves.
    store
        .append(
            &sid,
            vec![
                EntryBody::TurnStart { turn_id: None },
                msg(Message::user("lost")),
                msg(dangling),
            ],
        )
        .await
        .unwrap();
    let provider = faux(echo());
    let harness = Harness::new(store.clone(), context(provider.clone(), "main"));
    harness
        .run_turn(&sid, "next", &CancellationToken::new())
        .await
        .unwrap();
    let seen = provider.requests()[0].recorded_messages().to_vec();
    assert_eq!(seen, vec![Message::user("lost"), Message::user("next")]);
}

#[tokio::test]
async fn turns_continue_across_a_restart_of_the_jsonl_store() {
    let home = tempfile::tempdir().unwrap();
    let provider = faux(echo());
    {
        let store = Arc::new(JsonlSessionStore::open(home.path()).unwrap());
        let sid = session(&*store, "s", "main").await;
        let harness = Harness::new(store, context(provider.clone(), "main"));
        for n in 1..=2 {
            harness
                .run_turn(&sid, format!("q{n}"), &CancellationToken::new())
                .await
                .unwrap();
        }
    }
    let store = Arc::new(JsonlSessionStore::open_with(home.path(), JsonlOptions::default()).unwrap());
    let harness = Harness::new(store.clone(), context(provider.clone(), "main"));
    harness
        .run_turn(&id("s"), "q3", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        users(provider.requests()[2].recorded_messages()),
        ["q1", "q2", "q3"]
    );
    assert_eq!(store.entries(&id("s")).await.unwrap().len(), 12);
}

#[test]
fn a_turn_can_be_spawned() {
    fn assert_send<T: Send + 'static>(_: &T) {}
    let harness = Harness::new(Arc::new(MemorySessionStore::new()), context(faux(echo()), "main"));
    let turn = async move {
        let cancel = CancellationToken::new();
        harness.run_turn(&id("s"), "x", &cancel).await
    };
    assert_send(&turn);
}
