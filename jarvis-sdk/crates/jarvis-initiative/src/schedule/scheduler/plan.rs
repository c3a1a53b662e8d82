//! The catch-up rule: of a job's slots due since its last recorded one,
//! which runs and which are recorded `skipped`.

use std::time::Duration;

use super::MAX_SKIPPED_RECORDS;
use crate::schedule::job::{CatchUp, Job};
use jarvis_common::Timestamp;

/// What to do with a job's due slots.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Plan {
    pub(super) run: Option<Timestamp>,
    /// Chronological; at most [`MAX_SKIPPED_RECORDS`], the most recent.
    pub(super) skipped: Vec<Timestamp>,
}

/// The catch-up rule over the slots in `(anchor, now]`.
pub(super) fn plan(job: &Job, anchor: Timestamp, now: Timestamp, grace: Duration) -> Plan {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{DEFAULT_GRACE, JobOrigin, Trigger};
    use jarvis_common::TimeZone;

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
