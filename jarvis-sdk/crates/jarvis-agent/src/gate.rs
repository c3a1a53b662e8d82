//! The tool-call gate (R-TOOL-1): every call passes, in this fixed order,
//! the policy allow-list ([`ToolPolicy`]), the `before_tool_call` plugin
//! hooks ([`BeforeToolCall`]) and approval ([`Approver`]). The first refusal
//! decides, and every refusal reaches the model as an `is_error` tool result
//! while the loop goes on (R-TOOL-2, SPEC.md §17.3 #3).
//!
//! This module holds the traits and the fixed chain. The real allow-list,
//! plugin registry and approval broker live in `core` and implement them.
//!
//! **Approval by default.** A gate without an approver
//! ([`ToolGate::default`], [`ToolGate::new`]) refuses every call of a tool
//! that [requires approval](crate::Tool::requires_approval), with the
//! reason "`<tool>` needs approval and no approver is configured"; tools
//! that do not ask still run. Running everything unasked is the explicit
//! [`ToolGate::allow_all_unsafe`].
//!
//! The arguments every stage sees are the prepared ones
//! ([`prepare_call`](crate::prepare_call)): the loop prepares them before
//! the gate, and [`ToolGate::check_prepared`] prepares again whatever a
//! plugin hook rewrote, so rules and people judge what will run.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

use super::tool::{ResolvedProgram, Tool, ToolContext, prepare_call};

/// What the gate knows about one call.
#[derive(Debug, Clone, Copy)]
pub struct ToolCallInfo<'a> {
    /// The session the call belongs to.
    pub session_id: &'a str,
    /// The turn the call belongs to (empty outside a journaled turn).
    pub turn_id: &'a str,
    /// The agent making the call.
    pub agent_id: &'a str,
    /// The call's id.
    pub tool_call_id: &'a str,
    /// The tool's name.
    pub tool_name: &'a str,
    /// The call's arguments (prepared: see [`prepare_call`]).
    pub arguments: &'a Value,
    /// The program arguments resolved to the files that will run (empty
    /// for tools that run no program).
    pub programs: &'a [ResolvedProgram],
    /// Whether the tool asks for approval unless a rule allows it.
    pub requires_approval: bool,
}

impl<'a> ToolCallInfo<'a> {
    /// A call of `tool_name` with `arguments`, outside a journaled turn and
    /// with no resolved program.
    pub fn new(
        session_id: &'a str,
        agent_id: &'a str,
        tool_call_id: &'a str,
        tool_name: &'a str,
        arguments: &'a Value,
        requires_approval: bool,
    ) -> Self {
        Self {
            session_id,
            turn_id: "",
            agent_id,
            tool_call_id,
            tool_name,
            arguments,
            programs: &[],
            requires_approval,
        }
    }
}

/// A stage's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateDecision {
    /// The call may go on to the next stage.
    Allow,
    /// The call goes on with these arguments instead (plugin hooks only;
    /// must be a JSON object). Later stages and the tool see them.
    Rewrite(Value),
    /// The call is refused, with a reason the model will read.
    Deny(String),
}

/// Stage 1: the policy allow-list. Synchronous: a lookup, never a wait.
pub trait ToolPolicy: Send + Sync {
    /// Checks one call.
    fn check(&self, call: &ToolCallInfo<'_>) -> GateDecision;
}

/// Stage 2: a plugin's `before_tool_call` hook.
#[async_trait]
pub trait BeforeToolCall: Send + Sync {
    /// The plugin's name, shown in refusals and logs.
    fn name(&self) -> &str;
    /// Checks one call.
    async fn before_tool_call(&self, call: &ToolCallInfo<'_>) -> GateDecision;
}

/// Stage 3: approval. The approver decides whether the call needs a person
/// at all (rules, `requires_approval`) and, if so, waits for one.
#[async_trait]
pub trait Approver: Send + Sync {
    /// Decides one call.
    async fn approve(&self, call: &ToolCallInfo<'_>) -> ApprovalDecision;
}

/// A decision on an approval request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecision {
    /// Run this call.
    Allow,
    /// Run this call and remember the rule for this agent.
    Always,
    /// Refuse this call.
    Deny,
    /// Nobody answered in time; refused.
    Timeout,
    /// The turn ended (aborted) before anyone answered; refused.
    Cancelled,
}

impl ApprovalDecision {
    /// Whether the call may run.
    pub fn is_allowed(self) -> bool {
        matches!(self, ApprovalDecision::Allow | ApprovalDecision::Always)
    }

    /// Its name on the wire: `allow`, `always`, `deny`, `timeout`, `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalDecision::Allow => "allow",
            ApprovalDecision::Always => "always",
            ApprovalDecision::Deny => "deny",
            ApprovalDecision::Timeout => "timeout",
            ApprovalDecision::Cancelled => "cancelled",
        }
    }
}

/// A tool call waiting for a person, as shown on every screen of the session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// Identifies the request in the answer.
    pub request_id: String,
    /// The session whose screens show it.
    pub session_id: String,
    /// The agent whose tool asks.
    pub agent_id: String,
    /// The tool's name.
    pub tool_name: String,
    /// The call's arguments.
    pub args: Value,
}

/// The stage that refused a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateStage {
    /// The policy allow-list.
    Policy,
    /// The `before_tool_call` hook of the named plugin.
    Plugin(String),
    /// Approval (a person's "deny" or a timeout).
    Approval,
}

impl fmt::Display for GateStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GateStage::Policy => f.write_str("the tool policy"),
            GateStage::Plugin(name) => write!(f, "the plugin {name:?}"),
            GateStage::Approval => f.write_str("approval"),
        }
    }
}

/// The gate's answer for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateVerdict {
    /// Every stage allowed the call.
    Allowed,
    /// Every stage allowed the call, and a plugin hook rewrote its arguments.
    AllowedWith(Value),
    /// A stage refused it.
    Denied {
        /// Which stage.
        stage: GateStage,
        /// Why.
        reason: String,
    },
}

impl GateVerdict {
    /// The text the model reads for a refusal.
    pub fn refusal_message(&self, tool_name: &str) -> Option<String> {
        match self {
            GateVerdict::Allowed | GateVerdict::AllowedWith(_) => None,
            GateVerdict::Denied { stage, reason } => Some(format!(
                "the call to {tool_name} was refused by {stage}: {reason}. Do not retry it unchanged; \
                 continue without it or answer with what you have."
            )),
        }
    }
}

/// A policy that allows every call: the default policy slot (the policy
/// stage is an allow-list; without one, every registered tool may be
/// called, and approval still applies).
#[derive(Debug, Default, Clone, Copy)]
pub struct AllowAll;

impl ToolPolicy for AllowAll {
    fn check(&self, _call: &ToolCallInfo<'_>) -> GateDecision {
        GateDecision::Allow
    }
}

/// Two policies that must both allow a call; the first refusal decides.
struct BothPolicies(Arc<dyn ToolPolicy>, Arc<dyn ToolPolicy>);

impl ToolPolicy for BothPolicies {
    fn check(&self, call: &ToolCallInfo<'_>) -> GateDecision {
        match self.0.check(call) {
            GateDecision::Allow => self.1.check(call),
            decided => decided,
        }
    }
}

/// The approver of [`ToolGate::allow_all_unsafe`]: allows every call unasked.
#[derive(Debug, Clone, Copy)]
struct ApproveEverything;

#[async_trait]
impl Approver for ApproveEverything {
    async fn approve(&self, _call: &ToolCallInfo<'_>) -> ApprovalDecision {
        ApprovalDecision::Allow
    }
}

/// The fixed chain: policy → plugin hooks (in registration order) → approval.
///
/// Callers choose what sits in each slot, never the order, and cannot skip a
/// stage. [`ToolGate::default`] allows every call of a tool that does not
/// ask for approval and refuses the others until an approver is set with
/// [`ToolGate::with_approver`]; the assembled app puts the real stages in.
#[derive(Clone)]
pub struct ToolGate {
    policy: Arc<dyn ToolPolicy>,
    hooks: Vec<Arc<dyn BeforeToolCall>>,
    approver: Option<Arc<dyn Approver>>,
}

impl Default for ToolGate {
    fn default() -> Self {
        Self {
            policy: Arc::new(AllowAll),
            hooks: Vec::new(),
            approver: None,
        }
    }
}

impl fmt::Debug for ToolGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolGate")
            .field(
                "hooks",
                &self.hooks.iter().map(|h| h.name().to_owned()).collect::<Vec<_>>(),
            )
            .field("approver", &self.approver.is_some())
            .finish_non_exhaustive()
    }
}

/// A call's arguments after a plugin's rewrite, prepared again.
struct Rewritten {
    arguments: Value,
    programs: Vec<ResolvedProgram>,
}

impl ToolGate {
    /// A gate with no policy, no hooks and no approver: tools that require
    /// approval are refused, the others run. Same as [`ToolGate::default`].
    pub fn new() -> Self {
        Self::default()
    }

    /// A gate that runs **every** call without asking anyone, also calls of
    /// tools that write files or run programs.
    ///
    /// Unsafe in the plain sense: whatever the model (or a prompt injected
    /// into what it reads) asks for runs with the rights of the process.
    /// Use it only where nothing the model could ask for can do harm (tests
    /// with harmless tools, a throwaway machine); otherwise give the gate an
    /// approver with [`ToolGate::with_approver`].
    pub fn allow_all_unsafe() -> Self {
        Self {
            approver: Some(Arc::new(ApproveEverything)),
            ..Self::default()
        }
    }

    /// Puts `policy` in the first slot.
    pub fn with_policy(mut self, policy: Arc<dyn ToolPolicy>) -> Self {
        self.policy = policy;
        self
    }

    /// Keeps the current policy and adds `policy`, which must allow a call
    /// too: a narrower gate for work done on the caller's behalf (a
    /// sub-agent's own tool list inside its parent's allow-list).
    pub fn narrowed(mut self, policy: Arc<dyn ToolPolicy>) -> Self {
        self.policy = Arc::new(BothPolicies(self.policy, policy));
        self
    }

    /// Adds a plugin hook after the ones already there.
    pub fn with_hook(mut self, hook: Arc<dyn BeforeToolCall>) -> Self {
        self.hooks.push(hook);
        self
    }

    /// Puts `approver` in the last slot.
    pub fn with_approver(mut self, approver: Arc<dyn Approver>) -> Self {
        self.approver = Some(approver);
        self
    }

    /// Whether an approver is set.
    pub fn has_approver(&self) -> bool {
        self.approver.is_some()
    }

    /// Runs the chain for one call whose arguments are already what the
    /// tool will get; the first refusal decides. A hook's rewrite is what
    /// later hooks, approval and the tool see, as it is (use
    /// [`ToolGate::check_prepared`] to have rewrites prepared again).
    pub async fn check(&self, call: &ToolCallInfo<'_>) -> GateVerdict {
        self.run(call, None).await
    }

    /// Runs the chain for one prepared call of `tool` (the loop's way): a
    /// plugin hook's rewrite is prepared again with
    /// [`prepare_call`] before later stages see it, so rules and people
    /// judge what will run; a rewrite that does not prepare is refused.
    pub async fn check_prepared(
        &self,
        call: &ToolCallInfo<'_>,
        tool: &dyn Tool,
        ctx: &ToolContext,
    ) -> GateVerdict {
        self.run(call, Some((tool, ctx))).await
    }

    async fn run(&self, call: &ToolCallInfo<'_>, preparer: Option<(&dyn Tool, &ToolContext)>) -> GateVerdict {
        match self.policy.check(call) {
            GateDecision::Allow => {}
            GateDecision::Deny(reason) => {
                tracing::info!(tool = call.tool_name, %reason, "tool call refused by policy");
                return GateVerdict::Denied {
                    stage: GateStage::Policy,
                    reason,
                };
            }
            GateDecision::Rewrite(_) => {
                return GateVerdict::Denied {
                    stage: GateStage::Policy,
                    reason: "the policy stage may allow or deny, not rewrite".into(),
                };
            }
        }
        let mut rewritten: Option<Rewritten> = None;
        for hook in &self.hooks {
            let current = match &rewritten {
                Some(r) => ToolCallInfo {
                    arguments: &r.arguments,
                    programs: &r.programs,
                    ..*call
                },
                None => *call,
            };
            match hook.before_tool_call(&current).await {
                GateDecision::Allow => {}
                GateDecision::Rewrite(arguments) if arguments.is_object() => {
                    tracing::info!(
                        tool = call.tool_name,
                        plugin = hook.name(),
                        "tool call arguments rewritten"
                    );
                    rewritten = Some(match preparer {
                        None => Rewritten {
                            arguments,
                            programs: Vec::new(),
                        },
                        Some((tool, ctx)) => match prepare_call(tool, arguments, ctx).await {
                            Ok(prepared) => Rewritten {
                                arguments: prepared.arguments,
                                programs: prepared.programs,
                            },
                            Err(error) => {
                                return GateVerdict::Denied {
                                    stage: GateStage::Plugin(hook.name().to_owned()),
                                    reason: format!(
                                        "the plugin rewrote the arguments to a call that cannot run: {error}"
                                    ),
                                };
                            }
                        },
                    });
                }
                GateDecision::Rewrite(_) => {
                    return GateVerdict::Denied {
                        stage: GateStage::Plugin(hook.name().to_owned()),
                        reason: "the plugin rewrote the arguments to something that is not a JSON object"
                            .into(),
                    };
                }
                GateDecision::Deny(reason) => {
                    tracing::info!(tool = call.tool_name, plugin = hook.name(), %reason, "tool call refused by plugin");
                    return GateVerdict::Denied {
                        stage: GateStage::Plugin(hook.name().to_owned()),
                        reason,
                    };
                }
            }
        }
        let current = match &rewritten {
            Some(r) => ToolCallInfo {
                arguments: &r.arguments,
                programs: &r.programs,
                ..*call
            },
            None => *call,
        };
        let decision = match &self.approver {
            Some(approver) => approver.approve(&current).await,
            None if !call.requires_approval => ApprovalDecision::Allow,
            None => {
                tracing::info!(
                    tool = call.tool_name,
                    "tool call refused: it needs approval and no approver is configured"
                );
                return GateVerdict::Denied {
                    stage: GateStage::Approval,
                    reason: format!(
                        "`{}` needs approval and no approver is configured",
                        call.tool_name
                    ),
                };
            }
        };
        match decision {
            d if d.is_allowed() => match rewritten {
                Some(r) => GateVerdict::AllowedWith(r.arguments),
                None => GateVerdict::Allowed,
            },
            ApprovalDecision::Timeout => GateVerdict::Denied {
                stage: GateStage::Approval,
                reason: "nobody approved it in time".into(),
            },
            ApprovalDecision::Cancelled => GateVerdict::Denied {
                stage: GateStage::Approval,
                reason: "the turn ended before anyone answered".into(),
            },
            _ => GateVerdict::Denied {
                stage: GateStage::Approval,
                reason: "the person denied it".into(),
            },
        }
    }
}
