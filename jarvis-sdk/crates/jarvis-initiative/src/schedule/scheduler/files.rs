//! The job files in `schedules/`: the stamp compared at every tick to
//! notice edits, and each file read, parsed and checked.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::{BrokenFile, Scheduler};
use crate::schedule::error::ScheduleError;
use crate::schedule::job::{Job, MAX_JOB_FILE_BYTES, parse_job_file};

/// Names, modification times and lengths of the job files: compared on
/// every tick to notice edits without a file watcher.
// ponytail: two edits within the file system's timestamp granularity that
// keep the length are not told apart.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Stamp(Vec<(OsString, Option<SystemTime>, u64)>);

impl Scheduler {
    pub(super) fn load_files(&self, stamp: &Stamp) -> (Vec<Job>, Vec<BrokenFile>) {
        let mut jobs: Vec<Job> = Vec::new();
        let mut broken = Vec::new();
        let mut ids: HashMap<String, PathBuf> = HashMap::new();
        let reserved: Vec<String> = self.builtins.iter().map(|b| b.job().id).collect();
        for (name, _, len) in &stamp.0 {
            let path = self.dir.join(name);
            let parsed = read_job_text(&path, *len)
                .and_then(|text| {
                    parse_job_file(&path, &text, &self.config.time_zone).map_err(|e| match e {
                        ScheduleError::InvalidJob { reason, .. } => reason,
                        other => other.to_string(),
                    })
                })
                .and_then(|job| {
                    if reserved.contains(&job.id) {
                        Err(format!("id {:?} is reserved for a built-in job", job.id))
                    } else if let Some(other) = ids.get(&job.id) {
                        Err(format!("id {:?} is already used by {}", job.id, other.display()))
                    } else {
                        Ok(job)
                    }
                });
            match parsed {
                Ok(job) => {
                    ids.insert(job.id.clone(), path);
                    jobs.push(job);
                }
                Err(reason) => {
                    tracing::warn!(file = %path.display(), reason = %reason, "schedule: job file skipped");
                    broken.push(BrokenFile { path, reason });
                }
            }
        }
        (jobs, broken)
    }
}

/// The text of a job file of `len` bytes; larger than
/// [`MAX_JOB_FILE_BYTES`] is refused unread.
fn read_job_text(path: &Path, len: u64) -> Result<String, String> {
    let too_big = || format!("it is larger than {MAX_JOB_FILE_BYTES} bytes");
    if len > MAX_JOB_FILE_BYTES as u64 {
        return Err(too_big());
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
    if text.len() > MAX_JOB_FILE_BYTES {
        return Err(too_big());
    }
    Ok(text)
}

/// The job files in `dir` (`*.yaml`, not hidden), by name.
pub(super) fn read_stamp(dir: &Path) -> Stamp {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Stamp::default();
    };
    let mut files: Vec<(OsString, Option<SystemTime>, u64)> = entries
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            !name.starts_with('.') && name.ends_with(".yaml")
        })
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            meta.is_file()
                .then(|| (e.file_name(), meta.modified().ok(), meta.len()))
        })
        .collect();
    files.sort();
    Stamp(files)
}
