//! [`UIAdapter`]: the push-model sink every screen implements (the ripgrep
//! `Sink` pattern). The loop pushes plain-data events; every method has a
//! no-op default; returning [`ControlFlow::Break`] from
//! [`UIAdapter::on_event`] aborts the turn.

use std::ops::ControlFlow;
use std::sync::Arc;

use super::event::AgentEvent;
use super::gate::{ApprovalDecision, ApprovalRequest};

/// A subscriber to a turn's events and approval traffic.
///
/// Methods are called on the loop's task and must not block: hand the event
/// to a channel or a broadcast if the work is slow.
pub trait UIAdapter: Send + Sync {
    /// One event of the turn. Return `Break` to abort the turn.
    fn on_event(&self, event: &AgentEvent) -> ControlFlow<()> {
        let _ = event;
        ControlFlow::Continue(())
    }

    /// A tool call waits for a person's decision.
    fn on_approval_request(&self, request: &ApprovalRequest) {
        let _ = request;
    }

    /// An approval request was decided (by anyone, or by timeout).
    fn on_approval_resolved(&self, request_id: &str, decision: ApprovalDecision) {
        let _ = (request_id, decision);
    }
}

/// A subscriber that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoopAdapter;

impl UIAdapter for NoopAdapter {}

/// Forwards everything to several subscribers, in order. The turn is aborted
/// when any of them asks for it.
#[derive(Default, Clone)]
pub struct FanoutAdapter {
    subscribers: Vec<Arc<dyn UIAdapter>>,
}

impl std::fmt::Debug for FanoutAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FanoutAdapter")
            .field("subscribers", &self.subscribers.len())
            .finish()
    }
}

impl FanoutAdapter {
    /// A fan-out over `subscribers`.
    pub fn new(subscribers: Vec<Arc<dyn UIAdapter>>) -> Self {
        Self { subscribers }
    }

    /// Adds a subscriber.
    pub fn push(&mut self, subscriber: Arc<dyn UIAdapter>) {
        self.subscribers.push(subscriber);
    }
}

impl UIAdapter for FanoutAdapter {
    fn on_event(&self, event: &AgentEvent) -> ControlFlow<()> {
        let mut flow = ControlFlow::Continue(());
        for s in &self.subscribers {
            if s.on_event(event).is_break() {
                flow = ControlFlow::Break(());
            }
        }
        flow
    }

    fn on_approval_request(&self, request: &ApprovalRequest) {
        for s in &self.subscribers {
            s.on_approval_request(request);
        }
    }

    fn on_approval_resolved(&self, request_id: &str, decision: ApprovalDecision) {
        for s in &self.subscribers {
            s.on_approval_resolved(request_id, decision);
        }
    }
}
