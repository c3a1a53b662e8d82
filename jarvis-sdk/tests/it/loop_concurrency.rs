//! Tool calls of one step run concurrently, within the bound, and their
//! results still reach the model in call order.

use async_trait::async_trait;
use jarvis_sdk::agent::{AgentEvent, Tool, ToolContext, ToolError, ToolResult};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::{Barrier, Notify};

use crate::support::Turn;

/// `first` waits on the barrier and then for `second` to finish; `second`
/// waits on the barrier and finishes. Run one after the other, `first`
/// never passes the barrier.
struct Rendezvous {
    barrier: Arc<Barrier>,
    second_done: Arc<Notify>,
}

#[async_trait]
impl Tool for Rendezvous {
    fn name(&self) -> &str {
        "meet"
    }
    fn description(&self) -> &str {
        "waits for its sibling"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object"})
    }
    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        self.barrier.wait().await;
        let who = args["who"].as_str().unwrap_or_default().to_owned();
        if who == "first" {
            self.second_done.notified().await;
        } else {
            self.second_done.notify_one();
        }
        Ok(ToolResult::ok(format!("{who} done")))
    }
}

#[tokio::test(start_paused = true)]
async fn sibling_calls_run_at_once_and_results_keep_call_order() {
    let turn = Turn::new(
        r#"
replies:
  - tool_calls: [ { name: meet, arguments: { who: first } }, { name: meet, arguments: { who: second } } ]
  - { text: "both met" }
"#,
    )
    .tool(Rendezvous {
        barrier: Arc::new(Barrier::new(2)),
        second_done: Arc::new(Notify::new()),
    });
    // With paused time, a deadlock (calls run one after the other) turns
    // into an immediate timeout instead of a hang.
    let run = tokio::time::timeout(Duration::from_secs(60), turn.run())
        .await
        .expect("the two calls must run concurrently");
    let ends: Vec<String> = run
        .ui
        .events()
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolExecutionEnd { result, .. } => Some(result.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        ends,
        ["second done", "first done"],
        "ends fire in completion order"
    );
    let starts: Vec<String> = run
        .ui
        .events()
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolExecutionStart { args, .. } => Some(args["who"].as_str().unwrap().to_owned()),
            _ => None,
        })
        .collect();
    assert_eq!(starts, ["first", "second"], "starts fire in call order");
    let to_model: Vec<String> = run.requests()[1]
        .messages
        .iter()
        .filter_map(|m| match m {
            jarvis_sdk::model::Message::Tool(t) => Some(t.content.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        to_model,
        ["first done", "second done"],
        "results reach the model in call order"
    );
}

/// Counts how many calls run at once; pairs meet on a barrier so at least
/// two must overlap.
struct Counted {
    barrier: Arc<Barrier>,
    in_flight: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
}

#[async_trait]
impl Tool for Counted {
    fn name(&self) -> &str {
        "work"
    }
    fn description(&self) -> &str {
        "counted work"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object"})
    }
    async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        self.barrier.wait().await;
        for _ in 0..5 {
            tokio::task::yield_now().await;
        }
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        Ok(ToolResult::ok("ok"))
    }
}

#[tokio::test(start_paused = true)]
async fn the_concurrency_bound_holds() {
    let calls = (0..6)
        .map(|_| "{ name: work, arguments: {} }")
        .collect::<Vec<_>>()
        .join(", ");
    let peak = Arc::new(AtomicUsize::new(0));
    let mut turn = Turn::new(&format!(
        "replies: [ {{ tool_calls: [ {calls} ] }}, {{ text: done }} ]"
    ))
    .tool(Counted {
        barrier: Arc::new(Barrier::new(2)),
        in_flight: Arc::default(),
        peak: peak.clone(),
    });
    turn.config.tool_concurrency = 2;
    let run = tokio::time::timeout(Duration::from_secs(60), turn.run())
        .await
        .expect("pairs must run concurrently");
    assert_eq!(run.outcome.final_message.content, "done");
    assert_eq!(
        peak.load(Ordering::SeqCst),
        2,
        "never more than the bound, and the bound is used"
    );
}
