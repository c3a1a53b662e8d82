//! A condition measured run by run: the warm-up, the short sessions and the
//! long one, each window's medians, pooled over the runs and run by run.

use crate::bench::{Bench, Memory, Sample};
use jarvis_sdk::agent::SessionStore;
use std::path::PathBuf;
use std::sync::Arc;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// Medians of a window of turns.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Row {
    pub(crate) total: f64,
    pub(crate) read: f64,
    pub(crate) write: f64,
    pub(crate) events: f64,
    pub(crate) security: f64,
    pub(crate) recall: f64,
    pub(crate) memory_write: f64,
    pub(crate) thinking: f64,
    pub(crate) floor: f64,
}

fn row(samples: &[Sample]) -> Row {
    let pick = |f: fn(&Sample) -> f64| median(samples.iter().map(f).collect());
    Row {
        total: pick(|s| s.total),
        read: pick(|s| s.read),
        write: pick(|s| s.write),
        events: pick(|s| s.events),
        security: pick(|s| s.security),
        recall: pick(|s| s.recall),
        memory_write: pick(|s| s.memory_write),
        thinking: pick(|s| s.thinking),
        floor: pick(|s| s.floor),
    }
}

/// Turn numbers of the three windows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    pub(crate) warmup: usize,
    pub(crate) sessions: usize,
    pub(crate) turns: usize,
    pub(crate) window: usize,
    pub(crate) long: usize,
}

impl Plan {
    fn label(first: usize, last: usize) -> String {
        format!("t{first}-{last}")
    }
}

pub(crate) struct Condition {
    pub(crate) key: &'static str,
    pub(crate) name: &'static str,
    /// Each window's medians over the turns of every run.
    pub(crate) rows: Vec<(String, Row)>,
    /// Each run's own medians, window by window.
    pub(crate) runs: Vec<Vec<(String, Row)>>,
}

/// The condition measured under `key`, when this run measured it.
pub(crate) fn find<'a>(conditions: &'a [Condition], key: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.key == key)
}

/// What a condition is, apart from the stores it runs on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Setup {
    pub(crate) key: &'static str,
    pub(crate) name: &'static str,
    /// Whether it also runs the long session.
    pub(crate) long: bool,
    /// Thinking on, routed off.
    pub(crate) thinking: bool,
}

impl Setup {
    /// A condition with the long session and thinking off (all but one).
    pub(crate) fn new(key: &'static str, name: &'static str) -> Self {
        Self {
            key,
            name,
            long: true,
            thinking: false,
        }
    }
}

/// What one run of a condition measures on: a fresh session store and
/// memory, and for the fsync conditions the home whose disk the floor is
/// sampled on.
pub(crate) struct Parts {
    pub(crate) store: Arc<dyn SessionStore>,
    pub(crate) memory: Memory,
    pub(crate) floor: Option<PathBuf>,
}

/// One run's samples, window by window (labels as printed).
type Windows = Vec<(String, Vec<Sample>)>;

/// Measures a condition `runs` times, each on fresh parts from `make`
/// (given the run's number, from 1), and pools each window's turns over
/// the runs: a window's row is the median of all of them. A machine that
/// is slow for a few seconds then shows in one run's turns, not in a
/// whole window; each run's own medians are printed too.
pub(crate) fn measure(
    runtime: &tokio::runtime::Runtime,
    setup: Setup,
    plan: Plan,
    runs: usize,
    mut make: impl FnMut(usize) -> Parts,
) -> Condition {
    let key = setup.key;
    let mut pooled: Windows = Vec::new();
    let mut per_run = Vec::with_capacity(runs);
    for run in 1..=runs {
        let windows = runtime.block_on(measure_run(setup, make(run), plan));
        let rows = rows_of(&windows);
        for (label, r) in &rows {
            println!("turn_overhead {key} run {run}/{runs} {label}: {}", describe(r));
        }
        per_run.push(rows);
        if pooled.is_empty() {
            pooled = windows;
        } else {
            for ((_, all), (_, more)) in pooled.iter_mut().zip(windows) {
                all.extend(more);
            }
        }
    }
    let rows = rows_of(&pooled);
    for (label, r) in &rows {
        println!("turn_overhead {key} {label}, {runs} runs pooled: {}", describe(r));
    }
    Condition {
        key,
        name: setup.name,
        rows,
        runs: per_run,
    }
}

/// Each window's label and the row of its samples' medians.
fn rows_of(windows: &Windows) -> Vec<(String, Row)> {
    windows
        .iter()
        .map(|(label, samples)| (label.clone(), row(samples)))
        .collect()
}

/// A row's figures, as the per-window lines print them.
fn describe(r: &Row) -> String {
    format!(
        "total {:.4} ms (history read {:.4}, history write {:.4}, events {:.4}, security {:.4}, recall {:.4}, memory write {:.4}, thinking {:.4})",
        r.total, r.read, r.write, r.events, r.security, r.recall, r.memory_write, r.thinking
    )
}

/// One run of a condition: the warm-up session, the short sessions and,
/// when the condition has one, the long session; answers each window's
/// turns.
async fn measure_run(setup: Setup, parts: Parts, plan: Plan) -> Windows {
    let mut bench = Bench::new(parts.store, parts.memory, setup.thinking).await;
    bench.session(plan.warmup).await;
    if let Some(home) = &parts.floor {
        // A turn's block, as the warm-up session's history holds it.
        let history = std::fs::metadata(home.join("sessions/bench-1.jsonl"))
            .unwrap()
            .len() as usize;
        bench.with_floor(&home.join("floor"), history / plan.warmup);
    }
    let (mut early, mut late) = (Vec::new(), Vec::new());
    for _ in 0..plan.sessions {
        let samples = bench.session(plan.turns).await;
        early.extend_from_slice(&samples[..plan.window]);
        late.extend_from_slice(&samples[plan.turns - plan.window..]);
    }
    let mut windows = vec![
        (Plan::label(1, plan.window), early),
        (Plan::label(plan.turns - plan.window + 1, plan.turns), late),
    ];
    if setup.long {
        // The long session's last turns alternate with the first turns of a
        // fresh one, which shows how much of any difference from turns 1-20
        // is the machine drifting rather than the session being long.
        let id = bench.new_session().await;
        for n in 1..=plan.long - plan.window {
            bench.turn(&id, n).await;
        }
        let fresh = bench.new_session().await;
        let (mut last, mut alongside) = (Vec::new(), Vec::new());
        for (k, n) in (plan.long - plan.window + 1..=plan.long).enumerate() {
            last.push(bench.turn(&id, n).await);
            alongside.push(bench.turn(&fresh, k + 1).await);
        }
        windows.push((Plan::label(plan.long - plan.window + 1, plan.long), last));
        if let Some(store) = &bench.embedded {
            let (rows, bytes) = store.graph_stats();
            println!(
                "turn_overhead {}: after the long session, {rows} records searched through graphs ({:.1} MB)",
                setup.key,
                bytes as f64 / 1e6
            );
        }
        windows.push((
            format!("{} of a fresh session, alongside", Plan::label(1, plan.window)),
            alongside,
        ));
    }
    windows
}
