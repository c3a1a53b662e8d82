//! The Ollama provider: `/api/chat` with NDJSON streaming
//! (<https://github.com/ollama/ollama/blob/main/docs/api.md#generate-a-chat-completion>).
//!
//! Mapping: `message.content` → text; `message.thinking` → thinking;
//! `message.tool_calls` arrive whole (name and an arguments object), each
//! given a unique id unless the server sent one; the last line has
//! `done: true`, `done_reason` and the eval counts (`prompt_eval_count` →
//! input tokens, `eval_count` → output tokens); an `{"error": …}` line fails
//! the call.

use serde_json::{Value, json};
use std::sync::Arc;

use super::error::ProviderError;
use super::event::{FinishReason, ProviderEvent};
use super::http::ndjson::NdjsonParser;
use super::http::{HttpClient, HttpSettings, StreamDecoder, join_url};
use super::message::{Message, Usage};
use super::provider::{Provider, ProviderStream};
use super::request::ChatRequest;
use jarvis_common::{IdSource, UniqueIds};

const NAME: &str = "ollama";

/// The default base URL.
pub const OLLAMA_BASE_URL: &str = "http://localhost:11434";

/// Settings of an [`OllamaProvider`].
#[derive(Debug, Clone)]
pub struct OllamaConfig {
    /// Base URL of the Ollama server.
    pub base_url: String,
    /// The model used when a request names none.
    pub model: String,
    /// Ask thinking models to think (`think`); `None` leaves the model's default.
    pub think: Option<bool>,
    /// Timeouts and retries.
    pub http: HttpSettings,
    /// Ids for tool calls (Ollama sends none).
    pub ids: Arc<dyn IdSource>,
}

impl OllamaConfig {
    /// A local Ollama serving `model`.
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            base_url: OLLAMA_BASE_URL.to_owned(),
            model: model.into(),
            think: None,
            http: HttpSettings::default(),
            ids: Arc::new(UniqueIds::new()),
        }
    }

    /// The same settings against another server.
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into();
        self
    }
}

/// A provider for Ollama's chat API.
#[derive(Debug)]
pub struct OllamaProvider {
    config: OllamaConfig,
    client: Arc<HttpClient>,
}

impl OllamaProvider {
    /// A provider with `config`.
    pub fn new(config: OllamaConfig) -> Result<Self, ProviderError> {
        let client = Arc::new(HttpClient::new(NAME, config.http.clone())?);
        Ok(Self { config, client })
    }

    /// The JSON body sent for `request`.
    pub fn request_body(&self, request: &ChatRequest) -> Value {
        let model = if request.model.is_empty() {
            &self.config.model
        } else {
            &request.model
        };
        let mut messages = Vec::with_capacity(request.messages.len() + 1);
        if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
            messages.push(json!({"role": "system", "content": system}));
        }
        for message in &request.messages {
            messages.push(match message {
                Message::User(u) => json!({"role": "user", "content": u.content}),
                Message::Assistant(a) => {
                    let mut m = json!({"role": "assistant", "content": a.content});
                    let thinking: String = a.thinking.iter().map(|t| t.text.as_str()).collect();
                    if !thinking.is_empty() {
                        m["thinking"] = json!(thinking);
                    }
                    if !a.tool_calls.is_empty() {
                        m["tool_calls"] = a
                            .tool_calls
                            .iter()
                            .map(|c| {
                                let arguments = match &c.arguments {
                                    Value::Object(_) => c.arguments.clone(),
                                    _ => json!({}),
                                };
                                json!({"function": {"name": c.name, "arguments": arguments}})
                            })
                            .collect();
                    }
                    m
                }
                Message::Tool(t) => {
                    let content = if t.is_error {
                        format!("Error: {}", t.content)
                    } else {
                        t.content.clone()
                    };
                    json!({"role": "tool", "content": content, "tool_name": t.tool_name})
                }
            });
        }
        let mut body = json!({"model": model, "messages": messages, "stream": true});
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters,
                    }})
                })
                .collect();
        }
        let mut options = serde_json::Map::new();
        if let Some(t) = request.temperature {
            options.insert("temperature".into(), json!(t));
        }
        if let Some(n) = request.max_tokens {
            options.insert("num_predict".into(), json!(n));
        }
        if !options.is_empty() {
            body["options"] = Value::Object(options);
        }
        if let Some(think) = self.config.think {
            body["think"] = json!(think);
        }
        body
    }
}

impl Provider for OllamaProvider {
    fn stream(&self, request: ChatRequest) -> ProviderStream {
        let body = self.request_body(&request);
        let url = join_url(&self.config.base_url, "api/chat");
        let decoder = OllamaDecoder::new(self.config.ids.clone());
        self.client.event_stream(url, Vec::new(), body, decoder)
    }

    fn name(&self) -> &str {
        NAME
    }
}

/// Decodes an `/api/chat` NDJSON body.
#[derive(Debug)]
pub struct OllamaDecoder {
    lines: NdjsonParser,
    ids: Arc<dyn IdSource>,
    calls: usize,
    done: bool,
}

impl OllamaDecoder {
    /// A decoder naming tool calls from `ids`.
    pub fn new(ids: Arc<dyn IdSource>) -> Self {
        Self {
            lines: NdjsonParser::default(),
            ids,
            calls: 0,
            done: false,
        }
    }

    fn line(&mut self, line: Value, out: &mut Vec<ProviderEvent>) -> Result<(), ProviderError> {
        if self.done {
            return Ok(());
        }
        if let Some(error) = line.get("error") {
            let message = error
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| error.to_string());
            return Err(ProviderError::api(NAME, None, message));
        }
        let message = &line["message"];
        if let Some(t) = message["thinking"].as_str().filter(|t| !t.is_empty()) {
            out.push(ProviderEvent::ThinkingDelta {
                text: t.to_owned(),
                signature: None,
            });
        }
        if let Some(t) = message["content"].as_str().filter(|t| !t.is_empty()) {
            out.push(ProviderEvent::TextDelta(t.to_owned()));
        }
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            let function = &call["function"];
            let arguments = match &function["arguments"] {
                Value::String(s) => s.clone(), // some builds send a JSON text
                Value::Null => String::new(),
                other => other.to_string(),
            };
            let id = call["id"]
                .as_str()
                .filter(|i| !i.is_empty())
                .map(str::to_owned)
                .unwrap_or_else(|| self.ids.next_id("call_"));
            out.push(ProviderEvent::ToolCallDelta {
                index: self.calls,
                id: Some(id),
                name: function["name"].as_str().map(str::to_owned),
                arguments_delta: arguments,
            });
            self.calls += 1;
        }
        if line["done"].as_bool() == Some(true) {
            self.done = true;
            let reason = match line["done_reason"].as_str() {
                _ if self.calls > 0 => FinishReason::ToolUse,
                Some("stop") | None => FinishReason::Stop,
                Some("length") => FinishReason::Length,
                Some(other) => FinishReason::Other(other.to_owned()),
            };
            out.push(ProviderEvent::Stop {
                reason,
                // Ollama reports no prompt cache.
                usage: Usage::new(
                    line["prompt_eval_count"].as_u64().unwrap_or(0),
                    line["eval_count"].as_u64().unwrap_or(0),
                ),
            });
        }
        Ok(())
    }
}

impl StreamDecoder for OllamaDecoder {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<ProviderEvent>) -> Result<(), ProviderError> {
        for line in self.lines.push(chunk) {
            let line = line.map_err(|e| ProviderError::stream(NAME, e.to_string()))?;
            self.line(line, out)?;
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<ProviderEvent>) -> Result<(), ProviderError> {
        // A last line without its newline that does not parse was cut off.
        let rest = self.lines.finish().map_err(|_| ProviderError::incomplete(NAME))?;
        for line in rest {
            self.line(line, out)?;
        }
        if self.done {
            Ok(())
        } else {
            Err(ProviderError::incomplete(NAME))
        }
    }
}
