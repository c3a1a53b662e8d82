//! `jarvis agents` and `jarvis sessions`: what the home holds, one line
//! each; `jarvis models`: the model servers running on this machine;
//! `jarvis mcp list`: the MCP servers, their state and tools; `jarvis
//! usage`: the tokens and cost of the turns so far, the table
//! `GET /api/usage` answers.

use jarvis_sdk::turn::{UsageBy, UsageSummary};
use jarvis_server::protocol::{AgentInfo, McpServerInfo, UsageReport};
use std::fmt::Write as _;
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
    let targets = match std::env::var(jarvis_sdk::model::DISCOVER_ENV) {
        Ok(spec) if !spec.trim().is_empty() => jarvis_sdk::model::parse_targets(&spec)?.unwrap_or_default(),
        _ => jarvis_sdk::model::default_targets(),
    };
    let servers = jarvis_sdk::model::discover_models(&targets, jarvis_sdk::model::DISCOVERY_BUDGET).await;
    if servers.is_empty() {
        let places: Vec<&str> = targets.iter().map(|t| t.base_url.as_str()).collect();
        println!("no model server answered ({})", places.join(", "));
        return Ok(ExitCode::SUCCESS);
    }
    let chosen = jarvis_sdk::model::first_chat_model(&servers)
        .map(|(s, m)| (s.target.base_url.clone(), m.name.clone()));
    let embedding = jarvis_sdk::model::first_embedding_model(&servers)
        .map(|(s, m)| (s.target.base_url.clone(), m.name.clone()));
    for server in &servers {
        let kind = match server.target.kind {
            jarvis_sdk::model::ProviderKind::Ollama => "ollama",
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
            jarvis_sdk::turn::MCP_CONFIG_FILE
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

/// Reads `--by`: `agent`, `session` or `day`.
pub(crate) fn parse_usage_by(name: &str) -> Result<UsageBy, String> {
    UsageBy::parse(name).ok_or_else(|| "one of agent, session or day".to_owned())
}

/// Prints the tokens and cost of the turns so far `by` agent, session or
/// day (the running server's ledger, or the home's read here).
pub(crate) async fn usage(by: UsageBy) -> anyhow::Result<ExitCode> {
    let report = match home::open().await? {
        Home::Remote(client) => client.usage(by).await?,
        Home::Local(app) => UsageReport {
            by,
            rows: app.usage_summary(by),
        },
    };
    print!("{}", usage_table(&report));
    Ok(ExitCode::SUCCESS)
}

/// The report as a table: one line per group, then the total. An unknown
/// cost (a model without a price) shows as `—`, and so does a total it is
/// part of.
fn usage_table(report: &UsageReport) -> String {
    if report.rows.is_empty() {
        return "no usage recorded yet\n".to_owned();
    }
    let mut total = UsageSummary {
        key: "total".to_owned(),
        turns: 0,
        input_tokens: 0,
        output_tokens: 0,
        cached_input_tokens: 0,
        cost_usd: Some(0.0),
    };
    for row in &report.rows {
        total.turns = total.turns.saturating_add(row.turns);
        total.input_tokens = total.input_tokens.saturating_add(row.input_tokens);
        total.output_tokens = total.output_tokens.saturating_add(row.output_tokens);
        total.cached_input_tokens = total.cached_input_tokens.saturating_add(row.cached_input_tokens);
        total.cost_usd = total.cost_usd.zip(row.cost_usd).map(|(a, b)| a + b);
    }
    let key = report.by.as_str();
    let width = report
        .rows
        .iter()
        .map(|r| r.key.chars().count())
        .chain([key.len(), total.key.len()])
        .max()
        .unwrap_or(0);
    let mut out = format!(
        "{key:<width$}  {:>6}  {:>10}  {:>10}  {:>10}  {:>10}\n",
        "turns", "input", "output", "cached", "cost (USD)"
    );
    for row in report.rows.iter().chain([&total]) {
        let cost = row
            .cost_usd
            .map_or_else(|| "—".to_owned(), |usd| format!("{usd:.6}"));
        let _ = writeln!(
            out,
            "{:<width$}  {:>6}  {:>10}  {:>10}  {:>10}  {cost:>10}",
            row.key, row.turns, row.input_tokens, row.output_tokens, row.cached_input_tokens
        );
    }
    if total.cost_usd.is_none() {
        let _ = writeln!(
            out,
            "— a model without a price in $JARVIS_HOME/{}",
            jarvis_sdk::model::PRICES_FILE
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(key: &str, turns: u64, input: u64, cost_usd: Option<f64>) -> UsageSummary {
        UsageSummary {
            key: key.to_owned(),
            turns,
            input_tokens: input,
            output_tokens: 10,
            cached_input_tokens: 0,
            cost_usd,
        }
    }

    #[test]
    fn the_table_totals_and_shows_unknown_costs_as_a_dash() {
        let report = UsageReport {
            by: UsageBy::Session,
            rows: vec![
                row("default-main", 2, 2000, Some(0.008)),
                row("peer-main-karen-1", 1, 300, None),
            ],
        };
        assert_eq!(
            usage_table(&report),
            "session             turns       input      output      cached  cost (USD)\n\
             default-main            2        2000          10           0    0.008000\n\
             peer-main-karen-1       1         300          10           0           —\n\
             total                   3        2300          20           0           —\n\
             — a model without a price in $JARVIS_HOME/prices.yaml\n"
        );
        let priced = UsageReport {
            by: UsageBy::Agent,
            rows: vec![row("main", 1, 5, Some(0.25))],
        };
        assert!(
            usage_table(&priced).ends_with("total       1           5          10           0    0.250000\n")
        );
        let empty = UsageReport {
            by: UsageBy::Day,
            rows: Vec::new(),
        };
        assert_eq!(usage_table(&empty), "no usage recorded yet\n");
    }
}
