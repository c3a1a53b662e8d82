//! Adding and removing jobs: job files, the deployment's shared jobs
//! ([`SharedJobs`](super::SharedJobs)), and `/schedule`.

use async_trait::async_trait;

use super::{Scheduler, State};
use crate::commands::ScheduleCommand;
use crate::schedule::error::ScheduleError;
use crate::schedule::job::{Job, JobOrigin, JobSpec, parse_shared_job, validate_job_id};
use crate::schedule::trigger::{Trigger, check_interval};
use crate::schedule::when::{When, parse_when};
use jarvis_agent::validate_agent_id;
use jarvis_common::{Timestamp, write_atomic};

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
impl Scheduler {
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
    pub(super) async fn pull_shared(&self) {
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
}
