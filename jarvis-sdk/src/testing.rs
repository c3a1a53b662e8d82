//! Test doubles for code built on the SDK (feature `test-utils`): a
//! recording [`UIAdapter`], a [`ChannelAdapter`] to wait on events, tools
//! made from closures, a fixed approver, and
//! [`TempPostgres`], a throwaway Postgres cluster for tests of the
//! Postgres stores.

use async_trait::async_trait;
use serde_json::Value;
use std::fmt;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};

pub use jarvis_common::testing::{REQUIRE_POSTGRES_ENV, TempPostgres};

use crate::agent::{
    AgentEvent, ApprovalDecision, ApprovalRequest, Approver, MessageDelta, Tool, ToolCallInfo, ToolContext,
    ToolError, ToolResult, UIAdapter,
};

type BreakIf = Box<dyn Fn(&AgentEvent) -> bool + Send + Sync>;

/// Records every event and approval request it is given.
#[derive(Default)]
pub struct RecordingAdapter {
    events: Mutex<Vec<AgentEvent>>,
    approvals: Mutex<Vec<ApprovalRequest>>,
    break_if: Option<BreakIf>,
}

impl fmt::Debug for RecordingAdapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordingAdapter")
            .field("events", &self.events.lock().map(|e| e.len()).unwrap_or_default())
            .finish_non_exhaustive()
    }
}

impl RecordingAdapter {
    /// A recorder that never aborts the turn.
    pub fn new() -> Self {
        Self::default()
    }

    /// A recorder that aborts the turn at the first event matching `predicate`.
    pub fn breaking_on(predicate: impl Fn(&AgentEvent) -> bool + Send + Sync + 'static) -> Self {
        Self {
            break_if: Some(Box::new(predicate)),
            ..Self::default()
        }
    }

    /// Every event so far.
    pub fn events(&self) -> Vec<AgentEvent> {
        self.events.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The `type` of every event so far.
    pub fn kinds(&self) -> Vec<String> {
        self.events().iter().map(|e| e.kind().to_owned()).collect()
    }

    /// The streamed text (all `text_delta`s joined).
    pub fn text(&self) -> String {
        self.events()
            .iter()
            .filter_map(|e| match e {
                AgentEvent::MessageUpdate {
                    delta: MessageDelta::TextDelta(t),
                } => Some(t.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .concat()
    }

    /// The events as JSON lines, the way a WebSocket client sees them.
    pub fn jsonl(&self) -> String {
        self.events()
            .iter()
            .map(|e| serde_json::to_string(e).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Approval requests so far.
    pub fn approval_requests(&self) -> Vec<ApprovalRequest> {
        self.approvals.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl UIAdapter for RecordingAdapter {
    fn on_event(&self, event: &AgentEvent) -> ControlFlow<()> {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(event.clone());
        match &self.break_if {
            Some(p) if p(event) => ControlFlow::Break(()),
            _ => ControlFlow::Continue(()),
        }
    }

    fn on_approval_request(&self, request: &ApprovalRequest) {
        self.approvals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(request.clone());
    }
}

type ToolFn = Arc<dyn Fn(Value) -> Result<ToolResult, ToolError> + Send + Sync>;

/// A screen that hands every event to a channel: tests of detached work
/// (background jobs, the AGENDA judgement, proactive messages) wait on it
/// instead of sleeping.
#[derive(Debug)]
pub struct ChannelAdapter(tokio::sync::mpsc::UnboundedSender<AgentEvent>);

/// The receiving end of a [`ChannelAdapter`].
#[derive(Debug)]
pub struct EventStream(tokio::sync::mpsc::UnboundedReceiver<AgentEvent>);

impl ChannelAdapter {
    /// A screen and the stream of what it is shown.
    #[allow(clippy::new_ret_no_self)]
    pub fn new() -> (Arc<Self>, EventStream) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (Arc::new(Self(tx)), EventStream(rx))
    }
}

impl UIAdapter for ChannelAdapter {
    fn on_event(&self, event: &AgentEvent) -> ControlFlow<()> {
        let _ = self.0.send(event.clone());
        ControlFlow::Continue(())
    }
}

impl EventStream {
    /// The next event, or `None` once every sender is gone.
    pub async fn next(&mut self) -> Option<AgentEvent> {
        self.0.recv().await
    }

    /// Waits for the next event `pred` accepts, skipping others.
    ///
    /// # Panics
    ///
    /// When the screen is dropped before such an event arrives.
    pub async fn next_matching(&mut self, pred: impl Fn(&AgentEvent) -> bool) -> AgentEvent {
        loop {
            let event = self.0.recv().await.expect("the screen is still attached");
            if pred(&event) {
                return event;
            }
        }
    }

    /// The events already delivered, without waiting.
    pub fn drain(&mut self) -> Vec<AgentEvent> {
        let mut out = Vec::new();
        while let Ok(event) = self.0.try_recv() {
            out.push(event);
        }
        out
    }

    /// The `(text, message_id)` of each `proactive_message` of `kind`
    /// already delivered; drains every event.
    pub fn drain_proactive(&mut self, kind: crate::agent::ProactiveKind) -> Vec<(String, String)> {
        self.drain()
            .into_iter()
            .filter_map(|e| match e {
                AgentEvent::ProactiveMessage {
                    text,
                    kind: k,
                    message_id,
                } if k == kind => Some((text, message_id)),
                _ => None,
            })
            .collect()
    }
}

/// A tool made from a synchronous closure.
#[derive(Clone)]
pub struct FnTool {
    name: String,
    description: String,
    parameters: Value,
    requires_approval: bool,
    sandbox_paths: Vec<&'static str>,
    f: ToolFn,
}

impl fmt::Debug for FnTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnTool")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl FnTool {
    /// A tool named `name` that answers with `f(arguments)`; its schema
    /// accepts any object.
    pub fn new(
        name: impl Into<String>,
        f: impl Fn(Value) -> Result<ToolResult, ToolError> + Send + Sync + 'static,
    ) -> Self {
        let name = name.into();
        Self {
            description: format!("test tool {name}"),
            name,
            parameters: serde_json::json!({"type": "object"}),
            requires_approval: false,
            sandbox_paths: Vec::new(),
            f: Arc::new(f),
        }
    }

    /// A tool that always answers `content`.
    pub fn constant(name: impl Into<String>, content: impl Into<String>) -> Self {
        let content = content.into();
        Self::new(name, move |_| Ok(ToolResult::ok(content.clone())))
    }

    /// Marks the tool as one that asks for approval.
    pub fn asking_approval(mut self) -> Self {
        self.requires_approval = true;
        self
    }

    /// Declares the argument `name` a path relative to the session's
    /// sandbox (see [`Tool::sandbox_path_arguments`]).
    pub fn with_sandbox_path(mut self, name: &'static str) -> Self {
        self.sandbox_paths.push(name);
        self
    }
}

#[async_trait]
impl Tool for FnTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn parameters(&self) -> Value {
        self.parameters.clone()
    }
    fn requires_approval(&self) -> bool {
        self.requires_approval
    }
    fn sandbox_path_arguments(&self) -> &[&str] {
        &self.sandbox_paths
    }
    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        (self.f)(args)
    }
}

/// An approver that gives the same decision to every call that asks for
/// approval (and allows the others), recording the tools it was asked about.
#[derive(Debug)]
pub struct FixedApprover {
    decision: ApprovalDecision,
    asked: Mutex<Vec<String>>,
}

impl FixedApprover {
    /// An approver that always answers `decision`.
    pub fn new(decision: ApprovalDecision) -> Self {
        Self {
            decision,
            asked: Mutex::new(Vec::new()),
        }
    }

    /// The tools it was asked about, in order.
    pub fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[async_trait]
impl Approver for FixedApprover {
    async fn approve(&self, call: &ToolCallInfo<'_>) -> ApprovalDecision {
        if !call.requires_approval {
            return ApprovalDecision::Allow;
        }
        self.asked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(call.tool_name.to_owned());
        self.decision
    }
}
