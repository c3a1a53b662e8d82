//! `jarvis agents` and `jarvis sessions`: what the home holds, one line each.

use jarvis_server::protocol::AgentInfo;
use std::process::ExitCode;

use crate::home::{self, Home};

/// Prints the team, `main` first.
pub(crate) async fn agents() -> anyhow::Result<ExitCode> {
    let agents: Vec<AgentInfo> = match home::open().await? {
        Home::Remote(client) => client.agents().await?,
        Home::Local(app) => app
            .registry()
            .agents()
            .iter()
            .map(|a| AgentInfo::from(a.as_ref()))
            .collect(),
    };
    for a in agents {
        println!(
            "{:<12} {:<14} {}  {}",
            a.id, a.name, a.palette.primary, a.description
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints the sessions, newest first.
pub(crate) async fn sessions() -> anyhow::Result<ExitCode> {
    let sessions = match home::open().await? {
        Home::Remote(client) => client.sessions().await?,
        Home::Local(app) => app.list_sessions().await?,
    };
    if sessions.is_empty() {
        println!("no sessions yet");
    }
    for s in sessions {
        println!(
            "{:<28} {:<10} {:<5} {}  {}",
            s.id,
            s.agent_id,
            s.kind.as_str(),
            s.updated_at,
            s.title.as_deref().unwrap_or("")
        );
    }
    Ok(ExitCode::SUCCESS)
}
