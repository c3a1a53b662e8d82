//! [`ProviderEvent`]: the one streaming vocabulary every provider emits.

use serde::{Deserialize, Serialize};

use super::message::Usage;

/// One event of a provider's response stream (R-MODEL-2).
///
/// A well-formed stream is any number of deltas followed by exactly one
/// [`ProviderEvent::Stop`]. Tool calls arrive as [`ProviderEvent::ToolCallDelta`]s
/// keyed by `index`; the shared assembler joins them, so providers never
/// assemble calls themselves.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ProviderEvent {
    /// A piece of visible answer text.
    TextDelta(String),
    /// A piece of model thinking. A delta carrying a `signature` closes the
    /// current thinking block (Anthropic sends the signature last).
    ThinkingDelta {
        /// The thinking text (may be empty when only the signature arrives).
        text: String,
        /// The block's signature, sent back verbatim in later requests.
        signature: Option<String>,
    },
    /// A thinking block the provider encrypted (Anthropic's
    /// `redacted_thinking`): never shown, sent back verbatim.
    RedactedThinking(String),
    /// A piece of a tool call. `id` and `name` usually come with the first
    /// piece of an `index`; `arguments_delta` pieces are concatenated.
    ToolCallDelta {
        /// Position of the call in this response; parallel calls differ here.
        index: usize,
        /// The call id, when this piece carries it.
        id: Option<String>,
        /// The tool name, when this piece carries it.
        name: Option<String>,
        /// A piece of the JSON arguments text.
        arguments_delta: String,
    },
    /// The end of the response.
    Stop {
        /// Why the model stopped.
        reason: FinishReason,
        /// Tokens used by this call.
        usage: Usage,
    },
}

/// Why a model stopped producing output.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A natural end of the answer.
    #[default]
    Stop,
    /// The output token limit was reached.
    Length,
    /// The model stopped to have tools run.
    ToolUse,
    /// The provider filtered the content.
    ContentFilter,
    /// Anything else, as the provider named it.
    Other(String),
}
