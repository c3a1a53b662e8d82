//! Getting frames to WebSocket connections without ever making a turn wait.
//!
//! Each connection has an [`Outbox`]: a bounded queue its writer task
//! drains. Pushing never blocks; a connection whose queue is full is too
//! slow and is closed (1008), while the turn and every other connection go
//! on. [`Connections`] knows every open connection for the messages that go
//! to all of them (`agent_activity`, `agenda_changed`), and [`Activity`]
//! counts running loops per session to emit `agent_activity` (R-WEB-10).

use axum::extract::ws::Utf8Bytes;
use jarvis_sdk::agent::{AgentEvent, ApprovalDecision, ApprovalRequest, UIAdapter};
use jarvis_sdk::app::SessionObserver;
use serde::Serialize;
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::protocol::ServerNotice;

/// Serialises a frame; the types sent never fail to serialise.
pub(crate) fn frame(message: &impl Serialize) -> Utf8Bytes {
    match serde_json::to_string(message) {
        Ok(text) => Utf8Bytes::from(text),
        Err(error) => {
            tracing::error!(%error, "a frame could not be serialised");
            Utf8Bytes::from_static(r#"{"type":"error","code":"internal","message":"internal error"}"#)
        }
    }
}

/// The sending side of one connection's queue.
#[derive(Debug, Clone)]
pub(crate) struct Outbox {
    tx: mpsc::Sender<Utf8Bytes>,
    too_slow: CancellationToken,
}

impl Outbox {
    /// A queue of `capacity` frames and its receiving end.
    pub(crate) fn new(capacity: usize) -> (Self, mpsc::Receiver<Utf8Bytes>, CancellationToken) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let too_slow = CancellationToken::new();
        (
            Self {
                tx,
                too_slow: too_slow.clone(),
            },
            rx,
            too_slow,
        )
    }

    /// Queues a frame; a full queue marks the connection too slow.
    pub(crate) fn push(&self, frame: Utf8Bytes) {
        if let Err(mpsc::error::TrySendError::Full(_)) = self.tx.try_send(frame) {
            if !self.too_slow.is_cancelled() {
                tracing::warn!("a WebSocket client fell too far behind; closing it");
            }
            self.too_slow.cancel();
        }
    }

    /// Queues a message.
    pub(crate) fn send(&self, message: &impl Serialize) {
        self.push(frame(message));
    }

    /// Queues an `error` frame.
    pub(crate) fn error(&self, code: &str, message: impl Into<String>) {
        self.send(&ServerNotice::error(code, message));
    }
}

/// Every open connection, for the messages that go to all of them.
#[derive(Debug, Default)]
pub(crate) struct Connections {
    next: AtomicU64,
    open: Mutex<HashMap<u64, Outbox>>,
}

/// A connection's place in [`Connections`]; dropping it removes it.
#[derive(Debug)]
pub(crate) struct Registered {
    connections: Arc<Connections>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.connections.lock().remove(&self.id);
    }
}

impl Connections {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Outbox>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a connection until the returned guard is dropped.
    pub(crate) fn register(self: &Arc<Self>, outbox: Outbox) -> Registered {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, outbox);
        Registered {
            connections: self.clone(),
            id,
        }
    }

    /// Sends `frame` to every connection.
    pub(crate) fn broadcast(&self, frame: Utf8Bytes) {
        for outbox in self.lock().values() {
            outbox.push(frame.clone());
        }
    }

    /// How many connections are open.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

/// One connection's screen on its session: every event and approval
/// message, serialised once per connection and queued.
pub(crate) struct ConnectionScreen {
    pub(crate) outbox: Outbox,
}

impl UIAdapter for ConnectionScreen {
    /// Never stops the turn: a client going away must not abort it.
    fn on_event(&self, event: &AgentEvent) -> ControlFlow<()> {
        // `agenda_changed` goes to every connection through `Activity`.
        if event.kind() != "agenda_changed" {
            self.outbox.send(event);
        }
        ControlFlow::Continue(())
    }

    fn on_approval_request(&self, request: &ApprovalRequest) {
        self.outbox.send(&ServerNotice::ApprovalRequest(request.clone()));
    }

    fn on_approval_resolved(&self, request_id: &str, decision: ApprovalDecision) {
        self.outbox.send(&ServerNotice::ApprovalResolved {
            request_id: request_id.to_owned(),
            decision,
        });
    }
}

/// How many `agent_activity` broadcasts may go out back to back.
const ACTIVITY_BURST: f64 = 16.0;
/// Broadcasts per second once the burst is spent.
const ACTIVITY_RATE: f64 = 10.0;

/// Counts running loops per session (every session, peer sessions
/// included) and tells every connection when the set of working agents
/// changes. Also forwards `agenda_changed` to every connection.
///
/// Each broadcast costs one frame per connection, so they are rate-limited
/// by a token bucket: every change goes out at once while changes are few
/// (up to [`ACTIVITY_BURST`] in a row), and under a storm of short turns
/// the latest set goes out at most [`ACTIVITY_RATE`] times a second. The
/// last set sent is always the current one once the storm passes.
#[derive(Debug)]
pub(crate) struct Activity {
    connections: Arc<Connections>,
    /// Agent ids in team order, so `active` lists them in that order.
    order: Vec<String>,
    state: Mutex<ActivityState>,
    me: Weak<Activity>,
}

#[derive(Debug)]
struct ActivityState {
    /// Loops running per session.
    running: HashMap<String, u32>,
    /// Loops running per agent (the sum over its sessions).
    per_agent: HashMap<String, u32>,
    /// The agents running a loop now.
    active: Vec<String>,
    /// The set last broadcast.
    sent: Vec<String>,
    /// Broadcasts that may go out now.
    tokens: f64,
    refilled: Instant,
    /// A delayed broadcast is scheduled.
    trailing: bool,
}

impl ActivityState {
    fn refill(&mut self) {
        let now = Instant::now();
        let earned = now.duration_since(self.refilled).as_secs_f64() * ACTIVITY_RATE;
        self.tokens = (self.tokens + earned).min(ACTIVITY_BURST);
        self.refilled = now;
    }
}

impl Activity {
    pub(crate) fn new(connections: Arc<Connections>, order: Vec<String>) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            connections,
            order,
            state: Mutex::new(ActivityState {
                running: HashMap::new(),
                per_agent: HashMap::new(),
                active: Vec::new(),
                sent: Vec::new(),
                tokens: ACTIVITY_BURST,
                refilled: Instant::now(),
                trailing: false,
            }),
            me: me.clone(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ActivityState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The agents running a loop now, in team order.
    pub(crate) fn active(&self) -> Vec<String> {
        self.lock().active.clone()
    }

    /// The `agent_activity` message for now.
    pub(crate) fn message(&self) -> ServerNotice {
        ServerNotice::AgentActivity {
            active: self.active(),
        }
    }

    /// Broadcasts the current set (under the state's lock, so every
    /// connection sees the sets in the same order).
    fn send(&self, state: &mut ActivityState) {
        state.sent = state.active.clone();
        self.connections.broadcast(frame(&ServerNotice::AgentActivity {
            active: state.sent.clone(),
        }));
    }

    /// The set changed: broadcast now if the bucket allows, else once it does.
    fn publish(&self, state: &mut ActivityState) {
        if state.trailing {
            return; // the scheduled broadcast will carry the latest set
        }
        state.refill();
        if state.tokens >= 1.0 {
            state.tokens -= 1.0;
            return self.send(state);
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return self.send(state);
        };
        state.trailing = true;
        let wait = Duration::from_secs_f64((1.0 - state.tokens) / ACTIVITY_RATE);
        let me = self.me.clone();
        runtime.spawn(async move {
            tokio::time::sleep(wait).await;
            let Some(me) = me.upgrade() else { return };
            let mut state = me.lock();
            state.trailing = false;
            state.refill();
            if state.active != state.sent {
                state.tokens -= 1.0;
                me.send(&mut state);
            }
        });
    }
}

impl SessionObserver for Activity {
    fn on_session_event(&self, session_id: &str, agent_id: &str, event: &AgentEvent) {
        let starting = match event.kind() {
            "agent_start" => true,
            "agent_end" => false,
            "agenda_changed" => {
                self.connections.broadcast(frame(event));
                return;
            }
            _ => return,
        };
        let mut state = self.lock();
        let state = &mut *state;
        if starting {
            *state.running.entry(session_id.to_owned()).or_default() += 1;
            *state.per_agent.entry(agent_id.to_owned()).or_default() += 1;
        } else {
            // An end without a start seen (an observer added mid-turn) changes nothing.
            match state.running.get_mut(session_id) {
                Some(n) if *n > 1 => *n -= 1,
                Some(_) => {
                    state.running.remove(session_id);
                }
                None => return,
            }
            if let Some(n) = state.per_agent.get_mut(agent_id) {
                *n = n.saturating_sub(1);
            }
        }
        let running = |agent: &str| state.per_agent.get(agent).is_some_and(|n| *n > 0);
        let mut active: Vec<String> = self.order.iter().filter(|a| running(a)).cloned().collect();
        // Agents outside the team's order (none today) come last.
        for (agent, n) in &state.per_agent {
            if *n > 0 && !active.contains(agent) {
                active.push(agent.clone());
            }
        }
        if active != state.active {
            state.active = active;
            self.publish(state);
        }
    }
}
