//! Which MCP servers to start: `$JARVIS_HOME/mcp.yaml` (shared by the
//! team) and an agent definition's `mcp` key (that agent's only).
//!
//! ```yaml
//! servers:
//!   time:                               # letters, digits, '-', '_'
//!     command: python3                  # stdio: a program and its arguments
//!     args: ["-m", "mcp_server_time", "--local-timezone", "Asia/Seoul"]
//!     env: { TZ: "Asia/Seoul" }         # only these variables, plus PATH, reach it
//!     agents: [main, karen]             # who gets its tools (default: every agent)
//!     approval: ask                     # ask (default) | allow | read_only_allow
//!     timeout_secs: 60                  # the longest a call may take (default 60)
//!   everything:
//!     url: http://127.0.0.1:3001/mcp    # streamable HTTP
//!     headers: { Authorization: "Bearer ${EVERYTHING_TOKEN}" }
//! ```
//!
//! `${NAME}` in `command`, `args`, `env`, `url` and `headers` is replaced by
//! the environment variable `NAME`; a server naming one that is not set is
//! left out with a log line. In `mcp.yaml` a server that does not fit the
//! format is left out with a log line and the others start; a definition's
//! `mcp` is checked with the rest of the definition.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// The shared server list, in `JARVIS_HOME`.
pub const MCP_CONFIG_FILE: &str = "mcp.yaml";
/// How long a call may take unless the server says otherwise.
pub const DEFAULT_MCP_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Whether calls of a server's tools ask a person (after the agent's
/// boundaries and the approval rule files had their say).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum McpApproval {
    /// Every call asks unless a rule allows it (the default).
    #[default]
    Ask,
    /// Calls run without asking.
    Allow,
    /// Tools the server annotates `readOnlyHint: true` run without asking;
    /// the others ask.
    ReadOnlyAllow,
}

/// How to reach a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// A program speaking MCP on its standard input and output.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Its environment besides `PATH` (nothing else is passed on).
        env: BTreeMap<String, String>,
    },
    /// A streamable HTTP endpoint.
    Http {
        /// The endpoint's URL.
        url: String,
        /// Headers sent with every request.
        headers: BTreeMap<String, String>,
    },
}

impl McpTransport {
    /// The program or URL, for people.
    pub fn describe(&self) -> String {
        match self {
            McpTransport::Stdio { command, args, .. } if args.is_empty() => command.clone(),
            McpTransport::Stdio { command, args, .. } => format!("{command} {}", args.join(" ")),
            McpTransport::Http { url, .. } => url.clone(),
        }
    }
}

/// One MCP server to start.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct McpServerConfig {
    /// Its name, the first half of its tools' names.
    pub name: String,
    /// How to reach it.
    pub transport: McpTransport,
    /// The agents that get its tools (`None`: every agent). A server of a
    /// definition serves that agent only.
    pub agents: Option<Vec<String>>,
    /// Whether its calls ask a person.
    pub approval: McpApproval,
    /// The longest one call may take.
    pub timeout: Duration,
    /// The agent whose definition declares it (`None`: `mcp.yaml`).
    pub owner: Option<String>,
}

impl McpServerConfig {
    /// A stdio server named `name` running `command` with `args`, for
    /// every agent, asking before every call.
    pub fn stdio(name: impl Into<String>, command: impl Into<String>, args: Vec<String>) -> Self {
        Self {
            name: name.into(),
            transport: McpTransport::Stdio {
                command: command.into(),
                args,
                env: BTreeMap::new(),
            },
            agents: None,
            approval: McpApproval::Ask,
            timeout: DEFAULT_MCP_CALL_TIMEOUT,
            owner: None,
        }
    }

    /// A streamable HTTP server named `name` at `url`, for every agent,
    /// asking before every call.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            transport: McpTransport::Http {
                url: url.into(),
                headers: BTreeMap::new(),
            },
            agents: None,
            approval: McpApproval::Ask,
            timeout: DEFAULT_MCP_CALL_TIMEOUT,
            owner: None,
        }
    }

    /// Sets the approval setting.
    pub fn with_approval(mut self, approval: McpApproval) -> Self {
        self.approval = approval;
        self
    }

    /// Sets the call timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the agents that get its tools.
    pub fn with_agents(mut self, agents: Vec<String>) -> Self {
        self.agents = Some(agents);
        self
    }

    /// Makes it the server of one agent's definition.
    pub fn owned_by(mut self, agent: impl Into<String>) -> Self {
        let agent = agent.into();
        self.agents = Some(vec![agent.clone()]);
        self.owner = Some(agent);
        self
    }

    /// Whether `agent` gets its tools.
    pub fn serves(&self, agent: &str) -> bool {
        self.agents
            .as_ref()
            .is_none_or(|agents| agents.iter().any(|a| a == agent))
    }
}

/// One server as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerFile {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    agents: Option<Vec<String>>,
    #[serde(default)]
    approval: McpApproval,
    timeout_secs: Option<u64>,
}

/// Whether `name` may name a server.
pub fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Replaces `${NAME}` in `text` by the variable `NAME` from `env`.
fn expand(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(format!("unclosed ${{ in {text:?}"));
        };
        let name = &after[..end];
        let valid = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(format!("${{{name}}} is not a variable name"));
        }
        match env(name) {
            Some(value) => out.push_str(&value),
            None => return Err(format!("the environment variable {name} is not set")),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn server(
    name: &str,
    file: ServerFile,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<McpServerConfig, String> {
    if !valid_server_name(name) {
        return Err(format!(
            "{name:?} is not a server name (letters, digits, '-' and '_', at most 32)"
        ));
    }
    let transport = match (file.command, file.url) {
        (Some(_), Some(_)) => return Err("give either `command` (stdio) or `url` (HTTP), not both".into()),
        (None, None) => return Err("give `command` (stdio) or `url` (HTTP)".into()),
        (Some(command), None) => {
            if !file.headers.is_empty() {
                return Err("`headers` belong to an HTTP server (`url`)".into());
            }
            let command = expand(&command, env)?;
            if command.trim().is_empty() {
                return Err("`command` is empty".into());
            }
            McpTransport::Stdio {
                command,
                args: file
                    .args
                    .iter()
                    .map(|a| expand(a, env))
                    .collect::<Result<_, _>>()?,
                env: file
                    .env
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), expand(v, env)?)))
                    .collect::<Result<_, String>>()?,
            }
        }
        (None, Some(url)) => {
            if !file.args.is_empty() || !file.env.is_empty() {
                return Err("`args` and `env` belong to a stdio server (`command`)".into());
            }
            let url = expand(&url, env)?;
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(format!("url {url:?} is not an http:// or https:// URL"));
            }
            McpTransport::Http {
                url,
                headers: file
                    .headers
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), expand(v, env)?)))
                    .collect::<Result<_, String>>()?,
            }
        }
    };
    let timeout = match file.timeout_secs {
        Some(0) => return Err("timeout_secs must be at least 1".into()),
        Some(secs) => Duration::from_secs(secs),
        None => DEFAULT_MCP_CALL_TIMEOUT,
    };
    Ok(McpServerConfig {
        name: name.to_owned(),
        transport,
        agents: file.agents,
        approval: file.approval,
        timeout,
        owner: None,
    })
}

/// The servers of `mcp.yaml` that fit the format, and the name of each one
/// that does not with why.
type ParsedServers = (Vec<McpServerConfig>, Vec<(String, String)>);

/// Reads `mcp.yaml`'s text: every server that fits the format, and for
/// each one that does not, its name and why.
pub fn parse_mcp_file(yaml: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<ParsedServers, String> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        #[serde(default)]
        servers: BTreeMap<String, serde_yaml::Value>,
    }
    if yaml.trim().is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let file: File = serde_yaml::from_str(yaml).map_err(|e| format!("invalid {MCP_CONFIG_FILE}: {e}"))?;
    let mut servers = Vec::new();
    let mut skipped = Vec::new();
    for (name, value) in file.servers {
        let parsed = serde_yaml::from_value::<ServerFile>(value)
            .map_err(|e| e.to_string())
            .and_then(|f| server(&name, f, env));
        match parsed {
            Ok(server) => servers.push(server),
            Err(reason) => skipped.push((name, reason)),
        }
    }
    Ok((servers, skipped))
}

/// Reads `$JARVIS_HOME/mcp.yaml` (no file: no servers); what cannot be used
/// is logged and left out.
pub fn load_mcp_file(home: &Path, env: &dyn Fn(&str) -> Option<String>) -> Vec<McpServerConfig> {
    let path = home.join(MCP_CONFIG_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "MCP servers not started: the file cannot be read");
            return Vec::new();
        }
    };
    match parse_mcp_file(&text, env) {
        Ok((servers, skipped)) => {
            for (name, reason) in skipped {
                tracing::warn!(file = %path.display(), server = %name, %reason, "MCP server left out");
            }
            servers
        }
        Err(reason) => {
            tracing::warn!(file = %path.display(), %reason, "MCP servers not started");
            Vec::new()
        }
    }
}

/// Reads a definition's `mcp` (the map of `mcp.yaml`'s `servers`, without
/// `agents`) for `agent`; `Err` is why the definition is skipped.
pub fn parse_agent_servers(
    agent: &str,
    value: serde_yaml::Value,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<McpServerConfig>, String> {
    let map: BTreeMap<String, serde_yaml::Value> =
        serde_yaml::from_value(value).map_err(|e| format!("mcp: {e} (a map of server names)"))?;
    let mut servers = Vec::new();
    for (name, value) in map {
        let file: ServerFile = serde_yaml::from_value(value).map_err(|e| format!("mcp.{name}: {e}"))?;
        if file.agents.is_some() {
            return Err(format!(
                "mcp.{name}: `agents` belongs in {MCP_CONFIG_FILE}; a definition's servers serve its agent"
            ));
        }
        servers.push(
            server(&name, file, env)
                .map_err(|e| format!("mcp.{name}: {e}"))?
                .owned_by(agent),
        );
    }
    Ok(servers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "EVERYTHING_TOKEN").then(|| "s3cret".to_owned())
    }

    const ISSUE_EXAMPLE: &str = r#"
servers:
  time:
    command: python3
    args: ["-m", "mcp_server_time", "--local-timezone", "Asia/Seoul"]
    env: { TZ: "Asia/Seoul" }
    agents: [main, karen]
    approval: ask
  everything:
    url: http://127.0.0.1:3001/mcp
    headers: { Authorization: "Bearer ${EVERYTHING_TOKEN}" }
"#;

    #[test]
    fn the_documented_example_reads() {
        let (servers, skipped) = parse_mcp_file(ISSUE_EXAMPLE, &env).unwrap();
        assert!(skipped.is_empty(), "{skipped:?}");
        let everything = &servers[0];
        assert_eq!(everything.name, "everything");
        assert_eq!(
            everything.transport,
            McpTransport::Http {
                url: "http://127.0.0.1:3001/mcp".into(),
                headers: [("Authorization".to_owned(), "Bearer s3cret".to_owned())].into(),
            }
        );
        assert!(everything.serves("anyone"));
        assert_eq!(everything.approval, McpApproval::Ask);
        let time = &servers[1];
        assert_eq!(
            time.transport.describe(),
            "python3 -m mcp_server_time --local-timezone Asia/Seoul"
        );
        assert!(time.serves("karen") && !time.serves("other"));
        assert_eq!(time.timeout, DEFAULT_MCP_CALL_TIMEOUT);
    }

    #[test]
    fn bad_servers_are_left_out_with_reasons_and_the_others_stay() {
        let yaml = r#"
servers:
  good: { command: srv, approval: read_only_allow, timeout_secs: 5 }
  "bad name": { command: srv }
  both: { command: srv, url: "http://x" }
  neither: { approval: allow }
  unset: { url: "http://x/${NOPE}" }
  typo: { comand: srv }
  ftp: { url: "ftp://x" }
  zero: { command: srv, timeout_secs: 0 }
"#;
        let (servers, skipped) = parse_mcp_file(yaml, &env).unwrap();
        assert_eq!(servers.len(), 1);
        assert_eq!(servers[0].approval, McpApproval::ReadOnlyAllow);
        assert_eq!(servers[0].timeout, Duration::from_secs(5));
        let reasons: BTreeMap<_, _> = skipped.into_iter().collect();
        assert!(reasons["bad name"].contains("not a server name"));
        assert!(reasons["both"].contains("not both"));
        assert!(reasons["neither"].contains("give `command`"));
        assert!(reasons["unset"].contains("NOPE is not set"));
        assert!(reasons["typo"].contains("comand"));
        assert!(reasons["ftp"].contains("not an http"));
        assert!(reasons["zero"].contains("at least 1"));
        assert!(parse_mcp_file("servers: [1, 2]", &env).is_err());
        assert!(parse_mcp_file("other: {}", &env).is_err());
        assert_eq!(parse_mcp_file("", &env).unwrap().0.len(), 0);
    }

    #[test]
    fn a_definitions_servers_serve_its_agent_only() {
        let value: serde_yaml::Value = serde_yaml::from_str("time: { command: t }").unwrap();
        let servers = parse_agent_servers("karen", value, &env).unwrap();
        assert_eq!(servers[0].owner.as_deref(), Some("karen"));
        assert!(servers[0].serves("karen") && !servers[0].serves("main"));
        let value: serde_yaml::Value = serde_yaml::from_str("time: { command: t, agents: [main] }").unwrap();
        assert!(
            parse_agent_servers("karen", value, &env)
                .unwrap_err()
                .contains("agents")
        );
    }

    #[test]
    fn variables_expand_and_bad_references_are_refused() {
        assert_eq!(
            expand("a ${EVERYTHING_TOKEN} b $x", &env).unwrap(),
            "a s3cret b $x"
        );
        assert!(expand("${EVERYTHING_TOKEN", &env).is_err());
        assert!(expand("${1X}", &env).is_err());
    }
}
