//! The contract every `MemoryStore` keeps, run unchanged against the
//! in-memory store, the SQLite store (and the same SQLite file reopened)
//! and a real Postgres server, plus two Postgres stores sharing one
//! database as two server instances would.

use std::sync::Arc;

use jarvis_sdk::common::Timestamp;
use jarvis_sdk::memory::{
    Agents, InMemoryMemoryStore, Layer, MemoryFilter, MemoryRecord, MemoryStore, PostgresMemoryStore,
    SearchQuery, SqliteMemoryStore, WorkingItem, WorkingMemory,
};
use serde_json::json;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Backend {
    Memory,
    Sqlite,
    /// The SQLite store, closed and opened again between the steps.
    SqliteReopened,
    Postgres,
}

/// The store under test, and how to open it again (a SQLite file).
struct Subject {
    store: Arc<dyn MemoryStore>,
    file: Option<(tempfile::TempDir, std::path::PathBuf)>,
    reopen: bool,
}

impl Subject {
    /// Closes the store and opens its file again, when the backend asks.
    async fn reopen(&mut self) {
        let (true, Some((_, path))) = (self.reopen, &self.file) else {
            return;
        };
        // Closed first: the file is held exclusively.
        drop(std::mem::replace(
            &mut self.store,
            Arc::new(InMemoryMemoryStore::new()),
        ));
        self.store = Arc::new(SqliteMemoryStore::open(path.clone()).await.unwrap());
    }
}

async fn open(backend: Backend, what: &str) -> Option<Subject> {
    let (store, file): (Arc<dyn MemoryStore>, _) = match backend {
        Backend::Memory => (Arc::new(InMemoryMemoryStore::new()), None),
        Backend::Sqlite | Backend::SqliteReopened => {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("memory.sqlite3");
            let store = SqliteMemoryStore::open(path.clone()).await.unwrap();
            (Arc::new(store), Some((dir, path)))
        }
        Backend::Postgres => {
            let (url, _) = crate::pg::fresh_schema(what).await?;
            (Arc::new(PostgresMemoryStore::connect(&url).await.unwrap()), None)
        }
    };
    Some(Subject {
        store,
        file,
        reopen: backend == Backend::SqliteReopened,
    })
}

fn unit(dims: usize, hot: &[(usize, f32)]) -> Vec<f32> {
    let mut v = vec![0.0; dims];
    for (i, x) in hot {
        v[*i] = *x;
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter().map(|x| x / norm).collect()
}

fn record(id: &str, agent: &str, layer: Layer, kind: &str, vector: Vec<f32>, millis: i64) -> MemoryRecord {
    MemoryRecord {
        id: id.into(),
        user: "u".into(),
        agent_id: agent.into(),
        layer,
        kind: kind.into(),
        source: "test".into(),
        text: format!("text of {id} — 한글도"),
        metadata: json!({"n": millis, "tools": ["a", "b"]}),
        created_at: Timestamp::from_millis(1_795_910_400_000 + millis),
        rehearsal: 0,
        embedder: if vector.is_empty() {
            String::new()
        } else {
            "e".into()
        },
        embedding: vector,
    }
}

fn query(filter: MemoryFilter, vector: Vec<f32>, k: usize, floor: f32) -> SearchQuery {
    SearchQuery {
        filter,
        embedder: "e".into(),
        vector,
        terms: Vec::new(),
        k,
        min_similarity: floor,
    }
}

async fn contract(backend: Backend) {
    let Some(mut s) = open(backend, "memory store contract").await else {
        return;
    };
    let a = record("a", "main", Layer::Episodic, "episode", unit(8, &[(0, 1.0)]), 1);
    let b = record(
        "b",
        "main",
        Layer::Episodic,
        "episode",
        unit(8, &[(0, 1.0), (1, 1.0)]),
        2,
    );
    let c = record("c", "karen", Layer::Episodic, "episode", unit(8, &[(0, 1.0)]), 3);
    let d = record("d", "karen", Layer::Semantic, "fact", unit(8, &[(1, 1.0)]), 4);
    let legacy = record("legacy", "main", Layer::Episodic, "note", Vec::new(), 0);
    for r in [&a, &b, &c, &d, &legacy] {
        s.store.put(r.clone()).await.unwrap();
    }
    s.reopen().await;

    // get: in the order asked, unknown ids left out, every field kept.
    let got = s.store.get(&["d".into(), "zz".into(), "a".into()]).await.unwrap();
    assert_eq!(got, vec![d.clone(), a.clone()], "{backend:?}");

    // list: newest first, filtered per layer and agent, limited.
    let ids = |rs: Vec<MemoryRecord>| rs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    let all = MemoryFilter::for_user("u");
    assert_eq!(
        ids(s.store.list(&all).await.unwrap()),
        ["d", "c", "b", "a", "legacy"]
    );
    let mains = MemoryFilter::for_user("u").layer(Layer::Episodic, Agents::only(["main"]));
    assert_eq!(ids(s.store.list(&mains).await.unwrap()), ["b", "a", "legacy"]);
    assert_eq!(
        ids(s.store.list(&mains.clone().kinds(["note"])).await.unwrap()),
        ["legacy"]
    );
    assert_eq!(
        ids(s.store.list(&all.clone().limit(2)).await.unwrap()),
        ["d", "c"]
    );
    assert!(
        s.store
            .list(&MemoryFilter::for_user("v"))
            .await
            .unwrap()
            .is_empty()
    );

    // search: by similarity, within the filter and the embedder's space.
    let q = unit(8, &[(0, 1.0)]);
    let hits = s
        .store
        .search(&query(mains.clone(), q.clone(), 5, 0.0))
        .await
        .unwrap();
    assert_eq!(hits.iter().map(|h| h.id.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    assert!(
        (hits[0].similarity - 1.0).abs() < 1e-5
            && (hits[1].similarity - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-3
    );
    let floor = s
        .store
        .search(&query(mains.clone(), q.clone(), 5, 0.9))
        .await
        .unwrap();
    assert_eq!(floor.len(), 1);
    let mut other_space = query(all.clone(), q.clone(), 5, 0.0);
    other_space.embedder = "other".into();
    assert!(s.store.search(&other_space).await.unwrap().is_empty());
    let both = s
        .store
        .search_many(&[
            query(all.clone().layer(Layer::Episodic, Agents::Any), q.clone(), 2, 0.0),
            query(
                all.clone().layer(Layer::Semantic, Agents::Any),
                q.clone(),
                2,
                -1.0,
            ),
        ])
        .await
        .unwrap();
    // Equal similarity: the newer (c) first.
    assert_eq!(
        both[0].iter().map(|h| h.id.as_str()).collect::<Vec<_>>(),
        ["c", "a"]
    );
    assert_eq!(both[1].iter().map(|h| h.id.as_str()).collect::<Vec<_>>(), ["d"]);

    // touch and put-as-replace.
    s.store
        .touch(&["a".into(), "a".into(), "zz".into()])
        .await
        .unwrap();
    s.store.touch(&["a".into()]).await.unwrap();
    s.reopen().await;
    let a_now = s.store.get(&["a".into()]).await.unwrap().pop().unwrap();
    assert_eq!(
        a_now.rehearsal, 2,
        "once per call however often named; {backend:?}"
    );
    let mut moved = a_now.clone();
    moved.agent_id = "karen".into();
    moved.text = "moved".into();
    s.store.put(moved.clone()).await.unwrap();
    s.reopen().await;
    assert_eq!(s.store.get(&["a".into()]).await.unwrap(), vec![moved]);
    assert_eq!(ids(s.store.list(&mains).await.unwrap()), ["b", "legacy"]);

    // stale: missing embeddings and other embedders.
    let stale = ids(s.store.stale("e", 10).await.unwrap());
    assert_eq!(stale, ["legacy"]);
    assert_eq!(s.store.stale("other", 2).await.unwrap().len(), 2);

    // working memory round-trips (embeddings are recomputed, not stored).
    assert_eq!(s.store.load_working("s").await.unwrap(), None);
    let mut wm = WorkingMemory::new("s", "u", "main");
    wm.items.push(WorkingItem {
        text: "find notices".into(),
        rehearsal: 2,
        notes: vec!["found 3".into()],
        created_at: Timestamp::from_millis(5),
        last_used: 4,
        embedding: Vec::new(),
    });
    wm.recent_episodes = vec!["e1".into()];
    wm.turns = 4;
    s.store.save_working(&wm).await.unwrap();
    wm.turns = 5;
    s.store.save_working(&wm).await.unwrap();
    s.reopen().await;
    assert_eq!(s.store.load_working("s").await.unwrap(), Some(wm));

    // A record found by its words alone (its vector is far from the
    // query's) is no longer found by them once it is deleted.
    let mut f = record("f", "main", Layer::Episodic, "episode", unit(8, &[(6, 1.0)]), 6);
    f.text = "the zebra crossing by the 횡단보도 school".into();
    s.store.put(f).await.unwrap();
    let by_words = SearchQuery {
        terms: SearchQuery::terms_of("zebra 횡단보도"),
        ..query(mains.clone(), unit(8, &[(7, 1.0)]), 5, 0.5)
    };
    let found = |hits: Vec<Vec<jarvis_sdk::memory::SearchHit>>| -> Vec<String> {
        hits.into_iter().flatten().map(|h| h.id).collect()
    };
    let hits = s
        .store
        .search_many(std::slice::from_ref(&by_words))
        .await
        .unwrap();
    assert_eq!(found(hits), ["f"], "{backend:?}: found by its words");
    assert_eq!(s.store.delete(&["f".into()]).await.unwrap(), 1);
    s.reopen().await;
    let hits = s
        .store
        .search_many(std::slice::from_ref(&by_words))
        .await
        .unwrap();
    assert!(found(hits).is_empty(), "{backend:?}: its words are forgotten too");

    // delete: really gone, counted once, unknown ids ignored.
    let gone = s
        .store
        .delete(&["b".into(), "b".into(), "zz".into()])
        .await
        .unwrap();
    assert_eq!(gone, 1, "{backend:?}");
    s.reopen().await;
    assert!(s.store.get(&["b".into()]).await.unwrap().is_empty());
    assert_eq!(ids(s.store.list(&mains).await.unwrap()), ["legacy"]);
    assert_eq!(s.store.delete(&[]).await.unwrap(), 0);

    // The end of a turn: the episode and the working memory together.
    let e = record("e", "main", Layer::Episodic, "episode", unit(8, &[(2, 1.0)]), 9);
    let mut wm2 = WorkingMemory::new("s2", "u", "main");
    wm2.recent_episodes = vec!["e".into()];
    wm2.turns = 1;
    s.store.put_with_working(e.clone(), &wm2).await.unwrap();
    s.reopen().await;
    assert_eq!(s.store.get(&["e".into()]).await.unwrap(), vec![e]);
    assert_eq!(s.store.load_working("s2").await.unwrap(), Some(wm2));
}

#[tokio::test]
async fn the_in_memory_store_keeps_the_contract() {
    contract(Backend::Memory).await;
}

#[tokio::test]
async fn the_sqlite_store_keeps_the_contract() {
    contract(Backend::Sqlite).await;
}

#[tokio::test]
async fn the_sqlite_store_keeps_the_contract_across_reopens() {
    contract(Backend::SqliteReopened).await;
}

#[tokio::test]
async fn the_postgres_store_keeps_the_contract() {
    contract(Backend::Postgres).await;
}

#[tokio::test]
async fn two_postgres_stores_on_one_database_see_each_others_writes() {
    let Some((url, _)) = crate::pg::fresh_schema("memory store, two instances").await else {
        return;
    };
    let one = PostgresMemoryStore::connect(&url).await.unwrap();
    let two = PostgresMemoryStore::connect(&url).await.unwrap();
    let v = unit(4, &[(2, 1.0)]);
    one.put(record("x", "main", Layer::Semantic, "fact", v.clone(), 1))
        .await
        .unwrap();
    let filter = MemoryFilter::for_user("u");
    let hits = two
        .search(&query(filter.clone(), v.clone(), 3, 0.5))
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);
    two.touch(&["x".into()]).await.unwrap();
    assert_eq!(one.get(&["x".into()]).await.unwrap()[0].rehearsal, 1);
    // Writes from both at once all arrive, in both mirrors.
    let writes = (0..20).map(|i| {
        let store = if i % 2 == 0 { one.clone() } else { two.clone() };
        let r = record(&format!("w{i}"), "main", Layer::Episodic, "note", v.clone(), i);
        async move { store.put(r).await }
    });
    for result in futures::future::join_all(writes).await {
        result.unwrap();
    }
    for store in [&one, &two] {
        assert_eq!(store.list(&filter).await.unwrap().len(), 21);
    }

    // A third instance reading while both write and rehearse: a write is
    // one statement holding the write lock, so rows become visible in `seq`
    // order and a mirror that caught up past a row never misses it.
    let reader = PostgresMemoryStore::connect(&url).await.unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    let writes = futures::future::join_all((0..120).map(|i| {
        let store = if i % 2 == 0 { one.clone() } else { two.clone() };
        let r = record(&format!("c{i}"), "main", Layer::Episodic, "note", v.clone(), i);
        async move {
            store.put(r).await.unwrap();
            if i % 3 == 0 {
                store.touch(&[format!("c{i}"), "x".into()]).await.unwrap();
            }
        }
    }));
    let reads = async {
        let mut reads = 0;
        while !done.load(std::sync::atomic::Ordering::Relaxed) {
            reader.list(&filter).await.unwrap();
            reads += 1;
        }
        reads
    };
    let ((), reads) = tokio::join!(
        async {
            writes.await;
            done.store(true, std::sync::atomic::Ordering::Relaxed);
        },
        reads
    );
    assert!(reads > 0);
    let seen = reader.list(&filter).await.unwrap();
    assert_eq!(seen.len(), 141, "every row reached the reading mirror");
    let rehearsed = |id: &str| seen.iter().find(|r| r.id == id).unwrap().rehearsal;
    assert_eq!(rehearsed("x"), 1 + 40, "each rehearsal counted once");
    assert_eq!(rehearsed("c3"), 1);
}

/// A recall catches up once and then reads from that view: what another
/// instance writes after the catch-up reaches the cached reads only at
/// the next one after its notice, and the end of a turn (episode and
/// working memory, one statement) reaches the other instance whole.
#[tokio::test]
async fn a_postgres_recall_reads_as_of_its_catch_up() {
    let Some((url, _)) = crate::pg::fresh_schema("memory store, catch-up").await else {
        return;
    };
    let writer = PostgresMemoryStore::connect(&url).await.unwrap();
    let reader = PostgresMemoryStore::connect(&url).await.unwrap();
    let v = unit(4, &[(1, 1.0)]);
    let filter = MemoryFilter::for_user("u");
    let search = || query(filter.clone(), v.clone(), 5, 0.5);

    let heard = reader.heard();
    writer
        .put(record("a", "main", Layer::Episodic, "episode", v.clone(), 1))
        .await
        .unwrap();
    reader.hear(heard).await;
    reader.catch_up().await.unwrap();
    let heard = reader.heard();
    let mut wm = WorkingMemory::new("s", "u", "main");
    wm.recent_episodes = vec!["b".into()];
    writer
        .put_with_working(record("b", "main", Layer::Episodic, "episode", v.clone(), 2), &wm)
        .await
        .unwrap();

    let seen = |hits: Vec<Vec<jarvis_sdk::memory::SearchHit>>| -> Vec<String> {
        let mut ids: Vec<String> = hits.into_iter().flatten().map(|h| h.id).collect();
        ids.sort();
        ids
    };
    let cached = reader.search_many_cached(&[search()]).await.unwrap();
    assert_eq!(seen(cached), ["a"], "the cached read answers as of the catch-up");
    assert!(reader.get_texts_cached(&["b".into()]).await.unwrap().is_empty());

    reader.hear(heard).await;
    reader.catch_up().await.unwrap();
    let cached = reader.search_many_cached(&[search()]).await.unwrap();
    assert_eq!(seen(cached), ["a", "b"]);
    let texts = reader.get_texts_cached(&["b".into()]).await.unwrap();
    assert_eq!(texts.len(), 1);
    assert_eq!(
        reader.load_working("s").await.unwrap(),
        Some(wm),
        "the working memory came with it"
    );
}

/// A rehearsal brings another instance only the new count: the mirror
/// keeps the text and vector it holds, a fresh instance reads the whole
/// row, and a record written again after its rehearsal comes back whole.
#[tokio::test]
async fn a_rehearsal_reaches_other_postgres_mirrors_without_losing_content() {
    let Some((url, _)) = crate::pg::fresh_schema("memory store, light rehearsals").await else {
        return;
    };
    let one = PostgresMemoryStore::connect(&url).await.unwrap();
    let two = PostgresMemoryStore::connect(&url).await.unwrap();
    let v = unit(4, &[(3, 1.0)]);
    let filter = MemoryFilter::for_user("u");
    let search = || query(filter.clone(), v.clone(), 5, 0.5);
    one.put(record("x", "main", Layer::Semantic, "fact", v.clone(), 1))
        .await
        .unwrap();
    two.get(&["x".into()]).await.unwrap();
    let heard = two.heard();
    one.touch(&["x".into()]).await.unwrap();
    one.touch(&["x".into()]).await.unwrap();

    // Read from the mirror alone, after the catch-up that follows the
    // writes' notices (two of them: one per statement).
    let whole = |store: &PostgresMemoryStore, heard: Option<u64>| {
        let store = store.clone();
        let search = search();
        async move {
            if let Some(heard) = heard {
                store.hear(heard + 1).await;
            }
            store.catch_up().await.unwrap();
            let texts = store.get_texts_cached(&["x".into()]).await.unwrap();
            let hits = store.search_many_cached(&[search]).await.unwrap();
            (
                texts,
                hits.into_iter().flatten().map(|h| h.id).collect::<Vec<_>>(),
            )
        }
    };
    for (name, store, heard) in [
        ("the mirror that held it", two.clone(), Some(heard)),
        (
            "a fresh mirror",
            PostgresMemoryStore::connect(&url).await.unwrap(),
            None,
        ),
    ] {
        let (texts, hits) = whole(&store, heard).await;
        assert_eq!(texts.len(), 1, "{name}");
        assert_eq!(texts[0].rehearsal, 2, "{name}: both rehearsals counted");
        assert_eq!(texts[0].text, "text of x — 한글도", "{name}: the text kept");
        assert_eq!(texts[0].metadata["n"], 1, "{name}: the metadata kept");
        assert_eq!(hits, ["x"], "{name}: the vector kept");
    }

    // Written again after the rehearsals: the new content arrives.
    let mut again = record("x", "main", Layer::Semantic, "fact", v.clone(), 2);
    again.text = "x rewritten".into();
    let heard = two.heard();
    one.put(again).await.unwrap();
    one.touch(&["x".into()]).await.unwrap();
    let (texts, hits) = whole(&two, Some(heard)).await;
    assert_eq!(texts[0].text, "x rewritten");
    assert_eq!(texts[0].rehearsal, 1);
    assert_eq!(hits, ["x"]);
}

/// A recall's rehearsals go out in the background (`touch_soon`): the
/// same store's next read counts every one of them, however many recalls
/// sent them at once, and another instance sees them once they landed.
#[tokio::test]
async fn rehearsals_sent_in_the_background_come_before_the_stores_next_read() {
    let Some((url, _)) = crate::pg::fresh_schema("memory store, background rehearsals").await else {
        return;
    };
    let one = PostgresMemoryStore::connect(&url).await.unwrap();
    let two = PostgresMemoryStore::connect(&url).await.unwrap();
    let v = unit(4, &[(0, 1.0)]);
    one.put(record("x", "main", Layer::Semantic, "fact", v.clone(), 1))
        .await
        .unwrap();
    one.touch_soon(&["x".into()]).await.unwrap();
    assert_eq!(one.get(&["x".into()]).await.unwrap()[0].rehearsal, 1);

    let recalls = (0..10).map(|_| {
        let one = one.clone();
        async move { one.touch_soon(&["x".into()]).await }
    });
    for sent in futures::future::join_all(recalls).await {
        sent.unwrap();
    }
    let rehearsal = |records: Vec<jarvis_sdk::memory::MemoryRecord>| records[0].rehearsal;
    assert_eq!(
        rehearsal(one.list(&MemoryFilter::for_user("u")).await.unwrap()),
        11
    );
    assert_eq!(rehearsal(two.get(&["x".into()]).await.unwrap()), 11);
    // A write waits for them too: a rewrite after a recall's rehearsal
    // is the last word (its count, not one more).
    one.touch_soon(&["x".into()]).await.unwrap();
    one.put(record("x", "main", Layer::Semantic, "fact", v.clone(), 2))
        .await
        .unwrap();
    assert_eq!(rehearsal(two.get(&["x".into()]).await.unwrap()), 0);
    // So does the end of a turn that rewrites a rehearsed record; one that
    // writes another record goes on beside the rehearsal, which still
    // lands.
    one.put(record("y", "main", Layer::Semantic, "fact", v.clone(), 3))
        .await
        .unwrap();
    let wm = WorkingMemory::new("s", "u", "main");
    one.touch_soon(&["x".into(), "y".into()]).await.unwrap();
    one.put_with_working(record("x", "main", Layer::Semantic, "fact", v.clone(), 4), &wm)
        .await
        .unwrap();
    one.touch_soon(&["y".into()]).await.unwrap();
    one.put_with_working(record("z", "main", Layer::Episodic, "note", v.clone(), 5), &wm)
        .await
        .unwrap();
    let counts = one.get(&["x".into(), "y".into()]).await.unwrap();
    assert_eq!(
        counts
            .iter()
            .map(|r| (r.id.as_str(), r.rehearsal))
            .collect::<Vec<_>>(),
        [("x", 0), ("y", 2)]
    );
    assert_eq!(rehearsal(two.get(&["y".into()]).await.unwrap()), 2);
}

/// An in-memory store that counts its working-memory reads.
#[derive(Debug, Default)]
struct CountingReads {
    inner: InMemoryMemoryStore,
    working_reads: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl MemoryStore for CountingReads {
    async fn put(&self, record: MemoryRecord) -> Result<(), jarvis_sdk::memory::MemoryError> {
        self.inner.put(record).await
    }
    async fn get(&self, ids: &[String]) -> Result<Vec<MemoryRecord>, jarvis_sdk::memory::MemoryError> {
        self.inner.get(ids).await
    }
    async fn list(
        &self,
        filter: &MemoryFilter,
    ) -> Result<Vec<MemoryRecord>, jarvis_sdk::memory::MemoryError> {
        self.inner.list(filter).await
    }
    async fn search(
        &self,
        query: &SearchQuery,
    ) -> Result<Vec<jarvis_sdk::memory::SearchHit>, jarvis_sdk::memory::MemoryError> {
        self.inner.search(query).await
    }
    async fn touch(&self, ids: &[String]) -> Result<(), jarvis_sdk::memory::MemoryError> {
        self.inner.touch(ids).await
    }
    async fn delete(&self, ids: &[String]) -> Result<usize, jarvis_sdk::memory::MemoryError> {
        self.inner.delete(ids).await
    }
    async fn stale(
        &self,
        embedder: &str,
        limit: usize,
    ) -> Result<Vec<MemoryRecord>, jarvis_sdk::memory::MemoryError> {
        self.inner.stale(embedder, limit).await
    }
    async fn load_working(
        &self,
        session_id: &str,
    ) -> Result<Option<WorkingMemory>, jarvis_sdk::memory::MemoryError> {
        self.working_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.load_working(session_id).await
    }
    async fn save_working(&self, memory: &WorkingMemory) -> Result<(), jarvis_sdk::memory::MemoryError> {
        self.inner.save_working(memory).await
    }
}

/// A turn reads its session's working memory once: `record_turn` updates
/// what `observe` read for the same prompt, and reads afresh for any other
/// prompt or session; what it writes is the same either way.
#[tokio::test]
async fn a_turn_reads_its_working_memory_once() {
    use jarvis_sdk::memory::{MemoryScope, MemoryService, TurnRecord};
    use jarvis_sdk::model::HashEmbedder;
    let store = Arc::new(CountingReads::default());
    let memory = MemoryService::new(store.clone(), Arc::new(HashEmbedder::default()));
    let reads = || store.working_reads.load(std::sync::atomic::Ordering::Relaxed);
    let scope = MemoryScope::new("u", "main", "s1");
    for (n, prompt) in ["첫 번째 질문", "second question", "세 번째"]
        .into_iter()
        .enumerate()
    {
        memory.observe(&scope, prompt).await.unwrap();
        memory
            .record_turn(&scope, TurnRecord::new(prompt, "answer"))
            .await
            .unwrap();
        assert_eq!(reads(), n + 1, "turn {n}: one read");
    }
    // Another prompt than the one recalled for, or another session: read.
    memory.observe(&scope, "asked").await.unwrap();
    memory
        .record_turn(&scope, TurnRecord::new("told", "answer"))
        .await
        .unwrap();
    let other = MemoryScope::new("u", "main", "s2");
    memory
        .record_turn(&other, TurnRecord::new("asked", "answer"))
        .await
        .unwrap();
    assert_eq!(reads(), 3 + 2 + 1);
    let working = store.inner.load_working("s1").await.unwrap().unwrap();
    let texts: Vec<&str> = working.items.iter().map(|i| i.text.as_str()).collect();
    for prompt in ["첫 번째 질문", "second question", "세 번째", "told"] {
        assert!(texts.contains(&prompt), "{prompt} kept: {texts:?}");
    }
    assert!(!working.recent_episodes.is_empty());
}
