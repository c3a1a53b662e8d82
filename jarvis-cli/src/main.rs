//! The `jarvis` command: parses arguments, sets up logging, and hands over
//! to a module. `jarvis` alone starts the server and opens the HUD; the
//! subcommands talk in the terminal, list what the home holds (the team,
//! sessions, what the turns cost), run an eval suite, or serve the team to an MCP client
//! (`jarvis mcp serve`, whose stdout carries MCP messages only: logs always
//! go to stderr).

mod chat;
mod eval;
mod home;
mod lists;
mod mcp;
mod replay;
mod serve;

use clap::{Args, Parser, Subcommand};
use std::process::ExitCode;

/// Talk to your team of agents: `jarvis` starts the server and opens the HUD.
#[derive(Debug, Parser)]
#[command(name = "jarvis", version, about, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: serve::ServeArgs,
}

/// Which session to open: `--agent ID` opens `default-<ID>`, `--session ID`
/// that session with its own agent; neither opens `default-main`.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct Target {
    /// Open the agent's default session, `default-<agent>`.
    #[arg(long, conflicts_with = "session")]
    pub(crate) agent: Option<String>,
    /// Open this session, with the agent that created it.
    #[arg(long)]
    pub(crate) session: Option<String>,
    /// Open a new session of the agent (`--agent`, else main); its id is
    /// printed on stderr.
    #[arg(long, conflicts_with = "session")]
    pub(crate) new: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Talk in the terminal (through the running server when there is one).
    Chat(#[command(flatten)] Target),
    /// Run one turn and print the answer on stdout (activity goes to stderr).
    Ask {
        /// What to ask.
        prompt: String,
        #[command(flatten)]
        target: Target,
    },
    /// List the agents of the team.
    Agents,
    /// List the sessions, newest first.
    Sessions,
    /// List the model servers running on this machine and their models
    /// (what `jarvis` uses when no provider is configured).
    Models,
    /// Show the tokens and cost of the turns so far.
    Usage {
        /// Sum by `agent`, `session` or `day` (in the person's zone).
        #[arg(long, default_value = "agent", value_parser = lists::parse_usage_by)]
        by: jarvis_sdk::turn::UsageBy,
    },
    /// Run an eval suite against the configured model, each case in a
    /// temporary home: a table, the pass rate, and exit code 0 (passed), 1
    /// (below the threshold) or 2 (the suite cannot be read).
    Eval {
        /// The suite's YAML file.
        suite: std::path::PathBuf,
        /// The pass rate needed, 0 to 1 (instead of the suite's).
        #[arg(long)]
        threshold: Option<f64>,
        /// Answer each case from this cassette's turn with the same prompt
        /// instead of the model (a file, or a session id of the home).
        #[arg(long)]
        cassette: Option<String>,
    },
    /// Run a recorded session's prompts again through this build: a diff
    /// per turn, and exit code 0 (the same), 1 (differs) or 2 (the cassette
    /// cannot be read).
    Replay {
        /// A session id of the home (its cassette), or a cassette file.
        target: String,
        /// What answers the model calls: `current` (the cassette, a
        /// deterministic run of this build) or `model` (the configured model).
        #[arg(long, default_value = "current")]
        against: jarvis_sdk::app::ReplayAgainst,
    },
    /// The team and MCP: `jarvis mcp serve` serves the team to an MCP
    /// client on stdin and stdout.
    Mcp {
        #[command(subcommand)]
        command: mcp::McpCommand,
    },
}

/// The log on stderr (`JARVIS_LOG`, else `default_level`) and, when
/// `OTEL_EXPORTER_OTLP_ENDPOINT` is set, the GenAI spans over OTLP; the
/// guard sends the last spans when dropped.
fn init_tracing(default_level: &str) -> Option<jarvis_sdk::app::OtelGuard> {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    // The GenAI spans are the export's: by default the log does not
    // wrap its lines in them (`JARVIS_LOG` may ask for them).
    let filter = tracing_subscriber::EnvFilter::try_from_env("JARVIS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("{default_level},jarvis::genai=off")));
    // The filter is the log's own: it does not hide spans from the export.
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(filter);
    let registry = tracing_subscriber::registry().with(log);
    let (export, guard) = match jarvis_sdk::app::otel_layer_from_env() {
        Ok(Some((layer, guard))) => (Some(layer), Some(guard)),
        Ok(None) => (None, None),
        Err(error) => {
            eprintln!("jarvis: {error}; spans are not exported");
            (None, None)
        }
    };
    registry.with(export).init();
    guard
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // The MCP SDK logs every session's handshake at info: the server's log
    // keeps its warnings only.
    let default_level = if cli.command.is_none() {
        "info,rmcp=warn"
    } else {
        "warn"
    };
    let _otel = init_tracing(default_level);
    let result = match cli.command {
        None => serve::run(cli.serve).await,
        Some(Command::Chat(target)) => chat::run(target, None).await,
        Some(Command::Ask { prompt, target }) => chat::run(target, Some(prompt)).await,
        Some(Command::Agents) => lists::agents().await,
        Some(Command::Sessions) => lists::sessions().await,
        Some(Command::Models) => lists::models().await,
        Some(Command::Usage { by }) => lists::usage(by).await,
        Some(Command::Mcp { command }) => mcp::run(command).await,
        Some(Command::Eval {
            suite,
            threshold,
            cassette,
        }) => eval::run(&suite, threshold, cassette.as_deref()).await,
        Some(Command::Replay { target, against }) => replay::run(&target, against).await,
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("jarvis: {error:#}");
            ExitCode::FAILURE
        }
    }
}
