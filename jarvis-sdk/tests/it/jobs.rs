//! Scheduled jobs in the assembled app (SPEC.md §11.4, R-SCHED-1..3):
//! `/schedule` makes a job for the session's agent, the job runs as that
//! agent in its own session and its answer reaches that agent's open
//! screens, the AGENDA lists it with the agent's label, and `housing_watch`
//! results reach KAREN's session through the reflection daemon.

use jarvis_pack_housing::{HousingConfig, HousingPack, KAREN_DEFINITION};
use jarvis_sdk::agent::{ProactiveKind, SessionId};
use jarvis_sdk::app::{AppAssembly, AppConfig, build_app};
use jarvis_sdk::common::{Clock, ManualClock, Timestamp};
use jarvis_sdk::initiative::{AgendaKind, RunOutcome};
use jarvis_sdk::model::FauxProvider;
use jarvis_sdk::testing::{ChannelAdapter, EventStream};
use jarvis_sdk::turn::Caller;
use std::sync::Arc;
use std::time::Duration;

const SCRIPT: &str = r#"
rules:
  - when: { agent: karen, last_user: "공고 요약" }
    reply: { text: "이번 주 새 공고는 두 건입니다." }
  - when: { agent: main, last_user: "메모", last_role: user }
    reply: { tool_calls: [ { name: write_file, arguments: { path: "daily.txt", content: "오늘의 메모" } } ] }
  - when: { agent: main, last_role: tool }
    reply: { text: "메모를 남겼어요." }
fallback: { text: "네." }
"#;

struct Fixture {
    app: AppAssembly,
    clock: Arc<ManualClock>,
    faux: Arc<FauxProvider>,
    _home: tempfile::TempDir,
}

/// 2026-11-30 08:00 in Seoul.
fn monday_morning() -> Timestamp {
    Timestamp::parse_rfc3339("2026-11-29T23:00:00Z").unwrap()
}

async fn fixture(housing: HousingConfig) -> Fixture {
    let home = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(monday_morning().to_system_time()));
    let faux = Arc::new(FauxProvider::from_yaml(SCRIPT).unwrap());
    let mut config = AppConfig::embedded(home.path())
        .with_definition("karen", KAREN_DEFINITION)
        .with_provider(faux.clone());
    config.packs = vec![Arc::new(HousingPack::with_config(housing))];
    config.agenda.model_judge = false;
    config.clock = clock.clone();
    Fixture {
        app: build_app(config).await.unwrap(),
        clock,
        faux,
        _home: home,
    }
}

impl Fixture {
    async fn open(
        &self,
        agent: &str,
    ) -> (
        Arc<jarvis_sdk::turn::AgentSession>,
        EventStream,
        jarvis_sdk::turn::SessionAttachment,
    ) {
        let meta = self.app.default_session(agent).await.unwrap();
        let session = self.app.session(&meta.id).await.unwrap();
        let (screen, events) = ChannelAdapter::new();
        let attachment = session.attach(screen);
        (session, events, attachment)
    }

    fn advance_to(&self, at: Timestamp) {
        let now = Timestamp::from_system_time(self.clock.now());
        self.clock
            .advance(Duration::from_millis((at.as_millis() - now.as_millis()) as u64));
    }
}

fn answers(events: &mut EventStream) -> Vec<String> {
    events
        .drain_proactive(ProactiveKind::Answer)
        .into_iter()
        .map(|(text, _)| text)
        .collect()
}

#[tokio::test]
async fn a_job_scheduled_in_karens_session_runs_as_karen_and_answers_on_her_screens() {
    let f = fixture(HousingConfig::in_memory()).await;
    let (karen, mut karen_events, _k) = f.open("karen").await;
    let (_main, mut main_events, _m) = f.open("main").await;

    let reply = karen
        .prompt("/schedule 매일 9시 공고 요약해 줘", Caller::Local)
        .await
        .unwrap();
    let content = reply.final_message.content;
    assert!(content.contains("[karen]"), "{content}");
    let jobs = f.app.scheduler().jobs();
    let job = jobs
        .iter()
        .find(|j| !j.job.is_builtin())
        .expect("the job was created")
        .job
        .clone();
    assert_eq!(job.agent, "karen", "the job gets the session's agent (R-SCHED-2)");
    assert!(
        f.faux.requests().is_empty(),
        "the command never reached the model"
    );
    let file = f.app.home().join("schedules").join(format!("{}.yaml", job.id));
    assert!(file.exists(), "the job is a file in schedules/");

    // The AGENDA lists it with KAREN's label, next at 09:00 Seoul time.
    let agenda = f.app.agenda().await;
    let item = agenda.iter().find(|i| i.id == job.id).expect("on the AGENDA");
    assert_eq!(item.kind, AgendaKind::Schedule);
    assert_eq!(item.agent_name, f.app.registry().get("karen").unwrap().name);
    assert_eq!(item.color, f.app.registry().get("karen").unwrap().palette.primary);
    let nine = Timestamp::parse_rfc3339("2026-11-30T00:00:00Z").unwrap();
    assert_eq!(item.when, Some(nine));

    // Before 09:00 nothing runs; at 09:00 it runs once, as KAREN.
    f.app.scheduler().tick().await;
    assert!(f.faux.requests().is_empty());
    f.advance_to(nine);
    let tick = f.app.scheduler().tick().await;
    let runs: Vec<_> = tick.runs.iter().filter(|r| r.job == job.id).collect();
    assert_eq!(runs.len(), 1, "{tick:?}");
    assert_eq!(runs[0].agent, "karen");
    assert!(matches!(runs[0].outcome, RunOutcome::Done(_)), "{tick:?}");
    let again = f.app.scheduler().tick().await;
    assert!(again.runs.iter().all(|r| r.job != job.id), "a slot runs once");
    karen.settled().await;
    let requests = f.faux.requests();
    assert_eq!(requests.len(), 1, "one model call");
    assert_eq!(requests[0].metadata.agent_id, "karen");

    // The answer is in KAREN's job session and on her open screens only.
    let id = SessionId::new(format!("sched-karen-{}", job.id)).unwrap();
    let (meta, entries) = f.app.session_entries(&id).await.unwrap();
    assert_eq!(meta.agent_id, "karen");
    let recorded = serde_json::to_string(&entries).unwrap();
    assert!(recorded.contains("이번 주 새 공고는 두 건입니다."), "{recorded}");
    assert_eq!(answers(&mut karen_events), ["이번 주 새 공고는 두 건입니다."]);
    assert!(
        answers(&mut main_events).is_empty(),
        "JARVIS's screens hear nothing"
    );
}

#[tokio::test]
async fn a_new_notice_for_a_watch_reaches_karens_session_once() {
    let housing = HousingConfig::in_memory();
    housing.watches.add(Some("서울".into()), None).await.unwrap();
    let f = fixture(housing).await;
    let (_karen, mut events, _k) = f.open("karen").await;

    // The watch runs every 30 minutes, as KAREN's job.
    f.app.scheduler().tick().await;
    let first = f.app.scheduler().next_run("housing_watch").unwrap();
    f.advance_to(first);
    let tick = f.app.scheduler().tick().await;
    assert_eq!(tick.runs.len(), 1, "{tick:?}");
    assert_eq!(tick.runs[0].agent, "karen");
    assert_eq!(
        f.app.proactive().queued("karen").await,
        1,
        "one report for the watch"
    );

    let sent = f.app.proactive().tick().await;
    assert_eq!(sent.sent.len(), 1, "{sent:?}");
    let texts: Vec<String> = events
        .drain_proactive(ProactiveKind::Proactive)
        .into_iter()
        .map(|(text, _)| text)
        .collect();
    assert_eq!(texts.len(), 1);
    assert!(texts[0].contains("새 공고 알림"), "{texts:?}");

    // The next run finds nothing new.
    let next = f.app.scheduler().next_run("housing_watch").unwrap();
    f.advance_to(next);
    assert_eq!(f.app.scheduler().tick().await.runs.len(), 1);
    assert_eq!(f.app.proactive().queued("karen").await, 0);
}

#[tokio::test]
async fn a_jobs_approval_is_asked_on_the_agents_open_screen() {
    let f = fixture(HousingConfig::in_memory()).await;
    let (main, mut events, _m) = f.open("main").await;
    let asked = Arc::new(jarvis_sdk::testing::RecordingAdapter::new());
    let _r = main.attach(asked.clone());
    let _answer = main.attach(Arc::new(crate::team::AnswerAll(
        f.app.clone(),
        main.id().clone(),
        jarvis_sdk::agent::ApprovalDecision::Allow,
    )));
    let reply = main
        .prompt("/schedule in 10 minutes 메모 남겨 줘", Caller::Local)
        .await
        .unwrap();
    assert!(
        reply.final_message.content.contains("[main]"),
        "{}",
        reply.final_message.content
    );
    let job = f
        .app
        .scheduler()
        .jobs()
        .into_iter()
        .find(|j| !j.job.is_builtin())
        .unwrap()
        .job;

    f.advance_to(Timestamp::from_millis(monday_morning().as_millis() + 10 * 60_000));
    let tick = f.app.scheduler().tick().await;
    let run = tick.runs.iter().find(|r| r.job == job.id).expect("the job ran");
    assert!(matches!(run.outcome, RunOutcome::Done(_)), "{run:?}");

    let requests = asked.approval_requests();
    assert_eq!(
        requests.len(),
        1,
        "the write was asked for on JARVIS's open screen"
    );
    assert_eq!(requests[0].tool_name, "write_file");
    assert_eq!(answers(&mut events), ["메모를 남겼어요."]);
    let written = f
        .app
        .home()
        .join("sandboxes")
        .join(format!("sched-main-{}", job.id))
        .join("daily.txt");
    assert_eq!(std::fs::read_to_string(written).unwrap(), "오늘의 메모");
}
