//! Measures the framework's own time per turn, outside the model (SPEC.md
//! §16.1): the prompt path is `AgentSession::prompt` — the security
//! pipeline, the harness, the loop, the session store — with one subscriber
//! that serialises every event to JSON, on a `FauxProvider` that answers at
//! once.
//!
//! A discarded warm-up session, then 3 sessions × 200 turns: medians over
//! turns 1–20 and 181–200 (60 turns each); then one session of 10,000 turns:
//! the median over turns 9,981–10,000, and, taken turn by turn alongside
//! them, turns 1–20 of a fresh session (a control for drift of the machine
//! over the long run). Each condition runs five times (`--runs N`), each
//! time on fresh stores in a directory of its own. The ratio targets (a
//! late window over an early one, a durable turn over the floor) are
//! computed run by run and printed as min/median/max of the single runs
//! with how many met the target; a target is missed when the median single
//! run misses it. The tables show a window's medians over its turns of
//! every run (300 turns for turns 181–200, 100 for 9,981–10,000); each
//! run's own medians are printed too. A host busy
//! for a few seconds then moves one run's turns, not a whole window: the
//! same build's `jsonl-memory` ratio varied from 1.14× to 1.72× between
//! single runs on a shared 2-core machine. Conditions: the JSONL store with
//! fsync off (as the seed measured), the same with fsync at the end of every
//! turn (the default: `agent_end` waits for the sync), the in-memory store,
//! and Postgres on a throwaway local cluster when its binaries are
//! installed (the store as a node of a deployment, holding each session's
//! lease, as the `jarvis` binary runs it; memory off, then memory on in the
//! same database). Memory off and memory on (the seed's two conditions): with
//! memory on, a `MemoryService` on the hash embedder shared by every session
//! of the run, so the memory grows by one episode a turn (1,000 records by
//! turn 181 of the last short session) — in the embedded SQLite store
//! (`memory.sqlite3`, the default of a home) for the `jsonl-memory` and
//! `jsonl-fsync-memory` rows, and in the process (`InMemoryMemoryStore`)
//! for the `jsonl-memory-inproc` row.
//!
//! The physical floor of a durable turn is measured in the same run, on the
//! same disk, interleaved with the turns it is compared with: after each
//! turn of the fsync-per-turn conditions, one overwrite of a record of a
//! turn's size in a file of its own whose blocks were written and synced
//! beforehand, then `fdatasync` (what the sessions' write-ahead log pays
//! for a turn's block; an append to a growing file would also flush the
//! file's size and cost more than the log does). Those rows are
//! printed as a ratio to the median of the samples taken in their window,
//! so a disk that is slower in one minute than the next does not show as
//! overhead.
//!
//! Columns: total (the whole turn), history read (`get` + `recent`), history
//! write (`append` + `sync` of the turn's block), events (JSON serialisation
//! in the subscriber), security (the three pipeline stages), recall (from
//! the history read to the loop's start: the journal's `begin` and
//! `observe`) and memory write (what the turn episode takes after the
//! block's sync: it is written while the sync runs, so this is only what
//! it takes beyond it); the last two are phases of the turn, so memory off
//! shows the little the same stretch costs without memory. The thinking
//! column is the thinking slot before the turn.
//!
//! One more condition turns thinking on with the Thought Router routed off
//! (threshold 1.0, so it never thinks): the in-memory store, memory off, a
//! `ThoughtEngine` in the slot. Its thinking column is the router's cost
//! per turn as the turn pays it (the decision plus the `thought_route`
//! event reaching the subscriber); the router's decision alone is timed
//! apart, over many calls (target: the slot at most 5 µs a turn).
//!
//! Run with `cargo run --release -p jarvis-sdk --example turn_overhead`
//! (add `-- --smoke` for a quick check that it works, `-- --only
//! jsonl,postgres` to measure some conditions alone, keys as printed;
//! `-- --runs 1` for one run of each, `-- --check` to exit 1 when a target
//! is missed).

mod bench;
mod conditions;
mod floor;
mod probes;
mod report;

use bench::{Memory, ROUTED_OFF, prompt};
use conditions::{Parts, Plan, Setup, measure};
use jarvis_sdk::agent::{
    Durability, JsonlOptions, JsonlSessionStore, MemorySessionStore, NodeOptions, PostgresSessionStore,
    RouterSignals, SessionStore, ThoughtRouter,
};
use jarvis_sdk::testing::{REQUIRE_POSTGRES_ENV, TempPostgres};
use report::summary;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// Seconds per routing decision, over `calls` decisions on the turns'
/// prompts (the router alone: no session, no event).
fn router_decision(calls: usize) -> f64 {
    let router = ThoughtRouter::new(ROUTED_OFF);
    let prompts: Vec<String> = (1..=200).map(prompt).collect();
    let start = Instant::now();
    let mut thinks = 0usize;
    for i in 0..calls {
        let route = router.route(&RouterSignals {
            prompt: &prompts[i % prompts.len()],
            due_loops: 0,
            recent_failures: 0,
        });
        thinks += usize::from(std::hint::black_box(route).think);
    }
    let per_call = start.elapsed().as_secs_f64() / calls.max(1) as f64;
    assert_eq!(thinks, 0, "routed off never thinks");
    per_call
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    let check = args.iter().any(|a| a == "--check");
    // `--only a,b`: measure these conditions alone (keys as printed).
    let only: Option<Vec<String>> = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .map(|list| list.split(',').map(str::to_owned).collect());
    let wanted = |key: &str| only.as_ref().is_none_or(|keys| keys.iter().any(|k| k == key));
    // `--runs N`: each condition N times on fresh stores, windows pooled.
    let runs: usize = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1))
        .map(|n| n.parse().expect("--runs takes a number"))
        .unwrap_or(if smoke { 2 } else { 5 })
        .max(1);
    let plan = if smoke {
        Plan {
            warmup: 20,
            sessions: 3,
            turns: 40,
            window: 20,
            long: 400,
        }
    } else {
        Plan {
            warmup: 200,
            sessions: 3,
            turns: 200,
            window: 20,
            long: 10_000,
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "turn_overhead: AgentSession (security + harness + loop + store) + one JSON event subscriber on an instant FauxProvider; \
         warm-up session discarded; {} sessions x {} turns, then one of {} turns; each condition {runs} times on fresh stores, \
         each window's turns pooled over the runs; medians in ms",
        plan.sessions, plan.turns, plan.long
    );
    let mut conditions = Vec::new();

    let home = tempfile::tempdir().unwrap();
    let dir = |name: &str, run: usize| home.path().join(format!("{name}-{run}"));
    let fsync_off = JsonlOptions::default().durability(Durability::Never);
    let jsonl = |dir: &Path| -> Arc<dyn SessionStore> {
        Arc::new(JsonlSessionStore::open_with(dir, fsync_off.clone()).unwrap())
    };
    if wanted("jsonl") {
        let setup = Setup::new("jsonl", "JSONL, fsync off, memory off");
        conditions.push(measure(&runtime, setup, plan, runs, |run| Parts {
            store: jsonl(&dir("fsync-off", run)),
            memory: Memory::Off,
            floor: None,
        }));
    }
    if wanted("jsonl-memory") {
        let setup = Setup::new(
            "jsonl-memory",
            "JSONL, fsync off, memory on (embedded store, the default)",
        );
        conditions.push(measure(&runtime, setup, plan, runs, |run| {
            // Memory as a home keeps it by default: `memory.sqlite3`.
            let dir = dir("memory-on", run);
            Parts {
                store: jsonl(&dir),
                memory: Memory::Embedded(dir.join("memory.sqlite3")),
                floor: None,
            }
        }));
    }
    if wanted("jsonl-memory-inproc") {
        let setup = Setup::new("jsonl-memory-inproc", "JSONL, fsync off, memory on (in process)");
        conditions.push(measure(&runtime, setup, plan, runs, |run| Parts {
            store: jsonl(&dir("memory-inproc", run)),
            memory: Memory::InProcess,
            floor: None,
        }));
    }

    // The default: fsync per turn; memory off, then on in the embedded store.
    let durable = |dir: &Path| -> Arc<dyn SessionStore> { Arc::new(JsonlSessionStore::open(dir).unwrap()) };
    if wanted("jsonl-fsync") {
        let setup = Setup::new("jsonl-fsync", "JSONL, fsync per turn, memory off");
        conditions.push(measure(&runtime, setup, plan, runs, |run| {
            let dir = dir("fsync-on", run);
            Parts {
                store: durable(&dir),
                memory: Memory::Off,
                floor: Some(dir),
            }
        }));
    }
    if wanted("jsonl-fsync-memory") {
        let setup = Setup::new(
            "jsonl-fsync-memory",
            "JSONL, fsync per turn, memory on (embedded store)",
        );
        conditions.push(measure(&runtime, setup, plan, runs, |run| {
            let dir = dir("fsync-on-memory", run);
            Parts {
                store: durable(&dir),
                memory: Memory::Embedded(dir.join("memory.sqlite3")),
                floor: Some(dir),
            }
        }));
    }
    if wanted("memory") {
        let setup = Setup::new("memory", "in-memory");
        conditions.push(measure(&runtime, setup, plan, runs, |_| Parts {
            store: Arc::new(MemorySessionStore::new()),
            memory: Memory::Off,
            floor: None,
        }));
    }
    if wanted("thinking") {
        let setup = Setup {
            long: false,
            thinking: true,
            ..Setup::new("thinking", "in-memory, thinking on, routed off")
        };
        conditions.push(measure(&runtime, setup, plan, runs, |_| Parts {
            store: Arc::new(MemorySessionStore::new()),
            memory: Memory::Off,
            floor: None,
        }));
    }
    let decision = router_decision(if smoke { 20_000 } else { 1_000_000 });

    if wanted("postgres") || wanted("postgres-memory") {
        match TempPostgres::start() {
            Ok(cluster) => {
                // As the `jarvis` binary runs it: a node of a deployment, which
                // claims each session once and then holds its lease. Each run
                // of a condition in a schema of its own (the session ids
                // repeat).
                let schema_url = |schema: &str| {
                    runtime.block_on(async {
                        let (client, connection) =
                            tokio_postgres::connect(&cluster.url(), tokio_postgres::NoTls)
                                .await
                                .unwrap();
                        tokio::spawn(connection);
                        client
                            .batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
                            .await
                            .unwrap();
                    });
                    format!("{} options='-c search_path={schema}'", cluster.url())
                };
                let node = |url: &str| -> Arc<dyn SessionStore> {
                    let store = runtime
                        .block_on(async {
                            PostgresSessionStore::connect(url)
                                .await?
                                .with_node(NodeOptions::new("bench"))
                                .await
                        })
                        .unwrap();
                    Arc::new(store)
                };
                if wanted("postgres") {
                    let setup = Setup::new("postgres", "Postgres (local socket), one node, memory off");
                    conditions.push(measure(&runtime, setup, plan, runs, |run| Parts {
                        store: node(&schema_url(&format!("bench_memory_off_{run}"))),
                        memory: Memory::Off,
                        floor: None,
                    }));
                }
                if wanted("postgres-memory") {
                    let setup = Setup::new(
                        "postgres-memory",
                        "Postgres (local socket), one node, memory on (PostgresMemoryStore)",
                    );
                    conditions.push(measure(&runtime, setup, plan, runs, |run| {
                        let url = schema_url(&format!("bench_memory_on_{run}"));
                        Parts {
                            store: node(&url),
                            memory: Memory::Postgres(url),
                            floor: None,
                        }
                    }));
                }
            }
            Err(reason) if std::env::var(REQUIRE_POSTGRES_ENV).is_ok_and(|v| v == "1") => {
                eprintln!("{REQUIRE_POSTGRES_ENV}=1 but Postgres cannot start: {reason}");
                std::process::exit(1);
            }
            Err(reason) => println!("turn_overhead postgres: SKIPPED ({reason})"),
        }
    }

    println!();
    for c in &conditions {
        println!("{}: {}", c.key, c.name);
    }
    println!(
        "| condition | window | total | history read | history write | events | security | recall | memory write | thinking |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for c in &conditions {
        for (label, r) in &c.rows {
            println!(
                "| {} | {label} | {:.4} ms | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} |",
                c.key, r.total, r.read, r.write, r.events, r.security, r.recall, r.memory_write, r.thinking
            );
        }
    }
    println!();
    let missed = summary(&conditions, decision);
    if smoke {
        return;
    }
    for m in &missed {
        eprintln!("target missed: {m}");
    }
    if check && !missed.is_empty() {
        std::process::exit(1);
    }
}
