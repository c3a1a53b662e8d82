//! The memory tools every agent gets (R-TEAM-5, R-MEM-11):
//!
//! | tool | arguments | does |
//! |---|---|---|
//! | `remember_task_pattern` | `{name, pattern}` | remembers how a kind of task is done, in the calling agent's procedural memory; the same name replaces the old pattern |
//! | `recall_episodes` | `{query}` | the calling agent's episodes (and those of the agents its `memory.read.edm` lists) that best match `query` |
//!
//! The scope of a call comes from its [`ToolContext`]: the agent and the
//! session, turned into a [`MemoryScope`](jarvis_memory::MemoryScope) by a
//! [`ScopeResolver`] the assembly layer provides ([`StaticScopes`](jarvis_memory::StaticScopes)
//! for one user). Neither tool asks for approval. Bad input and failures
//! are `is_error` results the model reads.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use std::fmt::Write as _;
use std::sync::Arc;

use jarvis_agent::{Tool, ToolContext, ToolError, ToolRegistry, ToolResult, Typed, TypedTool};
use jarvis_memory::{Layer, MemoryScope, MemoryService, ScopeResolver};

/// The name of the task-pattern tool.
pub const REMEMBER_TASK_PATTERN_TOOL: &str = "remember_task_pattern";
/// The name of the episode-recall tool.
pub const RECALL_EPISODES_TOOL: &str = "recall_episodes";
/// Episodes `recall_episodes` answers at most.
const RECALL_EPISODES_K: usize = 5;

/// Arguments of `remember_task_pattern`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct RememberTaskPatternArgs {
    /// A short name for the kind of task (letters, digits, '-', '_', inner spaces; at most 64 characters).
    name: String,
    /// How such a task is best done: the steps, tools and pitfalls worth repeating.
    pattern: String,
}

/// Arguments of `recall_episodes`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct RecallEpisodesArgs {
    /// What to look for in past turns.
    query: String,
}

#[derive(Debug)]
struct MemoryTool {
    service: Arc<MemoryService>,
    scopes: Arc<dyn ScopeResolver>,
}

impl MemoryTool {
    fn scope(&self, ctx: &ToolContext) -> Result<MemoryScope, ToolError> {
        self.scopes.scope(&ctx.agent_id, &ctx.session_id).ok_or_else(|| {
            ToolError::Failed(format!("agent {:?} has no memory in this session", ctx.agent_id))
        })
    }
}

/// `remember_task_pattern {name, pattern}`.
#[derive(Debug)]
struct RememberTaskPattern(MemoryTool);

#[async_trait]
impl TypedTool for RememberTaskPattern {
    type Args = RememberTaskPatternArgs;

    fn name(&self) -> &str {
        REMEMBER_TASK_PATTERN_TOOL
    }

    fn description(&self) -> &str {
        "Remembers how a kind of task is done (a task pattern) so you can do it the same way next time. \
         `name` names the kind of task; `pattern` says how to do it. A pattern with the same name replaces the old one. \
         Only you read your task patterns."
    }

    async fn run(&self, args: RememberTaskPatternArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let scope = self.0.scope(ctx)?;
        Ok(
            match self
                .0
                .service
                .remember_task_pattern(&scope, &args.name, &args.pattern)
                .await
            {
                Ok(record) => ToolResult::ok(format!(
                    "Remembered the task pattern {:?}.",
                    record
                        .metadata
                        .get("name")
                        .and_then(|n| n.as_str())
                        .unwrap_or(&args.name)
                )),
                Err(e) => ToolResult::error(e.to_string()),
            },
        )
    }
}

/// `recall_episodes {query}`.
#[derive(Debug)]
struct RecallEpisodes(MemoryTool);

#[async_trait]
impl TypedTool for RecallEpisodes {
    type Args = RecallEpisodesArgs;

    fn name(&self) -> &str {
        RECALL_EPISODES_TOOL
    }

    fn description(&self) -> &str {
        "Searches your memory of past turns (episodes) for `query` and lists the best matches with their dates. \
         Use it when the conversation refers to something earlier than the last few turns."
    }

    async fn run(&self, args: RecallEpisodesArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let scope = self.0.scope(ctx)?;
        if args.query.trim().is_empty() {
            return Ok(ToolResult::error("the query is empty; say what to look for"));
        }
        let recalled = match self
            .0
            .service
            .recall(&scope, &args.query, Layer::Episodic, RECALL_EPISODES_K)
            .await
        {
            Ok(r) => r,
            Err(e) => return Ok(ToolResult::error(e.to_string())),
        };
        if recalled.is_empty() {
            return Ok(ToolResult::ok(format!("No episode matches {:?}.", args.query)));
        }
        let mut out = format!("Episodes matching {:?}, best first:\n", args.query);
        for (i, r) in recalled.iter().enumerate() {
            let date = r.record.created_at.to_string();
            let text = r.record.text.split_whitespace().collect::<Vec<_>>().join(" ");
            let _ = writeln!(out, "{}. [{}] {}", i + 1, &date[..10.min(date.len())], text);
        }
        Ok(ToolResult::ok(out.trim_end().to_owned()))
    }
}

/// The memory tools, `recall_episodes` and `remember_task_pattern`, over
/// `service`, with scopes from `scopes`.
pub fn memory_tools(service: Arc<MemoryService>, scopes: Arc<dyn ScopeResolver>) -> Vec<Arc<dyn Tool>> {
    let tool = || MemoryTool {
        service: service.clone(),
        scopes: scopes.clone(),
    };
    vec![
        Arc::new(Typed::new(RecallEpisodes(tool()))),
        Arc::new(Typed::new(RememberTaskPattern(tool()))),
    ]
}

/// Adds the [`memory_tools`] to `registry`; a name already taken there is
/// an error ([`ToolError::Duplicate`]).
pub fn register_memory_tools(
    registry: &mut ToolRegistry,
    service: Arc<MemoryService>,
    scopes: Arc<dyn ScopeResolver>,
) -> Result<(), ToolError> {
    for tool in memory_tools(service, scopes) {
        registry.register(tool)?;
    }
    Ok(())
}
