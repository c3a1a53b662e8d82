//! The write path: a session's metadata file, its append handle, a batch
//! appended in one write (and to the write-ahead log), and a fork's copy.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::Arc;

use super::{JsonlSessionStore, META_EXT, MetaFile, Session, State, blocking};
use crate::session::{
    Durability, ENTRY_SCHEMA_VERSION, EntryBody, SessionEntry, SessionError, SessionId, SessionMeta,
};
use jarvis_common::{Timestamp, write_atomic};

impl JsonlSessionStore {
    /// Writes the metadata file of `meta`; the caller holds the gate.
    pub(super) async fn write_meta(&self, meta: &SessionMeta) -> Result<(), SessionError> {
        let path = self.inner.dir.join(format!("{}{META_EXT}", meta.id));
        let mut bytes = serde_json::to_vec_pretty(&MetaFile {
            v: ENTRY_SCHEMA_VERSION,
            meta,
        })
        .map_err(SessionError::Encode)?;
        bytes.push(b'\n');
        blocking(move || write_atomic(&path, &bytes).map_err(SessionError::io("write", path))).await?
    }

    /// The session, with its append handle open when `open_file`.
    pub(super) async fn writable(
        &self,
        id: &SessionId,
        open_file: bool,
    ) -> Result<Arc<Session>, SessionError> {
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
    pub(super) fn append_locked(
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
}

/// Copies the first `len` bytes of `from` to a new file `to`, atomically.
pub(super) fn copy_prefix(from: &Path, to: &Path, len: u64) -> Result<(), SessionError> {
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
