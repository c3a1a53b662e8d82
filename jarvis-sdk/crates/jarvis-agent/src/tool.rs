//! Tools: the [`Tool`] trait, typed tools with generated schemas
//! ([`TypedTool`]), the [`ToolRegistry`] and the loop's own [`FinalTool`].
//!
//! Before the gate sees a call, its arguments are **prepared** once
//! ([`prepare_call`]): every argument the tool declares as a sandbox path
//! ([`Tool::sandbox_path_arguments`]) is normalised lexically
//! ([`normalize_sandbox_path`]: `notes/../x` becomes `x`, a path that climbs
//! out is refused), then the tool's own [`Tool::prepare`] runs (the process
//! tools resolve the program to the file that will run). Plugin hooks,
//! approval rules, the request people see and the tool all get the prepared
//! arguments, so what is checked is what runs.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use jarvis_common::Extensions;
use jarvis_model::ToolSpec;

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
    /// The running turn's context (its model, tools, gate and screens), for
    /// tools that run a loop of their own inside the turn, such as
    /// `run_subagent`; `None` outside a running loop.
    pub loop_context: Option<Arc<crate::LoopContext>>,
}

impl ToolContext {
    /// The top-level agent the call acts for: a sub-agent's calls
    /// (`karen.reader`) act for its parent (`karen`).
    pub fn top_level_agent(&self) -> &str {
        self.agent_id.split('.').next().unwrap_or(&self.agent_id)
    }

    /// A context for a call outside a running loop (tests, direct use).
    pub fn new(session_id: impl Into<String>, agent_id: impl Into<String>) -> Self {
        Self {
            session_id: session_id.into(),
            agent_id: agent_id.into(),
            tool_call_id: String::new(),
            turn_id: String::new(),
            cancel: CancellationToken::new(),
            extensions: Extensions::new(),
            loop_context: None,
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
    /// Whether only agents that list the tool by name are given it
    /// (R-DEF-7, SPEC.md §17.3 #5): an agent-only tool is never part of the
    /// "whole registry" an agent without a `tools` list gets, so JARVIS has
    /// none unless his `main.yaml` names them. Tools that reach far
    /// (`web_fetch`) or belong to one agent's domain (a pack's) say yes.
    fn agent_only(&self) -> bool {
        false
    }
    /// Names of the arguments that are paths relative to the session's
    /// sandbox. Before the gate, each one present as a string is normalised
    /// lexically ([`normalize_sandbox_path`]) and replaced by its normal
    /// form; one that is absolute or climbs out of the sandbox refuses the
    /// call before any gate stage runs.
    fn sandbox_path_arguments(&self) -> &[&str] {
        &[]
    }
    /// Prepares one call's arguments before the gate, after the sandbox
    /// paths were normalised (see [`prepare_call`]). What it returns is what
    /// the gate's stages, the approval request and [`Tool::call`] see; an
    /// error refuses the call before any stage runs. It must be idempotent:
    /// preparing prepared arguments gives them back unchanged. The default
    /// keeps the arguments as they are.
    async fn prepare(&self, args: Value, _ctx: &ToolContext) -> Result<PreparedCall, ToolError> {
        Ok(PreparedCall::new(args))
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
    /// See [`Tool::agent_only`].
    fn agent_only(&self) -> bool {
        false
    }
    /// See [`Tool::sandbox_path_arguments`].
    fn sandbox_path_arguments(&self) -> &[&str] {
        &[]
    }
    /// See [`Tool::prepare`].
    async fn prepare(&self, args: Value, _ctx: &ToolContext) -> Result<PreparedCall, ToolError> {
        Ok(PreparedCall::new(args))
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
    fn agent_only(&self) -> bool {
        self.inner.agent_only()
    }
    fn sandbox_path_arguments(&self) -> &[&str] {
        self.inner.sandbox_path_arguments()
    }
    async fn prepare(&self, args: Value, ctx: &ToolContext) -> Result<PreparedCall, ToolError> {
        self.inner.prepare(args, ctx).await
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let args: T::Args =
            serde_json::from_value(args).map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
        self.inner.run(args, ctx).await
    }
}

/// A call's arguments as the gate and the tool see them, with what
/// preparing them found out (see [`Tool::prepare`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PreparedCall {
    /// The arguments (a JSON object for every built-in tool).
    pub arguments: Value,
    /// The program arguments resolved to the files that will run; approval
    /// rules on those arguments match these files (see the `approval`
    /// module of `core`).
    pub programs: Vec<ResolvedProgram>,
}

impl PreparedCall {
    /// Arguments with no program argument.
    pub fn new(arguments: Value) -> Self {
        Self {
            arguments,
            programs: Vec::new(),
        }
    }

    /// Adds a resolved program argument.
    pub fn with_program(mut self, program: ResolvedProgram) -> Self {
        self.programs.push(program);
        self
    }
}

/// One argument naming a program, resolved to the file that will run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResolvedProgram {
    /// The argument's name (`program` for `run_command`).
    pub argument: String,
    /// The argument's value as the model wrote it (`git`, `./build.sh`,
    /// `/bin/rm`).
    pub written: String,
    /// Where the written value leads before symlinks are resolved: the
    /// file found on the tool's `PATH` for a bare name, the lexically
    /// normalised path otherwise (a relative one joined to the sandbox).
    pub located: PathBuf,
    /// The canonical path (every symlink resolved) of the file that will run.
    pub file: PathBuf,
    /// The file's path relative to the session's sandbox, when it lies
    /// inside it.
    pub in_sandbox: Option<String>,
    /// The bare names that resolve, on the tool's `PATH`, to exactly
    /// [`ResolvedProgram::file`] (among the file names of `written` and of
    /// `file`). A bare name in an allow rule matches only these.
    pub path_names: Vec<String>,
}

impl ResolvedProgram {
    /// A program argument `argument` written as `written`, located at
    /// `located` and running the canonical file `file`.
    pub fn new(
        argument: impl Into<String>,
        written: impl Into<String>,
        located: impl Into<PathBuf>,
        file: impl Into<PathBuf>,
    ) -> Self {
        Self {
            argument: argument.into(),
            written: written.into(),
            located: located.into(),
            file: file.into(),
            in_sandbox: None,
            path_names: Vec::new(),
        }
    }

    /// Sets [`ResolvedProgram::in_sandbox`].
    pub fn with_in_sandbox(mut self, relative: impl Into<String>) -> Self {
        self.in_sandbox = Some(relative.into());
        self
    }

    /// Sets [`ResolvedProgram::path_names`].
    pub fn with_path_names(mut self, names: Vec<String>) -> Self {
        self.path_names = names;
        self
    }

    /// Every file name the program goes by: of what was written, of where
    /// it was located and of the canonical file (a deny rule's bare name
    /// matches any of them).
    pub fn file_names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        let written = Path::new(&self.written);
        for path in [written, self.located.as_path(), self.file.as_path()] {
            if let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned())
                && !names.contains(&name)
            {
                names.push(name);
            }
        }
        names
    }
}

/// The longest sandbox path accepted, in bytes.
pub const MAX_SANDBOX_PATH_LEN: usize = 1024;
/// The longest component of a sandbox path accepted, in bytes (`NAME_MAX`).
pub const MAX_SANDBOX_COMPONENT_LEN: usize = 255;

/// Why a sandbox path was refused by [`normalize_sandbox_path`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxPathError {
    /// An absolute path; sandbox paths are relative to the sandbox.
    #[error("absolute path {0:?} refused: paths are relative to the session's sandbox")]
    Absolute(String),
    /// The path climbs above the sandbox root.
    #[error("path {0:?} leads outside the sandbox")]
    Escape(String),
    /// The path contains a NUL byte.
    #[error("path {0:?} contains a NUL byte")]
    NulByte(String),
    /// The whole path is longer than [`MAX_SANDBOX_PATH_LEN`] bytes.
    #[error("path is too long ({0} bytes, at most {MAX_SANDBOX_PATH_LEN})")]
    TooLong(usize),
    /// One component is longer than [`MAX_SANDBOX_COMPONENT_LEN`] bytes.
    #[error("a path component is too long ({0} bytes, at most {MAX_SANDBOX_COMPONENT_LEN})")]
    ComponentTooLong(usize),
}

/// Normalises a path relative to a sandbox lexically, without touching
/// the file system: `.` components go, each `..` removes the component
/// before it, and the empty path is `.`. A path that is absolute, holds a
/// NUL byte, is too long, or whose `..` climbs above the root is refused.
///
/// ```
/// use jarvis_agent::normalize_sandbox_path;
///
/// assert_eq!(normalize_sandbox_path("notes/../x").unwrap(), "x");
/// assert_eq!(normalize_sandbox_path("./a//b/").unwrap(), "a/b");
/// assert_eq!(normalize_sandbox_path("").unwrap(), ".");
/// assert!(normalize_sandbox_path("notes/../../x").is_err());
/// assert!(normalize_sandbox_path("/etc/passwd").is_err());
/// ```
pub fn normalize_sandbox_path(raw: &str) -> Result<String, SandboxPathError> {
    if raw.contains('\0') {
        return Err(SandboxPathError::NulByte(raw.to_owned()));
    }
    if raw.len() > MAX_SANDBOX_PATH_LEN {
        return Err(SandboxPathError::TooLong(raw.len()));
    }
    let path = Path::new(raw);
    if path.has_root() || path.is_absolute() {
        return Err(SandboxPathError::Absolute(raw.to_owned()));
    }
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if parts.pop().is_none() {
                    return Err(SandboxPathError::Escape(raw.to_owned()));
                }
            }
            Component::Normal(name) => {
                if name.len() > MAX_SANDBOX_COMPONENT_LEN {
                    return Err(SandboxPathError::ComponentTooLong(name.len()));
                }
                parts.push(name);
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(SandboxPathError::Absolute(raw.to_owned()));
            }
        }
    }
    if parts.is_empty() {
        return Ok(".".to_owned());
    }
    let joined: PathBuf = parts.iter().collect();
    Ok(joined.to_string_lossy().into_owned())
}

/// Prepares one call of `tool` for the gate: normalises the arguments
/// [`Tool::sandbox_path_arguments`] names, then runs [`Tool::prepare`].
/// This is the one place arguments change before the gate; the loop calls
/// it before the gate and again on arguments a plugin hook rewrote.
pub async fn prepare_call(
    tool: &dyn Tool,
    mut args: Value,
    ctx: &ToolContext,
) -> Result<PreparedCall, ToolError> {
    if let Value::Object(map) = &mut args {
        for name in tool.sandbox_path_arguments() {
            if let Some(Value::String(raw)) = map.get_mut(*name) {
                let normal = normalize_sandbox_path(raw)
                    .map_err(|e| ToolError::InvalidArguments(format!("`{name}`: {e}")))?;
                *raw = normal;
            }
        }
    }
    tool.prepare(args, ctx).await
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

/// Tools that come and go while the registry is in use (the tools of MCP
/// servers, which list them after the app starts and may change them). A
/// turn sees what the sources offer when it starts
/// ([`ToolRegistry::snapshot`]).
pub trait ToolSource: Send + Sync {
    /// The tools offered now.
    fn tools(&self) -> Vec<Arc<dyn Tool>>;
}

/// The tools of one agent, by name, in name order, plus the
/// [`ToolSource`]s whose tools join them at the start of every turn.
#[derive(Default, Clone)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
    sources: Vec<Arc<dyn ToolSource>>,
}

impl fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolRegistry")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .field("sources", &self.sources.len())
            .finish()
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

    /// Adds a source whose tools join the registered ones in every
    /// [`ToolRegistry::snapshot`].
    pub fn add_source(&mut self, source: Arc<dyn ToolSource>) {
        self.sources.push(source);
    }

    /// The registered tools plus what every source offers now, as a plain
    /// registry. A source's tool whose name is taken (by a registered tool
    /// or an earlier source) is left out with a warning: the name keeps
    /// meaning what it meant.
    pub fn snapshot(&self) -> ToolRegistry {
        if self.sources.is_empty() {
            return self.clone();
        }
        let mut tools = self.tools.clone();
        for source in &self.sources {
            for tool in source.tools() {
                match tools.entry(tool.name().to_owned()) {
                    std::collections::btree_map::Entry::Occupied(taken) => {
                        tracing::warn!(tool = %taken.key(), "a tool source offers a name already taken; left out");
                    }
                    std::collections::btree_map::Entry::Vacant(free) => {
                        free.insert(tool);
                    }
                }
            }
        }
        ToolRegistry {
            tools,
            sources: Vec::new(),
        }
    }

    /// The tool named `name` (registered, not from a source).
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// Registered tool names in order (see [`ToolRegistry::snapshot`] for
    /// the sources' tools too).
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

    struct Offered(Vec<Arc<dyn Tool>>);

    impl ToolSource for Offered {
        fn tools(&self) -> Vec<Arc<dyn Tool>> {
            self.0.clone()
        }
    }

    #[test]
    fn snapshots_add_what_sources_offer_without_taking_registered_names() {
        struct Named(&'static str);
        #[async_trait]
        impl Tool for Named {
            fn name(&self) -> &str {
                self.0
            }
            fn description(&self) -> &str {
                "from a source"
            }
            fn parameters(&self) -> Value {
                json!({"type": "object"})
            }
            async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<ToolResult, ToolError> {
                Ok(ToolResult::ok("source"))
            }
        }
        let mut reg = ToolRegistry::new();
        reg.register_typed(FinalTool).unwrap();
        reg.add_source(Arc::new(Offered(vec![
            Arc::new(Named("final")),
            Arc::new(Named("time__now")),
        ])));
        assert_eq!(reg.names().collect::<Vec<_>>(), vec!["final"]);
        let snap = reg.snapshot();
        assert_eq!(snap.names().collect::<Vec<_>>(), vec!["final", "time__now"]);
        assert_eq!(snap.get("final").unwrap().description(), FinalTool.description());
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
