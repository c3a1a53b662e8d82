//! [`ApprovalBroker`]: one per session. It asks every screen attached to the
//! session, the first answer wins, and every screen learns the outcome.
//!
//! With a [`TurnJournal`], a request is recorded (durably) before any screen
//! sees it and its decision before the call runs, so a turn waiting for a
//! person survives a restart: the resumed turn's call comes back here and
//! is asked again with the same request id, its timeout counted from the
//! first time it was asked.

use crate::cassette::CassetteRecorder;
use async_trait::async_trait;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::oneshot;
use tracing::Instrument;

use super::rules::{LayeredApprovalRules, RuleDecision};
use jarvis_agent::{ApprovalDecision, ApprovalRequest, Approver, ToolCallInfo, TurnJournal, UIAdapter};
use jarvis_common::{Clock, IdSource, SystemClock, Timestamp, trace};

/// How long a request waits for a person by default: five minutes.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(300);

struct Pending {
    request: ApprovalRequest,
    answer: oneshot::Sender<ApprovalDecision>,
}

struct Inner {
    session_id: String,
    rules: Arc<LayeredApprovalRules>,
    ids: Arc<dyn IdSource>,
    timeout: Duration,
    ask_always: BTreeSet<String>,
    journal: Option<Arc<TurnJournal>>,
    /// Where a person's answers are recorded while the session records.
    cassette: Option<Arc<CassetteRecorder>>,
    clock: Arc<dyn Clock>,
    screens: Mutex<Vec<(u64, Arc<dyn UIAdapter>)>>,
    pending: Mutex<BTreeMap<String, Pending>>,
    /// Answers given before their request was asked again here (a turn
    /// taken over from another node; [`ApprovalBroker::decide_early`]).
    early: Mutex<BTreeMap<String, ApprovalDecision>>,
    next_screen: AtomicU64,
}

impl Inner {
    fn screens(&self) -> Vec<Arc<dyn UIAdapter>> {
        let screens = self.screens.lock().unwrap_or_else(|e| e.into_inner());
        screens.iter().map(|(_, s)| s.clone()).collect()
    }

    /// Ends a pending request with `decision`, telling every screen; `false`
    /// when it was already decided.
    fn resolve(&self, request_id: &str, decision: ApprovalDecision) -> bool {
        let pending = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(request_id);
        let Some(pending) = pending else {
            return false;
        };
        let _ = pending.answer.send(decision);
        for screen in self.screens() {
            screen.on_approval_resolved(request_id, decision);
        }
        true
    }
}

/// The approval stage of one session's tool gate.
///
/// For each call it first consults the layered rules (an `allow` or `deny`
/// rule decides at once), then lets through calls of tools that do not ask
/// for approval, and otherwise sends an [`ApprovalRequest`] to every
/// attached screen and waits for the first decision: allow once, always
/// allow (which writes a rule to the agent's file) or deny. No answer within
/// the timeout denies; a turn that ends first cancels the request. Tools in
/// the agent's `boundaries.ask` always ask, whatever the rules say.
#[derive(Clone)]
pub struct ApprovalBroker {
    inner: Arc<Inner>,
}

impl fmt::Debug for ApprovalBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApprovalBroker")
            .field("session_id", &self.inner.session_id)
            .field("timeout", &self.inner.timeout)
            .field("ask_always", &self.inner.ask_always)
            .finish_non_exhaustive()
    }
}

/// A screen's attachment; dropping it detaches the screen.
#[must_use = "the screen is detached when this is dropped"]
pub struct Attachment {
    inner: Weak<Inner>,
    id: u64,
}

impl fmt::Debug for Attachment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Attachment").field("id", &self.id).finish()
    }
}

impl Drop for Attachment {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.upgrade() {
            inner
                .screens
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|(id, _)| *id != self.id);
        }
    }
}

impl ApprovalBroker {
    /// A broker for `session_id` using `rules`; request ids come from `ids`.
    pub fn new(
        session_id: impl Into<String>,
        rules: Arc<LayeredApprovalRules>,
        ids: Arc<dyn IdSource>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                session_id: session_id.into(),
                rules,
                ids,
                timeout: DEFAULT_APPROVAL_TIMEOUT,
                ask_always: BTreeSet::new(),
                journal: None,
                cassette: None,
                clock: Arc::new(SystemClock),
                screens: Mutex::default(),
                pending: Mutex::default(),
                early: Mutex::default(),
                next_screen: AtomicU64::new(0),
            }),
        }
    }

    /// Sets how long a request waits before it is denied.
    pub fn with_timeout(self, timeout: Duration) -> Self {
        self.rebuild(|inner| inner.timeout = timeout)
    }

    /// Tools that always ask (an agent's `boundaries.ask`).
    pub fn with_ask_always(self, tools: impl IntoIterator<Item = String>) -> Self {
        let tools: BTreeSet<String> = tools.into_iter().collect();
        self.rebuild(|inner| inner.ask_always = tools)
    }

    /// Records requests and decisions in `journal` (see the module docs),
    /// with times from `clock`.
    pub fn with_journal(self, journal: Arc<TurnJournal>, clock: Arc<dyn Clock>) -> Self {
        self.rebuild(|inner| {
            inner.journal = Some(journal);
            inner.clock = clock;
        })
    }

    /// Records a person's answers in the session's cassette while it
    /// records (see [`crate::cassette`]).
    pub fn with_cassette(self, cassette: Arc<CassetteRecorder>) -> Self {
        self.rebuild(|inner| inner.cassette = Some(cassette))
    }

    fn rebuild(self, change: impl FnOnce(&mut Inner)) -> Self {
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => {
                change(&mut inner);
                Self {
                    inner: Arc::new(inner),
                }
            }
            // Already shared: settings are fixed once the broker is in use.
            Err(inner) => Self { inner },
        }
    }

    /// Attaches a screen: it receives every request (also those already
    /// waiting) and every resolution until the attachment is dropped.
    pub fn attach(&self, screen: Arc<dyn UIAdapter>) -> Attachment {
        let id = self.inner.next_screen.fetch_add(1, Ordering::Relaxed);
        for request in self.pending() {
            screen.on_approval_request(&request);
        }
        self.inner
            .screens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((id, screen));
        Attachment {
            inner: Arc::downgrade(&self.inner),
            id,
        }
    }

    /// A person's answer. The first answer to a request wins: returns
    /// `false` when the request is unknown or already decided.
    pub fn decide(&self, request_id: &str, decision: ApprovalDecision) -> bool {
        self.inner.resolve(request_id, decision)
    }

    /// A person's answer to `request_id`, which a turn resumed here is
    /// about to ask again (it was asked on a node that stopped, and the
    /// answer reached this node instead): decided now when the request is
    /// waiting, otherwise kept and applied the moment it is asked. Only
    /// for request ids the resumed turn recorded as undecided.
    pub fn decide_early(&self, request_id: &str, decision: ApprovalDecision) {
        if self.inner.resolve(request_id, decision) {
            return;
        }
        self.inner
            .early
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(request_id.to_owned(), decision);
    }

    /// Requests waiting for an answer, oldest id first.
    pub fn pending(&self) -> Vec<ApprovalRequest> {
        let pending = self.inner.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.values().map(|p| p.request.clone()).collect()
    }

    /// How many screens are attached.
    pub fn screens(&self) -> usize {
        self.inner.screens.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The session this broker serves.
    pub fn session_id(&self) -> &str {
        &self.inner.session_id
    }
}

/// Cancels a request whose waiting future was dropped (the turn ended).
struct CancelOnDrop<'a> {
    inner: &'a Inner,
    request_id: String,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        self.inner.resolve(&self.request_id, ApprovalDecision::Cancelled);
    }
}

/// The approval stage of a turn run for another agent on this broker's
/// screens (a delegated turn, a sub-agent): it asks this broker's screens
/// but with the `boundaries.ask` of the agent whose tools run, never the
/// broker's own. Made by [`ApprovalBroker::for_agent`].
#[derive(Debug, Clone)]
pub struct AgentApprover {
    broker: ApprovalBroker,
    ask_always: BTreeSet<String>,
}

#[async_trait]
impl Approver for AgentApprover {
    async fn approve(&self, call: &ToolCallInfo<'_>) -> ApprovalDecision {
        let always_ask = self.ask_always.contains(call.tool_name);
        self.broker.decide_call(call, always_ask).await
    }
}

impl ApprovalBroker {
    /// An approver asking this broker's screens for the calls of an agent
    /// whose `boundaries.ask` is `ask` (see [`AgentApprover`]).
    pub fn for_agent(&self, ask: impl IntoIterator<Item = String>) -> AgentApprover {
        AgentApprover {
            broker: self.clone(),
            ask_always: ask.into_iter().collect(),
        }
    }

    async fn decide_call(&self, call: &ToolCallInfo<'_>, always_ask: bool) -> ApprovalDecision {
        let inner = &*self.inner;
        if !always_ask {
            match inner.rules.decide_gate(call).await {
                Some((RuleDecision::Allow, source)) => {
                    tracing::debug!(tool = call.tool_name, ?source, "allowed by an approval rule");
                    return ApprovalDecision::Allow;
                }
                Some((RuleDecision::Deny, source)) => {
                    tracing::info!(tool = call.tool_name, ?source, "denied by an approval rule");
                    return ApprovalDecision::Deny;
                }
                None if !call.requires_approval => return ApprovalDecision::Allow,
                None => {}
            }
        }
        let now = Timestamp::from_system_time(inner.clock.now());
        // A turn resumed after a restart asks again what it asked before.
        let earlier = match (&inner.journal, call.turn_id.is_empty()) {
            (Some(journal), false) => journal.undecided(call.turn_id, call.tool_call_id),
            _ => None,
        };
        let (request, asked_at) = match earlier {
            Some(earlier) => (earlier.request, earlier.asked_at),
            None => (
                ApprovalRequest {
                    request_id: inner.ids.next_id("approval_"),
                    session_id: inner.session_id.clone(),
                    agent_id: call.agent_id.to_owned(),
                    tool_name: call.tool_name.to_owned(),
                    args: call.arguments.clone(),
                },
                now,
            ),
        };
        if let (Some(journal), false) = (&inner.journal, call.turn_id.is_empty())
            && let Err(error) = journal
                .ask(call.turn_id, call.tool_call_id, &request, asked_at)
                .await
        {
            tracing::warn!(%error, "the approval request could not be journaled; it will not survive a restart");
        }
        let (tx, rx) = oneshot::channel();
        inner.pending.lock().unwrap_or_else(|e| e.into_inner()).insert(
            request.request_id.clone(),
            Pending {
                request: request.clone(),
                answer: tx,
            },
        );
        let guard = CancelOnDrop {
            inner,
            request_id: request.request_id.clone(),
        };
        for screen in inner.screens() {
            screen.on_approval_request(&request);
        }
        let early = inner
            .early
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&request.request_id);
        if let Some(decision) = early {
            inner.resolve(&request.request_id, decision);
        }
        // The timeout counts from the first time it was asked, across restarts.
        let waited = u64::try_from(now.as_millis().saturating_sub(asked_at.as_millis())).unwrap_or(0);
        let left = inner.timeout.saturating_sub(Duration::from_millis(waited));
        let span = trace::approval_span(&request.request_id, call.tool_name);
        let decision = match tokio::time::timeout(left, rx).instrument(span.clone()).await {
            Ok(Ok(decision)) => decision,
            Ok(Err(_)) => ApprovalDecision::Cancelled,
            Err(_) => {
                inner.resolve(&request.request_id, ApprovalDecision::Timeout);
                ApprovalDecision::Timeout
            }
        };
        span.record("jarvis.approval.decision", decision.as_str());
        if let (Some(cassette), false) = (&inner.cassette, decision == ApprovalDecision::Cancelled) {
            cassette.approval(&request.request_id, call.tool_call_id, call.tool_name, decision);
        }
        if let (Some(journal), false, false) = (
            &inner.journal,
            call.turn_id.is_empty(),
            decision == ApprovalDecision::Cancelled,
        ) && let Err(error) = journal.decide(call.turn_id, &request.request_id, decision).await
        {
            tracing::warn!(%error, "the approval decision could not be journaled");
        }
        drop(guard); // already resolved: a no-op
        if decision == ApprovalDecision::Always {
            if always_ask {
                tracing::info!(
                    tool = call.tool_name,
                    "always-ask tool: allowed once, no rule written"
                );
            } else if let Err(error) = inner
                .rules
                .remember(call.agent_id, call.tool_name, call.arguments)
                .await
            {
                tracing::warn!(%error, "the \"always allow\" rule could not be saved; allowed once");
            }
        }
        decision
    }
}

#[async_trait]
impl Approver for ApprovalBroker {
    async fn approve(&self, call: &ToolCallInfo<'_>) -> ApprovalDecision {
        let always_ask = self.inner.ask_always.contains(call.tool_name);
        self.decide_call(call, always_ask).await
    }
}
