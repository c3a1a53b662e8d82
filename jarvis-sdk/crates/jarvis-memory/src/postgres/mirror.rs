//! The store's mirror of the tables in the in-process index: the rows
//! fetched since the last `seq` seen, and the store's own changes put in at once.

use std::collections::BTreeSet;
use std::sync::MutexGuard;
use std::time::SystemTime;
use tokio_postgres::Row;
use tokio_postgres::types::Json;

use super::statements::{REFRESH_PAGE, refresh_statement};
use super::{PostgresMemoryStore, db};
use crate::error::MemoryError;
use crate::index::Index;
use crate::record::{Layer, MemoryRecord};
use jarvis_common::Timestamp;

#[derive(Debug, Default)]
pub(super) struct Mirror {
    pub(super) index: Index,
    /// Every change up to this `seq` is in the index.
    last_seq: i64,
    /// This store's own changes past `last_seq`, already in the index
    /// (see [`PostgresMemoryStore::applied`]); a gap before the first of
    /// them is a change the index lacks.
    pub(super) own: BTreeSet<i64>,
    /// The notices' generation when the last refresh began.
    pub(super) heard_at: u64,
}

impl Mirror {
    /// Moves `last_seq` over the own changes that follow it.
    fn advance(&mut self) {
        while let Some(&first) = self.own.first() {
            if first > self.last_seq + 1 {
                break;
            }
            self.own.pop_first();
            self.last_seq = self.last_seq.max(first);
        }
    }
}

impl PostgresMemoryStore {
    /// Puts rehearsals written by this store (ids, `seq`s and counts, as
    /// [`touch_rows`] answers them) into the mirror.
    pub(super) fn rehearsed(mirror: &mut Mirror, ids: &[String], seqs: &[i64], counts: &[i32]) {
        for ((id, &seq), &count) in ids.iter().zip(seqs).zip(counts) {
            Self::applied(mirror, seq, |index| {
                index.set_rehearsal(id, u32::try_from(count).unwrap_or(0));
            });
        }
    }

    pub(super) fn mirror(&self) -> MutexGuard<'_, Mirror> {
        self.mirror.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Puts one of this store's own changes, stamped `seq`, into the
    /// mirror at once, unless the mirror already holds everything up to
    /// `seq` (a refresh brought it, or what replaced it). The next refresh
    /// reads it again only when a change the mirror lacks comes before it.
    pub(super) fn applied(mirror: &mut Mirror, seq: i64, apply: impl FnOnce(&mut Index)) {
        if seq <= mirror.last_seq {
            return;
        }
        apply(&mut mirror.index);
        mirror.own.insert(seq);
        mirror.advance();
    }

    /// Fetches the rows written since the last refresh into the mirror, in
    /// pages of [`REFRESH_PAGE`] rows of each table, each side in `seq`
    /// order from the last row seen, one round trip a page. The statement
    /// is prepared once per connection, and its plan walks the `seq` index
    /// whatever the table held when it was made ([`refresh_statement`]).
    pub(super) async fn refresh(&self) -> Result<(), MemoryError> {
        self.settle().await;
        let _one_at_a_time = self.refreshing.lock().await;
        // Taken before the read: a notice that comes during it moves the
        // generation past this, and the next catch-up reads again.
        let generation = self.listener.notices().generation();
        let client = self.client().await?;
        let statement = client
            .prepare_cached(refresh_statement())
            .await
            .map_err(db("read new memories"))?;
        loop {
            let since = self.mirror().last_seq;
            let rows = client
                .query(&statement, &[&since, &REFRESH_PAGE, &i64::MAX])
                .await
                .map_err(db("read new memories"))?;
            if rows.is_empty() {
                let mut mirror = self.mirror();
                mirror.heard_at = generation;
                let last = mirror.last_seq;
                mirror.own.retain(|&seq| seq > last);
                mirror.advance();
                return Ok(());
            }
            // A side that filled its page may have more rows past its last
            // one: this page is whole up to the lower of those.
            let seq_of = |row: &Row| row.try_get::<_, i64>(12).unwrap_or(i64::MAX);
            let gone_of = |row: &Row| row.try_get::<_, bool>(13).unwrap_or(false);
            let mut cut: Option<i64> = None;
            for gone in [false, true] {
                let side: Vec<i64> = rows.iter().filter(|r| gone_of(r) == gone).map(seq_of).collect();
                if side.len() as i64 >= REFRESH_PAGE {
                    let last = side.iter().copied().max().unwrap_or(i64::MAX);
                    cut = Some(cut.map_or(last, |c| c.min(last)));
                }
            }
            let mut mirror = self.mirror();
            for row in rows.iter().filter(|r| cut.is_none_or(|c| seq_of(r) <= c)) {
                if gone_of(row) {
                    if let (Ok(id), Ok(seq)) = (row.try_get::<_, String>(0), row.try_get::<_, i64>(12)) {
                        mirror.index.remove(&id);
                        mirror.last_seq = mirror.last_seq.max(seq);
                    }
                    continue;
                }
                if row.try_get::<_, bool>(14).unwrap_or(false) {
                    if let (Ok(id), Ok(rehearsal), Ok(seq)) = (
                        row.try_get::<_, String>(0),
                        row.try_get::<_, i32>(9),
                        row.try_get::<_, i64>(12),
                    ) {
                        mirror
                            .index
                            .set_rehearsal(&id, u32::try_from(rehearsal).unwrap_or(0));
                        mirror.last_seq = mirror.last_seq.max(seq);
                    }
                    continue;
                }
                match record_from_row(row) {
                    Ok((record, seq)) => {
                        mirror.index.upsert(record);
                        mirror.last_seq = mirror.last_seq.max(seq);
                    }
                    Err(e) => {
                        if let Ok(seq) = row.try_get::<_, i64>(12) {
                            mirror.last_seq = mirror.last_seq.max(seq);
                        }
                        tracing::warn!("memory store (postgres): skipped a damaged row: {e}");
                    }
                }
            }
            if let Some(c) = cut {
                mirror.last_seq = mirror.last_seq.max(c);
            }
            let last = mirror.last_seq;
            mirror.own.retain(|&seq| seq > last);
            mirror.advance();
            if cut.is_none() {
                mirror.heard_at = generation;
                return Ok(());
            }
        }
    }
}

/// A record and its `seq` from a row of [`refresh_statement`].
fn record_from_row(row: &Row) -> Result<(MemoryRecord, i64), String> {
    let get = |e: tokio_postgres::Error| e.to_string();
    let id: String = row.try_get(0).map_err(get)?;
    let layer: String = row.try_get(3).map_err(get)?;
    let layer = Layer::parse(&layer).ok_or_else(|| format!("row {id} has unknown layer {layer:?}"))?;
    let Json(metadata): Json<serde_json::Value> = row.try_get(7).map_err(get)?;
    let created_at: SystemTime = row.try_get(8).map_err(get)?;
    let rehearsal: i32 = row.try_get(9).map_err(get)?;
    let embedding: Option<Vec<f32>> = row.try_get(10).map_err(get)?;
    let embedding = embedding.unwrap_or_default();
    let embedder: String = row.try_get(11).map_err(get)?;
    let seq: i64 = row.try_get(12).map_err(get)?;
    Ok((
        MemoryRecord {
            user: row.try_get(1).map_err(get)?,
            agent_id: row.try_get(2).map_err(get)?,
            layer,
            kind: row.try_get(4).map_err(get)?,
            source: row.try_get(5).map_err(get)?,
            text: row.try_get(6).map_err(get)?,
            metadata,
            created_at: Timestamp::from_system_time(created_at),
            rehearsal: u32::try_from(rehearsal).unwrap_or(0),
            embedder: if embedding.is_empty() {
                String::new()
            } else {
                embedder
            },
            embedding,
            id,
        },
        seq,
    ))
}
