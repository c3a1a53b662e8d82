//! The housing watch on the scheduler, and the housing notices as a kind of
//! external source.
//!
//! [`WatchJob`] (`housing_watch`, every 30 minutes by default) looks for new
//! notices for every watch the `housing_watch` tool registered, in every
//! notice source, and reports them in one proactive message per watch to
//! KAREN's `default-karen` session (JARVIS's in a team without her) through
//! the app's [`ProactiveSink`]. A notice is recorded as reported (in
//! `$JARVIS_HOME/external_seen.jsonl`, by the [`WatchStore`]) only **after**
//! its report is queued: a failed report is tried again at the next run, a
//! crash in between is finished at start ([`BuiltinJob::recover`]), and a
//! report built again has the same message id, so it is shown once.
//!
//! [`HousingSourceKind`] makes the same watch a file:
//! `external_sources/<id>.yaml` with `kind: housing` and
//! `housing: {region?, keyword?}`, checked, filtered, baselined and
//! reported like any other source.

use async_trait::async_trait;
use serde::Deserialize;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use super::{
    HousingConfig, HousingError, Notice, NoticeQuery, NoticeSource, NoticeWatch, WatchStore, new_notices,
    normalize_watch_text, sort_newest_first, watch_report,
};
use jarvis_sdk::agent::ProactiveKind;
use jarvis_sdk::app::MAIN_AGENT;
use jarvis_sdk::common::{TimeZone, Timestamp, UtcOffset};
use jarvis_sdk::initiative::{
    BuiltinJob, CatchUp, Job, JobOrigin, JobOutput, MAX_INTERVAL, MIN_INTERVAL, OutboxItem, ProactiveSink,
    SourceItem, SourceReader, SourceType, Trigger,
};

/// The id of the built-in watch job.
pub const HOUSING_WATCH_JOB: &str = "housing_watch";
/// How often the watch job runs by default.
pub const DEFAULT_WATCH_INTERVAL: Duration = Duration::from_secs(30 * 60);
/// The agent the watch job belongs to (and whose sessions hear of it).
pub const WATCH_AGENT: &str = "karen";
/// The `kind:` of a housing source file.
pub const HOUSING_SOURCE_KIND: &str = "housing";

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
    sink: Arc<dyn ProactiveSink>,
    every: Duration,
}

impl WatchJob {
    /// A job over `watches`, looking in `sources`, reporting through `sink`,
    /// every 30 minutes.
    pub fn new(
        watches: Arc<dyn WatchStore>,
        sources: Vec<Arc<dyn NoticeSource>>,
        sink: Arc<dyn ProactiveSink>,
    ) -> Self {
        Self {
            watches,
            sources,
            sink,
            every: DEFAULT_WATCH_INTERVAL,
        }
    }

    /// The job over the housing configuration's watch store and both of its
    /// sources (LH, SH).
    pub fn from_housing(config: &HousingConfig, sink: Arc<dyn ProactiveSink>) -> Self {
        Self::new(
            config.watches.clone(),
            vec![config.lh.clone(), config.sh.clone()],
            sink,
        )
        .every(config.watch_every)
    }

    /// KAREN, who hears of the watches, or JARVIS in a team without her.
    pub fn agent(&self) -> &'static str {
        if self.sink.has_agent(WATCH_AGENT) {
            WATCH_AGENT
        } else {
            MAIN_AGENT
        }
    }

    /// Runs every `every`, in whole seconds from [`MIN_INTERVAL`] to
    /// [`MAX_INTERVAL`] (brought within them).
    pub fn every(mut self, every: Duration) -> Self {
        self.every = Duration::from_secs(every.as_secs()).clamp(MIN_INTERVAL, MAX_INTERVAL);
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
                    Err(HousingError::Notice(e)) if e.is_not_configured() => {
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
            if let Err(e) = self.report(watch, &found).await {
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

    /// Queues the report of `notices` for `watch` in the watch agent's
    /// `default-<agent>` session. The message id comes from the watch and the
    /// notices, so a report built again after a crash is the same message.
    async fn report(&self, watch: &NoticeWatch, notices: &[Notice]) -> Result<(), String> {
        let agent = self.agent();
        let keys: Vec<String> = notices.iter().map(Notice::key).collect();
        self.sink
            .enqueue(OutboxItem {
                message_id: format!(
                    "watch-{}-{:016x}",
                    watch.id,
                    jarvis_sdk::common::fnv1a64(keys.join("\n").as_bytes())
                ),
                session_id: format!("default-{agent}"),
                agent_id: agent.to_owned(),
                kind: ProactiveKind::Proactive,
                text: watch_report(watch, notices),
                at: self.sink.now(),
                meta: serde_json::json!({ "watch_id": watch.id, "keys": keys }),
            })
            .await
    }
}

#[async_trait]
impl BuiltinJob for WatchJob {
    fn job(&self) -> Job {
        Job {
            id: HOUSING_WATCH_JOB.to_owned(),
            agent: self.agent().to_owned(),
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

    /// A watch's notices count as reported once their report is queued; a
    /// crash between the two leaves them unrecorded, so at start every
    /// report still queued records its notices (again: recording is
    /// idempotent).
    async fn recover(&self, queued: &[OutboxItem]) {
        for item in queued {
            let Some(watch_id) = item.meta.get("watch_id").and_then(|w| w.as_str()) else {
                continue;
            };
            let keys: Vec<String> = item
                .meta
                .get("keys")
                .and_then(|k| k.as_array())
                .map(|keys| {
                    keys.iter()
                        .filter_map(|k| k.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            if let Err(error) = self.watches.mark_seen(watch_id, keys).await {
                tracing::warn!(watch = %watch_id, %error, "a queued watch report's notices could not be recorded");
            }
        }
    }
}

/// The settings of a `kind: housing` source: the watch it is.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HousingSourceSettings {
    /// The region to watch, if any.
    #[serde(default)]
    region: Option<String>,
    /// The title keyword to watch, if any.
    #[serde(default)]
    keyword: Option<String>,
}

/// Housing notices as a kind of external source (`kind: housing`): the
/// notices of every configured agency that match `housing: {region?,
/// keyword?}`, each an item whose id is its [`Notice::key`].
#[derive(Debug, Clone)]
pub struct HousingSourceKind {
    sources: Vec<Arc<dyn NoticeSource>>,
}

impl HousingSourceKind {
    /// The kind over `sources` (LH, SH).
    pub fn new(sources: Vec<Arc<dyn NoticeSource>>) -> Self {
        Self { sources }
    }
}

impl SourceType for HousingSourceKind {
    fn kind(&self) -> &str {
        HOUSING_SOURCE_KIND
    }

    fn open(&self, settings: &serde_yaml::Value) -> Result<Arc<dyn SourceReader>, String> {
        let settings: HousingSourceSettings = if settings.is_null() {
            HousingSourceSettings::default()
        } else {
            serde_yaml::from_value(settings.clone()).map_err(|e| e.to_string())?
        };
        let region = normalize_watch_text(settings.region.as_deref());
        let keyword = normalize_watch_text(settings.keyword.as_deref());
        let watch = NoticeWatch {
            id: NoticeWatch::id_for(region.as_deref(), keyword.as_deref()),
            region,
            keyword,
            created_at: 0,
        };
        Ok(Arc::new(HousingReader {
            query: watch.query(),
            sources: self.sources.clone(),
        }))
    }
}

/// Reads one `kind: housing` source.
#[derive(Debug)]
struct HousingReader {
    query: NoticeQuery,
    sources: Vec<Arc<dyn NoticeSource>>,
}

#[async_trait]
impl SourceReader for HousingReader {
    /// The matching notices of every agency, newest first; an agency whose
    /// look-up is not configured is passed over, any other failure fails
    /// the check.
    async fn items(&self) -> Result<Vec<SourceItem>, String> {
        let mut notices = Vec::new();
        let mut keys = HashSet::new();
        for source in &self.sources {
            match source.fetch(self.query.clone()).await {
                Ok(found) => notices.extend(found.into_iter().filter(|n| keys.insert(n.key()))),
                Err(e) if e.is_not_configured() => {}
                Err(e) => return Err(format!("{}: {e}", source.describe())),
            }
        }
        sort_newest_first(&mut notices);
        Ok(notices
            .into_iter()
            .map(|n| SourceItem {
                id: n.key(),
                title: format!("[{}] {}", n.source.as_str(), n.title),
                link: n.url.clone(),
                summary: Some(
                    [
                        Some(n.kind.as_str()),
                        Some(n.region.as_str()),
                        Some(n.status.as_str()),
                        n.closes.as_deref(),
                    ]
                    .into_iter()
                    .flatten()
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
                    .join(" · "),
                ),
            })
            .collect())
    }
}
