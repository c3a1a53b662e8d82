//! Whose memory a turn reads and writes: [`MemoryScope`] and the
//! definition's [`MemoryRead`] (R-MEM-7..10, R-MEM-12).
//!
//! The rules are documented on [`MemoryScope`].

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt::Debug;

use super::error::MemoryError;
use super::record::{Agents, Layer};

/// The user of a single-user installation.
pub const DEFAULT_USER: &str = "default";

/// The word in `memory.read` that means the agent itself.
pub const READ_SELF: &str = "self";

/// An agent definition's `memory.read`: per layer, the other agents whose
/// memory this agent reads as well. Empty lists mean its own memory only.
///
/// Deserialising refuses unknown keys, so a definition file with one can be
/// skipped as R-MEM-10 asks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryRead {
    /// Agents whose episodic memory is read too.
    #[serde(default)]
    pub edm: Vec<String>,
    /// Agents whose procedural memory is read too.
    #[serde(default)]
    pub pdm: Vec<String>,
}

impl MemoryRead {
    /// Own memory only.
    pub fn own_only() -> Self {
        Self::default()
    }

    /// Reads the episodic memory of `agents` as well.
    pub fn with_edm<I, S>(mut self, agents: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.edm = agents.into_iter().map(Into::into).collect();
        self
    }

    /// Reads the procedural memory of `agents` as well.
    pub fn with_pdm<I, S>(mut self, agents: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.pdm = agents.into_iter().map(Into::into).collect();
        self
    }

    /// The names in `edm` and `pdm` that are neither `self` nor known to
    /// `is_known`, each once, in order.
    pub fn unknown_agents(&self, is_known: impl Fn(&str) -> bool) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for name in self.edm.iter().chain(&self.pdm) {
            if name != READ_SELF && !is_known(name) && !out.contains(name) {
                out.push(name.clone());
            }
        }
        out
    }

    /// Fails with [`MemoryError::UnknownAgents`] when `agent_id`'s list
    /// names an agent `is_known` does not know.
    pub fn check(&self, agent_id: &str, is_known: impl Fn(&str) -> bool) -> Result<(), MemoryError> {
        let unknown = self.unknown_agents(is_known);
        if unknown.is_empty() {
            Ok(())
        } else {
            Err(MemoryError::UnknownAgents {
                agent_id: agent_id.to_owned(),
                unknown: unknown.join(", "),
            })
        }
    }

    /// The lists without unknown agents, each dropped with a warning naming
    /// it; for callers that load a definition despite such entries.
    pub fn without_unknown(mut self, agent_id: &str, is_known: impl Fn(&str) -> bool) -> Self {
        for name in self.unknown_agents(&is_known) {
            tracing::warn!(
                agent_id,
                "memory: memory.read of agent {agent_id:?} names {name:?}, which is not a defined agent; ignored"
            );
        }
        let keep = |name: &String| name == READ_SELF || is_known(name);
        self.edm.retain(keep);
        self.pdm.retain(keep);
        self
    }
}

/// Whose memory one turn reads and writes.
///
/// | layer | read from | written to |
/// |---|---|---|
/// | semantic (user profile, user model) | every agent of the scope's user | the user (the writing agent kept as provenance) |
/// | episodic (EDM) | the scope's agent, plus the agents in `memory.read.edm` | the scope's agent |
/// | procedural (PDM) | the scope's agent, plus the agents in `memory.read.pdm` | the scope's agent |
///
/// The scope's `agent_id` is the session's agent (R-MEM-8). In a peer
/// session (`peer-<caller>-<callee>`) the callee answers with the caller's
/// `user` and its own `agent_id` and `memory.read`
/// ([`MemoryScope::for_peer`], R-MEM-12): it sees the same user profile as
/// the caller, and what it writes stays in the callee's scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryScope {
    /// The user; the user profile and user model are this user's.
    pub user: String,
    /// The session's agent: episodes and procedures are written here.
    pub agent_id: String,
    /// The session (working memory and turn episodes are per session).
    pub session_id: String,
    /// Other agents whose episodic and procedural memory is read as well.
    pub read: MemoryRead,
}

impl MemoryScope {
    /// The scope of `agent_id`'s session `session_id` for `user`, reading
    /// the agent's own memory only.
    pub fn new(user: impl Into<String>, agent_id: impl Into<String>, session_id: impl Into<String>) -> Self {
        Self {
            user: user.into(),
            agent_id: agent_id.into(),
            session_id: session_id.into(),
            read: MemoryRead::default(),
        }
    }

    /// Sets what else the agent reads.
    pub fn with_read(mut self, read: MemoryRead) -> Self {
        self.read = read;
        self
    }

    /// The callee's scope in a peer session (R-MEM-12): the user comes from
    /// `caller`, the agent, its `memory.read` and the session are the
    /// callee's.
    pub fn for_peer(
        caller: &MemoryScope,
        callee_agent: impl Into<String>,
        callee_read: MemoryRead,
        peer_session_id: impl Into<String>,
    ) -> Self {
        Self {
            user: caller.user.clone(),
            agent_id: callee_agent.into(),
            session_id: peer_session_id.into(),
            read: callee_read,
        }
    }

    fn with_self(&self, extra: &[String]) -> Vec<String> {
        let mut out = vec![self.agent_id.clone()];
        for name in extra {
            let name = if name == READ_SELF { &self.agent_id } else { name };
            if !out.contains(name) {
                out.push(name.clone());
            }
        }
        out
    }

    /// The agents whose records of `layer` this scope reads: any agent's
    /// for the user profile, its own plus `memory.read`'s for the others.
    pub fn readable(&self, layer: Layer) -> Agents {
        match layer {
            Layer::Semantic => Agents::Any,
            Layer::Episodic => Agents::Only(self.with_self(&self.read.edm)),
            Layer::Procedural => Agents::Only(self.with_self(&self.read.pdm)),
        }
    }
}

/// Gives the memory scope of a tool call from its agent and session; the
/// assembly layer provides one that knows the users and the definitions'
/// `memory.read`.
pub trait ScopeResolver: Send + Sync + Debug {
    /// The scope of `agent_id`'s session `session_id`, or `None` when the
    /// agent has no memory.
    fn scope(&self, agent_id: &str, session_id: &str) -> Option<MemoryScope>;
}

/// A [`ScopeResolver`] for one user: every agent's scope has that user and
/// the agent's `memory.read` from a table (own memory only when absent).
///
/// In a peer session the callee's tools then get the same user as the
/// caller, as R-MEM-12 asks, because there is only one.
#[derive(Debug, Clone, Default)]
pub struct StaticScopes {
    user: String,
    reads: HashMap<String, MemoryRead>,
}

impl StaticScopes {
    /// Scopes of `user`, every agent reading its own memory only.
    pub fn new(user: impl Into<String>) -> Self {
        Self {
            user: user.into(),
            reads: HashMap::new(),
        }
    }

    /// Sets `agent_id`'s `memory.read`.
    pub fn with_read(mut self, agent_id: impl Into<String>, read: MemoryRead) -> Self {
        self.reads.insert(agent_id.into(), read);
        self
    }
}

impl ScopeResolver for StaticScopes {
    fn scope(&self, agent_id: &str, session_id: &str) -> Option<MemoryScope> {
        Some(
            MemoryScope::new(self.user.clone(), agent_id, session_id)
                .with_read(self.reads.get(agent_id).cloned().unwrap_or_default()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_and_duplicates_collapse_into_the_agent() {
        let scope = MemoryScope::new("u", "karen", "s")
            .with_read(MemoryRead::own_only().with_edm(["self", "main", "main"]));
        assert_eq!(scope.readable(Layer::Episodic), Agents::only(["karen", "main"]));
        assert_eq!(scope.readable(Layer::Procedural), Agents::only(["karen"]));
        assert_eq!(scope.readable(Layer::Semantic), Agents::Any);
    }

    #[test]
    fn unknown_keys_and_agents_are_reported() {
        let bad: Result<MemoryRead, _> = serde_yaml::from_str("{edm: [main], xdm: [karen]}");
        assert!(bad.is_err());
        let read: MemoryRead = serde_yaml::from_str("{edm: [main, ghost], pdm: [self]}").unwrap();
        let known = |a: &str| a == "main" || a == "karen";
        assert_eq!(read.unknown_agents(known), ["ghost"]);
        let err = read.check("karen", known).unwrap_err().to_string();
        assert!(err.contains("\"karen\"") && err.contains("ghost"), "{err}");
        let cleaned = read.without_unknown("karen", known);
        assert_eq!(cleaned.edm, ["main"]);
        assert_eq!(cleaned.pdm, ["self"]);
    }

    #[test]
    fn a_peer_scope_takes_the_callers_user() {
        let caller = MemoryScope::new("alice", "main", "default-main");
        let peer = MemoryScope::for_peer(&caller, "karen", MemoryRead::default(), "peer-main-karen");
        assert_eq!(
            (
                peer.user.as_str(),
                peer.agent_id.as_str(),
                peer.session_id.as_str()
            ),
            ("alice", "karen", "peer-main-karen")
        );
    }
}
