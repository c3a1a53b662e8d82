//! [`ChatRequest`]: everything a provider needs for one model call.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

use super::message::{Message, Role};

/// Why the loop makes a call; providers, logs and `FauxProvider` rules can
/// tell calls apart by it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Purpose {
    /// An ordinary step of the agent loop.
    #[default]
    Step,
    /// The repeated call after an empty answer.
    Nudge,
    /// The tool-less overflow summary call.
    Summary,
    /// A step of the overflow continuation.
    Continuation,
    /// A yes/no style judgement (the AGENDA, routing).
    Judgement,
    /// The inner thought engine.
    Thought,
    /// Reflection after a turn: procedure learning and failure reflection.
    Reflection,
    /// User-model distillation: facts about the person from episodes.
    Distillation,
    /// The tool-less call that answers when a budget is reached.
    WrapUp,
}

impl Purpose {
    /// The name used in scripts, logs and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Purpose::Step => "step",
            Purpose::Nudge => "nudge",
            Purpose::Summary => "summary",
            Purpose::Continuation => "continuation",
            Purpose::Judgement => "judgement",
            Purpose::Thought => "thought",
            Purpose::Reflection => "reflection",
            Purpose::Distillation => "distillation",
            Purpose::WrapUp => "wrap_up",
        }
    }
}

impl fmt::Display for Purpose {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A tool the model may call: its name, description and JSON Schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}

/// Whether and which tool the model must call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    #[default]
    Auto,
    /// The model must not call tools.
    None,
    /// The model must call some tool.
    Required,
    /// The model must call this tool.
    Tool(String),
}

/// Who is calling: carried to providers for logs and to `FauxProvider` rules.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestMetadata {
    /// The id of the agent making the call (`main`, `karen`, …).
    pub agent_id: String,
    /// The session the call belongs to.
    pub session_id: String,
}

/// One model call.
///
/// `messages` is exactly what goes on the wire. When the loop injects an
/// instruction it does not record (the empty-answer nudge, the summary
/// request, the continuation instruction, `PEER_REQUEST_RULE`), it travels as
/// a trailing `user` message of this request only, and
/// [`ChatRequest::instruction`] returns it; [`ChatRequest::recorded_messages`]
/// gives the history without it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ChatRequest {
    /// Model name as the provider knows it.
    pub model: String,
    /// The system prompt, if any.
    pub system: Option<String>,
    /// The conversation, ending with the injected instruction when there is one.
    pub messages: Vec<Message>,
    /// Tools the model may call; empty for a tool-less call.
    pub tools: Vec<ToolSpec>,
    /// Whether and which tool the model must call (only sent with tools).
    pub tool_choice: ToolChoice,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Output token limit.
    pub max_tokens: Option<u32>,
    /// Why the call is made.
    pub purpose: Purpose,
    /// Who is calling.
    pub metadata: RequestMetadata,
    injected: bool,
}

impl ChatRequest {
    /// A request for `model` over `messages`, with no tools and default settings.
    pub fn new(model: impl Into<String>, messages: Vec<Message>) -> Self {
        Self {
            model: model.into(),
            system: None,
            messages,
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
            temperature: None,
            max_tokens: None,
            purpose: Purpose::Step,
            metadata: RequestMetadata::default(),
            injected: false,
        }
    }

    /// Sets the system prompt.
    pub fn with_system(mut self, system: impl Into<String>) -> Self {
        self.system = Some(system.into());
        self
    }

    /// Sets the tools.
    pub fn with_tools(mut self, tools: Vec<ToolSpec>) -> Self {
        self.tools = tools;
        self
    }

    /// Sets the purpose.
    pub fn with_purpose(mut self, purpose: Purpose) -> Self {
        self.purpose = purpose;
        self
    }

    /// Sets the metadata.
    pub fn with_metadata(mut self, agent_id: impl Into<String>, session_id: impl Into<String>) -> Self {
        self.metadata = RequestMetadata {
            agent_id: agent_id.into(),
            session_id: session_id.into(),
        };
        self
    }

    /// Sets temperature and output token limit.
    pub fn with_sampling(mut self, temperature: Option<f32>, max_tokens: Option<u32>) -> Self {
        self.temperature = temperature;
        self.max_tokens = max_tokens;
        self
    }

    /// Appends an unrecorded instruction as a trailing `user` message.
    /// Calling it twice joins both instructions into that one message.
    pub fn with_instruction(mut self, text: impl Into<String>) -> Self {
        let text = text.into();
        if self.injected
            && let Some(Message::User(last)) = self.messages.last_mut()
        {
            last.content.push_str("\n\n");
            last.content.push_str(&text);
            return self;
        }
        self.messages.push(Message::user(text));
        self.injected = true;
        self
    }

    /// The injected instruction, when this request carries one.
    pub fn instruction(&self) -> Option<&str> {
        match (self.injected, self.messages.last()) {
            (true, Some(Message::User(u))) => Some(&u.content),
            _ => None,
        }
    }

    /// The recorded history: `messages` without the injected instruction.
    pub fn recorded_messages(&self) -> &[Message] {
        if self.instruction().is_some() {
            &self.messages[..self.messages.len() - 1]
        } else {
            &self.messages
        }
    }

    /// The content of the last user message of the recorded history.
    pub fn last_user_text(&self) -> Option<&str> {
        self.recorded_messages().iter().rev().find_map(|m| match m {
            Message::User(u) => Some(u.content.as_str()),
            _ => None,
        })
    }

    /// The role of the last recorded message.
    pub fn last_recorded_role(&self) -> Option<Role> {
        self.recorded_messages().last().map(Message::role)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_are_trailing_and_separable() {
        let req = ChatRequest::new("m", vec![Message::user("hi"), Message::assistant_text("yo")])
            .with_instruction("first")
            .with_instruction("second");
        assert_eq!(req.messages.len(), 3);
        assert_eq!(req.instruction(), Some("first\n\nsecond"));
        assert_eq!(req.recorded_messages().len(), 2);
        assert_eq!(req.last_user_text(), Some("hi"));
        assert_eq!(req.last_recorded_role(), Some(Role::Assistant));
    }

    #[test]
    fn a_plain_trailing_user_message_is_not_an_instruction() {
        let req = ChatRequest::new("m", vec![Message::user("hi")]);
        assert_eq!(req.instruction(), None);
        assert_eq!(req.recorded_messages().len(), 1);
    }
}
