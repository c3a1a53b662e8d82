//! The Focus tools agents call (`start_focus`, `focus_step`, `focus_note`,
//! `end_focus`): their arguments, their answers, and the changes they send
//! to the calling turn's screens.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use std::sync::Arc;

use super::{
    END_FOCUS_TOOL, FOCUS_NOTE_TOOL, FOCUS_STEP_TOOL, FocusChange, FocusError, FocusNoteKind,
    FocusStepStatus, FocusStore, FocusTask, START_FOCUS_TOOL,
};
use jarvis_agent::{Tool, ToolContext, ToolError, ToolResult, Typed, TypedTool};

/// Sends a change to the screens of the calling turn.
fn show(ctx: &ToolContext, change: &FocusChange) {
    if let Some(turn) = &ctx.loop_context {
        let _ = turn.ui.on_event(&change.task.state_event(true));
        let _ = turn.ui.on_event(&change.task.panel_event(&change.log));
    }
}

fn answer(
    ctx: &ToolContext,
    result: Result<FocusChange, FocusError>,
    say: impl Fn(&FocusTask) -> String,
) -> Result<ToolResult, ToolError> {
    Ok(match result {
        Ok(change) => {
            show(ctx, &change);
            ToolResult::ok(say(&change.task))
        }
        Err(e) => ToolResult::error(e.to_string()),
    })
}

/// The next step, as a tool result says it.
fn next_step(task: &FocusTask) -> String {
    match task.current {
        Some(i) => format!("Next step {}: {}", i + 1, task.steps[i].title),
        None => "Every step is finished; end the task with end_focus {summary}.".into(),
    }
}

/// Arguments of `start_focus`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct StartFocusArgs {
    /// What the task is.
    title: String,
    /// The steps, in order.
    #[serde(default)]
    plan: Vec<String>,
}

/// How a step finished.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum StepOutcome {
    /// Finished.
    Done,
    /// Passed over.
    Skipped,
    /// Cannot go on.
    Blocked,
}

/// Arguments of `focus_step`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct FocusStepArgs {
    /// How the current step finished: done, skipped or blocked.
    status: StepOutcome,
    /// What was done or why not.
    #[serde(default)]
    note: Option<String>,
}

/// Arguments of `focus_note`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct FocusNoteArgs {
    /// `reference` (a source) or `finding` (something learned).
    kind: FocusNoteKind,
    /// The source's description or the finding.
    text: String,
    /// Where it comes from.
    #[serde(default)]
    url: Option<String>,
}

/// Arguments of `end_focus`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct EndFocusArgs {
    /// What came of the task.
    summary: String,
}

#[derive(Debug)]
struct StartFocus(Arc<FocusStore>);

#[async_trait]
impl TypedTool for StartFocus {
    type Args = StartFocusArgs;

    fn name(&self) -> &str {
        START_FOCUS_TOOL
    }

    fn description(&self) -> &str {
        "Starts a Focus task for long multi-step work in this conversation: a title and a plan of steps. \
         The task is kept across turns and restarts and shown to you at the start of every turn; \
         finish steps with focus_step, note sources and findings with focus_note, end it with end_focus."
    }

    async fn run(&self, args: StartFocusArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let result = self
            .0
            .start(&ctx.session_id, ctx.top_level_agent(), &args.title, &args.plan);
        answer(ctx, result, |t| {
            format!("Focus task {} started. {}", t.task_id, next_step(t))
        })
    }
}

#[derive(Debug)]
struct FocusStepTool(Arc<FocusStore>);

#[async_trait]
impl TypedTool for FocusStepTool {
    type Args = FocusStepArgs;

    fn name(&self) -> &str {
        FOCUS_STEP_TOOL
    }

    fn description(&self) -> &str {
        "Finishes the current step of this conversation's Focus task as done, skipped or blocked (with a note) \
         and moves on to the next step."
    }

    async fn run(&self, args: FocusStepArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let status = match args.status {
            StepOutcome::Done => FocusStepStatus::Done,
            StepOutcome::Skipped => FocusStepStatus::Skipped,
            StepOutcome::Blocked => FocusStepStatus::Blocked,
        };
        let result = self.0.step(&ctx.session_id, status, args.note.as_deref());
        answer(ctx, result, next_step)
    }
}

#[derive(Debug)]
struct FocusNoteTool(Arc<FocusStore>);

#[async_trait]
impl TypedTool for FocusNoteTool {
    type Args = FocusNoteArgs;

    fn name(&self) -> &str {
        FOCUS_NOTE_TOOL
    }

    fn description(&self) -> &str {
        "Notes a source (kind reference) or a finding (kind finding) in this conversation's Focus task."
    }

    async fn run(&self, args: FocusNoteArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let kind = args.kind;
        let result = self
            .0
            .note(&ctx.session_id, kind, &args.text, args.url.as_deref());
        answer(ctx, result, |t| match kind {
            FocusNoteKind::Reference => format!("Reference noted in {}.", t.task_id),
            FocusNoteKind::Finding => format!("Finding noted in {}.", t.task_id),
        })
    }
}

#[derive(Debug)]
struct EndFocus(Arc<FocusStore>);

#[async_trait]
impl TypedTool for EndFocus {
    type Args = EndFocusArgs;

    fn name(&self) -> &str {
        END_FOCUS_TOOL
    }

    fn description(&self) -> &str {
        "Ends this conversation's Focus task with a summary of what came of it."
    }

    async fn run(&self, args: EndFocusArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let result = self.0.end(&ctx.session_id, &args.summary);
        answer(ctx, result, |t| format!("Focus task {} ended.", t.task_id))
    }
}

/// The Focus tools over `store`.
pub fn focus_tools(store: Arc<FocusStore>) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(Typed::new(StartFocus(store.clone()))),
        Arc::new(Typed::new(FocusStepTool(store.clone()))),
        Arc::new(Typed::new(FocusNoteTool(store.clone()))),
        Arc::new(Typed::new(EndFocus(store))),
    ]
}
