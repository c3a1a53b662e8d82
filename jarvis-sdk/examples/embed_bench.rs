//! Measures the offline `HashEmbedder`: the time to embed one query, for
//! short and longer Korean and English texts, and one `cosine` of two
//! vectors (what memory recall pays per record).
//!
//! Run with `cargo run --release -p jarvis-sdk --example embed_bench`
//! (add `-- --smoke` for a quick check that it works).

use jarvis_sdk::model::{HashEmbedder, cosine};
use std::hint::black_box;
use std::time::{Duration, Instant};

const TEXTS: &[(&str, &str)] = &[
    ("ko", "서울 SH 행복주택 공고 좀 찾아줘"),
    ("en", "find the SH housing notice"),
    (
        "ko",
        "지난주에 서울에서 본 SH 행복주택 공고를 다시 찾아서 신청 자격과 마감일, 임대 보증금과 월 임대료를 정리해 줘. 신혼부부 특별공급도 같이 봐 주고, 대출 한도도 계산해 줘.",
    ),
    (
        "en",
        "Find the SH housing notice I saw in Seoul last week again and summarise who may apply, the deadline, the deposit and the monthly rent; check the newlywed quota and the loan limit too.",
    ),
];

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank]
}

fn micros(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn nanos(d: Duration) -> String {
    format!("{:.0} ns", d.as_secs_f64() * 1e9)
}

/// Times `f` `runs` times after a warm-up; returns the sorted timings.
fn time(runs: usize, mut f: impl FnMut()) -> Vec<Duration> {
    for _ in 0..runs / 10 + 1 {
        f();
    }
    let mut timings: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    timings.sort_unstable();
    timings
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let runs = if smoke { 200 } else { 20_000 };
    let embedder = HashEmbedder::default();
    for (lang, text) in TEXTS {
        let timings = time(runs, || {
            black_box(embedder.embed_text(black_box(text)));
        });
        println!(
            "hash embed ({lang}, {} chars): p50 {}, p99 {}",
            text.chars().count(),
            micros(percentile(&timings, 0.50)),
            micros(percentile(&timings, 0.99)),
        );
    }
    // One comparison is too short to time alone: time 1,000 in a row.
    let a = embedder.embed_text(TEXTS[0].1);
    let b = embedder.embed_text(TEXTS[2].1);
    let per_batch = 1_000;
    let timings = time(runs / 10, || {
        for _ in 0..per_batch {
            black_box(cosine(black_box(&a), black_box(&b)));
        }
    });
    println!(
        "cosine ({} dims): p50 {} per pair, p99 {} per pair",
        embedder.dimensions(),
        nanos(percentile(&timings, 0.50) / per_batch),
        nanos(percentile(&timings, 0.99) / per_batch),
    );
}
