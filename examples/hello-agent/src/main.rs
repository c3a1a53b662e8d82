//! Embeds one agent in an app: a typed tool, the `final` tool, a screen
//! that prints events, and a scripted model so it runs offline.
//!
//! Run with `cargo run -p example-hello-agent`.

use jarvis_sdk::{
    AgentEvent, AgentLoopConfig, CancellationToken, FauxProvider, FinalTool, LoopContext, Message,
    MessageDelta, ModelSettings, ToolContext, ToolError, ToolRegistry, ToolResult, TypedTool, UIAdapter,
    run_agent_loop,
};
use schemars::JsonSchema;
use serde::Deserialize;
use std::ops::ControlFlow;
use std::sync::Arc;

/// Arguments of `word_count`.
#[derive(Debug, Deserialize, JsonSchema)]
struct WordCountArgs {
    /// The text to count words in.
    text: String,
}

/// Counts the words of a text.
struct WordCount;

#[jarvis_sdk::async_trait]
impl TypedTool for WordCount {
    type Args = WordCountArgs;
    fn name(&self) -> &str {
        "word_count"
    }
    fn description(&self) -> &str {
        "Counts the words of a text."
    }
    async fn run(&self, args: WordCountArgs, _ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        Ok(ToolResult::ok(args.text.split_whitespace().count().to_string()))
    }
}

/// A screen that prints what happens.
struct Screen;

impl UIAdapter for Screen {
    fn on_event(&self, event: &AgentEvent) -> ControlFlow<()> {
        match event {
            AgentEvent::MessageUpdate {
                delta: MessageDelta::TextDelta(t),
            } => print!("{t}"),
            AgentEvent::ToolExecutionStart { tool_name, args, .. } => println!("→ {tool_name} {args}"),
            AgentEvent::ToolExecutionEnd {
                tool_name, result, ..
            } => println!("← {tool_name}: {result}"),
            AgentEvent::AgentEnd { turns, .. } => println!("\n({turns} steps)"),
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

/// What the model "says"; swap in a real provider to talk to a real model.
const SCRIPT: &str = r#"
replies:
  - tool_calls: [ { name: word_count, arguments: { text: "the quick brown fox" } } ]
  - tool_calls: [ { name: final, arguments: { answer: "That sentence has 4 words." } } ]
"#;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let mut tools = ToolRegistry::new();
    tools.register_typed(WordCount)?;
    tools.register_typed(FinalTool)?;
    let ctx = LoopContext::new(Arc::new(FauxProvider::from_yaml(SCRIPT)?))
        .with_tools(tools)
        .with_ui(Arc::new(Screen))
        .with_model(ModelSettings {
            model: "faux".into(),
            system_prompt: Some("You count words.".into()),
            ..ModelSettings::default()
        });
    let history = vec![Message::user("How many words are in 'the quick brown fox'?")];
    let outcome = run_agent_loop(
        &ctx,
        &AgentLoopConfig::default(),
        history,
        &CancellationToken::new(),
    )
    .await?;
    anyhow::ensure!(outcome.final_message.content == "That sentence has 4 words.");
    Ok(())
}
