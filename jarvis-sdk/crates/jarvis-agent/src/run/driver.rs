//! The thin async driver: performs the machine's actions (streams model
//! calls, runs tool batches through the gate with a concurrency bound) and
//! pushes events to the subscriber.

use futures::{FutureExt, StreamExt};
use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::machine::{Action, CallPlan, Finished, Limits, Machine, Reply};
use super::{AgentLoopConfig, LoopContext, Resume, UsageTally};
use crate::event::{AgentEvent, MessageDelta};
use crate::gate::{GateVerdict, ToolCallInfo};
use crate::tool::{ToolContext, ToolError, ToolRegistry, ToolResult, prepare_call};
use jarvis_common::trace::{self, chat_span, execute_tool_span};
use jarvis_common::truncate_with_marker;
use jarvis_model::{
    ChatRequest, FinishReason, Message, ModelResponse, ProviderError, ProviderEvent, ResponseAssembler,
    ToolCall, ToolResultMessage, ToolSpec, Usage, estimate_tokens,
};

pub(super) struct Driver<'a> {
    ctx: &'a LoopContext,
    config: &'a AgentLoopConfig,
    cancel: CancellationToken,
    /// The context's tools with what its sources offer as the turn starts.
    tools: ToolRegistry,
    specs: Vec<ToolSpec>,
    /// The context handed to tools that run loops of their own (with the
    /// turn's tally, so their runs add to it).
    shared: Arc<LoopContext>,
    tally: Arc<UsageTally>,
}

impl<'a> Driver<'a> {
    pub(super) fn new(
        ctx: &'a LoopContext,
        config: &'a AgentLoopConfig,
        cancel: CancellationToken,
        tally: Arc<UsageTally>,
    ) -> Self {
        let tools = ctx.tools.snapshot();
        let mut shared = ctx.clone();
        shared.usage = Some(tally.clone());
        Self {
            ctx,
            config,
            cancel,
            specs: tools.specs(),
            tools,
            shared: Arc::new(shared),
            tally,
        }
    }

    /// Tells the machine when a limit of the tally (or an ancestor's) is reached.
    fn check_budget(&self, machine: &mut Machine) {
        if let Some(reached) = self.tally.reached() {
            machine.budget_reached(reached.limit);
        }
    }

    /// Runs the turn to its end. The `agent_end` event is not emitted: the
    /// caller sends it when the turn is recorded (see [`super::run_agent_loop`]).
    pub(super) async fn run(
        &self,
        history: Vec<Message>,
        start: AgentEvent,
        resume: Option<Resume>,
    ) -> Finished {
        let limits = Limits {
            max_turns: self.config.max_turns,
            continuation_steps: self.config.continuation_steps(),
            overflow_resume: self.config.overflow_resume,
        };
        let (mut machine, mut action, mut known) = match resume {
            None => {
                let mut machine = Machine::new(limits, history, start);
                self.check_budget(&mut machine);
                let action = machine.start(self.aborted());
                (machine, action, Vec::new())
            }
            Some(resume) => {
                let mut machine = Machine::resumed(limits, history, resume.turn_start, &resume.state, start);
                self.check_budget(&mut machine);
                let action = machine.start_resumed(self.aborted());
                (machine, action, resume.known)
            }
        };
        loop {
            for event in machine.drain_events() {
                if !matches!(event, AgentEvent::AgentEnd { .. }) {
                    self.emit(&event);
                }
            }
            action = match action {
                Action::Done => break,
                Action::Call(plan) => {
                    let reply = self.call(&plan, machine.history()).await;
                    self.check_budget(&mut machine);
                    let action = machine.on_reply(reply, self.aborted());
                    if let (Action::RunTools(_), Some(recorder)) = (&action, &self.ctx.recorder)
                        && let Some(message) = machine.history().last()
                    {
                        recorder.step(message, &machine.snapshot());
                    }
                    action
                }
                Action::RunTools(calls) => {
                    // A resumed step: results known before the restart are
                    // not run again.
                    let settled = std::mem::take(&mut known);
                    let to_run: Vec<ToolCall> = calls
                        .iter()
                        .filter(|c| !settled.iter().any(|r| r.tool_call_id == c.id))
                        .cloned()
                        .collect();
                    let mut results = self.run_tools(&to_run).await;
                    results.extend(settled);
                    let results = calls
                        .iter()
                        .filter_map(|c| {
                            let i = results.iter().position(|r| r.tool_call_id == c.id)?;
                            Some(results.swap_remove(i))
                        })
                        .collect();
                    // Sub-agents and delegations spend during tools.
                    self.check_budget(&mut machine);
                    machine.on_tool_results(results, self.aborted())
                }
            };
        }
        machine.into_finished()
    }

    fn aborted(&self) -> bool {
        self.cancel.is_cancelled()
    }

    fn emit(&self, event: &AgentEvent) {
        if self.ctx.ui.on_event(event).is_break() {
            self.cancel.cancel();
        }
    }

    async fn call(&self, plan: &CallPlan, history: &[Message]) -> Reply {
        let ctx = self.ctx;
        // The one place memory enters a request (R-MEM-4): the recalled
        // sections before the last turns, for every kind of call.
        let messages = match &ctx.memory {
            Some(memory) => memory.apply(history),
            None => history.to_vec(),
        };
        let mut request = ChatRequest::new(ctx.model.model.clone(), messages)
            .with_purpose(plan.purpose)
            .with_metadata(ctx.identity.agent_id.clone(), ctx.identity.session_id.clone())
            .with_sampling(ctx.model.temperature, ctx.model.max_tokens);
        if let Some(system) = &ctx.model.system_prompt {
            request = request.with_system(system.clone());
        }
        if plan.with_tools {
            request = request.with_tools(self.specs.clone());
        }
        if let Some(instruction) = &ctx.turn_instruction {
            request = request.with_instruction(instruction.clone());
        }
        if let Some(instruction) = &plan.instruction {
            request = request.with_instruction(instruction.clone());
        }
        let span = chat_span(ctx.provider.name(), &ctx.model.model, plan.purpose.as_str());
        if !span.is_disabled() && trace::capture_message_content() {
            let input = serde_json::to_string(&request.messages).unwrap_or_default();
            span.record("gen_ai.input.messages", input.as_str());
        }
        let reply = self
            .stream_reply(plan, history, request)
            .instrument(span.clone())
            .await;
        record_reply(&span, &reply);
        reply
    }

    /// Streams one request and assembles its answer.
    async fn stream_reply(&self, plan: &CallPlan, history: &[Message], request: ChatRequest) -> Reply {
        let ctx = self.ctx;
        let mut stream = match &ctx.tap {
            Some(tap) => tap.model_call(&ctx.provider, request),
            None => ctx.provider.stream(request),
        };
        let mut assembler = ResponseAssembler::for_provider(ctx.provider.name());
        loop {
            let next = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Reply::Cancelled,
                next = stream.next() => next,
            };
            match next {
                None => break,
                Some(Err(error)) => return Reply::Failed(error),
                Some(Ok(event)) => {
                    if plan.stream {
                        self.stream_delta(&event);
                    }
                    assembler.push(event);
                }
            }
        }
        match assembler.finish() {
            Ok(mut response) => {
                self.fix_call_ids(&mut response.tool_calls);
                if response.usage == Usage::default() {
                    // The provider reported nothing: an estimate, marked as one.
                    response.usage = estimate(ctx, history, plan, &response);
                }
                // Priced by the model as sent (the provider's name when the
                // requests name none and the provider picks).
                let model = match ctx.model.model.as_str() {
                    "" => ctx.provider.name(),
                    named => named,
                };
                self.tally.record(model, response.usage);
                Reply::Answer(response)
            }
            Err(error) => Reply::Failed(error),
        }
    }

    fn stream_delta(&self, event: &ProviderEvent) {
        let delta = match event {
            ProviderEvent::TextDelta(t) if !t.is_empty() => MessageDelta::TextDelta(t.clone()),
            ProviderEvent::ThinkingDelta { text, .. } if !text.is_empty() => {
                MessageDelta::ThinkingDelta(text.clone())
            }
            _ => return,
        };
        self.emit(&AgentEvent::MessageUpdate { delta });
    }

    /// Gives every call a unique id: providers may omit ids or repeat them.
    fn fix_call_ids(&self, calls: &mut [ToolCall]) {
        let mut seen = HashSet::new();
        for call in calls {
            if call.id.is_empty() || !seen.insert(call.id.clone()) {
                call.id = self.ctx.ids.next_id("call_");
                seen.insert(call.id.clone());
            }
        }
    }

    /// Runs one step's calls concurrently (bounded); starts are emitted in
    /// call order first, ends in completion order; results come back in call
    /// order.
    async fn run_tools(&self, calls: &[ToolCall]) -> Vec<ToolResultMessage> {
        for call in calls {
            self.emit(&AgentEvent::ToolExecutionStart {
                tool_call_id: call.id.clone(),
                tool_name: call.name.clone(),
                args: call.arguments.clone(),
            });
        }
        let mut results: Vec<Option<ToolResult>> = vec![None; calls.len()];
        // The futures are made first and then buffered: a stream that maps
        // borrowed calls lazily makes the whole turn's future `!Send` (a
        // known limit of the compiler's higher-ranked lifetime inference),
        // and a turn must be spawnable.
        let pending: Vec<_> = calls
            .iter()
            .enumerate()
            .map(|(i, call)| self.execute(call).map(move |r| (i, r)))
            .collect();
        let mut running = futures::stream::iter(pending).buffer_unordered(self.config.tool_concurrency);
        while let Some((i, result)) = running.next().await {
            let call = &calls[i];
            if let Some(tap) = &self.ctx.tap {
                tap.tool_result(call, &result);
            }
            if let Some(recorder) = &self.ctx.recorder {
                recorder.result(&ToolResultMessage {
                    tool_call_id: call.id.clone(),
                    tool_name: call.name.clone(),
                    content: result.content.clone(),
                    is_error: result.is_error,
                });
            }
            self.emit(&AgentEvent::ToolExecutionEnd {
                tool_call_id: call.id.clone(),
                tool_name: call.name.clone(),
                args: call.arguments.clone(),
                is_error: result.is_error,
                result: truncate_with_marker(&result.content, self.config.event_result_chars),
            });
            results[i] = Some(result);
        }
        drop(running);
        calls
            .iter()
            .zip(results)
            .map(|(call, result)| {
                let result = result.unwrap_or_else(|| ToolResult::error("the tool call did not run"));
                ToolResultMessage {
                    tool_call_id: call.id.clone(),
                    tool_name: call.name.clone(),
                    content: result.content,
                    is_error: result.is_error,
                }
            })
            .collect()
    }

    /// One call: argument check, tool lookup, argument preparation, the
    /// gate, then the tool, all racing the abort signal. Never fails: every
    /// problem is an error result.
    async fn execute(&self, call: &ToolCall) -> ToolResult {
        if call.name.is_empty() {
            return ToolResult::error("the tool call has no tool name");
        }
        if let Some(problem) = call.arguments_error() {
            return ToolResult::error(format!("cannot call {}: {problem}", call.name));
        }
        let Some(tool) = self.tools.get(&call.name) else {
            let known = self.tools.names().collect::<Vec<_>>().join(", ");
            return ToolResult::error(format!(
                "there is no tool named {:?}; the tools are: {known}",
                call.name
            ));
        };
        if self.aborted() {
            return ToolError::Cancelled.into();
        }
        let identity = self.ctx.tool_identity();
        let mut tool_ctx = ToolContext::new(identity.session_id.clone(), identity.agent_id.clone())
            .with_call_id(call.id.clone())
            .with_turn_id(self.ctx.turn_id.clone())
            .with_cancel(self.cancel.clone())
            .with_extensions(self.ctx.extensions.clone());
        tool_ctx.loop_context = Some(self.shared.clone());
        let work = async {
            // The one place arguments change before the gate: what the
            // stages, people and the tool see is the prepared call.
            let preparing = prepare_call(tool.as_ref(), call.arguments.clone(), &tool_ctx);
            let prepared = match AssertUnwindSafe(preparing).catch_unwind().await {
                Ok(Ok(prepared)) => prepared,
                Ok(Err(error)) => {
                    return ToolResult::error(format!("cannot call {}: {error}", call.name));
                }
                Err(panic) => return crashed(&call.name, &*panic),
            };
            let info = ToolCallInfo {
                session_id: &identity.session_id,
                turn_id: &self.ctx.turn_id,
                agent_id: &identity.agent_id,
                tool_call_id: &call.id,
                tool_name: &call.name,
                arguments: &prepared.arguments,
                programs: &prepared.programs,
                requires_approval: tool.requires_approval(),
            };
            let arguments = match self
                .ctx
                .gate
                .check_prepared(&info, tool.as_ref(), &tool_ctx)
                .await
            {
                GateVerdict::Allowed => prepared.arguments.clone(),
                GateVerdict::AllowedWith(rewritten) => rewritten,
                denied => {
                    return ToolResult::error(denied.refusal_message(&call.name).unwrap_or_default());
                }
            };
            if let Some(tap) = &self.ctx.tap
                && let Some(answer) = tap.answer_tool(call, &arguments).await
            {
                return answer;
            }
            match AssertUnwindSafe(tool.call(arguments, &tool_ctx))
                .catch_unwind()
                .await
            {
                Ok(Ok(result)) => result,
                Ok(Err(error)) => error.into(),
                Err(panic) => crashed(&call.name, &*panic),
            }
        };
        let span = execute_tool_span(&call.name, &call.id);
        let result = async {
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => ToolError::Cancelled.into(),
                result = work => result,
            }
        }
        .instrument(span.clone())
        .await;
        if result.is_error {
            trace::record_error(&span, "tool_error");
        }
        result
    }
}

/// Puts what a model call answered on its `chat` span.
fn record_reply(span: &tracing::Span, reply: &Reply) {
    if span.is_disabled() {
        return;
    }
    match reply {
        Reply::Answer(response) => {
            trace::record_usage(span, response.usage.input_tokens, response.usage.output_tokens);
            trace::record_finish_reasons(span, &[finish_reason_name(&response.finish)]);
            if trace::capture_message_content() {
                let output = serde_json::json!([{
                    "role": "assistant",
                    "content": response.text,
                    "tool_calls": response.tool_calls,
                }]);
                span.record("gen_ai.output.messages", output.to_string().as_str());
            }
        }
        Reply::Failed(error) => trace::record_error(span, provider_error_kind(error)),
        Reply::Cancelled => trace::record_error(span, "cancelled"),
    }
}

/// A finish reason as the GenAI conventions name it.
fn finish_reason_name(finish: &FinishReason) -> &str {
    match finish {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::ToolUse => "tool_calls",
        FinishReason::ContentFilter => "content_filter",
        FinishReason::Other(other) => other,
    }
}

/// A short, stable name for a provider's failure (`error.type`).
fn provider_error_kind(error: &ProviderError) -> &'static str {
    match error {
        ProviderError::Api { .. } => "api_error",
        ProviderError::Transport { .. } => "transport_error",
        ProviderError::Stream { .. } => "stream_error",
        ProviderError::Incomplete { .. } => "incomplete",
        ProviderError::Config(_) => "config_error",
        ProviderError::Script(_) => "script_error",
        _ => "provider_error",
    }
}

/// A call's usage estimated from the text sent (system prompt, history,
/// instructions; not the tool schemas) and the text received. The input,
/// which may be megabytes, is counted from its UTF-8 length, about four
/// bytes a token, without reading it again; the output with
/// [`estimate_tokens`].
fn estimate(ctx: &LoopContext, history: &[Message], plan: &CallPlan, response: &ModelResponse) -> Usage {
    let mut bytes = ctx.model.system_prompt.as_deref().map_or(0, str::len);
    for text in [ctx.turn_instruction.as_deref(), plan.instruction.as_deref()]
        .into_iter()
        .flatten()
    {
        bytes += text.len();
    }
    for message in history {
        bytes += match message {
            Message::User(m) => m.content.len(),
            Message::Assistant(m) => {
                m.content.len()
                    + m.tool_calls
                        .iter()
                        .map(|c| c.name.len() + c.arguments.to_string().len())
                        .sum::<usize>()
            }
            Message::Tool(m) => m.content.len(),
        };
    }
    let input = u64::try_from(bytes.div_ceil(4)).unwrap_or(u64::MAX);
    let mut output = estimate_tokens(&response.text);
    for call in &response.tool_calls {
        output += estimate_tokens(&call.name) + estimate_tokens(&call.arguments.to_string());
    }
    Usage::new(input, output).estimated()
}

/// The result of a tool whose code panicked.
fn crashed(tool: &str, panic: &(dyn std::any::Any + Send)) -> ToolResult {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    tracing::error!(%tool, %what, "tool panicked");
    ToolResult::error(format!("the tool {tool} crashed: {what}"))
}
