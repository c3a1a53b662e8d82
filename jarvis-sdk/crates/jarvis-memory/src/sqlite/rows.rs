//! How a record and a working memory are written as rows: the upserts and
//! the vector's bytes.

use rusqlite::{Transaction, params};

use super::SqliteMemoryStore;
use crate::error::MemoryError;
use crate::record::MemoryRecord;
use crate::working::WorkingMemory;

const UPSERT: &str = "INSERT INTO ltm_entries \
      (id, user_id, agent_id, layer, kind, source, text, metadata, created_at, rehearsal, embedding, embedder) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) \
    ON CONFLICT (id) DO UPDATE SET user_id = excluded.user_id, agent_id = excluded.agent_id, \
      layer = excluded.layer, kind = excluded.kind, source = excluded.source, text = excluded.text, \
      metadata = excluded.metadata, created_at = excluded.created_at, rehearsal = excluded.rehearsal, \
      embedding = excluded.embedding, embedder = excluded.embedder";

/// `vector` as little-endian bytes (`None` for an empty one).
pub(super) fn vector_bytes(vector: &[f32]) -> Option<Vec<u8>> {
    if vector.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(vector.len() * 4);
    for value in vector {
        out.extend_from_slice(&value.to_le_bytes());
    }
    Some(out)
}
pub(super) fn upsert(tx: &Transaction<'_>, record: &MemoryRecord) -> rusqlite::Result<()> {
    let metadata = record.metadata.to_string();
    let rehearsal = i64::from(record.rehearsal);
    tx.prepare_cached(UPSERT)?.execute(params![
        record.id,
        record.user,
        record.agent_id,
        record.layer.as_str(),
        record.kind,
        record.source,
        record.text,
        metadata,
        record.created_at.as_millis(),
        rehearsal,
        vector_bytes(&record.embedding),
        record.embedder,
    ])?;
    Ok(())
}
/// A working memory and its JSON body, ready to write.
pub(super) struct SavedWorking {
    pub(super) memory: WorkingMemory,
    body: String,
}

impl SqliteMemoryStore {
    pub(super) fn encode_working(&self, memory: &WorkingMemory) -> Result<SavedWorking, MemoryError> {
        let body = serde_json::to_string(memory).map_err(|e| MemoryError::Sqlite {
            op: "encode working memory for",
            path: self.inner.path.clone(),
            source: Box::new(e),
        })?;
        Ok(SavedWorking {
            memory: memory.clone(),
            body,
        })
    }
}

pub(super) fn save_working(tx: &Transaction<'_>, saved: &SavedWorking) -> rusqlite::Result<()> {
    let memory = &saved.memory;
    tx.prepare_cached(
        "INSERT INTO working_memory (session_id, user_id, agent_id, body) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT (session_id) DO UPDATE SET user_id = excluded.user_id, \
         agent_id = excluded.agent_id, body = excluded.body, updated_at = excluded.updated_at",
    )?
    .execute(params![
        memory.session_id,
        memory.user,
        memory.agent_id,
        saved.body
    ])?;
    Ok(())
}
