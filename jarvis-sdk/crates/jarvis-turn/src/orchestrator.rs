//! [`AgentSession`]: one session of one agent, and the one way a turn runs
//! (R-LAYER-7): the security pipeline → the thinking hook → the harness
//! (window, store, memory) → the loop.
//!
//! Every screen attached to the session receives the same events and the
//! same approval requests. One turn runs at a time in the foreground: a
//! prompt while a turn runs is refused as busy. Once the turn's
//! `agent_end` went out, the turn counts as over for new prompts: one that
//! arrives while the harness is still recording the turn waits for that
//! (moments) and then runs, so a screen may answer `agent_end` with its
//! next prompt. An input the pipeline
//! refuses reaches the screens as an `input_rejected` event and never
//! reaches the model.
//!
//! **Dual channel.** With [`AgentSession::prompt_dual`], a long job — one the
//! thought frame marks `background`, or a turn still running after
//! [`DualConfig::after`] — is acknowledged at once (a `proactive_message`
//! of kind `filler`) and goes on in the background while the person keeps
//! talking in the same session. Its answer is recorded in the session like
//! any turn and reaches every screen as a `proactive_message` of kind
//! `answer`. [`AgentSession::abort`] cancels background jobs too.
//! [`AgentSession::prompt`] and [`AgentSession::prompt_with`] always wait
//! for the final answer (a delegation returns the callee's stored answer).
//!
//! **Usage.** With a [`UsageMeter`] ([`AgentSessionParts::with_usage`]),
//! every turn that called the model is recorded in the usage ledger, with
//! its own calls only, just before its `agent_end` reaches any screen (so a
//! screen that asks for the session's usage on `agent_end` finds the turn
//! counted). A slash command answered without the model and a rejected
//! input record nothing.

use super::cassette::CassetteRecorder;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Span};

use super::approval::{ApprovalBroker, Attachment};
use super::commands::{CommandContext, SlashCommands};
use super::security::{Caller, SecurityError, SecurityInput, SecurityPipeline};
use super::usage::UsageMeter;
use jarvis_agent::record_turn_outcome;
use jarvis_agent::{
    AgentError, AgentEvent, Allowance, Approver, Budget, FinalMessage, Harness, HubAttachment, LoopContext,
    LoopOutcome, MessageDelta, NoThinking, OpenLoops, PendingTurn, ProactiveKind, ScreenHub, SessionId,
    SessionKind, StopReason, ThinkingHook, ThinkingInput, TurnOptions, TurnReport, TurnTap, UIAdapter,
    UsageTally, UsageTotal,
};
use jarvis_common::Extensions;
use jarvis_common::trace::{self, invoke_agent_span};
use jarvis_common::{TimeZone, Timestamp};
use jarvis_model::ToolResultMessage;
use jarvis_model::{Role, Usage};
use std::collections::VecDeque;
use std::time::SystemTime;

/// Why a prompt did not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TurnError {
    /// A turn of this session is still running.
    #[error("session {0} is busy with another turn")]
    Busy(String),
    /// The security pipeline refused the input.
    #[error(transparent)]
    Rejected(#[from] SecurityError),
    /// The turn could not run (store, configuration).
    #[error(transparent)]
    Agent(#[from] AgentError),
    /// A session or day budget is spent: no turn runs until it frees up
    /// (a new session, the next day, a higher limit).
    #[error("{0}")]
    BudgetExhausted(String),
}

impl TurnError {
    /// Whether the session was busy.
    pub fn is_busy(&self) -> bool {
        matches!(self, TurnError::Busy(_))
    }
}

/// How a prompt is run.
#[derive(Clone)]
#[non_exhaustive]
pub struct PromptOptions {
    /// Who sent it.
    pub caller: Caller,
    /// An unrecorded instruction for every model call of the turn.
    pub turn_instruction: Option<String>,
    /// Values for the turn's tools.
    pub extensions: Extensions,
    /// Approval goes here instead of this session's broker (a delegated
    /// turn asks on the delegating session's screens, R-ASK-8).
    pub approver: Option<Arc<dyn Approver>>,
    /// The turn that delegated this one (`ask_agent`), for the journal.
    pub parent_turn: Option<String>,
    /// The tally of the turn that delegated this one: this turn spends
    /// from what it has left and adds to its total.
    pub parent_usage: Option<Arc<UsageTally>>,
    /// The turn's tap (a replay answering it); `None`: the session's
    /// cassette taps it while recording.
    pub tap: Option<Arc<dyn TurnTap>>,
}

impl fmt::Debug for PromptOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PromptOptions")
            .field("caller", &self.caller)
            .field("turn_instruction", &self.turn_instruction)
            .field("approver", &self.approver.is_some())
            .field("parent_turn", &self.parent_turn)
            .finish_non_exhaustive()
    }
}

impl PromptOptions {
    /// A prompt from `caller` with nothing else.
    pub fn from(caller: Caller) -> Self {
        Self {
            caller,
            turn_instruction: None,
            extensions: Extensions::new(),
            approver: None,
            parent_turn: None,
            parent_usage: None,
            tap: None,
        }
    }
}

/// The parts an [`AgentSession`] is made of; the assembly layer's session
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
    fn allowances(&self) -> Result<Vec<Allowance>, String> {
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

/// Settings of the dual channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DualConfig {
    /// A turn still running after this long goes to the background
    /// (`None`: only when the thought frame says so). Default 20 s.
    pub after: Option<Duration>,
    /// The acknowledgement the person gets when a job goes to the background.
    pub acknowledgement: String,
}

impl Default for DualConfig {
    fn default() -> Self {
        Self {
            after: Some(Duration::from_secs(20)),
            acknowledgement: "시간이 걸리는 일이라 뒤에서 계속할게요. 끝나면 알려 드릴게요. \
                              (This takes a while: I will keep working on it and tell you when it is done.)"
                .to_owned(),
        }
    }
}

/// What [`AgentSession::prompt_dual`] answered.
#[derive(Debug)]
#[non_exhaustive]
pub enum DualReply {
    /// The turn finished in the foreground.
    Done(LoopOutcome),
    /// The turn continues in the background; its answer will arrive as a
    /// `proactive_message` of kind `answer` with this id.
    Background {
        /// The id of the answer's `proactive_message`.
        message_id: String,
        /// The acknowledgement sent to the screens.
        acknowledgement: String,
    },
}

type TurnResult = Result<LoopOutcome, AgentError>;

struct Inner {
    parts: AgentSessionParts,
    dual: DualConfig,
    turn: Arc<TurnSlot>,
    background: Mutex<Vec<(u64, CancellationToken)>>,
    next_job: AtomicU64,
    /// Whether each of the last [`RECENT_TURNS`] turns failed or overflowed.
    recent: Mutex<VecDeque<bool>>,
    /// After-turn work still running (open loops, learning), and its signal.
    after: tokio::sync::watch::Sender<usize>,
    /// A turn of this session was cut short by a restart; the first screen
    /// that attaches is told.
    interrupted: Mutex<Option<String>>,
    /// Fillers no screen was attached to see (they are never recorded).
    fillers_dropped: AtomicU64,
}

/// Turns the router's `recent_failures` signal looks back over.
pub const RECENT_TURNS: usize = 5;

/// One session of one agent; see the module docs.
#[derive(Clone)]
pub struct AgentSession {
    inner: Arc<Inner>,
}

impl fmt::Debug for AgentSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts = &self.inner.parts;
        f.debug_struct("AgentSession")
            .field("id", &parts.id)
            .field("agent_id", &parts.agent_id)
            .field("kind", &parts.kind)
            .field("busy", &self.is_busy())
            .finish_non_exhaustive()
    }
}

/// A screen attached to a session (events and approvals); dropping it detaches the screen.
#[must_use = "the screen is detached when this is dropped"]
#[derive(Debug)]
pub struct SessionAttachment {
    _events: HubAttachment,
    _approvals: Attachment,
}

/// The session's one foreground slot.
#[derive(Default)]
struct TurnSlot {
    state: Mutex<TurnState>,
    /// Woken when the slot empties.
    idle: Notify,
}

#[derive(Default)]
struct TurnState {
    /// The foreground turn's number and abort signal.
    running: Option<(u64, CancellationToken)>,
    /// The foreground turn sent `agent_end` and is being recorded.
    ending: bool,
}

impl TurnSlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, TurnState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Wraps a turn's screens: when that turn's `agent_end` goes out while it
/// is still the foreground turn, marks it as ending (before any screen sees
/// the event), so a prompt sent in answer to `agent_end` waits for the
/// recording instead of being refused as busy. A background job's
/// `agent_end` leaves the foreground turn alone. With a meter, the turn's
/// usage is recorded first, when it called the model.
struct EndWatch {
    slot: Arc<TurnSlot>,
    turn: u64,
    screens: Arc<dyn UIAdapter>,
    usage: Option<TurnMeter>,
}

impl EndWatch {
    /// Puts turn `turn` of `slot` under watch in its loop context (its
    /// screens, its usage meter) and sets its tap (a cassette's).
    fn install(
        ctx: &mut LoopContext,
        slot: Arc<TurnSlot>,
        turn: u64,
        meter: Option<UsageMeter>,
        tap: Option<Arc<dyn TurnTap>>,
    ) {
        ctx.ui = Arc::new(EndWatch {
            slot,
            turn,
            screens: ctx.ui.clone(),
            usage: meter.map(|m| TurnMeter::of(m, ctx)),
        });
        ctx.tap = tap;
    }
}

/// What a turn's [`EndWatch`] records its usage with.
struct TurnMeter {
    meter: UsageMeter,
    session_id: String,
    agent_id: String,
    turn_id: String,
    model: String,
}

impl TurnMeter {
    /// The meter of the turn `ctx` runs: its session, agent and id, and the
    /// model its requests name (the provider's own name when they name
    /// none and the provider picks).
    fn of(meter: UsageMeter, ctx: &LoopContext) -> Self {
        let model = if ctx.model.model.is_empty() {
            ctx.provider.name().to_owned()
        } else {
            ctx.model.model.clone()
        };
        Self {
            meter,
            session_id: ctx.identity.session_id.clone(),
            agent_id: ctx.identity.agent_id.clone(),
            turn_id: ctx.turn_id.clone(),
            model,
        }
    }
}

impl UIAdapter for EndWatch {
    fn on_event(&self, event: &AgentEvent) -> std::ops::ControlFlow<()> {
        if let AgentEvent::AgentEnd {
            final_message, turns, ..
        } = event
        {
            // A turn with no step never called the model (aborted first).
            if let Some(m) = self.usage.as_ref().filter(|_| *turns > 0) {
                m.meter.record_turn(
                    &m.session_id,
                    &m.agent_id,
                    &m.turn_id,
                    &m.model,
                    &final_message.usage,
                );
            }
            let mut state = self.slot.lock();
            if state.running.as_ref().is_some_and(|(turn, _)| *turn == self.turn) {
                state.ending = true;
            }
        }
        self.screens.on_event(event)
    }

    fn on_approval_request(&self, request: &jarvis_agent::ApprovalRequest) {
        self.screens.on_approval_request(request);
    }
}

/// Frees the foreground slot however the prompt ends (also when dropped).
struct Foreground(Arc<TurnSlot>);

impl Drop for Foreground {
    fn drop(&mut self) {
        *self.0.lock() = TurnState::default();
        self.0.idle.notify_waiters();
    }
}

/// Waits for a running turn; dropping it aborts the turn (the prompt's
/// caller went away), unless the turn was handed to the background.
struct Pending {
    result: Option<oneshot::Receiver<TurnResult>>,
    cancel: CancellationToken,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.result.is_some() {
            self.cancel.cancel();
        }
    }
}

impl AgentSession {
    /// A session from its parts, with the default dual channel.
    pub fn new(parts: AgentSessionParts) -> Self {
        Self::with_dual(parts, DualConfig::default())
    }

    /// A session from its parts and dual-channel settings.
    pub fn with_dual(parts: AgentSessionParts, dual: DualConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                parts,
                dual,
                turn: Arc::default(),
                background: Mutex::default(),
                next_job: AtomicU64::new(0),
                recent: Mutex::default(),
                after: tokio::sync::watch::Sender::new(0),
                interrupted: Mutex::default(),
                fillers_dropped: AtomicU64::new(0),
            }),
        }
    }

    /// The session id.
    pub fn id(&self) -> &SessionId {
        &self.inner.parts.id
    }

    /// The session's agent.
    pub fn agent_id(&self) -> &str {
        &self.inner.parts.agent_id
    }

    /// Whether this is a peer session.
    pub fn kind(&self) -> SessionKind {
        self.inner.parts.kind
    }

    /// The session's approval broker.
    pub fn broker(&self) -> &ApprovalBroker {
        &self.inner.parts.broker
    }

    /// The harness (its store, its loop context).
    pub fn harness(&self) -> &Harness {
        &self.inner.parts.harness
    }

    /// Attaches a screen: it receives every event and approval request of
    /// the session from now on (and the approval requests already waiting).
    pub fn attach(&self, screen: Arc<dyn UIAdapter>) -> SessionAttachment {
        SessionAttachment {
            _events: self.inner.parts.screens.attach(screen.clone()),
            _approvals: self.inner.parts.broker.attach(screen),
        }
    }

    /// The session's cassette recorder, when it has one (see
    /// [`crate::cassette`]).
    pub fn cassette(&self) -> Option<&Arc<CassetteRecorder>> {
        self.inner.parts.cassette.as_ref()
    }

    /// Whether a turn is running in the foreground.
    pub fn is_busy(&self) -> bool {
        self.inner.turn.lock().running.is_some()
    }

    /// Waits until no turn runs in the foreground (at once when none does):
    /// a turn that sent its `agent_end` is done once it is recorded and
    /// its span has ended.
    pub async fn until_idle(&self) {
        loop {
            let idle = self.inner.turn.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if !self.is_busy() {
                return;
            }
            idle.await;
        }
    }

    /// Whether a foreground turn is running that has not sent its
    /// `agent_end` yet: what a screen attaching now should show as busy.
    /// [`AgentSession::is_busy`] stays true a little longer, while the
    /// ended turn is recorded.
    pub fn is_answering(&self) -> bool {
        let state = self.inner.turn.lock();
        state.running.is_some() && !state.ending
    }

    /// Whether anything uses the session besides the app that built it: a
    /// turn (foreground, background, or the work after one), an approval
    /// request, an attached screen, another holder of it, or a note for
    /// the next screen. An app only unloads a session that is not in use.
    pub fn in_use(&self) -> bool {
        Arc::strong_count(&self.inner) > 1
            || self.is_busy()
            || self.background_jobs() > 0
            || *self.inner.after.borrow() > 0
            || self.inner.parts.broker.screens() > 0
            || !self.inner.parts.broker.pending().is_empty()
            || self
                .inner
                .interrupted
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_some()
    }

    /// Fillers ("still working on it") sent while no screen was attached:
    /// the only messages that may be lost, so they are counted.
    pub fn fillers_dropped(&self) -> u64 {
        self.inner.fillers_dropped.load(Ordering::Relaxed)
    }

    /// Background jobs still running.
    pub fn background_jobs(&self) -> usize {
        self.inner
            .background
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Aborts the running turn and every background job; `false` when
    /// nothing runs.
    pub fn abort(&self) -> bool {
        let mut any = false;
        if let Some((_, token)) = &self.inner.turn.lock().running {
            token.cancel();
            any = true;
        }
        for (_, token) in self
            .inner
            .background
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            token.cancel();
            any = true;
        }
        any
    }

    /// Runs one turn for `text` from `caller` and waits for its answer.
    pub async fn prompt(&self, text: impl Into<String>, caller: Caller) -> Result<LoopOutcome, TurnError> {
        self.prompt_with(text, PromptOptions::from(caller)).await
    }

    /// Runs one turn with `options` and waits for its answer (also when it
    /// is long).
    pub async fn prompt_with(
        &self,
        text: impl Into<String>,
        options: PromptOptions,
    ) -> Result<LoopOutcome, TurnError> {
        let (mut pending, _, _foreground) = self.start(text.into(), options).await?;
        let result = pending.result.take().expect("a started turn has a receiver");
        Ok(result
            .await
            .map_err(|_| TurnError::Agent(AgentError::InvalidConfig("the turn was lost".into())))??)
    }

    /// Runs one turn; a long one is acknowledged at once and continues in
    /// the background (see the module docs).
    pub async fn prompt_dual(
        &self,
        text: impl Into<String>,
        options: PromptOptions,
    ) -> Result<DualReply, TurnError> {
        let (mut pending, background, foreground) = self.start(text.into(), options).await?;
        let mut result = pending.result.take().expect("a started turn has a receiver");
        if !background {
            let waited = match self.inner.dual.after {
                Some(after) => tokio::time::timeout(after, &mut result).await.ok(),
                None => Some((&mut result).await),
            };
            if let Some(outcome) = waited {
                return Ok(DualReply::Done(outcome.map_err(|_| {
                    TurnError::Agent(AgentError::InvalidConfig("the turn was lost".into()))
                })??));
            }
        }
        // The foreground is free again; the job goes on.
        drop(foreground);
        let inner = &self.inner;
        let job = inner.next_job.fetch_add(1, Ordering::Relaxed);
        let message_id = format!("{}-answer-{job}", inner.parts.id);
        inner
            .background
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((job, pending.cancel.clone()));
        let acknowledgement = inner.dual.acknowledgement.clone();
        if inner.parts.broker.screens() == 0 {
            // Only a filler may be dropped: it says "still working", which
            // the answer makes moot; it is counted.
            inner.fillers_dropped.fetch_add(1, Ordering::Relaxed);
        }
        let _ = inner.parts.screens.on_event(&AgentEvent::ProactiveMessage {
            text: acknowledgement.clone(),
            kind: ProactiveKind::Filler,
            message_id: format!("{}-ack-{job}", inner.parts.id),
        });
        let session = self.clone();
        let id = message_id.clone();
        tokio::spawn(async move {
            let text = match result.await {
                // An aborted job says so through its own agent_end; no answer follows.
                Ok(Ok(outcome)) if outcome.final_message.stop_reason == jarvis_agent::StopReason::Aborted => {
                    None
                }
                Ok(Ok(outcome)) => Some(outcome.final_message.content),
                Ok(Err(error)) => Some(format!("the background job failed: {error}")),
                Err(_) => Some("the background job was lost".to_owned()),
            };
            session
                .inner
                .background
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|(j, _)| *j != job);
            if let Some(text) = text {
                let parts = &session.inner.parts;
                if parts.screens.is_empty()
                    && let Some(notifier) = &parts.notifier
                {
                    notifier
                        .notify_answer(parts.id.as_ref(), &parts.agent_id, &id, &text)
                        .await;
                }
                let _ = parts.screens.on_event(&AgentEvent::ProactiveMessage {
                    text,
                    kind: ProactiveKind::Answer,
                    message_id: id,
                });
            }
        });
        drop(pending);
        Ok(DualReply::Background {
            message_id,
            acknowledgement,
        })
    }

    /// Picks up `pending`, this session's turn that was waiting for a
    /// person when the process stopped (see [`Harness::resume_turn`]), in
    /// the foreground: the session is busy until it ends, screens that
    /// attach meanwhile get its `agent_start {resumed: true}` and its
    /// approval request, and it ends with one `agent_end`. Answers `false`
    /// (and does nothing) when a turn runs already.
    pub fn resume(&self, pending: PendingTurn, settled: Vec<ToolResultMessage>) -> bool {
        let inner = &self.inner;
        let cancel = CancellationToken::new();
        let turn = inner.next_job.fetch_add(1, Ordering::Relaxed);
        {
            let mut state = inner.turn.lock();
            if state.running.is_some() {
                return false;
            }
            *state = TurnState {
                running: Some((turn, cancel.clone())),
                ending: false,
            };
        }
        let foreground = Foreground(inner.turn.clone());
        let session = self.clone();
        let slot = inner.turn.clone();
        let span = self.turn_span();
        let tap = inner.parts.cassette.as_ref().and_then(|c| c.begin_turn());
        tokio::spawn(async move {
            let _foreground = foreground;
            let parts = &session.inner.parts;
            let meter = parts.usage.clone();
            let outcome = parts
                .harness
                .resume_turn(
                    &pending,
                    settled,
                    move |ctx| EndWatch::install(ctx, slot, turn, meter, tap),
                    &cancel,
                )
                .await;
            record_turn_outcome(&Span::current(), &outcome);
            match outcome {
                Ok(outcome) => {
                    session.after_turn(
                    TurnReport::new(
                        &parts.agent_id,
                        parts.id.as_str(),
                        &pending.begin.prompt,
                        &outcome,
                    ),
                    Vec::new(),
                    )
                }
                Err(error) => {
                    tracing::error!(session_id = %parts.id, turn_id = %pending.turn_id(), %error, "a resumed turn failed")
                }
            }
        }
        .instrument(span));
        true
    }

    /// A new `invoke_agent` span for a turn of this session, a child of
    /// the current span.
    fn turn_span(&self) -> Span {
        let parts = &self.inner.parts;
        let identity = &parts.harness.context().identity;
        invoke_agent_span(&parts.agent_id, &identity.agent_name, parts.id.as_str())
    }

    /// Notes that a turn of this session was cut short by a restart; the
    /// first screen that attaches learns it ([`AgentSession::take_interrupted`]).
    pub fn note_interrupted(&self, message: impl Into<String>) {
        *self.inner.interrupted.lock().unwrap_or_else(|e| e.into_inner()) = Some(message.into());
    }

    /// The note of a turn cut short by a restart, once: the screen that
    /// attaches first says so (the server sends `error {code: "interrupted"}`).
    pub fn take_interrupted(&self) -> Option<String> {
        self.inner
            .interrupted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// The screens attached to the session.
    pub fn screens(&self) -> &ScreenHub {
        &self.inner.parts.screens
    }

    /// Sends `text` to every screen of the session as a `proactive_message`
    /// of kind `proactive` and answers its message id. The message is not
    /// recorded in the session.
    // ponytail: unrecorded, so the model does not see what was said unless
    // the person quotes it; recording would put an assistant message
    // without a user turn into the history.
    pub fn notify(&self, text: impl Into<String>) -> String {
        self.announce(text, ProactiveKind::Proactive)
    }

    /// Sends `text` to every screen of the session as a `proactive_message`
    /// of `kind` (a scheduled job's answer, for instance) and answers its
    /// message id. Nothing is recorded in this session.
    pub fn announce(&self, text: impl Into<String>, kind: ProactiveKind) -> String {
        let inner = &self.inner;
        let job = inner.next_job.fetch_add(1, Ordering::Relaxed);
        let label = match kind {
            ProactiveKind::Filler => "filler",
            ProactiveKind::Answer => "answer",
            ProactiveKind::Proactive => "proactive",
        };
        let message_id = format!("{}-{label}-{job}", inner.parts.id);
        let _ = inner.parts.screens.on_event(&AgentEvent::ProactiveMessage {
            text: text.into(),
            kind,
            message_id: message_id.clone(),
        });
        message_id
    }

    /// Shows the message `message_id` (recorded in the history already) on
    /// every screen of the session as a `proactive_message` of `kind`,
    /// unless a turn runs in the foreground: then nothing is sent and
    /// `false` comes back. No turn can start between the check and the
    /// message.
    pub fn show_when_idle(&self, message_id: &str, kind: ProactiveKind, text: &str) -> bool {
        let state = self.inner.turn.lock();
        if state.running.is_some() {
            return false;
        }
        let _ = self.inner.parts.screens.on_event(&AgentEvent::ProactiveMessage {
            text: text.to_owned(),
            kind,
            message_id: message_id.to_owned(),
        });
        drop(state);
        true
    }

    /// [`AgentSession::notify`], unless a turn runs in the foreground: then
    /// nothing is sent and `None` comes back. No turn can start between the
    /// check and the message.
    pub fn notify_when_idle(&self, text: impl Into<String>) -> Option<String> {
        let state = self.inner.turn.lock();
        if state.running.is_some() {
            return None;
        }
        let message_id = self.notify(text);
        drop(state);
        Some(message_id)
    }

    /// Waits until the work that follows finished turns (the AGENDA's
    /// judgement, learning) is done. Turns never wait for it; tests and
    /// apps that shut down may.
    pub async fn settled(&self) {
        let mut rx = self.inner.after.subscribe();
        let _ = rx.wait_for(|n| *n == 0).await;
    }

    /// Failed or overflowed turns among the last [`RECENT_TURNS`].
    fn recent_failures(&self) -> usize {
        let recent = self.inner.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent.iter().filter(|failed| **failed).count()
    }

    /// Notes how the turn went; then, detached (nothing here delays an
    /// answer), judges the AGENDA's open loops and hands the turn to the
    /// thinking slot's `after_turn`.
    fn after_turn(&self, report: TurnReport, closed_loops: Vec<String>) {
        {
            let mut recent = self.inner.recent.lock().unwrap_or_else(|e| e.into_inner());
            if recent.len() == RECENT_TURNS {
                recent.pop_front();
            }
            recent.push_back(report.failed());
        }
        let parts = &self.inner.parts;
        let judge = match (&parts.open_loops, parts.kind) {
            (Some(loops), SessionKind::User) if report.stop_reason != StopReason::Aborted => {
                Some((loops.clone(), parts.screens.clone()))
            }
            _ => None,
        };
        let thinking = parts.thinking.clone();
        let after = self.inner.after.clone();
        after.send_modify(|n| *n += 1);
        tokio::spawn(async move {
            // Counted down however the task ends.
            struct Done(tokio::sync::watch::Sender<usize>);
            impl Drop for Done {
                fn drop(&mut self) {
                    self.0.send_modify(|n| *n = n.saturating_sub(1));
                }
            }
            let _done = Done(after);
            if let Some((loops, screens)) = judge {
                let judged = loops
                    .after_turn(
                        &report.agent_id,
                        &report.session_id,
                        &report.prompt,
                        &report.answer,
                        &closed_loops,
                        &screens,
                    )
                    .await;
                if let Err(error) = judged {
                    tracing::warn!(session_id = %report.session_id, %error, "open loops were not judged");
                }
            }
            thinking.after_turn(&report).await;
        });
    }

    /// Answers a slash command: the reply reaches the screens like an
    /// answer (`agent_start`, the text, `agent_end`) and is not recorded.
    fn answer_directly(&self, reply: String) -> Pending {
        let parts = &self.inner.parts;
        let identity = &parts.harness.context().identity;
        let _ = parts.screens.on_event(&AgentEvent::AgentStart {
            agent_id: parts.agent_id.clone(),
            agent_name: identity.agent_name.clone(),
            session_id: parts.id.to_string(),
            resumed: false,
        });
        let _ = parts.screens.on_event(&AgentEvent::MessageUpdate {
            delta: MessageDelta::TextDelta(reply.clone()),
        });
        let final_message = FinalMessage {
            role: Role::Assistant,
            content: reply,
            stop_reason: StopReason::Stop,
            usage: Usage::default(),
        };
        let _ = parts.screens.on_event(&AgentEvent::AgentEnd {
            final_message: final_message.clone(),
            turns: 0,
            overflows: 0,
            usage_total: UsageTotal::default(),
        });
        let (tx, rx) = oneshot::channel();
        let _ = tx.send(Ok(LoopOutcome::answered(final_message)));
        Pending {
            result: Some(rx),
            cancel: CancellationToken::new(),
        }
    }

    /// Security, thinking, then the harness turn in its own task.
    async fn start(
        &self,
        text: String,
        options: PromptOptions,
    ) -> Result<(Pending, bool, Foreground), TurnError> {
        let inner = &self.inner;
        let cancel = CancellationToken::new();
        let turn = inner.next_job.fetch_add(1, Ordering::Relaxed);
        loop {
            let idle = inner.turn.idle.notified();
            tokio::pin!(idle);
            {
                let mut state = inner.turn.lock();
                match &state.running {
                    None => {
                        *state = TurnState {
                            running: Some((turn, cancel.clone())),
                            ending: false,
                        };
                        break;
                    }
                    // The last turn is over and being recorded: wait for it.
                    Some(_) if state.ending => {
                        idle.as_mut().enable();
                    }
                    Some(_) => return Err(TurnError::Busy(inner.parts.id.to_string())),
                }
            }
            idle.await;
        }
        let foreground = Foreground(inner.turn.clone());
        let parts = &inner.parts;
        // The turn's span, from its security check to its recording; a
        // child of the caller's span (the tool that delegated, if any).
        let span = self.turn_span();
        // A person's turn in their own session may resume after a restart
        // when it stops for them; delegated and scheduled turns are closed.
        let resumable = parts.kind == SessionKind::User
            && matches!(options.caller, Caller::Local | Caller::Web { .. })
            && options.parent_turn.is_none();
        let turn_options = if resumable {
            TurnOptions::resumable()
        } else {
            TurnOptions::default()
        }
        .with_parent(options.parent_turn.clone());
        let input = SecurityInput {
            text,
            caller: options.caller,
            agent_id: parts.agent_id.clone(),
            session_id: parts.id.to_string(),
            peer_session: parts.kind == SessionKind::Peer,
            session_kind: parts.kind,
        };
        let input = match parts.security.run(input).instrument(span.clone()).await {
            Ok(input) => input,
            Err(error) => {
                trace::record_error(&span, "security_rejected");
                let _ = parts.screens.on_event(&AgentEvent::InputRejected {
                    message: error.to_string(),
                });
                return Err(error.into());
            }
        };
        if let Some(commands) = &parts.commands {
            let ctx = CommandContext {
                agent_id: &parts.agent_id,
                session_id: parts.id.as_str(),
            };
            if let Some(reply) = commands.handle(&ctx, &input.text).await {
                return Ok((self.answer_directly(reply), false, foreground));
            }
        }
        let allowances = parts.allowances().map_err(|reached| {
            trace::record_error(&span, "budget_exhausted");
            TurnError::BudgetExhausted(reached)
        })?;
        let tally = match &options.parent_usage {
            Some(parent) => parent.child(allowances),
            None => UsageTally::new(parts.usage.as_ref().map(|m| m.prices().clone()), allowances),
        };
        let open = match (&parts.open_loops, parts.kind) {
            (Some(loops), SessionKind::User) => loops.open_in(parts.id.as_str()).await,
            _ => Vec::new(),
        };
        let now = parts
            .open_loops
            .as_ref()
            .map_or_else(|| Timestamp::from_system_time(SystemTime::now()), |o| o.now());
        let thinking_input = ThinkingInput {
            agent_id: &parts.agent_id,
            session_id: parts.id.as_str(),
            prompt: &input.text,
            due_loops: open.iter().filter(|l| l.is_due(now)).count(),
            recent_failures: self.recent_failures(),
            open_loops: &open,
        };
        let thought = parts
            .thinking
            .before_turn(&thinking_input, &parts.screens)
            .instrument(span.clone())
            .await;
        let closed_loops = thought.closed_loops;
        let turn_instruction = match (options.turn_instruction, thought.note) {
            (Some(a), Some(b)) => Some(format!("{a}\n\n{b}")),
            (a, b) => a.or(b),
        };
        let (extensions, approver) = (options.extensions, options.approver);
        let tap = options
            .tap
            .or_else(|| parts.cassette.as_ref().and_then(|c| c.begin_turn()));
        let (tx, rx) = oneshot::channel();
        let session = self.clone();
        let token = cancel.clone();
        let slot = inner.turn.clone();
        tokio::spawn(async move {
            // The turn's span ends before its caller hears the outcome.
            let outcome = async {
                let parts = &session.inner.parts;
                let prompt = input.text;
                let meter = parts.usage.clone();
                let outcome = parts
                    .harness
                    .run_turn_in(
                        &parts.id,
                        prompt.clone(),
                        turn_options,
                        move |ctx| {
                            EndWatch::install(ctx, slot, turn, meter, tap);
                            ctx.turn_instruction = turn_instruction;
                            ctx.extensions = extensions;
                            ctx.usage = Some(tally);
                            if let Some(approver) = approver {
                                ctx.gate = Arc::new((*ctx.gate).clone().with_approver(approver));
                            }
                        },
                        &token,
                    )
                    .await;
                record_turn_outcome(&Span::current(), &outcome);
                if let Ok(outcome) = &outcome {
                    session.after_turn(
                        TurnReport::new(&parts.agent_id, parts.id.as_str(), &prompt, outcome),
                        closed_loops,
                    );
                }
                outcome
            }
            .instrument(span)
            .await;
            let _ = tx.send(outcome);
        });
        Ok((
            Pending {
                result: Some(rx),
                cancel,
            },
            thought.background,
            foreground,
        ))
    }
}
