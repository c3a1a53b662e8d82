//! The pure step logic of the agent loop: a state machine with no I/O.
//!
//! The driver asks it for an [`Action`], performs it (a model call, a batch
//! of tool calls) and feeds the result back together with whether the abort
//! signal is set. The machine owns the recorded history and the counters,
//! and produces the events the driver pushes to subscribers. Everything
//! R-LOOP-1..18 decides is decided here.

use crate::event::{AgentEvent, FinalMessage, MessageDelta, StopReason};
use crate::tool::FINAL_TOOL_NAME;
use jarvis_common::truncate_chars;
use jarvis_model::{
    FinishReason, Message, ModelResponse, ProviderError, Purpose, Role, ToolCall, ToolResultMessage, Usage,
};

use super::LoopState;
use super::prompts;

/// What the machine needs done next.
#[derive(Debug, PartialEq)]
pub(crate) enum Action {
    /// Call the model over the current history.
    Call(CallPlan),
    /// Run these tool calls (already recorded in the history) and report
    /// their results in call order.
    RunTools(Vec<ToolCall>),
    /// The turn is over; take the outcome.
    Done,
}

/// How to make one model call.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CallPlan {
    pub(crate) purpose: Purpose,
    /// Offer the tool definitions (false only for the summary call).
    pub(crate) with_tools: bool,
    /// An unrecorded instruction to append as a trailing user message.
    pub(crate) instruction: Option<String>,
    /// Stream deltas to subscribers (false only for the summary call).
    pub(crate) stream: bool,
}

/// The result of a model call as the driver saw it.
#[derive(Debug)]
pub(crate) enum Reply {
    Answer(ModelResponse),
    Failed(ProviderError),
    /// The abort signal fired while the call was streaming.
    Cancelled,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Awaiting {
    Start,
    Step,
    Nudge,
    Tools,
    Summary,
    WrapUp,
    Done,
}

/// The limits the machine enforces.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) max_turns: u32,
    pub(crate) continuation_steps: u32,
    pub(crate) overflow_resume: bool,
}

/// The outcome the machine hands back when done. `provider_calls` counts
/// every call made, also one cut short by an abort.
#[derive(Debug)]
pub(crate) struct Finished {
    pub(crate) final_message: FinalMessage,
    pub(crate) new_messages: Vec<Message>,
    pub(crate) turns: u32,
    pub(crate) overflows: u8,
    pub(crate) summary_calls: u8,
    pub(crate) provider_calls: u32,
    pub(crate) error: Option<ProviderError>,
}

#[derive(Debug)]
pub(crate) struct Machine {
    limits: Limits,
    history: Vec<Message>,
    turn_start: usize,
    step: u32,
    budget_end: u32,
    /// The first summary, while the continuation runs.
    continuation: Option<String>,
    awaiting: Awaiting,
    overflows: u8,
    summary_calls: u8,
    provider_calls: u32,
    usage: Usage,
    events: Vec<AgentEvent>,
    start_event: Option<AgentEvent>,
    final_message: Option<FinalMessage>,
    error: Option<ProviderError>,
    /// The budget reached, when one is: the next call is the wrap-up.
    budget: Option<String>,
}

impl Machine {
    /// A machine for one turn over `history` (which ends with the new
    /// prompt). `start_event` is the `agent_start` to emit.
    pub(crate) fn new(limits: Limits, history: Vec<Message>, start_event: AgentEvent) -> Self {
        Self {
            limits,
            turn_start: history.len(),
            budget_end: limits.max_turns,
            history,
            step: 0,
            continuation: None,
            awaiting: Awaiting::Start,
            overflows: 0,
            summary_calls: 0,
            provider_calls: 0,
            usage: Usage::default(),
            events: Vec::new(),
            start_event: Some(start_event),
            final_message: None,
            error: None,
            budget: None,
        }
    }

    /// A machine picking up a turn where a crash left it: `history` holds
    /// the window, the prompt and what the turn recorded (ending with the
    /// assistant message whose tool calls still run), `turn_start` is the
    /// index just after the prompt, and `state` the counters the journal
    /// kept. [`start_resumed`](Self::start_resumed) begins it.
    pub(crate) fn resumed(
        limits: Limits,
        history: Vec<Message>,
        turn_start: usize,
        state: &LoopState,
        start_event: AgentEvent,
    ) -> Self {
        let mut machine = Self::new(limits, history, start_event);
        machine.turn_start = turn_start.min(machine.history.len());
        machine.step = state.step;
        machine.budget_end = state.budget_end.max(state.step).max(1);
        machine.continuation = state.continuation.clone();
        machine.overflows = state.overflows;
        machine.summary_calls = state.summary_calls;
        machine.provider_calls = state.provider_calls;
        machine.usage = state.usage;
        machine
    }

    /// Begins a resumed turn: the tool calls of its last assistant message
    /// run (the driver skips those whose results are known), or, when there
    /// are none, the next step.
    pub(crate) fn start_resumed(&mut self, aborted: bool) -> Action {
        debug_assert_eq!(self.awaiting, Awaiting::Start);
        if let Some(e) = self.start_event.take() {
            self.events.push(e);
        }
        match self.history.last() {
            Some(Message::Assistant(a))
                if !a.tool_calls.is_empty() && self.history.len() > self.turn_start =>
            {
                self.awaiting = Awaiting::Tools;
                Action::RunTools(a.tool_calls.clone())
            }
            _ => self.next_step(aborted),
        }
    }

    /// The counters a resumed turn needs (see [`LoopState`]).
    pub(crate) fn snapshot(&self) -> LoopState {
        LoopState {
            step: self.step,
            budget_end: self.budget_end,
            continuation: self.continuation.clone(),
            overflows: self.overflows,
            summary_calls: self.summary_calls,
            provider_calls: self.provider_calls,
            usage: self.usage,
        }
    }

    /// The recorded history, for building requests.
    pub(crate) fn history(&self) -> &[Message] {
        &self.history
    }

    /// Events produced since the last call, in order.
    pub(crate) fn drain_events(&mut self) -> std::vec::Drain<'_, AgentEvent> {
        self.events.drain(..)
    }

    /// Begins the turn.
    pub(crate) fn start(&mut self, aborted: bool) -> Action {
        debug_assert_eq!(self.awaiting, Awaiting::Start);
        if let Some(e) = self.start_event.take() {
            self.events.push(e);
        }
        self.next_step(aborted)
    }

    /// A budget (`limit`, in words) is reached: instead of the next step
    /// or summary, one tool-less wrap-up call gives the answer.
    pub(crate) fn budget_reached(&mut self, limit: String) {
        self.budget.get_or_insert(limit);
    }

    /// Feeds the result of the call the last [`Action::Call`] asked for.
    pub(crate) fn on_reply(&mut self, reply: Reply, aborted: bool) -> Action {
        self.provider_calls += 1;
        match self.awaiting {
            Awaiting::Step | Awaiting::Nudge => self.on_step_reply(reply, aborted),
            Awaiting::Summary => self.on_summary_reply(reply, aborted),
            Awaiting::WrapUp => self.on_wrap_up_reply(reply),
            other => self.protocol_error(&format!("a model reply arrived while awaiting {other:?}")),
        }
    }

    /// Feeds the results of the calls the last [`Action::RunTools`] asked
    /// for, in call order.
    pub(crate) fn on_tool_results(&mut self, results: Vec<ToolResultMessage>, aborted: bool) -> Action {
        if self.awaiting != Awaiting::Tools {
            return self.protocol_error("tool results arrived unasked");
        }
        let final_answer = results
            .iter()
            .find(|r| r.tool_name == FINAL_TOOL_NAME && !r.is_error)
            .map(|r| r.content.clone());
        self.history.extend(results.into_iter().map(Message::Tool));
        if let Some(answer) = final_answer {
            // The answer is shown and recorded as an ordinary assistant
            // message, so screens and the next turn see it as the reply.
            self.emit_answer(&answer);
            self.history.push(Message::assistant_text(answer.clone()));
            return self.finish(StopReason::Final, answer);
        }
        if self.step >= self.budget_end && self.budget.is_none() {
            // R-LOOP-5: the model was still calling tools in the last allowed step.
            return self.overflow(aborted);
        }
        self.next_step(aborted)
    }

    /// The outcome; call after [`Action::Done`].
    pub(crate) fn into_finished(mut self) -> Finished {
        let final_message = self.final_message.take().unwrap_or_else(|| FinalMessage {
            role: Role::Assistant,
            content: String::new(),
            stop_reason: StopReason::Error,
            usage: self.usage,
        });
        Finished {
            final_message,
            new_messages: self.history.split_off(self.turn_start),
            turns: self.step,
            overflows: self.overflows,
            summary_calls: self.summary_calls,
            provider_calls: self.provider_calls,
            error: self.error,
        }
    }

    fn next_step(&mut self, aborted: bool) -> Action {
        if aborted {
            return self.finish_aborted();
        }
        if let Some(limit) = &self.budget {
            let instruction = prompts::budget_wrap_up(limit);
            self.awaiting = Awaiting::WrapUp;
            return Action::Call(CallPlan {
                purpose: Purpose::WrapUp,
                with_tools: false,
                instruction: Some(instruction),
                stream: true,
            });
        }
        self.step += 1;
        self.events.push(AgentEvent::TurnStart { turn: self.step });
        self.awaiting = Awaiting::Step;
        Action::Call(self.step_plan(false))
    }

    fn step_plan(&self, nudge: bool) -> CallPlan {
        let mut instruction = self
            .continuation
            .as_deref()
            .map(|summary| prompts::continuation(summary, self.budget_end - self.step + 1));
        let purpose = if nudge {
            let text = prompts::NUDGE_INSTRUCTION;
            instruction = Some(match instruction {
                Some(c) => format!("{c}\n\n{text}"),
                None => text.to_owned(),
            });
            Purpose::Nudge
        } else if self.continuation.is_some() {
            Purpose::Continuation
        } else {
            Purpose::Step
        };
        CallPlan {
            purpose,
            with_tools: true,
            instruction,
            stream: true,
        }
    }

    fn on_step_reply(&mut self, reply: Reply, aborted: bool) -> Action {
        let response = match reply {
            Reply::Cancelled => return self.finish_aborted(),
            Reply::Failed(error) => {
                self.events.push(AgentEvent::AgentError {
                    message: error.to_string(),
                });
                self.error = Some(error);
                return self.finish(StopReason::Error, String::new());
            }
            Reply::Answer(response) => response,
        };
        self.usage += response.usage;
        if response.is_empty() {
            if self.awaiting == Awaiting::Nudge {
                // Empty again after the nudge: the turn ends with "" and no error.
                return self.finish(StopReason::Empty, String::new());
            }
            if aborted {
                return self.finish_aborted();
            }
            self.awaiting = Awaiting::Nudge;
            return Action::Call(self.step_plan(true));
        }
        let stop = match response.finish {
            FinishReason::Length => StopReason::Length,
            FinishReason::ContentFilter => StopReason::ContentFilter,
            _ => StopReason::Stop,
        };
        let message = response.into_message();
        let text = message.content.clone();
        let calls = message.tool_calls.clone();
        self.history.push(Message::Assistant(message));
        if calls.is_empty() {
            return self.finish(stop, text);
        }
        self.awaiting = Awaiting::Tools;
        Action::RunTools(calls)
    }

    fn overflow(&mut self, aborted: bool) -> Action {
        self.overflows += 1;
        if !self.limits.overflow_resume {
            let last = self.last_assistant_text();
            return self.finish(StopReason::MaxTurns, last);
        }
        // R-LOOP-13: the abort signal is checked before the summary call.
        if aborted {
            return self.finish_aborted();
        }
        self.summary_calls += 1;
        self.awaiting = Awaiting::Summary;
        Action::Call(CallPlan {
            purpose: Purpose::Summary,
            with_tools: false,
            instruction: Some(prompts::summary_request()),
            stream: false,
        })
    }

    fn on_summary_reply(&mut self, reply: Reply, aborted: bool) -> Action {
        let text = match reply {
            Reply::Cancelled => return self.finish_aborted(),
            Reply::Failed(error) => {
                tracing::warn!(%error, "overflow summary call failed; using the fallback summary");
                None
            }
            Reply::Answer(response) => {
                self.usage += response.usage;
                let text = response.text.trim();
                (!text.is_empty()).then(|| truncate_chars(text, prompts::SUMMARY_MAX_CHARS).to_owned())
            }
        };
        let summary = text.unwrap_or_else(|| self.fallback_summary());
        // R-LOOP-13: and after it.
        if aborted {
            return self.finish_aborted();
        }
        if self.continuation.is_none() {
            // First overflow: continue once, for max(1, max_turns / 2) steps.
            self.budget_end = self.limits.max_turns + self.limits.continuation_steps;
            self.continuation = Some(summary);
            return self.next_step(false);
        }
        // Second overflow: the summary is the answer, shown and recorded.
        self.emit_answer(&summary);
        self.history.push(Message::assistant_text(summary.clone()));
        self.finish(StopReason::Overflow, summary)
    }

    /// The wrap-up's answer ends the turn; when it fails or is empty, the
    /// last assistant text of the turn is the answer.
    fn on_wrap_up_reply(&mut self, reply: Reply) -> Action {
        let text = match reply {
            Reply::Cancelled => return self.finish_aborted(),
            Reply::Failed(error) => {
                tracing::warn!(%error, "the budget wrap-up call failed; the last text is the answer");
                None
            }
            Reply::Answer(response) => {
                self.usage += response.usage;
                let text = response.text.trim();
                (!text.is_empty()).then(|| text.to_owned())
            }
        };
        let answer = match text {
            Some(text) => {
                self.history.push(Message::assistant_text(text.clone()));
                text
            }
            None => self.last_assistant_text(),
        };
        self.finish(StopReason::Budget, answer)
    }

    fn emit_answer(&mut self, answer: &str) {
        if !answer.is_empty() {
            self.events.push(AgentEvent::MessageUpdate {
                delta: MessageDelta::TextDelta(answer.to_owned()),
            });
        }
    }

    fn fallback_summary(&self) -> String {
        let names = self.turn_messages().iter().flat_map(|m| match m {
            Message::Assistant(a) => a.tool_calls.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            _ => Vec::new(),
        });
        let answer = self.last_assistant_text();
        let answer = (!answer.is_empty()).then_some(answer.as_str());
        let summary = prompts::fallback_summary(names, answer);
        truncate_chars(&summary, prompts::SUMMARY_MAX_CHARS).to_owned()
    }

    fn turn_messages(&self) -> &[Message] {
        &self.history[self.turn_start..]
    }

    fn last_assistant_text(&self) -> String {
        self.turn_messages()
            .iter()
            .rev()
            .find_map(|m| match m {
                Message::Assistant(a) if !a.content.trim().is_empty() => Some(a.content.clone()),
                _ => None,
            })
            .unwrap_or_default()
    }

    fn finish_aborted(&mut self) -> Action {
        let last = self.last_assistant_text();
        self.finish(StopReason::Aborted, last)
    }

    fn finish(&mut self, stop_reason: StopReason, content: String) -> Action {
        let final_message = FinalMessage {
            role: Role::Assistant,
            content,
            stop_reason,
            usage: self.usage,
        };
        self.events.push(AgentEvent::AgentEnd {
            final_message: final_message.clone(),
            turns: self.step,
            overflows: self.overflows,
            usage_total: crate::run::UsageTotal::default(),
        });
        self.final_message = Some(final_message);
        self.awaiting = Awaiting::Done;
        Action::Done
    }

    fn protocol_error(&mut self, what: &str) -> Action {
        debug_assert!(false, "agent loop protocol error: {what}");
        tracing::error!(what, "agent loop protocol error");
        if self.awaiting == Awaiting::Done {
            return Action::Done;
        }
        self.finish(StopReason::Error, String::new())
    }
}

#[cfg(test)]
mod tests {
    //! The machine on its own: no provider, no tools, no async.

    use super::*;
    use serde_json::json;

    fn machine(max_turns: u32) -> Machine {
        Machine::new(
            Limits {
                max_turns,
                continuation_steps: (max_turns / 2).max(1),
                overflow_resume: true,
            },
            vec![Message::user("go")],
            AgentEvent::TurnStart { turn: 0 },
        )
    }

    fn tool_reply(id: &str) -> Reply {
        Reply::Answer(ModelResponse {
            tool_calls: vec![ToolCall {
                id: id.into(),
                name: "t".into(),
                arguments: json!({}),
            }],
            ..ModelResponse::default()
        })
    }

    fn result(id: &str) -> Vec<ToolResultMessage> {
        vec![ToolResultMessage {
            tool_call_id: id.into(),
            tool_name: "t".into(),
            content: "ok".into(),
            is_error: false,
        }]
    }

    #[test]
    fn single_step_budget_overflows_into_one_continuation_step() {
        let mut m = machine(1);
        assert!(matches!(m.start(false), Action::Call(p) if p.purpose == Purpose::Step));
        assert!(matches!(m.on_reply(tool_reply("a"), false), Action::RunTools(_)));
        let Action::Call(summary) = m.on_tool_results(result("a"), false) else {
            panic!()
        };
        assert_eq!(
            (summary.purpose, summary.with_tools, summary.stream),
            (Purpose::Summary, false, false)
        );
        let Action::Call(cont) = m.on_reply(Reply::Failed(ProviderError::incomplete("test")), false) else {
            panic!()
        };
        assert_eq!(cont.purpose, Purpose::Continuation);
        assert!(cont.instruction.unwrap().contains("1번"));
        assert!(matches!(m.on_reply(tool_reply("b"), false), Action::RunTools(_)));
        assert!(
            matches!(m.on_tool_results(result("b"), false), Action::Call(p) if p.purpose == Purpose::Summary)
        );
        assert_eq!(
            m.on_reply(
                Reply::Answer(ModelResponse {
                    text: "sum".into(),
                    ..Default::default()
                }),
                false
            ),
            Action::Done
        );
        let f = m.into_finished();
        assert_eq!(
            (f.turns, f.overflows, f.summary_calls, f.provider_calls),
            (2, 2, 2, 4)
        );
        assert_eq!(f.final_message.stop_reason, StopReason::Overflow);
        assert_eq!(f.final_message.content, "sum");
        assert!(matches!(f.new_messages.last(), Some(Message::Assistant(a)) if a.content == "sum"));
    }

    #[test]
    fn unexpected_input_ends_the_turn_instead_of_panicking_in_release() {
        if cfg!(debug_assertions) {
            return; // the debug assertion is the point in debug builds
        }
        let mut m = machine(2);
        assert_eq!(m.on_tool_results(result("x"), false), Action::Done);
    }
}
