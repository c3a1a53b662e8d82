//! Listing sessions without loading them: their ids from the file names,
//! and each one's metadata from its metadata file and its last line.

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use super::lines::{next_line, parse};
use super::{LOG_EXT, META_EXT};
use crate::session::{LEGACY_AGENT_ID, SessionError, SessionId, SessionKind, SessionMeta};
use jarvis_common::Timestamp;

/// Ids of the sessions in `dir`, from their file names. Other files (the
/// store's temporary files among them) are ignored.
pub(super) fn session_ids(dir: &Path) -> Result<Vec<SessionId>, SessionError> {
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
pub(super) fn peek(dir: &Path, id: &SessionId, limit: usize) -> Result<Option<SessionMeta>, SessionError> {
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
