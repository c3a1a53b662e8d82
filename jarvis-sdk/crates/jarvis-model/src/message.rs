//! The conversation records every provider reads and every session stores:
//! user messages, assistant messages (text, thinking, tool calls, usage) and
//! tool results.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::ops::AddAssign;

/// One record of a conversation, tagged by `role` when serialised.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// Something the person (or a delegating agent) said.
    User(UserMessage),
    /// What the model answered: text, thinking and tool calls.
    Assistant(AssistantMessage),
    /// The result of one tool call, answering the assistant call with the same id.
    Tool(ToolResultMessage),
}

impl Message {
    /// A user message with `content`.
    pub fn user(content: impl Into<String>) -> Self {
        Message::User(UserMessage {
            content: content.into(),
        })
    }

    /// An assistant message with plain text and nothing else.
    pub fn assistant_text(content: impl Into<String>) -> Self {
        Message::Assistant(AssistantMessage {
            content: content.into(),
            ..AssistantMessage::default()
        })
    }

    /// The role of this record.
    pub fn role(&self) -> Role {
        match self {
            Message::User(_) => Role::User,
            Message::Assistant(_) => Role::Assistant,
            Message::Tool(_) => Role::Tool,
        }
    }
}

/// The role of a [`Message`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The person, or a delegating agent.
    User,
    /// The model.
    Assistant,
    /// A tool result.
    Tool,
}

/// A user message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserMessage {
    /// The text.
    pub content: String,
}

/// An assistant message as assembled from one provider response.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// The visible text (may be empty when the model only called tools).
    #[serde(default)]
    pub content: String,
    /// Thinking blocks, kept with their signatures so providers that require
    /// it (Anthropic) can send them back in later requests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thinking: Vec<ThinkingBlock>,
    /// Tool calls, in the order the model made them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Tokens the call that produced this message used, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// One block of model thinking.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThinkingBlock {
    /// The thinking text.
    pub text: String,
    /// An opaque signature some providers attach and require back verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// The encrypted payload of a redacted thinking block (then `text` is
    /// empty); sent back verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redacted: Option<String>,
}

/// A complete tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call id; tool results refer to it.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments. A well-formed call carries a JSON object; anything else
    /// (a string holding unparseable text the model produced, a number, …) is
    /// kept as it came so it can be shown and sent back, and the loop answers
    /// it with an error result ([`ToolCall::arguments_error`]).
    pub arguments: Value,
}

impl ToolCall {
    /// Why these arguments cannot be used, or `None` when they are a JSON object.
    pub fn arguments_error(&self) -> Option<String> {
        match &self.arguments {
            Value::Object(_) => None,
            Value::String(raw) => Some(match serde_json::from_str::<Value>(raw) {
                Err(e) => format!("the arguments are not valid JSON ({e}); send a JSON object"),
                Ok(_) => "the arguments must be a JSON object".to_owned(),
            }),
            _ => Some("the arguments must be a JSON object".to_owned()),
        }
    }
}

/// The result of one tool call, as recorded and sent back to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResultMessage {
    /// The id of the call this answers.
    pub tool_call_id: String,
    /// The tool's name (Ollama and text renderings need it).
    pub tool_name: String,
    /// What the tool returned, or why it failed or was refused.
    pub content: String,
    /// Whether this result reports a failure or a refusal.
    #[serde(default)]
    pub is_error: bool,
}

/// Token counts of one or more model calls.
///
/// `input_tokens` is the whole input the calls read; `cached_input_tokens`
/// is the part of it the provider read from its prompt cache (so it is
/// never more than `input_tokens`). Counts come from the provider's own
/// usage report; where a provider sends none, the loop may fill in an
/// estimate ([`estimate_tokens`](super::estimate_tokens)) and says so with
/// `estimated`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens read by the model, cached ones included.
    #[serde(default)]
    pub input_tokens: u64,
    /// Tokens written by the model.
    #[serde(default)]
    pub output_tokens: u64,
    /// The part of `input_tokens` read from the provider's prompt cache.
    #[serde(default)]
    pub cached_input_tokens: u64,
    /// Whether any part of these counts was estimated rather than reported
    /// by the provider (absent when `false`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
}

impl Usage {
    /// Reported counts of `input_tokens` read and `output_tokens` written,
    /// nothing cached.
    pub fn new(input_tokens: u64, output_tokens: u64) -> Self {
        Self {
            input_tokens,
            output_tokens,
            ..Self::default()
        }
    }

    /// These counts with `cached_input_tokens` of the input read from the
    /// prompt cache.
    pub fn with_cached_input(mut self, cached_input_tokens: u64) -> Self {
        self.cached_input_tokens = cached_input_tokens;
        self
    }

    /// These counts, marked as estimated.
    pub fn estimated(mut self) -> Self {
        self.estimated = true;
        self
    }
}

impl AddAssign for Usage {
    /// Adds the counters (saturating at `u64::MAX`); the sum is estimated
    /// when either part was.
    fn add_assign(&mut self, rhs: Self) {
        self.input_tokens = self.input_tokens.saturating_add(rhs.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(rhs.output_tokens);
        self.cached_input_tokens = self.cached_input_tokens.saturating_add(rhs.cached_input_tokens);
        self.estimated = self.estimated || rhs.estimated;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_serialise_tagged_by_role() {
        let m = Message::user("안녕");
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            json!({"role": "user", "content": "안녕"})
        );
        let back: Message = serde_json::from_value(json!({
            "role": "tool", "tool_call_id": "c1", "tool_name": "t", "content": "x"
        }))
        .unwrap();
        assert_eq!(back.role(), Role::Tool);
    }

    #[test]
    fn argument_errors_are_explained() {
        let mut call = ToolCall {
            id: "c".into(),
            name: "t".into(),
            arguments: json!({}),
        };
        assert_eq!(call.arguments_error(), None);
        call.arguments = Value::String("{\"a\":".into());
        assert!(call.arguments_error().unwrap().contains("not valid JSON"));
        call.arguments = json!([1]);
        assert!(call.arguments_error().unwrap().contains("JSON object"));
    }

    #[test]
    fn usage_adds_up_saturating_and_stays_estimated() {
        let mut total = Usage::new(10, 2).with_cached_input(4);
        total += Usage::new(5, 1).estimated();
        assert_eq!(
            total,
            Usage {
                input_tokens: 15,
                output_tokens: 3,
                cached_input_tokens: 4,
                estimated: true,
            }
        );
        total += Usage::new(u64::MAX, 0).with_cached_input(u64::MAX);
        assert_eq!(
            (total.input_tokens, total.cached_input_tokens),
            (u64::MAX, u64::MAX)
        );
        assert!(total.estimated, "once estimated, the sum stays estimated");
    }

    #[test]
    fn usage_serialises_cached_tokens_and_only_a_true_estimate() {
        assert_eq!(
            serde_json::to_value(Usage::new(7, 2)).unwrap(),
            json!({"input_tokens": 7, "output_tokens": 2, "cached_input_tokens": 0})
        );
        assert_eq!(
            serde_json::to_value(Usage::new(7, 2).estimated()).unwrap()["estimated"],
            true
        );
        // Records written before the fields existed still read.
        let old: Usage = serde_json::from_value(json!({"input_tokens": 3, "output_tokens": 1})).unwrap();
        assert_eq!(old, Usage::new(3, 1));
    }
}
