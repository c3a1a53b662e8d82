//! The `jarvis` command: parses arguments, sets up logging, and hands over
//! to the library. Everything it shows comes from `AgentEvent`s.

mod terminal;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Talk to your team of agents.
#[derive(Debug, Parser)]
#[command(name = "jarvis", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one turn in the terminal and stream the answer.
    Ask {
        /// What to ask.
        prompt: String,
        /// Steps before the overflow resume starts.
        #[arg(long, default_value_t = 20)]
        max_turns: u32,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("JARVIS_LOG"))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Ask { prompt, max_turns } => terminal::ask(&prompt, max_turns),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("jarvis: {error:#}");
            ExitCode::FAILURE
        }
    }
}
