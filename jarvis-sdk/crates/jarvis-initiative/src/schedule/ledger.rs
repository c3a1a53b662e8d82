//! The run ledger, `$JARVIS_HOME/schedule_runs.jsonl`: an append-only log
//! of what happened to each slot of each job, one JSON line per event:
//!
//! ```json
//! {"v":1,"job":"weekly-notices","slot":"2026-11-30T00:00:00.000Z","state":"started","at":"2026-11-30T00:00:04.112Z"}
//! {"v":1,"job":"weekly-notices","slot":"2026-11-30T00:00:00.000Z","state":"done","at":"2026-11-30T00:00:31.907Z","session_id":"sched-weekly-notices"}
//! ```
//!
//! `state` is `registered` (the job was first seen; its `slot` is that
//! moment, and slots before it are not the job's to run), `started` (written
//! and `fsync`ed **before** the run begins), `done`, `failed` (with `error`)
//! or `skipped` (a missed slot not run). A slot with any record is never
//! started again: the scheduler only considers slots after a job's last
//! recorded one. A run cut short by a crash keeps its `started` record: it
//! is reported at the next start and **not retried** (at most once: a job
//! that sends a message must not send it twice).
//!
//! On open the file is read once into an index of each job's last record;
//! a torn or damaged line is skipped with a warning, never fatal, and the
//! next append starts on a fresh line. When it has grown past
//! [`COMPACT_AT`] lines it is then rewritten (temporary file, then rename)
//! with only each job's last record, which is all the scheduler reads: the
//! ledger stays small however often jobs run.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::error::ScheduleError;
use jarvis_common::{Timestamp, write_atomic};

/// The ledger's file name under `$JARVIS_HOME`.
pub const SCHEDULE_RUNS_FILE: &str = "schedule_runs.jsonl";
/// How many lines the ledger may have when opened before it is compacted
/// to one record per job.
pub(crate) const COMPACT_AT: usize = 10_000;
const LEDGER_VERSION: u32 = 1;

/// What happened to a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// The job was first seen at this moment (not a slot of its trigger).
    Registered,
    /// The run began (and may have been cut short if nothing follows).
    Started,
    /// The run finished.
    Done,
    /// The run ended with an error.
    Failed,
    /// The slot was missed and not run.
    Skipped,
}

/// One line of the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The format version, 1.
    pub v: u32,
    /// The job's id.
    pub job: String,
    /// The slot (the scheduled instant).
    pub slot: Timestamp,
    /// What happened.
    pub state: RunState,
    /// When it was recorded.
    pub at: Timestamp,
    /// The session the run's answer landed in, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Why the run failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl RunRecord {
    /// A record of `state` for `job`'s `slot`, made at `at`.
    pub fn new(job: &str, slot: Timestamp, state: RunState, at: Timestamp) -> Self {
        Self {
            v: LEDGER_VERSION,
            job: job.to_owned(),
            slot,
            state,
            at,
            session_id: None,
            error: None,
        }
    }
}

/// A job's last record: its latest slot and what happened to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastRun {
    /// The slot.
    pub slot: Timestamp,
    /// Its latest state.
    pub state: RunState,
    /// When that was recorded.
    pub at: Timestamp,
}

/// What opening the ledger found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerLoad {
    /// Records read.
    pub records: usize,
    /// Torn or damaged lines skipped.
    pub damaged_lines: usize,
    /// Slots left `started` by a run that never finished (a crash), by job.
    pub interrupted: Vec<(String, Timestamp)>,
    /// Whether the file was compacted to one record per job.
    pub compacted: bool,
}

#[derive(Debug, Default)]
struct Index {
    /// Each job's last record (of its latest slot).
    last: HashMap<String, RunRecord>,
    torn_tail: bool,
}

impl Index {
    fn note(&mut self, record: &RunRecord) {
        let newer = self
            .last
            .get(&record.job)
            .is_none_or(|last| record.slot >= last.slot);
        if newer {
            self.last.insert(record.job.clone(), record.clone());
        }
    }

    /// One line per job, by job id.
    fn compact_text(&self) -> Vec<u8> {
        let mut records: Vec<&RunRecord> = self.last.values().collect();
        records.sort_by(|a, b| a.job.cmp(&b.job));
        let mut bytes = Vec::new();
        for record in records {
            bytes.extend(serde_json::to_vec(record).unwrap_or_default());
            bytes.push(b'\n');
        }
        bytes
    }
}

/// The ledger: the file and its in-memory index.
#[derive(Debug)]
pub(crate) struct RunLedger {
    path: PathBuf,
    index: Mutex<Index>,
}

impl RunLedger {
    /// Opens (or starts) `$JARVIS_HOME/schedule_runs.jsonl`.
    pub(crate) fn open(home: &Path) -> Result<(Self, LedgerLoad), ScheduleError> {
        let path = home.join(SCHEDULE_RUNS_FILE);
        let mut index = Index::default();
        let mut load = LedgerLoad::default();
        let mut lines = 0;
        match std::fs::read(&path) {
            Ok(bytes) => {
                index.torn_tail = bytes.last().is_some_and(|b| *b != b'\n');
                for (n, line) in bytes.split(|b| *b == b'\n').enumerate() {
                    if line.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    lines += 1;
                    match serde_json::from_slice::<RunRecord>(line) {
                        Ok(record) => {
                            load.records += 1;
                            index.note(&record);
                        }
                        Err(error) => {
                            load.damaged_lines += 1;
                            tracing::warn!(
                                file = %path.display(),
                                line = n + 1,
                                %error,
                                "schedule: damaged ledger line skipped"
                            );
                        }
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(ScheduleError::io("read", path, source)),
        }
        let mut interrupted: Vec<(String, Timestamp)> = index
            .last
            .iter()
            .filter(|(_, last)| last.state == RunState::Started)
            .map(|(job, last)| (job.clone(), last.slot))
            .collect();
        interrupted.sort();
        for (job, slot) in &interrupted {
            tracing::warn!(
                job = %job,
                slot = %slot,
                "schedule: a run of job {job} for slot {slot} was interrupted (started, never finished); it is not retried"
            );
        }
        load.interrupted = interrupted;
        if lines > COMPACT_AT {
            // Only records no decision reads are dropped; a crash before the
            // rename leaves the whole file as it was.
            write_atomic(&path, &index.compact_text())
                .map_err(|source| ScheduleError::io("compact", &path, source))?;
            index.torn_tail = false;
            load.compacted = true;
            tracing::info!(file = %path.display(), lines, jobs = index.last.len(), "schedule: ledger compacted");
        }
        Ok((
            Self {
                path,
                index: Mutex::new(index),
            },
            load,
        ))
    }

    /// The last record of `job`.
    pub(crate) fn last(&self, job: &str) -> Option<LastRun> {
        self.lock().last.get(job).map(|r| LastRun {
            slot: r.slot,
            state: r.state,
            at: r.at,
        })
    }

    /// Appends `records` in one write and `fsync`s the file before
    /// returning; the index follows only once they are durable.
    pub(crate) fn append(&self, records: &[RunRecord]) -> Result<(), ScheduleError> {
        if records.is_empty() {
            return Ok(());
        }
        let mut index = self.lock();
        let mut bytes = Vec::new();
        if index.torn_tail {
            bytes.push(b'\n');
        }
        for record in records {
            bytes.extend(serde_json::to_vec(record).unwrap_or_default());
            bytes.push(b'\n');
        }
        let io = |action, source| ScheduleError::io(action, &self.path, source);
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io("create the directory of", e))?;
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| io("open", e))?;
        if let Err(e) = file.write_all(&bytes) {
            // Part of the line may be on disk: start the next one afresh.
            index.torn_tail = true;
            return Err(io("append to", e));
        }
        file.sync_data().map_err(|e| io("sync", e))?;
        index.torn_tail = false;
        for record in records {
            index.note(record);
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    #[test]
    fn a_long_ledger_is_compacted_to_each_jobs_last_record() {
        let home = tempfile::tempdir().unwrap();
        let (ledger, load) = RunLedger::open(home.path()).unwrap();
        assert!(!load.compacted);
        let t0 = ts("2026-11-30T00:00:00Z").as_millis();
        let mut records = Vec::new();
        for i in 0..=COMPACT_AT as i64 / 2 {
            let slot = Timestamp::from_millis(t0 + i * 60_000);
            records.push(RunRecord::new("minutely", slot, RunState::Started, slot));
            records.push(RunRecord::new("minutely", slot, RunState::Done, slot));
        }
        let mut failed = RunRecord::new(
            "daily",
            Timestamp::from_millis(t0),
            RunState::Failed,
            Timestamp::from_millis(t0),
        );
        failed.error = Some("boom".into());
        records.push(failed.clone());
        ledger.append(&records).unwrap();
        let before = ledger.last("minutely");
        drop(ledger);

        let (ledger, load) = RunLedger::open(home.path()).unwrap();
        assert!(load.compacted);
        assert_eq!(load.records, records.len());
        assert_eq!(ledger.last("minutely"), before);
        let text = std::fs::read_to_string(home.path().join(SCHEDULE_RUNS_FILE)).unwrap();
        let lines: Vec<RunRecord> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0], failed, "whole records are kept");
        assert_eq!(lines[1].state, RunState::Done);
        drop(ledger);
        // Opening again changes nothing.
        let (_, load) = RunLedger::open(home.path()).unwrap();
        assert!(!load.compacted);
        assert_eq!(
            std::fs::read_to_string(home.path().join(SCHEDULE_RUNS_FILE)).unwrap(),
            text
        );
    }
}
