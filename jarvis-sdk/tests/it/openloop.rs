//! Open loops (SPEC.md §11.6): the rule-based detector on its labelled set,
//! opening and closing through `OpenLoops` with `agenda_changed`, closing
//! only from the session that opened a loop, the model judge falling back to
//! the rules, due times, and the JSONL store across a restart.

use jarvis_sdk::agent::{
    JsonlOpenLoopStore, LoopFilter, LoopKind, MemoryOpenLoopStore, ModelJudge, OpenLoopStore, OpenLoops,
    RuleJudge, detect, due_time, has_cue,
};
use jarvis_sdk::common::{ManualClock, SequentialIds, Timestamp};
use jarvis_sdk::model::FauxProvider;
use jarvis_sdk::testing::RecordingAdapter;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Deserialize)]
struct Labelled {
    text: String,
    #[serde(rename = "loop")]
    is_loop: bool,
}

/// 2026-11-30 10:00 in Seoul (01:00 UTC), a Monday.
fn monday_morning() -> Timestamp {
    Timestamp::parse_rfc3339("2026-11-30T01:00:00Z").unwrap()
}

const SEOUL: i32 = 540;

/// Precision and recall of the detector on a labelled file, printed.
fn measure(file: &str) -> (f64, f64, Vec<String>) {
    let path = format!("{}/tests/data/{file}", env!("CARGO_MANIFEST_DIR"));
    let set: Vec<Labelled> = serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let (mut tp, mut fp, mut fn_) = (0, 0, 0);
    let mut misses = Vec::new();
    for item in &set {
        let found = detect(&item.text, monday_morning(), SEOUL).is_some();
        match (found, item.is_loop) {
            (true, true) => tp += 1,
            (true, false) => {
                fp += 1;
                misses.push(format!("false positive: {}", item.text));
            }
            (false, true) => {
                fn_ += 1;
                misses.push(format!("missed: {}", item.text));
            }
            (false, false) => {}
        }
        if item.is_loop {
            assert!(has_cue(&item.text), "every loop has a cue: {}", item.text);
        }
    }
    let precision = tp as f64 / (tp + fp).max(1) as f64;
    let recall = tp as f64 / (tp + fn_).max(1) as f64;
    println!(
        "open-loop detector on {file} ({} utterances): precision {precision:.3} ({tp}/{}), recall {recall:.3} ({tp}/{})",
        set.len(),
        tp + fp,
        tp + fn_
    );
    for miss in &misses {
        println!("  {miss}");
    }
    (precision, recall, misses)
}

#[test]
fn the_rule_detector_meets_its_targets_on_the_labelled_set() {
    let (precision, recall, misses) = measure("open_loops.yaml");
    assert!(precision >= 0.9, "precision {precision:.3}: {misses:?}");
    assert!(recall >= 0.7, "recall {recall:.3}: {misses:?}");
}

/// The held-out set was never used for tuning; its figures are reported,
/// with a floor well below the targets that only a broken detector misses.
#[test]
fn the_rule_detector_on_held_out_wording() {
    let (precision, recall, misses) = measure("open_loops_holdout.yaml");
    assert!(precision >= 0.6 && recall >= 0.5, "{misses:?}");
}

#[test]
fn due_times_are_read_at_the_persons_offset() {
    let now = monday_morning();
    let at = |text: &str| due_time(text, now, SEOUL).map(|t| t.to_string());
    // Tomorrow at 9, Seoul time, is 00:00 UTC on Tuesday.
    assert_eq!(
        at("내일 오전 9시에 알려줘").as_deref(),
        Some("2026-12-01T00:00:00.000Z")
    );
    assert_eq!(
        at("remind me in 2 hours").as_deref(),
        Some("2026-11-30T03:00:00.000Z")
    );
    assert_eq!(
        at("30분 후에 알려 줘").as_deref(),
        Some("2026-11-30T01:30:00.000Z")
    );
    // A deadline without an hour is 18:00 local.
    assert_eq!(
        at("금요일까지 보내 줘").as_deref(),
        Some("2026-12-04T09:00:00.000Z")
    );
    assert_eq!(at("공고 나오면 알려줘"), None, "a condition has no due time");
}

fn service(store: Arc<dyn OpenLoopStore>, clock: Arc<ManualClock>) -> OpenLoops {
    OpenLoops::new(
        store,
        Arc::new(RuleJudge),
        clock,
        Arc::new(SequentialIds::default()),
    )
    .with_utc_offset(SEOUL)
}

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(monday_morning().to_system_time()))
}

#[tokio::test]
async fn a_promise_opens_a_loop_and_only_its_session_closes_it() {
    let store: Arc<dyn OpenLoopStore> = Arc::new(MemoryOpenLoopStore::new());
    let clock = clock();
    let loops = service(store.clone(), clock.clone());
    let screen = RecordingAdapter::new();

    let opened = loops
        .after_turn(
            "karen",
            "s-karen",
            "SH 공고 나오면 알려줘",
            "네, 알려 드릴게요.",
            &[],
            &screen,
        )
        .await
        .unwrap();
    assert_eq!(opened.open.len(), 1);
    let agenda = loops.agenda().await.unwrap();
    assert_eq!(agenda.len(), 1);
    let promise = &agenda[0];
    assert_eq!(
        (promise.agent_id.as_str(), promise.session_id.as_str()),
        ("karen", "s-karen")
    );
    assert_eq!(promise.kind, LoopKind::Request);
    assert!(promise.condition.as_deref().unwrap().contains("나오면"));
    assert_eq!(screen.kinds(), ["agenda_changed"]);

    // The same cancelling words in another session change nothing.
    let other = RecordingAdapter::new();
    let judged = loops
        .after_turn(
            "main",
            "s-main",
            "알려 주지 마, 취소해",
            "알겠습니다.",
            &[],
            &other,
        )
        .await
        .unwrap();
    assert!(judged.close.is_empty());
    assert_eq!(loops.agenda().await.unwrap().len(), 1);
    assert!(other.kinds().is_empty(), "nothing changed, nothing announced");
    // Nor does a direct close from elsewhere.
    assert!(
        !store
            .close(&promise.id, "s-main", monday_morning())
            .await
            .unwrap()
    );

    // In the session that opened it, the cancellation closes it.
    clock.advance(Duration::from_secs(60));
    let closed = loops
        .after_turn("karen", "s-karen", "그 알림 취소해", "취소했어요.", &[], &screen)
        .await
        .unwrap();
    assert_eq!(closed.close, std::slice::from_ref(&promise.id));
    assert!(loops.agenda().await.unwrap().is_empty());
    assert_eq!(screen.kinds(), ["agenda_changed", "agenda_changed"]);
}

#[tokio::test]
async fn the_thought_frames_closed_loops_close_the_sessions_loops_only() {
    let store: Arc<dyn OpenLoopStore> = Arc::new(MemoryOpenLoopStore::new());
    let loops = service(store.clone(), clock());
    let screen = RecordingAdapter::new();
    loops
        .after_turn("main", "a", "내일 아침에 알려줘", "네.", &[], &screen)
        .await
        .unwrap();
    loops
        .after_turn("main", "b", "remind me tomorrow at 9", "Sure.", &[], &screen)
        .await
        .unwrap();
    let all = loops.agenda().await.unwrap();
    let (in_a, in_b) = (all[0].id.clone(), all[1].id.clone());
    let judged = loops
        .after_turn(
            "main",
            "a",
            "고마워",
            "천만에요.",
            &[in_a.clone(), in_b.clone()],
            &screen,
        )
        .await
        .unwrap();
    assert_eq!(judged.close, [in_a]);
    let left = loops.agenda().await.unwrap();
    assert_eq!(left.iter().map(|l| l.id.clone()).collect::<Vec<_>>(), [in_b]);
}

#[tokio::test]
async fn a_malformed_model_judgement_falls_back_to_the_rules() {
    let script = r#"
rules:
  - when: { purpose: judgement }
    reply: { text: "I think there is a reminder here, maybe {oops" }
"#;
    let faux = Arc::new(FauxProvider::from_yaml(script).unwrap());
    let loops = OpenLoops::new(
        Arc::new(MemoryOpenLoopStore::new()),
        Arc::new(ModelJudge::new(faux.clone(), "")),
        clock(),
        Arc::new(SequentialIds::default()),
    )
    .with_utc_offset(SEOUL);
    let screen = RecordingAdapter::new();
    let judged = loops
        .after_turn(
            "main",
            "s1",
            "내일 오전 9시에 청약 일정 다시 알려 줘",
            "네.",
            &[],
            &screen,
        )
        .await
        .unwrap();
    assert_eq!(faux.requests().len(), 1, "the model was asked");
    assert_eq!(judged.open.len(), 1, "the rules decided");
    assert_eq!(
        judged.open[0].due.map(|t| t.to_string()).as_deref(),
        Some("2026-12-01T00:00:00.000Z")
    );
    // A message with no cue costs no call.
    loops
        .after_turn("main", "s1", "고마워", "천만에요.", &[], &screen)
        .await
        .unwrap();
    assert_eq!(faux.requests().len(), 1);
}

#[tokio::test]
async fn a_valid_model_judgement_is_used_and_a_foreign_close_is_refused() {
    let script = r#"
rules:
  - when: { purpose: judgement, last_user: "금요일" }
    reply: { text: "{\"open\": [{\"text\": \"send the budget\", \"kind\": \"promise\", \"due\": \"2026-12-04T09:00:00Z\", \"condition\": null}], \"close\": []}" }
  - when: { purpose: judgement }
    reply: { text: "{\"open\": [], \"close\": [\"loop-elsewhere\"]}" }
"#;
    let faux = Arc::new(FauxProvider::from_yaml(script).unwrap());
    let loops = OpenLoops::new(
        Arc::new(MemoryOpenLoopStore::new()),
        Arc::new(ModelJudge::new(faux.clone(), "")),
        clock(),
        Arc::new(SequentialIds::default()),
    );
    let screen = RecordingAdapter::new();
    let judged = loops
        .after_turn(
            "karen",
            "s1",
            "금요일까지 예산표 보내 줄게",
            "좋아요.",
            &[],
            &screen,
        )
        .await
        .unwrap();
    assert_eq!(judged.open.len(), 1);
    assert_eq!(judged.open[0].text, "send the budget");
    assert_eq!(judged.open[0].kind, LoopKind::Promise);
    // The model closes a loop this session does not have: unusable, so the
    // rules decide (a cancellation with one loop open closes that loop).
    let judged = loops
        .after_turn("karen", "s1", "그거 취소해", "네.", &[], &screen)
        .await
        .unwrap();
    let open = loops.agenda().await.unwrap();
    assert!(open.is_empty(), "{open:?}");
    assert_eq!(judged.close.len(), 1);
}

#[tokio::test]
async fn the_jsonl_store_survives_a_restart_and_skips_a_torn_line() {
    let home = tempfile::tempdir().unwrap();
    let clock = clock();
    {
        let store: Arc<dyn OpenLoopStore> = Arc::new(JsonlOpenLoopStore::open(home.path()).unwrap());
        let loops = service(store, clock.clone());
        let screen = RecordingAdapter::new();
        loops
            .after_turn("karen", "s1", "SH 공고 나오면 알려줘", "네.", &[], &screen)
            .await
            .unwrap();
        loops
            .after_turn("main", "s2", "내일 아침에 알려줘", "네.", &[], &screen)
            .await
            .unwrap();
        loops
            .after_turn("main", "s2", "그 알림 취소해", "네.", &[], &screen)
            .await
            .unwrap();
    }
    // A crash tore the last line.
    let path = home.path().join(jarvis_sdk::agent::OPEN_LOOPS_FILE);
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("{\"kind\":\"open\",\"v\":1,\"open_lo");
    std::fs::write(&path, text).unwrap();

    let store = JsonlOpenLoopStore::open(home.path()).unwrap();
    let all = store.list(&LoopFilter::default()).await.unwrap();
    assert_eq!(all.len(), 2);
    let open = store
        .list(&LoopFilter {
            open_only: true,
            ..LoopFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].agent_id, "karen");
}

#[tokio::test]
async fn due_loops_are_found_when_their_time_comes() {
    let clock = clock();
    let loops = service(Arc::new(MemoryOpenLoopStore::new()), clock.clone());
    let screen = RecordingAdapter::new();
    loops
        .after_turn(
            "main",
            "s1",
            "30분 후에 회의 있다고 리마인드 해 줘",
            "네.",
            &[],
            &screen,
        )
        .await
        .unwrap();
    let now = |c: &ManualClock| Timestamp::from_system_time(jarvis_sdk::common::Clock::now(c));
    assert!(loops.due(Some("s1"), now(&clock)).await.unwrap().is_empty());
    clock.advance(Duration::from_secs(31 * 60));
    assert_eq!(loops.due(Some("s1"), now(&clock)).await.unwrap().len(), 1);
    assert!(loops.due(Some("s2"), now(&clock)).await.unwrap().is_empty());
}

#[tokio::test]
async fn the_postgres_store_keeps_loops_and_closes_only_from_their_session() {
    let Some((url, _)) = crate::pg::fresh_schema("open loops in Postgres").await else {
        return;
    };
    let clock = clock();
    {
        let store: Arc<dyn OpenLoopStore> = Arc::new(
            jarvis_sdk::agent::PostgresOpenLoopStore::connect(&url)
                .await
                .unwrap(),
        );
        let loops = service(store.clone(), clock.clone());
        let screen = RecordingAdapter::new();
        loops
            .after_turn("karen", "s1", "SH 공고 나오면 알려줘", "네.", &[], &screen)
            .await
            .unwrap();
        loops
            .after_turn("main", "s2", "내일 아침에 알려줘", "네.", &[], &screen)
            .await
            .unwrap();
        let all = loops.agenda().await.unwrap();
        assert_eq!(all.len(), 2);
        assert!(!store.close(&all[0].id, "s2", monday_morning()).await.unwrap());
        loops
            .after_turn("main", "s2", "그 알림 취소해", "네.", &[], &screen)
            .await
            .unwrap();
    }
    // A second process: migrations run again, the loops are there.
    let store = jarvis_sdk::agent::PostgresOpenLoopStore::connect(&url)
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let open = store
        .list(&LoopFilter {
            open_only: true,
            ..LoopFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(
        (open[0].agent_id.as_str(), open[0].session_id.as_str()),
        ("karen", "s1")
    );
    assert!(open[0].condition.is_some());
    let jarvis = store
        .list(&LoopFilter {
            agent_id: Some("main".into()),
            ..LoopFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(jarvis.len(), 1);
    assert!(jarvis[0].closed_at.is_some());
}
