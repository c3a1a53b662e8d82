//! The initiative layer: what the team does on its own, around the turn
//! rather than inside it. The [`Scheduler`] (job files, the run ledger,
//! the catch-up rule, jobs defined in code), the [`ProactiveDaemon`]
//! (reminders, promises and goals that come due), the [`Outbox`] and the
//! [`Notifier`]'s channels (webhook, email, desktop), goals
//! ([`GoalStore`]), Focus tasks ([`FocusStore`]), the AGENDA
//! ([`AgendaSource`]), external sources (feature `sources`) and the
//! standard slash commands ([`StandardCommands`]).
//!
//! It sits above `turn` and below `app`: it reaches a turn only through
//! `turn`'s public types and traits ([`jarvis_turn::AgentSession`],
//! [`jarvis_turn::SlashCommands`], [`jarvis_turn::AnswerNotifier`]); the
//! turn pipeline never depends on it.

mod agenda;
mod commands;
mod focus;
mod goals;
mod notify;
mod outbox;
mod proactive;
mod schedule;
#[cfg(feature = "sources")]
mod sources;

pub use agenda::{AgendaItem, AgendaKind, AgendaSource};
pub use commands::{COMMANDS, ScheduleCommand, StandardCommands};
pub use focus::{
    END_FOCUS_TOOL, FOCUS_DIR, FOCUS_NOTE_TOOL, FOCUS_STEP_TOOL, FocusChange, FocusError, FocusNoteKind,
    FocusPanel, FocusPhase, FocusState, FocusStep, FocusStepState, FocusStepStatus, FocusStore, FocusTask,
    MAX_FOCUS_STEPS, MAX_FOCUS_TEXT_CHARS, START_FOCUS_TOOL, focus_tools,
};
pub use goals::{
    CLOSE_GOAL_TOOL, GOALS_DIR, Goal, GoalError, GoalNote, GoalPatch, GoalStatus, GoalStore,
    MAX_GOAL_TEXT_CHARS, MAX_GOAL_TITLE_CHARS, SET_GOAL_TOOL, UPDATE_GOAL_TOOL, goal_command, goal_items,
    goal_reminder_id, goal_reminder_text, goal_tools, parse_due,
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
pub use schedule::{
    BrokenFile, BuiltinJob, CatchUp, CronExpr, DEFAULT_GRACE, DEFAULT_JOB_AGENT, DEFAULT_POLL_INTERVAL, Job,
    JobInfo, JobOrigin, JobOutput, JobRunner, JobSpec, LastRun, LedgerLoad, MAX_INTERVAL, MAX_JOB_FILE_BYTES,
    MAX_JOB_ID_LEN, MAX_SKIPPED_RECORDS, MIN_INTERVAL, RunOutcome, RunRecord, RunReport, RunState,
    SCHEDULE_RUNS_FILE, SCHEDULES_DIR, ScheduleError, ScheduleTick, Scheduler, SchedulerConfig, SharedJobs,
    SlotClaim, SlotRef, Trigger, WHEN_FORMS, When, parse_when, validate_job_id,
};
#[cfg(feature = "sources")]
pub use sources::{
    JsonShape, PageShape, SEEN_FILE, SOURCE_JOB_PREFIX, SOURCES_DIR, SeenStore, Source, SourceFile,
    SourceHealth, SourceItem, SourceJob, SourceKind, SourceReader, SourceReporter, SourceStatus, SourceType,
    load_sources,
};
