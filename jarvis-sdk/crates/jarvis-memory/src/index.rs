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
//! The tiles are kept in chunks of [`CHUNK_ROWS`] rows, each behind an
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

use serde_json::Value;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{self, AtomicBool};

use super::ann::{AnnOptions, PartAnn, Rows};
use super::graph_file::{GraphFile, Saved, fingerprint};
use super::lexical::{Postings, Terms, terms};
use super::record::{
    Layer, META_PREV, META_WHEN, MemoryFilter, MemoryRecord, SearchHit, SearchQuery, metadata_days,
};
use jarvis_common::Timestamp;

/// Rows per tile.
const TILE: usize = 16;

/// Rows per chunk of tiles (the unit a snapshot shares).
const CHUNK_ROWS: usize = 1024;

/// Chunks of partitions with a graph that one write rewrites row-major
/// (see [`Tiles::make_row_major`] and `Index::settle`): about 8 MB at 512
/// dimensions, a few milliseconds, so a large partition is rewritten over
/// the next writes rather than in one long pause.
const SETTLE_CHUNKS: usize = 4;

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

    /// What the index keeps of it: the episode before ([`META_PREV`]) and
    /// the days stated ([`META_WHEN`]); `None` when it says neither (most
    /// records, whose JSON text is then not parsed).
    fn links(&self) -> Option<Box<Links>> {
        let links = match self {
            Metadata::Value(v) => Links {
                prev: v.get(META_PREV).and_then(Value::as_str).map(Arc::from),
                stated: metadata_days(v).into(),
            },
            Metadata::Json(text) => {
                if !text.contains(META_PREV) && !text.contains(META_WHEN) {
                    return None;
                }
                let v: Value = serde_json::from_str(text).ok()?;
                return Metadata::Value(v).links();
            }
        };
        (links.prev.is_some() || !links.stated.is_empty()).then(|| Box::new(links))
    }
}

/// What a row says of its place in time and in its session.
#[derive(Debug, Clone, Default, PartialEq)]
struct Links {
    /// The episode before it in its session.
    prev: Option<Arc<str>>,
    /// The days its text states (their midnights).
    stated: Box<[Timestamp]>,
}

#[derive(Debug, Clone)]
struct Row {
    id: Arc<str>,
    /// Unique in the index, never reused: a new record and every update
    /// take the next one (the graph's key for this row's vector).
    key: u64,
    source: String,
    text: String,
    metadata: Metadata,
    created_at: Timestamp,
    rehearsal: u32,
    /// From the metadata, when it links the row (most do not).
    links: Option<Box<Links>>,
}

impl Row {
    fn prev(&self) -> Option<&Arc<str>> {
        self.links.as_ref()?.prev.as_ref()
    }

    fn stated(&self) -> &[Timestamp] {
        self.links.as_ref().map_or(&[], |l| &l.stated)
    }
}

/// A partition's vectors: `ceil(rows / TILE)` tiles of `dims × TILE`
/// values, in chunks of [`CHUNK_ROWS`] rows, each chunk's tiles
/// dimension-major or (once the partition walks a graph) row-major. See
/// the module docs.
#[derive(Debug, Clone, Default)]
struct Tiles {
    dims: usize,
    /// New chunks are row-major, and older ones are being rewritten so.
    row_major: bool,
    /// By chunk: its tiles' rows one after the other (a row's values
    /// contiguous) rather than dimension by dimension.
    by_row: Vec<bool>,
    chunks: Vec<Arc<Vec<f32>>>,
}

impl Tiles {
    fn new(dims: usize) -> Self {
        Self {
            dims,
            row_major: false,
            by_row: Vec::new(),
            chunks: Vec::new(),
        }
    }

    /// The chunk of `row`, where its dimension 0 is in it, and the step
    /// from one of its dimensions to the next.
    fn slot(&self, row: usize) -> (usize, usize, usize) {
        let (chunk, within) = (row / CHUNK_ROWS, row % CHUNK_ROWS);
        let tile = (within / TILE) * self.dims * TILE;
        if self.by_row[chunk] {
            (chunk, tile + (within % TILE) * self.dims, 1)
        } else {
            (chunk, tile + within % TILE, TILE)
        }
    }

    fn write(&mut self, row: usize, vector: &[f32]) {
        if self.dims == 0 {
            return;
        }
        let (chunk, base, step) = self.slot(row);
        let chunk = Arc::make_mut(&mut self.chunks[chunk]);
        for (j, value) in vector.iter().enumerate().take(self.dims) {
            chunk[base + j * step] = *value;
        }
    }

    fn read_into(&self, row: usize, out: &mut [f32]) {
        let (chunk, base, step) = self.slot(row);
        let chunk = &self.chunks[chunk];
        for (j, value) in out.iter_mut().enumerate().take(self.dims) {
            *value = chunk[base + j * step];
        }
    }

    /// The dot product of `row`'s vector with a query given by its
    /// non-zero dimensions, one row alone: what the tests hold every
    /// scoring path to, bit for bit.
    #[cfg(test)]
    fn dot(&self, row: usize, sparse: &[(usize, f32)]) -> f32 {
        let (chunk, base, step) = self.slot(row);
        let chunk = &self.chunks[chunk];
        sparse
            .iter()
            .map(|&(j, q)| q * chunk.get(base + j * step).copied().unwrap_or(0.0))
            // From +0.0 as the tiles' scan adds up (`sum` starts from -0.0),
            // so a row scores the same bits whichever path scored it.
            .fold(0.0, |acc, x| acc + x)
    }

    /// Whether the tiles are row-major for good: asked to be, and every
    /// chunk rewritten (new ones are born so).
    fn settled(&self) -> bool {
        self.row_major && self.by_row.iter().all(|&by_row| by_row)
    }

    /// The 16 scores of one tile (`tile`, of chunk `chunk`) for a query
    /// given by its non-zero dimensions.
    fn scores(&self, chunk: usize, tile: &[f32], sparse: &[(usize, f32)]) -> [f32; TILE] {
        if self.by_row[chunk] {
            row_scores(tile, self.dims, sparse)
        } else {
            tile_scores(tile, sparse)
        }
    }

    /// Makes new chunks row-major and rewrites at most `budget` of the
    /// dimension-major ones; answers how many it rewrote ([`settled`](Self::settled)
    /// says whether any is left). A graph's candidates
    /// are scored one row at a time, and a row read whole is `dims / 16`
    /// neighbouring cache lines where dimension-major it is one line per
    /// dimension the query uses. Chunks a snapshot shares are copied, as
    /// by any write.
    fn make_row_major(&mut self, budget: usize) -> usize {
        self.row_major = true;
        let dims = self.dims;
        // Allocated for the first chunk to rewrite: most calls find none.
        let mut by_dim: Vec<f32> = Vec::new();
        let mut left = budget;
        for (chunk, by_row) in self.chunks.iter_mut().zip(&mut self.by_row) {
            if *by_row || dims == 0 {
                continue;
            }
            if left == 0 {
                return budget;
            }
            by_dim.resize(dims * TILE, 0.0);
            for tile in Arc::make_mut(chunk).chunks_exact_mut(dims * TILE) {
                by_dim.copy_from_slice(tile);
                for (j, lane) in by_dim.chunks_exact(TILE).enumerate() {
                    for (r, value) in lane.iter().enumerate() {
                        tile[r * dims + j] = *value;
                    }
                }
            }
            *by_row = true;
            left -= 1;
        }
        budget - left
    }

    /// The dot products of `rows` with a query given by its non-zero
    /// dimensions, in the order of `rows`. Dimension-major, rows that share
    /// a tile are scored together: one pass over the tile's lines for all
    /// of them (a partition's newest rows, its graph's tail, are
    /// neighbours), where one by one each would read the same lines again.
    /// The others are scored [`LANES`] at a time, interleaved.
    fn dot_rows(&self, rows: &[usize], sparse: &[(usize, f32)]) -> Vec<f32> {
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_unstable_by_key(|&i| rows[i]);
        let mut scores = vec![0.0f32; rows.len()];
        let mut alone = Vec::with_capacity(rows.len());
        let tile_len = self.dims * TILE;
        let mut at = 0;
        while at < order.len() {
            let tile = rows[order[at]] / TILE;
            let end = at + order[at..].partition_point(|&i| rows[i] / TILE == tile);
            let (chunk, base, step) = self.slot(tile * TILE);
            if end - at == 1 || step == 1 {
                alone.extend_from_slice(&order[at..end]);
            } else {
                let lanes = self.chunks[chunk]
                    .get(base..base + tile_len)
                    .map(|t| tile_scores(t, sparse))
                    .unwrap_or([0.0; TILE]);
                for &i in &order[at..end] {
                    scores[i] = lanes[rows[i] % TILE];
                }
            }
            at = end;
        }
        for group in alone.chunks(LANES) {
            let mut lanes: [(&[f32], usize, usize); LANES] = [(&[], 0, 0); LANES];
            for (lane, &i) in lanes.iter_mut().zip(group) {
                let (chunk, base, step) = self.slot(rows[i]);
                *lane = (&self.chunks[chunk], base, step);
            }
            for (&i, score) in group.iter().zip(interleaved_dots(&lanes, sparse)) {
                scores[i] = score;
            }
        }
        scores
    }

    /// Whether `row`'s vector is `vector`, value for value.
    fn holds(&self, row: usize, vector: &[f32]) -> bool {
        let (chunk, base, step) = self.slot(row);
        let chunk = &self.chunks[chunk];
        vector.len() == self.dims
            && vector
                .iter()
                .enumerate()
                .all(|(j, v)| chunk[base + j * step] == *v)
    }

    fn read(&self, row: usize) -> Vec<f32> {
        let mut out = vec![0.0; self.dims];
        if self.dims > 0 {
            self.read_into(row, &mut out);
        }
        out
    }

    /// Makes room for `rows` rows (adds a tile when `rows - 1` starts one).
    fn grow_to(&mut self, rows: usize) {
        let row = rows - 1;
        if self.dims == 0 || !row.is_multiple_of(TILE) {
            return;
        }
        if row.is_multiple_of(CHUNK_ROWS) {
            self.chunks.push(Arc::new(Vec::new()));
            self.by_row.push(self.row_major);
        }
        let tile = self.dims * TILE;
        if let Some(last) = self.chunks.last_mut() {
            let last = Arc::make_mut(last);
            last.resize(last.len() + tile, 0.0);
        }
    }

    /// Drops the tiles past `rows` rows.
    fn shrink_to(&mut self, rows: usize) {
        if self.dims == 0 {
            return;
        }
        self.chunks.truncate(rows.div_ceil(CHUNK_ROWS));
        self.by_row.truncate(self.chunks.len());
        let within = rows - (rows.div_ceil(CHUNK_ROWS).max(1) - 1) * CHUNK_ROWS;
        let keep = within.div_ceil(TILE) * self.dims * TILE;
        if let Some(last) = self.chunks.last_mut()
            && last.len() > keep
        {
            Arc::make_mut(last).truncate(keep);
        }
    }
}

/// Puts a candidate in the top-`k` heap (dropping the worst past `k`).
fn offer(heap: &mut BinaryHeap<Candidate>, k: usize, score: f32, part: usize, row: usize) {
    if heap.len() >= k && heap.peek().is_some_and(|worst| score <= worst.score) {
        return;
    }
    heap.push(Candidate {
        score,
        part: part as u32,
        row: row as u32,
    });
    if heap.len() > k {
        heap.pop();
    }
}

/// A query's non-zero (finite) dimensions with their values.
fn sparse_of(vector: &[f32]) -> Vec<(usize, f32)> {
    vector
        .iter()
        .enumerate()
        .filter(|(_, v)| **v != 0.0 && v.is_finite())
        .map(|(j, v)| (j, *v))
        .collect()
}

/// The 16 scores of one tile: for each of the query's non-zero dimensions
/// `(j, q)`, `q` times that dimension's 16 values (one cache line).
#[inline]
fn tile_scores(tile: &[f32], sparse: &[(usize, f32)]) -> [f32; TILE] {
    let mut acc = [0.0f32; TILE];
    for &(j, q) in sparse {
        let Some(lane) = tile.get(j * TILE..j * TILE + TILE) else {
            continue;
        };
        let lane: &[f32; TILE] = lane.try_into().unwrap_or(&[0.0; TILE]);
        for l in 0..TILE {
            acc[l] += q * lane[l];
        }
    }
    acc
}

/// The 16 scores of one row-major tile of `dims`-long rows: each row's dot
/// product with the query, added up in the query's order from `+0.0`, as
/// [`tile_scores`] adds them, so both layouts score the same bits.
#[inline]
fn row_scores(tile: &[f32], dims: usize, sparse: &[(usize, f32)]) -> [f32; TILE] {
    let mut lanes: [(&[f32], usize, usize); TILE] = [(&[], 0, 0); TILE];
    if dims > 0 {
        for (lane, row) in lanes.iter_mut().zip(tile.chunks_exact(dims)) {
            *lane = (row, 0, 1);
        }
    }
    interleaved_dots(&lanes, sparse)
}

/// Rows scored at once by [`Tiles::dot_rows`] when they do not share a
/// dimension-major tile.
const LANES: usize = 8;

/// The dot products of `N` rows with a query given by its non-zero
/// dimensions; a row is `(values, base, step)`: its dimension `j` is
/// `values[base + j * step]` (an empty `values` scores `0.0`). Each row's
/// products are added up in the query's order from `+0.0`, as
/// [`tile_scores`] and [`Tiles::dot`] add them, so every path scores the
/// same bits; the rows are interleaved, dimension by dimension, so their
/// additions and cache misses overlap instead of each row's waiting on the
/// one before (one row alone is a chain of ~150 dependent additions for the
/// hash embedder).
#[inline]
fn interleaved_dots<const N: usize>(rows: &[(&[f32], usize, usize); N], sparse: &[(usize, f32)]) -> [f32; N] {
    let mut acc = [0.0f32; N];
    for &(j, q) in sparse {
        for (acc, &(values, base, step)) in acc.iter_mut().zip(rows) {
            *acc += q * values.get(base + j * step).copied().unwrap_or(0.0);
        }
    }
    acc
}

/// A partition's vectors and row keys as they were when a graph build
/// started (see `ann.rs`).
#[cfg_attr(not(feature = "ann"), allow(dead_code))]
struct Snapshot {
    tiles: Tiles,
    keys: Vec<u64>,
    ids: Vec<Arc<str>>,
}

impl Rows for Snapshot {
    fn dims(&self) -> usize {
        self.tiles.dims
    }
    fn len(&self) -> usize {
        self.keys.len()
    }
    fn key(&self, row: usize) -> u64 {
        self.keys[row]
    }
    fn vector_into(&self, row: usize, out: &mut [f32]) {
        self.tiles.read_into(row, out);
    }
    fn id(&self, row: usize) -> Arc<str> {
        self.ids[row].clone()
    }
}

/// A live partition seen as [`Rows`].
#[cfg_attr(not(feature = "ann"), allow(dead_code))]
struct Live<'a> {
    rows: &'a [Row],
    tiles: &'a Tiles,
}

impl Rows for Live<'_> {
    fn dims(&self) -> usize {
        self.tiles.dims
    }
    fn len(&self) -> usize {
        self.rows.len()
    }
    fn key(&self, row: usize) -> u64 {
        self.rows[row].key
    }
    fn vector_into(&self, row: usize, out: &mut [f32]) {
        self.tiles.read_into(row, out);
    }
    fn id(&self, row: usize) -> Arc<str> {
        self.rows[row].id.clone()
    }
}

#[derive(Debug)]
struct Partition {
    key: PartKey,
    rows: Vec<Row>,
    tiles: Tiles,
    /// The rows' terms, row for row.
    lexical: Postings,
    ann: PartAnn,
}

impl Partition {
    /// An empty partition; with `graphs`, its graph is kept in a file
    /// there between runs.
    fn new(key: PartKey, graphs: Option<&Path>) -> Self {
        let mut ann = PartAnn::default();
        if let Some(dir) = graphs.filter(|_| key.dims > 0) {
            let spelt = format!(
                "{}\0{}\0{}\0{}\0{}\0{}",
                key.user,
                key.agent_id,
                key.layer.as_str(),
                key.kind,
                key.embedder,
                key.dims
            );
            ann.set_file(GraphFile::new(dir, spelt));
        }
        Self {
            tiles: Tiles::new(key.dims),
            key,
            rows: Vec::new(),
            lexical: Postings::default(),
            ann,
        }
    }

    fn vector(&self, row: usize) -> Vec<f32> {
        self.tiles.read(row)
    }

    fn push(&mut self, row: Row, vector: &[f32]) -> usize {
        let terms = terms(&row.text);
        self.push_with_terms(row, vector, &terms)
    }

    /// [`push`](Self::push) of a row whose terms are already taken.
    fn push_with_terms(&mut self, row: Row, vector: &[f32], terms: &Terms) -> usize {
        let index = self.rows.len();
        self.lexical.push(terms);
        self.tiles.grow_to(index + 1);
        self.tiles.write(index, vector);
        if self.key.dims > 0 {
            self.ann.pushed(row.key, index);
        }
        self.rows.push(row);
        index
    }

    /// Replaces the row at `index` (a new key: the graph forgets the old
    /// vector and learns the new one).
    fn replace(&mut self, index: usize, mut row: Row, vector: &[f32]) {
        if row.text != self.rows[index].text {
            self.lexical.replace(index, &terms(&row.text));
        }
        if self.key.dims == 0 || self.tiles.holds(index, vector) {
            row.key = self.rows[index].key;
            self.rows[index] = row;
            return;
        }
        let old = std::mem::replace(&mut self.rows[index], row);
        self.ann.removed(old.key);
        self.tiles.write(index, vector);
        if self.key.dims > 0 {
            self.ann.pushed(self.rows[index].key, index);
        }
    }

    /// Removes `row` by moving the last row into its place; answers the id
    /// of the row that moved, if one did.
    fn swap_remove(&mut self, row: usize) -> Option<Arc<str>> {
        let last = self.rows.len() - 1;
        self.ann.removed(self.rows[row].key);
        let moved = if row != last {
            let vector = self.vector(last);
            self.tiles.write(row, &vector);
            self.ann.moved(self.rows[last].key, row);
            Some(self.rows[last].id.clone())
        } else {
            None
        };
        self.rows.swap_remove(row);
        self.lexical.swap_remove(row);
        self.tiles.shrink_to(self.rows.len());
        moved
    }

    /// Once the partition walks a graph, rewrites up to `budget` of its
    /// chunks row-major (see [`Tiles::make_row_major`]); answers how many
    /// it rewrote. Not before: until the first graph is ready the
    /// partition is scanned, which reads less dimension-major. A partition
    /// that later drops its graph stays row-major.
    fn settle(&mut self, budget: usize, options: &AnnOptions) -> usize {
        // Cheap refusals first: most writes reach partitions with nothing
        // to rewrite, and asking the graph takes its lock.
        if budget == 0 || self.tiles.settled() || self.rows.len() < options.min_rows / 2 {
            return 0;
        }
        if !self.ann.is_ready() {
            return 0;
        }
        self.tiles.make_row_major(budget)
    }

    /// Lets the graph catch up (see [`PartAnn::poll`]).
    fn poll(&self, next_key: u64, options: &AnnOptions) {
        self.ann.poll(&self.live(), || self.snapshot(), next_key, options);
    }

    /// Blocks until no graph work of this partition is under way.
    fn wait(&self, next_key: u64, options: &AnnOptions) {
        self.ann.wait(&self.live(), || self.snapshot(), next_key, options);
    }

    /// Writes its graph to its file if that changed since the last save.
    fn save_graph(&self) {
        self.ann.save_now(|| self.snapshot());
    }

    fn live(&self) -> Live<'_> {
        Live {
            rows: &self.rows,
            tiles: &self.tiles,
        }
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            tiles: self.tiles.clone(),
            keys: self.rows.iter().map(|r| r.key).collect(),
            ids: self.rows.iter().map(|r| r.id.clone()).collect(),
        }
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
    /// An episode's id → the id of the episode after it in its session
    /// (the rows whose [`META_PREV`] names it).
    next_of: HashMap<Arc<str>, Arc<str>>,
    /// The key the next written row gets (see [`Row::key`]).
    next_key: u64,
    ann: AnnOptions,
    /// Where partitions keep their graphs between runs (`graph_file.rs`),
    /// for a store with a file.
    graphs: Option<Arc<Path>>,
}

/// The cores this process may use, read once (on Linux the standard
/// library reads cgroup files on every call, which costs more than a
/// small search).
fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The one thread recalls lend searches to, kept between recalls: waking
/// it costs a fraction of starting a thread per recall (tens of
/// microseconds on a busy 2-core machine, a tenth of a recall at 1M
/// records). One recall at a time may use it; the others, which find it
/// busy, search on their own thread rather than queue behind it.
struct Helper {
    pool: rayon::ThreadPool,
    busy: AtomicBool,
}

/// A claim on the [`Helper`], released when dropped.
struct Lent(&'static Helper);

impl Drop for Lent {
    fn drop(&mut self) {
        self.0.busy.store(false, atomic::Ordering::Release);
    }
}

/// Claims the helper thread (started on first use); `None` when it is
/// busy or could not be started.
fn lend() -> Option<Lent> {
    static HELPER: std::sync::OnceLock<Option<Helper>> = std::sync::OnceLock::new();
    let helper = HELPER
        .get_or_init(|| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .thread_name(|_| "jarvis-recall".into())
                .build()
                .ok()?;
            Some(Helper {
                pool,
                busy: AtomicBool::new(false),
            })
        })
        .as_ref()?;
    helper
        .busy
        .compare_exchange(false, true, atomic::Ordering::Acquire, atomic::Ordering::Relaxed)
        .ok()?;
    Some(Lent(helper))
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

    /// The `query.k` records most similar to `query.vector`, best first
    /// (ties: newer first, then by id), none below `query.min_similarity`.
    /// Several searches, answered in order. When at least two of them walk
    /// a graph (large partitions), they are shared between this thread and
    /// the recall helper thread (when no other recall is using it), by
    /// their estimated cost: the walks are bound by memory latency, so two
    /// cores answer them in little more than the longest half's time.
    /// Smaller searches run here, one after the other (handing them over
    /// costs more than they do).
    pub(crate) fn search_many(&self, queries: &[SearchQuery]) -> Vec<Vec<SearchHit>> {
        let costs: Vec<(f64, bool)> = queries.iter().map(|q| self.search_cost(q)).collect();
        let walks = costs.iter().filter(|(_, walks)| *walks).count();
        // A recall that finds the helper lent to another searches alone.
        let Some(helper) = (walks >= 2 && cores() >= 2).then(lend).flatten() else {
            return queries.iter().map(|q| self.search(q)).collect();
        };
        // Longest first, each to the lighter side.
        let mut order: Vec<usize> = (0..queries.len()).collect();
        order.sort_by(|&a, &b| costs[b].0.total_cmp(&costs[a].0));
        let (mut here, mut there) = (Vec::new(), Vec::new());
        let (mut load_here, mut load_there) = (0.0, 0.0);
        for i in order {
            if load_there < load_here {
                load_there += costs[i].0;
                there.push(i);
            } else {
                load_here += costs[i].0;
                here.push(i);
            }
        }
        let mut answers: Vec<Vec<SearchHit>> = vec![Vec::new(); queries.len()];
        let mut lent: Vec<(usize, Vec<SearchHit>)> = Vec::new();
        helper.0.pool.in_place_scope(|scope| {
            let lent = &mut lent;
            let there = &there;
            scope.spawn(move |_| *lent = there.iter().map(|&i| (i, self.search(&queries[i]))).collect());
            for &i in &here {
                answers[i] = self.search(&queries[i]);
            }
        });
        for (i, hits) in lent {
            answers[i] = hits;
        }
        answers
    }

    /// Whether `query` searches `partition` at all: in scope, not empty.
    fn in_scope(partition: &Partition, query: &SearchQuery) -> bool {
        !partition.rows.is_empty() && Self::partition_matches(&query.filter, &partition.key)
    }

    /// Whether `partition`'s vectors lie in the query's space.
    fn in_space(partition: &Partition, query: &SearchQuery) -> bool {
        let key = &partition.key;
        !query.vector.is_empty() && key.dims == query.vector.len() && *key.embedder == *query.embedder
    }

    /// Whether `query` searches `partition` by vector: its space, not
    /// empty, in scope.
    fn searched_by(partition: &Partition, query: &SearchQuery) -> bool {
        Self::in_space(partition, query) && Self::in_scope(partition, query)
    }

    /// A rough cost of `query` and whether it walks a graph: a scan counts
    /// its rows over 5,000, a walk 1 plus a quarter of the doublings of its
    /// rows over 5,000 (a walk's hops grow with the log of its size).
    fn search_cost(&self, query: &SearchQuery) -> (f64, bool) {
        let (mut cost, mut walks) = (0.0, false);
        for partition in self.partitions.iter().filter(|p| Self::searched_by(p, query)) {
            let size = partition.rows.len() as f64 / 5_000.0;
            if partition.ann.is_ready() {
                cost += 1.0 + size.max(1.0).log2() / 4.0;
                walks = true;
            } else {
                cost += size;
            }
        }
        (cost, walks)
    }

    /// The `query.k` records most similar to `query.vector` (none below
    /// `query.min_similarity`) and the `query.k` best by BM25 for
    /// `query.terms`, together, each hit with both scores; ordered by
    /// similarity, then BM25 (ties: newer first, then by id).
    pub(crate) fn search(&self, query: &SearchQuery) -> Vec<SearchHit> {
        if query.k == 0 {
            return Vec::new();
        }
        let sparse = sparse_of(&query.vector);
        if sparse.is_empty() && query.terms.is_empty() {
            return Vec::new();
        }
        let mut by_vector: BinaryHeap<Candidate> = BinaryHeap::with_capacity(query.k + 1);
        let mut by_words: BinaryHeap<Candidate> = BinaryHeap::with_capacity(query.k + 1);
        // Where the excluded records are, looked up once: a candidate is then
        // checked without reading its row.
        let excluded: Vec<(usize, usize)> = query
            .filter
            .exclude_ids
            .iter()
            .filter_map(|id| self.by_id.get(id.as_str()).copied())
            .collect();
        // Each partition's weighed terms, to score the vector side's hits.
        let mut weighed: Vec<(usize, Vec<(u32, f32)>)> = Vec::new();
        let period = query.filter.during.is_some();
        for (p, partition) in self.partitions.iter().enumerate() {
            if !Self::in_scope(partition, query) {
                continue;
            }
            let excluded: Vec<usize> = excluded
                .iter()
                .filter(|(at, _)| *at == p)
                .map(|&(_, row)| row)
                .collect();
            let accept = |row: usize| {
                !excluded.contains(&row)
                    && (!period || {
                        let r = &partition.rows[row];
                        query.filter.in_period(r.created_at, r.stated())
                    })
            };
            if !sparse.is_empty() && Self::in_space(partition, query) {
                partition.poll(self.next_key, &self.ann);
                let found = Self::walk(
                    partition,
                    p,
                    &sparse,
                    query,
                    &accept,
                    excluded.len(),
                    self.ann.expansion_search,
                    &mut by_vector,
                );
                if !found {
                    Self::scan(partition, p, &sparse, query, &accept, &mut by_vector);
                }
            }
            if !query.terms.is_empty() {
                let terms = partition.lexical.weigh(&query.terms);
                if !terms.is_empty() {
                    for (row, score) in partition.lexical.search(&terms, accept) {
                        offer(&mut by_words, query.k, score, p, row);
                    }
                    weighed.push((p, terms));
                }
            }
        }
        // Both sides together, each hit with both scores.
        let mut hits: Vec<(Candidate, f32)> = Vec::with_capacity(by_vector.len() + by_words.len());
        for c in by_vector.into_vec() {
            let lexical = weighed
                .iter()
                .find(|(p, _)| *p == c.part as usize)
                .map_or(0.0, |(p, terms)| {
                    self.partitions[*p].lexical.score(c.row as usize, terms)
                });
            hits.push((c, lexical));
        }
        for c in by_words.into_vec() {
            if hits.iter().any(|(h, _)| h.part == c.part && h.row == c.row) {
                continue;
            }
            let partition = &self.partitions[c.part as usize];
            let similarity = if !sparse.is_empty() && Self::in_space(partition, query) {
                partition.tiles.dot_rows(&[c.row as usize], &sparse)[0]
            } else {
                0.0
            };
            hits.push((
                Candidate {
                    score: similarity,
                    ..c
                },
                c.score,
            ));
        }
        let row_of = |c: &Candidate| &self.partitions[c.part as usize].rows[c.row as usize];
        hits.sort_by(|(a, la), (b, lb)| {
            let (ra, rb) = (row_of(a), row_of(b));
            b.score
                .total_cmp(&a.score)
                .then_with(|| lb.total_cmp(la))
                .then_with(|| rb.created_at.cmp(&ra.created_at))
                .then_with(|| ra.id.cmp(&rb.id))
        });
        hits.into_iter()
            .map(|(c, lexical)| {
                let row = row_of(&c);
                SearchHit {
                    id: row.id.to_string(),
                    similarity: if c.score.is_finite() {
                        c.score.clamp(-1.0, 1.0)
                    } else {
                        0.0
                    },
                    lexical,
                    created_at: row.created_at,
                    rehearsal: row.rehearsal,
                    prev: row.prev().map(|p| p.to_string()),
                    next: self.next_of.get(&row.id).map(|n| n.to_string()),
                }
            })
            .collect()
    }

    /// Searches `partition` through its graph into `heap`; false when it
    /// has no graph ready (scan it instead).
    #[allow(clippy::too_many_arguments)]
    fn walk(
        partition: &Partition,
        p: usize,
        sparse: &[(usize, f32)],
        query: &SearchQuery,
        accept: &dyn Fn(usize) -> bool,
        excluded: usize,
        expansion: usize,
        heap: &mut BinaryHeap<Candidate>,
    ) -> bool {
        let score = |rows: &[usize]| partition.tiles.dot_rows(rows, sparse);
        // The graph's order is by quantised vectors: a few more candidates,
        // scored exactly, keep the top k right.
        let count = query.k + query.k / 2 + 4;
        let Some(found) = partition
            .ann
            .search(&query.vector, count, excluded, expansion, accept, &score)
        else {
            return false;
        };
        for (row, score) in found {
            if score.is_finite() && score >= query.min_similarity {
                offer(heap, query.k, score, p, row);
            }
        }
        true
    }

    /// Scores every row of `partition` that `accept` takes into `heap`.
    fn scan(
        partition: &Partition,
        p: usize,
        sparse: &[(usize, f32)],
        query: &SearchQuery,
        accept: &dyn Fn(usize) -> bool,
        heap: &mut BinaryHeap<Candidate>,
    ) {
        let dims = partition.key.dims;
        let n = partition.rows.len();
        let floor = query.min_similarity;
        let tile_len = dims * TILE;
        let tiles = partition.tiles.chunks.iter().enumerate().flat_map(|(c, chunk)| {
            chunk
                .chunks_exact(tile_len)
                .enumerate()
                .map(move |(t, tile)| (c, c * CHUNK_ROWS + t * TILE, tile))
        });
        for (c, first, tile) in tiles {
            let acc = partition.tiles.scores(c, tile, sparse);
            for (l, &score) in acc.iter().enumerate().take(n - first) {
                if !score.is_finite() || score < floor {
                    continue;
                }
                if heap.len() >= query.k && heap.peek().is_some_and(|worst| score <= worst.score) {
                    continue;
                }
                let row = first + l;
                if !accept(row) {
                    continue;
                }
                offer(heap, query.k, score, p, row);
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
    /// The terms of `text` for the word index (`lexical::terms`), taken
    /// by the reader so that the two loading threads share the work.
    pub(crate) terms: Terms,
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
/// straight into the tiles, metadata left as text. With a folder of saved
/// graphs (`with_graphs`), a record whose id and vector match a saved
/// node gets the node's key, so the saved graph serves at once.
#[derive(Default)]
pub(crate) struct IndexLoader {
    index: Index,
    /// Partition of each key, in the order the batches introduced them.
    parts: Vec<usize>,
    /// By partition: the graph its file held, until `finish`.
    saved: Vec<Option<Saved>>,
}

impl std::fmt::Debug for IndexLoader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexLoader")
            .field("index", &self.index)
            .field("saved", &self.saved.iter().filter(|s| s.is_some()).count())
            .finish()
    }
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
            saved: Vec::new(),
        }
    }

    /// Partitions keep their graphs in `dir` between runs, and the graphs
    /// saved there are taken back (see `graph_file.rs`).
    pub(crate) fn with_graphs(mut self, dir: &Path) -> Self {
        super::graph_file::clean(dir);
        self.index.graphs = Some(Arc::from(dir));
        self
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
                    let partition = Partition::new(key.clone(), index.graphs.as_deref());
                    let saved = partition.ann.file().and_then(|file| match file.read() {
                        Ok(saved) => saved,
                        Err(e) => {
                            tracing::warn!(path = %file.path().display(), error = %e, "memory: a saved recall graph is not usable; building it again");
                            None
                        }
                    });
                    if let Some(saved) = &saved {
                        // Keys handed out from now on are above every key
                        // the graph holds: new rows are its tail.
                        index.next_key = index.next_key.max(saved.covered);
                    }
                    index.partitions.push(partition);
                    self.saved.push(saved);
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
            let (id, terms) = (row.id, row.terms);
            let saved_key = self.saved[part]
                .as_ref()
                .and_then(|saved| saved.nodes.get(&*id))
                .filter(|&&(_, print)| print == fingerprint(vector))
                .map(|&(key, _)| key);
            let key = saved_key.unwrap_or_else(|| index.take_key());
            let metadata = Metadata::from_json(row.metadata);
            let row = Row {
                id: id.clone(),
                key,
                source: row.source,
                text: row.text,
                links: metadata.links(),
                metadata,
                created_at: row.created_at,
                rehearsal: row.rehearsal,
            };
            index.link(&row);
            let at = index.partitions[part].push_with_terms(row, vector, &terms);
            if let Some((p, i)) = index.by_id.insert(id, (part, at)) {
                // The same id twice: the later row wins.
                if let Some(moved) = index.partitions[p].swap_remove(i) {
                    index.by_id.insert(moved, (p, i));
                }
            }
        }
    }

    /// The index, saved graphs taken back and its large partitions' graphs
    /// starting to build as `ann` says.
    pub(crate) fn finish(mut self, ann: AnnOptions) -> Index {
        for (partition, saved) in self.index.partitions.iter_mut().zip(self.saved) {
            if let Some(saved) = saved {
                let dims = partition.key.dims;
                partition.ann.restore(saved, dims, &ann);
            }
        }
        self.index.set_ann(ann);
        self.index
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Agents;
    use jarvis_model::cosine;

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

    fn dense(seed: u64, dims: usize) -> Vec<f32> {
        let mut x = seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1;
        let mut v: Vec<f32> = (0..dims)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % 2000) as f32 / 1000.0 - 1.0
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
            terms: Vec::new(),
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
    fn rows_scored_together_score_as_one_by_one() {
        let dims = 24;
        let mut tiles = Tiles::new(dims);
        let n = CHUNK_ROWS + 3 * TILE + 5;
        for row in 0..n {
            tiles.grow_to(row + 1);
            tiles.write(row, &vector(row as u64, dims));
        }
        let sparse = sparse_of(&vector(9_999, dims));
        // Neighbours in one tile, a tile's last and the next's first, both
        // sides of a chunk boundary, the last (partial) tile, a row twice,
        // out of order.
        let rows = [
            5,
            3,
            4,
            15,
            16,
            CHUNK_ROWS - 1,
            CHUNK_ROWS,
            n - 1,
            n - 2,
            700,
            3,
            CHUNK_ROWS + 17,
        ];
        let one_by_one: Vec<u32> = rows.iter().map(|&r| tiles.dot(r, &sparse).to_bits()).collect();
        // Dimension-major, row-major, and the first chunk row-major only.
        let (mut by_row, mut mixed) = (tiles.clone(), tiles.clone());
        by_row.make_row_major(usize::MAX);
        mixed.make_row_major(1);
        for tiles in [&tiles, &by_row, &mixed] {
            let together: Vec<u32> = tiles
                .dot_rows(&rows, &sparse)
                .iter()
                .map(|s| s.to_bits())
                .collect();
            assert_eq!(together, one_by_one, "layouts {:?}", tiles.by_row);
            assert!(tiles.dot_rows(&[], &sparse).is_empty());
        }
        // A row that is zero wherever the query is negative scores +0.0 on
        // both paths (a sum from -0.0 would give -0.0 one by one).
        let mut tiles = Tiles::new(dims);
        for row in 0..2 {
            tiles.grow_to(row + 1);
            tiles.write(row, &vec![0.0; dims]);
        }
        let negative = [(1, -0.5f32), (7, -0.25)];
        let scores = [tiles.dot(0, &negative), tiles.dot_rows(&[0, 1], &negative)[0]];
        assert!(
            scores.iter().all(|s| s.to_bits() == 0.0f32.to_bits()),
            "{scores:?}"
        );
    }

    /// Rewritten row-major a chunk at a time, tiles hold every vector as
    /// before, a tile's scan scores the same bits in either layout, and
    /// writes, growth and shrinking go on across both layouts.
    #[test]
    fn row_major_tiles_hold_and_score_what_dimension_major_ones_did() {
        let dims = 20;
        let n = CHUNK_ROWS + 2 * TILE + 7;
        let mut tiles = Tiles::new(dims);
        for row in 0..n {
            tiles.grow_to(row + 1);
            tiles.write(row, &vector(row as u64, dims));
        }
        // A snapshot taken before keeps its own layout and values.
        let snapshot = tiles.clone();
        let mut by_row = tiles.clone();
        assert_eq!(by_row.make_row_major(1), 1, "one chunk of two");
        assert_eq!(by_row.by_row, [true, false]);
        assert!(!by_row.settled());
        assert_eq!(by_row.make_row_major(5), 1);
        assert!(by_row.settled());
        assert_eq!(by_row.make_row_major(5), 0, "nothing left to do");
        assert_eq!(
            (by_row.by_row.as_slice(), snapshot.by_row.as_slice()),
            (&[true, true][..], &[false, false][..])
        );
        let sparse = sparse_of(&vector(4_242, dims));
        for row in 0..n {
            assert_eq!(by_row.read(row), tiles.read(row), "row {row}");
            assert!(by_row.holds(row, &vector(row as u64, dims)));
            assert_eq!(
                by_row.dot(row, &sparse).to_bits(),
                tiles.dot(row, &sparse).to_bits()
            );
        }
        let tile_len = dims * TILE;
        for (c, (a, b)) in tiles.chunks.iter().zip(&by_row.chunks).enumerate() {
            for (x, y) in a.chunks_exact(tile_len).zip(b.chunks_exact(tile_len)) {
                let (x, y) = (tiles.scores(c, x, &sparse), by_row.scores(c, y, &sparse));
                assert_eq!(x.map(f32::to_bits), y.map(f32::to_bits));
            }
        }
        // One row's values are contiguous now.
        let (chunk, base, step) = by_row.slot(TILE + 3);
        assert_eq!(step, 1);
        assert_eq!(
            &by_row.chunks[chunk][base..base + dims],
            &vector(TILE as u64 + 3, dims)[..]
        );
        // Writes after the rewrite, into new tiles and a new chunk (born
        // row-major), and a shrink back.
        for row in n..n + CHUNK_ROWS {
            by_row.grow_to(row + 1);
            by_row.write(row, &vector(row as u64, dims));
        }
        assert_eq!(by_row.by_row, [true, true, true]);
        by_row.write(5, &vector(77, dims));
        by_row.shrink_to(n + 3);
        assert_eq!(by_row.read(5), vector(77, dims));
        assert_eq!(by_row.read(n + 2), vector((n + 2) as u64, dims));
        assert_eq!((by_row.chunks.len(), by_row.by_row.len()), (2, 2));
        assert_eq!(snapshot.read(5), vector(5, dims));
    }

    #[test]
    fn tiles_keep_every_vector_across_chunks_and_removals() {
        for row_major in [false, true] {
            keeps_every_vector(row_major);
        }
    }

    fn keeps_every_vector(row_major: bool) {
        let mut index = Index::with_ann(AnnOptions::exact());
        let mut all: HashMap<String, MemoryRecord> = HashMap::new();
        for i in 0..(2 * CHUNK_ROWS as u64 + 37) {
            let r = record(&format!("r{i}"), "main", Layer::Episodic, vector(i, 24));
            all.insert(r.id.clone(), r.clone());
            index.upsert(r);
        }
        if row_major {
            // Mixed: the first chunk row-major, the others not, and the
            // chunks grown from here on row-major.
            assert_eq!(index.partitions[0].tiles.make_row_major(1), 1);
            assert!(!index.partitions[0].tiles.settled());
        }
        // Remove enough from the front to drop the last chunk, then grow
        // into it again.
        for i in (0..CHUNK_ROWS as u64 + 100).step_by(1) {
            let id = format!("r{i}");
            assert!(index.remove(&id));
            all.remove(&id);
        }
        for i in 0..300u64 {
            let r = record(&format!("n{i}"), "main", Layer::Episodic, vector(10_000 + i, 24));
            all.insert(r.id.clone(), r.clone());
            index.upsert(r);
        }
        assert_eq!(index.len(), all.len());
        for r in all.values() {
            assert_eq!(index.get(&r.id).as_ref(), Some(r), "{}", r.id);
        }
        let q = vector(77, 24);
        let hits = index.search(&query(MemoryFilter::for_user("u"), q.clone(), 5));
        let mut expected: Vec<(f32, String)> = all
            .values()
            .map(|r| (cosine(&r.embedding, &q), r.id.clone()))
            .collect();
        expected.sort_by(|a, b| b.0.total_cmp(&a.0));
        assert_eq!(
            hits.iter().map(|h| h.id.clone()).collect::<Vec<_>>(),
            expected.iter().take(5).map(|e| e.1.clone()).collect::<Vec<_>>()
        );
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

    /// The approximate index behind the record index (feature `ann`).
    #[cfg(feature = "ann")]
    mod graph {
        use super::*;
        use jarvis_model::cosine;
        use proptest::prelude::*;

        fn small(min_rows: usize) -> AnnOptions {
            AnnOptions {
                min_rows,
                ..AnnOptions::default()
            }
        }

        fn ready_rows(index: &Index) -> usize {
            index.graph_stats().0
        }

        #[test]
        fn the_graph_finds_what_the_scan_finds_with_exact_similarities() {
            let dims = 48;
            // Random dense vectors are the hardest case for a graph; a wide
            // search shows the machinery loses nothing on its own.
            let mut index = Index::with_ann(AnnOptions {
                expansion_search: 128,
                ..small(500)
            });
            let mut exact = Index::with_ann(AnnOptions::exact());
            for i in 0..3000u64 {
                let r = record(&format!("r{i}"), "main", Layer::Episodic, dense(i, dims));
                index.upsert(r.clone());
                exact.upsert(r);
            }
            // A small partition of another agent stays a scan.
            for i in 0..40u64 {
                index.upsert(record(
                    &format!("k{i}"),
                    "karen",
                    Layer::Episodic,
                    dense(90_000 + i, dims),
                ));
            }
            index.wait_for_graphs();
            assert_eq!(ready_rows(&index), 3000, "only the large partition has a graph");
            // The graph's partition keeps its rows whole for scoring
            // candidates; the small one stays laid out for scans.
            let layouts: Vec<(&str, Vec<bool>)> = index
                .partitions
                .iter()
                .map(|p| (&*p.key.agent_id, p.tiles.by_row.clone()))
                .collect();
            assert_eq!(layouts, [("main", vec![true; 3]), ("karen", vec![false])]);
            assert!(!exact.partitions[0].tiles.row_major, "no graph, no rewrite");
            let (mut overlap, mut total) = (0usize, 0usize);
            for s in 0..50u64 {
                let q = dense(1_000_000 + s, dims);
                let filter = MemoryFilter::for_user("u").layer(Layer::Episodic, crate::record::Agents::Any);
                let approx = index.search(&query(filter.clone(), q.clone(), 10));
                let truth = exact.search(&query(filter.clone(), q.clone(), 10));
                for hit in &approx {
                    let r = index.get(&hit.id).unwrap();
                    assert!(
                        (hit.similarity - cosine(&r.embedding, &q)).abs() < 1e-4,
                        "{}",
                        hit.id
                    );
                }
                // The small partition is in the results when it should be.
                let truth_ids: Vec<&str> = truth.iter().map(|h| h.id.as_str()).collect();
                overlap += approx
                    .iter()
                    .filter(|h| truth_ids.contains(&h.id.as_str()))
                    .count();
                total += truth.len();
            }
            let recall = overlap as f64 / total as f64;
            assert!(recall >= 0.95, "recall@10 {recall}");
            let mut options = index.ann;
            options.min_rows = 20;
            index.set_ann(options);
            index.wait_for_graphs();
            assert_eq!(
                index.partitions[1].tiles.by_row,
                [true],
                "a lower threshold reaches it"
            );
        }

        #[test]
        fn a_changed_expansion_reaches_graphs_already_built() {
            let dims = 32;
            let narrow = AnnOptions {
                expansion_search: 1,
                ..small(500)
            };
            let mut index = Index::with_ann(narrow);
            let mut exact = Index::with_ann(AnnOptions::exact());
            for i in 0..6000u64 {
                let r = record(&format!("r{i}"), "main", Layer::Episodic, dense(i, dims));
                index.upsert(r.clone());
                exact.upsert(r);
            }
            index.wait_for_graphs();
            assert_eq!(ready_rows(&index), 6000);
            let recall = |index: &Index| {
                let mut found = 0;
                for s in 0..40u64 {
                    let q = dense(2_000_000 + s, dims);
                    let filter = MemoryFilter::for_user("u");
                    let truth = exact.search(&query(filter.clone(), q.clone(), 10));
                    let approx = index.search(&query(filter, q, 10));
                    found += approx
                        .iter()
                        .filter(|h| truth.iter().any(|t| t.id == h.id))
                        .count();
                }
                found as f64 / 400.0
            };
            // Random dense vectors: a walk that keeps only the hits asked
            // for misses some of the true top 10, a wide one none.
            let before = recall(&index);
            index.set_ann(AnnOptions {
                expansion_search: 400,
                ..narrow
            });
            let after = recall(&index);
            assert_eq!(ready_rows(&index), 6000, "the graph stays");
            assert!(before < 0.97, "narrow walk: recall@10 {before}");
            assert!(
                after > 0.99 && after > before,
                "wide walk: recall@10 {after} (narrow {before})"
            );
        }

        /// A graph's memory asks the kernel for transparent huge pages
        /// (`vendor/usearch/PATCHED.md`): walks read it in random order,
        /// and under Linux's default `madvise` policy only memory that
        /// asks gets 2 MB pages.
        #[cfg(target_os = "linux")]
        #[test]
        fn graph_memory_asks_for_huge_pages() {
            if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
                eprintln!("skipped: this kernel has no transparent huge pages");
                return;
            }
            // `hg` in a mapping's `VmFlags` is `MADV_HUGEPAGE`, set whatever
            // the host's policy; nothing else in a test process asks for it.
            let advised = || {
                std::fs::read_to_string("/proc/self/smaps")
                    .unwrap()
                    .lines()
                    .filter(|l| l.starts_with("VmFlags:") && l.split_whitespace().any(|f| f == "hg"))
                    .count()
            };
            let dims = 32;
            let mut index = Index::with_ann(small(500));
            for i in 0..1000u64 {
                index.upsert(record(&format!("r{i}"), "main", Layer::Episodic, dense(i, dims)));
            }
            index.wait_for_graphs();
            assert_eq!(ready_rows(&index), 1000);
            assert!(advised() > 0, "no mapping of the graph asked for huge pages");
        }

        /// Three graphs and a scanned partition, and twelve queries over
        /// them.
        fn several_graphs() -> (Index, Vec<SearchQuery>) {
            let dims = 32;
            let mut index = Index::with_ann(small(300));
            for (agent, layer, seed) in [
                ("main", Layer::Episodic, 0u64),
                ("main", Layer::Semantic, 10_000),
                ("karen", Layer::Episodic, 20_000),
            ] {
                for i in 0..400u64 {
                    index.upsert(record(
                        &format!("{agent}-{layer:?}-{i}"),
                        agent,
                        layer,
                        vector(seed + i, dims),
                    ));
                }
            }
            // A small partition beside them stays a scan.
            for i in 0..30u64 {
                index.upsert(record(
                    &format!("p{i}"),
                    "main",
                    Layer::Procedural,
                    vector(30_000 + i, dims),
                ));
            }
            index.wait_for_graphs();
            assert_eq!(ready_rows(&index), 1200);
            let queries: Vec<SearchQuery> = (0..12u64)
                .map(|s| {
                    let (agent, layer) = [
                        ("main", Layer::Episodic),
                        ("main", Layer::Semantic),
                        ("karen", Layer::Episodic),
                        ("main", Layer::Procedural),
                    ][s as usize % 4];
                    let filter =
                        MemoryFilter::for_user("u").layer(layer, crate::record::Agents::only([agent]));
                    query(filter, vector(1_000_000 + s, dims), 5)
                })
                .collect();
            (index, queries)
        }

        fn ids(hits: &[SearchHit]) -> Vec<(String, f32)> {
            hits.iter().map(|h| (h.id.clone(), h.similarity)).collect()
        }

        #[test]
        fn many_searches_over_several_graphs_answer_as_one_by_one() {
            let (index, queries) = several_graphs();
            let many = index.search_many(&queries);
            assert_eq!(many.len(), queries.len());
            for (q, hits) in queries.iter().zip(&many) {
                assert_eq!(hits.len(), 5);
                assert_eq!(ids(hits), ids(&index.search(q)));
            }
        }

        #[test]
        fn recalls_that_find_the_helper_busy_search_alone_and_answer_the_same() {
            let (index, queries) = several_graphs();
            let one_by_one: Vec<_> = queries.iter().map(|q| ids(&index.search(q))).collect();
            let answers = |many: Vec<Vec<SearchHit>>| many.iter().map(|h| ids(h)).collect::<Vec<_>>();
            // Another recall holds the helper (other tests may hold it for
            // a moment too): this one neither waits for it nor fails.
            let claim = (0..1_000_000)
                .find_map(|_| {
                    let claim = lend();
                    if claim.is_none() {
                        std::thread::yield_now();
                    }
                    claim
                })
                .expect("the helper thread could be claimed");
            assert!(lend().is_none(), "the helper is lent to one recall at a time");
            assert_eq!(answers(index.search_many(&queries)), one_by_one);
            drop(claim);
            // Recalls at once from several threads, some with the helper
            // and some without.
            std::thread::scope(|scope| {
                let workers: Vec<_> = (0..4)
                    .map(|_| {
                        scope.spawn(|| {
                            (0..25)
                                .map(|_| answers(index.search_many(&queries)))
                                .collect::<Vec<_>>()
                        })
                    })
                    .collect();
                for worker in workers {
                    for answer in worker.join().expect("a recall thread panicked") {
                        assert_eq!(answer, one_by_one);
                    }
                }
            });
        }

        #[test]
        fn the_helper_thread_outlives_the_recall_that_started_it() {
            let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
                return; // no procfs: nothing to count threads with
            };
            drop(tasks);
            let helpers = || {
                std::fs::read_dir("/proc/self/task")
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter(|task| {
                        std::fs::read_to_string(task.path().join("comm"))
                            .is_ok_and(|name| name.trim_end() == "jarvis-recall")
                    })
                    .count()
            };
            let (index, queries) = several_graphs();
            if cores() < 2 {
                return; // one core: recall lends nothing
            }
            for _ in 0..3 {
                index.search_many(&queries);
                // One thread, still there after the recall that used it,
                // however many recalls used it.
                assert_eq!(helpers(), 1);
            }
        }

        #[test]
        fn writes_during_a_build_are_caught_up_and_deletes_never_return() {
            let dims = 32;
            let mut index = Index::with_ann(small(200));
            for i in 0..400u64 {
                index.upsert(record(&format!("r{i}"), "main", Layer::Episodic, dense(i, dims)));
            }
            // The build started at the 200th write; everything after it, and
            // these, happened while (or before) it ran.
            for i in 400..450u64 {
                index.upsert(record(&format!("r{i}"), "main", Layer::Episodic, dense(i, dims)));
            }
            for i in [3u64, 250, 420] {
                assert!(index.remove(&format!("r{i}")));
            }
            // An update moves the record to a new vector: the old one must not
            // be found under its id.
            index.upsert(record("r7", "main", Layer::Episodic, dense(7_777, dims)));
            index.wait_for_graphs();
            assert_eq!(ready_rows(&index), 447);
            // A record written now is found at once (from the tail), before
            // any adder ran.
            index.upsert(record("fresh", "main", Layer::Episodic, dense(123_456, dims)));
            let hits = index.search(&query(MemoryFilter::for_user("u"), dense(123_456, dims), 1));
            assert_eq!(hits[0].id, "fresh");
            assert!(index.remove("fresh"));
            for i in [0u64, 199, 200, 399, 449] {
                let hits = index.search(&query(MemoryFilter::for_user("u"), dense(i, dims), 1));
                assert_eq!(hits[0].id, format!("r{i}"), "its own vector finds it");
                assert!(hits[0].similarity > 0.999);
            }
            for i in [3u64, 250, 420] {
                let hits = index.search(&query(MemoryFilter::for_user("u"), dense(i, dims), 20));
                assert!(hits.iter().all(|h| h.id != format!("r{i}")), "r{i} was deleted");
            }
            let hits = index.search(&query(MemoryFilter::for_user("u"), dense(7, dims), 20));
            assert!(
                hits.iter().all(|h| h.id != "r7" || h.similarity < 0.99),
                "the old vector of r7"
            );
            let hits = index.search(&query(MemoryFilter::for_user("u"), dense(7_777, dims), 1));
            assert_eq!(hits[0].id, "r7");
            // Exclusions hold in the graph too.
            let filter = MemoryFilter::for_user("u").excluding(vec!["r0".into()]);
            let hits = index.search(&query(filter, dense(0, dims), 5));
            assert!(hits.iter().all(|h| h.id != "r0"));
            // Shrinking below half the threshold drops the graph.
            for i in 0..450u64 {
                index.remove(&format!("r{i}"));
            }
            assert_eq!(ready_rows(&index), 0);
        }

        /// Scanned while its first graph builds, a partition stays
        /// dimension-major; once the graphs are ready, each write rewrites
        /// at most [`SETTLE_CHUNKS`] chunks row-major, of the partition
        /// written first and then of one only read, and what is found and
        /// how it scores does not change.
        #[test]
        fn partitions_are_rewritten_row_major_a_few_chunks_a_write_once_their_graphs_are_ready() {
            let dims = 16;
            let n = (SETTLE_CHUNKS + 2) * CHUNK_ROWS - 10;
            let mut index = Index::with_ann(AnnOptions::exact());
            for i in 0..n as u64 {
                index.upsert(record(&format!("r{i}"), "main", Layer::Episodic, vector(i, dims)));
            }
            // Another partition, three chunks, never written from here on.
            for i in 0..3 * CHUNK_ROWS as u64 {
                index.upsert(record(
                    &format!("k{i}"),
                    "karen",
                    Layer::Episodic,
                    vector(1 << 30 | i, dims),
                ));
            }
            index.set_ann(small(500));
            // The partitions' own waits: the graphs, without the rewrite.
            for p in 0..2 {
                index.partitions[p].wait(index.next_key, &index.ann);
                assert!(index.partitions[p].ann.is_ready());
                assert!(index.partitions[p].tiles.by_row.iter().all(|&r| !r));
            }
            let queries: Vec<SearchQuery> = ["main", "karen"]
                .map(|agent| {
                    let filter = MemoryFilter::for_user("u").layer(Layer::Episodic, Agents::only([agent]));
                    query(filter, vector(31_337, dims), 10)
                })
                .into();
            let before: Vec<_> = queries.iter().map(|q| ids(&index.search(q))).collect();
            let rewritten = |index: &Index| {
                index
                    .partitions
                    .iter()
                    .map(|p| p.tiles.by_row.iter().filter(|&&r| r).count())
                    .collect::<Vec<_>>()
            };
            index.upsert(record("w0", "main", Layer::Episodic, vector(1 << 40, dims)));
            assert_eq!(
                rewritten(&index),
                [SETTLE_CHUNKS, 0],
                "the written partition first"
            );
            assert!(index.remove("w0"));
            assert_eq!(rewritten(&index), [SETTLE_CHUNKS + 2, SETTLE_CHUNKS - 2]);
            index.upsert(record("w1", "main", Layer::Episodic, vector(1 << 41, dims)));
            assert_eq!(rewritten(&index), [SETTLE_CHUNKS + 2, 3], "all of them");
            assert!(index.partitions.iter().all(|p| p.tiles.settled()));
            assert!(index.remove("w1"));
            let after: Vec<_> = queries.iter().map(|q| ids(&index.search(q))).collect();
            assert_eq!(after, before);
            for i in 0..n as u64 {
                assert_eq!(index.get(&format!("r{i}")).unwrap().embedding, vector(i, dims));
            }
        }

        #[test]
        fn writes_during_a_build_reach_the_graph_through_the_tail() {
            let dims = 24;
            let mut index = Index::with_ann(AnnOptions::exact());
            for i in 0..20_000u64 {
                index.upsert(record(&format!("r{i}"), "main", Layer::Episodic, dense(i, dims)));
            }
            index.set_ann(small(100));
            // Written while the graph of the first 20,000 builds: the tail,
            // scanned exactly until background adders move it into the graph.
            for i in 20_000..25_000u64 {
                index.upsert(record(&format!("r{i}"), "main", Layer::Episodic, dense(i, dims)));
            }
            for i in (0..25_000u64).step_by(1000) {
                index.remove(&format!("r{i}"));
            }
            index.wait_for_graphs();
            assert_eq!(ready_rows(&index), 25_000 - 25);
            let found = (1..25_000u64)
                .step_by(97)
                .filter(|i| {
                    let hits = index.search(&query(MemoryFilter::for_user("u"), dense(*i, dims), 1));
                    hits[0].id == format!("r{i}")
                })
                .count();
            assert!(found >= 255, "{found} of 258 find themselves");
            for i in (0..25_000u64).step_by(1000) {
                let hits = index.search(&query(MemoryFilter::for_user("u"), dense(i, dims), 3));
                assert!(hits.iter().all(|h| h.id != format!("r{i}")));
            }
        }

        /// A partition written once a turn does not start an adder (a
        /// thread) on every write: the tail waits for `ADD_MIN` rows, and
        /// is found by its exact scan meanwhile.
        #[test]
        fn a_tail_written_a_record_at_a_time_is_added_in_batches() {
            use crate::ann::ADD_MIN;
            let dims = 24;
            let mut index = Index::with_ann(small(100));
            for i in 0..200u64 {
                index.upsert(record(&format!("r{i}"), "main", Layer::Episodic, dense(i, dims)));
            }
            index.wait_for_graphs();
            assert_eq!(index.partitions[0].ann.graph_size(), Some(200));
            let last = 200 + ADD_MIN as u64 - 1;
            for i in 200..last {
                index.upsert(record(&format!("r{i}"), "main", Layer::Episodic, dense(i, dims)));
                let hits = index.search(&query(MemoryFilter::for_user("u"), dense(i, dims), 1));
                assert_eq!(hits[0].id, format!("r{i}"), "a tail row is found at once");
                assert!(
                    !index.partitions[0].ann.adding(),
                    "no adder for {} tail rows",
                    i - 199
                );
            }
            assert_eq!(index.partitions[0].ann.graph_size(), Some(200));
            index.upsert(record(
                &format!("r{last}"),
                "main",
                Layer::Episodic,
                dense(last, dims),
            ));
            assert!(
                index.partitions[0].ann.adding(),
                "the {ADD_MIN}th tail row starts one"
            );
            index.wait_for_graphs();
            assert_eq!(index.partitions[0].ann.graph_size(), Some(200 + ADD_MIN));
            // Waiting for the graphs adds a short tail too.
            index.upsert(record("short", "main", Layer::Episodic, dense(9_999, dims)));
            index.wait_for_graphs();
            assert_eq!(index.partitions[0].ann.graph_size(), Some(201 + ADD_MIN));
        }

        /// The graphs' memory may be asked for while an adder writes the
        /// graph (a benchmark asks between turns): it waits for the adder,
        /// rather than reading nodes not written yet (which crashed).
        #[test]
        fn graph_stats_wait_for_the_adder_under_way() {
            use crate::ann::ADD_MIN;
            let dims = 24;
            let mut index = Index::with_ann(small(100));
            let mut next = 0u64;
            let mut write = |index: &mut Index, n: usize| {
                for _ in 0..n {
                    index.upsert(record(
                        &format!("r{next}"),
                        "main",
                        Layer::Episodic,
                        dense(next, dims),
                    ));
                    next += 1;
                }
            };
            write(&mut index, 200);
            index.wait_for_graphs();
            for round in 1..=100 {
                // The last of these starts an adder of `ADD_MIN` rows.
                write(&mut index, ADD_MIN);
                assert!(index.partitions[0].ann.adding(), "round {round}");
                let (rows, bytes) = index.graph_stats();
                assert!(
                    !index.partitions[0].ann.adding(),
                    "round {round}: measured mid-add"
                );
                assert_eq!(rows, 200 + round * ADD_MIN);
                assert!(bytes > 0);
                assert_eq!(
                    index.partitions[0].ann.graph_size(),
                    Some(200 + round * ADD_MIN),
                    "round {round}"
                );
            }
        }

        /// The records as a database would hand them to the loader.
        fn batch(records: &[MemoryRecord]) -> LoadBatch {
            let mut batch = LoadBatch::default();
            for r in records {
                let key = LoadKey {
                    user: r.user.clone(),
                    agent_id: r.agent_id.clone(),
                    layer: r.layer,
                    kind: r.kind.clone(),
                    embedder: r.embedder.clone(),
                    dims: r.embedding.len(),
                };
                let at = match batch.new_keys.iter().position(|k| *k == key) {
                    Some(at) => at,
                    None => {
                        batch.new_keys.push(key);
                        batch.new_keys.len() - 1
                    }
                };
                batch.rows.push(LoadedRow {
                    id: Arc::from(r.id.as_str()),
                    key: at,
                    source: r.source.clone(),
                    text: r.text.clone(),
                    terms: terms(&r.text),
                    metadata: "null".into(),
                    created_at: r.created_at,
                    rehearsal: r.rehearsal,
                    vector: batch.vectors.len(),
                });
                batch.vectors.extend_from_slice(&r.embedding);
            }
            batch
        }

        fn reopen(dir: &Path, records: &[MemoryRecord], options: AnnOptions) -> Index {
            let mut loader = IndexLoader::with_capacity(records.len()).with_graphs(dir);
            loader.add(batch(records));
            loader.finish(options)
        }

        fn graph_files(dir: &Path) -> Vec<String> {
            let mut names: Vec<String> = std::fs::read_dir(dir)
                .map(|entries| {
                    entries
                        .flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            names.sort();
            names
        }

        /// A graph saved by one run serves the next at once: records that
        /// match its nodes keep their place, a record deleted or changed
        /// since the save leaves the graph (and never comes back from it),
        /// records written since are its tail, and the file is written
        /// again without what left.
        #[test]
        fn a_saved_graph_serves_the_next_run_at_once_and_only_what_the_database_holds() {
            let dir = tempfile::tempdir().expect("tempdir");
            let graphs = dir.path().join("memory.sqlite3-graphs");
            let (dims, options) = (24, small(200));
            let mut records: Vec<MemoryRecord> = (0..600u64)
                .map(|i| record(&format!("r{i}"), "main", Layer::Episodic, dense(i, dims)))
                .collect();
            let mut first = IndexLoader::with_capacity(0).with_graphs(&graphs).finish(options);
            for r in &records {
                first.upsert(r.clone());
            }
            first.wait_for_graphs();
            // The store's clean close: whether the graph was first saved
            // at 200 rows or at 600 depends on when its build began.
            first.save_graphs();
            assert_eq!(graph_files(&graphs).len(), 1, "the built graph is saved");
            // A restart finds the graph built again only in the background.
            let cold = reopen(&dir.path().join("none"), &records, options);
            assert!(!cold.partitions[0].ann.is_ready(), "no file, no graph at once");
            drop(first);

            // What happened after the save: one record deleted, one changed,
            // five written.
            let deleted = records.remove(7);
            records[0].embedding = dense(5_000, dims);
            records.extend(
                (600..605u64).map(|i| record(&format!("r{i}"), "main", Layer::Episodic, dense(i, dims))),
            );
            let index = reopen(&graphs, &records, options);
            let part = &index.partitions[0];
            assert!(part.ann.is_ready(), "the saved graph walks without a build");
            assert_eq!(
                part.ann.graph_size(),
                Some(598),
                "the deleted and the changed record left it"
            );
            assert_eq!(
                part.ann.holds(part.rows[0].key),
                Some(false),
                "the changed record is in the tail"
            );
            assert_eq!(index.graph_stats().0, 604);
            let filter = MemoryFilter::for_user("u").layer(Layer::Episodic, crate::record::Agents::Any);
            let hits = index.search(&query(filter.clone(), deleted.embedding.clone(), 10));
            assert!(
                hits.iter().all(|h| h.id != deleted.id),
                "a deleted record never comes back"
            );
            for r in [&records[0], &records[3], &records[602]] {
                let hits = index.search(&query(filter.clone(), r.embedding.clone(), 1));
                assert_eq!(hits[0].id, r.id);
                assert!((hits[0].similarity - 1.0).abs() < 1e-4, "{}: exact scores", r.id);
            }
            // A file that held a record the database no longer has is gone
            // at once and written again, without it, in the background.
            // Whether that save finished before this drop depends on its
            // thread: if it did, the next run restores its 598 nodes and
            // takes the tail in (too little growth for a background save);
            // if not, the next run builds all 604 afresh and saves them.
            // Either way the clean close writes what the graph holds.
            drop(index);
            let mut index = reopen(&graphs, &records, options);
            index.wait_for_graphs();
            index.save_graphs();
            let saved = index.partitions[0]
                .ann
                .file()
                .expect("a file")
                .read()
                .expect("read")
                .expect("saved");
            assert!(!saved.nodes.contains_key(&*deleted.id));
            assert_eq!(
                saved.nodes.len(),
                604,
                "the tail went into the graph and the graph into the file"
            );
        }

        /// A removed record takes its partition's file with it at once
        /// (forgetting leaves nothing of it on disk); the graph is saved
        /// again without it.
        #[test]
        fn a_removal_deletes_the_partitions_file_until_it_is_saved_again() {
            let dir = tempfile::tempdir().expect("tempdir");
            let (dims, options) = (16, small(100));
            let mut index = IndexLoader::with_capacity(0)
                .with_graphs(dir.path())
                .finish(options);
            for i in 0..300u64 {
                index.upsert(record(&format!("r{i}"), "main", Layer::Episodic, dense(i, dims)));
            }
            index.wait_for_graphs();
            let file = index.partitions[0].ann.file().expect("a file").clone();
            assert!(file.path().exists());
            assert!(index.remove("r5"));
            assert!(!file.path().exists(), "deleted with the record");
            index.wait_for_graphs();
            let saved = file.read().expect("read").expect("saved again");
            assert_eq!(saved.nodes.len(), 299);
            assert!(!saved.nodes.contains_key("r5"));
        }

        /// A damaged file, or one saved with other graph settings, is not
        /// used: the store opens and builds the graph again.
        #[test]
        fn damaged_or_foreign_files_are_built_again() {
            let dir = tempfile::tempdir().expect("tempdir");
            let (dims, options) = (16, small(100));
            let records: Vec<MemoryRecord> = (0..300u64)
                .map(|i| record(&format!("r{i}"), "main", Layer::Episodic, dense(i, dims)))
                .collect();
            let mut index = reopen(dir.path(), &records, options);
            index.wait_for_graphs();
            let path = index.partitions[0].ann.file().expect("a file").path().to_owned();
            drop(index);
            let other = AnnOptions {
                connectivity: 12,
                ..options
            };
            assert!(!reopen(dir.path(), &records, other).partitions[0].ann.is_ready());
            let mut bytes = std::fs::read(&path).expect("read");
            let at = bytes.len() / 2;
            bytes[at] ^= 1;
            std::fs::write(&path, &bytes).expect("write");
            std::fs::write(dir.path().join(".x.graph.1.2.tmp"), b"half").expect("write");
            let mut index = reopen(dir.path(), &records, options);
            assert!(!index.partitions[0].ann.is_ready(), "a damaged file is not used");
            assert!(
                !dir.path().join(".x.graph.1.2.tmp").exists(),
                "a crash's leftovers are removed"
            );
            index.wait_for_graphs();
            let hits = index.search(&query(
                MemoryFilter::for_user("u").layer(Layer::Episodic, crate::record::Agents::Any),
                records[42].embedding.clone(),
                1,
            ));
            assert_eq!(hits[0].id, "r42");
            assert!(
                reopen(dir.path(), &records, options).partitions[0].ann.is_ready(),
                "saved again"
            );
        }

        #[derive(Debug, Clone)]
        enum Op {
            Put(u8, u16),
            Delete(u8),
            Search(u16, u8),
            Wait,
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                5 => (any::<u8>(), any::<u16>()).prop_map(|(id, seed)| Op::Put(id, seed)),
                3 => any::<u8>().prop_map(Op::Delete),
                3 => (any::<u16>(), 1u8..12).prop_map(|(seed, k)| Op::Search(seed, k)),
                1 => Just(Op::Wait),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(48))]

            /// Interleaved writes, deletes and searches, with graphs built in
            /// the background at a tiny threshold: a search only ever returns
            /// records that exist, with their current vector's similarity, and
            /// never one that was deleted or the old vector of one updated.
            #[test]
            fn a_forgotten_record_never_comes_back(ops in proptest::collection::vec(op(), 1..400)) {
                let dims = 16;
                let mut index = Index::with_ann(small(24));
                let mut model: HashMap<String, Vec<f32>> = HashMap::new();
                let mut deleted: std::collections::HashSet<String> = Default::default();
                for op in ops {
                    match op {
                        Op::Put(id, seed) => {
                            let id = format!("m{}", id % 64);
                            let v = dense(seed as u64, dims);
                            index.upsert(record(&id, "main", Layer::Episodic, v.clone()));
                            deleted.remove(&id);
                            model.insert(id, v);
                        }
                        Op::Delete(id) => {
                            let id = format!("m{}", id % 64);
                            let key = index
                                .by_id
                                .get(id.as_str())
                                .map(|&(p, r)| (p, index.partitions[p].rows[r].key));
                            prop_assert_eq!(index.remove(&id), model.remove(&id).is_some());
                            if let Some((p, key)) = key {
                                // Out of the graph itself, not only filtered out.
                                prop_assert_ne!(index.partitions[p].ann.holds(key), Some(true));
                            }
                            deleted.insert(id);
                        }
                        Op::Search(seed, k) => {
                            let q = dense(seed as u64 + 100_000, dims);
                            let hits = index.search(&query(MemoryFilter::for_user("u"), q.clone(), k as usize));
                            prop_assert!(hits.len() <= model.len().min(k as usize));
                            for hit in &hits {
                                prop_assert!(!deleted.contains(&hit.id), "{} was deleted", hit.id);
                                let v = model.get(&hit.id);
                                prop_assert!(v.is_some(), "{} does not exist", hit.id);
                                let want = cosine(v.unwrap(), &q);
                                prop_assert!((hit.similarity - want).abs() < 1e-4, "{}: {} vs {}", hit.id, hit.similarity, want);
                            }
                            // The best hit is the true best while the scan
                            // answers; the graph is approximate, so only the
                            // membership and similarity are checked then.
                            if ready_rows(&index) == 0 && !model.is_empty() {
                                let best = model.values().map(|v| cosine(v, &q)).fold(f32::MIN, f32::max);
                                prop_assert!((hits[0].similarity - best).abs() < 1e-5);
                            }
                        }
                        Op::Wait => index.wait_for_graphs(),
                    }
                }
                index.wait_for_graphs();
                prop_assert_eq!(index.len(), model.len());
                // Reach is approximate (see `ann.rs`, churn); nearly every
                // live record finds itself.
                let found = model
                    .values()
                    .filter(|v| index.search(&query(MemoryFilter::for_user("u"), (*v).clone(), 1))[0].similarity > 0.999)
                    .count();
                prop_assert!(found * 10 >= model.len() * 9, "{found} of {} find themselves", model.len());
                for id in &deleted {
                    prop_assert!(index.get(id).is_none());
                }
            }
        }
    }
}
