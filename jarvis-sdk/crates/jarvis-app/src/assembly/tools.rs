//! The app's tools beyond the built-in ones: the web tools, and the MCP
//! servers whose tools join the registry.

use super::*;

/// How long the app waits at start for its MCP servers' first start
/// attempt; a slower server's tools join when it is up.
#[cfg(feature = "mcp")]
pub const MCP_START_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Starts the MCP servers of `$JARVIS_HOME/mcp.yaml`, of the code
/// (`AppConfig::mcp_servers`) and of the definitions, and waits (at most
/// [`MCP_START_WAIT`]) for their first start attempt. A server that does not
/// start is logged and tried again later; it never stops the app.
#[cfg(feature = "mcp")]
pub(super) async fn mcp_servers(
    config: &AppConfig,
    registry: &AgentRegistry,
    env: &dyn Fn(&str) -> Option<String>,
) -> Arc<jarvis_turn::McpHub> {
    let mut servers = jarvis_turn::load_mcp_file(&config.home, env);
    servers.extend(config.mcp_servers.iter().cloned());
    for profile in registry.agents() {
        servers.extend(profile.mcp_servers.iter().cloned());
    }
    let hub = jarvis_turn::McpHub::start(servers);
    if !hub.servers().is_empty() && !hub.wait_started(MCP_START_WAIT).await {
        tracing::info!("some MCP servers are still starting; their tools join when they are up");
    }
    Arc::new(hub)
}

/// Without the feature `mcp`, configured servers are named in a warning.
#[cfg(not(feature = "mcp"))]
pub(super) async fn mcp_servers(
    config: &AppConfig,
    registry: &AgentRegistry,
    env: &dyn Fn(&str) -> Option<String>,
) {
    let mut names: Vec<String> = jarvis_turn::load_mcp_file(&config.home, env)
        .into_iter()
        .chain(config.mcp_servers.iter().cloned())
        .chain(registry.agents().iter().flat_map(|p| p.mcp_servers.clone()))
        .map(|s| s.name)
        .collect();
    names.dedup();
    if !names.is_empty() {
        tracing::warn!(servers = ?names, "MCP servers are configured but this build has no MCP client (cargo feature `mcp`); their tools are left out");
    }
}

/// The tools that read the web (feature `http`): `web_fetch` always
/// (agent-only), `web_search` when a backend is configured.
pub(super) fn web_tools(config: &AppConfig) -> Result<Vec<Arc<dyn Tool>>, AppError> {
    #[allow(unused_mut)] // only the `http` feature adds tools
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    #[cfg(feature = "http")]
    {
        tools.push(jarvis_turn::web_fetch_tool(config.web_fetch.clone()));
        if let Some(search) = &config.web_search {
            tools.push(
                jarvis_turn::web_search_tool(search.clone()).map_err(|e| AppError::Config(e.to_string()))?,
            );
        }
    }
    #[cfg(not(feature = "http"))]
    if config.web_search.is_some() {
        tracing::warn!(
            "a web search backend is configured, but this build has no HTTP client (cargo feature `http`): web_search is not offered"
        );
    }
    Ok(tools)
}

pub(super) fn register(tools: &mut ToolRegistry, tool: Arc<dyn Tool>) -> Result<(), AppError> {
    tools
        .register(tool)
        .map_err(|e| AppError::Config(format!("tool registry: {e}")))
}

/// Builds every pack of `config` and merges their parts; their jobs report
/// through `app_link`.
pub(super) fn pack_parts(
    config: &AppConfig,
    app_link: &Arc<OnceLock<Weak<AppInner>>>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<PackParts, AppError> {
    let mut out = PackParts::new();
    for pack in &config.packs {
        let cx = crate::PackContext {
            home: &config.home,
            clock: config.clock.clone(),
            time_zone: config.agenda.time_zone.clone(),
            demo: config.is_demo(),
            env,
            sink: Arc::new(AppJobs(app_link.clone())),
        };
        let parts = pack
            .build(&cx)
            .map_err(|e| AppError::Config(format!("pack {}: {e}", pack.name())))?;
        out.tools.extend(parts.tools);
        out.jobs.extend(parts.jobs);
        #[cfg(feature = "sources")]
        out.source_kinds.extend(parts.source_kinds);
    }
    Ok(out)
}

/// Says once at start when this kernel cannot fully confine the programs of
/// `run_command` and `run_python`, and what the app does about it.
pub(super) fn warn_about_confinement(config: &AppConfig) {
    if let Some(note) = kernel_confinement().note() {
        if config.require_sandbox {
            tracing::warn!(%note, "the programs of run_command and run_python cannot be fully confined by this kernel; JARVIS_SANDBOX__REQUIRE=1 refuses to run them");
        } else {
            tracing::warn!(%note, "the programs of run_command and run_python cannot be fully confined by this kernel; each result says so (JARVIS_SANDBOX__REQUIRE=1 refuses to run them instead)");
        }
    }
}

/// The built-in tools of the home, their programs confined by `sandbox`.
pub(super) fn builtin_for(config: &AppConfig, sandbox: &SandboxSettings) -> Vec<Arc<dyn Tool>> {
    builtin_tools(
        BuiltinConfig::for_home(&config.home)
            .with_sandbox(sandbox.clone())
            .with_require_confinement(config.require_sandbox),
    )
}

/// The app's tools before the team is known: the built-in ones, the
/// packs', the web tools, goals and Focus (memory tools and `ask_agent`
/// join once the team is known).
pub(super) fn app_tools(
    config: &AppConfig,
    pack_tools: Vec<Arc<dyn Tool>>,
    goals: &Arc<GoalStore>,
    focus: &Arc<FocusStore>,
) -> Result<ToolRegistry, AppError> {
    let mut tools = ToolRegistry::new();
    for tool in builtin_for(config, &SandboxSettings::default())
        .into_iter()
        .chain(pack_tools)
        .chain(web_tools(config)?)
        .chain(goal_tools(goals.clone()))
        .chain(focus_tools(focus.clone()))
    {
        register(&mut tools, tool)?;
    }
    Ok(tools)
}

/// Agents whose programs reach further than the sandbox get built-in tools
/// of their own, confined to what their settings allow.
pub(super) fn sandboxed_tools(
    config: &AppConfig,
    registry: &AgentRegistry,
) -> BTreeMap<String, ToolRegistry> {
    registry
        .agents()
        .iter()
        .filter(|p| p.sandbox != SandboxSettings::default())
        .map(|p| {
            let mut own = ToolRegistry::new();
            for tool in builtin_for(config, &p.sandbox) {
                let _ = own.register(tool);
            }
            (p.id.clone(), own)
        })
        .collect()
}
