//! # jarvis-sdk
//!
//! Build teams of personal AI agents: a lead agent (JARVIS) and top-level
//! agents such as KAREN, each with its own sessions, memory, tools, approval
//! rules and colour.
//!
//! The SDK is layered, bottom to top, one crate per layer (`jarvis-common`,
//! `jarvis-model`, `jarvis-memory`, `jarvis-agent`, `jarvis-core`,
//! `jarvis-app`), so a layer can only import the ones below it; this crate
//! re-exports their public names and holds the domain packs:
//!
//! | layer | owns |
//! |---|---|
//! | `common` | [`Clock`], [`IdSource`], [`Timestamp`], character-counted text, atomic file writes, the [`HomeLock`], [`Extensions`] |
//! | `model` | the [`Provider`] trait, [`ChatRequest`], [`ProviderEvent`], the shared [`ResponseAssembler`], the OpenAI-compatible, Anthropic and Ollama providers, [`FauxProvider`], the [`Embedder`] trait, the offline [`HashEmbedder`] and the embedder chosen from `JARVIS_EMBED__*` ([`EmbedConfig`]), token counts ([`Usage`], [`estimate_tokens`]) and the [`PriceTable`] |
//! | `memory` | [`MemoryService`] (working memory; semantic, episodic and procedural long-term memory; agent scopes; recall), the one injection point [`MemoryContext`], the [`MemoryStore`] trait with [`InMemoryMemoryStore`], `SqliteMemoryStore` and `PostgresMemoryStore` |
//! | `agent` | [`run_agent_loop`] with the overflow resume, [`AgentEvent`], [`UIAdapter`], [`Tool`], the tool-call gate ([`ToolGate`]), sessions ([`SessionStore`]: [`JsonlSessionStore`], [`MemorySessionStore`], `PostgresSessionStore`), the turn [`Harness`], the thinking slot ([`ThoughtEngine`]) and open loops ([`OpenLoops`]) |
//! | `core` | [`AgentSession`] (security → thinking → harness → loop), the [`SecurityPipeline`], the [`ApprovalBroker`] with [`LayeredApprovalRules`], the per-session [`Sandbox`] the [`builtin_tools`] and the [`memory_tools`], goals and Focus tasks, the [`Scheduler`], the [`UsageLedger`] of every turn's tokens and cost |
//! | `app` | [`AgentProfile`], team definitions, the [`AgentRegistry`], the [`Pack`] plug point, [`build_app`] and [`AppAssembly`] |
//! | `packs` | domain packs over the public API only, each behind its own feature |
//!
//! The plugin points are small object-safe traits held as `Arc<dyn …>`:
//! [`Provider`] (a model service), [`UIAdapter`] (a screen), [`Tool`],
//! the gate stages [`ToolPolicy`], [`BeforeToolCall`] and [`Approver`],
//! [`SecurityStage`], [`SessionStore`], and [`Embedder`] (texts to vectors
//! for memory recall).
//!
//! ## One turn, offline
//!
//! [`FauxProvider`] plays a script, so everything runs without a model:
//!
//! ```
//! use std::sync::Arc;
//! use jarvis_sdk::{
//!     AgentLoopConfig, FauxProvider, FinalTool, LoopContext, Message, StopReason, ToolRegistry,
//!     run_agent_loop,
//! };
//! use tokio_util::sync::CancellationToken;
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let faux = FauxProvider::from_yaml(r#"
//! replies:
//!   - tool_calls: [ { name: final, arguments: { answer: "42" } } ]
//! "#).unwrap();
//! let mut tools = ToolRegistry::new();
//! tools.register_typed(FinalTool).unwrap();
//! let ctx = LoopContext::new(Arc::new(faux)).with_tools(tools);
//! let outcome = run_agent_loop(
//!     &ctx,
//!     &AgentLoopConfig::default(),
//!     vec![Message::user("What is six times seven?")],
//!     &CancellationToken::new(),
//! )
//! .await
//! .unwrap();
//! assert_eq!(outcome.final_message.content, "42");
//! assert_eq!(outcome.final_message.stop_reason, StopReason::Final);
//! # });
//! ```
//!
//! ## Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `sqlite` | yes | `SqliteMemoryStore`: memory in `$JARVIS_HOME/memory.sqlite3` (SQLite compiled in), the assembled app's default |
//! | `postgres` | no | `PostgresSessionStore`, `PostgresMemoryStore` and `PostgresOpenLoopStore` (tokio-postgres with a deadpool pool) |
//! | `test-utils` | no | [`testing`]: a recording [`UIAdapter`], closure tools, a fixed approver, a throwaway Postgres cluster |
//! | `sources` | no | external sources watched on a schedule (`external_sources/*.yaml`: feeds, JSON, pages) |
//! | `email` | no | email notification channels (`notifications.yaml`, over SMTP with `lettre`) |
//! | one per pack | no | a domain pack under [`packs`], named like its folder ([`Pack`]) |
//! | `mcp` | no | tools from MCP servers (`McpHub`), the team as an MCP server (`McpTeamServer`, `serve_mcp_stdio`) and the stdio bridge to a running server's `/mcp` (`bridge_mcp_stdio`), over the official Rust SDK `rmcp` |
//!
//! The default build has no HTTP server, no terminal UI and no database
//! client: its one database is the SQLite library compiled into it.

use jarvis_agent as agent;
use jarvis_app as app;
use jarvis_common as common;
use jarvis_core as core;
use jarvis_memory as memory;
use jarvis_model as model;

pub mod packs;
#[cfg(any(test, feature = "test-utils"))]
pub mod testing;

pub use agent::{
    APPLIES_TO, DEFAULT_REFLECTION_TEMPLATE, DISTILL_INSTRUCTION, DISTILL_PROMPT, DistillConfig, Distiller,
    LearnError, ProcedureDraft, REFLECTION_INSTRUCTION, Reflection, ReflectionConfig, Reflector, parse_facts,
};
pub use agent::{
    AgentError, AgentEvent, AgentIdentity, AgentLoopConfig, AllowAll, Allowance, ApprovalDecision,
    ApprovalRequest, Approver, BeforeToolCall, Budget, BudgetReached, Durability, ENTRY_SCHEMA_VERSION,
    EntryBody, FINAL_TOOL_NAME, FanoutAdapter, FinalArgs, FinalMessage, FinalTool, FocusPhase,
    FocusStepState, FocusStepStatus, GateDecision, GateStage, GateVerdict, Harness, HarnessConfig,
    HubAttachment, JsonlOptions, JsonlSessionStore, LEGACY_AGENT_ID, LoadReport, LoopContext, LoopOutcome,
    MAX_AGENT_ID_LEN, MAX_SESSION_ID_LEN, MAX_TITLE_CHARS, MemorySessionStore, MessageDelta, ModelSettings,
    NewSession, NoThinking, NoopAdapter, ScreenHub, SessionEntry, SessionError, SessionId, SessionKind,
    SessionMeta, SessionStore, StopReason, SubOrigin, ThinkingHook, ThinkingInput, ThinkingOutcome, Tool,
    ToolCallInfo, ToolContext, ToolError, ToolGate, ToolPolicy, ToolRegistry, ToolResult, ToolSource,
    TurnBrief, Typed, TypedTool, UIAdapter, UsageTally, UsageTotal, prompts, run_agent_loop, schema_for,
    validate_agent_id,
};
#[cfg(feature = "postgres")]
pub use agent::{Claim, NodeOptions, PostgresOpenLoopStore, PostgresSessionStore, lease};
pub use agent::{
    DEFAULT_THINK_THRESHOLD, DEFAULT_THOUGHT_TEMPLATE, FRAME_INSTRUCTION, ProactiveKind, Route,
    RouteFeatures, RouterSignals, ThoughtConfig, ThoughtDecision, ThoughtEngine, ThoughtFrame, ThoughtRouter,
    TurnReport,
};
pub use agent::{
    Detected, JUDGE_INSTRUCTION, JsonlOpenLoopStore, JudgeInput, Judgement, LoopError, LoopFilter, LoopJudge,
    LoopKind, MemoryOpenLoopStore, ModelJudge, NewLoop, OPEN_LOOPS_FILE, OpenLoop, OpenLoopStore, OpenLoops,
    RuleJudge, cancels, detect, due_time, has_cue,
};
pub use agent::{
    INTERRUPTED_RESULT, JournalError, JournalStep, JournaledApproval, LoopState, PendingTurn,
    TURN_JOURNAL_FILE, TurnBegin, TurnJournal, TurnOptions, TurnRecorder, TurnTap, descendants,
};
pub use agent::{
    MAX_SANDBOX_COMPONENT_LEN, MAX_SANDBOX_PATH_LEN, PreparedCall, ResolvedProgram, SandboxPathError,
    normalize_sandbox_path, prepare_call,
};
pub use app::{
    ALWAYS_ATTACHED, AgendaSettings, AgentProfile, AgentRegistry, AppAssembly, AppConfig, AppError,
    BrandConfig, DEFAULT_MAX_LOADED_SESSIONS, EMBEDDER_FILE, EmbedderChoice, JARVIS_SYSTEM_PROMPT,
    MAIN_AGENT, MemoryBackend, MemorySettings, NodeSettings, Pack, PackContext, PackParts, Palette,
    REFLECTION_TEMPLATE_FILE, ReflectionSettings, SessionObserver, Skipped, StoreBackend,
    THOUGHT_TEMPLATE_FILE, TeamContext, ThinkingSettings, build_app, load_team, parse_definition,
    parse_utc_offset, seed_team_dir, valid_agent_id, wordmark,
};
#[cfg(feature = "mcp")]
pub use app::{
    ASK_TOOL_PREFIX, MCP_SHUTDOWN_GRACE, MCP_START_WAIT, McpConnection, McpTeamServer, serve_mcp_stdio,
};
pub use app::{
    CaseResult, EvalApprovals, EvalCase, EvalChecks, EvalError, EvalReport, EvalSuite, run_eval,
    run_eval_on_cassette,
};
pub use app::{ClusterLink, NodeMessage, SessionRoute};
pub use app::{
    DEFAULT_SUBAGENT_MAX_TURNS, MAIN_DEFINITION_KEYS, MAX_SUBAGENT_DEPTH, RUN_SUBAGENT_TOOL, RunSubagentArgs,
    RunSubagentTool, SubagentBuilder, SubagentDefinition, SubagentRuntime, SubagentSpec,
    apply_main_definition, last_sub_number,
};
pub use app::{Difference, ReplayAgainst, ReplayReport, TurnReplay, replay_cassette};
#[cfg(feature = "otel")]
pub use app::{
    OTLP_ENDPOINT_ENV, OTLP_TRACES_ENDPOINT_ENV, OtelError, OtelGuard, OtelLayer, otel_layer,
    otel_layer_from_env,
};
#[cfg(feature = "postgres")]
pub use app::{PgCluster, PostgresApprovalRules, PostgresJobs, PostgresSlotClaim};
pub use common::trace;
pub use common::{
    CivilTime, Clock, DEFAULT_TIME_ZONE, Extensions, HOME_LOCK_FILE, HomeLock, HomeLockError, IdSource,
    LockHolder, ManualClock, OffsetClock, SequentialIds, SystemClock, TimeZone, TimeZoneError, Timestamp,
    TimestampError, UniqueIds, UtcOffset, char_len, fnv1a64, lock_file_path, truncate_chars,
    truncate_with_marker, update_file_locked, write_atomic,
};
pub use core::cassette;
pub use core::{
    AgendaItem, AgendaKind, AgendaSource, AgentStance, COMMANDS, CommandContext, CountingFeedback,
    DEFAULT_OUTBOX_CAPACITY, FeedbackLearner, OUTBOX_FILE, Outbox, OutboxError, OutboxItem, ProactiveConfig,
    ProactiveDaemon, ProactiveSessions, ProactiveSink, ProactiveTarget, Reaction, ScheduleCommand,
    SlashCommands, StandardCommands, TickReport, parse_command, reminder_id, reminder_text,
};
pub use core::{
    AgentApprover, AgentDirectory, AgentSession, AgentSessionParts, AgentToolPolicy, ApprovalBroker,
    ApprovalError, ApprovalRule, AskAgentArgs, AskAgentTool, Attachment, Boundaries, Caller,
    DEFAULT_APPROVAL_TIMEOUT, DEFAULT_ASK_TIMEOUT, Delegation, DelegationChain, DelegationError,
    DirectoryLink, DualConfig, DualReply, LayeredApprovalRules, MAX_CHAIN, PEER_REQUEST_RULE, PromptOptions,
    RECENT_TURNS, RosterEntry, RuleDecision, RuleSource, SecurityError, SecurityInput, SecurityPipeline,
    SecurityStage, SessionAttachment, SessionPolicy, SharedRuleStore, Slot, Supervisor, TaskHealth,
    TaskStatus, TokenAuth, TurnError, Validation, ValidationConfig, bigram_jaccard, html_escape, is_bounce,
};
pub use core::{
    BrokenFile, BuiltinJob, CatchUp, CronExpr, DEFAULT_GRACE, DEFAULT_JOB_AGENT, DEFAULT_POLL_INTERVAL, Job,
    JobInfo, JobOrigin, JobOutput, JobRunner, JobSpec, LastRun, LedgerLoad, MAX_INTERVAL, MAX_JOB_FILE_BYTES,
    MAX_JOB_ID_LEN, MAX_SKIPPED_RECORDS, MIN_INTERVAL, RunOutcome, RunRecord, RunReport, RunState,
    SCHEDULE_RUNS_FILE, SCHEDULES_DIR, ScheduleError, ScheduleTick, Scheduler, SchedulerConfig, SharedJobs,
    SlotClaim, SlotRef, Trigger, WHEN_FORMS, When, parse_when, validate_job_id,
};
pub use core::{
    BuiltinConfig, Confinement, DEFAULT_COMMAND_TIMEOUT, DEFAULT_LIST_CAP, DEFAULT_OUTPUT_CAP,
    DEFAULT_READ_CAP, DEFAULT_WRITE_CAP, DirEntryInfo, DirListing, EntryKind, FileContent, MAX_COMPONENT_LEN,
    MAX_PATH_LEN, Sandbox, SandboxError, SandboxSettings, builtin_tools, kernel_confinement,
    register_builtin_tools, validate_session_id,
};
pub use core::{
    CLOSE_GOAL_TOOL, GOALS_DIR, Goal, GoalError, GoalNote, GoalPatch, GoalStatus, GoalStore,
    MAX_GOAL_TEXT_CHARS, MAX_GOAL_TITLE_CHARS, SET_GOAL_TOOL, UPDATE_GOAL_TOOL, goal_command, goal_items,
    goal_reminder_id, goal_reminder_text, goal_tools, parse_due,
};
pub use core::{
    ChannelConfig, ChannelKind, NOTIFICATIONS_FILE, NOTIFY_OUTBOX_FILE, Notification, Notifier, NotifyReport,
    SmtpSettings, parse_notifications,
};
pub use core::{
    DEFAULT_MCP_CALL_TIMEOUT, DEFAULT_SEARCH_RESULTS, DEFAULT_WEB_FETCH_MAX_BYTES,
    DEFAULT_WEB_FETCH_MAX_CHARS, DEFAULT_WEB_FETCH_MAX_REDIRECTS, DEFAULT_WEB_TIMEOUT, MAX_SEARCH_RESULTS,
    MAX_TOOL_NAME, MCP_CONFIG_FILE, McpApproval, McpServerConfig, McpTransport, SearchProvider,
    WEB_FETCH_ALLOW_PRIVATE_ENV, WEB_FETCH_TOOL, WEB_SEARCH_API_KEY_ENV, WEB_SEARCH_BASE_URL_ENV,
    WEB_SEARCH_PROVIDER_ENV, WEB_SEARCH_TOOL, WebFetchSettings, WebSearchSettings, assign_tool_names,
    is_mcp_name, load_mcp_file, mcp_tool_name, non_public_address_kind, parse_agent_servers, parse_mcp_file,
    pattern_matches, valid_server_name,
};
pub use core::{
    END_FOCUS_TOOL, FOCUS_DIR, FOCUS_NOTE_TOOL, FOCUS_STEP_TOOL, FocusChange, FocusError, FocusNoteKind,
    FocusStep, FocusStore, FocusTask, MAX_FOCUS_STEPS, MAX_FOCUS_TEXT_CHARS, START_FOCUS_TOOL, focus_tools,
};
#[cfg(feature = "sources")]
pub use core::{
    JsonShape, PageShape, SEEN_FILE, SOURCE_JOB_PREFIX, SOURCES_DIR, SeenStore, Source, SourceFile,
    SourceHealth, SourceItem, SourceJob, SourceKind, SourceReader, SourceReporter, SourceStatus, SourceType,
    load_sources,
};
#[cfg(feature = "mcp")]
pub use core::{
    MCP_FIRST_BACKOFF, MCP_MAX_BACKOFF, MCP_START_TIMEOUT, McpHub, McpServeError, McpServer, McpServerState,
    McpServerStatus, McpTool, McpToolInfo, bridge_mcp_stdio,
};
pub use core::{RECALL_EPISODES_TOOL, REMEMBER_TASK_PATTERN_TOOL, memory_tools, register_memory_tools};
pub use core::{Spent, USAGE_FILE, UsageBy, UsageError, UsageLedger, UsageMeter, UsageRow, UsageSummary};
#[cfg(feature = "http")]
pub use core::{WebFetchArgs, WebFetchTool, WebSearchArgs, WebSearchTool, web_fetch_tool, web_search_tool};
pub use memory::{
    Agents, AnnOptions, DEFAULT_USER, DEFAULT_WRITE_RULE, InMemoryMemoryStore, KIND_EPISODE, KIND_FACT,
    KIND_NOTE, KIND_PROCEDURE, KIND_TASK_PATTERN, KIND_USER_MODEL, LEGACY_PROCEDURE_AGENT, Layer,
    MAX_PROCEDURE_BYTES, MAX_PROCEDURE_NAME_CHARS, META_PREV, META_WHEN, MemoryConfig, MemoryContext,
    MemoryError, MemoryFilter, MemoryRead, MemoryRecord, MemoryScope, MemorySection, MemoryService,
    MemoryStore, PROCEDURES_DIR, Procedure, ProcedureLibrary, READ_SELF, RecallK, RecallWeights, Recalled,
    ReembedPhase, ReembedStatus, SOURCE_EPISODE_FACT, SOURCE_PROCEDURE, SOURCE_REMEMBER, SOURCE_TASK_PATTERN,
    SOURCE_TURN, SOURCE_USER_MODEL, ScopeResolver, SearchHit, SearchQuery, SectionBudgets, SectionKind,
    StaticScopes, TurnRecord, USER_MODEL_FILE, UserModel, UserModelFile, UserModelStore, WRITE_RULES,
    WorkingConfig, WorkingItem, WorkingMemory, WriteRule, last_turns, validate_procedure_name, write_rule,
};
pub use memory::{
    DistillMark, DistillReport, DistilledFact, ForgetReport, ForgottenSecret, MAX_FACT_VALUE_CHARS,
    MIN_FORGET_CHARS, contains_forgotten, episode_request, fact_digest, normalise_fact,
};
#[cfg(feature = "sqlite")]
pub use memory::{MEMORY_DB_FILE, SQLITE_SCHEMA_VERSION, SqliteMemoryStore, SqliteOpenReport};
#[cfg(feature = "postgres")]
pub use memory::{PostgresMemoryStore, PostgresUserModel};
#[cfg(feature = "anthropic")]
pub use model::{
    ANTHROPIC_BASE_URL, ANTHROPIC_VERSION, AnthropicConfig, AnthropicDecoder, AnthropicProvider,
};
#[cfg(feature = "http")]
pub use model::{
    ApiKey, HttpClient, HttpSettings, NdjsonError, NdjsonParser, RetryPolicy, Sleeper, SseError, SseEvent,
    SseParser, StreamDecoder, TokioSleeper, decode_chunks, join_url,
};
pub use model::{
    AssistantMessage, ChatRequest, DEMO_SCRIPT, EmbedRole, EmbedRoles, Embedder, EmbedderExt,
    FAUX_REQUEST_LOG_ENV, FAUX_SCRIPT_ENV, FauxError, FauxProvider, FauxReply, FauxRule, FauxScript,
    FauxToolCall, FauxWhen, FinishReason, HASH_EMBEDDER_DIMENSIONS, HashEmbedder, Message, ModelResponse,
    Provider, ProviderError, ProviderEvent, ProviderExt, ProviderStream, Purpose, RequestMetadata,
    ResponseAssembler, Role, ThinkingBlock, ToolCall, ToolChoice, ToolResultMessage, ToolSpec, Usage,
    UserMessage, cosine,
};
pub use model::{
    DEFAULT_ANTHROPIC_MODEL, DEFAULT_OLLAMA_MODEL, DEFAULT_OPENAI_MODEL, LlmConfig, ProviderKind,
};
#[cfg(feature = "http")]
pub use model::{
    DISCOVER_ENV, DISCOVERED_MAX_TOKENS, DISCOVERY_BUDGET, DiscoveryTarget, FoundModel, FoundServer,
    default_targets, discover_models, first_chat_model, first_embedding_model, parse_targets,
    pick_chat_model, pick_embedding_model,
};
pub use model::{
    EMBED_PROVIDER_ENV, EmbedConfig, EmbedProvider, OLLAMA_EMBED_BASE_URL, OLLAMA_EMBEDDING_MODEL,
    OPENAI_EMBEDDING_MODEL,
};
pub use model::{ModelPrice, PRICES_FILE, PriceError, PriceTable, estimate_tokens};
#[cfg(feature = "ollama")]
pub use model::{OLLAMA_BASE_URL, OllamaConfig, OllamaDecoder, OllamaProvider};
#[cfg(feature = "openai")]
pub use model::{OPENAI_BASE_URL, OpenAiConfig, OpenAiDecoder, OpenAiProvider};
#[cfg(feature = "ollama")]
pub use model::{OllamaEmbedder, OllamaEmbedderConfig};
#[cfg(feature = "openai")]
pub use model::{OpenAiEmbedder, OpenAiEmbedderConfig};

/// Re-exports the loop needs from outside crates, so users need not pin them.
pub use tokio_util::sync::CancellationToken;

/// The attribute for implementing [`Tool`], [`TypedTool`] and the gate traits.
pub use async_trait::async_trait;
