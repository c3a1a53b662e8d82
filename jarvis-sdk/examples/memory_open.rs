//! Measures the SQLite memory store (`SqliteMemoryStore`, the default
//! store of a home):
//!
//! 1. **Start-up**: the time to open `memory.sqlite3` and rebuild the
//!    in-process index from it, at 10k and 100k records (median and best
//!    of 3 opens; the file was just written, so it is in the OS page cache,
//!    as after a restart of the server). Records are realistic: turn
//!    episodes (a request and an answer of a few hundred characters, the
//!    metadata `record_turn` writes) with the offline hash embedder's
//!    512-dimension vectors, plus profile facts and task patterns.
//! 2. **A durable write**: one `put` of a turn episode into the 100k
//!    file (p50 and p99), and `record_turn` (the episode and the session's
//!    working memory, two transactions) on SQLite and in memory.
//! 3. **Forgetting**: one `delete` with its `TRUNCATE` checkpoint.
//! 4. **Restart to fast recall**: the largest file opened once with no
//!    saved recall graphs (they are built in the background while searches
//!    scan exactly) and then three times with the graphs its last close
//!    saved: the open, the time until every graph answers, and the search
//!    p50 over the first minute after the open (or until the graphs have
//!    answered 300 searches, whichever is first); each search is one
//!    recall's vector-and-word search of the episodic and semantic layers.
//!
//! Targets: opening 100k records in at most 1 s; after a restart with
//! saved graphs, recall as fast as before within seconds (`--million`
//! adds a 1M-record file, whose target is a minute).
//!
//! Run with `cargo run --release -p jarvis-sdk --example memory_open`
//! (add `-- --smoke` for a quick check that it works).

use jarvis_sdk::common::Timestamp;
use jarvis_sdk::memory::{
    Agents, InMemoryMemoryStore, Layer, MemoryFilter, MemoryRecord, MemoryScope, MemoryService, MemoryStore,
    SearchQuery, SqliteMemoryStore, TurnRecord,
};
use jarvis_sdk::model::{Embedder, HashEmbedder};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const WORDS: &[&str] = &[
    "서울",
    "행복주택",
    "청약",
    "공고",
    "마감일",
    "대출",
    "금리",
    "보증금",
    "월세",
    "전세",
    "신혼부부",
    "자격",
    "소득",
    "계약",
    "이사",
    "회의",
    "보고서",
    "일정",
    "병원",
    "예약",
    "여행",
    "숙소",
    "가족",
    "생일",
    "선물",
    "housing",
    "notice",
    "deadline",
    "mortgage",
    "deposit",
    "meeting",
    "report",
    "draft",
    "flight",
    "hotel",
    "birthday",
    "insurance",
    "school",
    "homework",
    "weekend",
    "morning",
    "friend",
    "parents",
    "garden",
];

/// A small deterministic random source (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Words up to about `chars` characters.
    fn text(&mut self, chars: usize) -> String {
        let mut out = String::new();
        while out.chars().count() < chars {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(WORDS[self.below(WORDS.len())]);
            if self.below(5) == 0 {
                out.push_str(&format!(" {}", self.below(10_000)));
            }
        }
        out
    }
}

/// `n` records as a home collects them: 85% turn episodes (a request of
/// 40–160 characters and an answer of 150–500), 10% profile facts, 5% task
/// patterns, written over 90 days.
fn records(n: usize, embedder: &HashEmbedder) -> Vec<MemoryRecord> {
    let mut rng = Rng(0x5eed_0be1 + n as u64);
    let now = 1_795_910_400_000i64;
    (0..n)
        .map(|i| {
            let roll = rng.below(100);
            let (layer, kind, source, text, metadata) = if roll < 85 {
                let (p, a) = (40 + rng.below(120), 150 + rng.below(350));
                let text = format!("{}\n→ {}", rng.text(p), rng.text(a));
                let metadata = serde_json::json!({
                    "session_id": format!("default-main-{}", i % 40),
                    "tools": if rng.below(3) == 0 { vec!["lh_notice", "housing_budget"] } else { vec![] },
                    "duration_ms": 800 + rng.below(20_000),
                    "turns": 1 + rng.below(4),
                    "overflows": 0,
                    "overflow": false,
                    "stop_reason": "stop",
                });
                (Layer::Episodic, "episode", "turn", text, metadata)
            } else if roll < 95 {
                let chars = 30 + rng.below(80);
                let text = rng.text(chars);
                (Layer::Semantic, "fact", "remember", text, serde_json::Value::Null)
            } else {
                let name = format!("pattern {i}");
                let chars = 100 + rng.below(200);
                let text = format!("{name}: {}", rng.text(chars));
                (
                    Layer::Procedural,
                    "task_pattern",
                    "task_pattern",
                    text,
                    serde_json::json!({ "name": name }),
                )
            };
            MemoryRecord {
                id: format!("mem_{i:08}"),
                user: "default".into(),
                agent_id: if rng.below(4) == 0 { "karen" } else { "main" }.into(),
                layer,
                kind: kind.into(),
                source: source.into(),
                embedding: embedder.embed_text(&text),
                embedder: embedder.name().to_owned(),
                text,
                metadata,
                created_at: Timestamp::from_millis(now - rng.below(90 * 86_400_000) as i64),
                rehearsal: rng.below(4) as u32,
            }
        })
        .collect()
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn megabytes(path: &Path) -> f64 {
    ["", "-wal"]
        .iter()
        .filter_map(|suffix| {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            std::fs::metadata(name).ok()
        })
        .map(|m| m.len() as f64 / 1e6)
        .sum()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Writes `records` into a new database at `path`, closed afterwards.
async fn fill(path: &Path, records: Vec<MemoryRecord>) {
    let store = SqliteMemoryStore::open(path.to_path_buf()).await.unwrap();
    for record in records {
        store.put(record).await.unwrap();
    }
    store.checkpoint().await.unwrap();
}

/// Opens `path` `times` times; answers the sorted durations and the last
/// store.
async fn opens(path: &Path, times: usize) -> (Vec<Duration>, SqliteMemoryStore) {
    let mut took = Vec::with_capacity(times);
    let mut last = None;
    for _ in 0..times {
        drop(last.take());
        let start = Instant::now();
        let store = SqliteMemoryStore::open(path.to_path_buf()).await.unwrap();
        took.push(start.elapsed());
        last = Some(store);
    }
    took.sort_unstable();
    (took, last.unwrap())
}

/// Per-call times of `record_turn` over `turns` turns of one session.
async fn record_turns(store: Arc<dyn MemoryStore>, turns: usize) -> Vec<Duration> {
    let memory = MemoryService::new(store, Arc::new(HashEmbedder::default()));
    let scope = MemoryScope::new("default", "main", "bench");
    let mut rng = Rng(0xbead);
    let mut out = Vec::with_capacity(turns);
    for _ in 0..turns {
        let turn = TurnRecord::new(rng.text(80), rng.text(300));
        let start = Instant::now();
        memory.record_turn(&scope, turn).await.unwrap();
        out.push(start.elapsed());
    }
    out.sort_unstable();
    out
}

/// What one open of a store with a recall graph measured.
struct Restart {
    open: Duration,
    /// From the start of the open until every graph answered.
    ready: Duration,
    /// Searches in the first minute (see the module doc) and their p50.
    searches: usize,
    p50: Duration,
    /// The p50 of those searches once the graphs answered.
    p50_ready: Duration,
}

/// A recall's searches for one prompt: vectors and words, episodic and
/// semantic layers of the main agent.
fn recall_queries(embedder: &HashEmbedder, prompt: &str) -> Vec<SearchQuery> {
    [Layer::Episodic, Layer::Semantic]
        .into_iter()
        .map(|layer| SearchQuery {
            filter: MemoryFilter::for_user("default").layer(layer, Agents::only(["main"])),
            embedder: embedder.name().to_owned(),
            vector: embedder.embed_text(prompt),
            terms: SearchQuery::terms_of(prompt),
            k: 10,
            min_similarity: 0.0,
        })
        .collect()
}

/// Opens `path` and searches back to back for the first minute (or until
/// the graphs, once they hold `graph_rows` rows, have answered 300
/// searches); answers what it measured and the store.
async fn restart(path: &Path, graph_rows: usize, smoke: bool) -> (Restart, SqliteMemoryStore) {
    let embedder = HashEmbedder::default();
    let mut rng = Rng(0x0c0ffee);
    let start = Instant::now();
    let store = SqliteMemoryStore::open(path.to_path_buf()).await.unwrap();
    let open = start.elapsed();
    let (mut times, mut after) = (Vec::new(), Vec::new());
    let mut ready = None;
    let minute = Duration::from_secs(if smoke { 10 } else { 60 });
    while start.elapsed() < minute && after.len() < 300 {
        let queries = recall_queries(&embedder, &rng.text(60));
        let began = Instant::now();
        store.search_many(&queries).await.unwrap();
        let took = began.elapsed();
        times.push(took);
        if ready.is_some() {
            after.push(took);
        } else if store.graph_stats().0 >= graph_rows {
            ready = Some(start.elapsed());
        }
    }
    times.sort_unstable();
    after.sort_unstable();
    let measured = Restart {
        open,
        ready: ready.unwrap_or(Duration::MAX),
        searches: times.len(),
        p50: percentile(&times, 0.5),
        p50_ready: if after.is_empty() {
            Duration::MAX
        } else {
            percentile(&after, 0.5)
        },
    };
    (measured, store)
}

fn or_never(d: Duration) -> String {
    if d == Duration::MAX {
        "not in the window".into()
    } else {
        ms(d)
    }
}

fn megabytes_in(dir: &Path) -> f64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.metadata().ok())
                .map(|m| m.len() as f64 / 1e6)
                .sum()
        })
        .unwrap_or(0.0)
}

/// Section 4: the largest file reopened without and with saved graphs;
/// answers whether the restart target was met.
async fn restarts(path: &Path, n: usize, smoke: bool) -> bool {
    let probe = SqliteMemoryStore::open(path.to_path_buf()).await.unwrap();
    let graphs = probe.graphs_path();
    probe.wait_for_graphs();
    let graph_rows = probe.graph_stats().0;
    drop(probe);
    println!();
    println!("restart to fast recall, {n} records ({graph_rows} of them in partitions with a graph):");
    println!();
    println!(
        "| graphs at open | open | graphs answer after | searches in the window | p50 | p50 once the graphs answer |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let _ = std::fs::remove_dir_all(&graphs);
    let (cold, store) = restart(path, graph_rows, smoke).await;
    store.wait_for_graphs();
    drop(store);
    let row = |label: &str, r: &Restart| {
        println!(
            "| {label} | {} | {} | {} | {} | {} |",
            ms(r.open),
            or_never(r.ready),
            r.searches,
            ms(r.p50),
            or_never(r.p50_ready)
        )
    };
    row("none (built in the background)", &cold);
    let mut warm = Vec::new();
    for _ in 0..3 {
        let (r, store) = restart(path, graph_rows, smoke).await;
        drop(store);
        row("saved by the last close", &r);
        warm.push(r);
    }
    let mut ready: Vec<Duration> = warm.iter().map(|r| r.ready).collect();
    let mut p50: Vec<Duration> = warm.iter().map(|r| r.p50).collect();
    ready.sort_unstable();
    p50.sort_unstable();
    println!();
    println!(
        "with saved graphs, single runs min/median/max: graphs answer after {} / {} / {}; \
         first-minute search p50 {} / {} / {} (without: {} after {}); graph files {:.1} MB",
        or_never(ready[0]),
        or_never(ready[1]),
        or_never(ready[2]),
        ms(p50[0]),
        ms(p50[1]),
        ms(p50[2]),
        ms(cold.p50),
        or_never(cold.ready),
        megabytes_in(&graphs),
    );
    let target = if n >= 1_000_000 {
        Duration::from_secs(60)
    } else {
        Duration::from_secs(5)
    };
    let met = ready[2] <= target;
    if !met {
        println!("  (missed: the graphs should answer within {target:?} of the open)");
    }
    met
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let check = std::env::args().any(|a| a == "--check");
    let sizes: &[usize] = if smoke {
        &[1_000, 20_000]
    } else if std::env::args().any(|a| a == "--million") {
        &[10_000, 100_000, 1_000_000]
    } else {
        &[10_000, 100_000]
    };
    let (reopens, puts, turns) = if smoke { (2, 50, 50) } else { (3, 2_000, 1_000) };
    let embedder = HashEmbedder::default();
    let dir = tempfile::tempdir().unwrap();
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into());
    println!(
        "memory_open: SQLite memory store ({} build, {} CPUs, load average {load}, page cache warm, \
         hash-embedder vectors of 512 dims)",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    println!();
    println!("| records | file size | open: median | open: best | records per second |");
    println!("|---:|---:|---:|---:|---:|");
    let mut largest = None;
    for &n in sizes {
        let path = dir.path().join(format!("memory-{n}.sqlite3"));
        let built = records(n, &embedder);
        let chars: usize = built.iter().map(|r| r.text.chars().count()).sum();
        fill(&path, built).await;
        let (took, store) = opens(&path, reopens).await;
        assert_eq!(store.len(), n);
        let median = took[took.len() / 2];
        println!(
            "| {n} | {:.1} MB | {} | {} | {:.0} |",
            megabytes(&path),
            ms(median),
            ms(took[0]),
            n as f64 / median.as_secs_f64(),
        );
        if !smoke && n == 100_000 && median > Duration::from_secs(1) {
            println!("  (over the 1 s target; mean text {} characters)", chars / n);
        }
        largest = Some((n, store, path));
    }
    let (n, store, path) = largest.unwrap();
    drop(store);
    let restart_met = restarts(&path, n, smoke).await;
    let store = Arc::new(SqliteMemoryStore::open(path.clone()).await.unwrap());

    // One put of a turn episode into the largest file.
    let mut rng = Rng(0xfeed);
    let mut put_times = Vec::with_capacity(puts);
    for i in 0..puts {
        let text = format!("{}\n→ {}", rng.text(100), rng.text(350));
        let mut record = records(1, &embedder).pop().unwrap();
        record.id = format!("put_{i}");
        record.embedding = embedder.embed_text(&text);
        record.text = text;
        let start = Instant::now();
        store.put(record).await.unwrap();
        put_times.push(start.elapsed());
    }
    put_times.sort_unstable();
    println!();
    println!(
        "put of a turn episode ({n} records in the file, {puts} puts): p50 {}, p99 {}",
        ms(percentile(&put_times, 0.5)),
        ms(percentile(&put_times, 0.99))
    );

    let sqlite = record_turns(store.clone(), turns).await;
    let in_memory = record_turns(Arc::new(InMemoryMemoryStore::new()), turns).await;
    println!(
        "record_turn (episode + working memory, one transaction), median over {turns} turns: sqlite {}, in memory {} (durable write adds {})",
        ms(percentile(&sqlite, 0.5)),
        ms(percentile(&in_memory, 0.5)),
        ms(percentile(&sqlite, 0.5).saturating_sub(percentile(&in_memory, 0.5))),
    );

    let start = Instant::now();
    assert_eq!(store.delete(&["put_0".into()]).await.unwrap(), 1);
    println!(
        "delete of one record with its TRUNCATE checkpoint: {}; file {:.1} MB",
        ms(start.elapsed()),
        megabytes(&path)
    );
    if check && !smoke && !restart_met {
        std::process::exit(1);
    }
}
