//! Sub-agents (the seeds' Orchestration Pattern): helpers a top-level agent
//! runs inside its own turn for one piece of work, through the
//! `run_subagent {name, task}` tool.
//!
//! A definition declares them under `subagents:` (JARVIS in the team
//! directory's optional `main.yaml`):
//!
//! ```yaml
//! subagents:
//!   - name: researcher                 # letters, digits, '-', '_'
//!     description: "Reads files and summarises them"   # shown to the parent model
//!     instructions: "You read the files you are given and answer with a short summary."
//!     tools: [read_file, list_dir]     # a subset of the parent's tools; nothing else
//!     max_turns: 8                     # its own step cap, with overflow resume
//!     model: null                      # optional: another model of the same provider
//!     subagents: []                    # its own, one level more at most
//! ```
//!
//! [`SubagentBuilder`] checks them against the parent and makes
//! [`SubagentSpec`]s, as [`AgentProfile`](super::AgentProfile) does for
//! top-level agents. A run ([`RunSubagentTool`]):
//!
//! - has its own context: the task as the only message, the sub-agent's
//!   instructions as the system prompt, and memory recalled for the task in
//!   the parent's scope (read-only: a run writes no episode);
//! - sends requests as agent `<parent>.<name>` (`main.researcher`), and its
//!   events to the parent's screens wrapped in `subagent_event`
//!   (`agent_path` names the whole path; nested runs are wrapped once);
//! - calls its tools in the parent's session and sandbox, through the
//!   parent turn's gate narrowed to its own tool list, so its approvals go
//!   where the parent's go (the person's screens);
//! - stops when the parent's turn is aborted (it shares the turn's signal);
//! - is recorded as a read-only child session `sub-<n>` (`n` counts up
//!   across the home), `kind: "sub"`, with `parent_session_id`,
//!   `parent_tool_call_id` and `subagent` in its metadata.
//!
//! Depth is limited: a sub-agent gets `run_subagent` only when its own
//! definition has sub-agents, and definitions nest at most
//! [`MAX_SUBAGENT_DEPTH`] deep. Several calls in one step run concurrently,
//! bounded by the loop's `tool_concurrency`.
//!
//! Not offered to sub-agents: `ask_agent` (delegation is between top-level
//! agents), `run_subagent` by name (it comes with sub-agents of their own)
//! and `remember_task_pattern` (a run reads memory, never writes it).

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use std::collections::BTreeSet;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tracing::Instrument;

use jarvis_agent::{
    AgentEvent, AgentIdentity, AgentLoopConfig, EntryBody, LoopContext, ModelSettings, NewSession, SessionId,
    SessionStore, StopReason, SubOrigin, ToolContext, ToolError, ToolRegistry, ToolResult, Typed, TypedTool,
    UIAdapter, run_agent_loop,
};
use jarvis_common::trace::{self, invoke_agent_span};
use jarvis_memory::{MemoryScope, MemoryService};
use jarvis_model::Message;
use jarvis_turn::{AgentToolPolicy, REMEMBER_TASK_PATTERN_TOOL, UsageMeter};

/// The tool's name.
pub const RUN_SUBAGENT_TOOL: &str = "run_subagent";

/// How deep sub-agents nest: a top-level agent's sub-agents are depth 1,
/// theirs depth 2, and no deeper.
pub const MAX_SUBAGENT_DEPTH: usize = 2;

/// A sub-agent's step cap when its definition gives none.
pub const DEFAULT_SUBAGENT_MAX_TURNS: u32 = 8;

/// The highest `max_turns` a sub-agent may have.
const MAX_SUBAGENT_TURNS: u32 = 100;

/// Tools a sub-agent may never list (see the module docs).
const NOT_FOR_SUBAGENTS: [&str; 3] = ["ask_agent", RUN_SUBAGENT_TOOL, REMEMBER_TASK_PATTERN_TOOL];

/// One `subagents:` entry as written.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SubagentDefinition {
    /// Letters, digits, `-` and `_`; unique among its siblings.
    pub name: String,
    /// What it does, shown to the parent's model.
    #[serde(default)]
    pub description: Option<String>,
    /// Its system prompt.
    #[serde(default)]
    pub instructions: Option<String>,
    /// Its tools: a subset of the parent's.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Its step cap ([`DEFAULT_SUBAGENT_MAX_TURNS`] when absent).
    #[serde(default)]
    pub max_turns: Option<u32>,
    /// Another model of the same provider; the parent's when absent.
    #[serde(default)]
    pub model: Option<String>,
    /// Its own sub-agents (one level more at most).
    #[serde(default)]
    pub subagents: Vec<SubagentDefinition>,
}

/// A checked sub-agent, ready to run.
#[derive(Debug, Clone, PartialEq)]
pub struct SubagentSpec {
    /// `<parent>.<name>`: what its model requests carry (`main.researcher`).
    pub id: String,
    /// Its name, as `run_subagent` is called with it.
    pub name: String,
    /// The agents from the top-level agent down to this one.
    pub path: Vec<String>,
    /// What it does.
    pub description: String,
    /// Its system prompt.
    pub instructions: String,
    /// Its tools.
    pub tools: Vec<String>,
    /// Its step cap.
    pub max_turns: u32,
    /// Its model, when not the parent's.
    pub model: Option<String>,
    /// Its own sub-agents.
    pub subagents: Vec<Arc<SubagentSpec>>,
}

/// Checks `subagents:` entries against their parent and builds
/// [`SubagentSpec`]s (see the module docs for the rules).
#[derive(Debug, Clone)]
pub struct SubagentBuilder<'a> {
    path: Vec<String>,
    parent_tools: &'a [String],
}

impl<'a> SubagentBuilder<'a> {
    /// A builder for the sub-agents of the top-level agent `parent_id`,
    /// whose resolved tools are `parent_tools`.
    pub fn new(parent_id: &str, parent_tools: &'a [String]) -> Self {
        Self {
            path: vec![parent_id.to_owned()],
            parent_tools,
        }
    }

    /// The sub-agents of `definitions`; `Err` says which entry is wrong and why.
    pub fn build(&self, definitions: &[SubagentDefinition]) -> Result<Vec<Arc<SubagentSpec>>, String> {
        let depth = self.path.len();
        if !definitions.is_empty() && depth > MAX_SUBAGENT_DEPTH {
            return Err(format!(
                "sub-agents nest at most {MAX_SUBAGENT_DEPTH} deep: {} cannot have sub-agents",
                self.path.join(".")
            ));
        }
        let mut names = BTreeSet::new();
        let mut specs = Vec::with_capacity(definitions.len());
        for def in definitions {
            let name = def.name.trim();
            let at = format!("subagents: {:?}", def.name);
            if !valid_name(name) {
                return Err(format!(
                    "{at}: a sub-agent's name is 1 to 32 letters, digits, '-' or '_'"
                ));
            }
            if !names.insert(name.to_owned()) {
                return Err(format!("{at}: the name is used twice"));
            }
            let mut tools: Vec<String> = Vec::new();
            for tool in &def.tools {
                if NOT_FOR_SUBAGENTS.contains(&tool.as_str()) {
                    return Err(format!("{at}: {tool} is not for sub-agents"));
                }
                if !self.parent_tools.iter().any(|t| t == tool) {
                    return Err(format!(
                        "{at}: {tool} is not one of {}'s tools; a sub-agent's tools are a subset of its parent's",
                        self.path.join(".")
                    ));
                }
                if !tools.contains(tool) {
                    tools.push(tool.clone());
                }
            }
            let max_turns = def.max_turns.unwrap_or(DEFAULT_SUBAGENT_MAX_TURNS);
            if !(1..=MAX_SUBAGENT_TURNS).contains(&max_turns) {
                return Err(format!("{at}: max_turns must be from 1 to {MAX_SUBAGENT_TURNS}"));
            }
            let mut path = self.path.clone();
            path.push(name.to_owned());
            let children = SubagentBuilder {
                path: path.clone(),
                parent_tools: &tools,
            }
            .build(&def.subagents)?;
            let description = trimmed(def.description.as_deref()).unwrap_or_else(|| name.to_owned());
            specs.push(Arc::new(SubagentSpec {
                id: path.join("."),
                name: name.to_owned(),
                instructions: trimmed(def.instructions.as_deref())
                    .unwrap_or_else(|| format!("You are {name}, a helper agent: {description}")),
                description,
                path,
                tools,
                max_turns,
                model: trimmed(def.model.as_deref()),
                subagents: children,
            }));
        }
        Ok(specs)
    }
}

fn valid_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn trimmed(text: Option<&str>) -> Option<String> {
    text.map(str::trim).filter(|t| !t.is_empty()).map(str::to_owned)
}

/// What every run of one session's sub-agents shares: where runs are
/// recorded and how memory is recalled.
#[derive(Clone)]
pub struct SubagentRuntime {
    store: Arc<dyn SessionStore>,
    counter: Arc<AtomicU64>,
    memory: Option<(Arc<MemoryService>, MemoryScope)>,
    usage: Option<UsageMeter>,
}

impl std::fmt::Debug for SubagentRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubagentRuntime")
            .field("next", &self.counter.load(Ordering::Relaxed))
            .field("memory", &self.memory.is_some())
            .finish_non_exhaustive()
    }
}

impl SubagentRuntime {
    /// Runs recorded in `store`, numbered from `counter` (shared by every
    /// session of the home: the last `n` of `sub-<n>` in use), recalling
    /// memory through `memory` in the parent's scope when set.
    pub fn new(
        store: Arc<dyn SessionStore>,
        counter: Arc<AtomicU64>,
        memory: Option<(Arc<MemoryService>, MemoryScope)>,
    ) -> Self {
        Self {
            store,
            counter,
            memory,
            usage: None,
        }
    }

    /// Records each run's own model calls in the usage ledger, as a row of
    /// its `sub-<n>` session and the agent `<parent>.<name>`.
    pub fn with_usage(mut self, meter: UsageMeter) -> Self {
        self.usage = Some(meter);
        self
    }
}

/// The highest `n` of the `sub-<n>` sessions among `ids` (0 when none).
pub fn last_sub_number<'a>(ids: impl IntoIterator<Item = &'a str>) -> u64 {
    ids.into_iter()
        .filter_map(|id| id.strip_prefix("sub-")?.parse::<u64>().ok())
        .max()
        .unwrap_or(0)
}

/// Arguments of `run_subagent`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct RunSubagentArgs {
    /// The sub-agent's name (see the list in the description).
    pub name: String,
    /// The task, complete enough to be done without this conversation.
    pub task: String,
}

/// `run_subagent`: runs one sub-agent's loop inside the calling turn and
/// answers with its final answer (see the module docs).
#[derive(Debug)]
pub struct RunSubagentTool {
    subagents: Vec<Arc<SubagentSpec>>,
    runtime: SubagentRuntime,
    description: String,
}

impl RunSubagentTool {
    /// The tool of an agent (or sub-agent) whose sub-agents are `subagents`.
    pub fn new(subagents: Vec<Arc<SubagentSpec>>, runtime: SubagentRuntime) -> Self {
        let mut description = String::from(
            "Run one of your sub-agents on a task and get its answer. It sees only the task, so write it \
             completely. Several calls in one step run at the same time. Your sub-agents:\n",
        );
        for s in &subagents {
            description.push_str(&format!("- {}: {}\n", s.name, s.description));
        }
        Self {
            description: description.trim_end().to_owned(),
            subagents,
            runtime,
        }
    }

    /// The tool as a registry entry.
    pub fn into_tool(self) -> Arc<dyn jarvis_agent::Tool> {
        Arc::new(Typed::new(self))
    }
}

#[async_trait]
impl TypedTool for RunSubagentTool {
    type Args = RunSubagentArgs;

    fn name(&self) -> &str {
        RUN_SUBAGENT_TOOL
    }

    fn description(&self) -> &str {
        &self.description
    }

    async fn run(&self, args: RunSubagentArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let names = || {
            self.subagents
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let Some(spec) = self.subagents.iter().find(|s| s.name == args.name.trim()) else {
            return Ok(ToolResult::error(format!(
                "there is no sub-agent {:?}; yours are: {}",
                args.name,
                names()
            )));
        };
        if spec.path.len() > MAX_SUBAGENT_DEPTH + 1 {
            return Ok(ToolResult::error(format!(
                "sub-agents nest at most {MAX_SUBAGENT_DEPTH} deep; do the task yourself"
            )));
        }
        if args.task.trim().is_empty() {
            return Ok(ToolResult::error(
                "the task is empty; write what the sub-agent should do",
            ));
        }
        let Some(parent) = ctx.loop_context.clone() else {
            return Ok(ToolResult::error("sub-agents run only inside an agent's turn"));
        };
        self.run_one(spec, &parent, args.task, ctx).await
    }
}

impl RunSubagentTool {
    async fn run_one(
        &self,
        spec: &Arc<SubagentSpec>,
        parent: &LoopContext,
        task: String,
        ctx: &ToolContext,
    ) -> Result<ToolResult, ToolError> {
        let n = self.runtime.counter.fetch_add(1, Ordering::Relaxed) + 1;
        let session_id = SessionId::new(format!("sub-{n}"))
            .map_err(|e| ToolError::Failed(format!("sub-agent session: {e}")))?;
        let acting = parent.tool_identity().clone();
        let origin = SubOrigin {
            parent_session_id: SessionId::new(acting.session_id.as_str())
                .map_err(|e| ToolError::Failed(format!("sub-agent session: {e}")))?,
            parent_tool_call_id: ctx.tool_call_id.clone(),
            subagent: spec.id.clone(),
        };
        let recorded = self
            .runtime
            .store
            .get_or_create(
                NewSession::sub(session_id.clone(), acting.agent_id.clone(), origin).with_title(format!(
                    "{}: {}",
                    spec.id,
                    jarvis_common::truncate_chars(&task, 60)
                )),
            )
            .await;
        if let Err(error) = &recorded {
            tracing::warn!(%error, subagent = %spec.id, "the sub-agent's run could not be recorded");
        }

        let mut tools = ToolRegistry::new();
        let available = parent.tools.snapshot();
        for name in &spec.tools {
            if let Some(tool) = available.get(name) {
                let _ = tools.register(tool.clone());
            }
        }
        if !spec.subagents.is_empty() {
            let _ = tools
                .register(RunSubagentTool::new(spec.subagents.clone(), self.runtime.clone()).into_tool());
        }
        let mut allowed = spec.tools.clone();
        if !spec.subagents.is_empty() {
            allowed.push(RUN_SUBAGENT_TOOL.to_owned());
        }
        let gate = (*parent.gate)
            .clone()
            .narrowed(Arc::new(AgentToolPolicy::new(&spec.id, Some(allowed))));
        let memory = match &self.runtime.memory {
            Some((service, scope)) => match service.observe(scope, &task).await {
                Ok(context) => Some(Arc::new(context)),
                Err(error) => {
                    tracing::warn!(%error, subagent = %spec.id, "memory recall failed; the sub-agent runs without memory");
                    None
                }
            },
            None => None,
        };
        let child = LoopContext {
            provider: parent.provider.clone(),
            tools: Arc::new(tools),
            gate: Arc::new(gate),
            ui: Arc::new(Wrapped::new(
                parent.ui.clone(),
                ctx.tool_call_id.clone(),
                spec.path.clone(),
            )),
            model: ModelSettings {
                model: spec.model.clone().unwrap_or_else(|| parent.model.model.clone()),
                system_prompt: Some(spec.instructions.clone()),
                temperature: parent.model.temperature,
                max_tokens: parent.model.max_tokens,
            },
            identity: AgentIdentity {
                agent_id: spec.id.clone(),
                agent_name: spec.name.clone(),
                session_id: session_id.to_string(),
            },
            acting_for: Some(acting),
            ids: parent.ids.clone(),
            turn_instruction: None,
            extensions: parent.extensions.clone(),
            memory,
            turn_id: String::new(),
            recorder: None,
            // Spends from the parent turn's allowance, and adds to its total.
            usage: parent.usage.as_ref().map(|tally| tally.child(Vec::new())),
            // The run is one tool call of the parent's turn: a cassette
            // holds its result, not its inner calls.
            tap: None,
        };
        let config = AgentLoopConfig {
            max_turns: spec.max_turns,
            ..AgentLoopConfig::default()
        };
        let prompt = Message::user(task);
        // The sub-agent's run is an `invoke_agent` span of its own, a child
        // of the `execute_tool` span of the call that started it.
        let span = invoke_agent_span(&spec.id, &spec.name, session_id.as_str());
        let outcome = run_agent_loop(&child, &config, vec![prompt.clone()], &ctx.cancel)
            .instrument(span.clone())
            .await
            .map_err(|e| ToolError::Failed(e.to_string()))?;
        trace::record_usage(
            &span,
            outcome.usage_total.input_tokens,
            outcome.usage_total.output_tokens,
        );
        let turn_id = parent.ids.next_id("turn_");
        if let Some(meter) = self.runtime.usage.as_ref().filter(|_| outcome.turns > 0) {
            meter.record_turn(
                session_id.as_str(),
                &spec.id,
                &turn_id,
                &child.model.model,
                &outcome.final_message.usage,
            );
        }
        if recorded.is_ok() {
            let mut entries = vec![EntryBody::turn_start(turn_id), EntryBody::message(prompt)];
            entries.extend(outcome.new_messages.iter().cloned().map(EntryBody::message));
            entries.push(EntryBody::TurnEnd {
                stop_reason: outcome.final_message.stop_reason,
                turns: outcome.turns,
                overflows: outcome.overflows,
            });
            if let Err(error) = self.runtime.store.append(&session_id, entries).await {
                tracing::warn!(%error, subagent = %spec.id, "the sub-agent's run could not be recorded");
            }
        }
        let answer = outcome.final_message.content;
        match outcome.final_message.stop_reason {
            StopReason::Aborted => Err(ToolError::Cancelled),
            StopReason::Error => Ok(ToolResult::error(format!(
                "sub-agent {} failed: {}",
                spec.name,
                outcome
                    .error
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| "the model failed".into())
            ))),
            _ if answer.trim().is_empty() => Ok(ToolResult::error(format!(
                "sub-agent {} gave no answer",
                spec.name
            ))),
            _ => Ok(ToolResult::ok(answer)),
        }
    }
}

/// A sub-agent's events on their way to the parent's screens: each wrapped
/// once in `subagent_event`; events already wrapped (a deeper sub-agent's,
/// whose path is whole) pass as they are.
///
/// A run whose future is dropped (the parent's turn was aborted and stopped
/// waiting for the tool) never reaches its own `agent_end`; the wrapper
/// sends one, `aborted`, when it goes, so every `agent_start` has its
/// `agent_end` at every depth.
struct Wrapped {
    parent: Arc<dyn UIAdapter>,
    parent_tool_call_id: String,
    agent_path: Vec<String>,
    /// Between the run's `agent_start` and its `agent_end`.
    open: std::sync::atomic::AtomicBool,
}

impl Wrapped {
    fn new(parent: Arc<dyn UIAdapter>, parent_tool_call_id: String, agent_path: Vec<String>) -> Self {
        Self {
            parent,
            parent_tool_call_id,
            agent_path,
            open: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn forward(&self, event: &AgentEvent) -> ControlFlow<()> {
        self.parent.on_event(&AgentEvent::SubagentEvent {
            parent_tool_call_id: self.parent_tool_call_id.clone(),
            agent_path: self.agent_path.clone(),
            event: Box::new(event.clone()),
        })
    }
}

impl UIAdapter for Wrapped {
    fn on_event(&self, event: &AgentEvent) -> ControlFlow<()> {
        match event {
            AgentEvent::SubagentEvent { .. } => return self.parent.on_event(event),
            AgentEvent::AgentStart { .. } => self.open.store(true, Ordering::SeqCst),
            AgentEvent::AgentEnd { .. } => self.open.store(false, Ordering::SeqCst),
            _ => {}
        }
        self.forward(event)
    }
}

impl Drop for Wrapped {
    fn drop(&mut self) {
        if self.open.swap(false, Ordering::SeqCst) {
            let _ = self.forward(&AgentEvent::AgentEnd {
                final_message: jarvis_agent::FinalMessage {
                    role: jarvis_model::Role::Assistant,
                    content: String::new(),
                    stop_reason: StopReason::Aborted,
                    usage: jarvis_model::Usage::default(),
                },
                turns: 0,
                overflows: 0,
                usage_total: jarvis_agent::UsageTotal::default(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(yaml: &str) -> Vec<SubagentDefinition> {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn the_builder_checks_names_tools_turns_and_depth() {
        let parent = vec![
            "read_file".to_owned(),
            "list_dir".to_owned(),
            "ask_agent".to_owned(),
        ];
        let b = SubagentBuilder::new("main", &parent);
        let ok = b
            .build(&def(
                "- {name: researcher, tools: [read_file], subagents: [{name: deep, tools: [read_file]}]}",
            ))
            .unwrap();
        assert_eq!(ok[0].id, "main.researcher");
        assert_eq!(ok[0].max_turns, DEFAULT_SUBAGENT_MAX_TURNS);
        assert_eq!(ok[0].subagents[0].id, "main.researcher.deep");
        assert_eq!(ok[0].subagents[0].path, ["main", "researcher", "deep"]);
        for (yaml, wrong) in [
            ("- {name: 'a b'}", "name"),
            ("- {name: a}\n- {name: a}", "twice"),
            ("- {name: a, tools: [write_file]}", "subset"),
            ("- {name: a, tools: [ask_agent]}", "not for sub-agents"),
            ("- {name: a, max_turns: 0}", "max_turns"),
            (
                "- {name: a, tools: [read_file], subagents: [{name: b, tools: [read_file], subagents: [{name: c}]}]}",
                "at most 2 deep",
            ),
            (
                "- {name: a, tools: [read_file], subagents: [{name: b, tools: [list_dir]}]}",
                "subset",
            ),
        ] {
            let error = b.build(&def(yaml)).unwrap_err();
            assert!(error.contains(wrong), "{yaml}: {error}");
        }
        assert!(serde_yaml::from_str::<Vec<SubagentDefinition>>("- {name: a, colour: red}").is_err());
    }

    #[test]
    fn sub_session_numbers_continue_after_the_highest() {
        assert_eq!(last_sub_number(["default-main", "sub-3", "sub-12", "sub-x"]), 12);
        assert_eq!(last_sub_number(["peer-main-karen"]), 0);
    }
}
