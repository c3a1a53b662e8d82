//! Bad input gives clear warnings or errors, never a panic: a damaged user
//! model, bad procedure names and files, unknown `memory.read` agents,
//! empty memories.

use std::collections::BTreeMap;
use std::sync::Arc;

use jarvis_sdk::memory::{
    InMemoryMemoryStore, Layer, MemoryConfig, MemoryError, MemoryRead, MemoryScope, MemoryService,
    SectionKind,
};
use jarvis_sdk::model::HashEmbedder;

use super::fixed_clock;
use crate::capture::capture;

fn service(home: &std::path::Path) -> MemoryService {
    MemoryService::new(
        Arc::new(InMemoryMemoryStore::new()),
        Arc::new(HashEmbedder::default()),
    )
    .with_clock(fixed_clock())
    .with_config(MemoryConfig::for_home(home))
}

#[tokio::test]
async fn a_damaged_user_model_is_read_as_empty_and_never_overwritten() {
    let home = tempfile::tempdir().unwrap();
    let path = home.path().join("user_model.json");
    std::fs::write(&path, "{\"entries\": [\"not a map\"]}").unwrap();
    let service = service(home.path());
    let scope = MemoryScope::new("u", "main", "s");
    // Writing a fact reads the model first (for what was forgotten).
    let (logs, _guard) = capture();
    service.remember(&scope, "the user drinks tea").await.unwrap();

    let context = service.observe(&scope, "does the user drink tea").await.unwrap();
    assert_eq!(
        context.section(SectionKind::KeyFacts).unwrap().items,
        ["- the user drinks tea"],
        "the turn still gets its facts"
    );
    assert!(
        logs.warned(&["user model", "is damaged", "read as empty"]),
        "{:?}",
        logs.lines()
    );

    let err = service
        .update_user_model(&scope, BTreeMap::from([("name".into(), "Ada".into())]))
        .await
        .unwrap_err();
    assert!(matches!(err, MemoryError::DamagedUserModel { .. }), "{err:?}");
    assert!(
        err.to_string().contains("left as it is until fixed or removed"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "{\"entries\": [\"not a map\"]}"
    );

    // Not JSON at all, or a directory where the file should be: still no panic.
    std::fs::write(&path, [0xff, 0xfe, b'{']).unwrap();
    service.observe(&scope, "tea").await.unwrap();
    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir(&path).unwrap();
    service.observe(&scope, "tea").await.unwrap();
    assert!(service.update_user_model(&scope, BTreeMap::new()).await.is_err());
}

#[tokio::test]
async fn bad_procedure_names_are_refused_and_bad_files_skipped() {
    let home = tempfile::tempdir().unwrap();
    let service = service(home.path());
    let scope = MemoryScope::new("u", "main", "s");
    for name in [
        "",
        "../karen/steal",
        "/etc/passwd",
        ".hidden",
        "a/b",
        "line\nbreak",
        &"x".repeat(65),
    ] {
        let err = service.save_procedure(&scope, name, "steps").await.unwrap_err();
        assert!(
            matches!(
                err,
                MemoryError::InvalidName {
                    what: "procedure",
                    ..
                }
            ),
            "{name:?}: {err:?}"
        );
    }
    assert!(!home.path().join("karen").exists() && !home.path().join("procedures/karen").exists());
    let bad_agent = MemoryScope::new("u", "../main", "s");
    let err = service
        .save_procedure(&bad_agent, "ok", "steps")
        .await
        .unwrap_err();
    assert!(matches!(err, MemoryError::InvalidAgentId { .. }), "{err:?}");

    let dir = home.path().join("procedures/main");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("good.md"), "weekly report: gather, write, send").unwrap();
    std::fs::write(dir.join("bad name!.md"), "weekly report: never read").unwrap();
    std::fs::write(dir.join("binary.md"), [0xff, 0xfe, 0x00]).unwrap();
    let (logs, _guard) = capture();
    let found = service
        .search(&scope, "weekly report", Layer::Procedural, 5)
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].record.text, "weekly report: gather, write, send");
    assert!(
        logs.warned(&["bad name!.md", "not allowed"]),
        "{:?}",
        logs.lines()
    );
    assert!(logs.warned(&["binary.md", "not UTF-8"]), "{:?}", logs.lines());
}

#[tokio::test]
async fn unknown_memory_read_agents_are_reported_and_harmless() {
    let home = tempfile::tempdir().unwrap();
    let service = service(home.path());
    let read: MemoryRead = serde_yaml::from_str("{edm: [main, ghost], pdm: [\"../etc\"]}").unwrap();
    let known = |a: &str| a == "main" || a == "karen";
    let err = read.check("karen", known).unwrap_err();
    assert_eq!(
        err.to_string(),
        "memory: memory.read of agent \"karen\" names unknown agents: ghost, ../etc"
    );
    // An unknown key makes the definition unreadable, as R-MEM-10 asks.
    let err = serde_yaml::from_str::<MemoryRead>("{edm: [main], epm: [karen]}").unwrap_err();
    assert!(err.to_string().contains("unknown field `epm`"), "{err}");

    // Used anyway, the unknown names read nothing and break nothing.
    let (logs, _guard) = capture();
    let scope = MemoryScope::new("u", "karen", "s").with_read(read.clone());
    service.observe(&scope, "anything").await.unwrap();
    assert!(logs.warned(&["invalid agent id", "../etc"]), "{:?}", logs.lines());
    let cleaned = read.without_unknown("karen", known);
    assert_eq!((cleaned.edm, cleaned.pdm), (vec!["main".to_owned()], vec![]));
    assert!(
        logs.warned(&["\"ghost\"", "not a defined agent"]),
        "{:?}",
        logs.lines()
    );
}

#[tokio::test]
async fn empty_memories_and_names_are_errors() {
    let home = tempfile::tempdir().unwrap();
    let service = service(home.path());
    let scope = MemoryScope::new("u", "main", "s");
    let err = service.remember(&scope, "  \n ").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "memory: refused to write an empty memory (source \"remember\")"
    );
    assert!(service.remember_task_pattern(&scope, "", "x").await.is_err());
    assert!(service.remember_task_pattern(&scope, "x", " ").await.is_err());
    // An empty query recalls nothing rather than failing.
    assert!(
        service
            .search(&scope, "", Layer::Episodic, 3)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(service.observe(&scope, "").await.unwrap().is_empty());
}
