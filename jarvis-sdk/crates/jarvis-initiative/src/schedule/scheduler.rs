//! [`Scheduler`]: loads the job files, decides on the injected [`Clock`]
//! which slots are due, records them in the run ledger and runs them through
//! a [`JobRunner`] (file jobs) or the job itself ([`BuiltinJob`]).
//!
//! Everything that decides happens in [`Scheduler::tick`], which a test
//! calls after moving a `ManualClock`; [`Scheduler::spawn`] is a thin
//! driver that calls the same code every few seconds.
//!
//! **Catch-up rule.** At every tick, for each enabled job, the slots due are
//! those after the job's last recorded slot and at or before now. A job
//! without records is first *registered* (its anchor is the moment the
//! scheduler first saw it, recorded in the ledger), so a brand-new job never
//! runs slots from before it existed; a job seen disabled and then enabled
//! is registered again, so its disabled time is not "missed", and so is a
//! job whose file now gives another trigger, or another time zone whose
//! offset at the job's next slot differs (`utc_offset: "+09:00"` edited to
//! `time_zone: Asia/Seoul` changes nothing and registers nothing). Of the due
//! slots, `catch_up: latest` runs the most recent once and records the
//! older ones `skipped`; `catch_up: skip` runs the most recent only if it is
//! within the grace window (default 2 minutes, so ordinary ticks are never
//! late) and records the rest `skipped`.

mod edit;
mod files;
mod plan;
mod run;

use async_trait::async_trait;
use futures::future::join_all;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use super::error::ScheduleError;
use super::job::{Job, JobOrigin, SCHEDULES_DIR};
use super::ledger::{LastRun, LedgerLoad, RunLedger, RunRecord, RunState};
use super::trigger::Trigger;
use files::{Stamp, read_stamp};
use jarvis_common::{Clock, TimeZone, Timestamp, UtcOffset};
use plan::plan;
use run::Exec;

/// How often the driver ticks by default.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(15);
/// How late a slot of a `catch_up: skip` job may still run, by default.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(120);
/// At most this many missed slots of one job are recorded `skipped` per
/// catch-up (the most recent ones).
// ponytail: older missed slots are not written one by one; the ledger only
// needs the latest slot to never run them.
pub const MAX_SKIPPED_RECORDS: usize = 20;

/// The scheduler's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// How often [`Scheduler::spawn`]'s driver ticks (default 15 s).
    pub poll_interval: Duration,
    /// How late a `catch_up: skip` slot may still run (default 2 minutes).
    pub grace: Duration,
    /// The time zone of jobs that name none, and of `/schedule` times
    /// (default the fixed `+09:00`: the product speaks Korean first, and
    /// Korea keeps one offset all year; the app passes the person's zone,
    /// `Asia/Seoul` unless configured).
    pub time_zone: TimeZone,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            poll_interval: DEFAULT_POLL_INTERVAL,
            grace: DEFAULT_GRACE,
            time_zone: TimeZone::fixed(UtcOffset::KST),
        }
    }
}

/// What a run produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobOutput {
    /// The session the answer landed in (recorded in the ledger), if any.
    pub session_id: Option<String>,
    /// The answer, or a summary of what the run did.
    pub text: String,
}

/// Runs a file job's prompt. The app implements it: it opens a session of
/// `job.agent` (that agent's model, system prompt and memory scope,
/// R-SCHED-1), runs `job.prompt` with `Caller::System`, and sends the
/// answer to open screens as `proactive_message {kind: "answer"}`.
///
/// An `Err` is recorded as `failed` and logged; it never stops the
/// scheduler. A run is never retried.
#[async_trait]
pub trait JobRunner: Send + Sync + fmt::Debug {
    /// Runs `job` for its slot `slot`.
    async fn run(&self, job: &Job, slot: Timestamp) -> Result<JobOutput, String>;
}

/// A job defined in code (an external source, a pack's watch): it has no
/// file, cannot be removed, and runs itself instead of going through the
/// [`JobRunner`]. It follows the same slots, ledger and catch-up rule as
/// file jobs.
#[async_trait]
pub trait BuiltinJob: Send + Sync + fmt::Debug {
    /// The job as lists show it (`origin` is [`JobOrigin::BuiltIn`]); its id
    /// is reserved: a file with the same id is refused.
    fn job(&self) -> Job;
    /// One run, for slot `slot`.
    async fn run(&self, slot: Timestamp) -> Result<JobOutput, String>;
    /// Called once at start, before the first run, with every proactive
    /// message the outbox still holds (queued before a stop or a crash, some
    /// of them delivered): a job that reports through the outbox and records
    /// what it reported afterwards finishes the records of its own messages
    /// here (recognised by their `meta`). The default does nothing.
    async fn recover(&self, _queued: &[crate::OutboxItem]) {}
}

/// A job file that could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokenFile {
    /// The file.
    pub path: PathBuf,
    /// Why it was skipped.
    pub reason: String,
}

/// A job and where it stands, for lists and the AGENDA (R-SCHED-3: the
/// agent shown is `job.agent`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    /// The job.
    pub job: Job,
    /// Its trigger in words.
    pub trigger: String,
    /// When it runs next: a slot still due now, or the next one; `None`
    /// when disabled or a finished one-shot.
    pub next_run: Option<Timestamp>,
    /// Its last ledger record.
    pub last_run: Option<LastRun>,
    /// Whether a run is in progress.
    pub running: bool,
}

/// A job's slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRef {
    /// The job's id.
    pub job: String,
    /// The slot.
    pub slot: Timestamp,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// It finished.
    Done(JobOutput),
    /// The runner (or the built-in job) returned an error, or panicked.
    Failed(String),
    /// It did not start: its `started` record could not be written.
    NotStarted(String),
    /// Another node of the deployment runs this slot ([`SlotClaim`]).
    RanElsewhere,
}

/// Decides, across the nodes of a deployment that each keep their own
/// ledger, which one runs a slot: each node asks before it runs, and only
/// the first gets `true`. A failure to ask means the slot is not run here
/// (at most once, as the ledger promises).
#[async_trait]
pub trait SlotClaim: Send + Sync + fmt::Debug {
    /// Claims `job`'s `slot` for this node: `Ok(true)` when no node had.
    async fn claim(&self, job: &str, slot: Timestamp) -> Result<bool, String>;
}

/// Jobs kept for a whole deployment rather than in one home's
/// `schedules/`: several nodes on one Postgres (the table `jarvis_jobs`),
/// where a job made with `/schedule` on one node must be due on all of
/// them (and each slot still runs once, through [`SlotClaim`]). Each job is
/// kept as the text [`Job::to_yaml`] writes.
#[async_trait]
pub trait SharedJobs: Send + Sync + fmt::Debug {
    /// Every job's text, in the order they were added.
    async fn load(&self) -> Result<Vec<String>, String>;
    /// Adds job `id`; `false` when a job with that id exists already.
    async fn insert(&self, id: &str, text: &str) -> Result<bool, String>;
    /// Removes job `id`; `false` when there was none.
    async fn remove(&self, id: &str) -> Result<bool, String>;
}

/// One run of a tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunReport {
    /// The job's id.
    pub job: String,
    /// The agent it ran as.
    pub agent: String,
    /// The slot.
    pub slot: Timestamp,
    /// How it ended.
    pub outcome: RunOutcome,
}

/// What one [`Scheduler::tick`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleTick {
    /// The clock's time the tick used.
    pub at: Timestamp,
    /// The runs it started, each finished.
    pub runs: Vec<RunReport>,
    /// Missed slots recorded `skipped`.
    pub skipped: Vec<SlotRef>,
    /// Jobs seen for the first time (or enabled again).
    pub registered: Vec<String>,
    /// Jobs due while their previous run is still going; they run later.
    pub busy: Vec<String>,
    /// Job files skipped, when the files were (re)read during this tick.
    pub broken_files: Vec<BrokenFile>,
}

#[derive(Default)]
struct State {
    stamp: Option<Stamp>,
    files: Vec<Job>,
    broken: Vec<BrokenFile>,
    /// The deployment's jobs as last read ([`SharedJobs`]).
    deployment: Vec<Job>,
    /// Each job as last seen: enabled, and when it is due. A job that
    /// disappears counts as disabled.
    seen: HashMap<String, Seen>,
}

/// What decides whether a job seen again is the same job for the ledger.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    enabled: bool,
    trigger: Trigger,
    time_zone: TimeZone,
}

impl Seen {
    fn of(job: &Job) -> Self {
        Self {
            enabled: job.enabled,
            trigger: job.trigger.clone(),
            time_zone: job.time_zone.clone(),
        }
    }

    /// Whether `self` (as seen before) and `now` (as seen at `at`) are the
    /// same job for the ledger: the same state and trigger, and a zone with
    /// the same offset at the job's next slot (so `+09:00` and `Asia/Seoul`
    /// are the same job today).
    fn same_job(&self, now: &Seen, at: Timestamp) -> bool {
        if self.enabled != now.enabled || self.trigger != now.trigger {
            return false;
        }
        if self.time_zone == now.time_zone {
            return true;
        }
        let next = now.trigger.next_after(at, &now.time_zone).unwrap_or(at);
        self.time_zone.offset_at(next) == now.time_zone.offset_at(next)
            && now.trigger.next_after(at, &self.time_zone) == now.trigger.next_after(at, &now.time_zone)
    }
}
/// The scheduler of one `$JARVIS_HOME`.
pub struct Scheduler {
    dir: PathBuf,
    clock: Arc<dyn Clock>,
    runner: Arc<dyn JobRunner>,
    config: SchedulerConfig,
    builtins: Vec<Arc<dyn BuiltinJob>>,
    ledger: Arc<RunLedger>,
    ledger_load: LedgerLoad,
    state: Mutex<State>,
    running: Arc<Mutex<HashSet<String>>>,
    /// Runs that failed.
    failed: Arc<std::sync::atomic::AtomicU64>,
    /// Which node of a deployment runs a slot; `None` alone.
    slots: Option<Arc<dyn SlotClaim>>,
    /// The deployment's jobs; `None` alone.
    shared: Option<Arc<dyn SharedJobs>>,
}
impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheduler")
            .field("dir", &self.dir)
            .field("config", &self.config)
            .field("builtins", &self.builtins)
            .finish_non_exhaustive()
    }
}

impl Scheduler {
    /// The scheduler of `home`: jobs in `home/schedules/*.yaml`, the ledger
    /// in `home/schedule_runs.jsonl` (read now; interrupted runs are logged
    /// and listed in [`Scheduler::ledger_load`]).
    pub fn new(
        home: impl AsRef<Path>,
        clock: Arc<dyn Clock>,
        runner: Arc<dyn JobRunner>,
        config: SchedulerConfig,
    ) -> Result<Self, ScheduleError> {
        let home = home.as_ref();
        let (ledger, ledger_load) = RunLedger::open(home)?;
        Ok(Self {
            dir: home.join(SCHEDULES_DIR),
            clock,
            runner,
            config,
            builtins: Vec::new(),
            ledger: Arc::new(ledger),
            ledger_load,
            state: Mutex::new(State::default()),
            running: Arc::new(Mutex::new(HashSet::new())),
            failed: Arc::default(),
            slots: None,
            shared: None,
        })
    }

    /// Also runs the deployment's jobs kept in `jobs` (read again before
    /// every tick), and makes `/schedule` add its jobs there rather than to
    /// this home's `schedules/` ([`Scheduler::add_shared_job`]).
    pub fn with_shared_jobs(mut self, jobs: Arc<dyn SharedJobs>) -> Self {
        self.shared = Some(jobs);
        self
    }

    /// Runs each slot only when `claim` grants it: one node of several
    /// sharing a database runs it; the others record it as `skipped`.
    pub fn with_slot_claim(mut self, claim: Arc<dyn SlotClaim>) -> Self {
        self.slots = Some(claim);
        self
    }

    /// Adds a job defined in code (such as a pack's job).
    pub fn with_builtin(mut self, job: Arc<dyn BuiltinJob>) -> Self {
        self.builtins.push(job);
        self
    }

    /// The jobs defined in code, in the order they were added.
    pub fn builtins(&self) -> &[Arc<dyn BuiltinJob>] {
        &self.builtins
    }

    /// The settings.
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// The directory of job files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What reading the ledger found at start: damaged lines and runs a
    /// crash interrupted (reported, not retried).
    pub fn ledger_load(&self) -> &LedgerLoad {
        &self.ledger_load
    }

    /// Runs everything due at the clock's time and waits for those runs.
    /// Runs of different jobs go concurrently.
    pub async fn tick(&self) -> ScheduleTick {
        self.pull_shared().await;
        let (mut report, runs) = self.begin();
        report.runs.extend(join_all(runs).await);
        report
    }

    /// Starts the background driver: every `poll_interval` (tokio time) it
    /// starts what is due without waiting for it, so a long run does not
    /// hold up other jobs. One job never runs beside itself: while its run
    /// lasts, its later slots wait and then follow the catch-up rule.
    /// Cancelling stops the driver and aborts runs in flight; their slots
    /// stay `started` and are not retried.
    pub fn spawn(self: Arc<Self>, cancel: CancellationToken) -> JoinHandle<()> {
        tokio::spawn(self.run(cancel))
    }

    /// The driver [`Scheduler::spawn`] runs, as a future (the app runs it
    /// under its supervisor, which starts it again should it fail).
    pub async fn run(self: Arc<Self>, cancel: CancellationToken) {
        let mut runs = JoinSet::new();
        let mut interval = tokio::time::interval(self.config.poll_interval);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                _ = interval.tick() => {}
            }
            while runs.try_join_next().is_some() {}
            self.pull_shared().await;
            let (_report, started) = self.begin();
            for run in started {
                runs.spawn(run);
            }
        }
        runs.shutdown().await;
    }

    /// Runs that failed (an error or a panic) since the scheduler started;
    /// each was logged with its job's name.
    pub fn failed_runs(&self) -> u64 {
        self.failed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Every job (file jobs and built-in ones, by id) with its next run.
    /// Re-reads the job files if they changed.
    pub fn jobs(&self) -> Vec<JobInfo> {
        let now = self.now();
        let mut state = self.lock_state();
        self.refresh(&mut state, now);
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut infos: Vec<JobInfo> = self
            .entries(&state)
            .into_iter()
            .map(|(job, _)| JobInfo {
                trigger: job.describe_trigger(),
                next_run: self.next_run_of(&job, now),
                last_run: self.ledger.last(&job.id),
                running: running.contains(&job.id),
                job,
            })
            .collect();
        infos.sort_by(|a, b| a.job.id.cmp(&b.job.id));
        infos
    }

    /// The job with this id.
    pub fn job(&self, id: &str) -> Option<Job> {
        self.jobs().into_iter().find(|i| i.job.id == id).map(|i| i.job)
    }

    /// When job `id` runs next (see [`JobInfo::next_run`]).
    pub fn next_run(&self, id: &str) -> Option<Timestamp> {
        self.jobs().into_iter().find(|i| i.job.id == id)?.next_run
    }

    /// The job files currently skipped, and why.
    pub fn broken_files(&self) -> Vec<BrokenFile> {
        let now = self.now();
        let mut state = self.lock_state();
        self.refresh(&mut state, now);
        state.broken.clone()
    }
    fn now(&self) -> Timestamp {
        Timestamp::from(self.clock.now())
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// File jobs (by file name), the deployment's (those whose id no file
    /// or built-in job has), then built-in ones.
    fn entries(&self, state: &State) -> Vec<(Job, Exec)> {
        let builtins: Vec<Job> = self
            .builtins
            .iter()
            .map(|b| {
                let mut job = b.job();
                job.origin = JobOrigin::BuiltIn;
                job
            })
            .collect();
        let local = |id: &str| state.files.iter().chain(&builtins).any(|j| j.id == id);
        let files = state.files.iter().map(|j| (j.clone(), Exec::Runner));
        let deployment: Vec<(Job, Exec)> = state
            .deployment
            .iter()
            .filter(|j| !local(&j.id))
            .map(|j| (j.clone(), Exec::Runner))
            .collect();
        let builtins = builtins
            .into_iter()
            .zip(&self.builtins)
            .map(|(job, b)| (job, Exec::Builtin(b.clone())));
        files.chain(deployment).chain(builtins).collect()
    }

    /// Re-reads the job files if they changed, and registers jobs seen for
    /// the first time or enabled again. Returns the registered ids and,
    /// when the files were read, the broken ones.
    fn refresh(&self, state: &mut State, now: Timestamp) -> (Vec<String>, Vec<BrokenFile>) {
        let stamp = read_stamp(&self.dir);
        let mut broken_now = Vec::new();
        if state.stamp.as_ref() != Some(&stamp) {
            let (files, broken) = self.load_files(&stamp);
            state.files = files;
            state.broken = broken.clone();
            state.stamp = Some(stamp);
            broken_now = broken;
        }
        let entries = self.entries(state);
        let present: HashSet<&str> = entries.iter().map(|(j, _)| j.id.as_str()).collect();
        for (id, seen) in state.seen.iter_mut() {
            if !present.contains(id.as_str()) {
                seen.enabled = false;
            }
        }
        let mut records = Vec::new();
        for (job, _) in &entries {
            let seen = Seen::of(job);
            let same = state.seen.get(&job.id).is_none_or(|was| was.same_job(&seen, now));
            state.seen.insert(job.id.clone(), seen);
            if !job.enabled {
                continue;
            }
            let last = self.ledger.last(&job.id);
            // Known from the ledger, unchanged since: no new anchor. A job
            // enabled again, or given another trigger or time zone, starts
            // afresh from now: what it would have done before is not missed.
            if last.is_some() && same {
                continue;
            }
            if let (None, Trigger::At(at)) = (&last, &job.trigger)
                && *at <= now
            {
                tracing::warn!(
                    job = %job.id,
                    at = %at,
                    "schedule: one-shot job's time passed before it was first seen; it will not run"
                );
            }
            records.push(RunRecord::new(&job.id, now, RunState::Registered, now));
        }
        if let Err(e) = self.ledger.append(&records) {
            tracing::error!(error = %e, "schedule: cannot register new jobs; they wait");
            return (Vec::new(), broken_now);
        }
        (records.into_iter().map(|r| r.job).collect(), broken_now)
    }

    /// When `job` runs next, as [`JobInfo::next_run`] says.
    fn next_run_of(&self, job: &Job, now: Timestamp) -> Option<Timestamp> {
        if !job.enabled {
            return None;
        }
        let anchor = self.ledger.last(&job.id).map_or(now, |l| l.slot);
        if let Some(slot) = plan(job, anchor, now, self.config.grace).run {
            return Some(slot);
        }
        job.trigger.next_after(anchor.max(now), &job.time_zone)
    }
}
