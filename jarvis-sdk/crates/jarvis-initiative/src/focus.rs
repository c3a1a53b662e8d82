//! Focus tasks: long multi-step work of one session, kept on disk so it
//! goes on across turns and restarts (SPEC.md §6, §8).
//!
//! A task lives in `$JARVIS_HOME/focus/<task_id>/` (`f-<n>`, numbered on
//! from the highest folder):
//!
//! | file | holds |
//! |---|---|
//! | `state.json` | `{task_id, session_id, agent_id, title, steps: [{title, status, note?}], current, state, started, updated, summary?}`, written to a temporary file and renamed |
//! | `log.md` | what was done: a heading, then one line per finished step, and the summary at the end (appended) |
//! | `references.md` | sources, one `- text <url>` line each (appended) |
//! | `analysis.jsonl` | one finding per line: `{"at","step","text","url"?}` (appended) |
//!
//! A session has at most one active task. It starts with `/focus <task>`
//! (a one-step plan: the task itself) or the `start_focus {title, plan[]}`
//! tool; `start_focus` on a task of the session where no step is finished
//! yet replaces its title and plan (a person's `/focus` refined by the
//! agent), otherwise a second task is refused.
//!
//! | tool | arguments | does |
//! |---|---|---|
//! | `start_focus` | `{title, plan[]}` | starts the session's task (see above) |
//! | `focus_step` | `{status: "done"\|"skipped"\|"blocked", note?}` | finishes the current step that way, logs it and moves on to the next pending one |
//! | `focus_note` | `{kind: "reference"\|"finding", text, url?}` | appends a source to `references.md` or a finding to `analysis.jsonl` |
//! | `end_focus` | `{summary}` | ends the task: the summary closes `log.md` |
//!
//! Each change is sent to the session's screens as `focus_state` and
//! `focus_panel` ([`FocusTask::state_event`], [`FocusTask::panel_event`]).
//! While a task is active, every request of its session's turns carries it
//! as the `[포커스]` section ([`FocusTask::items`]), so the agent picks it up
//! in the next turn, also after a restart.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use jarvis_agent::{AgentEvent, ScreenNotice};
use jarvis_common::{Clock, Timestamp, char_len, write_atomic};

mod tools;

pub use tools::focus_tools;

/// The directory of Focus tasks under `JARVIS_HOME`.
pub const FOCUS_DIR: &str = "focus";
/// The tool that starts a task.
pub const START_FOCUS_TOOL: &str = "start_focus";
/// The tool that finishes the current step.
pub const FOCUS_STEP_TOOL: &str = "focus_step";
/// The tool that notes a source or a finding.
pub const FOCUS_NOTE_TOOL: &str = "focus_note";
/// The tool that ends a task.
pub const END_FOCUS_TOOL: &str = "end_focus";
/// Steps a plan may have.
pub const MAX_FOCUS_STEPS: usize = 50;
/// Characters a title, step or note may hold.
pub const MAX_FOCUS_TEXT_CHARS: usize = 4_000;
/// Lines of the log the panel shows.
const PANEL_LOG_LINES: usize = 12;

/// Where a step of a Focus task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FocusStepStatus {
    /// Not started.
    Pending,
    /// Being worked on (the current step).
    Active,
    /// Finished.
    Done,
    /// Passed over.
    Skipped,
    /// Cannot go on; the note says why.
    Blocked,
}

/// Whether a Focus task is still going.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FocusPhase {
    /// Being worked on.
    Active,
    /// Ended with a summary.
    Done,
}

/// The notice `focus_state`: a Focus task of the session started or
/// changed (every step, note and end); also sent to a screen that attaches
/// while one is active.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FocusState {
    /// The task's id (`f-<n>`).
    pub task_id: String,
    /// What the task is.
    pub title: String,
    /// The plan, in order.
    pub steps: Vec<FocusStepState>,
    /// The index of the step being worked on; `null` once every step is
    /// finished or the task is done.
    pub current: Option<usize>,
    /// `active` or `done`.
    pub state: FocusPhase,
    /// Whether a turn is working on it right now.
    pub busy: bool,
}

impl ScreenNotice for FocusState {
    const KIND: &'static str = "focus_state";
}

/// One step of a Focus task as `focus_state` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FocusStepState {
    /// What the step is.
    pub title: String,
    /// Where it stands.
    pub status: FocusStepStatus,
}

/// The notice `focus_panel`: the Focus panel's content changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FocusPanel {
    /// The task's id.
    pub task_id: String,
    /// Which panel: always `focus`.
    pub area: String,
    /// The panel as Markdown: the plan, the recent log, the references.
    pub markdown: String,
}

impl ScreenNotice for FocusPanel {
    const KIND: &'static str = "focus_panel";
}

/// One step of a task as `state.json` keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FocusStep {
    /// What the step is.
    pub title: String,
    /// Where it stands.
    pub status: FocusStepStatus,
    /// What its `focus_step` call said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A task's `state.json`; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FocusTask {
    /// `f-<n>`.
    pub task_id: String,
    /// The session it belongs to.
    pub session_id: String,
    /// The session's agent.
    pub agent_id: String,
    /// What the task is.
    pub title: String,
    /// The plan.
    pub steps: Vec<FocusStep>,
    /// The index of the current step; `None` when none is left.
    pub current: Option<usize>,
    /// Active or done.
    pub state: FocusPhase,
    /// When it started.
    pub started: Timestamp,
    /// When it last changed.
    pub updated: Timestamp,
    /// The summary `end_focus` gave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

impl FocusTask {
    /// The task as `focus_state`.
    pub fn state_event(&self, busy: bool) -> AgentEvent {
        AgentEvent::notice(&FocusState {
            task_id: self.task_id.clone(),
            title: self.title.clone(),
            steps: self
                .steps
                .iter()
                .map(|s| FocusStepState {
                    title: s.title.clone(),
                    status: s.status,
                })
                .collect(),
            current: self.current,
            state: self.state,
            busy,
        })
    }

    /// The task as `focus_panel`, with `log` (the tail of `log.md`).
    pub fn panel_event(&self, log: &str) -> AgentEvent {
        let mut md = format!("### FOCUS · {}\n\n", self.title);
        for (i, step) in self.steps.iter().enumerate() {
            let mark = match step.status {
                FocusStepStatus::Done => "[x]",
                FocusStepStatus::Skipped => "[-]",
                FocusStepStatus::Blocked => "[!]",
                FocusStepStatus::Active => "[>]",
                FocusStepStatus::Pending => "[ ]",
            };
            let _ = writeln!(md, "- {mark} {}. {}", i + 1, step.title);
        }
        let recent: Vec<&str> = log.lines().filter(|l| l.starts_with("- ")).collect();
        if !recent.is_empty() {
            md.push_str("\n**Log**\n\n");
            for line in &recent[recent.len().saturating_sub(PANEL_LOG_LINES)..] {
                md.push_str(line);
                md.push('\n');
            }
        }
        if let Some(summary) = &self.summary {
            let _ = write!(md, "\n**Summary**\n\n{summary}\n");
        }
        AgentEvent::notice(&FocusPanel {
            task_id: self.task_id.clone(),
            area: "focus".into(),
            markdown: md,
        })
    }

    /// The items of the `[포커스]` section.
    pub fn items(&self) -> Vec<String> {
        let mut items = vec![format!(
            "{} {} (focus_step으로 단계를 마치고, 끝나면 end_focus)",
            self.task_id, self.title
        )];
        for (i, step) in self.steps.iter().enumerate() {
            let status = serde_json::to_value(step.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            let here = if Some(i) == self.current {
                " ← 지금 (current)"
            } else {
                ""
            };
            let note = step
                .note
                .as_deref()
                .map(|n| format!(" — {n}"))
                .unwrap_or_default();
            items.push(format!("{}. [{status}] {}{note}{here}", i + 1, step.title));
        }
        items
    }

    fn number(&self) -> u64 {
        task_number(&self.task_id).unwrap_or(0)
    }
}

fn task_number(id: &str) -> Option<u64> {
    let n = id.strip_prefix("f-")?;
    if n.is_empty() || n.starts_with('0') || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

/// A failure of a Focus operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FocusError {
    /// The request is wrong; the text says how.
    #[error("{0}")]
    Invalid(String),
    /// The session has no active task.
    #[error("this session has no active Focus task; start one with start_focus")]
    NoTask,
    /// A task file could not be read or written.
    #[error("focus: could not {op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// What a change did: the task as it is now and the tail of its log.
#[derive(Debug, Clone)]
pub struct FocusChange {
    /// The task after the change.
    pub task: FocusTask,
    /// `log.md` as it is now.
    pub log: String,
}

/// How a `focus_note` is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FocusNoteKind {
    /// A source, in `references.md`.
    Reference,
    /// A finding, in `analysis.jsonl`.
    Finding,
}

/// Every Focus task of a home; see the module docs.
#[derive(Debug)]
pub struct FocusStore {
    dir: PathBuf,
    clock: Arc<dyn Clock>,
    /// The active task of each session, read from the folders once.
    active: Mutex<Option<HashMap<String, String>>>,
}

impl FocusStore {
    /// The tasks under `home/focus`, timed by `clock`.
    pub fn new(home: &Path, clock: Arc<dyn Clock>) -> Self {
        Self {
            dir: home.join(FOCUS_DIR),
            clock,
            active: Mutex::new(None),
        }
    }

    fn now(&self) -> Timestamp {
        Timestamp::from_system_time(self.clock.now())
    }

    /// The index of active tasks, loaded on first use; held while a change
    /// is made, so one session never gets two.
    fn index(&self) -> MutexGuard<'_, Option<HashMap<String, String>>> {
        let mut guard = self.active.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            let mut index = HashMap::new();
            for task in self.all() {
                if task.state == FocusPhase::Active {
                    index.insert(task.session_id.clone(), task.task_id.clone());
                }
            }
            *guard = Some(index);
        }
        guard
    }

    /// Every readable task, by number.
    pub fn all(&self) -> Vec<FocusTask> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut tasks: Vec<FocusTask> = entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|name| task_number(name).is_some())
            .filter_map(|name| self.read(&name))
            .collect();
        tasks.sort_by_key(FocusTask::number);
        tasks
    }

    fn read(&self, task_id: &str) -> Option<FocusTask> {
        let path = self.dir.join(task_id).join("state.json");
        let bytes = std::fs::read(&path).ok()?;
        match serde_json::from_slice::<FocusTask>(&bytes) {
            Ok(task) if task.task_id == task_id => Some(task),
            Ok(_) => {
                tracing::warn!(path = %path.display(), "a Focus state names another task; it is skipped");
                None
            }
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "a Focus state is unreadable; it is skipped and left in place");
                None
            }
        }
    }

    /// The active task of `session_id`.
    pub fn active(&self, session_id: &str) -> Option<FocusTask> {
        let task_id = self.index().as_ref()?.get(session_id)?.clone();
        self.read(&task_id)
    }

    /// A task by id, active or done.
    pub fn get(&self, task_id: &str) -> Option<FocusTask> {
        task_number(task_id)?;
        self.read(task_id)
    }

    /// `log.md` of a task (empty when missing).
    pub fn log(&self, task_id: &str) -> String {
        if task_number(task_id).is_none() {
            return String::new();
        }
        std::fs::read_to_string(self.dir.join(task_id).join("log.md")).unwrap_or_default()
    }

    /// The folder of a task.
    pub fn folder(&self, task_id: &str) -> PathBuf {
        self.dir.join(task_id)
    }

    /// Starts the session's task with `plan` (or, when the session's active
    /// task has no finished step yet, replaces its title and plan).
    pub fn start(
        &self,
        session_id: &str,
        agent_id: &str,
        title: &str,
        plan: &[String],
    ) -> Result<FocusChange, FocusError> {
        let title = checked("title", title)?;
        if title.is_empty() {
            return Err(FocusError::Invalid("a Focus task needs a title".into()));
        }
        let mut steps = Vec::new();
        for step in plan {
            let step = checked("a step", step)?;
            if !step.is_empty() {
                steps.push(step);
            }
        }
        if steps.is_empty() {
            steps.push(title.clone());
        }
        if steps.len() > MAX_FOCUS_STEPS {
            return Err(FocusError::Invalid(format!(
                "a plan has at most {MAX_FOCUS_STEPS} steps"
            )));
        }
        let mut index = self.index();
        let now = self.now();
        let steps: Vec<FocusStep> = steps
            .into_iter()
            .enumerate()
            .map(|(i, title)| FocusStep {
                title,
                status: if i == 0 {
                    FocusStepStatus::Active
                } else {
                    FocusStepStatus::Pending
                },
                note: None,
            })
            .collect();
        let existing = index
            .as_ref()
            .and_then(|i| i.get(session_id))
            .and_then(|id| self.read(id));
        if let Some(mut task) = existing {
            let started = task
                .steps
                .iter()
                .any(|s| !matches!(s.status, FocusStepStatus::Pending | FocusStepStatus::Active));
            if started {
                return Err(FocusError::Invalid(format!(
                    "this session already works on {} {:?}; finish it with end_focus first",
                    task.task_id, task.title
                )));
            }
            task.title = title;
            task.steps = steps;
            task.current = Some(0);
            task.updated = now;
            self.write_state(&task)?;
            self.append(
                &task.task_id,
                "log.md",
                &format!("- {now} plan: {}\n", plan_line(&task)),
            )?;
            let log = self.log(&task.task_id);
            return Ok(FocusChange { task, log });
        }
        std::fs::create_dir_all(&self.dir).map_err(|source| FocusError::Io {
            op: "create",
            path: self.dir.clone(),
            source,
        })?;
        // Every folder counts, readable or not: a number is never reused.
        let next = std::fs::read_dir(&self.dir)
            .map_err(|source| FocusError::Io {
                op: "list",
                path: self.dir.clone(),
                source,
            })?
            .filter_map(Result::ok)
            .filter_map(|e| task_number(e.file_name().to_str()?))
            .max()
            .unwrap_or(0)
            + 1;
        let task = FocusTask {
            task_id: format!("f-{next}"),
            session_id: session_id.to_owned(),
            agent_id: agent_id.to_owned(),
            title,
            steps,
            current: Some(0),
            state: FocusPhase::Active,
            started: now,
            updated: now,
            summary: None,
        };
        let folder = self.folder(&task.task_id);
        std::fs::create_dir_all(&folder).map_err(|source| FocusError::Io {
            op: "create",
            path: folder.clone(),
            source,
        })?;
        for (file, head) in [
            (
                "log.md",
                format!("# {}\n\n- {now} started: {}\n", task.title, plan_line(&task)),
            ),
            ("references.md", format!("# References · {}\n\n", task.title)),
            ("analysis.jsonl", String::new()),
        ] {
            write_atomic(&folder.join(file), head.as_bytes()).map_err(|source| FocusError::Io {
                op: "write",
                path: folder.join(file),
                source,
            })?;
        }
        // The state goes last: a folder without it is not a task yet.
        self.write_state(&task)?;
        if let Some(index) = index.as_mut() {
            index.insert(session_id.to_owned(), task.task_id.clone());
        }
        let log = self.log(&task.task_id);
        Ok(FocusChange { task, log })
    }

    /// Finishes the current step of the session's task as `status` and
    /// moves to the next pending step.
    pub fn step(
        &self,
        session_id: &str,
        status: FocusStepStatus,
        note: Option<&str>,
    ) -> Result<FocusChange, FocusError> {
        if matches!(status, FocusStepStatus::Pending | FocusStepStatus::Active) {
            return Err(FocusError::Invalid(
                "a step finishes as done, skipped or blocked".into(),
            ));
        }
        let note = note
            .map(|n| checked("the note", n))
            .transpose()?
            .filter(|n| !n.is_empty());
        let index = self.index();
        let mut task = self.active_in(&index, session_id)?;
        let Some(current) = task.current else {
            return Err(FocusError::Invalid(
                "every step is finished; end the task with end_focus".into(),
            ));
        };
        let now = self.now();
        let step = &mut task.steps[current];
        step.status = status;
        step.note = note.clone();
        let line = format!(
            "- {now} step {} {:?}: {}{}\n",
            current + 1,
            step.title,
            status_word(status),
            note.as_deref().map(|n| format!(" — {n}")).unwrap_or_default()
        );
        task.current = task
            .steps
            .iter()
            .position(|s| s.status == FocusStepStatus::Pending);
        if let Some(next) = task.current {
            task.steps[next].status = FocusStepStatus::Active;
        }
        task.updated = now;
        self.append(&task.task_id, "log.md", &line)?;
        self.write_state(&task)?;
        let log = self.log(&task.task_id);
        Ok(FocusChange { task, log })
    }

    /// Notes a source or a finding in the session's task.
    pub fn note(
        &self,
        session_id: &str,
        kind: FocusNoteKind,
        text: &str,
        url: Option<&str>,
    ) -> Result<FocusChange, FocusError> {
        let text = checked("the text", text)?;
        if text.is_empty() {
            return Err(FocusError::Invalid("the note is empty".into()));
        }
        let url = url
            .map(|u| checked("the url", u))
            .transpose()?
            .filter(|u| !u.is_empty());
        let index = self.index();
        let task = self.active_in(&index, session_id)?;
        let now = self.now();
        match kind {
            FocusNoteKind::Reference => {
                let line = match &url {
                    Some(url) => format!("- {} <{url}>\n", one_line(&text)),
                    None => format!("- {}\n", one_line(&text)),
                };
                self.append(&task.task_id, "references.md", &line)?;
            }
            FocusNoteKind::Finding => {
                let mut finding = serde_json::json!({
                    "at": now,
                    "step": task.current.map(|c| c + 1),
                    "text": text,
                });
                if let Some(url) = &url {
                    finding["url"] = url.clone().into();
                }
                self.append(&task.task_id, "analysis.jsonl", &format!("{finding}\n"))?;
            }
        }
        let log = self.log(&task.task_id);
        Ok(FocusChange { task, log })
    }

    /// Ends the session's task with `summary`.
    pub fn end(&self, session_id: &str, summary: &str) -> Result<FocusChange, FocusError> {
        let summary = checked("the summary", summary)?;
        let mut index = self.index();
        let mut task = self.active_in(&index, session_id)?;
        let now = self.now();
        task.state = FocusPhase::Done;
        task.current = None;
        for step in &mut task.steps {
            if step.status == FocusStepStatus::Active {
                step.status = FocusStepStatus::Pending;
            }
        }
        task.summary = Some(summary.clone());
        task.updated = now;
        self.append(
            &task.task_id,
            "log.md",
            &format!("- {now} ended\n\n## Summary\n\n{summary}\n"),
        )?;
        self.write_state(&task)?;
        if let Some(index) = index.as_mut() {
            index.remove(session_id);
        }
        let log = self.log(&task.task_id);
        Ok(FocusChange { task, log })
    }

    fn active_in(
        &self,
        index: &MutexGuard<'_, Option<HashMap<String, String>>>,
        session_id: &str,
    ) -> Result<FocusTask, FocusError> {
        index
            .as_ref()
            .and_then(|i| i.get(session_id))
            .and_then(|id| self.read(id))
            .filter(|t| t.state == FocusPhase::Active)
            .ok_or(FocusError::NoTask)
    }

    fn write_state(&self, task: &FocusTask) -> Result<(), FocusError> {
        let path = self.folder(&task.task_id).join("state.json");
        let mut json = serde_json::to_vec_pretty(task).map_err(|e| FocusError::Invalid(e.to_string()))?;
        json.push(b'\n');
        write_atomic(&path, &json).map_err(|source| FocusError::Io {
            op: "write",
            path,
            source,
        })
    }

    fn append(&self, task_id: &str, file: &str, text: &str) -> Result<(), FocusError> {
        let path = self.folder(task_id).join(file);
        let io_error = |source| FocusError::Io {
            op: "append to",
            path: path.clone(),
            source,
        };
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io_error)?;
        f.write_all(text.as_bytes()).map_err(io_error)?;
        f.sync_data().map_err(io_error)
    }
}

fn plan_line(task: &FocusTask) -> String {
    let steps: Vec<String> = task
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| format!("{}. {}", i + 1, s.title))
        .collect();
    steps.join(" / ")
}

fn status_word(status: FocusStepStatus) -> &'static str {
    match status {
        FocusStepStatus::Done => "done",
        FocusStepStatus::Skipped => "skipped",
        FocusStepStatus::Blocked => "blocked",
        FocusStepStatus::Active => "active",
        FocusStepStatus::Pending => "pending",
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn checked(what: &str, text: &str) -> Result<String, FocusError> {
    let text = text.trim();
    if char_len(text) > MAX_FOCUS_TEXT_CHARS {
        return Err(FocusError::Invalid(format!(
            "{what} holds at most {MAX_FOCUS_TEXT_CHARS} characters"
        )));
    }
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use jarvis_common::ManualClock;

    fn store() -> (tempfile::TempDir, FocusStore) {
        let home = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(
            Timestamp::parse_rfc3339("2026-12-01T00:00:00Z")
                .unwrap()
                .to_system_time(),
        ));
        let store = FocusStore::new(home.path(), clock);
        (home, store)
    }

    fn plan(steps: &[&str]) -> Vec<String> {
        steps.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn steps_move_on_and_the_files_hold_what_was_done() {
        let (home, store) = store();
        let t = store
            .start(
                "s1",
                "karen",
                "청약 분석",
                &plan(&["공고 읽기", "자격 확인", "정리"]),
            )
            .unwrap()
            .task;
        assert_eq!((t.task_id.as_str(), t.current), ("f-1", Some(0)));
        let t = store.step("s1", FocusStepStatus::Done, Some("3건")).unwrap().task;
        assert_eq!(t.current, Some(1));
        assert_eq!(t.steps[1].status, FocusStepStatus::Active);
        store
            .note(
                "s1",
                FocusNoteKind::Reference,
                "SH 공고",
                Some("https://x.test/1"),
            )
            .unwrap();
        store
            .note("s1", FocusNoteKind::Finding, "소득 기준 충족", None)
            .unwrap();
        let t = store.step("s1", FocusStepStatus::Skipped, None).unwrap().task;
        let t2 = store.step("s1", FocusStepStatus::Done, None).unwrap().task;
        assert_eq!((t.current, t2.current), (Some(2), None));
        assert!(store.step("s1", FocusStepStatus::Done, None).is_err());
        let done = store.end("s1", "두 건 지원 가능").unwrap().task;
        assert_eq!(done.state, FocusPhase::Done);
        assert!(store.active("s1").is_none());
        let folder = home.path().join("focus/f-1");
        let log = std::fs::read_to_string(folder.join("log.md")).unwrap();
        assert!(log.starts_with("# 청약 분석\n"), "{log}");
        assert!(log.contains("step 1 \"공고 읽기\": done — 3건"), "{log}");
        assert!(log.contains("step 2 \"자격 확인\": skipped"), "{log}");
        assert!(log.trim_end().ends_with("두 건 지원 가능"), "{log}");
        let refs = std::fs::read_to_string(folder.join("references.md")).unwrap();
        assert!(refs.contains("- SH 공고 <https://x.test/1>"), "{refs}");
        let analysis = std::fs::read_to_string(folder.join("analysis.jsonl")).unwrap();
        let finding: serde_json::Value = serde_json::from_str(analysis.lines().next().unwrap()).unwrap();
        assert_eq!(
            (finding["text"].as_str(), finding["step"].as_u64()),
            (Some("소득 기준 충족"), Some(2))
        );
        let state: FocusTask =
            serde_json::from_slice(&std::fs::read(folder.join("state.json")).unwrap()).unwrap();
        assert_eq!(state, done);
    }

    #[test]
    fn one_active_task_per_session_and_a_fresh_one_can_be_refined() {
        let (home, store) = store();
        store.start("s1", "main", "책 정리", &[]).unwrap();
        // Nothing finished yet: the agent's plan replaces the person's one-step task.
        let refined = store
            .start("s1", "main", "책 정리", &plan(&["목차", "요약"]))
            .unwrap()
            .task;
        assert_eq!((refined.task_id.as_str(), refined.steps.len()), ("f-1", 2));
        store.step("s1", FocusStepStatus::Done, None).unwrap();
        assert!(store.start("s1", "main", "다른 일", &[]).is_err());
        assert_eq!(
            store.start("s2", "main", "다른 일", &[]).unwrap().task.task_id,
            "f-2"
        );
        // A new store (a restart) finds the active tasks again.
        let again = FocusStore::new(home.path(), Arc::new(jarvis_common::SystemClock));
        assert_eq!(again.active("s1").unwrap().current, Some(1));
        assert!(again.step("nobody", FocusStepStatus::Done, None).is_err());
        assert!(again.start("s3", "main", " ", &[]).is_err());
        assert!(again.get("../etc").is_none());
    }
}
