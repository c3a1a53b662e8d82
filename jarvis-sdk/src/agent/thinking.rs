//! The thinking slot of a turn (R-LAYER-7: security → thinking → harness →
//! loop). [`ThinkingHook`] runs after the input passed security and before
//! the harness; what it returns travels to the model as an unrecorded note
//! for that turn. [`NoThinking`] leaves the slot empty; the inner thought
//! engine fills it.

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
}

/// Thinks before a turn.
#[async_trait]
pub trait ThinkingHook: Send + Sync {
    /// Runs before the harness; may push events (`inner_thought`, …) to
    /// `ui` and return a note for the model.
    async fn before_turn(&self, input: &ThinkingInput<'_>, ui: &dyn UIAdapter) -> Option<String>;
}

/// No thinking.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoThinking;

#[async_trait]
impl ThinkingHook for NoThinking {
    async fn before_turn(&self, _input: &ThinkingInput<'_>, _ui: &dyn UIAdapter) -> Option<String> {
        None
    }
}
