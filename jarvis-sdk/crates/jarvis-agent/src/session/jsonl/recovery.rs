//! Reading sessions back: loading and repairing one session's files,
//! writing back what the write-ahead log holds at open, and the one-time
//! migration of scheduled jobs' sessions to the `job` kind.

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Seek, SeekFrom, Write};
use std::path::Path;

use super::lines::{next_line, parse};
use super::{JsonlOptions, LOG_EXT, LoadReport, META_EXT, MetaFile, State};
use crate::session::wal::{Record, by_session};
use crate::session::{
    ENTRY_SCHEMA_VERSION, LEGACY_AGENT_ID, SessionEntry, SessionError, SessionId, SessionKind, SessionMeta,
};
use jarvis_common::{Timestamp, write_atomic};

/// Writes back to each history what the write-ahead log holds and the
/// history lacks (entries beyond its last `seq`), and syncs it; answers the
/// sessions it loaded (with what loading them found and repaired).
/// Idempotent.
pub(super) fn replay(
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
pub(super) fn migrate_job_sessions(dir: &Path) -> Result<(), SessionError> {
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

/// Reads, checks and repairs one session's files. `None` when neither exists.
pub(super) fn load(
    dir: &Path,
    id: &SessionId,
    options: &JsonlOptions,
) -> Result<Option<State>, SessionError> {
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
