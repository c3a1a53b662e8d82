//! The thinking slot of a turn (R-LAYER-7: security → thinking → harness →
//! loop). [`ThinkingHook`] runs after the input passed security and before
//! the harness; what it returns travels to the model as an unrecorded note
//! for that turn. [`NoThinking`] leaves the slot empty; [`ThoughtEngine`]
//! fills it with the Thought Router ([`ThoughtRouter`]) and the inner
//! thought engine.

mod engine;
mod router;

pub use engine::{
    DEFAULT_THOUGHT_TEMPLATE, FRAME_INSTRUCTION, ThoughtConfig, ThoughtDecision, ThoughtEngine, ThoughtFrame,
};
pub use router::{DEFAULT_THINK_THRESHOLD, Route, RouteFeatures, RouterSignals, ThoughtRouter};

use async_trait::async_trait;

use super::ui::UIAdapter;

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

/// Thinks before a turn.
#[async_trait]
pub trait ThinkingHook: Send + Sync {
    /// Runs before the harness; may push events (`thought_route`,
    /// `inner_thought`, `thought_end`) to `ui`.
    async fn before_turn(&self, input: &ThinkingInput<'_>, ui: &dyn UIAdapter) -> ThinkingOutcome;
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
