//! [`AgentRegistry`]: JARVIS plus one agent per team definition file
//! (R-ASM-6), in a fixed order: `main` first, then by file name.

use std::sync::Arc;

use super::definition::Skipped;
use super::profile::{AgentProfile, MAIN_AGENT};
use jarvis_turn::RosterEntry;

/// The team.
#[derive(Debug, Clone)]
pub struct AgentRegistry {
    agents: Vec<Arc<AgentProfile>>,
    skipped: Vec<Skipped>,
}

impl AgentRegistry {
    /// A registry of `main` and `others` (which must not contain `main`).
    /// With fewer than two agents, `ask_agent` is taken away (R-TEAM-6);
    /// agents a `memory.read` names that the team does not have are dropped
    /// from it with a warning.
    pub fn new(main: AgentProfile, others: Vec<AgentProfile>, skipped: Vec<Skipped>) -> Self {
        let mut agents: Vec<AgentProfile> = std::iter::once(main)
            .chain(others.into_iter().filter(|p| p.id != MAIN_AGENT))
            .collect();
        if agents.len() < 2 {
            for agent in &mut agents {
                agent.tools.retain(|t| t != "ask_agent");
            }
        }
        let known: Vec<String> = agents.iter().map(|a| a.id.clone()).collect();
        let is_known = |a: &str| known.iter().any(|k| k == a);
        for agent in &mut agents {
            agent.memory_read = agent.memory_read.clone().without_unknown(&agent.id, is_known);
        }
        Self {
            agents: agents.into_iter().map(Arc::new).collect(),
            skipped,
        }
    }

    /// The agent `id`.
    pub fn get(&self, id: &str) -> Option<&Arc<AgentProfile>> {
        self.agents.iter().find(|a| a.id == id)
    }

    /// Whether `id` is an agent of the team.
    pub fn contains(&self, id: &str) -> bool {
        self.get(id).is_some()
    }

    /// JARVIS.
    pub fn main(&self) -> &Arc<AgentProfile> {
        &self.agents[0]
    }

    /// Every agent, `main` first, then by file name.
    pub fn agents(&self) -> &[Arc<AgentProfile>] {
        &self.agents
    }

    /// Agent ids in order.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.agents.iter().map(|a| a.id.as_str())
    }

    /// Definition files that were not loaded, with reasons.
    pub fn skipped(&self) -> &[Skipped] {
        &self.skipped
    }

    /// The roster `ask_agent` shows; JARVIS is "팀 총괄" (R-ASK-2).
    pub fn roster(&self) -> Vec<RosterEntry> {
        self.agents
            .iter()
            .map(|a| RosterEntry {
                id: a.id.clone(),
                name: a.name.clone(),
                description: if a.id == MAIN_AGENT {
                    "팀 총괄 (team lead)".to_owned()
                } else {
                    a.description.clone()
                },
            })
            .collect()
    }
}
