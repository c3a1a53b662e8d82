//! `run_agent_loop`: the agent loop with the empty-answer nudge and the
//! overflow resume ("summarise once, continue once", SPEC.md §5).
//!
//! The loop repeats *call the model, run the tools it asked for* for at most
//! `max_turns` steps. An empty answer is nudged once within its step. When
//! the model is still calling tools in the last allowed step, the turn has
//! **overflowed**: the loop makes one tool-less summary call (the literal
//! R-LOOP-6 instruction, cut to 2,000 characters, never streamed nor
//! recorded; a fallback summary built from the tool names when it fails or
//! is empty), then continues for `max(1, max_turns / 2)` more steps with an
//! unrecorded instruction carrying the summary and the remaining step count.
//! If the continuation overflows too, a second summary is the answer, the
//! only one streamed and recorded. Continuation happens at most once, so a
//! turn makes at most `2 × (max_turns + max(1, max_turns / 2)) + 2` model
//! calls.
//!
//! The logic is a pure state machine (`machine.rs`); this module is the thin
//! async driver that performs its calls and tool batches.

mod driver;
mod machine;
pub mod prompts;
mod tally;

pub use tally::{Allowance, Budget, BudgetReached, UsageTally, UsageTotal};

use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use super::error::AgentError;
use super::event::{AgentEvent, FinalMessage};
use super::gate::ToolGate;
use super::tap::TurnTap;
use super::tool::ToolRegistry;
use super::ui::{NoopAdapter, UIAdapter};
use jarvis_common::{Extensions, IdSource, UniqueIds};
use jarvis_memory::MemoryContext;
use jarvis_model::{Message, Provider, ProviderError, ToolResultMessage, Usage};

/// Settings of the loop itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentLoopConfig {
    /// Steps before the turn overflows (R-LOOP-1); at least 1. Default 20.
    pub max_turns: u32,
    /// Summarise and continue once on overflow (R-LOOP-6..11). Default on.
    /// Off, an overflowing turn ends with its last assistant text and
    /// `stop_reason: "max_turns"`.
    pub overflow_resume: bool,
    /// How many tool calls of one step run at once; at least 1. Default 8.
    pub tool_concurrency: usize,
    /// Tool results in `tool_execution_end` events are cut to this many
    /// characters (the model always gets the whole result). Default 2,000.
    pub event_result_chars: usize,
}

impl Default for AgentLoopConfig {
    fn default() -> Self {
        Self {
            max_turns: 20,
            overflow_resume: true,
            tool_concurrency: 8,
            event_result_chars: 2_000,
        }
    }
}

impl AgentLoopConfig {
    /// Steps of the continuation: `max(1, max_turns / 2)`.
    pub fn continuation_steps(&self) -> u32 {
        (self.max_turns / 2).max(1)
    }

    /// The most model calls one turn can make:
    /// `2 × (max_turns + continuation_steps) + 2`.
    pub fn max_provider_calls(&self) -> u32 {
        2 * (self.max_turns + self.continuation_steps()) + 2
    }

    /// Checks the limits.
    pub fn validate(&self) -> Result<(), AgentError> {
        if self.max_turns < 1 {
            return Err(AgentError::InvalidConfig("max_turns must be at least 1".into()));
        }
        if self.tool_concurrency < 1 {
            return Err(AgentError::InvalidConfig(
                "tool_concurrency must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// Model name, system prompt and sampling for the calls of a turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelSettings {
    /// Model name as the provider knows it.
    pub model: String,
    /// The system prompt.
    pub system_prompt: Option<String>,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Output token limit per call.
    pub max_tokens: Option<u32>,
}

/// Who runs the turn, for events, requests and tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentIdentity {
    /// The agent's id.
    pub agent_id: String,
    /// The agent's display name.
    pub agent_name: String,
    /// The session the turn runs in.
    pub session_id: String,
}

impl Default for AgentIdentity {
    fn default() -> Self {
        Self {
            agent_id: "main".into(),
            agent_name: "J.A.R.V.I.S.".into(),
            session_id: "default-main".into(),
        }
    }
}

/// The loop's counters at a step, enough to pick a turn up again after a
/// restart (the journal records them with every step that calls tools).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LoopState {
    /// Steps run so far.
    pub step: u32,
    /// The step after which the turn overflows (`max_turns`, or more in the
    /// continuation).
    pub budget_end: u32,
    /// The first overflow's summary while the continuation runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuation: Option<String>,
    /// Overflows so far.
    pub overflows: u8,
    /// Summary calls so far.
    pub summary_calls: u8,
    /// Model calls so far.
    pub provider_calls: u32,
    /// Tokens used so far.
    pub usage: Usage,
}

/// Sees what a turn records while it runs, as it happens: the harness
/// journals it ([`TurnJournal`](crate::TurnJournal)), so a turn cut
/// short by a crash is not lost. Calls come from the loop's task and must
/// not block for long.
pub trait TurnRecorder: Send + Sync {
    /// The model asked for tools: `message` is that assistant message,
    /// `state` the counters after the call.
    fn step(&self, message: &Message, state: &LoopState);
    /// One of the step's tool calls finished (completion order).
    fn result(&self, result: &ToolResultMessage);
}

/// Where a resumed turn picks up (see [`run_agent_loop_resumed`]).
#[derive(Debug, Clone)]
pub(crate) struct Resume {
    /// Index in the history just after the prompt.
    pub(crate) turn_start: usize,
    /// The counters when the last step was recorded.
    pub(crate) state: LoopState,
    /// Results of the last step's calls that are settled already (recorded
    /// before the restart, or given at resumption); the others run.
    pub(crate) known: Vec<ToolResultMessage>,
}

/// Everything a turn runs with besides its history and configuration.
#[derive(Clone)]
pub struct LoopContext {
    /// The model.
    pub provider: Arc<dyn Provider>,
    /// The tools the model may call.
    pub tools: Arc<ToolRegistry>,
    /// The tool-call gate.
    pub gate: Arc<ToolGate>,
    /// The subscriber to events.
    pub ui: Arc<dyn UIAdapter>,
    /// Model name, system prompt, sampling.
    pub model: ModelSettings,
    /// Who runs the turn: its events and model requests carry this.
    pub identity: AgentIdentity,
    /// On whose behalf tools run, when not [`identity`](Self::identity)'s:
    /// a sub-agent's tools work in its parent's session and sandbox, under
    /// the parent's agent id, so the tool context and the gate see these.
    pub acting_for: Option<AgentIdentity>,
    /// Ids for tool calls the provider sent without one.
    pub ids: Arc<dyn IdSource>,
    /// An instruction added, unrecorded, to every model call of the turn
    /// (for example `PEER_REQUEST_RULE` in a delegated turn); it comes before
    /// the loop's own instructions, so the summary request still ends with
    /// its literal.
    pub turn_instruction: Option<String>,
    /// Values handed to every tool of the turn in its [`ToolContext`](super::tool::ToolContext).
    pub extensions: Extensions,
    /// The turn's memory, when memory is on: every request's history goes
    /// through [`MemoryContext::apply`] just before its model call (steps,
    /// nudges, summaries and continuations alike), which keeps the last
    /// turns and puts the memory message before them. `None` sends the
    /// history as it is.
    pub memory: Option<Arc<MemoryContext>>,
    /// The turn's id (empty when nothing names it); tools and the gate see it.
    pub turn_id: String,
    /// Sees what the turn records as it goes (the harness's journal).
    pub recorder: Option<Arc<dyn TurnRecorder>>,
    /// What the turn spends, with its limits (see [`UsageTally`]): every
    /// model call is recorded here, and a limit reached makes the next
    /// call the tool-less wrap-up (`stop_reason: "budget"`). `None`: a
    /// tally of the turn alone, with no limits.
    pub usage: Option<Arc<UsageTally>>,
    /// Sees, or answers, the turn's model and tool calls (a cassette's
    /// recording or replay, see [`TurnTap`]). `None`: the provider and the
    /// tools answer.
    pub tap: Option<Arc<dyn TurnTap>>,
}

impl fmt::Debug for LoopContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoopContext")
            .field("provider", &self.provider.name())
            .field("tools", &self.tools)
            .field("gate", &self.gate)
            .field("model", &self.model)
            .field("identity", &self.identity)
            .field("memory", &self.memory.as_ref().map(|m| m.sections().len()))
            .field("turn_id", &self.turn_id)
            .field("tapped", &self.tap.is_some())
            .finish_non_exhaustive()
    }
}

impl LoopContext {
    /// A context over `provider` with no tools, the default gate (no
    /// approver: calls of tools that require approval are refused, the
    /// others run), no subscriber and the `main` identity.
    pub fn new(provider: Arc<dyn Provider>) -> Self {
        Self {
            provider,
            tools: Arc::new(ToolRegistry::new()),
            gate: Arc::new(ToolGate::new()),
            ui: Arc::new(NoopAdapter),
            model: ModelSettings::default(),
            identity: AgentIdentity::default(),
            acting_for: None,
            ids: Arc::new(UniqueIds::new()),
            turn_instruction: None,
            extensions: Extensions::new(),
            memory: None,
            turn_id: String::new(),
            recorder: None,
            usage: None,
            tap: None,
        }
    }

    /// Sets the tools.
    pub fn with_tools(mut self, tools: ToolRegistry) -> Self {
        self.tools = Arc::new(tools);
        self
    }

    /// Sets the gate.
    pub fn with_gate(mut self, gate: ToolGate) -> Self {
        self.gate = Arc::new(gate);
        self
    }

    /// Sets the subscriber.
    pub fn with_ui(mut self, ui: Arc<dyn UIAdapter>) -> Self {
        self.ui = ui;
        self
    }

    /// Sets model name and system prompt.
    pub fn with_model(mut self, model: ModelSettings) -> Self {
        self.model = model;
        self
    }

    /// Sets the identity.
    pub fn with_identity(mut self, identity: AgentIdentity) -> Self {
        self.identity = identity;
        self
    }

    /// The identity tools and the gate see: [`acting_for`](Self::acting_for)
    /// when set, else [`identity`](Self::identity).
    pub fn tool_identity(&self) -> &AgentIdentity {
        self.acting_for.as_ref().unwrap_or(&self.identity)
    }

    /// Sets the id source for provider calls that came without ids.
    pub fn with_ids(mut self, ids: Arc<dyn IdSource>) -> Self {
        self.ids = ids;
        self
    }

    /// Sets the turn's memory (see [`LoopContext::memory`]).
    pub fn with_memory(mut self, memory: Arc<MemoryContext>) -> Self {
        self.memory = Some(memory);
        self
    }
}

/// What a turn produced.
#[derive(Debug)]
#[non_exhaustive]
pub struct LoopOutcome {
    /// The answer, as sent in `agent_end`.
    pub final_message: FinalMessage,
    /// The records this turn appended to the history, in order: assistant
    /// messages and tool results (never summaries or injected instructions,
    /// except the second-overflow answer and the `final` tool's answer).
    pub new_messages: Vec<Message>,
    /// Steps run.
    pub turns: u32,
    /// Overflows: 0, 1 or 2.
    pub overflows: u8,
    /// Summary calls made: 0, 1 or 2.
    pub summary_calls: u8,
    /// Model calls made, summary and nudge calls included.
    pub provider_calls: u32,
    /// The model error that ended the turn, if one did.
    pub error: Option<ProviderError>,
    /// What the turn spent with its sub-agents and delegations.
    pub usage_total: UsageTotal,
}

impl LoopOutcome {
    /// The outcome of a turn answered without calling the model (a slash
    /// command's reply): no steps, no usage.
    pub fn answered(final_message: FinalMessage) -> Self {
        Self {
            final_message,
            new_messages: Vec::new(),
            turns: 0,
            overflows: 0,
            summary_calls: 0,
            provider_calls: 0,
            error: None,
            usage_total: UsageTotal::default(),
        }
    }

    /// The turn's `agent_end` event.
    pub fn end_event(&self) -> AgentEvent {
        AgentEvent::AgentEnd {
            final_message: self.final_message.clone(),
            turns: self.turns,
            overflows: self.overflows,
            usage_total: self.usage_total,
        }
    }
}

/// Runs one turn over `history`, which ends with the new user message.
///
/// Every turn emits one `agent_start` and, whatever happens, one
/// `agent_end`. Model errors end the turn with an `agent_error` event and
/// [`StopReason::Error`](super::event::StopReason::Error); they are not
/// returned as `Err`, which is reserved for configurations that cannot run.
/// `cancel` aborts the turn: it is checked between steps and before and
/// after each summary call, cuts a streaming call short and is handed to
/// running tools.
pub async fn run_agent_loop(
    ctx: &LoopContext,
    config: &AgentLoopConfig,
    history: Vec<Message>,
    cancel: &CancellationToken,
) -> Result<LoopOutcome, AgentError> {
    let outcome = run_loop(ctx, config, history, None, cancel).await?;
    let _ = ctx.ui.on_event(&outcome.end_event());
    Ok(outcome)
}

/// The loop without its `agent_end`, which the caller sends once the turn
/// is recorded (the harness: an answer a person saw is durable). With
/// `resume`, the turn picks up after a restart instead of starting.
pub(crate) async fn run_loop(
    ctx: &LoopContext,
    config: &AgentLoopConfig,
    history: Vec<Message>,
    resume: Option<Resume>,
    cancel: &CancellationToken,
) -> Result<LoopOutcome, AgentError> {
    config.validate()?;
    let start = AgentEvent::AgentStart {
        agent_id: ctx.identity.agent_id.clone(),
        agent_name: ctx.identity.agent_name.clone(),
        session_id: ctx.identity.session_id.clone(),
        resumed: resume.is_some(),
    };
    let tally = ctx
        .usage
        .clone()
        .unwrap_or_else(|| UsageTally::new(None, Vec::new()));
    let finished = driver::Driver::new(ctx, config, cancel.child_token(), tally.clone())
        .run(history, start, resume)
        .await;
    Ok(LoopOutcome {
        usage_total: tally.total(),
        final_message: finished.final_message,
        new_messages: finished.new_messages,
        turns: finished.turns,
        overflows: finished.overflows,
        summary_calls: finished.summary_calls,
        provider_calls: finished.provider_calls,
        error: finished.error,
    })
}
