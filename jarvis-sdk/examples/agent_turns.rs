//! The delegation experiment of SPEC.md §16.3: a new JARVIS session is asked
//! "KAREN 에게 서울 SH 청약 공고 최근 것 하나만 찾아 달라고 맡겨 줘".
//!
//! On `FauxProvider` (the default) the four model calls — JARVIS's decision,
//! KAREN's decision, KAREN's summary, JARVIS's summary — answer at once, and
//! the program prints the framework's own time per delegation (wall time
//! minus time inside the provider) over many runs. With a real model
//! configured (`JARVIS_LLM__*`, see docs/configuration.md, "Choosing a model"), it runs the
//! scenario three times and prints the seed's table: end-to-end time,
//! whether `ask_agent` was used, and KAREN's `sh_notice` calls.
//!
//! The `subagent` condition measures one sub-agent call on FauxProvider:
//! JARVIS calls `run_subagent`, the researcher answers at once, and the
//! figure is the time from the call's `tool_execution_start` to its
//! `tool_execution_end` minus the time inside the provider: the
//! framework's own cost of a run (its child session, the memory recall
//! for the task, the narrowed gate, the wrapped events, the usage row).
//! Default configuration: memory on, sessions and memory in the process
//! (`AppConfig::embedded`). Target: ≤ 0.2 ms median.
//!
//! Run with `cargo run --release -p jarvis-sdk --example agent_turns -- delegate`
//! or `-- subagent` (no scenario runs both; add `--smoke` for a quick check
//! that it works, `--check` to exit 1 when the scenario's target is
//! missed, outside `--smoke`).

use jarvis_pack_housing::{HousingPack, KAREN_DEFINITION};
use jarvis_sdk::agent::{AgentEvent, SessionId, UIAdapter};
use jarvis_sdk::app::{AppAssembly, AppConfig, build_app};
use jarvis_sdk::model::{ChatRequest, FauxProvider, LlmConfig, Provider, ProviderKind, ProviderStream};
use jarvis_sdk::turn::Caller;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

const PROMPT: &str = "KAREN 에게 서울 SH 청약 공고 최근 것 하나만 찾아 달라고 맡겨 줘";

const SCRIPT: &str = r#"
rules:
  - when: { agent: main, last_role: user }
    reply: { tool_calls: [ { name: ask_agent, arguments: { agent: karen, request: "서울 SH 청약 공고 최근 것 하나만 찾아 줘" } } ] }
  - when: { agent: karen, last_role: user }
    reply: { tool_calls: [ { name: sh_notice, arguments: { region: "서울", limit: 1 } } ] }
  - when: { agent: karen, last_role: tool }
    reply: { text: "SH 공고 1건: 서울 강서구 행복주택 입주자 모집 공고 (샘플 데이터)" }
  - when: { agent: main, last_role: tool }
    reply: { text: "KAREN 이 찾았습니다: 서울 강서구 행복주택 입주자 모집 공고" }
"#;

/// Times every moment spent inside the provider (its `stream` call and each
/// poll of its stream) and counts calls.
#[derive(Debug)]
struct Timed {
    inner: Arc<dyn Provider>,
    nanos: Arc<AtomicU64>,
    calls: Arc<AtomicU64>,
}

struct TimedStream {
    inner: ProviderStream,
    nanos: Arc<AtomicU64>,
}

impl futures::Stream for TimedStream {
    type Item = <ProviderStream as futures::Stream>::Item;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let start = Instant::now();
        let out = self.inner.as_mut().poll_next(cx);
        self.nanos
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        out
    }
}

impl Provider for Timed {
    fn stream(&self, request: ChatRequest) -> ProviderStream {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let start = Instant::now();
        let inner = self.inner.stream(request);
        self.nanos
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Box::pin(TimedStream {
            inner,
            nanos: self.nanos.clone(),
        })
    }
    fn name(&self) -> &str {
        self.inner.name()
    }
}

/// Counts the tool calls seen in a session.
#[derive(Default)]
struct ToolCounter(Mutex<Vec<String>>);

impl UIAdapter for ToolCounter {
    fn on_event(&self, event: &AgentEvent) -> ControlFlow<()> {
        if let AgentEvent::ToolExecutionStart { tool_name, .. } = event {
            self.0.lock().unwrap().push(tool_name.clone());
        }
        ControlFlow::Continue(())
    }
}

async fn app(home: &std::path::Path, provider: Arc<dyn Provider>) -> AppAssembly {
    let mut config = AppConfig::embedded(home)
        .with_definition("karen", KAREN_DEFINITION)
        .with_provider(provider);
    config.packs = vec![std::sync::Arc::new(HousingPack::in_memory())];
    build_app(config).await.expect("the app builds")
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn offline(smoke: bool, check: bool) {
    let (warmup, runs) = if smoke { (5, 20) } else { (100, 2_000) };
    let nanos = Arc::new(AtomicU64::new(0));
    let calls = Arc::new(AtomicU64::new(0));
    let faux = FauxProvider::from_yaml(SCRIPT).unwrap().without_recording();
    let timed = Arc::new(Timed {
        inner: Arc::new(faux),
        nanos: nanos.clone(),
        calls: calls.clone(),
    });
    let home = tempfile::tempdir().unwrap();
    let app = app(home.path(), timed).await;
    let mut samples = Vec::with_capacity(runs);
    for i in 0..warmup + runs {
        let session = app
            .session(&app.create_session(None).await.unwrap().id)
            .await
            .unwrap();
        let (before_nanos, before_calls) = (nanos.load(Ordering::Relaxed), calls.load(Ordering::Relaxed));
        let start = Instant::now();
        let outcome = session.prompt(PROMPT, Caller::Local).await.unwrap();
        let wall = start.elapsed().as_nanos() as u64;
        assert!(outcome.final_message.content.contains("KAREN"));
        assert_eq!(
            calls.load(Ordering::Relaxed) - before_calls,
            4,
            "one delegation is four model calls"
        );
        if i >= warmup {
            let inside = nanos.load(Ordering::Relaxed) - before_nanos;
            samples.push((wall - inside) as f64 / 1_000.0);
        }
    }
    samples.sort_by(f64::total_cmp);
    let (median, p99) = (percentile(&samples, 0.5), percentile(&samples, 0.99));
    println!(
        "agent_turns delegate: JARVIS → ask_agent → KAREN (sh_notice) → JARVIS on FauxProvider, 4 instant model calls"
    );
    println!("| figure | value |");
    println!("|---|---|");
    println!("| median per delegation | {median:.1} µs |");
    println!("| p90 per delegation | {:.1} µs |", percentile(&samples, 0.9));
    println!("| p99 per delegation | {p99:.1} µs |");
    println!(
        "delegation framework time: median {median:.1} µs, p99 {p99:.1} µs (n={})",
        samples.len()
    );
    let met = median <= 1_000.0;
    println!(
        "target: a delegation's framework time ≤ 1 ms median: {}",
        if met { "met" } else { "MISSED" }
    );
    if check && !smoke && !met {
        std::process::exit(1);
    }
}

const SUBAGENT_SCRIPT: &str = r#"
rules:
  - when: { agent: main, last_role: user }
    reply: { tool_calls: [ { name: run_subagent, arguments: { name: researcher, task: "서울 SH 공고를 한 줄로 요약해" } } ] }
  - when: { agent: main.researcher, last_role: user }
    reply: { text: "요약: 서울 강서구 행복주택 입주자 모집" }
  - when: { agent: main, last_role: tool }
    reply: { text: "연구원이 요약했습니다" }
"#;

/// The instants and provider time at a `run_subagent` call's start and end.
#[derive(Default)]
struct SubagentWindow {
    nanos: Arc<AtomicU64>,
    start: Mutex<Option<(Instant, u64)>>,
    samples: Mutex<Vec<f64>>,
}

impl UIAdapter for SubagentWindow {
    fn on_event(&self, event: &AgentEvent) -> ControlFlow<()> {
        match event {
            AgentEvent::ToolExecutionStart { tool_name, .. } if tool_name == "run_subagent" => {
                *self.start.lock().unwrap() = Some((Instant::now(), self.nanos.load(Ordering::Relaxed)));
            }
            AgentEvent::ToolExecutionEnd { tool_name, .. } if tool_name == "run_subagent" => {
                if let Some((at, nanos)) = self.start.lock().unwrap().take() {
                    let wall = at.elapsed().as_nanos() as u64;
                    let inside = self.nanos.load(Ordering::Relaxed) - nanos;
                    self.samples
                        .lock()
                        .unwrap()
                        .push((wall - inside) as f64 / 1_000.0);
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

async fn subagent(smoke: bool, check: bool) {
    let (warmup, runs) = if smoke { (5, 20) } else { (100, 2_000) };
    let nanos = Arc::new(AtomicU64::new(0));
    let calls = Arc::new(AtomicU64::new(0));
    let faux = FauxProvider::from_yaml(SUBAGENT_SCRIPT)
        .unwrap()
        .without_recording();
    let timed = Arc::new(Timed {
        inner: Arc::new(faux),
        nanos: nanos.clone(),
        calls: calls.clone(),
    });
    let home = tempfile::tempdir().unwrap();
    let config = AppConfig::embedded(home.path())
        .with_definition(
            "main",
            "subagents:\n  - { name: researcher, description: reads and summarises, tools: [read_file, list_dir] }\n",
        )
        .with_provider(timed);
    let app = build_app(config).await.expect("the app builds");
    let window = Arc::new(SubagentWindow {
        nanos: nanos.clone(),
        ..SubagentWindow::default()
    });
    for _ in 0..warmup + runs {
        let session = app
            .session(&app.create_session(None).await.unwrap().id)
            .await
            .unwrap();
        let _screen = session.attach(window.clone());
        let before = calls.load(Ordering::Relaxed);
        let outcome = session.prompt("공고 요약해 줘", Caller::Local).await.unwrap();
        assert_eq!(outcome.final_message.content, "연구원이 요약했습니다");
        assert_eq!(
            calls.load(Ordering::Relaxed) - before,
            3,
            "two calls of JARVIS, one of the researcher"
        );
    }
    let mut samples = window.samples.lock().unwrap().split_off(warmup);
    samples.sort_by(f64::total_cmp);
    let (median, p99) = (percentile(&samples, 0.5), percentile(&samples, 0.99));
    println!(
        "agent_turns subagent: JARVIS → run_subagent → researcher (1 instant model call), memory on, in-process stores"
    );
    println!("| figure | value |");
    println!("|---|---|");
    println!("| median per sub-agent call | {median:.1} µs |");
    println!("| p90 per sub-agent call | {:.1} µs |", percentile(&samples, 0.9));
    println!("| p99 per sub-agent call | {p99:.1} µs |");
    println!(
        "sub-agent framework time: median {median:.1} µs, p99 {p99:.1} µs (n={}, target ≤ 200 µs median: {})",
        samples.len(),
        if median <= 200.0 { "met" } else { "MISSED" }
    );
    if check && !smoke && median > 200.0 {
        std::process::exit(1);
    }
}

async fn live(llm: LlmConfig) {
    let provider = llm.build().expect("the configured provider builds");
    let home = tempfile::tempdir().unwrap();
    let app = app(home.path(), provider).await;
    println!(
        "agent_turns delegate on {} ({}), 3 runs",
        llm.provider.as_str(),
        llm.model
    );
    println!("| run | end-to-end | ask_agent used | KAREN's sh_notice calls |");
    println!("|---|---|---|---|");
    let peer: SessionId = "peer-main-karen".parse().unwrap();
    let karen_tools = Arc::new(ToolCounter::default());
    let _watch = app
        .open_or_create(&peer, Some("karen"))
        .await
        .unwrap()
        .attach(karen_tools.clone());
    let mut times = Vec::new();
    for run in 1..=3 {
        let session = app
            .session(&app.create_session(None).await.unwrap().id)
            .await
            .unwrap();
        let main_tools = Arc::new(ToolCounter::default());
        let _a = session.attach(main_tools.clone());
        karen_tools.0.lock().unwrap().clear();
        let start = Instant::now();
        let outcome = session.prompt(PROMPT, Caller::Local).await;
        let secs = start.elapsed().as_secs_f64();
        times.push(secs);
        let asked = main_tools.0.lock().unwrap().iter().any(|t| t == "ask_agent");
        let sh = karen_tools
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|t| *t == "sh_notice")
            .count();
        println!(
            "| {run} | {secs:.2} s | {} | {sh} |",
            if asked { "yes" } else { "no" }
        );
        if let Err(error) = outcome {
            println!("|   | turn failed: {error} | | |");
        }
    }
    times.sort_by(f64::total_cmp);
    println!("end-to-end median: {:.2} s", times[1]);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    let check = args.iter().any(|a| a == "--check");
    let scenario = args.iter().find(|a| !a.starts_with("--")).map(String::as_str);
    match scenario {
        None | Some("delegate") | Some("subagent") => {}
        Some(other) => {
            eprintln!("unknown scenario {other:?}; the scenarios are `delegate` and `subagent`");
            std::process::exit(2);
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let llm = LlmConfig::from_env().unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2);
    });
    if scenario != Some("delegate") {
        runtime.block_on(subagent(smoke, check));
    }
    if scenario == Some("subagent") {
        return;
    }
    if llm.provider == ProviderKind::Faux || smoke {
        runtime.block_on(offline(smoke, check));
    } else {
        runtime.block_on(live(llm));
    }
}
