//! The SQLite memory store beyond the shared contract: memory survives a
//! restart through the service, opening is idempotent, bad files
//! (damaged, another program's, a newer schema, locked, unplaceable) give
//! clear errors and are left as they are, a delete leaves the text in no
//! file, writes survive `SIGKILL` at random moments, and a large
//! partition's recall graph is saved at a close and taken back at the next
//! open.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use jarvis_sdk::common::Timestamp;
use jarvis_sdk::memory::{
    AnnOptions, Layer, MEMORY_DB_FILE, MemoryConfig, MemoryError, MemoryFilter, MemoryRecord, MemoryScope,
    MemoryService, MemoryStore, SQLITE_SCHEMA_VERSION, SearchQuery, SectionKind, SqliteMemoryStore,
    TurnRecord, WorkingMemory,
};
use jarvis_sdk::model::HashEmbedder;
use serde_json::json;

fn record(id: &str, text: &str) -> MemoryRecord {
    MemoryRecord {
        id: id.into(),
        user: "u".into(),
        agent_id: "main".into(),
        layer: Layer::Semantic,
        kind: "fact".into(),
        source: "remember".into(),
        text: text.into(),
        metadata: json!({"n": 1}),
        created_at: Timestamp::from_millis(1_795_910_400_000),
        rehearsal: 0,
        embedding: vec![0.6, 0.8, 0.0, 0.0],
        embedder: "e".into(),
    }
}

/// Every file under `dir`, recursively, with its bytes.
fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                out.push((path, bytes));
            }
        }
    }
    out
}

/// The files under `dir` that contain `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let needle = needle.as_bytes();
    files_under(dir)
        .into_iter()
        .filter(|(_, bytes)| bytes.windows(needle.len()).any(|w| w == needle))
        .map(|(path, _)| path)
        .collect()
}

/// A 4-byte big-endian field of the database header.
fn header_field(path: &Path, offset: usize) -> u32 {
    let bytes = std::fs::read(path).unwrap();
    u32::from_be_bytes(bytes[offset..offset + 4].try_into().unwrap())
}

fn set_header_field(path: &Path, offset: usize, value: u32) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[offset..offset + 4].copy_from_slice(&value.to_be_bytes());
    std::fs::write(path, bytes).unwrap();
}

/// A closed database at `<dir>/memory.sqlite3` with `n` records, its log
/// copied into the file.
async fn database_with(dir: &Path, n: usize) -> PathBuf {
    let path = dir.join(MEMORY_DB_FILE);
    let store = SqliteMemoryStore::open(path.clone()).await.unwrap();
    for i in 0..n {
        store
            .put(record(
                &format!("r{i}"),
                &format!("fact number {i} {}", "x".repeat(300)),
            ))
            .await
            .unwrap();
    }
    store.checkpoint().await.unwrap();
    path
}

#[tokio::test]
async fn memory_survives_a_restart_through_the_service() {
    let home = tempfile::tempdir().unwrap();
    let scope = MemoryScope::new("u", "main", "s1");
    let service = |store: SqliteMemoryStore| {
        MemoryService::new(Arc::new(store), Arc::new(HashEmbedder::default()))
            .with_clock(crate::memory::fixed_clock())
            .with_config(MemoryConfig::for_home(home.path()))
    };
    let episode_id = {
        let memory = service(SqliteMemoryStore::open_in_home(home.path()).await.unwrap());
        memory
            .remember(&scope, "서연이는 피아노 학원에 다닌다")
            .await
            .unwrap();
        memory
            .remember_task_pattern(
                &scope,
                "weekly report",
                "open the sheet, sum the week, write one paragraph",
            )
            .await
            .unwrap();
        let episode = memory
            .record_turn(
                &scope,
                TurnRecord::new("SH 행복주택 공고 찾아줘", "3건을 찾았습니다"),
            )
            .await
            .unwrap()
            .unwrap();
        // Recalled once: rehearsed.
        memory.observe(&scope, "서연이 학원").await.unwrap();
        episode.id
    };
    let store = SqliteMemoryStore::open_in_home(home.path()).await.unwrap();
    assert_eq!(store.open_report().records, 3, "{:?}", store.open_report());
    assert_eq!(store.open_report().skipped, 0);
    let working: WorkingMemory = store.load_working("s1").await.unwrap().unwrap();
    assert_eq!(working.items[0].text, "SH 행복주택 공고 찾아줘");
    assert_eq!(working.recent_episodes, std::slice::from_ref(&episode_id));
    let facts = store
        .list(&MemoryFilter::for_user("u").layer(Layer::Semantic, jarvis_sdk::memory::Agents::Any))
        .await
        .unwrap();
    assert_eq!(facts.len(), 1);
    assert_eq!(facts[0].rehearsal, 1, "the rehearsal of the recall was kept");

    let memory = service(store);
    let other = MemoryScope::new("u", "main", "s2");
    let context = memory.observe(&other, "서연이 학원 어디 다니지?").await.unwrap();
    let key_facts = context.section(SectionKind::KeyFacts).unwrap().items.join("\n");
    assert!(key_facts.contains("피아노 학원"), "{key_facts}");
    let long_term = context.section(SectionKind::LongTerm);
    let episodes = memory
        .recall(&other, "행복주택 공고", Layer::Episodic, 4)
        .await
        .unwrap();
    assert_eq!(episodes[0].record.id, episode_id, "{long_term:?}");
    let patterns = memory
        .search(&other, "weekly report", Layer::Procedural, 3)
        .await
        .unwrap();
    assert_eq!(patterns.len(), 1);
}

#[tokio::test]
async fn opening_a_current_database_again_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = database_with(dir.path(), 3).await;
    assert_eq!(
        header_field(&path, 60),
        SQLITE_SCHEMA_VERSION as u32,
        "user_version"
    );
    assert_eq!(header_field(&path, 68), 0x4a52_564d, "application_id");
    let before = std::fs::read(&path).unwrap();
    for _ in 0..2 {
        let store = SqliteMemoryStore::open(path.clone()).await.unwrap();
        assert_eq!(store.len(), 3);
        drop(store);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            before,
            "the open wrote to the file"
        );
    }
}

#[tokio::test]
async fn a_database_of_a_newer_schema_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = database_with(dir.path(), 2).await;
    set_header_field(&path, 60, 7);
    let before = std::fs::read(&path).unwrap();
    let err = SqliteMemoryStore::open(path.clone()).await.unwrap_err();
    assert!(
        matches!(
            err,
            MemoryError::SchemaTooNew {
                found: 7,
                supported: 1,
                ..
            }
        ),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains("schema version 7") && message.contains(&path.display().to_string()),
        "{message}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[tokio::test]
async fn damaged_files_and_other_programs_databases_give_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    // Not a database at all.
    let junk = dir.path().join("junk.sqlite3");
    std::fs::write(&junk, "this is not a database, it is a text file ".repeat(200)).unwrap();
    let err = SqliteMemoryStore::open(junk.clone()).await.unwrap_err();
    assert!(matches!(err, MemoryError::SqliteDamaged { .. }), "{err:?}");
    assert!(err.to_string().contains("junk.sqlite3"), "{err}");
    assert!(std::fs::read_to_string(&junk).unwrap().starts_with("this is not"));

    // Another program's database.
    let other = tempfile::tempdir().unwrap();
    let path = database_with(other.path(), 1).await;
    set_header_field(&path, 68, 0x1234_5678);
    let err = SqliteMemoryStore::open(path).await.unwrap_err();
    assert!(
        matches!(&err, MemoryError::SqliteDamaged { reason, .. } if reason.contains("another program")),
        "{err:?}"
    );

    // Pages overwritten in the middle.
    let broken = tempfile::tempdir().unwrap();
    let path = database_with(broken.path(), 200).await;
    let mut bytes = std::fs::read(&path).unwrap();
    let page = 4096;
    for b in bytes[page..].iter_mut() {
        *b = 0xA5;
    }
    std::fs::write(&path, &bytes).unwrap();
    let err = SqliteMemoryStore::open(path.clone()).await.unwrap_err();
    assert!(matches!(err, MemoryError::SqliteDamaged { .. }), "{err:?}");

    // Cut at any length: a clear answer, never a panic.
    let cut = tempfile::tempdir().unwrap();
    let path = database_with(cut.path(), 200).await;
    let whole = std::fs::read(&path).unwrap();
    for len in [
        1,
        50,
        99,
        100,
        101,
        4095,
        4096,
        4097,
        9000,
        whole.len() / 2,
        whole.len() - 1,
    ] {
        std::fs::write(&path, &whole[..len]).unwrap();
        match SqliteMemoryStore::open(path.clone()).await {
            Ok(store) => assert!(store.len() <= 200),
            Err(e) => assert!(e.to_string().contains("memory store (sqlite)"), "{len}: {e}"),
        }
        let _ = std::fs::remove_file(path.with_extension("sqlite3-wal"));
    }
}

#[tokio::test]
async fn a_database_held_by_another_store_gives_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(MEMORY_DB_FILE);
    let first = SqliteMemoryStore::open(path.clone()).await.unwrap();
    first.put(record("a", "kept")).await.unwrap();
    let err = SqliteMemoryStore::open(path.clone()).await.unwrap_err();
    assert!(matches!(err, MemoryError::SqliteLocked { .. }), "{err:?}");
    assert!(err.to_string().contains("in use"), "{err}");
    drop(first);
    let second = SqliteMemoryStore::open(path).await.unwrap();
    assert_eq!(second.len(), 1);
}

#[tokio::test]
async fn a_place_where_no_database_can_be_made_gives_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let err = SqliteMemoryStore::open(file.join(MEMORY_DB_FILE))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("memory"), "{err}");
    // A directory where the file should be.
    let err = SqliteMemoryStore::open(dir.path().to_path_buf())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("memory store (sqlite)"), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), b"x");
}

#[tokio::test]
async fn a_delete_leaves_the_text_in_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(MEMORY_DB_FILE);
    let store = SqliteMemoryStore::open(path.clone()).await.unwrap();
    for i in 0..50 {
        store
            .put(record(&format!("keep{i}"), &format!("an ordinary fact {i}")))
            .await
            .unwrap();
    }
    // One secret copied into the database file by a checkpoint, one only
    // in the log.
    let (old, new) = ("ZEBRA-CROSSING-7731-SECRET", "OCELOT-LANTERN-0412-SECRET");
    store
        .put(record("old", &format!("door code {old}")))
        .await
        .unwrap();
    store.checkpoint().await.unwrap();
    store
        .put(record("new", &format!("safe code {new}")))
        .await
        .unwrap();
    store.touch(&["old".into(), "new".into()]).await.unwrap();
    assert!(
        files_containing(dir.path(), old).contains(&path),
        "the test sees the bytes in the database file"
    );
    assert!(!files_containing(dir.path(), new).is_empty());

    assert_eq!(store.delete(&["old".into(), "new".into()]).await.unwrap(), 2);
    for secret in [old, new] {
        assert_eq!(
            files_containing(dir.path(), secret),
            Vec::<PathBuf>::new(),
            "{secret}"
        );
    }
    // And the rest is intact.
    store.checkpoint().await.unwrap();
    drop(store);
    let store = SqliteMemoryStore::open(path).await.unwrap();
    assert_eq!(store.len(), 50);
    assert!(files_containing(dir.path(), "ZEBRA").is_empty());
}

const KILL_DIR_ENV: &str = "JARVIS_MEMORY_KILL_DIR";
const KILL_SEED_ENV: &str = "JARVIS_MEMORY_KILL_SEED";
const KILL_TAG_ENV: &str = "JARVIS_MEMORY_KILL_TAG";
const PUT_DONE: &str = "jarvis-memory-put";
const KILLS: usize = 40;

/// Graphs from 64 records, so the killed writers' partition has one,
/// saved in the background, being saved or brought up to date at a kill.
fn kill_ann() -> AnnOptions {
    AnnOptions {
        min_rows: 64,
        ..AnnOptions::default()
    }
}

/// xorshift64*: reproducible from the printed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low)
    }
}

fn killed_text(tag: &str, n: usize, size: usize) -> String {
    format!("memory {n} of {tag} {} end {n}", "가나다라".repeat(size / 4))
}

/// The child: writes memories (and touches and working memory) until it
/// is killed, printing each id once its `put` returned.
#[test]
fn memory_kill_child() {
    let Ok(dir) = std::env::var(KILL_DIR_ENV) else {
        return; // an ordinary test run: nothing to do
    };
    let seed: u64 = std::env::var(KILL_SEED_ENV).unwrap().parse().unwrap();
    let tag = std::env::var(KILL_TAG_ENV).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let store = Arc::new(
            SqliteMemoryStore::open_with_ann(Path::new(&dir).join(MEMORY_DB_FILE), kill_ann())
                .await
                .unwrap(),
        );
        let started = Instant::now();
        let writers = (0..2).map(|w| {
            let store = store.clone();
            let tag = format!("{tag}w{w}");
            let mut rng = Rng(seed ^ (w as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            tokio::spawn(async move {
                let mut n = 0;
                // A safety stop, should the parent ever fail to kill us.
                while started.elapsed() < Duration::from_secs(60) {
                    n += 1;
                    let id = format!("{tag}-{n}");
                    let size = rng.range(100, 4_000) as usize;
                    let mut r = record(&id, &killed_text(&tag, n, size));
                    r.embedding = (0..512).map(|i| ((i * n) % 7) as f32).collect();
                    store.put(r).await.unwrap();
                    {
                        let mut out = std::io::stdout().lock();
                        writeln!(out, "{PUT_DONE} {id}").unwrap();
                        out.flush().unwrap();
                    }
                    store.touch(std::slice::from_ref(&id)).await.unwrap();
                    let mut wm = WorkingMemory::new(format!("{tag}-session"), "u", "main");
                    wm.turns = n as u64;
                    store.save_working(&wm).await.unwrap();
                }
            })
        });
        for writer in futures::future::join_all(writers).await {
            writer.unwrap();
        }
    });
}

#[test]
fn sigkill_at_random_moments_loses_no_reported_memory() {
    if std::env::var(KILL_DIR_ENV).is_ok() {
        return; // inside a child
    }
    let seed = std::env::var(KILL_SEED_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    println!("memory kill test seed: {seed} (rerun with {KILL_SEED_ENV}={seed})");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let mut reported: BTreeSet<String> = BTreeSet::new();
    let mut by_kill: BTreeMap<usize, usize> = BTreeMap::new();
    let mut graphs_taken_back = 0;
    for kill in 0..KILLS {
        let tag = format!("k{kill}");
        let mut child = Command::new(&exe)
            .args([
                "memory::sqlite::memory_kill_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(KILL_DIR_ENV, dir.path())
            .env(KILL_SEED_ENV, rng.next().to_string())
            .env(KILL_TAG_ENV, &tag)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            // Found anywhere in a line: the test harness's `test … ... `
            // comes before the first one, on the same line.
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .filter_map(|l| {
                    l.find(PUT_DONE)
                        .map(|at| l[at + PUT_DONE.len()..].trim().to_owned())
                })
                .collect::<Vec<_>>()
        });
        // The kill moment is drawn at random; it does not depend on what the
        // child is doing (this wait is the experiment, not a synchronisation).
        std::thread::sleep(Duration::from_millis(rng.range(5, 150)));
        if let Ok(Some(status)) = child.try_wait() {
            panic!("seed {seed}: the child stopped on its own ({status}) before kill {kill}");
        }
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(9), "kill {kill}: {status}");
        let ids = reader.join().unwrap();
        by_kill.insert(kill, ids.len());
        reported.extend(ids);

        runtime.block_on(async {
            let store = SqliteMemoryStore::open_with_ann(dir.path().join(MEMORY_DB_FILE), kill_ann())
                .await
                .unwrap_or_else(|e| panic!("seed {seed}, kill {kill}: the database does not open: {e}"));
            assert_eq!(store.open_report().skipped, 0, "seed {seed}, kill {kill}");
            let leftovers: Vec<PathBuf> = std::fs::read_dir(store.graphs_path())
                .map(|entries| entries.filter_map(|e| Some(e.ok()?.path())).collect())
                .unwrap_or_default();
            assert!(
                leftovers
                    .iter()
                    .all(|p| p.extension().is_some_and(|e| e == "graph")),
                "seed {seed}, kill {kill}: a save cut short left {leftovers:?}"
            );
            if store.open_report().graph_records > 0 {
                graphs_taken_back += 1;
            }
            let all = store.list(&MemoryFilter::for_user("u")).await.unwrap();
            let mut texts: BTreeMap<String, usize> = BTreeMap::new();
            for r in &all {
                let head: Vec<&str> = r.text.splitn(4, ' ').collect();
                let n = head[1];
                assert!(
                    r.text.ends_with(&format!(" end {n}")),
                    "seed {seed}: {} is cut",
                    r.id
                );
                *texts
                    .entry(format!("{} {}", head[3].split(' ').next().unwrap_or(""), n))
                    .or_default() += 1;
            }
            for id in &reported {
                let got = store.get(std::slice::from_ref(id)).await.unwrap();
                assert_eq!(
                    got.len(),
                    1,
                    "seed {seed}, kill {kill}: {id} was reported written but is missing"
                );
                assert_eq!(got[0].embedding.len(), 512, "seed {seed}: {id}");
            }
            assert!(
                texts.values().all(|&c| c == 1),
                "seed {seed}, kill {kill}: a memory is there twice"
            );
            // The saved graph, brought up to date, holds every record.
            store.wait_for_graphs();
            if all.len() >= 64 {
                assert_eq!(store.graph_stats().0, all.len(), "seed {seed}, kill {kill}");
            }
            // At most one write per writer was in flight when the kill came.
            assert!(
                all.len() <= reported.len() + 2 * (kill + 1),
                "seed {seed}, kill {kill}: {} records for {} reported",
                all.len(),
                reported.len()
            );
        });
    }
    let total: usize = by_kill.values().sum();
    println!(
        "memory kill test: {KILLS} kills, {total} writes reported, every one found once; \
         {graphs_taken_back} reopens took a saved recall graph back (seed {seed})"
    );
    assert!(
        graphs_taken_back >= KILLS / 2,
        "seed {seed}: saved graphs were taken back at only {graphs_taken_back} reopens"
    );
    assert!(
        total > KILLS,
        "seed {seed}: the children wrote almost nothing: {by_kill:?}"
    );
}

/// The `i`th note of the graph tests, embedded by the hash embedder.
fn graph_note(i: usize) -> MemoryRecord {
    let text = graph_note_text(i);
    let embedder = HashEmbedder::default();
    let mut r = record(&format!("r{i}"), &text);
    r.embedding = embedder.embed_text(&text);
    r.embedder = jarvis_sdk::model::Embedder::name(&embedder).to_owned();
    r
}

fn graph_note_text(i: usize) -> String {
    format!("note {i}: the {} meeting about {} moved", i * 7919 % 1000, i % 37)
}

/// A search for the `i`th note's vector over every record of user `u`.
fn graph_query(i: usize) -> SearchQuery {
    let note = graph_note(i);
    SearchQuery {
        filter: MemoryFilter::for_user("u"),
        embedder: note.embedder,
        vector: note.embedding,
        terms: Vec::new(),
        k: 300,
        min_similarity: -1.0,
    }
}

/// Graphs from 50 records, so 300 notes have one.
fn small_graphs() -> AnnOptions {
    AnnOptions {
        min_rows: 50,
        ..AnnOptions::default()
    }
}

/// With a small graph threshold: a deleted record leaves the graph at once
/// and is not in the graph rebuilt from the file after a restart.
#[tokio::test]
async fn a_forgotten_record_stays_out_of_the_graph_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(MEMORY_DB_FILE);
    let (small, query) = (small_graphs(), graph_query);
    {
        let store = SqliteMemoryStore::open(path.clone()).await.unwrap();
        store.set_ann(small);
        for i in 0..300 {
            store.put(graph_note(i)).await.unwrap();
        }
        store.wait_for_graphs();
        assert_eq!(store.graph_stats().0, 300);
        assert_eq!(store.search(&query(7)).await.unwrap()[0].id, "r7");
        assert_eq!(store.delete(&["r7".to_owned()]).await.unwrap(), 1);
        let hits = store.search(&query(7)).await.unwrap();
        assert!(
            hits.iter().all(|h| h.id != "r7"),
            "deleted: gone from the graph at once"
        );
    }
    let store = SqliteMemoryStore::open(path).await.unwrap();
    store.set_ann(small);
    store.wait_for_graphs();
    assert_eq!(store.graph_stats().0, 299, "the graph is rebuilt from the file");
    let hits = store.search(&query(7)).await.unwrap();
    assert!(hits.iter().all(|h| h.id != "r7"));
    assert_eq!(store.search(&query(8)).await.unwrap()[0].id, "r8");
}

/// The `.graph` files in the folder of a database's saved recall graphs.
fn graph_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| Some(e.ok()?.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "graph"));
    files
}

/// A clean close saves a large partition's recall graph beside the
/// database and the next open walks it from the start; forgetting a
/// record deletes the file (the next close writes it again without the
/// record), and a damaged file costs only a rebuild.
#[tokio::test]
async fn a_saved_recall_graph_serves_the_next_open_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(MEMORY_DB_FILE);
    let graphs = dir.path().join(format!("{MEMORY_DB_FILE}-graphs"));
    let small = small_graphs();
    let first = |store: &SqliteMemoryStore, i: usize| {
        let store = store.clone();
        async move {
            let hits = store.search(&graph_query(i)).await.unwrap();
            hits.iter().map(|h| h.id.clone()).collect::<Vec<_>>()
        }
    };
    {
        let store = SqliteMemoryStore::open_with_ann(path.clone(), small)
            .await
            .unwrap();
        assert_eq!(store.graphs_path(), graphs);
        assert_eq!(store.open_report().graph_records, 0, "nothing saved yet");
        for i in 0..300 {
            store.put(graph_note(i)).await.unwrap();
        }
        store.wait_for_graphs();
        assert_eq!(store.graph_stats().0, 300);
    }
    assert_eq!(graph_files(&graphs).len(), 1, "the close saved the graph");

    {
        let store = SqliteMemoryStore::open_with_ann(path.clone(), small)
            .await
            .unwrap();
        assert_eq!(
            store.open_report().graph_records,
            300,
            "the saved graph answers from the open"
        );
        assert_eq!(first(&store, 8).await[0], "r8");
        assert_eq!(store.delete(&["r7".to_owned()]).await.unwrap(), 1);
        // The file is deleted at once and may already be saved again in
        // the background, but never with the forgotten record's node.
        let node = [&2u32.to_le_bytes()[..], b"r7"].concat();
        for file in graph_files(&graphs) {
            let bytes = std::fs::read(&file).unwrap_or_default();
            assert!(
                !bytes.windows(node.len()).any(|w| w == node),
                "forgetting takes the record out of {}",
                file.display()
            );
        }
        assert!(!first(&store, 7).await.contains(&"r7".to_owned()));
    }
    assert_eq!(graph_files(&graphs).len(), 1, "the close saved it again");

    {
        let store = SqliteMemoryStore::open_with_ann(path.clone(), small)
            .await
            .unwrap();
        assert_eq!(store.open_report().graph_records, 299);
        assert!(!first(&store, 7).await.contains(&"r7".to_owned()));
        assert_eq!(first(&store, 9).await[0], "r9");
    }

    let file = graph_files(&graphs).pop().unwrap();
    let mut bytes = std::fs::read(&file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x5a;
    std::fs::write(&file, bytes).unwrap();
    let store = SqliteMemoryStore::open_with_ann(path, small).await.unwrap();
    assert_eq!(
        store.open_report().graph_records,
        0,
        "a damaged file is not trusted"
    );
    assert_eq!(store.len(), 299, "and costs no memory");
    store.wait_for_graphs();
    assert_eq!(store.graph_stats().0, 299, "the graph is built again");
    assert_eq!(first(&store, 9).await[0], "r9");
}
