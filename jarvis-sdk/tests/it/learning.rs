//! Learning after turns: failure reflection rewriting a procedure after
//! repeated overflows (through the assembled app, with its `[절차 기억]` in
//! the next turn), procedure learning from turns that went well, failed
//! reflections writing nothing, user-model distillation with provenance and
//! without duplicates, and forgetting (in memory, in SQLite and on
//! Postgres).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use jarvis_sdk::agent::{
    AgentLoopConfig, DEFAULT_REFLECTION_TEMPLATE, DistillConfig, Distiller, LearnError, Reflection,
    ReflectionConfig, Reflector, StopReason, TurnReport,
};
use jarvis_sdk::app::{AppAssembly, AppConfig, REFLECTION_TEMPLATE_FILE, build_app};
use jarvis_sdk::common::ManualClock;
use jarvis_sdk::memory::{
    DEFAULT_USER, InMemoryMemoryStore, KIND_PROCEDURE, Layer, MemoryConfig, MemoryError, MemoryFilter,
    MemoryRecord, MemoryScope, MemoryService, MemoryStore, PostgresMemoryStore, ScopeResolver, SectionKind,
    SqliteMemoryStore, StaticScopes, TurnRecord, fact_digest, normalise_fact,
};
use jarvis_sdk::model::{FauxProvider, HashEmbedder, Provider, Purpose};
use jarvis_sdk::turn::{AgentSession, Caller};

use crate::memory::fixed_clock;
use crate::pg::fresh_schema;

const OLD_PROCEDURE: &str = "적용 (applies to): 월 매출 데이터를 분석해서 보고서로 정리해 줘\n\n1. 모든 달의 데이터를 한 번에 읽고 분석한다\n";
const NEW_STEPS: &str = "1. 이번 달 파일 하나만 연다\n2. 합계만 계산한다\n3. 보고서 한 단락을 쓴다";

/// Requests of one month's sales report keep calling a tool, so with two
/// steps per turn they overflow twice; the reflection answers `reflection`.
fn overflow_script(reflection: &str) -> String {
    format!(
        r#"
rules:
  - when: {{ purpose: reflection }}
    reply: {reflection}
  - when: {{ purpose: summary }}
    reply: {{ text: "지금까지의 답: 아직 분석 중" }}
  - when: {{ last_user: "^\\d+월 매출 데이터를 분석" }}
    reply: {{ tool_calls: [ {{ name: nothing, arguments: {{}} }} ] }}
fallback: {{ text: "보고서를 정리했습니다." }}
"#
    )
}

fn month(n: u32) -> String {
    format!("{n}월 매출 데이터를 분석해서 보고서로 정리해 줘")
}

fn reflection_calls(faux: &FauxProvider) -> usize {
    faux.requests()
        .iter()
        .filter(|r| r.purpose == Purpose::Reflection)
        .count()
}

/// The app's settings for these tests: thinking on but never routed to a
/// thought, distillation only on demand, two steps per turn.
fn learning_config(home: &Path, faux: Arc<FauxProvider>, clock: Arc<ManualClock>) -> AppConfig {
    let mut config = AppConfig::embedded(home).with_provider(faux);
    config.thinking.enabled = true;
    // The router never says think, so the only model calls besides the
    // turns' own are the learners'.
    config.thinking.threshold = 1.0;
    config.thinking.distil_every = 0;
    config.loop_config = AgentLoopConfig {
        max_turns: 2,
        ..AgentLoopConfig::default()
    };
    config.clock = clock;
    config
}

async fn learning_app(home: &Path, faux: Arc<FauxProvider>, clock: Arc<ManualClock>) -> AppAssembly {
    build_app(learning_config(home, faux, clock)).await.unwrap()
}

/// Runs the overflowing requests of `months` in a new session of `app`, a
/// minute apart, each followed by the work after it; answers the session.
async fn overflow_months(
    app: &AppAssembly,
    clock: &ManualClock,
    months: std::ops::RangeInclusive<u32>,
) -> Arc<AgentSession> {
    let meta = app.create_session(None).await.unwrap();
    let session = app.session(&meta.id).await.unwrap();
    for n in months {
        clock.advance(Duration::from_secs(60));
        let out = session.prompt(month(n), Caller::Local).await.unwrap();
        assert_eq!(out.overflows, 2, "turn {n} overflows");
        session.settled().await;
    }
    session
}

#[tokio::test]
async fn three_overflows_of_one_kind_rewrite_its_procedure_once_and_the_next_turn_sees_it() {
    let home = tempfile::tempdir().unwrap();
    let procedures = home.path().join("procedures/main");
    std::fs::create_dir_all(&procedures).unwrap();
    let file = procedures.join("monthly-sales.md");
    std::fs::write(&file, OLD_PROCEDURE).unwrap();
    let reply = format!(
        "{{ text: {:?} }}",
        serde_json::json!({"name": "another-name", "procedure": NEW_STEPS}).to_string()
    );
    let faux = Arc::new(FauxProvider::from_yaml(&overflow_script(&reply)).unwrap());
    let clock = fixed_clock();
    let app = learning_app(home.path(), faux.clone(), clock.clone()).await;
    assert_eq!(
        std::fs::read_to_string(home.path().join(REFLECTION_TEMPLATE_FILE)).unwrap(),
        DEFAULT_REFLECTION_TEMPLATE,
        "the template is written on first start"
    );
    let memory = app.memory().unwrap().clone();
    let meta = app.create_session(None).await.unwrap();
    let session = app.session(&meta.id).await.unwrap();
    // The procedure files are indexed when the agent's memory is first
    // read; do it now, so every turn below comes after the procedure.
    let scope = app.memory_scope("main", meta.id.as_str()).unwrap();
    memory.search(&scope, "매출", Layer::Procedural, 1).await.unwrap();

    for n in 1..=3 {
        clock.advance(Duration::from_secs(60));
        let out = session.prompt(month(n), Caller::Local).await.unwrap();
        assert_eq!(out.overflows, 2, "turn {n} overflows");
        session.settled().await;
        if n < 3 {
            assert_eq!(reflection_calls(&faux), 0, "turn {n}: not yet");
            assert_eq!(std::fs::read_to_string(&file).unwrap(), OLD_PROCEDURE);
        }
    }
    assert_eq!(reflection_calls(&faux), 1, "the third overflow reflects");
    let request = faux
        .requests()
        .into_iter()
        .find(|r| r.purpose == Purpose::Reflection)
        .unwrap();
    assert_eq!(request.system.as_deref(), Some(DEFAULT_REFLECTION_TEMPLATE));
    assert!(request.tools.is_empty());
    let shown = serde_json::to_string(&request.messages).unwrap();
    for needle in [
        month(1),
        month(2),
        month(3),
        "모든 달의 데이터를 한 번에".to_owned(),
    ] {
        assert!(shown.contains(&needle), "{needle:?} not shown: {shown}");
    }
    let rewritten = std::fs::read_to_string(&file).unwrap();
    assert_eq!(
        rewritten,
        format!("적용 (applies to): {}\n\n{NEW_STEPS}", month(3)),
        "a rewrite keeps the procedure's name"
    );
    assert!(!procedures.join("another-name.md").exists());

    // A fourth overflow right after: the count started again.
    clock.advance(Duration::from_secs(60));
    session.prompt(month(4), Caller::Local).await.unwrap();
    session.settled().await;
    assert_eq!(reflection_calls(&faux), 1, "no second rewrite");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), rewritten);

    // The next turn of the kind carries the new procedure in [절차 기억].
    clock.advance(Duration::from_secs(60));
    let before = faux.request_count();
    let out = session
        .prompt(
            "매출 데이터를 분석해서 보고서로 정리하는 순서를 알려 줘",
            Caller::Local,
        )
        .await
        .unwrap();
    assert_eq!(out.final_message.content, "보고서를 정리했습니다.");
    let first = &faux.requests()[before];
    assert_eq!(first.purpose, Purpose::Step);
    let memory_message = serde_json::to_string(&first.messages[0]).unwrap();
    let section = memory_message.find("[절차 기억]").expect("a [절차 기억] section");
    let steps = memory_message
        .find("이번 달 파일 하나만 연다")
        .expect("the new steps");
    assert!(steps > section, "{memory_message}");
    assert!(!memory_message.contains("모든 달의 데이터를 한 번에"));
}

#[tokio::test]
async fn learning_is_skipped_when_the_settings_turn_it_off_and_an_edited_template_is_used() {
    let reply = "{ text: \"{\\\"name\\\": \\\"sales\\\", \\\"procedure\\\": \\\"1. 한 달씩\\\"}\" }";
    let faux = Arc::new(FauxProvider::from_yaml(&overflow_script(reply)).unwrap());
    let clock = fixed_clock();

    // Thinking off, or failure reflection off: three overflows, no reflection.
    for (name, thinking, reflect_after) in [("thinking off", false, 3), ("reflect_after = 0", true, 0)] {
        let home = tempfile::tempdir().unwrap();
        let mut config = learning_config(home.path(), faux.clone(), clock.clone());
        config.thinking.enabled = thinking;
        config.thinking.reflect_after = reflect_after;
        let app = build_app(config).await.unwrap();
        overflow_months(&app, &clock, 1..=3).await;
        assert_eq!(reflection_calls(&faux), 0, "{name}");
        assert!(!home.path().join("procedures").exists(), "{name}");
    }

    // Thinking on, with a template a person edited: it is kept and used.
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join(REFLECTION_TEMPLATE_FILE),
        "# 우리 집 성찰 규칙\n",
    )
    .unwrap();
    let app = learning_app(home.path(), faux.clone(), clock.clone()).await;
    overflow_months(&app, &clock, 1..=3).await;
    assert_eq!(
        std::fs::read_to_string(home.path().join(REFLECTION_TEMPLATE_FILE)).unwrap(),
        "# 우리 집 성찰 규칙\n",
        "the edit is kept"
    );
    let request = faux
        .requests()
        .into_iter()
        .find(|r| r.purpose == Purpose::Reflection)
        .expect("a reflection");
    assert_eq!(request.system.as_deref(), Some("# 우리 집 성찰 규칙\n"));
    assert!(
        home.path().join("procedures/main/sales.md").exists(),
        "a new procedure"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failing_or_hanging_reflection_neither_fails_nor_delays_a_turn() {
    for (name, reply) in [
        (
            "a provider error",
            "{ error: { message: \"overloaded\", status: 529 } }",
        ),
        ("invalid JSON", "{ text: \"{\\\"name\\\": \" }"),
        ("a hang", "{ delay_ms: 600000, text: \"{}\" }"),
    ] {
        let home = tempfile::tempdir().unwrap();
        let faux = Arc::new(FauxProvider::from_yaml(&overflow_script(reply)).unwrap());
        let clock = fixed_clock();
        let app = learning_app(home.path(), faux.clone(), clock.clone()).await;
        let session = overflow_months(&app, &clock, 1..=2).await;

        // The third overflow reflects, after the turn: the turn answers at
        // once (in the paused clock's time) and well.
        clock.advance(Duration::from_secs(60));
        let started = tokio::time::Instant::now();
        let out = session.prompt(month(3), Caller::Local).await.expect(name);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{name}: the turn waited"
        );
        assert_eq!(out.final_message.content, "지금까지의 답: 아직 분석 중", "{name}");
        let waiting = tokio::time::Instant::now();
        session.settled().await;
        assert_eq!(reflection_calls(&faux), 1, "{name}");
        if name == "a hang" {
            assert!(
                waiting.elapsed() >= Duration::from_secs(30),
                "the reflection gives up after its timeout"
            );
        }
        assert!(
            !home.path().join("procedures").exists(),
            "{name}: nothing written"
        );

        // The session goes on as before.
        let out = session.prompt("고마워", Caller::Local).await.expect(name);
        assert_eq!(out.final_message.content, "보고서를 정리했습니다.", "{name}");
    }
}

/// The learners' world without an app: a `JARVIS_HOME`, a clock, a memory
/// service over a store in that home, and a faux model playing a script.
struct Offline {
    home: tempfile::TempDir,
    clock: Arc<ManualClock>,
    memory: Arc<MemoryService>,
    faux: Arc<FauxProvider>,
}

impl Offline {
    fn new(script: &str) -> Self {
        Self::on(script, Arc::new(InMemoryMemoryStore::new()))
    }

    fn on(script: &str, store: Arc<dyn MemoryStore>) -> Self {
        let home = tempfile::tempdir().unwrap();
        let clock = fixed_clock();
        let memory = Arc::new(
            MemoryService::new(store, Arc::new(HashEmbedder::default()))
                .with_clock(clock.clone())
                .with_config(MemoryConfig::for_home(home.path())),
        );
        let faux = Arc::new(FauxProvider::from_yaml(script).unwrap());
        Self {
            home,
            clock,
            memory,
            faux,
        }
    }

    /// A learner (`Reflector::new`, `Distiller::new`) on this world.
    fn learner<C, L>(
        &self,
        new: impl FnOnce(Arc<dyn Provider>, Arc<MemoryService>, Arc<dyn ScopeResolver>, C) -> L,
        config: C,
    ) -> L {
        new(
            self.faux.clone(),
            self.memory.clone(),
            Arc::new(StaticScopes::new(DEFAULT_USER)),
            config,
        )
    }

    fn reflector(&self, config: ReflectionConfig) -> Reflector {
        self.learner(Reflector::new, config)
    }

    fn distiller(&self, config: DistillConfig) -> Distiller {
        self.learner(Distiller::new, config)
    }
}

/// The scope of `main`'s session `s1`.
fn scope() -> MemoryScope {
    MemoryScope::new(DEFAULT_USER, "main", "s1")
}

/// Writes `main`'s episode of an overflowed turn on `prompt`, a minute after the last.
async fn overflowed(memory: &MemoryService, clock: &ManualClock, prompt: &str) -> TurnReport {
    clock.advance(Duration::from_secs(60));
    memory
        .record_turn(
            &scope(),
            TurnRecord::new(prompt, "지금까지의 답: 아직").with_outcome(
                Duration::from_secs(1),
                3,
                2,
                "overflow",
            ),
        )
        .await
        .unwrap();
    TurnReport::of("main", "s1", prompt, "지금까지의 답: 아직").with_ending(2, StopReason::Overflow)
}

async fn procedure_records(memory: &MemoryService) -> Vec<MemoryRecord> {
    memory
        .store()
        .list(&MemoryFilter::for_user(DEFAULT_USER).kinds([KIND_PROCEDURE]))
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn failed_reflections_write_nothing() {
    for (name, reply) in [
        ("prose", "{ text: \"I would split it into months.\" }"),
        (
            "a bad name",
            "{ text: \"{\\\"name\\\": \\\"../../etc\\\", \\\"procedure\\\": \\\"1. x\\\"}\" }",
        ),
        (
            "an empty procedure",
            "{ text: \"{\\\"name\\\": \\\"sales\\\", \\\"procedure\\\": \\\"\\\"}\" }",
        ),
        (
            "a provider error",
            "{ error: { message: \"overloaded\", status: 529 } }",
        ),
        ("a timeout", "{ delay_ms: 600000, text: \"{}\" }"),
    ] {
        let world = Offline::new(&overflow_script(reply));
        let reflector = world.reflector(ReflectionConfig {
            timeout: Duration::from_secs(5),
            ..ReflectionConfig::default()
        });
        let Offline {
            home,
            clock,
            memory,
            faux,
        } = world;
        let mut last = None;
        for n in 1..=3 {
            last = Some(
                reflector
                    .reflect(&overflowed(&memory, &clock, &month(n)).await)
                    .await,
            );
        }
        let err = last.unwrap().expect_err(name);
        match name {
            "a provider error" => assert!(matches!(err, LearnError::Model { .. }), "{err:?}"),
            "a timeout" => assert!(matches!(err, LearnError::Timeout { .. }), "{err:?}"),
            _ => assert!(matches!(err, LearnError::Answer { .. }), "{name}: {err:?}"),
        }
        assert_eq!(reflection_calls(&faux), 1, "{name}");
        assert!(!home.path().join("procedures").exists(), "{name}: no file");
        assert!(procedure_records(&memory).await.is_empty(), "{name}: no record");
        // A failed call leaves the count: the next overflow tries again.
        let again = reflector
            .reflect(&overflowed(&memory, &clock, &month(4)).await)
            .await;
        assert!(again.is_err(), "{name}");
        assert_eq!(reflection_calls(&faux), 2, "{name}");
    }
}

#[tokio::test]
async fn a_multi_step_turn_that_went_well_teaches_a_procedure_once() {
    let world = Offline::new(
        r#"
rules:
  - when: { purpose: reflection, last_user: "공고" }
    reply: { text: "{\"name\": \"notice-compare\", \"procedure\": \"1. 지역의 공고를 찾는다\n2. 마감일로 정렬한다\"}" }
  - when: { purpose: reflection }
    reply: { text: "{\"write\": false}" }
fallback: { text: "?" }
"#,
    );
    let went_well = |prompt: &str, calls: usize| {
        TurnReport::of("main", "s1", prompt, "두 건을 찾았습니다")
            .with_tools(vec!["sh_notice".into(), "housing_budget".into()], calls)
    };
    const NOTICES: &str = "서울 행복주택 공고 찾아서 예산이랑 비교해 줘";
    const RATES: &str = "오늘 환율 확인해서 달러 계산해 줘";

    // With learning from success off, a multi-step turn costs no call.
    let off = world.reflector(ReflectionConfig {
        learn_from_success: false,
        ..ReflectionConfig::default()
    });
    let skipped = off.reflect(&went_well(NOTICES, 2)).await.unwrap();
    assert!(matches!(skipped, Reflection::Skipped(_)), "{skipped:?}");

    let reflector = world.reflector(ReflectionConfig::default());
    let written = Reflection::Written {
        name: "notice-compare".into(),
        rewrite: false,
        overflows: 0,
    };
    for (why, prompt, tool_calls, expected, calls) in [
        ("one tool call is not multi-step", NOTICES, 1, None, 0),
        ("a multi-step turn teaches", NOTICES, 2, Some(written), 1),
        ("the kind has its procedure now", NOTICES, 3, None, 1),
        ("the model may decline", RATES, 2, Some(Reflection::Declined), 2),
        ("a declined kind is not asked about again", RATES, 2, None, 2),
    ] {
        let got = reflector.reflect(&went_well(prompt, tool_calls)).await.unwrap();
        match expected {
            Some(expected) => assert_eq!(got, expected, "{why}"),
            None => assert!(matches!(got, Reflection::Skipped(_)), "{why}: {got:?}"),
        }
        assert_eq!(reflection_calls(&world.faux), calls, "{why}");
    }
    let text = std::fs::read_to_string(world.home.path().join("procedures/main/notice-compare.md")).unwrap();
    assert!(text.starts_with("적용 (applies to): 서울 행복주택 공고 찾아서"));
    assert!(text.contains("1. 지역의 공고를 찾는다\n2. 마감일로 정렬한다"));
    assert_eq!(procedure_records(&world.memory).await.len(), 1);
}

const FACTS_SCRIPT: &str = r#"
rules:
  - when: { purpose: distillation }
    reply: { text: "{\"facts\": [{\"key\": \"child\", \"value\": \"딸 서연, 초등학교 3학년\", \"episodes\": [\"e1\"]}, {\"key\": \"daughter\", \"value\": \"딸  서연, 초등학교 3학년\", \"episodes\": [\"e2\"]}]}" }
fallback: { text: "?" }
"#;

async fn episode(memory: &MemoryService, clock: &ManualClock, prompt: &str) -> MemoryRecord {
    clock.advance(Duration::from_secs(60));
    memory
        .record_turn(&scope(), TurnRecord::new(prompt, "알겠어요."))
        .await
        .unwrap()
        .unwrap()
}

fn distillation_calls(faux: &FauxProvider) -> usize {
    faux.requests()
        .iter()
        .filter(|r| r.purpose == Purpose::Distillation)
        .count()
}

#[tokio::test]
async fn distillation_adds_a_fact_once_with_its_provenance() {
    let world = Offline::new(FACTS_SCRIPT);
    let distiller = world.distiller(DistillConfig::default());
    let Offline {
        home,
        clock,
        memory,
        faux,
    } = world;
    let first = episode(&memory, &clock, "우리 딸 서연이가 이번에 초등학교 3학년이 됐어").await;
    let second = episode(&memory, &clock, "서연이 학교 숙제 좀 도와줘").await;

    let report = distiller.distil_now(&scope()).await.unwrap();
    assert_eq!(
        (
            report.episodes,
            report.added,
            report.duplicates,
            report.refused_forgotten
        ),
        (2, 1, 1, 0),
        "the same value under another key adds nothing: {report:?}"
    );
    let request = &faux.requests()[0];
    let shown = serde_json::to_string(&request.messages).unwrap();
    assert!(
        shown.contains("[e1]") && shown.contains("초등학교 3학년이 됐어"),
        "{shown}"
    );

    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(home.path().join("user_model.json")).unwrap()).unwrap();
    assert_eq!(file["entries"]["child"], "딸 서연, 초등학교 3학년");
    assert!(file["entries"].get("daughter").is_none());
    assert_eq!(file["provenance"]["child"], serde_json::json!([first.id]));
    assert_eq!(
        file["distilled"]["main"]["episodes"],
        serde_json::json!([second.id])
    );
    let records = memory
        .store()
        .list(&MemoryFilter::for_user(DEFAULT_USER).kinds(["user_model"]))
        .await
        .unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].text, "child: 딸 서연, 초등학교 3학년");
    assert_eq!(records[0].metadata["episodes"], serde_json::json!([first.id]));

    // Again over the same episodes: no call, nothing added.
    let again = distiller.distil_now(&scope()).await.unwrap();
    assert_eq!((again.episodes, again.added), (0, 0));
    assert_eq!(distillation_calls(&faux), 1);

    // A new episode: the model proposes the same facts, which are duplicates.
    episode(&memory, &clock, "서연이 생일 선물 추천해 줘").await;
    let third = distiller.distil_now(&scope()).await.unwrap();
    assert_eq!(
        (third.episodes, third.added, third.duplicates, third.invalid),
        (1, 0, 1, 1),
        "the second fact names an episode it was not shown: {third:?}"
    );
    assert_eq!(distillation_calls(&faux), 2);
    let model = memory.user_model().await;
    assert_eq!(model.entries.len(), 1);
    assert_eq!(model.provenance["child"], std::slice::from_ref(&first.id));
}

#[tokio::test]
async fn distillation_runs_every_n_turns_of_an_agent() {
    let world = Offline::new(FACTS_SCRIPT);
    let distiller = world.distiller(DistillConfig {
        every_turns: 3,
        ..DistillConfig::default()
    });
    let Offline {
        clock, memory, faux, ..
    } = world;
    for n in 1..=5 {
        episode(&memory, &clock, &format!("서연이 이야기 {n}")).await;
        let report = distiller
            .after_turn(&TurnReport::of("main", "s1", "x", "y"))
            .await;
        assert_eq!(report.is_some(), n == 3, "turn {n}");
    }
    assert_eq!(distillation_calls(&faux), 1);
}

/// The forgetting contract on any store.
async fn forgetting_works_on(store: Arc<dyn MemoryStore>, other_process: Option<Arc<dyn MemoryStore>>) {
    let world = Offline::on(
        r#"
rules:
  - when: { purpose: distillation, last_user: "현관" }
    reply: { text: "{\"facts\": [{\"key\": \"door\", \"value\": \"현관 비밀번호는 4321\", \"episodes\": [\"e1\"]}, {\"key\": \"child\", \"value\": \"딸 서연\", \"episodes\": [\"e1\"]}]}" }
  - when: { purpose: distillation }
    reply: { text: "{\"facts\": [{\"key\": \"door code\", \"value\": \"비밀번호는   4321\", \"episodes\": [\"e1\"]}, {\"key\": \"note\", \"value\": \"예전 현관 비밀번호는 4321 이었음\", \"episodes\": [\"e1\"]}, {\"key\": \"city\", \"value\": \"서울 마포구\", \"episodes\": [\"e1\"]}]}" }
fallback: { text: "?" }
"#,
        store,
    );
    let distiller = world.distiller(DistillConfig::default());
    let Offline {
        home,
        clock,
        memory,
        faux,
    } = world;
    let scope = scope();
    memory.remember(&scope, "현관 비밀번호는 4321이야").await.unwrap();
    let kept = memory
        .remember(&scope, "서연이는 피아노를 좋아한다")
        .await
        .unwrap();
    episode(&memory, &clock, "현관 비밀번호 4321, 딸 서연이한테도 알려 줬어").await;
    let report = distiller.distil_now(&scope).await.unwrap();
    assert_eq!(report.added, 2, "{report:?}");
    if let Some(other) = &other_process {
        let ids: Vec<String> = other
            .list(
                &MemoryFilter::for_user(DEFAULT_USER).layer(Layer::Semantic, jarvis_sdk::memory::Agents::Any),
            )
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(ids.len(), 4, "the other process sees every fact first: {ids:?}");
    }

    let forgot = memory.forget(&scope, "비밀번호는 4321").await.unwrap();
    assert_eq!((forgot.entries, forgot.records), (1, 2), "{forgot:?}");

    let text = std::fs::read_to_string(home.path().join("user_model.json")).unwrap();
    assert!(!text.contains("4321") && !text.contains("비밀번호"), "{text}");
    let file: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(file["entries"].get("door").is_none());
    assert!(file["provenance"].get("door").is_none());
    assert_eq!(file["entries"]["child"], "딸 서연");
    assert_eq!(
        file["forgotten"][0]["digest"],
        fact_digest(&normalise_fact("비밀번호는 4321"))
    );
    assert_eq!(file["forgotten"][0]["chars"], 10);

    let recalled = memory
        .recall(&scope, "현관 비밀번호", Layer::Semantic, 5)
        .await
        .unwrap();
    assert!(
        recalled.iter().all(|r| !r.record.text.contains("4321")),
        "{recalled:?}"
    );
    // `[핵심 사실]` (the user model and the profile) no longer carries it;
    // the episode and the session's working memory still do, as documented.
    let context = memory.observe(&scope, "현관 비밀번호가 뭐였지?").await.unwrap();
    let facts = context
        .section(SectionKind::KeyFacts)
        .expect("the other facts stay")
        .items
        .join("\n");
    assert!(facts.contains("딸 서연") && !facts.contains("4321"), "{facts}");
    assert!(
        memory
            .store()
            .get(std::slice::from_ref(&kept.id))
            .await
            .unwrap()
            .len()
            == 1,
        "other facts stay"
    );
    if let Some(other) = &other_process {
        let texts: Vec<String> = other
            .list(
                &MemoryFilter::for_user(DEFAULT_USER).layer(Layer::Semantic, jarvis_sdk::memory::Agents::Any),
            )
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.text)
            .collect();
        assert_eq!(texts.len(), 2, "{texts:?}");
        assert!(texts.iter().all(|t| !t.contains("4321")), "{texts:?}");
    }

    // Refused from now on: by /remember, also inside a longer text …
    let err = memory
        .remember(&scope, "참고로 우리 집 현관 비밀번호는  4321 이다")
        .await
        .unwrap_err();
    assert!(matches!(err, MemoryError::Forgotten { .. }), "{err:?}");
    // … and by distillation, alone or inside a longer value. Episodes are
    // not rewritten, but one that contains the secret is not shown to the
    // model.
    episode(&memory, &clock, "현관 비밀번호는 4321 그대로야").await;
    episode(&memory, &clock, "서연이 학원 끝나면 문 열어 줘").await;
    let later = distiller.distil_now(&scope).await.unwrap();
    assert_eq!(
        (later.episodes, later.added, later.refused_forgotten),
        (2, 1, 2),
        "only the city is new: {later:?}"
    );
    let text = std::fs::read_to_string(home.path().join("user_model.json")).unwrap();
    assert!(!text.contains("4321"), "{text}");
    let last_request = faux.requests().pop().unwrap();
    let shown = serde_json::to_string(&last_request.messages).unwrap();
    assert!(shown.contains("문 열어 줘") && !shown.contains("4321"), "{shown}");
    let episodes = memory
        .store()
        .list(&MemoryFilter::for_user(DEFAULT_USER).layer(Layer::Episodic, jarvis_sdk::memory::Agents::Any))
        .await
        .unwrap();
    assert_eq!(
        episodes.iter().filter(|e| e.text.contains("4321")).count(),
        2,
        "episodes are not rewritten"
    );
}

#[tokio::test]
async fn forgetting_in_memory() {
    forgetting_works_on(Arc::new(InMemoryMemoryStore::new()), None).await;
}

#[tokio::test]
async fn forgetting_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteMemoryStore::open_in_home(dir.path()).await.unwrap();
    forgetting_works_on(Arc::new(store), None).await;
}

#[tokio::test]
async fn forgetting_on_postgres_reaches_every_process() {
    let Some((url, _)) = fresh_schema("forgetting on postgres").await else {
        return;
    };
    let store = PostgresMemoryStore::connect(&url).await.unwrap();
    let other = PostgresMemoryStore::connect(&url).await.unwrap();
    forgetting_works_on(Arc::new(store), Some(Arc::new(other))).await;
    // A process that starts after the forgetting never sees the facts.
    let late = PostgresMemoryStore::connect(&url).await.unwrap();
    let texts: Vec<String> = late
        .list(&MemoryFilter::for_user(DEFAULT_USER).layer(Layer::Semantic, jarvis_sdk::memory::Agents::Any))
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.text)
        .collect();
    assert_eq!(texts.len(), 3, "{texts:?}");
    assert!(texts.iter().all(|t| !t.contains("4321")), "{texts:?}");
}

#[tokio::test]
async fn forgetting_needs_two_characters() {
    let memory = MemoryService::new(
        Arc::new(InMemoryMemoryStore::new()),
        Arc::new(HashEmbedder::default()),
    );
    let err = memory.forget(&scope(), " x ").await.unwrap_err();
    assert!(matches!(err, MemoryError::ForgetTooShort { min: 2 }), "{err:?}");
    // Without a JARVIS_HOME the refusal lasts for the process.
    memory.remember(&scope(), "the door code is 4321").await.unwrap();
    let forgot = memory.forget(&scope(), "code is 4321").await.unwrap();
    assert_eq!((forgot.entries, forgot.records), (0, 1));
    assert!(memory.remember(&scope(), "Code is 4321.").await.is_err());
    assert_eq!(memory.forgotten().await.len(), 1);
}

/// Every file under `dir`, recursively, whose bytes contain `needle`.
fn files_holding(dir: &Path, needle: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else if std::fs::read(&path)
                .unwrap()
                .windows(needle.len())
                .any(|w| w == needle.as_bytes())
            {
                found.push(path);
            }
        }
    }
    found
}

#[tokio::test]
async fn a_forgotten_fact_leaves_no_bytes_in_any_file_of_the_home() {
    let faux = Arc::new(FauxProvider::from_yaml("fallback: { text: \"알겠어요.\" }").unwrap());
    let home = tempfile::tempdir().unwrap();
    // The default home: memory in SQLite.
    let app = build_app(AppConfig::for_home(home.path()).with_provider(faux))
        .await
        .unwrap();
    let meta = app.create_session(None).await.unwrap();
    let session = app.session(&meta.id).await.unwrap();
    let say = |text: String| {
        let session = session.clone();
        async move {
            let out = session.prompt(&text, Caller::Local).await.unwrap();
            session.settled().await;
            out.final_message.content
        }
    };
    let (fact, part) = ("사물함 비밀번호는 QUOKKA-7319-LANTERN 이다", "QUOKKA-7319");
    assert_eq!(say("이번 주 일정 정리해 줘".into()).await, "알겠어요.");
    assert!(say(format!("/remember {fact}")).await.contains("remembered"));
    assert_eq!(say("내일 날씨 알려 줘".into()).await, "알겠어요.");
    assert!(
        home.path().join("memory.sqlite3").exists(),
        "the default store is SQLite"
    );
    assert!(
        !files_holding(home.path(), part).is_empty(),
        "the remembered fact is on disk before it is forgotten"
    );

    let forgot = say(format!("/forget {part}")).await;
    assert!(forgot.contains("1 profile records removed"), "{forgot}");
    for needle in [fact, part, &part.to_lowercase(), "LANTERN"] {
        assert_eq!(
            files_holding(home.path(), needle),
            Vec::<std::path::PathBuf>::new(),
            "{needle:?} is still on disk"
        );
    }
    drop(session);
    drop(app);
    assert!(
        files_holding(home.path(), part).is_empty(),
        "nor after the app closed"
    );
}

#[tokio::test]
async fn people_distil_and_forget_with_slash_commands() {
    let script = r#"
rules:
  - when: { purpose: distillation }
    reply: { text: "{\"facts\": [{\"key\": \"child\", \"value\": \"딸 서연, 초등학교 3학년\", \"episodes\": [\"e1\"]}]}" }
fallback: { text: "알겠어요." }
"#;
    let faux = Arc::new(FauxProvider::from_yaml(script).unwrap());
    let clock = fixed_clock();
    let home = tempfile::tempdir().unwrap();
    let app = learning_app(home.path(), faux.clone(), clock.clone()).await;
    let meta = app.create_session(None).await.unwrap();
    let session = app.session(&meta.id).await.unwrap();
    let say = |text: &'static str| {
        let session = session.clone();
        async move {
            let out = session.prompt(text, Caller::Local).await.unwrap();
            session.settled().await;
            out.final_message.content
        }
    };

    assert!(
        say("/remember 현관 비밀번호는 4321이야")
            .await
            .contains("remembered")
    );
    clock.advance(Duration::from_secs(60));
    assert_eq!(say("우리 딸 서연이가 초등학교 3학년이 됐어").await, "알겠어요.");
    let distilled = say("/distil").await;
    assert!(
        distilled.contains("Distilled 1 episodes: 1 new facts"),
        "{distilled}"
    );
    let again = say("/distil").await;
    assert!(again.contains("Distilled 0 episodes: 0 new facts"), "{again}");
    assert_eq!(distillation_calls(&faux), 1);
    let model = app.memory().unwrap().user_model().await;
    assert_eq!(model.entries["child"], "딸 서연, 초등학교 3학년");
    assert_eq!(model.provenance["child"].len(), 1);

    let forgot = say("/forget 비밀번호는 4321").await;
    assert!(forgot.contains("1 profile records removed"), "{forgot}");
    assert!(
        !forgot.contains("4321"),
        "the reply never repeats the secret: {forgot}"
    );
    let refused = say("/remember 현관 비밀번호는 4321").await;
    assert!(refused.contains("not remembered"), "{refused}");
    let scope = app.memory_scope("main", meta.id.as_str()).unwrap();
    let profile = app
        .memory()
        .unwrap()
        .recall(&scope, "현관 비밀번호", Layer::Semantic, 5)
        .await
        .unwrap();
    assert!(
        profile.iter().all(|r| !r.record.text.contains("4321")),
        "{profile:?}"
    );

    // With thinking off, distillation is off too: no model call.
    let off_home = tempfile::tempdir().unwrap();
    let mut config = learning_config(off_home.path(), faux.clone(), clock.clone());
    config.thinking.enabled = false;
    let off = build_app(config).await.unwrap();
    let meta = off.create_session(None).await.unwrap();
    let out = off
        .session(&meta.id)
        .await
        .unwrap()
        .prompt("/distil", Caller::Local)
        .await
        .unwrap();
    assert!(out.final_message.content.contains("Distillation is off"));
    assert_eq!(distillation_calls(&faux), 1);
}
