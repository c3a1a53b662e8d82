//! One partition of the index ([`Partition`]): its key, its rows and what
//! they keep of their metadata, its vectors, its word index and its graph.

use serde_json::Value;
use std::path::Path;
use std::sync::Arc;

use super::tiles::Tiles;
use crate::ann::{AnnOptions, PartAnn, Rows};
use crate::graph_file::GraphFile;
use crate::lexical::{Postings, Terms, terms};
use crate::record::{Layer, META_PREV, META_WHEN, MemoryRecord, metadata_days};
use jarvis_common::Timestamp;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct PartKey {
    pub(super) user: Arc<str>,
    pub(super) agent_id: Arc<str>,
    pub(super) layer: Layer,
    pub(super) kind: Arc<str>,
    pub(super) embedder: Arc<str>,
    pub(super) dims: usize,
}

/// A record's metadata: as written, or as JSON text read from a database
/// and parsed only when the record is handed out (most never are).
#[derive(Debug, Clone)]
pub(super) enum Metadata {
    Value(Value),
    Json(Box<str>),
}

impl Metadata {
    /// Metadata read as JSON text (`null` kept as a value).
    pub(super) fn from_json(text: Box<str>) -> Self {
        if &*text == "null" {
            Metadata::Value(Value::Null)
        } else {
            Metadata::Json(text)
        }
    }

    pub(super) fn value(&self) -> Value {
        match self {
            Metadata::Value(v) => v.clone(),
            // Checked to parse when it was loaded.
            Metadata::Json(text) => serde_json::from_str(text).unwrap_or(Value::Null),
        }
    }

    /// What the index keeps of it: the episode before ([`META_PREV`]) and
    /// the days stated ([`META_WHEN`]); `None` when it says neither (most
    /// records, whose JSON text is then not parsed).
    pub(super) fn links(&self) -> Option<Box<Links>> {
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
pub(super) struct Links {
    /// The episode before it in its session.
    prev: Option<Arc<str>>,
    /// The days its text states (their midnights).
    stated: Box<[Timestamp]>,
}

#[derive(Debug, Clone)]
pub(super) struct Row {
    pub(super) id: Arc<str>,
    /// Unique in the index, never reused: a new record and every update
    /// take the next one (the graph's key for this row's vector).
    pub(super) key: u64,
    pub(super) source: String,
    pub(super) text: String,
    pub(super) metadata: Metadata,
    pub(super) created_at: Timestamp,
    pub(super) rehearsal: u32,
    /// From the metadata, when it links the row (most do not).
    pub(super) links: Option<Box<Links>>,
}

impl Row {
    pub(super) fn prev(&self) -> Option<&Arc<str>> {
        self.links.as_ref()?.prev.as_ref()
    }

    pub(super) fn stated(&self) -> &[Timestamp] {
        self.links.as_ref().map_or(&[], |l| &l.stated)
    }
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
pub(super) struct Partition {
    pub(super) key: PartKey,
    pub(super) rows: Vec<Row>,
    pub(super) tiles: Tiles,
    /// The rows' terms, row for row.
    pub(super) lexical: Postings,
    pub(super) ann: PartAnn,
}

impl Partition {
    /// An empty partition; with `graphs`, its graph is kept in a file
    /// there between runs.
    pub(super) fn new(key: PartKey, graphs: Option<&Path>) -> Self {
        // A unit struct without the `ann` feature, the graph's state with it.
        #[allow(clippy::default_constructed_unit_structs)]
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

    pub(super) fn push(&mut self, row: Row, vector: &[f32]) -> usize {
        let terms = terms(&row.text);
        self.push_with_terms(row, vector, &terms)
    }

    /// [`push`](Self::push) of a row whose terms are already taken.
    pub(super) fn push_with_terms(&mut self, row: Row, vector: &[f32], terms: &Terms) -> usize {
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
    pub(super) fn replace(&mut self, index: usize, mut row: Row, vector: &[f32]) {
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
    pub(super) fn swap_remove(&mut self, row: usize) -> Option<Arc<str>> {
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
    pub(super) fn settle(&mut self, budget: usize, options: &AnnOptions) -> usize {
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
    pub(super) fn poll(&self, next_key: u64, options: &AnnOptions) {
        self.ann.poll(&self.live(), || self.snapshot(), next_key, options);
    }

    /// Blocks until no graph work of this partition is under way.
    pub(super) fn wait(&self, next_key: u64, options: &AnnOptions) {
        self.ann.wait(&self.live(), || self.snapshot(), next_key, options);
    }

    /// Writes its graph to its file if that changed since the last save.
    pub(super) fn save_graph(&self) {
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

    pub(super) fn record(&self, row: usize) -> MemoryRecord {
        let mut record = self.record_text(row);
        record.embedding = self.vector(row);
        record
    }

    /// The record without its embedding (left empty).
    pub(super) fn record_text(&self, row: usize) -> MemoryRecord {
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
