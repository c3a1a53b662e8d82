//! Rebuilding an index from a database at start ([`IndexLoader`]): records
//! read in batches, vectors copied straight into the tiles, saved graphs
//! taken back.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use super::Index;
use super::partition::{Metadata, PartKey, Partition, Row};
use crate::ann::AnnOptions;
use crate::graph_file::{Saved, fingerprint};
use crate::lexical::Terms;
use crate::record::Layer;
use jarvis_common::Timestamp;

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
        crate::graph_file::clean(dir);
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
