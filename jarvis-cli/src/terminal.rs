//! One turn in the terminal: a `UIAdapter` that prints streamed text and
//! tool activity, on the model the environment configures.

use anyhow::{Context, bail};
use jarvis_sdk::{
    AgentEvent, AgentLoopConfig, CancellationToken, FauxProvider, LoopContext, Message, MessageDelta,
    Provider, StopReason, UIAdapter, run_agent_loop,
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

/// The provider named by `JARVIS_LLM__PROVIDER`; the offline demo when unset.
fn provider_from_env() -> anyhow::Result<Arc<dyn Provider>> {
    match std::env::var("JARVIS_LLM__PROVIDER").unwrap_or_default().as_str() {
        "" => {
            eprintln!("jarvis: no model configured; playing the built-in offline demo script");
            Ok(Arc::new(FauxProvider::from_env()?))
        }
        "faux" => Ok(Arc::new(
            FauxProvider::from_env().context("loading the faux script")?,
        )),
        other => bail!("JARVIS_LLM__PROVIDER={other} is not a provider this build knows (known: faux)"),
    }
}

/// Runs one turn for `prompt` and streams it to the terminal.
pub(crate) fn ask(prompt: &str, max_turns: u32) -> anyhow::Result<ExitCode> {
    let provider = provider_from_env()?;
    let ctx = LoopContext::new(provider).with_ui(Arc::new(Printer));
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
