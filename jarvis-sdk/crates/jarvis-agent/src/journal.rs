//! [`TurnJournal`]: the turns in progress, kept apart from the session
//! histories until they end.
//!
//! A session's history only ever receives whole turns, each as one
//! contiguous block written when the turn ends. While a turn runs, what it
//! has done so far lives here, in `$JARVIS_HOME/turns.jsonl`, one record per
//! line:
//!
//! | `op` | written | holds |
//! |---|---|---|
//! | `begin` | when the turn starts | turn id, session, agent, time, the prompt, the delegating turn (`parent`), whether it may resume |
//! | `step` | when the model asked for tools | the assistant message with its calls, and the loop's counters ([`LoopState`]) |
//! | `result` | as each tool call finishes | the tool result |
//! | `ask` | before an approval request is shown | the request and the time it was first asked; **synced** |
//! | `decide` | when a person (or the timeout) decided | the decision; **synced** before the tool runs |
//! | `end` | after the turn's block is in its session's history | the turn id |
//!
//! Every line carries `"v": 1`. Appends are single writes: a killed process
//! loses nothing it wrote (the operating system has it). `ask` and `decide`
//! are also `fdatasync`ed, so a turn that stops for a person survives a
//! power loss with everything it did before. When no turn is in progress the
//! file is emptied (once it has grown past a few kilobytes), so it stays
//! small.
//!
//! [`TurnJournal::open`] reads the file back and answers the turns that
//! began and did not end ([`PendingTurn`]): the app closes them as
//! interrupted or resumes them (a top-level turn that was waiting for a
//! person). A torn last line (a write cut short) and damaged lines are
//! skipped with a warning.

mod pending;
mod record;

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::gate::{ApprovalDecision, ApprovalRequest};
use super::run::LoopState;
use super::session::{SessionId, SessionStore};
use jarvis_common::Timestamp;
use jarvis_model::{Message, ToolResultMessage};
pub use pending::{JournalStep, JournaledApproval, PendingTurn, TurnBegin, descendants};
use record::{Record, fold, insert_result, records_of};

/// The journal's file name under `JARVIS_HOME`.
pub const TURN_JOURNAL_FILE: &str = "turns.jsonl";

/// The result a tool call gets when a restart came between its start (or
/// its approval) and its result: it is never run again.
pub const INTERRUPTED_RESULT: &str = "interrupted by a restart; the call may or may not have run";

/// The schema version of every record.
const VERSION: u32 = 1;

/// The file is emptied when no turn is in progress and it is larger than this.
const EMPTY_WHEN_IDLE_OVER: u64 = 16 << 10;

/// The file is rewritten with only the turns in progress when it grows past
/// this while turns keep running.
const COMPACT_OVER: u64 = 8 << 20;

/// A failure to read or write the journal.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// The file could not be read or written.
    #[error("turn journal: could not {op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// The turns in progress of one home; see the module docs.
///
/// Shared as `Arc<TurnJournal>` by every harness and approval broker of an
/// app. [`TurnJournal::in_memory`] keeps nothing on disk (tests, embedding
/// without a home).
#[derive(Debug)]
pub struct TurnJournal {
    file: Option<JournalFile>,
    state: Mutex<State>,
    /// Told of a person's turn each time it stops for a person or gets an
    /// answer ([`TurnJournal::with_mirror`]).
    mirror: Option<Arc<dyn SessionStore>>,
}

#[derive(Debug)]
struct JournalFile {
    path: PathBuf,
    handle: Mutex<File>,
}

#[derive(Debug, Default)]
struct State {
    /// Turns begun and not ended, with what was recorded of them (kept so
    /// the file can be compacted and approvals found again).
    active: HashMap<String, PendingTurn>,
    /// Begin order of the active turns.
    order: Vec<String>,
    /// Bytes in the file.
    len: u64,
    /// Writes failed; logged once.
    failed: bool,
}

impl TurnJournal {
    /// A journal that keeps nothing on disk.
    pub fn in_memory() -> Self {
        Self {
            file: None,
            state: Mutex::default(),
            mirror: None,
        }
    }

    /// Tells `store` ([`SessionStore::turn_progress`]) what a person's
    /// turn recorded each time it stops for a person and each time it gets
    /// the answer, before the request is shown or the answer acted on: a
    /// store shared by several nodes keeps it with the session's lease, so
    /// the node that takes the session over after this one stops resumes
    /// the turn instead of closing it.
    pub fn with_mirror(mut self, store: Arc<dyn SessionStore>) -> Self {
        self.mirror = Some(store);
        self
    }

    /// Takes over `turn`, which another process recorded (a turn waiting
    /// for a person in a session this node took over): its records are
    /// written here, durably, as if this journal had recorded them, so
    /// [`TurnJournal::undecided`] finds its requests and a restart of this
    /// process resumes it. Answers false (and writes nothing) when the
    /// turn is in progress here already.
    pub async fn adopt(&self, turn: &PendingTurn) -> Result<bool, JournalError> {
        {
            let mut state = self.state();
            if state.active.contains_key(turn.turn_id()) {
                return Ok(false);
            }
            state.order.push(turn.turn_id().to_owned());
            state.active.insert(turn.turn_id().to_owned(), turn.clone());
            for record in records_of(turn) {
                self.write(&mut state, &record);
            }
        }
        self.sync().await?;
        Ok(true)
    }

    /// Hands a person's turn, as recorded so far, to the mirror.
    async fn mirror(&self, turn_id: &str) {
        let Some(store) = &self.mirror else { return };
        let Some(turn) = self.state().active.get(turn_id).cloned() else {
            return;
        };
        if turn.begin.parent.is_some() || !turn.begin.resumable {
            return;
        }
        if let Ok(id) = SessionId::new(turn.begin.session_id.as_str()) {
            store.turn_progress(&id, &turn).await;
        }
    }

    /// Opens (creating it when missing) the journal at `path` and answers
    /// the turns that began and did not end, in the order they began.
    pub fn open(path: impl Into<PathBuf>) -> Result<(Self, Vec<PendingTurn>), JournalError> {
        let path = path.into();
        let io = |op: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| JournalError::Io { op, path, source }
        };
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io("read", &path)(e)),
        };
        let (state, good_len) = fold(&path, &bytes);
        let handle = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(&path)
            .map_err(io("open", &path))?;
        if good_len < bytes.len() as u64 {
            // A torn last line: cut it off so the next record starts clean.
            handle
                .set_len(good_len)
                .and_then(|()| handle.sync_data())
                .map_err(io("repair", &path))?;
        }
        let pending: Vec<PendingTurn> = state
            .order
            .iter()
            .filter_map(|id| state.active.get(id).cloned())
            .collect();
        let journal = Self {
            file: Some(JournalFile {
                path,
                handle: Mutex::new(handle),
            }),
            state: Mutex::new(State {
                len: good_len,
                ..state
            }),
            mirror: None,
        };
        Ok((journal, pending))
    }

    /// Where the journal lives, unless it is in memory.
    pub fn path(&self) -> Option<&Path> {
        self.file.as_ref().map(|f| f.path.as_path())
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that a turn began.
    pub fn begin(&self, begin: TurnBegin) {
        let record = Record::Begin {
            v: VERSION,
            begin: begin.clone(),
        };
        let mut state = self.state();
        state.order.push(begin.turn_id.clone());
        state.active.insert(
            begin.turn_id.clone(),
            PendingTurn {
                begin,
                steps: Vec::new(),
                approvals: Vec::new(),
            },
        );
        self.write(&mut state, &record);
    }

    /// Records an assistant message that asked for tools, with the loop's
    /// counters.
    pub fn step(&self, turn_id: &str, message: &Message, state_now: &LoopState) {
        let record = Record::Step {
            v: VERSION,
            turn_id: turn_id.to_owned(),
            message: message.clone(),
            state: state_now.clone(),
        };
        let mut state = self.state();
        let Some(turn) = state.active.get_mut(turn_id) else {
            return;
        };
        turn.steps.push(JournalStep {
            message: message.clone(),
            results: Vec::new(),
            state: state_now.clone(),
        });
        self.write(&mut state, &record);
    }

    /// Records a tool result of the turn's last step.
    pub fn result(&self, turn_id: &str, result: &ToolResultMessage) {
        let record = Record::Result {
            v: VERSION,
            turn_id: turn_id.to_owned(),
            result: result.clone(),
        };
        let mut state = self.state();
        let Some(turn) = state.active.get_mut(turn_id) else {
            return;
        };
        if let Some(step) = turn.steps.last_mut() {
            insert_result(step, result.clone());
        }
        self.write(&mut state, &record);
    }

    /// Records, durably, that `request` (about `tool_call_id`) is being
    /// asked, first at `at`. Call before showing it to anyone.
    pub async fn ask(
        &self,
        turn_id: &str,
        tool_call_id: &str,
        request: &ApprovalRequest,
        at: Timestamp,
    ) -> Result<(), JournalError> {
        let record = Record::Ask {
            v: VERSION,
            turn_id: turn_id.to_owned(),
            tool_call_id: tool_call_id.to_owned(),
            request: request.clone(),
            at,
        };
        {
            let mut state = self.state();
            let Some(turn) = state.active.get_mut(turn_id) else {
                return Ok(());
            };
            if turn
                .approvals
                .iter()
                .any(|a| a.request.request_id == request.request_id)
            {
                return Ok(()); // asked again after a restart: already recorded
            }
            turn.approvals.push(JournaledApproval {
                request: request.clone(),
                tool_call_id: tool_call_id.to_owned(),
                asked_at: at,
                decision: None,
            });
            self.write(&mut state, &record);
        }
        self.sync().await?;
        self.mirror(turn_id).await;
        Ok(())
    }

    /// Records, durably, the decision on `request_id`. Call before acting on it.
    pub async fn decide(
        &self,
        turn_id: &str,
        request_id: &str,
        decision: ApprovalDecision,
    ) -> Result<(), JournalError> {
        let record = Record::Decide {
            v: VERSION,
            turn_id: turn_id.to_owned(),
            request_id: request_id.to_owned(),
            decision,
        };
        {
            let mut state = self.state();
            let Some(turn) = state.active.get_mut(turn_id) else {
                return Ok(());
            };
            if let Some(a) = turn
                .approvals
                .iter_mut()
                .find(|a| a.request.request_id == request_id)
            {
                a.decision = Some(decision);
            }
            self.write(&mut state, &record);
        }
        self.sync().await?;
        self.mirror(turn_id).await;
        Ok(())
    }

    /// Records that the turn's block is in its session's history (or that
    /// it was given up): it is no longer in progress.
    pub fn end(&self, turn_id: &str) {
        let record = Record::End {
            v: VERSION,
            turn_id: turn_id.to_owned(),
        };
        let mut state = self.state();
        if state.active.remove(turn_id).is_none() {
            return;
        }
        state.order.retain(|id| id != turn_id);
        if state.active.is_empty() && state.len > EMPTY_WHEN_IDLE_OVER {
            self.truncate(&mut state);
        } else {
            self.write(&mut state, &record);
        }
    }

    /// The request turn `turn_id` asked about `tool_call_id` and nobody
    /// decided yet, if any: a resumed turn asks with the same request id,
    /// its timeout counted from the first time it was asked.
    pub fn undecided(&self, turn_id: &str, tool_call_id: &str) -> Option<JournaledApproval> {
        let state = self.state();
        state
            .active
            .get(turn_id)?
            .approvals
            .iter()
            .rev()
            .find(|a| a.tool_call_id == tool_call_id && a.decision.is_none())
            .cloned()
    }

    /// The turns in progress, in the order they began.
    pub fn in_progress(&self) -> Vec<PendingTurn> {
        let state = self.state();
        state
            .order
            .iter()
            .filter_map(|id| state.active.get(id).cloned())
            .collect()
    }

    /// Appends one record; a failure is logged (once) and the turn goes on:
    /// the journal protects against crashes, it never stops work.
    fn write(&self, state: &mut State, record: &Record) {
        let Some(file) = &self.file else { return };
        let mut line = match serde_json::to_vec(record) {
            Ok(line) => line,
            Err(e) => {
                tracing::error!(error = %e, "turn journal: a record could not be encoded");
                return;
            }
        };
        line.push(b'\n');
        let mut handle = file.handle.lock().unwrap_or_else(|e| e.into_inner());
        match handle.write_all(&line) {
            Ok(()) => {
                state.len += line.len() as u64;
                state.failed = false;
            }
            Err(e) => {
                if !state.failed {
                    tracing::error!(path = %file.path.display(), error = %e,
                        "turn journal: could not write; turns in progress may not survive a crash");
                }
                state.failed = true;
                // Take back a partial line so the next record starts clean.
                let _ = handle.set_len(state.len);
            }
        }
        drop(handle);
        if state.len > COMPACT_OVER {
            self.compact(state);
        }
    }

    /// Empties the file (no turn in progress).
    fn truncate(&self, state: &mut State) {
        let Some(file) = &self.file else { return };
        let handle = file.handle.lock().unwrap_or_else(|e| e.into_inner());
        match handle.set_len(0) {
            Ok(()) => state.len = 0,
            Err(e) => {
                tracing::warn!(path = %file.path.display(), error = %e, "turn journal: could not empty the file")
            }
        }
    }

    /// Rewrites the file with only the turns in progress.
    fn compact(&self, state: &mut State) {
        let Some(file) = &self.file else { return };
        let mut bytes = Vec::new();
        for id in &state.order {
            let Some(turn) = state.active.get(id) else {
                continue;
            };
            for record in records_of(turn) {
                if serde_json::to_writer(&mut bytes, &record).is_ok() {
                    bytes.push(b'\n');
                }
            }
        }
        let result = jarvis_common::write_atomic(&file.path, &bytes).and_then(|()| {
            OpenOptions::new()
                .create(true)
                .append(true)
                .read(true)
                .open(&file.path)
        });
        match result {
            Ok(handle) => {
                *file.handle.lock().unwrap_or_else(|e| e.into_inner()) = handle;
                state.len = bytes.len() as u64;
            }
            Err(e) => {
                tracing::warn!(path = %file.path.display(), error = %e, "turn journal: could not compact")
            }
        }
    }

    /// Flushes the file to disk.
    async fn sync(&self) -> Result<(), JournalError> {
        let Some(file) = &self.file else { return Ok(()) };
        let path = file.path.clone();
        let handle = file
            .handle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .try_clone()
            .map_err(|source| JournalError::Io {
                op: "sync",
                path: path.clone(),
                source,
            })?;
        tokio::task::spawn_blocking(move || handle.sync_data())
            .await
            .map_err(|e| io::Error::other(e.to_string()))
            .and_then(|r| r)
            .map_err(|source| JournalError::Io {
                op: "sync",
                path,
                source,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jarvis_model::{AssistantMessage, ToolCall};
    use serde_json::json;

    fn begin(id: &str) -> TurnBegin {
        TurnBegin {
            turn_id: id.into(),
            session_id: "s1".into(),
            agent_id: "main".into(),
            at: Timestamp::from_millis(1_000),
            prompt: "write it".into(),
            parent: None,
            resumable: true,
        }
    }

    fn calling(ids: &[&str]) -> Message {
        Message::Assistant(AssistantMessage {
            tool_calls: ids
                .iter()
                .map(|id| ToolCall {
                    id: (*id).into(),
                    name: "write_file".into(),
                    arguments: json!({"path": "a.txt"}),
                })
                .collect(),
            ..AssistantMessage::default()
        })
    }

    fn result(id: &str) -> ToolResultMessage {
        ToolResultMessage {
            tool_call_id: id.into(),
            tool_name: "write_file".into(),
            content: "ok".into(),
            is_error: false,
        }
    }

    fn request(id: &str) -> ApprovalRequest {
        ApprovalRequest {
            request_id: id.into(),
            session_id: "s1".into(),
            agent_id: "main".into(),
            tool_name: "write_file".into(),
            args: json!({"path": "a.txt"}),
        }
    }

    /// What a node hands over with a session (its lease's records) is the
    /// turn as its journal holds it; adopted, it is in the journal file of
    /// the node taking over, so a restart there resumes it too.
    #[tokio::test]
    async fn a_turn_handed_over_as_records_is_adopted_whole() {
        let source = TurnJournal::in_memory();
        source.begin(begin("t1"));
        source.step("t1", &calling(&["a", "b"]), &LoopState::default());
        source.result("t1", &result("b"));
        source
            .ask("t1", "a", &request("approval_1"), Timestamp::from_millis(2_000))
            .await
            .unwrap();
        let turn = source.in_progress().remove(0);
        let records = turn.to_records();
        assert_eq!(records.len(), 4, "begin, step, result, ask: {records:#?}");
        let back = PendingTurn::from_records(&records).unwrap();
        assert_eq!(back, turn);
        // Damaged, foreign or ended records are refused, not half-read.
        assert!(PendingTurn::from_records(&records[1..]).is_none(), "no begin");
        let mut damaged = records.clone();
        damaged[1] = json!({"op": "step", "v": 1});
        assert!(PendingTurn::from_records(&damaged).is_none());
        let mut newer = records.clone();
        newer[0]["v"] = json!(2);
        assert!(PendingTurn::from_records(&newer).is_none());
        let mut ended = records.clone();
        ended.push(json!({"op": "end", "v": 1, "turn_id": "t1"}));
        assert!(PendingTurn::from_records(&ended).is_none());

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(TURN_JOURNAL_FILE);
        {
            let (journal, _) = TurnJournal::open(&path).unwrap();
            assert!(journal.adopt(&back).await.unwrap());
            assert!(!journal.adopt(&back).await.unwrap(), "adopted once");
            assert_eq!(
                journal.undecided("t1", "a").unwrap().request.request_id,
                "approval_1"
            );
        }
        let (_, pending) = TurnJournal::open(&path).unwrap();
        assert_eq!(pending, vec![turn]);
    }

    #[tokio::test]
    async fn a_turn_waiting_for_a_person_is_read_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(TURN_JOURNAL_FILE);
        {
            let (journal, pending) = TurnJournal::open(&path).unwrap();
            assert!(pending.is_empty());
            journal.begin(begin("t1"));
            journal.step("t1", &calling(&["a", "b"]), &LoopState::default());
            journal.result("t1", &result("b"));
            journal
                .ask("t1", "a", &request("approval_1"), Timestamp::from_millis(2_000))
                .await
                .unwrap();
            journal.begin(begin("t2"));
            journal.end("t2");
        }
        let (journal, pending) = TurnJournal::open(&path).unwrap();
        assert_eq!(pending.len(), 1, "{pending:?}");
        let turn = &pending[0];
        assert_eq!(turn.turn_id(), "t1");
        assert!(turn.waits_for_a_person());
        assert_eq!(turn.steps[0].unanswered(), vec!["a"]);
        assert_eq!(turn.messages().len(), 2);
        let approval = journal.undecided("t1", "a").unwrap();
        assert_eq!(approval.asked_at, Timestamp::from_millis(2_000));
        assert!(journal.undecided("t1", "b").is_none());
        journal
            .decide("t1", "approval_1", ApprovalDecision::Allow)
            .await
            .unwrap();
        drop(journal);
        let (_, pending) = TurnJournal::open(&path).unwrap();
        assert!(!pending[0].waits_for_a_person());
        assert_eq!(
            pending[0].approval_for("a").unwrap().decision,
            Some(ApprovalDecision::Allow)
        );
    }

    #[test]
    fn results_keep_call_order_and_torn_lines_are_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(TURN_JOURNAL_FILE);
        let (journal, _) = TurnJournal::open(&path).unwrap();
        journal.begin(begin("t1"));
        journal.step("t1", &calling(&["a", "b", "c"]), &LoopState::default());
        journal.result("t1", &result("c"));
        journal.result("t1", &result("a"));
        drop(journal);
        let mut bytes = std::fs::read(&path).unwrap();
        let whole = bytes.len();
        bytes.extend_from_slice(b"{\"op\":\"result\",\"v\":1,\"tur");
        std::fs::write(&path, &bytes).unwrap();
        let (journal, pending) = TurnJournal::open(&path).unwrap();
        let ids: Vec<_> = pending[0].steps[0]
            .results
            .iter()
            .map(|r| r.tool_call_id.as_str())
            .collect();
        assert_eq!(ids, ["a", "c"]);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), whole as u64);
        journal.end("t1");
        drop(journal);
        let (_, pending) = TurnJournal::open(&path).unwrap();
        assert!(pending.is_empty());
    }

    #[test]
    fn damaged_lines_are_skipped_and_the_file_empties_when_idle() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(TURN_JOURNAL_FILE);
        std::fs::write(&path, b"not json\n{\"op\":\"end\",\"v\":9,\"turn_id\":\"x\"}\n").unwrap();
        let (journal, pending) = TurnJournal::open(&path).unwrap();
        assert!(pending.is_empty());
        let big = "x".repeat(EMPTY_WHEN_IDLE_OVER as usize);
        for n in 0..2 {
            let mut b = begin(&format!("t{n}"));
            b.prompt = big.clone();
            journal.begin(b);
        }
        journal.end("t0");
        assert!(std::fs::metadata(&path).unwrap().len() > EMPTY_WHEN_IDLE_OVER);
        journal.end("t1");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
        journal.begin(begin("t3"));
        drop(journal);
        let (_, pending) = TurnJournal::open(&path).unwrap();
        assert_eq!(pending.len(), 1);
    }

    #[test]
    fn descendants_follow_parents() {
        let mut child = begin("c");
        child.parent = Some("p".into());
        let mut grandchild = begin("g");
        grandchild.parent = Some("c".into());
        let turns: Vec<PendingTurn> = [begin("p"), child, grandchild, begin("q")]
            .into_iter()
            .map(|begin| PendingTurn {
                begin,
                steps: Vec::new(),
                approvals: Vec::new(),
            })
            .collect();
        let tree = descendants(&turns);
        assert_eq!(tree["p"], vec!["c".to_owned(), "g".to_owned()]);
        assert!(tree["q"].is_empty());
        assert_eq!(tree.len(), 2);
    }
}
