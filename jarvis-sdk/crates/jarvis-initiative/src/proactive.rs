//! Speaking first (SPEC.md §11.5, §17.1 #3): the reflection daemon, the
//! proactive policy and the per-agent feedback learner (R-DEF-8).
//!
//! [`ProactiveDaemon::tick`] delivers, one by one:
//!
//! 1. the messages waiting in the [`Outbox`] (watch reports, follow-ups),
//!    oldest first, each in its own session (`default-<agent>` for watch
//!    reports);
//! 2. a reminder of every due open loop not reminded yet, in the loop's own
//!    session (a request to be reminded is closed by its reminder, with
//!    `agenda_changed`);
//! 3. a reminder of every active goal due within 24 hours or past whose
//!    agent was not reminded of that due yet
//!    ([`with_goals`](ProactiveDaemon::with_goals)), in `default-<agent>`,
//!    keyed `goal-<agent>-<goal id>-<due>`: once per goal and due date.
//!
//! **Exactly once.** Delivering a message first *records* it, as a
//! `proactive` entry of its session's history keyed by its message id
//! ([`SessionStore::append_once`], synced), and only then shows it, as
//! `proactive_message {kind: "proactive"}`, on the screens attached to that
//! session (a screen that attaches later reads it in the history). A
//! reminder's id is `remind-<loop id>` and the loop is marked reminded
//! after the record, so a crash anywhere repeats nothing: the next tick
//! finds the record and only completes the marks. An agent whose
//! definition says `proactive: false` gets the record, never the push
//! (R-REFL-1). Peer sessions are never spoken in.
//!
//! **When.** A session whose turn is running is passed over until it is
//! idle; the check and the push happen under the session's turn lock, so no
//! turn starts in between. A session gets at most one message per *gap*:
//! the configured `min_gap` scaled by the agent's feedback learner,
//! `min_gap × 0.5 / propensity`, kept between half and eight times
//! `min_gap`. A neutral learner (propensity 0.5) gives `min_gap`;
//! dismissals lower the propensity and widen the gap.
//!
//! **Feedback.** A person's `proactive_feedback` (answered, dismissed)
//! reaches [`ProactiveDaemon::feedback`]; a message with no reaction after
//! `ignore_after` counts as ignored. Each reaction goes to the learner of
//! the agent that sent the message.
//!
//! **Several nodes.** On a deployment's shared outbox, open loops and goals
//! every node's daemon sees every message; recording one claims its
//! session, so the node owning the session (or the first to claim an
//! unowned one) records it, and the others leave it waiting quietly.
//!
//! Time comes from the injected clock; [`ProactiveDaemon::spawn`] drives
//! `tick` at an interval, and tests call `tick` themselves.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use super::goals::{GoalStore, goal_reminder_id, goal_reminder_text};
use super::notify::{Notification, Notifier};
use super::outbox::{Outbox, OutboxError, OutboxItem};
use jarvis_agent::{
    EntryBody, NewSession, NoopAdapter, OpenLoop, OpenLoops, ProactiveKind, SessionId, SessionStore,
    UIAdapter,
};
use jarvis_common::{Clock, Timestamp};
use jarvis_turn::AgentSession;

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

/// Whether an agent speaks first, and how welcome it has been.
#[derive(Debug, Clone)]
pub struct AgentStance {
    /// `proactive` in its definition.
    pub proactive: bool,
    /// Its feedback learner.
    pub feedback: Arc<dyn FeedbackLearner>,
}

/// Where code outside a turn (a built-in job, a pack) leaves a message for
/// an agent: the app's reflection daemon, which queues it durably and
/// records it in its session exactly once per message id (a message built
/// again after a crash, with the same id, is not shown twice). The assembly
/// layer implements it.
#[async_trait]
pub trait ProactiveSink: Send + Sync + fmt::Debug {
    /// Queues `item` for its session (`default-<agent>` for reports); an
    /// error means it was not queued, so the caller tries again later.
    async fn enqueue(&self, item: OutboxItem) -> Result<(), String>;
    /// Whether the team has an agent `agent_id`.
    fn has_agent(&self, agent_id: &str) -> bool;
    /// The time now, on the app's clock.
    fn now(&self) -> Timestamp;
}

/// The open sessions of people and the agents' stances; the assembly layer
/// implements it.
pub trait ProactiveSessions: Send + Sync {
    /// Every open person's session (never peer sessions).
    fn targets(&self) -> Vec<ProactiveTarget>;

    /// The stance of `agent_id`, for messages to sessions that are not
    /// open; `None` for an agent the team does not know. The default looks
    /// among the open sessions.
    fn agent(&self, agent_id: &str) -> Option<AgentStance> {
        self.targets()
            .into_iter()
            .find(|t| t.session.agent_id() == agent_id)
            .map(|t| AgentStance {
                proactive: t.proactive,
                feedback: t.feedback,
            })
    }
}

/// What one tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickReport {
    /// `(session id, message id)` of every message recorded in its session.
    pub recorded: Vec<(String, String)>,
    /// `(session id, message id)` of every message shown on the session's screens.
    pub sent: Vec<(String, String)>,
    /// Messages recorded without a push because their agent is not proactive.
    pub not_proactive: usize,
    /// Messages that wait because their session's turn was running.
    pub busy: usize,
    /// Messages that wait for their session's gap.
    pub rate_limited: usize,
}

#[derive(Debug)]
struct Sent {
    agent_id: String,
    at: Timestamp,
    feedback: Arc<dyn FeedbackLearner>,
}

/// What the daemon keeps in the process: when each session last heard from
/// it, and the messages shown that still wait for a reaction. Everything
/// that must survive a restart (what was said, what was reminded, what
/// waits) is on disk: the histories, the loops, the outbox.
#[derive(Debug, Default)]
struct State {
    last_sent: HashMap<String, Timestamp>,
    outstanding: HashMap<String, Sent>,
}

/// The reflection daemon; see the module docs.
pub struct ProactiveDaemon {
    sessions: Arc<dyn ProactiveSessions>,
    loops: Option<Arc<OpenLoops>>,
    goals: Option<Arc<GoalStore>>,
    notifier: Option<Arc<Notifier>>,
    outbox: Arc<Outbox>,
    store: Arc<dyn SessionStore>,
    clock: Arc<dyn Clock>,
    config: ProactiveConfig,
    state: Mutex<State>,
}

impl fmt::Debug for ProactiveDaemon {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProactiveDaemon")
            .field("config", &self.config)
            .field("waiting", &self.outbox.len())
            .finish_non_exhaustive()
    }
}

/// The reminder text of a due loop.
pub fn reminder_text(l: &OpenLoop) -> String {
    format!("잊지 않으셨죠? (A reminder:) {}", l.text)
}

/// The message id of a loop's reminder: one reminder per loop.
pub fn reminder_id(l: &OpenLoop) -> String {
    format!("remind-{}", l.id)
}

/// One message to deliver.
struct Delivery<'a> {
    message_id: &'a str,
    session_id: &'a str,
    agent_id: &'a str,
    kind: ProactiveKind,
    text: &'a str,
}

impl ProactiveDaemon {
    /// A daemon over `sessions`, recording in `store`, delivering what waits
    /// in `outbox` and reminding of due loops in `loops` when given.
    pub fn new(
        sessions: Arc<dyn ProactiveSessions>,
        loops: Option<Arc<OpenLoops>>,
        outbox: Arc<Outbox>,
        store: Arc<dyn SessionStore>,
        clock: Arc<dyn Clock>,
        config: ProactiveConfig,
    ) -> Self {
        Self {
            sessions,
            loops,
            outbox,
            store,
            clock,
            config,
            state: Mutex::default(),
            goals: None,
            notifier: None,
        }
    }

    /// A message recorded while no screen shows its session goes to
    /// `notifier`'s channels too (once).
    pub fn with_notifier(mut self, notifier: Arc<Notifier>) -> Self {
        self.notifier = Some(notifier);
        self
    }

    /// Also reminds agents of their due goals in `goals`.
    pub fn with_goals(mut self, goals: Arc<GoalStore>) -> Self {
        self.goals = Some(goals);
        self
    }

    fn now(&self) -> Timestamp {
        Timestamp::from_system_time(self.clock.now())
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The outbox the daemon delivers from.
    pub fn outbox(&self) -> &Arc<Outbox> {
        &self.outbox
    }

    /// Queues `item` (durably, waiting while the outbox is full); the next
    /// ticks deliver it. Answers `false` when a message with its id waits
    /// already.
    pub async fn enqueue(&self, item: OutboxItem) -> Result<bool, OutboxError> {
        self.outbox.put(item).await
    }

    /// Messages waiting for `agent_id`.
    pub async fn queued(&self, agent_id: &str) -> usize {
        self.outbox
            .pending()
            .await
            .iter()
            .filter(|i| i.agent_id == agent_id)
            .count()
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

    /// One round: the outbox, then due reminders; see the module docs.
    pub async fn tick(&self) -> TickReport {
        let now = self.now();
        self.expire_ignored(now);
        let mut report = TickReport::default();
        let targets = self.sessions.targets();
        for item in self.outbox.pending().await {
            let delivery = Delivery {
                message_id: &item.message_id,
                session_id: &item.session_id,
                agent_id: &item.agent_id,
                kind: item.kind,
                text: &item.text,
            };
            if self.deliver(&delivery, &targets, now, &mut report).await {
                self.outbox.done(&item.message_id).await;
            }
        }
        if let Some(loops) = &self.loops {
            let due = match loops.due(None, now).await {
                Ok(due) => due,
                Err(error) => {
                    tracing::warn!(%error, "reflection: due loops could not be read");
                    Vec::new()
                }
            };
            for l in due.into_iter().filter(|l| l.reminded_at.is_none()) {
                let (id, text) = (reminder_id(&l), reminder_text(&l));
                let delivery = Delivery {
                    message_id: &id,
                    session_id: &l.session_id,
                    agent_id: &l.agent_id,
                    kind: ProactiveKind::Proactive,
                    text: &text,
                };
                if !self.deliver(&delivery, &targets, now, &mut report).await {
                    continue;
                }
                if let Err(error) = loops.mark_reminded(&l).await {
                    tracing::warn!(%error, loop_id = %l.id, "a reminded loop could not be marked; the next tick does it");
                    continue;
                }
                if l.kind == jarvis_agent::LoopKind::Request {
                    // The reminder was the request; its own session closes it.
                    let open = targets.iter().find(|t| t.session.id().as_str() == l.session_id);
                    let ui: &dyn UIAdapter = match open {
                        Some(t) => t.session.screens(),
                        None => &NoopAdapter,
                    };
                    if let Err(error) = loops.close_reminded(&l, ui).await {
                        tracing::warn!(%error, loop_id = %l.id, "a reminded loop could not be closed");
                    }
                }
            }
        }
        if let Some(goals) = &self.goals {
            for goal in goals.due_unreminded(now).await {
                let (id, text) = (goal_reminder_id(&goal), goal_reminder_text(&goal));
                let session_id = format!("default-{}", goal.agent_id);
                let delivery = Delivery {
                    message_id: &id,
                    session_id: &session_id,
                    agent_id: &goal.agent_id,
                    kind: ProactiveKind::Proactive,
                    text: &text,
                };
                if self.deliver(&delivery, &targets, now, &mut report).await
                    && let Err(error) = goals.mark_reminded(&goal).await
                {
                    tracing::warn!(%error, goal = %goal.id, "a reminded goal could not be marked; the next tick does it");
                }
            }
        }
        report
    }

    /// Records `d` in its session and shows it; answers whether it is
    /// recorded (now or before), `false` when it must wait.
    async fn deliver(
        &self,
        d: &Delivery<'_>,
        targets: &[ProactiveTarget],
        now: Timestamp,
        report: &mut TickReport,
    ) -> bool {
        let open = targets.iter().find(|t| t.session.id().as_str() == d.session_id);
        let stance = match open {
            Some(t) => Some(AgentStance {
                proactive: t.proactive,
                feedback: t.feedback.clone(),
            }),
            None => self.sessions.agent(d.agent_id),
        };
        if open.is_some_and(|t| t.session.is_busy()) {
            report.busy += 1;
            return false;
        }
        if let Some(stance) = stance.as_ref().filter(|s| s.proactive) {
            let gap = self.gap(stance.feedback.propensity());
            let last = self.state().last_sent.get(d.session_id).copied();
            if last.is_some_and(|last| now.as_millis() - last.as_millis() < gap.as_millis() as i64) {
                report.rate_limited += 1;
                return false;
            }
        }
        let Ok(session_id) = SessionId::new(d.session_id) else {
            tracing::error!(session_id = %d.session_id, message_id = %d.message_id,
                "reflection: a message names a session that cannot exist; it is dropped");
            return true;
        };
        let entry = EntryBody::Proactive {
            proactive_kind: d.kind,
            message_id: d.message_id.to_owned(),
            text: d.text.to_owned(),
        };
        let recorded = async {
            self.store
                .get_or_create(NewSession::user(session_id.clone(), d.agent_id))
                .await?;
            let appended = self.store.append_once(&session_id, entry).await?;
            self.store.sync(&session_id).await?;
            Ok::<bool, jarvis_agent::SessionError>(appended)
        }
        .await;
        let appended = match recorded {
            Ok(appended) => appended,
            // A deployment's shared outbox: the node owning the session
            // records it.
            Err(error @ jarvis_agent::SessionError::OwnedElsewhere { .. }) => {
                tracing::debug!(session_id = %d.session_id, message_id = %d.message_id, %error,
                    "reflection: the message is left to the node owning its session");
                return false;
            }
            Err(error) => {
                tracing::warn!(session_id = %d.session_id, message_id = %d.message_id, %error,
                    "reflection: a message could not be recorded; it is tried again");
                return false;
            }
        };
        if appended {
            report
                .recorded
                .push((d.session_id.to_owned(), d.message_id.to_owned()));
        }
        let Some(stance) = stance.filter(|s| s.proactive) else {
            report.not_proactive += 1;
            return true;
        };
        self.state().last_sent.insert(d.session_id.to_owned(), now);
        let attached = open.is_some_and(|t| !t.session.screens().is_empty());
        if appended
            && !attached
            && let Some(notifier) = &self.notifier
        {
            let notification = Notification {
                message_id: d.message_id.to_owned(),
                session_id: d.session_id.to_owned(),
                agent_id: d.agent_id.to_owned(),
                agent_name: notifier.agent_name(d.agent_id),
                kind: d.kind,
                text: d.text.to_owned(),
                at: now,
            };
            notifier.notify(&notification).await;
        }
        // A message recorded before a crash is in the history already;
        // it is not pushed a second time.
        if appended
            && let Some(t) = open
            && t.session.show_when_idle(d.message_id, d.kind, d.text)
        {
            self.state().outstanding.insert(
                d.message_id.to_owned(),
                Sent {
                    agent_id: d.agent_id.to_owned(),
                    at: now,
                    feedback: stance.feedback,
                },
            );
            report
                .sent
                .push((d.session_id.to_owned(), d.message_id.to_owned()));
        }
        true
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

    /// Ticks every `interval` until `cancel` fires, on a task of its own.
    pub fn spawn(self: Arc<Self>, cancel: CancellationToken) -> tokio::task::JoinHandle<()> {
        tokio::spawn(self.run(cancel))
    }

    /// Ticks every `interval` until `cancel` fires (the app runs it under
    /// its supervisor, which starts it again should it fail).
    pub async fn run(self: Arc<Self>, cancel: CancellationToken) {
        let mut interval = tokio::time::interval(self.config.interval);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = interval.tick() => {
                    let report = self.tick().await;
                    if !report.recorded.is_empty() {
                        tracing::debug!(recorded = report.recorded.len(), sent = report.sent.len(), "proactive messages delivered");
                    }
                }
            }
        }
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
