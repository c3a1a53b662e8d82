//! GenAI spans: the `tracing` spans a turn opens, named and attributed as
//! the OpenTelemetry semantic conventions for generative AI (v1.37) say, so
//! a `tracing-opentelemetry` layer exports them as they are.
//!
//! | span | opened by | attributes |
//! |---|---|---|
//! | `invoke_agent` | a session's turn (security to recording) | `gen_ai.operation.name`, `gen_ai.agent.id`, `gen_ai.agent.name`, `gen_ai.conversation.id`, `gen_ai.usage.*` |
//! | `chat` | each model call of the loop | `gen_ai.operation.name`, `gen_ai.provider.name`, `gen_ai.system`, `gen_ai.request.model`, `gen_ai.response.model`, `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`, `gen_ai.response.finish_reasons`, `jarvis.purpose` |
//! | `execute_tool` | each tool call (gate and tool) | `gen_ai.operation.name`, `gen_ai.tool.name`, `gen_ai.tool.call.id`, `gen_ai.tool.type` |
//! | `security` | each stage of the security pipeline | `jarvis.security.stage`, `jarvis.security.slot` |
//! | `approval` | a wait for a person's answer | `jarvis.approval.request_id`, `gen_ai.tool.name`, `jarvis.approval.decision` |
//!
//! Spans nest as the work does: a delegation's or a sub-agent's
//! `invoke_agent` is a child of the calling tool's `execute_tool`. The span
//! name is the operation; `otel.name` carries the conventional display name
//! (`chat gpt-4o`, `execute_tool ask_agent`). Failed operations set
//! `error.type`. Message contents are recorded (`gen_ai.input.messages`,
//! `gen_ai.output.messages`, as JSON) only when
//! `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`.
//!
//! Every span's target is [`GENAI_TARGET`]. Without a subscriber that
//! wants them, a span costs one check of the dispatcher's interest.

use tracing::Span;
use tracing::field::Empty;

/// The `tracing` target of every GenAI span.
pub const GENAI_TARGET: &str = "jarvis::genai";

/// The standard variable that allows message contents on spans.
pub const CAPTURE_CONTENT_ENV: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";

/// Whether message contents go on spans
/// ([`CAPTURE_CONTENT_ENV`]` = true`, read each time it matters).
pub fn capture_message_content() -> bool {
    std::env::var(CAPTURE_CONTENT_ENV).is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// Whether the current span is a turn's `invoke_agent` (so a turn run
/// inside it must not open another).
pub fn in_invoke_agent() -> bool {
    Span::current()
        .metadata()
        .is_some_and(|m| m.target() == GENAI_TARGET && m.name() == "invoke_agent")
}

/// The span of one turn of `agent_id` in `session_id`.
pub fn invoke_agent_span(agent_id: &str, agent_name: &str, session_id: &str) -> Span {
    tracing::info_span!(
        target: GENAI_TARGET,
        "invoke_agent",
        otel.name = %format!("invoke_agent {agent_id}"),
        otel.kind = "internal",
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.id = agent_id,
        gen_ai.agent.name = agent_name,
        gen_ai.conversation.id = session_id,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        error.type = Empty,
    )
}

/// The span of one model call to `provider` for `model` (what the loop
/// asked for; `purpose` is `main`, `summary`, …).
pub fn chat_span(provider: &str, model: &str, purpose: &str) -> Span {
    let shown = if model.is_empty() { provider } else { model };
    tracing::info_span!(
        target: GENAI_TARGET,
        "chat",
        otel.name = %format!("chat {shown}"),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = provider,
        gen_ai.system = provider,
        gen_ai.request.model = model,
        gen_ai.response.model = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.response.finish_reasons = Empty,
        gen_ai.input.messages = Empty,
        gen_ai.output.messages = Empty,
        jarvis.purpose = purpose,
        error.type = Empty,
    )
}

/// The span of one tool call.
pub fn execute_tool_span(tool_name: &str, call_id: &str) -> Span {
    tracing::info_span!(
        target: GENAI_TARGET,
        "execute_tool",
        otel.name = %format!("execute_tool {tool_name}"),
        otel.kind = "internal",
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = tool_name,
        gen_ai.tool.call.id = call_id,
        gen_ai.tool.type = "function",
        error.type = Empty,
    )
}

/// The span of one security stage.
pub fn security_span(slot: &str, stage: &str) -> Span {
    tracing::info_span!(
        target: GENAI_TARGET,
        "security",
        otel.name = %format!("security {stage}"),
        jarvis.security.slot = slot,
        jarvis.security.stage = stage,
        error.type = Empty,
    )
}

/// The span of a wait for a person's answer to `request_id`.
pub fn approval_span(request_id: &str, tool_name: &str) -> Span {
    tracing::info_span!(
        target: GENAI_TARGET,
        "approval",
        otel.name = %format!("approval {tool_name}"),
        jarvis.approval.request_id = request_id,
        gen_ai.tool.name = tool_name,
        jarvis.approval.decision = Empty,
    )
}

/// Records token counts on an `invoke_agent` or `chat` span (as signed
/// integers: OpenTelemetry has no unsigned ones, and an unsigned field
/// recorded late would be exported as text).
pub fn record_usage(span: &Span, input_tokens: u64, output_tokens: u64) {
    let signed = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    span.record("gen_ai.usage.input_tokens", signed(input_tokens));
    span.record("gen_ai.usage.output_tokens", signed(output_tokens));
}

/// Records why a model call ended (`stop`, `tool_calls`, `length`, …) as
/// the JSON array the conventions' string list exports to.
pub fn record_finish_reasons(span: &Span, reasons: &[&str]) {
    if span.is_disabled() {
        return;
    }
    let list = serde_json::to_string(reasons).unwrap_or_default();
    span.record("gen_ai.response.finish_reasons", list.as_str());
}

/// Marks the operation of `span` as failed with `kind` (a short, stable
/// name: `timeout`, `rate_limited`, `tool_error`, …).
pub fn record_error(span: &Span, kind: &str) {
    span.record("error.type", kind);
}
