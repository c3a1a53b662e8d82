//! The OpenAI-compatible provider: Chat Completions with SSE streaming
//! (<https://platform.openai.com/docs/api-reference/chat/create>,
//! <https://platform.openai.com/docs/api-reference/chat-streaming>).
//!
//! Any server speaking this API works by changing the base URL: OpenAI,
//! llama.cpp's `llama-server`, vLLM, LM Studio, Ollama's `/v1`.
//!
//! Mapping: `delta.content` → text; `delta.reasoning_content` or
//! `delta.reasoning` → thinking; `delta.tool_calls[]` by `index` → tool-call
//! deltas; `finish_reason` → the stop reason; usage from the final chunk
//! (`stream_options.include_usage`), whose `choices` is empty; `data: [DONE]`
//! ends the stream.

use serde_json::{Value, json};
use std::sync::Arc;

use super::error::ProviderError;
use super::event::{FinishReason, ProviderEvent};
use super::http::sse::SseParser;
use super::http::{HttpClient, HttpSettings, StreamDecoder, join_url};
use super::message::{Message, Usage};
use super::provider::{Provider, ProviderStream};
use super::request::{ChatRequest, ToolChoice};
use crate::ApiKey;

const NAME: &str = "openai";

/// The default base URL.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

/// Settings of an [`OpenAiProvider`].
#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    /// Base URL up to and including `/v1`.
    pub base_url: String,
    /// Sent as `Authorization: Bearer …` when present (local servers need none).
    pub api_key: Option<ApiKey>,
    /// The model used when a request names none.
    pub model: String,
    /// Ask for usage in the stream (`stream_options.include_usage`); turn
    /// off for servers that reject the option.
    pub include_usage: bool,
    /// Timeouts and retries.
    pub http: HttpSettings,
}

impl OpenAiConfig {
    /// OpenAI itself with `api_key` and `model`.
    pub fn new(api_key: Option<ApiKey>, model: impl Into<String>) -> Self {
        Self {
            base_url: OPENAI_BASE_URL.to_owned(),
            api_key,
            model: model.into(),
            include_usage: true,
            http: HttpSettings::default(),
        }
    }

    /// The same settings against another server.
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into();
        self
    }
}

/// A provider for OpenAI-compatible Chat Completions.
#[derive(Debug)]
pub struct OpenAiProvider {
    config: OpenAiConfig,
    client: Arc<HttpClient>,
}

impl OpenAiProvider {
    /// A provider with `config`.
    pub fn new(config: OpenAiConfig) -> Result<Self, ProviderError> {
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
                    let mut m = json!({"role": "assistant"});
                    m["content"] = if a.content.is_empty() && !a.tool_calls.is_empty() {
                        Value::Null
                    } else {
                        Value::String(a.content.clone())
                    };
                    if !a.tool_calls.is_empty() {
                        m["tool_calls"] = a
                            .tool_calls
                            .iter()
                            .map(|c| {
                                json!({
                                    "id": c.id,
                                    "type": "function",
                                    "function": {"name": c.name, "arguments": arguments_text(&c.arguments)},
                                })
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
                    json!({"role": "tool", "tool_call_id": t.tool_call_id, "content": content})
                }
            });
        }
        let mut body = json!({"model": model, "messages": messages, "stream": true});
        if self.config.include_usage {
            body["stream_options"] = json!({"include_usage": true});
        }
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
            match &request.tool_choice {
                ToolChoice::Auto => {}
                ToolChoice::None => body["tool_choice"] = json!("none"),
                ToolChoice::Required => body["tool_choice"] = json!("required"),
                ToolChoice::Tool(name) => {
                    body["tool_choice"] = json!({"type": "function", "function": {"name": name}});
                }
            }
        }
        if let Some(t) = request.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(n) = request.max_tokens {
            body["max_tokens"] = json!(n);
        }
        body
    }
}

/// Arguments as the API wants them: a JSON text. Raw text the model sent
/// (kept because it was not valid JSON) goes back unchanged.
fn arguments_text(arguments: &Value) -> String {
    match arguments {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

impl Provider for OpenAiProvider {
    fn stream(&self, request: ChatRequest) -> ProviderStream {
        let body = self.request_body(&request);
        let mut headers = Vec::new();
        if let Some(key) = &self.config.api_key {
            headers.push(("authorization", format!("Bearer {}", key.expose()), true));
        }
        let url = join_url(&self.config.base_url, "chat/completions");
        self.client
            .event_stream(url, headers, body, OpenAiDecoder::default())
    }

    fn name(&self) -> &str {
        NAME
    }
}

/// Decodes a Chat Completions SSE body.
#[derive(Debug, Default)]
pub struct OpenAiDecoder {
    sse: SseParser,
    events: usize,
    finish: Option<FinishReason>,
    usage: Usage,
    done: bool,
}

impl OpenAiDecoder {
    fn event(&mut self, data: &str, out: &mut Vec<ProviderEvent>) -> Result<(), ProviderError> {
        self.events += 1;
        if self.done {
            return Ok(());
        }
        if data.trim() == "[DONE]" {
            self.done = true;
            out.push(self.stop());
            return Ok(());
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| {
            ProviderError::stream(
                NAME,
                format!(
                    "event {} is not JSON ({e}): {}",
                    self.events,
                    super::http::excerpt(data, 120)
                ),
            )
        })?;
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            return Err(ProviderError::api(
                NAME,
                error["code"].as_u64().and_then(|c| u16::try_from(c).ok()),
                super::http::error_message(&json!({ "error": error }).to_string()),
            ));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            // `prompt_tokens` counts the cached part too
            // (https://platform.openai.com/docs/api-reference/chat/object).
            self.usage = Usage::new(
                usage["prompt_tokens"].as_u64().unwrap_or(0),
                usage["completion_tokens"].as_u64().unwrap_or(0),
            )
            .with_cached_input(
                usage["prompt_tokens_details"]["cached_tokens"]
                    .as_u64()
                    .unwrap_or(0),
            );
        }
        let Some(choice) = chunk["choices"].as_array().and_then(|c| c.first()) else {
            return Ok(()); // the usage chunk, or a keep-alive
        };
        let delta = &choice["delta"];
        for key in ["reasoning_content", "reasoning"] {
            if let Some(text) = delta[key].as_str().filter(|t| !t.is_empty()) {
                out.push(ProviderEvent::ThinkingDelta {
                    text: text.to_owned(),
                    signature: None,
                });
                break;
            }
        }
        if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            out.push(ProviderEvent::TextDelta(text.to_owned()));
        }
        if let Some(calls) = delta["tool_calls"].as_array() {
            for (position, call) in calls.iter().enumerate() {
                let index = call["index"].as_u64().map_or(position, |i| i as usize);
                let function = &call["function"];
                let arguments_delta = match &function["arguments"] {
                    Value::String(s) => s.clone(),
                    Value::Null => String::new(),
                    other => other.to_string(), // some servers send an object
                };
                out.push(ProviderEvent::ToolCallDelta {
                    index,
                    id: call["id"].as_str().map(str::to_owned),
                    name: function["name"].as_str().map(str::to_owned),
                    arguments_delta,
                });
            }
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            self.finish = Some(match reason {
                "stop" => FinishReason::Stop,
                "length" => FinishReason::Length,
                "tool_calls" | "function_call" => FinishReason::ToolUse,
                "content_filter" => FinishReason::ContentFilter,
                other => FinishReason::Other(other.to_owned()),
            });
        }
        Ok(())
    }

    fn stop(&self) -> ProviderEvent {
        ProviderEvent::Stop {
            reason: self.finish.clone().unwrap_or_default(),
            usage: self.usage,
        }
    }
}

impl StreamDecoder for OpenAiDecoder {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<ProviderEvent>) -> Result<(), ProviderError> {
        for event in self.sse.push(chunk) {
            let event = event.map_err(|e| ProviderError::stream(NAME, e.to_string()))?;
            self.event(&event.data, out)?;
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<ProviderEvent>) -> Result<(), ProviderError> {
        let cut_mid_event = self.sse.finish();
        if self.done {
            return Ok(());
        }
        // Some compatible servers close without `[DONE]`; a finish reason
        // and no half event means the answer is complete.
        if self.finish.is_some() && !cut_mid_event {
            out.push(self.stop());
            return Ok(());
        }
        Err(ProviderError::incomplete(NAME))
    }
}
