//! A tick's runs: what is due now, recorded in the ledger before it runs,
//! and each slot run (claimed first across a deployment) with how it ended.

use futures::FutureExt;
use futures::future::BoxFuture;
use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use super::plan::plan;
use super::{BuiltinJob, RunOutcome, RunReport, ScheduleTick, Scheduler, SlotRef};
use crate::schedule::job::{CatchUp, Job};
use crate::schedule::ledger::{RunRecord, RunState};
use jarvis_common::Timestamp;

/// How a job runs.
#[derive(Clone)]
pub(super) enum Exec {
    Runner,
    Builtin(Arc<dyn BuiltinJob>),
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
impl Scheduler {
    /// Decides what is due now, records it, and hands back the runs to
    /// drive (already marked running and `started` in the ledger).
    pub(super) fn begin(&self) -> (ScheduleTick, Vec<BoxFuture<'static, RunReport>>) {
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
}
