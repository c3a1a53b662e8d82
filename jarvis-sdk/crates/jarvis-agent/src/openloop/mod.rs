//! Open loops (약속): promises and requests with a time or a condition,
//! detected after each turn, kept per agent, shown on the AGENDA
//! (SPEC.md §11.6).
//!
//! After a turn, a [`LoopJudge`] reads the person's message and the answer:
//! it opens loops (with the session's agent, R-AGENDA-2) and closes the
//! session's own loops that a cancelling utterance or the thought frame's
//! `closed_loops` ends. A loop is closed only from the session that opened
//! it (R-AGENDA-3): the judge only ever sees that session's loops, and the
//! store refuses a close from elsewhere. Any change emits `agenda_changed
//! {session_id}` (R-AGENDA-4).

mod detect;
mod judge;
#[cfg(feature = "postgres")]
mod postgres;
mod store;

pub use detect::{Detected, cancels, detect, due_time, has_cue};
pub use judge::{JUDGE_INSTRUCTION, ModelJudge, RuleJudge};
#[cfg(feature = "postgres")]
pub use postgres::PostgresOpenLoopStore;
pub use store::{JsonlOpenLoopStore, MemoryOpenLoopStore, OPEN_LOOPS_FILE};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

use super::event::{AgentEvent, ScreenNotice};
use super::ui::UIAdapter;
use jarvis_common::{Clock, IdSource, TimeZone, Timestamp, truncate_chars};

/// The notice `agenda_changed`: the AGENDA judgement opened or closed a
/// promise of this session, so screens showing the AGENDA read it again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgendaChanged {
    /// The session whose promises changed.
    pub session_id: String,
}

impl ScreenNotice for AgendaChanged {
    const KIND: &'static str = "agenda_changed";
}

/// A promise by the agent, or a request to be reminded or told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoopKind {
    /// Someone promised to do something.
    Promise,
    /// The person asked to be reminded or told.
    Request,
}

/// One open loop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenLoop {
    /// The loop's id.
    pub id: String,
    /// The session that opened it (the only one that may close it).
    pub session_id: String,
    /// The agent of that session.
    pub agent_id: String,
    /// What was promised or asked, in the person's words.
    pub text: String,
    /// Promise or request.
    pub kind: LoopKind,
    /// When it is due, if a time was given.
    #[serde(default)]
    pub due: Option<Timestamp>,
    /// The condition, if one was given.
    #[serde(default)]
    pub condition: Option<String>,
    /// When it was opened.
    pub created_at: Timestamp,
    /// When it was closed; `None` while open.
    #[serde(default)]
    pub closed_at: Option<Timestamp>,
    /// When its reminder was recorded in its session (a loop is reminded
    /// once, whatever restarts happen); `None` until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reminded_at: Option<Timestamp>,
}

impl OpenLoop {
    /// Whether it is still open.
    pub fn is_open(&self) -> bool {
        self.closed_at.is_none()
    }

    /// Whether it is open and due at `now`.
    pub fn is_due(&self, now: Timestamp) -> bool {
        self.is_open() && self.due.is_some_and(|d| d <= now)
    }
}

/// A loop the judge wants opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewLoop {
    /// What was promised or asked.
    pub text: String,
    /// Promise or request.
    pub kind: LoopKind,
    /// When it is due.
    pub due: Option<Timestamp>,
    /// The condition.
    pub condition: Option<String>,
}

/// What the judge decided for one turn.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Judgement {
    /// Loops to open.
    pub open: Vec<NewLoop>,
    /// Ids of the session's loops to close.
    pub close: Vec<String>,
}

/// What the judge reads.
#[derive(Debug, Clone, Copy)]
pub struct JudgeInput<'a> {
    /// The agent (its provider and model for a model judge).
    pub agent_id: &'a str,
    /// The session.
    pub session_id: &'a str,
    /// The person's message.
    pub user: &'a str,
    /// The answer.
    pub answer: &'a str,
    /// The session's open loops (the only ones it may close).
    pub open: &'a [OpenLoop],
    /// Now.
    pub now: Timestamp,
    /// The person's time zone, for reading times of day.
    pub time_zone: &'a TimeZone,
}

/// Decides which loops a turn opens and closes.
#[async_trait]
pub trait LoopJudge: Send + Sync {
    /// Judges one turn. Never fails: a judge that cannot decide decides nothing.
    async fn judge(&self, input: &JudgeInput<'_>) -> Judgement;
}

/// Why the loop store failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoopError {
    /// The loops file could not be read or written.
    #[error("open loops: cannot {action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The database cannot be reached.
    #[error("open loops (postgres): cannot reach the database at {target}")]
    Unreachable {
        /// Host, port, database and user, never the password.
        target: String,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A database operation failed.
    #[error("open loops (postgres): database error while trying to {op}")]
    Database {
        /// What was being done.
        op: &'static str,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Which loops to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoopFilter {
    /// Only this session's.
    pub session_id: Option<String>,
    /// Only this agent's.
    pub agent_id: Option<String>,
    /// Only open ones.
    pub open_only: bool,
}

/// Keeps open loops.
#[async_trait]
pub trait OpenLoopStore: Send + Sync + fmt::Debug {
    /// Records a new loop.
    async fn open(&self, open_loop: OpenLoop) -> Result<(), LoopError>;
    /// Closes loop `id` — only when it is open and `session_id` opened it.
    async fn close(&self, id: &str, session_id: &str, at: Timestamp) -> Result<bool, LoopError>;
    /// Loops matching `filter`, oldest first.
    async fn list(&self, filter: &LoopFilter) -> Result<Vec<OpenLoop>, LoopError>;
    /// Notes that loop `id`'s reminder was recorded at `at`, durably; answers
    /// whether the loop exists and had not been reminded.
    async fn mark_reminded(&self, id: &str, at: Timestamp) -> Result<bool, LoopError>;
}

/// Judges turns and keeps the AGENDA's loops up to date.
pub struct OpenLoops {
    store: Arc<dyn OpenLoopStore>,
    judge: Arc<dyn LoopJudge>,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdSource>,
    time_zone: TimeZone,
}

impl fmt::Debug for OpenLoops {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenLoops")
            .field("store", &self.store)
            .field("time_zone", &self.time_zone)
            .finish_non_exhaustive()
    }
}

impl OpenLoops {
    /// A service over `store` judging with `judge`.
    pub fn new(
        store: Arc<dyn OpenLoopStore>,
        judge: Arc<dyn LoopJudge>,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdSource>,
    ) -> Self {
        Self {
            store,
            judge,
            clock,
            ids,
            time_zone: TimeZone::UTC,
        }
    }

    /// Reads times of day `minutes` east of UTC (Seoul: 540), all year.
    pub fn with_utc_offset(self, minutes: i32) -> Self {
        self.with_time_zone(minutes)
    }

    /// Reads times of day in `zone` (the person's).
    pub fn with_time_zone(mut self, zone: impl Into<TimeZone>) -> Self {
        self.time_zone = zone.into();
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn OpenLoopStore> {
        &self.store
    }

    /// Judges a finished turn of `session_id` (agent `agent_id`), applies the
    /// judgement and the thought frame's `closed_loops`, and tells `ui` when
    /// the AGENDA changed. Returns what changed.
    #[allow(clippy::too_many_arguments)]
    pub async fn after_turn(
        &self,
        agent_id: &str,
        session_id: &str,
        user: &str,
        answer: &str,
        closed_by_thought: &[String],
        ui: &dyn UIAdapter,
    ) -> Result<Judgement, LoopError> {
        let now = Timestamp::from_system_time(self.clock.now());
        let open = self
            .store
            .list(&LoopFilter {
                session_id: Some(session_id.to_owned()),
                open_only: true,
                ..LoopFilter::default()
            })
            .await?;
        let mut judgement = self
            .judge
            .judge(&JudgeInput {
                agent_id,
                session_id,
                user,
                answer,
                open: &open,
                now,
                time_zone: &self.time_zone,
            })
            .await;
        for closed in closed_by_thought {
            if let Some(l) = open.iter().find(|l| l.id == *closed || l.text == *closed)
                && !judgement.close.contains(&l.id)
            {
                judgement.close.push(l.id.clone());
            }
        }
        let mut changed = false;
        for id in &judgement.close {
            changed |= self.store.close(id, session_id, now).await?;
        }
        for new in &judgement.open {
            self.store
                .open(OpenLoop {
                    id: self.ids.next_id("loop-"),
                    session_id: session_id.to_owned(),
                    agent_id: agent_id.to_owned(),
                    text: truncate_chars(new.text.trim(), 300).to_owned(),
                    kind: new.kind,
                    due: new.due,
                    condition: new.condition.clone(),
                    created_at: now,
                    closed_at: None,
                    reminded_at: None,
                })
                .await?;
            changed = true;
        }
        if changed {
            let _ = ui.on_event(&AgentEvent::notice(&AgendaChanged {
                session_id: session_id.to_owned(),
            }));
        }
        Ok(judgement)
    }

    /// Now, by the service's clock.
    pub fn now(&self) -> Timestamp {
        Timestamp::from_system_time(self.clock.now())
    }

    /// The open loops of `session_id`, oldest first; empty (and logged)
    /// when the store cannot be read, so a turn never fails on it.
    pub async fn open_in(&self, session_id: &str) -> Vec<OpenLoop> {
        let filter = LoopFilter {
            session_id: Some(session_id.to_owned()),
            open_only: true,
            ..LoopFilter::default()
        };
        match self.store.list(&filter).await {
            Ok(loops) => loops,
            Err(error) => {
                tracing::warn!(session_id, %error, "open loops could not be read");
                Vec::new()
            }
        }
    }

    /// Closes `open_loop` after its reminder went to its own session, and
    /// tells `ui` (R-AGENDA-3, R-AGENDA-4). Answers whether it was open.
    pub async fn close_reminded(&self, open_loop: &OpenLoop, ui: &dyn UIAdapter) -> Result<bool, LoopError> {
        let closed = self
            .store
            .close(&open_loop.id, &open_loop.session_id, self.now())
            .await?;
        if closed {
            let _ = ui.on_event(&AgentEvent::notice(&AgendaChanged {
                session_id: open_loop.session_id.clone(),
            }));
        }
        Ok(closed)
    }

    /// Notes that `open_loop`'s reminder was recorded (see
    /// [`OpenLoopStore::mark_reminded`]).
    pub async fn mark_reminded(&self, open_loop: &OpenLoop) -> Result<bool, LoopError> {
        self.store.mark_reminded(&open_loop.id, self.now()).await
    }

    /// Every agent's open loops, oldest first (the AGENDA's promises).
    pub async fn agenda(&self) -> Result<Vec<OpenLoop>, LoopError> {
        self.store
            .list(&LoopFilter {
                open_only: true,
                ..LoopFilter::default()
            })
            .await
    }

    /// Open loops due at `now`, of one session or of all.
    pub async fn due(&self, session_id: Option<&str>, now: Timestamp) -> Result<Vec<OpenLoop>, LoopError> {
        let loops = self
            .store
            .list(&LoopFilter {
                session_id: session_id.map(str::to_owned),
                open_only: true,
                ..LoopFilter::default()
            })
            .await?;
        Ok(loops.into_iter().filter(|l| l.is_due(now)).collect())
    }
}
