//! `jarvis agents` and `jarvis sessions`: what the home holds, one line
//! each; `jarvis models`: the model servers running on this machine;
//! `jarvis mcp list`: the MCP servers, their state and tools.

use jarvis_server::protocol::{AgentInfo, McpServerInfo};
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

/// Prints the model servers discovery finds (`JARVIS_LLM__DISCOVER`, else
/// the default targets) and their models, marking the one chat would use
/// (`*`) and the one `JARVIS_EMBED__PROVIDER=auto` would embed with (`+`).
pub(crate) async fn models() -> anyhow::Result<ExitCode> {
    let targets = match std::env::var(jarvis_sdk::DISCOVER_ENV) {
        Ok(spec) if !spec.trim().is_empty() => jarvis_sdk::parse_targets(&spec)?.unwrap_or_default(),
        _ => jarvis_sdk::default_targets(),
    };
    let servers = jarvis_sdk::discover_models(&targets, jarvis_sdk::DISCOVERY_BUDGET).await;
    if servers.is_empty() {
        let places: Vec<&str> = targets.iter().map(|t| t.base_url.as_str()).collect();
        println!("no model server answered ({})", places.join(", "));
        return Ok(ExitCode::SUCCESS);
    }
    let chosen =
        jarvis_sdk::first_chat_model(&servers).map(|(s, m)| (s.target.base_url.clone(), m.name.clone()));
    let embedding =
        jarvis_sdk::first_embedding_model(&servers).map(|(s, m)| (s.target.base_url.clone(), m.name.clone()));
    for server in &servers {
        let kind = match server.target.kind {
            jarvis_sdk::ProviderKind::Ollama => "ollama",
            _ => "openai-compatible",
        };
        println!(
            "{} ({kind}, {} models)",
            server.target.base_url,
            server.models.len()
        );
        for model in &server.models {
            let is = |choice: &Option<(String, String)>| {
                choice
                    .as_ref()
                    .is_some_and(|(url, name)| *url == server.target.base_url && *name == model.name)
            };
            let mark = if is(&chosen) {
                "*"
            } else if is(&embedding) {
                "+"
            } else {
                " "
            };
            let note = if model.is_embedding() { "  (embedding)" } else { "" };
            println!("  {mark} {}{note}", model.name);
        }
    }
    match chosen {
        Some((url, name)) => println!("* chat uses {name} at {url} when no provider is configured"),
        None => println!("no chat model found (embedding models only)"),
    }
    if let Some((url, name)) = embedding {
        println!("+ JARVIS_EMBED__PROVIDER=auto embeds with {name} at {url}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints the MCP servers (the running server's, or those of an app
/// assembled here, after their first start), their state and tools.
pub(crate) async fn mcp_servers() -> anyhow::Result<ExitCode> {
    let servers: Vec<McpServerInfo> = match home::open().await? {
        Home::Remote(client) => client.mcp_servers().await?,
        Home::Local(app) => app.mcp().statuses().iter().map(McpServerInfo::from).collect(),
    };
    if servers.is_empty() {
        println!(
            "no MCP servers (declare them in $JARVIS_HOME/{} or a definition's `mcp`)",
            jarvis_sdk::MCP_CONFIG_FILE
        );
    }
    for s in servers {
        let whose = s
            .owner
            .map_or_else(|| "shared".to_owned(), |a| format!("{a} only"));
        let pid = s.pid.map(|p| format!(" pid {p}")).unwrap_or_default();
        println!("{} ({whose}) {}{pid}  {}", s.name, s.state, s.transport);
        if let Some(error) = s.error {
            println!("  ! {error}");
        }
        for t in s.tools {
            let read_only = if t.read_only { " (read-only)" } else { "" };
            println!(
                "  {}{read_only}  {}",
                t.name,
                t.description.lines().next().unwrap_or("")
            );
        }
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
