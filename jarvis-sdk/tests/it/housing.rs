//! KAREN's housing tools: the loan maths against hand-computed figures,
//! argument checks, the LH client against a local server replaying wire
//! fixtures (`tests/fixtures/lh/`), the SH feed and sample sources, the
//! profile and watch stores on disk, the budget rule, and one agent turn in
//! which the model calls `sh_notice` on the sample source.

use jarvis_pack_housing::{
    FileProfileStore, FileWatchStore, FixtureNoticeSource, HOUSING_TOOLS, HousingBudgetTool, HousingConfig,
    HousingError, HousingLoanTool, HousingProfile, HousingProfileTool, HousingWatchTool, LhConfig,
    LhNoticeSource, LoanTerms, MemoryProfileStore, Notice, NoticeAgency, NoticeError, NoticeQuery,
    NoticeSource, NoticeTool, ProfileStore, RepaymentMethod, SH_NOT_CONFIGURED, ShFeed, ShNoticeSource,
    WatchStore, amortize, check_watch, housing_tools,
};
use jarvis_sdk::agent::{Tool, ToolContext, ToolResult, Typed};
use jarvis_sdk::model::{ApiKey, HttpSettings, Message};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::providers::fixtures;
use crate::providers::replay::{RecordingSleeper, Replay, Reply};
use crate::support::Turn;

// ---------------------------------------------------------------- helpers

/// The title of the notice [`with_a_new_notice`] adds.
pub(crate) const NEW_NOTICE_TITLE: &str = "서울 은평구 행복주택 추가 모집 공고";

/// The SH `samples` and one notice more, newer than them, in Seoul.
pub(crate) fn with_a_new_notice(samples: &FixtureNoticeSource) -> FixtureNoticeSource {
    let mut notices = samples.notices().to_vec();
    let mut fresh = notices[0].clone();
    fresh.id = "sample-sh-2025-07".into();
    fresh.title = NEW_NOTICE_TITLE.into();
    fresh.posted = Some("2025-05-20".into());
    notices.push(fresh);
    FixtureNoticeSource::new(NoticeAgency::Sh, notices)
}

/// A fresh directory under the system temp dir, removed when dropped.
struct Home(PathBuf);

impl Home {
    fn new(name: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("jarvis-housing-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Home(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Calls `tool` as the loop does: an argument error becomes an error result.
pub(crate) async fn call(tool: &dyn Tool, args: Value) -> ToolResult {
    let ctx = ToolContext::new("s1", "karen");
    match tool.call(args, &ctx).await {
        Ok(result) => result,
        Err(e) => ToolResult::from(e),
    }
}

#[track_caller]
pub(crate) fn assert_ok(result: &ToolResult) {
    assert!(!result.is_error, "unexpected error result: {}", result.content);
}

#[track_caller]
pub(crate) fn assert_error(result: &ToolResult, needle: &str) {
    assert!(
        result.is_error,
        "expected an error result, got: {}",
        result.content
    );
    assert!(
        result.content.contains(needle),
        "{needle:?} not in {:?}",
        result.content
    );
}

fn sh_samples() -> Arc<dyn NoticeSource> {
    Arc::new(FixtureNoticeSource::sh())
}

fn lh_samples() -> Arc<dyn NoticeSource> {
    Arc::new(FixtureNoticeSource::lh())
}

const KEY: &str = "test+KEY/secret==";

fn lh_source(url: &str, key: Option<&str>, sleeper: Arc<RecordingSleeper>) -> LhNoticeSource {
    let config = LhConfig::new(key.map(ApiKey::new))
        .with_base_url(url)
        .with_http(HttpSettings {
            sleeper,
            read_timeout: Duration::from_secs(10),
            ..HttpSettings::default()
        });
    LhNoticeSource::new(config).unwrap()
}

fn lh_replies(names: &[&str]) -> Vec<Reply> {
    names.iter().map(|n| fixtures::load("lh", n).into()).collect()
}

/// The query string as name → still-encoded value.
fn params(query: Option<&str>) -> BTreeMap<String, String> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

fn titles(notices: &[Notice]) -> Vec<&str> {
    notices.iter().map(|n| n.title.as_str()).collect()
}

// ------------------------------------------------------------- loan maths

fn schedule(
    principal: f64,
    rate: f64,
    years: f64,
    method: RepaymentMethod,
) -> jarvis_pack_housing::LoanSchedule {
    amortize(&LoanTerms::new(principal, rate, years, method).unwrap())
}

#[test]
fn equal_payment_matches_the_hand_computed_figures() {
    // P = 100,000,000, r = 4 % / 12 = 0.0033333…, n = 360.
    // (1 + r)^360 = 3.3134980…, so M = P·r·g/(g − 1)
    //   = 333,333.33 × 3.3134980 / 2.3134980 = 333,333.33 × 1.4322459 = 477,415.30
    // → 477,415원 every month. Total paid = 477,415.2955 × 360 = 171,869,506;
    // total interest = 171,869,506 − 100,000,000 = 71,869,506.
    // Month 1: interest = P·r = 333,333.33; principal = 477,415.30 − 333,333.33 = 144,081.96.
    let s = schedule(100_000_000.0, 4.0, 30.0, RepaymentMethod::EqualPayment);
    assert_eq!(s.months.len(), 360);
    assert_eq!(s.first_payment().round(), 477_415.0);
    assert_eq!(s.last_payment().round(), 477_415.0);
    assert_eq!(s.total_paid().round(), 171_869_506.0);
    assert_eq!(s.total_interest().round(), 71_869_506.0);
    assert_eq!(s.months[0].interest.round(), 333_333.0);
    assert_eq!(s.months[0].principal.round(), 144_082.0);
    assert_eq!(s.months[0].balance.round(), 99_855_918.0);

    // P = 50,000,000, r = 3.5 % / 12 = 0.00291667, n = 240:
    // (1 + r)^240 = 2.0117020, M = 145,833.33 × 2.0117020 / 1.0117020 = 289,979.86 → 289,980원;
    // interest = 289,979.86 × 240 − 50,000,000 = 19,595,166.
    let s = schedule(50_000_000.0, 3.5, 20.0, RepaymentMethod::EqualPayment);
    assert_eq!(s.first_payment().round(), 289_980.0);
    assert_eq!(s.total_interest().round(), 19_595_166.0);
}

#[test]
fn equal_principal_matches_the_hand_computed_figures() {
    // Principal per month = 100,000,000 / 360 = 277,777.78.
    // Month 1: interest = 100,000,000 × 0.0033333 = 333,333.33 → 611,111.11 → 611,111원.
    // Month 360: interest on the last 277,777.78 = 925.93 → 278,703.70 → 278,704원.
    // Total interest = P·r·(n + 1)/2 = 333,333.33 × 361 / 2 = 60,166,666.67 → 60,166,667원.
    let s = schedule(100_000_000.0, 4.0, 30.0, RepaymentMethod::EqualPrincipal);
    assert_eq!(s.first_payment().round(), 611_111.0);
    assert_eq!(s.last_payment().round(), 278_704.0);
    assert_eq!(s.total_interest().round(), 60_166_667.0);
    assert_eq!(s.total_paid().round(), 160_166_667.0);
    assert!(
        s.months.windows(2).all(|w| w[1].payment < w[0].payment),
        "payments fall"
    );
}

#[test]
fn bullet_matches_the_hand_computed_figures() {
    // Interest only: 100,000,000 × 0.04 / 12 = 333,333.33 → 333,333원 a month;
    // 360 × 333,333.33 = 120,000,000원 of interest; the last month adds the
    // principal: 100,333,333원.
    let s = schedule(100_000_000.0, 4.0, 30.0, RepaymentMethod::Bullet);
    assert_eq!(s.first_payment().round(), 333_333.0);
    assert_eq!(s.months[358].payment.round(), 333_333.0);
    assert_eq!(s.last_payment().round(), 100_333_333.0);
    assert_eq!(s.total_interest().round(), 120_000_000.0);
    assert_eq!(s.total_paid().round(), 220_000_000.0);
}

#[test]
fn a_zero_rate_splits_the_principal_evenly() {
    // 120,000,000 over 10 years at 0 %: 1,000,000 a month, no interest.
    for method in [RepaymentMethod::EqualPayment, RepaymentMethod::EqualPrincipal] {
        let s = schedule(120_000_000.0, 0.0, 10.0, method);
        assert_eq!(s.first_payment(), 1_000_000.0, "{method:?}");
        assert_eq!(s.last_payment(), 1_000_000.0, "{method:?}");
        assert_eq!(s.total_interest(), 0.0, "{method:?}");
    }
    let bullet = schedule(120_000_000.0, 0.0, 10.0, RepaymentMethod::Bullet);
    assert_eq!(bullet.first_payment(), 0.0);
    assert_eq!(bullet.last_payment(), 120_000_000.0);
}

#[tokio::test]
async fn housing_loan_answers_in_korean_with_the_figures() {
    let tool = Typed::new(HousingLoanTool);
    let result = call(
        &tool,
        json!({"principal": 100000000, "annual_rate_percent": 4, "years": 30, "method": "equal_payment"}),
    )
    .await;
    assert_ok(&result);
    for needle in [
        "원리금균등상환",
        "대출 원금: 100,000,000원",
        "첫 달 상환액: 477,415원",
        "총 이자: 71,869,506원",
        "- 1개월차: 477,415원",
        "- 360개월차:",
        "first_payment=477415",
    ] {
        assert!(
            result.content.contains(needle),
            "{needle:?} in {}",
            result.content
        );
    }
    // Korean method names are accepted too.
    let bullet = call(
        &tool,
        json!({"principal": 1e8, "annual_rate_percent": 4.0, "years": 30.0, "method": "만기일시"}),
    )
    .await;
    assert_ok(&bullet);
    assert!(
        bullet.content.contains("총 이자: 120,000,000원"),
        "{}",
        bullet.content
    );
}

#[tokio::test]
async fn housing_loan_refuses_bad_inputs_clearly() {
    let tool = Typed::new(HousingLoanTool);
    let base = json!({"principal": 100000000, "annual_rate_percent": 4, "years": 30, "method": "bullet"});
    let cases = [
        ("principal", json!(0), "principal must be a positive amount"),
        ("principal", json!(-5), "principal must be a positive amount"),
        ("principal", json!(2e11), "principal must be at most"),
        ("annual_rate_percent", json!(-1), "between 0 and 100"),
        ("annual_rate_percent", json!(150), "between 0 and 100"),
        ("years", json!(0), "whole number from 1 to 50"),
        ("years", json!(51), "whole number from 1 to 50"),
        ("years", json!(2.5), "whole number from 1 to 50"),
        ("method", json!("balloon"), "unknown variant"),
        ("principal", json!("1억"), "invalid type"),
    ];
    for (field, value, needle) in cases {
        let mut args = base.clone();
        args[field] = value.clone();
        let result = call(&tool, args).await;
        assert_error(&result, needle);
    }
    let missing = call(&tool, json!({"principal": 1000})).await;
    assert_error(&missing, "missing field");
}

// --------------------------------------------------------------- LH client

#[tokio::test]
async fn lh_reads_notices_and_sends_the_documented_query() {
    let replay = Replay::start(lh_replies(&["notices"])).await;
    let sleeper = Arc::new(RecordingSleeper::default());
    let source = lh_source(&replay.url, Some(KEY), sleeper.clone());
    let notices = source.fetch(NoticeQuery::new().with_limit(20)).await.unwrap();
    assert_eq!(notices.len(), 5);
    let first = &notices[0];
    assert_eq!(first.id, "2015122300019001");
    assert_eq!(first.title, "서울 은평구 행복주택 입주자 모집공고");
    assert_eq!(first.kind, "행복주택");
    assert_eq!(first.region, "서울특별시");
    assert_eq!(first.posted.as_deref(), Some("2025-05-12"));
    assert_eq!(first.closes.as_deref(), Some("2025-05-23"));
    assert_eq!(first.status, "공고중");
    assert!(
        first
            .url
            .as_deref()
            .unwrap()
            .starts_with("https://apply.lh.or.kr/")
    );
    assert_eq!(first.source, NoticeAgency::Lh);
    assert!(!first.sample);

    let requests = replay.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/lhLeaseNoticeInfo1/lhLeaseNoticeInfo1");
    let p = params(requests[0].query.as_deref());
    assert_eq!(p["serviceKey"], "test%2BKEY%2Fsecret%3D%3D", "encoded once");
    assert_eq!(p["PG_SZ"], "50");
    assert_eq!(p["PAGE"], "1");
    assert!(!p.contains_key("CNP_CD"), "no region, no CNP_CD");
    assert!(sleeper.waits.lock().unwrap().is_empty());
}

#[tokio::test]
async fn lh_accepts_the_encoded_form_of_the_key() {
    let replay = Replay::start(lh_replies(&["empty"])).await;
    let source = lh_source(&replay.url, Some("abc%2Bdef%3D%3D"), Arc::default());
    source.fetch(NoticeQuery::new()).await.unwrap();
    let p = params(replay.requests()[0].query.as_deref());
    assert_eq!(p["serviceKey"], "abc%2Bdef%3D%3D", "not encoded twice");
}

#[tokio::test]
async fn lh_sends_cnp_cd_for_known_provinces_and_filters_everything_locally() {
    // 서울 has a known code: it is sent, and the rows are filtered again
    // (the replayed page is not filtered by the test server).
    let replay = Replay::start(lh_replies(&["notices"])).await;
    let source = lh_source(&replay.url, Some(KEY), Arc::default());
    let seoul = source
        .fetch(NoticeQuery::new().with_region("서울"))
        .await
        .unwrap();
    assert_eq!(
        titles(&seoul),
        [
            "서울 은평구 행복주택 입주자 모집공고",
            "서울 중계 영구임대주택 예비입주자 모집"
        ]
    );
    assert_eq!(params(replay.requests()[0].query.as_deref())["CNP_CD"], "11");

    // 강원's code could not be confirmed: not sent, filtered on CNP_CD_NM.
    let replay = Replay::start(lh_replies(&["notices"])).await;
    let source = lh_source(&replay.url, Some(KEY), Arc::default());
    let gangwon = source
        .fetch(NoticeQuery::new().with_region("강원도"))
        .await
        .unwrap();
    assert_eq!(titles(&gangwon), ["춘천우두 A1블록 국민임대주택 예비입주자 모집"]);
    assert!(!params(replay.requests()[0].query.as_deref()).contains_key("CNP_CD"));

    // Keyword on the title and the limit, newest first.
    let replay = Replay::start(lh_replies(&["notices", "notices"])).await;
    let source = lh_source(&replay.url, Some(KEY), Arc::default());
    let rental = source
        .fetch(NoticeQuery::new().with_keyword("임대").with_limit(2))
        .await
        .unwrap();
    assert_eq!(
        titles(&rental),
        [
            "춘천우두 A1블록 국민임대주택 예비입주자 모집",
            "청년 매입임대주택 입주자 모집 공고"
        ]
    );
    let none = source
        .fetch(NoticeQuery::new().with_keyword("청약"))
        .await
        .unwrap();
    assert!(none.is_empty());
}

#[tokio::test]
async fn lh_reports_a_failure_code() {
    let replay = Replay::start(lh_replies(&["ss_code_n"])).await;
    let sleeper = Arc::new(RecordingSleeper::default());
    let source = lh_source(&replay.url, Some(KEY), sleeper.clone());
    let err = source.fetch(NoticeQuery::new()).await.unwrap_err();
    assert!(matches!(err, NoticeError::Api { status: None, .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("SS_CODE N instead of Y"), "{text}");
    assert!(text.contains("RS_DTTM=20250513093015"), "{text}");
    assert!(sleeper.waits.lock().unwrap().is_empty(), "not retried");
}

#[tokio::test]
async fn lh_names_a_refused_key() {
    let replay = Replay::start(lh_replies(&["gateway_key_error"])).await;
    let source = lh_source(&replay.url, Some(KEY), Arc::default());
    let err = source.fetch(NoticeQuery::new()).await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("SERVICE_KEY_IS_NOT_REGISTERED_ERROR (reason code 30)"),
        "{text}"
    );
    assert!(text.contains("JARVIS_HOUSING__LH_SERVICE_KEY"), "{text}");
    assert!(!text.contains("secret"), "the key never shows: {text}");
}

#[tokio::test]
async fn lh_retries_a_server_error_before_the_first_byte() {
    let replay = Replay::start(lh_replies(&["error_500", "notices"])).await;
    let sleeper = Arc::new(RecordingSleeper::default());
    let source = lh_source(&replay.url, Some(KEY), sleeper.clone());
    let notices = source.fetch(NoticeQuery::new()).await.unwrap();
    assert_eq!(notices.len(), 5);
    assert_eq!(replay.requests().len(), 2);
    assert_eq!(sleeper.waits.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn lh_gives_up_after_the_retries_with_the_status() {
    let replay = Replay::start(lh_replies(&["error_500", "error_500", "error_500", "error_500"])).await;
    let sleeper = Arc::new(RecordingSleeper::default());
    let source = lh_source(&replay.url, Some(KEY), sleeper.clone());
    let err = source.fetch(NoticeQuery::new()).await.unwrap_err();
    assert!(
        matches!(
            err,
            NoticeError::Api {
                status: Some(500),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("Internal Server Error"), "{err}");
    assert_eq!(replay.requests().len(), 4);
    assert_eq!(sleeper.waits.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn lh_rejects_malformed_answers_without_panicking() {
    for (name, needle) in [
        ("malformed", "not JSON"),
        ("no_header", "expected a list of dsSch/resHeader/dsList blocks"),
    ] {
        let replay = Replay::start(lh_replies(&[name])).await;
        let source = lh_source(&replay.url, Some(KEY), Arc::default());
        let err = source.fetch(NoticeQuery::new()).await.unwrap_err();
        assert!(matches!(err, NoticeError::Malformed { .. }), "{name}: {err:?}");
        assert!(err.to_string().contains(needle), "{name}: {err}");
    }
}

#[tokio::test]
async fn lh_unreachable_is_a_clear_error_that_hides_the_key() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let sleeper = Arc::new(RecordingSleeper::default());
    let source = lh_source(&url, Some(KEY), sleeper.clone());
    let err = source.fetch(NoticeQuery::new()).await.unwrap_err();
    assert!(err.is_unreachable(), "{err:?}");
    let text = format!("{err} / {err:?}");
    assert!(
        text.contains("lh notice source is unreachable: cannot connect"),
        "{text}"
    );
    assert!(!text.contains("secret") && !text.contains("serviceKey"), "{text}");
    assert_eq!(sleeper.waits.lock().unwrap().len(), 3, "retried before giving up");
}

#[tokio::test]
async fn lh_without_a_key_sends_nothing() {
    let replay = Replay::start(lh_replies(&["notices"])).await;
    for key in [None, Some("  ")] {
        let source = lh_source(&replay.url, key, Arc::default());
        let err = source.fetch(NoticeQuery::new()).await.unwrap_err();
        assert!(err.is_not_configured(), "{err:?}");
        assert!(
            err.to_string().contains("set JARVIS_HOUSING__LH_SERVICE_KEY"),
            "{err}"
        );
    }
    assert!(replay.requests().is_empty());
}

#[tokio::test]
async fn lh_notice_tool_lists_notices_and_says_when_none_matched() {
    let replay = Replay::start(lh_replies(&["notices", "empty"])).await;
    let tool = Typed::new(NoticeTool::lh(Arc::new(lh_source(
        &replay.url,
        Some(KEY),
        Arc::default(),
    ))));
    let found = call(&tool, json!({"region": "서울", "limit": 1})).await;
    assert_ok(&found);
    for needle in [
        "LH 공공데이터포털 API",
        "1. 서울 은평구 행복주택 입주자 모집공고",
        "종류: 행복주택 | 지역: 서울특별시",
        "공고일: 2025-05-12 | 마감일: 2025-05-23 | 상태: 공고중",
        "링크: https://apply.lh.or.kr/",
        "출처: LH (한국토지주택공사)",
    ] {
        assert!(found.content.contains(needle), "{needle:?} in {}", found.content);
    }
    assert!(!found.content.contains("중계"), "limit 1: {}", found.content);
    assert!(!found.content.contains("샘플"), "real data is not marked");

    let none = call(&tool, json!({"region": "서울", "keyword": "청약"})).await;
    assert_ok(&none);
    assert!(
        none.content
            .contains("조건에 맞는 공고가 없습니다 (no notice matched)"),
        "{}",
        none.content
    );
    assert!(
        none.content.contains("지역=서울, 키워드=청약"),
        "{}",
        none.content
    );
}

#[tokio::test]
async fn lh_notice_tool_turns_failures_into_error_results() {
    let replay = Replay::start(lh_replies(&["ss_code_n"])).await;
    let tool = Typed::new(NoticeTool::lh(Arc::new(lh_source(
        &replay.url,
        Some(KEY),
        Arc::default(),
    ))));
    let result = call(&tool, json!({})).await;
    assert_error(&result, "LH 공고를 조회하지 못했습니다 (lookup failed)");
    assert_error(&result, "SS_CODE N");
}

// ------------------------------------------------- SH feed and samples

#[tokio::test]
async fn sh_without_a_feed_says_there_is_no_public_api() {
    let tool = Typed::new(NoticeTool::sh(Arc::new(ShNoticeSource::unconfigured())));
    let result = call(&tool, json!({"region": "서울", "limit": 1})).await;
    assert_error(&result, "SH has no public API");
    assert_error(&result, "JARVIS_HOUSING__SH_URL");
    assert_error(&result, "fixture source");
    assert!(SH_NOT_CONFIGURED.contains("could be verified"));
}

const FEED: &str = r#"{"notices": [
  {"id": "a", "title": "서울 마포구 행복주택 예비입주자 모집", "kind": "행복주택", "region": "서울특별시 마포구",
   "posted": "2025.05.01", "closes": "20250515", "status": "접수중", "url": "https://example.org/a",
   "deposit": 30000000, "monthly_rent": 120000},
  {"id": "b", "title": "서울 송파구 국민임대 모집", "kind": "국민임대", "region": "서울특별시 송파구",
   "posted": "2025-05-03", "status": "공고중"}
]}"#;

#[tokio::test]
async fn sh_reads_a_feed_file() {
    let home = Home::new("sh-file");
    let path = home.path().join("sh.json");
    std::fs::write(&path, FEED).unwrap();
    let source = ShNoticeSource::new(ShFeed::parse(&format!("file://{}", path.display()))).unwrap();
    let notices = source.fetch(NoticeQuery::new()).await.unwrap();
    assert_eq!(
        titles(&notices),
        [
            "서울 송파구 국민임대 모집",
            "서울 마포구 행복주택 예비입주자 모집"
        ]
    );
    assert_eq!(notices[1].closes.as_deref(), Some("2025-05-15"));
    assert_eq!(notices[1].deposit, Some(30_000_000));
    assert!(notices.iter().all(|n| n.source == NoticeAgency::Sh && !n.sample));
    let mapo = source
        .fetch(NoticeQuery::new().with_region("마포구"))
        .await
        .unwrap();
    assert_eq!(mapo.len(), 1);

    std::fs::write(&path, "<html>not a feed</html>").unwrap();
    let err = source.fetch(NoticeQuery::new()).await.unwrap_err();
    assert!(matches!(err, NoticeError::Malformed { .. }), "{err:?}");
    std::fs::remove_file(&path).unwrap();
    let err = source.fetch(NoticeQuery::new()).await.unwrap_err();
    assert!(
        err.is_unreachable() && err.to_string().contains("cannot read the feed file"),
        "{err}"
    );
}

#[tokio::test]
async fn sh_reads_a_feed_url() {
    let reply = Reply {
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
        body: FEED.as_bytes().to_vec(),
        chunk: 5,
        ending: crate::providers::replay::Ending::Complete,
    };
    let replay = Replay::start(vec![reply]).await;
    let source = ShNoticeSource::new(ShFeed::parse(&format!("{}/sh/notices.json", replay.url))).unwrap();
    let notices = source.fetch(NoticeQuery::new().with_limit(1)).await.unwrap();
    assert_eq!(titles(&notices), ["서울 송파구 국민임대 모집"]);
    assert_eq!(replay.requests()[0].path, "/sh/notices.json");
}

#[tokio::test]
async fn sample_sources_filter_like_the_others_and_say_they_are_samples() {
    let sh = FixtureNoticeSource::sh();
    let newest = sh
        .fetch(NoticeQuery::new().with_region("서울").with_limit(1))
        .await
        .unwrap();
    assert_eq!(titles(&newest), ["서울 강서구 행복주택 입주자 모집 공고"]);
    assert!(newest[0].sample);
    let gangseo = sh
        .fetch(NoticeQuery::new().with_region("서울 강서구").with_limit(20))
        .await
        .unwrap();
    assert_eq!(
        titles(&gangseo),
        [
            "서울 강서구 행복주택 입주자 모집 공고",
            "마곡지구 공공분양주택 입주자 모집 공고"
        ]
    );
    let subscription = sh.fetch(NoticeQuery::new().with_keyword("청약")).await.unwrap();
    assert_eq!(
        titles(&subscription),
        ["고덕강일지구 토지임대부 분양주택 청약 공고"]
    );
    let busan = sh.fetch(NoticeQuery::new().with_region("부산")).await.unwrap();
    assert!(busan.is_empty());
    let lh = FixtureNoticeSource::lh();
    let gyeonggi = lh
        .fetch(NoticeQuery::new().with_region("경기도").with_limit(20))
        .await
        .unwrap();
    assert_eq!(gyeonggi.len(), 2);
    assert_eq!(
        lh.fetch(NoticeQuery::new()).await.unwrap().len(),
        5,
        "default limit"
    );

    let tool = Typed::new(NoticeTool::sh(sh_samples()));
    let result = call(&tool, json!({"region": "서울", "limit": 1})).await;
    assert_ok(&result);
    assert!(
        result.content.contains("SH 샘플 데이터 (실제 공고 아님)"),
        "{}",
        result.content
    );
    assert!(
        result
            .content
            .contains("1. 서울 강서구 행복주택 입주자 모집 공고 (샘플 데이터)"),
        "{}",
        result.content
    );
    assert!(
        result.content.contains("보증금 21,000,000원부터"),
        "{}",
        result.content
    );
}

#[tokio::test]
async fn notice_tools_refuse_bad_arguments() {
    let tool = Typed::new(NoticeTool::sh(sh_samples()));
    for (args, needle) in [
        (json!({"limit": 0}), "limit must be 1 to 20"),
        (json!({"limit": 21}), "limit must be 1 to 20"),
        (json!({"limit": -1}), "invalid value"),
        (json!({"limit": "three"}), "invalid type"),
        (json!({"region": 11}), "invalid type"),
        (
            json!({"keyword": "가".repeat(51)}),
            "keyword must be at most 50 characters",
        ),
    ] {
        let result = call(&tool, args.clone()).await;
        assert_error(&result, needle);
    }
}

// ------------------------------------------------------------------ profile

#[tokio::test]
async fn the_profile_is_saved_merged_and_reloaded_from_disk() {
    let home = Home::new("profile");
    let tool = Typed::new(HousingProfileTool::new(Arc::new(FileProfileStore::in_home(
        home.path(),
    ))));
    let empty = call(&tool, json!({"action": "get"})).await;
    assert_ok(&empty);
    assert!(
        empty.content.contains("no housing profile yet"),
        "{}",
        empty.content
    );

    let set = call(
        &tool,
        json!({"action": "set", "profile": {
            "household_size": 2, "income_band": "up_to_100", "homeless": true,
            "savings": 30000000, "monthly_budget": 600000, "preferred_regions": ["서울", "경기 성남시"]
        }}),
    )
    .await;
    assert_ok(&set);
    assert!(set.content.contains("보유 자금: 30,000,000원"), "{}", set.content);
    let patch = call(&tool, json!({"action": "set", "profile": {"savings": 35000000}})).await;
    assert_ok(&patch);

    // A new store over the same file sees the merged profile.
    let reloaded = FileProfileStore::in_home(home.path())
        .load()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reloaded.household_size, Some(2));
    assert_eq!(reloaded.savings, Some(35_000_000));
    assert_eq!(
        reloaded.preferred_regions,
        Some(vec!["서울".to_owned(), "경기 성남시".to_owned()])
    );
    let file: Value =
        serde_json::from_slice(&std::fs::read(home.path().join("housing_profile.json")).unwrap()).unwrap();
    assert_eq!(file["v"], 1);
    assert_eq!(file["profile"]["income_band"], "up_to_100");

    let tool2 = Typed::new(HousingProfileTool::new(Arc::new(FileProfileStore::in_home(
        home.path(),
    ))));
    let got = call(&tool2, json!({"action": "get"})).await;
    assert_ok(&got);
    for needle in [
        "세대원 수: 2명",
        "도시근로자 월평균소득 100% 이하",
        "무주택 세대: 예",
        "보유 자금: 35,000,000원",
        "선호 지역: 서울, 경기 성남시",
    ] {
        assert!(got.content.contains(needle), "{needle:?} in {}", got.content);
    }
}

#[tokio::test]
async fn the_profile_tool_refuses_bad_arguments_and_keeps_the_stored_profile() {
    let store = Arc::new(MemoryProfileStore::new());
    store
        .save(HousingProfile {
            household_size: Some(3),
            ..HousingProfile::default()
        })
        .await
        .unwrap();
    let tool = Typed::new(HousingProfileTool::new(store.clone()));
    for (args, needle) in [
        (json!({"action": "delete"}), "unknown variant"),
        (json!({"action": "set"}), "needs `profile`"),
        (json!({"action": "get", "profile": {}}), "only for `action: set`"),
        (
            json!({"action": "set", "profile": {"househod_size": 2}}),
            "unknown field",
        ),
        (
            json!({"action": "set", "profile": {"household_size": 0}}),
            "household_size must be 1 to 20",
        ),
        (
            json!({"action": "set", "profile": {"savings": -1}}),
            "invalid value",
        ),
    ] {
        let result = call(&tool, args.clone()).await;
        assert_error(&result, needle);
    }
    assert_eq!(
        store.load().await.unwrap().unwrap().household_size,
        Some(3),
        "unchanged"
    );
}

#[tokio::test]
async fn a_corrupt_profile_file_is_an_error_and_is_left_alone() {
    let home = Home::new("profile-corrupt");
    let path = home.path().join("housing_profile.json");
    std::fs::write(&path, "{ not json").unwrap();
    let store = FileProfileStore::in_home(home.path());
    let err = store.load().await.unwrap_err();
    assert!(matches!(err, HousingError::Corrupt { .. }), "{err:?}");
    let tool = Typed::new(HousingProfileTool::new(Arc::new(store)));
    let result = call(&tool, json!({"action": "set", "profile": {"household_size": 1}})).await;
    assert_error(&result, "is not valid");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "{ not json");
    std::fs::write(&path, r#"{"v": 2, "profile": {}}"#).unwrap();
    let err = FileProfileStore::new(&path).load().await.unwrap_err();
    assert!(err.to_string().contains("version 2 is not supported"), "{err}");
}

// ------------------------------------------------------------------ watches

#[tokio::test]
async fn watches_are_idempotent_and_persist() {
    let home = Home::new("watch");
    let tool = Typed::new(HousingWatchTool::new(Arc::new(FileWatchStore::in_home(
        home.path(),
    ))));
    assert!(tool.requires_approval());
    let first = call(&tool, json!({"region": "서울", "keyword": "행복주택"})).await;
    assert_ok(&first);
    assert!(
        first.content.contains("새 공고 알림을 등록했습니다"),
        "{}",
        first.content
    );
    assert!(
        first.content.contains("once the scheduler runs"),
        "{}",
        first.content
    );
    let again = call(&tool, json!({"region": " 서울 ", "keyword": "행복주택"})).await;
    assert_ok(&again);
    assert!(again.content.contains("이미 있습니다"), "{}", again.content);
    let other = call(&tool, json!({"region": "경기"})).await;
    assert_ok(&other);

    let store = FileWatchStore::in_home(home.path());
    let watches = store.list().await.unwrap();
    assert_eq!(watches.len(), 2);
    assert_eq!(watches[0].region.as_deref(), Some("서울"));
    assert_eq!(watches[0].keyword.as_deref(), Some("행복주택"));
    assert_eq!(watches[1].keyword, None);
    let added = store
        .add(Some("서울".into()), Some("행복주택".into()))
        .await
        .unwrap();
    assert!(!added.created);
    assert_eq!(store.list().await.unwrap().len(), 2);

    let too_long = call(&tool, json!({"region": "서".repeat(51)})).await;
    assert_error(&too_long, "region must be at most 50 characters");
    let bad = call(&tool, json!({"region": ["서울"]})).await;
    assert_error(&bad, "invalid type");
}

#[tokio::test]
async fn checking_a_watch_reports_each_notice_once() {
    let home = Home::new("watch-check");
    let store = FileWatchStore::in_home(home.path());
    let watch = store.add(Some("서울".into()), None).await.unwrap().watch;
    let samples = FixtureNoticeSource::sh();
    let first = check_watch(&store, &watch.id, &samples).await.unwrap();
    assert_eq!(first.len(), samples.notices().len(), "everything is new at first");
    let second = check_watch(&store, &watch.id, &samples).await.unwrap();
    assert!(second.is_empty(), "nothing new: {:?}", titles(&second));

    // A notice appears: only it is reported, also through a new store
    // instance over the same file.
    let grown = with_a_new_notice(&samples);
    let reopened = FileWatchStore::in_home(home.path());
    let third = check_watch(&reopened, &watch.id, &grown).await.unwrap();
    assert_eq!(titles(&third), [NEW_NOTICE_TITLE]);
    assert!(
        check_watch(&reopened, &watch.id, &grown)
            .await
            .unwrap()
            .is_empty()
    );

    let err = check_watch(&reopened, "w-0000000000000000", &grown)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no watch with id"), "{err}");
    let broken = check_watch(&reopened, &watch.id, &ShNoticeSource::unconfigured())
        .await
        .unwrap_err();
    assert!(
        matches!(broken, HousingError::Notice(NoticeError::NotConfigured { .. })),
        "{broken:?}"
    );
}

// ------------------------------------------------------------------- budget

#[tokio::test]
async fn housing_budget_sorts_open_notices_by_the_stated_rule() {
    let profiles = Arc::new(MemoryProfileStore::new());
    let tool = Typed::new(HousingBudgetTool::new(
        vec![lh_samples(), sh_samples()],
        profiles.clone(),
    ));
    let result = call(&tool, json!({"budget": 30000000, "region": "서울"})).await;
    assert_ok(&result);
    let text = &result.content;
    let section = |name: &str| {
        let start = text
            .find(&format!("[{name}]"))
            .unwrap_or_else(|| panic!("no {name} in {text}"));
        let rest = &text[start + 1..];
        &rest[..rest.find("\n\n[").unwrap_or(rest.len())]
    };
    let fits = section("예산 안에 드는 공고");
    assert!(fits.contains("서울 강서구 행복주택 입주자 모집 공고"), "{fits}");
    assert!(fits.contains("보증금 21,000,000원 ≤ 예산"), "{fits}");
    assert!(fits.contains("[서울 강남구] 기존주택 전세임대"), "{fits}");
    let loans = section("대출을 더하면 가능한 공고");
    assert!(
        loans.contains("고덕강일지구 토지임대부 분양주택 청약 공고"),
        "{loans}"
    );
    assert!(loans.contains("부족액 320,000,000원"), "{loans}");
    assert!(text.contains("판단 기준:"), "the rule is stated: {text}");
    assert!(text.contains("마감된 공고 3건은 뺐습니다"), "{text}");
    assert!(!text.contains("장기전세"), "closed notices are left out: {text}");
    assert!(text.contains("주거 프로필이 없어"), "{text}");
    assert!(text.contains("(샘플 데이터)"), "{text}");

    // With a monthly budget the loan is judged: 320,000,000 at 4 % over 30
    // years is 1,527,729 a month, above 600,000.
    profiles
        .save(HousingProfile {
            monthly_budget: Some(600_000),
            preferred_regions: Some(vec!["서울".into()]),
            ..HousingProfile::default()
        })
        .await
        .unwrap();
    let judged = call(&tool, json!({"budget": 30000000})).await;
    assert_ok(&judged);
    assert!(
        judged.content.contains("지역: 프로필의 선호 지역 (서울)"),
        "{}",
        judged.content
    );
    assert!(
        !judged.content.contains("[대출을 더하면 가능한 공고]"),
        "{}",
        judged.content
    );
    assert!(
        judged.content.contains("월 1,527,729원 > 월 부담 한도 600,000원"),
        "{}",
        judged.content
    );
}

#[tokio::test]
async fn housing_budget_refuses_bad_budgets_and_reports_dead_sources() {
    let tool = Typed::new(HousingBudgetTool::new(
        vec![sh_samples()],
        Arc::new(MemoryProfileStore::new()),
    ));
    for (args, needle) in [
        (json!({"budget": 0}), "budget must be a positive amount"),
        (json!({"budget": -3}), "budget must be a positive amount"),
        (json!({"budget": 1e13}), "budget must be a positive amount"),
        (json!({"budget": "3천만"}), "invalid type"),
        (json!({}), "missing field `budget`"),
    ] {
        let result = call(&tool, args.clone()).await;
        assert_error(&result, needle);
    }
    let dead = Typed::new(HousingBudgetTool::new(
        vec![Arc::new(ShNoticeSource::unconfigured())],
        Arc::new(MemoryProfileStore::new()),
    ));
    assert_error(&call(&dead, json!({"budget": 1e7})).await, "SH has no public API");
    let half = Typed::new(HousingBudgetTool::new(
        vec![lh_samples(), Arc::new(ShNoticeSource::unconfigured())],
        Arc::new(MemoryProfileStore::new()),
    ));
    let partial = call(&half, json!({"budget": 1e7})).await;
    assert_ok(&partial);
    assert!(
        partial.content.contains("조회하지 못한 출처: SH"),
        "{}",
        partial.content
    );
}

// ----------------------------------------------------- configuration, turn

#[tokio::test]
async fn the_configuration_comes_from_the_environment() {
    let home = Home::new("config");
    let vars = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    };
    // Live without key or feed: both look-ups explain what is missing.
    let live = HousingConfig::from_vars(home.path(), vars(&[])).unwrap();
    let tools = housing_tools(&live);
    let names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
    assert_eq!(names, HOUSING_TOOLS);
    assert_error(
        &call(tools[0].as_ref(), json!({})).await,
        "JARVIS_HOUSING__LH_SERVICE_KEY",
    );
    assert_error(&call(tools[1].as_ref(), json!({})).await, "SH has no public API");

    // Fixture mode: samples for both.
    let fixture =
        HousingConfig::from_vars(home.path(), vars(&[("JARVIS_HOUSING__MODE", "fixture")])).unwrap();
    let sh = call(housing_tools(&fixture)[1].as_ref(), json!({"limit": 1})).await;
    assert_ok(&sh);
    assert!(sh.content.contains("(샘플 데이터)"), "{}", sh.content);

    // The profile lands in $JARVIS_HOME.
    let profile = call(
        housing_tools(&fixture)[4].as_ref(),
        json!({"action": "set", "profile": {"household_size": 1}}),
    )
    .await;
    assert_ok(&profile);
    assert!(home.path().join("housing_profile.json").exists());

    for bad in [
        &[("JARVIS_HOUSING__MODE", "demo")][..],
        &[("JARVIS_HOUSING__TIMEOUT_SECS", "soon")][..],
        &[("JARVIS_HOUSING__REFERENCE_RATE", "400")][..],
    ] {
        let pairs: Vec<(String, String)> = bad.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let err = HousingConfig::from_vars(home.path(), |name| {
            pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
        .unwrap_err();
        assert!(err.to_string().contains(bad[0].0), "{err}");
    }
}

#[tokio::test]
async fn an_agent_turn_calls_sh_notice_on_the_samples_and_answers_from_it() {
    let script = r#"
replies:
  - tool_calls: [ { name: sh_notice, arguments: { region: "서울", limit: 1 } } ]
  - text: "가장 최근 서울 SH 공고는 '서울 강서구 행복주택 입주자 모집 공고'입니다 (샘플 데이터)."
"#;
    let mut turn = Turn::new(script).tool(Typed::new(NoticeTool::sh(sh_samples())));
    turn.prompt = "서울 SH 청약 공고 최근 것 하나만 찾아 줘".into();
    let run = turn.run().await;

    let requests = run.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[0].tools.iter().any(|t| t.name == "sh_notice"));
    let result = run
        .outcome
        .new_messages
        .iter()
        .find_map(|m| match m {
            Message::Tool(t) => Some(t.clone()),
            _ => None,
        })
        .expect("a tool result");
    assert_eq!(result.tool_name, "sh_notice");
    assert!(!result.is_error, "{}", result.content);
    assert!(
        result.content.contains("서울 강서구 행복주택 입주자 모집 공고"),
        "{}",
        result.content
    );
    assert!(
        !result.content.contains("고덕강일"),
        "limit 1: {}",
        result.content
    );
    let second = serde_json::to_string(requests[1].recorded_messages()).unwrap();
    assert!(
        second.contains("서울 강서구 행복주택 입주자 모집 공고"),
        "the model saw the result"
    );
    assert!(run.outcome.final_message.content.contains("서울 강서구 행복주택"));
}
