//! Replay: a recorded session's prompts run again through the current code
//! (`jarvis replay`, or [`replay_cassette`] from a test suite).
//!
//! Each recorded turn's prompt is sent, in order, to one new session of the
//! recorded agent in a temporary home (the configured team and the home's
//! `approvals.yaml`, `approvals/`, `prices.yaml` and `mcp.yaml` copied in,
//! as for evals; the configured home is never written). A [`TurnTap`]
//! stands between the loop and the outside:
//!
//! - **`current`**: model call *n* of turn *t* is answered with the
//!   cassette's call *n* of turn *t*, tool calls with the recorded results,
//!   approval requests with the recorded answers. Nothing real is called,
//!   so the run is deterministic and every difference is the code's: a
//!   different request sent (system prompt, tools and their descriptions,
//!   messages, instructions), a different tool called or refused, a
//!   different number of calls.
//! - **`model`**: the configured model answers; its requests are still
//!   compared with the recorded ones, and a tool call is answered from the
//!   cassette only when the turn recorded the same tool with the same
//!   arguments (a replay never runs a real tool).
//!
//! A turn's first difference is reported and the rest of the turn is not
//! compared (it keeps being answered from the cassette while it can, so
//! the next turn starts from the same history). The memory message is left
//! out of the comparison (it depends on what the home remembered, not on
//! the code), and tool call ids are compared by their order.

use serde_json::Value;
use std::collections::BTreeSet;
use std::fmt::{self, Write as _};
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::eval::scratch_config;
use super::{AppConfig, AppError, MAIN_AGENT, build_app};
use jarvis_agent::{AgentEvent, ApprovalDecision, ApprovalRequest, ToolResult, TurnTap, UIAdapter};
use jarvis_common::truncate_with_marker;
use jarvis_memory::SectionKind;
use jarvis_model::{ChatRequest, Message, Provider, ProviderError, ProviderStream, ToolCall};
use jarvis_turn::cassette::{Cassette, CassetteTurn, ModelExchange, ToolExchange, request_json};
use jarvis_turn::{ApprovalBroker, Caller, PromptOptions};

/// What answers the replayed turns' model calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReplayAgainst {
    /// The cassette: a deterministic run of the current code.
    #[default]
    Current,
    /// The configured model.
    Model,
}

impl std::str::FromStr for ReplayAgainst {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "current" => Ok(ReplayAgainst::Current),
            "model" => Ok(ReplayAgainst::Model),
            other => Err(format!("--against {other}: expected current or model")),
        }
    }
}

/// Where a replayed turn first differed from its recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The model call it was found at (when it was at one).
    pub call: Option<u32>,
    /// What differed, readably.
    pub what: String,
    /// What the recording had there.
    pub recorded: Option<String>,
    /// What this run had there.
    pub now: Option<String>,
}

impl Difference {
    fn new(call: Option<u32>, what: impl Into<String>) -> Self {
        Self {
            call,
            what: what.into(),
            recorded: None,
            now: None,
        }
    }

    fn values(mut self, recorded: impl Into<String>, now: impl Into<String>) -> Self {
        self.recorded = Some(recorded.into());
        self.now = Some(now.into());
        self
    }
}

/// One replayed turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnReplay {
    /// The recorded turn's number.
    pub turn: u32,
    /// Its prompt.
    pub prompt: String,
    /// Model calls the recording made in it.
    pub recorded_calls: u32,
    /// Model calls this run made in it.
    pub calls: u32,
    /// Its first difference; `None` when it ran as recorded.
    pub difference: Option<Difference>,
}

/// What a replay found, turn by turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayReport {
    /// What answered the model calls.
    pub against: ReplayAgainst,
    /// The turns, in order.
    pub turns: Vec<TurnReplay>,
}

impl ReplayReport {
    /// Whether every turn ran as recorded.
    pub fn same(&self) -> bool {
        self.turns.iter().all(|t| t.difference.is_none())
    }

    /// The turns that differed.
    pub fn differing(&self) -> impl Iterator<Item = &TurnReplay> {
        self.turns.iter().filter(|t| t.difference.is_some())
    }
}

impl fmt::Display for ReplayReport {
    /// A readable diff: one line per turn, and under a differing turn what
    /// the recording and this run had.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for turn in &self.turns {
            let prompt = truncate_with_marker(&turn.prompt.replace('\n', " "), 60);
            match &turn.difference {
                None => writeln!(
                    f,
                    "turn {} {prompt:?}: same ({} model calls)",
                    turn.turn, turn.calls
                )?,
                Some(d) => {
                    let at = d.call.map(|c| format!(" at call {c}")).unwrap_or_default();
                    writeln!(f, "turn {} {prompt:?}: DIFFERS{at}: {}", turn.turn, d.what)?;
                    if let Some(recorded) = &d.recorded {
                        writeln!(f, "  - recorded: {recorded}")?;
                    }
                    if let Some(now) = &d.now {
                        writeln!(f, "  + now:      {now}")?;
                    }
                }
            }
        }
        let differing = self.differing().count();
        match differing {
            0 => writeln!(f, "same: {} turns replayed as recorded", self.turns.len()),
            n => writeln!(f, "differs: {n} of {} turns", self.turns.len()),
        }
    }
}

/// Replays `cassette` against `config` (its team, settings and, with
/// [`ReplayAgainst::Model`], its model) in a temporary home; see the
/// module docs. Errors only when the app cannot be built; every
/// difference is in the report.
pub async fn replay_cassette(
    cassette: &Cassette,
    config: &AppConfig,
    against: ReplayAgainst,
) -> Result<ReplayReport, AppError> {
    let (_home, mut config) = scratch_config(config).map_err(AppError::Config)?;
    match against {
        ReplayAgainst::Current => from_cassette(&mut config),
        ReplayAgainst::Model => quiet(&mut config),
    }
    let app = build_app(config).await?;
    let agent = cassette
        .turns
        .values()
        .find_map(CassetteTurn::agent)
        .unwrap_or(MAIN_AGENT)
        .to_owned();
    let meta = app.create_session(Some(&agent)).await?;
    let session = app.session(&meta.id).await?;
    let state = Arc::new(Mutex::new(TurnState::default()));
    let _approvals = session.attach(Arc::new(RecordedApprovals {
        broker: session.broker().clone(),
        state: state.clone(),
    }));
    let mut turns = Vec::with_capacity(cassette.turns.len());
    for (&number, recorded) in &cassette.turns {
        let prompt = recorded.prompt().unwrap_or_default().to_owned();
        *lock(&state) = TurnState::new(recorded.clone());
        let difference = if prompt.is_empty() {
            Some(Difference::new(None, "the recording has no prompt for this turn"))
        } else {
            let mut options = PromptOptions::from(Caller::Local);
            options.tap = Some(Arc::new(ReplayTap {
                state: state.clone(),
                against,
            }));
            let outcome = session.prompt_with(prompt.clone(), options).await;
            let mut state = lock(&state);
            if let Err(error) = outcome {
                state.differ(Difference::new(None, format!("the turn failed: {error}")));
            }
            state.finish();
            state.difference.take()
        };
        let state = lock(&state);
        turns.push(TurnReplay {
            turn: number,
            prompt,
            recorded_calls: u32::try_from(recorded.calls.len()).unwrap_or(u32::MAX),
            calls: state.calls,
            difference,
        });
    }
    Ok(ReplayReport { against, turns })
}

/// `config` made to answer from a cassette: its provider answers nothing
/// (see [`NoModel`]) and nothing but the loop calls the model.
pub(super) fn from_cassette(config: &mut AppConfig) {
    quiet(config);
    let name = match &config.provider {
        Some(provider) => provider.name().to_owned(),
        None => config.llm.provider.as_str().to_owned(),
    };
    config.provider = Some(Arc::new(NoModel(name)));
}

/// What answers one turn from `recorded`: the tap to prompt with and the
/// screen to attach to the session's broker (the recorded approvals).
pub(super) fn answer_from(
    recorded: &CassetteTurn,
    broker: ApprovalBroker,
) -> (Arc<dyn TurnTap>, Arc<dyn UIAdapter>) {
    let state = Arc::new(Mutex::new(TurnState::new(recorded.clone())));
    let tap = Arc::new(ReplayTap {
        state: state.clone(),
        against: ReplayAgainst::Current,
    });
    (tap, Arc::new(RecordedApprovals { broker, state }))
}

/// Replay settings: only the loop's calls go out, so nothing else may call
/// the model (thinking, the AGENDA's judge, reflection) or speak first.
fn quiet(config: &mut AppConfig) {
    config.thinking.enabled = false;
    config.agenda.open_loops = false;
    config.agenda.model_judge = false;
    config.reflection.enabled = false;
    config.proactive = false;
    config.record = false;
}

fn lock(state: &Mutex<TurnState>) -> std::sync::MutexGuard<'_, TurnState> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// The turn being replayed.
#[derive(Debug, Default)]
struct TurnState {
    recorded: CassetteTurn,
    /// Model calls made so far.
    calls: u32,
    /// Recorded tool results used (by their recorded call id).
    used_tools: BTreeSet<String>,
    /// This run's tool calls the tap answered (by their id now).
    answered: BTreeSet<String>,
    /// Recorded approvals used, in order.
    used_approvals: usize,
    difference: Option<Difference>,
}

impl TurnState {
    /// A turn to replay; only the recording's approvals of the turn's own
    /// tool calls are expected (see [`CassetteTurn::own_approvals`]).
    fn new(mut recorded: CassetteTurn) -> Self {
        recorded.approvals = recorded.own_approvals().cloned().collect();
        Self {
            recorded,
            ..Self::default()
        }
    }

    /// Keeps the turn's first difference only.
    fn differ(&mut self, difference: Difference) {
        if self.difference.is_none() {
            self.difference = Some(difference);
        }
    }

    /// The end of the turn: what the recording did that this run did not.
    fn finish(&mut self) {
        let recorded = u32::try_from(self.recorded.calls.len()).unwrap_or(u32::MAX);
        if self.calls < recorded {
            let next = self.recorded.calls.get(&(self.calls + 1));
            let what = format!(
                "the turn made {} model calls, the recording {recorded}",
                self.calls
            );
            let mut d = Difference::new(Some(self.calls + 1), what);
            if let Some(next) = next {
                d = d.values(summary(next), "(no call)");
            }
            self.differ(d);
        }
        if let Some(left) = self.recorded.approvals.get(self.used_approvals) {
            self.differ(Difference::new(
                None,
                format!(
                    "the recording asked a person to approve {}; this run did not",
                    left.tool
                ),
            ));
        }
    }
}

/// One line about a recorded call.
fn summary(call: &ModelExchange) -> String {
    format!("call {} ({})", call.call, call.purpose)
}

/// Answers (or, against the model, checks) one replayed turn.
struct ReplayTap {
    state: Arc<Mutex<TurnState>>,
    against: ReplayAgainst,
}

#[async_trait]
impl TurnTap for ReplayTap {
    fn model_call(&self, provider: &Arc<dyn Provider>, request: ChatRequest) -> ProviderStream {
        let mut state = lock(&self.state);
        state.calls += 1;
        let call = state.calls;
        let recorded = state.recorded.calls.get(&call).cloned();
        let made = state.recorded.calls.len();
        match &recorded {
            None => state.differ(Difference::new(
                Some(call),
                format!(
                    "a {} call the recording does not have (it made {made})",
                    request.purpose
                ),
            )),
            Some(recorded) => {
                if let Some(d) = compare_requests(call, recorded, &request) {
                    state.differ(d);
                }
            }
        }
        drop(state);
        match (self.against, recorded) {
            (ReplayAgainst::Model, _) => provider.stream(request),
            (ReplayAgainst::Current, Some(recorded)) => {
                let name = provider.name().to_owned();
                let events: Vec<_> = recorded.events.iter().map(|e| e.event.replay(&name)).collect();
                Box::pin(futures::stream::iter(events))
            }
            (ReplayAgainst::Current, None) => Box::pin(futures::stream::iter([Err(ProviderError::Stream {
                provider: provider.name().to_owned(),
                message: format!("replay: the recording has no model call {call} in this turn"),
            })])),
        }
    }

    async fn answer_tool(&self, call: &ToolCall, arguments: &Value) -> Option<ToolResult> {
        let mut state = lock(&self.state);
        // The recorded call of the same id (the cassette named the calls),
        // else the first unused one of the same tool and arguments (a model
        // names its calls anew, and so does the loop for a provider that
        // sends no ids).
        let by_id = match self.against {
            ReplayAgainst::Current => state.recorded.tool(&call.id).cloned(),
            ReplayAgainst::Model => None,
        };
        let found = by_id.or_else(|| {
            state
                .recorded
                .tools
                .iter()
                .find(|t| {
                    t.tool == call.name && t.args == call.arguments && !state.used_tools.contains(&t.call_id)
                })
                .cloned()
        });
        state.answered.insert(call.id.clone());
        let Some(recorded) = found else {
            state.differ(
                Difference::new(
                    None,
                    format!("a call of {} the recording does not have", call.name),
                )
                .values("(no call)", format!("{}({})", call.name, excerpt(arguments))),
            );
            return Some(ToolResult::error(format!(
                "replay: the recording has no call of {} like this one",
                call.name
            )));
        };
        state.used_tools.insert(recorded.call_id.clone());
        if recorded.tool != call.name || recorded.args != call.arguments {
            state.differ(
                Difference::new(None, format!("tool call {} differs", call.id)).values(
                    format!("{}({})", recorded.tool, excerpt(&recorded.args)),
                    format!("{}({})", call.name, excerpt(&call.arguments)),
                ),
            );
        }
        Some(recorded_result(&recorded))
    }

    fn tool_result(&self, call: &ToolCall, result: &ToolResult) {
        let mut state = lock(&self.state);
        if state.answered.contains(&call.id) || self.against == ReplayAgainst::Model {
            return;
        }
        // Not answered from the cassette: refused before it could run.
        if let Some(recorded) = state.recorded.tool(&call.id).cloned()
            && (recorded.is_error != result.is_error || recorded.result != result.content)
        {
            state.differ(
                Difference::new(
                    None,
                    format!("{} ({}) was answered differently", call.name, call.id),
                )
                .values(excerpt_text(&recorded.result), excerpt_text(&result.content)),
            );
        }
    }
}

fn recorded_result(recorded: &ToolExchange) -> ToolResult {
    ToolResult {
        content: recorded.result.clone(),
        is_error: recorded.is_error,
    }
}

/// The first place two requests differ, memory message and tool call ids
/// aside.
fn compare_requests(call: u32, recorded: &ModelExchange, request: &ChatRequest) -> Option<Difference> {
    let now = comparable(request_json(request));
    let then = comparable(recorded.request.clone());
    let (path, a, b) = first_difference("request", &then, &now)?;
    Some(
        Difference::new(
            Some(call),
            format!("the {} request differs at {path}", request.purpose),
        )
        .values(excerpt(&a), excerpt(&b)),
    )
}

/// The request as compared: without the memory message (a leading user
/// message that starts with a memory section's header), and with each tool
/// call id replaced by its place among the request's calls (a model names
/// its calls anew on every run; what matters is which result answers
/// which call).
fn comparable(mut request: Value) -> Value {
    let Some(messages) = request.get_mut("messages").and_then(Value::as_array_mut) else {
        return request;
    };
    if let Some(first) = messages.first()
        && let Ok(Message::User(user)) = serde_json::from_value::<Message>(first.clone())
        && SectionKind::ORDER
            .iter()
            .any(|k| user.content.starts_with(k.header()))
    {
        messages.remove(0);
    }
    let mut ids = std::collections::HashMap::new();
    let mut renamed = |id: &mut Value| {
        if let Value::String(text) = id {
            let next = ids.len() + 1;
            *text = ids
                .entry(text.clone())
                .or_insert_with(|| format!("call#{next}"))
                .clone();
        }
    };
    for message in messages.iter_mut() {
        if let Some(calls) = message.get_mut("tool_calls").and_then(Value::as_array_mut) {
            for call in calls {
                if let Some(id) = call.get_mut("id") {
                    renamed(id);
                }
            }
        }
        if let Some(id) = message.get_mut("tool_call_id") {
            renamed(id);
        }
    }
    request
}

/// The path to the first difference between `a` and `b`, with the values
/// there (`Null` for a side that has nothing).
fn first_difference(path: &str, a: &Value, b: &Value) -> Option<(String, Value, Value)> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                let (l, r) = (x.get(k).unwrap_or(&Value::Null), y.get(k).unwrap_or(&Value::Null));
                first_difference(&format!("{path}.{k}"), l, r)
            })
        }
        (Value::Array(x), Value::Array(y)) => {
            let shared = x
                .iter()
                .zip(y)
                .enumerate()
                .find_map(|(i, (l, r))| first_difference(&format!("{path}[{i}]"), l, r));
            shared.or_else(|| {
                (x.len() != y.len()).then(|| {
                    let i = x.len().min(y.len());
                    let side = |v: &Vec<Value>| v.get(i).cloned().unwrap_or(Value::Null);
                    (
                        format!("{path}[{i}] ({} items recorded, {} now)", x.len(), y.len()),
                        side(x),
                        side(y),
                    )
                })
            })
        }
        _ if a == b => None,
        _ => Some((path.to_owned(), a.clone(), b.clone())),
    }
}

/// A value on one line, cut.
fn excerpt(value: &Value) -> String {
    match value {
        Value::String(s) => excerpt_text(s),
        Value::Null => "(nothing)".into(),
        other => truncate_with_marker(&other.to_string(), 300),
    }
}

fn excerpt_text(text: &str) -> String {
    let mut out = String::new();
    let _ = write!(out, "{:?}", truncate_with_marker(text, 300));
    out
}

/// Answers approval requests as the recording did, in order.
struct RecordedApprovals {
    broker: ApprovalBroker,
    state: Arc<Mutex<TurnState>>,
}

impl UIAdapter for RecordedApprovals {
    fn on_event(&self, _event: &AgentEvent) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }

    fn on_approval_request(&self, request: &ApprovalRequest) {
        let decision = {
            let mut state = lock(&self.state);
            let next = state.recorded.approvals.get(state.used_approvals).cloned();
            match next {
                Some(recorded) if recorded.tool.is_empty() || recorded.tool == request.tool_name => {
                    state.used_approvals += 1;
                    recorded.decision
                }
                _ => {
                    state.differ(Difference::new(
                        None,
                        format!(
                            "asked a person to approve {}, which the recording did not",
                            request.tool_name
                        ),
                    ));
                    ApprovalDecision::Deny
                }
            }
        };
        self.broker.decide(&request.request_id, decision);
    }

    fn on_approval_resolved(&self, _request_id: &str, _decision: ApprovalDecision) {}
}

/// The provider of a replay against the cassette: every loop call is
/// answered by the tap, so a call that reaches it came from elsewhere.
/// It carries the configured provider's name: answers are assembled the
/// way that provider's are.
#[derive(Debug)]
struct NoModel(String);

impl Provider for NoModel {
    fn stream(&self, request: ChatRequest) -> ProviderStream {
        Box::pin(futures::stream::iter([Err(ProviderError::Config(format!(
            "a replay answers only the agent loop's calls, not a {} call",
            request.purpose
        )))]))
    }

    fn name(&self) -> &str {
        &self.0
    }
}
