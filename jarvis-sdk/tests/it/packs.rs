//! Domain packs: `build_app` registers no domain by itself; the housing
//! pack brings KAREN's team file, her agent-only tools, the `housing_watch`
//! job and the `housing` kind of external source, whose notices reach her
//! once; and the pack stands sample notices in only while the demo plays.

use async_trait::async_trait;
use jarvis_pack_housing::{HOUSING_TOOLS, HOUSING_WATCH_JOB, HousingPack, KAREN_DEFINITION};
use jarvis_sdk::agent::Durability;
use jarvis_sdk::app::{AppAssembly, AppConfig, Pack, PackContext, StoreBackend, build_app};
use jarvis_sdk::common::{ManualClock, SystemClock, TimeZone, Timestamp};
use jarvis_sdk::initiative::{OutboxItem, ProactiveSink};
use jarvis_sdk::model::FauxProvider;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::capture::capture;
use crate::sources::{next_check, reports};

/// 2026-12-01T00:00:00Z.
fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_083_200),
    ))
}

/// An app over `home` whose team directory is `home/team`, seeded on first
/// start, with `packs`.
async fn app_with(home: &Path, clock: Arc<ManualClock>, packs: Vec<Arc<dyn Pack>>) -> AppAssembly {
    let faux = Arc::new(FauxProvider::from_yaml("fallback: { text: 네 }").unwrap());
    let mut config = AppConfig::embedded(home).with_provider(faux);
    config.team_dir = home.join("team");
    config.seed_team = true;
    config.store = StoreBackend::Jsonl;
    config.durability = Durability::Never;
    config.memory.enabled = false;
    config.clock = clock;
    config.packs = packs;
    build_app(config).await.unwrap()
}

#[tokio::test]
async fn build_app_registers_no_domain_by_itself() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("external_sources");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("seoul.yaml"),
        "kind: housing\nagent: main\nevery: 30m\nhousing: { region: 서울 }\n",
    )
    .unwrap();
    let (logs, _guard) = capture();
    let app = app_with(home.path(), clock(), Vec::new()).await;

    let team: Vec<_> = std::fs::read_dir(home.path().join("team")).unwrap().collect();
    assert!(team.is_empty(), "no team file without a pack: {team:?}");
    assert_eq!(app.registry().ids().collect::<Vec<_>>(), ["main"]);
    for tool in HOUSING_TOOLS {
        assert!(app.tools().get(tool).is_none(), "{tool} without the pack");
    }
    let jobs = app.scheduler().jobs();
    assert!(jobs.iter().all(|j| j.job.id != HOUSING_WATCH_JOB), "no watch job");
    assert!(
        jobs.iter().all(|j| j.job.id != "source-seoul"),
        "an unknown kind is skipped"
    );
    assert!(
        logs.warned(&["seoul.yaml", "\"housing\" is not one of feed, json, page"]),
        "{:?}",
        logs.warnings()
    );
}

#[tokio::test]
async fn the_housing_pack_brings_karen_her_tools_and_her_watch() {
    let home = tempfile::tempdir().unwrap();
    let app = app_with(home.path(), clock(), vec![Arc::new(HousingPack::in_memory())]).await;

    let seeded = std::fs::read_to_string(home.path().join("team").join("karen.yaml")).unwrap();
    assert_eq!(seeded, KAREN_DEFINITION, "the pack's team file seeds a new team");
    assert_eq!(app.registry().ids().collect::<Vec<_>>(), ["main", "karen"]);
    let karen = app.registry().get("karen").unwrap();
    let main = app.registry().main();
    for tool in HOUSING_TOOLS {
        let registered = app.tools().get(tool).unwrap();
        assert!(registered.agent_only(), "{tool} is agent-only");
        assert!(karen.has_tool(tool), "KAREN lists {tool}");
        assert!(!main.has_tool(tool), "JARVIS lists no agent-only {tool}");
    }
    let watch = app
        .scheduler()
        .jobs()
        .into_iter()
        .find(|j| j.job.id == HOUSING_WATCH_JOB)
        .expect("the pack's job is on the scheduler");
    assert_eq!(watch.job.agent, "karen");
    assert!(watch.job.is_builtin());
}

#[tokio::test]
async fn a_housing_source_reports_the_matching_notices_to_karen_once() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("external_sources");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("seoul.yaml"),
        "kind: housing\nagent: karen\nevery: 30m\nreport_existing: true\nhousing: { region: 서울 }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("wrong.yaml"),
        "kind: housing\nagent: karen\nevery: 30m\nhousing: { city: 서울 }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("with-url.yaml"),
        "kind: housing\nurl: http://127.0.0.1:9/x\nagent: karen\nevery: 30m\n",
    )
    .unwrap();
    let clock = clock();
    let pack = || -> Vec<Arc<dyn Pack>> { vec![Arc::new(HousingPack::fixture())] };
    {
        let (logs, _guard) = capture();
        let app = app_with(home.path(), clock.clone(), pack()).await;
        assert!(
            logs.warned(&["wrong.yaml", "housing:", "city"]),
            "{:?}",
            logs.warnings()
        );
        assert!(
            logs.warned(&["with-url.yaml", "no `url`"]),
            "{:?}",
            logs.warnings()
        );
        let agenda = app.agenda().await;
        assert!(agenda.iter().any(|i| i.id == "source-seoul"), "{agenda:?}");

        next_check(&app, &clock).await;
        let got = reports(&app).await;
        assert_eq!(got.len(), 1, "{got:?}");
        let (id, text) = &got[0];
        assert!(id.starts_with("source-seoul-"), "{id}");
        assert!(
            text.contains("[SH]") && text.contains("[LH]"),
            "both agencies: {text}"
        );
        assert!(text.contains("서울"), "{text}");
        assert!(!text.contains("부산"), "the region filters: {text}");

        next_check(&app, &clock).await;
        assert_eq!(reports(&app).await.len(), 1, "nothing new, nothing reported");
    }
    // A restart reports nothing again: the seen record holds.
    let app = app_with(home.path(), clock.clone(), pack()).await;
    next_check(&app, &clock).await;
    assert_eq!(reports(&app).await.len(), 1);
    let seen = std::fs::read_to_string(home.path().join("external_seen.jsonl")).unwrap();
    assert!(
        seen.lines()
            .any(|l| l.contains("\"source\":\"seoul\"") && l.contains("\"key\":\"SH:")),
        "{seen}"
    );
}

/// A sink nobody reads: the pack's configuration does not use it.
#[derive(Debug)]
struct Nowhere;

#[async_trait]
impl ProactiveSink for Nowhere {
    async fn enqueue(&self, _item: OutboxItem) -> Result<(), String> {
        Err("nowhere".into())
    }
    fn has_agent(&self, _agent_id: &str) -> bool {
        false
    }
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(0)
    }
}

#[test]
fn the_pack_stands_sample_notices_in_only_while_the_demo_plays() {
    let home = tempfile::tempdir().unwrap();
    let lh = |demo: bool, vars: &[(&str, &str)]| {
        let env = |name: &str| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        };
        let cx = PackContext {
            home: home.path(),
            clock: Arc::new(SystemClock),
            time_zone: TimeZone::default(),
            demo,
            env: &env,
            sink: Arc::new(Nowhere),
        };
        HousingPack::from_env().config(&cx).unwrap().lh.describe()
    };
    assert!(lh(true, &[]).contains("샘플"), "{}", lh(true, &[]));
    assert!(
        !lh(false, &[]).contains("샘플"),
        "a configured model: live sources"
    );
    let configured = lh(true, &[("JARVIS_HOUSING__LH_SERVICE_KEY", "k")]);
    assert!(
        !configured.contains("샘플"),
        "a configured source wins over the demo: {configured}"
    );
    assert!(lh(false, &[("JARVIS_HOUSING__MODE", "fixture")]).contains("샘플"));
}
