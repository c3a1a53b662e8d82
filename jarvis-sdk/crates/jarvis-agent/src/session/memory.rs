//! [`MemorySessionStore`]: sessions kept in memory only; for tests,
//! benchmarks and embedders that keep no history.

use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::entry::window_start;
use super::{
    ENTRY_SCHEMA_VERSION, EntryBody, NewSession, SessionEntry, SessionError, SessionId, SessionMeta,
    SessionStore, fork_meta, normalize_title, now,
};
use jarvis_common::{Clock, SystemClock};

#[derive(Debug)]
struct Session {
    meta: SessionMeta,
    entries: Vec<SessionEntry>,
    /// Indexes of the entries that begin turns.
    turn_starts: Vec<usize>,
}

impl Session {
    fn recent(&self, turns: usize) -> Vec<SessionEntry> {
        let start = match turns {
            0 => self.entries.len(),
            n if n > self.turn_starts.len() => 0,
            n => self.turn_starts[self.turn_starts.len() - n],
        };
        debug_assert_eq!(start, window_start(&self.entries, turns));
        self.entries[start..].to_vec()
    }
}

/// Sessions in a map in memory. Nothing survives the process.
#[derive(Debug, Clone)]
pub struct MemorySessionStore {
    sessions: Arc<Mutex<HashMap<SessionId, Session>>>,
    clock: Arc<dyn Clock>,
}

impl Default for MemorySessionStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemorySessionStore {
    /// An empty store on the system clock.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    /// An empty store whose timestamps come from `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self {
            sessions: Arc::default(),
            clock,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<SessionId, Session>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl SessionStore for MemorySessionStore {
    async fn create(&self, new: NewSession) -> Result<SessionMeta, SessionError> {
        let meta = new.into_meta(now(&*self.clock))?;
        let mut sessions = self.lock();
        if sessions.contains_key(&meta.id) {
            return Err(SessionError::AlreadyExists {
                id: meta.id.to_string(),
            });
        }
        sessions.insert(
            meta.id.clone(),
            Session {
                meta: meta.clone(),
                entries: Vec::new(),
                turn_starts: Vec::new(),
            },
        );
        Ok(meta)
    }

    async fn get(&self, id: &SessionId) -> Result<Option<SessionMeta>, SessionError> {
        Ok(self.lock().get(id).map(|s| s.meta.clone()))
    }

    async fn append(&self, id: &SessionId, entries: Vec<EntryBody>) -> Result<u64, SessionError> {
        let ts = now(&*self.clock);
        let mut sessions = self.lock();
        let session = sessions.get_mut(id).ok_or_else(|| SessionError::not_found(id))?;
        let mut seq = session.entries.last().map_or(0, |e| e.seq);
        for body in entries {
            seq += 1;
            if body.starts_turn() {
                session.turn_starts.push(session.entries.len());
            }
            session.entries.push(SessionEntry {
                v: ENTRY_SCHEMA_VERSION,
                seq,
                ts,
                body,
            });
            session.meta.updated_at = session.meta.updated_at.max(ts);
        }
        Ok(seq)
    }

    async fn recent(&self, id: &SessionId, turns: usize) -> Result<Vec<SessionEntry>, SessionError> {
        let sessions = self.lock();
        let session = sessions.get(id).ok_or_else(|| SessionError::not_found(id))?;
        Ok(session.recent(turns))
    }

    async fn entries(&self, id: &SessionId) -> Result<Vec<SessionEntry>, SessionError> {
        let sessions = self.lock();
        let session = sessions.get(id).ok_or_else(|| SessionError::not_found(id))?;
        Ok(session.entries.clone())
    }

    async fn list(&self) -> Result<Vec<SessionMeta>, SessionError> {
        let mut metas: Vec<SessionMeta> = self.lock().values().map(|s| s.meta.clone()).collect();
        sort_newest_first(&mut metas);
        Ok(metas)
    }

    async fn fork(&self, parent: &SessionId, child: SessionId) -> Result<SessionMeta, SessionError> {
        let ts = now(&*self.clock);
        let mut sessions = self.lock();
        if sessions.contains_key(&child) {
            return Err(SessionError::AlreadyExists {
                id: child.to_string(),
            });
        }
        let source = sessions
            .get(parent)
            .ok_or_else(|| SessionError::not_found(parent))?;
        let meta = fork_meta(&source.meta, child, ts);
        let copy = Session {
            meta: meta.clone(),
            entries: source.entries.clone(),
            turn_starts: source.turn_starts.clone(),
        };
        sessions.insert(meta.id.clone(), copy);
        Ok(meta)
    }

    async fn set_title(&self, id: &SessionId, title: Option<String>) -> Result<SessionMeta, SessionError> {
        let title = normalize_title(title)?;
        let ts = now(&*self.clock);
        let mut sessions = self.lock();
        let session = sessions.get_mut(id).ok_or_else(|| SessionError::not_found(id))?;
        session.meta.title = title;
        session.meta.updated_at = session.meta.updated_at.max(ts);
        Ok(session.meta.clone())
    }
}

/// Most recently updated first, ties by id: the order of every store's `list`.
pub(crate) fn sort_newest_first(metas: &mut [SessionMeta]) {
    metas.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then_with(|| a.id.cmp(&b.id)));
}
