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
//! **Usage.** With a [`UsageMeter`](crate::UsageMeter) ([`AgentSessionParts::with_usage`]),
//! every turn that called the model is recorded in the usage ledger, with
//! its own calls only, just before its `agent_end` reaches any screen (so a
//! screen that asks for the session's usage on `agent_end` finds the turn
//! counted). A slash command answered without the model and a rejected
//! input record nothing.

mod dual;
mod foreground;
mod parts;
mod run;

use super::cassette::CassetteRecorder;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

use super::approval::{ApprovalBroker, Attachment};
use super::security::{Caller, SecurityError};
use jarvis_agent::{
    AgentError, AgentEvent, Approver, Harness, HubAttachment, LoopOutcome, ProactiveKind, ScreenHub,
    SessionId, SessionKind, TurnTap, UIAdapter, UsageTally,
};
use jarvis_common::Extensions;
use std::collections::VecDeque;

pub use dual::{DualConfig, DualReply};
use foreground::TurnSlot;
pub use parts::{AgentSessionParts, AnswerNotifier};

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
}
