//! Speaking first (SPEC.md §11.5, §17.1 #3): the reflection daemon, the
//! proactive policy and the per-agent feedback learner (R-DEF-8).
//!
//! [`ProactiveDaemon::tick`] looks at every open session of a person
//! ([`ProactiveSessions`]), skipping agents whose definition says
//! `proactive: false` (R-REFL-1) and sessions whose turn is running, and
//! may send one `proactive_message {kind: "proactive"}` per session:
//!
//! 1. a message queued for the session's agent ([`ProactiveDaemon::enqueue`]:
//!    watch results, follow-ups), oldest first;
//! 2. otherwise a reminder of the session's oldest due open loop (each loop
//!    once; a request to be reminded is closed by its reminder, in its own
//!    session, with `agenda_changed`).
//!
//! **Rate.** A session gets at most one message per *gap*: the configured
//! `min_gap` scaled by the agent's feedback learner, `min_gap × 0.5 /
//! propensity`, kept between half and eight times `min_gap`. A neutral
//! learner (propensity 0.5) gives `min_gap`; dismissals lower the
//! propensity and widen the gap.
//!
//! **Feedback.** A person's `proactive_feedback` (answered, dismissed)
//! reaches [`ProactiveDaemon::feedback`]; a message with no reaction after
//! `ignore_after` counts as ignored. Each reaction goes to the learner of
//! the agent that sent the message.
//!
//! Time comes from the injected clock; [`ProactiveDaemon::spawn`] drives
//! `tick` at an interval, and tests call `tick` themselves.

use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use super::session::AgentSession;
use crate::agent::{OpenLoop, OpenLoops};
use crate::common::{Clock, Timestamp};

/// How a person reacted to a message an agent sent on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reaction {
    /// The person answered it.
    Answered,
    /// The person dismissed it.
    Dismissed,
    /// Nobody reacted in time.
    Ignored,
}

/// Learns, per agent, how welcome unprompted messages are (R-DEF-8).
pub trait FeedbackLearner: Send + Sync + fmt::Debug {
    /// Records a reaction.
    fn record(&self, reaction: Reaction);
    /// How willing the agent should be to speak first, 0.0 to 1.0.
    fn propensity(&self) -> f32;
}

/// Counts reactions; the propensity is the answered share, with a neutral
/// prior of one answer and one dismissal, an ignored message weighing half
/// a dismissal.
// ponytail: a Laplace-smoothed ratio; the seeds do not say how the
// reference learner works.
#[derive(Debug, Default)]
pub struct CountingFeedback {
    answered: AtomicU32,
    dismissed: AtomicU32,
    ignored: AtomicU32,
}

impl FeedbackLearner for CountingFeedback {
    fn record(&self, reaction: Reaction) {
        let counter = match reaction {
            Reaction::Answered => &self.answered,
            Reaction::Dismissed => &self.dismissed,
            Reaction::Ignored => &self.ignored,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn propensity(&self) -> f32 {
        let a = self.answered.load(Ordering::Relaxed) as f32;
        let d = self.dismissed.load(Ordering::Relaxed) as f32;
        let i = self.ignored.load(Ordering::Relaxed) as f32;
        (a + 1.0) / (a + d + 0.5 * i + 2.0)
    }
}

/// Settings of the daemon.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ProactiveConfig {
    /// How often [`ProactiveDaemon::spawn`] ticks. Default 60 s.
    pub interval: Duration,
    /// The gap between two messages to one session at a neutral
    /// propensity. Default 30 minutes.
    pub min_gap: Duration,
    /// A message without a reaction after this long counts as ignored.
    /// Default 1 hour.
    pub ignore_after: Duration,
}

impl Default for ProactiveConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(60),
            min_gap: Duration::from_secs(30 * 60),
            ignore_after: Duration::from_secs(3600),
        }
    }
}

/// One open session the daemon may speak in.
#[derive(Debug, Clone)]
pub struct ProactiveTarget {
    /// The session.
    pub session: Arc<AgentSession>,
    /// Whether its agent speaks first (`proactive` in its definition).
    pub proactive: bool,
    /// Its agent's feedback learner.
    pub feedback: Arc<dyn FeedbackLearner>,
}

/// The open sessions of people; the assembly layer implements it.
pub trait ProactiveSessions: Send + Sync {
    /// Every open person's session (never peer sessions).
    fn targets(&self) -> Vec<ProactiveTarget>;
}

/// What one tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickReport {
    /// `(session id, message id)` of every message sent.
    pub sent: Vec<(String, String)>,
    /// Sessions skipped because their agent is not proactive.
    pub not_proactive: usize,
    /// Sessions skipped because a turn was running.
    pub busy: usize,
    /// Sessions with something to say that had to wait for their gap.
    pub rate_limited: usize,
}

#[derive(Debug)]
struct Sent {
    agent_id: String,
    at: Timestamp,
    feedback: Arc<dyn FeedbackLearner>,
}

// ponytail: the daemon's state lives in the process. After a restart a due
// promise (not a request, which its reminder closes) may be reminded once
// more, and queued messages not yet delivered are gone.
#[derive(Debug, Default)]
struct State {
    last_sent: HashMap<String, Timestamp>,
    reminded: HashSet<String>,
    queued: HashMap<String, VecDeque<String>>,
    outstanding: HashMap<String, Sent>,
}

/// The reflection daemon; see the [module docs](self).
pub struct ProactiveDaemon {
    sessions: Arc<dyn ProactiveSessions>,
    loops: Option<Arc<OpenLoops>>,
    clock: Arc<dyn Clock>,
    config: ProactiveConfig,
    state: Mutex<State>,
}

impl fmt::Debug for ProactiveDaemon {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProactiveDaemon")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The reminder text of a due loop.
pub fn reminder_text(l: &OpenLoop) -> String {
    format!("잊지 않으셨죠? (A reminder:) {}", l.text)
}

impl ProactiveDaemon {
    /// A daemon over `sessions`, reminding of due loops in `loops` when given.
    pub fn new(
        sessions: Arc<dyn ProactiveSessions>,
        loops: Option<Arc<OpenLoops>>,
        clock: Arc<dyn Clock>,
        config: ProactiveConfig,
    ) -> Self {
        Self {
            sessions,
            loops,
            clock,
            config,
            state: Mutex::default(),
        }
    }

    fn now(&self) -> Timestamp {
        Timestamp::from_system_time(self.clock.now())
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `text` for the open sessions of `agent_id` (the next tick
    /// delivers it to the first proactive one that may speak).
    pub fn enqueue(&self, agent_id: &str, text: impl Into<String>) {
        self.state()
            .queued
            .entry(agent_id.to_owned())
            .or_default()
            .push_back(text.into());
    }

    /// Messages queued and not yet delivered, for `agent_id`.
    pub fn queued(&self, agent_id: &str) -> usize {
        self.state().queued.get(agent_id).map_or(0, VecDeque::len)
    }

    /// A person's reaction to message `message_id`; answers whether the
    /// message was known (each message counts once).
    pub fn feedback(&self, message_id: &str, reaction: Reaction) -> bool {
        let sent = self.state().outstanding.remove(message_id);
        match sent {
            Some(sent) => {
                tracing::debug!(agent = %sent.agent_id, ?reaction, "proactive feedback");
                sent.feedback.record(reaction);
                true
            }
            None => false,
        }
    }

    /// The gap a session of an agent with `propensity` must leave between
    /// two messages.
    pub fn gap(&self, propensity: f32) -> Duration {
        let base = self.config.min_gap.as_secs_f64();
        let scaled = base * 0.5 / f64::from(propensity.max(0.01));
        Duration::from_secs_f64(scaled.clamp(base / 2.0, base * 8.0))
    }

    /// One round over the open sessions; see the [module docs](self).
    pub async fn tick(&self) -> TickReport {
        let now = self.now();
        self.expire_ignored(now);
        let mut report = TickReport::default();
        for target in self.sessions.targets() {
            let session = &target.session;
            if !target.proactive {
                report.not_proactive += 1;
                continue;
            }
            if session.is_busy() {
                report.busy += 1;
                continue;
            }
            let id = session.id().to_string();
            let agent = session.agent_id().to_owned();
            let due = self.next_due_loop(&id, now).await;
            let has_queued = self.queued(&agent) > 0;
            if !has_queued && due.is_none() {
                continue;
            }
            let gap = self.gap(target.feedback.propensity());
            let last = self.state().last_sent.get(&id).copied();
            if last.is_some_and(|last| now.as_millis() - last.as_millis() < gap.as_millis() as i64) {
                report.rate_limited += 1;
                continue;
            }
            let text = if has_queued {
                self.state().queued.get_mut(&agent).and_then(VecDeque::pop_front)
            } else {
                None
            };
            let (text, reminder) = match (text, &due) {
                (Some(text), _) => (text, false),
                (None, Some(l)) => (reminder_text(l), true),
                (None, None) => continue,
            };
            let Some(message_id) = session.notify_when_idle(text.clone()) else {
                // A turn started since the check above: try again next tick.
                if !reminder {
                    self.state()
                        .queued
                        .entry(agent.clone())
                        .or_default()
                        .push_front(text);
                }
                report.busy += 1;
                continue;
            };
            if reminder && let Some(l) = &due {
                self.state().reminded.insert(l.id.clone());
            }
            {
                let mut state = self.state();
                state.last_sent.insert(id.clone(), now);
                state.outstanding.insert(
                    message_id.clone(),
                    Sent {
                        agent_id: agent.clone(),
                        at: now,
                        feedback: target.feedback.clone(),
                    },
                );
            }
            if let (Some(l), Some(loops)) = (&due, &self.loops)
                && l.kind == crate::agent::LoopKind::Request
                && self.state().reminded.contains(&l.id)
            {
                // The reminder was the request; its own session closes it.
                if let Err(error) = loops.close_reminded(l, session.screens()).await {
                    tracing::warn!(%error, loop_id = %l.id, "a reminded loop could not be closed");
                }
            }
            report.sent.push((id, message_id));
        }
        report
    }

    async fn next_due_loop(&self, session_id: &str, now: Timestamp) -> Option<OpenLoop> {
        let loops = self.loops.as_ref()?;
        let due = loops.due(Some(session_id), now).await.ok()?;
        let state = self.state();
        due.into_iter().find(|l| !state.reminded.contains(&l.id))
    }

    fn expire_ignored(&self, now: Timestamp) {
        let limit = self.config.ignore_after.as_millis() as i64;
        let expired: Vec<Sent> = {
            let mut state = self.state();
            let ids: Vec<String> = state
                .outstanding
                .iter()
                .filter(|(_, s)| now.as_millis() - s.at.as_millis() >= limit)
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| state.outstanding.remove(id)).collect()
        };
        for sent in expired {
            sent.feedback.record(Reaction::Ignored);
        }
    }

    /// Ticks every `interval` until `cancel` fires.
    pub fn spawn(self: Arc<Self>, cancel: CancellationToken) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(self.config.interval);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = interval.tick() => {
                        let report = self.tick().await;
                        if !report.sent.is_empty() {
                            tracing::debug!(sent = report.sent.len(), "proactive messages sent");
                        }
                    }
                }
            }
        })
    }
}

impl ProactiveSessions for Vec<ProactiveTarget> {
    fn targets(&self) -> Vec<ProactiveTarget> {
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dismissals_lower_the_propensity_and_ignoring_weighs_half() {
        let f = CountingFeedback::default();
        assert_eq!(f.propensity(), 0.5);
        f.record(Reaction::Answered);
        f.record(Reaction::Answered);
        f.record(Reaction::Dismissed);
        assert!((f.propensity() - 0.6).abs() < 1e-6);
        let g = CountingFeedback::default();
        g.record(Reaction::Ignored);
        g.record(Reaction::Ignored);
        let h = CountingFeedback::default();
        h.record(Reaction::Dismissed);
        assert!((g.propensity() - h.propensity()).abs() < 1e-6);
    }
}
