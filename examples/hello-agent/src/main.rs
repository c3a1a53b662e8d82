//! Embeds one agent in an app: a typed tool, a tool that asks for
//! approval and the approver that answers for it, the `final` tool, a
//! screen that prints events, and a scripted model so it runs offline.
//!
//! The default gate refuses every call of a tool that requires approval
//! ("`save_note` needs approval and no approver is configured"); an app
//! gives it an approver (here a rule in code; the assembled app asks the
//! person on their screens). `ToolGate::allow_all_unsafe()` runs everything
//! unasked and is for throwaway settings only.
//!
//! Run with `cargo run -p example-hello-agent`.

use jarvis_sdk::CancellationToken;
use jarvis_sdk::agent::{
    AgentEvent, AgentLoopConfig, ApprovalDecision, Approver, FinalTool, LoopContext, MessageDelta,
    ModelSettings, ToolCallInfo, ToolContext, ToolError, ToolGate, ToolRegistry, ToolResult, TypedTool,
    UIAdapter, run_agent_loop,
};
use jarvis_sdk::model::{FauxProvider, Message};
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

/// Arguments of `save_note`.
#[derive(Debug, Deserialize, JsonSchema)]
struct SaveNoteArgs {
    /// The note.
    text: String,
}

/// Keeps a note: it changes something, so it asks for approval.
struct SaveNote;

#[jarvis_sdk::async_trait]
impl TypedTool for SaveNote {
    type Args = SaveNoteArgs;
    fn name(&self) -> &str {
        "save_note"
    }
    fn description(&self) -> &str {
        "Keeps a short note for later."
    }
    fn requires_approval(&self) -> bool {
        true
    }
    async fn run(&self, args: SaveNoteArgs, _ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        Ok(ToolResult::ok(format!(
            "kept {} characters",
            args.text.chars().count()
        )))
    }
}

/// Approves short notes and nothing else that asks.
struct ShortNotesOnly;

#[jarvis_sdk::async_trait]
impl Approver for ShortNotesOnly {
    async fn approve(&self, call: &ToolCallInfo<'_>) -> ApprovalDecision {
        let short_note = call.tool_name == "save_note"
            && call.arguments["text"]
                .as_str()
                .is_some_and(|t| t.chars().count() <= 100);
        if !call.requires_approval || short_note {
            ApprovalDecision::Allow
        } else {
            ApprovalDecision::Deny
        }
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
  - tool_calls: [ { name: save_note, arguments: { text: "the quick brown fox: 4 words" } } ]
  - tool_calls: [ { name: final, arguments: { answer: "That sentence has 4 words." } } ]
"#;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let mut tools = ToolRegistry::new();
    tools.register_typed(WordCount)?;
    tools.register_typed(SaveNote)?;
    tools.register_typed(FinalTool)?;
    let ctx = LoopContext::new(Arc::new(FauxProvider::from_yaml(SCRIPT)?))
        .with_tools(tools)
        .with_gate(ToolGate::new().with_approver(Arc::new(ShortNotesOnly)))
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
    let kept = outcome
        .new_messages
        .iter()
        .any(|m| matches!(m, Message::Tool(r) if r.tool_name == "save_note" && !r.is_error));
    anyhow::ensure!(kept, "the approver allowed the short note");
    Ok(())
}
