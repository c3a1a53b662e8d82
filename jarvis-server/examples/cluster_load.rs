//! Load benchmark of a deployment: `jarvis` servers as nodes on one
//! Postgres, N WebSocket clients per node, each on its own session, each
//! running M faux turns back to back, all connected at once.
//!
//! Run with `cargo run --release -p jarvis-server --example cluster_load`
//! (`--smoke` for a quick check; `--sessions N` per node, default 500,
//! `--turns M`, default 3). Needs the Postgres binaries (a throwaway
//! cluster is started, as the tests do).
//!
//! Every server runs in its own process (this program started again with
//! `--serve`), with its own `JARVIS_HOME`, the default configuration on the
//! Postgres store (memory on, in the same database) and the faux provider's
//! instant 8-chunk answer. Three rows:
//!
//! - **1 node**, 3N sessions: the baseline;
//! - **3 nodes, local**: N sessions per node, each client on the node that
//!   owns its session (its first prompt there took it);
//! - **3 nodes, forwarded**: every session is first taken by one node (one
//!   turn there), then its client talks to another node, so every prompt
//!   is forwarded to the owner and every event comes back over
//!   `LISTEN`/`NOTIFY`.
//!
//! A turn's latency is from sending the prompt to receiving its
//! `agent_end`. Each row prints `cluster_load: …` with the turns, errors,
//! throughput, p50 and p99 and the servers' summed peak RSS. The exit status
//! is non-zero when a turn failed.

mod load;

use jarvis_sdk::testing::TempPostgres;
use load::{ClientResult, Load, SCRIPT, client, peak_rss_kb, serve_child};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Barrier;

/// One server process.
struct Node {
    child: Child,
    addr: String,
    _home: tempfile::TempDir,
}

impl Node {
    fn start(url: &str, id: &str) -> anyhow::Result<Self> {
        let home = tempfile::tempdir()?;
        let script = home.path().join("script.yaml");
        std::fs::write(&script, SCRIPT)?;
        let mut child = Command::new(std::env::current_exe()?)
            .arg("--serve")
            .env("JARVIS_HOME", home.path().join("home"))
            .env("JARVIS_LLM__PROVIDER", "faux")
            .env("JARVIS_FAUX__SCRIPT", &script)
            .env("JARVIS_STORE__BACKEND", "postgres")
            .env("JARVIS_STORE__POSTGRES_URL", url)
            .env("JARVIS_NODE__ID", id)
            .env_remove("JARVIS_WEB__TOKEN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow::anyhow!("no stdout"))?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let addr = line
            .trim()
            .strip_prefix("listening ")
            .ok_or_else(|| anyhow::anyhow!("node {id} did not start: {line:?}"))?
            .to_owned();
        Ok(Self {
            child,
            addr,
            _home: home,
        })
    }

    fn url(&self, session: &str) -> String {
        format!("ws://{}/ws?session_id={session}&agent=main", self.addr)
    }

    /// Stops the server gracefully (closing its stdin) and answers its
    /// peak RSS in MiB.
    fn stop(mut self) -> f64 {
        let rss = peak_rss_kb(self.child.id()).unwrap_or(0) as f64 / 1024.0;
        drop(self.child.stdin.take());
        let _ = self.child.wait();
        rss
    }
}

/// Runs `turns` turns on each `(url)` at once; answers every client's result
/// and the seconds it took.
async fn drive(urls: Vec<String>, turns: usize) -> (Vec<ClientResult>, f64) {
    let load = Load {
        sessions: urls.len(),
        turns,
        interval: None,
    };
    let ready = Arc::new(Barrier::new(load.sessions + 1));
    let clients: Vec<_> = urls
        .into_iter()
        .map(|url| tokio::spawn(client(url, load, None, ready.clone())))
        .collect();
    ready.wait().await;
    let started = Instant::now();
    let mut results = Vec::with_capacity(clients.len());
    for c in clients {
        results.push(c.await.unwrap_or_default());
    }
    (results, started.elapsed().as_secs_f64())
}

fn report(label: &str, expected: usize, results: &[ClientResult], seconds: f64, rss: f64) -> bool {
    let mut latencies: Vec<f64> = results
        .iter()
        .flat_map(|r| r.latencies.iter().map(|d| d.as_secs_f64() * 1e3))
        .collect();
    latencies.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        if latencies.is_empty() {
            return f64::NAN;
        }
        let i = ((latencies.len() as f64 * p).ceil() as usize).clamp(1, latencies.len()) - 1;
        latencies[i]
    };
    let errors = results.iter().map(|r| r.errors).sum::<usize>() + expected.saturating_sub(latencies.len());
    for why in results.iter().filter_map(|r| r.stopped.as_ref()) {
        eprintln!("cluster_load: a client stopped early: {why}");
    }
    println!(
        "cluster_load: {label}: {} turns, {errors} errors, {:.0} turns/s, p50 {:.1} ms, p99 {:.1} ms, servers' peak RSS {rss:.0} MB",
        latencies.len(),
        latencies.len() as f64 / seconds,
        pct(0.50),
        pct(0.99),
    );
    errors == 0
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--serve") {
        return serve_child();
    }
    let smoke = args.iter().any(|a| a == "--smoke");
    let number = |flag: &str, default: usize| load::number_arg(&args, flag, default);
    let per_node = number("--sessions", if smoke { 5 } else { 500 })?;
    let turns = number("--turns", if smoke { 2 } else { 3 })?;
    let pg = match TempPostgres::start() {
        Ok(pg) => pg,
        Err(reason) => {
            println!("cluster_load: SKIPPED (Postgres cannot start: {reason})");
            return Ok(());
        }
    };
    let url = pg.url();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    println!(
        "cluster_load: {per_node} sessions per node x {turns} turns back to back, default configuration on Postgres (memory on), faux model"
    );
    let mut ok = true;

    // One node, 3N sessions.
    let node = Node::start(&url, "solo")?;
    let urls = (0..3 * per_node)
        .map(|i| node.url(&format!("solo-{i}")))
        .collect();
    let (results, seconds) = runtime.block_on(drive(urls, turns));
    let rss = node.stop();
    ok &= report(
        &format!("1 node x {} sessions", 3 * per_node),
        3 * per_node * turns,
        &results,
        seconds,
        rss,
    );

    // Three nodes, each client on its session's owner.
    let nodes: Vec<Node> = (0..3)
        .map(|n| Node::start(&url, &format!("local-{n}")))
        .collect::<anyhow::Result<_>>()?;
    let urls = (0..3 * per_node)
        .map(|i| nodes[i % 3].url(&format!("local-{i}")))
        .collect();
    let (results, seconds) = runtime.block_on(drive(urls, turns));
    let rss: f64 = nodes.into_iter().map(Node::stop).sum();
    ok &= report(
        &format!("3 nodes x {per_node} sessions, local"),
        3 * per_node * turns,
        &results,
        seconds,
        rss,
    );

    // Three nodes, every client on a node that does not own its session.
    let nodes: Vec<Node> = (0..3)
        .map(|n| Node::start(&url, &format!("fwd-{n}")))
        .collect::<anyhow::Result<_>>()?;
    let owners = (0..3 * per_node)
        .map(|i| nodes[(i + 1) % 3].url(&format!("fwd-{i}")))
        .collect();
    let (taken, _) = runtime.block_on(drive(owners, 1));
    let failed_takes = taken.iter().filter(|r| r.latencies.len() != 1).count();
    anyhow::ensure!(
        failed_takes == 0,
        "{failed_takes} sessions could not be taken by their owner"
    );
    let urls = (0..3 * per_node)
        .map(|i| nodes[i % 3].url(&format!("fwd-{i}")))
        .collect();
    let (results, seconds) = runtime.block_on(drive(urls, turns));
    let rss: f64 = nodes.into_iter().map(Node::stop).sum();
    ok &= report(
        &format!("3 nodes x {per_node} sessions, forwarded"),
        3 * per_node * turns,
        &results,
        seconds,
        rss,
    );

    anyhow::ensure!(ok, "some turns failed");
    Ok(())
}
