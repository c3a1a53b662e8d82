//! [`JsonlSessionStore`]: sessions as files under `$JARVIS_HOME/sessions/`.
//!
//! - `<id>.jsonl`: the history, one [`SessionEntry`] per line, created
//!   empty with the session. Append-only; every batch of entries goes to
//!   the file in one write of complete lines.
//! - `<id>.meta.json`: the [`SessionMeta`], replaced atomically (temporary
//!   file, then rename). A history without one is a legacy session of `main`
//!   (R-SESS-4).
//!
//! A session is read from disk once, the first time it is used, into a small
//! index: the byte offset of every turn's first line, the next `seq`, and a
//! cache of the last few turns' entries. After that a turn costs one write
//! and reading the recent window is a copy from the cache: nothing grows
//! with the session's length.
//!
//! **Durability.** With [`Durability::EndOfTurn`] every batch also goes to
//! the store's write-ahead log (`sessions/.wal-0`, `.wal-1`), and
//! [`SessionStore::sync`] syncs that one log: turns of different sessions
//! that end together share one `fdatasync` (group commit), and the history
//! files are synced when the log is checkpointed. At open, what the log
//! holds and a history lacks is written back to it (see `wal.rs`).
//!
//! Reading is forgiving, writing is not: on load a torn last line (a crash in
//! the middle of a write) is cut off, a damaged line elsewhere (bad JSON,
//! bad UTF-8, an unknown schema version) is skipped, and a line longer than
//! [`JsonlOptions::max_line_bytes`] is stepped over without being held in
//! memory; each is logged with `tracing::warn!` and counted in the session's
//! [`LoadReport`]. No other entry is lost.

use async_trait::async_trait;
use serde::Serialize;
use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::memory::sort_newest_first;
use super::wal::{Position, Record, Wal, by_session};
use super::{
    Durability, ENTRY_SCHEMA_VERSION, EntryBody, LEGACY_AGENT_ID, NewSession, SessionEntry, SessionError,
    SessionId, SessionKind, SessionMeta, SessionStore, fork_meta, normalize_title, now,
};
use jarvis_common::{Clock, HomeLock, SystemClock, Timestamp, write_atomic};

const LOG_EXT: &str = ".jsonl";
const META_EXT: &str = ".meta.json";

/// Settings of a [`JsonlSessionStore`].
#[derive(Debug, Clone)]
pub struct JsonlOptions {
    durability: Durability,
    cache_turns: usize,
    max_line_bytes: usize,
    clock: Arc<dyn Clock>,
}

impl Default for JsonlOptions {
    fn default() -> Self {
        Self {
            durability: Durability::EndOfTurn,
            cache_turns: 8,
            max_line_bytes: 64 << 20,
            clock: Arc::new(SystemClock),
        }
    }
}

impl JsonlOptions {
    /// When entries are flushed to disk; default [`Durability::EndOfTurn`].
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// How many of a session's last turns are kept in memory (at least 1;
    /// default 8). [`SessionStore::recent`] for up to this many turns reads
    /// no file; more turns read the file from the first of them on.
    pub fn cache_turns(mut self, turns: usize) -> Self {
        self.cache_turns = turns.max(1);
        self
    }

    /// The longest line, newline included, the store writes or reads
    /// (default 64 MiB). Appending a longer entry fails with
    /// [`SessionError::EntryTooLarge`]; a longer line found on disk is
    /// skipped with a warning.
    pub fn max_line_bytes(mut self, bytes: usize) -> Self {
        self.max_line_bytes = bytes.max(64);
        self
    }

    /// The clock timestamps come from; default the system clock.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
}

/// What loading one session's files found and repaired.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LoadReport {
    /// Entries read.
    pub entries: usize,
    /// Damaged lines skipped: bad JSON, bad UTF-8, an unknown schema version.
    pub skipped_lines: usize,
    /// Lines longer than the line limit, skipped.
    pub oversized_lines: usize,
    /// Bytes of a torn last line cut off the end of the file (a crash in the
    /// middle of a write); 0 when the file ended cleanly.
    pub torn_bytes: u64,
    /// The last line was a whole entry without its newline, which was added.
    pub repaired_newline: bool,
    /// There was no metadata file: a legacy session of `main`.
    pub missing_meta: bool,
}

/// Sessions as JSONL files under `<home>/sessions/`. See the module docs.
///
/// Opening takes the home's [`HomeLock`] (unless given one), so only one
/// process writes a home's sessions at a time. Cheap to clone; clones share
/// one state.
#[derive(Debug, Clone)]
pub struct JsonlSessionStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    _lock: Arc<HomeLock>,
    dir: PathBuf,
    /// The write-ahead log (used with [`Durability::EndOfTurn`]).
    wal: Arc<Wal>,
    options: JsonlOptions,
    sessions: Mutex<HashMap<SessionId, Arc<Session>>>,
    /// Serialises loading, creating, forking and metadata writes, so two
    /// tasks never load (and repair) the same files at once.
    gate: tokio::sync::Mutex<()>,
}

#[derive(Debug)]
struct Session {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    meta: SessionMeta,
    /// The append handle, opened at the first append.
    file: Option<File>,
    /// Bytes of whole lines in the file.
    len: u64,
    next_seq: u64,
    /// Byte offset of the line of every turn's user message.
    turn_offsets: Vec<u64>,
    tail: Tail,
    /// Ids of the proactive messages recorded (each is recorded once).
    proactive_ids: HashSet<String>,
    report: LoadReport,
    /// Where the write-ahead log's record of the last append ends.
    wal_position: Option<Position>,
    poisoned: bool,
}

/// The entries of the last `cap` turns (all entries while the session has
/// no more turns than that).
#[derive(Debug, Clone)]
struct Tail {
    entries: VecDeque<SessionEntry>,
    turns: usize,
    cap: usize,
    /// Nothing was ever dropped: the tail is the whole history.
    complete: bool,
}

impl Tail {
    fn new(cap: usize) -> Self {
        Self {
            entries: VecDeque::new(),
            turns: 0,
            cap,
            complete: true,
        }
    }

    fn push(&mut self, entry: SessionEntry) {
        if entry.starts_turn() {
            self.turns += 1;
        }
        self.entries.push_back(entry);
        if self.turns > self.cap {
            // Drop the oldest turn: everything before the second turn start.
            let mut dropped_start = false;
            while let Some(front) = self.entries.front() {
                if front.starts_turn() {
                    if dropped_start {
                        break;
                    }
                    dropped_start = true;
                    self.turns -= 1;
                }
                self.entries.pop_front();
            }
            self.complete = false;
        }
    }

    /// The last `turns` turns, when the tail holds them.
    fn recent(&self, turns: usize) -> Option<Vec<SessionEntry>> {
        if turns == 0 {
            return Some(Vec::new());
        }
        let mut seen = 0;
        for (i, e) in self.entries.iter().enumerate().rev() {
            if e.starts_turn() {
                seen += 1;
                if seen == turns {
                    return Some(self.entries.range(i..).cloned().collect());
                }
            }
        }
        self.complete.then(|| self.entries.iter().cloned().collect())
    }
}

/// The metadata file's content: the metadata plus a schema version.
#[derive(Serialize)]
struct MetaFile<'a> {
    v: u32,
    #[serde(flatten)]
    meta: &'a SessionMeta,
}

impl JsonlSessionStore {
    /// Opens (creating as needed) the sessions of `home` with default
    /// options, taking the home's lock.
    pub fn open(home: impl AsRef<Path>) -> Result<Self, SessionError> {
        Self::open_with(home, JsonlOptions::default())
    }

    /// Opens the sessions of `home` with `options`, taking the home's lock.
    pub fn open_with(home: impl AsRef<Path>, options: JsonlOptions) -> Result<Self, SessionError> {
        let lock = HomeLock::acquire(home)?;
        Self::with_lock(Arc::new(lock), options)
    }

    /// Opens the sessions of the home `lock` owns; for an application that
    /// holds the lock already.
    pub fn with_lock(lock: Arc<HomeLock>, options: JsonlOptions) -> Result<Self, SessionError> {
        let dir = lock.home().join("sessions");
        std::fs::create_dir_all(&dir).map_err(SessionError::io("create", &dir))?;
        migrate_job_sessions(&dir)?;
        let (wal, records) =
            Wal::open(&dir).map_err(SessionError::io("open the write-ahead log in", &dir))?;
        let replayed = replay(&dir, records, &options)?;
        wal.reset()
            .map_err(SessionError::io("empty the write-ahead log in", &dir))?;
        let sessions = replayed
            .into_iter()
            .map(|(id, state)| {
                let session = Session {
                    state: Mutex::new(state),
                };
                (id, Arc::new(session))
            })
            .collect();
        Ok(Self {
            inner: Arc::new(Inner {
                _lock: lock,
                dir,
                wal: Arc::new(wal),
                options,
                sessions: Mutex::new(sessions),
                gate: tokio::sync::Mutex::new(()),
            }),
        })
    }

    /// The sessions folder.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// What loading the session found and repaired (loading it if needed).
    pub async fn load_report(&self, id: &SessionId) -> Result<LoadReport, SessionError> {
        let session = self.session(id).await?;
        Ok(session.lock().report)
    }

    fn cached(&self, id: &SessionId) -> Option<Arc<Session>> {
        lock(&self.inner.sessions).get(id).cloned()
    }

    /// The session, loaded from disk the first time.
    async fn session(&self, id: &SessionId) -> Result<Arc<Session>, SessionError> {
        if let Some(s) = self.cached(id) {
            return Ok(s);
        }
        let _gate = self.inner.gate.lock().await;
        self.load_gated(id)
            .await?
            .ok_or_else(|| SessionError::not_found(id))
    }

    /// Loads the session; the caller holds the gate.
    async fn load_gated(&self, id: &SessionId) -> Result<Option<Arc<Session>>, SessionError> {
        if let Some(s) = self.cached(id) {
            return Ok(Some(s));
        }
        let dir = self.inner.dir.clone();
        let options = self.inner.options.clone();
        let key = id.clone();
        let Some(state) = blocking(move || load(&dir, &key, &options)).await?? else {
            return Ok(None);
        };
        let session = Arc::new(Session {
            state: Mutex::new(state),
        });
        lock(&self.inner.sessions).insert(id.clone(), session.clone());
        Ok(Some(session))
    }

    /// Whether a session with `id` exists in memory or on disk; the caller
    /// holds the gate.
    fn exists_gated(&self, id: &SessionId) -> bool {
        self.cached(id).is_some()
            || self.inner.dir.join(format!("{id}{META_EXT}")).exists()
            || self.inner.dir.join(format!("{id}{LOG_EXT}")).exists()
    }

    /// Writes the metadata file of `meta`; the caller holds the gate.
    async fn write_meta(&self, meta: &SessionMeta) -> Result<(), SessionError> {
        let path = self.inner.dir.join(format!("{}{META_EXT}", meta.id));
        let mut bytes = serde_json::to_vec_pretty(&MetaFile {
            v: ENTRY_SCHEMA_VERSION,
            meta,
        })
        .map_err(SessionError::Encode)?;
        bytes.push(b'\n');
        blocking(move || write_atomic(&path, &bytes).map_err(SessionError::io("write", path))).await?
    }

    fn log_path(&self, id: &SessionId) -> PathBuf {
        self.inner.dir.join(format!("{id}{LOG_EXT}"))
    }

    /// The session, with its append handle open when `open_file`.
    async fn writable(&self, id: &SessionId, open_file: bool) -> Result<Arc<Session>, SessionError> {
        let session = self.session(id).await?;
        if open_file && session.lock().file.is_none() {
            // The first append of a session opens its file off the async
            // threads (creating it, for a session made before files were
            // created with their session).
            let path = self.log_path(id);
            let file = blocking(move || {
                OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(&path)
                    .map_err(SessionError::io("open", path))
            })
            .await??;
            let mut st = session.lock();
            if st.file.is_none() {
                st.file = Some(file);
            }
        }
        Ok(session)
    }

    /// Appends `entries` with one write; the caller holds the session's lock.
    fn append_locked(
        &self,
        st: &mut State,
        id: &SessionId,
        entries: Vec<EntryBody>,
        ts: Timestamp,
    ) -> Result<u64, SessionError> {
        if st.poisoned {
            return Err(SessionError::Poisoned { id: id.to_string() });
        }
        if entries.is_empty() {
            return Ok(st.next_seq - 1);
        }
        let limit = self.inner.options.max_line_bytes;
        let mut buf = Vec::with_capacity(256 * entries.len());
        let mut written = Vec::with_capacity(entries.len());
        let mut seq = st.next_seq;
        for body in entries {
            let entry = SessionEntry {
                v: ENTRY_SCHEMA_VERSION,
                seq,
                ts,
                body,
            };
            let start = buf.len();
            serde_json::to_writer(&mut buf, &entry).map_err(SessionError::Encode)?;
            buf.push(b'\n');
            let bytes = buf.len() - start;
            if bytes > limit {
                return Err(SessionError::EntryTooLarge {
                    id: id.to_string(),
                    bytes,
                    limit,
                });
            }
            written.push((start as u64, entry));
            seq += 1;
        }
        let path = self.log_path(id);
        let len = st.len;
        if st.file.is_none() {
            let file = OpenOptions::new()
                .append(true)
                .create(true)
                .open(&path)
                .map_err(SessionError::io("open", &path))?;
            st.file = Some(file);
        }
        let file = st.file.as_mut().ok_or_else(|| SessionError::not_found(id))?;
        if let Err(e) = file.write_all(&buf) {
            // Take back whatever part of the batch reached the file, so the
            // next append starts on a line of its own.
            if file.set_len(len).is_err() {
                st.poisoned = true;
            }
            return Err(SessionError::io("append to", path)(e));
        }
        if self.inner.options.durability == Durability::EndOfTurn {
            match self.inner.wal.append(id, &buf) {
                Ok(position) => st.wal_position = Some(position),
                Err(e) => {
                    // Not in the log, so not in the history either.
                    let file = st.file.as_mut().ok_or_else(|| SessionError::not_found(id))?;
                    if file.set_len(len).is_err() {
                        st.poisoned = true;
                    }
                    return Err(SessionError::io("append to the write-ahead log of", path)(e));
                }
            }
        }
        for (offset, entry) in written {
            if entry.starts_turn() {
                st.turn_offsets.push(len + offset);
            }
            if let Some(key) = entry.body.proactive_id() {
                st.proactive_ids.insert(key.to_owned());
            }
            st.tail.push(entry);
        }
        st.len += buf.len() as u64;
        st.next_seq = seq;
        st.meta.updated_at = st.meta.updated_at.max(ts);
        Ok(seq - 1)
    }

    /// Reads whole lines of the history from byte `from` up to byte `to`.
    async fn read_range(
        &self,
        id: &SessionId,
        from: u64,
        to: u64,
    ) -> Result<Vec<SessionEntry>, SessionError> {
        if from >= to {
            return Ok(Vec::new());
        }
        let path = self.log_path(id);
        let limit = self.inner.options.max_line_bytes;
        blocking(move || read_range(&path, from, to, limit)).await?
    }
}

impl Session {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs blocking file work off the async threads, keeping the caller's
/// `tracing` subscriber so warnings reach it.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, SessionError> {
    let dispatch = tracing::dispatcher::get_default(Clone::clone);
    tokio::task::spawn_blocking(move || tracing::dispatcher::with_default(&dispatch, f))
        .await
        .map_err(|e| SessionError::Task(Box::new(e)))
}

#[async_trait]
impl SessionStore for JsonlSessionStore {
    async fn create(&self, new: NewSession) -> Result<SessionMeta, SessionError> {
        let meta = new.into_meta(now(&*self.inner.options.clock))?;
        let _gate = self.inner.gate.lock().await;
        if self.exists_gated(&meta.id) {
            return Err(SessionError::AlreadyExists {
                id: meta.id.to_string(),
            });
        }
        self.write_meta(&meta).await?;
        // The (empty) history file is created now, off the async threads, so
        // the session's first turn does not pay for creating a file (which
        // takes milliseconds on a busy file system).
        let path = self.log_path(&meta.id);
        blocking(move || {
            OpenOptions::new()
                .append(true)
                .create(true)
                .open(&path)
                .map(drop)
                .map_err(SessionError::io("create", path))
        })
        .await??;
        let state = State::empty(meta.clone(), self.inner.options.cache_turns);
        lock(&self.inner.sessions).insert(
            meta.id.clone(),
            Arc::new(Session {
                state: Mutex::new(state),
            }),
        );
        Ok(meta)
    }

    async fn get(&self, id: &SessionId) -> Result<Option<SessionMeta>, SessionError> {
        match self.session(id).await {
            Ok(s) => Ok(Some(s.lock().meta.clone())),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn append(&self, id: &SessionId, entries: Vec<EntryBody>) -> Result<u64, SessionError> {
        let ts = now(&*self.inner.options.clock);
        let session = self.writable(id, !entries.is_empty()).await?;
        let mut st = session.lock();
        self.append_locked(&mut st, id, entries, ts)
    }

    async fn append_once(&self, id: &SessionId, entry: EntryBody) -> Result<bool, SessionError> {
        let ts = now(&*self.inner.options.clock);
        let session = self.writable(id, true).await?;
        let mut st = session.lock();
        if entry
            .proactive_id()
            .is_some_and(|key| st.proactive_ids.contains(key))
        {
            return Ok(false);
        }
        self.append_locked(&mut st, id, vec![entry], ts)?;
        Ok(true)
    }

    async fn recent(&self, id: &SessionId, turns: usize) -> Result<Vec<SessionEntry>, SessionError> {
        let session = self.session(id).await?;
        let (from, to) = {
            let st = session.lock();
            if let Some(window) = st.tail.recent(turns) {
                return Ok(window);
            }
            let n = st.turn_offsets.len();
            let from = if turns >= n { 0 } else { st.turn_offsets[n - turns] };
            (from, st.len)
        };
        self.read_range(id, from, to).await
    }

    async fn entries(&self, id: &SessionId) -> Result<Vec<SessionEntry>, SessionError> {
        let session = self.session(id).await?;
        let to = {
            let st = session.lock();
            if st.tail.complete {
                return Ok(st.tail.entries.iter().cloned().collect());
            }
            st.len
        };
        self.read_range(id, 0, to).await
    }

    async fn list(&self) -> Result<Vec<SessionMeta>, SessionError> {
        // Sessions in memory answer from there; the others are peeked at
        // (the metadata file and the last line of the history) without
        // being loaded, so listing keeps no session in memory.
        let dir = self.inner.dir.clone();
        let loaded: HashMap<SessionId, SessionMeta> = lock(&self.inner.sessions)
            .iter()
            .map(|(id, s)| (id.clone(), s.lock().meta.clone()))
            .collect();
        let limit = self.inner.options.max_line_bytes;
        let mut metas = blocking(move || -> Result<Vec<SessionMeta>, SessionError> {
            let mut metas = Vec::new();
            for id in session_ids(&dir)? {
                if let Some(meta) = loaded.get(&id) {
                    metas.push(meta.clone());
                    continue;
                }
                match peek(&dir, &id, limit) {
                    Ok(Some(meta)) => metas.push(meta),
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(session_id = %id, "session store: left session {id} out of the list: {}", chain(&e))
                    }
                }
            }
            Ok(metas)
        })
        .await??;
        sort_newest_first(&mut metas);
        Ok(metas)
    }

    async fn unload(&self, id: &SessionId) -> bool {
        let mut sessions = lock(&self.inner.sessions);
        // Only when nobody is using it: a writer holds a clone while it appends.
        let idle = sessions.get(id).is_some_and(|s| Arc::strong_count(s) == 1);
        if idle {
            sessions.remove(id);
        }
        idle
    }

    fn loaded(&self) -> Option<usize> {
        Some(lock(&self.inner.sessions).len())
    }

    async fn fork(&self, parent: &SessionId, child: SessionId) -> Result<SessionMeta, SessionError> {
        let ts = now(&*self.inner.options.clock);
        let _gate = self.inner.gate.lock().await;
        let source = self
            .load_gated(parent)
            .await?
            .ok_or_else(|| SessionError::not_found(parent))?;
        if self.exists_gated(&child) {
            return Err(SessionError::AlreadyExists {
                id: child.to_string(),
            });
        }
        let state = {
            let st = source.lock();
            State {
                meta: fork_meta(&st.meta, child.clone(), ts),
                file: None,
                len: st.len,
                next_seq: st.next_seq,
                turn_offsets: st.turn_offsets.clone(),
                tail: st.tail.clone(),
                proactive_ids: st.proactive_ids.clone(),
                report: LoadReport::default(),
                wal_position: None,
                poisoned: false,
            }
        };
        // Metadata first: a crash before the history is in place leaves an
        // empty session of the right agent, never a history without owner.
        self.write_meta(&state.meta).await?;
        let from = self.log_path(parent);
        let to = self.log_path(&child);
        let len = state.len;
        blocking(move || copy_prefix(&from, &to, len)).await??;
        let meta = state.meta.clone();
        lock(&self.inner.sessions).insert(
            child,
            Arc::new(Session {
                state: Mutex::new(state),
            }),
        );
        Ok(meta)
    }

    async fn set_title(&self, id: &SessionId, title: Option<String>) -> Result<SessionMeta, SessionError> {
        let title = normalize_title(title)?;
        let ts = now(&*self.inner.options.clock);
        let _gate = self.inner.gate.lock().await;
        let session = self
            .load_gated(id)
            .await?
            .ok_or_else(|| SessionError::not_found(id))?;
        let mut meta = session.lock().meta.clone();
        meta.title = title;
        meta.updated_at = meta.updated_at.max(ts);
        self.write_meta(&meta).await?;
        let mut st = session.lock();
        st.meta.title = meta.title.clone();
        st.meta.updated_at = st.meta.updated_at.max(meta.updated_at);
        st.report.missing_meta = false;
        Ok(st.meta.clone())
    }

    async fn sync(&self, id: &SessionId) -> Result<(), SessionError> {
        let session = self.session(id).await?;
        if self.inner.options.durability == Durability::Never {
            return Ok(());
        }
        let Some(position) = session.lock().wal_position else {
            return Ok(());
        };
        self.inner
            .wal
            .sync_through(position)
            .await
            .map_err(SessionError::io("sync the write-ahead log of", self.log_path(id)))
    }
}

impl State {
    fn empty(meta: SessionMeta, cache_turns: usize) -> Self {
        Self {
            meta,
            file: None,
            len: 0,
            next_seq: 1,
            turn_offsets: Vec::new(),
            tail: Tail::new(cache_turns),
            proactive_ids: HashSet::new(),
            report: LoadReport::default(),
            wal_position: None,
            poisoned: false,
        }
    }
}

/// An error and its sources, joined with `: `.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Writes back to each history what the write-ahead log holds and the
/// history lacks (entries beyond its last `seq`), and syncs it; answers the
/// sessions it loaded (with what loading them found and repaired).
/// Idempotent.
fn replay(
    dir: &Path,
    records: Vec<Record>,
    options: &JsonlOptions,
) -> Result<Vec<(SessionId, State)>, SessionError> {
    let mut replayed = 0usize;
    let mut loaded = Vec::new();
    for (id, lines) in by_session(records) {
        let Some(state) = load(dir, &id, options)? else {
            tracing::warn!(session_id = %id, "session store: the write-ahead log names a session with no files; its entries are dropped");
            continue;
        };
        let mut next = state.next_seq;
        let mut missing = Vec::new();
        for line in lines.split_inclusive(|b| *b == b'\n') {
            if let Ok(entry) = parse(line)
                && entry.seq >= next
            {
                next = entry.seq + 1;
                missing.extend_from_slice(line);
                replayed += 1;
            }
        }
        if missing.is_empty() {
            loaded.push((id, state));
            continue;
        }
        let path = dir.join(format!("{id}{LOG_EXT}"));
        let mut file = OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path)
            .map_err(SessionError::io("open", &path))?;
        file.write_all(&missing)
            .and_then(|()| file.sync_data())
            .map_err(SessionError::io("repair", &path))?;
        // Read again with the entries written back; what the first load
        // repaired is still its report.
        if let Some(mut again) = load(dir, &id, options)? {
            again.report = state.report;
            loaded.push((id, again));
        }
    }
    if replayed > 0 {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(SessionError::io("sync", dir))?;
        tracing::warn!(
            entries = replayed,
            "session store: wrote back entries the write-ahead log held and the histories lacked (a crash before the last checkpoint)"
        );
    }
    Ok(loaded)
}

/// Marks the sessions folder as migrated to session kinds.
const KINDS_MIGRATED: &str = ".kinds-migrated";

/// Scheduled jobs' sessions (`sched-…`) were `user` sessions before the
/// `job` kind existed: their metadata files say `job` from the first start
/// on. It runs once per home (a marker file remembers it), so a person's
/// session made later with such an id stays theirs; the one place a
/// session id is read for meaning.
fn migrate_job_sessions(dir: &Path) -> Result<(), SessionError> {
    let marker = dir.join(KINDS_MIGRATED);
    if marker.exists() {
        return Ok(());
    }
    let read = std::fs::read_dir(dir).map_err(SessionError::io("list", dir))?;
    for item in read {
        let item = item.map_err(SessionError::io("list", dir))?;
        let name = item.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with("sched-") || !name.ends_with(META_EXT) {
            continue;
        }
        let path = item.path();
        let Ok(bytes) = std::fs::read(&path) else { continue };
        let Ok(mut meta) = serde_json::from_slice::<SessionMeta>(&bytes) else {
            continue; // a damaged file is reported when the session loads
        };
        if meta.kind != SessionKind::User {
            continue;
        }
        meta.kind = SessionKind::Job;
        let mut bytes = serde_json::to_vec_pretty(&MetaFile {
            v: ENTRY_SCHEMA_VERSION,
            meta: &meta,
        })
        .map_err(SessionError::Encode)?;
        bytes.push(b'\n');
        write_atomic(&path, &bytes).map_err(SessionError::io("write", &path))?;
        tracing::info!(session_id = %meta.id, "session store: a scheduled job's session is now of kind job");
    }
    write_atomic(&marker, b"job\n").map_err(SessionError::io("write", &marker))
}

/// Ids of the sessions in `dir`, from their file names. Other files (the
/// store's temporary files among them) are ignored.
fn session_ids(dir: &Path) -> Result<Vec<SessionId>, SessionError> {
    let mut ids = Vec::new();
    let read = std::fs::read_dir(dir).map_err(SessionError::io("list", dir))?;
    for item in read {
        let item = item.map_err(SessionError::io("list", dir))?;
        let name = item.file_name();
        let Some(name) = name.to_str() else { continue };
        let stem = name.strip_suffix(META_EXT).or_else(|| name.strip_suffix(LOG_EXT));
        if let Some(id) = stem.and_then(|s| SessionId::new(s).ok()) {
            ids.push(id);
        }
    }
    ids.sort();
    ids.dedup();
    Ok(ids)
}

/// A session's metadata without loading it: its metadata file (a legacy
/// session without one is `main`'s, created at its first entry) and, for
/// `updated_at`, the last whole line of its history. `None` when neither
/// file exists.
fn peek(dir: &Path, id: &SessionId, limit: usize) -> Result<Option<SessionMeta>, SessionError> {
    let meta_path = dir.join(format!("{id}{META_EXT}"));
    let log_path = dir.join(format!("{id}{LOG_EXT}"));
    let mut meta = match std::fs::read(&meta_path) {
        Ok(bytes) => {
            let mut meta: SessionMeta =
                serde_json::from_slice(&bytes).map_err(|source| SessionError::CorruptMeta {
                    id: id.to_string(),
                    path: meta_path.clone(),
                    source,
                })?;
            meta.id = id.clone();
            Some(meta)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(SessionError::io("read", meta_path)(e)),
    };
    let mut log = match File::open(&log_path) {
        Ok(f) => Some(f),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(SessionError::io("open", log_path)(e)),
    };
    if meta.is_none() && log.is_none() {
        return Ok(None);
    }
    let mut first_ts = None;
    let mut last_ts = None;
    if let Some(file) = log.as_mut() {
        let len = file
            .metadata()
            .map_err(SessionError::io("read", &log_path))?
            .len();
        // The last whole line is within the last line-limit bytes.
        let window = (limit as u64 + 1).min(len).min(4 << 20);
        file.seek(SeekFrom::Start(len - window))
            .map_err(SessionError::io("read", &log_path))?;
        let mut tail = Vec::with_capacity(window as usize);
        Read::by_ref(file)
            .take(window)
            .read_to_end(&mut tail)
            .map_err(SessionError::io("read", &log_path))?;
        last_ts = tail
            .split(|b| *b == b'\n')
            .rev()
            .find_map(|line| parse(line).ok())
            .map(|e| e.ts);
        if meta.is_none() {
            file.seek(SeekFrom::Start(0))
                .map_err(SessionError::io("read", &log_path))?;
            let mut reader = BufReader::new(Read::by_ref(file).take(limit as u64 + 1));
            let mut buf = Vec::new();
            while let Some(line) =
                next_line(&mut reader, &mut buf, limit).map_err(SessionError::io("read", &log_path))?
            {
                if line.terminated
                    && !line.oversized
                    && let Ok(entry) = parse(&buf)
                {
                    first_ts = Some(entry.ts);
                    break;
                }
            }
        }
    }
    let mut meta = meta.take().unwrap_or_else(|| SessionMeta {
        id: id.clone(),
        agent_id: LEGACY_AGENT_ID.to_owned(),
        title: None,
        created_at: first_ts.unwrap_or_default(),
        updated_at: Timestamp::EPOCH,
        parent_id: None,
        kind: SessionKind::User,
        caller: None,
        callee: None,
        sub: None,
    });
    if let Some(ts) = last_ts {
        meta.updated_at = meta.updated_at.max(ts);
    }
    Ok(Some(meta))
}

/// Reads, checks and repairs one session's files. `None` when neither exists.
fn load(dir: &Path, id: &SessionId, options: &JsonlOptions) -> Result<Option<State>, SessionError> {
    let meta_path = dir.join(format!("{id}{META_EXT}"));
    let log_path = dir.join(format!("{id}{LOG_EXT}"));
    let meta = match std::fs::read(&meta_path) {
        Ok(bytes) => {
            let mut meta: SessionMeta =
                serde_json::from_slice(&bytes).map_err(|source| SessionError::CorruptMeta {
                    id: id.to_string(),
                    path: meta_path.clone(),
                    source,
                })?;
            if meta.id != *id {
                tracing::warn!(
                    session_id = %id,
                    "session store: {} names session {}; using the file name's id {id}",
                    meta_path.display(),
                    meta.id
                );
                meta.id = id.clone();
            }
            Some(meta)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(SessionError::io("read", meta_path)(e)),
    };
    let log = match OpenOptions::new().read(true).write(true).open(&log_path) {
        Ok(f) => Some(f),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(SessionError::io("open", log_path)(e)),
    };
    if meta.is_none() && log.is_none() {
        return Ok(None);
    }
    let placeholder = SessionMeta {
        id: id.clone(),
        agent_id: LEGACY_AGENT_ID.to_owned(),
        title: None,
        created_at: Timestamp::EPOCH,
        updated_at: Timestamp::EPOCH,
        parent_id: None,
        kind: SessionKind::User,
        caller: None,
        callee: None,
        sub: None,
    };
    let missing_meta = meta.is_none();
    let mut state = State::empty(meta.unwrap_or(placeholder), options.cache_turns);
    state.report.missing_meta = missing_meta;
    let mut first_ts = None;
    let mut last_ts = None;
    if let Some(file) = log {
        let scan = scan(&log_path, file, options.max_line_bytes, |offset, entry| {
            first_ts.get_or_insert(entry.ts);
            last_ts = Some(entry.ts);
            state.next_seq = state.next_seq.max(entry.seq.saturating_add(1));
            if entry.starts_turn() {
                state.turn_offsets.push(offset);
            }
            if let Some(key) = entry.body.proactive_id() {
                state.proactive_ids.insert(key.to_owned());
            }
            state.tail.push(entry);
        })?;
        state.len = scan.len;
        state.report = LoadReport {
            missing_meta,
            ..scan.report
        };
    }
    if missing_meta {
        tracing::warn!(
            session_id = %id,
            "session store: session {id} has no metadata file ({}); it is a legacy session of agent {LEGACY_AGENT_ID}",
            meta_path.display()
        );
        state.meta.created_at = first_ts.unwrap_or_default();
    }
    if let Some(ts) = last_ts {
        state.meta.updated_at = state.meta.updated_at.max(ts);
    }
    Ok(Some(state))
}

struct Scan {
    len: u64,
    report: LoadReport,
}

/// Reads every line of the history, handing each valid entry and its byte
/// offset to `each`, and repairs the end of the file (see the module docs).
fn scan(
    path: &Path,
    mut file: File,
    limit: usize,
    mut each: impl FnMut(u64, SessionEntry),
) -> Result<Scan, SessionError> {
    let mut report = LoadReport::default();
    let mut reader = BufReader::with_capacity(256 << 10, &mut file);
    let mut buf = Vec::new();
    let mut offset = 0u64;
    let mut number = 0usize;
    let mut torn_at = None;
    let mut missing_newline = false;
    while let Some(line) = next_line(&mut reader, &mut buf, limit).map_err(SessionError::io("read", path))? {
        number += 1;
        let at = offset;
        offset += line.len;
        if !line.terminated {
            let whole = !line.oversized && parse(&buf).is_ok();
            if whole {
                missing_newline = true;
            } else {
                torn_at = Some(at);
                break;
            }
        }
        if line.oversized {
            report.oversized_lines += 1;
            tracing::warn!(
                "session store: skipped line {number} of {} ({} bytes, over the limit of {limit})",
                path.display(),
                line.len
            );
            continue;
        }
        match parse(&buf) {
            Ok(entry) => {
                report.entries += 1;
                each(at, entry);
            }
            Err(reason) => {
                report.skipped_lines += 1;
                tracing::warn!(
                    "session store: skipped damaged line {number} of {} (byte {at}): {reason}",
                    path.display()
                );
            }
        }
    }
    drop(reader);
    if let Some(at) = torn_at {
        report.torn_bytes = offset - at;
        tracing::warn!(
            "session store: cut a torn last line of {} bytes off {} (a write was interrupted)",
            report.torn_bytes,
            path.display()
        );
        file.set_len(at)
            .and_then(|()| file.sync_all())
            .map_err(SessionError::io("repair", path))?;
        offset = at;
    } else if missing_newline {
        report.repaired_newline = true;
        tracing::warn!(
            "session store: added the missing newline at the end of {}",
            path.display()
        );
        (|| {
            file.seek(SeekFrom::End(0))?;
            file.write_all(b"\n")?;
            file.sync_all()
        })()
        .map_err(SessionError::io("repair", path))?;
        offset += 1;
    }
    Ok(Scan { len: offset, report })
}

/// One entry from a line (its newline, if any, included).
fn parse(line: &[u8]) -> Result<SessionEntry, String> {
    let text = line.strip_suffix(b"\n").unwrap_or(line);
    let entry: SessionEntry = serde_json::from_slice(text).map_err(|e| e.to_string())?;
    if entry.v != ENTRY_SCHEMA_VERSION {
        return Err(format!("unknown schema version {}", entry.v));
    }
    Ok(entry)
}

/// Reads the whole lines between bytes `from` and `to` of `path`, skipping
/// damaged and oversized ones (they were reported when the session loaded).
fn read_range(path: &Path, from: u64, to: u64, limit: usize) -> Result<Vec<SessionEntry>, SessionError> {
    let mut file = File::open(path).map_err(SessionError::io("open", path))?;
    file.seek(SeekFrom::Start(from))
        .map_err(SessionError::io("read", path))?;
    let mut reader = BufReader::with_capacity(256 << 10, file.take(to - from));
    let mut buf = Vec::new();
    let mut entries = Vec::new();
    while let Some(line) = next_line(&mut reader, &mut buf, limit).map_err(SessionError::io("read", path))? {
        if line.terminated
            && !line.oversized
            && let Ok(entry) = parse(&buf)
        {
            entries.push(entry);
        }
    }
    Ok(entries)
}

/// Copies the first `len` bytes of `from` to a new file `to`, atomically.
fn copy_prefix(from: &Path, to: &Path, len: u64) -> Result<(), SessionError> {
    let mut source = match File::open(from) {
        Ok(f) => f.take(len),
        Err(e) if e.kind() == io::ErrorKind::NotFound && len == 0 => return Ok(()),
        Err(e) => return Err(SessionError::io("open", from)(e)),
    };
    let tmp = to.with_extension(format!("jsonl.{}.tmp", std::process::id()));
    let result = (|| {
        let mut out = File::create(&tmp)?;
        io::copy(&mut source, &mut out)?;
        out.sync_all()?;
        std::fs::rename(&tmp, to)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(SessionError::io("write", to))
}

struct Line {
    /// Bytes the line takes in the file, newline included.
    len: u64,
    terminated: bool,
    /// Longer than the limit; its bytes were not kept.
    oversized: bool,
}

/// Reads the next line into `buf` (newline included), keeping at most
/// `limit` bytes of it: a longer line is consumed but not stored.
fn next_line(reader: &mut impl BufRead, buf: &mut Vec<u8>, limit: usize) -> io::Result<Option<Line>> {
    buf.clear();
    let mut len = 0u64;
    let mut oversized = false;
    loop {
        let chunk = match reader.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok((len > 0).then_some(Line {
                len,
                terminated: false,
                oversized,
            }));
        }
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if !oversized {
            if buf.len() + take > limit {
                oversized = true;
                buf.clear();
                buf.shrink_to(64 << 10);
            } else {
                buf.extend_from_slice(&chunk[..take]);
            }
        }
        len += take as u64;
        reader.consume(take);
        if done {
            return Ok(Some(Line {
                len,
                terminated: true,
                oversized,
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jarvis_model::Message;

    fn entry(seq: u64, body: EntryBody) -> SessionEntry {
        SessionEntry {
            v: 1,
            seq,
            ts: Timestamp::EPOCH,
            body,
        }
    }

    #[test]
    fn the_tail_keeps_the_last_turns_whole() {
        let mut tail = Tail::new(2);
        let mut seq = 0;
        let mut push = |tail: &mut Tail, body| {
            seq += 1;
            tail.push(entry(seq, body));
        };
        push(&mut tail, EntryBody::TurnStart { turn_id: None });
        for turn in 0..4 {
            push(&mut tail, EntryBody::message(Message::user(format!("u{turn}"))));
            push(
                &mut tail,
                EntryBody::message(Message::assistant_text(format!("a{turn}"))),
            );
            push(&mut tail, EntryBody::TurnStart { turn_id: None });
        }
        assert!(!tail.complete);
        assert_eq!(tail.turns, 2);
        let window = tail.recent(2).unwrap();
        assert_eq!(window.first().unwrap().message(), Some(&Message::user("u2")));
        assert_eq!(window.len(), 6);
        assert_eq!(tail.recent(1).unwrap().len(), 3);
        assert!(tail.recent(3).is_none(), "three turns are not in a two-turn tail");
        assert!(tail.recent(0).unwrap().is_empty());
    }

    #[test]
    fn a_complete_tail_answers_any_window() {
        let mut tail = Tail::new(4);
        tail.push(entry(1, EntryBody::TurnStart { turn_id: None }));
        tail.push(entry(2, EntryBody::message(Message::user("u"))));
        assert_eq!(tail.recent(10).unwrap().len(), 2);
    }

    #[test]
    fn lines_longer_than_the_limit_are_consumed_not_kept() {
        let data = format!("{}\nshort\nunterminated", "x".repeat(1000));
        let mut reader = BufReader::with_capacity(64, data.as_bytes());
        let mut buf = Vec::new();
        let first = next_line(&mut reader, &mut buf, 100).unwrap().unwrap();
        assert!(first.oversized && first.terminated);
        assert_eq!(first.len, 1001);
        assert!(buf.is_empty());
        let second = next_line(&mut reader, &mut buf, 100).unwrap().unwrap();
        assert!(!second.oversized && second.terminated);
        assert_eq!(buf, b"short\n");
        let third = next_line(&mut reader, &mut buf, 100).unwrap().unwrap();
        assert!(!third.terminated);
        assert_eq!(buf, b"unterminated");
        assert!(next_line(&mut reader, &mut buf, 100).unwrap().is_none());
    }
}
