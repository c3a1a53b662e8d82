//! The turns in progress as the journal knows them: how each began, its
//! steps and approvals, and what a restart does with one (resume or close).

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};

use super::record::{Record, apply, records_of};
use super::{INTERRUPTED_RESULT, State, VERSION};
use crate::event::StopReason;
use crate::gate::{ApprovalDecision, ApprovalRequest};
use crate::run::LoopState;
use crate::session::EntryBody;
use jarvis_common::Timestamp;
use jarvis_model::{Message, ToolResultMessage};

/// How a turn began: what the journal records first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnBegin {
    /// The turn's id (also in its `turn_start` entry).
    pub turn_id: String,
    /// Its session.
    pub session_id: String,
    /// Its agent.
    pub agent_id: String,
    /// When it began.
    pub at: Timestamp,
    /// The prompt, as it passed the security pipeline.
    pub prompt: String,
    /// The turn that delegated this one (`ask_agent`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Whether the turn may be resumed after a restart (a person's turn in
    /// their own session); others are closed as interrupted.
    #[serde(default)]
    pub resumable: bool,
}

/// An approval request a turn made, and its decision if one was recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournaledApproval {
    /// The request as shown on the screens.
    pub request: ApprovalRequest,
    /// The tool call it is about.
    pub tool_call_id: String,
    /// When it was first asked (a timeout counts from here, across restarts).
    pub asked_at: Timestamp,
    /// The decision, once recorded.
    pub decision: Option<ApprovalDecision>,
}

/// One step of a turn in progress: the assistant message that asked for
/// tools, the results known so far (in call order), and the loop's
/// counters after the model call.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalStep {
    /// The assistant message with its tool calls.
    pub message: Message,
    /// Results of its calls known so far, in call order.
    pub results: Vec<ToolResultMessage>,
    /// The loop's counters when the message was recorded.
    pub state: LoopState,
}

impl JournalStep {
    /// The ids of the calls that have no result yet, in call order.
    pub fn unanswered(&self) -> Vec<&str> {
        match &self.message {
            Message::Assistant(a) => a
                .tool_calls
                .iter()
                .filter(|c| !self.results.iter().any(|r| r.tool_call_id == c.id))
                .map(|c| c.id.as_str())
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// A turn that began and did not end, as read back from the journal.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingTurn {
    /// How it began.
    pub begin: TurnBegin,
    /// Its steps, oldest first; all but the last are complete.
    pub steps: Vec<JournalStep>,
    /// Its approval requests, oldest first.
    pub approvals: Vec<JournaledApproval>,
}

impl PendingTurn {
    /// The turn's id.
    pub fn turn_id(&self) -> &str {
        &self.begin.turn_id
    }

    /// Whether it was waiting for a person: a request without a decision.
    pub fn waits_for_a_person(&self) -> bool {
        self.approvals.iter().any(|a| a.decision.is_none())
    }

    /// The approval recorded for `tool_call_id`, if any (the latest).
    pub fn approval_for(&self, tool_call_id: &str) -> Option<&JournaledApproval> {
        self.approvals
            .iter()
            .rev()
            .find(|a| a.tool_call_id == tool_call_id)
    }

    /// The messages the turn recorded after its prompt, as its history
    /// block holds them: every step's assistant message followed by the
    /// results known for it, in call order.
    pub fn messages(&self) -> Vec<Message> {
        let mut out = Vec::new();
        for step in &self.steps {
            out.push(step.message.clone());
            out.extend(step.results.iter().cloned().map(Message::Tool));
        }
        out
    }

    /// What a resumed turn does with its last step's calls that have no
    /// result: a call still waiting for a person is asked again (its id is
    /// in the second list); every other one gets a result now and never
    /// runs again — the refusal when a person (or the timeout) denied it,
    /// otherwise [`INTERRUPTED_RESULT`] (it may have run).
    pub fn settle_for_resume(&self) -> (Vec<ToolResultMessage>, Vec<String>) {
        let mut settled = Vec::new();
        let mut asked_again = Vec::new();
        let Some(step) = self.steps.last() else {
            return (settled, asked_again);
        };
        let Message::Assistant(a) = &step.message else {
            return (settled, asked_again);
        };
        for call in a
            .tool_calls
            .iter()
            .filter(|c| step.unanswered().contains(&c.id.as_str()))
        {
            let decision = self.approval_for(&call.id).map(|a| a.decision);
            let content = match decision {
                Some(None) => {
                    asked_again.push(call.id.clone());
                    continue;
                }
                Some(Some(ApprovalDecision::Deny)) => refusal(&call.name, "the person denied it"),
                Some(Some(ApprovalDecision::Timeout)) => refusal(&call.name, "nobody approved it in time"),
                Some(Some(ApprovalDecision::Cancelled)) => {
                    refusal(&call.name, "the turn ended before anyone answered")
                }
                _ => INTERRUPTED_RESULT.to_owned(),
            };
            settled.push(ToolResultMessage {
                tool_call_id: call.id.clone(),
                tool_name: call.name.clone(),
                content,
                is_error: true,
            });
        }
        (settled, asked_again)
    }

    /// The turn as the journal's records, one JSON value each, as the file
    /// holds them: how a node hands a turn waiting for a person to the node
    /// that takes its session over ([`PendingTurn::from_records`]).
    pub fn to_records(&self) -> Vec<serde_json::Value> {
        records_of(self)
            .iter()
            .filter_map(|r| serde_json::to_value(r).ok())
            .collect()
    }

    /// The turn [`PendingTurn::to_records`] wrote; `None` when a record is
    /// damaged, of another version, or the records hold no `begin`, several
    /// turns or its `end`.
    pub fn from_records(records: &[serde_json::Value]) -> Option<PendingTurn> {
        let mut state = State::default();
        let mut ended = HashSet::new();
        for value in records {
            let record = serde_json::from_value::<Record>(value.clone()).ok()?;
            if record.version() != VERSION || matches!(record, Record::End { .. }) {
                return None;
            }
            apply(&mut state, &mut ended, record);
        }
        if state.active.len() != 1 {
            return None;
        }
        state.active.into_values().next()
    }

    /// The block that closes the turn as interrupted: `turn_start`, the
    /// prompt, what it recorded (every call without a result gets
    /// [`INTERRUPTED_RESULT`], so each call is followed by its result), and
    /// `turn_end {stop_reason: "interrupted"}`. No answer is invented.
    pub fn interrupted_block(&self) -> Vec<EntryBody> {
        let mut block = vec![
            EntryBody::turn_start(self.begin.turn_id.clone()),
            EntryBody::message(Message::user(self.begin.prompt.clone())),
        ];
        for step in &self.steps {
            block.push(EntryBody::message(step.message.clone()));
            let Message::Assistant(a) = &step.message else {
                continue;
            };
            for call in &a.tool_calls {
                let result = step
                    .results
                    .iter()
                    .find(|r| r.tool_call_id == call.id)
                    .cloned()
                    .unwrap_or_else(|| ToolResultMessage {
                        tool_call_id: call.id.clone(),
                        tool_name: call.name.clone(),
                        content: INTERRUPTED_RESULT.to_owned(),
                        is_error: true,
                    });
                block.push(EntryBody::message(Message::Tool(result)));
            }
        }
        let state = self.steps.last().map(|s| s.state.clone()).unwrap_or_default();
        block.push(EntryBody::TurnEnd {
            stop_reason: StopReason::Interrupted,
            turns: state.step,
            overflows: state.overflows,
        });
        block
    }
}

/// The text the model reads for a call refused at approval (the gate's words).
fn refusal(tool: &str, reason: &str) -> String {
    crate::gate::GateVerdict::Denied {
        stage: crate::gate::GateStage::Approval,
        reason: reason.to_owned(),
    }
    .refusal_message(tool)
    .unwrap_or_default()
}

/// The pending turns of one tree: the top-level turns and, for each, the
/// turns it delegated (transitively), by id.
pub fn descendants(pending: &[PendingTurn]) -> BTreeMap<String, Vec<String>> {
    let mut children: HashMap<&str, Vec<&str>> = HashMap::new();
    for turn in pending {
        if let Some(parent) = &turn.begin.parent {
            children
                .entry(parent.as_str())
                .or_default()
                .push(&turn.begin.turn_id);
        }
    }
    let mut out = BTreeMap::new();
    for turn in pending.iter().filter(|t| t.begin.parent.is_none()) {
        let mut found = Vec::new();
        let mut stack = vec![turn.begin.turn_id.as_str()];
        while let Some(id) = stack.pop() {
            for child in children.get(id).into_iter().flatten() {
                if !found.iter().any(|f: &String| f == child) {
                    found.push((*child).to_owned());
                    stack.push(child);
                }
            }
        }
        out.insert(turn.begin.turn_id.clone(), found);
    }
    out
}
