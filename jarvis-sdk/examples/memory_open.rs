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
//!
//! Target: opening 100k records in at most 1 s.
//!
//! Run with `cargo run --release -p jarvis-sdk --example memory_open`
//! (add `-- --smoke` for a quick check that it works).

use jarvis_sdk::{
    Embedder, HashEmbedder, InMemoryMemoryStore, Layer, MemoryRecord, MemoryScope, MemoryService,
    MemoryStore, SqliteMemoryStore, Timestamp, TurnRecord,
};
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

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let sizes: &[usize] = if smoke {
        &[1_000, 2_000]
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
    let store = Arc::new(store);

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
}
