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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens read by the model.
    #[serde(default)]
    pub input_tokens: u64,
    /// Tokens written by the model.
    #[serde(default)]
    pub output_tokens: u64,
}

impl AddAssign for Usage {
    fn add_assign(&mut self, rhs: Self) {
        self.input_tokens = self.input_tokens.saturating_add(rhs.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(rhs.output_tokens);
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
}
