//! The JSONL store's write-ahead log: group commit for turns that end
//! together.
//!
//! With [`Durability::EndOfTurn`](super::Durability::EndOfTurn) every batch
//! the store appends to a session's history is also written, byte for byte,
//! to `sessions/.wal-0` or `sessions/.wal-1` (the active one) behind a
//! header line naming its session. Making a turn durable is then one
//! `fdatasync` of the log, shared: the first turn to ask becomes the leader
//! and syncs everything written so far; turns that ask meanwhile wait for
//! the leader and are done when it covered them, or lead the next sync. So
//! one sync serves every session whose turn ended in that moment, instead
//! of one sync per history file.
//!
//! **Cheaper than an append.** Each log file is written full of zeros once
//! ([`PREALLOCATED`] bytes) and records are then written *over* it: a sync
//! that changes neither the file's size nor its blocks needs no metadata
//! written, only the data, which is the least a durable write can cost. A
//! record's header carries the log's generation and a checksum of its body,
//! so a reader stops at the first header that is not a whole, current
//! record (zeros, a torn record, or an older generation's record further
//! in a reused file).
//!
//! The leader syncs on its own thread rather than handing the sync to
//! another one: a hand-off costs about as much again on a small machine.
//! Only one thread at a time is ever in the log's `fdatasync`.
//!
//! **Checkpoints.** Once the active log holds [`CHECKPOINT_BYTES`], it is
//! switched for the other one (a new generation), synced one last time, the
//! history files it covered are synced on a background thread, and its head
//! is zeroed. **Recovery** (at open): both logs are read, and every entry a
//! history lacks (its `seq` is beyond the history's last one) is written
//! back to it; then the histories are synced and the logs' heads zeroed.
//! Replaying twice changes nothing. A torn last record (a crash in the
//! middle of a write) is ignored: its turn was never reported durable.

use std::collections::{BTreeMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use tokio::sync::Notify;

use super::SessionId;
use jarvis_common::fnv1a64;

/// The two log files, in the sessions folder.
const FILES: [&str; 2] = [".wal-0", ".wal-1"];

/// Each log file is written full of zeros to this size once.
pub(super) const PREALLOCATED: u64 = 8 << 20;

/// A log holding this much is checkpointed (half the preallocation, so the
/// other log is free long before this one is full; a record that does not
/// fit is written past the end, which only costs an append).
pub(super) const CHECKPOINT_BYTES: u64 = PREALLOCATED / 2;

/// Bytes zeroed at the head of an emptied log.
const HEAD: usize = 4096;

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
    generation: u64,
    session: String,
    bytes: u64,
    /// FNV-1a of the body.
    sum: u64,
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

/// The log; see the module docs.
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
    /// Opens the logs in `dir` (writing them full of zeros when they are
    /// new or short) and answers the records they hold, to replay before
    /// [`Wal::reset`].
    pub(super) fn open(dir: &Path) -> io::Result<(Self, Vec<Record>)> {
        let mut records = Vec::new();
        let mut files = Vec::new();
        let mut generation = 0;
        for name in FILES {
            let path = dir.join(name);
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(&path)?;
            let (found, newest) = read(&path, &file)?;
            records.extend(found);
            generation = generation.max(newest);
            preallocate(&file)?;
            files.push(Arc::new(file));
        }
        let files: [Arc<File>; 2] = [files[0].clone(), files[1].clone()];
        let generation = generation + 1;
        Ok((
            Self {
                dir: dir.to_path_buf(),
                state: Mutex::new(State {
                    files,
                    active: 0,
                    generation,
                    len: 0,
                    synced: (generation, 0),
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

    /// Empties both logs (zeroes their heads), once what they held is in
    /// the histories and synced there.
    pub(super) fn reset(&self) -> io::Result<()> {
        let st = self.lock();
        for file in &st.files {
            file.write_all_at(&[0u8; HEAD], 0)?;
            file.sync_data()?;
        }
        Ok(())
    }

    /// Writes `lines` (whole history lines of `session`) and answers where
    /// the record ends; [`Wal::sync_through`] that position makes it durable.
    pub(super) fn append(&self, session: &SessionId, lines: &[u8]) -> io::Result<Position> {
        let mut st = self.lock();
        let mut record = serde_json::to_vec(&Header {
            wal: 2,
            generation: st.generation,
            session: session.to_string(),
            bytes: lines.len() as u64,
            sum: fnv1a64(lines),
        })
        .map_err(io::Error::other)?;
        record.push(b'\n');
        record.extend_from_slice(lines);
        st.files[st.active].write_all_at(&record, st.len)?;
        st.len += record.len() as u64;
        st.dirty.insert(session.clone());
        Ok((st.generation, st.len))
    }

    /// Makes everything up to `position` durable: leads a sync, or waits
    /// for the one under way to cover it. See the module docs.
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
            // The leader: one fdatasync for every record written so far.
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
        sync_histories(&self.dir, &dirty)?;
        old.write_all_at(&[0u8; HEAD], 0)?;
        old.sync_data()
    }
}

/// Makes the histories of `dirty` and the folder's entries durable. On
/// Linux one `syncfs` of the folder's file system does it: it writes every
/// file back and commits the file system's journal once, where an
/// `fdatasync` per history would commit it once per file (a second or more
/// for a thousand histories, while the foreground's syncs wait behind
/// them).
#[cfg(target_os = "linux")]
fn sync_histories(dir: &Path, dirty: &HashSet<SessionId>) -> io::Result<()> {
    if dirty.is_empty() {
        return Ok(());
    }
    rustix::fs::syncfs(File::open(dir)?).map_err(io::Error::from)
}

/// Makes the histories of `dirty` and the folder's entries durable, one
/// `fdatasync` per history.
#[cfg(not(target_os = "linux"))]
fn sync_histories(dir: &Path, dirty: &HashSet<SessionId>) -> io::Result<()> {
    for id in dirty {
        let path = dir.join(format!("{id}.jsonl"));
        match File::open(&path) {
            Ok(file) => file.sync_data()?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    File::open(dir)?.sync_all()
}

/// Writes zeros over the file up to [`PREALLOCATED`] bytes (real blocks,
/// not a hole, so later writes over them change no metadata) and syncs it.
fn preallocate(file: &File) -> io::Result<()> {
    let len = file.metadata()?.len();
    if len >= PREALLOCATED {
        return Ok(());
    }
    let zeros = vec![0u8; 1 << 20];
    let mut at = len;
    while at < PREALLOCATED {
        let n = (PREALLOCATED - at).min(zeros.len() as u64) as usize;
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    file.sync_all()
}

/// The whole records of one log file, and the newest generation seen. It
/// stops at the first header that is not a whole record of the file's
/// generation (zeros, a torn record, a reused file's older records).
fn read(path: &Path, file: &File) -> io::Result<(Vec<Record>, u64)> {
    let len = file.metadata()?.len();
    let mut bytes = vec![0u8; usize::try_from(len).map_err(io::Error::other)?];
    file.read_exact_at(&mut bytes, 0)?;
    let mut records = Vec::new();
    let mut generation = None;
    let mut at = 0usize;
    while at < bytes.len() {
        let Some(nl) = bytes[at..].iter().take(4096).position(|b| *b == b'\n') else {
            break;
        };
        let Ok(header) = serde_json::from_slice::<Header>(&bytes[at..at + nl]) else {
            break;
        };
        if header.wal != 2 || generation.is_some_and(|g| g != header.generation) {
            break;
        }
        let start = at + nl + 1;
        let end = start.saturating_add(usize::try_from(header.bytes).unwrap_or(usize::MAX));
        if end > bytes.len() || fnv1a64(&bytes[start..end]) != header.sum {
            break; // torn: never reported durable
        }
        generation = Some(header.generation);
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
    Ok((records, generation.unwrap_or(0)))
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
        let torn_at = {
            let (wal, records) = Wal::open(dir.path()).unwrap();
            assert!(records.is_empty());
            assert_eq!(
                std::fs::metadata(dir.path().join(FILES[0])).unwrap().len(),
                PREALLOCATED
            );
            let wal = Arc::new(wal);
            let a = wal.append(&id("a"), b"{\"seq\":1}\n").unwrap();
            let b = wal.append(&id("b"), b"{\"seq\":1}\n{\"seq\":2}\n").unwrap();
            assert!(b > a);
            wal.sync_through(b).await.unwrap();
            wal.sync_through(a).await.unwrap();
            // A record torn in the middle of its body.
            let c = wal.append(&id("c"), b"{\"seq\":1}\n{\"seq\":2}\n").unwrap();
            c.1 - 5
        };
        let file = OpenOptions::new()
            .write(true)
            .open(dir.path().join(FILES[0]))
            .unwrap();
        file.write_all_at(&[0u8; 5], torn_at).unwrap();
        let (wal, records) = Wal::open(dir.path()).unwrap();
        let grouped = by_session(records);
        assert_eq!(grouped.len(), 2, "{:?}", grouped.keys().collect::<Vec<_>>());
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
    fn a_checkpoint_switches_logs_and_a_reused_log_hides_its_old_records() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.jsonl"), b"{\"seq\":1}\n").unwrap();
        let (wal, _) = Wal::open(dir.path()).unwrap();
        let first = wal.append(&id("a"), b"{\"seq\":1}\n").unwrap();
        let long = wal.append(&id("a"), &[b'x'; 200]).unwrap();
        wal.checkpoint().unwrap();
        assert!(
            wal.lock().synced >= long,
            "the old log was synced before it was emptied"
        );
        let second = wal.append(&id("a"), b"{\"seq\":2}\n").unwrap();
        assert!(second > first, "positions keep growing across logs");
        wal.checkpoint().unwrap();
        // Back on the first log: a new record over the old ones.
        let third = wal.append(&id("b"), b"{\"seq\":9}\n").unwrap();
        assert!(third > second);
        let (_, records) = Wal::open(dir.path()).unwrap();
        let sessions: Vec<String> = records.iter().map(|r| r.session.to_string()).collect();
        assert_eq!(sessions, ["b"], "only the current generation's record");
    }
}
