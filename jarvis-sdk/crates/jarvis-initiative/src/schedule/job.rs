//! Jobs and their files: `$JARVIS_HOME/schedules/<name>.yaml`, one job per
//! file, read strictly (an unknown key is an error).
//!
//! ```yaml
//! # $JARVIS_HOME/schedules/weekly-notices.yaml
//! id: weekly-notices            # default: the file name without .yaml
//! agent: karen                  # default: main (R-SCHED-1)
//! prompt: 이번 주 서울 청약 공고를 정리해 줘
//! cron: "0 9 * * mon"           # exactly one of cron / every / at
//! # every: 30m                  # 90s, 15m, 2h, 1d (1 minute to 366 days)
//! # at: "2026-12-01T09:00"      # once, local time (or full RFC 3339)
//! time_zone: Asia/Seoul         # an IANA zone; default: the scheduler's
//! # utc_offset: "+09:00"        # or a fixed offset (not both)
//! enabled: true                 # default: true
//! catch_up: latest              # latest (default) | skip
//! ```

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

use super::error::ScheduleError;
use super::trigger::{Trigger, format_interval, parse_at, parse_interval};
use jarvis_agent::validate_agent_id;
use jarvis_common::{TimeZone, UtcOffset};

/// The directory of job files under `$JARVIS_HOME`.
pub const SCHEDULES_DIR: &str = "schedules";
/// The agent of a job that names none (R-SCHED-1).
pub const DEFAULT_JOB_AGENT: &str = "main";
/// The longest job id.
pub const MAX_JOB_ID_LEN: usize = 64;
/// The largest job file read, in bytes; a larger one is skipped unread.
pub const MAX_JOB_FILE_BYTES: usize = 64 * 1024;

/// What happens to slots missed while the scheduler was not running.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CatchUp {
    /// Run the most recent missed slot once; record the older ones as skipped.
    #[default]
    Latest,
    /// Record every missed slot as skipped; run only a slot still within the
    /// grace window.
    Skip,
}

/// Where a job is defined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobOrigin {
    /// A file under `$JARVIS_HOME/schedules/`.
    File(PathBuf),
    /// Code (a [`BuiltinJob`](super::BuiltinJob): an external source, a pack's job).
    BuiltIn,
    /// The deployment's shared jobs ([`SharedJobs`](super::SharedJobs):
    /// `/schedule` on a node of several sharing one Postgres).
    Deployment,
}

/// One scheduled job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// Its id: `^[a-z0-9][a-z0-9_-]{0,63}$`, unique among the jobs.
    pub id: String,
    /// The agent whose session, model, system prompt and memory scope the
    /// job runs with (R-SCHED-1); shown for it on the AGENDA (R-SCHED-3).
    pub agent: String,
    /// What the agent is asked at each slot.
    pub prompt: String,
    /// When it is due.
    pub trigger: Trigger,
    /// The job's time zone: an IANA zone (`time_zone:` in its file) or a
    /// fixed offset (`utc_offset:`).
    pub time_zone: TimeZone,
    /// Whether it runs at all.
    pub enabled: bool,
    /// The rule for slots missed while the scheduler was down.
    pub catch_up: CatchUp,
    /// Where it is defined.
    pub origin: JobOrigin,
}

impl Job {
    /// The trigger in words: `cron "0 9 * * 1" (+09:00)`, `cron "0 9 * * 1"
    /// (America/New_York)`, `every 30m`, …
    pub fn describe_trigger(&self) -> String {
        self.trigger.describe(&self.time_zone)
    }

    /// Whether it is defined in code rather than in a file.
    pub fn is_builtin(&self) -> bool {
        self.origin == JobOrigin::BuiltIn
    }

    /// The job as a file's text (every field written out, so the file does
    /// not depend on the scheduler's defaults).
    pub fn to_yaml(&self) -> String {
        let (cron, every, at) = match &self.trigger {
            Trigger::Cron(c) => (Some(c.to_string()), None, None),
            Trigger::Every(d) => (None, Some(format_interval(*d)), None),
            Trigger::At(t) => (None, None, Some(self.time_zone.format_local(*t, 'T'))),
        };
        let (time_zone, utc_offset) = match self.time_zone.fixed_offset() {
            Some(offset) => (None, Some(offset.to_string())),
            None => (Some(self.time_zone.to_string()), None),
        };
        let file = JobFile {
            id: Some(self.id.clone()),
            agent: Some(self.agent.clone()),
            prompt: self.prompt.clone(),
            cron,
            every,
            at,
            time_zone,
            utc_offset,
            enabled: Some(self.enabled),
            catch_up: Some(self.catch_up),
        };
        serde_yaml::to_string(&file).unwrap_or_default()
    }
}

/// A new job for [`Scheduler::add_job`](super::Scheduler::add_job) (the
/// `/schedule` command passes the session's agent, R-SCHED-2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSpec {
    /// Its id; when absent, one is made from the current time
    /// (`job-20261201-0900`, then `-2`, `-3`, … if taken).
    pub id: Option<String>,
    /// The agent the job runs as.
    pub agent: String,
    /// What the agent is asked.
    pub prompt: String,
    /// When.
    pub trigger: Trigger,
    /// Its time zone; the scheduler's default when absent.
    pub time_zone: Option<TimeZone>,
    /// The catch-up rule.
    pub catch_up: CatchUp,
    /// Whether it runs.
    pub enabled: bool,
}

impl JobSpec {
    /// An enabled job of `agent` with the default catch-up rule and offset.
    pub fn new(agent: impl Into<String>, prompt: impl Into<String>, trigger: Trigger) -> Self {
        Self {
            id: None,
            agent: agent.into(),
            prompt: prompt.into(),
            trigger,
            time_zone: None,
            catch_up: CatchUp::default(),
            enabled: true,
        }
    }

    /// Sets the id.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Sets the time zone.
    pub fn with_time_zone(mut self, zone: impl Into<TimeZone>) -> Self {
        self.time_zone = Some(zone.into());
        self
    }

    /// Sets the time zone to a fixed offset.
    pub fn with_utc_offset(self, offset: UtcOffset) -> Self {
        self.with_time_zone(offset)
    }

    /// Sets the catch-up rule.
    pub fn with_catch_up(mut self, catch_up: CatchUp) -> Self {
        self.catch_up = catch_up;
        self
    }
}

/// A job file as written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    agent: Option<String>,
    prompt: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cron: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    every: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    time_zone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    utc_offset: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    catch_up: Option<CatchUp>,
}

/// Checks a job id: 1 to 64 of `a-z`, `0-9`, `_`, `-`, starting with a
/// letter or digit.
pub fn validate_job_id(id: &str) -> Result<(), ScheduleError> {
    let mut chars = id.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
        && id.len() <= MAX_JOB_ID_LEN;
    if ok {
        Ok(())
    } else {
        Err(ScheduleError::invalid(format!(
            "id {id:?} must be 1 to 64 of a-z, 0-9, '_' and '-', starting with a letter or digit"
        )))
    }
}

/// Parses the job file `path` whose text is `text`.
pub(crate) fn parse_job_file(path: &Path, text: &str, default_zone: &TimeZone) -> Result<Job, ScheduleError> {
    let in_file = |e: ScheduleError| match e {
        ScheduleError::InvalidJob { reason, .. } => ScheduleError::InvalidJob {
            file: Some(path.to_owned()),
            reason,
        },
        ScheduleError::Cron { expr, reason } => ScheduleError::InvalidJob {
            file: Some(path.to_owned()),
            reason: format!("cron {expr:?}: {reason}"),
        },
        other => other,
    };
    let file: JobFile = serde_yaml::from_str(text).map_err(|e| ScheduleError::InvalidJob {
        file: Some(path.to_owned()),
        reason: e.to_string(),
    })?;
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
    let id = file.id.clone().unwrap_or_else(|| stem.to_owned());
    build(file, id, default_zone, JobOrigin::File(path.to_owned())).map_err(in_file)
}

/// Reads a job kept by the deployment ([`JobOrigin::Deployment`]): the
/// text [`Job::to_yaml`] wrote, which names its id.
pub(crate) fn parse_shared_job(text: &str, default_zone: &TimeZone) -> Result<Job, ScheduleError> {
    let file: JobFile = serde_yaml::from_str(text).map_err(|e| ScheduleError::invalid(e.to_string()))?;
    let id = file
        .id
        .clone()
        .ok_or_else(|| ScheduleError::invalid("a shared job names no id"))?;
    build(file, id, default_zone, JobOrigin::Deployment)
}

fn build(
    file: JobFile,
    id: String,
    default_zone: &TimeZone,
    origin: JobOrigin,
) -> Result<Job, ScheduleError> {
    validate_job_id(&id)?;
    let agent = file.agent.unwrap_or_else(|| DEFAULT_JOB_AGENT.to_owned());
    validate_agent_id(&agent).map_err(|e| ScheduleError::invalid(format!("agent: {e}")))?;
    let prompt = file.prompt.trim().to_owned();
    if prompt.is_empty() {
        return Err(ScheduleError::invalid("prompt is empty"));
    }
    let time_zone = match (&file.time_zone, &file.utc_offset) {
        (Some(_), Some(_)) => {
            return Err(ScheduleError::invalid(
                "it gives both time_zone and utc_offset; give one (time_zone: Asia/Seoul, or utc_offset: \"+09:00\")",
            ));
        }
        (Some(name), None) => {
            TimeZone::named(name).map_err(|e| ScheduleError::invalid(format!("time_zone: {e}")))?
        }
        (None, Some(text)) => {
            TimeZone::fixed(UtcOffset::parse(text).map_err(|e| ScheduleError::invalid(e.to_string()))?)
        }
        (None, None) => default_zone.clone(),
    };
    let trigger = match (file.cron, file.every, file.at) {
        (Some(cron), None, None) => Trigger::cron(&cron)?,
        (None, Some(every), None) => Trigger::Every(parse_interval(&every)?),
        (None, None, Some(at)) => Trigger::At(parse_at(&at, &time_zone)?),
        (None, None, None) => {
            return Err(ScheduleError::invalid(
                "it has no trigger; give exactly one of cron, every, at",
            ));
        }
        _ => {
            return Err(ScheduleError::invalid(
                "it has more than one trigger; give exactly one of cron, every, at",
            ));
        }
    };
    Ok(Job {
        id,
        agent,
        prompt,
        trigger,
        time_zone,
        enabled: file.enabled.unwrap_or(true),
        catch_up: file.catch_up.unwrap_or_default(),
        origin,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use jarvis_common::Timestamp;
    use std::time::Duration;

    fn parse(text: &str) -> Result<Job, String> {
        parse_job_file(
            Path::new("/home/schedules/morning.yaml"),
            text,
            &UtcOffset::KST.into(),
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_fill_what_a_file_leaves_out() {
        let job = parse("prompt: 좋은 아침\nevery: 1d\n").unwrap();
        assert_eq!(job.id, "morning");
        assert_eq!(job.agent, "main");
        assert_eq!(job.trigger, Trigger::Every(Duration::from_secs(86_400)));
        assert_eq!(job.time_zone, UtcOffset::KST);
        assert!(job.enabled);
        assert_eq!(job.catch_up, CatchUp::Latest);
    }

    #[test]
    fn every_field_is_read() {
        let job = parse(
            "id: weekly-notices\nagent: karen\nprompt: 공고 정리\ncron: \"0 9 * * mon\"\n\
             utc_offset: \"-05:00\"\nenabled: false\ncatch_up: skip\n",
        )
        .unwrap();
        assert_eq!(job.id, "weekly-notices");
        assert_eq!(job.agent, "karen");
        assert_eq!(job.describe_trigger(), "cron \"0 9 * * mon\" (-05:00)");
        assert!(!job.enabled);
        assert_eq!(job.catch_up, CatchUp::Skip);
        // An unquoted offset and time read as text too.
        let job = parse("prompt: x\nat: 2026-12-01T09:00\nutc_offset: +00:00\n").unwrap();
        assert_eq!(
            job.trigger,
            Trigger::At(Timestamp::parse_rfc3339("2026-12-01T09:00:00Z").unwrap())
        );
    }

    #[test]
    fn broken_files_say_why() {
        for (text, needle) in [
            ("prompt: x\nevery: 1h\ncolour: red\n", "unknown field `colour`"),
            ("prompt: x\n", "no trigger"),
            (
                "prompt: x\nevery: 1h\ncron: \"0 9 * * *\"\n",
                "more than one trigger",
            ),
            ("prompt: x\ncron: \"0 25 * * *\"\n", "hour: 25 is out of range"),
            ("prompt: x\nevery: 30s\n", "minimum of 1 minute"),
            ("prompt: x\nat: next week\n", "is not a time"),
            (
                "prompt: x\nevery: 1h\ncatch_up: always\n",
                "unknown variant `always`",
            ),
            ("prompt: x\nevery: 1h\nenabled: yes please\n", "enabled"),
            ("prompt: x\nevery: 1h\nutc_offset: KST\n", "utc_offset \"KST\""),
            ("prompt: \"  \"\nevery: 1h\n", "prompt is empty"),
            ("every: 1h\n", "missing field `prompt`"),
            ("prompt: x\nevery: 1h\nid: Big\n", "id \"Big\""),
            ("prompt: x\nevery: 1h\nagent: \"a b\"\n", "agent:"),
            ("prompt: [unclosed\n", "morning.yaml"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(needle), "{text:?}: {err}");
            assert!(err.contains("morning.yaml"), "{err}");
        }
    }

    #[test]
    fn a_job_written_out_reads_back_the_same() {
        for text in [
            "agent: karen\nprompt: 공고\ncron: \"*/30 9-18 * * 1-5\"\ncatch_up: skip\n",
            "prompt: 물 마시기\nevery: 90m\nenabled: false\n",
            "prompt: 약속\nat: \"2026-12-01T09:00\"\nutc_offset: \"+05:30\"\n",
            "prompt: 초 단위\nat: \"2026-12-01T09:00:30Z\"\n",
        ] {
            let job = parse(text).unwrap();
            let again = parse(&job.to_yaml()).unwrap();
            assert_eq!(again, job, "{}", job.to_yaml());
        }
    }

    proptest::proptest! {
        /// No file text makes the parser panic, and whatever parses writes
        /// out to a file that reads back the same.
        #[test]
        fn any_file_text_parses_or_says_why(
            text in "((id|agent|prompt|cron|every|at|utc_offset|enabled|catch_up|[a-z]{1,4}): ?(\"[^\"\n]{0,12}\"|[-+:*/ 0-9a-zA-Z가-힣\\[\\]{}&!|>]{0,14})\n){0,8}"
        ) {
            if let Ok(job) = parse_job_file(Path::new("/home/schedules/p.yaml"), &text, &UtcOffset::KST.into()) {
                let again = parse_job_file(Path::new("/home/schedules/p.yaml"), &job.to_yaml(), &UtcOffset::KST.into());
                proptest::prop_assert_eq!(again.ok(), Some(job));
            }
        }
    }

    #[test]
    fn ids_follow_the_rule() {
        for ok in ["a", "0", "weekly-notices", "a_b-c", &"x".repeat(64)] {
            assert!(validate_job_id(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", "_a", "A", "a.b", "a b", "가", &"x".repeat(65)] {
            assert!(validate_job_id(bad).is_err(), "{bad}");
        }
    }
}
