//! A source as a built-in job of the scheduler: each check fetched (or
//! read by a pack's reader), its new items reported once, its health kept.

use async_trait::async_trait;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{SeenStore, Source, SourceItem};
use crate::schedule::{BuiltinJob, CatchUp, Job, JobOrigin, JobOutput};
use jarvis_common::{Clock, TimeZone, Timestamp};

/// The most a source's answer may weigh.
const MAX_BODY_BYTES: usize = 8 << 20;
/// How long a fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);
/// Items one report lists at most (the rest are counted).
const REPORT_ITEMS: usize = 10;
/// The most slots a failing source is skipped for.
const MAX_SKIPPED_SLOTS: u32 = 16;

/// Tells an agent about a source's new items.
#[async_trait]
pub trait SourceReporter: Send + Sync + std::fmt::Debug {
    /// Reports `items` of `source` (new, in the source's order) under
    /// `message_id`; an error leaves them unrecorded for the next check.
    async fn report(&self, source: &Source, message_id: &str, text: &str) -> Result<(), String>;
}

/// How a source is doing, for the AGENDA.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SourceHealth {
    /// Checks that failed in a row.
    pub failures: u32,
    /// The last failure.
    pub error: Option<String>,
    /// Slots still to skip before the next try.
    pub skip: u32,
}

/// The health of every source, shared by its jobs and the AGENDA.
pub type SourceStatus = Arc<Mutex<BTreeMap<String, SourceHealth>>>;

/// A source as a built-in job of the scheduler.
#[derive(Debug)]
pub struct SourceJob {
    source: Source,
    seen: Arc<SeenStore>,
    reporter: Arc<dyn SourceReporter>,
    clock: Arc<dyn Clock>,
    status: SourceStatus,
    time_zone: TimeZone,
    http: reqwest::Client,
}

impl SourceJob {
    /// The job of `source`.
    pub fn new(
        source: Source,
        seen: Arc<SeenStore>,
        reporter: Arc<dyn SourceReporter>,
        clock: Arc<dyn Clock>,
        status: SourceStatus,
        time_zone: TimeZone,
    ) -> Self {
        Self {
            source,
            seen,
            reporter,
            clock,
            status,
            time_zone,
            http: reqwest::Client::builder()
                .timeout(FETCH_TIMEOUT)
                .build()
                .unwrap_or_default(),
        }
    }

    async fn fetch(&self) -> Result<Vec<u8>, String> {
        let mut response = self
            .http
            .get(&self.source.file.url)
            .send()
            .await
            .map_err(|e| jarvis_common::error_chain(&e))?;
        if !response.status().is_success() {
            return Err(format!("{} answered {}", self.source.file.url, response.status()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| jarvis_common::error_chain(&e))?
        {
            if body.len() + chunk.len() > MAX_BODY_BYTES {
                return Err(format!("the answer is larger than {MAX_BODY_BYTES} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// One check: fetch, parse, report what is new, record it. Answers how
    /// many items were reported (or recorded as the baseline).
    pub async fn check(&self) -> Result<String, String> {
        let id = &self.source.id;
        let items = match &self.source.reader {
            Some(reader) => self.source.filtered(reader.items().await?),
            None => self.source.items(&self.fetch().await?)?,
        };
        let now = Timestamp::from_system_time(self.clock.now());
        let baseline = !self.seen.has_baseline(id);
        let fresh: Vec<&SourceItem> = items.iter().filter(|i| !self.seen.contains(id, &i.id)).collect();
        let mut keys: Vec<String> = fresh.iter().map(|i| i.id.clone()).collect();
        if baseline && !self.source.file.report_existing {
            keys.push(String::new());
            self.seen.record(id, &keys, now)?;
            return Ok(format!("baseline: {} items recorded as seen", fresh.len()));
        }
        if !fresh.is_empty() {
            let message_id = format!(
                "source-{id}-{:016x}",
                jarvis_common::fnv1a64(keys.join("\n").as_bytes())
            );
            self.reporter
                .report(&self.source, &message_id, &report_text(id, &fresh))
                .await?;
        }
        if baseline {
            keys.push(String::new());
        }
        self.seen.record(id, &keys, now)?;
        Ok(format!("{} new items reported", fresh.len()))
    }

    fn health(&self) -> SourceHealth {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&self.source.id)
            .cloned()
            .unwrap_or_default()
    }

    fn set_health(&self, health: SourceHealth) {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(self.source.id.clone(), health);
    }
}

/// The words of a report: the items, a few at most.
fn report_text(id: &str, items: &[&SourceItem]) -> String {
    let mut text = format!("새 소식 ({id}): {}건 (new items)", items.len());
    for item in items.iter().take(REPORT_ITEMS) {
        text.push_str(&format!("\n- {}", item.title));
        if let Some(link) = &item.link {
            text.push_str(&format!(" <{link}>"));
        }
    }
    if items.len() > REPORT_ITEMS {
        text.push_str(&format!(
            "\n… 외 {}건 (and {} more)",
            items.len() - REPORT_ITEMS,
            items.len() - REPORT_ITEMS
        ));
    }
    text
}

#[async_trait]
impl BuiltinJob for SourceJob {
    fn job(&self) -> Job {
        Job {
            id: self.source.job_id(),
            agent: self.source.file.agent.clone(),
            prompt: format!("{} 확인 (check {})", self.source.id, self.source.origin()),
            trigger: self.source.trigger.clone(),
            time_zone: self.time_zone.clone(),
            enabled: true,
            catch_up: CatchUp::Latest,
            origin: JobOrigin::BuiltIn,
        }
    }

    async fn run(&self, _slot: Timestamp) -> Result<JobOutput, String> {
        let mut health = self.health();
        if health.skip > 0 {
            health.skip -= 1;
            self.set_health(health.clone());
            return Ok(JobOutput {
                session_id: None,
                text: format!(
                    "failing ({} in a row); next try in {} slots",
                    health.failures,
                    health.skip + 1
                ),
            });
        }
        match self.check().await {
            Ok(text) => {
                self.set_health(SourceHealth::default());
                Ok(JobOutput {
                    session_id: None,
                    text,
                })
            }
            Err(error) => {
                let failures = health.failures + 1;
                tracing::warn!(source = %self.source.id, %error, failures, "external source check failed");
                self.set_health(SourceHealth {
                    failures,
                    error: Some(error.clone()),
                    skip: (1u32 << (failures - 1).min(8)).min(MAX_SKIPPED_SLOTS) - 1,
                });
                Err(error)
            }
        }
    }
}
