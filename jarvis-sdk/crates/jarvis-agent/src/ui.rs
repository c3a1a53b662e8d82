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

/// A fan-out whose subscribers come and go while turns run: every screen
/// attached to a session receives the same events. A screen that attaches
/// while a turn runs first receives that turn's `agent_start` (so it knows
/// a turn is under way, and whether it was resumed after a restart).
#[derive(Clone, Default)]
pub struct ScreenHub {
    inner: Arc<HubInner>,
}

/// `(id, screen, whether a person looks at it)`: observers (logs, the app's
/// activity) get every event but do not count as screens.
type Attached = (u64, Arc<dyn UIAdapter>, bool);

#[derive(Default)]
struct HubInner {
    screens: std::sync::Mutex<Vec<Attached>>,
    next: std::sync::atomic::AtomicU64,
    /// Turns started and not ended, and the latest `agent_start`. Held while
    /// a start or an end is delivered and while a screen attaches, so a new
    /// screen sees a turn's start exactly when it will see its end.
    flight: std::sync::Mutex<(usize, Option<AgentEvent>)>,
}

impl std::fmt::Debug for ScreenHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScreenHub").field("screens", &self.len()).finish()
    }
}

/// A screen's place in a [`ScreenHub`]; dropping it detaches the screen.
#[must_use = "the screen is detached when this is dropped"]
pub struct HubAttachment {
    hub: std::sync::Weak<HubInner>,
    id: u64,
}

impl std::fmt::Debug for HubAttachment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubAttachment").field("id", &self.id).finish()
    }
}

impl Drop for HubAttachment {
    fn drop(&mut self) {
        if let Some(hub) = self.hub.upgrade() {
            hub.screens
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|(id, _, _)| *id != self.id);
        }
    }
}

impl ScreenHub {
    /// A hub with no screens.
    pub fn new() -> Self {
        Self::default()
    }

    /// Attaches `screen` until the returned attachment is dropped; it first
    /// receives the `agent_start` of a turn under way, if one is.
    pub fn attach(&self, screen: Arc<dyn UIAdapter>) -> HubAttachment {
        self.attach_as(screen, true)
    }

    /// Attaches an observer: it gets every event like a screen, but
    /// [`len`](Self::len) does not count it (nobody sees what only an
    /// observer gets).
    pub fn attach_observer(&self, observer: Arc<dyn UIAdapter>) -> HubAttachment {
        self.attach_as(observer, false)
    }

    fn attach_as(&self, screen: Arc<dyn UIAdapter>, seen: bool) -> HubAttachment {
        let id = self.inner.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let flight = self.inner.flight.lock().unwrap_or_else(|e| e.into_inner());
        if let (1.., Some(start)) = &*flight {
            let _ = screen.on_event(start);
        }
        self.inner
            .screens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((id, screen, seen));
        drop(flight);
        HubAttachment {
            hub: Arc::downgrade(&self.inner),
            id,
        }
    }

    /// Screens attached now (observers not counted).
    pub fn len(&self) -> usize {
        self.inner
            .screens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, _, seen)| *seen)
            .count()
    }

    /// Whether no screen is attached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn screens(&self) -> Vec<Arc<dyn UIAdapter>> {
        let screens = self.inner.screens.lock().unwrap_or_else(|e| e.into_inner());
        screens.iter().map(|(_, s, _)| s.clone()).collect()
    }
}

impl UIAdapter for ScreenHub {
    /// A screen asking to stop aborts the turn for everyone.
    fn on_event(&self, event: &AgentEvent) -> ControlFlow<()> {
        let mut flight = None;
        if let AgentEvent::AgentStart { .. } | AgentEvent::AgentEnd { .. } = event {
            let mut guard = self.inner.flight.lock().unwrap_or_else(|e| e.into_inner());
            match event {
                AgentEvent::AgentStart { .. } => *guard = (guard.0 + 1, Some(event.clone())),
                _ => {
                    guard.0 = guard.0.saturating_sub(1);
                    if guard.0 == 0 {
                        guard.1 = None;
                    }
                }
            }
            flight = Some(guard);
        }
        let mut flow = ControlFlow::Continue(());
        for screen in self.screens() {
            if screen.on_event(event).is_break() {
                flow = ControlFlow::Break(());
            }
        }
        drop(flight);
        flow
    }

    fn on_approval_request(&self, request: &ApprovalRequest) {
        for screen in self.screens() {
            screen.on_approval_request(request);
        }
    }

    fn on_approval_resolved(&self, request_id: &str, decision: ApprovalDecision) {
        for screen in self.screens() {
            screen.on_approval_resolved(request_id, decision);
        }
    }
}
