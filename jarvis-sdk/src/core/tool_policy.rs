//! [`AgentToolPolicy`]: the first stage of the tool gate, the per-agent
//! allow-list and the `never` list of an agent's `boundaries`; and
//! [`AGENT_ONLY_TOOLS`], the tools only agents that list them are given.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

use crate::agent::{GateDecision, ToolCallInfo, ToolPolicy};

/// The agent-only tools: visible only to agents that list them (R-DEF-7,
/// SPEC.md §17.3 #5), never part of the "whole registry" default, so
/// JARVIS has none of them: KAREN's housing tools
/// ([`HOUSING_TOOLS`](crate::core::HOUSING_TOOLS)) and `web_fetch`, which
/// reaches any page on the web.
pub const AGENT_ONLY_TOOLS: [&str; 7] = [
    "lh_notice",
    "sh_notice",
    "housing_loan",
    "housing_budget",
    "housing_profile",
    "housing_watch",
    super::tools::WEB_FETCH_TOOL,
];

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
    never: BTreeSet<String>,
}

impl AgentToolPolicy {
    /// A policy for `agent_id` allowing `allowed` (`None`: any tool).
    pub fn new(agent_id: impl Into<String>, allowed: Option<impl IntoIterator<Item = String>>) -> Self {
        Self {
            agent_id: agent_id.into(),
            allowed: allowed.map(|a| a.into_iter().collect()),
            never: BTreeSet::new(),
        }
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
            Some(allowed) if !allowed.contains(call.tool_name) => GateDecision::Deny(format!(
                "{} is not one of agent {}'s tools",
                call.tool_name, self.agent_id
            )),
            _ => GateDecision::Allow,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_only_tools_are_the_housing_tools_and_web_fetch() {
        assert_eq!(AGENT_ONLY_TOOLS[..6], crate::core::HOUSING_TOOLS);
        assert_eq!(AGENT_ONLY_TOOLS[6], "web_fetch");
    }
}
