//! The one shared assembler that turns a provider's deltas into a complete
//! [`ModelResponse`]. Every provider's stream goes through it, so split
//! arguments, parallel calls and repeated ids are handled in one place.

use serde_json::Value;
use std::collections::BTreeMap;

use super::error::ProviderError;
use super::event::{FinishReason, ProviderEvent};
use super::message::{AssistantMessage, ThinkingBlock, ToolCall, Usage};

/// A complete model answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelResponse {
    /// The visible text.
    pub text: String,
    /// Thinking blocks, with signatures.
    pub thinking: Vec<ThinkingBlock>,
    /// Complete tool calls in index order. An empty `id` means the provider
    /// sent none; the loop assigns one before recording.
    pub tool_calls: Vec<ToolCall>,
    /// Why the model stopped.
    pub finish: FinishReason,
    /// Tokens used.
    pub usage: Usage,
}

impl ModelResponse {
    /// An answer with neither visible text nor tool calls (thinking alone
    /// does not count as an answer).
    pub fn is_empty(&self) -> bool {
        self.text.trim().is_empty() && self.tool_calls.is_empty()
    }

    /// This answer as an assistant message for the history.
    pub fn into_message(self) -> AssistantMessage {
        AssistantMessage {
            content: self.text,
            thinking: self.thinking,
            tool_calls: self.tool_calls,
            usage: Some(self.usage),
        }
    }
}

#[derive(Debug, Default)]
struct PartialCall {
    id: Option<String>,
    name: String,
    arguments: String,
}

/// Collects [`ProviderEvent`]s of one response.
#[derive(Debug, Default)]
pub struct ResponseAssembler {
    provider: String,
    text: String,
    thinking: Vec<ThinkingBlock>,
    thinking_open: bool,
    calls: BTreeMap<usize, PartialCall>,
    stop: Option<(FinishReason, Usage)>,
}

impl ResponseAssembler {
    /// An empty assembler.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty assembler for `provider`'s stream (named in errors).
    pub fn for_provider(provider: &str) -> Self {
        Self {
            provider: provider.to_owned(),
            ..Self::default()
        }
    }

    /// Adds one event.
    pub fn push(&mut self, event: ProviderEvent) {
        match event {
            ProviderEvent::TextDelta(t) => self.text.push_str(&t),
            ProviderEvent::ThinkingDelta { text, signature } => {
                if !self.thinking_open {
                    self.thinking.push(ThinkingBlock::default());
                    self.thinking_open = true;
                }
                if let Some(block) = self.thinking.last_mut() {
                    block.text.push_str(&text);
                    if signature.is_some() {
                        block.signature = signature;
                        self.thinking_open = false;
                    }
                }
            }
            ProviderEvent::ToolCallDelta {
                index,
                id,
                name,
                arguments_delta,
            } => {
                let call = self.calls.entry(index).or_default();
                if let Some(id) = id.filter(|i| !i.is_empty()) {
                    // Some servers repeat the id on every piece; the first one wins.
                    call.id.get_or_insert(id);
                }
                if let Some(name) = name.filter(|n| !n.is_empty()) {
                    // Some servers repeat the whole name on every piece; others
                    // stream it in parts.
                    if call.name.is_empty() {
                        call.name = name;
                    } else if call.name != name {
                        call.name.push_str(&name);
                    }
                }
                call.arguments.push_str(&arguments_delta);
            }
            ProviderEvent::RedactedThinking(data) => {
                self.thinking.push(ThinkingBlock {
                    redacted: Some(data),
                    ..ThinkingBlock::default()
                });
                self.thinking_open = false;
            }
            ProviderEvent::Stop { reason, usage } => {
                let entry = self.stop.get_or_insert((reason, Usage::default()));
                entry.1 += usage;
            }
        }
    }

    /// Whether the stop event has arrived.
    pub fn is_stopped(&self) -> bool {
        self.stop.is_some()
    }

    /// The complete response; [`ProviderError::Incomplete`] when the stream
    /// ended without a stop event. Arguments that are not valid JSON are kept
    /// as a JSON string holding the raw text (see [`ToolCall::arguments_error`]).
    pub fn finish(self) -> Result<ModelResponse, ProviderError> {
        let Some((finish, usage)) = self.stop else {
            return Err(ProviderError::incomplete(if self.provider.is_empty() {
                "provider"
            } else {
                &self.provider
            }));
        };
        let tool_calls = self
            .calls
            .into_values()
            .map(|c| ToolCall {
                id: c.id.unwrap_or_default(),
                name: c.name,
                arguments: parse_arguments(&c.arguments),
            })
            .collect();
        Ok(ModelResponse {
            text: self.text,
            thinking: self.thinking,
            tool_calls,
            finish,
            usage,
        })
    }
}

fn parse_arguments(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return Value::Object(Default::default());
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(v @ Value::Object(_)) => v,
        _ => Value::String(raw.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn delta(index: usize, id: Option<&str>, name: Option<&str>, args: &str) -> ProviderEvent {
        ProviderEvent::ToolCallDelta {
            index,
            id: id.map(Into::into),
            name: name.map(Into::into),
            arguments_delta: args.into(),
        }
    }

    fn stop() -> ProviderEvent {
        ProviderEvent::Stop {
            reason: FinishReason::ToolUse,
            usage: Usage::new(3, 2),
        }
    }

    #[test]
    fn interleaved_parallel_calls_stay_apart() {
        let mut a = ResponseAssembler::new();
        a.push(delta(1, Some("b"), Some("list_dir"), "{\"pa"));
        a.push(delta(0, Some("a"), Some("read_file"), "{\"path\""));
        a.push(delta(1, Some("b"), Some("list_dir"), "th\":\".\"}"));
        a.push(delta(0, None, None, ":\"가.txt\"}"));
        a.push(stop());
        let r = a.finish().unwrap();
        assert_eq!(r.tool_calls.len(), 2);
        assert_eq!(r.tool_calls[0].name, "read_file");
        assert_eq!(r.tool_calls[0].arguments, json!({"path": "가.txt"}));
        assert_eq!(r.tool_calls[1].id, "b");
        assert_eq!(r.tool_calls[1].arguments, json!({"path": "."}));
        assert_eq!(r.usage.input_tokens, 3);
    }

    #[test]
    fn invalid_or_empty_arguments_never_panic() {
        let mut a = ResponseAssembler::new();
        a.push(delta(0, Some("x"), Some("t"), "{\"a\": tru"));
        a.push(delta(1, None, Some("u"), ""));
        a.push(delta(2, None, Some("v"), "[1,2]"));
        a.push(stop());
        let r = a.finish().unwrap();
        assert_eq!(r.tool_calls[0].arguments, json!("{\"a\": tru"));
        assert!(r.tool_calls[0].arguments_error().is_some());
        assert_eq!(r.tool_calls[1].arguments, json!({}));
        assert_eq!(r.tool_calls[1].id, "");
        assert!(r.tool_calls[2].arguments_error().is_some());
    }

    #[test]
    fn missing_stop_is_incomplete() {
        let mut a = ResponseAssembler::new();
        a.push(ProviderEvent::TextDelta("half".into()));
        assert!(matches!(a.finish(), Err(ProviderError::Incomplete { .. })));
    }

    #[test]
    fn signatures_close_thinking_blocks() {
        let mut a = ResponseAssembler::new();
        for (text, sig) in [("a", None), ("b", Some("s1")), ("c", None), ("", Some("s2"))] {
            a.push(ProviderEvent::ThinkingDelta {
                text: text.into(),
                signature: sig.map(Into::into),
            });
        }
        a.push(ProviderEvent::TextDelta("  ".into()));
        a.push(stop());
        let r = a.finish().unwrap();
        assert_eq!(r.thinking.len(), 2);
        assert_eq!(r.thinking[0].text, "ab");
        assert_eq!(r.thinking[0].signature.as_deref(), Some("s1"));
        assert_eq!(r.thinking[1].text, "c");
        assert!(r.is_empty(), "thinking and blanks alone are an empty answer");
    }

    #[test]
    fn repeated_ids_and_names_are_not_doubled() {
        let mut a = ResponseAssembler::new();
        a.push(delta(0, Some("c1"), Some("read_file"), "{"));
        a.push(delta(0, Some("c1"), Some("read_file"), "}"));
        a.push(stop());
        let r = a.finish().unwrap();
        assert_eq!(r.tool_calls[0].id, "c1");
        assert_eq!(r.tool_calls[0].name, "read_file");
    }
}
