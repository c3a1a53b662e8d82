//! [`build_app`] (the infrastructure builder, R-ASM-1/2) and [`AppAssembly`]:
//! the one assembly result every screen receives (R-GOAL-1, R-ASM-7/8).
//! Sessions are built here (the session builder, R-ASM-4) and nowhere else.

use async_trait::async_trait;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use tokio_util::sync::CancellationToken;

mod initiative;
mod recovery;
mod sessions;
mod stores;
mod team;
mod tools;

use initiative::{AgendaLink, AppJobs, BriefLink, OpenSessions, notifier_for, open_loops, scheduler_for};
use sessions::Loaded;
use stores::{HomeStores, Learners, home_stores, learners_for, session_store};
use team::team_registry;
#[cfg(feature = "mcp")]
pub use tools::MCP_START_WAIT;
use tools::{app_tools, mcp_servers, pack_parts, register, sandboxed_tools, warn_about_confinement};

use super::config::{AppConfig, MemoryBackend, StoreBackend};
use super::definition::{TeamContext, apply_main_definition, load_team, parse_definition, seed_team_dir};
use super::embedder::EmbedderChoice;
use super::error::AppError;
use super::pack::PackParts;
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
    let stores = session_store(&config, &lock).await?;
    let store = stores.store.clone();
    seed_home(&config)?;
    let HomeStores {
        memory,
        loops,
        journal,
        pending_turns,
        sub_sessions,
        outbox,
        usage,
        focus,
        goals,
    } = home_stores(
        &config,
        &store,
        embedder.as_ref().map(|chosen| chosen.embedder.clone()),
    )
    .await?;

    // The scheduler runs jobs through the app, and packs' jobs report to its
    // daemon; both reach the app through a link set once it exists.
    let app_link: Arc<OnceLock<Weak<AppInner>>> = Arc::default();
    let env = |name: &str| std::env::var(name).ok();
    let mut packs = pack_parts(&config, &app_link, &env)?;
    warn_about_confinement(&config);
    let mut tools = app_tools(&config, std::mem::take(&mut packs.tools), &goals, &focus)?;
    let registry = team_registry(&config, &tools, memory.is_some(), &env);
    let notifier = notifier_for(&config, &registry)?;
    let sandboxed = sandboxed_tools(&config, &registry);
    let learners = match &memory {
        Some(service) => Some(memory_parts(&config, &provider, service, &registry, &mut tools)?),
        None => None,
    };
    #[cfg_attr(not(feature = "mcp"), allow(unused_variables))]
    let mcp = mcp_servers(&config, &registry, &env).await;
    let link = DirectoryLink::new();
    if registry.agents().len() >= 2 {
        let ask = AskAgentTool::new(link.clone(), &registry.roster()).with_timeout(config.ask_timeout);
        register(&mut tools, Arc::new(Typed::new(ask)))?;
    }
    let security = security_pipeline(&config, &registry);
    let reminders = config
        .agenda
        .open_loops
        .then(|| Arc::new(open_loops(&config, loops.clone(), Arc::new(RuleJudge))));
    let jobs = scheduler_for(&config, &app_link, packs, &stores, &registry)?;
    let inner = Arc::new_cyclic(|me: &Weak<AppInner>| AppInner {
        #[cfg(feature = "sources")]
        source_status: jobs.source_status,
        scheduler: {
            let _ = app_link.set(me.clone());
            Arc::new(jobs.scheduler)
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
        rules: Arc::new(jobs.rules),
        demo: config.is_demo(),
        notice: if config.provider.is_some() {
            None
        } else {
            config.llm.notice.clone()
        },
        config,
        registry,
        store,
        cluster: stores.cluster,
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

/// Writes what a home starts with and people may edit: the team directory
/// with the packs' team files (when the config seeds it) and the thinking
/// and reflection templates. What exists is left as it is.
fn seed_home(config: &AppConfig) -> Result<(), AppError> {
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
    )
}

/// The input pipeline every session of the app shares: the configured
/// validation and policy stages (or the defaults) around the token check.
fn security_pipeline(config: &AppConfig, registry: &AgentRegistry) -> SecurityPipeline {
    let auth = TokenAuth::new(config.web_token.clone()).with_agents(registry.ids().map(str::to_owned));
    SecurityPipeline::new(
        config
            .validation
            .clone()
            .unwrap_or_else(|| Arc::new(Validation::default())),
        Arc::new(auth),
        config.policy.clone().unwrap_or_else(|| Arc::new(SessionPolicy)),
    )
}

/// The memory tools every agent gets, registered in `tools`, and the
/// learners that run after turns.
fn memory_parts(
    config: &AppConfig,
    provider: &Arc<dyn Provider>,
    service: &Arc<MemoryService>,
    registry: &AgentRegistry,
    tools: &mut ToolRegistry,
) -> Result<Learners, AppError> {
    let scopes: Arc<dyn ScopeResolver> = Arc::new(
        registry
            .agents()
            .iter()
            .fold(StaticScopes::new(&config.memory.user), |s, p| {
                s.with_read(&p.id, p.memory_read.clone())
            }),
    );
    for tool in memory_tools(service.clone(), scopes.clone()) {
        register(tools, tool)?;
    }
    Ok(learners_for(config, provider, service, scopes))
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
