//! The dual channel: a long job is acknowledged at once, the person keeps
//! talking, and the answer arrives as `proactive_message {kind: "answer"}`;
//! a delegation waits for a callee that goes background; abort cancels.

use jarvis_pack_housing::{HousingPack, KAREN_DEFINITION};
use jarvis_sdk::agent::{AgentEvent, ProactiveKind};
use jarvis_sdk::app::{AppAssembly, AppConfig, build_app};
use jarvis_sdk::model::{FauxProvider, Message};
use jarvis_sdk::testing::ChannelAdapter;
use jarvis_sdk::turn::{Caller, DualConfig, DualReply, PromptOptions};
use std::sync::Arc;
use std::time::Duration;

const LONG: &str = "먼저 공고를 모두 찾아서 비교하고 그다음에 정리해 줘";

async fn app(
    script: &str,
    thinking: bool,
    after: Option<Duration>,
) -> (AppAssembly, Arc<FauxProvider>, tempfile::TempDir) {
    let home = tempfile::tempdir().unwrap();
    let faux = Arc::new(FauxProvider::from_yaml(script).unwrap());
    let mut config = AppConfig::embedded(home.path())
        .with_definition("karen", KAREN_DEFINITION)
        .with_provider(faux.clone());
    config.packs = vec![std::sync::Arc::new(HousingPack::in_memory())];
    config.thinking.enabled = thinking;
    config.dual = DualConfig {
        after,
        ..DualConfig::default()
    };
    (build_app(config).await.unwrap(), faux, home)
}

const BACKGROUND_FRAME: &str = "{ text: \"{\\\"interpretation\\\": \\\"긴 조사\\\", \\\"decision\\\": \\\"background\\\", \\\"confidence\\\": 0.9}\" }";

#[tokio::test(start_paused = true)]
async fn a_long_job_is_acknowledged_and_the_person_keeps_talking() {
    let script = format!(
        r#"
rules:
  - when: {{ purpose: thought }}
    reply: {BACKGROUND_FRAME}
  - when: {{ last_user: "^먼저" }}
    reply: {{ delay_ms: 60000, text: "세 건을 비교해 정리했습니다." }}
  - when: {{ last_user: "^안녕" }}
    reply: {{ text: "안녕하세요!" }}
"#
    );
    let (app, _, _home) = app(&script, true, None).await;
    let session = app
        .session(&app.create_session(None).await.unwrap().id)
        .await
        .unwrap();
    let (screen, mut rx) = ChannelAdapter::new();
    let _a = session.attach(screen);

    let started = tokio::time::Instant::now();
    let reply = session
        .prompt_dual(LONG, PromptOptions::from(Caller::Local))
        .await
        .unwrap();
    let DualReply::Background {
        message_id,
        acknowledgement,
    } = reply
    else {
        panic!("expected the job to go to the background");
    };
    assert!(started.elapsed() < Duration::from_secs(1), "acknowledged at once");
    let ack = rx
        .next_matching(|e| {
            matches!(
                e,
                AgentEvent::ProactiveMessage {
                    kind: ProactiveKind::Filler,
                    ..
                }
            )
        })
        .await;
    assert!(matches!(ack, AgentEvent::ProactiveMessage { ref text, .. } if *text == acknowledgement));
    assert!(!session.is_busy() && session.background_jobs() == 1);

    // The person keeps talking in the same session while the job runs.
    let DualReply::Done(hello) = session
        .prompt_dual("안녕", PromptOptions::from(Caller::Local))
        .await
        .unwrap()
    else {
        panic!("a short turn finishes in the foreground");
    };
    assert_eq!(hello.final_message.content, "안녕하세요!");
    assert!(started.elapsed() < Duration::from_secs(60));

    let answer = rx
        .next_matching(|e| {
            matches!(
                e,
                AgentEvent::ProactiveMessage {
                    kind: ProactiveKind::Answer,
                    ..
                }
            )
        })
        .await;
    match answer {
        AgentEvent::ProactiveMessage {
            text, message_id: id, ..
        } => {
            assert_eq!(text, "세 건을 비교해 정리했습니다.");
            assert_eq!(id, message_id);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(session.background_jobs(), 0);
    let (_, entries) = app.session_entries(session.id()).await.unwrap();
    let recorded = serde_json::to_string(&entries).unwrap();
    assert!(
        recorded.contains("세 건을 비교해 정리했습니다.") && recorded.contains("안녕하세요!"),
        "both turns are in the session"
    );
}

#[tokio::test(start_paused = true)]
async fn a_turn_running_past_the_threshold_goes_to_the_background() {
    let (app, _, _home) = app(
        "fallback: { delay_ms: 10000, text: \"늦은 답\" }",
        false,
        Some(Duration::from_secs(2)),
    )
    .await;
    let session = app
        .session(&app.create_session(None).await.unwrap().id)
        .await
        .unwrap();
    let (screen, mut rx) = ChannelAdapter::new();
    let _a = session.attach(screen);
    let started = tokio::time::Instant::now();
    let reply = session
        .prompt_dual("hello", PromptOptions::from(Caller::Local))
        .await
        .unwrap();
    assert!(matches!(reply, DualReply::Background { .. }));
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    let answer = rx
        .next_matching(|e| {
            matches!(
                e,
                AgentEvent::ProactiveMessage {
                    kind: ProactiveKind::Answer,
                    ..
                }
            )
        })
        .await;
    assert!(matches!(answer, AgentEvent::ProactiveMessage { ref text, .. } if text == "늦은 답"));
    assert_eq!(started.elapsed(), Duration::from_secs(10));
    // A quick turn under the threshold stays in the foreground.
    let (app, _, _h) = self::app("fallback: { text: quick }", false, Some(Duration::from_secs(2))).await;
    let s = app
        .session(&app.create_session(None).await.unwrap().id)
        .await
        .unwrap();
    assert!(matches!(
        s.prompt_dual("hi", PromptOptions::from(Caller::Local))
            .await
            .unwrap(),
        DualReply::Done(_)
    ));
}

#[tokio::test(start_paused = true)]
async fn ask_agent_returns_the_final_answer_of_a_callee_that_goes_background() {
    let script = format!(
        r#"
rules:
  - when: {{ purpose: thought, agent: karen }}
    reply: {BACKGROUND_FRAME}
  - when: {{ agent: main, last_role: user }}
    reply: {{ tool_calls: [ {{ name: ask_agent, arguments: {{ agent: karen, request: "{LONG}" }} }} ] }}
  - when: {{ agent: karen, last_role: user, purpose: step }}
    reply: {{ delay_ms: 30000, text: "KAREN 의 최종 답" }}
  - when: {{ agent: main, last_role: tool }}
    reply: {{ text: "전달합니다" }}
"#
    );
    let (app, faux, _home) = app(&script, true, Some(Duration::from_secs(1))).await;
    let session = app
        .session(&app.create_session(None).await.unwrap().id)
        .await
        .unwrap();
    let outcome = session.prompt("KAREN 에게 맡겨", Caller::Local).await.unwrap();
    assert_eq!(outcome.final_message.content, "전달합니다");
    let main_second = faux
        .requests()
        .into_iter()
        .filter(|r| r.metadata.agent_id == "main")
        .nth(1)
        .unwrap();
    match main_second.recorded_messages().last() {
        Some(Message::Tool(t)) => assert_eq!(
            t.content, "KAREN 의 최종 답",
            "the stored final answer, not the acknowledgement"
        ),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn abort_cancels_a_background_job() {
    let script = format!(
        "rules:\n  - when: {{ purpose: thought }}\n    reply: {BACKGROUND_FRAME}\nfallback: {{ delay_ms: 600000, text: never }}\n"
    );
    let (app, _, _home) = app(&script, true, None).await;
    let session = app
        .session(&app.create_session(None).await.unwrap().id)
        .await
        .unwrap();
    let (screen, mut rx) = ChannelAdapter::new();
    let _a = session.attach(screen);
    let reply = session
        .prompt_dual(LONG, PromptOptions::from(Caller::Local))
        .await
        .unwrap();
    assert!(matches!(reply, DualReply::Background { .. }));
    assert!(session.abort());
    let end = rx
        .next_matching(|e| matches!(e, AgentEvent::AgentEnd { .. }))
        .await;
    match end {
        AgentEvent::AgentEnd { final_message, .. } => {
            assert_eq!(final_message.stop_reason, jarvis_sdk::agent::StopReason::Aborted)
        }
        other => panic!("{other:?}"),
    }
    // Let the job's task finish its bookkeeping, then nothing more arrives.
    while session.background_jobs() > 0 {
        tokio::task::yield_now().await;
    }
    assert!(rx.drain().is_empty(), "no answer after an abort");
}

#[tokio::test(start_paused = true)]
async fn a_filler_nobody_sees_is_counted_and_one_a_screen_sees_is_not() {
    let script = "rules:\n  - when: { last_user: \"^느린\" }\n    reply: { delay_ms: 5000, text: \"끝\" }\n";
    let (app, _, _home) = app(script, false, Some(Duration::from_secs(1))).await;
    let session = app
        .session(&app.create_session(None).await.unwrap().id)
        .await
        .unwrap();
    let reply = session
        .prompt_dual("느린 일", PromptOptions::from(Caller::Local))
        .await
        .unwrap();
    assert!(matches!(reply, DualReply::Background { .. }));
    assert_eq!(session.fillers_dropped(), 1, "no screen was attached");
    let (screen, _rx) = ChannelAdapter::new();
    let _a = session.attach(screen);
    while session.background_jobs() > 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let reply = session
        .prompt_dual("느린 일 또", PromptOptions::from(Caller::Local))
        .await
        .unwrap();
    assert!(matches!(reply, DualReply::Background { .. }));
    assert_eq!(session.fillers_dropped(), 1, "a screen saw the second");
}

#[tokio::test(start_paused = true)]
async fn a_background_answer_nobody_sees_is_handed_to_the_notification_channels() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join(jarvis_sdk::initiative::NOTIFICATIONS_FILE),
        "channels:\n  - { kind: webhook, url: \"http://127.0.0.1:9/hook\" }\n",
    )
    .unwrap();
    let faux = Arc::new(FauxProvider::from_yaml("fallback: { delay_ms: 10000, text: \"늦은 답\" }").unwrap());
    let mut config = AppConfig::embedded(home.path()).with_provider(faux);
    config.dual = DualConfig {
        after: Some(Duration::from_secs(2)),
        ..DualConfig::default()
    };
    let app = build_app(config).await.unwrap();
    let session = app
        .session(&app.create_session(None).await.unwrap().id)
        .await
        .unwrap();
    // No screen is attached.
    let reply = session
        .prompt_dual("hello", PromptOptions::from(Caller::Local))
        .await
        .unwrap();
    let DualReply::Background { message_id, .. } = reply else {
        panic!("the turn went on in the background");
    };
    assert_eq!(app.notifier().queued(), 0, "nothing to say yet");
    // Virtual time: the answer comes 10 s in.
    tokio::time::timeout(Duration::from_secs(60), async {
        while app.notifier().queued() == 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the answer is queued for the channels");
    let queued =
        std::fs::read_to_string(home.path().join(jarvis_sdk::initiative::NOTIFY_OUTBOX_FILE)).unwrap();
    assert!(
        queued.contains(&message_id) && queued.contains("늦은 답"),
        "{queued}"
    );
}
