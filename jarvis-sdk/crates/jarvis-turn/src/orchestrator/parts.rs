//! What an [`AgentSession`](super::AgentSession) is made of
//! ([`AgentSessionParts`]), and what its budget lets the next turn spend.

use std::fmt;
use std::sync::Arc;

use crate::approval::ApprovalBroker;
use crate::cassette::CassetteRecorder;
use crate::commands::SlashCommands;
use crate::security::SecurityPipeline;
use crate::usage::UsageMeter;
use jarvis_agent::{
    Allowance, Budget, Harness, NoThinking, OpenLoops, ScreenHub, SessionId, SessionKind, ThinkingHook,
};
use jarvis_common::{TimeZone, Timestamp};

/// The parts an [`AgentSession`](super::AgentSession) is made of; the assembly layer's session
/// builder fills them in.
#[non_exhaustive]
pub struct AgentSessionParts {
    /// The session.
    pub id: SessionId,
    /// Its agent (fixed at creation).
    pub agent_id: String,
    /// Whether it is a peer session.
    pub kind: SessionKind,
    /// Its security pipeline (R-SEC-5: one per session).
    pub security: SecurityPipeline,
    /// The thinking slot.
    pub thinking: Arc<dyn ThinkingHook>,
    /// Runs turns; its loop context's `ui` must be `screens`.
    pub harness: Harness,
    /// The screens attached to the session.
    pub screens: ScreenHub,
    /// The session's approval broker (also the approver of the harness's gate).
    pub broker: ApprovalBroker,
    /// Slash commands, answered without the model.
    pub commands: Option<Arc<dyn SlashCommands>>,
    /// The AGENDA's open loops: judged after each turn of a person's session.
    pub open_loops: Option<Arc<OpenLoops>>,
    /// Records each turn's tokens and cost in the usage ledger.
    pub usage: Option<UsageMeter>,
    /// The agent's limits per turn, session and day (unlimited by default).
    pub budget: Budget,
    /// The person's time zone: where a budget's day starts.
    pub time_zone: TimeZone,
    /// Where a background answer goes when no screen is attached to see it.
    pub notifier: Option<Arc<dyn AnswerNotifier>>,
    /// Records the session's exchanges while it is enabled (see
    /// [`crate::cassette`]); give the same recorder to the broker
    /// ([`ApprovalBroker::with_cassette`]) so approvals are recorded too.
    pub cassette: Option<Arc<CassetteRecorder>>,
}

/// Where a background answer goes when it ends while no screen is attached
/// to see it: the person's notification channels (the initiative layer's
/// `Notifier` is one).
#[async_trait::async_trait]
pub trait AnswerNotifier: Send + Sync {
    /// Sends `text`, the answer `message_id` of agent `agent_id` in session
    /// `session_id`, through the channels; failures are the notifier's to
    /// report.
    async fn notify_answer(&self, session_id: &str, agent_id: &str, message_id: &str, text: &str);
}

impl fmt::Debug for AgentSessionParts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentSessionParts")
            .field("id", &self.id)
            .field("agent_id", &self.agent_id)
            .field("kind", &self.kind)
            .field("security", &self.security)
            .finish_non_exhaustive()
    }
}

impl AgentSessionParts {
    /// Parts with no thinking; the harness's events must go to `screens`.
    pub fn new(
        id: SessionId,
        agent_id: impl Into<String>,
        kind: SessionKind,
        security: SecurityPipeline,
        harness: Harness,
        screens: ScreenHub,
        broker: ApprovalBroker,
    ) -> Self {
        Self {
            id,
            agent_id: agent_id.into(),
            kind,
            security,
            thinking: Arc::new(NoThinking),
            harness,
            screens,
            broker,
            commands: None,
            open_loops: None,
            usage: None,
            budget: Budget::default(),
            time_zone: TimeZone::UTC,
            notifier: None,
            cassette: None,
        }
    }

    /// A background answer that ends while no screen is attached goes
    /// through `notifier`'s channels.
    pub fn with_notifier(mut self, notifier: Arc<dyn AnswerNotifier>) -> Self {
        self.notifier = Some(notifier);
        self
    }

    /// Records the session's exchanges in `cassette` while it is enabled.
    pub fn with_cassette(mut self, cassette: Arc<CassetteRecorder>) -> Self {
        self.cassette = Some(cassette);
        self
    }

    /// Answers slash commands with `commands`.
    pub fn with_commands(mut self, commands: Arc<dyn SlashCommands>) -> Self {
        self.commands = Some(commands);
        self
    }

    /// Judges open loops after every turn (never in peer sessions, where
    /// the person is not speaking).
    pub fn with_open_loops(mut self, open_loops: Arc<OpenLoops>) -> Self {
        self.open_loops = Some(open_loops);
        self
    }

    /// Puts a thinking hook in the slot.
    pub fn with_thinking(mut self, thinking: Arc<dyn ThinkingHook>) -> Self {
        self.thinking = thinking;
        self
    }

    /// Records every turn's tokens and cost with `meter` (see the
    /// module docs).
    pub fn with_usage(mut self, meter: UsageMeter) -> Self {
        self.usage = Some(meter);
        self
    }

    /// Bounds the session's turns by `budget`, days starting at midnight in
    /// `zone` (see the module docs).
    pub fn with_budget(mut self, budget: Budget, zone: impl Into<TimeZone>) -> Self {
        self.budget = budget;
        self.time_zone = zone.into();
        self
    }

    /// What the session's next turn may spend: the turn's limits, and what
    /// is left of the session's and the agent's day's; `Err` when a
    /// session or day limit is spent already.
    pub(super) fn allowances(&self) -> Result<Vec<Allowance>, String> {
        let budget = &self.budget;
        let mut allowances = Vec::new();
        if budget.turn_tokens.is_some() || budget.turn_usd.is_some() {
            allowances.push(Allowance {
                tokens: budget.turn_tokens,
                usd: budget.turn_usd,
                name: "the turn budget",
            });
        }
        let Some(meter) = &self.usage else {
            return Ok(allowances);
        };
        let now = Timestamp::from_system_time(meter.clock().now());
        let limits = [
            (
                "the session budget",
                budget.session_tokens,
                budget.session_usd,
                (budget.session_tokens.is_some() || budget.session_usd.is_some())
                    .then(|| meter.ledger().session_spent(self.id.as_str())),
            ),
            (
                "today's budget",
                budget.day_tokens,
                budget.day_usd,
                (budget.day_tokens.is_some() || budget.day_usd.is_some()).then(|| {
                    meter
                        .ledger()
                        .agent_day_spent(&self.agent_id, now, &self.time_zone)
                }),
            ),
        ];
        for (name, tokens, usd, spent) in limits {
            let Some(spent) = spent else { continue };
            let tokens_left = tokens.map(|limit| limit.saturating_sub(spent.tokens));
            // Unknown costs so far: the dollar limit cannot be judged.
            let usd_left = usd.zip(spent.usd).map(|(limit, used)| limit - used);
            if tokens_left == Some(0) || usd_left.is_some_and(|left| left <= 0.0) {
                let what = match (tokens, usd) {
                    (Some(t), Some(u)) => format!("{t} tokens or ${u}"),
                    (Some(t), None) => format!("{t} tokens"),
                    (None, Some(u)) => format!("${u}"),
                    (None, None) => String::new(),
                };
                return Err(format!(
                    "{name} of agent {} ({what}) is spent: {} tokens used. 예산을 다 썼습니다.",
                    self.agent_id, spent.tokens
                ));
            }
            allowances.push(Allowance {
                tokens: tokens_left,
                usd: usd_left,
                name,
            });
        }
        Ok(allowances)
    }
}
