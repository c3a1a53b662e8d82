//! The goal tools agents call (`set_goal`, `update_goal`, `close_goal`):
//! their arguments and answers; each change tells the calling turn's
//! screens that the AGENDA changed.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use std::sync::Arc;

use super::{CLOSE_GOAL_TOOL, GoalError, GoalPatch, GoalStatus, GoalStore, SET_GOAL_TOOL, UPDATE_GOAL_TOOL};
use jarvis_agent::{AgendaChanged, AgentEvent, Tool, ToolContext, ToolError, ToolResult, Typed, TypedTool};

/// Tells the screens of the turn that the AGENDA changed.
fn agenda_changed(ctx: &ToolContext) {
    if let Some(turn) = &ctx.loop_context {
        let _ = turn.ui.on_event(&AgentEvent::notice(&AgendaChanged {
            session_id: ctx.session_id.clone(),
        }));
    }
}

fn answer(result: Result<String, GoalError>) -> Result<ToolResult, ToolError> {
    Ok(match result {
        Ok(text) => ToolResult::ok(text),
        Err(e) => ToolResult::error(e.to_string()),
    })
}

/// Arguments of `set_goal`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct SetGoalArgs {
    /// What you want to reach, in a few words.
    title: String,
    /// Why it matters.
    #[serde(default)]
    why: Option<String>,
    /// When it is due: YYYY-MM-DD, or a time (RFC 3339, or YYYY-MM-DDTHH:MM in the person's zone).
    #[serde(default)]
    due: Option<String>,
}

/// Arguments of `update_goal`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct UpdateGoalArgs {
    /// The goal's id, `g-<n>`.
    id: String,
    /// A new title.
    #[serde(default)]
    title: Option<String>,
    /// Progress in percent, 0 to 100.
    #[serde(default)]
    progress: Option<u8>,
    /// A new due (YYYY-MM-DD or a time); an empty string removes it.
    #[serde(default)]
    due: Option<String>,
    /// A note on what happened, kept with its time.
    #[serde(default)]
    note: Option<String>,
}

/// How a goal is closed.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CloseAs {
    /// Reached.
    Done,
    /// Given up.
    Dropped,
}

/// Arguments of `close_goal`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct CloseGoalArgs {
    /// The goal's id, `g-<n>`.
    id: String,
    /// `done` or `dropped`.
    status: CloseAs,
    /// Why, or what came of it.
    #[serde(default)]
    note: Option<String>,
}

#[derive(Debug)]
struct SetGoal(Arc<GoalStore>);

#[async_trait]
impl TypedTool for SetGoal {
    type Args = SetGoalArgs;

    fn name(&self) -> &str {
        SET_GOAL_TOOL
    }

    fn description(&self) -> &str {
        "Sets a goal you will work towards across conversations (title, optional why and due). \
         Answers the goal's id. Your active goals are shown to you at the start of every turn."
    }

    async fn run(&self, args: SetGoalArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let result = self
            .0
            .create(
                ctx.top_level_agent(),
                &args.title,
                args.why.as_deref().unwrap_or(""),
                args.due.as_deref(),
            )
            .await
            .map(|g| format!("{} (goal set: {})", g.id, g.line()));
        if result.is_ok() {
            agenda_changed(ctx);
        }
        answer(result)
    }
}

#[derive(Debug)]
struct UpdateGoal(Arc<GoalStore>);

#[async_trait]
impl TypedTool for UpdateGoal {
    type Args = UpdateGoalArgs;

    fn name(&self) -> &str {
        UPDATE_GOAL_TOOL
    }

    fn description(&self) -> &str {
        "Changes one of your active goals: its title, progress (0-100), due, or adds a note on what happened."
    }

    async fn run(&self, args: UpdateGoalArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let patch = GoalPatch {
            title: args.title,
            progress: args.progress,
            due: args.due,
            note: args.note,
        };
        let result = self
            .0
            .update(ctx.top_level_agent(), args.id.trim(), patch)
            .await
            .map(|g| format!("Updated: {}", g.line()));
        if result.is_ok() {
            agenda_changed(ctx);
        }
        answer(result)
    }
}

#[derive(Debug)]
struct CloseGoal(Arc<GoalStore>);

#[async_trait]
impl TypedTool for CloseGoal {
    type Args = CloseGoalArgs;

    fn name(&self) -> &str {
        CLOSE_GOAL_TOOL
    }

    fn description(&self) -> &str {
        "Closes one of your goals as done (reached) or dropped (given up), with an optional note."
    }

    async fn run(&self, args: CloseGoalArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let status = match args.status {
            CloseAs::Done => GoalStatus::Done,
            CloseAs::Dropped => GoalStatus::Dropped,
        };
        let result = self
            .0
            .close(
                ctx.top_level_agent(),
                args.id.trim(),
                status,
                args.note.as_deref(),
            )
            .await
            .map(|g| format!("Closed: {}", g.line()));
        if result.is_ok() {
            agenda_changed(ctx);
        }
        answer(result)
    }
}

/// The goal tools, `set_goal`, `update_goal` and `close_goal`, over `store`.
pub fn goal_tools(store: Arc<GoalStore>) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(Typed::new(SetGoal(store.clone()))),
        Arc::new(Typed::new(UpdateGoal(store.clone()))),
        Arc::new(Typed::new(CloseGoal(store))),
    ]
}
