//! The core layer: `AgentSession` directs one turn (security pipeline →
//! thinking → harness → loop); the input [`security`] pipeline, the real
//! tool-gate stages (the per-agent [`AgentToolPolicy`] and the per-session
//! [`ApprovalBroker`] with layered rules) live here, and so do the tools
//! that read the web (`web_fetch`, `web_search`).
//!
//! It sits above `agent` and below `app`: it may use `agent`, `memory`,
//! `model` and `common`, never `app`. The per-session [`Sandbox`] and the
//! built-in tools ([`builtin_tools`]) live here too, and so do the memory
//! tools every agent gets ([`memory_tools`]). The [`schedule`] module is the
//! scheduler: job files, the run ledger, the catch-up rule and the jobs
//! defined in code. The [`UsageLedger`] keeps every turn's tokens and cost.

mod agenda;
pub(crate) mod approval;
mod ask;
pub mod cassette;
mod commands;
mod focus;
mod goals;
mod mcp;
mod memory_tools;
mod notify;
mod outbox;
mod proactive;
mod sandbox;
pub(crate) mod schedule;
pub(crate) mod security;
mod session;
#[cfg(feature = "sources")]
mod sources;
pub(crate) mod supervise;
mod tool_policy;
mod tools;
mod usage;

pub use agenda::{AgendaItem, AgendaKind, AgendaSource};
pub use approval::{
    AgentApprover, ApprovalBroker, ApprovalError, ApprovalRule, Attachment, DEFAULT_APPROVAL_TIMEOUT,
    LayeredApprovalRules, RuleDecision, RuleSource, SharedRuleStore,
};
pub use ask::{
    AgentDirectory, AskAgentArgs, AskAgentTool, DEFAULT_ASK_TIMEOUT, Delegation, DelegationChain,
    DelegationError, DirectoryLink, MAX_CHAIN, PEER_REQUEST_RULE, RosterEntry, bigram_jaccard, is_bounce,
};
pub use commands::{
    COMMANDS, CommandContext, ScheduleCommand, SlashCommands, StandardCommands, parse_command,
};
pub use focus::{
    END_FOCUS_TOOL, FOCUS_DIR, FOCUS_NOTE_TOOL, FOCUS_STEP_TOOL, FocusChange, FocusError, FocusNoteKind,
    FocusStep, FocusStore, FocusTask, MAX_FOCUS_STEPS, MAX_FOCUS_TEXT_CHARS, START_FOCUS_TOOL, focus_tools,
};
pub use goals::{
    CLOSE_GOAL_TOOL, GOALS_DIR, Goal, GoalError, GoalNote, GoalPatch, GoalStatus, GoalStore,
    MAX_GOAL_TEXT_CHARS, MAX_GOAL_TITLE_CHARS, SET_GOAL_TOOL, UPDATE_GOAL_TOOL, goal_command, goal_items,
    goal_reminder_id, goal_reminder_text, goal_tools, parse_due,
};
pub use mcp::{
    DEFAULT_MCP_CALL_TIMEOUT, MAX_TOOL_NAME, MCP_CONFIG_FILE, McpApproval, McpServerConfig, McpTransport,
    assign_tool_names, is_mcp_name, load_mcp_file, mcp_tool_name, parse_agent_servers, parse_mcp_file,
    pattern_matches, valid_server_name,
};
#[cfg(feature = "mcp")]
pub use mcp::{
    MCP_FIRST_BACKOFF, MCP_MAX_BACKOFF, MCP_START_TIMEOUT, McpHub, McpServeError, McpServer, McpServerState,
    McpServerStatus, McpTool, McpToolInfo, bridge_mcp_stdio,
};
pub use memory_tools::{
    RECALL_EPISODES_TOOL, REMEMBER_TASK_PATTERN_TOOL, memory_tools, register_memory_tools,
};
pub use notify::{
    ChannelConfig, ChannelKind, NOTIFICATIONS_FILE, NOTIFY_OUTBOX_FILE, Notification, Notifier, NotifyReport,
    SmtpSettings, parse_notifications,
};
pub use outbox::{DEFAULT_OUTBOX_CAPACITY, OUTBOX_FILE, Outbox, OutboxError, OutboxItem};
pub use proactive::{
    AgentStance, CountingFeedback, FeedbackLearner, ProactiveConfig, ProactiveDaemon, ProactiveSessions,
    ProactiveSink, ProactiveTarget, Reaction, TickReport, reminder_id, reminder_text,
};
pub use sandbox::{
    DirEntryInfo, DirListing, EntryKind, FileContent, MAX_COMPONENT_LEN, MAX_PATH_LEN, Sandbox, SandboxError,
    validate_session_id,
};
pub use schedule::{
    BrokenFile, BuiltinJob, CatchUp, CronExpr, DEFAULT_GRACE, DEFAULT_JOB_AGENT, DEFAULT_POLL_INTERVAL, Job,
    JobInfo, JobOrigin, JobOutput, JobRunner, JobSpec, LastRun, LedgerLoad, MAX_INTERVAL, MAX_JOB_FILE_BYTES,
    MAX_JOB_ID_LEN, MAX_SKIPPED_RECORDS, MIN_INTERVAL, RunOutcome, RunRecord, RunReport, RunState,
    SCHEDULE_RUNS_FILE, SCHEDULES_DIR, ScheduleError, ScheduleTick, Scheduler, SchedulerConfig, SharedJobs,
    SlotClaim, SlotRef, Trigger, WHEN_FORMS, When, parse_when, validate_job_id,
};
pub use security::{
    Caller, SecurityError, SecurityInput, SecurityPipeline, SecurityStage, SessionPolicy, Slot, TokenAuth,
    Validation, ValidationConfig, html_escape,
};
pub use session::{
    AgentSession, AgentSessionParts, DualConfig, DualReply, PromptOptions, RECENT_TURNS, SessionAttachment,
    TurnError,
};
#[cfg(feature = "sources")]
pub use sources::{
    JsonShape, PageShape, SEEN_FILE, SOURCE_JOB_PREFIX, SOURCES_DIR, SeenStore, Source, SourceFile,
    SourceHealth, SourceItem, SourceJob, SourceKind, SourceReader, SourceReporter, SourceStatus, SourceType,
    load_sources,
};
pub use supervise::{Supervisor, TaskHealth, TaskStatus};
pub use tool_policy::{AgentToolPolicy, Boundaries};
pub use tools::{
    BuiltinConfig, Confinement, DEFAULT_COMMAND_TIMEOUT, DEFAULT_LIST_CAP, DEFAULT_OUTPUT_CAP,
    DEFAULT_READ_CAP, DEFAULT_WRITE_CAP, SandboxSettings, builtin_tools, kernel_confinement,
    register_builtin_tools,
};
pub use tools::{
    DEFAULT_SEARCH_RESULTS, DEFAULT_WEB_FETCH_MAX_BYTES, DEFAULT_WEB_FETCH_MAX_CHARS,
    DEFAULT_WEB_FETCH_MAX_REDIRECTS, DEFAULT_WEB_TIMEOUT, MAX_SEARCH_RESULTS, SearchProvider,
    WEB_FETCH_ALLOW_PRIVATE_ENV, WEB_FETCH_TOOL, WEB_SEARCH_API_KEY_ENV, WEB_SEARCH_BASE_URL_ENV,
    WEB_SEARCH_PROVIDER_ENV, WEB_SEARCH_TOOL, WebFetchSettings, WebSearchSettings, non_public_address_kind,
};
#[cfg(feature = "http")]
pub use tools::{WebFetchArgs, WebFetchTool, WebSearchArgs, WebSearchTool, web_fetch_tool, web_search_tool};
pub use usage::{Spent, USAGE_FILE, UsageBy, UsageError, UsageLedger, UsageMeter, UsageRow, UsageSummary};
