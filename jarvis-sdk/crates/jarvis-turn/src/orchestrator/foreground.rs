//! The session's one foreground slot: the turn holding it, the watch that
//! marks it ending at its `agent_end` (recording its usage), and the guards
//! that free it or abort the turn.

use std::sync::{Arc, Mutex};
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;

use crate::usage::UsageMeter;
use jarvis_agent::{AgentError, AgentEvent, LoopContext, LoopOutcome, TurnTap, UIAdapter};

pub(super) type TurnResult = Result<LoopOutcome, AgentError>;

/// The session's one foreground slot.
#[derive(Default)]
pub(super) struct TurnSlot {
    state: Mutex<TurnState>,
    /// Woken when the slot empties.
    pub(super) idle: Notify,
}

#[derive(Default)]
pub(super) struct TurnState {
    /// The foreground turn's number and abort signal.
    pub(super) running: Option<(u64, CancellationToken)>,
    /// The foreground turn sent `agent_end` and is being recorded.
    pub(super) ending: bool,
}

impl TurnSlot {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, TurnState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Wraps a turn's screens: when that turn's `agent_end` goes out while it
/// is still the foreground turn, marks it as ending (before any screen sees
/// the event), so a prompt sent in answer to `agent_end` waits for the
/// recording instead of being refused as busy. A background job's
/// `agent_end` leaves the foreground turn alone. With a meter, the turn's
/// usage is recorded first, when it called the model.
pub(super) struct EndWatch {
    slot: Arc<TurnSlot>,
    turn: u64,
    screens: Arc<dyn UIAdapter>,
    usage: Option<TurnMeter>,
}

impl EndWatch {
    /// Puts turn `turn` of `slot` under watch in its loop context (its
    /// screens, its usage meter) and sets its tap (a cassette's).
    pub(super) fn install(
        ctx: &mut LoopContext,
        slot: Arc<TurnSlot>,
        turn: u64,
        meter: Option<UsageMeter>,
        tap: Option<Arc<dyn TurnTap>>,
    ) {
        ctx.ui = Arc::new(EndWatch {
            slot,
            turn,
            screens: ctx.ui.clone(),
            usage: meter.map(|m| TurnMeter::of(m, ctx)),
        });
        ctx.tap = tap;
    }
}

/// What a turn's [`EndWatch`] records its usage with.
struct TurnMeter {
    meter: UsageMeter,
    session_id: String,
    agent_id: String,
    turn_id: String,
    model: String,
}

impl TurnMeter {
    /// The meter of the turn `ctx` runs: its session, agent and id, and the
    /// model its requests name (the provider's own name when they name
    /// none and the provider picks).
    fn of(meter: UsageMeter, ctx: &LoopContext) -> Self {
        let model = if ctx.model.model.is_empty() {
            ctx.provider.name().to_owned()
        } else {
            ctx.model.model.clone()
        };
        Self {
            meter,
            session_id: ctx.identity.session_id.clone(),
            agent_id: ctx.identity.agent_id.clone(),
            turn_id: ctx.turn_id.clone(),
            model,
        }
    }
}

impl UIAdapter for EndWatch {
    fn on_event(&self, event: &AgentEvent) -> std::ops::ControlFlow<()> {
        if let AgentEvent::AgentEnd {
            final_message, turns, ..
        } = event
        {
            // A turn with no step never called the model (aborted first).
            if let Some(m) = self.usage.as_ref().filter(|_| *turns > 0) {
                m.meter.record_turn(
                    &m.session_id,
                    &m.agent_id,
                    &m.turn_id,
                    &m.model,
                    &final_message.usage,
                );
            }
            let mut state = self.slot.lock();
            if state.running.as_ref().is_some_and(|(turn, _)| *turn == self.turn) {
                state.ending = true;
            }
        }
        self.screens.on_event(event)
    }

    fn on_approval_request(&self, request: &jarvis_agent::ApprovalRequest) {
        self.screens.on_approval_request(request);
    }
}

/// Frees the foreground slot however the prompt ends (also when dropped).
pub(super) struct Foreground(pub(super) Arc<TurnSlot>);

impl Drop for Foreground {
    fn drop(&mut self) {
        *self.0.lock() = TurnState::default();
        self.0.idle.notify_waiters();
    }
}

/// Waits for a running turn; dropping it aborts the turn (the prompt's
/// caller went away), unless the turn was handed to the background.
pub(super) struct Pending {
    pub(super) result: Option<oneshot::Receiver<TurnResult>>,
    pub(super) cancel: CancellationToken,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.result.is_some() {
            self.cancel.cancel();
        }
    }
}
