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

mod lines;
mod listing;
mod recovery;
mod tail;
mod write;

use async_trait::async_trait;
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::memory::sort_newest_first;
use super::wal::{Position, Wal};
use super::{
    Durability, EntryBody, NewSession, SessionEntry, SessionError, SessionId, SessionMeta, SessionStore,
    fork_meta, normalize_title, now,
};
use jarvis_common::{Clock, HomeLock, SystemClock};
use lines::read_range;
use listing::{peek, session_ids};
use recovery::{load, migrate_job_sessions, replay};
use tail::Tail;
use write::copy_prefix;

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

    fn log_path(&self, id: &SessionId) -> PathBuf {
        self.inner.dir.join(format!("{id}{LOG_EXT}"))
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
