//! One turn in the terminal: a `UIAdapter` that prints streamed text and
//! tool activity, on the model the environment configures.

use anyhow::Context;
use jarvis_sdk::{
    AgentEvent, AgentLoopConfig, CancellationToken, LlmConfig, LoopContext, Message, MessageDelta,
    ModelSettings, StopReason, UIAdapter, run_agent_loop,
};
use std::io::Write;
use std::ops::ControlFlow;
use std::process::ExitCode;
use std::sync::Arc;

/// Prints events as they arrive.
struct Printer;

impl UIAdapter for Printer {
    fn on_event(&self, event: &AgentEvent) -> ControlFlow<()> {
        let mut out = std::io::stdout().lock();
        let _ = match event {
            AgentEvent::MessageUpdate {
                delta: MessageDelta::TextDelta(text),
            } => write!(out, "{text}"),
            AgentEvent::ToolExecutionStart { tool_name, args, .. } => writeln!(out, "\n· {tool_name} {args}"),
            AgentEvent::ToolExecutionEnd {
                tool_name,
                is_error: true,
                result,
                ..
            } => {
                writeln!(out, "  {tool_name} failed: {result}")
            }
            AgentEvent::AgentError { message } => writeln!(out, "\n! {message}"),
            AgentEvent::AgentEnd { .. } => writeln!(out),
            _ => Ok(()),
        };
        let _ = out.flush();
        ControlFlow::Continue(())
    }
}

/// Runs one turn for `prompt` and streams it to the terminal.
pub(crate) fn ask(prompt: &str, max_turns: u32) -> anyhow::Result<ExitCode> {
    let llm = LlmConfig::from_env()?;
    if let Some(notice) = &llm.notice {
        eprintln!("jarvis: {notice}");
    }
    let provider = llm.build().context("starting the model provider")?;
    let ctx = LoopContext::new(provider)
        .with_ui(Arc::new(Printer))
        .with_model(ModelSettings {
            model: llm.model.clone(),
            ..ModelSettings::default()
        });
    let config = AgentLoopConfig {
        max_turns,
        ..AgentLoopConfig::default()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let cancel = CancellationToken::new();
    let outcome = runtime.block_on(async {
        let abort = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                abort.cancel();
            }
        });
        run_agent_loop(&ctx, &config, vec![Message::user(prompt)], &cancel).await
    })?;
    Ok(match outcome.final_message.stop_reason {
        StopReason::Error => ExitCode::FAILURE,
        _ => ExitCode::SUCCESS,
    })
}
