//! The `FauxProvider` script format: serde types, builders and validation.

use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ProviderError;
use crate::message::{Role, Usage};
use crate::request::{ChatRequest, Purpose};

/// A complete script: `rules` are tried first, in order; then `replies` are
/// consumed in order, once each, with a separate cursor per session; then
/// `fallback` answers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FauxScript {
    /// Conditional replies, tried in order before `replies`.
    #[serde(default)]
    pub rules: Vec<FauxRule>,
    /// Replies consumed in order, per session.
    #[serde(default)]
    pub replies: Vec<FauxReply>,
    /// The reply when nothing else applies; without one, the provider answers
    /// with an error saying the script is exhausted.
    #[serde(default)]
    pub fallback: Option<FauxReply>,
}

impl FauxScript {
    /// An empty script.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses a script from YAML.
    pub fn from_yaml(yaml: &str) -> Result<Self, ProviderError> {
        let script: FauxScript = serde_yaml::from_str(yaml)
            .map_err(|e| ProviderError::Script(format!("invalid script YAML: {e}")))?;
        script.validate()?;
        Ok(script)
    }

    /// Adds a rule.
    pub fn rule(mut self, rule: FauxRule) -> Self {
        self.rules.push(rule);
        self
    }

    /// Adds a reply to the ordered list.
    pub fn reply(mut self, reply: FauxReply) -> Self {
        self.replies.push(reply);
        self
    }

    /// Sets the fallback reply.
    pub fn fallback(mut self, reply: FauxReply) -> Self {
        self.fallback = Some(reply);
        self
    }

    /// Checks every reply and rule; the error names the first bad one.
    pub fn validate(&self) -> Result<(), ProviderError> {
        for (i, rule) in self.rules.iter().enumerate() {
            rule.when
                .compile()
                .map_err(|e| ProviderError::Script(format!("rules[{i}].when: {e}")))?;
            rule.reply
                .validate()
                .map_err(|e| ProviderError::Script(format!("rules[{i}].reply: {e}")))?;
        }
        for (i, reply) in self.replies.iter().enumerate() {
            reply
                .validate()
                .map_err(|e| ProviderError::Script(format!("replies[{i}]: {e}")))?;
        }
        if let Some(f) = &self.fallback {
            f.validate()
                .map_err(|e| ProviderError::Script(format!("fallback: {e}")))?;
        }
        Ok(())
    }
}

/// A reply played when its condition holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FauxRule {
    /// The condition; every key given must match.
    #[serde(default)]
    pub when: FauxWhen,
    /// What to answer.
    pub reply: FauxReply,
    /// How many times the rule may fire in all; unlimited when absent.
    #[serde(default)]
    pub times: Option<u32>,
}

impl FauxRule {
    /// A rule that plays `reply` whenever `when` holds.
    pub fn new(when: FauxWhen, reply: FauxReply) -> Self {
        Self {
            when,
            reply,
            times: None,
        }
    }

    /// Caps how many times the rule fires.
    pub fn times(mut self, n: u32) -> Self {
        self.times = Some(n);
        self
    }
}

/// The condition of a [`FauxRule`]. Every key is optional; absent keys match anything.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FauxWhen {
    /// The calling agent's id.
    #[serde(default)]
    pub agent: Option<String>,
    /// The call's purpose.
    #[serde(default)]
    pub purpose: Option<Purpose>,
    /// A regex searched in the last user message of the recorded history
    /// (never in injected instructions).
    #[serde(default)]
    pub last_user: Option<String>,
    /// The role of the last recorded message.
    #[serde(default)]
    pub last_role: Option<Role>,
    /// Whether the request offers tools.
    #[serde(default)]
    pub has_tools: Option<bool>,
}

impl FauxWhen {
    /// Matches calls with this purpose.
    pub fn purpose(mut self, purpose: Purpose) -> Self {
        self.purpose = Some(purpose);
        self
    }

    /// Matches calls by this agent.
    pub fn agent(mut self, agent: impl Into<String>) -> Self {
        self.agent = Some(agent.into());
        self
    }

    /// Matches when the last recorded user message matches `regex`.
    pub fn last_user(mut self, regex: impl Into<String>) -> Self {
        self.last_user = Some(regex.into());
        self
    }

    /// Matches when the last recorded message has this role.
    pub fn last_role(mut self, role: Role) -> Self {
        self.last_role = Some(role);
        self
    }

    /// Matches when the request does (or does not) offer tools.
    pub fn has_tools(mut self, yes: bool) -> Self {
        self.has_tools = Some(yes);
        self
    }

    pub(super) fn compile(&self) -> Result<CompiledWhen, String> {
        let last_user = match &self.last_user {
            Some(re) => Some(Regex::new(re).map_err(|e| format!("last_user is not a valid regex: {e}"))?),
            None => None,
        };
        Ok(CompiledWhen {
            when: self.clone(),
            last_user,
        })
    }
}

#[derive(Debug, Clone)]
pub(super) struct CompiledWhen {
    when: FauxWhen,
    last_user: Option<Regex>,
}

impl CompiledWhen {
    pub(super) fn matches(&self, req: &ChatRequest) -> bool {
        let w = &self.when;
        if w.agent.as_ref().is_some_and(|a| *a != req.metadata.agent_id) {
            return false;
        }
        if w.purpose.is_some_and(|p| p != req.purpose) {
            return false;
        }
        if w.has_tools.is_some_and(|h| h == req.tools.is_empty()) {
            return false;
        }
        if w.last_role.is_some_and(|r| Some(r) != req.last_recorded_role()) {
            return false;
        }
        if let Some(re) = &self.last_user
            && !req.last_user_text().is_some_and(|t| re.is_match(t))
        {
            return false;
        }
        true
    }
}

/// One scripted answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FauxReply {
    /// Answer text.
    #[serde(default)]
    pub text: Option<String>,
    /// Into how many deltas `text` is split, by characters (default 1).
    #[serde(default)]
    pub chunks: Option<usize>,
    /// Thinking text, streamed before the answer.
    #[serde(default)]
    pub thinking: Option<String>,
    /// Tool calls; ids are `call_<n>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<FauxToolCall>,
    /// An empty answer: no text, no tool calls.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub empty: bool,
    /// Fail the call instead of answering.
    #[serde(default)]
    pub error: Option<FauxError>,
    /// Wait this long before answering (honours `tokio::time::pause`).
    #[serde(default)]
    pub delay_ms: Option<u64>,
    /// Wait this long between two text deltas, so screens see the answer
    /// arrive piece by piece (honours `tokio::time::pause`).
    #[serde(default)]
    pub chunk_delay_ms: Option<u64>,
    /// Token usage to report.
    #[serde(default)]
    pub usage: Option<Usage>,
}

impl FauxReply {
    /// A text answer.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            ..Self::default()
        }
    }

    /// One tool call.
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Self {
        Self::default().and_tool_call(name, arguments)
    }

    /// An empty answer.
    pub fn empty() -> Self {
        Self {
            empty: true,
            ..Self::default()
        }
    }

    /// A failed call.
    pub fn error(message: impl Into<String>) -> Self {
        Self {
            error: Some(FauxError::Message(message.into())),
            ..Self::default()
        }
    }

    /// Adds another tool call to this reply.
    pub fn and_tool_call(mut self, name: impl Into<String>, arguments: Value) -> Self {
        self.tool_calls.push(FauxToolCall {
            name: name.into(),
            arguments,
        });
        self
    }

    /// Splits the text into `n` deltas.
    pub fn chunks(mut self, n: usize) -> Self {
        self.chunks = Some(n);
        self
    }

    /// Adds thinking.
    pub fn thinking(mut self, thinking: impl Into<String>) -> Self {
        self.thinking = Some(thinking.into());
        self
    }

    /// Delays the answer.
    pub fn delay_ms(mut self, ms: u64) -> Self {
        self.delay_ms = Some(ms);
        self
    }

    /// Spaces the text deltas `ms` apart.
    pub fn chunk_delay_ms(mut self, ms: u64) -> Self {
        self.chunk_delay_ms = Some(ms);
        self
    }

    /// Reports usage.
    pub fn usage(mut self, input_tokens: u64, output_tokens: u64) -> Self {
        self.usage = Some(Usage::new(input_tokens, output_tokens));
        self
    }

    pub(super) fn validate(&self) -> Result<(), String> {
        let has_content = self.text.is_some() || self.thinking.is_some() || !self.tool_calls.is_empty();
        if self.empty && (self.text.as_deref().is_some_and(|t| !t.is_empty()) || !self.tool_calls.is_empty())
        {
            return Err("`empty: true` cannot carry text or tool calls".into());
        }
        if self.error.is_some() && (has_content || self.empty) {
            return Err("`error` cannot be combined with an answer".into());
        }
        if !has_content && !self.empty && self.error.is_none() {
            return Err("a reply needs one of text, thinking, tool_calls, empty or error".into());
        }
        if self.chunks == Some(0) {
            return Err("`chunks` must be at least 1".into());
        }
        for (i, c) in self.tool_calls.iter().enumerate() {
            if c.name.is_empty() {
                return Err(format!("tool_calls[{i}] has no name"));
            }
        }
        Ok(())
    }
}

/// A scripted tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FauxToolCall {
    /// The tool's name.
    pub name: String,
    /// The arguments (any JSON; a string is sent as raw argument text, which
    /// lets scripts play malformed arguments).
    #[serde(default = "empty_object")]
    pub arguments: Value,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

/// A scripted failure: a message, or a message with an HTTP status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum FauxError {
    /// Just a message.
    Message(String),
    /// A message and a status.
    Detailed {
        /// The message.
        message: String,
        /// The HTTP status to report.
        #[serde(default)]
        status: Option<u16>,
    },
}

impl FauxError {
    pub(super) fn to_provider_error(&self) -> ProviderError {
        match self {
            FauxError::Message(m) => ProviderError::api("faux", None, m.clone()),
            FauxError::Detailed { message, status } => ProviderError::api("faux", *status, message.clone()),
        }
    }
}
