//! Continuity through crashes, in process: each "process" is a runtime of
//! its own, and dropping it mid-turn is the crash (its tasks vanish without
//! finishing; only what reached the files survives). The binary tests of
//! `jarvis-cli` do the same with SIGKILL.
//!
//! - Every turn is one contiguous block in its session's history, also when
//!   a background turn and a foreground turn overlap, and `agent_end` goes
//!   out only after the block is synced.
//! - A turn waiting for a person resumes after a restart with the same
//!   request (allow, deny, a timeout counted from the first ask); a call
//!   allowed before the crash is never run again; a delegated turn waiting
//!   for a person is closed and its caller goes on; any other turn is
//!   closed as interrupted and the first screen is told.

use async_trait::async_trait;
use jarvis_pack_housing::{HousingPack, KAREN_DEFINITION};
use jarvis_sdk::agent::{
    AgentEvent, ApprovalDecision, ApprovalRequest, Durability, EntryBody, Harness, INTERRUPTED_RESULT,
    JsonlSessionStore, LoopContext, LoopState, MemorySessionStore, NewSession, SessionEntry, SessionError,
    SessionId, SessionMeta, SessionStore, StopReason, TURN_JOURNAL_FILE, TurnBegin, TurnJournal, UIAdapter,
};
use jarvis_sdk::app::{AppAssembly, AppConfig, StoreBackend, build_app};
use jarvis_sdk::common::ManualClock;
use jarvis_sdk::model::{FauxProvider, Message};
use jarvis_sdk::turn::{AgentSession, Caller, DualConfig, DualReply, PromptOptions, SessionAttachment};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// What a screen saw.
#[derive(Debug, Clone)]
enum Seen {
    Event(AgentEvent),
    Approval(ApprovalRequest),
    Resolved(String, ApprovalDecision),
}

struct Screen(mpsc::UnboundedSender<Seen>);

impl UIAdapter for Screen {
    fn on_event(&self, event: &AgentEvent) -> std::ops::ControlFlow<()> {
        let _ = self.0.send(Seen::Event(event.clone()));
        std::ops::ControlFlow::Continue(())
    }
    fn on_approval_request(&self, request: &ApprovalRequest) {
        let _ = self.0.send(Seen::Approval(request.clone()));
    }
    fn on_approval_resolved(&self, request_id: &str, decision: ApprovalDecision) {
        let _ = self.0.send(Seen::Resolved(request_id.to_owned(), decision));
    }
}

struct Watching {
    rx: mpsc::UnboundedReceiver<Seen>,
    _attachment: SessionAttachment,
}

impl Watching {
    fn attach(session: &AgentSession) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let attachment = session.attach(Arc::new(Screen(tx)));
        Self {
            rx,
            _attachment: attachment,
        }
    }

    /// Everything seen until `stop` matches (included).
    async fn until(&mut self, stop: impl Fn(&Seen) -> bool) -> Vec<Seen> {
        let mut seen = Vec::new();
        loop {
            let Ok(next) = tokio::time::timeout(Duration::from_secs(30), self.rx.recv()).await else {
                panic!("the screen did not see what it waited for in time; it saw {seen:#?}");
            };
            let next = next.expect("the screen is attached");
            let done = stop(&next);
            seen.push(next);
            if done {
                return seen;
            }
        }
    }
}

fn is_end(s: &Seen) -> bool {
    matches!(s, Seen::Event(AgentEvent::AgentEnd { .. }))
}

fn is_approval(s: &Seen) -> bool {
    matches!(s, Seen::Approval(_))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

const MEMO: &str = r#"
rules:
  - when: { agent: main, last_role: user, last_user: "메모" }
    reply: { tool_calls: [ { name: write_file, arguments: { path: "memo.txt", content: "hello" } } ] }
  - when: { agent: main, last_role: user, last_user: "카렌" }
    reply: { tool_calls: [ { name: ask_agent, arguments: { agent: karen, request: "메모 남겨 줘" } } ] }
  - when: { agent: karen, last_role: user }
    reply: { tool_calls: [ { name: housing_watch, arguments: { region: "서울" } } ] }
  - when: { last_role: tool }
    reply: { text: "끝났어요." }
fallback: { text: "네." }
"#;

/// An app over `home` keeping sessions in files, with `clock`.
async fn app_at(home: &Path, script: &str, clock: Arc<ManualClock>) -> (AppAssembly, Arc<FauxProvider>) {
    let faux = Arc::new(FauxProvider::from_yaml(script).unwrap());
    let mut config = AppConfig::embedded(home)
        .with_definition("karen", KAREN_DEFINITION)
        .with_provider(faux.clone());
    config.store = StoreBackend::Jsonl;
    config.durability = Durability::Never;
    config.packs = vec![std::sync::Arc::new(HousingPack::in_memory())];
    config.agenda.model_judge = false;
    config.approval_timeout = Duration::from_secs(60);
    config.clock = clock;
    config.memory.enabled = false;
    match build_app(config).await {
        Ok(app) => (app, faux),
        Err(e) => panic!("build_app: {e}"),
    }
}

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
    ))
}

/// Process one: a turn asks for `write_file` in `default-main`, and the
/// process dies while the request waits. Answers the request's id.
fn crash_while_waiting(home: &Path, clock: &Arc<ManualClock>, prompt: &str) -> String {
    let rt = runtime();
    let (app, session, request) = rt.block_on(async {
        let (app, _) = app_at(home, MEMO, clock.clone()).await;
        let session = app
            .open_or_create(&SessionId::new("default-main").unwrap(), Some("main"))
            .await
            .unwrap();
        let mut screen = Watching::attach(&session);
        let turn = session.clone();
        let prompt = prompt.to_owned();
        tokio::spawn(async move { turn.prompt(prompt, Caller::Local).await });
        let seen = screen.until(is_approval).await;
        let Some(Seen::Approval(request)) = seen.last().cloned() else {
            unreachable!()
        };
        (app, session, request)
    });
    // The crash: the runtime and everything on it go, mid-turn.
    drop(rt);
    drop(session);
    drop(app);
    request.request_id
}

fn history(home: &Path, id: &str) -> Vec<SessionEntry> {
    let rt = runtime();
    rt.block_on(async {
        let store = JsonlSessionStore::open(home).unwrap();
        store.entries(&SessionId::new(id).unwrap()).await.unwrap()
    })
}

fn messages(entries: &[SessionEntry]) -> Vec<Message> {
    entries.iter().filter_map(|e| e.message().cloned()).collect()
}

fn tool_results(entries: &[SessionEntry]) -> Vec<String> {
    messages(entries)
        .into_iter()
        .filter_map(|m| match m {
            Message::Tool(t) => Some(t.content),
            _ => None,
        })
        .collect()
}

/// Process two: the app resumes the turn; a screen attaches, sees it
/// resumed with the same request, answers `decision`, and waits for the end.
fn resume_and_answer(
    home: &Path,
    clock: &Arc<ManualClock>,
    request_id: &str,
    decision: Option<ApprovalDecision>,
) -> Vec<Seen> {
    let rt = runtime();
    rt.block_on(async {
        let (app, _) = app_at(home, MEMO, clock.clone()).await;
        let session = app
            .session(&SessionId::new("default-main").unwrap())
            .await
            .unwrap();
        let mut screen = Watching::attach(&session);
        let mut seen = match decision {
            Some(decision) => {
                let seen = screen.until(is_approval).await;
                let Some(Seen::Approval(request)) = seen.last() else {
                    unreachable!()
                };
                assert_eq!(
                    request.request_id, request_id,
                    "the same request, after the restart"
                );
                assert!(session.broker().decide(request_id, decision));
                seen
            }
            None => {
                // Nothing to answer: the turn may end before the screen
                // attached, so wait for the session to be idle instead.
                let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
                while session.is_busy() {
                    assert!(tokio::time::Instant::now() < deadline, "the resumed turn ends");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Vec::new()
            }
        };
        if decision.is_some() {
            seen.extend(screen.until(is_end).await);
        }
        session.settled().await;
        // Nothing else follows: one agent_end.
        while let Ok(more) = screen.rx.try_recv() {
            seen.push(more);
        }
        seen
    })
}

fn events(seen: &[Seen]) -> Vec<&AgentEvent> {
    seen.iter()
        .filter_map(|s| match s {
            Seen::Event(e) => Some(e),
            _ => None,
        })
        .collect()
}

fn sandbox_file(home: &Path, session: &str, name: &str) -> PathBuf {
    home.join("sandboxes").join(session).join(name)
}

#[test]
fn an_allowed_request_after_a_crash_runs_the_tool_once_and_the_turn_ends_with_its_answer() {
    let home = tempfile::tempdir().unwrap();
    let clock = clock();
    let request_id = crash_while_waiting(home.path(), &clock, "메모 남겨 줘");
    assert!(
        history(home.path(), "default-main").is_empty(),
        "a turn in progress is not in the history yet"
    );
    let seen = resume_and_answer(home.path(), &clock, &request_id, Some(ApprovalDecision::Allow));
    assert!(
        seen.iter()
            .any(|s| matches!(s, Seen::Resolved(id, ApprovalDecision::Allow) if *id == request_id)),
        "{seen:?}"
    );
    let events = events(&seen);
    assert!(
        matches!(events.first(), Some(AgentEvent::AgentStart { resumed: true, .. })),
        "the screen learns a resumed turn is under way: {events:?}"
    );
    let ends = events
        .iter()
        .filter(|e| matches!(e, AgentEvent::AgentEnd { .. }))
        .count();
    assert_eq!(ends, 1, "{events:?}");
    let Some(AgentEvent::AgentEnd { final_message, .. }) = events.last() else {
        panic!("{events:?}")
    };
    assert_eq!(final_message.content, "끝났어요.");
    assert_eq!(
        std::fs::read_to_string(sandbox_file(home.path(), "default-main", "memo.txt")).unwrap(),
        "hello"
    );
    let entries = history(home.path(), "default-main");
    let kinds: Vec<&str> = entries
        .iter()
        .map(|e| match &e.body {
            EntryBody::TurnStart { .. } => "turn_start",
            EntryBody::TurnEnd { .. } => "turn_end",
            EntryBody::Message { message } => match message {
                Message::User(_) => "user",
                Message::Assistant(_) => "assistant",
                Message::Tool(_) => "tool",
            },
            _ => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        ["turn_start", "user", "assistant", "tool", "assistant", "turn_end"],
        "one block, recorded once"
    );
    assert!(entries[0].body.turn_id().is_some());
    // The journal holds nothing more: a third start resumes nothing.
    let (_, pending) = TurnJournal::open(home.path().join(TURN_JOURNAL_FILE)).unwrap();
    assert!(pending.is_empty(), "{pending:?}");
}

#[test]
fn a_denied_request_after_a_crash_gives_the_model_the_refusal_and_the_loop_goes_on() {
    let home = tempfile::tempdir().unwrap();
    let clock = clock();
    let request_id = crash_while_waiting(home.path(), &clock, "메모 남겨 줘");
    let seen = resume_and_answer(home.path(), &clock, &request_id, Some(ApprovalDecision::Deny));
    assert!(matches!(events(&seen).last(), Some(AgentEvent::AgentEnd { .. })));
    assert!(!sandbox_file(home.path(), "default-main", "memo.txt").exists());
    let results = tool_results(&history(home.path(), "default-main"));
    assert_eq!(results.len(), 1);
    assert!(results[0].contains("the person denied it"), "{results:?}");
}

#[test]
fn the_approval_timeout_counts_from_the_first_ask_across_restarts() {
    let home = tempfile::tempdir().unwrap();
    let clock = clock();
    let request_id = crash_while_waiting(home.path(), &clock, "메모 남겨 줘");
    // The process stays down longer than the timeout (60 s).
    clock.advance(Duration::from_secs(61));
    // The turn resumes, finds its request's time up (not another full
    // minute: the test waits 30 s at most) and goes on.
    resume_and_answer(home.path(), &clock, &request_id, None);
    assert!(!sandbox_file(home.path(), "default-main", "memo.txt").exists());
    let results = tool_results(&history(home.path(), "default-main"));
    assert!(results[0].contains("nobody approved it in time"), "{results:?}");
}

/// A turn the journal says was allowed to run `write_file` and has no result.
fn journal_allowed_without_result(home: &Path) {
    let rt = runtime();
    rt.block_on(async {
        let store = JsonlSessionStore::open(home).unwrap();
        store
            .create(NewSession::user(SessionId::new("default-main").unwrap(), "main"))
            .await
            .unwrap();
        drop(store);
        let (journal, _) = TurnJournal::open(home.join(TURN_JOURNAL_FILE)).unwrap();
        journal.begin(TurnBegin {
            turn_id: "t-1".into(),
            session_id: "default-main".into(),
            agent_id: "main".into(),
            at: jarvis_sdk::common::Timestamp::from_millis(1_800_000_000_000),
            prompt: "메모 남겨 줘".into(),
            parent: None,
            resumable: true,
        });
        let call = Message::Assistant(jarvis_sdk::model::AssistantMessage {
            tool_calls: vec![
                jarvis_sdk::model::ToolCall {
                    id: "call_a".into(),
                    name: "write_file".into(),
                    arguments: json!({"path": "memo.txt", "content": "hello"}),
                },
                jarvis_sdk::model::ToolCall {
                    id: "call_b".into(),
                    name: "write_file".into(),
                    arguments: json!({"path": "other.txt", "content": "again"}),
                },
            ],
            ..Default::default()
        });
        journal.step("t-1", &call, &LoopState::default());
        let request = |id: &str, path: &str| ApprovalRequest {
            request_id: id.into(),
            session_id: "default-main".into(),
            agent_id: "main".into(),
            tool_name: "write_file".into(),
            args: json!({"path": path}),
        };
        let at = jarvis_sdk::common::Timestamp::from_millis(1_800_000_000_000);
        journal
            .ask("t-1", "call_a", &request("approval_a", "memo.txt"), at)
            .await
            .unwrap();
        journal
            .decide("t-1", "approval_a", ApprovalDecision::Allow)
            .await
            .unwrap();
        // The second call still waits for a person: the turn resumes.
        journal
            .ask("t-1", "call_b", &request("approval_b", "other.txt"), at)
            .await
            .unwrap();
    });
}

#[test]
fn a_call_allowed_before_the_crash_is_never_run_again() {
    let home = tempfile::tempdir().unwrap();
    let clock = clock();
    journal_allowed_without_result(home.path());
    let seen = resume_and_answer(home.path(), &clock, "approval_b", Some(ApprovalDecision::Allow));
    assert!(matches!(events(&seen).last(), Some(AgentEvent::AgentEnd { .. })));
    assert!(
        !sandbox_file(home.path(), "default-main", "memo.txt").exists(),
        "the call allowed before the crash did not run again"
    );
    assert_eq!(
        std::fs::read_to_string(sandbox_file(home.path(), "default-main", "other.txt")).unwrap(),
        "again",
        "the call still waiting was asked again and ran"
    );
    let results = tool_results(&history(home.path(), "default-main"));
    assert_eq!(results[0], INTERRUPTED_RESULT);
    assert!(!results[1].contains("interrupted"), "{results:?}");
}

#[test]
fn a_delegated_turn_waiting_for_a_person_is_closed_and_its_caller_goes_on() {
    let home = tempfile::tempdir().unwrap();
    let clock = clock();
    let _request = crash_while_waiting(home.path(), &clock, "카렌에게 물어봐");
    // Nothing waits for a person any more once KAREN's turn is closed: the
    // resumed turn of J.A.R.V.I.S. runs to its end on its own.
    resume_and_answer(home.path(), &clock, "", None);
    let main = history(home.path(), "default-main");
    assert_eq!(
        tool_results(&main),
        [INTERRUPTED_RESULT],
        "ask_agent got an error result"
    );
    assert!(
        matches!(messages(&main).last(), Some(Message::Assistant(a)) if a.content == "끝났어요."),
        "and the caller went on to its answer: {main:?}"
    );
    let peer = history(home.path(), "peer-main-karen");
    assert!(
        matches!(
            peer.last().map(|e| &e.body),
            Some(EntryBody::TurnEnd {
                stop_reason: StopReason::Interrupted,
                ..
            })
        ),
        "{peer:?}"
    );
    assert_eq!(
        tool_results(&peer),
        [INTERRUPTED_RESULT],
        "KAREN's call waiting for a person was closed, not run"
    );
}

#[test]
fn a_turn_cut_short_elsewhere_is_closed_as_interrupted_and_the_first_screen_is_told() {
    let home = tempfile::tempdir().unwrap();
    let clock = clock();
    let rt = runtime();
    rt.block_on(async {
        let store = JsonlSessionStore::open(home.path()).unwrap();
        store
            .create(NewSession::user(SessionId::new("s-1").unwrap(), "main"))
            .await
            .unwrap();
        drop(store);
        let (journal, _) = TurnJournal::open(home.path().join(TURN_JOURNAL_FILE)).unwrap();
        journal.begin(TurnBegin {
            turn_id: "t-9".into(),
            session_id: "s-1".into(),
            agent_id: "main".into(),
            at: jarvis_sdk::common::Timestamp::from_millis(1),
            prompt: "긴 계산 해 줘".into(),
            parent: None,
            resumable: true,
        });
        let call = Message::Assistant(jarvis_sdk::model::AssistantMessage {
            tool_calls: vec![jarvis_sdk::model::ToolCall {
                id: "call_1".into(),
                name: "list_dir".into(),
                arguments: json!({}),
            }],
            ..Default::default()
        });
        journal.step("t-9", &call, &LoopState::default());
    });
    drop(rt);
    let rt = runtime();
    rt.block_on(async {
        let (app, faux) = app_at(home.path(), MEMO, clock.clone()).await;
        let session = app.session(&SessionId::new("s-1").unwrap()).await.unwrap();
        assert!(!session.is_busy(), "an interrupted turn is not resumed");
        let note = session.take_interrupted().expect("the first screen is told");
        assert!(
            note.contains("긴 계산 해 줘") && note.contains("interrupted"),
            "{note}"
        );
        assert!(session.take_interrupted().is_none(), "once");
        assert_eq!(faux.request_count(), 0, "nothing was run again");
        let entries = app
            .store()
            .entries(&SessionId::new("s-1").unwrap())
            .await
            .unwrap();
        assert_eq!(entries.first().unwrap().body.turn_id(), Some("t-9"));
        assert_eq!(tool_results(&entries), [INTERRUPTED_RESULT]);
        assert!(matches!(
            entries.last().unwrap().body,
            EntryBody::TurnEnd {
                stop_reason: StopReason::Interrupted,
                ..
            }
        ));
        assert!(
            !messages(&entries)
                .iter()
                .any(|m| matches!(m, Message::Assistant(a) if a.tool_calls.is_empty())),
            "no answer is invented"
        );
    });
    drop(rt);
    // A second start finds nothing to close.
    let (_, pending) = TurnJournal::open(home.path().join(TURN_JOURNAL_FILE)).unwrap();
    assert!(pending.is_empty());
    assert_eq!(history(home.path(), "s-1").len(), 5, "closed once");
}

#[tokio::test(start_paused = true)]
async fn overlapping_turns_of_one_session_each_land_as_one_block() {
    let home = tempfile::tempdir().unwrap();
    let script = r#"
rules:
  - when: { last_role: user, last_user: "천천히" }
    reply: { delay_ms: 5000, text: "느린 답" }
  - when: { last_role: user, last_user: "빨리" }
    reply: { text: "빠른 답" }
fallback: { text: "세 번째 답" }
"#;
    let faux = Arc::new(FauxProvider::from_yaml(script).unwrap());
    let mut config = AppConfig::embedded(home.path()).with_provider(faux.clone());
    config.packs = vec![std::sync::Arc::new(HousingPack::in_memory())];
    config.agenda.model_judge = false;
    config.memory.enabled = false;
    config.dual = DualConfig {
        after: Some(Duration::from_secs(1)),
        ..DualConfig::default()
    };
    let app = build_app(config).await.unwrap();
    let id = SessionId::new("s-dual").unwrap();
    let session = app.open_or_create(&id, None).await.unwrap();
    let mut screen = Watching::attach(&session);
    let slow = session
        .prompt_dual("천천히 해 줘", PromptOptions::from(Caller::Local))
        .await
        .unwrap();
    assert!(matches!(slow, DualReply::Background { .. }));
    let quick = session
        .prompt_dual("빨리 해 줘", PromptOptions::from(Caller::Local))
        .await
        .unwrap();
    assert!(matches!(quick, DualReply::Done(_)));
    screen
        .until(|s| matches!(s, Seen::Event(AgentEvent::ProactiveMessage { text, .. }) if text == "느린 답"))
        .await;
    session.settled().await;

    let entries = app.store().entries(&id).await.unwrap();
    let blocks: Vec<Vec<String>> = entries
        .split_inclusive(|e| matches!(e.body, EntryBody::TurnEnd { .. }))
        .map(|block| {
            block
                .iter()
                .map(|e| match &e.body {
                    EntryBody::TurnStart { .. } => "start".to_owned(),
                    EntryBody::TurnEnd { .. } => "end".to_owned(),
                    EntryBody::Message { message } => match message {
                        Message::User(u) => u.content.clone(),
                        Message::Assistant(a) => a.content.clone(),
                        Message::Tool(t) => t.content.clone(),
                    },
                    other => format!("{other:?}"),
                })
                .collect()
        })
        .collect();
    assert_eq!(
        blocks,
        [
            vec!["start", "빨리 해 줘", "빠른 답", "end"],
            vec!["start", "천천히 해 줘", "느린 답", "end"],
        ],
        "each turn is contiguous; the background turn's block follows the turn that finished before it"
    );

    // The next turn sees both, in that order.
    session.prompt("다음", Caller::Local).await.unwrap();
    let request = faux.requests().pop().unwrap();
    let texts: Vec<String> = request
        .messages
        .iter()
        .map(|m| match m {
            Message::User(u) => u.content.clone(),
            Message::Assistant(a) => a.content.clone(),
            Message::Tool(t) => t.content.clone(),
        })
        .collect();
    assert_eq!(
        texts,
        ["빨리 해 줘", "빠른 답", "천천히 해 줘", "느린 답", "다음"]
    );
}

/// A store whose `sync` waits until the test lets it go.
#[derive(Debug)]
struct SlowSync {
    inner: MemorySessionStore,
    entered: tokio::sync::Notify,
    release: tokio::sync::Semaphore,
}

#[async_trait]
impl SessionStore for SlowSync {
    async fn create(&self, new: NewSession) -> Result<SessionMeta, SessionError> {
        self.inner.create(new).await
    }
    async fn get(&self, id: &SessionId) -> Result<Option<SessionMeta>, SessionError> {
        self.inner.get(id).await
    }
    async fn append(&self, id: &SessionId, entries: Vec<EntryBody>) -> Result<u64, SessionError> {
        self.inner.append(id, entries).await
    }
    async fn recent(&self, id: &SessionId, turns: usize) -> Result<Vec<SessionEntry>, SessionError> {
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
    async fn sync(&self, _id: &SessionId) -> Result<(), SessionError> {
        self.entered.notify_one();
        let _permit = self.release.acquire().await.expect("the semaphore stays open");
        Ok(())
    }
}

#[tokio::test]
async fn agent_end_goes_out_only_after_the_turn_is_synced() {
    let store = Arc::new(SlowSync {
        inner: MemorySessionStore::new(),
        entered: tokio::sync::Notify::new(),
        release: tokio::sync::Semaphore::new(0),
    });
    let id = SessionId::new("s").unwrap();
    store.create(NewSession::user(id.clone(), "main")).await.unwrap();
    let (screen, mut events) = jarvis_sdk::testing::ChannelAdapter::new();
    let faux = FauxProvider::from_yaml("fallback: { text: \"done\" }").unwrap();
    let harness = Harness::new(store.clone(), LoopContext::new(Arc::new(faux)).with_ui(screen));
    let turn = tokio::spawn({
        let (harness, id) = (harness.clone(), id.clone());
        async move { harness.run_turn(&id, "hi", &CancellationToken::new()).await }
    });
    store.entered.notified().await;
    let before: Vec<String> = events.drain().iter().map(|e| e.kind().to_owned()).collect();
    assert!(before.iter().any(|k| k == "message_update"), "{before:?}");
    assert!(
        !before.iter().any(|k| k == "agent_end"),
        "no agent_end while the block is not synced: {before:?}"
    );
    assert_eq!(
        store.inner.entries(&id).await.unwrap().len(),
        4,
        "the block is appended"
    );
    store.release.add_permits(1);
    turn.await.unwrap().unwrap();
    let after: Vec<String> = events.drain().iter().map(|e| e.kind().to_owned()).collect();
    assert_eq!(after, ["agent_end"]);
}
