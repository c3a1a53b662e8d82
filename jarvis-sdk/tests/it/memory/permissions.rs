//! The permission matrix (R-MEM-6..12): two agents and the user profile,
//! with and without `memory.read`, and a peer session. Each reader sees
//! exactly what SPEC.md §8.3 says, and every write lands in its scope.

use std::collections::BTreeSet;
use std::sync::Arc;

use jarvis_sdk::common::SequentialIds;
use jarvis_sdk::memory::{
    InMemoryMemoryStore, Layer, MemoryConfig, MemoryFilter, MemoryRead, MemoryScope, MemoryService,
    MemoryStore, SectionKind, TurnRecord,
};
use jarvis_sdk::model::HashEmbedder;

use super::fixed_clock;

/// Every memory shares the words "falcon project", so one query reaches all.
const QUERY: &str = "falcon project";

struct World {
    service: MemoryService,
    store: Arc<InMemoryMemoryStore>,
    _home: tempfile::TempDir,
}

async fn world() -> World {
    let home = tempfile::tempdir().unwrap();
    let store = Arc::new(InMemoryMemoryStore::new());
    let service = MemoryService::new(store.clone(), Arc::new(HashEmbedder::default()))
        .with_clock(fixed_clock())
        .with_ids(Arc::new(SequentialIds::default()))
        .with_config(MemoryConfig::for_home(home.path()));
    let main = MemoryScope::new("u", "main", "default-main");
    let karen = MemoryScope::new("u", "karen", "default-karen");
    let other_user = MemoryScope::new("v", "main", "v-main");
    for (scope, name) in [(&main, "main"), (&karen, "karen")] {
        service
            .remember(scope, &format!("falcon project fact remembered with {name}"))
            .await
            .unwrap();
        service
            .record_turn(
                scope,
                TurnRecord::new(format!("falcon project turn of {name}"), "done"),
            )
            .await
            .unwrap();
        service
            .write(
                scope,
                "reflection",
                &format!("falcon project note of {name}"),
                serde_json::Value::Null,
            )
            .await
            .unwrap();
        service
            .remember_task_pattern(
                scope,
                &format!("{name}-pattern"),
                &format!("falcon project pattern of {name}"),
            )
            .await
            .unwrap();
        service
            .save_procedure(
                scope,
                &format!("{name}-procedure"),
                &format!("falcon project procedure of {name}"),
            )
            .await
            .unwrap();
    }
    service
        .remember(&other_user, "falcon project fact of another user")
        .await
        .unwrap();
    World {
        service,
        store,
        _home: home,
    }
}

/// Short labels of what `scope` reads in `layer`: `<kind>:<agent>` (or
/// `fact:other-user`).
async fn reads(service: &MemoryService, scope: &MemoryScope, layer: Layer) -> BTreeSet<String> {
    service
        .search(scope, QUERY, layer, 50)
        .await
        .unwrap()
        .into_iter()
        .map(|r| {
            if r.record.user != "u" {
                format!("{}:other-user", r.record.kind)
            } else {
                format!("{}:{}", r.record.kind, r.record.agent_id)
            }
        })
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test]
async fn writes_land_in_the_layer_and_scope_the_rules_say() {
    let w = world().await;
    let mut rows: Vec<String> = w
        .store
        .list(&MemoryFilter::for_user("u"))
        .await
        .unwrap()
        .into_iter()
        .map(|r| format!("{} {} {} {} {}", r.layer, r.kind, r.agent_id, r.source, r.user))
        .collect();
    rows.sort();
    assert_eq!(
        rows,
        [
            "episodic episode karen turn u",
            "episodic episode main turn u",
            "episodic note karen reflection u",
            "episodic note main reflection u",
            "procedural procedure karen procedure u",
            "procedural procedure main procedure u",
            "procedural task_pattern karen task_pattern u",
            "procedural task_pattern main task_pattern u",
            "semantic fact karen remember u",
            "semantic fact main remember u",
        ]
    );
    let other = w.store.list(&MemoryFilter::for_user("v")).await.unwrap();
    assert_eq!(other.len(), 1);
    assert_eq!(
        (other[0].layer, other[0].agent_id.as_str()),
        (Layer::Semantic, "main")
    );
}

#[tokio::test]
async fn each_reader_sees_exactly_its_scope() {
    let w = world().await;
    let profile = set(&["fact:karen", "fact:main"]);
    let main_edm = set(&["episode:main", "note:main"]);
    let karen_edm = set(&["episode:karen", "note:karen"]);
    let main_pdm = set(&["procedure:main", "task_pattern:main"]);
    let karen_pdm = set(&["procedure:karen", "task_pattern:karen"]);
    let union = |a: &BTreeSet<String>, b: &BTreeSet<String>| a.union(b).cloned().collect::<BTreeSet<_>>();

    struct Case {
        what: &'static str,
        scope: MemoryScope,
        semantic: BTreeSet<String>,
        episodic: BTreeSet<String>,
        procedural: BTreeSet<String>,
    }
    let cases = vec![
        Case {
            what: "main, own memory only",
            scope: MemoryScope::new("u", "main", "default-main"),
            semantic: profile.clone(),
            episodic: main_edm.clone(),
            procedural: main_pdm.clone(),
        },
        Case {
            what: "karen, own memory only",
            scope: MemoryScope::new("u", "karen", "default-karen"),
            semantic: profile.clone(),
            episodic: karen_edm.clone(),
            procedural: karen_pdm.clone(),
        },
        Case {
            what: "karen reading main's EDM",
            scope: MemoryScope::new("u", "karen", "default-karen")
                .with_read(MemoryRead::own_only().with_edm(["main"])),
            semantic: profile.clone(),
            episodic: union(&karen_edm, &main_edm),
            procedural: karen_pdm.clone(),
        },
        Case {
            what: "karen reading main's PDM",
            scope: MemoryScope::new("u", "karen", "default-karen")
                .with_read(MemoryRead::own_only().with_pdm(["main"])),
            semantic: profile.clone(),
            episodic: karen_edm.clone(),
            procedural: union(&karen_pdm, &main_pdm),
        },
        Case {
            what: "karen listing only itself",
            scope: MemoryScope::new("u", "karen", "default-karen")
                .with_read(MemoryRead::own_only().with_edm(["self"]).with_pdm(["self"])),
            semantic: profile.clone(),
            episodic: karen_edm.clone(),
            procedural: karen_pdm.clone(),
        },
        Case {
            what: "main reading both of karen's layers",
            scope: MemoryScope::new("u", "main", "default-main")
                .with_read(MemoryRead::own_only().with_edm(["karen"]).with_pdm(["karen"])),
            semantic: profile.clone(),
            episodic: union(&main_edm, &karen_edm),
            procedural: union(&main_pdm, &karen_pdm),
        },
        Case {
            what: "another user of the same agent",
            scope: MemoryScope::new("v", "main", "v-main"),
            semantic: set(&["fact:other-user"]),
            episodic: set(&[]),
            // Procedure files belong to the agent, whoever the user: main's
            // file is indexed for this user too. Task patterns are records
            // of a user and stay with theirs.
            procedural: set(&["procedure:other-user"]),
        },
    ];
    for case in cases {
        assert_eq!(
            reads(&w.service, &case.scope, Layer::Semantic).await,
            case.semantic,
            "{}: semantic",
            case.what
        );
        assert_eq!(
            reads(&w.service, &case.scope, Layer::Episodic).await,
            case.episodic,
            "{}: episodic",
            case.what
        );
        assert_eq!(
            reads(&w.service, &case.scope, Layer::Procedural).await,
            case.procedural,
            "{}: procedural",
            case.what
        );
    }
}

#[tokio::test]
async fn a_peer_session_reads_the_callers_user_and_writes_the_callees_scope() {
    let w = world().await;
    let caller = MemoryScope::new("u", "main", "default-main");
    let peer = MemoryScope::for_peer(&caller, "karen", MemoryRead::own_only(), "peer-main-karen");
    assert_eq!(
        reads(&w.service, &peer, Layer::Semantic).await,
        set(&["fact:karen", "fact:main"]),
        "the callee sees the caller's user profile"
    );
    assert_eq!(
        reads(&w.service, &peer, Layer::Episodic).await,
        set(&["episode:karen", "note:karen"]),
        "and its own episodes, not the caller's"
    );
    let episode = w
        .service
        .record_turn(
            &peer,
            TurnRecord::new("falcon project delegated lookup", "found one"),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (episode.user.as_str(), episode.agent_id.as_str(), episode.layer),
        ("u", "karen", Layer::Episodic)
    );
    assert_eq!(episode.metadata["session_id"], "peer-main-karen");
    let task = w
        .service
        .remember_task_pattern(&peer, "delegated", "falcon project how karen answers main")
        .await
        .unwrap();
    assert_eq!((task.agent_id.as_str(), task.layer), ("karen", Layer::Procedural));
    // The caller, reading its own memory only, sees neither.
    let main_edm = reads(&w.service, &caller, Layer::Episodic).await;
    assert_eq!(main_edm, set(&["episode:main", "note:main"]));
    let main_pdm = reads(&w.service, &caller, Layer::Procedural).await;
    assert_eq!(main_pdm, set(&["procedure:main", "task_pattern:main"]));
}

#[tokio::test]
async fn observe_injects_only_what_the_scope_reads() {
    let w = world().await;
    let karen = MemoryScope::new("u", "karen", "fresh-karen");
    let context = w.service.observe(&karen, QUERY).await.unwrap();
    let message = context.message().unwrap();
    for visible in [
        "fact remembered with main",
        "fact remembered with karen",
        "turn of karen",
        "pattern of karen",
        "procedure of karen",
    ] {
        assert!(message.contains(visible), "{visible:?} missing from:\n{message}");
    }
    for hidden in [
        "turn of main",
        "note of main",
        "pattern of main",
        "procedure of main",
        "another user",
    ] {
        assert!(!message.contains(hidden), "{hidden:?} leaked into:\n{message}");
    }
    assert!(context.section(SectionKind::Procedures).is_some());
}
