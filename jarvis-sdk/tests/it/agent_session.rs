//! `AgentSession`: security → thinking → harness → loop, one turn at a time,
//! every screen seeing the same events, rejected input never reaching the model.

use async_trait::async_trait;
use jarvis_sdk::agent::{
    AgentEvent, ApprovalDecision, Harness, LoopContext, MemorySessionStore, NewSession, ScreenHub, SessionId,
    SessionKind, SessionStore, StopReason, ThinkingHook, ThinkingInput, ThinkingOutcome, ToolGate,
    ToolRegistry, ToolResult, UIAdapter,
};
use jarvis_sdk::common::{Extensions, SequentialIds};
use jarvis_sdk::model::FauxProvider;
use jarvis_sdk::testing::{FixedApprover, FnTool, RecordingAdapter};
use jarvis_sdk::turn::{
    AgentSession, AgentSessionParts, ApprovalBroker, Caller, LayeredApprovalRules, PromptOptions,
    SecurityPipeline, TurnError,
};
use std::sync::Arc;
use tokio::sync::Notify;

struct Built {
    session: Arc<AgentSession>,
    faux: Arc<FauxProvider>,
    store: Arc<MemorySessionStore>,
}

async fn build(script: &str, kind: SessionKind, tools: ToolRegistry) -> Built {
    let faux = Arc::new(FauxProvider::from_yaml(script).unwrap());
    let store = Arc::new(MemorySessionStore::new());
    let id = SessionId::new(if kind == SessionKind::Peer {
        "peer-main-karen"
    } else {
        "s1"
    })
    .unwrap();
    let agent = if kind == SessionKind::Peer {
        "karen"
    } else {
        "main"
    };
    let new = match kind {
        SessionKind::Peer => NewSession::peer(id.clone(), "main", "karen"),
        _ => NewSession::user(id.clone(), agent),
    };
    store.create(new).await.unwrap();
    let screens = ScreenHub::new();
    let home = std::env::temp_dir().join(format!("jarvis-agent-session-{}", std::process::id()));
    let broker = ApprovalBroker::new(
        id.as_str(),
        Arc::new(LayeredApprovalRules::new(home)),
        Arc::new(SequentialIds::default()),
    );
    let mut ctx = LoopContext::new(faux.clone())
        .with_tools(tools)
        .with_ui(Arc::new(screens.clone()))
        .with_gate(ToolGate::new().with_approver(Arc::new(broker.clone())));
    ctx.identity.agent_id = agent.into();
    let harness = Harness::new(store.clone(), ctx);
    let parts = AgentSessionParts::new(
        id,
        agent,
        kind,
        SecurityPipeline::default(),
        harness,
        screens,
        broker,
    );
    Built {
        session: Arc::new(AgentSession::new(parts)),
        faux,
        store,
    }
}

#[tokio::test]
async fn a_turn_reaches_every_attached_screen() {
    let b = build(
        "replies: [ { text: \"hello\", chunks: 2 } ]",
        SessionKind::User,
        ToolRegistry::new(),
    )
    .await;
    let (one, two) = (
        Arc::new(RecordingAdapter::new()),
        Arc::new(RecordingAdapter::new()),
    );
    let _a = b.session.attach(one.clone());
    let _b = b.session.attach(two.clone());
    let outcome = b.session.prompt("e\u{301} 안녕", Caller::Local).await.unwrap();
    assert_eq!(outcome.final_message.content, "hello");
    assert_eq!(one.events(), two.events());
    assert_eq!(one.text(), "hello");
    // The model got the NFC-normalised input, and the store recorded it.
    assert_eq!(b.faux.requests()[0].last_user_text(), Some("é 안녕"));
    let entries = b.store.entries(b.session.id()).await.unwrap();
    assert!(entries.iter().any(|e| {
        e.message()
            .is_some_and(|m| serde_json::to_string(m).unwrap().contains("é 안녕"))
    }));
}

#[tokio::test]
async fn a_rejected_input_never_reaches_the_model() {
    let b = build(
        "replies: [ { text: never } ]",
        SessionKind::User,
        ToolRegistry::new(),
    )
    .await;
    let screen = Arc::new(RecordingAdapter::new());
    let _a = b.session.attach(screen.clone());
    let err = b
        .session
        .prompt("<script>alert(1)</script>", Caller::Local)
        .await
        .unwrap_err();
    assert!(matches!(err, TurnError::Rejected(_)), "{err}");
    assert_eq!(b.faux.request_count(), 0);
    assert_eq!(screen.kinds(), ["input_rejected"]);
    assert!(
        b.store.entries(b.session.id()).await.unwrap().is_empty(),
        "nothing recorded"
    );
    assert!(!b.session.is_busy(), "a rejection frees the session");
}

#[tokio::test]
async fn people_cannot_prompt_in_a_peer_session_but_the_caller_agent_can() {
    let b = build(
        "replies: [ { text: ok } ]",
        SessionKind::Peer,
        ToolRegistry::new(),
    )
    .await;
    let err = b
        .session
        .prompt("hi", Caller::Web { token: None })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("read but not written"), "{err}");
    let ok = b
        .session
        .prompt(
            "hi",
            Caller::Peer {
                agent_id: "main".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(ok.final_message.content, "ok");
}

/// A tool that waits until the test lets it go (or the turn is aborted).
struct Waiting {
    entered: Arc<Notify>,
    release: Arc<Notify>,
}

#[async_trait]
impl jarvis_sdk::agent::Tool for Waiting {
    fn name(&self) -> &str {
        "wait"
    }
    fn description(&self) -> &str {
        "waits"
    }
    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({"type": "object"})
    }
    async fn call(
        &self,
        _a: serde_json::Value,
        ctx: &jarvis_sdk::agent::ToolContext,
    ) -> Result<ToolResult, jarvis_sdk::agent::ToolError> {
        self.entered.notify_one();
        tokio::select! {
            _ = self.release.notified() => Ok(ToolResult::ok("released")),
            _ = ctx.cancel.cancelled() => Err(jarvis_sdk::agent::ToolError::Cancelled),
        }
    }
}

#[tokio::test]
async fn one_turn_at_a_time_and_abort_stops_it() {
    let (entered, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let mut tools = ToolRegistry::new();
    tools
        .register(Arc::new(Waiting {
            entered: entered.clone(),
            release: release.clone(),
        }))
        .unwrap();
    let b = build(
        "replies: [ { tool_calls: [ { name: wait } ] }, { text: done } ]",
        SessionKind::User,
        tools,
    )
    .await;
    let session = b.session.clone();
    let turn = tokio::spawn(async move { session.prompt("go", Caller::Local).await });
    entered.notified().await;
    assert!(b.session.is_busy());
    let busy = b.session.prompt("again", Caller::Local).await.unwrap_err();
    assert!(busy.is_busy(), "{busy}");
    assert!(b.session.abort());
    let outcome = turn.await.unwrap().unwrap();
    assert_eq!(outcome.final_message.stop_reason, StopReason::Aborted);
    assert!(!b.session.is_busy());
    assert!(!b.session.abort(), "nothing left to abort");
}

struct Thinker;

#[async_trait]
impl ThinkingHook for Thinker {
    async fn before_turn(&self, input: &ThinkingInput<'_>, _ui: &dyn UIAdapter) -> ThinkingOutcome {
        ThinkingOutcome {
            note: Some(format!("(thought about {:?})", input.prompt)),
            ..ThinkingOutcome::default()
        }
    }
}

#[tokio::test]
async fn options_carry_an_instruction_extensions_and_another_sessions_approver() {
    let mut tools = ToolRegistry::new();
    tools
        .register(Arc::new(
            FnTool::new("write_file", |_| Ok(ToolResult::ok("written"))).asking_approval(),
        ))
        .unwrap();
    let b = build(
        "replies: [ { tool_calls: [ { name: write_file, arguments: { path: a } } ] }, { text: done } ]",
        SessionKind::Peer,
        tools,
    )
    .await;
    let own_screen = Arc::new(RecordingAdapter::new());
    let _a = b.session.attach(own_screen.clone());
    // The delegating session's approver answers; the peer session's own screens are never asked.
    let caller_approver = Arc::new(FixedApprover::new(ApprovalDecision::Allow));
    let mut options = PromptOptions::from(Caller::Peer {
        agent_id: "main".into(),
    });
    options.turn_instruction = Some("RULE".into());
    options.extensions = Extensions::new().with(42u8);
    options.approver = Some(caller_approver.clone());
    let outcome = b.session.prompt_with("please", options).await.unwrap();
    assert_eq!(outcome.final_message.content, "done");
    assert_eq!(caller_approver.asked(), ["write_file"]);
    assert!(own_screen.approval_requests().is_empty());
    assert_eq!(b.faux.requests()[0].instruction(), Some("RULE"));
    assert!(
        own_screen.kinds().iter().any(|k| k == "agent_end"),
        "events still go to the session's screens"
    );
    let _ = AgentEvent::InputRejected {
        message: String::new(),
    };
}

#[tokio::test]
async fn the_thinking_hook_runs_between_security_and_the_harness() {
    let b = build(
        "replies: [ { text: ok } ]",
        SessionKind::User,
        ToolRegistry::new(),
    )
    .await;
    let parts_session = {
        // Rebuild with a thinking hook.
        let store = b.store.clone();
        let screens = ScreenHub::new();
        let mut ctx = LoopContext::new(b.faux.clone()).with_ui(Arc::new(screens.clone()));
        ctx.identity.agent_id = "main".into();
        let broker = ApprovalBroker::new(
            "s1",
            Arc::new(LayeredApprovalRules::new(std::env::temp_dir())),
            Arc::new(SequentialIds::default()),
        );
        AgentSession::new(
            AgentSessionParts::new(
                SessionId::new("s1").unwrap(),
                "main",
                SessionKind::User,
                SecurityPipeline::default(),
                Harness::new(store, ctx),
                screens,
                broker,
            )
            .with_thinking(Arc::new(Thinker)),
        )
    };
    parts_session.prompt("hello", Caller::Local).await.unwrap();
    assert_eq!(
        b.faux.requests()[0].instruction(),
        Some("(thought about \"hello\")")
    );
    // A rejected input never reaches the thinking hook either.
    assert!(parts_session.prompt("", Caller::Local).await.is_err());
    assert_eq!(b.faux.request_count(), 1);
}

/// On the first `agent_end`, starts the next prompt right there (polled
/// once, before the first turn is recorded), then lets it finish on a task.
#[derive(Default)]
struct NextOnEnd {
    session: std::sync::Mutex<Option<Arc<AgentSession>>>,
    first_poll: std::sync::Mutex<Option<&'static str>>,
    next:
        std::sync::Mutex<Option<tokio::task::JoinHandle<Result<jarvis_sdk::agent::LoopOutcome, TurnError>>>>,
}

impl UIAdapter for NextOnEnd {
    fn on_event(&self, event: &AgentEvent) -> std::ops::ControlFlow<()> {
        if let AgentEvent::AgentEnd { .. } = event
            && let Some(session) = self.session.lock().unwrap().take()
        {
            let mut next = Box::pin(async move { session.prompt("next", Caller::Local).await });
            let mut cx = std::task::Context::from_waker(futures::task::noop_waker_ref());
            match next.as_mut().poll(&mut cx) {
                std::task::Poll::Ready(Err(e)) if e.is_busy() => {
                    *self.first_poll.lock().unwrap() = Some("busy")
                }
                std::task::Poll::Ready(_) => *self.first_poll.lock().unwrap() = Some("ready"),
                std::task::Poll::Pending => {
                    *self.first_poll.lock().unwrap() = Some("waiting");
                    *self.next.lock().unwrap() = Some(tokio::spawn(next));
                }
            }
        }
        std::ops::ControlFlow::Continue(())
    }
}

#[tokio::test]
async fn a_prompt_sent_on_agent_end_waits_for_the_recording_and_runs() {
    let b = build(
        "replies: [ { text: \"first\" }, { text: \"second\" } ]",
        SessionKind::User,
        ToolRegistry::new(),
    )
    .await;
    let screen = Arc::new(NextOnEnd::default());
    *screen.session.lock().unwrap() = Some(b.session.clone());
    let _a = b.session.attach(screen.clone());
    let first = b.session.prompt("go", Caller::Local).await.unwrap();
    assert_eq!(first.final_message.content, "first");
    assert_eq!(
        *screen.first_poll.lock().unwrap(),
        Some("waiting"),
        "not refused as busy"
    );
    let next = screen.next.lock().unwrap().take().unwrap();
    let second = next.await.unwrap().unwrap();
    assert_eq!(second.final_message.content, "second");
    // Both turns are in the history, in order.
    let entries = b.store.entries(&SessionId::new("s1").unwrap()).await.unwrap();
    let said: Vec<String> = entries
        .iter()
        .filter_map(|e| {
            e.message()
                .map(|m| serde_json::to_value(m).unwrap()["content"].to_string())
        })
        .collect();
    assert_eq!(said.len(), 4, "{said:?}");
    assert!(
        said[1].contains("first") && said[3].contains("second"),
        "{said:?}"
    );
}

/// Notes, when `agent_end` arrives, whether the session still counts as
/// busy and as answering.
#[derive(Default)]
struct StateOnEnd {
    session: std::sync::Mutex<Option<Arc<AgentSession>>>,
    seen: std::sync::Mutex<Option<(bool, bool)>>,
}

impl UIAdapter for StateOnEnd {
    fn on_event(&self, event: &AgentEvent) -> std::ops::ControlFlow<()> {
        if let AgentEvent::AgentEnd { .. } = event
            && let Some(session) = self.session.lock().unwrap().take()
        {
            *self.seen.lock().unwrap() = Some((session.is_busy(), session.is_answering()));
        }
        std::ops::ControlFlow::Continue(())
    }
}

#[tokio::test]
async fn a_turn_that_sent_agent_end_is_no_longer_answering_while_it_is_recorded() {
    let b = build(
        "replies: [ { text: \"first\" } ]",
        SessionKind::User,
        ToolRegistry::new(),
    )
    .await;
    let screen = Arc::new(StateOnEnd::default());
    *screen.session.lock().unwrap() = Some(b.session.clone());
    let _a = b.session.attach(screen.clone());
    assert!(!b.session.is_answering());
    b.session.prompt("go", Caller::Local).await.unwrap();
    // Still busy (being recorded), but a screen attaching now shows it idle.
    assert_eq!(*screen.seen.lock().unwrap(), Some((true, false)));
    assert!(!b.session.is_busy() && !b.session.is_answering());
}
