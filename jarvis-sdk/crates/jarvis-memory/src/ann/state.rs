//! The state of a partition's graph and the work under way on it in the
//! background (a build, an adder, a saver), and the threads that do it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};

pub(super) type Graph = usearch::Index;

/// A partition's graph, the build and the addition under way.
#[derive(Default)]
pub(super) struct State {
    /// What searches walk, when there is one (shared with an adder).
    pub(super) graph: Option<Arc<Graph>>,
    /// The graph holds every live row with a key below this; rows at or
    /// above it are the tail.
    pub(super) covered: u64,
    /// Keys of the live rows at or above `covered` (scanned exactly).
    pub(super) tail: Vec<u64>,
    /// A graph being built from a snapshot (the first, or a rebuild after
    /// churn while `graph` keeps answering).
    pub(super) build: Option<Build>,
    /// Tail rows being added to `graph`.
    pub(super) adder: Option<Adder>,
    /// Rows removed from `graph` since it was built.
    pub(super) churn: usize,
    /// Building or updating failed: exact scan from now on.
    pub(super) failed: bool,
    /// `graph` being written to the partition's file.
    pub(super) saver: Option<Saver>,
    /// The size of `graph` when it was last saved (0: not saved since it
    /// was built or changed by a removal).
    pub(super) saved: usize,
    /// The partition's file may exist (saved, being saved, or loaded).
    pub(super) written: bool,
    /// Saving failed once: not tried again for this partition.
    pub(super) save_failed: bool,
}

pub(super) struct Build {
    pub(super) done: mpsc::Receiver<Result<Graph, String>>,
    /// Keys at or above it were written after the snapshot.
    pub(super) from_key: u64,
    /// Keys removed since the snapshot.
    pub(super) removed: Vec<u64>,
    /// Set when nobody will take the graph (see `Drop`).
    pub(super) cancel: Arc<AtomicBool>,
}

/// A build whose partition is gone (its store closed, or the graph no
/// longer wanted) stops at its next row instead of spending minutes of a
/// core on a graph nobody will search.
impl Drop for Build {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
    }
}

/// A graph being written to its file on a background thread.
pub(super) struct Saver {
    /// Answers the size of the graph it saved.
    pub(super) done: mpsc::Receiver<Result<usize, String>>,
    /// The graph it reads.
    pub(super) graph: Arc<Graph>,
    /// Keys removed while it ran: removed from `graph` once it is done.
    pub(super) removed: Vec<u64>,
}

pub(super) struct Adder {
    pub(super) done: mpsc::Receiver<Result<(), String>>,
    /// When it is done, the graph covers the keys below this.
    pub(super) to_key: u64,
    /// Keys removed while it ran (it may have added them after).
    pub(super) removed: Vec<u64>,
}

pub(super) fn spawn<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<mpsc::Receiver<Result<T, String>>, String> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("jarvis-recall-graph".into())
        .spawn(move || {
            let _ = tx.send(work());
        })
        .map_err(|e| e.to_string())?;
    Ok(rx)
}

/// What a background thread answered: `None` while it works (with
/// `block`, waits for it instead).
pub(super) fn outcome<T>(done: &mpsc::Receiver<Result<T, String>>, block: bool) -> Option<Result<T, String>> {
    let ended = || Err("the background thread ended".to_owned());
    if block {
        return Some(done.recv().unwrap_or_else(|_| ended()));
    }
    match done.try_recv() {
        Ok(result) => Some(result),
        Err(mpsc::TryRecvError::Empty) => None,
        Err(mpsc::TryRecvError::Disconnected) => Some(ended()),
    }
}

impl State {
    pub(super) fn fail(&mut self, what: &str, error: &str) {
        tracing::warn!(
            error,
            "memory: {what}; exact search from now on for this partition"
        );
        *self = State {
            failed: true,
            written: self.written,
            ..State::default()
        };
    }

    /// Whether searches walk the graph (there is one and no failure).
    pub(super) fn walks(&self) -> bool {
        self.graph.is_some() && !self.failed
    }
}
