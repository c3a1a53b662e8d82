//! The AGENDA (SPEC.md §11.6): one list of every agent's schedules and
//! promises (open loops), each with its agent (R-AGENDA-1, R-SCHED-3).
//!
//! The assembly layer, which knows the team, puts the list together
//! through [`AgendaSource`]; the `/agenda` command and `GET /api/agenda`
//! show it.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use jarvis_common::{TimeZone, Timestamp};

/// What an AGENDA item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgendaKind {
    /// A scheduled job.
    Schedule,
    /// A promise or a request to be reminded (an open loop).
    Promise,
    /// An agent's active goal.
    Goal,
    /// An external source: when it is checked next, and whether it fails.
    Source,
}

/// One line of the AGENDA.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgendaItem {
    /// Schedule or promise.
    pub kind: AgendaKind,
    /// The job's or the loop's id.
    pub id: String,
    /// The agent it belongs to: the job's `agent`, or the agent of the
    /// session that opened the loop.
    pub agent_id: String,
    /// That agent's display name.
    pub agent_name: String,
    /// That agent's `primary` colour, `#rrggbb`, for its label.
    pub color: String,
    /// The job's prompt or what was promised.
    pub text: String,
    /// When: the job's next run, or the loop's due time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<Timestamp>,
    /// How the job repeats (`cron 0 9 * * 1`, `every 30m`), or the loop's
    /// condition (`SH 공고 나오면`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The session that opened the loop (promises only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

impl AgendaItem {
    /// The item as one line for the terminal and `/agenda`, its time the
    /// local time in `zone` (the person's).
    pub fn line(&self, zone: impl Into<TimeZone>) -> String {
        let mut line = format!("[{}] {}", self.agent_name, self.text);
        if let Some(when) = self.when {
            let t = zone.into().civil(when);
            line.push_str(&format!(
                " — {:04}-{:02}-{:02} {:02}:{:02}",
                t.year, t.month, t.day, t.hour, t.minute
            ));
        }
        if let Some(detail) = &self.detail {
            line.push_str(&format!(" ({detail})"));
        }
        line
    }
}

/// Gives the AGENDA: schedules first (soonest first), then promises
/// (due ones by due time, then the others oldest first).
#[async_trait]
pub trait AgendaSource: Send + Sync {
    /// The whole AGENDA; a part that cannot be read is left out and logged.
    async fn agenda(&self) -> Vec<AgendaItem>;
}
