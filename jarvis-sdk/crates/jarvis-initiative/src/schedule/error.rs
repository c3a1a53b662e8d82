//! [`ScheduleError`]: what can go wrong reading, writing or running
//! scheduled jobs. Every message names the scheduler.

use std::path::PathBuf;

/// A failure of the scheduler.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// Reading or writing a file under `$JARVIS_HOME` failed.
    #[error("schedule: cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done (`read`, `write`, `append to`, …).
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A job (a file, or a spec given to `add_job`) is not valid.
    #[error("schedule: invalid job{}: {reason}", file.as_ref().map(|f| format!(" file {}", f.display())).unwrap_or_default())]
    InvalidJob {
        /// The job file, when the job came from one.
        file: Option<PathBuf>,
        /// What is wrong.
        reason: String,
    },
    /// A cron expression does not parse.
    #[error("schedule: cron expression {expr:?} is invalid: {reason}")]
    Cron {
        /// The expression as written.
        expr: String,
        /// What is wrong.
        reason: String,
    },
    /// The `<when>` of a `/schedule` command was not understood; the
    /// message lists the accepted forms.
    #[error("schedule: {message}")]
    When {
        /// What was wrong and which forms are accepted.
        message: String,
    },
    /// A job with this id exists already.
    #[error("schedule: a job with id {id:?} exists already")]
    Exists {
        /// The id.
        id: String,
    },
    /// No job has this id.
    #[error("schedule: no job with id {id:?}")]
    NotFound {
        /// The id.
        id: String,
    },
    /// The job is built in (defined in code, not in a file) and cannot be
    /// removed.
    #[error("schedule: job {id:?} is built in and cannot be removed")]
    BuiltIn {
        /// The id.
        id: String,
    },
    /// The deployment's job store ([`SharedJobs`](super::SharedJobs))
    /// failed.
    #[error("schedule: the deployment's job store failed: {0}")]
    Shared(String),
}

impl ScheduleError {
    pub(crate) fn invalid(reason: impl Into<String>) -> Self {
        ScheduleError::InvalidJob {
            file: None,
            reason: reason.into(),
        }
    }

    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        ScheduleError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
