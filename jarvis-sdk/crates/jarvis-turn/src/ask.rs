//! `ask_agent`: one top-level agent delegating a task to another
//! (SPEC.md §12), with the anti-deferral rules enforced in code, not left to
//! the model (§12.5):
//!
//! - **depth**: a chain of at most three agents (A → B → A, or A → B → C);
//!   a fourth hop is refused with an instruction to answer with what the
//!   agent knows (§17.3 #10);
//! - **bounce-back**: a request to the agent that sent the request being
//!   worked on is refused when it is that request again: equal, contained in
//!   it or containing it, or with character-bigram Jaccard similarity ≥ 0.4,
//!   compared after NFC, lower-casing and whitespace removal, with
//!   [`PEER_REQUEST_RULE`] stripped. A different question (a clarifying
//!   one) passes;
//! - **busy**: a pair already working on a request answers with an error
//!   containing "다른 일을 하고 있다";
//! - **timeout**: no answer within the timeout (300 s by default) is an error.
//!
//! Running the callee's turn (its peer session `peer-<caller>-<callee>`,
//! approvals on the caller's screens, memory scopes) is the
//! [`AgentDirectory`]'s job, which the assembly layer implements.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;
use unicode_normalization::UnicodeNormalization;

use jarvis_agent::{ToolContext, ToolError, ToolResult, TypedTool, UsageTally};
pub use jarvis_common::bigram_jaccard;

/// The rule line appended, unrecorded, to every model call of a delegated
/// turn (R-ASK-7).
pub const PEER_REQUEST_RULE: &str = "[위임된 요청] 다른 에이전트가 맡긴 일이다: 필요하면 먼저 자기 도구를 부르고, \
도구 결과에 있는 것만으로 답하라. (A delegated task: call your own tools first if needed, and answer only with \
what the tool results say.)";

/// The default time a delegation may take (R-ASK-13).
pub const DEFAULT_ASK_TIMEOUT: Duration = Duration::from_secs(300);

/// The most agents in one delegation chain (A → B → A or A → B → C).
pub const MAX_CHAIN: usize = 3;

/// One agent of the team, as the roster in the tool description shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RosterEntry {
    /// The id the tool is called with.
    pub id: String,
    /// The display name.
    pub name: String,
    /// What the agent does (JARVIS: "팀 총괄").
    pub description: String,
}

/// Where a delegated turn stands: the agents so far and the request this
/// agent is working on. Travels in the turn's [`Extensions`](jarvis_common::Extensions).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DelegationChain {
    /// The agents of the chain, the first caller first, the current agent last.
    pub agents: Vec<String>,
    /// The request the current agent received, and from whom.
    pub received: Option<(String, String)>,
    /// The session where a person started the chain: approvals of every
    /// leg go to its screens, also on the way back (A → B → A).
    pub origin_session: String,
}

/// A delegation the directory is asked to run.
#[derive(Debug, Clone)]
pub struct Delegation {
    /// The calling agent.
    pub caller: String,
    /// The session the caller is in.
    pub caller_session: String,
    /// The caller's turn (the delegated turn's parent in the journal;
    /// empty when the caller's turn has no id).
    pub caller_turn: String,
    /// The agent asked.
    pub callee: String,
    /// What is asked.
    pub request: String,
    /// The chain the callee's turn runs in (ends with the callee).
    pub chain: DelegationChain,
    /// The caller's turn tally: the callee spends from what it has left
    /// and adds to its total.
    pub usage: Option<Arc<UsageTally>>,
}

/// Why a delegation produced no answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DelegationError {
    /// The pair is already working on a request.
    #[error(
        "{callee} is busy: 다른 일을 하고 있다 ({callee} is doing something else for {caller}); try again later"
    )]
    Busy {
        /// The caller.
        caller: String,
        /// The callee.
        callee: String,
    },
    /// There is no such agent.
    #[error("there is no agent {0:?} in this team")]
    UnknownAgent(String),
    /// The callee's turn failed.
    #[error("{callee} could not answer: {message}")]
    Failed {
        /// The callee.
        callee: String,
        /// Why.
        message: String,
    },
}

/// Runs delegated turns; implemented by the assembly layer.
#[async_trait]
pub trait AgentDirectory: Send + Sync {
    /// The team, JARVIS first.
    fn roster(&self) -> Vec<RosterEntry>;
    /// Runs the callee's turn in the pair's peer session and returns its answer.
    async fn delegate(&self, delegation: Delegation) -> Result<String, DelegationError>;
}

/// A late-bound link from the tool to its directory (the directory owns the
/// tools, so it is filled in after assembly and held weakly).
#[derive(Clone, Default)]
pub struct DirectoryLink(Arc<OnceLock<Weak<dyn AgentDirectory>>>);

impl fmt::Debug for DirectoryLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirectoryLink")
            .field("set", &self.0.get().is_some())
            .finish()
    }
}

impl DirectoryLink {
    /// An empty link.
    pub fn new() -> Self {
        Self::default()
    }

    /// Connects the directory; later calls are ignored.
    pub fn connect(&self, directory: Weak<dyn AgentDirectory>) {
        let _ = self.0.set(directory);
    }

    fn get(&self) -> Option<Arc<dyn AgentDirectory>> {
        self.0.get().and_then(Weak::upgrade)
    }
}

/// Arguments of `ask_agent`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct AskAgentArgs {
    /// The id of the agent to ask (see the roster).
    pub agent: String,
    /// The task or question, complete enough to be answered without this conversation.
    pub request: String,
}

/// The `ask_agent` tool; see the module docs.
#[derive(Debug)]
pub struct AskAgentTool {
    link: DirectoryLink,
    description: String,
    agents: BTreeSet<String>,
    timeout: Duration,
}

impl AskAgentTool {
    /// A tool over `link` for a team with `roster` (the description lists it).
    pub fn new(link: DirectoryLink, roster: &[RosterEntry]) -> Self {
        let mut description = String::from(
            "Ask another agent of the team to do a task or answer a question, and get its answer. \
             Write a complete request. The team:\n",
        );
        for entry in roster {
            description.push_str(&format!(
                "- {} ({}): {}\n",
                entry.id, entry.name, entry.description
            ));
        }
        Self {
            link,
            description: description.trim_end().to_owned(),
            agents: roster.iter().map(|e| e.id.clone()).collect(),
            timeout: DEFAULT_ASK_TIMEOUT,
        }
    }

    /// Sets how long a delegation may take.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

#[async_trait]
impl TypedTool for AskAgentTool {
    type Args = AskAgentArgs;

    fn name(&self) -> &str {
        "ask_agent"
    }

    fn description(&self) -> &str {
        &self.description
    }

    async fn run(&self, args: AskAgentArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let caller = ctx.agent_id.clone();
        let callee = args.agent.trim().to_owned();
        if !self.agents.contains(&callee) {
            return Ok(ToolResult::error(format!(
                "there is no agent {callee:?}; the team is: {}",
                self.agents.iter().cloned().collect::<Vec<_>>().join(", ")
            )));
        }
        if callee == caller {
            return Ok(ToolResult::error(
                "you cannot delegate to yourself; do the task or answer directly",
            ));
        }
        if args.request.trim().is_empty() {
            return Ok(ToolResult::error(
                "the request is empty; write what the agent should do",
            ));
        }
        let current = ctx
            .extensions
            .get::<DelegationChain>()
            .cloned()
            .unwrap_or(DelegationChain {
                agents: vec![caller.clone()],
                received: None,
                origin_session: ctx.session_id.clone(),
            });
        if current.agents.len() >= MAX_CHAIN {
            return Ok(ToolResult::error(format!(
                "위임은 세 에이전트까지만 된다: {} 다음으로는 더 맡길 수 없다. 지금 아는 것으로 답하라. \
                 (Delegation goes at most three agents deep; answer with what you know now.)",
                current.agents.join(" → ")
            )));
        }
        if let Some((from, received)) = &current.received
            && *from == callee
            && is_bounce(&args.request, received)
        {
            return Ok(ToolResult::error(format!(
                "{callee}가 맡긴 일을 {callee}에게 되돌릴 수 없다. 직접 하거나 지금 아는 것으로 답하라. \
                     (This is the task {callee} gave you: do it yourself or answer with what you know. \
                     A different question, such as a clarifying one, may be asked.)"
            )));
        }
        let Some(directory) = self.link.get() else {
            return Ok(ToolResult::error("delegation is not available in this setup"));
        };
        let mut agents = current.agents.clone();
        agents.push(callee.clone());
        let delegation = Delegation {
            caller: caller.clone(),
            caller_session: ctx.session_id.clone(),
            caller_turn: ctx.turn_id.clone(),
            callee: callee.clone(),
            request: args.request.clone(),
            chain: DelegationChain {
                agents,
                received: Some((caller, args.request)),
                origin_session: current.origin_session.clone(),
            },
            usage: ctx.loop_context.as_ref().and_then(|turn| turn.usage.clone()),
        };
        match tokio::time::timeout(self.timeout, directory.delegate(delegation)).await {
            Ok(Ok(answer)) => Ok(ToolResult::ok(answer)),
            Ok(Err(error)) => Ok(ToolResult::error(error.to_string())),
            Err(_) => Ok(ToolResult::error(format!(
                "{callee} did not answer within {} s; continue without it",
                self.timeout.as_secs()
            ))),
        }
    }
}

/// Whether `request` hands `received` back: equal, contained either way, or
/// character-bigram Jaccard ≥ 0.4 after normalisation.
pub fn is_bounce(request: &str, received: &str) -> bool {
    let (a, b) = (normalise(request), normalise(received));
    if a.is_empty() || b.is_empty() {
        return false;
    }
    if a == b || a.contains(&b) || b.contains(&a) {
        return true;
    }
    bigram_jaccard(&a, &b) >= 0.4
}

/// NFC, lower case, no whitespace, without the peer rule.
fn normalise(text: &str) -> String {
    text.replace(PEER_REQUEST_RULE, "")
        .nfc()
        .flat_map(char::to_lowercase)
        .filter(|c| !c.is_whitespace())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounce_rules() {
        let received = "서울 SH 청약 공고 최근 것 하나만 찾아 줘";
        assert!(is_bounce(received, received), "equal");
        assert!(
            is_bounce("  서울 sh 청약 공고 최근 것 하나만   찾아 줘 ", received),
            "case and spacing"
        );
        assert!(is_bounce("SH 청약 공고 최근 것", received), "contained");
        assert!(
            is_bounce(&format!("부탁해: {received} 빨리"), received),
            "containing"
        );
        assert!(
            is_bounce("서울 SH 청약 공고 최근 하나 찾아줘요", received),
            "nearly identical"
        );
        assert!(
            !is_bounce("관심 분야가 뭐야?", received),
            "a clarifying question passes"
        );
        assert!(!is_bounce("예산은 얼마야?", received));
        assert!(
            is_bounce(&format!("{received}\n{PEER_REQUEST_RULE}"), received),
            "the rule is stripped"
        );
        assert!(!is_bounce("", received));
    }

    #[test]
    fn jaccard_is_a_set_ratio() {
        assert_eq!(bigram_jaccard("abc", "abc"), 1.0);
        assert_eq!(bigram_jaccard("ab", "cd"), 0.0);
        assert!(
            (bigram_jaccard("abcd", "abce") - 0.5).abs() < 1e-9,
            "ab bc shared of ab bc cd ce"
        );
        assert_eq!(bigram_jaccard("a", "a"), 1.0);
    }
}
