//! Goals: what each top-level agent is working towards, kept across
//! sessions and restarts.
//!
//! A goal is one file, `$JARVIS_HOME/goals/<agent_id>/<goal_id>.json`:
//!
//! ```json
//! {"id":"g-1","agent_id":"karen","title":"청약 서류 준비","why":"12월 공고","status":"active",
//!  "progress":40,"due":"2026-12-24","created_at":"2026-12-01T09:00:00.000Z",
//!  "updated_at":"2026-12-02T10:00:00.000Z","notes":[{"at":"…","text":"등본 발급"}]}
//! ```
//!
//! Ids are `g-<n>`, numbered per agent from the highest file there. Files
//! are written to a temporary file and renamed, so a crash leaves the old
//! goal or the new one, never half of either; a file that cannot be read
//! is left where it is, skipped with a warning, and its number is never
//! given again.
//!
//! In a deployment on Postgres ([`GoalStore::postgres`]) the goals are rows
//! of `jarvis_goals` instead, the same JSON per row, shared by every node
//! (see `postgres.rs`).
//!
//! `due` is `YYYY-MM-DD` (the whole day, in the person's zone) or a time:
//! RFC 3339, or `YYYY-MM-DDTHH:MM` read in the person's zone, stored in UTC
//! as `YYYY-MM-DDTHH:MM:SS.mmmZ`. A day is due at its end.
//!
//! | tool | arguments | does |
//! |---|---|---|
//! | `set_goal` | `{title, why?, due?}` | a new active goal of the calling agent; answers its id |
//! | `update_goal` | `{id, title?, progress?, due?, note?}` | changes an active goal; a note is appended with its time |
//! | `close_goal` | `{id, status: "done"\|"dropped", note?}` | closes it (a done goal's progress becomes 100) |
//!
//! Every agent gets the three tools; a call acts on the goals of the
//! calling top-level agent (a sub-agent's call, on its parent's). The
//! active goals of a session's agent open every request of its turns as
//! the `[목표]` section ([`goal_items`]); the AGENDA lists them; the
//! reflection daemon reminds the agent of a goal due within 24 hours or
//! past, once per due date ([`GoalStore::due_unreminded`]).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use jarvis_common::{Clock, TimeZone, Timestamp, char_len};

mod files;
mod tools;

pub use tools::goal_tools;
#[cfg(feature = "postgres")]
mod postgres;

/// The directory of goals under `JARVIS_HOME`.
pub const GOALS_DIR: &str = "goals";
/// The name of the tool that sets a goal.
pub const SET_GOAL_TOOL: &str = "set_goal";
/// The name of the tool that changes a goal.
pub const UPDATE_GOAL_TOOL: &str = "update_goal";
/// The name of the tool that closes a goal.
pub const CLOSE_GOAL_TOOL: &str = "close_goal";
/// Characters a title may hold.
pub const MAX_GOAL_TITLE_CHARS: usize = 200;
/// Characters a `why` or a note may hold.
pub const MAX_GOAL_TEXT_CHARS: usize = 2_000;
/// Notes a goal keeps; older ones are dropped first.
const MAX_NOTES: usize = 100;
/// A goal is reminded once its due time is this close.
const REMIND_BEFORE_MS: i64 = 24 * 3_600_000;

/// Where a goal stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GoalStatus {
    /// Being worked on.
    Active,
    /// Reached.
    Done,
    /// Given up.
    Dropped,
}

/// A dated note on a goal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GoalNote {
    /// When it was written.
    pub at: Timestamp,
    /// What it says.
    pub text: String,
}

/// One goal; see the module docs for the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Goal {
    /// `g-<n>`, unique per agent.
    pub id: String,
    /// The agent whose goal it is.
    pub agent_id: String,
    /// What is wanted.
    pub title: String,
    /// Why it matters (may be empty).
    #[serde(default)]
    pub why: String,
    /// Active, done or dropped.
    pub status: GoalStatus,
    /// 0 to 100.
    #[serde(default)]
    pub progress: u8,
    /// `YYYY-MM-DD` or `YYYY-MM-DDTHH:MM:SS.mmmZ`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due: Option<String>,
    /// When it was set.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
    /// Notes, oldest first.
    #[serde(default)]
    pub notes: Vec<GoalNote>,
    /// The `due` the agent was last reminded of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reminded_due: Option<String>,
}

impl Goal {
    /// The goal's number (`3` for `g-3`).
    pub fn number(&self) -> u64 {
        goal_number(&self.id).unwrap_or(0)
    }

    /// The instant the goal is due: a time as stored, a day at its end in
    /// the person's zone `zone`.
    pub fn due_at(&self, zone: &TimeZone) -> Option<Timestamp> {
        due_instant(self.due.as_deref()?, zone)
    }

    /// The goal as one line of the `[목표]` section and of `/goals`.
    pub fn line(&self) -> String {
        let mut line = format!("{} {} ({}%", self.id, self.title, self.progress);
        if let Some(due) = &self.due {
            line.push_str(&format!(", 마감 {}", due_display(due)));
        }
        line.push(')');
        if !self.why.is_empty() {
            line.push_str(&format!(" — {}", self.why));
        }
        if self.status != GoalStatus::Active {
            line.push_str(match self.status {
                GoalStatus::Done => " [done]",
                _ => " [dropped]",
            });
        }
        line
    }
}

/// A stored due as people read it: a day, or a UTC time to the minute.
fn due_display(due: &str) -> String {
    if due.len() > 10 {
        format!("{} {} UTC", &due[..10], due.get(11..16).unwrap_or(""))
    } else {
        due.to_owned()
    }
}

/// The number of a goal id `g-<n>`.
fn goal_number(id: &str) -> Option<u64> {
    let n = id.strip_prefix("g-")?;
    if n.is_empty() || n.starts_with('0') || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok().filter(|n| i64::try_from(*n).is_ok())
}

/// Reads a due as given (`YYYY-MM-DD`, `YYYY-MM-DDTHH:MM[:SS]` in the
/// person's zone `zone`, or RFC 3339) into its stored form.
pub fn parse_due(text: &str, zone: &TimeZone) -> Result<String, GoalError> {
    let text = text.trim();
    let bad = || {
        GoalError::Invalid(format!(
            "due {text:?} is not a day (YYYY-MM-DD) or a time (RFC 3339, or YYYY-MM-DDTHH:MM in your zone)"
        ))
    };
    if let Some((y, m, d)) = parse_day(text) {
        return Ok(format!("{y:04}-{m:02}-{d:02}"));
    }
    if let Ok(at) = Timestamp::parse_rfc3339(text) {
        return Ok(at.to_string());
    }
    // A local time without an offset.
    let (day, time) = text.split_once(['T', ' ']).ok_or_else(bad)?;
    let (y, m, d) = parse_day(day).ok_or_else(bad)?;
    let mut parts = time.split(':');
    let hour: u32 = parts.next().and_then(|h| h.parse().ok()).ok_or_else(bad)?;
    let minute: u32 = parts.next().and_then(|m| m.parse().ok()).ok_or_else(bad)?;
    let second: u32 = match parts.next() {
        Some(s) => s.parse().map_err(|_| bad())?,
        None => 0,
    };
    if parts.next().is_some() {
        return Err(bad());
    }
    // A time in a spring-forward gap is the first instant after it.
    let at = zone
        .at_local(i64::from(y), m, i64::from(d), hour, minute, second)
        .ok_or_else(bad)?;
    Ok(at.to_string())
}

/// `YYYY-MM-DD` with a real day of a real month.
fn parse_day(text: &str) -> Option<(u32, u32, u32)> {
    let b = text.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let y: u32 = text[..4].parse().ok()?;
    let m: u32 = text[5..7].parse().ok()?;
    let d: u32 = text[8..].parse().ok()?;
    ((1..=12).contains(&m) && d >= 1 && d <= Timestamp::days_in_month(i64::from(y), m)).then_some((y, m, d))
}

/// The instant a stored due falls due: a time as it is, a day at its end
/// (the next day's first instant in `zone`).
fn due_instant(due: &str, zone: &TimeZone) -> Option<Timestamp> {
    match parse_day(due) {
        Some((y, m, d)) => zone.at_local(i64::from(y), m, i64::from(d) + 1, 0, 0, 0),
        None => Timestamp::parse_rfc3339(due).ok(),
    }
}

/// A failure of a goal operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GoalError {
    /// The request is wrong; the text says how.
    #[error("{0}")]
    Invalid(String),
    /// There is no such goal.
    #[error("agent {agent_id:?} has no goal {id:?}")]
    NotFound {
        /// The agent.
        agent_id: String,
        /// The id asked for.
        id: String,
    },
    /// A goal file could not be read or written.
    #[error("goals: could not {op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The goals' database could not be reached, read or written.
    #[error("goals: could not {op}: {source}")]
    Database {
        /// What was being done.
        op: &'static str,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Changes to a goal; `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GoalPatch {
    /// A new title.
    pub title: Option<String>,
    /// New progress, 0 to 100.
    pub progress: Option<u8>,
    /// A new due, as given (see [`parse_due`]); empty removes it.
    pub due: Option<String>,
    /// A note to append.
    pub note: Option<String>,
}

/// Where goals are kept.
#[derive(Debug)]
enum Backend {
    Files(files::FileGoals),
    #[cfg(feature = "postgres")]
    Postgres(postgres::PostgresGoals),
}

/// The goals of every agent of a home, or of every node of a deployment;
/// see the module docs.
#[derive(Debug)]
pub struct GoalStore {
    backend: Backend,
    clock: Arc<dyn Clock>,
    zone: TimeZone,
}

impl GoalStore {
    /// The goals under `home/goals`, timed by `clock`, with days and local
    /// times read in the person's zone `zone`.
    pub fn new(home: &Path, clock: Arc<dyn Clock>, zone: impl Into<TimeZone>) -> Self {
        Self {
            backend: Backend::Files(files::FileGoals::new(home)),
            clock,
            zone: zone.into(),
        }
    }

    /// The goals in the Postgres database at `url` (table `jarvis_goals`,
    /// created when missing), shared by every node of a deployment.
    #[cfg(feature = "postgres")]
    pub async fn postgres(
        url: &str,
        clock: Arc<dyn Clock>,
        zone: impl Into<TimeZone>,
    ) -> Result<Self, GoalError> {
        Ok(Self {
            backend: Backend::Postgres(postgres::PostgresGoals::connect(url).await?),
            clock,
            zone: zone.into(),
        })
    }

    /// The person's zone.
    pub fn zone(&self) -> &TimeZone {
        &self.zone
    }

    fn now(&self) -> Timestamp {
        Timestamp::from_system_time(self.clock.now())
    }

    /// Every goal of `agent_id`, by number; unreadable goals are skipped
    /// with a warning.
    pub async fn list(&self, agent_id: &str) -> Result<Vec<Goal>, GoalError> {
        let mut goals = match &self.backend {
            Backend::Files(files) => files.list(agent_id)?,
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => pg.list(agent_id, false).await?,
        };
        goals.sort_by_key(Goal::number);
        Ok(goals)
    }

    /// The active goals of `agent_id`, by number.
    pub async fn active(&self, agent_id: &str) -> Result<Vec<Goal>, GoalError> {
        let mut goals = match &self.backend {
            Backend::Files(files) => files.list(agent_id)?,
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => pg.list(agent_id, true).await?,
        };
        goals.retain(|g| g.status == GoalStatus::Active);
        goals.sort_by_key(Goal::number);
        Ok(goals)
    }

    /// The agents that have goals, sorted.
    pub async fn agents(&self) -> Result<Vec<String>, GoalError> {
        let mut agents = match &self.backend {
            Backend::Files(files) => files.agents()?,
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => pg.agents().await?,
        };
        agents.sort();
        Ok(agents)
    }

    /// One goal of `agent_id`.
    pub async fn get(&self, agent_id: &str, id: &str) -> Result<Goal, GoalError> {
        let number = number_of(agent_id, id)?;
        let goal = match &self.backend {
            Backend::Files(files) => files.get(agent_id, number)?,
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => pg.get(agent_id, number).await?,
        };
        goal.ok_or_else(|| not_found(agent_id, id))
    }

    /// Reads goal `id`, lets `change` edit it and writes it when `change`
    /// answers `true`, atomically against other writers.
    async fn modify(
        &self,
        agent_id: &str,
        id: &str,
        change: impl FnOnce(&mut Goal) -> Result<bool, GoalError>,
    ) -> Result<Goal, GoalError> {
        let number = number_of(agent_id, id)?;
        let goal = match &self.backend {
            Backend::Files(files) => files.modify(agent_id, number, change)?,
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => pg.modify(agent_id, number, change).await?,
        };
        goal.ok_or_else(|| not_found(agent_id, id))
    }

    /// Sets a new active goal of `agent_id`.
    pub async fn create(
        &self,
        agent_id: &str,
        title: &str,
        why: &str,
        due: Option<&str>,
    ) -> Result<Goal, GoalError> {
        checked_agent(agent_id)?;
        let title = checked_title(title)?;
        let why = checked_text("why", why)?;
        let due = due
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .map(|d| parse_due(d, &self.zone))
            .transpose()?;
        let now = self.now();
        let make = |number: u64| Goal {
            id: format!("g-{number}"),
            agent_id: agent_id.to_owned(),
            title: title.clone(),
            why: why.clone(),
            status: GoalStatus::Active,
            progress: 0,
            due: due.clone(),
            created_at: now,
            updated_at: now,
            notes: Vec::new(),
            reminded_due: None,
        };
        match &self.backend {
            Backend::Files(files) => files.insert(agent_id, make),
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => pg.insert(agent_id, make).await,
        }
    }

    /// Changes an active goal.
    pub async fn update(&self, agent_id: &str, id: &str, patch: GoalPatch) -> Result<Goal, GoalError> {
        let title = patch.title.as_deref().map(checked_title).transpose()?;
        if patch.progress.is_some_and(|p| p > 100) {
            return Err(GoalError::Invalid("progress is a percentage, 0 to 100".into()));
        }
        let due = match patch.due.as_deref().map(str::trim) {
            None => None,
            Some("") => Some(None),
            Some(d) => Some(Some(parse_due(d, &self.zone)?)),
        };
        let note = patch
            .note
            .as_deref()
            .map(|n| checked_text("note", n))
            .transpose()?;
        let now = self.now();
        self.modify(agent_id, id, |goal| {
            if goal.status != GoalStatus::Active {
                return Err(GoalError::Invalid(format!(
                    "goal {id} is closed ({}); set a new goal instead",
                    if goal.status == GoalStatus::Done {
                        "done"
                    } else {
                        "dropped"
                    }
                )));
            }
            if let Some(title) = title {
                goal.title = title;
            }
            if let Some(progress) = patch.progress {
                goal.progress = progress;
            }
            if let Some(due) = due {
                goal.due = due;
            }
            push_note(goal, note, now);
            goal.updated_at = now;
            Ok(true)
        })
        .await
    }

    /// Closes a goal as done or dropped; closing it again the same way
    /// changes nothing.
    pub async fn close(
        &self,
        agent_id: &str,
        id: &str,
        status: GoalStatus,
        note: Option<&str>,
    ) -> Result<Goal, GoalError> {
        if status == GoalStatus::Active {
            return Err(GoalError::Invalid("a goal is closed as done or dropped".into()));
        }
        let note = note.map(|n| checked_text("note", n)).transpose()?;
        let now = self.now();
        self.modify(agent_id, id, |goal| {
            if goal.status == status {
                return Ok(false);
            }
            goal.status = status;
            if status == GoalStatus::Done {
                goal.progress = 100;
            }
            push_note(goal, note, now);
            goal.updated_at = now;
            Ok(true)
        })
        .await
    }

    /// The active goals of every agent due within 24 hours of `now` or
    /// past, whose agent has not been reminded of that due yet.
    pub async fn due_unreminded(&self, now: Timestamp) -> Vec<Goal> {
        let agents = self.agents().await.unwrap_or_else(|error| {
            tracing::warn!(%error, "goals could not be listed");
            Vec::new()
        });
        let mut due = Vec::new();
        for agent in &agents {
            let goals = match self.active(agent).await {
                Ok(goals) => goals,
                Err(error) => {
                    tracing::warn!(%error, agent, "an agent's goals could not be listed");
                    continue;
                }
            };
            due.extend(
                goals
                    .into_iter()
                    .filter(|g| g.reminded_due.is_none() || g.reminded_due != g.due)
                    .filter(|g| {
                        g.due_at(&self.zone)
                            .is_some_and(|at| at.as_millis() - now.as_millis() <= REMIND_BEFORE_MS)
                    }),
            );
        }
        due
    }

    /// Records that `goal`'s agent was reminded of its current due.
    pub async fn mark_reminded(&self, goal: &Goal) -> Result<(), GoalError> {
        self.modify(&goal.agent_id, &goal.id, |current| {
            if current.due != goal.due || current.reminded_due == goal.due {
                return Ok(false);
            }
            current.reminded_due = goal.due.clone();
            Ok(true)
        })
        .await
        .map(|_| ())
    }
}

/// Refuses anything but a plain agent id (it names a directory).
fn checked_agent(agent_id: &str) -> Result<(), GoalError> {
    let safe = !agent_id.is_empty()
        && agent_id.len() <= 64
        && agent_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if safe {
        Ok(())
    } else {
        Err(GoalError::Invalid(format!("{agent_id:?} is not an agent id")))
    }
}

fn not_found(agent_id: &str, id: &str) -> GoalError {
    GoalError::NotFound {
        agent_id: agent_id.to_owned(),
        id: id.to_owned(),
    }
}

/// The number of goal `id` of `agent_id`, checking both.
fn number_of(agent_id: &str, id: &str) -> Result<u64, GoalError> {
    checked_agent(agent_id)?;
    goal_number(id).ok_or_else(|| not_found(agent_id, id))
}

/// The message id of the reminder of `goal`'s current due: one reminder
/// per goal and due.
pub fn goal_reminder_id(goal: &Goal) -> String {
    let due: String = goal
        .due
        .as_deref()
        .unwrap_or("")
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect();
    format!("goal-{}-{}-{}", goal.agent_id, goal.id, due)
}

/// The reminder text of a due goal.
pub fn goal_reminder_text(goal: &Goal) -> String {
    format!(
        "목표 마감이 다가왔어요 (A goal is due): {} — {}%, 마감 {}",
        goal.title,
        goal.progress,
        goal.due.as_deref().map(due_display).unwrap_or_default()
    )
}

/// The items of the `[목표]` section: one line per active goal, nearest
/// due first, then by number.
pub fn goal_items(goals: &[Goal], zone: &TimeZone) -> Vec<String> {
    let mut active: Vec<&Goal> = goals.iter().filter(|g| g.status == GoalStatus::Active).collect();
    active.sort_by_key(|g| (g.due_at(zone).map_or(i64::MAX, Timestamp::as_millis), g.number()));
    active.iter().map(|g| g.line()).collect()
}

fn push_note(goal: &mut Goal, note: Option<String>, at: Timestamp) {
    if let Some(text) = note.filter(|n| !n.is_empty()) {
        goal.notes.push(GoalNote { at, text });
        let over = goal.notes.len().saturating_sub(MAX_NOTES);
        goal.notes.drain(..over);
    }
}

fn checked_title(title: &str) -> Result<String, GoalError> {
    let title = title.split_whitespace().collect::<Vec<_>>().join(" ");
    if title.is_empty() {
        return Err(GoalError::Invalid("a goal needs a title".into()));
    }
    if char_len(&title) > MAX_GOAL_TITLE_CHARS {
        return Err(GoalError::Invalid(format!(
            "a title holds at most {MAX_GOAL_TITLE_CHARS} characters"
        )));
    }
    Ok(title)
}

fn checked_text(what: &str, text: &str) -> Result<String, GoalError> {
    let text = text.trim();
    if char_len(text) > MAX_GOAL_TEXT_CHARS {
        return Err(GoalError::Invalid(format!(
            "{what} holds at most {MAX_GOAL_TEXT_CHARS} characters"
        )));
    }
    Ok(text.to_owned())
}

/// Answers `/goals` and `/goal add|done|drop …` for `agent_id`.
pub async fn goal_command(store: &GoalStore, agent_id: &str, name: &str, rest: &str) -> String {
    const USAGE: &str = "사용법 (usage): /goals, /goal add <title>, /goal done <id>, /goal drop <id>";
    if name == "goals" {
        return match store.list(agent_id).await {
            Ok(goals) if goals.iter().any(|g| g.status == GoalStatus::Active) => {
                let mut out = String::from("목표 (goals):");
                for line in goal_items(&goals, store.zone()) {
                    out.push_str("\n- ");
                    out.push_str(&line);
                }
                out
            }
            Ok(_) => "진행 중인 목표가 없어요. (No active goals.)".into(),
            Err(e) => format!("목표를 읽지 못했어요 (goals not read): {e}"),
        };
    }
    let (verb, arg) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let arg = arg.trim();
    let result = match verb {
        "add" if !arg.is_empty() => store
            .create(agent_id, arg, "", None)
            .await
            .map(|g| format!("목표를 세웠어요 (goal set): {}", g.line())),
        "done" | "drop" if !arg.is_empty() => {
            let status = if verb == "done" {
                GoalStatus::Done
            } else {
                GoalStatus::Dropped
            };
            store
                .close(agent_id, arg, status, None)
                .await
                .map(|g| format!("목표를 닫았어요 (goal closed): {}", g.line()))
        }
        _ => return USAGE.into(),
    };
    result.unwrap_or_else(|e| format!("{e}\n{USAGE}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use jarvis_common::ManualClock;

    fn kst() -> TimeZone {
        TimeZone::from_offset_minutes(9 * 60)
    }

    fn store() -> (tempfile::TempDir, GoalStore, Arc<ManualClock>) {
        let home = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(
            Timestamp::parse_rfc3339("2026-12-01T00:00:00Z")
                .unwrap()
                .to_system_time(),
        ));
        let store = GoalStore::new(home.path(), clock.clone(), kst());
        (home, store, clock)
    }

    #[test]
    fn dues_are_days_or_times_in_the_persons_zone() {
        assert_eq!(parse_due("2026-12-24", &kst()).unwrap(), "2026-12-24");
        assert_eq!(
            parse_due("2026-12-24T18:00", &kst()).unwrap(),
            "2026-12-24T09:00:00.000Z"
        );
        assert_eq!(
            parse_due("2026-12-24T18:00:00+09:00", &TimeZone::UTC).unwrap(),
            "2026-12-24T09:00:00.000Z"
        );
        for bad in ["2026-02-30", "tomorrow", "2026-12-24T25:00", "2026-13-01", ""] {
            assert!(parse_due(bad, &kst()).is_err(), "{bad}");
        }
        // A day is due at its end in the zone.
        assert_eq!(
            due_instant("2026-12-24", &kst()).unwrap().to_string(),
            "2026-12-24T15:00:00.000Z"
        );
    }

    #[tokio::test]
    async fn ids_count_on_per_agent_past_unreadable_files() {
        let (home, store, _) = store();
        assert_eq!(store.create("main", "a", "", None).await.unwrap().id, "g-1");
        assert_eq!(store.create("karen", "b", "", None).await.unwrap().id, "g-1");
        std::fs::write(home.path().join("goals/main/g-7.json"), "{torn").unwrap();
        assert_eq!(store.create("main", "c", "", None).await.unwrap().id, "g-8");
        let ids: Vec<String> = store
            .list("main")
            .await
            .unwrap()
            .into_iter()
            .map(|g| g.id)
            .collect();
        assert_eq!(ids, ["g-1", "g-8"]);
        assert!(store.create("../x", "a", "", None).await.is_err());
        assert!(store.get("main", "../../etc/passwd").await.is_err());
        assert!(store.create("main", "  ", "", None).await.is_err());
    }

    #[tokio::test]
    async fn updates_and_closing_keep_notes_and_refuse_closed_goals() {
        let (_home, store, clock) = store();
        let g = store
            .create("main", "청약 준비", "12월 공고", Some("2026-12-24"))
            .await
            .unwrap();
        clock.advance(std::time::Duration::from_secs(60));
        let patch = GoalPatch {
            progress: Some(40),
            note: Some("등본 발급".into()),
            ..GoalPatch::default()
        };
        let g = store.update("main", &g.id, patch).await.unwrap();
        assert_eq!((g.progress, g.notes.len()), (40, 1));
        assert!(g.updated_at > g.created_at);
        let bad = GoalPatch {
            progress: Some(101),
            ..GoalPatch::default()
        };
        assert!(store.update("main", &g.id, bad).await.is_err());
        let done = store
            .close("main", &g.id, GoalStatus::Done, Some("끝"))
            .await
            .unwrap();
        assert_eq!((done.progress, done.notes.len()), (100, 2));
        assert_eq!(
            store.close("main", &g.id, GoalStatus::Done, None).await.unwrap(),
            done
        );
        assert!(store.update("main", &g.id, GoalPatch::default()).await.is_err());
        assert!(store.active("main").await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_goal_is_due_for_a_reminder_once_per_due() {
        let (_home, store, _) = store();
        let soon = store.create("main", "a", "", Some("2026-12-01")).await.unwrap();
        store.create("main", "b", "", Some("2026-12-31")).await.unwrap();
        store.create("main", "c", "", None).await.unwrap();
        let now = Timestamp::parse_rfc3339("2026-12-01T00:00:00Z").unwrap();
        let due = store.due_unreminded(now).await;
        assert_eq!(due.iter().map(|g| g.id.as_str()).collect::<Vec<_>>(), ["g-1"]);
        store.mark_reminded(&due[0]).await.unwrap();
        assert!(store.due_unreminded(now).await.is_empty());
        // A new due is a new reminder.
        let moved = GoalPatch {
            due: Some("2026-12-01T18:00".into()),
            ..GoalPatch::default()
        };
        let moved = store.update("main", &soon.id, moved).await.unwrap();
        assert_eq!(store.due_unreminded(now).await, vec![moved.clone()]);
        assert_ne!(goal_reminder_id(&moved), goal_reminder_id(&due[0]));
    }

    #[tokio::test]
    async fn commands_add_list_and_close() {
        let (_home, store, _) = store();
        let added = goal_command(&store, "main", "goal", "add 책 한 권 읽기").await;
        assert!(added.contains("g-1 책 한 권 읽기"), "{added}");
        assert!(
            goal_command(&store, "main", "goals", "")
                .await
                .contains("g-1 책 한 권 읽기")
        );
        assert!(
            goal_command(&store, "main", "goal", "drop g-1")
                .await
                .contains("[dropped]")
        );
        assert!(
            goal_command(&store, "main", "goals", "")
                .await
                .contains("No active goals")
        );
        assert!(
            goal_command(&store, "main", "goal", "done g-9")
                .await
                .contains("no goal")
        );
        assert!(goal_command(&store, "main", "goal", "").await.contains("usage"));
    }
}
