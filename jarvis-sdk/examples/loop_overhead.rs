//! Measures the agent loop's own cost per step: the driver's wall time
//! minus the time spent inside the provider and the tools.
//!
//! Each turn runs 20 steps on `FauxProvider` (19 steps calling a tool, then
//! an answer) with a subscriber that serialises every event to JSON, as the
//! web server does.
//!
//! Target: median per-step framework time under 20 µs.
//!
//! Run with `cargo run --release -p jarvis-sdk --example loop_overhead`
//! (add `-- --smoke` for a quick check that it works, `-- --check` to exit
//! 1 when the target is missed, outside `--smoke`).

use async_trait::async_trait;
use jarvis_sdk::CancellationToken;
use jarvis_sdk::agent::{
    AgentEvent, AgentIdentity, AgentLoopConfig, LoopContext, StopReason, Tool, ToolContext, ToolError,
    ToolRegistry, ToolResult, UIAdapter, run_agent_loop,
};
use jarvis_sdk::model::{
    ChatRequest, FauxProvider, FauxReply, FauxScript, Message, Provider, ProviderStream,
};
use serde_json::{Value, json};
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

const STEPS: u32 = 20;

/// Nanoseconds spent inside the provider and the tools.
#[derive(Debug, Default)]
struct Spent {
    provider: AtomicU64,
    tools: AtomicU64,
}

fn add(counter: &AtomicU64, since: Instant) {
    counter.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
}

/// A provider that times its own `stream` call and every poll of its stream.
#[derive(Debug)]
struct Timed {
    inner: FauxProvider,
    spent: Arc<Spent>,
}

struct TimedStream {
    inner: ProviderStream,
    spent: Arc<Spent>,
}

impl futures::Stream for TimedStream {
    type Item = <ProviderStream as futures::Stream>::Item;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let start = Instant::now();
        let out = self.inner.as_mut().poll_next(cx);
        add(&self.spent.provider, start);
        out
    }
}

impl Provider for Timed {
    fn stream(&self, request: ChatRequest) -> ProviderStream {
        let start = Instant::now();
        let inner = self.inner.stream(request);
        add(&self.spent.provider, start);
        Box::pin(TimedStream {
            inner,
            spent: self.spent.clone(),
        })
    }
    fn name(&self) -> &str {
        "timed-faux"
    }
}

/// A tool that answers at once and times itself.
struct Lookup {
    spent: Arc<Spent>,
}

#[async_trait]
impl Tool for Lookup {
    fn name(&self) -> &str {
        "lookup"
    }
    fn description(&self) -> &str {
        "Looks a key up."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"key": {"type": "string"}}})
    }
    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let start = Instant::now();
        let out = ToolResult::ok(format!("value of {}", args["key"]));
        add(&self.spent.tools, start);
        Ok(out)
    }
}

/// Serialises every event to JSON and marks step boundaries.
struct Subscriber {
    spent: Arc<Spent>,
    state: Mutex<Marks>,
}

#[derive(Default)]
struct Marks {
    buffer: Vec<u8>,
    last: Option<(Instant, u64, u64)>,
    samples: Vec<f64>,
}

impl UIAdapter for Subscriber {
    fn on_event(&self, event: &AgentEvent) -> ControlFlow<()> {
        let mut marks = self.state.lock().unwrap();
        marks.buffer.clear();
        serde_json::to_writer(&mut marks.buffer, event).unwrap();
        if matches!(event, AgentEvent::TurnStart { .. } | AgentEvent::AgentEnd { .. }) {
            let now = (
                Instant::now(),
                self.spent.provider.load(Ordering::Relaxed),
                self.spent.tools.load(Ordering::Relaxed),
            );
            if let Some((t, p, tl)) = marks.last {
                let wall = now.0.duration_since(t).as_nanos() as f64;
                let inside = (now.1 - p + now.2 - tl) as f64;
                marks.samples.push((wall - inside) / 1_000.0);
            }
            marks.last = match event {
                AgentEvent::AgentEnd { .. } => None,
                _ => Some(now),
            };
        }
        ControlFlow::Continue(())
    }
}

fn script() -> FauxScript {
    let mut script = FauxScript::new();
    for i in 0..STEPS - 1 {
        script = script.reply(FauxReply::tool_call("lookup", json!({"key": format!("k{i}")})).usage(120, 8));
    }
    script.reply(FauxReply::text("All keys looked up.").chunks(4).usage(300, 6))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let check = std::env::args().any(|a| a == "--check");
    let turns = if smoke { 20 } else { 1_000 };
    let warmup = if smoke { 2 } else { 50 };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let spent = Arc::new(Spent::default());
    let provider = Timed {
        inner: FauxProvider::new(script()).unwrap().without_recording(),
        spent: spent.clone(),
    };
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(Lookup { spent: spent.clone() })).unwrap();
    let subscriber = Arc::new(Subscriber {
        spent: spent.clone(),
        state: Mutex::default(),
    });
    let base = LoopContext::new(Arc::new(provider))
        .with_tools(tools)
        .with_ui(subscriber.clone());
    let config = AgentLoopConfig::default();
    let history = vec![Message::user("Look up k0 to k18, one per step.")];
    let started = Instant::now();
    rt.block_on(async {
        for i in 0..warmup + turns {
            if i == warmup {
                subscriber.state.lock().unwrap().samples.clear();
            }
            let ctx = base.clone().with_identity(AgentIdentity {
                session_id: format!("bench-{i}"),
                ..AgentIdentity::default()
            });
            let outcome = run_agent_loop(&ctx, &config, history.clone(), &CancellationToken::new())
                .await
                .unwrap();
            assert_eq!(outcome.turns, STEPS);
            assert_eq!(outcome.final_message.stop_reason, StopReason::Stop);
        }
    });
    let total = started.elapsed();
    let mut samples = std::mem::take(&mut subscriber.state.lock().unwrap().samples);
    assert_eq!(samples.len(), (turns * STEPS) as usize);
    samples.sort_by(f64::total_cmp);
    let median = percentile(&samples, 0.5);
    let p99 = percentile(&samples, 0.99);
    println!("loop_overhead: {turns} turns × {STEPS} steps on FauxProvider, events serialised to JSON");
    println!("| figure | value |");
    println!("|---|---|");
    println!("| median per step | {median:.1} µs |");
    println!("| p90 per step | {:.1} µs |", percentile(&samples, 0.9));
    println!("| p99 per step | {p99:.1} µs |");
    println!("| max per step | {:.1} µs |", samples[samples.len() - 1]);
    println!(
        "| wall time per turn (all included) | {:.1} µs |",
        total.as_secs_f64() * 1e6 / f64::from(warmup + turns)
    );
    println!(
        "per-step framework time: median {median:.1} µs, p99 {p99:.1} µs (n={})",
        samples.len()
    );
    let met = median < 20.0;
    println!(
        "target: median per-step framework time < 20 µs: {median:.1} µs: {}",
        if met { "met" } else { "MISSED" }
    );
    if check && !smoke && !met {
        std::process::exit(1);
    }
}
