//! [`build_app`] (the infrastructure builder, R-ASM-1/2) and [`AppAssembly`]:
//! the one assembly result every screen receives (R-GOAL-1, R-ASM-7/8).
//! Sessions are built here (the session builder, R-ASM-4) and nowhere else.

use async_trait::async_trait;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use tokio_util::sync::CancellationToken;

use super::config::{AppConfig, MemoryBackend, StoreBackend};
use super::definition::{TeamContext, apply_main_definition, load_team, parse_definition, seed_team_dir};
use super::embedder::EmbedderChoice;
use super::error::AppError;
use super::profile::{AgentProfile, MAIN_AGENT, Palette};
use super::registry::AgentRegistry;
use super::subagent::{RunSubagentTool, SubagentRuntime, last_sub_number};
use jarvis_agent::ProactiveKind;
use jarvis_agent::{
    AgentEvent, AgentIdentity, Approver, DEFAULT_REFLECTION_TEMPLATE, DEFAULT_THOUGHT_TEMPLATE,
    DistillConfig, Distiller, Harness, HarnessConfig, HubAttachment, JsonlOpenLoopStore, JsonlOptions,
    JsonlSessionStore, LoopContext, LoopError, LoopFilter, LoopJudge, MemoryOpenLoopStore, ModelJudge,
    ModelSettings, NewSession, OpenLoopStore, OpenLoops, PendingTurn, ReflectionConfig, Reflector, RuleJudge,
    ScreenHub, SessionEntry, SessionId, SessionKind, SessionMeta, SessionStore, TURN_JOURNAL_FILE,
    ThoughtConfig, ThoughtEngine, Tool, ToolGate, ToolRegistry, TurnBrief, TurnJournal, Typed, UIAdapter,
    descendants,
};
use jarvis_common::{Extensions, HomeLock};
use jarvis_common::{TimeZone, Timestamp};
use jarvis_initiative::{
    AgendaItem, AgendaKind, AgendaSource, CountingFeedback, DEFAULT_OUTBOX_CAPACITY, OUTBOX_FILE, Outbox,
    OutboxItem, ProactiveDaemon, ProactiveSessions, ProactiveTarget, Reaction, StandardCommands,
};
use jarvis_initiative::{
    AgentStance, FocusStore, Goal, GoalStore, Job, JobOutput, JobRunner, Notifier, ProactiveSink, Scheduler,
    SchedulerConfig, focus_tools, goal_items, goal_tools,
};
use jarvis_memory::{
    InMemoryMemoryStore, MemoryRead, MemoryScope, MemoryService, MemoryStore, ReembedPhase, ScopeResolver,
    SectionKind, StaticScopes,
};
use jarvis_model::{Embedder, PRICES_FILE, PriceTable, Provider};
use jarvis_turn::cassette::{CASSETTES_DIR, CassetteRecorder};
use jarvis_turn::{
    AgentDirectory, AgentSession, AgentSessionParts, AgentToolPolicy, ApprovalBroker, AskAgentTool,
    Boundaries, BuiltinConfig, Caller, Delegation, DelegationError, DirectoryLink, LayeredApprovalRules,
    PEER_REQUEST_RULE, PromptOptions, RECALL_EPISODES_TOOL, REMEMBER_TASK_PATTERN_TOOL, RosterEntry,
    SandboxSettings, SecurityPipeline, SessionPolicy, TokenAuth, TurnError, Validation, WEB_FETCH_TOOL,
    WEB_SEARCH_TOOL, builtin_tools, kernel_confinement, memory_tools,
};
use jarvis_turn::{
    Supervisor, TaskHealth, TaskStatus, USAGE_FILE, UsageBy, UsageLedger, UsageMeter, UsageSummary,
};

/// Sees the events of every session of the app, peer sessions included
/// (the server's `agent_activity`, logs, metrics).
pub trait SessionObserver: Send + Sync {
    /// One event of `session_id`, whose agent is `agent_id`.
    fn on_session_event(&self, session_id: &str, agent_id: &str, event: &AgentEvent);
}

type Observers = Arc<Mutex<Vec<Arc<dyn SessionObserver>>>>;

/// Forwards one session's events to the app's observers.
struct ObserverBridge {
    session_id: String,
    agent_id: String,
    observers: Observers,
}

impl UIAdapter for ObserverBridge {
    fn on_event(&self, event: &AgentEvent) -> std::ops::ControlFlow<()> {
        let observers = self.observers.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for observer in observers {
            observer.on_session_event(&self.session_id, &self.agent_id, event);
        }
        std::ops::ControlFlow::Continue(())
    }
}

/// Builds the app: model, stores, tools, team, security and approvals from
/// one configuration.
///
/// With nothing configured (the demo would play), it first looks for a
/// model server running on this machine ([`LlmConfig::discover_local`](jarvis_model::LlmConfig::discover_local)).
pub async fn build_app(config: AppConfig) -> Result<AppAssembly, AppError> {
    let lock = Arc::new(HomeLock::acquire(&config.home)?);
    let mut config = config;
    // One discovery for chat and for `JARVIS_EMBED__PROVIDER=auto`.
    let embedder = super::embedder::choose_at_start(&mut config).await?;
    let provider = match &config.provider {
        Some(p) => p.clone(),
        None => config.llm.build()?,
    };
    #[cfg_attr(not(feature = "postgres"), allow(unused_mut))]
    let mut cluster: Option<Arc<dyn super::cluster::ClusterLink>> = None;
    #[cfg(feature = "postgres")]
    let mut deployment: Option<jarvis_agent::PostgresSessionStore> = None;
    let store: Arc<dyn SessionStore> = match &config.store {
        StoreBackend::Jsonl => {
            let options = JsonlOptions::default()
                .clock(config.clock.clone())
                .durability(config.durability);
            Arc::new(JsonlSessionStore::with_lock(lock.clone(), options)?)
        }
        #[cfg(feature = "postgres")]
        StoreBackend::Postgres { url } => {
            let node = jarvis_agent::NodeOptions::new(
                config
                    .node
                    .id
                    .clone()
                    .unwrap_or_else(jarvis_agent::NodeOptions::default_id),
            )
            .with_lease(config.node.lease)
            .with_home(config.home.display().to_string());
            let store = jarvis_agent::PostgresSessionStore::connect(url)
                .await?
                .with_clock(config.clock.clone())
                .with_node(node)
                .await?;
            cluster = Some(Arc::new(
                super::cluster::PgCluster::start(url, store.clone()).await?,
            ));
            deployment = Some(store.clone());
            Arc::new(store)
        }
        StoreBackend::Memory => Arc::new(jarvis_agent::MemorySessionStore::new()),
        #[cfg(not(feature = "postgres"))]
        StoreBackend::Postgres { .. } => {
            return Err(AppError::Config(
                "this build has no Postgres store (cargo feature `postgres`)".into(),
            ));
        }
    };
    let team_files = config.packs.iter().flat_map(|p| p.team_files());
    if config.seed_team
        && seed_team_dir(&config.team_dir, team_files).map_err(|source| AppError::Io {
            what: format!("create the team directory {}", config.team_dir.display()),
            source,
        })?
    {
        tracing::info!(dir = %config.team_dir.display(), "team directory created with the packs' team files");
    }

    write_if_missing(&config.home.join(THOUGHT_TEMPLATE_FILE), DEFAULT_THOUGHT_TEMPLATE)?;
    write_if_missing(
        &config.home.join(REFLECTION_TEMPLATE_FILE),
        DEFAULT_REFLECTION_TEMPLATE,
    )?;
    let memory = match &embedder {
        Some(chosen) => Some(memory_service(&config, chosen.embedder.clone()).await?),
        None => None,
    };
    if let Some(service) = &memory {
        // Memories of another embedder are embedded again in the
        // background; the task ends when the service is dropped.
        tokio::spawn(MemoryService::keep_embedded(Arc::downgrade(service)));
    }
    let loops = open_loop_store(&config).await?;
    // Turns in progress when the process last stopped are closed or
    // resumed once the app stands (below).
    let (journal, pending_turns) = TurnJournal::open(config.home.join(TURN_JOURNAL_FILE))
        .map_err(|e| AppError::Config(e.to_string()))?;
    // A node of a deployment keeps a turn waiting for a person with the
    // session's lease, so the node taking the session over resumes it.
    let journal = Arc::new(journal.with_mirror(store.clone()));
    // Sub-agent runs are numbered on from the last `sub-<n>` of the home.
    let sub_sessions = Arc::new(std::sync::atomic::AtomicU64::new(last_sub_number(
        store.list().await?.iter().map(|m| m.id.as_str()),
    )));
    let outbox = Arc::new(outbox(&config).await?);
    let usage = usage_meter(&config)?;
    let focus = Arc::new(FocusStore::new(&config.home, config.clock.clone()));
    let goals = Arc::new(goal_store(&config).await?);

    // The scheduler runs jobs through the app, and packs' jobs report to its
    // daemon; both reach the app through a link set once it exists.
    let app_link: Arc<OnceLock<Weak<AppInner>>> = Arc::default();
    // The packs' parts: tools, jobs and source kinds.
    let env = |name: &str| std::env::var(name).ok();
    let mut pack_tools = Vec::new();
    let mut pack_jobs = Vec::new();
    #[cfg(feature = "sources")]
    let mut source_kinds = Vec::new();
    for pack in &config.packs {
        let cx = super::PackContext {
            home: &config.home,
            clock: config.clock.clone(),
            time_zone: config.agenda.time_zone.clone(),
            demo: config.is_demo(),
            env: &env,
            sink: Arc::new(AppJobs(app_link.clone())),
        };
        let parts = pack
            .build(&cx)
            .map_err(|e| AppError::Config(format!("pack {}: {e}", pack.name())))?;
        pack_tools.extend(parts.tools);
        pack_jobs.extend(parts.jobs);
        #[cfg(feature = "sources")]
        source_kinds.extend(parts.source_kinds);
    }

    // Tools: the built-in ones, the packs', and ask_agent once the team is known.
    let confinement = kernel_confinement();
    if let Some(note) = confinement.note() {
        if config.require_sandbox {
            tracing::warn!(%note, "the programs of run_command and run_python cannot be fully confined by this kernel; JARVIS_SANDBOX__REQUIRE=1 refuses to run them");
        } else {
            tracing::warn!(%note, "the programs of run_command and run_python cannot be fully confined by this kernel; each result says so (JARVIS_SANDBOX__REQUIRE=1 refuses to run them instead)");
        }
    }
    let builtin = |sandbox: &SandboxSettings| {
        builtin_tools(
            BuiltinConfig::for_home(&config.home)
                .with_sandbox(sandbox.clone())
                .with_require_confinement(config.require_sandbox),
        )
    };
    let mut tools = ToolRegistry::new();
    for tool in builtin(&SandboxSettings::default())
        .into_iter()
        .chain(pack_tools)
        .chain(web_tools(&config)?)
        .chain(goal_tools(goals.clone()))
        .chain(focus_tools(focus.clone()))
    {
        register(&mut tools, tool)?;
    }
    // Known tools this app has not set up: a definition listing them is
    // not warned about every start; its sessions simply lack them.
    let unconfigured: BTreeSet<String> = [WEB_FETCH_TOOL, WEB_SEARCH_TOOL]
        .into_iter()
        .filter(|name| tools.get(name).is_none())
        .map(str::to_owned)
        .collect();
    let mut names: BTreeSet<String> = tools.names().map(str::to_owned).collect();
    names.insert("ask_agent".to_owned());
    if memory.is_some() {
        names.insert(REMEMBER_TASK_PATTERN_TOOL.to_owned());
        names.insert(RECALL_EPISODES_TOOL.to_owned());
    }

    let agent_only: BTreeSet<String> = tools
        .names()
        .filter(|name| tools.get(name).is_some_and(|t| t.agent_only()))
        .map(str::to_owned)
        .collect();
    let mut main = main_profile(&config, &names, &agent_only);
    let team = TeamContext {
        main: &main.clone(),
        app_tools: &names,
        agent_only: &agent_only,
        env: &env,
        unconfigured: &unconfigured,
        budget: config.budget,
    };
    // JARVIS's own definition: `main.yaml` in the team directory, or one
    // given to the config (which wins).
    let main_yaml = config
        .definitions
        .iter()
        .find(|(id, _)| id == MAIN_AGENT)
        .map(|(_, y)| y.clone())
        .or_else(|| {
            ["main.yaml", "main.yml"]
                .iter()
                .find_map(|name| std::fs::read_to_string(config.team_dir.join(name)).ok())
        });
    if let Some(yaml) = main_yaml
        && let Err(reason) = apply_main_definition(&mut main, &yaml, &team)
    {
        tracing::warn!(%reason, "JARVIS's main.yaml was not applied; JARVIS runs with its defaults");
    }
    let (mut others, mut skipped) = load_team(&config.team_dir, &team);
    for (id, yaml) in config.definitions.iter().filter(|(id, _)| id != MAIN_AGENT) {
        match parse_definition(id, yaml, &team) {
            Ok(profile) => {
                others.retain(|p| p.id != profile.id);
                others.push(profile);
            }
            Err(reason) => {
                tracing::warn!(agent = %id, %reason, "agent definition skipped");
                skipped.push(super::definition::Skipped {
                    path: PathBuf::from(format!("<{id}>")),
                    reason,
                });
            }
        }
    }
    others.sort_by(|a, b| a.id.cmp(&b.id));
    let registry = AgentRegistry::new(main, others, skipped);
    let notifier = Arc::new(
        Notifier::open(
            &config.home,
            config.clock.clone(),
            config.agenda.time_zone.clone(),
        )
        .map_err(AppError::Config)?
        .with_agent_names(
            registry
                .agents()
                .iter()
                .map(|p| (p.id.clone(), p.name.clone()))
                .collect(),
        ),
    );
    // Agents whose programs reach further than the sandbox get built-in
    // tools of their own, confined to what their settings allow.
    let sandboxed: BTreeMap<String, ToolRegistry> = registry
        .agents()
        .iter()
        .filter(|p| p.sandbox != SandboxSettings::default())
        .map(|p| {
            let mut own = ToolRegistry::new();
            for tool in builtin(&p.sandbox) {
                let _ = own.register(tool);
            }
            (p.id.clone(), own)
        })
        .collect();

    let mut learners = None;
    if let Some(service) = &memory {
        let scopes: Arc<dyn ScopeResolver> = Arc::new(
            registry
                .agents()
                .iter()
                .fold(StaticScopes::new(&config.memory.user), |s, p| {
                    s.with_read(&p.id, p.memory_read.clone())
                }),
        );
        for tool in memory_tools(service.clone(), scopes.clone()) {
            register(&mut tools, tool)?;
        }
        learners = Some(learners_for(&config, &provider, service, scopes));
    }

    #[cfg_attr(not(feature = "mcp"), allow(unused_variables))]
    let mcp = mcp_servers(&config, &registry, &env).await;

    let link = DirectoryLink::new();
    if registry.agents().len() >= 2 {
        let ask = AskAgentTool::new(link.clone(), &registry.roster()).with_timeout(config.ask_timeout);
        register(&mut tools, Arc::new(Typed::new(ask)))?;
    }

    let auth = TokenAuth::new(config.web_token.clone()).with_agents(registry.ids().map(str::to_owned));
    let security = SecurityPipeline::new(
        config
            .validation
            .clone()
            .unwrap_or_else(|| Arc::new(Validation::default())),
        Arc::new(auth),
        config.policy.clone().unwrap_or_else(|| Arc::new(SessionPolicy)),
    );
    let reminders = config
        .agenda
        .open_loops
        .then(|| Arc::new(open_loops(&config, loops.clone(), Arc::new(RuleJudge))));
    let mut scheduler = Scheduler::new(
        &config.home,
        config.clock.clone(),
        Arc::new(AppJobs(app_link.clone())),
        SchedulerConfig {
            time_zone: config.agenda.time_zone.clone(),
            poll_interval: config.schedule_poll,
            ..SchedulerConfig::default()
        },
    )?;
    for job in pack_jobs {
        scheduler = scheduler.with_builtin(job);
    }
    #[cfg_attr(not(feature = "postgres"), allow(unused_mut))]
    let mut rules = LayeredApprovalRules::new(&config.home);
    // Several nodes on one Postgres: each slot runs on one node, and
    // `/schedule` and "always allow" write for the whole deployment.
    #[cfg(feature = "postgres")]
    if let Some(store) = deployment {
        scheduler = scheduler
            .with_slot_claim(Arc::new(super::cluster::PostgresSlotClaim(store.clone())))
            .with_shared_jobs(Arc::new(super::cluster::PostgresJobs(store.clone())));
        rules = rules.with_shared(Arc::new(super::cluster::PostgresApprovalRules(store)));
    }
    #[cfg(feature = "sources")]
    let source_status = jarvis_initiative::SourceStatus::default();
    #[cfg(feature = "sources")]
    let scheduler = {
        let seen = Arc::new(jarvis_initiative::SeenStore::new(&config.home));
        let mut scheduler = scheduler;
        for source in jarvis_initiative::load_sources(&config.home, &source_kinds) {
            if !registry.contains(&source.file.agent) {
                tracing::warn!(source = %source.id, agent = %source.file.agent, "external source skipped: its agent is not in the team");
                continue;
            }
            scheduler = scheduler.with_builtin(Arc::new(jarvis_initiative::SourceJob::new(
                source,
                seen.clone(),
                Arc::new(AppJobs(app_link.clone())),
                config.clock.clone(),
                source_status.clone(),
                config.agenda.time_zone.clone(),
            )));
        }
        scheduler
    };
    let inner = Arc::new_cyclic(|me: &Weak<AppInner>| AppInner {
        #[cfg(feature = "sources")]
        source_status,
        scheduler: {
            let _ = app_link.set(me.clone());
            Arc::new(scheduler)
        },
        proactive: Arc::new(
            ProactiveDaemon::new(
                Arc::new(OpenSessions(me.clone())),
                reminders,
                outbox,
                store.clone(),
                config.clock.clone(),
                config.reflection.daemon.clone(),
            )
            .with_goals(goals.clone())
            .with_notifier(notifier.clone()),
        ),
        notifier,
        goals,
        focus,
        me: me.clone(),
        rules: Arc::new(rules),
        demo: config.is_demo(),
        notice: if config.provider.is_some() {
            None
        } else {
            config.llm.notice.clone()
        },
        config,
        registry,
        store,
        cluster,
        provider,
        tools,
        sandboxed,
        #[cfg(feature = "mcp")]
        mcp,
        security,
        memory,
        embedder: embedder.map(|chosen| chosen.choice),
        learners,
        loops,
        journal,
        usage,
        supervisor: Arc::default(),
        interrupted: Mutex::default(),
        sessions: Mutex::default(),
        uses: std::sync::atomic::AtomicU64::new(0),
        delegating: Mutex::default(),
        sub_sessions,
        mcp_numbers: tokio::sync::Mutex::default(),
        observers: Observers::default(),
        _lock: lock,
    });

    let directory: Arc<dyn AgentDirectory> = inner.clone();
    link.connect(Arc::downgrade(&directory));
    inner.recover(pending_turns).await;
    inner.recover_reports().await;
    Ok(AppAssembly { inner })
}

/// The usage ledger and price table of `config`'s home:
/// `$JARVIS_HOME/usage.jsonl` (in the process when the app keeps its
/// sessions there, [`StoreBackend::Memory`]) and `$JARVIS_HOME/prices.yaml`
/// (missing: every cost unknown; malformed: the app does not start, and the
/// error names the file).
fn usage_meter(config: &AppConfig) -> Result<UsageMeter, AppError> {
    let prices =
        PriceTable::load(config.home.join(PRICES_FILE)).map_err(|e| AppError::Config(e.to_string()))?;
    let ledger = match config.store {
        StoreBackend::Memory => UsageLedger::in_memory(),
        _ => UsageLedger::open(config.home.join(USAGE_FILE)).map_err(|e| AppError::Config(e.to_string()))?,
    };
    Ok(UsageMeter::new(
        Arc::new(ledger),
        Arc::new(prices),
        config.clock.clone(),
    ))
}

/// How long the app waits at start for its MCP servers' first start
/// attempt; a slower server's tools join when it is up.
#[cfg(feature = "mcp")]
pub const MCP_START_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Starts the MCP servers of `$JARVIS_HOME/mcp.yaml`, of the code
/// (`AppConfig::mcp_servers`) and of the definitions, and waits (at most
/// [`MCP_START_WAIT`]) for their first start attempt. A server that does not
/// start is logged and tried again later; it never stops the app.
#[cfg(feature = "mcp")]
async fn mcp_servers(
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
async fn mcp_servers(config: &AppConfig, registry: &AgentRegistry, env: &dyn Fn(&str) -> Option<String>) {
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
fn web_tools(config: &AppConfig) -> Result<Vec<Arc<dyn Tool>>, AppError> {
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

/// The memory service of `config`: its store (a given one, else Postgres
/// with the Postgres backend, else in memory), `embedder`, `JARVIS_HOME`
/// for procedures, and the user model: in Postgres beside memory in
/// Postgres (shared by every node), else the home's `user_model.json`.
async fn memory_service(
    config: &AppConfig,
    embedder: Arc<dyn Embedder>,
) -> Result<Arc<MemoryService>, AppError> {
    let settings = &config.memory;
    let store: Arc<dyn MemoryStore> = match &settings.store {
        Some(store) => store.clone(),
        None => memory_store(config).await?,
    };
    let mut memory_config = settings.config.clone();
    memory_config.home = Some(config.home.clone());
    // Episodes are dated, and questions' periods read, in the person's zone.
    memory_config.time_zone = config.agenda.time_zone.clone();
    let service = MemoryService::new(store, embedder)
        .with_clock(config.clock.clone())
        .with_ids(config.ids.clone())
        .with_config(memory_config);
    #[cfg(feature = "postgres")]
    let service = match (&settings.store, memory_backend(config)) {
        (None, MemoryBackend::Postgres { url }) => service.with_user_model(
            jarvis_memory::UserModelStore::Postgres(jarvis_memory::PostgresUserModel::connect(&url).await?),
        ),
        _ => service,
    };
    Ok(Arc::new(service))
}

/// The memory backend `JARVIS_MEMORY__STORE` names, with `auto` resolved:
/// Postgres beside Postgres sessions, SQLite otherwise.
fn memory_backend(config: &AppConfig) -> MemoryBackend {
    match (&config.memory.backend, &config.store) {
        (MemoryBackend::Auto, StoreBackend::Postgres { url }) => MemoryBackend::Postgres { url: url.clone() },
        (MemoryBackend::Auto, _) => MemoryBackend::Sqlite,
        (chosen, _) => chosen.clone(),
    }
}

/// The memory store `JARVIS_MEMORY__STORE` names (see [`MemoryBackend`]):
/// `auto` is Postgres beside Postgres sessions, SQLite in the home
/// otherwise.
async fn memory_store(config: &AppConfig) -> Result<Arc<dyn MemoryStore>, AppError> {
    match memory_backend(config) {
        MemoryBackend::Memory => Ok(Arc::new(InMemoryMemoryStore::new())),
        #[cfg(feature = "sqlite")]
        MemoryBackend::Sqlite => {
            let store = jarvis_memory::SqliteMemoryStore::open_in_home(&config.home).await?;
            let report = store.open_report();
            tracing::info!(
                path = %store.path().display(),
                records = report.records,
                skipped = report.skipped,
                ms = report.elapsed.as_millis() as u64,
                "memory store opened"
            );
            Ok(Arc::new(store))
        }
        #[cfg(not(feature = "sqlite"))]
        MemoryBackend::Sqlite if config.memory.backend == MemoryBackend::Auto => {
            tracing::warn!(
                "this build has no SQLite store (cargo feature `sqlite`): memory is kept in the process"
            );
            Ok(Arc::new(InMemoryMemoryStore::new()))
        }
        #[cfg(not(feature = "sqlite"))]
        MemoryBackend::Sqlite => Err(AppError::Config(
            "JARVIS_MEMORY__STORE=sqlite, but this build has no SQLite store (cargo feature `sqlite`)".into(),
        )),
        #[cfg(feature = "postgres")]
        MemoryBackend::Postgres { url } => {
            Ok(Arc::new(jarvis_memory::PostgresMemoryStore::connect(&url).await?))
        }
        #[cfg(not(feature = "postgres"))]
        MemoryBackend::Postgres { .. } => Err(AppError::Config(
            "memory in Postgres, but this build has no Postgres store (cargo feature `postgres`)".into(),
        )),
        // Resolved above.
        MemoryBackend::Auto => Ok(Arc::new(InMemoryMemoryStore::new())),
    }
}

/// The reflector and the distiller every agent's thought engine shares
/// (per agent state lives inside them), with the app's model and JARVIS's
/// thinking settings (SPEC.md §17.3 #2).
fn learners_for(
    config: &AppConfig,
    provider: &Arc<dyn Provider>,
    memory: &Arc<MemoryService>,
    scopes: Arc<dyn ScopeResolver>,
) -> Learners {
    let settings = &config.thinking;
    let reflection = ReflectionConfig {
        overflow_threshold: settings.reflect_after,
        learn_from_success: settings.learn_procedures,
        template: Some(config.home.join(REFLECTION_TEMPLATE_FILE)),
        model: config.llm.model.clone(),
        ..ReflectionConfig::default()
    };
    let distill = DistillConfig {
        every_turns: settings.distil_every,
        model: config.llm.model.clone(),
        ..DistillConfig::default()
    };
    Learners {
        reflector: Arc::new(Reflector::new(
            provider.clone(),
            memory.clone(),
            scopes.clone(),
            reflection,
        )),
        distiller: Arc::new(Distiller::new(provider.clone(), memory.clone(), scopes, distill)),
    }
}

/// The learners of an app with memory.
struct Learners {
    reflector: Arc<Reflector>,
    distiller: Arc<Distiller>,
}

/// Where open loops are kept: Postgres with the Postgres backend,
/// `$JARVIS_HOME/openloops.jsonl` with JSONL, the process otherwise.
async fn open_loop_store(config: &AppConfig) -> Result<Arc<dyn OpenLoopStore>, AppError> {
    let loop_error = |e: LoopError| AppError::Config(e.to_string());
    Ok(match &config.store {
        StoreBackend::Jsonl => Arc::new(JsonlOpenLoopStore::open(&config.home).map_err(loop_error)?),
        #[cfg(feature = "postgres")]
        StoreBackend::Postgres { url } => Arc::new(
            jarvis_agent::PostgresOpenLoopStore::connect(url)
                .await
                .map_err(loop_error)?,
        ),
        #[cfg(not(feature = "postgres"))]
        StoreBackend::Postgres { .. } => Arc::new(MemoryOpenLoopStore::new()),
        StoreBackend::Memory => Arc::new(MemoryOpenLoopStore::new()),
    })
}

/// The proactive outbox: `outbox.jsonl` in the home, or on Postgres the
/// table every node shares (a message outlives the node that queued it and
/// is recorded by the node owning its session).
async fn outbox(config: &AppConfig) -> Result<Outbox, AppError> {
    let outbox = match &config.store {
        #[cfg(feature = "postgres")]
        StoreBackend::Postgres { url } => Outbox::postgres(url, DEFAULT_OUTBOX_CAPACITY).await,
        _ => Outbox::open(config.home.join(OUTBOX_FILE), DEFAULT_OUTBOX_CAPACITY),
    };
    outbox.map_err(|e| AppError::Config(e.to_string()))
}

/// Where goals are kept: Postgres with the Postgres backend (shared by
/// every node), `$JARVIS_HOME/goals/` otherwise.
async fn goal_store(config: &AppConfig) -> Result<GoalStore, AppError> {
    let (clock, zone) = (config.clock.clone(), config.agenda.time_zone.clone());
    Ok(match &config.store {
        #[cfg(feature = "postgres")]
        StoreBackend::Postgres { url } => GoalStore::postgres(url, clock, zone)
            .await
            .map_err(|e| AppError::Config(e.to_string()))?,
        _ => GoalStore::new(&config.home, clock, zone),
    })
}

/// The name of the scheduler's background task.
const BACKGROUND_SCHEDULER: &str = "scheduler";
/// The name of the reflection daemon's background task.
const BACKGROUND_REFLECTION: &str = "reflection";
const BACKGROUND_NOTIFICATIONS: &str = "notifications";
/// How often queued notifications are looked at.
const NOTIFY_INTERVAL: std::time::Duration = std::time::Duration::from_secs(15);
/// The name of memory's re-embedding in the background health.
const BACKGROUND_EMBEDDING: &str = "embedding";

/// The inner thought template, in `$JARVIS_HOME` (people may edit it).
pub const THOUGHT_TEMPLATE_FILE: &str = "inner_thought.md";

/// The reflection template, in `$JARVIS_HOME` (people may edit it).
pub const REFLECTION_TEMPLATE_FILE: &str = "inner_thought_reflection.md";

/// Writes `text` to `path` unless the file exists (people's edits stay).
fn write_if_missing(path: &Path, text: &str) -> Result<(), AppError> {
    if path.exists() {
        return Ok(());
    }
    jarvis_common::write_atomic(path, text.as_bytes()).map_err(|source| AppError::Io {
        what: format!("write {}", path.display()),
        source,
    })
}

fn register(tools: &mut ToolRegistry, tool: Arc<dyn Tool>) -> Result<(), AppError> {
    tools
        .register(tool)
        .map_err(|e| AppError::Config(format!("tool registry: {e}")))
}

fn main_profile(config: &AppConfig, tools: &BTreeSet<String>, agent_only: &BTreeSet<String>) -> AgentProfile {
    AgentProfile {
        id: MAIN_AGENT.to_owned(),
        name: config.brand.name.clone(),
        description: "팀 총괄 (team lead)".to_owned(),
        quote: config.brand.quote.clone(),
        palette: Palette {
            primary: config.brand.primary.clone(),
            accent: config.brand.accent.clone(),
        },
        system_prompt: config.system_prompt.clone(),
        model: config.llm.model.clone(),
        max_tokens: None,
        temperature: None,
        tools: tools
            .iter()
            .filter(|t| !agent_only.contains(*t))
            .cloned()
            .collect(),
        mcp_tools: None,
        mcp_servers: Vec::new(),
        proactive: config.proactive,
        memory_read: MemoryRead::own_only(),
        boundaries: Boundaries::default(),
        sandbox: config.sandbox.clone(),
        thinking: config.thinking.clone(),
        feedback: Arc::new(CountingFeedback::default()),
        subagents: Vec::new(),
        budget: config.budget,
    }
}

struct AppInner {
    config: AppConfig,
    registry: AgentRegistry,
    store: Arc<dyn SessionStore>,
    /// This node's link to the others (a Postgres store).
    cluster: Option<Arc<dyn super::cluster::ClusterLink>>,
    provider: Arc<dyn Provider>,
    tools: ToolRegistry,
    /// The built-in tools of agents whose sandbox settings widen what
    /// their programs reach, by agent.
    sandboxed: BTreeMap<String, ToolRegistry>,
    /// The MCP servers; dropping the app stops them.
    #[cfg(feature = "mcp")]
    mcp: Arc<jarvis_turn::McpHub>,
    rules: Arc<LayeredApprovalRules>,
    security: SecurityPipeline,
    memory: Option<Arc<MemoryService>>,
    /// The embedder of recall, as `embedder.json` records it.
    embedder: Option<EmbedderChoice>,
    learners: Option<Learners>,
    loops: Arc<dyn OpenLoopStore>,
    /// The app itself, for the parts of its sessions that reach back (the
    /// AGENDA of `/agenda`) without keeping it alive.
    me: Weak<AppInner>,
    /// Every agent's goals (`$JARVIS_HOME/goals/`).
    goals: Arc<GoalStore>,
    /// Sends what is said while no screen shows it (`notifications.yaml`).
    notifier: Arc<Notifier>,
    /// How each external source is doing (`external_sources/`).
    #[cfg(feature = "sources")]
    source_status: jarvis_initiative::SourceStatus,
    /// Every session's Focus tasks (`$JARVIS_HOME/focus/`).
    focus: Arc<FocusStore>,
    /// The reflection daemon; it sees the open sessions through a weak link.
    proactive: Arc<ProactiveDaemon>,
    /// The scheduler (`$JARVIS_HOME/schedules/`, the packs' jobs, the
    /// external sources).
    scheduler: Arc<Scheduler>,
    notice: Option<String>,
    demo: bool,
    /// Turns in progress (`$JARVIS_HOME/turns.jsonl`).
    journal: Arc<TurnJournal>,
    /// Every turn's tokens and cost (`$JARVIS_HOME/usage.jsonl`), priced
    /// by `$JARVIS_HOME/prices.yaml`.
    usage: UsageMeter,
    /// Keeps the background work running.
    supervisor: Arc<Supervisor>,
    /// Sessions whose turn a restart cut short, with the note for the first
    /// screen that attaches (handed to the session when it is built).
    interrupted: Mutex<HashMap<String, String>>,
    /// The sessions built, with the order they were last used in.
    sessions: Mutex<HashMap<String, Loaded>>,
    /// Counts uses of sessions, for the least recently used order.
    uses: std::sync::atomic::AtomicU64,
    delegating: Mutex<BTreeSet<(String, String)>>,
    /// The last `n` of the `sub-<n>` sessions recording sub-agent runs.
    sub_sessions: Arc<std::sync::atomic::AtomicU64>,
    /// The next number of each agent's MCP sessions (`mcp-<agent>-<n>`);
    /// held while one is created, so two clients never get the same id.
    mcp_numbers: tokio::sync::Mutex<HashMap<String, u64>>,
    observers: Observers,
    _lock: Arc<HomeLock>,
}

/// The assembled app. Cheap to clone; every screen holds one.
#[derive(Clone)]
pub struct AppAssembly {
    inner: Arc<AppInner>,
}

impl std::fmt::Debug for AppAssembly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppAssembly")
            .field("home", &self.inner.config.home)
            .field("agents", &self.inner.registry.ids().collect::<Vec<_>>())
            .field("provider", &self.inner.provider.name())
            .finish_non_exhaustive()
    }
}

impl AppAssembly {
    /// The team.
    pub fn registry(&self) -> &AgentRegistry {
        &self.inner.registry
    }

    /// The session store.
    pub fn store(&self) -> &Arc<dyn SessionStore> {
        &self.inner.store
    }

    /// This node's link to the other nodes of its deployment: `Some` when
    /// sessions are in Postgres ([`StoreBackend::Postgres`]), `None`
    /// otherwise. See [`super::cluster`].
    pub fn cluster(&self) -> Option<&Arc<dyn super::cluster::ClusterLink>> {
        self.inner.cluster.as_ref()
    }

    /// `JARVIS_HOME`.
    pub fn home(&self) -> &Path {
        &self.inner.config.home
    }

    /// The team directory.
    pub fn team_dir(&self) -> &PathBuf {
        &self.inner.config.team_dir
    }

    /// Why this model was chosen, when it was not configured explicitly
    /// (for example the offline demo); screens show it.
    pub fn notice(&self) -> Option<&str> {
        self.inner.notice.as_deref()
    }

    /// Whether the built-in offline demo script is playing (no model is
    /// configured); screens say so.
    pub fn is_demo(&self) -> bool {
        self.inner.demo
    }

    /// The model provider.
    pub fn provider(&self) -> &Arc<dyn Provider> {
        &self.inner.provider
    }

    /// The person's time zone (`JARVIS_TIME__ZONE`): what schedules, the
    /// AGENDA, usage by day and budgets read local times in.
    pub fn time_zone(&self) -> &TimeZone {
        &self.inner.config.agenda.time_zone
    }

    /// The AGENDA: every agent's schedules and promises, each with its
    /// agent's name and colour (R-AGENDA-1).
    pub async fn agenda(&self) -> Vec<AgendaItem> {
        self.inner.agenda().await
    }

    /// The notification dispatcher (`$JARVIS_HOME/notifications.yaml`);
    /// [`spawn_background`](Self::spawn_background) ticks it.
    pub fn notifier(&self) -> &Arc<Notifier> {
        &self.inner.notifier
    }

    /// Every agent's goals (`$JARVIS_HOME/goals/`).
    pub fn goals(&self) -> &Arc<GoalStore> {
        &self.inner.goals
    }

    /// Every session's Focus tasks (`$JARVIS_HOME/focus/`).
    pub fn focus(&self) -> &Arc<FocusStore> {
        &self.inner.focus
    }

    /// What a screen attaching to `session_id` is sent about its active
    /// Focus task: `focus_state` (with `busy`) and `focus_panel`; nothing
    /// without one.
    pub fn focus_events(&self, session_id: &str, busy: bool) -> Vec<AgentEvent> {
        match self.inner.focus.active(session_id) {
            Some(task) => {
                let log = self.inner.focus.log(&task.task_id);
                vec![task.state_event(busy), task.panel_event(&log)]
            }
            None => Vec::new(),
        }
    }

    /// The open-loop store.
    pub fn open_loops(&self) -> &Arc<dyn OpenLoopStore> {
        &self.inner.loops
    }

    /// The MCP servers: their state and tools (feature `mcp`).
    #[cfg(feature = "mcp")]
    pub fn mcp(&self) -> &Arc<jarvis_turn::McpHub> {
        &self.inner.mcp
    }

    /// The memory service, unless memory is off.
    pub fn memory(&self) -> Option<&Arc<MemoryService>> {
        self.inner.memory.as_ref()
    }

    /// The embedder of recall (what `$JARVIS_HOME/embedder.json` records),
    /// unless memory is off. How far re-embedding has come is
    /// [`MemoryService::reembedding`].
    pub fn embedder(&self) -> Option<&EmbedderChoice> {
        self.inner.embedder.as_ref()
    }

    /// The reflector every agent's thought engine runs after turns
    /// (procedure learning, failure reflection), unless memory is off.
    pub fn reflector(&self) -> Option<&Arc<Reflector>> {
        self.inner.learners.as_ref().map(|l| &l.reflector)
    }

    /// The user-model distiller, unless memory is off: it runs every N
    /// turns of an agent whose thinking is on, and on demand
    /// ([`Distiller::distil_now`] with the scope from
    /// [`AppAssembly::memory_scope`]).
    pub fn distiller(&self) -> Option<&Arc<Distiller>> {
        self.inner.learners.as_ref().map(|l| &l.distiller)
    }

    /// The memory scope of `agent`'s session `session_id` (the app's
    /// memory user and the agent's `memory.read`), unless memory is off or
    /// the agent is unknown.
    pub fn memory_scope(&self, agent: &str, session_id: &str) -> Option<MemoryScope> {
        self.inner.memory.as_ref()?;
        let profile = self.inner.registry.get(agent)?;
        Some(
            MemoryScope::new(self.inner.config.memory.user.clone(), agent, session_id)
                .with_read(profile.memory_read.clone()),
        )
    }

    /// Every tool of the app (each agent sees its own subset).
    pub fn tools(&self) -> &ToolRegistry {
        &self.inner.tools
    }

    /// The usage ledger: one row per turn that called the model, with its
    /// tokens and cost (`$JARVIS_HOME/usage.jsonl`).
    pub fn usage(&self) -> &Arc<UsageLedger> {
        self.inner.usage.ledger()
    }

    /// The price table (`$JARVIS_HOME/prices.yaml`).
    pub fn prices(&self) -> &Arc<PriceTable> {
        self.inner.usage.prices()
    }

    /// What records each turn's usage, priced, in the ledger; every session
    /// of the app uses it, and so may work that runs turns of its own.
    pub fn usage_meter(&self) -> &UsageMeter {
        &self.inner.usage
    }

    /// The ledger's rows grouped `by` agent, session or day, sorted by key;
    /// days are the person's (the AGENDA's zone,
    /// [`AgendaSettings::time_zone`](super::AgendaSettings::time_zone)).
    pub fn usage_summary(&self, by: UsageBy) -> Vec<UsageSummary> {
        self.usage().summary(by, &self.inner.config.agenda.time_zone)
    }

    /// Adds an observer of every session's events, from now on.
    pub fn observe(&self, observer: Arc<dyn SessionObserver>) {
        self.inner
            .observers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(observer);
    }

    /// The reflection daemon: it reminds of due promises and delivers queued
    /// messages in the open sessions of proactive agents. It runs once
    /// [`AppAssembly::spawn_background`] starts it; tests call its `tick`.
    pub fn proactive(&self) -> &Arc<ProactiveDaemon> {
        &self.inner.proactive
    }

    /// A person's reaction to the proactive message `message_id` (the
    /// `proactive_feedback` client message); it reaches the feedback learner
    /// of the agent that sent it. Answers whether the message was one the
    /// daemon sent and had not had a reaction yet.
    pub fn proactive_feedback(&self, message_id: &str, reaction: Reaction) -> bool {
        self.proactive().feedback(message_id, reaction)
    }

    /// The scheduler: job files in `$JARVIS_HOME/schedules/` and the jobs
    /// defined in code (the packs', the external sources); each file job runs in the session
    /// `sched-<agent>-<job>` of its agent, and its answer reaches that
    /// agent's open screens as `proactive_message {kind: "answer"}`. It runs
    /// once [`AppAssembly::spawn_background`] starts it; tests call its `tick`.
    pub fn scheduler(&self) -> &Arc<Scheduler> {
        &self.inner.scheduler
    }

    /// Starts the app's background work until `cancel` fires: the
    /// scheduler, and the reflection daemon unless
    /// `JARVIS_REFLECTION__ENABLED` is off. Servers and terminals call it
    /// once; an embedding app that wants no jobs and no unprompted messages
    /// does not.
    pub fn spawn_background(&self, cancel: CancellationToken) -> Vec<tokio::task::JoinHandle<()>> {
        let supervisor = &self.inner.supervisor;
        let scheduler = self.inner.scheduler.clone();
        let token = cancel.clone();
        let mut tasks = vec![supervisor.spawn(BACKGROUND_SCHEDULER, cancel.clone(), move || {
            scheduler.clone().run(token.clone())
        })];
        if self.inner.config.reflection.enabled {
            let daemon = self.proactive().clone();
            let token = cancel.clone();
            tasks.push(supervisor.spawn(BACKGROUND_REFLECTION, cancel.clone(), move || {
                daemon.clone().run(token.clone())
            }));
        }
        if !self.inner.notifier.is_empty() {
            let notifier = self.inner.notifier.clone();
            let token = cancel.clone();
            tasks.push(supervisor.spawn(BACKGROUND_NOTIFICATIONS, cancel, move || {
                notifier.clone().run(NOTIFY_INTERVAL, token.clone())
            }));
        }
        tasks
    }

    /// The health of the background work, by task: what
    /// [`AppAssembly::spawn_background`] started (`scheduler`,
    /// `reflection`): running or restarting after a failure, and failures
    /// counted (a scheduled job that failed counts for `scheduler`); and,
    /// with memory on, the re-embedding `build_app` started (`embedding`):
    /// `restarting` while the embedder does not answer, its failed tries
    /// counted.
    pub fn background_health(&self) -> std::collections::BTreeMap<String, TaskHealth> {
        let mut health = self.inner.supervisor.health();
        if let Some(scheduler) = health.get_mut(BACKGROUND_SCHEDULER) {
            scheduler.failures += self.inner.scheduler.failed_runs();
        }
        if let Some(memory) = &self.inner.memory {
            let status = memory.reembedding();
            health.insert(
                BACKGROUND_EMBEDDING.to_owned(),
                TaskHealth {
                    status: if status.phase == ReembedPhase::Waiting {
                        TaskStatus::Restarting
                    } else {
                        TaskStatus::Ok
                    },
                    failures: status.failures,
                    restarts: 0,
                    last_failure: status.error,
                },
            );
        }
        health
    }

    /// Sessions built so far (open in this process), with their agents.
    pub fn open_sessions(&self) -> Vec<Arc<AgentSession>> {
        let sessions = self.inner.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.values().map(|l| l.session.clone()).collect()
    }

    /// Creates a new session of `agent` (`main` when `None`).
    pub async fn create_session(&self, agent: Option<&str>) -> Result<SessionMeta, AppError> {
        let agent = agent.unwrap_or(MAIN_AGENT);
        self.require_agent(agent)?;
        let id = SessionId::new(self.inner.config.ids.next_id("s-"))?;
        Ok(self.inner.store.create(NewSession::user(id, agent)).await?)
    }

    /// The session `default-<agent>`, created when missing (the CLI's).
    pub async fn default_session(&self, agent: &str) -> Result<SessionMeta, AppError> {
        self.require_agent(agent)?;
        let id = SessionId::default_for(agent)?;
        Ok(self
            .inner
            .store
            .get_or_create(NewSession::user(id, agent))
            .await?
            .0)
    }

    /// The session `id`, created for `agent` when it does not exist; an
    /// existing session keeps its own agent and `agent` is ignored
    /// (R-WEB-3, SPEC.md §17.3 #6).
    pub async fn open_or_create(
        &self,
        id: &SessionId,
        agent: Option<&str>,
    ) -> Result<Arc<AgentSession>, AppError> {
        if self.inner.store.get(id).await?.is_none() {
            let agent = agent.unwrap_or(MAIN_AGENT);
            self.require_agent(agent)?;
            self.inner
                .store
                .get_or_create(NewSession::user(id.clone(), agent))
                .await?;
        }
        self.inner.open(id).await
    }

    /// The open session `id` (built on first use, then shared by every screen).
    pub async fn session(&self, id: &SessionId) -> Result<Arc<AgentSession>, AppError> {
        self.inner.open(id).await
    }

    /// Starts or stops recording session `id`'s cassette, for good (see
    /// [`jarvis_turn::cassette`]); answers the cassette's path.
    pub async fn set_recording(&self, id: &SessionId, enabled: bool) -> Result<PathBuf, AppError> {
        let session = self.inner.open(id).await?;
        let cassette = session
            .cassette()
            .ok_or_else(|| AppError::Config(format!("session {id} has no cassette recorder")))?;
        cassette.set_enabled(enabled).map_err(|source| AppError::Io {
            what: format!("switching the recording of {id}"),
            source,
        })?;
        Ok(cassette.path().to_owned())
    }

    /// Resumes the turn waiting for a person that this node took over with
    /// session `id` from a node that stopped ([`SessionStore::adopted_turn`]):
    /// the turn joins this home's journal and goes on here, asking again
    /// (with the same request ids) what it was waiting for. `early` is a
    /// person's answer that reached this node before the request was asked
    /// again: applied the moment it is, when the turn was waiting for that
    /// request. Answers whether a turn was resumed.
    pub async fn resume_adopted(
        &self,
        id: &SessionId,
        early: Option<(&str, jarvis_agent::ApprovalDecision)>,
    ) -> Result<bool, AppError> {
        let Some(turn) = self.inner.store.adopted_turn(id) else {
            return Ok(false);
        };
        self.inner
            .journal
            .adopt(&turn)
            .await
            .map_err(|e| AppError::Config(e.to_string()))?;
        let session = self.session(id).await?;
        if let Some((request_id, decision)) = early
            && turn
                .approvals
                .iter()
                .any(|a| a.decision.is_none() && a.request.request_id == request_id)
        {
            session.broker().decide_early(request_id, decision);
        }
        let (settle, _asked_again) = turn.settle_for_resume();
        tracing::info!(session_id = %id, turn_id = %turn.turn_id(), "resuming a turn taken over from a node that stopped");
        Ok(session.resume(turn, settle))
    }

    /// Every session, newest first.
    pub async fn list_sessions(&self) -> Result<Vec<SessionMeta>, AppError> {
        Ok(self.inner.store.list().await?)
    }

    /// A session's metadata and entries.
    pub async fn session_entries(
        &self,
        id: &SessionId,
    ) -> Result<(SessionMeta, Vec<SessionEntry>), AppError> {
        let meta = self
            .inner
            .store
            .get(id)
            .await?
            .ok_or_else(|| jarvis_agent::SessionError::not_found(id))?;
        Ok((meta, self.inner.store.entries(id).await?))
    }

    /// A new MCP client session of `agent`, `mcp-<agent>-<n>` (kind `mcp`,
    /// read-only for people), titled `title`. `n` counts each agent's MCP
    /// sessions from 1 and never names a session that exists, so a restart
    /// does not reuse an id: the first number tried is one past how many
    /// MCP sessions of the agent the store holds, and taken ones are
    /// passed over.
    pub async fn create_mcp_session(
        &self,
        agent: &str,
        title: Option<&str>,
    ) -> Result<SessionMeta, AppError> {
        self.require_agent(agent)?;
        let mut numbers = self.inner.mcp_numbers.lock().await;
        let mut n = match numbers.get(agent) {
            Some(n) => *n,
            None => {
                let held = self
                    .inner
                    .store
                    .list()
                    .await?
                    .iter()
                    .filter(|s| s.kind == SessionKind::Mcp && s.agent_id == agent)
                    .count();
                held as u64 + 1
            }
        };
        loop {
            let id = SessionId::new(format!("mcp-{agent}-{n}"))?;
            if self.inner.store.get(&id).await?.is_none() {
                let mut new = NewSession::mcp(id, agent);
                if let Some(title) = title.map(str::trim).filter(|t| !t.is_empty()) {
                    new = new.with_title(jarvis_common::truncate_chars(
                        title,
                        jarvis_agent::MAX_TITLE_CHARS,
                    ));
                }
                let meta = self.inner.store.create(new).await?;
                numbers.insert(agent.to_owned(), n + 1);
                return Ok(meta);
            }
            n += 1;
        }
    }

    /// A fork of `id` with a new id; it keeps the parent's agent.
    pub async fn fork(&self, id: &SessionId) -> Result<SessionMeta, AppError> {
        let child = SessionId::new(self.inner.config.ids.next_id("s-"))?;
        Ok(self.inner.store.fork(id, child).await?)
    }

    fn require_agent(&self, agent: &str) -> Result<(), AppError> {
        if self.inner.registry.contains(agent) {
            Ok(())
        } else {
            Err(AppError::UnknownAgent(agent.to_owned()))
        }
    }
}

impl AppInner {
    async fn open(&self, id: &SessionId) -> Result<Arc<AgentSession>, AppError> {
        let used = self.uses.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(loaded) = self
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(id.as_str())
        {
            loaded.used = used;
            return Ok(loaded.session.clone());
        }
        let meta = self
            .store
            .get(id)
            .await?
            .ok_or_else(|| jarvis_agent::SessionError::not_found(id))?;
        let (built, screens) = self.build_session(&meta)?;
        if let Some(note) = self
            .interrupted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id.as_str())
        {
            built.note_interrupted(note);
        }
        let built = Arc::new(built);
        let bridge = screens.attach_observer(Arc::new(ObserverBridge {
            session_id: id.to_string(),
            agent_id: meta.agent_id.clone(),
            observers: self.observers.clone(),
        }));
        let (session, unload) = {
            let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
            let session = sessions
                .entry(id.to_string())
                .or_insert(Loaded {
                    session: built,
                    _bridge: bridge,
                    used,
                })
                .session
                .clone();
            (
                session,
                least_used_idle(&mut sessions, self.config.max_loaded_sessions),
            )
        };
        for id in unload {
            self.store.unload(&id).await;
        }
        Ok(session)
    }

    /// The session builder: one session's sandbox-bound tools, gate,
    /// approval broker, security pipeline, harness and screens.
    fn build_session(&self, meta: &SessionMeta) -> Result<(AgentSession, ScreenHub), AppError> {
        let profile = self
            .registry
            .get(&meta.agent_id)
            .ok_or_else(|| AppError::UnknownAgent(meta.agent_id.clone()))?;
        let id = meta.id.clone();
        let screens = ScreenHub::new();
        let cassette = Arc::new(CassetteRecorder::new(
            &self.config.home.join(CASSETTES_DIR),
            id.as_str(),
            self.config.record,
            secrets(&self.config),
        ));
        let broker = ApprovalBroker::new(id.as_str(), self.rules.clone(), self.config.ids.clone())
            .with_cassette(cassette.clone())
            .with_timeout(self.config.approval_timeout)
            .with_ask_always(profile.boundaries.ask.iter().cloned())
            .with_journal(self.journal.clone(), self.config.clock.clone());
        let mut gate = ToolGate::new()
            .with_policy(Arc::new(
                AgentToolPolicy::new(&profile.id, Some(profile.tools.iter().cloned()))
                    .with_boundaries(&profile.boundaries)
                    .with_mcp_tools(profile.mcp_tools.clone()),
            ))
            .with_approver(Arc::new(broker.clone()));
        for hook in &self.config.hooks {
            gate = gate.with_hook(hook.clone());
        }
        let mut tools = ToolRegistry::new();
        for name in &profile.tools {
            let own = self.sandboxed.get(&profile.id).and_then(|tools| tools.get(name));
            if let Some(tool) = own.or_else(|| self.tools.get(name)) {
                register(&mut tools, tool.clone())?;
            }
        }
        #[cfg(feature = "mcp")]
        tools.add_source(self.mcp.source_for(&profile.id, profile.mcp_tools.clone()));
        if !profile.subagents.is_empty() {
            let memory = self.memory.as_ref().map(|service| {
                let scope = MemoryScope {
                    read: profile.memory_read.clone(),
                    ..MemoryScope::new(&self.config.memory.user, &profile.id, id.as_str())
                };
                (service.clone(), scope)
            });
            let runtime = SubagentRuntime::new(self.store.clone(), self.sub_sessions.clone(), memory)
                .with_usage(self.usage.clone());
            register(
                &mut tools,
                RunSubagentTool::new(profile.subagents.clone(), runtime).into_tool(),
            )?;
        }
        let ctx = LoopContext::new(self.provider.clone())
            .with_tools(tools)
            .with_gate(gate)
            .with_ui(Arc::new(screens.clone()))
            .with_ids(self.config.ids.clone())
            .with_model(ModelSettings {
                model: profile.model.clone(),
                system_prompt: Some(profile.system_prompt.clone()),
                max_tokens: profile.max_tokens,
                temperature: profile.temperature,
            })
            .with_identity(AgentIdentity {
                agent_id: profile.id.clone(),
                agent_name: profile.name.clone(),
                session_id: id.to_string(),
            });
        let mut harness = Harness::new(self.store.clone(), ctx)
            .with_config(HarnessConfig::default().with_loop_config(self.config.loop_config.clone()))
            .with_journal(self.journal.clone())
            .with_clock(self.config.clock.clone())
            .with_brief(Arc::new(BriefLink(self.me.clone())));
        if let Some(memory) = &self.memory {
            harness = harness.with_memory(
                memory.clone(),
                self.config.memory.user.clone(),
                profile.memory_read.clone(),
            );
        }
        let mut parts = AgentSessionParts::new(
            id,
            profile.id.clone(),
            meta.kind,
            self.security.clone(),
            harness,
            screens.clone(),
            broker,
        )
        .with_usage(self.usage.clone())
        .with_notifier(self.notifier.clone())
        .with_budget(profile.budget, &self.config.agenda.time_zone)
        .with_cassette(cassette);
        if self.config.agenda.open_loops {
            let judge: Arc<dyn LoopJudge> = if self.config.agenda.model_judge {
                Arc::new(ModelJudge::new(self.provider.clone(), profile.model.clone()))
            } else {
                Arc::new(RuleJudge)
            };
            parts = parts.with_open_loops(Arc::new(open_loops(&self.config, self.loops.clone(), judge)));
        }
        let mut commands = StandardCommands::new().with_agenda(
            Arc::new(AgendaLink(self.me.clone())),
            &self.config.agenda.time_zone,
        );
        if let Some(memory) = &self.memory {
            commands = commands.with_memory(memory.clone(), self.config.memory.user.clone());
        }
        // Distillation is a model call: only where the agent's thinking is on.
        if let Some(learners) = self.learners.as_ref().filter(|_| profile.thinking.enabled) {
            commands = commands.with_distiller(learners.distiller.clone());
        }
        commands = commands
            .with_schedule(self.scheduler.clone())
            .with_goals(self.goals.clone())
            .with_cassettes(self.config.home.join(CASSETTES_DIR))
            .with_focus(self.focus.clone(), Arc::new(screens.clone()));
        parts = parts.with_commands(Arc::new(commands));
        if profile.thinking.enabled {
            let mut engine = ThoughtEngine::new(
                self.provider.clone(),
                self.store.clone(),
                ThoughtConfig {
                    threshold: profile.thinking.threshold,
                    template: Some(self.config.home.join(THOUGHT_TEMPLATE_FILE)),
                    model: profile.model.clone(),
                    ..ThoughtConfig::default()
                },
            );
            if let Some(learners) = &self.learners {
                engine = engine
                    .with_reflector(learners.reflector.clone())
                    .with_distiller(learners.distiller.clone());
            }
            parts = parts.with_thinking(Arc::new(engine));
        }
        Ok((AgentSession::with_dual(parts, self.config.dual.clone()), screens))
    }
}

impl AppInner {
    /// Settles the turns a stopped process left in progress (see the
    /// harness and journal docs): a turn whose block is in its history
    /// already is forgotten; a person's top-level turn that was waiting for
    /// a person (itself, or a turn it delegated to) is resumed; every other
    /// turn is closed as interrupted, with what it recorded and no answer,
    /// and the first screen that opens its session is told. Failures are
    /// logged: the journal keeps the turn for the next start.
    async fn recover(&self, pending: Vec<PendingTurn>) {
        if pending.is_empty() {
            return;
        }
        let mut settled: BTreeSet<String> = BTreeSet::new();
        for turn in &pending {
            let Ok(id) = SessionId::new(turn.begin.session_id.as_str()) else {
                self.journal.end(turn.turn_id());
                settled.insert(turn.turn_id().to_owned());
                continue;
            };
            let recorded = match self.store.get(&id).await {
                Ok(None) => true, // its session is gone
                Ok(Some(_)) => match self.store.has_turn(&id, turn.turn_id()).await {
                    Ok(found) => found,
                    Err(error) => {
                        tracing::warn!(turn_id = %turn.turn_id(), %error, "recovery: the history could not be read");
                        settled.insert(turn.turn_id().to_owned());
                        continue;
                    }
                },
                Err(error) => {
                    tracing::warn!(turn_id = %turn.turn_id(), %error, "recovery: the session could not be read");
                    settled.insert(turn.turn_id().to_owned());
                    continue;
                }
            };
            if recorded {
                self.journal.end(turn.turn_id());
                settled.insert(turn.turn_id().to_owned());
            }
        }
        let by_id: HashMap<&str, &PendingTurn> = pending.iter().map(|t| (t.turn_id(), t)).collect();
        let mut resume: Vec<&PendingTurn> = Vec::new();
        for (top, below) in descendants(&pending) {
            let Some(turn) = by_id.get(top.as_str()) else {
                continue;
            };
            let waits = turn.waits_for_a_person()
                || below
                    .iter()
                    .filter_map(|b| by_id.get(b.as_str()))
                    .any(|b| b.waits_for_a_person());
            if turn.begin.resumable && waits && !turn.steps.is_empty() && !settled.contains(&top) {
                resume.push(turn);
            }
        }
        for turn in &pending {
            if settled.contains(turn.turn_id()) || resume.iter().any(|r| r.turn_id() == turn.turn_id()) {
                continue;
            }
            let Ok(id) = SessionId::new(turn.begin.session_id.as_str()) else {
                continue;
            };
            let written = match self.store.append(&id, turn.interrupted_block()).await {
                Ok(_) => self.store.sync(&id).await,
                Err(e) => Err(e),
            };
            match written {
                Ok(()) => {
                    self.journal.end(turn.turn_id());
                    tracing::warn!(session_id = %id, turn_id = %turn.turn_id(), "a turn cut short by a restart was closed as interrupted");
                    if turn.begin.parent.is_none() {
                        self.interrupted
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .insert(id.to_string(), interrupted_note(&turn.begin.prompt));
                    }
                }
                Err(error) => {
                    tracing::error!(session_id = %id, turn_id = %turn.turn_id(), %error, "an interrupted turn could not be closed; it stays in the journal");
                }
            }
        }
        for turn in resume {
            let Ok(id) = SessionId::new(turn.begin.session_id.as_str()) else {
                continue;
            };
            match self.open(&id).await {
                Ok(session) => {
                    let (settle, _asked_again) = turn.settle_for_resume();
                    tracing::info!(session_id = %id, turn_id = %turn.turn_id(), "resuming a turn that waits for a person");
                    session.resume(turn.clone(), settle);
                }
                Err(error) => {
                    tracing::error!(session_id = %id, turn_id = %turn.turn_id(), %error, "a waiting turn could not be resumed; it stays in the journal");
                }
            }
        }
    }
}

/// What the first screen of a session hears of its interrupted turn.
fn interrupted_note(prompt: &str) -> String {
    let prompt = jarvis_common::truncate_with_marker(prompt, 60);
    format!(
        "the turn \"{prompt}\" was interrupted by a restart; what it did before is in the history, and it has no answer"
    )
}

/// A session the app built.
struct Loaded {
    session: Arc<AgentSession>,
    _bridge: HubAttachment,
    /// When it was last used (a count of uses).
    used: u64,
}

/// Removes the least recently used sessions not in use until at most `max`
/// remain (or none can go); answers their ids, for the store to unload.
fn least_used_idle(sessions: &mut HashMap<String, Loaded>, max: usize) -> Vec<SessionId> {
    if sessions.len() <= max {
        return Vec::new();
    }
    let mut idle: Vec<(u64, String)> = sessions
        .iter()
        // The map's own handle is the only one of an unused session.
        .filter(|(_, l)| Arc::strong_count(&l.session) == 1 && !l.session.in_use())
        .map(|(id, l)| (l.used, id.clone()))
        .collect();
    idle.sort();
    let excess = sessions.len() - max;
    let mut gone = Vec::new();
    for (_, id) in idle.into_iter().take(excess) {
        if let Some(loaded) = sessions.remove(&id) {
            gone.push(loaded.session.id().clone());
        }
    }
    gone
}

/// Open loops over the app's `store`, judged by `judge`.
fn open_loops(config: &AppConfig, store: Arc<dyn OpenLoopStore>, judge: Arc<dyn LoopJudge>) -> OpenLoops {
    OpenLoops::new(store, judge, config.clock.clone(), config.ids.clone())
        .with_time_zone(&config.agenda.time_zone)
}

/// The open sessions of people, as the reflection daemon sees them: each
/// with its agent's `proactive` flag and feedback learner. Peer sessions
/// are never spoken in.
struct OpenSessions(Weak<AppInner>);

impl ProactiveSessions for OpenSessions {
    fn targets(&self) -> Vec<ProactiveTarget> {
        let Some(app) = self.0.upgrade() else {
            return Vec::new();
        };
        app.user_sessions(|_| true)
            .into_iter()
            .filter_map(|session| {
                let profile = app.registry.get(session.agent_id())?;
                Some(ProactiveTarget {
                    proactive: profile.proactive,
                    feedback: profile.feedback.clone(),
                    session,
                })
            })
            .collect()
    }

    fn agent(&self, agent_id: &str) -> Option<AgentStance> {
        let app = self.0.upgrade()?;
        let profile = app.registry.get(agent_id)?;
        Some(AgentStance {
            proactive: profile.proactive,
            feedback: profile.feedback.clone(),
        })
    }
}

/// The AGENDA as its sessions' `/agenda` reaches it: a weak link, so a
/// session never keeps the app alive.
struct AgendaLink(Weak<AppInner>);

#[async_trait]
impl AgendaSource for AgendaLink {
    async fn agenda(&self) -> Vec<AgendaItem> {
        match self.0.upgrade() {
            Some(app) => app.agenda().await,
            None => Vec::new(),
        }
    }
}

/// The goals and Focus task of a turn, reached through a weak link.
struct BriefLink(Weak<AppInner>);

#[async_trait]
impl TurnBrief for BriefLink {
    async fn sections(&self, agent_id: &str, session_id: &str) -> Vec<(SectionKind, Vec<String>)> {
        match self.0.upgrade() {
            Some(app) => app.brief(agent_id, session_id).await,
            None => Vec::new(),
        }
    }
}

/// The scheduler's side of the app: it runs file jobs as their agents and
/// hands watch results to the reflection daemon.
#[derive(Debug)]
struct AppJobs(Arc<OnceLock<Weak<AppInner>>>);

impl AppJobs {
    fn app(&self) -> Result<Arc<AppInner>, String> {
        self.0
            .get()
            .and_then(Weak::upgrade)
            .ok_or_else(|| "the app has shut down".to_owned())
    }
}

#[async_trait]
impl JobRunner for AppJobs {
    /// Runs the job's prompt in the session `sched-<agent>-<job>` of its
    /// agent (that agent's model, system prompt, tools and memory scope,
    /// R-SCHED-1), as the system, and sends the answer to every open screen
    /// of that agent's sessions as `proactive_message {kind: "answer"}`.
    async fn run(&self, job: &Job, _slot: Timestamp) -> Result<JobOutput, String> {
        let app = self.app()?;
        if !app.registry.contains(&job.agent) {
            return Err(format!("there is no agent {:?} in the team", job.agent));
        }
        let id = SessionId::new(format!("sched-{}-{}", job.agent, job.id)).map_err(|e| e.to_string())?;
        app.store
            .get_or_create(NewSession::job(id.clone(), &job.agent))
            .await
            .map_err(|e| e.to_string())?;
        let session = app.open(&id).await.map_err(|e| e.to_string())?;
        let caller = Caller::System {
            name: format!("scheduler:{}", job.id),
        };
        // Nobody watches the job's own session: a tool that needs approval
        // asks on the screens of the agent's open session, as a delegated
        // turn asks on its caller's (with none open, it is denied when the
        // request times out).
        let screens = app.user_sessions(|agent| agent == job.agent);
        let mut options = PromptOptions::from(caller);
        options.approver = screens
            .iter()
            .find(|s| s.id() != &id)
            .map(|s| Arc::new(s.broker().clone()) as Arc<dyn Approver>);
        let outcome = session
            .prompt_with(job.prompt.clone(), options)
            .await
            .map_err(|e| e.to_string())?;
        let text = outcome.final_message.content;
        for target in screens {
            target.announce(text.clone(), ProactiveKind::Answer);
        }
        Ok(JobOutput {
            session_id: Some(id.to_string()),
            text,
        })
    }
}

#[async_trait]
impl ProactiveSink for AppJobs {
    /// Queues `item`, durably; the daemon records it in its session exactly
    /// once (unless the agent is `proactive: false`).
    async fn enqueue(&self, item: OutboxItem) -> Result<(), String> {
        let app = self.app()?;
        app.proactive.enqueue(item).await.map_err(|e| e.to_string())?;
        Ok(())
    }

    fn has_agent(&self, agent_id: &str) -> bool {
        self.app().is_ok_and(|app| app.registry.contains(agent_id))
    }

    fn now(&self) -> Timestamp {
        match self.app() {
            Ok(app) => Timestamp::from_system_time(app.config.clock.now()),
            Err(_) => Timestamp::from_system_time(std::time::SystemTime::now()),
        }
    }
}

#[cfg(feature = "sources")]
#[async_trait]
impl jarvis_initiative::SourceReporter for AppJobs {
    /// Queues the report, durably, for the source agent's `default-<agent>`
    /// session, like a watch report: recorded exactly once by the daemon.
    async fn report(
        &self,
        source: &jarvis_initiative::Source,
        message_id: &str,
        text: &str,
    ) -> Result<(), String> {
        let app = self.app()?;
        let agent = &source.file.agent;
        let item = OutboxItem {
            message_id: message_id.to_owned(),
            session_id: format!("default-{agent}"),
            agent_id: agent.clone(),
            kind: ProactiveKind::Proactive,
            text: text.to_owned(),
            at: Timestamp::from_system_time(app.config.clock.now()),
            meta: serde_json::json!({ "source_id": source.id }),
        };
        app.proactive.enqueue(item).await.map_err(|e| e.to_string())?;
        Ok(())
    }
}

impl AppInner {
    /// Reports a job queued before a stop or a crash may be unrecorded by
    /// the job: each built-in job sees every message the outbox still holds
    /// and finishes its records ([`BuiltinJob::recover`](jarvis_initiative::BuiltinJob::recover)),
    /// then the outbox forgets what it delivered.
    async fn recover_reports(&self) {
        let queued = self.proactive.outbox().logged().await;
        for job in self.scheduler.builtins() {
            job.recover(&queued).await;
        }
        self.proactive.outbox().compact().await;
    }
}

impl AppInner {
    /// The open people's sessions (never peer sessions) whose agent
    /// `agent` accepts, by id: a stable order, so a queued message goes to
    /// the same session each run.
    fn user_sessions(&self, agent: impl Fn(&str) -> bool) -> Vec<Arc<AgentSession>> {
        let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let mut found: Vec<Arc<AgentSession>> = sessions
            .values()
            .map(|l| &l.session)
            .filter(|s| s.kind() == SessionKind::User && agent(s.agent_id()))
            .cloned()
            .collect();
        found.sort_by(|a, b| a.id().as_str().cmp(b.id().as_str()));
        found
    }

    /// Every agent's schedules, soonest first, then their promises: due
    /// ones by due time, then the others oldest first.
    async fn agenda(&self) -> Vec<AgendaItem> {
        let mut items: Vec<AgendaItem> = self
            .scheduler
            .jobs()
            .into_iter()
            .filter(|info| info.job.enabled && info.next_run.is_some())
            .map(|info| {
                let (agent_name, color) = self.label(&info.job.agent);
                let (kind, detail) = self.job_kind(&info.job.id, info.trigger);
                AgendaItem {
                    kind,
                    id: info.job.id,
                    agent_id: info.job.agent,
                    agent_name,
                    color,
                    text: info.job.prompt,
                    when: info.next_run,
                    detail: Some(detail),
                    session_id: None,
                }
            })
            .collect();
        items.sort_by_key(|s| s.when.map(Timestamp::as_millis));
        items.extend(self.promises().await);
        items.extend(self.goal_items().await);
        items
    }

    /// How a job shows on the AGENDA: an external source's job as `source`
    /// (failing ones say so), any other as `schedule`.
    fn job_kind(&self, job_id: &str, trigger: String) -> (AgendaKind, String) {
        #[cfg(feature = "sources")]
        if let Some(id) = job_id.strip_prefix(jarvis_initiative::SOURCE_JOB_PREFIX) {
            let health = self
                .source_status
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(id)
                .cloned()
                .unwrap_or_default();
            let detail = match health.error {
                Some(error) => format!("{trigger} · failing ({}×): {error}", health.failures),
                None => trigger,
            };
            return (AgendaKind::Source, detail);
        }
        let _ = job_id;
        (AgendaKind::Schedule, trigger)
    }

    /// Every agent's active goals: those with a due first, soonest first,
    /// then by agent and number.
    async fn goal_items(&self) -> Vec<AgendaItem> {
        let zone = self.goals.zone();
        let agents = self.goals.agents().await.unwrap_or_else(|error| {
            tracing::warn!(%error, "the AGENDA's goals could not be read");
            Vec::new()
        });
        let mut goals: Vec<Goal> = Vec::new();
        for agent in &agents {
            match self.goals.active(agent).await {
                Ok(active) => goals.extend(active),
                Err(error) => {
                    tracing::warn!(%error, agent, "an agent's goals could not be read for the AGENDA")
                }
            }
        }
        goals.sort_by_key(|g| {
            (
                g.due_at(zone).map_or((1, 0), |d| (0, d.as_millis())),
                g.agent_id.clone(),
                g.number(),
            )
        });
        goals
            .into_iter()
            .map(|g| {
                let (agent_name, color) = self.label(&g.agent_id);
                AgendaItem {
                    kind: AgendaKind::Goal,
                    when: g.due_at(zone),
                    detail: Some(format!("{}%", g.progress)),
                    id: g.id,
                    agent_id: g.agent_id,
                    agent_name,
                    color,
                    text: g.title,
                    session_id: None,
                }
            })
            .collect()
    }

    /// What opens a turn's injected message besides memory.
    async fn brief(&self, agent_id: &str, session_id: &str) -> Vec<(SectionKind, Vec<String>)> {
        let goals = self.goals.active(agent_id).await.unwrap_or_else(|error| {
            tracing::warn!(%error, agent = agent_id, "the agent's goals could not be read");
            Vec::new()
        });
        let focus = self
            .focus
            .active(session_id)
            .map(|t| t.items())
            .unwrap_or_default();
        vec![
            (SectionKind::Goals, goal_items(&goals, self.goals.zone())),
            (SectionKind::Focus, focus),
        ]
    }

    async fn promises(&self) -> Vec<AgendaItem> {
        let loops = match self
            .loops
            .list(&LoopFilter {
                open_only: true,
                ..LoopFilter::default()
            })
            .await
        {
            Ok(loops) => loops,
            Err(error) => {
                tracing::warn!(%error, "the AGENDA's promises could not be read");
                Vec::new()
            }
        };
        let mut promises: Vec<AgendaItem> = loops
            .into_iter()
            .map(|l| {
                let (agent_name, color) = self.label(&l.agent_id);
                AgendaItem {
                    kind: AgendaKind::Promise,
                    id: l.id,
                    agent_id: l.agent_id,
                    agent_name,
                    color,
                    text: l.text,
                    when: l.due,
                    detail: l.condition,
                    session_id: Some(l.session_id),
                }
            })
            .collect();
        // Stable: loops come oldest first; those with a due time go first, soonest first.
        promises.sort_by_key(|p| p.when.map_or((1, 0), |w| (0, w.as_millis())));
        promises
    }

    /// An agent's name and colour for its AGENDA label; an agent no longer
    /// in the team keeps its id and JARVIS's colour.
    fn label(&self, agent_id: &str) -> (String, String) {
        match self.registry.get(agent_id) {
            Some(p) => (p.name.clone(), p.palette.primary.clone()),
            None => (agent_id.to_owned(), self.registry.main().palette.primary.clone()),
        }
    }
}

/// Removes a pair from the delegations under way however the delegation ends.
struct Delegating<'a> {
    set: &'a Mutex<BTreeSet<(String, String)>>,
    pair: (String, String),
}

impl Drop for Delegating<'_> {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.pair);
    }
}

#[async_trait]
impl AgentDirectory for AppInner {
    fn roster(&self) -> Vec<RosterEntry> {
        self.registry.roster()
    }

    /// Runs the callee's turn in `peer-<caller>-<callee>` (one session per
    /// ordered pair, reused), with `PEER_REQUEST_RULE` on each model call and
    /// approvals on the calling session's screens.
    async fn delegate(&self, d: Delegation) -> Result<String, DelegationError> {
        if !self.registry.contains(&d.callee) {
            return Err(DelegationError::UnknownAgent(d.callee));
        }
        let pair = (d.caller.clone(), d.callee.clone());
        if !self
            .delegating
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(pair.clone())
        {
            return Err(DelegationError::Busy {
                caller: d.caller,
                callee: d.callee,
            });
        }
        let _delegating = Delegating {
            set: &self.delegating,
            pair,
        };
        let failed = |message: String| DelegationError::Failed {
            callee: d.callee.clone(),
            message,
        };
        let peer_id =
            SessionId::new(format!("peer-{}-{}", d.caller, d.callee)).map_err(|e| failed(e.to_string()))?;
        self.store
            .get_or_create(NewSession::peer(peer_id.clone(), &d.caller, &d.callee))
            .await
            .map_err(|e| failed(e.to_string()))?;
        let peer = self.open(&peer_id).await.map_err(|e| failed(e.to_string()))?;
        // Approvals of the callee's tools go to the screens of the session
        // where the person started the chain (R-ASK-8), on every leg, with
        // the callee's own `boundaries.ask`.
        let origin = Some(d.chain.origin_session.as_str())
            .filter(|s| !s.is_empty())
            .unwrap_or(&d.caller_session);
        let callee_ask = self
            .registry
            .get(&d.callee)
            .map(|p| p.boundaries.ask.clone())
            .unwrap_or_default();
        let approver: Option<Arc<dyn Approver>> = match SessionId::new(origin) {
            Ok(origin_id) => match self.open(&origin_id).await {
                Ok(origin) => Some(Arc::new(origin.broker().for_agent(callee_ask))),
                Err(_) => None,
            },
            Err(_) => None,
        };
        let mut options = PromptOptions::from(Caller::Peer {
            agent_id: d.caller.clone(),
        });
        options.turn_instruction = Some(PEER_REQUEST_RULE.to_owned());
        options.extensions = Extensions::new().with(d.chain);
        options.approver = approver;
        options.parent_turn = Some(d.caller_turn).filter(|t| !t.is_empty());
        options.parent_usage = d.usage;
        match peer.prompt_with(d.request, options).await {
            Ok(outcome) if outcome.final_message.stop_reason == jarvis_agent::StopReason::Error => {
                Err(failed(
                    outcome
                        .error
                        .map(|e| e.to_string())
                        .unwrap_or_else(|| "the model failed".into()),
                ))
            }
            Ok(outcome) if outcome.final_message.content.trim().is_empty() => {
                Err(failed("it gave no answer".into()))
            }
            Ok(outcome) => Ok(outcome.final_message.content),
            Err(TurnError::Busy(_)) => Err(DelegationError::Busy {
                caller: d.caller,
                callee: d.callee,
            }),
            Err(error) => Err(failed(error.to_string())),
        }
    }
}

/// What a cassette must never hold: the configured API key.
fn secrets(config: &AppConfig) -> Arc<[String]> {
    #[cfg(feature = "http")]
    let secrets: Vec<String> = config.llm.api_key.iter().map(|k| k.expose().to_owned()).collect();
    #[cfg(not(feature = "http"))]
    let secrets: Vec<String> = {
        let _ = config;
        Vec::new()
    };
    secrets.into()
}
