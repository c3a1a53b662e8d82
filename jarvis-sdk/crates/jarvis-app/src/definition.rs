//! Team definition files (SPEC.md §11.2): one `<id>.yaml` per agent in the
//! team directory, the file name being the id.
//!
//! Rules: the id matches `^[a-z][a-z0-9_-]{0,31}$`; `main.yaml` is not an
//! agent of its own: it is read for JARVIS's `tools`, `boundaries`,
//! `subagents` and `budget` ([`apply_main_definition`]; its brand and model
//! come from `JARVIS_BRAND__*` and `JARVIS_LLM__*`, other keys are ignored
//! with one warning); a file
//! that does not parse, has an unknown key (also inside `memory.read`) or
//! bad values is skipped with one log line naming the file and the reason,
//! and the others still load; unknown tool names are warned about and
//! dropped (names the app knows but has not set up, such as `web_search`
//! without a search backend, are dropped without a warning); fields left empty inherit JARVIS's settings, except `sandbox`
//! (what the agent's programs may reach beyond their sandbox), which
//! widens only the agent that says it; agent-only tools are visible only to
//! agents that list them.
//!
//! ```yaml
//! sandbox:
//!   network: true              # programs may open network sockets
//!   read: [/opt/datasets]      # absolute paths they may also read
//!   write: [/srv/reports]      # absolute paths they may also write
//! ```

use serde::Deserialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::profile::{AgentProfile, MAIN_AGENT, Palette, wordmark};
use super::subagent::{RUN_SUBAGENT_TOOL, SubagentBuilder, SubagentDefinition};
use jarvis_agent::Budget;
use jarvis_initiative::CountingFeedback;
use jarvis_memory::MemoryRead;
use jarvis_turn::Boundaries;
use jarvis_turn::SandboxSettings;
use jarvis_turn::{is_mcp_name, parse_agent_servers};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DefinitionFile {
    name: Option<String>,
    description: Option<String>,
    quote: Option<String>,
    palette: Option<PaletteFile>,
    system_prompt: Option<String>,
    /// A name, or `{name, max_tokens, temperature}` (read by [`model_file`]).
    model: Option<serde_yaml::Value>,
    tools: Option<Vec<String>>,
    proactive: Option<bool>,
    memory: Option<MemoryFile>,
    boundaries: Option<Boundaries>,
    sandbox: Option<SandboxSettings>,
    /// MCP servers of this agent only (read by [`parse_agent_servers`]).
    mcp: Option<serde_yaml::Value>,
    /// Its sub-agents (built by [`SubagentBuilder`]).
    subagents: Option<Vec<SubagentDefinition>>,
    /// Its limits; each unset one comes from `JARVIS_BUDGET__*`.
    budget: Option<Budget>,
}

/// A definition's `model` as a map; a plain string is its `name`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelFile {
    name: Option<String>,
    max_tokens: Option<u32>,
    temperature: Option<f32>,
}

/// Reads a definition's `model`: absent, a name, or a map.
fn model_file(value: Option<serde_yaml::Value>) -> Result<ModelFile, String> {
    let file = match value {
        None | Some(serde_yaml::Value::Null) => ModelFile::default(),
        Some(serde_yaml::Value::String(name)) => ModelFile {
            name: Some(name),
            ..ModelFile::default()
        },
        Some(map @ serde_yaml::Value::Mapping(_)) => serde_yaml::from_value(map)
            .map_err(|e| format!("model: {e} (use a name or {{name, max_tokens, temperature}})"))?,
        Some(_) => return Err("model must be a name or {name, max_tokens, temperature}".into()),
    };
    if file.max_tokens == Some(0) {
        return Err("model.max_tokens must be at least 1".into());
    }
    if let Some(t) = file.temperature
        && !(t.is_finite() && (0.0..=2.0).contains(&t))
    {
        return Err(format!("model.temperature {t} is not a number from 0 to 2"));
    }
    Ok(file)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PaletteFile {
    primary: Option<String>,
    accent: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MemoryFile {
    read: Option<ReadFile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadFile {
    edm: Option<Vec<String>>,
    pdm: Option<Vec<String>>,
}

/// The tools every agent gets, listed or not (R-TEAM-5); `ask_agent` only
/// when the team has two or more agents (R-TEAM-6).
pub const ALWAYS_ATTACHED: [&str; 10] = [
    "ask_agent",
    "remember_task_pattern",
    "recall_episodes",
    "set_goal",
    "update_goal",
    "close_goal",
    "start_focus",
    "focus_step",
    "focus_note",
    "end_focus",
];

/// What the definitions are resolved against.
#[derive(Clone, Copy)]
pub struct TeamContext<'a> {
    /// JARVIS's profile, whose settings empty fields inherit.
    pub main: &'a AgentProfile,
    /// Every tool name the app has.
    pub app_tools: &'a BTreeSet<String>,
    /// Tools visible only to agents that list them.
    pub agent_only: &'a BTreeSet<String>,
    /// Tools the app knows but has not set up (`web_search` without a
    /// backend): a definition may list them without a warning, and they
    /// are left out of its tools.
    pub unconfigured: &'a BTreeSet<String>,
    /// The environment `${VAR}` in a definition's `mcp` reads.
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// The limits of a definition's `budget` that it leaves unset
    /// (`JARVIS_BUDGET__*`).
    pub budget: Budget,
}

impl std::fmt::Debug for TeamContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TeamContext")
            .field("main", &self.main.id)
            .field("app_tools", self.app_tools)
            .field("agent_only", self.agent_only)
            .finish_non_exhaustive()
    }
}

/// A file that was not loaded, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The file.
    pub path: PathBuf,
    /// Why, in words.
    pub reason: String,
}

/// Whether `id` is a valid agent id (R-DEF-4).
pub fn valid_agent_id(id: &str) -> bool {
    let mut chars = id.chars();
    matches!(chars.next(), Some('a'..='z'))
        && id.len() <= 32
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_' | '-'))
}

fn valid_colour(c: &str) -> bool {
    let hex = c.strip_prefix('#').unwrap_or("");
    (hex.len() == 6 || hex.len() == 3) && hex.chars().all(|c| c.is_ascii_hexdigit())
}

fn non_empty(s: Option<String>) -> Option<String> {
    s.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

/// Parses one definition; `Err` is the reason the file is skipped.
pub fn parse_definition(id: &str, yaml: &str, team: &TeamContext<'_>) -> Result<AgentProfile, String> {
    if !valid_agent_id(id) {
        return Err(format!(
            "{id:?} is not a valid agent id (^[a-z][a-z0-9_-]{{0,31}}$)"
        ));
    }
    if id == MAIN_AGENT {
        return Err(
            "main.yaml is not an agent definition: JARVIS's brand and model come from JARVIS_BRAND__* and \
             JARVIS_LLM__*, and main.yaml is read for tools, boundaries, subagents and budget"
                .into(),
        );
    }
    let file: DefinitionFile = if yaml.trim().is_empty() {
        DefinitionFile::default()
    } else {
        serde_yaml::from_str(yaml).map_err(|e| format!("invalid definition: {e}"))?
    };
    let main = team.main;
    let model = model_file(file.model)?;
    let palette = file.palette.unwrap_or_default();
    let primary = non_empty(palette.primary).unwrap_or_else(|| main.palette.primary.clone());
    let accent = non_empty(palette.accent).unwrap_or_else(|| main.palette.accent.clone());
    for colour in [&primary, &accent] {
        if !valid_colour(colour) {
            return Err(format!("palette colour {colour:?} is not #rrggbb"));
        }
    }
    let read = file.memory.and_then(|m| m.read).unwrap_or_default();
    let memory_read = MemoryRead::own_only()
        .with_edm(read.edm.unwrap_or_default())
        .with_pdm(read.pdm.unwrap_or_default());
    for agent in memory_read.edm.iter().chain(&memory_read.pdm) {
        if agent != "self" && !valid_agent_id(agent) {
            return Err(format!("memory.read names {agent:?}, which is not an agent id"));
        }
    }
    let (mut tools, mcp_tools) = resolve_tools(id, file.tools.unwrap_or_default(), team);
    let subagents = SubagentBuilder::new(id, &tools).build(&file.subagents.unwrap_or_default())?;
    if !subagents.is_empty() {
        tools.push(RUN_SUBAGENT_TOOL.to_owned());
    }
    let sandbox = file.sandbox.unwrap_or_default();
    sandbox.validate()?;
    let mcp_servers = match file.mcp {
        None | Some(serde_yaml::Value::Null) => Vec::new(),
        Some(value) => parse_agent_servers(id, value, team.env)?,
    };
    let budget = file.budget.unwrap_or_default();
    budget.validate()?;
    let name = non_empty(file.name).unwrap_or_else(|| wordmark(id));
    Ok(AgentProfile {
        id: id.to_owned(),
        description: non_empty(file.description).unwrap_or_else(|| name.clone()),
        name,
        quote: non_empty(file.quote).unwrap_or_else(|| main.quote.clone()),
        palette: Palette { primary, accent },
        system_prompt: non_empty(file.system_prompt).unwrap_or_else(|| main.system_prompt.clone()),
        model: non_empty(model.name).unwrap_or_else(|| main.model.clone()),
        max_tokens: model.max_tokens,
        temperature: model.temperature,
        tools,
        mcp_tools,
        mcp_servers,
        proactive: file.proactive.unwrap_or(main.proactive),
        memory_read,
        boundaries: file.boundaries.unwrap_or_default(),
        sandbox,
        thinking: main.thinking.clone(),
        feedback: Arc::new(CountingFeedback::default()),
        subagents,
        budget: budget.or(team.budget),
    })
}

/// An agent's tools from its definition's `tools` (empty: the app's tools
/// without agent-only ones), plus the tools every agent gets; and the MCP
/// names and globs it lists (`None` when it lists no tools).
fn resolve_tools(
    id: &str,
    listed: Vec<String>,
    team: &TeamContext<'_>,
) -> (Vec<String>, Option<Vec<String>>) {
    let mut tools: Vec<String> = Vec::new();
    // MCP servers list their tools after the app starts: their names are
    // kept as written, never dropped as unknown.
    let mcp_tools = (!listed.is_empty()).then(|| {
        listed
            .iter()
            .filter(|t| is_mcp_name(t) && !team.app_tools.contains(*t))
            .cloned()
            .collect::<Vec<_>>()
    });
    if listed.is_empty() {
        tools.extend(
            team.app_tools
                .iter()
                .filter(|t| !team.agent_only.contains(*t))
                .cloned(),
        );
    } else {
        for tool in listed {
            if team.app_tools.contains(&tool) {
                if !tools.contains(&tool) {
                    tools.push(tool);
                }
            } else if team.unconfigured.contains(&tool) {
                tracing::debug!(agent = id, %tool, "tool in the agent definition not set up in this app, left out");
            } else if !is_mcp_name(&tool) {
                tracing::warn!(agent = id, %tool, "unknown tool in the agent definition, dropped");
            }
        }
    }
    for tool in ALWAYS_ATTACHED {
        if team.app_tools.contains(tool) && !tools.iter().any(|t| t == tool) {
            tools.push(tool.to_owned());
        }
    }
    (tools, mcp_tools)
}

/// The keys `main.yaml` is read for; JARVIS's brand and model come from
/// `JARVIS_BRAND__*` and `JARVIS_LLM__*`.
pub const MAIN_DEFINITION_KEYS: [&str; 4] = ["tools", "boundaries", "subagents", "budget"];

/// Applies JARVIS's optional `main.yaml` to `main`: its `tools`,
/// `boundaries`, `subagents` and `budget`. Any other key is ignored with
/// one warning naming it, never a reason to skip the file; `Err` (bad
/// YAML, a bad value of a read key) leaves `main` as it was.
pub fn apply_main_definition(
    main: &mut AgentProfile,
    yaml: &str,
    team: &TeamContext<'_>,
) -> Result<(), String> {
    #[derive(Default, Deserialize)]
    struct MainFile {
        tools: Option<Vec<String>>,
        boundaries: Option<Boundaries>,
        subagents: Option<Vec<SubagentDefinition>>,
        budget: Option<Budget>,
    }
    if yaml.trim().is_empty() {
        return Ok(());
    }
    let value: serde_yaml::Value = serde_yaml::from_str(yaml).map_err(|e| format!("invalid YAML: {e}"))?;
    let serde_yaml::Value::Mapping(map) = &value else {
        return Err("main.yaml must be a map of keys".into());
    };
    let ignored: Vec<String> = map
        .keys()
        .map(|k| k.as_str().map_or_else(|| format!("{k:?}"), str::to_owned))
        .filter(|k| !MAIN_DEFINITION_KEYS.contains(&k.as_str()))
        .collect();
    if !ignored.is_empty() {
        tracing::warn!(
            keys = %ignored.join(", "),
            "main.yaml: ignored keys {} (JARVIS's brand and model come from JARVIS_BRAND__* and JARVIS_LLM__*; main.yaml is read for {})",
            ignored.join(", "),
            MAIN_DEFINITION_KEYS.join(", ")
        );
    }
    let file: MainFile = serde_yaml::from_value(value).map_err(|e| format!("main.yaml: {e}"))?;
    let mut profile = main.clone();
    if let Some(listed) = file.tools {
        let (tools, mcp_tools) = resolve_tools(MAIN_AGENT, listed, team);
        profile.tools = tools;
        profile.mcp_tools = mcp_tools;
    }
    if let Some(boundaries) = file.boundaries {
        profile.boundaries = boundaries;
    }
    profile.subagents = SubagentBuilder::new(MAIN_AGENT, &profile.tools)
        .build(&file.subagents.unwrap_or_default())
        .map_err(|e| format!("main.yaml: {e}"))?;
    profile.tools.retain(|t| t != RUN_SUBAGENT_TOOL);
    if !profile.subagents.is_empty() {
        profile.tools.push(RUN_SUBAGENT_TOOL.to_owned());
    }
    if let Some(budget) = file.budget {
        budget.validate().map_err(|e| format!("main.yaml: {e}"))?;
        profile.budget = budget.or(team.budget);
    }
    *main = profile;
    Ok(())
}

/// Every definition in `dir`, by file name; the skipped files with reasons.
pub fn load_team(dir: &Path, team: &TeamContext<'_>) -> (Vec<AgentProfile>, Vec<Skipped>) {
    let mut profiles = Vec::new();
    let mut skipped = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (profiles, skipped),
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "the team directory cannot be read");
            return (profiles, skipped);
        }
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    paths.sort();
    for path in paths {
        let id = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        if id == MAIN_AGENT {
            continue; // JARVIS's main.yaml: see apply_main_definition
        }
        let result = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read it: {e}"))
            .and_then(|yaml| parse_definition(&id, &yaml, team));
        match result {
            Ok(profile) if profiles.iter().any(|p: &AgentProfile| p.id == profile.id) => {
                let reason = format!("another file already defines agent {:?}", profile.id);
                tracing::warn!(file = %path.display(), %reason, "agent definition skipped");
                skipped.push(Skipped { path, reason });
            }
            Ok(profile) => profiles.push(profile),
            Err(reason) => {
                tracing::warn!(file = %path.display(), %reason, "agent definition skipped");
                skipped.push(Skipped { path, reason });
            }
        }
    }
    (profiles, skipped)
}

/// Creates `dir` with `files` (`<agent id>.yaml`, text: the packs' team
/// files) when it does not exist yet; existing directories and files are
/// left alone, and a name that is not `<agent id>.yaml` is passed over with
/// a warning. Returns whether it seeded.
pub fn seed_team_dir<'a>(
    dir: &Path,
    files: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> std::io::Result<bool> {
    if dir.exists() {
        return Ok(false);
    }
    std::fs::create_dir_all(dir)?;
    for (name, text) in files {
        let id = name.strip_suffix(".yaml").unwrap_or_default();
        if !valid_agent_id(id) {
            tracing::warn!(file = %name, "a team file whose name is not <agent id>.yaml was not written");
            continue;
        }
        let path = dir.join(name);
        if !path.exists() {
            jarvis_common::write_atomic(&path, text.as_bytes())?;
        }
    }
    Ok(true)
}
