//! [`TurnTap`]: sees, and in a replay answers, what one turn exchanges with
//! the outside: its model calls and its tool calls.
//!
//! A recording tap passes every call on and writes down what came back; a
//! replaying tap answers from what was written down, so the loop, the gate
//! and everything around them run as they do now while the model and the
//! tools answer as they did then. The tap sits inside the loop, so it sees
//! the request exactly as sent (memory, instructions and tools included)
//! and every result, refusals too.

use async_trait::async_trait;
use serde_json::Value;
use std::sync::Arc;

use super::tool::ToolResult;
use jarvis_model::{ChatRequest, Provider, ProviderStream, ToolCall};

/// A turn's tap (see the module docs); set on
/// [`LoopContext::tap`](super::LoopContext::tap).
#[async_trait]
pub trait TurnTap: Send + Sync {
    /// One model call of the turn: the stream the loop reads. A recording
    /// tap wraps `provider.stream(request)`; a replaying tap answers itself.
    fn model_call(&self, provider: &Arc<dyn Provider>, request: ChatRequest) -> ProviderStream;

    /// A tool call the gate allowed, with the arguments it allowed: `Some`
    /// answers it instead of the tool. The default runs the tool.
    async fn answer_tool(&self, call: &ToolCall, arguments: &Value) -> Option<ToolResult> {
        let _ = (call, arguments);
        None
    }

    /// What a tool call of the turn gave, whoever answered it (the tool,
    /// the tap, or the gate's refusal), in completion order.
    fn tool_result(&self, call: &ToolCall, result: &ToolResult) {
        let _ = (call, result);
    }
}
