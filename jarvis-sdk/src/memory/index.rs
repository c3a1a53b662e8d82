//! The in-process record index both stores search: records grouped into
//! partitions, each partition's embeddings in one contiguous `Vec<f32>`.
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
//! Brute force is deliberate: with this layout 100,000 records take a few
//! milliseconds, and no approximate index can miss a memory.
// ponytail: an exact scan rather than an approximate nearest-neighbour
// index; revisit past a few hundred thousand records per user.

use serde_json::Value;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use super::record::{Layer, MemoryFilter, MemoryRecord, SearchHit, SearchQuery};
use crate::common::Timestamp;

/// Rows per tile.
const TILE: usize = 16;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PartKey {
    user: Arc<str>,
    agent_id: Arc<str>,
    layer: Layer,
    kind: Arc<str>,
    embedder: Arc<str>,
    dims: usize,
}

/// A record's metadata: as written, or as JSON text read from a database
/// and parsed only when the record is handed out (most never are).
#[derive(Debug, Clone)]
enum Metadata {
    Value(Value),
    Json(Box<str>),
}

impl Metadata {
    /// Metadata read as JSON text (`null` kept as a value).
    fn from_json(text: Box<str>) -> Self {
        if &*text == "null" {
            Metadata::Value(Value::Null)
        } else {
            Metadata::Json(text)
        }
    }

    fn value(&self) -> Value {
        match self {
            Metadata::Value(v) => v.clone(),
            // Checked to parse when it was loaded.
            Metadata::Json(text) => serde_json::from_str(text).unwrap_or(Value::Null),
        }
    }
}

#[derive(Debug, Clone)]
struct Row {
    id: Arc<str>,
    source: String,
    text: String,
    metadata: Metadata,
    created_at: Timestamp,
    rehearsal: u32,
}

#[derive(Debug)]
struct Partition {
    key: PartKey,
    rows: Vec<Row>,
    /// `ceil(rows / TILE)` tiles of `dims × TILE` values.
    tiles: Vec<f32>,
}

impl Partition {
    fn new(key: PartKey) -> Self {
        Self {
            key,
            rows: Vec::new(),
            tiles: Vec::new(),
        }
    }

    fn write_vector(&mut self, row: usize, vector: &[f32]) {
        let dims = self.key.dims;
        if dims == 0 {
            return;
        }
        let base = (row / TILE) * dims * TILE + row % TILE;
        for (j, value) in vector.iter().enumerate() {
            self.tiles[base + j * TILE] = *value;
        }
    }

    fn vector(&self, row: usize) -> Vec<f32> {
        let dims = self.key.dims;
        let base = (row / TILE) * dims * TILE + row % TILE;
        (0..dims).map(|j| self.tiles[base + j * TILE]).collect()
    }

    fn push(&mut self, row: Row, vector: &[f32]) -> usize {
        let index = self.rows.len();
        if index.is_multiple_of(TILE) {
            let grown = self.tiles.len() + self.key.dims * TILE;
            self.tiles.resize(grown, 0.0);
        }
        self.rows.push(row);
        self.write_vector(index, vector);
        index
    }

    /// Removes `row` by moving the last row into its place; answers the id
    /// of the row that moved, if one did.
    fn swap_remove(&mut self, row: usize) -> Option<Arc<str>> {
        let last = self.rows.len() - 1;
        let moved = if row != last {
            let vector = self.vector(last);
            self.write_vector(row, &vector);
            Some(self.rows[last].id.clone())
        } else {
            None
        };
        self.rows.swap_remove(row);
        let tiles_needed = self.rows.len().div_ceil(TILE);
        self.tiles.truncate(tiles_needed * self.key.dims * TILE);
        moved
    }

    fn record(&self, row: usize) -> MemoryRecord {
        let mut record = self.record_text(row);
        record.embedding = self.vector(row);
        record
    }

    /// The record without its embedding (left empty).
    fn record_text(&self, row: usize) -> MemoryRecord {
        let r = &self.rows[row];
        MemoryRecord {
            id: r.id.to_string(),
            user: self.key.user.to_string(),
            agent_id: self.key.agent_id.to_string(),
            layer: self.key.layer,
            kind: self.key.kind.to_string(),
            source: r.source.clone(),
            text: r.text.clone(),
            metadata: r.metadata.value(),
            created_at: r.created_at,
            rehearsal: r.rehearsal,
            embedding: Vec::new(),
            embedder: self.key.embedder.to_string(),
        }
    }
}

/// A candidate in the top-k heap; ordered so the heap's top is the worst.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    score: f32,
    part: u32,
    row: u32,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: a better score is "less", so the max-heap keeps the worst on top.
        other.score.total_cmp(&self.score)
    }
}

/// Records by partition with a search over them. See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Index {
    partitions: Vec<Partition>,
    by_key: HashMap<PartKey, usize>,
    by_id: HashMap<Arc<str>, (usize, usize)>,
    /// Interned strings for partition keys.
    names: HashMap<String, Arc<str>>,
}

impl Index {
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
        let row = Row {
            id: self
                .by_id
                .get_key_value(record.id.as_str())
                .map(|(k, _)| k.clone())
                .unwrap_or_else(|| Arc::from(record.id.as_str())),
            source: record.source,
            text: record.text,
            metadata,
            created_at: record.created_at,
            rehearsal: record.rehearsal,
        };
        if let Some(&(part, index)) = self.by_id.get(&row.id) {
            if self.partitions[part].key == key {
                let partition = &mut self.partitions[part];
                partition.write_vector(index, &record.embedding);
                partition.rows[index] = row;
                return;
            }
            self.remove_at(part, index);
        }
        let part = match self.by_key.get(&key) {
            Some(&p) => p,
            None => {
                self.partitions.push(Partition::new(key.clone()));
                self.by_key.insert(key, self.partitions.len() - 1);
                self.partitions.len() - 1
            }
        };
        let id = row.id.clone();
        let index = self.partitions[part].push(row, &record.embedding);
        self.by_id.insert(id, (part, index));
    }

    fn remove_at(&mut self, part: usize, index: usize) {
        let id = self.partitions[part].rows[index].id.clone();
        if let Some(moved) = self.partitions[part].swap_remove(index) {
            self.by_id.insert(moved, (part, index));
        }
        self.by_id.remove(&id);
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
                if !filter.exclude_ids.iter().any(|x| **x == *row.id) {
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

    /// The `query.k` records most similar to `query.vector`, best first
    /// (ties: newer first, then by id), none below `query.min_similarity`.
    pub(crate) fn search(&self, query: &SearchQuery) -> Vec<SearchHit> {
        let dims = query.vector.len();
        if query.k == 0 || dims == 0 {
            return Vec::new();
        }
        let sparse: Vec<(usize, f32)> = query
            .vector
            .iter()
            .enumerate()
            .filter(|(_, v)| **v != 0.0 && v.is_finite())
            .map(|(j, v)| (j, *v))
            .collect();
        if sparse.is_empty() {
            return Vec::new();
        }
        let mut heap: BinaryHeap<Candidate> = BinaryHeap::with_capacity(query.k + 1);
        for (p, partition) in self.partitions.iter().enumerate() {
            let key = &partition.key;
            if key.dims != dims
                || *key.embedder != *query.embedder
                || partition.rows.is_empty()
                || !Self::partition_matches(&query.filter, key)
            {
                continue;
            }
            Self::scan(partition, p, &sparse, query, &mut heap);
        }
        let mut hits: Vec<Candidate> = heap.into_vec();
        hits.sort_by(|a, b| {
            let (ra, rb) = (
                &self.partitions[a.part as usize].rows[a.row as usize],
                &self.partitions[b.part as usize].rows[b.row as usize],
            );
            b.score
                .total_cmp(&a.score)
                .then_with(|| rb.created_at.cmp(&ra.created_at))
                .then_with(|| ra.id.cmp(&rb.id))
        });
        hits.into_iter()
            .map(|c| {
                let row = &self.partitions[c.part as usize].rows[c.row as usize];
                SearchHit {
                    id: row.id.to_string(),
                    similarity: c.score.clamp(-1.0, 1.0),
                    created_at: row.created_at,
                    rehearsal: row.rehearsal,
                }
            })
            .collect()
    }

    fn scan(
        partition: &Partition,
        p: usize,
        sparse: &[(usize, f32)],
        query: &SearchQuery,
        heap: &mut BinaryHeap<Candidate>,
    ) {
        let dims = partition.key.dims;
        let n = partition.rows.len();
        let floor = query.min_similarity;
        for (t, tile) in partition.tiles.chunks_exact(dims * TILE).enumerate() {
            let mut acc = [0.0f32; TILE];
            for &(j, q) in sparse {
                let lane = &tile[j * TILE..j * TILE + TILE];
                for l in 0..TILE {
                    acc[l] += q * lane[l];
                }
            }
            let first = t * TILE;
            for (l, &score) in acc.iter().enumerate().take(n - first) {
                if !score.is_finite() || score < floor {
                    continue;
                }
                if heap.len() >= query.k && heap.peek().is_some_and(|worst| score <= worst.score) {
                    continue;
                }
                let row = first + l;
                if !query.filter.exclude_ids.is_empty()
                    && query
                        .filter
                        .exclude_ids
                        .iter()
                        .any(|x| **x == *partition.rows[row].id)
                {
                    continue;
                }
                heap.push(Candidate {
                    score,
                    part: p as u32,
                    row: row as u32,
                });
                if heap.len() > query.k {
                    heap.pop();
                }
            }
        }
    }
}

/// The scope of a partition as a loader names it (see [`LoadBatch`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LoadKey {
    pub(crate) user: String,
    pub(crate) agent_id: String,
    pub(crate) layer: Layer,
    pub(crate) kind: String,
    /// Empty when `dims` is 0.
    pub(crate) embedder: String,
    pub(crate) dims: usize,
}

/// One record read from a database, for [`IndexLoader`].
#[derive(Debug)]
pub(crate) struct LoadedRow {
    pub(crate) id: Arc<str>,
    /// Which key (in the order the loader's batches introduced them).
    pub(crate) key: usize,
    pub(crate) source: String,
    pub(crate) text: String,
    /// The metadata as JSON text, checked to parse; parsed again only when
    /// the record is handed out (most never are).
    pub(crate) metadata: Box<str>,
    pub(crate) created_at: Timestamp,
    pub(crate) rehearsal: u32,
    /// Where its vector starts in [`LoadBatch::vectors`] (its key's `dims`
    /// values).
    pub(crate) vector: usize,
}

/// Records read from a database, handed to an [`IndexLoader`] at once:
/// the keys seen for the first time, the rows, and their vectors in one
/// buffer (so a batch costs a handful of allocations, not one per row).
#[derive(Debug, Default)]
pub(crate) struct LoadBatch {
    pub(crate) new_keys: Vec<LoadKey>,
    pub(crate) rows: Vec<LoadedRow>,
    pub(crate) vectors: Vec<f32>,
}

/// Builds an index from [`LoadBatch`]es, the fast way to rebuild it from a
/// database at start: no per-row key hashing or interning, vectors copied
/// straight into the tiles, metadata left as text.
#[derive(Debug, Default)]
pub(crate) struct IndexLoader {
    index: Index,
    /// Partition of each key, in the order the batches introduced them.
    parts: Vec<usize>,
}

#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
impl IndexLoader {
    /// A loader expecting about `records` records.
    pub(crate) fn with_capacity(records: usize) -> Self {
        Self {
            index: Index {
                by_id: HashMap::with_capacity(records),
                ..Index::default()
            },
            parts: Vec::new(),
        }
    }

    /// Adds the batch's records (a record with an id already loaded
    /// replaces it).
    pub(crate) fn add(&mut self, batch: LoadBatch) {
        let index = &mut self.index;
        for key in batch.new_keys {
            let key = PartKey {
                user: index.intern(&key.user),
                agent_id: index.intern(&key.agent_id),
                layer: key.layer,
                kind: index.intern(&key.kind),
                embedder: index.intern(&key.embedder),
                dims: key.dims,
            };
            let part = match index.by_key.get(&key) {
                Some(&p) => p,
                None => {
                    index.partitions.push(Partition::new(key.clone()));
                    index.by_key.insert(key, index.partitions.len() - 1);
                    index.partitions.len() - 1
                }
            };
            self.parts.push(part);
        }
        for row in batch.rows {
            let Some(&part) = self.parts.get(row.key) else {
                continue;
            };
            let dims = index.partitions[part].key.dims;
            let Some(vector) = batch.vectors.get(row.vector..row.vector + dims) else {
                continue;
            };
            let id = row.id;
            let at = index.partitions[part].push(
                Row {
                    id: id.clone(),
                    source: row.source,
                    text: row.text,
                    metadata: Metadata::from_json(row.metadata),
                    created_at: row.created_at,
                    rehearsal: row.rehearsal,
                },
                vector,
            );
            if let Some((p, i)) = index.by_id.insert(id, (part, at)) {
                // The same id twice: the later row wins.
                if let Some(moved) = index.partitions[p].swap_remove(i) {
                    index.by_id.insert(moved, (p, i));
                }
            }
        }
    }

    /// The index.
    pub(crate) fn finish(self) -> Index {
        self.index
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::record::Agents;
    use crate::model::cosine;

    fn record(id: &str, agent: &str, layer: Layer, vector: Vec<f32>) -> MemoryRecord {
        MemoryRecord {
            id: id.into(),
            user: "u".into(),
            agent_id: agent.into(),
            layer,
            kind: "k".into(),
            source: "s".into(),
            text: format!("text of {id}"),
            metadata: Value::Null,
            created_at: Timestamp::from_millis(id.len() as i64),
            rehearsal: 0,
            embedding: vector,
            embedder: "e".into(),
        }
    }

    /// A deterministic pseudo-random unit vector.
    fn vector(seed: u64, dims: usize) -> Vec<f32> {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut v: Vec<f32> = (0..dims)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Sparse, like the hash embedder's vectors.
                if x.is_multiple_of(4) {
                    (x % 1000) as f32 / 500.0 - 1.0
                } else {
                    0.0
                }
            })
            .collect();
        let norm = v.iter().map(|a| a * a).sum::<f32>().sqrt().max(1e-6);
        v.iter_mut().for_each(|a| *a /= norm);
        v
    }

    fn query(filter: MemoryFilter, vector: Vec<f32>, k: usize) -> SearchQuery {
        SearchQuery {
            filter,
            embedder: "e".into(),
            vector,
            k,
            min_similarity: -1.0,
        }
    }

    #[test]
    fn search_agrees_with_a_plain_scan_across_tiles_and_removals() {
        let mut index = Index::default();
        let mut all = Vec::new();
        for i in 0..53u64 {
            let agent = if i % 3 == 0 { "karen" } else { "main" };
            let r = record(&format!("r{i}"), agent, Layer::Episodic, vector(i, 40));
            all.push(r.clone());
            index.upsert(r);
        }
        // Remove a few (from the middle, the end and a tile boundary of a
        // partition): the rows that move into their places keep their vectors.
        for id in ["r4", "r16", "r50"] {
            assert!(index.remove(id));
            assert!(!index.remove(id), "already gone");
        }
        all.retain(|r| !["r4", "r16", "r50"].contains(&r.id.as_str()));
        // Move a few records to another agent (another partition) and back.
        for i in [0usize, 17, 49] {
            let mut r = all[i].clone();
            r.agent_id = "other".into();
            index.upsert(r.clone());
            all[i] = r;
        }
        assert_eq!(index.len(), 50);
        let q = vector(999, 40);
        let filter = MemoryFilter::for_user("u").layer(Layer::Episodic, Agents::only(["main", "other"]));
        let hits = index.search(&query(filter.clone(), q.clone(), 7));
        let mut expected: Vec<(String, f32)> = all
            .iter()
            .filter(|r| filter.matches(r))
            .map(|r| (r.id.clone(), cosine(&r.embedding, &q)))
            .collect();
        expected.sort_by(|a, b| b.1.total_cmp(&a.1));
        assert_eq!(
            hits.iter().map(|h| h.id.clone()).collect::<Vec<_>>(),
            expected.iter().take(7).map(|e| e.0.clone()).collect::<Vec<_>>()
        );
        for (h, e) in hits.iter().zip(&expected) {
            assert!((h.similarity - e.1).abs() < 1e-5);
        }
        for r in &all {
            let back = index.get(&r.id).unwrap();
            assert_eq!(back, *r, "{}", r.id);
        }
    }

    #[test]
    fn floors_exclusions_and_other_spaces_are_respected() {
        let mut index = Index::default();
        let v = vector(1, 8);
        index.upsert(record("a", "main", Layer::Episodic, v.clone()));
        index.upsert(record("b", "main", Layer::Episodic, v.clone()));
        let mut other_space = record("c", "main", Layer::Episodic, v.clone());
        other_space.embedder = "other".into();
        index.upsert(other_space);
        index.upsert(record("d", "main", Layer::Episodic, Vec::new()));
        let filter = MemoryFilter::for_user("u").excluding(vec!["b".into()]);
        let hits = index.search(&query(filter, v.clone(), 5));
        assert_eq!(hits.iter().map(|h| h.id.as_str()).collect::<Vec<_>>(), ["a"]);
        let mut high = query(MemoryFilter::for_user("u"), vector(2, 8), 5);
        high.min_similarity = 0.999;
        assert!(index.search(&high).is_empty());
        let stale: Vec<String> = index.stale("e", 10).into_iter().map(|r| r.id).collect();
        assert_eq!(stale.len(), 2);
        assert!(stale.contains(&"c".to_owned()) && stale.contains(&"d".to_owned()));
        assert!(index.touch("a") && !index.touch("zz"));
        assert_eq!(index.get("a").unwrap().rehearsal, 1);
    }

    #[test]
    fn lists_are_newest_first_and_limited() {
        let mut index = Index::default();
        for (i, id) in ["x", "yy", "zzz"].iter().enumerate() {
            index.upsert(record(id, "main", Layer::Semantic, vector(i as u64, 4)));
        }
        let ids: Vec<String> = index
            .list(&MemoryFilter::for_user("u").limit(2))
            .into_iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(ids, ["zzz", "yy"]);
    }
}
