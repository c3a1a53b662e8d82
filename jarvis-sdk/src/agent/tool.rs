//! Tools: the [`Tool`] trait, typed tools with generated schemas
//! ([`TypedTool`]), the [`ToolRegistry`] and the loop's own [`FinalTool`].

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use crate::common::Extensions;
use crate::model::ToolSpec;

/// The name of the tool whose `answer` argument ends the turn (R-LOOP-4).
pub const FINAL_TOOL_NAME: &str = "final";

/// What a tool call may know about its surroundings.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ToolContext {
    /// The session the call belongs to.
    pub session_id: String,
    /// The agent making the call.
    pub agent_id: String,
    /// The call's id.
    pub tool_call_id: String,
    /// The turn the call belongs to (empty outside a journaled turn); a
    /// delegation names it as the delegated turn's parent.
    pub turn_id: String,
    /// Fires when the turn is aborted; long tools should stop early.
    pub cancel: CancellationToken,
    /// Values the code that started the turn passed along (see
    /// [`LoopContext::extensions`](crate::LoopContext)).
    pub extensions: Extensions,
}

impl ToolContext {
    /// A context for a call outside a running loop (tests, direct use).
    pub fn new(session_id: impl Into<String>, agent_id: impl Into<String>) -> Self {
        Self {
            session_id: session_id.into(),
            agent_id: agent_id.into(),
            tool_call_id: String::new(),
            turn_id: String::new(),
            cancel: CancellationToken::new(),
            extensions: Extensions::new(),
        }
    }

    /// Sets the extensions.
    pub fn with_extensions(mut self, extensions: Extensions) -> Self {
        self.extensions = extensions;
        self
    }

    /// Sets the call id.
    pub fn with_call_id(mut self, id: impl Into<String>) -> Self {
        self.tool_call_id = id.into();
        self
    }

    /// Sets the turn id.
    pub fn with_turn_id(mut self, id: impl Into<String>) -> Self {
        self.turn_id = id.into();
        self
    }

    /// Sets the cancellation token.
    pub fn with_cancel(mut self, cancel: CancellationToken) -> Self {
        self.cancel = cancel;
        self
    }
}

/// What a tool returns to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolResult {
    /// The text the model reads.
    pub content: String,
    /// Whether it reports a failure or a refusal.
    pub is_error: bool,
}

impl ToolResult {
    /// A successful result.
    pub fn ok(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: false,
        }
    }

    /// A failed result the model should read and react to.
    pub fn error(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: true,
        }
    }
}

impl From<ToolError> for ToolResult {
    fn from(error: ToolError) -> Self {
        ToolResult::error(error.to_string())
    }
}

/// Why a tool call failed. The loop turns every error into an `is_error`
/// result carrying this message; the turn goes on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// The arguments do not fit the tool's schema.
    #[error("tool arguments are invalid: {0}")]
    InvalidArguments(String),
    /// The tool ran and failed.
    #[error("tool failed: {0}")]
    Failed(String),
    /// The turn was aborted before the tool finished.
    #[error("tool call cancelled: the turn was aborted")]
    Cancelled,
    /// A file or process operation failed.
    #[error("tool i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// A tool with this name is already registered.
    #[error("tool registry error: a tool named {0:?} is already registered")]
    Duplicate(String),
}

/// A tool the model can call.
///
/// Implement this directly for tools with hand-written schemas, or
/// [`TypedTool`] to get the schema from an argument type.
#[async_trait]
pub trait Tool: Send + Sync {
    /// The name the model calls it by.
    fn name(&self) -> &str;
    /// What it does, written for the model.
    fn description(&self) -> &str;
    /// JSON Schema of the arguments object.
    fn parameters(&self) -> Value;
    /// Whether a person must approve a call unless a rule allows it
    /// (tools that write files, run programs or set up watches).
    fn requires_approval(&self) -> bool {
        false
    }
    /// Runs one call.
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolResult, ToolError>;

    /// The spec sent to the model.
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().to_owned(),
            description: self.description().to_owned(),
            parameters: self.parameters(),
        }
    }
}

/// A tool whose arguments are a Rust type; its schema is generated with
/// schemars and its arguments are checked before [`TypedTool::run`] sees them.
#[async_trait]
pub trait TypedTool: Send + Sync + 'static {
    /// The arguments object.
    type Args: DeserializeOwned + JsonSchema + Send + 'static;
    /// The name the model calls it by.
    fn name(&self) -> &str;
    /// What it does, written for the model.
    fn description(&self) -> &str;
    /// Whether a person must approve a call unless a rule allows it.
    fn requires_approval(&self) -> bool {
        false
    }
    /// Runs one call with checked arguments.
    async fn run(&self, args: Self::Args, ctx: &ToolContext) -> Result<ToolResult, ToolError>;
}

/// A [`TypedTool`] as a [`Tool`]; the schema is generated once.
pub struct Typed<T> {
    inner: T,
    schema: Value,
}

impl<T: TypedTool> Typed<T> {
    /// Wraps `tool`.
    pub fn new(tool: T) -> Self {
        Self {
            schema: schema_for::<T::Args>(),
            inner: tool,
        }
    }
}

impl<T: TypedTool> fmt::Debug for Typed<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Typed").field("name", &self.inner.name()).finish()
    }
}

#[async_trait]
impl<T: TypedTool> Tool for Typed<T> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn description(&self) -> &str {
        self.inner.description()
    }
    fn parameters(&self) -> Value {
        self.schema.clone()
    }
    fn requires_approval(&self) -> bool {
        self.inner.requires_approval()
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let args: T::Args =
            serde_json::from_value(args).map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
        self.inner.run(args, ctx).await
    }
}

/// The JSON Schema of `A`, inlined (no `$ref`) and without the `$schema` and
/// `title` keys, which several model APIs reject.
pub fn schema_for<A: JsonSchema>() -> Value {
    let settings = schemars::generate::SchemaSettings::draft07().with(|s| {
        s.inline_subschemas = true;
    });
    let schema = settings.into_generator().into_root_schema_for::<A>();
    let mut value = serde_json::to_value(schema).unwrap_or_else(|_| serde_json::json!({"type": "object"}));
    if let Value::Object(map) = &mut value {
        map.remove("$schema");
        map.remove("title");
    }
    value
}

/// The tools of one agent, by name, in name order.
#[derive(Default, Clone)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool; a second tool with the same name is refused.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), ToolError> {
        let name = tool.name().to_owned();
        if self.tools.contains_key(&name) {
            return Err(ToolError::Duplicate(name));
        }
        self.tools.insert(name, tool);
        Ok(())
    }

    /// Adds a typed tool.
    pub fn register_typed<T: TypedTool>(&mut self, tool: T) -> Result<(), ToolError> {
        self.register(Arc::new(Typed::new(tool)))
    }

    /// Builder form of [`ToolRegistry::register`].
    pub fn with(mut self, tool: Arc<dyn Tool>) -> Result<Self, ToolError> {
        self.register(tool)?;
        Ok(self)
    }

    /// The tool named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// Tool names in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    /// Number of tools.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether there are no tools.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The specs sent to the model, in name order.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.values().map(|t| t.spec()).collect()
    }
}

/// Arguments of the [`FinalTool`].
#[derive(Debug, Deserialize, JsonSchema)]
pub struct FinalArgs {
    /// The complete answer for the user.
    pub answer: String,
}

/// `final {answer}`: ends the turn with `answer` as the reply (R-LOOP-4).
#[derive(Debug, Default, Clone, Copy)]
pub struct FinalTool;

#[async_trait]
impl TypedTool for FinalTool {
    type Args = FinalArgs;
    fn name(&self) -> &str {
        FINAL_TOOL_NAME
    }
    fn description(&self) -> &str {
        "Ends your turn: `answer` is shown to the user as your complete reply."
    }
    async fn run(&self, args: FinalArgs, _ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        Ok(ToolResult::ok(args.answer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn typed_schemas_are_plain_objects() {
        let tool = Typed::new(FinalTool);
        let schema = tool.parameters();
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["properties"]["answer"]["type"], "string");
        assert_eq!(schema["required"], json!(["answer"]));
        assert!(schema.get("$schema").is_none() && schema.get("title").is_none());
    }

    #[tokio::test]
    async fn typed_tools_reject_bad_arguments() {
        let tool = Typed::new(FinalTool);
        let ctx = ToolContext::new("s", "main");
        let err = tool.call(json!({"answr": 1}), &ctx).await.unwrap_err();
        assert!(matches!(err, ToolError::InvalidArguments(_)));
        let ok = tool.call(json!({"answer": "done"}), &ctx).await.unwrap();
        assert_eq!(ok, ToolResult::ok("done"));
    }

    #[test]
    fn registry_refuses_duplicates() {
        let mut reg = ToolRegistry::new();
        reg.register_typed(FinalTool).unwrap();
        let err = reg.register_typed(FinalTool).unwrap_err();
        assert!(err.to_string().contains("already registered"));
        assert_eq!(reg.names().collect::<Vec<_>>(), vec!["final"]);
        assert_eq!(reg.specs()[0].name, "final");
    }
}
