//! The thinking slot of a turn (R-LAYER-7: security → thinking → harness →
//! loop). [`ThinkingHook`] runs after the input passed security and before
//! the harness; what it returns travels to the model as an unrecorded note
//! for that turn. [`NoThinking`] leaves the slot empty; [`ThoughtEngine`]
//! fills it with the Thought Router ([`ThoughtRouter`]) and the inner
//! thought engine, and learns after turns when it carries a [`Reflector`]
//! (procedure learning, failure reflection) and a [`Distiller`] (user-model
//! distillation).
//!
//! | file | what |
//! |---|---|
//! | `router.rs` | [`ThoughtRouter`]: think or not, without a model call |
//! | `engine.rs` | [`ThoughtEngine`]: the thought call, the frame, the learners after a turn |
//! | `reflect.rs` | [`Reflector`]: procedures learned and rewritten (R-LOOP-17) |
//! | `distill.rs` | [`Distiller`]: facts about the person into the user model (R-MEM-6) |
//! | `call.rs` | the template, the timed call and the JSON answer they share; [`LearnError`] |

mod call;
mod distill;
mod engine;
mod reflect;
mod router;

pub use call::LearnError;
pub use distill::{DISTILL_INSTRUCTION, DISTILL_PROMPT, DistillConfig, Distiller, parse_facts};
pub use engine::{
    DEFAULT_THOUGHT_TEMPLATE, FRAME_INSTRUCTION, ThoughtConfig, ThoughtDecision, ThoughtEngine, ThoughtFrame,
};
pub use reflect::{
    APPLIES_TO, DEFAULT_REFLECTION_TEMPLATE, ProcedureDraft, REFLECTION_INSTRUCTION, Reflection,
    ReflectionConfig, Reflector,
};
pub use router::{DEFAULT_THINK_THRESHOLD, Route, RouteFeatures, RouterSignals, ThoughtRouter};

use async_trait::async_trait;

use super::event::StopReason;
use super::harness::tools_used;
use super::openloop::OpenLoop;
use super::run::LoopOutcome;
use super::ui::UIAdapter;
use jarvis_model::Message;

/// What the thinking stage sees of a turn about to run.
#[derive(Debug, Clone, Copy)]
pub struct ThinkingInput<'a> {
    /// The agent.
    pub agent_id: &'a str,
    /// The session.
    pub session_id: &'a str,
    /// The (validated, normalised) prompt.
    pub prompt: &'a str,
    /// Open loops of the session that are due.
    pub due_loops: usize,
    /// Recent turns that failed or overflowed.
    pub recent_failures: usize,
    /// The session's open loops, which the thought may close.
    pub open_loops: &'a [OpenLoop],
}

/// What thinking decided for a turn.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThinkingOutcome {
    /// A note the turn's model calls carry, unrecorded.
    pub note: Option<String>,
    /// The work is long: acknowledge at once and continue in the background.
    pub background: bool,
    /// Promises the request closes.
    pub closed_loops: Vec<String>,
}

/// A finished turn, as the thinking slot sees it afterwards.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TurnReport {
    /// The agent.
    pub agent_id: String,
    /// The session.
    pub session_id: String,
    /// The (validated) prompt.
    pub prompt: String,
    /// The final answer.
    pub answer: String,
    /// The tools called, each once, in first-call order.
    pub tools: Vec<String>,
    /// Tool calls made in all.
    pub tool_calls: usize,
    /// Overflows of the turn (R-LOOP-14).
    pub overflows: u8,
    /// How the turn ended.
    pub stop_reason: StopReason,
}

impl TurnReport {
    /// The report of `outcome`, a turn of `agent_id` in `session_id` on `prompt`.
    pub fn new(agent_id: &str, session_id: &str, prompt: &str, outcome: &LoopOutcome) -> Self {
        let tool_calls = outcome
            .new_messages
            .iter()
            .map(|m| match m {
                Message::Assistant(a) => a.tool_calls.len(),
                _ => 0,
            })
            .sum();
        Self {
            agent_id: agent_id.to_owned(),
            session_id: session_id.to_owned(),
            prompt: prompt.to_owned(),
            answer: outcome.final_message.content.clone(),
            tools: tools_used(&outcome.new_messages),
            tool_calls,
            overflows: outcome.overflows,
            stop_reason: outcome.final_message.stop_reason,
        }
    }

    /// A report of a turn of `agent_id` in `session_id` that answered
    /// `answer` to `prompt` with no tools, no overflow and `stop` (set the
    /// rest with the `with_*` methods): for reflecting on turns that did not
    /// run here, and for tests.
    pub fn of(agent_id: &str, session_id: &str, prompt: &str, answer: &str) -> Self {
        Self {
            agent_id: agent_id.to_owned(),
            session_id: session_id.to_owned(),
            prompt: prompt.to_owned(),
            answer: answer.to_owned(),
            tools: Vec::new(),
            tool_calls: 0,
            overflows: 0,
            stop_reason: StopReason::Stop,
        }
    }

    /// Sets the tools used (each once) and the number of tool calls.
    pub fn with_tools(mut self, tools: Vec<String>, tool_calls: usize) -> Self {
        self.tools = tools;
        self.tool_calls = tool_calls;
        self
    }

    /// Sets the overflows and how the turn ended.
    pub fn with_ending(mut self, overflows: u8, stop_reason: StopReason) -> Self {
        self.overflows = overflows;
        self.stop_reason = stop_reason;
        self
    }

    /// Whether the turn failed or overflowed (the router's
    /// `recent_failures` signal counts these).
    pub fn failed(&self) -> bool {
        self.overflows > 0 || matches!(self.stop_reason, StopReason::Error | StopReason::Aborted)
    }
}

/// Thinks before a turn, and may learn after it.
#[async_trait]
pub trait ThinkingHook: Send + Sync {
    /// Runs before the harness; may push events (`thought_route`,
    /// `inner_thought`, `thought_end`) to `ui`.
    async fn before_turn(&self, input: &ThinkingInput<'_>, ui: &dyn UIAdapter) -> ThinkingOutcome;

    /// Runs after a turn ended, detached from it: the person already has
    /// the answer, so nothing here delays or fails a turn (procedure
    /// learning, failure reflection, user-model distillation). Default:
    /// nothing.
    async fn after_turn(&self, report: &TurnReport) {
        let _ = report;
    }
}

/// No thinking.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoThinking;

#[async_trait]
impl ThinkingHook for NoThinking {
    async fn before_turn(&self, _input: &ThinkingInput<'_>, _ui: &dyn UIAdapter) -> ThinkingOutcome {
        ThinkingOutcome::default()
    }
}
