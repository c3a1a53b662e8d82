//! Group commit: the writes that arrive while the committer commits wait
//! and go together in its next transaction, each in a savepoint of its own.

use rusqlite::{Connection, Transaction, TransactionBehavior};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, MutexGuard};

use super::{Inner, SqliteMemoryStore, shared_sqlite_error};
use crate::error::MemoryError;
use crate::index::Index;

/// The writes waiting to be committed, and whether a committer is running.
#[derive(Default)]
pub(super) struct Queue {
    jobs: Vec<Box<dyn Job>>,
    committing: bool,
}

/// One caller's write, run inside the committer's batch. A job dropped
/// without [`finish`](Job::finish) (the committer panicked) drops its reply,
/// and the caller gets an error.
pub(super) trait Job: Send {
    /// Writes (inside a savepoint of the batch's transaction).
    fn write(&mut self, tx: &Transaction<'_>) -> rusqlite::Result<()>;
    /// Tells the caller: `Ok` once the batch is committed, with the index
    /// to apply the write to; `Err` when the write or the batch failed.
    fn finish(self: Box<Self>, outcome: Result<&mut Index, &rusqlite::Error>);
}

/// A [`Job`] of [`SqliteMemoryStore::write`]: `write`'s output is kept until
/// the commit, then handed to `apply` and the result sent back.
pub(super) struct WriteJob<T, R, W, A> {
    pub(super) op: &'static str,
    pub(super) path: PathBuf,
    pub(super) write: Option<W>,
    pub(super) written: Option<T>,
    pub(super) apply: A,
    pub(super) reply: tokio::sync::oneshot::Sender<Result<R, MemoryError>>,
}

impl<T, R, W, A> Job for WriteJob<T, R, W, A>
where
    T: Send,
    R: Send,
    W: FnOnce(&Transaction<'_>) -> rusqlite::Result<T> + Send,
    A: FnOnce(&mut Index, T) -> R + Send,
{
    fn write(&mut self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
        let write = self.write.take().expect("a job is written once");
        self.written = Some(write(tx)?);
        Ok(())
    }

    fn finish(self: Box<Self>, outcome: Result<&mut Index, &rusqlite::Error>) {
        let this = *self;
        let result = match (outcome, this.written) {
            (Ok(index), Some(written)) => Ok((this.apply)(index, written)),
            (Err(e), _) => Err(shared_sqlite_error(this.op, &this.path, e)),
            (Ok(_), None) => Err(MemoryError::Sqlite {
                op: this.op,
                path: this.path,
                source: "the write was not run".into(),
            }),
        };
        // The caller may have stopped waiting; the write stands anyway.
        let _ = this.reply.send(result);
    }
}
impl SqliteMemoryStore {
    /// Queues `write` for the committer, which runs it in a savepoint of
    /// its next transaction and, once that has committed, `apply` to the
    /// index; answers what `apply` answered. Starts the committer when none
    /// is running.
    pub(super) async fn write<T, R, W, A>(
        &self,
        op: &'static str,
        write: W,
        apply: A,
    ) -> Result<R, MemoryError>
    where
        T: Send + 'static,
        R: Send + 'static,
        W: FnOnce(&Transaction<'_>) -> rusqlite::Result<T> + Send + 'static,
        A: FnOnce(&mut Index, T) -> R + Send + 'static,
    {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job = Box::new(WriteJob {
            op,
            path: self.inner.path.clone(),
            write: Some(write),
            written: None,
            apply,
            reply,
        });
        let start = {
            let mut queue = self.inner.queue();
            queue.jobs.push(job);
            !std::mem::replace(&mut queue.committing, true)
        };
        if start {
            let committer = Committer {
                inner: self.inner.clone(),
                done: false,
            };
            tokio::task::spawn_blocking(move || committer.run());
        }
        answer.await.unwrap_or_else(|_| {
            Err(MemoryError::Sqlite {
                op,
                path: self.inner.path.clone(),
                source: "the committer stopped before committing the write".into(),
            })
        })
    }
}

/// The committer: commits queued writes in batches until the queue is
/// empty. Dropped without finishing (it panicked, or the runtime shut down
/// before it ran), it drops the writes still queued, whose callers get an
/// error, and lets the next write start a new one.
struct Committer {
    inner: Arc<Inner>,
    done: bool,
}

impl Committer {
    fn run(mut self) {
        loop {
            let jobs = {
                let mut queue = self.inner.queue();
                if queue.jobs.is_empty() {
                    queue.committing = false;
                    break;
                }
                std::mem::take(&mut queue.jobs)
            };
            self.inner.commit_batch(jobs);
        }
        self.done = true;
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let dropped = {
            let mut queue = self.inner.queue();
            queue.committing = false;
            std::mem::take(&mut queue.jobs)
        };
        tracing::error!(
            path = %self.inner.path.display(),
            writes = dropped.len(),
            "memory store (sqlite): the committer stopped; its writes failed"
        );
    }
}

/// Adds the rehearsals recall counted to their records.
pub(super) fn write_rehearsals(conn: &Connection, rehearsals: &HashMap<String, u32>) -> rusqlite::Result<()> {
    if rehearsals.is_empty() {
        return Ok(());
    }
    let mut stmt = conn.prepare_cached("UPDATE ltm_entries SET rehearsal = rehearsal + ?2 WHERE id = ?1")?;
    for (id, n) in rehearsals {
        stmt.execute(rusqlite::params![id, n])?;
    }
    Ok(())
}

impl Inner {
    /// Commits `jobs` (and the rehearsals waiting) in one immediate
    /// transaction, each job in a savepoint; then, under the connection's
    /// lock so the index changes in commit order, answers each job: applied
    /// to the index when its write stood, its own error when it was rolled
    /// back, the batch's error (and the rehearsals kept for the next batch)
    /// when the transaction failed.
    pub(super) fn commit_batch(&self, mut jobs: Vec<Box<dyn Job>>) {
        let mut conn = self.conn();
        let rehearsals = std::mem::take(&mut *self.rehearsals());
        let committed = (|| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            write_rehearsals(&tx, &rehearsals)?;
            let mut failed = Vec::with_capacity(jobs.len());
            for job in &mut jobs {
                tx.execute_batch("SAVEPOINT job")?;
                match job.write(&tx) {
                    Ok(()) => {
                        tx.execute_batch("RELEASE job")?;
                        failed.push(None);
                    }
                    Err(e) => {
                        tx.execute_batch("ROLLBACK TO job; RELEASE job")?;
                        failed.push(Some(e));
                    }
                }
            }
            tx.commit()?;
            Ok::<_, rusqlite::Error>(failed)
        })();
        match committed {
            Ok(failed) => {
                let mut index = self.index();
                for (job, failure) in jobs.into_iter().zip(failed) {
                    match failure {
                        None => job.finish(Ok(&mut index)),
                        Some(e) => job.finish(Err(&e)),
                    }
                }
            }
            Err(e) => {
                // Not written: they go with the next batch.
                let mut pending = self.rehearsals();
                for (id, n) in rehearsals {
                    *pending.entry(id).or_insert(0) += n;
                }
                drop(pending);
                for job in jobs {
                    job.finish(Err(&e));
                }
            }
        }
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}
