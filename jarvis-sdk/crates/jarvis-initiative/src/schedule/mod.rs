//! The scheduler (SPEC.md §11.4, §17.1 #13): jobs that run on their own at
//! set times, each as its agent (R-SCHED-1).
//!
//! - [`job`](Job): the job files `$JARVIS_HOME/schedules/*.yaml` (format in
//!   docs/initiative.md, "Schedules") and [`JobSpec`] for new ones;
//! - [`Trigger`]: cron, interval or one-shot, in the job's
//!   [`TimeZone`](jarvis_common::TimeZone) (an IANA zone or a fixed
//!   offset), yielding discrete slots; [`CronExpr`] is the cron part, and
//!   its documentation gives the daylight-saving rules (a daily time in a
//!   spring-forward gap runs at the first instant after the gap, one in a
//!   fall-back repeat at its first occurrence; `every` counts absolute
//!   time);
//! - the run ledger `$JARVIS_HOME/schedule_runs.jsonl` ([`RunRecord`]): a
//!   slot with any record never starts again, also across a crash;
//! - [`Scheduler`]: the catch-up rule, [`Scheduler::tick`] (deterministic
//!   on the injected clock) and the background driver
//!   ([`Scheduler::spawn`]); file jobs run through the app's [`JobRunner`],
//!   jobs defined in code implement [`BuiltinJob`];
//! - [`parse_when`]: the `<when>` of `/schedule <when> <prompt>` (R-SCHED-2).

mod cron;
mod error;
mod job;
mod ledger;
mod scheduler;
mod trigger;
mod when;

pub use cron::CronExpr;
pub use error::ScheduleError;
pub use job::{
    CatchUp, DEFAULT_JOB_AGENT, Job, JobOrigin, JobSpec, MAX_JOB_FILE_BYTES, MAX_JOB_ID_LEN, SCHEDULES_DIR,
    validate_job_id,
};
pub use ledger::{LastRun, LedgerLoad, RunRecord, RunState, SCHEDULE_RUNS_FILE};
pub use scheduler::{
    BrokenFile, BuiltinJob, DEFAULT_GRACE, DEFAULT_POLL_INTERVAL, JobInfo, JobOutput, JobRunner,
    MAX_SKIPPED_RECORDS, RunOutcome, RunReport, ScheduleTick, Scheduler, SchedulerConfig, SharedJobs,
    SlotClaim, SlotRef,
};
pub use trigger::{MAX_INTERVAL, MIN_INTERVAL, Trigger};
pub use when::{WHEN_FORMS, When, parse_when};
