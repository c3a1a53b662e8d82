//! [`AgentSession`]: one session of one agent, and the one way a turn runs
//! (R-LAYER-7): the security pipeline → the thinking hook → the harness
//! (window, store, memory) → the loop.
//!
//! Every screen attached to the session receives the same events and the
//! same approval requests. One turn runs at a time: a prompt while a turn
//! runs is refused as busy. Once the turn's `agent_end` went out, the turn
//! counts as over for new prompts: one that arrives while the harness is
//! still recording the turn waits for that (moments) and then runs, so a
//! screen may answer `agent_end` with its next prompt. An input the
//! pipeline refuses reaches the screens as an `input_rejected` event and
//! never reaches the model.

use std::fmt;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::approval::{ApprovalBroker, Attachment};
use super::security::{Caller, SecurityError, SecurityInput, SecurityPipeline};
use crate::agent::{
    AgentError, AgentEvent, Approver, Harness, HubAttachment, LoopOutcome, NoThinking, ScreenHub, SessionId,
    SessionKind, ThinkingHook, ThinkingInput, UIAdapter,
};
use crate::common::Extensions;

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
}

impl fmt::Debug for PromptOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PromptOptions")
            .field("caller", &self.caller)
            .field("turn_instruction", &self.turn_instruction)
            .field("approver", &self.approver.is_some())
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
        }
    }

    /// Puts a thinking hook in the slot.
    pub fn with_thinking(mut self, thinking: Arc<dyn ThinkingHook>) -> Self {
        self.thinking = thinking;
        self
    }
}

/// One session of one agent; see the [module docs](self).
pub struct AgentSession {
    parts: AgentSessionParts,
    turn: Arc<TurnSlot>,
    _end_watch: HubAttachment,
}

impl fmt::Debug for AgentSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentSession")
            .field("id", &self.parts.id)
            .field("agent_id", &self.parts.agent_id)
            .field("kind", &self.parts.kind)
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

/// The session's one turn slot.
#[derive(Default)]
struct TurnSlot {
    state: Mutex<TurnState>,
    /// Woken when the slot empties.
    idle: Notify,
}

#[derive(Default)]
struct TurnState {
    /// The running turn's abort signal.
    running: Option<CancellationToken>,
    /// The running turn sent `agent_end` and is being recorded.
    ending: bool,
}

impl TurnSlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, TurnState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Marks the running turn as ending when its `agent_end` goes out; it is
/// the first screen of the session, so every other screen sees `agent_end`
/// after the mark.
struct EndWatch(Arc<TurnSlot>);

impl UIAdapter for EndWatch {
    fn on_event(&self, event: &AgentEvent) -> ControlFlow<()> {
        if let AgentEvent::AgentEnd { .. } = event {
            let mut state = self.0.lock();
            if state.running.is_some() {
                state.ending = true;
            }
        }
        ControlFlow::Continue(())
    }
}

/// Empties the turn slot however the prompt ends (also when dropped).
struct Running<'a>(&'a TurnSlot);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        *self.0.lock() = TurnState::default();
        self.0.idle.notify_waiters();
    }
}

impl AgentSession {
    /// A session from its parts.
    pub fn new(parts: AgentSessionParts) -> Self {
        let turn = Arc::new(TurnSlot::default());
        let end_watch = parts.screens.attach(Arc::new(EndWatch(turn.clone())));
        Self {
            parts,
            turn,
            _end_watch: end_watch,
        }
    }

    /// The session id.
    pub fn id(&self) -> &SessionId {
        &self.parts.id
    }

    /// The session's agent.
    pub fn agent_id(&self) -> &str {
        &self.parts.agent_id
    }

    /// Whether this is a peer session.
    pub fn kind(&self) -> SessionKind {
        self.parts.kind
    }

    /// The session's approval broker.
    pub fn broker(&self) -> &ApprovalBroker {
        &self.parts.broker
    }

    /// The harness (its store, its loop context).
    pub fn harness(&self) -> &Harness {
        &self.parts.harness
    }

    /// Attaches a screen: it receives every event and approval request of
    /// the session from now on (and the approval requests already waiting).
    pub fn attach(&self, screen: Arc<dyn UIAdapter>) -> SessionAttachment {
        SessionAttachment {
            _events: self.parts.screens.attach(screen.clone()),
            _approvals: self.parts.broker.attach(screen),
        }
    }

    /// Whether a turn is running.
    pub fn is_busy(&self) -> bool {
        self.turn.lock().running.is_some()
    }

    /// Aborts the running turn; `false` when none runs.
    pub fn abort(&self) -> bool {
        match &self.turn.lock().running {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// Runs one turn for `text` from `caller`.
    pub async fn prompt(&self, text: impl Into<String>, caller: Caller) -> Result<LoopOutcome, TurnError> {
        self.prompt_with(text, PromptOptions::from(caller)).await
    }

    /// Runs one turn with `options`.
    pub async fn prompt_with(
        &self,
        text: impl Into<String>,
        options: PromptOptions,
    ) -> Result<LoopOutcome, TurnError> {
        let cancel = CancellationToken::new();
        loop {
            let idle = self.turn.idle.notified();
            tokio::pin!(idle);
            {
                let mut state = self.turn.lock();
                match &state.running {
                    None => {
                        *state = TurnState {
                            running: Some(cancel.clone()),
                            ending: false,
                        };
                        break;
                    }
                    // The last turn is over and being recorded: wait for it.
                    Some(_) if state.ending => {
                        idle.as_mut().enable();
                    }
                    Some(_) => return Err(TurnError::Busy(self.parts.id.to_string())),
                }
            }
            idle.await;
        }
        let _running = Running(&self.turn);
        let parts = &self.parts;
        let input = SecurityInput {
            text: text.into(),
            caller: options.caller,
            agent_id: parts.agent_id.clone(),
            session_id: parts.id.to_string(),
            peer_session: parts.kind == SessionKind::Peer,
        };
        let input = match parts.security.run(input).await {
            Ok(input) => input,
            Err(error) => {
                let _ = parts.screens.on_event(&AgentEvent::InputRejected {
                    message: error.to_string(),
                });
                return Err(error.into());
            }
        };
        let thinking_input = ThinkingInput {
            agent_id: &parts.agent_id,
            session_id: parts.id.as_str(),
            prompt: &input.text,
        };
        let thought = parts.thinking.before_turn(&thinking_input, &parts.screens).await;
        let turn_instruction = match (options.turn_instruction, thought) {
            (Some(a), Some(b)) => Some(format!("{a}\n\n{b}")),
            (a, b) => a.or(b),
        };
        let extensions = options.extensions;
        let approver = options.approver;
        let outcome = parts
            .harness
            .run_turn_with(
                &parts.id,
                input.text,
                move |ctx| {
                    ctx.turn_instruction = turn_instruction;
                    ctx.extensions = extensions;
                    if let Some(approver) = approver {
                        ctx.gate = Arc::new((*ctx.gate).clone().with_approver(approver));
                    }
                },
                &cancel,
            )
            .await?;
        Ok(outcome)
    }
}
