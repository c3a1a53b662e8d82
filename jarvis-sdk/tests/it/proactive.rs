//! The reflection daemon in the assembled app (SPEC.md §11.5, R-REFL-1,
//! R-DEF-8): a proactive agent's session is reminded of its due promise, an
//! agent with `proactive: false` says nothing, no message interrupts a
//! running turn, the per-session rate limit holds, and dismissals widen an
//! agent's gap while answers do not.

use jarvis_pack_housing::{HousingPack, KAREN_DEFINITION};
use jarvis_sdk::agent::{AgentEvent, EntryBody, LoopFilter, LoopKind, OpenLoop, ProactiveKind, SessionId};
use jarvis_sdk::app::{AppAssembly, AppConfig, build_app};
use jarvis_sdk::common::{ManualClock, Timestamp};
use jarvis_sdk::initiative::{OutboxItem, Reaction, reminder_id};
use jarvis_sdk::model::FauxProvider;
use jarvis_sdk::testing::{ChannelAdapter, EventStream};
use jarvis_sdk::turn::{AgentSession, Caller};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

const QUIET: &str = "name: QUIET\nproactive: false\n";
const MIN_GAP: Duration = Duration::from_secs(30 * 60);
/// Long, so that only the test about ignoring sees messages ignored.
const IGNORE_AFTER: Duration = Duration::from_secs(30 * 24 * 3600);

struct Fixture {
    app: AppAssembly,
    clock: Arc<ManualClock>,
    _home: tempfile::TempDir,
}

async fn fixture(script: &str) -> Fixture {
    let home = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
    ));
    let faux = Arc::new(FauxProvider::from_yaml(script).unwrap());
    let mut config = AppConfig::embedded(home.path())
        .with_definition("karen", KAREN_DEFINITION)
        .with_definition("quiet", QUIET)
        .with_provider(faux);
    config.packs = vec![std::sync::Arc::new(HousingPack::in_memory())];
    config.agenda.model_judge = false;
    config.reflection.daemon.min_gap = MIN_GAP;
    config.reflection.daemon.ignore_after = IGNORE_AFTER;

    config.clock = clock.clone();
    Fixture {
        app: build_app(config).await.unwrap(),
        clock,
        _home: home,
    }
}

impl Fixture {
    fn now(&self) -> Timestamp {
        Timestamp::from_system_time(jarvis_sdk::common::Clock::now(self.clock.as_ref()))
    }

    /// An open session of `agent` with a screen attached.
    async fn session(
        &self,
        agent: &str,
    ) -> (
        Arc<AgentSession>,
        EventStream,
        jarvis_sdk::turn::SessionAttachment,
    ) {
        let meta = self.app.create_session(Some(agent)).await.unwrap();
        let session = self.app.session(&meta.id).await.unwrap();
        let (screen, events) = ChannelAdapter::new();
        let attachment = session.attach(screen);
        (session, events, attachment)
    }

    /// A promise of `session`, due a minute ago.
    async fn due_loop(&self, session: &AgentSession, id: &str, kind: LoopKind) {
        let now = self.now();
        self.app
            .open_loops()
            .open(OpenLoop {
                id: id.to_owned(),
                session_id: session.id().to_string(),
                agent_id: session.agent_id().to_owned(),
                text: format!("{id}: 청약 서류 챙기기"),
                kind,
                due: Some(Timestamp::from_millis(now.as_millis() - 60_000)),
                condition: None,
                created_at: Timestamp::from_millis(now.as_millis() - 3_600_000),
                closed_at: None,
                reminded_at: None,
            })
            .await
            .unwrap();
    }

    /// Queues `text` from `agent` for session `session_id`.
    async fn queue(&self, session_id: &str, agent: &str, text: &str) {
        let item = OutboxItem {
            message_id: format!("q-{session_id}-{text}"),
            session_id: session_id.to_owned(),
            agent_id: agent.to_owned(),
            kind: ProactiveKind::Proactive,
            text: text.to_owned(),
            at: self.now(),
            meta: serde_json::Value::Null,
        };
        assert!(self.app.proactive().enqueue(item).await.unwrap());
    }

    /// The proactive entries recorded in `session_id`: (message id, text).
    async fn recorded(&self, session_id: &str) -> Vec<(String, String)> {
        let id = SessionId::new(session_id).unwrap();
        match self.app.store().get(&id).await.unwrap() {
            None => Vec::new(),
            Some(_) => self
                .app
                .store()
                .entries(&id)
                .await
                .unwrap()
                .into_iter()
                .filter_map(|e| match e.body {
                    EntryBody::Proactive { message_id, text, .. } => Some((message_id, text)),
                    _ => None,
                })
                .collect(),
        }
    }
}

fn proactive_texts(events: &mut EventStream) -> Vec<(String, String)> {
    events.drain_proactive(ProactiveKind::Proactive)
}

const FALLBACK: &str = "fallback: { text: \"네.\" }\n";

#[tokio::test]
async fn a_karen_session_is_reminded_of_its_due_promise_and_the_request_closes() {
    let f = fixture(FALLBACK).await;
    let (karen, mut events, _a) = f.session("karen").await;
    f.due_loop(&karen, "loop-1", LoopKind::Request).await;

    let report = f.app.proactive().tick().await;
    assert_eq!(report.sent.len(), 1, "{report:?}");
    assert_eq!(report.sent[0].0, karen.id().as_str());
    let sent = proactive_texts(&mut events);
    assert_eq!(sent.len(), 1);
    assert!(sent[0].0.contains("loop-1: 청약 서류 챙기기"), "{sent:?}");
    assert_eq!(
        sent[0].1, report.sent[0].1,
        "the screen gets the message id the daemon tracks"
    );
    assert_eq!(
        f.recorded(karen.id().as_str()).await,
        vec![(sent[0].1.clone(), sent[0].0.clone())],
        "the reminder is in the session's history, recorded before it was shown"
    );

    // A request to be reminded is done once reminded: it leaves the AGENDA.
    let open = f
        .app
        .open_loops()
        .list(&LoopFilter {
            open_only: true,
            ..LoopFilter::default()
        })
        .await
        .unwrap();
    assert!(open.is_empty(), "{open:?}");
    // Nothing more to say, however long one waits.
    f.clock.advance(MIN_GAP * 10);
    assert!(f.app.proactive().tick().await.sent.is_empty());
}

#[tokio::test]
async fn an_agent_with_proactive_false_gets_the_record_never_the_push() {
    let f = fixture(FALLBACK).await;
    let (quiet, mut events, _a) = f.session("quiet").await;
    f.due_loop(&quiet, "loop-q", LoopKind::Request).await;
    f.queue(quiet.id().as_str(), "quiet", "새 공고가 있어요").await;

    let report = f.app.proactive().tick().await;
    assert!(report.sent.is_empty(), "{report:?}");
    assert_eq!(
        (report.not_proactive, report.recorded.len()),
        (2, 2),
        "{report:?}"
    );
    assert!(proactive_texts(&mut events).is_empty(), "nothing was pushed");
    assert_eq!(
        f.app.proactive().queued("quiet").await,
        0,
        "the queued message is delivered"
    );
    let recorded = f.recorded(quiet.id().as_str()).await;
    assert_eq!(recorded.len(), 2, "{recorded:?}");
    assert_eq!(recorded[0].1, "새 공고가 있어요");
    assert!(recorded[1].1.contains("loop-q"));
}

const DELEGATE: &str = r#"
rules:
  - when: { agent: main, last_role: user }
    reply: { tool_calls: [ { name: ask_agent, arguments: { agent: karen, request: "공고 찾아 줘" } } ] }
  - when: { agent: karen, last_role: user }
    reply: { text: "공고 없음" }
  - when: { agent: main, last_role: tool }
    reply: { text: "없대요." }
"#;

#[tokio::test]
async fn peer_sessions_are_never_spoken_in() {
    let f = fixture(DELEGATE).await;
    let (main, _events, _a) = f.session("main").await;
    main.prompt("카렌에게 물어봐", Caller::Local).await.unwrap();
    let peer = f
        .app
        .open_sessions()
        .into_iter()
        .find(|s| s.id().as_str().starts_with("peer-"))
        .expect("the delegation opened KAREN's peer session");
    assert_eq!(peer.agent_id(), "karen");
    f.queue("default-karen", "karen", "새 공고가 있어요").await;
    let report = f.app.proactive().tick().await;
    assert!(
        report.sent.is_empty(),
        "only a peer session of KAREN is open: {report:?}"
    );
    assert!(f.recorded(peer.id().as_str()).await.is_empty());
    assert_eq!(
        f.recorded("default-karen").await.len(),
        1,
        "the message is recorded in KAREN's own session for a screen to read"
    );
}

#[tokio::test(start_paused = true)]
async fn no_message_interrupts_a_running_turn() {
    let f = fixture("fallback: { delay_ms: 60000, text: \"다 찾았어요.\" }\n").await;
    let (karen, mut events, _a) = f.session("karen").await;
    f.due_loop(&karen, "loop-1", LoopKind::Promise).await;

    let turn = tokio::spawn({
        let karen = karen.clone();
        async move { karen.prompt("공고 찾아 줘", Caller::Local).await }
    });
    events
        .next_matching(|e| matches!(e, AgentEvent::AgentStart { .. }))
        .await;
    assert!(karen.is_busy());
    let report = f.app.proactive().tick().await;
    assert_eq!((report.busy, report.sent.len()), (1, 0), "{report:?}");

    turn.await.unwrap().unwrap();
    karen.settled().await;
    let after: Vec<AgentEvent> = events.drain();
    let kinds: Vec<&str> = after.iter().map(AgentEvent::kind).collect();
    assert!(
        !kinds.contains(&"proactive_message"),
        "nothing was said during the turn: {kinds:?}"
    );
    let report = f.app.proactive().tick().await;
    assert_eq!(
        report.sent.len(),
        1,
        "the reminder goes out once the turn is over: {report:?}"
    );
}

#[tokio::test]
async fn the_rate_limit_holds_per_session() {
    let f = fixture(FALLBACK).await;
    let (karen, mut events, _a) = f.session("karen").await;
    f.due_loop(&karen, "loop-1", LoopKind::Promise).await;
    f.due_loop(&karen, "loop-2", LoopKind::Promise).await;
    f.queue(karen.id().as_str(), "karen", "새 공고: 강서 행복주택")
        .await;

    assert_eq!(f.app.proactive().tick().await.sent.len(), 1);
    let limited = f.app.proactive().tick().await;
    assert_eq!(
        (limited.sent.len(), limited.rate_limited),
        (0, 2),
        "both reminders wait: {limited:?}"
    );
    f.clock.advance(MIN_GAP - Duration::from_secs(1));
    assert!(
        f.app.proactive().tick().await.sent.is_empty(),
        "one second short of the gap"
    );
    f.clock.advance(Duration::from_secs(1));
    assert_eq!(f.app.proactive().tick().await.sent.len(), 1);
    f.clock.advance(MIN_GAP);
    assert_eq!(f.app.proactive().tick().await.sent.len(), 1);
    f.clock.advance(MIN_GAP);
    assert!(
        f.app.proactive().tick().await.sent.is_empty(),
        "everything has been said"
    );

    let texts: Vec<String> = proactive_texts(&mut events).into_iter().map(|(t, _)| t).collect();
    assert_eq!(texts.len(), 3);
    assert_eq!(texts[0], "새 공고: 강서 행복주택", "queued messages go first");
    assert!(
        texts[1].contains("loop-1") && texts[2].contains("loop-2"),
        "{texts:?}"
    );

    // Another session has its own gap.
    let (other, mut other_events, _b) = f.session("karen").await;
    f.due_loop(&other, "loop-3", LoopKind::Promise).await;
    assert_eq!(f.app.proactive().tick().await.sent.len(), 1);
    assert_eq!(proactive_texts(&mut other_events).len(), 1);
}

/// Sends one message to a fresh session of `agent` and reacts with `reaction`.
async fn react(f: &Fixture, agent: &str, n: usize, reaction: Reaction) {
    let (session, mut events, _a) = f.session(agent).await;
    f.due_loop(&session, &format!("r-{agent}-{n}"), LoopKind::Promise)
        .await;
    let report = f.app.proactive().tick().await;
    let (_, message_id) = report
        .sent
        .iter()
        .find(|(id, _)| id == session.id().as_str())
        .expect("a message to the fresh session");
    assert!(f.app.proactive_feedback(message_id, reaction));
    assert!(
        !f.app.proactive_feedback(message_id, reaction),
        "a message counts once"
    );
    assert_eq!(proactive_texts(&mut events).len(), 1);
}

#[tokio::test]
async fn dismissals_lower_the_rate_of_that_agent_only() {
    let f = fixture(FALLBACK).await;
    let daemon = f.app.proactive();
    let karen = f.app.registry().get("karen").unwrap();
    let main = f.app.registry().get("main").unwrap();
    let neutral = daemon.gap(karen.feedback.propensity());
    assert_eq!(neutral, MIN_GAP);

    for n in 0..3 {
        react(&f, "karen", n, Reaction::Dismissed).await;
        react(&f, "main", n, Reaction::Answered).await;
    }
    let karen_gap = daemon.gap(karen.feedback.propensity());
    assert!(karen_gap > MIN_GAP * 2, "dismissed three times: {karen_gap:?}");
    assert!(
        daemon.gap(main.feedback.propensity()) <= MIN_GAP,
        "answered agents keep their pace"
    );

    // The wider gap is what the daemon applies: a dismissed agent's session
    // waits where a neutral one would speak.
    let (session, mut events, _a) = f.session("karen").await;
    f.due_loop(&session, "k-1", LoopKind::Promise).await;
    f.due_loop(&session, "k-2", LoopKind::Promise).await;
    assert_eq!(daemon.tick().await.sent.len(), 1);
    f.clock.advance(MIN_GAP);
    let report = daemon.tick().await;
    assert!(
        report.sent.iter().all(|(id, _)| id != session.id().as_str()),
        "a neutral gap is not enough after dismissals: {report:?}"
    );
    f.clock.advance(karen_gap - MIN_GAP);
    let report = daemon.tick().await;
    assert!(
        report.sent.iter().any(|(id, _)| id == session.id().as_str()),
        "{report:?}"
    );
    assert_eq!(proactive_texts(&mut events).len(), 2);
}

#[tokio::test]
async fn a_message_nobody_reacts_to_counts_as_ignored() {
    let f = fixture(FALLBACK).await;
    let karen = f.app.registry().get("karen").unwrap();
    let (session, _events, _a) = f.session("karen").await;
    f.due_loop(&session, "loop-1", LoopKind::Promise).await;
    let report = f.app.proactive().tick().await;
    let message_id = report.sent[0].1.clone();
    let before = karen.feedback.propensity();
    f.clock.advance(IGNORE_AFTER - Duration::from_secs(1));
    f.app.proactive().tick().await;
    assert_eq!(karen.feedback.propensity(), before, "not ignored yet");
    f.clock.advance(Duration::from_secs(1));
    f.app.proactive().tick().await;
    assert!(
        karen.feedback.propensity() < before,
        "ignored lowers the propensity"
    );
    assert!(
        !f.app.proactive_feedback(&message_id, Reaction::Answered),
        "a late reaction to an ignored message no longer counts"
    );
}

#[test]
fn the_daemon_and_the_dual_threshold_come_from_the_environment() {
    let lookup = |vars: &'static [(&'static str, &'static str)]| {
        AppConfig::from_lookup(move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()))
    };
    let c = lookup(&[("JARVIS_HOME", "/tmp/x")]).unwrap();
    assert!(c.reflection.enabled);
    assert_eq!(c.reflection.daemon.min_gap, Duration::from_secs(1800));
    assert_eq!(c.dual.after, Some(Duration::from_secs(20)));
    let c = lookup(&[
        ("JARVIS_HOME", "/tmp/x"),
        ("JARVIS_REFLECTION__ENABLED", "false"),
        ("JARVIS_REFLECTION__INTERVAL_SECS", "5"),
        ("JARVIS_REFLECTION__MIN_GAP_SECS", "600"),
        ("JARVIS_DUAL__AFTER_SECS", "0"),
    ])
    .unwrap();
    assert!(!c.reflection.enabled);
    assert_eq!(c.reflection.daemon.interval, Duration::from_secs(5));
    assert_eq!(c.reflection.daemon.min_gap, Duration::from_secs(600));
    assert_eq!(
        c.dual.after, None,
        "0 leaves only the thought frame to send a turn back"
    );
    let e = lookup(&[
        ("JARVIS_HOME", "/tmp/x"),
        ("JARVIS_REFLECTION__MIN_GAP_SECS", "soon"),
    ])
    .unwrap_err();
    assert!(
        e.to_string().contains("JARVIS_REFLECTION__MIN_GAP_SECS=soon"),
        "{e}"
    );
}

#[tokio::test]
async fn the_daemon_starts_only_when_enabled_and_everything_stops_on_cancel() {
    let home = tempfile::tempdir().unwrap();
    let mut config =
        AppConfig::embedded(home.path()).with_provider(Arc::new(FauxProvider::from_yaml(FALLBACK).unwrap()));
    config.reflection.enabled = false;
    let app = build_app(config).await.unwrap();
    let cancel = tokio_util::sync::CancellationToken::new();
    assert_eq!(
        app.spawn_background(cancel.clone()).len(),
        1,
        "the scheduler alone"
    );
    drop(app);

    let home = tempfile::tempdir().unwrap();
    let config =
        AppConfig::embedded(home.path()).with_provider(Arc::new(FauxProvider::from_yaml(FALLBACK).unwrap()));
    let app = build_app(config).await.unwrap();
    let tasks = app.spawn_background(cancel.clone());
    assert_eq!(tasks.len(), 2, "the scheduler and the reflection daemon");
    cancel.cancel();
    for task in tasks {
        task.await.unwrap();
    }
}

/// An app over `home` with `clock`, keeping its sessions and loops in files
/// there (so a second app on the same home is a restart).
async fn app_at(home: &std::path::Path, clock: Arc<ManualClock>) -> AppAssembly {
    let faux = Arc::new(FauxProvider::from_yaml(FALLBACK).unwrap());
    let mut config = AppConfig::embedded(home)
        .with_definition("karen", KAREN_DEFINITION)
        .with_provider(faux);
    config.store = jarvis_sdk::app::StoreBackend::Jsonl;
    config.durability = jarvis_sdk::agent::Durability::Never;
    config.packs = vec![std::sync::Arc::new(HousingPack::in_memory())];
    config.agenda.model_judge = false;
    config.reflection.daemon.min_gap = Duration::ZERO;
    config.clock = clock;
    match build_app(config).await {
        Ok(app) => app,
        Err(e) => panic!("build_app: {e}"),
    }
}

#[tokio::test]
async fn a_reminder_is_recorded_once_whatever_restarts_happen() {
    let home = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
    ));
    let app = app_at(home.path(), clock.clone()).await;
    let meta = app.create_session(Some("karen")).await.unwrap();
    let now = Timestamp::from_system_time(jarvis_sdk::common::Clock::now(clock.as_ref()));
    let due = OpenLoop {
        id: "loop-1".into(),
        session_id: meta.id.to_string(),
        agent_id: "karen".into(),
        text: "서류 챙기기".into(),
        kind: LoopKind::Promise,
        due: Some(Timestamp::from_millis(now.as_millis() - 1_000)),
        condition: None,
        created_at: Timestamp::from_millis(now.as_millis() - 60_000),
        closed_at: None,
        reminded_at: None,
    };
    app.open_loops().open(due.clone()).await.unwrap();
    // A crash came between recording the reminder and marking the loop:
    // the record is there, the mark is not.
    let entry = EntryBody::Proactive {
        proactive_kind: ProactiveKind::Proactive,
        message_id: reminder_id(&due),
        text: "잊지 않으셨죠? (A reminder:) 서류 챙기기".into(),
    };
    assert!(app.store().append_once(&meta.id, entry.clone()).await.unwrap());
    assert!(
        !app.store().append_once(&meta.id, entry).await.unwrap(),
        "a message id is recorded once"
    );
    let report = app.proactive().tick().await;
    assert!(report.recorded.is_empty(), "{report:?}");
    let marked = app
        .open_loops()
        .list(&LoopFilter::default())
        .await
        .unwrap()
        .into_iter()
        .find(|l| l.id == "loop-1")
        .unwrap();
    assert!(marked.reminded_at.is_some(), "the tick completed the mark");
    drop(app);

    // After a restart nothing is said again.
    let app = app_at(home.path(), clock.clone()).await;
    clock.advance(Duration::from_secs(3600));
    let report = app.proactive().tick().await;
    assert!(report.recorded.is_empty() && report.sent.is_empty(), "{report:?}");
    let entries = app.store().entries(&meta.id).await.unwrap();
    let reminders = entries
        .iter()
        .filter(|e| matches!(e.body, EntryBody::Proactive { .. }))
        .count();
    assert_eq!(reminders, 1);
}

#[tokio::test]
async fn a_queued_message_survives_a_restart_and_is_recorded_once() {
    let home = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
    ));
    let item = OutboxItem {
        message_id: "watch-w1-abc".into(),
        session_id: "default-karen".into(),
        agent_id: "karen".into(),
        kind: ProactiveKind::Proactive,
        text: "새 공고: 강서 행복주택".into(),
        at: Timestamp::from_millis(1),
        meta: serde_json::Value::Null,
    };
    {
        let app = app_at(home.path(), clock.clone()).await;
        assert!(app.proactive().enqueue(item.clone()).await.unwrap());
        assert!(
            !app.proactive().enqueue(item.clone()).await.unwrap(),
            "queued once"
        );
        assert_eq!(app.proactive().queued("karen").await, 1);
    }
    let app = app_at(home.path(), clock.clone()).await;
    assert_eq!(app.proactive().queued("karen").await, 1, "the outbox is durable");
    let report = app.proactive().tick().await;
    assert_eq!(report.recorded.len(), 1, "{report:?}");
    // The producer repeats itself (it crashed before it knew): the session
    // records the id once.
    app.proactive().enqueue(item).await.unwrap();
    let report = app.proactive().tick().await;
    assert!(report.recorded.is_empty(), "{report:?}");
    assert_eq!(app.proactive().queued("karen").await, 0);
    let id = SessionId::new("default-karen").unwrap();
    let recorded = app
        .store()
        .entries(&id)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| matches!(e.body, EntryBody::Proactive { .. }))
        .count();
    assert_eq!(recorded, 1);
}
