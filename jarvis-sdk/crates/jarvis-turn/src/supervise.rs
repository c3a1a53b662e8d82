//! [`Supervisor`]: the app's background tasks (the scheduler, the
//! reflection daemon) kept running. A task that panics, or ends although
//! nobody stopped it, is logged with its name, counted, and started again
//! after a backoff (1 s, doubling to 60 s; back to 1 s once it has run a
//! minute). Its health ([`TaskHealth`]) says `ok` while it runs and
//! `restarting` while it waits to start again; the server's `/healthz`
//! shows it.

use futures::FutureExt;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The first wait before a restart.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait before a restart.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// A task that ran this long before failing starts again after the first wait.
const HEALTHY_RUN: Duration = Duration::from_secs(60);

/// Whether a background task runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// It runs.
    Ok,
    /// It failed and waits to start again.
    Restarting,
    /// It was stopped (the app is shutting down).
    Stopped,
}

impl TaskStatus {
    /// `ok`, `restarting` or `stopped`.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Ok => "ok",
            TaskStatus::Restarting => "restarting",
            TaskStatus::Stopped => "stopped",
        }
    }
}

/// One background task's health.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaskHealth {
    /// Whether it runs.
    pub status: TaskStatus,
    /// How often it failed (panicked or ended by itself), or reported a
    /// failure of its own work ([`Supervisor::failed`]).
    pub failures: u64,
    /// How often it was started again.
    pub restarts: u64,
    /// The last failure, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<String>,
}

/// Keeps named background tasks running; see the module docs.
#[derive(Default)]
pub struct Supervisor {
    tasks: Mutex<BTreeMap<String, TaskHealth>>,
}

impl fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Supervisor")
            .field("tasks", &self.health())
            .finish()
    }
}

impl Supervisor {
    /// A supervisor with no tasks.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every task's health, by name.
    pub fn health(&self) -> BTreeMap<String, TaskHealth> {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn update(&self, name: &str, change: impl FnOnce(&mut TaskHealth)) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        let health = tasks.entry(name.to_owned()).or_insert(TaskHealth {
            status: TaskStatus::Ok,
            failures: 0,
            restarts: 0,
            last_failure: None,
        });
        change(health);
    }

    /// Counts a failure of a task's own work that did not stop it (a job
    /// that failed, a watch whose report failed); it is logged by the task.
    pub fn failed(&self, name: &str, what: impl Into<String>) {
        let what = what.into();
        self.update(name, |h| {
            h.failures += 1;
            h.last_failure = Some(what);
        });
    }

    /// Runs `make()`'s future as the task `name` until `cancel` fires,
    /// starting it again after a failure (see the module docs).
    pub fn spawn<F, Fut>(self: &Arc<Self>, name: &str, cancel: CancellationToken, make: F) -> JoinHandle<()>
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let me = self.clone();
        let name = name.to_owned();
        me.update(&name, |h| h.status = TaskStatus::Ok);
        tokio::spawn(async move {
            let mut backoff = FIRST_BACKOFF;
            loop {
                let started = tokio::time::Instant::now();
                let run = AssertUnwindSafe(make()).catch_unwind();
                let failure = tokio::select! {
                    () = cancel.cancelled() => None,
                    ended = run => match ended {
                        Ok(()) if cancel.is_cancelled() => None,
                        Ok(()) => Some("it ended by itself".to_owned()),
                        Err(panic) => Some(format!("it panicked: {}", panic_text(&*panic))),
                    },
                };
                let Some(failure) = failure else {
                    me.update(&name, |h| h.status = TaskStatus::Stopped);
                    return;
                };
                if started.elapsed() >= HEALTHY_RUN {
                    backoff = FIRST_BACKOFF;
                }
                tracing::error!(task = %name, %failure, retry_in = ?backoff, "background task failed; it starts again");
                me.update(&name, |h| {
                    h.status = TaskStatus::Restarting;
                    h.failures += 1;
                    h.last_failure = Some(failure);
                });
                tokio::select! {
                    () = cancel.cancelled() => {
                        me.update(&name, |h| h.status = TaskStatus::Stopped);
                        return;
                    }
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
                me.update(&name, |h| {
                    h.status = TaskStatus::Ok;
                    h.restarts += 1;
                });
            }
        })
    }
}

/// What a panic said: its message when it was a string, else `(no message)`.
pub fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test(start_paused = true)]
    async fn a_panicking_task_is_counted_and_started_again_with_backoff() {
        let supervisor = Arc::new(Supervisor::new());
        let runs = Arc::new(AtomicU32::new(0));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let cancel = CancellationToken::new();
        let handle = {
            let runs = runs.clone();
            supervisor.spawn("flaky", cancel.clone(), move || {
                let n = runs.fetch_add(1, Ordering::SeqCst);
                let tx = tx.clone();
                async move {
                    let _ = tx.send(n);
                    if n < 2 {
                        panic!("boom {n}");
                    }
                    std::future::pending::<()>().await;
                }
            })
        };
        assert_eq!(rx.recv().await, Some(0));
        assert_eq!(rx.recv().await, Some(1));
        assert_eq!(rx.recv().await, Some(2));
        let health = supervisor.health()["flaky"].clone();
        assert_eq!(health.status, TaskStatus::Ok);
        assert_eq!((health.failures, health.restarts), (2, 2));
        assert!(health.last_failure.unwrap().contains("boom 1"));
        supervisor.failed("flaky", "a job failed");
        assert_eq!(supervisor.health()["flaky"].failures, 3);
        cancel.cancel();
        handle.await.unwrap();
        assert_eq!(supervisor.health()["flaky"].status, TaskStatus::Stopped);
    }
}
