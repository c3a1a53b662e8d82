//! Cassettes: what a session exchanged with the outside, one JSON line per
//! exchange, in `$JARVIS_HOME/cassettes/<session_id>.jsonl`.
//!
//! ```text
//! {"v":1,"type":"model","turn":1,"call":1,"purpose":"step","agent":"main","prompt":"…","request":{…},"events":[{"t_ms":0,"text":"…"},…,{"t_ms":8,"stop":{…}}]}
//! {"v":1,"type":"tool","turn":1,"call_id":"call_1","tool":"list_dir","args":{…},"result":"…","is_error":false}
//! {"v":1,"type":"approval","turn":1,"request_id":"approval_1","call_id":"call_2","tool":"run_command","decision":"allow"}
//! ```
//!
//! - `turn` counts the session's recorded turns from 1; `call` counts one
//!   turn's model calls from 1 (steps, nudges, summaries, continuations and
//!   wrap-ups: the calls of the agent loop, not of thinking, reflection or
//!   the AGENDA). The first call of a turn carries its `prompt` (the text
//!   as it left the security pipeline).
//! - `request` is the request as sent ([`request_json`]): model, system
//!   prompt, messages (memory and instructions included), tools, tool
//!   choice, sampling and purpose. A request never holds an API key (keys
//!   live in the provider); the recorder also blanks every secret it was
//!   given, should one appear in a message.
//! - `events` are the provider's stream with each event's milliseconds
//!   since the call started; a call that failed ends with `{"error": …}`.
//! - A tool line is written when the call finishes, whoever answered it
//!   (the tool, or the gate's refusal); an approval line when a person (not
//!   a rule) answered.
//!
//! Recording never fails a turn: a line that cannot be written is logged
//! and dropped. `/forget` rewrites the cassettes without the lines that hold
//! the forgotten text ([`forget_in_cassettes`]).

use futures::Stream;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use jarvis_agent::{ApprovalDecision, ToolResult, TurnTap};
use jarvis_model::{
    ChatRequest, FinishReason, Provider, ProviderError, ProviderEvent, ProviderStream, Purpose, ToolCall,
    Usage,
};

/// The folder of a home's cassettes.
pub const CASSETTES_DIR: &str = "cassettes";

/// The format version every line carries as `v`.
pub const CASSETTE_VERSION: u32 = 1;

/// What replaces a secret found in a line.
const REDACTED: &str = "[REDACTED]";

/// One line of a cassette.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CassetteLine {
    /// The format version ([`CASSETTE_VERSION`]).
    pub v: u32,
    /// The exchange.
    #[serde(flatten)]
    pub exchange: Exchange,
}

/// One exchange with the outside.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Exchange {
    /// A model call.
    Model(ModelExchange),
    /// A tool call.
    Tool(ToolExchange),
    /// An approval a person answered.
    Approval(ApprovalExchange),
}

impl Exchange {
    /// The turn it belongs to.
    pub fn turn(&self) -> u32 {
        match self {
            Exchange::Model(m) => m.turn,
            Exchange::Tool(t) => t.turn,
            Exchange::Approval(a) => a.turn,
        }
    }
}

/// A model call: the request as sent and the stream that answered it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelExchange {
    /// The turn (from 1).
    pub turn: u32,
    /// The call within the turn (from 1).
    pub call: u32,
    /// Why the loop made it.
    pub purpose: Purpose,
    /// The agent that made it.
    #[serde(default)]
    pub agent: String,
    /// The turn's prompt (on a turn's first call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The request as sent ([`request_json`]).
    pub request: Value,
    /// The answer's events.
    pub events: Vec<RecordedEvent>,
}

/// A tool call and what it gave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolExchange {
    /// The turn (from 1).
    pub turn: u32,
    /// The call's id.
    pub call_id: String,
    /// The tool's name.
    pub tool: String,
    /// The arguments the model sent.
    pub args: Value,
    /// What the model read back.
    pub result: String,
    /// Whether it was a failure or a refusal.
    pub is_error: bool,
}

/// A person's answer to an approval request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalExchange {
    /// The turn (from 1).
    pub turn: u32,
    /// The request's id.
    pub request_id: String,
    /// The tool call asked about: one of the turn's tool lines, or a call
    /// made inside one of them (a delegated agent's or a sub-agent's,
    /// which ask on the session where the person is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// The tool asked about.
    #[serde(default)]
    pub tool: String,
    /// The answer.
    pub decision: ApprovalDecision,
}

/// One event of a recorded answer, with its time since the call started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedEvent {
    /// Milliseconds since the call started.
    pub t_ms: u64,
    /// The event.
    #[serde(flatten)]
    pub event: RecordedKind,
}

/// What a recorded event was: one [`ProviderEvent`], or the call's error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordedKind {
    /// A piece of answer text.
    Text(String),
    /// A piece of thinking.
    Thinking {
        /// The text.
        text: String,
        /// The block's signature, when this piece closes it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// An encrypted thinking block.
    RedactedThinking(String),
    /// A piece of a tool call.
    ToolCall {
        /// The call's position in the answer.
        index: usize,
        /// The call id, when this piece carries it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// The tool name, when this piece carries it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// A piece of the arguments text.
        arguments: String,
    },
    /// The end of the answer.
    Stop {
        /// Why the model stopped.
        reason: FinishReason,
        /// Tokens used.
        usage: Usage,
    },
    /// The call failed (or was cancelled) here.
    Error(String),
}

impl RecordedKind {
    /// The recorded form of `event`; `None` for an event the model layer
    /// added after this format (it is streamed on, not recorded).
    pub fn of(event: &ProviderEvent) -> Option<Self> {
        Some(match event {
            ProviderEvent::TextDelta(text) => RecordedKind::Text(text.clone()),
            ProviderEvent::ThinkingDelta { text, signature } => RecordedKind::Thinking {
                text: text.clone(),
                signature: signature.clone(),
            },
            ProviderEvent::RedactedThinking(data) => RecordedKind::RedactedThinking(data.clone()),
            ProviderEvent::ToolCallDelta {
                index,
                id,
                name,
                arguments_delta,
            } => RecordedKind::ToolCall {
                index: *index,
                id: id.clone(),
                name: name.clone(),
                arguments: arguments_delta.clone(),
            },
            ProviderEvent::Stop { reason, usage } => RecordedKind::Stop {
                reason: reason.clone(),
                usage: *usage,
            },
            _ => return None,
        })
    }

    /// The event to stream again (`provider` names the error's source).
    pub fn replay(&self, provider: &str) -> Result<ProviderEvent, ProviderError> {
        Ok(match self {
            RecordedKind::Text(text) => ProviderEvent::TextDelta(text.clone()),
            RecordedKind::Thinking { text, signature } => ProviderEvent::ThinkingDelta {
                text: text.clone(),
                signature: signature.clone(),
            },
            RecordedKind::RedactedThinking(data) => ProviderEvent::RedactedThinking(data.clone()),
            RecordedKind::ToolCall {
                index,
                id,
                name,
                arguments,
            } => ProviderEvent::ToolCallDelta {
                index: *index,
                id: id.clone(),
                name: name.clone(),
                arguments_delta: arguments.clone(),
            },
            RecordedKind::Stop { reason, usage } => ProviderEvent::Stop {
                reason: reason.clone(),
                usage: *usage,
            },
            RecordedKind::Error(message) => {
                return Err(ProviderError::Stream {
                    provider: provider.to_owned(),
                    message: format!("recorded error: {message}"),
                });
            }
        })
    }
}

/// The request as a cassette records it: what the provider was asked,
/// without who asked (the session id changes in a replay).
pub fn request_json(request: &ChatRequest) -> Value {
    json!({
        "model": request.model,
        "system": request.system,
        "messages": request.messages,
        "tools": request.tools,
        "tool_choice": request.tool_choice,
        "temperature": request.temperature,
        "max_tokens": request.max_tokens,
        "purpose": request.purpose,
    })
}

/// A cassette that cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CassetteError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line is not a cassette line.
    #[error("line {line}: {message}")]
    Line {
        /// The line's number (from 1).
        line: usize,
        /// What is wrong with it.
        message: String,
    },
    /// The file holds no model call to replay.
    #[error("the cassette holds no model call")]
    Empty,
}

/// A cassette read back: its exchanges grouped by turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cassette {
    /// The turns, by number.
    pub turns: BTreeMap<u32, CassetteTurn>,
}

/// One recorded turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CassetteTurn {
    /// Its model calls, by call number.
    pub calls: BTreeMap<u32, ModelExchange>,
    /// Its tool calls, in the order they finished.
    pub tools: Vec<ToolExchange>,
    /// Its approvals, in the order they were answered.
    pub approvals: Vec<ApprovalExchange>,
}

impl CassetteTurn {
    /// The approvals of the turn's own tool calls, in order: not those
    /// asked inside a delegation or a sub-agent run, which a replay answers
    /// as one tool call.
    pub fn own_approvals(&self) -> impl Iterator<Item = &ApprovalExchange> {
        self.approvals.iter().filter(|a| {
            a.call_id
                .as_deref()
                .is_none_or(|id| self.tools.iter().any(|t| t.call_id == id))
        })
    }

    /// The turn's prompt (from its first call).
    pub fn prompt(&self) -> Option<&str> {
        self.calls.values().find_map(|c| c.prompt.as_deref())
    }

    /// The agent that ran it.
    pub fn agent(&self) -> Option<&str> {
        self.calls
            .values()
            .map(|c| c.agent.as_str())
            .find(|a| !a.is_empty())
    }

    /// The recorded result of tool call `call_id`.
    pub fn tool(&self, call_id: &str) -> Option<&ToolExchange> {
        self.tools.iter().find(|t| t.call_id == call_id)
    }
}

impl Cassette {
    /// Reads the cassette at `path`.
    pub fn read(path: &Path) -> Result<Self, CassetteError> {
        let text = std::fs::read_to_string(path).map_err(|source| CassetteError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text)
    }

    /// Reads a cassette's text. Blank lines are skipped; any other line
    /// that is not a version-1 exchange is an error naming the line.
    pub fn parse(text: &str) -> Result<Self, CassetteError> {
        let mut cassette = Cassette::default();
        for (i, raw) in text.lines().enumerate() {
            if raw.trim().is_empty() {
                continue;
            }
            let bad = |message: String| CassetteError::Line { line: i + 1, message };
            let line: CassetteLine = serde_json::from_str(raw).map_err(|e| bad(e.to_string()))?;
            if line.v != CASSETTE_VERSION {
                return Err(bad(format!(
                    "version {} (this build reads {CASSETTE_VERSION})",
                    line.v
                )));
            }
            let turn = cassette.turns.entry(line.exchange.turn()).or_default();
            match line.exchange {
                Exchange::Model(m) => {
                    if turn.calls.insert(m.call, m).is_some() {
                        return Err(bad("a model call recorded twice".into()));
                    }
                }
                Exchange::Tool(t) => turn.tools.push(t),
                Exchange::Approval(a) => turn.approvals.push(a),
            }
        }
        if cassette.turns.values().all(|t| t.calls.is_empty()) {
            return Err(CassetteError::Empty);
        }
        Ok(cassette)
    }
}

/// Records one session's exchanges while it is enabled (see the module
/// docs). Shared by the session's turns and its approval broker.
#[derive(Debug)]
pub struct CassetteRecorder {
    path: PathBuf,
    /// The session's own switch, kept across restarts.
    switch: PathBuf,
    enabled: AtomicBool,
    secrets: Arc<[String]>,
    /// The last turn begun (0: none yet; read from the file at the first turn).
    turn: Mutex<Option<u32>>,
    write: Mutex<()>,
}

impl CassetteRecorder {
    /// A recorder for `session_id` writing into `dir`, blanking `secrets`
    /// (non-empty strings) wherever they appear. It records when the
    /// session's switch (`dir/<session_id>.record`, written by
    /// [`set_enabled`](Self::set_enabled)) says so, else when `enabled`.
    pub fn new(dir: &Path, session_id: &str, enabled: bool, secrets: Arc<[String]>) -> Self {
        let switch = dir.join(format!("{session_id}.record"));
        let enabled = match std::fs::read_to_string(&switch) {
            Ok(text) => text.trim() == "on",
            Err(_) => enabled,
        };
        Self {
            path: cassette_path(dir, session_id),
            switch,
            enabled: AtomicBool::new(enabled),
            secrets,
            turn: Mutex::new(None),
            write: Mutex::new(()),
        }
    }

    /// The cassette file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether turns are recorded.
    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::SeqCst)
    }

    /// Starts or stops recording this session, for good (the choice is
    /// kept in its switch file); the turn running now keeps its choice.
    pub fn set_enabled(&self, enabled: bool) -> std::io::Result<()> {
        if let Some(dir) = self.switch.parent() {
            std::fs::create_dir_all(dir)?;
        }
        jarvis_common::write_atomic(&self.switch, if enabled { b"on\n" } else { b"off\n" })?;
        self.enabled.store(enabled, Ordering::SeqCst);
        Ok(())
    }

    /// A turn begins: its tap while recording, else `None`.
    pub fn begin_turn(self: &Arc<Self>) -> Option<Arc<dyn TurnTap>> {
        if !self.is_enabled() {
            return None;
        }
        let turn = {
            let mut last = self.turn.lock().unwrap_or_else(|e| e.into_inner());
            let next = last.unwrap_or_else(|| self.last_recorded_turn()) + 1;
            *last = Some(next);
            next
        };
        Some(Arc::new(RecordingTurn {
            recorder: self.clone(),
            turn,
            calls: AtomicU32::new(0),
        }))
    }

    /// A person answered an approval request (of tool call `call_id`) of
    /// the turn running now.
    pub fn approval(&self, request_id: &str, call_id: &str, tool: &str, decision: ApprovalDecision) {
        let turn = *self.turn.lock().unwrap_or_else(|e| e.into_inner());
        if let (true, Some(turn)) = (self.is_enabled(), turn) {
            self.write(Exchange::Approval(ApprovalExchange {
                turn,
                request_id: request_id.to_owned(),
                call_id: (!call_id.is_empty()).then(|| call_id.to_owned()),
                tool: tool.to_owned(),
                decision,
            }));
        }
    }

    /// The highest turn in the file (0 when there is none or it is unreadable).
    fn last_recorded_turn(&self) -> u32 {
        let Ok(text) = std::fs::read_to_string(&self.path) else {
            return 0;
        };
        text.lines()
            .filter_map(|l| serde_json::from_str::<CassetteLine>(l).ok())
            .map(|l| l.exchange.turn())
            .max()
            .unwrap_or(0)
    }

    /// Appends one line; a failure is logged, never returned.
    fn write(&self, exchange: Exchange) {
        let line = CassetteLine {
            v: CASSETTE_VERSION,
            exchange,
        };
        let mut text = match serde_json::to_string(&line) {
            Ok(text) => text,
            Err(error) => {
                tracing::warn!(%error, "cassette: a line could not be encoded");
                return;
            }
        };
        for secret in self.secrets.iter().filter(|s| !s.is_empty()) {
            if text.contains(secret.as_str()) {
                text = text.replace(secret.as_str(), REDACTED);
            }
        }
        text.push('\n');
        let _guard = self.write.lock().unwrap_or_else(|e| e.into_inner());
        let written = self
            .path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.path)
            })
            .and_then(|mut file| file.write_all(text.as_bytes()));
        if let Err(error) = written {
            tracing::warn!(%error, path = %self.path.display(), "cassette: a line could not be written");
        }
    }
}

/// `dir/<session_id>.jsonl`.
pub fn cassette_path(dir: &Path, session_id: &str) -> PathBuf {
    dir.join(format!("{session_id}.jsonl"))
}

/// The tap of one recorded turn.
struct RecordingTurn {
    recorder: Arc<CassetteRecorder>,
    turn: u32,
    calls: AtomicU32,
}

impl TurnTap for RecordingTurn {
    fn model_call(&self, provider: &Arc<dyn Provider>, request: ChatRequest) -> ProviderStream {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let prompt = (call == 1)
            .then(|| request.recorded_messages().iter().rev().find_map(user_text))
            .flatten();
        let exchange = ModelExchange {
            turn: self.turn,
            call,
            purpose: request.purpose,
            agent: request.metadata.agent_id.clone(),
            prompt,
            request: request_json(&request),
            events: Vec::new(),
        };
        Box::pin(RecordingStream {
            inner: provider.stream(request),
            started: Instant::now(),
            exchange: Some(exchange),
            recorder: self.recorder.clone(),
        })
    }

    fn tool_result(&self, call: &ToolCall, result: &ToolResult) {
        self.recorder.write(Exchange::Tool(ToolExchange {
            turn: self.turn,
            call_id: call.id.clone(),
            tool: call.name.clone(),
            args: call.arguments.clone(),
            result: result.content.clone(),
            is_error: result.is_error,
        }));
    }
}

fn user_text(message: &jarvis_model::Message) -> Option<String> {
    match message {
        jarvis_model::Message::User(user) => Some(user.content.clone()),
        _ => None,
    }
}

/// Passes a provider's stream on, noting each event; the line is written
/// when the stream ends, fails, or is dropped unfinished (an aborted turn).
struct RecordingStream {
    inner: ProviderStream,
    started: Instant,
    exchange: Option<ModelExchange>,
    recorder: Arc<CassetteRecorder>,
}

impl RecordingStream {
    fn note(&mut self, kind: RecordedKind) {
        let t_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        if let Some(exchange) = &mut self.exchange {
            exchange.events.push(RecordedEvent { t_ms, event: kind });
        }
    }

    fn finish(&mut self) {
        if let Some(exchange) = self.exchange.take() {
            self.recorder.write(Exchange::Model(exchange));
        }
    }
}

impl Stream for RecordingStream {
    type Item = Result<ProviderEvent, ProviderError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.inner.as_mut().poll_next(cx);
        match &polled {
            Poll::Ready(Some(Ok(event))) => {
                if let Some(kind) = RecordedKind::of(event) {
                    self.note(kind);
                }
            }
            Poll::Ready(Some(Err(error))) => {
                self.note(RecordedKind::Error(error.to_string()));
                self.finish();
            }
            Poll::Ready(None) => self.finish(),
            Poll::Pending => {}
        }
        polled
    }
}

impl Drop for RecordingStream {
    fn drop(&mut self) {
        if self.exchange.as_ref().is_some_and(|e| {
            !e.events
                .iter()
                .any(|ev| matches!(ev.event, RecordedKind::Stop { .. } | RecordedKind::Error(_)))
        }) {
            self.note(RecordedKind::Error("cancelled".into()));
        }
        self.finish();
    }
}

/// Rewrites every cassette in `dir` without the lines that contain `text`
/// (each file written to a temporary file and renamed); answers how many
/// lines went. An empty `text` removes nothing.
pub fn forget_in_cassettes(dir: &Path, text: &str) -> std::io::Result<usize> {
    if text.is_empty() {
        return Ok(0);
    }
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let needle = text.to_lowercase();
    let mut removed = 0;
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "jsonl") {
            continue;
        }
        let body = std::fs::read_to_string(&path)?;
        let mut kept = String::with_capacity(body.len());
        let mut gone = 0;
        for line in body.lines() {
            // Lines are JSON: the text may be escaped in them, so a line
            // that does not hold it as written is read.
            if line.to_lowercase().contains(&needle) || decoded_contains(line, &needle) {
                gone += 1;
            } else {
                kept.push_str(line);
                kept.push('\n');
            }
        }
        if gone > 0 {
            jarvis_common::write_atomic(&path, kept.as_bytes())?;
            removed += gone;
        }
    }
    Ok(removed)
}

/// Whether any string inside the JSON `line` contains `needle` (lowercase),
/// for text JSON escapes differently than `serde_json` would (`\uXXXX`).
fn decoded_contains(line: &str, needle: &str) -> bool {
    fn walk(value: &Value, needle: &str) -> bool {
        match value {
            Value::String(s) => s.to_lowercase().contains(needle),
            Value::Array(items) => items.iter().any(|v| walk(v, needle)),
            Value::Object(map) => map.values().any(|v| walk(v, needle)),
            _ => false,
        }
    }
    serde_json::from_str::<Value>(line).is_ok_and(|v| walk(&v, needle))
}
