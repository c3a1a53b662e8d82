//! [`AgentToolPolicy`]: the first stage of the tool gate, the per-agent
//! allow-list and the `never` list of an agent's `boundaries`; MCP tools
//! (`<server>__<tool>`) pass by the agent's MCP patterns
//! ([`AgentToolPolicy::with_mcp_tools`]), since servers list them later.
//! Which tools only agents that list them are given is each tool's own
//! [`Tool::agent_only`](jarvis_agent::Tool::agent_only).

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

use super::mcp::{SEPARATOR, pattern_matches};
use jarvis_agent::{GateDecision, ToolCallInfo, ToolPolicy};

/// The `boundaries` of an agent definition: `ask` tools always need a
/// person's approval; `never` tools are refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Boundaries {
    /// Tools that always ask, whatever the approval rules say.
    #[serde(default)]
    pub ask: Vec<String>,
    /// Tools that are always refused.
    #[serde(default)]
    pub never: Vec<String>,
}

/// Allows an agent's own tools (all, when no list is given) minus its
/// `never` tools.
#[derive(Debug, Clone)]
pub struct AgentToolPolicy {
    agent_id: String,
    allowed: Option<BTreeSet<String>>,
    /// MCP tools allowed besides `allowed`: `None` none, `Some(None)` every
    /// one, `Some(Some(patterns))` those the patterns name.
    mcp: Option<Option<Vec<String>>>,
    never: BTreeSet<String>,
}

impl AgentToolPolicy {
    /// A policy for `agent_id` allowing `allowed` (`None`: any tool).
    pub fn new(agent_id: impl Into<String>, allowed: Option<impl IntoIterator<Item = String>>) -> Self {
        Self {
            agent_id: agent_id.into(),
            allowed: allowed.map(|a| a.into_iter().collect()),
            mcp: None,
            never: BTreeSet::new(),
        }
    }

    /// Also allows the MCP tools `patterns` names (`<server>__<tool>`,
    /// `<server>__*`; `None`: every MCP tool). Which servers serve the
    /// agent decides which of them it is offered.
    pub fn with_mcp_tools(mut self, patterns: Option<Vec<String>>) -> Self {
        self.mcp = Some(patterns);
        self
    }

    fn mcp_allows(&self, tool: &str) -> bool {
        let Some(patterns) = &self.mcp else {
            return false;
        };
        let Some((server, _)) = tool.split_once(SEPARATOR) else {
            return false;
        };
        patterns
            .as_ref()
            .is_none_or(|p| p.iter().any(|p| pattern_matches(p, server, tool)))
    }

    /// Adds the `never` list of `boundaries`.
    pub fn with_boundaries(mut self, boundaries: &Boundaries) -> Self {
        self.never.extend(boundaries.never.iter().cloned());
        self
    }
}

impl ToolPolicy for AgentToolPolicy {
    fn check(&self, call: &ToolCallInfo<'_>) -> GateDecision {
        if self.never.contains(call.tool_name) {
            return GateDecision::Deny(format!(
                "{} is never allowed for agent {}",
                call.tool_name, self.agent_id
            ));
        }
        match &self.allowed {
            Some(allowed) if !allowed.contains(call.tool_name) && !self.mcp_allows(call.tool_name) => {
                GateDecision::Deny(format!(
                    "{} is not one of agent {}'s tools",
                    call.tool_name, self.agent_id
                ))
            }
            _ => GateDecision::Allow,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(policy: &AgentToolPolicy, tool: &str) -> GateDecision {
        let args = json!({});
        policy.check(&ToolCallInfo::new("s", "karen", "c", tool, &args, false))
    }

    #[test]
    fn mcp_tools_pass_by_pattern_and_never_still_refuses() {
        let listed = || Some(vec!["read_file".to_owned()]);
        let plain = AgentToolPolicy::new("karen", listed());
        assert!(matches!(check(&plain, "time__now"), GateDecision::Deny(_)));
        let all = AgentToolPolicy::new("karen", listed()).with_mcp_tools(None);
        assert_eq!(check(&all, "time__now"), GateDecision::Allow);
        assert!(
            matches!(check(&all, "write_file"), GateDecision::Deny(_)),
            "only MCP names widen"
        );
        let some = AgentToolPolicy::new("karen", listed())
            .with_mcp_tools(Some(vec!["time__*".into(), "fs__read".into()]))
            .with_boundaries(&Boundaries {
                ask: vec![],
                never: vec!["time__set".into()],
            });
        assert_eq!(check(&some, "time__now"), GateDecision::Allow);
        assert_eq!(check(&some, "fs__read"), GateDecision::Allow);
        assert!(matches!(check(&some, "fs__write"), GateDecision::Deny(_)));
        let GateDecision::Deny(reason) = check(&some, "time__set") else {
            panic!("never wins")
        };
        assert!(reason.contains("never allowed"));
    }
}
