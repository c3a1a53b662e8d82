//! Rebuilding the index at open: one sequential scan of `ltm_entries`,
//! decoded into batches on this thread and put into the index on another.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use rusqlite::Connection;

use super::sqlite_error;
use crate::ann::AnnOptions;
use crate::error::MemoryError;
use crate::graph_file::graphs_dir;
use crate::index::{Index, IndexLoader, LoadBatch, LoadKey, LoadedRow};
use crate::record::Layer;
use jarvis_common::Timestamp;

const SELECT_ALL: &str = "SELECT id, user_id, agent_id, layer, kind, source, text, metadata, created_at, \
                          rehearsal, embedding, embedder FROM ltm_entries";

/// Reads a row of [`SELECT_ALL`] into `batch` (its key into `keys` and,
/// when new, `batch.new_keys`); `Err` names what is wrong with the row,
/// which is then left out. Borrows what it can from the row: only the id,
/// the source, the text and non-null metadata are copied.
fn load_row(row: &rusqlite::Row<'_>, keys: &mut Vec<LoadKey>, batch: &mut LoadBatch) -> Result<(), String> {
    let text_at = |i: usize| -> Result<&str, String> {
        row.get_ref(i)
            .map_err(|e| e.to_string())?
            .as_str()
            .map_err(|e| format!("column {i}: {e}"))
    };
    let id = text_at(0)?;
    let layer_name = text_at(3)?;
    let layer =
        Layer::parse(layer_name).ok_or_else(|| format!("row {id} has unknown layer {layer_name:?}"))?;
    let metadata: Box<str> = match row
        .get_ref(7)
        .map_err(|e| e.to_string())?
        .as_str_or_null()
        .map_err(|e| e.to_string())?
    {
        None | Some("") | Some("null") => "null".into(),
        Some(text) => {
            serde_json::from_str::<serde::de::IgnoredAny>(text)
                .map_err(|e| format!("row {id} has damaged metadata: {e}"))?;
            text.into()
        }
    };
    let created_at: i64 = row.get(8).map_err(|e| e.to_string())?;
    let rehearsal: i64 = row.get(9).map_err(|e| e.to_string())?;
    let vector = row
        .get_ref(10)
        .map_err(|e| e.to_string())?
        .as_blob_or_null()
        .map_err(|e| e.to_string())?
        .unwrap_or_default();
    if !vector.len().is_multiple_of(4) {
        return Err(format!("row {id} has a damaged vector"));
    }
    let dims = vector.len() / 4;
    let embedder = if dims == 0 { "" } else { text_at(11)? };
    let (user, agent_id, kind) = (text_at(1)?, text_at(2)?, text_at(4)?);
    let (source, text) = (text_at(5)?, text_at(6)?);
    let same = |k: &LoadKey| {
        k.dims == dims
            && k.layer == layer
            && k.user == user
            && k.agent_id == agent_id
            && k.kind == kind
            && k.embedder == embedder
    };
    let key = match keys.iter().rposition(same) {
        Some(k) => k,
        None => {
            let key = LoadKey {
                user: user.to_owned(),
                agent_id: agent_id.to_owned(),
                layer,
                kind: kind.to_owned(),
                embedder: embedder.to_owned(),
                dims,
            };
            keys.push(key.clone());
            batch.new_keys.push(key);
            keys.len() - 1
        }
    };
    let start = batch.vectors.len();
    batch.vectors.extend(
        vector
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
    );
    batch.rows.push(LoadedRow {
        id: Arc::from(id),
        key,
        source: source.to_owned(),
        text: text.to_owned(),
        terms: crate::lexical::terms(text),
        metadata,
        created_at: Timestamp::from_millis(created_at),
        rehearsal: u32::try_from(rehearsal.max(0)).unwrap_or(u32::MAX),
        vector: start,
    });
    Ok(())
}

/// Records handed from the scan to the index builder at a time.
const LOAD_BATCH: usize = 512;

/// Bytes of the file mapped into memory while the index is rebuilt (reads
/// without a system call per page); unmapped again after the load.
const LOAD_MMAP_BYTES: i64 = 1 << 34;

/// Reads every record into a new index; answers it and the rows skipped.
///
/// Two threads share the work: this one steps through the table in one
/// sequential scan (the file mapped into memory) and decodes rows into
/// batches, a second one puts them into the index, so the two overlap.
pub(super) fn load(path: &Path, conn: &Connection, ann: AnnOptions) -> Result<(Index, usize), MemoryError> {
    let err = |e| sqlite_error("read the memories of", path, e);
    let estimate: i64 = conn
        .query_row("SELECT coalesce(max(rowid), 0) FROM ltm_entries", [], |r| {
            r.get(0)
        })
        .map_err(err)?;
    conn.pragma_update(None, "mmap_size", LOAD_MMAP_BYTES)
        .map_err(err)?;
    let (batches, received) = std::sync::mpsc::sync_channel::<LoadBatch>(16);
    let graphs = graphs_dir(path);
    let loaded = std::thread::scope(|s| {
        let builder = s.spawn(move || {
            let mut loader =
                IndexLoader::with_capacity(usize::try_from(estimate).unwrap_or(0)).with_graphs(&graphs);
            for batch in received {
                loader.add(batch);
            }
            loader.finish(ann)
        });
        let started = Instant::now();
        let scanned = scan(path, conn, |batch| batches.send(batch).is_ok());
        let scan_took = started.elapsed();
        drop(batches);
        let joined = builder.join();
        tracing::debug!(
            scan_ms = scan_took.as_secs_f64() * 1e3,
            index_ms = started.elapsed().as_secs_f64() * 1e3,
            "memory store (sqlite): index rebuilt"
        );
        match joined {
            Ok(index) => scanned.map(|skipped| (index, skipped)),
            Err(_) => Err(MemoryError::Sqlite {
                op: "rebuild the index of",
                path: path.to_owned(),
                source: "the index builder failed".into(),
            }),
        }
    });
    conn.pragma_update(None, "mmap_size", 0).map_err(err)?;
    loaded
}

/// Steps through `ltm_entries` and hands the records to `deliver` in
/// batches (stopping when it answers false); answers the rows skipped.
fn scan(
    path: &Path,
    conn: &Connection,
    mut deliver: impl FnMut(LoadBatch) -> bool,
) -> Result<usize, MemoryError> {
    let err = |e| sqlite_error("read the memories of", path, e);
    let mut skipped = 0;
    let mut stmt = conn.prepare(SELECT_ALL).map_err(err)?;
    let mut rows = stmt.query([]).map_err(err)?;
    let mut keys = Vec::new();
    let mut batch = LoadBatch::default();
    while let Some(row) = rows.next().map_err(err)? {
        if let Err(reason) = load_row(row, &mut keys, &mut batch) {
            skipped += 1;
            tracing::warn!(path = %path.display(), "memory store (sqlite): skipped a damaged row: {reason}");
        }
        if batch.rows.len() == LOAD_BATCH && !deliver(std::mem::take(&mut batch)) {
            return Ok(skipped);
        }
    }
    if !batch.rows.is_empty() || !batch.new_keys.is_empty() {
        deliver(batch);
    }
    Ok(skipped)
}
