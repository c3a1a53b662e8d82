//! The in-process record index both stores search: records grouped into
//! partitions, each partition's embeddings in chunks of `f32` tiles.
//!
//! **Partitions.** Records with the same user, agent, layer, kind and
//! embedding space (embedder name and length) share a partition, so a
//! search only touches the partitions its filter allows: a recall of one
//! agent's episodes never reads the user profile or another agent's rows.
//!
//! **Layout.** A partition's vectors are stored in tiles of 16 rows; inside
//! a tile, dimension-major: the 16 values of dimension 0, then the 16 of
//! dimension 1, and so on. A search walks the tiles and, for each
//! dimension where the *query* is non-zero, adds that dimension's 16 values
//! times the query's value to 16 running scores. The offline hash
//! embedder's query vectors are sparse (a short query touches a few dozen
//! of 512 dimensions), so a search reads only those dimensions' cache lines;
//! dense queries read everything, as a row-major scan would. The scores are
//! exact `f32` dot products (cosine, since vectors have unit length).
//!
//! Once a partition walks a graph (below), its tiles are rewritten
//! row-major, a few chunks per write to the index ([`SETTLE_CHUNKS`], the
//! written partition's first, then those only read), and new chunks are
//! born so: a graph proposes a few dozen scattered candidates, each
//! scored alone, and a whole row is `dims / 16` neighbouring cache lines
//! where dimension-major it costs one line per dimension the query uses
//! (about 150 of 512 for the hash embedder, all of them for a dense one).
//! Not before the graph is ready: until then the partition is scanned, and
//! a row-major scan with a sparse query reads every line of every row
//! (3–8× slower at 5k–60k records). Both layouts add up the same products
//! in the same order, so a row scores the same bits either way, and each
//! chunk records its own layout.
//!
//! The tiles are kept in chunks of [`CHUNK_ROWS`](tiles::CHUNK_ROWS) rows, each behind an
//! `Arc`, so a snapshot of a partition's vectors (for building its graph in
//! the background) is a handful of pointer copies; a write to a shared
//! chunk copies that chunk first.
//!
//! **Words too.** Each partition also keeps an inverted index of its
//! records' terms (`lexical.rs`), and a search with terms answers the best
//! records by BM25 beside the most similar ones, each hit with both
//! scores, so recall can fuse the two rankings. Records without a vector
//! (the embedder did not answer) are found by their words alone.
//!
//! **Exact below a threshold, a graph above.** A partition smaller than
//! [`AnnOptions::min_rows`] is scanned exactly: with this layout that is as
//! fast as a graph walk up to about 5,000 records, and no approximate
//! index can miss a memory. Larger partitions get an HNSW graph (see
//! `ann.rs`), built in the background while the scan answers. Either way a
//! hit's similarity is the exact dot product, and ranking is the service's.
//!
//! **Files.** `index/tiles.rs`: the vectors and their dot products;
//! `index/partition.rs`: a partition's rows, words and graph;
//! `index/search.rs`: the searches; `index/loader.rs`: the index rebuilt
//! from a database at start.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use super::ann::AnnOptions;
use super::record::{MemoryFilter, MemoryRecord};

mod loader;
mod partition;
mod search;
#[cfg(test)]
mod tests;
mod tiles;

// The SQLite store rebuilds its index with these at open.
#[cfg_attr(not(feature = "sqlite"), allow(unused_imports))]
pub(crate) use loader::{IndexLoader, LoadBatch, LoadKey, LoadedRow};
use partition::{Metadata, PartKey, Partition, Row};

/// Chunks of partitions with a graph that one write rewrites row-major
/// (see [`Tiles::make_row_major`](tiles::Tiles::make_row_major) and
/// `Index::settle`): about 8 MB at 512 dimensions, a few milliseconds, so
/// a large partition is rewritten over the next writes rather than in one
/// long pause.
const SETTLE_CHUNKS: usize = 4;

/// Records by partition with a search over them. See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Index {
    partitions: Vec<Partition>,
    by_key: HashMap<PartKey, usize>,
    by_id: HashMap<Arc<str>, (usize, usize)>,
    /// Interned strings for partition keys.
    names: HashMap<String, Arc<str>>,
    /// An episode's id → the id of the episode after it in its session
    /// (the rows whose [`META_PREV`](crate::record::META_PREV) names it).
    next_of: HashMap<Arc<str>, Arc<str>>,
    /// The key the next written row gets (see [`Row::key`]).
    next_key: u64,
    ann: AnnOptions,
    /// Where partitions keep their graphs between runs (`graph_file.rs`),
    /// for a store with a file.
    graphs: Option<Arc<Path>>,
}

impl Index {
    /// An empty index whose large partitions get graphs as `ann` says.
    pub(crate) fn with_ann(ann: AnnOptions) -> Self {
        Self {
            ann,
            ..Self::default()
        }
    }

    /// Changes when partitions get graphs (takes effect at each
    /// partition's next operation; graphs already built stay).
    pub(crate) fn set_ann(&mut self, ann: AnnOptions) {
        self.ann = ann;
        self.poll_all();
    }

    /// Lets every partition's graph catch up: installs finished builds and
    /// starts builds for partitions at the threshold.
    pub(crate) fn poll_all(&self) {
        for partition in &self.partitions {
            partition.poll(self.next_key, &self.ann);
        }
    }

    /// Blocks until every graph being built is ready and its partition's
    /// vectors are all row-major, as writes leave them in time (for tests
    /// and benchmarks; the store is locked meanwhile).
    pub(crate) fn wait_for_graphs(&mut self) {
        let ann = self.ann;
        for partition in &mut self.partitions {
            partition.wait(self.next_key, &ann);
            partition.settle(usize::MAX, &ann);
        }
    }

    /// Writes every graph that changed since it was last saved to its
    /// partition's file (a clean close of a store with a file), after the
    /// work under way; a graph still being built is not waited for.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) fn save_graphs(&self) {
        for partition in &self.partitions {
            partition.save_graph();
        }
    }

    /// Spends [`SETTLE_CHUNKS`] chunk rewrites after a write to partition
    /// `part`: on it first, then on any other partition whose graph is
    /// ready, so one that is only read (a profile after a restart) is
    /// rewritten by the writes of the turns that read it.
    fn settle(&mut self, part: usize) {
        let ann = self.ann;
        let mut left = SETTLE_CHUNKS - self.partitions[part].settle(SETTLE_CHUNKS, &ann);
        for partition in &mut self.partitions {
            if left == 0 {
                break;
            }
            left -= partition.settle(left, &ann);
        }
    }

    /// How many records are searched through a graph, and the graphs'
    /// memory in bytes (graphs whose build has finished are taken in
    /// first, as the partition's next search would).
    pub(crate) fn graph_stats(&self) -> (usize, usize) {
        self.poll_all();
        self.partitions
            .iter()
            .filter(|p| p.ann.is_ready())
            .fold((0, 0), |(rows, bytes), p| {
                (rows + p.rows.len(), bytes + p.ann.memory_bytes())
            })
    }

    fn take_key(&mut self) -> u64 {
        let key = self.next_key;
        self.next_key += 1;
        key
    }
    /// How many records it holds.
    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }

    fn intern(&mut self, s: &str) -> Arc<str> {
        if let Some(a) = self.names.get(s) {
            return a.clone();
        }
        let a: Arc<str> = Arc::from(s);
        self.names.insert(s.to_owned(), a.clone());
        a
    }

    fn key_of(&mut self, record: &MemoryRecord) -> PartKey {
        let (embedder, dims) = if record.embedding.is_empty() {
            ("", 0)
        } else {
            (record.embedder.as_str(), record.embedding.len())
        };
        PartKey {
            user: self.intern(&record.user),
            agent_id: self.intern(&record.agent_id),
            layer: record.layer,
            kind: self.intern(&record.kind),
            embedder: self.intern(embedder),
            dims,
        }
    }

    /// Inserts `record`, or replaces the record with its id.
    pub(crate) fn upsert(&mut self, mut record: MemoryRecord) {
        let metadata = Metadata::Value(std::mem::take(&mut record.metadata));
        self.upsert_with(record, metadata);
    }

    fn upsert_with(&mut self, record: MemoryRecord, metadata: Metadata) {
        let key = self.key_of(&record);
        let links = metadata.links();
        let row = Row {
            id: self
                .by_id
                .get_key_value(record.id.as_str())
                .map(|(k, _)| k.clone())
                .unwrap_or_else(|| Arc::from(record.id.as_str())),
            key: self.take_key(),
            source: record.source,
            text: record.text,
            metadata,
            created_at: record.created_at,
            rehearsal: record.rehearsal,
            links,
        };
        if let Some(&(part, index)) = self.by_id.get(&row.id) {
            if self.partitions[part].key == key {
                let old = self.partitions[part].rows[index].prev().cloned();
                if old.as_ref() != row.prev() {
                    self.unlink(old.as_ref(), &row.id);
                    self.link(&row);
                }
                self.partitions[part].replace(index, row, &record.embedding);
                self.partitions[part].poll(self.next_key, &self.ann);
                self.settle(part);
                return;
            }
            // Moving to another partition (re-embedded): the episode after
            // it still follows it.
            let next = self.next_of.get(&row.id).cloned();
            self.remove_at(part, index);
            if let Some(next) = next {
                self.next_of.insert(row.id.clone(), next);
            }
        }
        let part = match self.by_key.get(&key) {
            Some(&p) => p,
            None => {
                self.partitions
                    .push(Partition::new(key.clone(), self.graphs.as_deref()));
                self.by_key.insert(key, self.partitions.len() - 1);
                self.partitions.len() - 1
            }
        };
        let id = row.id.clone();
        self.link(&row);
        let index = self.partitions[part].push(row, &record.embedding);
        self.by_id.insert(id, (part, index));
        self.partitions[part].poll(self.next_key, &self.ann);
        self.settle(part);
    }

    /// Notes `row` as the episode after the one it names as before it.
    fn link(&mut self, row: &Row) {
        if let Some(prev) = row.prev() {
            self.next_of.insert(prev.clone(), row.id.clone());
        }
    }

    /// Forgets that `id` follows `prev`.
    fn unlink(&mut self, prev: Option<&Arc<str>>, id: &Arc<str>) {
        if let Some(prev) = prev
            && self.next_of.get(prev) == Some(id)
        {
            self.next_of.remove(prev);
        }
    }

    fn remove_at(&mut self, part: usize, index: usize) {
        let id = self.partitions[part].rows[index].id.clone();
        let prev = self.partitions[part].rows[index].prev().cloned();
        self.unlink(prev.as_ref(), &id);
        self.next_of.remove(&id);
        if let Some(moved) = self.partitions[part].swap_remove(index) {
            self.by_id.insert(moved, (part, index));
        }
        self.by_id.remove(&id);
        self.partitions[part].poll(self.next_key, &self.ann);
        self.settle(part);
    }

    /// Removes the record with `id`; false when there is none.
    pub(crate) fn remove(&mut self, id: &str) -> bool {
        match self.by_id.get(id) {
            Some(&(part, row)) => {
                self.remove_at(part, row);
                true
            }
            None => false,
        }
    }

    /// Sets the rehearsal count of the record with `id`; false when there
    /// is none.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn set_rehearsal(&mut self, id: &str, rehearsal: u32) -> bool {
        match self.by_id.get(id) {
            Some(&(part, row)) => {
                self.partitions[part].rows[row].rehearsal = rehearsal;
                true
            }
            None => false,
        }
    }

    /// Whether it holds a record with `id`.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) fn contains(&self, id: &str) -> bool {
        self.by_id.contains_key(id)
    }

    /// The record with `id`.
    pub(crate) fn get(&self, id: &str) -> Option<MemoryRecord> {
        let &(part, row) = self.by_id.get(id)?;
        Some(self.partitions[part].record(row))
    }

    /// The record with `id`, its embedding left empty.
    pub(crate) fn get_text(&self, id: &str) -> Option<MemoryRecord> {
        let &(part, row) = self.by_id.get(id)?;
        Some(self.partitions[part].record_text(row))
    }

    /// Adds one rehearsal to the record with `id`; false when there is none.
    pub(crate) fn touch(&mut self, id: &str) -> bool {
        match self.by_id.get(id) {
            Some(&(part, row)) => {
                let r = &mut self.partitions[part].rows[row];
                r.rehearsal = r.rehearsal.saturating_add(1);
                true
            }
            None => false,
        }
    }

    fn partition_matches(filter: &MemoryFilter, key: &PartKey) -> bool {
        filter.matches_scope(&key.user, &key.agent_id, key.layer, &key.kind)
    }

    /// The records matching `filter`, newest first (ties by id).
    pub(crate) fn list(&self, filter: &MemoryFilter) -> Vec<MemoryRecord> {
        let mut found: Vec<(usize, usize)> = Vec::new();
        for (p, partition) in self.partitions.iter().enumerate() {
            if !Self::partition_matches(filter, &partition.key) {
                continue;
            }
            for (r, row) in partition.rows.iter().enumerate() {
                if !filter.exclude_ids.iter().any(|x| **x == *row.id)
                    && filter.in_period(row.created_at, row.stated())
                {
                    found.push((p, r));
                }
            }
        }
        found.sort_by(|a, b| {
            let (ra, rb) = (&self.partitions[a.0].rows[a.1], &self.partitions[b.0].rows[b.1]);
            rb.created_at.cmp(&ra.created_at).then_with(|| ra.id.cmp(&rb.id))
        });
        if let Some(limit) = filter.limit {
            found.truncate(limit);
        }
        found
            .into_iter()
            .map(|(p, r)| self.partitions[p].record(r))
            .collect()
    }

    /// Records whose embedding is missing or comes from another embedder
    /// than `embedder`, at most `limit`.
    pub(crate) fn stale(&self, embedder: &str, limit: usize) -> Vec<MemoryRecord> {
        let mut out = Vec::new();
        for partition in &self.partitions {
            if &*partition.key.embedder == embedder {
                continue;
            }
            for r in 0..partition.rows.len() {
                if out.len() >= limit {
                    return out;
                }
                out.push(partition.record(r));
            }
        }
        out
    }
}
