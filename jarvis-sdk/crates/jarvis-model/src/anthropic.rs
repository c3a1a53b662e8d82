//! The Anthropic provider: the Messages API with SSE streaming
//! (<https://docs.anthropic.com/en/api/messages>,
//! <https://docs.anthropic.com/en/docs/build-with-claude/streaming>).
//!
//! Mapping: `text_delta` → text; `thinking_delta` → thinking, and
//! `signature_delta` closes the thinking block with its signature so the
//! block round-trips; `redacted_thinking` blocks are kept verbatim;
//! `tool_use` blocks with `input_json_delta` pieces → tool-call deltas keyed
//! by block index; usage from `message_start` (input) and `message_delta`
//! (output); `ping` and unknown events are ignored; an `error` event fails
//! the call.
//!
//! Requests put the system prompt in its own field and tool results in
//! `tool_result` blocks with `is_error`. A request without tool definitions
//! whose history holds tool calls and results (the overflow summary call)
//! renders those records as plain text, because the API refuses tool blocks
//! without tool definitions: the summary then succeeds instead of falling
//! back (SPEC.md §17.3 #12).

use serde_json::{Value, json};
use std::sync::Arc;

use super::error::ProviderError;
use super::event::{FinishReason, ProviderEvent};
use super::http::sse::SseParser;
use super::http::{HttpClient, HttpSettings, StreamDecoder, excerpt, join_url};
use super::message::{AssistantMessage, Message, Usage};
use super::provider::{Provider, ProviderStream};
use super::request::{ChatRequest, ToolChoice};
use crate::ApiKey;

const NAME: &str = "anthropic";

/// The default base URL.
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";

/// The API version sent in `anthropic-version`.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Settings of an [`AnthropicProvider`].
#[derive(Debug, Clone)]
pub struct AnthropicConfig {
    /// Base URL (without `/v1`).
    pub base_url: String,
    /// Sent as `x-api-key`.
    pub api_key: ApiKey,
    /// The model used when a request names none.
    pub model: String,
    /// Output token limit when a request sets none (the API requires one).
    pub max_tokens: u32,
    /// Enables extended thinking with this token budget. Thinking blocks of
    /// earlier answers are sent back only when it is on.
    pub thinking_budget: Option<u32>,
    /// Timeouts and retries.
    pub http: HttpSettings,
}

impl AnthropicConfig {
    /// Anthropic's API with `api_key` and `model`.
    pub fn new(api_key: ApiKey, model: impl Into<String>) -> Self {
        Self {
            base_url: ANTHROPIC_BASE_URL.to_owned(),
            api_key,
            model: model.into(),
            max_tokens: 4096,
            thinking_budget: None,
            http: HttpSettings::default(),
        }
    }

    /// The same settings against another server (a proxy, a replay).
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into();
        self
    }
}

/// A provider for Anthropic's Messages API.
#[derive(Debug)]
pub struct AnthropicProvider {
    config: AnthropicConfig,
    client: Arc<HttpClient>,
}

impl AnthropicProvider {
    /// A provider with `config`.
    pub fn new(config: AnthropicConfig) -> Result<Self, ProviderError> {
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
        let with_tools = !request.tools.is_empty();
        let thinking = self.config.thinking_budget.is_some();
        let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
        for message in &request.messages {
            let (role, blocks) = match message {
                Message::User(u) => ("user", text_block(&u.content).into_iter().collect()),
                Message::Assistant(a) => ("assistant", assistant_blocks(a, with_tools, thinking)),
                Message::Tool(t) if with_tools => (
                    "user",
                    vec![json!({
                        "type": "tool_result",
                        "tool_use_id": t.tool_call_id,
                        "content": t.content,
                        "is_error": t.is_error,
                    })],
                ),
                Message::Tool(t) => {
                    let label = if t.is_error { "tool error" } else { "tool result" };
                    (
                        "user",
                        text_block(&format!("[{label}] {}: {}", t.tool_name, t.content))
                            .into_iter()
                            .collect(),
                    )
                }
            };
            if blocks.is_empty() {
                continue;
            }
            // Consecutive messages of one role become one turn.
            match turns.last_mut() {
                Some((last, content)) if *last == role => content.extend(blocks),
                _ => turns.push((role, blocks)),
            }
        }
        let messages: Vec<Value> = turns
            .into_iter()
            .map(|(role, content)| json!({"role": role, "content": content}))
            .collect();
        let mut body = json!({
            "model": model,
            "max_tokens": request.max_tokens.unwrap_or(self.config.max_tokens),
            "messages": messages,
            "stream": true,
        });
        if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
            body["system"] = json!(system);
        }
        if with_tools {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
                .collect();
            match &request.tool_choice {
                ToolChoice::Auto => {}
                ToolChoice::None => body["tool_choice"] = json!({"type": "none"}),
                ToolChoice::Required => body["tool_choice"] = json!({"type": "any"}),
                ToolChoice::Tool(name) => body["tool_choice"] = json!({"type": "tool", "name": name}),
            }
        }
        if let Some(budget) = self.config.thinking_budget {
            body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
        } else if let Some(t) = request.temperature {
            // The API refuses a temperature together with extended thinking.
            body["temperature"] = json!(t);
        }
        body
    }
}

fn text_block(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({"type": "text", "text": text}))
}

fn assistant_blocks(a: &AssistantMessage, with_tools: bool, thinking: bool) -> Vec<Value> {
    let mut blocks = Vec::new();
    if thinking {
        for t in &a.thinking {
            match (&t.redacted, &t.signature) {
                (Some(data), _) => blocks.push(json!({"type": "redacted_thinking", "data": data})),
                (None, Some(signature)) => {
                    blocks.push(json!({"type": "thinking", "thinking": t.text, "signature": signature}));
                }
                // A block without a signature cannot be sent back.
                (None, None) => {}
            }
        }
    }
    blocks.extend(text_block(&a.content));
    for call in &a.tool_calls {
        if with_tools {
            let input = match &call.arguments {
                Value::Object(_) => call.arguments.clone(),
                _ => json!({}), // unparseable arguments were answered with an error result
            };
            blocks.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
        } else {
            let args = match &call.arguments {
                Value::String(raw) => raw.clone(),
                other => other.to_string(),
            };
            blocks.extend(text_block(&format!("[tool call] {} {args}", call.name)));
        }
    }
    blocks
}

impl Provider for AnthropicProvider {
    fn stream(&self, request: ChatRequest) -> ProviderStream {
        let body = self.request_body(&request);
        let headers = vec![
            ("x-api-key", self.config.api_key.expose().to_owned(), true),
            ("anthropic-version", ANTHROPIC_VERSION.to_owned(), false),
        ];
        let url = join_url(&self.config.base_url, "v1/messages");
        self.client
            .event_stream(url, headers, body, AnthropicDecoder::default())
    }

    fn name(&self) -> &str {
        NAME
    }
}

/// Decodes a Messages API SSE body.
#[derive(Debug, Default)]
pub struct AnthropicDecoder {
    sse: SseParser,
    events: usize,
    usage: Usage,
    finish: Option<FinishReason>,
    stopped: bool,
}

impl AnthropicDecoder {
    fn event(&mut self, data: &str, out: &mut Vec<ProviderEvent>) -> Result<(), ProviderError> {
        self.events += 1;
        if self.stopped {
            return Ok(());
        }
        let event: Value = serde_json::from_str(data).map_err(|e| {
            ProviderError::stream(
                NAME,
                format!("event {} is not JSON ({e}): {}", self.events, excerpt(data, 120)),
            )
        })?;
        let index = event["index"].as_u64().unwrap_or(0) as usize;
        match event["type"].as_str().unwrap_or_default() {
            "message_start" => {
                let usage = &event["message"]["usage"];
                self.usage.input_tokens = input_tokens(usage);
                self.usage.cached_input_tokens = usage["cache_read_input_tokens"].as_u64().unwrap_or(0);
                self.usage.output_tokens = usage["output_tokens"].as_u64().unwrap_or(0);
            }
            "content_block_start" => {
                let block = &event["content_block"];
                match block["type"].as_str().unwrap_or_default() {
                    "tool_use" => {
                        let input = match &block["input"] {
                            Value::Object(m) if !m.is_empty() => block["input"].to_string(),
                            _ => String::new(),
                        };
                        out.push(ProviderEvent::ToolCallDelta {
                            index,
                            id: block["id"].as_str().map(str::to_owned),
                            name: block["name"].as_str().map(str::to_owned),
                            arguments_delta: input,
                        });
                    }
                    "redacted_thinking" => {
                        let data = block["data"].as_str().unwrap_or_default().to_owned();
                        out.push(ProviderEvent::RedactedThinking(data));
                    }
                    "text" => {
                        if let Some(t) = block["text"].as_str().filter(|t| !t.is_empty()) {
                            out.push(ProviderEvent::TextDelta(t.to_owned()));
                        }
                    }
                    "thinking" => {
                        if let Some(t) = block["thinking"].as_str().filter(|t| !t.is_empty()) {
                            out.push(ProviderEvent::ThinkingDelta {
                                text: t.to_owned(),
                                signature: None,
                            });
                        }
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let delta = &event["delta"];
                match delta["type"].as_str().unwrap_or_default() {
                    "text_delta" => {
                        if let Some(t) = delta["text"].as_str().filter(|t| !t.is_empty()) {
                            out.push(ProviderEvent::TextDelta(t.to_owned()));
                        }
                    }
                    "thinking_delta" => {
                        if let Some(t) = delta["thinking"].as_str().filter(|t| !t.is_empty()) {
                            out.push(ProviderEvent::ThinkingDelta {
                                text: t.to_owned(),
                                signature: None,
                            });
                        }
                    }
                    "signature_delta" => out.push(ProviderEvent::ThinkingDelta {
                        text: String::new(),
                        signature: Some(delta["signature"].as_str().unwrap_or_default().to_owned()),
                    }),
                    "input_json_delta" => out.push(ProviderEvent::ToolCallDelta {
                        index,
                        id: None,
                        name: None,
                        arguments_delta: delta["partial_json"].as_str().unwrap_or_default().to_owned(),
                    }),
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = event["delta"]["stop_reason"].as_str() {
                    self.finish = Some(match reason {
                        "end_turn" | "stop_sequence" => FinishReason::Stop,
                        "max_tokens" => FinishReason::Length,
                        "tool_use" => FinishReason::ToolUse,
                        "refusal" => FinishReason::ContentFilter,
                        other => FinishReason::Other(other.to_owned()),
                    });
                }
                let usage = &event["usage"];
                if let Some(output) = usage["output_tokens"].as_u64() {
                    self.usage.output_tokens = output;
                }
                if usage.get("input_tokens").is_some_and(|v| v.is_u64()) {
                    self.usage.input_tokens = input_tokens(usage);
                    self.usage.cached_input_tokens = usage["cache_read_input_tokens"].as_u64().unwrap_or(0);
                }
            }
            "message_stop" => {
                self.stopped = true;
                out.push(ProviderEvent::Stop {
                    reason: self.finish.clone().unwrap_or_default(),
                    usage: self.usage,
                });
            }
            "error" => {
                let kind = event["error"]["type"].as_str().unwrap_or("error");
                let message = event["error"]["message"].as_str().unwrap_or_default();
                return Err(ProviderError::api(
                    NAME,
                    status_of(kind),
                    format!("{kind}: {message}"),
                ));
            }
            _ => {} // ping, content_block_stop and event types added later
        }
        Ok(())
    }
}

/// Input tokens including cache reads and writes, which are billed input
/// (`cache_read_input_tokens`, the part read from the cache, is also
/// [`Usage::cached_input_tokens`];
/// <https://docs.anthropic.com/en/api/messages-streaming>).
fn input_tokens(usage: &Value) -> u64 {
    [
        "input_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
    ]
    .iter()
    .filter_map(|k| usage[*k].as_u64())
    .sum()
}

/// The HTTP status the API uses for an error type
/// (<https://docs.anthropic.com/en/api/errors>).
fn status_of(kind: &str) -> Option<u16> {
    Some(match kind {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "api_error" => 500,
        "overloaded_error" => 529,
        _ => return None,
    })
}

impl StreamDecoder for AnthropicDecoder {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<ProviderEvent>) -> Result<(), ProviderError> {
        for event in self.sse.push(chunk) {
            let event = event.map_err(|e| ProviderError::stream(NAME, e.to_string()))?;
            self.event(&event.data, out)?;
        }
        Ok(())
    }

    fn finish(&mut self, _out: &mut Vec<ProviderEvent>) -> Result<(), ProviderError> {
        self.sse.finish();
        if self.stopped {
            Ok(())
        } else {
            Err(ProviderError::incomplete(NAME))
        }
    }
}
