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

use async_trait::async_trait;
use futures::FutureExt;
use futures::future::{BoxFuture, join_all};
use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use super::error::ScheduleError;
use super::job::{
    CatchUp, Job, JobOrigin, JobSpec, MAX_JOB_FILE_BYTES, SCHEDULES_DIR, parse_job_file, parse_shared_job,
    validate_job_id,
};
use super::ledger::{LastRun, LedgerLoad, RunLedger, RunRecord, RunState};
use super::trigger::{Trigger, check_interval};
use super::when::{When, parse_when};
use crate::commands::ScheduleCommand;
use jarvis_agent::validate_agent_id;
use jarvis_common::{Clock, TimeZone, Timestamp, UtcOffset, write_atomic};

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

/// How a job runs.
#[derive(Clone)]
enum Exec {
    Runner,
    Builtin(Arc<dyn BuiltinJob>),
}

/// Names, modification times and lengths of the job files: compared on
/// every tick to notice edits without a file watcher.
// ponytail: two edits within the file system's timestamp granularity that
// keep the length are not told apart.
#[derive(Debug, Default, PartialEq, Eq)]
struct Stamp(Vec<(OsString, Option<SystemTime>, u64)>);

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

/// Removes a job from the running set when its run ends or is dropped.
struct Running {
    set: Arc<Mutex<HashSet<String>>>,
    id: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
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

/// `/schedule <when> <prompt>` for [`StandardCommands`](crate::StandardCommands):
/// [`Scheduler::schedule_text`], answered with the job's id, agent, prompt,
/// trigger and next run, or with what was wrong and the accepted forms.
#[async_trait]
impl ScheduleCommand for Scheduler {
    async fn schedule(&self, agent_id: &str, spec: &str) -> Result<String, String> {
        let job = match &self.shared {
            None => self.schedule_text(agent_id, spec),
            Some(_) => match self.parse_when(spec) {
                Ok(when) => {
                    self.add_shared_job(JobSpec::new(agent_id, when.prompt, when.trigger))
                        .await
                }
                Err(e) => Err(e),
            },
        }
        .map_err(|e| e.to_string())?;
        let next = self
            .next_run_of(&job, self.now())
            .map(|t| {
                format!(
                    "{} ({})",
                    job.time_zone.format_local(t, ' '),
                    job.time_zone.offset_at(t)
                )
            })
            .unwrap_or_else(|| "-".to_owned());
        Ok(format!(
            "예약했어요 (scheduled) {id} [{agent}]: {prompt}\n{trigger}; 다음 실행 (next run) {next}",
            id = job.id,
            agent = job.agent,
            prompt = job.prompt,
            trigger = job.describe_trigger(),
        ))
    }
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

    /// Reads a `/schedule` command's `<when> <prompt>` at the clock's time
    /// in the default time zone (see [`parse_when`]).
    pub fn parse_when(&self, text: &str) -> Result<When, ScheduleError> {
        parse_when(text, self.now(), &self.config.time_zone)
    }

    /// `/schedule <when> <prompt>` typed in a session of `agent`: the job
    /// gets that agent (R-SCHED-2).
    pub fn schedule_text(&self, agent: &str, text: &str) -> Result<Job, ScheduleError> {
        let when = self.parse_when(text)?;
        self.add_job(JobSpec::new(agent, when.prompt, when.trigger))
    }

    /// Writes a new job file atomically (`schedules/<id>.yaml`, every field
    /// spelled out) and registers the job now, so only slots after this
    /// moment run.
    pub fn add_job(&self, spec: JobSpec) -> Result<Job, ScheduleError> {
        let now = self.now();
        let mut state = self.lock_state();
        self.refresh(&mut state, now);
        let job = self.new_job(spec, &state, now)?;
        let JobOrigin::File(path) = &job.origin else {
            return Err(ScheduleError::invalid("a new job has no file"));
        };
        std::fs::create_dir_all(&self.dir).map_err(|e| ScheduleError::io("create", &self.dir, e))?;
        write_atomic(path, job.to_yaml().as_bytes()).map_err(|e| ScheduleError::io("write", path, e))?;
        tracing::info!(job = %job.id, agent = %job.agent, trigger = %job.describe_trigger(), "schedule: job added");
        self.refresh(&mut state, now);
        Ok(job)
    }

    /// Adds a job to the deployment's jobs ([`Scheduler::with_shared_jobs`];
    /// without them, as [`Scheduler::add_job`]): every node runs it from its
    /// next tick, each slot on one node. Registered here now, so only slots
    /// after this moment run.
    pub async fn add_shared_job(&self, spec: JobSpec) -> Result<Job, ScheduleError> {
        let Some(shared) = &self.shared else {
            return self.add_job(spec);
        };
        self.pull_shared().await;
        let now = self.now();
        let mut job = {
            let mut state = self.lock_state();
            self.refresh(&mut state, now);
            self.new_job(spec, &state, now)?
        };
        job.origin = JobOrigin::Deployment;
        if !shared
            .insert(&job.id, &job.to_yaml())
            .await
            .map_err(ScheduleError::Shared)?
        {
            return Err(ScheduleError::Exists { id: job.id });
        }
        tracing::info!(job = %job.id, agent = %job.agent, trigger = %job.describe_trigger(), "schedule: job added for the deployment");
        let mut state = self.lock_state();
        state.deployment.push(job.clone());
        self.refresh(&mut state, now);
        Ok(job)
    }

    /// Removes job `id` from the deployment's jobs (every node stops
    /// running it from its next tick). Its ledger records stay.
    pub async fn remove_shared_job(&self, id: &str) -> Result<(), ScheduleError> {
        let Some(shared) = &self.shared else {
            return self.remove_job(id);
        };
        if !shared.remove(id).await.map_err(ScheduleError::Shared)? {
            return Err(ScheduleError::NotFound { id: id.to_owned() });
        }
        tracing::info!(job = %id, "schedule: job removed from the deployment");
        let now = self.now();
        let mut state = self.lock_state();
        state.deployment.retain(|j| j.id != id);
        self.refresh(&mut state, now);
        Ok(())
    }

    /// Reads the deployment's jobs again (a no-op alone). A store that
    /// cannot answer keeps the jobs last read; a job that does not parse,
    /// or whose id a file or built-in job has, is skipped with a warning.
    async fn pull_shared(&self) {
        let Some(shared) = &self.shared else {
            return;
        };
        let texts = match shared.load().await {
            Ok(texts) => texts,
            Err(error) => {
                tracing::warn!(%error, "schedule: the deployment's jobs could not be read; the last ones read stay");
                return;
            }
        };
        let mut jobs: Vec<Job> = Vec::with_capacity(texts.len());
        for text in texts {
            match parse_shared_job(&text, &self.config.time_zone) {
                Ok(job) if !jobs.iter().any(|j| j.id == job.id) => jobs.push(job),
                Ok(job) => {
                    tracing::warn!(job = %job.id, "schedule: a shared job's id is used twice; skipped")
                }
                Err(error) => tracing::warn!(%error, "schedule: a shared job does not parse; skipped"),
            }
        }
        let mut state = self.lock_state();
        state.deployment = jobs;
    }

    /// A new job from `spec`: checked, with its id (chosen when `spec` has
    /// none) and the file it would have.
    fn new_job(&self, spec: JobSpec, state: &State, now: Timestamp) -> Result<Job, ScheduleError> {
        let time_zone = spec.time_zone.unwrap_or_else(|| self.config.time_zone.clone());
        let prompt = spec.prompt.trim().to_owned();
        if prompt.is_empty() {
            return Err(ScheduleError::invalid("prompt is empty"));
        }
        validate_agent_id(&spec.agent).map_err(|e| ScheduleError::invalid(format!("agent: {e}")))?;
        match &spec.trigger {
            Trigger::Every(d) => {
                check_interval(*d).map_err(|reason| ScheduleError::invalid(format!("every: {reason}")))?;
            }
            Trigger::At(at) if *at <= now => {
                return Err(ScheduleError::invalid(format!("at: {at} has already passed")));
            }
            _ => {}
        }
        let taken = |id: &str| {
            self.entries(state).iter().any(|(j, _)| j.id == id)
                || self.dir.join(format!("{id}.yaml")).exists()
        };
        let id = match spec.id {
            Some(id) => {
                validate_job_id(&id)?;
                if taken(&id) {
                    return Err(ScheduleError::Exists { id });
                }
                id
            }
            None => {
                let c = time_zone.civil(now);
                let base = format!(
                    "job-{:04}{:02}{:02}-{:02}{:02}",
                    c.year, c.month, c.day, c.hour, c.minute
                );
                (1..)
                    .map(|n| {
                        if n == 1 {
                            base.clone()
                        } else {
                            format!("{base}-{n}")
                        }
                    })
                    .find(|id| !taken(id))
                    .unwrap_or(base)
            }
        };
        let path = self.dir.join(format!("{id}.yaml"));
        Ok(Job {
            id,
            agent: spec.agent,
            prompt,
            trigger: spec.trigger,
            time_zone,
            enabled: spec.enabled,
            catch_up: spec.catch_up,
            origin: JobOrigin::File(path),
        })
    }

    /// Deletes job `id`'s file. Its ledger records stay, so a job later
    /// written with the same id does not rerun old slots.
    pub fn remove_job(&self, id: &str) -> Result<(), ScheduleError> {
        let now = self.now();
        let mut state = self.lock_state();
        self.refresh(&mut state, now);
        let job = self
            .entries(&state)
            .into_iter()
            .map(|(job, _)| job)
            .find(|j| j.id == id)
            .ok_or_else(|| ScheduleError::NotFound { id: id.to_owned() })?;
        let path = match &job.origin {
            JobOrigin::File(path) => path,
            JobOrigin::BuiltIn => return Err(ScheduleError::BuiltIn { id: id.to_owned() }),
            JobOrigin::Deployment => {
                return Err(ScheduleError::invalid(format!(
                    "job {id:?} is the deployment's; remove it with remove_shared_job"
                )));
            }
        };
        std::fs::remove_file(path).map_err(|e| ScheduleError::io("remove", path, e))?;
        tracing::info!(job = %id, "schedule: job removed");
        self.refresh(&mut state, now);
        Ok(())
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

    /// Decides what is due now, records it, and hands back the runs to
    /// drive (already marked running and `started` in the ledger).
    fn begin(&self) -> (ScheduleTick, Vec<BoxFuture<'static, RunReport>>) {
        let now = self.now();
        let mut state = self.lock_state();
        let (registered, broken_files) = self.refresh(&mut state, now);
        let mut report = ScheduleTick {
            at: now,
            runs: Vec::new(),
            skipped: Vec::new(),
            registered,
            busy: Vec::new(),
            broken_files,
        };
        let mut runs = Vec::new();
        for (job, exec) in self.entries(&state) {
            if !job.enabled {
                continue;
            }
            let Some(last) = self.ledger.last(&job.id) else {
                continue;
            };
            let plan = plan(&job, last.slot, now, self.config.grace);
            if plan.run.is_none() && plan.skipped.is_empty() {
                continue;
            }
            if self
                .running
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&job.id)
            {
                report.busy.push(job.id.clone());
                continue;
            }
            let mut records: Vec<RunRecord> = plan
                .skipped
                .iter()
                .map(|slot| RunRecord::new(&job.id, *slot, RunState::Skipped, now))
                .collect();
            if let Some(slot) = plan.run {
                records.push(RunRecord::new(&job.id, slot, RunState::Started, now));
            }
            if let Err(e) = self.ledger.append(&records) {
                tracing::error!(job = %job.id, error = %e, "schedule: cannot record the slot; the job does not run");
                if let Some(slot) = plan.run {
                    report.runs.push(RunReport {
                        job: job.id.clone(),
                        agent: job.agent.clone(),
                        slot,
                        outcome: RunOutcome::NotStarted(e.to_string()),
                    });
                }
                continue;
            }
            if !plan.skipped.is_empty() {
                tracing::info!(
                    job = %job.id,
                    count = plan.skipped.len(),
                    first = %plan.skipped[0],
                    "schedule: missed slots skipped (catch_up: {})",
                    if job.catch_up == CatchUp::Latest { "latest" } else { "skip" }
                );
            }
            report.skipped.extend(plan.skipped.iter().map(|slot| SlotRef {
                job: job.id.clone(),
                slot: *slot,
            }));
            if let Some(slot) = plan.run {
                runs.push(self.start_run(job, exec, slot));
            }
        }
        (report, runs)
    }

    /// Marks `job` running and returns its run, which records how it ended.
    fn start_run(&self, job: Job, exec: Exec, slot: Timestamp) -> BoxFuture<'static, RunReport> {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(job.id.clone());
        let guard = Running {
            set: self.running.clone(),
            id: job.id.clone(),
        };
        let runner = self.runner.clone();
        let ledger = self.ledger.clone();
        let clock = self.clock.clone();
        let failed = self.failed.clone();
        let slots = self.slots.clone();
        Box::pin(async move {
            let _guard = guard;
            if let Some(slots) = slots {
                let claimed = slots.claim(&job.id, slot).await;
                if !matches!(claimed, Ok(true)) {
                    match &claimed {
                        Ok(_) => {
                            tracing::info!(job = %job.id, slot = %slot, "schedule: another node runs this slot")
                        }
                        Err(error) => {
                            tracing::warn!(job = %job.id, slot = %slot, %error, "schedule: the slot could not be claimed; it does not run here")
                        }
                    }
                    let mut record =
                        RunRecord::new(&job.id, slot, RunState::Skipped, Timestamp::from(clock.now()));
                    record.error = claimed.err();
                    if let Err(e) = ledger.append(&[record]) {
                        tracing::warn!(job = %job.id, error = %e, "schedule: cannot record a slot run elsewhere");
                    }
                    return RunReport {
                        job: job.id,
                        agent: job.agent,
                        slot,
                        outcome: RunOutcome::RanElsewhere,
                    };
                }
            }
            tracing::info!(job = %job.id, agent = %job.agent, slot = %slot, "schedule: run started");
            let run = async {
                match &exec {
                    Exec::Runner => runner.run(&job, slot).await,
                    Exec::Builtin(builtin) => builtin.run(slot).await,
                }
            };
            let result = AssertUnwindSafe(run)
                .catch_unwind()
                .await
                .unwrap_or_else(|panic| {
                    Err(format!("the run panicked: {}", jarvis_turn::panic_text(&*panic)))
                });
            let at = Timestamp::from(clock.now());
            let (record, outcome) = match result {
                Ok(output) => {
                    tracing::info!(job = %job.id, slot = %slot, "schedule: run done");
                    let mut record = RunRecord::new(&job.id, slot, RunState::Done, at);
                    record.session_id = output.session_id.clone();
                    (record, RunOutcome::Done(output))
                }
                Err(error) => {
                    failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::warn!(job = %job.id, slot = %slot, %error, "schedule: run failed");
                    let mut record = RunRecord::new(&job.id, slot, RunState::Failed, at);
                    record.error = Some(error.clone());
                    (record, RunOutcome::Failed(error))
                }
            };
            if let Err(e) = ledger.append(&[record]) {
                tracing::warn!(job = %job.id, error = %e, "schedule: cannot record the end of a run");
            }
            RunReport {
                job: job.id,
                agent: job.agent,
                slot,
                outcome,
            }
        })
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

    fn load_files(&self, stamp: &Stamp) -> (Vec<Job>, Vec<BrokenFile>) {
        let mut jobs: Vec<Job> = Vec::new();
        let mut broken = Vec::new();
        let mut ids: HashMap<String, PathBuf> = HashMap::new();
        let reserved: Vec<String> = self.builtins.iter().map(|b| b.job().id).collect();
        for (name, _, len) in &stamp.0 {
            let path = self.dir.join(name);
            let parsed = read_job_text(&path, *len)
                .and_then(|text| {
                    parse_job_file(&path, &text, &self.config.time_zone).map_err(|e| match e {
                        ScheduleError::InvalidJob { reason, .. } => reason,
                        other => other.to_string(),
                    })
                })
                .and_then(|job| {
                    if reserved.contains(&job.id) {
                        Err(format!("id {:?} is reserved for a built-in job", job.id))
                    } else if let Some(other) = ids.get(&job.id) {
                        Err(format!("id {:?} is already used by {}", job.id, other.display()))
                    } else {
                        Ok(job)
                    }
                });
            match parsed {
                Ok(job) => {
                    ids.insert(job.id.clone(), path);
                    jobs.push(job);
                }
                Err(reason) => {
                    tracing::warn!(file = %path.display(), reason = %reason, "schedule: job file skipped");
                    broken.push(BrokenFile { path, reason });
                }
            }
        }
        (jobs, broken)
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

/// What to do with a job's due slots.
#[derive(Debug, Default, PartialEq, Eq)]
struct Plan {
    run: Option<Timestamp>,
    /// Chronological; at most [`MAX_SKIPPED_RECORDS`], the most recent.
    skipped: Vec<Timestamp>,
}

/// The catch-up rule over the slots in `(anchor, now]`.
fn plan(job: &Job, anchor: Timestamp, now: Timestamp, grace: Duration) -> Plan {
    let zone = &job.time_zone;
    let Some(latest) = job.trigger.latest_at_or_before(now, zone) else {
        return Plan::default();
    };
    if latest <= anchor {
        return Plan::default();
    }
    let late = Duration::from_millis(u64::try_from(now.as_millis() - latest.as_millis()).unwrap_or(0));
    let run = match job.catch_up {
        CatchUp::Latest => Some(latest),
        CatchUp::Skip => (late <= grace).then_some(latest),
    };
    let mut skipped = Vec::new();
    if run.is_none() {
        skipped.push(latest);
    }
    let mut t = latest;
    while skipped.len() < MAX_SKIPPED_RECORDS {
        match job
            .trigger
            .latest_at_or_before(Timestamp::from_millis(t.as_millis() - 1), zone)
        {
            Some(slot) if slot > anchor => {
                skipped.push(slot);
                t = slot;
            }
            _ => break,
        }
    }
    skipped.reverse();
    Plan { run, skipped }
}

/// The text of a job file of `len` bytes; larger than
/// [`MAX_JOB_FILE_BYTES`] is refused unread.
fn read_job_text(path: &Path, len: u64) -> Result<String, String> {
    let too_big = || format!("it is larger than {MAX_JOB_FILE_BYTES} bytes");
    if len > MAX_JOB_FILE_BYTES as u64 {
        return Err(too_big());
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
    if text.len() > MAX_JOB_FILE_BYTES {
        return Err(too_big());
    }
    Ok(text)
}

/// The job files in `dir` (`*.yaml`, not hidden), by name.
fn read_stamp(dir: &Path) -> Stamp {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Stamp::default();
    };
    let mut files: Vec<(OsString, Option<SystemTime>, u64)> = entries
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            !name.starts_with('.') && name.ends_with(".yaml")
        })
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            meta.is_file()
                .then(|| (e.file_name(), meta.modified().ok(), meta.len()))
        })
        .collect();
    files.sort();
    Stamp(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    fn job(trigger: Trigger, catch_up: CatchUp) -> Job {
        Job {
            id: "j".into(),
            agent: "main".into(),
            prompt: "p".into(),
            trigger,
            time_zone: TimeZone::UTC,
            enabled: true,
            catch_up,
            origin: JobOrigin::BuiltIn,
        }
    }

    /// The plan for `job` with its last slot at `anchor`, at `now` (UTC).
    fn plan_at(job: &Job, anchor: &str, now: &str) -> Plan {
        plan(job, ts(anchor), ts(now), DEFAULT_GRACE)
    }

    fn slots(times: &[&str]) -> Vec<Timestamp> {
        times.iter().map(|t| ts(t)).collect()
    }

    #[test]
    fn catch_up_latest_runs_the_last_missed_slot_and_skips_the_rest() {
        let hourly = job(Trigger::cron("0 * * * *").unwrap(), CatchUp::Latest);
        let p = plan_at(&hourly, "2026-12-01T00:00:00Z", "2026-12-01T03:30:00Z");
        assert_eq!(p.run, Some(ts("2026-12-01T03:00:00Z")));
        assert_eq!(
            p.skipped,
            slots(&["2026-12-01T01:00:00Z", "2026-12-01T02:00:00Z"])
        );
        // Nothing after the anchor: nothing to do.
        let none = plan_at(&hourly, "2026-12-01T03:00:00Z", "2026-12-01T03:59:59Z");
        assert_eq!(none, Plan::default());
    }

    #[test]
    fn catch_up_skip_runs_only_within_the_grace_window() {
        let hourly = job(Trigger::cron("0 * * * *").unwrap(), CatchUp::Skip);
        let on_time = plan_at(&hourly, "2026-12-01T02:00:00Z", "2026-12-01T03:01:59Z");
        assert_eq!(on_time.run, Some(ts("2026-12-01T03:00:00Z")));
        let late = plan_at(&hourly, "2026-12-01T00:00:00Z", "2026-12-01T03:02:01Z");
        assert_eq!(late.run, None);
        assert_eq!(
            late.skipped,
            slots(&[
                "2026-12-01T01:00:00Z",
                "2026-12-01T02:00:00Z",
                "2026-12-01T03:00:00Z"
            ])
        );
    }

    #[test]
    fn long_downtimes_record_only_the_latest_skipped_slots() {
        let minutely = job(Trigger::Every(Duration::from_secs(60)), CatchUp::Latest);
        let p = plan_at(&minutely, "2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z");
        assert_eq!(p.run, Some(ts("2026-12-01T00:00:00Z")));
        assert_eq!(p.skipped.len(), MAX_SKIPPED_RECORDS);
        assert_eq!(p.skipped.last(), Some(&ts("2026-11-30T23:59:00Z")));
    }
}
