//! How a turn runs: security, the thinking hook, then the harness in a task
//! of its own (or a resumed turn); and the work after each turn.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::SystemTime;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Span};

use super::foreground::{EndWatch, Foreground, Pending, TurnState};
use super::{AgentSession, PromptOptions, RECENT_TURNS, TurnError};
use crate::commands::CommandContext;
use crate::security::{Caller, SecurityInput};
use jarvis_agent::record_turn_outcome;
use jarvis_agent::{
    AgentEvent, FinalMessage, LoopOutcome, MessageDelta, PendingTurn, SessionKind, StopReason, ThinkingInput,
    TurnOptions, TurnReport, UIAdapter, UsageTally, UsageTotal,
};
use jarvis_common::Timestamp;
use jarvis_common::trace::{self, invoke_agent_span};
use jarvis_model::ToolResultMessage;
use jarvis_model::{Role, Usage};

impl AgentSession {
    /// Picks up `pending`, this session's turn that was waiting for a
    /// person when the process stopped (see [`Harness::resume_turn`](jarvis_agent::Harness::resume_turn)), in
    /// the foreground: the session is busy until it ends, screens that
    /// attach meanwhile get its `agent_start {resumed: true}` and its
    /// approval request, and it ends with one `agent_end`. Answers `false`
    /// (and does nothing) when a turn runs already.
    pub fn resume(&self, pending: PendingTurn, settled: Vec<ToolResultMessage>) -> bool {
        let inner = &self.inner;
        let cancel = CancellationToken::new();
        let turn = inner.next_job.fetch_add(1, Ordering::Relaxed);
        {
            let mut state = inner.turn.lock();
            if state.running.is_some() {
                return false;
            }
            *state = TurnState {
                running: Some((turn, cancel.clone())),
                ending: false,
            };
        }
        let foreground = Foreground(inner.turn.clone());
        let session = self.clone();
        let slot = inner.turn.clone();
        let span = self.turn_span();
        let tap = inner.parts.cassette.as_ref().and_then(|c| c.begin_turn());
        tokio::spawn(async move {
            let _foreground = foreground;
            let parts = &session.inner.parts;
            let meter = parts.usage.clone();
            let outcome = parts
                .harness
                .resume_turn(
                    &pending,
                    settled,
                    move |ctx| EndWatch::install(ctx, slot, turn, meter, tap),
                    &cancel,
                )
                .await;
            record_turn_outcome(&Span::current(), &outcome);
            match outcome {
                Ok(outcome) => {
                    session.after_turn(
                    TurnReport::new(
                        &parts.agent_id,
                        parts.id.as_str(),
                        &pending.begin.prompt,
                        &outcome,
                    ),
                    Vec::new(),
                    )
                }
                Err(error) => {
                    tracing::error!(session_id = %parts.id, turn_id = %pending.turn_id(), %error, "a resumed turn failed")
                }
            }
        }
        .instrument(span));
        true
    }

    /// A new `invoke_agent` span for a turn of this session, a child of
    /// the current span.
    fn turn_span(&self) -> Span {
        let parts = &self.inner.parts;
        let identity = &parts.harness.context().identity;
        invoke_agent_span(&parts.agent_id, &identity.agent_name, parts.id.as_str())
    }

    /// Failed or overflowed turns among the last [`RECENT_TURNS`].
    fn recent_failures(&self) -> usize {
        let recent = self.inner.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent.iter().filter(|failed| **failed).count()
    }

    /// Notes how the turn went; then, detached (nothing here delays an
    /// answer), judges the AGENDA's open loops and hands the turn to the
    /// thinking slot's `after_turn`.
    fn after_turn(&self, report: TurnReport, closed_loops: Vec<String>) {
        {
            let mut recent = self.inner.recent.lock().unwrap_or_else(|e| e.into_inner());
            if recent.len() == RECENT_TURNS {
                recent.pop_front();
            }
            recent.push_back(report.failed());
        }
        let parts = &self.inner.parts;
        let judge = match (&parts.open_loops, parts.kind) {
            (Some(loops), SessionKind::User) if report.stop_reason != StopReason::Aborted => {
                Some((loops.clone(), parts.screens.clone()))
            }
            _ => None,
        };
        let thinking = parts.thinking.clone();
        let after = self.inner.after.clone();
        after.send_modify(|n| *n += 1);
        tokio::spawn(async move {
            // Counted down however the task ends.
            struct Done(tokio::sync::watch::Sender<usize>);
            impl Drop for Done {
                fn drop(&mut self) {
                    self.0.send_modify(|n| *n = n.saturating_sub(1));
                }
            }
            let _done = Done(after);
            if let Some((loops, screens)) = judge {
                let judged = loops
                    .after_turn(
                        &report.agent_id,
                        &report.session_id,
                        &report.prompt,
                        &report.answer,
                        &closed_loops,
                        &screens,
                    )
                    .await;
                if let Err(error) = judged {
                    tracing::warn!(session_id = %report.session_id, %error, "open loops were not judged");
                }
            }
            thinking.after_turn(&report).await;
        });
    }

    /// Answers a slash command: the reply reaches the screens like an
    /// answer (`agent_start`, the text, `agent_end`) and is not recorded.
    fn answer_directly(&self, reply: String) -> Pending {
        let parts = &self.inner.parts;
        let identity = &parts.harness.context().identity;
        let _ = parts.screens.on_event(&AgentEvent::AgentStart {
            agent_id: parts.agent_id.clone(),
            agent_name: identity.agent_name.clone(),
            session_id: parts.id.to_string(),
            resumed: false,
        });
        let _ = parts.screens.on_event(&AgentEvent::MessageUpdate {
            delta: MessageDelta::TextDelta(reply.clone()),
        });
        let final_message = FinalMessage {
            role: Role::Assistant,
            content: reply,
            stop_reason: StopReason::Stop,
            usage: Usage::default(),
        };
        let _ = parts.screens.on_event(&AgentEvent::AgentEnd {
            final_message: final_message.clone(),
            turns: 0,
            overflows: 0,
            usage_total: UsageTotal::default(),
        });
        let (tx, rx) = oneshot::channel();
        let _ = tx.send(Ok(LoopOutcome::answered(final_message)));
        Pending {
            result: Some(rx),
            cancel: CancellationToken::new(),
        }
    }

    /// Security, thinking, then the harness turn in its own task.
    pub(super) async fn start(
        &self,
        text: String,
        options: PromptOptions,
    ) -> Result<(Pending, bool, Foreground), TurnError> {
        let inner = &self.inner;
        let cancel = CancellationToken::new();
        let turn = inner.next_job.fetch_add(1, Ordering::Relaxed);
        loop {
            let idle = inner.turn.idle.notified();
            tokio::pin!(idle);
            {
                let mut state = inner.turn.lock();
                match &state.running {
                    None => {
                        *state = TurnState {
                            running: Some((turn, cancel.clone())),
                            ending: false,
                        };
                        break;
                    }
                    // The last turn is over and being recorded: wait for it.
                    Some(_) if state.ending => {
                        idle.as_mut().enable();
                    }
                    Some(_) => return Err(TurnError::Busy(inner.parts.id.to_string())),
                }
            }
            idle.await;
        }
        let foreground = Foreground(inner.turn.clone());
        let parts = &inner.parts;
        // The turn's span, from its security check to its recording; a
        // child of the caller's span (the tool that delegated, if any).
        let span = self.turn_span();
        // A person's turn in their own session may resume after a restart
        // when it stops for them; delegated and scheduled turns are closed.
        let resumable = parts.kind == SessionKind::User
            && matches!(options.caller, Caller::Local | Caller::Web { .. })
            && options.parent_turn.is_none();
        let turn_options = if resumable {
            TurnOptions::resumable()
        } else {
            TurnOptions::default()
        }
        .with_parent(options.parent_turn.clone());
        let input = SecurityInput {
            text,
            caller: options.caller,
            agent_id: parts.agent_id.clone(),
            session_id: parts.id.to_string(),
            peer_session: parts.kind == SessionKind::Peer,
            session_kind: parts.kind,
        };
        let input = match parts.security.run(input).instrument(span.clone()).await {
            Ok(input) => input,
            Err(error) => {
                trace::record_error(&span, "security_rejected");
                let _ = parts.screens.on_event(&AgentEvent::InputRejected {
                    message: error.to_string(),
                });
                return Err(error.into());
            }
        };
        if let Some(commands) = &parts.commands {
            let ctx = CommandContext {
                agent_id: &parts.agent_id,
                session_id: parts.id.as_str(),
            };
            if let Some(reply) = commands.handle(&ctx, &input.text).await {
                return Ok((self.answer_directly(reply), false, foreground));
            }
        }
        let allowances = parts.allowances().map_err(|reached| {
            trace::record_error(&span, "budget_exhausted");
            TurnError::BudgetExhausted(reached)
        })?;
        let tally = match &options.parent_usage {
            Some(parent) => parent.child(allowances),
            None => UsageTally::new(parts.usage.as_ref().map(|m| m.prices().clone()), allowances),
        };
        let open = match (&parts.open_loops, parts.kind) {
            (Some(loops), SessionKind::User) => loops.open_in(parts.id.as_str()).await,
            _ => Vec::new(),
        };
        let now = parts
            .open_loops
            .as_ref()
            .map_or_else(|| Timestamp::from_system_time(SystemTime::now()), |o| o.now());
        let thinking_input = ThinkingInput {
            agent_id: &parts.agent_id,
            session_id: parts.id.as_str(),
            prompt: &input.text,
            due_loops: open.iter().filter(|l| l.is_due(now)).count(),
            recent_failures: self.recent_failures(),
            open_loops: &open,
        };
        let thought = parts
            .thinking
            .before_turn(&thinking_input, &parts.screens)
            .instrument(span.clone())
            .await;
        let closed_loops = thought.closed_loops;
        let turn_instruction = match (options.turn_instruction, thought.note) {
            (Some(a), Some(b)) => Some(format!("{a}\n\n{b}")),
            (a, b) => a.or(b),
        };
        let (extensions, approver) = (options.extensions, options.approver);
        let tap = options
            .tap
            .or_else(|| parts.cassette.as_ref().and_then(|c| c.begin_turn()));
        let (tx, rx) = oneshot::channel();
        let session = self.clone();
        let token = cancel.clone();
        let slot = inner.turn.clone();
        tokio::spawn(async move {
            // The turn's span ends before its caller hears the outcome.
            let outcome = async {
                let parts = &session.inner.parts;
                let prompt = input.text;
                let meter = parts.usage.clone();
                let outcome = parts
                    .harness
                    .run_turn_in(
                        &parts.id,
                        prompt.clone(),
                        turn_options,
                        move |ctx| {
                            EndWatch::install(ctx, slot, turn, meter, tap);
                            ctx.turn_instruction = turn_instruction;
                            ctx.extensions = extensions;
                            ctx.usage = Some(tally);
                            if let Some(approver) = approver {
                                ctx.gate = Arc::new((*ctx.gate).clone().with_approver(approver));
                            }
                        },
                        &token,
                    )
                    .await;
                record_turn_outcome(&Span::current(), &outcome);
                if let Ok(outcome) = &outcome {
                    session.after_turn(
                        TurnReport::new(&parts.agent_id, parts.id.as_str(), &prompt, outcome),
                        closed_loops,
                    );
                }
                outcome
            }
            .instrument(span)
            .await;
            let _ = tx.send(outcome);
        });
        Ok((
            Pending {
                result: Some(rx),
                cancel,
            },
            thought.background,
            foreground,
        ))
    }
}
