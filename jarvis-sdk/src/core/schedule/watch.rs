//! [`WatchJob`]: `housing_watch` on the scheduler. A built-in job (every 30
//! minutes by default) that looks for new notices for every registered
//! watch in every notice source and reports them through a
//! [`WatchReporter`] (the app sends them to KAREN's sessions as a proactive
//! message).
//!
//! A notice is recorded as reported (in `$JARVIS_HOME/external_seen.jsonl`,
//! by the [`WatchStore`]) only **after** its report succeeded: a failed
//! report is tried again at the next run, and a restart reports nothing
//! twice. A crash between a report and its record would repeat that one
//! report once.

use async_trait::async_trait;
use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::job::{CatchUp, Job, JobOrigin};
use super::scheduler::{BuiltinJob, JobOutput};
use super::trigger::{MAX_INTERVAL, MIN_INTERVAL, Trigger};
use crate::common::{TimeZone, Timestamp, UtcOffset};
use crate::core::housing::{
    HousingConfig, Notice, NoticeSource, NoticeWatch, WatchStore, new_notices, sort_newest_first,
};

/// The id of the built-in watch job.
pub const HOUSING_WATCH_JOB: &str = "housing_watch";
/// How often the watch job runs by default.
pub const DEFAULT_WATCH_INTERVAL: Duration = Duration::from_secs(30 * 60);
/// The agent the watch job belongs to (and whose sessions hear of it).
pub const WATCH_AGENT: &str = "karen";

/// Tells the person about new notices for a watch.
#[async_trait]
pub trait WatchReporter: Send + Sync + fmt::Debug {
    /// Reports `notices` (new, newest first) for `watch`. An error leaves
    /// them unrecorded, so the next run reports them again.
    /// [`watch_report`](crate::core::housing::watch_report) words them.
    async fn report(&self, watch: &NoticeWatch, notices: &[Notice]) -> Result<(), String>;
}

/// What one pass of the watch job did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchPass {
    /// Watches looked at.
    pub watches: usize,
    /// Notices reported (and recorded).
    pub reported: usize,
    /// Problems (a source that failed, a report that failed), each in words.
    pub problems: Vec<String>,
}

/// The housing watch as a built-in job.
#[derive(Debug, Clone)]
pub struct WatchJob {
    watches: Arc<dyn WatchStore>,
    sources: Vec<Arc<dyn NoticeSource>>,
    reporter: Arc<dyn WatchReporter>,
    every: Duration,
    agent: String,
}

impl WatchJob {
    /// A job over `watches`, looking in `sources`, reporting to `reporter`,
    /// every 30 minutes, as KAREN's.
    pub fn new(
        watches: Arc<dyn WatchStore>,
        sources: Vec<Arc<dyn NoticeSource>>,
        reporter: Arc<dyn WatchReporter>,
    ) -> Self {
        Self {
            watches,
            sources,
            reporter,
            every: DEFAULT_WATCH_INTERVAL,
            agent: WATCH_AGENT.to_owned(),
        }
    }

    /// The job over the housing configuration's watch store and both of its
    /// sources (LH, SH).
    pub fn from_housing(config: &HousingConfig, reporter: Arc<dyn WatchReporter>) -> Self {
        Self::new(
            config.watches.clone(),
            vec![config.lh.clone(), config.sh.clone()],
            reporter,
        )
        .every(config.watch_every)
    }

    /// Runs every `every`, in whole seconds from [`MIN_INTERVAL`] to
    /// [`MAX_INTERVAL`] (brought within them).
    pub fn every(mut self, every: Duration) -> Self {
        self.every = Duration::from_secs(every.as_secs()).clamp(MIN_INTERVAL, MAX_INTERVAL);
        self
    }

    /// Shows the job as `agent`'s (default `karen`).
    pub fn with_agent(mut self, agent: impl Into<String>) -> Self {
        self.agent = agent.into();
        self
    }

    /// One pass over every watch: new notices from every source, merged
    /// (each notice once, newest first), reported, then recorded. A source
    /// that is not configured is passed over quietly; other failures are
    /// logged and listed, and never stop the pass.
    pub async fn check(&self) -> Result<WatchPass, String> {
        let watches = self.watches.list().await.map_err(|e| e.to_string())?;
        let mut pass = WatchPass {
            watches: watches.len(),
            ..WatchPass::default()
        };
        for watch in &watches {
            let mut found: Vec<Notice> = Vec::new();
            let mut keys = HashSet::new();
            for source in &self.sources {
                match new_notices(self.watches.as_ref(), &watch.id, source.as_ref()).await {
                    Ok(notices) => found.extend(notices.into_iter().filter(|n| keys.insert(n.key()))),
                    Err(crate::core::housing::HousingError::Notice(e)) if e.is_not_configured() => {
                        tracing::debug!(watch = %watch.id, source = %source.describe(), "housing watch: source not configured");
                    }
                    Err(e) => {
                        tracing::warn!(watch = %watch.id, source = %source.describe(), error = %e, "housing watch: look-up failed");
                        pass.problems.push(format!("{}: {e}", source.describe()));
                    }
                }
            }
            if found.is_empty() {
                continue;
            }
            sort_newest_first(&mut found);
            if let Err(e) = self.reporter.report(watch, &found).await {
                tracing::warn!(watch = %watch.id, error = %e, "housing watch: report failed; tried again next run");
                pass.problems.push(format!("report for {}: {e}", watch.id));
                continue;
            }
            let count = found.len();
            if let Err(e) = self
                .watches
                .mark_seen(&watch.id, found.iter().map(Notice::key).collect())
                .await
            {
                tracing::warn!(watch = %watch.id, error = %e, "housing watch: reported notices not recorded");
                pass.problems.push(format!("record for {}: {e}", watch.id));
            }
            pass.reported += count;
        }
        Ok(pass)
    }
}

#[async_trait]
impl BuiltinJob for WatchJob {
    fn job(&self) -> Job {
        Job {
            id: HOUSING_WATCH_JOB.to_owned(),
            agent: self.agent.clone(),
            prompt: "새 청약 공고 확인 (check housing watches for new notices)".to_owned(),
            trigger: Trigger::Every(self.every),
            time_zone: TimeZone::fixed(UtcOffset::KST),
            enabled: true,
            catch_up: CatchUp::Latest,
            origin: JobOrigin::BuiltIn,
        }
    }

    async fn run(&self, _slot: Timestamp) -> Result<JobOutput, String> {
        let pass = self.check().await?;
        let mut text = format!(
            "watches: {}, new notices reported: {}",
            pass.watches, pass.reported
        );
        if !pass.problems.is_empty() {
            text.push_str(&format!("; problems: {}", pass.problems.join("; ")));
        }
        Ok(JobOutput {
            session_id: None,
            text,
        })
    }
}
