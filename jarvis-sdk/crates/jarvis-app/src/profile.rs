//! [`AgentProfile`]: one agent's worth of settings (R-ASM-3), plus its
//! feedback learner.

use serde::{Deserialize, Serialize};
use std::sync::Arc;

use jarvis_initiative::FeedbackLearner;
use jarvis_memory::MemoryRead;
use jarvis_turn::{Boundaries, SandboxSettings};

/// The id of JARVIS, the lead agent.
pub const MAIN_AGENT: &str = "main";

/// An agent's colours (`palette.primary` is its main colour, R-HUD-1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Palette {
    /// The main colour, `#rrggbb`.
    pub primary: String,
    /// The accent colour, `#rrggbb`.
    pub accent: String,
}

/// Thinking settings; definition files do not expose them yet, so every
/// agent shares JARVIS's (SPEC.md §17.3 #2).
///
/// With thinking on and memory on, the engine also learns after turns:
/// failure reflection and procedure learning (R-LOOP-17) and user-model
/// distillation (R-MEM-6). With thinking off none of them runs after turns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ThinkingSettings {
    /// Whether the Thought Router and the inner thought engine run before
    /// turns, and the learners after them (`JARVIS_THINKING__ENABLED`;
    /// default off: thinking costs a model call whenever the router says
    /// think).
    pub enabled: bool,
    /// The router's threshold (`JARVIS_THINKING__THRESHOLD`, default 0.5).
    pub threshold: f32,
    /// Overflowed turns of one kind of task (since its procedure was last
    /// written) after which reflection rewrites the procedure into smaller
    /// steps (`JARVIS_THINKING__REFLECT_AFTER`, default 3; 0 turns failure
    /// reflection off).
    pub reflect_after: usize,
    /// Whether a successful turn with two or more tool calls may teach the
    /// agent a procedure for a kind of task it has none for
    /// (`JARVIS_THINKING__LEARN_PROCEDURES`, default on).
    pub learn_procedures: bool,
    /// Distil facts about the person into the user model every this many
    /// finished turns of an agent (`JARVIS_THINKING__DISTIL_EVERY`, default
    /// 10; 0: only on demand).
    pub distil_every: usize,
}

impl Default for ThinkingSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            threshold: jarvis_agent::DEFAULT_THINK_THRESHOLD,
            reflect_after: 3,
            learn_procedures: true,
            distil_every: 10,
        }
    }
}

/// Everything that can differ between agents (R-ASM-3, R-TEAM-2).
#[derive(Debug, Clone)]
pub struct AgentProfile {
    /// The id (`main`, or the definition file's name).
    pub id: String,
    /// The wordmark and the name other agents use (`K.A.R.E.N.`).
    pub name: String,
    /// What the agent does; other agents read it to choose whom to ask.
    pub description: String,
    /// The quote line under the wordmark.
    pub quote: String,
    /// The colours.
    pub palette: Palette,
    /// The system prompt.
    pub system_prompt: String,
    /// The model name (provider and key are JARVIS's, R-MODEL-7).
    pub model: String,
    /// The most output tokens per answer (`None`: `JARVIS_LLM__MAX_TOKENS`,
    /// else the provider's default).
    pub max_tokens: Option<u32>,
    /// The sampling temperature (`None`: `JARVIS_LLM__TEMPERATURE`, else the
    /// provider's default).
    pub temperature: Option<f32>,
    /// The tools the agent may call (resolved: the listed ones, or the app
    /// registry without agent-only tools, plus the tools every agent gets).
    pub tools: Vec<String>,
    /// Which MCP tools the agent gets, of the servers serving it: `None`
    /// (its definition lists no tools) every one; otherwise the names
    /// `<server>__<tool>` and globs `<server>__*` its `tools` lists.
    pub mcp_tools: Option<Vec<String>>,
    /// The MCP servers its definition declares (its `mcp`); they serve
    /// this agent only.
    pub mcp_servers: Vec<jarvis_turn::McpServerConfig>,
    /// Whether the agent speaks first and reflects.
    pub proactive: bool,
    /// Whose memory it reads besides its own.
    pub memory_read: MemoryRead,
    /// Tools that always ask, and tools that are refused.
    pub boundaries: Boundaries,
    /// What its programs (`run_command`, `run_python`) may reach beyond the
    /// session's sandbox: a definition's `sandbox:`, or
    /// `JARVIS_SANDBOX__*` for JARVIS. Not inherited: each agent is
    /// widened on its own.
    pub sandbox: SandboxSettings,
    /// Thinking settings (shared from JARVIS).
    pub thinking: ThinkingSettings,
    /// The agent's own feedback learner.
    pub feedback: Arc<dyn FeedbackLearner>,
    /// Its sub-agents (`subagents:`), run through `run_subagent`.
    pub subagents: Vec<Arc<super::SubagentSpec>>,
    /// Its limits per turn, session and day (`budget:`, each unset one
    /// from `JARVIS_BUDGET__*`).
    pub budget: jarvis_agent::Budget,
}

impl AgentProfile {
    /// Whether the agent may call `tool`.
    pub fn has_tool(&self, tool: &str) -> bool {
        self.tools.iter().any(|t| t == tool)
    }
}

/// The wordmark for an id without a name: `karen` → `K.A.R.E.N.`.
pub fn wordmark(id: &str) -> String {
    id.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| format!("{}.", c.to_ascii_uppercase()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wordmarks() {
        assert_eq!(wordmark("karen"), "K.A.R.E.N.");
        assert_eq!(wordmark("a_b-2"), "A.B.2.");
    }
}
