//! The JSONL store's write-ahead log: group commit for turns that end
//! together.
//!
//! With [`Durability::EndOfTurn`](super::Durability::EndOfTurn) every batch
//! the store appends to a session's history is also appended, byte for
//! byte, to `sessions/.wal-0` or `sessions/.wal-1` (the active one) behind a
//! header line naming its session. Making a turn durable is then one
//! `fdatasync` of the log, shared: the first turn to ask becomes the leader
//! and syncs everything appended so far; turns that ask meanwhile wait for
//! the leader and are done when it covered them, or lead the next sync. So
//! one sync serves every session whose turn ended in that moment, instead
//! of one sync per history file.
//!
//! The leader syncs on its own thread rather than handing the sync to
//! another one: a hand-off costs about as much again on a small machine.
//! Only one thread at a time is ever in the log's `fdatasync`.
//!
//! **Checkpoints.** Once the active log passes [`CHECKPOINT_BYTES`], it is
//! switched for the other (empty) one, synced one last time, and the
//! history files it covered are synced on a background thread; then it is
//! emptied. **Recovery** (at open): both logs are read, and every entry a
//! history lacks (its `seq` is beyond the history's last one) is appended
//! to it; then the histories are synced and the logs emptied. Replaying
//! twice changes nothing. A torn last record (a crash in the middle of a
//! write) is ignored: its turn was never reported durable.

use std::collections::{BTreeMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use tokio::sync::Notify;

use super::SessionId;

/// The two log files, in the sessions folder.
const FILES: [&str; 2] = [".wal-0", ".wal-1"];

/// A log this long is checkpointed.
pub(super) const CHECKPOINT_BYTES: u64 = 8 << 20;

/// Where a record ends: the log's generation and the byte offset in it.
pub(super) type Position = (u64, u64);

/// One record read back at recovery: a batch of history lines of a session.
#[derive(Debug)]
pub(super) struct Record {
    pub(super) session: SessionId,
    pub(super) lines: Vec<u8>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Header {
    wal: u32,
    session: String,
    bytes: u64,
}

#[derive(Debug)]
struct State {
    files: [Arc<File>; 2],
    active: usize,
    generation: u64,
    len: u64,
    /// Durable through here.
    synced: Position,
    /// A leader is in `fdatasync` (or a checkpoint is switching logs).
    syncing: bool,
    checkpointing: bool,
    /// Sessions with records in the active log.
    dirty: HashSet<SessionId>,
}

/// The log; see the [module docs](self).
#[derive(Debug)]
pub(super) struct Wal {
    dir: PathBuf,
    state: Mutex<State>,
    /// Wakes async waiters when a sync ends.
    done: Notify,
    /// Wakes a checkpoint waiting for a sync to end.
    idle: Condvar,
}

impl Wal {
    /// Opens the logs in `dir` and answers the records they hold (to
    /// replay before the log is emptied with [`Wal::reset`]).
    pub(super) fn open(dir: &Path) -> io::Result<(Self, Vec<Record>)> {
        let mut records = Vec::new();
        let mut files = Vec::new();
        for name in FILES {
            let path = dir.join(name);
            let file = OpenOptions::new()
                .create(true)
                .read(true)
                .append(true)
                .open(&path)?;
            records.extend(read(&path)?);
            files.push(Arc::new(file));
        }
        let files: [Arc<File>; 2] = [files[0].clone(), files[1].clone()];
        let len = files[0].metadata()?.len();
        Ok((
            Self {
                dir: dir.to_path_buf(),
                state: Mutex::new(State {
                    files,
                    active: 0,
                    generation: 0,
                    len,
                    synced: (0, len),
                    syncing: false,
                    checkpointing: false,
                    dirty: HashSet::new(),
                }),
                done: Notify::new(),
                idle: Condvar::new(),
            },
            records,
        ))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Empties both logs, once what they held is in the histories (and
    /// synced there).
    pub(super) fn reset(&self) -> io::Result<()> {
        let mut st = self.lock();
        for file in &st.files {
            file.set_len(0)?;
            file.sync_data()?;
        }
        st.len = 0;
        st.synced = (st.generation, 0);
        Ok(())
    }

    /// Appends `lines` (whole history lines of `session`) and answers where
    /// the record ends; [`Wal::sync_through`] that position makes it durable.
    pub(super) fn append(&self, session: &SessionId, lines: &[u8]) -> io::Result<Position> {
        let mut record = serde_json::to_vec(&Header {
            wal: 1,
            session: session.to_string(),
            bytes: lines.len() as u64,
        })
        .map_err(io::Error::other)?;
        record.push(b'\n');
        record.extend_from_slice(lines);
        let mut st = self.lock();
        let mut file: &File = &st.files[st.active];
        if let Err(e) = file.write_all(&record) {
            // Take back a partial record, so the next one starts clean.
            let _ = file.set_len(st.len);
            return Err(e);
        }
        st.len += record.len() as u64;
        st.dirty.insert(session.clone());
        Ok((st.generation, st.len))
    }

    /// Makes everything up to `position` durable: leads a sync, or waits
    /// for the one under way to cover it. See the [module docs](self).
    pub(super) async fn sync_through(self: &Arc<Self>, position: Position) -> io::Result<()> {
        loop {
            let done = self.done.notified();
            tokio::pin!(done);
            let lead = {
                let mut st = self.lock();
                if st.synced >= position {
                    return Ok(());
                }
                if st.syncing {
                    done.as_mut().enable();
                    None
                } else {
                    st.syncing = true;
                    Some((st.files[st.active].clone(), (st.generation, st.len)))
                }
            };
            let Some((file, end)) = lead else {
                done.await;
                continue;
            };
            // The leader: one fdatasync for every record appended so far.
            let result = file.sync_data();
            let checkpoint = {
                let mut st = self.lock();
                st.syncing = false;
                if result.is_ok() {
                    st.synced = st.synced.max(end);
                }
                let due = st.len > CHECKPOINT_BYTES && !st.checkpointing;
                if due {
                    st.checkpointing = true;
                }
                due
            };
            self.done.notify_waiters();
            self.idle.notify_all();
            result?;
            if checkpoint {
                let wal = self.clone();
                tokio::task::spawn_blocking(move || {
                    if let Err(e) = wal.checkpoint() {
                        tracing::warn!(error = %e, "session store: a checkpoint of the write-ahead log failed; it is tried again later");
                    }
                });
            }
        }
    }

    /// Switches logs, syncs the old one, syncs the histories it covered and
    /// empties it. Blocking; runs on a blocking thread.
    fn checkpoint(&self) -> io::Result<()> {
        let result = self.checkpoint_inner();
        self.lock().checkpointing = false;
        result
    }

    fn checkpoint_inner(&self) -> io::Result<()> {
        // Become the leader, then switch: no record goes to the old log
        // after this, and nobody else syncs until it is synced.
        let (old, end, dirty) = {
            let mut st = self.lock();
            while st.syncing {
                st = self.idle.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            st.syncing = true;
            let old = st.active;
            let end = (st.generation, st.len);
            st.active = 1 - old;
            st.generation += 1;
            st.len = 0;
            let dirty = std::mem::take(&mut st.dirty);
            (st.files[old].clone(), end, dirty)
        };
        let synced = old.sync_data();
        {
            let mut st = self.lock();
            st.syncing = false;
            if synced.is_ok() {
                st.synced = st.synced.max(end);
            }
        }
        self.done.notify_waiters();
        self.idle.notify_all();
        synced?;
        // The histories the old log covered, then the log itself.
        for id in &dirty {
            let path = self.dir.join(format!("{id}.jsonl"));
            match File::open(&path) {
                Ok(file) => file.sync_data()?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        File::open(&self.dir)?.sync_all()?;
        old.set_len(0)?;
        old.sync_data()
    }
}

/// The whole records of one log file; a torn last one is left out.
fn read(path: &Path) -> io::Result<Vec<Record>> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut records = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let Some(nl) = bytes[at..].iter().position(|b| *b == b'\n') else {
            break;
        };
        let header: Header = match serde_json::from_slice(&bytes[at..at + nl]) {
            Ok(h) => h,
            Err(_) => {
                tracing::warn!(path = %path.display(), offset = at, "session store: the write-ahead log is damaged here; the rest of it is ignored");
                break;
            }
        };
        let start = at + nl + 1;
        let end = start.saturating_add(usize::try_from(header.bytes).unwrap_or(usize::MAX));
        if end > bytes.len() {
            break; // torn: never reported durable
        }
        match SessionId::new(header.session) {
            Ok(session) => records.push(Record {
                session,
                lines: bytes[start..end].to_vec(),
            }),
            Err(_) => {
                tracing::warn!(path = %path.display(), "session store: a write-ahead record names no valid session; skipped")
            }
        }
        at = end;
    }
    Ok(records)
}

/// The records grouped by session, in log order.
pub(super) fn by_session(records: Vec<Record>) -> BTreeMap<SessionId, Vec<u8>> {
    let mut out: BTreeMap<SessionId, Vec<u8>> = BTreeMap::new();
    for record in records {
        out.entry(record.session).or_default().extend(record.lines);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> SessionId {
        SessionId::new(s).unwrap()
    }

    #[tokio::test]
    async fn records_come_back_whole_and_a_torn_one_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (wal, records) = Wal::open(dir.path()).unwrap();
            assert!(records.is_empty());
            let wal = Arc::new(wal);
            let a = wal.append(&id("a"), b"{\"seq\":1}\n").unwrap();
            let b = wal.append(&id("b"), b"{\"seq\":1}\n{\"seq\":2}\n").unwrap();
            assert!(b > a);
            wal.sync_through(b).await.unwrap();
            wal.sync_through(a).await.unwrap();
        }
        let mut bytes = std::fs::read(dir.path().join(FILES[0])).unwrap();
        bytes.extend_from_slice(b"{\"wal\":1,\"session\":\"c\",\"bytes\":100}\n{\"seq\"");
        std::fs::write(dir.path().join(FILES[0]), bytes).unwrap();
        let (wal, records) = Wal::open(dir.path()).unwrap();
        let grouped = by_session(records);
        assert_eq!(grouped.len(), 2);
        assert_eq!(grouped[&id("b")], b"{\"seq\":1}\n{\"seq\":2}\n");
        wal.reset().unwrap();
        let (_, records) = Wal::open(dir.path()).unwrap();
        assert!(records.is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_turns_share_syncs_and_every_one_is_covered() {
        let dir = tempfile::tempdir().unwrap();
        let (wal, _) = Wal::open(dir.path()).unwrap();
        let wal = Arc::new(wal);
        let mut tasks = Vec::new();
        for n in 0..64 {
            let wal = wal.clone();
            tasks.push(tokio::spawn(async move {
                let position = wal.append(&id(&format!("s{n}")), b"{\"seq\":1}\n").unwrap();
                wal.sync_through(position).await.unwrap();
                position
            }));
        }
        for task in tasks {
            let position = task.await.unwrap();
            assert!(wal.lock().synced >= position);
        }
    }

    #[test]
    fn a_checkpoint_switches_logs_and_empties_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.jsonl"), b"{\"seq\":1}\n").unwrap();
        let (wal, _) = Wal::open(dir.path()).unwrap();
        let first = wal.append(&id("a"), b"{\"seq\":1}\n").unwrap();
        wal.checkpoint().unwrap();
        assert!(
            wal.lock().synced >= first,
            "the old log was synced before it was emptied"
        );
        assert_eq!(std::fs::metadata(dir.path().join(FILES[0])).unwrap().len(), 0);
        let second = wal.append(&id("a"), b"{\"seq\":2}\n").unwrap();
        assert!(second > first, "positions keep growing across logs");
        let (_, records) = Wal::open(dir.path()).unwrap();
        assert_eq!(records.len(), 1, "only the new log holds a record");
    }
}
