//! [`AppConfig`]: everything `build_app` needs, read from the environment
//! (DESIGN.md §5) or set in code by an embedding app.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::error::AppError;
use jarvis_agent::{AgentLoopConfig, BeforeToolCall, Durability};
use jarvis_common::{Clock, IdSource, OffsetClock, SystemClock, TimeZone, Timestamp, UniqueIds, UtcOffset};
use jarvis_memory::{DEFAULT_USER, MemoryConfig, MemoryStore};
use jarvis_model::{EmbedConfig, Embedder, LlmConfig, Provider, ProviderKind};
use jarvis_turn::{
    DEFAULT_APPROVAL_TIMEOUT, DEFAULT_ASK_TIMEOUT, SandboxSettings, SecurityStage, WebFetchSettings,
    WebSearchSettings,
};

/// JARVIS's brand (`JARVIS_BRAND__*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrandConfig {
    /// The wordmark (`JARVIS_BRAND__NAME`).
    pub name: String,
    /// The quote line (`JARVIS_BRAND__QUOTE`).
    pub quote: String,
    /// The main colour (`JARVIS_BRAND__PRIMARY`).
    pub primary: String,
    /// The accent colour (`JARVIS_BRAND__ACCENT`).
    pub accent: String,
}

impl Default for BrandConfig {
    fn default() -> Self {
        Self {
            name: "J.A.R.V.I.S.".into(),
            quote: "Just A Rather Very Intelligent System".into(),
            primary: "#5fc8e2".into(),
            accent: "#ffd166".into(),
        }
    }
}

/// The default system prompt of JARVIS.
pub const JARVIS_SYSTEM_PROMPT: &str = "당신은 J.A.R.V.I.S. 입니다. 사용자의 기본 대화 상대이자 팀 총괄입니다. \
간결하고 정확하게 답하고, 다른 에이전트의 전문 분야에 속하는 일은 ask_agent 로 맡긴 뒤 그 답을 사용자에게 전합니다. \
(You are J.A.R.V.I.S., the person's default companion and the team lead. Answer briefly and exactly; hand \
work in another agent's field to it with ask_agent and relay its answer.)";

/// Where sessions are kept (`JARVIS_STORE__BACKEND`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreBackend {
    /// `$JARVIS_HOME/sessions/` (default).
    Jsonl,
    /// A Postgres database (`JARVIS_STORE__POSTGRES_URL`; feature `postgres`).
    Postgres {
        /// The connection string.
        url: String,
    },
    /// Nothing kept: sessions live as long as the app (embedding, tests).
    Memory,
}

/// This process as a node of a deployment: several `jarvis` processes on
/// one Postgres, each session owned by one node at a time through a lease
/// (`jarvis_sdk::agent::lease`, feature `postgres`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeSettings {
    /// The node's name (`JARVIS_NODE__ID`); `None` is the host name plus
    /// the pid.
    pub id: Option<String>,
    /// How long a node's sessions stay its own after its last heartbeat
    /// (`JARVIS_NODE__LEASE_SECS`, default 5 s; decimals allowed, at least
    /// 0.3).
    pub lease: Duration,
}

impl Default for NodeSettings {
    fn default() -> Self {
        Self {
            id: None,
            lease: Duration::from_secs(5),
        }
    }
}

/// Where memory is kept (`JARVIS_MEMORY__STORE`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum MemoryBackend {
    /// `auto` (the default): Postgres when sessions are in Postgres
    /// (`JARVIS_STORE__BACKEND=postgres`, same database), SQLite otherwise.
    #[default]
    Auto,
    /// `sqlite`: `$JARVIS_HOME/memory.sqlite3` (`SqliteMemoryStore`, feature
    /// `sqlite`); survives restarts and `SIGKILL`.
    Sqlite,
    /// `memory`: in the process (`InMemoryMemoryStore`), gone when it ends;
    /// for tests and for people who want no memory on disk.
    Memory,
    /// `postgres`: `PostgresMemoryStore` in the database at `url`
    /// (`JARVIS_STORE__POSTGRES_URL`; feature `postgres`).
    Postgres {
        /// The connection string.
        url: String,
    },
}

/// Memory settings of an app (SPEC.md §8).
#[derive(Clone)]
#[non_exhaustive]
pub struct MemorySettings {
    /// Whether agents have memory (`JARVIS_MEMORY__ENABLED`, default on):
    /// recall before every turn, a turn episode after it, and the memory
    /// tools. Off, only the last three turns reach the model.
    pub enabled: bool,
    /// The person whose memory this app keeps.
    pub user: String,
    /// Where memory is kept when no `store` is given
    /// (`JARVIS_MEMORY__STORE`, default [`MemoryBackend::Auto`]).
    pub backend: MemoryBackend,
    /// A store of the embedding app's own; it wins over `backend`.
    pub store: Option<Arc<dyn MemoryStore>>,
    /// An embedder of the embedding app's own; it wins over `embed`.
    pub embedder: Option<Arc<dyn Embedder>>,
    /// The embedder of recall (`JARVIS_EMBED__*`): default the offline
    /// `HashEmbedder`; `build_app` records the one it uses in
    /// `$JARVIS_HOME/embedder.json`.
    pub embed: EmbedConfig,
    /// Budgets, recall sizes and weights; `home` is set to `JARVIS_HOME`.
    pub config: MemoryConfig,
}

impl Default for MemorySettings {
    fn default() -> Self {
        Self {
            enabled: true,
            user: DEFAULT_USER.to_owned(),
            backend: MemoryBackend::Auto,
            store: None,
            embedder: None,
            embed: EmbedConfig::default(),
            config: MemoryConfig::default(),
        }
    }
}

impl std::fmt::Debug for MemorySettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemorySettings")
            .field("enabled", &self.enabled)
            .field("user", &self.user)
            .field("backend", &self.backend)
            .field("store", &self.store.as_ref().map(|_| "<custom>"))
            .field("embedder", &self.embedder.as_ref().map(|e| e.name()))
            .field("embed", &self.embed)
            .finish_non_exhaustive()
    }
}

/// The AGENDA's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AgendaSettings {
    /// Whether promises are detected after turns (default on).
    pub open_loops: bool,
    /// Whether the agent's model judges messages that have a cue, with the
    /// rules as fallback (`JARVIS_AGENDA__MODEL_JUDGE`, default on); off,
    /// the rules alone judge and no call is made.
    pub model_judge: bool,
    /// The person's time zone, for "tomorrow at 9", the AGENDA's times,
    /// usage by day, daily budgets and schedules: `JARVIS_TIME__ZONE` (an
    /// IANA name), else `JARVIS_TIME__UTC_OFFSET` (a fixed offset), else
    /// `Asia/Seoul` (the product speaks Korean first). Never the system's
    /// zone.
    pub time_zone: TimeZone,
}

impl Default for AgendaSettings {
    fn default() -> Self {
        Self {
            open_loops: true,
            model_judge: true,
            time_zone: TimeZone::seoul(),
        }
    }
}

/// The reflection daemon's settings: whether agents speak first at all,
/// and how often (SPEC.md §11.5, R-REFL-1).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ReflectionSettings {
    /// Whether the daemon runs when the app's background work is started
    /// (`JARVIS_REFLECTION__ENABLED`, default on). Agents whose definition
    /// says `proactive: false` stay quiet either way.
    pub enabled: bool,
    /// Tick interval (`JARVIS_REFLECTION__INTERVAL_SECS`), gap between two
    /// messages to one session (`JARVIS_REFLECTION__MIN_GAP_SECS`) and when
    /// an unanswered message counts as ignored.
    pub daemon: jarvis_initiative::ProactiveConfig,
}

impl Default for ReflectionSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            daemon: jarvis_initiative::ProactiveConfig::default(),
        }
    }
}

/// Reads `+09:00`, `-05:30`, `+9`, `Z` or `UTC` as minutes east of UTC
/// ([`UtcOffset::parse`]).
pub fn parse_utc_offset(text: &str) -> Option<i32> {
    UtcOffset::parse(text).ok().map(UtcOffset::minutes)
}

/// How many sessions an app holds in memory by default.
pub const DEFAULT_MAX_LOADED_SESSIONS: usize = 10_000;

/// Settings of one app.
#[derive(Clone)]
#[non_exhaustive]
pub struct AppConfig {
    /// `JARVIS_HOME` (default `~/.jarvis`).
    pub home: PathBuf,
    /// `JARVIS_TEAM__DIR` (default `$JARVIS_HOME/team`).
    pub team_dir: PathBuf,
    /// Create a missing team directory with the built-in team (default on).
    pub seed_team: bool,
    /// Definitions given in code, as `(id, yaml)`; they replace a file of
    /// the same id and follow the same rules.
    pub definitions: Vec<(String, String)>,
    /// The model.
    pub llm: LlmConfig,
    /// A provider to use instead of the one `llm` describes (embedding apps, tests).
    pub provider: Option<Arc<dyn Provider>>,
    /// JARVIS's brand.
    pub brand: BrandConfig,
    /// JARVIS's system prompt.
    pub system_prompt: String,
    /// Whether JARVIS (and agents that do not say) speak first.
    pub proactive: bool,
    /// Thinking settings, shared by every agent. On when read from the
    /// environment (`JARVIS_THINKING__ENABLED`, default `1`); off in
    /// [`AppConfig::for_home`] and [`AppConfig::embedded`].
    pub thinking: super::profile::ThinkingSettings,
    /// The budget of every agent whose definition sets none of a limit
    /// (`JARVIS_BUDGET__TURN_TOKENS`, `__SESSION_TOKENS`, `__DAY_TOKENS`,
    /// `__TURN_USD`, `__SESSION_USD`, `__DAY_USD`; all unset, unlimited, by
    /// default).
    pub budget: jarvis_agent::Budget,
    /// The dual channel of people's sessions.
    pub dual: jarvis_turn::DualConfig,
    /// Where sessions (and, with Postgres, memory) are kept.
    pub store: StoreBackend,
    /// This process as a node of a deployment sharing one Postgres
    /// (used with [`StoreBackend::Postgres`]).
    pub node: NodeSettings,
    /// Memory.
    pub memory: MemorySettings,
    /// The AGENDA: open loops and the person's time zone.
    pub agenda: AgendaSettings,
    /// The reflection daemon (proactive messages).
    pub reflection: ReflectionSettings,
    /// Whether every session records a cassette from its start
    /// (`JARVIS_RECORD__ENABLED`, default off; see [`jarvis_turn::cassette`]).
    /// One session is switched with [`AppAssembly::set_recording`](crate::AppAssembly::set_recording).
    pub record: bool,

    /// When the JSONL store `fsync`s (`JARVIS_STORE__FSYNC`: `end_of_turn`,
    /// the default, or `never`).
    pub durability: Durability,
    /// `JARVIS_WEB__TOKEN`: web clients must present it when set.
    pub web_token: Option<String>,
    /// The loop's settings.
    pub loop_config: AgentLoopConfig,
    /// How long an approval request waits for a person, counted from when
    /// it was first asked, across restarts (`JARVIS_APPROVAL__TIMEOUT_SECS`,
    /// default 300); then it is denied.
    pub approval_timeout: Duration,
    /// How often the scheduler looks for due jobs
    /// (`JARVIS_SCHEDULE__POLL_SECS`, default 15 s; decimals allowed, 0.1
    /// to 3600). A slot runs at most this late.
    pub schedule_poll: Duration,
    /// How long a delegation may take.
    pub ask_timeout: Duration,
    /// At most this many sessions are held in memory
    /// (`JARVIS_WEB__MAX_LOADED_SESSIONS`, default 10,000): past it, the
    /// least recently used idle session is unloaded, and read again when it
    /// is next used. A session with a running turn, a pending approval or
    /// an attached screen is never unloaded.
    pub max_loaded_sessions: usize,
    /// The domain packs whose tools, jobs, source kinds and team files the
    /// app has ([`AppConfig::with_pack`]); none by default.
    pub packs: Vec<Arc<dyn super::Pack>>,
    /// How `web_fetch` reads pages: timeout, size caps, and whether it may
    /// reach private addresses (`JARVIS_WEB_FETCH__ALLOW_PRIVATE`, default
    /// off: loopback, private and link-local addresses are refused).
    pub web_fetch: WebFetchSettings,
    /// The backend of `web_search` (`JARVIS_WEB_SEARCH__PROVIDER`,
    /// `__BASE_URL`, `__API_KEY`); `None` (the default) offers no
    /// `web_search` tool.
    pub web_search: Option<WebSearchSettings>,
    /// What JARVIS's programs may reach beyond the session's sandbox
    /// (`JARVIS_SANDBOX__NETWORK`, `__READ`, `__WRITE`); other agents say
    /// it in their definitions.
    pub sandbox: SandboxSettings,
    /// Refuse to run programs the kernel cannot fully confine
    /// (`JARVIS_SANDBOX__REQUIRE=1`) instead of running them with a note.
    pub require_sandbox: bool,
    /// `before_tool_call` plugin hooks, in order, for every session.
    pub hooks: Vec<Arc<dyn BeforeToolCall>>,
    /// MCP servers given in code; they start beside those of
    /// `$JARVIS_HOME/mcp.yaml` and of the definitions (feature `mcp`).
    pub mcp_servers: Vec<jarvis_turn::McpServerConfig>,
    /// A validation stage to use instead of the standard one.
    pub validation: Option<Arc<dyn SecurityStage>>,
    /// A policy stage to use instead of the standard one.
    pub policy: Option<Arc<dyn SecurityStage>>,
    /// The clock.
    pub clock: Arc<dyn Clock>,
    /// Ids of new sessions and approval requests.
    pub ids: Arc<dyn IdSource>,
}

impl std::fmt::Debug for AppConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppConfig")
            .field("home", &self.home)
            .field("team_dir", &self.team_dir)
            .field("llm", &self.llm)
            .field("brand", &self.brand)
            .field("store", &self.store)
            .field("memory", &self.memory)
            .field("durability", &self.durability)
            .field("web_token", &self.web_token.as_ref().map(|_| "<redacted>"))
            .field("sandbox", &self.sandbox)
            .field("require_sandbox", &self.require_sandbox)
            .field("web_fetch", &self.web_fetch)
            .field("web_search", &self.web_search)
            .field("packs", &self.packs)
            .finish_non_exhaustive()
    }
}

impl AppConfig {
    /// Defaults under `home`: the offline demo model (no discovery of a
    /// local one), JSONL sessions, no packs.
    pub fn for_home(home: impl Into<PathBuf>) -> Self {
        let home = home.into();
        #[allow(unused_mut)] // only discovery (feature `http`) needs a change
        let mut llm =
            LlmConfig::from_lookup(|_| None).expect("an empty environment is a valid configuration");
        #[cfg(feature = "http")]
        {
            llm.discovery = None;
        }
        Self {
            team_dir: home.join("team"),
            seed_team: true,
            definitions: Vec::new(),
            llm,
            provider: None,
            brand: BrandConfig::default(),
            system_prompt: JARVIS_SYSTEM_PROMPT.to_owned(),
            proactive: true,
            thinking: super::profile::ThinkingSettings::default(),
            budget: jarvis_agent::Budget::default(),
            dual: jarvis_turn::DualConfig::default(),
            store: StoreBackend::Jsonl,
            node: NodeSettings::default(),
            memory: MemorySettings::default(),
            agenda: AgendaSettings::default(),
            reflection: ReflectionSettings::default(),
            record: false,

            durability: Durability::EndOfTurn,
            web_token: None,
            loop_config: AgentLoopConfig::default(),
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
            schedule_poll: jarvis_initiative::DEFAULT_POLL_INTERVAL,
            ask_timeout: DEFAULT_ASK_TIMEOUT,
            max_loaded_sessions: DEFAULT_MAX_LOADED_SESSIONS,
            packs: Vec::new(),
            web_fetch: WebFetchSettings::default(),
            web_search: None,
            sandbox: SandboxSettings::default(),
            require_sandbox: false,
            hooks: Vec::new(),
            mcp_servers: Vec::new(),
            validation: None,
            policy: None,
            clock: Arc::new(SystemClock),
            ids: Arc::new(UniqueIds::new()),
            home,
        }
    }

    /// Reads the process environment.
    pub fn from_env() -> Result<Self, AppError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads variables through `get`; empty values count as unset.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, AppError> {
        let var = |name: &str| get(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let home = match var("JARVIS_HOME") {
            Some(home) => PathBuf::from(home),
            None => match var("HOME") {
                Some(user_home) => Path::new(&user_home).join(".jarvis"),
                None => {
                    return Err(AppError::Config(
                        "set JARVIS_HOME (HOME is not set either)".into(),
                    ));
                }
            },
        };
        let mut config = Self::for_home(home);
        if let Some(dir) = var("JARVIS_TEAM__DIR") {
            config.team_dir = PathBuf::from(dir);
        }
        config.llm = LlmConfig::from_lookup(&get)?;
        let brand = &mut config.brand;
        for (name, field) in [
            ("JARVIS_BRAND__NAME", &mut brand.name),
            ("JARVIS_BRAND__QUOTE", &mut brand.quote),
            ("JARVIS_BRAND__PRIMARY", &mut brand.primary),
            ("JARVIS_BRAND__ACCENT", &mut brand.accent),
        ] {
            if let Some(value) = var(name) {
                *field = value;
            }
        }
        config.store = match var("JARVIS_STORE__BACKEND")
            .map(|b| b.to_ascii_lowercase())
            .as_deref()
        {
            None | Some("jsonl") => StoreBackend::Jsonl,
            Some("postgres") => StoreBackend::Postgres {
                url: var("JARVIS_STORE__POSTGRES_URL").ok_or_else(|| {
                    AppError::Config("JARVIS_STORE__BACKEND=postgres needs JARVIS_STORE__POSTGRES_URL".into())
                })?,
            },
            Some(other) => {
                return Err(AppError::Config(format!(
                    "JARVIS_STORE__BACKEND={other} is not a store; use jsonl or postgres"
                )));
            }
        };
        config.durability = match var("JARVIS_STORE__FSYNC")
            .map(|v| v.to_ascii_lowercase())
            .as_deref()
        {
            None | Some("end_of_turn") => Durability::EndOfTurn,
            Some("never") => Durability::Never,
            Some(other) => {
                return Err(AppError::Config(format!(
                    "JARVIS_STORE__FSYNC={other} is not a durability; use end_of_turn or never"
                )));
            }
        };
        config.web_token = var("JARVIS_WEB__TOKEN");
        if let Some(on) = var("JARVIS_SANDBOX__NETWORK") {
            config.sandbox.network = switch("JARVIS_SANDBOX__NETWORK", &on)?;
        }
        if let Some(paths) = var("JARVIS_SANDBOX__READ") {
            config.sandbox.read = SandboxSettings::parse_path_list(&paths);
        }
        if let Some(paths) = var("JARVIS_SANDBOX__WRITE") {
            config.sandbox.write = SandboxSettings::parse_path_list(&paths);
        }
        config
            .sandbox
            .validate()
            .map_err(|e| AppError::Config(format!("JARVIS_SANDBOX__*: {e}")))?;
        if let Some(on) = var("JARVIS_SANDBOX__REQUIRE") {
            config.require_sandbox = switch("JARVIS_SANDBOX__REQUIRE", &on)?;
        }
        config.web_fetch = WebFetchSettings::from_vars(&get).map_err(AppError::Config)?;
        config.web_search = WebSearchSettings::from_vars(&get).map_err(AppError::Config)?;
        if let Some(on) = var("JARVIS_MEMORY__ENABLED") {
            config.memory.enabled = truthy(&on);
        }
        config.memory.embed = EmbedConfig::from_lookup(&get)?;
        config.memory.backend = match var("JARVIS_MEMORY__STORE")
            .map(|b| b.to_ascii_lowercase())
            .as_deref()
        {
            None | Some("auto") => MemoryBackend::Auto,
            Some("sqlite") => MemoryBackend::Sqlite,
            Some("memory") => MemoryBackend::Memory,
            Some("postgres") => MemoryBackend::Postgres {
                url: var("JARVIS_STORE__POSTGRES_URL").ok_or_else(|| {
                    AppError::Config("JARVIS_MEMORY__STORE=postgres needs JARVIS_STORE__POSTGRES_URL".into())
                })?,
            },
            Some(other) => {
                return Err(AppError::Config(format!(
                    "JARVIS_MEMORY__STORE={other} is not a memory store; use auto, sqlite, memory or postgres"
                )));
            }
        };
        if let Some(on) = var("JARVIS_AGENDA__MODEL_JUDGE") {
            config.agenda.model_judge = truthy(&on);
        }
        if let Some(start) = var("JARVIS_CLOCK__START") {
            let start = Timestamp::parse_rfc3339(&start).map_err(|_| {
                AppError::Config(format!(
                    "JARVIS_CLOCK__START={start} is not an RFC 3339 time like 2026-03-01T09:00:00+09:00"
                ))
            })?;
            config.clock = Arc::new(OffsetClock::starting_at(start.to_system_time()));
        }
        if let Some(name) = var("JARVIS_TIME__ZONE") {
            config.agenda.time_zone = TimeZone::named(&name)
                .map_err(|e| AppError::Config(format!("JARVIS_TIME__ZONE={name}: {e}")))?;
        } else if let Some(offset) = var("JARVIS_TIME__UTC_OFFSET") {
            let offset = UtcOffset::parse(&offset).map_err(|_| {
                AppError::Config(format!(
                    "JARVIS_TIME__UTC_OFFSET={offset} is not an offset like +09:00"
                ))
            })?;
            config.agenda.time_zone = TimeZone::fixed(offset);
        }

        if let Some(on) = var("JARVIS_RECORD__ENABLED") {
            config.record = truthy(&on);
        }
        if let Some(on) = var("JARVIS_REFLECTION__ENABLED") {
            config.reflection.enabled = truthy(&on);
        }
        let seconds = |name: &str| -> Result<Option<Duration>, AppError> {
            var(name)
                .map(|text| {
                    text.trim().parse::<u64>().map(Duration::from_secs).map_err(|_| {
                        AppError::Config(format!("{name}={text} is not a whole number of seconds"))
                    })
                })
                .transpose()
        };
        if let Some(interval) = seconds("JARVIS_REFLECTION__INTERVAL_SECS")? {
            config.reflection.daemon.interval = interval.max(Duration::from_secs(1));
        }
        if let Some(gap) = seconds("JARVIS_REFLECTION__MIN_GAP_SECS")? {
            config.reflection.daemon.min_gap = gap;
        }
        if let Some(max) = var("JARVIS_WEB__MAX_LOADED_SESSIONS") {
            config.max_loaded_sessions = max.parse::<usize>().ok().filter(|n| *n >= 1).ok_or_else(|| {
                AppError::Config(format!(
                    "JARVIS_WEB__MAX_LOADED_SESSIONS={max} is not a whole number of sessions (at least 1)"
                ))
            })?;
        }
        if let Some(id) = var("JARVIS_NODE__ID") {
            let id = id.trim();
            if id.is_empty() || id.len() > 200 || id.chars().any(char::is_control) {
                return Err(AppError::Config(format!(
                    "JARVIS_NODE__ID={id:?} is not a node name (1 to 200 characters, no control characters)"
                )));
            }
            config.node.id = Some(id.to_owned());
        }
        // Seconds with decimals, from `min` to 3600.
        let decimal_seconds = |name: &str, what: &str, min: f64| -> Result<Option<Duration>, AppError> {
            var(name)
                .map(|text| {
                    text.parse::<f64>()
                        .ok()
                        .filter(|s| s.is_finite() && *s >= min && *s <= 3600.0)
                        .map(Duration::from_secs_f64)
                        .ok_or_else(|| {
                            AppError::Config(format!(
                                "{name}={text} is not {what} in seconds ({min} to 3600)"
                            ))
                        })
                })
                .transpose()
        };
        if let Some(lease) = decimal_seconds("JARVIS_NODE__LEASE_SECS", "a lease", 0.3)? {
            config.node.lease = lease;
        }
        if let Some(poll) = decimal_seconds("JARVIS_SCHEDULE__POLL_SECS", "an interval", 0.1)? {
            config.schedule_poll = poll;
        }
        if let Some(timeout) = seconds("JARVIS_APPROVAL__TIMEOUT_SECS")? {
            config.approval_timeout = timeout;
        }
        // 0 turns the time threshold off: only a thought frame sends a turn
        // to the background.
        if let Some(after) = seconds("JARVIS_DUAL__AFTER_SECS")? {
            config.dual.after = (!after.is_zero()).then_some(after);
        }

        // The app people run thinks before it answers; `for_home` and
        // `embedded` (embedders, tests) leave it off.
        config.thinking.enabled = true;
        if let Some(on) = var("JARVIS_THINKING__ENABLED") {
            config.thinking.enabled = truthy(&on);
        }
        if let Some(threshold) = var("JARVIS_THINKING__THRESHOLD") {
            config.thinking.threshold = threshold
                .parse::<f32>()
                .ok()
                .filter(|t| (0.0..=1.0).contains(t))
                .ok_or_else(|| {
                    AppError::Config(format!(
                        "JARVIS_THINKING__THRESHOLD={threshold} is not between 0 and 1"
                    ))
                })?;
        }
        for (name, field) in [
            (
                "JARVIS_THINKING__REFLECT_AFTER",
                &mut config.thinking.reflect_after,
            ),
            ("JARVIS_THINKING__DISTIL_EVERY", &mut config.thinking.distil_every),
        ] {
            if let Some(value) = var(name) {
                *field = value.parse::<usize>().map_err(|_| {
                    AppError::Config(format!("{name}={value} is not a whole number of turns"))
                })?;
            }
        }
        if let Some(on) = var("JARVIS_THINKING__LEARN_PROCEDURES") {
            config.thinking.learn_procedures = truthy(&on);
        }
        for key in jarvis_agent::Budget::KEYS {
            let name = format!("JARVIS_BUDGET__{}", key.to_ascii_uppercase());
            let Some(value) = var(&name) else { continue };
            let bad = || {
                AppError::Config(format!(
                    "{name}={value} is not a limit (a whole number of tokens, or dollars)"
                ))
            };
            let b = &mut config.budget;
            match key {
                "turn_tokens" | "session_tokens" | "day_tokens" => {
                    let n = value.trim().parse::<u64>().map_err(|_| bad())?;
                    *match key {
                        "turn_tokens" => &mut b.turn_tokens,
                        "session_tokens" => &mut b.session_tokens,
                        _ => &mut b.day_tokens,
                    } = Some(n);
                }
                _ => {
                    let usd = value
                        .trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|v| v.is_finite() && *v >= 0.0)
                        .ok_or_else(bad)?;
                    *match key {
                        "turn_usd" => &mut b.turn_usd,
                        "session_usd" => &mut b.session_usd,
                        _ => &mut b.day_usd,
                    } = Some(usd);
                }
            }
        }
        Ok(config)
    }

    /// Looks for a local model server when no provider is configured
    /// ([`LlmConfig::discover_local`]); when one is found, the demo ends.
    /// Returns whether a model was found.
    #[cfg(feature = "http")]
    pub async fn discover_local(&mut self) -> bool {
        if self.provider.is_some() || !self.llm.discover_local().await {
            return false;
        }
        true
    }

    /// Whether the built-in offline demo will play: no provider given in
    /// code, `faux` chosen (or nothing configured) and no script named.
    pub fn is_demo(&self) -> bool {
        self.provider.is_none() && self.llm.provider == ProviderKind::Faux && self.llm.faux_script.is_none()
    }

    /// Adds the domain pack `pack` (its tools, jobs, source kinds and team
    /// files); packs are built in the order they were added.
    pub fn with_pack(mut self, pack: Arc<dyn super::Pack>) -> Self {
        self.packs.push(pack);
        self
    }

    /// Uses `provider` instead of the configured model.
    pub fn with_provider(mut self, provider: Arc<dyn Provider>) -> Self {
        self.provider = Some(provider);
        self
    }

    /// An app embedded in another program: sessions and memory in the
    /// process (like its sessions, memory lives as long as the app; ask for
    /// [`MemoryBackend::Sqlite`] with [`AppConfig::with_memory_backend`] to
    /// keep it), no team directory (definitions come from
    /// [`AppConfig::with_definition`]), the offline demo model unless one
    /// is given; `home` still holds sandboxes, approval rules and the user
    /// model.
    pub fn embedded(home: impl Into<PathBuf>) -> Self {
        let mut config = Self::for_home(home);
        config.store = StoreBackend::Memory;
        config.memory.backend = MemoryBackend::Memory;
        config.seed_team = false;
        config.team_dir = config.home.join("team-none");
        config
    }

    /// Adds an MCP server given in code (see [`AppConfig::mcp_servers`]).
    pub fn with_mcp_server(mut self, server: jarvis_turn::McpServerConfig) -> Self {
        self.mcp_servers.push(server);
        self
    }

    /// Adds an agent definition given as YAML.
    pub fn with_definition(mut self, id: impl Into<String>, yaml: impl Into<String>) -> Self {
        self.definitions.push((id.into(), yaml.into()));
        self
    }

    /// Reads team definitions from `dir`.
    pub fn with_team_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.team_dir = dir.into();
        self
    }

    /// Keeps memory in `backend` (unless a store of its own is given with
    /// [`AppConfig::with_memory_store`], which wins).
    pub fn with_memory_backend(mut self, backend: MemoryBackend) -> Self {
        self.memory.backend = backend;
        self
    }

    /// Keeps memory in `store` (an embedding app's own backend); it wins
    /// over the configured [`MemoryBackend`].
    pub fn with_memory_store(mut self, store: Arc<dyn MemoryStore>) -> Self {
        self.memory.store = Some(store);
        self
    }

    /// Recalls with `embedder` instead of the one `JARVIS_EMBED__*` names
    /// (default the offline hash embedder).
    pub fn with_embedder(mut self, embedder: Arc<dyn Embedder>) -> Self {
        self.memory.embedder = Some(embedder);
        self
    }

    /// Turns memory off: no recall, no episodes, no memory tools.
    pub fn without_memory(mut self) -> Self {
        self.memory.enabled = false;
        self
    }
}

/// A security switch: `1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off`;
/// anything else is an error rather than a guess.
fn switch(name: &str, value: &str) -> Result<bool, AppError> {
    match value.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(AppError::Config(format!("{name}={value} is not 0 or 1"))),
    }
}

/// `1`, `true`, `yes` or `on`, in any case.
fn truthy(value: &str) -> bool {
    matches!(value.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on")
}
