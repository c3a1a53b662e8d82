//! [`AgentEvent`]: the plain-data events a turn pushes to its subscribers
//! (SPEC.md §6). Serialised with a `type` tag, they are the WebSocket
//! contract the HUD reads, so names and fields are stable.

use serde::{Deserialize, Serialize};
use serde_json::Value;

mod notice;

pub use notice::{Notice, ScreenNotice};

use super::run::UsageTotal;
use jarvis_model::{Role, Usage};

/// One event of a running turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum AgentEvent {
    /// The loop starts. Exactly one `agent_end` follows.
    AgentStart {
        /// The agent's id (`main`, `karen`).
        agent_id: String,
        /// The agent's display name (`J.A.R.V.I.S.`).
        agent_name: String,
        /// The session the turn runs in.
        session_id: String,
        /// The turn began before a restart and goes on where it stopped
        /// (it was waiting for a person); only sent when `true`.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        resumed: bool,
    },
    /// A step begins; numbered from 1 and counting on through a continuation.
    TurnStart {
        /// The step number.
        turn: u32,
    },
    /// Streamed output: exactly one of `text_delta` or `thinking_delta`.
    MessageUpdate {
        /// The piece of output.
        #[serde(flatten)]
        delta: MessageDelta,
    },
    /// A tool call is about to pass the gate and run. Starts fire in call order.
    ToolExecutionStart {
        /// The call id.
        tool_call_id: String,
        /// The tool's name.
        tool_name: String,
        /// The call's arguments.
        args: Value,
    },
    /// A tool call finished, failed or was refused. Ends fire in completion order.
    ToolExecutionEnd {
        /// The call id.
        tool_call_id: String,
        /// The tool's name.
        tool_name: String,
        /// The call's arguments.
        args: Value,
        /// Whether the result reports a failure or a refusal.
        is_error: bool,
        /// The result, truncated for display.
        result: String,
    },
    /// The loop ended.
    AgentEnd {
        /// The answer of the turn.
        final_message: FinalMessage,
        /// Steps run (summary calls excluded).
        turns: u32,
        /// Overflows in this turn: 0, 1 or 2.
        overflows: u8,
        /// What the turn spent with everything it started: its own calls
        /// (`final_message.usage`) plus its sub-agents' and delegations'.
        #[serde(default)]
        usage_total: UsageTotal,
    },
    /// The model call failed; `agent_end` follows.
    AgentError {
        /// What went wrong.
        message: String,
    },
    /// The security pipeline refused an input; no turn ran and the model
    /// never saw it.
    InputRejected {
        /// Why, for the person.
        message: String,
    },
    /// The Thought Router decided whether to think before the turn.
    ThoughtRoute {
        /// Whether the inner thought engine runs.
        think: bool,
        /// The router's probability that thinking helps, 0 to 1.
        p_think: f32,
    },
    /// The inner thought engine produced a frame.
    InnerThought {
        /// What the request was understood to be.
        interpretation: String,
        /// What the agent decided to do.
        decision: String,
        /// How sure it is, 0 to 1.
        confidence: f32,
        /// The whole validated frame.
        frame: Value,
    },
    /// A thought the router started finished; sent also when it failed.
    ThoughtEnd {
        /// Whether a valid frame came out.
        ok: bool,
    },
    /// A message the agent sends without being asked in that moment.
    ProactiveMessage {
        /// The text.
        text: String,
        /// `filler`, `proactive` or `answer`.
        kind: ProactiveKind,
        /// Identifies it in `proactive_feedback`.
        message_id: String,
    },
    /// An event of a sub-agent running inside this turn, wrapped so that
    /// no screen takes it for the turn's own (a sub-agent's `agent_end` is
    /// not the end of the turn). Sub-agents of sub-agents are wrapped once,
    /// with the whole path.
    SubagentEvent {
        /// The `run_subagent` call of the top-level turn's agent (or of
        /// the sub-agent one level up) that runs this sub-agent.
        parent_tool_call_id: String,
        /// The agents from the turn's agent down to this sub-agent:
        /// `["main", "researcher"]`.
        agent_path: Vec<String>,
        /// The sub-agent's event, unchanged.
        event: Box<AgentEvent>,
    },
    /// A notice of a layer above the loop for the session's screens (the
    /// AGENDA changed: `agenda_changed`; a Focus task moved on:
    /// `focus_state`, `focus_panel`), sent as its own `type` with its own
    /// fields. Read it with [`AgentEvent::as_notice`]. An event of a
    /// `type` this version does not know is read as one too.
    #[serde(untagged)]
    Notice(Notice),
}

/// What a `proactive_message` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProactiveKind {
    /// A short "still working on it" while a turn runs long.
    Filler,
    /// Something the agent brings up on its own (a due promise, a watch result).
    Proactive,
    /// The answer of a job that finished in the background.
    Answer,
}

impl AgentEvent {
    /// The event carrying the notice `value`.
    pub fn notice<N: ScreenNotice>(value: &N) -> Self {
        AgentEvent::Notice(Notice::of(value))
    }

    /// The notice this event carries, when it is one of `N`'s type.
    pub fn as_notice<N: ScreenNotice>(&self) -> Option<N> {
        match self {
            AgentEvent::Notice(notice) => notice.decode(),
            _ => None,
        }
    }

    /// The `type` tag of this event as it appears in JSON.
    pub fn kind(&self) -> &str {
        match self {
            AgentEvent::AgentStart { .. } => "agent_start",
            AgentEvent::TurnStart { .. } => "turn_start",
            AgentEvent::MessageUpdate { .. } => "message_update",
            AgentEvent::ToolExecutionStart { .. } => "tool_execution_start",
            AgentEvent::ToolExecutionEnd { .. } => "tool_execution_end",
            AgentEvent::AgentEnd { .. } => "agent_end",
            AgentEvent::AgentError { .. } => "agent_error",
            AgentEvent::InputRejected { .. } => "input_rejected",
            AgentEvent::ThoughtRoute { .. } => "thought_route",
            AgentEvent::InnerThought { .. } => "inner_thought",
            AgentEvent::ThoughtEnd { .. } => "thought_end",
            AgentEvent::ProactiveMessage { .. } => "proactive_message",
            AgentEvent::SubagentEvent { .. } => "subagent_event",
            AgentEvent::Notice(notice) => notice.kind(),
        }
    }
}

/// The payload of a `message_update`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageDelta {
    /// Visible answer text.
    TextDelta(String),
    /// Model thinking.
    ThinkingDelta(String),
}

/// The answer of a turn, as carried by `agent_end`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinalMessage {
    /// Always `assistant`.
    pub role: Role,
    /// The answer text (may be empty, see [`StopReason`]).
    pub content: String,
    /// How the turn ended.
    pub stop_reason: StopReason,
    /// Tokens used by every model call of the turn, summary calls included.
    pub usage: Usage,
}

/// How a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StopReason {
    /// The model answered.
    Stop,
    /// The model answered but hit its output token limit.
    Length,
    /// The provider filtered the answer.
    ContentFilter,
    /// The `final` tool ended the turn with its `answer`.
    Final,
    /// The model answered empty twice (once nudged); the answer is `""`.
    Empty,
    /// The step budget ran out with overflow resume off; the answer is the
    /// last assistant text of the turn.
    MaxTurns,
    /// The continuation overflowed too; the answer is the second summary.
    Overflow,
    /// A model call failed (`agent_error` was sent).
    Error,
    /// The turn was aborted; the answer is the last assistant text of the turn.
    Aborted,
    /// The process stopped (a crash, a kill) while the turn ran; it was
    /// closed at the next start with what it had recorded and no answer.
    Interrupted,
    /// A budget was reached; one tool-less wrap-up call gave the answer.
    Budget,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn message_update_carries_exactly_one_delta_field() {
        let e = AgentEvent::MessageUpdate {
            delta: MessageDelta::TextDelta("hi".into()),
        };
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            json!({"type": "message_update", "text_delta": "hi"})
        );
        let t: AgentEvent =
            serde_json::from_value(json!({"type": "message_update", "thinking_delta": "hm"})).unwrap();
        assert_eq!(
            t,
            AgentEvent::MessageUpdate {
                delta: MessageDelta::ThinkingDelta("hm".into())
            }
        );
    }

    #[test]
    fn agent_end_has_the_spec_fields() {
        let e = AgentEvent::AgentEnd {
            final_message: FinalMessage {
                role: Role::Assistant,
                content: "x".into(),
                stop_reason: StopReason::MaxTurns,
                usage: Usage::default(),
            },
            turns: 3,
            overflows: 1,
            usage_total: UsageTotal::default(),
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["type"], "agent_end");
        assert_eq!(v["final_message"]["role"], "assistant");
        assert_eq!(v["final_message"]["stop_reason"], "max_turns");
        assert_eq!(v["final_message"]["usage"]["input_tokens"], 0);
        assert_eq!((v["turns"].as_u64(), v["overflows"].as_u64()), (Some(3), Some(1)));
        assert_eq!(e.kind(), "agent_end");
    }

    /// A notice of a layer above, with a nested object whose members are
    /// not in alphabetical order.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Moved {
        task_id: String,
        steps: Vec<Step>,
        current: Option<usize>,
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Step {
        title: String,
        status: String,
    }

    impl ScreenNotice for Moved {
        const KIND: &'static str = "task_moved";
    }

    fn moved() -> Moved {
        Moved {
            task_id: "f-1".into(),
            steps: vec![Step {
                title: "read".into(),
                status: "done".into(),
            }],
            current: None,
        }
    }

    #[test]
    fn a_notice_is_sent_as_its_own_type_with_its_fields_in_their_order() {
        let event = AgentEvent::notice(&moved());
        assert_eq!(event.kind(), "task_moved");
        assert_eq!(
            serde_json::to_string(&event).unwrap(),
            r#"{"type":"task_moved","task_id":"f-1","steps":[{"title":"read","status":"done"}],"current":null}"#
        );
        // Wrapped in a sub-agent's event too.
        let wrapped = AgentEvent::SubagentEvent {
            parent_tool_call_id: "c1".into(),
            agent_path: vec!["main".into()],
            event: Box::new(event.clone()),
        };
        assert!(
            serde_json::to_string(&wrapped)
                .unwrap()
                .contains(r#""event":{"type":"task_moved","task_id""#)
        );
    }

    #[test]
    fn a_notice_reads_back_as_the_event_and_decodes_as_its_type_only() {
        let event = AgentEvent::notice(&moved());
        let text = serde_json::to_string(&event).unwrap();
        let read: AgentEvent = serde_json::from_str(&text).unwrap();
        assert_eq!(read, event);
        assert_eq!(read.as_notice::<Moved>(), Some(moved()));
        // A known event type is never read as a notice.
        let start: AgentEvent = serde_json::from_str(r#"{"type":"turn_start","turn":2}"#).unwrap();
        assert_eq!(start, AgentEvent::TurnStart { turn: 2 });
        assert_eq!(start.as_notice::<Moved>(), None);
        // Another notice type does not decode as this one.
        let other: AgentEvent = serde_json::from_str(r#"{"type":"elsewhere","task_id":"f-1"}"#).unwrap();
        assert_eq!(other.kind(), "elsewhere");
        assert_eq!(other.as_notice::<Moved>(), None);
    }

    #[test]
    fn an_object_without_a_string_type_is_no_event() {
        for text in [
            r#"{"task_id":"f-1"}"#,
            r#"{"type":7}"#,
            r#"[1]"#,
            r#""turn_start""#,
        ] {
            assert!(serde_json::from_str::<AgentEvent>(text).is_err(), "{text}");
        }
    }
}
