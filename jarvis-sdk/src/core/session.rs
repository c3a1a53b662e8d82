//! [`AgentSession`]: one session of one agent, and the one way a turn runs
//! (R-LAYER-7): the security pipeline → the thinking hook → the harness
//! (window, store, memory) → the loop.
//!
//! Every screen attached to the session receives the same events and the
//! same approval requests. One turn runs at a time in the foreground: a
//! prompt while a turn runs is refused as busy. An input the pipeline
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

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::approval::{ApprovalBroker, Attachment};
use super::security::{Caller, SecurityError, SecurityInput, SecurityPipeline};
use crate::agent::{
    AgentError, AgentEvent, Approver, Harness, HubAttachment, LoopOutcome, NoThinking, ProactiveKind,
    ScreenHub, SessionId, SessionKind, ThinkingHook, ThinkingInput, TurnReport, UIAdapter,
};
use crate::common::Extensions;
use std::collections::VecDeque;

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
    running: Mutex<Option<CancellationToken>>,
    background: Mutex<Vec<(u64, CancellationToken)>>,
    next_job: AtomicU64,
    /// Whether each of the last [`RECENT_TURNS`] turns failed or overflowed.
    recent: Mutex<VecDeque<bool>>,
    /// The after-turn work (learning) still running, detached from turns.
    after: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// Turns the router's `recent_failures` signal looks back over.
pub const RECENT_TURNS: usize = 5;

/// One session of one agent; see the [module docs](self).
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

/// Frees the foreground slot however the prompt ends (also when dropped).
struct Foreground<'a>(&'a Mutex<Option<CancellationToken>>);

impl Drop for Foreground<'_> {
    fn drop(&mut self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = None;
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
                running: Mutex::new(None),
                background: Mutex::default(),
                next_job: AtomicU64::new(0),
                recent: Mutex::default(),
                after: Mutex::default(),
            }),
        }
    }

    /// Waits until the after-turn work of every turn that finished so far
    /// (the thinking slot's `after_turn`: procedure learning, failure
    /// reflection, distillation) has ended. Turns never wait for it; this
    /// is for tests and an orderly shutdown. A prompt that returned has
    /// already handed its turn's work over, so awaiting this right after
    /// it covers that turn.
    pub async fn settled(&self) {
        loop {
            let pending = std::mem::take(&mut *self.inner.after.lock().unwrap_or_else(|e| e.into_inner()));
            if pending.is_empty() {
                return;
            }
            for handle in pending {
                let _ = handle.await;
            }
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

    /// Whether a turn is running in the foreground.
    pub fn is_busy(&self) -> bool {
        self.inner
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
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
        if let Some(token) = &*self.inner.running.lock().unwrap_or_else(|e| e.into_inner()) {
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
    /// the background (see the [module docs](self)).
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
                Ok(Ok(outcome)) if outcome.final_message.stop_reason == crate::agent::StopReason::Aborted => {
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
                let _ = session
                    .inner
                    .parts
                    .screens
                    .on_event(&AgentEvent::ProactiveMessage {
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

    /// Failed or overflowed turns among the last [`RECENT_TURNS`].
    fn recent_failures(&self) -> usize {
        let recent = self.inner.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent.iter().filter(|failed| **failed).count()
    }

    /// Notes how the turn went and hands it to the thinking slot's
    /// `after_turn`, detached: learning never delays an answer.
    fn after_turn(&self, report: TurnReport) {
        {
            let mut recent = self.inner.recent.lock().unwrap_or_else(|e| e.into_inner());
            if recent.len() == RECENT_TURNS {
                recent.pop_front();
            }
            recent.push_back(report.failed());
        }
        let thinking = self.inner.parts.thinking.clone();
        let handle = tokio::spawn(async move { thinking.after_turn(&report).await });
        let mut after = self.inner.after.lock().unwrap_or_else(|e| e.into_inner());
        after.retain(|h| !h.is_finished());
        after.push(handle);
    }

    /// Security, thinking, then the harness turn in its own task.
    async fn start(
        &self,
        text: String,
        options: PromptOptions,
    ) -> Result<(Pending, bool, Foreground<'_>), TurnError> {
        let inner = &self.inner;
        let cancel = CancellationToken::new();
        {
            let mut running = inner.running.lock().unwrap_or_else(|e| e.into_inner());
            if running.is_some() {
                return Err(TurnError::Busy(inner.parts.id.to_string()));
            }
            *running = Some(cancel.clone());
        }
        let foreground = Foreground(&inner.running);
        let parts = &inner.parts;
        let input = SecurityInput {
            text,
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
            due_loops: 0,
            recent_failures: self.recent_failures(),
        };
        let thought = parts.thinking.before_turn(&thinking_input, &parts.screens).await;
        let turn_instruction = match (options.turn_instruction, thought.note) {
            (Some(a), Some(b)) => Some(format!("{a}\n\n{b}")),
            (a, b) => a.or(b),
        };
        let (extensions, approver) = (options.extensions, options.approver);
        let (tx, rx) = oneshot::channel();
        let session = self.clone();
        let token = cancel.clone();
        tokio::spawn(async move {
            let parts = &session.inner.parts;
            let prompt = input.text;
            let outcome = parts
                .harness
                .run_turn_with(
                    &parts.id,
                    prompt.clone(),
                    move |ctx| {
                        ctx.turn_instruction = turn_instruction;
                        ctx.extensions = extensions;
                        if let Some(approver) = approver {
                            ctx.gate = Arc::new((*ctx.gate).clone().with_approver(approver));
                        }
                    },
                    &token,
                )
                .await;
            if let Ok(outcome) = &outcome {
                session.after_turn(TurnReport::new(
                    &parts.agent_id,
                    parts.id.as_str(),
                    &prompt,
                    outcome,
                ));
            }
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
