//! The journal's records, one per line: their format, the records that
//! rebuild a turn, and a file's records folded back into the turns in progress.

use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::Path;

use super::{JournalStep, JournaledApproval, PendingTurn, State, TurnBegin, VERSION};
use crate::gate::{ApprovalDecision, ApprovalRequest};
use crate::run::LoopState;
use jarvis_common::Timestamp;
use jarvis_model::{Message, ToolResultMessage};

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(super) enum Record {
    Begin {
        v: u32,
        #[serde(flatten)]
        begin: TurnBegin,
    },
    Step {
        v: u32,
        turn_id: String,
        message: Message,
        state: LoopState,
    },
    Result {
        v: u32,
        turn_id: String,
        result: ToolResultMessage,
    },
    Ask {
        v: u32,
        turn_id: String,
        tool_call_id: String,
        request: ApprovalRequest,
        at: Timestamp,
    },
    Decide {
        v: u32,
        turn_id: String,
        request_id: String,
        decision: ApprovalDecision,
    },
    End {
        v: u32,
        turn_id: String,
    },
}

impl Record {
    pub(super) fn version(&self) -> u32 {
        match self {
            Record::Begin { v, .. }
            | Record::Step { v, .. }
            | Record::Result { v, .. }
            | Record::Ask { v, .. }
            | Record::Decide { v, .. }
            | Record::End { v, .. } => *v,
        }
    }
}

/// Puts `result` among the step's results in its call's order (replacing
/// an earlier result of the same call).
pub(super) fn insert_result(step: &mut JournalStep, result: ToolResultMessage) {
    let Message::Assistant(a) = &step.message else {
        return;
    };
    let position = |id: &str| a.tool_calls.iter().position(|c| c.id == id);
    let Some(at) = position(&result.tool_call_id) else {
        return;
    };
    step.results.retain(|r| r.tool_call_id != result.tool_call_id);
    let index = step
        .results
        .iter()
        .position(|r| position(&r.tool_call_id).is_some_and(|p| p > at))
        .unwrap_or(step.results.len());
    step.results.insert(index, result);
}

/// The records that rebuild `turn` (compaction).
pub(super) fn records_of(turn: &PendingTurn) -> Vec<Record> {
    let id = &turn.begin.turn_id;
    let mut out = vec![Record::Begin {
        v: VERSION,
        begin: turn.begin.clone(),
    }];
    for step in &turn.steps {
        out.push(Record::Step {
            v: VERSION,
            turn_id: id.clone(),
            message: step.message.clone(),
            state: step.state.clone(),
        });
        out.extend(step.results.iter().map(|r| Record::Result {
            v: VERSION,
            turn_id: id.clone(),
            result: r.clone(),
        }));
    }
    for a in &turn.approvals {
        out.push(Record::Ask {
            v: VERSION,
            turn_id: id.clone(),
            tool_call_id: a.tool_call_id.clone(),
            request: a.request.clone(),
            at: a.asked_at,
        });
        if let Some(decision) = a.decision {
            out.push(Record::Decide {
                v: VERSION,
                turn_id: id.clone(),
                request_id: a.request.request_id.clone(),
                decision,
            });
        }
    }
    out
}

/// Folds the file's records into the turns still in progress; answers
/// them and the length of the file's whole lines.
pub(super) fn fold(path: &Path, bytes: &[u8]) -> (State, u64) {
    let mut state = State::default();
    let mut offset = 0usize;
    let mut good = 0usize;
    let mut skipped = 0usize;
    let mut ended: HashSet<String> = HashSet::new();
    while offset < bytes.len() {
        let Some(nl) = bytes[offset..].iter().position(|b| *b == b'\n') else {
            tracing::warn!(path = %path.display(), bytes = bytes.len() - offset,
                "turn journal: cut off a torn last line (a write was interrupted)");
            break;
        };
        let line = &bytes[offset..offset + nl];
        offset += nl + 1;
        good = offset;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let record = match serde_json::from_slice::<Record>(line) {
            Ok(r) if r.version() == VERSION => r,
            _ => {
                skipped += 1;
                continue;
            }
        };
        apply(&mut state, &mut ended, record);
    }
    if skipped > 0 {
        tracing::warn!(path = %path.display(), skipped, "turn journal: skipped damaged lines");
    }
    (state, good as u64)
}

pub(super) fn apply(state: &mut State, ended: &mut HashSet<String>, record: Record) {
    match record {
        Record::Begin { begin, .. } => {
            if ended.contains(&begin.turn_id) || state.active.contains_key(&begin.turn_id) {
                return;
            }
            state.order.push(begin.turn_id.clone());
            state.active.insert(
                begin.turn_id.clone(),
                PendingTurn {
                    begin,
                    steps: Vec::new(),
                    approvals: Vec::new(),
                },
            );
        }
        Record::Step {
            turn_id,
            message,
            state: loop_state,
            ..
        } => {
            if let Some(turn) = state.active.get_mut(&turn_id) {
                turn.steps.push(JournalStep {
                    message,
                    results: Vec::new(),
                    state: loop_state,
                });
            }
        }
        Record::Result { turn_id, result, .. } => {
            if let Some(step) = state.active.get_mut(&turn_id).and_then(|t| t.steps.last_mut()) {
                insert_result(step, result);
            }
        }
        Record::Ask {
            turn_id,
            tool_call_id,
            request,
            at,
            ..
        } => {
            if let Some(turn) = state.active.get_mut(&turn_id)
                && !turn
                    .approvals
                    .iter()
                    .any(|a| a.request.request_id == request.request_id)
            {
                turn.approvals.push(JournaledApproval {
                    request,
                    tool_call_id,
                    asked_at: at,
                    decision: None,
                });
            }
        }
        Record::Decide {
            turn_id,
            request_id,
            decision,
            ..
        } => {
            if let Some(a) = state.active.get_mut(&turn_id).and_then(|t| {
                t.approvals
                    .iter_mut()
                    .find(|a| a.request.request_id == request_id)
            }) {
                a.decision = Some(decision);
            }
        }
        Record::End { turn_id, .. } => {
            state.active.remove(&turn_id);
            state.order.retain(|id| *id != turn_id);
            ended.insert(turn_id);
        }
    }
}
