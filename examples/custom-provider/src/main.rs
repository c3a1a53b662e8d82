//! Plugs a hand-written model provider into the agent loop: a tiny
//! rule-based "model" that streams its answer word by word and calls a tool
//! when it needs the time. Any service (a company gateway, a local model
//! runtime) fits behind the same one-method trait.
//!
//! Run with `cargo run -p example-custom-provider`.

use futures::stream;
use jarvis_sdk::CancellationToken;
use jarvis_sdk::agent::{
    AgentLoopConfig, LoopContext, ToolContext, ToolError, ToolRegistry, ToolResult, TypedTool, run_agent_loop,
};
use jarvis_sdk::model::{ChatRequest, FinishReason, Message, Provider, ProviderEvent, ProviderStream, Usage};
use std::sync::Arc;

/// Answers from rules: asks for the `clock` tool once, then reports its result.
#[derive(Debug)]
struct RuleModel;

impl Provider for RuleModel {
    fn stream(&self, request: ChatRequest) -> ProviderStream {
        let last_tool_result = request.recorded_messages().iter().rev().find_map(|m| match m {
            Message::Tool(t) => Some(t.content.clone()),
            Message::User(_) => Some(String::new()),
            _ => None,
        });
        let mut events = Vec::new();
        match last_tool_result.filter(|r| !r.is_empty()) {
            None => events.push(ProviderEvent::ToolCallDelta {
                index: 0,
                id: Some("rule-1".into()),
                name: Some("clock".into()),
                arguments_delta: "{}".into(),
            }),
            Some(time) => {
                for word in format!("It is {time} where I run.").split_inclusive(' ') {
                    events.push(ProviderEvent::TextDelta(word.to_owned()));
                }
            }
        }
        let reason = if events
            .iter()
            .any(|e| matches!(e, ProviderEvent::ToolCallDelta { .. }))
        {
            FinishReason::ToolUse
        } else {
            FinishReason::Stop
        };
        events.push(ProviderEvent::Stop {
            reason,
            usage: Usage::default(),
        });
        Box::pin(stream::iter(events.into_iter().map(Ok)))
    }

    fn name(&self) -> &str {
        "rule-model"
    }
}

/// `clock {}`: seconds since the Unix epoch.
struct Clock;

#[jarvis_sdk::async_trait]
impl TypedTool for Clock {
    type Args = std::collections::BTreeMap<String, String>;
    fn name(&self) -> &str {
        "clock"
    }
    fn description(&self) -> &str {
        "The current time in seconds since the Unix epoch."
    }
    async fn run(&self, _args: Self::Args, _ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(|e| ToolError::Failed(e.to_string()))?
            .as_secs();
        Ok(ToolResult::ok(format!("{secs} s after the epoch")))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let mut tools = ToolRegistry::new();
    tools.register_typed(Clock)?;
    let ctx = LoopContext::new(Arc::new(RuleModel)).with_tools(tools);
    let outcome = run_agent_loop(
        &ctx,
        &AgentLoopConfig::default(),
        vec![Message::user("What time is it?")],
        &CancellationToken::new(),
    )
    .await?;
    println!("{} ({} steps)", outcome.final_message.content, outcome.turns);
    anyhow::ensure!(outcome.final_message.content.contains("after the epoch"));
    Ok(())
}
