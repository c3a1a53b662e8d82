//! Approximate nearest-neighbour recall for large partitions of the record
//! index ([`AnnOptions`]; the graph itself needs the `ann` feature, on by
//! default).
//!
//! **When.** A partition (one user, agent, layer, kind and embedding space;
//! see `index.rs`) at or above [`AnnOptions::min_rows`] records gets an
//! HNSW graph (the `usearch` crate, inner-product metric, vectors quantised
//! to `i8` in the graph). The graph only proposes candidates: each is
//! scored again against the `f32` vector in the partition's tiles, so a
//! hit's similarity is the exact dot product and the floor and ranking see
//! exact values. Below the threshold, and until its first graph is ready, a
//! partition is scanned exactly; a partition that shrinks below half the
//! threshold drops its graph.
//!
//! **Nothing waits for the graph.** The first graph is built on a
//! background thread from a snapshot: the partition's vector chunks are
//! shared (`Arc`, copied on the next write to each) with the row keys, so
//! taking it costs microseconds and the store answers by exact scan
//! meanwhile. Rows written after the graph's snapshot form its *tail*: a
//! search walks the graph for the rows it covers and scans the tail
//! exactly, and a background adder moves the tail into the graph in
//! batches. A write therefore costs no graph insertion, and a search sees
//! every record at once.
//!
//! **Kept in step.** Every row has a key that is never reused (an update
//! that changes the vector takes a new key); removals remove from the graph
//! at once (and again when an addition that was under way finishes), and a
//! search only accepts keys the partition still maps to a row and the
//! graph covers, so a deleted record cannot come back from the graph.
//!
//! **Churn.** A removed node stays in an HNSW graph as a connector and its
//! slot is reused by a later add, which slowly costs the graph reach (a
//! live node nobody links to any more cannot be found). Once the removals
//! since the last build pass a quarter of the partition, a new graph is
//! built in the background while the old one keeps answering.
//!
//! **Kept between runs.** A store with a file (SQLite) gives each
//! partition a graph file (`graph_file.rs`): a graph is saved in the
//! background when first built and whenever it has grown by a quarter since
//! it was last saved, and at a clean close; a store that reopens takes the
//! saved graph back instead of building it again. While a save reads the
//! graph, no addition runs and removals wait (searches skip removed keys
//! anyway, since only keys mapped to a row are accepted).
//!
//! **Files.** `ann/part.rs`: a partition's graph, kept in step with its
//! rows and searched; `ann/state.rs`: the graph's state and the work under
//! way in the background; `ann/saving.rs`: the graph kept between runs.

#[cfg(not(feature = "ann"))]
use super::graph_file::{GraphFile, Saved};

#[cfg(feature = "ann")]
mod part;
#[cfg(feature = "ann")]
mod saving;
#[cfg(feature = "ann")]
mod state;

#[cfg(feature = "ann")]
pub(super) use part::PartAnn;

/// How recall uses approximate nearest-neighbour graphs (feature `ann`,
/// on by default; without it every search is an exact scan).
///
/// The defaults were measured with `recall_bench` (see docs/performance.md, Memory):
/// from about 5,000 records a partition's graph search beats its exact
/// scan, and with these settings the graphs' recall@10 against exact
/// search at 100,000 records is above 0.95.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnnOptions {
    /// Partitions with at least this many records get a graph.
    /// `usize::MAX` turns graphs off (every search exact).
    pub min_rows: usize,
    /// Links per node (HNSW `M`).
    pub connectivity: usize,
    /// Candidates considered when adding a node (`ef_construction`).
    pub expansion_add: usize,
    /// Candidates considered when searching (`ef`); a search asking for
    /// more hits than this considers that many. Read at every search, so
    /// changing it (`set_ann` on the stores) applies to graphs already
    /// built.
    pub expansion_search: usize,
    /// Threads that build one graph in the background.
    pub build_threads: usize,
}

impl Default for AnnOptions {
    fn default() -> Self {
        Self {
            min_rows: 5_000,
            connectivity: 16,
            expansion_add: 64,
            expansion_search: 48,
            build_threads: 1,
        }
    }
}

impl AnnOptions {
    /// Every search an exact scan, whatever the partition's size.
    pub fn exact() -> Self {
        Self {
            min_rows: usize::MAX,
            ..Self::default()
        }
    }
}

/// What a partition's graph needs to know of it: its dimensions and, by
/// row, keys and vectors.
#[cfg_attr(not(feature = "ann"), allow(dead_code))]
pub(super) trait Rows {
    /// Vector length.
    fn dims(&self) -> usize;
    /// How many rows.
    fn len(&self) -> usize;
    /// The key of `row`.
    fn key(&self, row: usize) -> u64;
    /// Writes the vector of `row` into `out` (`dims` values).
    fn vector_into(&self, row: usize, out: &mut [f32]);
    /// The record id of `row`.
    fn id(&self, row: usize) -> std::sync::Arc<str>;
}

/// A partition's approximate index; a no-op without the `ann` feature.
#[cfg(not(feature = "ann"))]
#[derive(Debug, Default)]
pub(super) struct PartAnn;

#[cfg(not(feature = "ann"))]
impl PartAnn {
    pub(super) fn pushed(&mut self, _key: u64, _row: usize) {}
    pub(super) fn moved(&mut self, _key: u64, _row: usize) {}
    pub(super) fn removed(&mut self, _key: u64) {}
    pub(super) fn poll<R: Rows + Send + 'static>(
        &self,
        _rows: &dyn Rows,
        _snapshot: impl Fn() -> R,
        _next_key: u64,
        _options: &AnnOptions,
    ) {
    }
    pub(super) fn wait<R: Rows + Send + 'static>(
        &self,
        _rows: &dyn Rows,
        _snapshot: impl Fn() -> R,
        _next_key: u64,
        _options: &AnnOptions,
    ) {
    }
    pub(super) fn search(
        &self,
        _query: &[f32],
        _count: usize,
        _extra: usize,
        _expansion: usize,
        _accept: &dyn Fn(usize) -> bool,
        _score: &dyn Fn(&[usize]) -> Vec<f32>,
    ) -> Option<Vec<(usize, f32)>> {
        None
    }
    pub(super) fn is_ready(&self) -> bool {
        false
    }
    pub(super) fn memory_bytes(&self) -> usize {
        0
    }
    pub(super) fn set_file(&mut self, _file: GraphFile) {}
    pub(super) fn file(&self) -> Option<&GraphFile> {
        None
    }
    pub(super) fn restore(&mut self, _saved: Saved, _dims: usize, _options: &AnnOptions) {}
    pub(super) fn save_now<R: Rows + Send + Sync + 'static>(&self, _snapshot: impl Fn() -> R) {}
}

/// How much a graph grows past its last save before it is saved again: a
/// quarter, and at least this many nodes.
#[cfg(feature = "ann")]
const SAVE_MIN_GROWTH: usize = ADD_BATCH;

/// Tail rows an adder takes at most at once.
#[cfg(feature = "ann")]
const ADD_BATCH: usize = 4_096;

/// Tail rows an adder waits for before it starts (unless a caller waits
/// for the graph to take everything). Starting one is a thread spawn,
/// 40–80 µs on a small machine, which a partition written once a turn
/// would pay on every recall; a tail this short costs a search a few
/// microseconds to scan.
#[cfg(feature = "ann")]
pub(super) const ADD_MIN: usize = 32;

#[cfg(all(test, feature = "ann"))]
mod tests {
    use super::part::{KeyHasher, build};
    use super::state::Build;
    use super::*;
    use std::hash::{BuildHasher, BuildHasherDefault};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, mpsc};

    /// Consecutive keys (as the index hands them out) and keys a stride
    /// apart spread evenly over a table's buckets (low bits) and tags
    /// (high bits).
    #[test]
    fn consecutive_keys_spread_over_buckets_and_tags() {
        for stride in [1u64, 1024] {
            spread((0..16_384u64).map(|i| 1_000_000 + i * stride));
        }
    }

    fn spread(keys: impl Iterator<Item = u64>) {
        let build = BuildHasherDefault::<KeyHasher>::default();
        let (mut buckets, mut tags) = (vec![0u32; 1024], vec![0u32; 128]);
        for key in keys {
            let h = build.hash_one(key);
            buckets[(h & 1023) as usize] += 1;
            tags[(h >> 57) as usize] += 1;
        }
        // 16 per bucket and 128 per tag on average.
        let (min, max) = (buckets.iter().min(), buckets.iter().max());
        assert!(
            buckets.iter().all(|&n| (4..=40).contains(&n)),
            "buckets {min:?}..{max:?}"
        );
        let (min, max) = (tags.iter().min(), tags.iter().max());
        assert!(
            tags.iter().all(|&n| (64..=256).contains(&n)),
            "tags {min:?}..{max:?}"
        );
    }

    /// Rows whose vectors count the row up the first dimensions; the
    /// `reads` counter tells how many a build has read.
    struct Counted {
        n: usize,
        reads: std::sync::atomic::AtomicUsize,
    }

    impl Rows for Counted {
        fn dims(&self) -> usize {
            8
        }
        fn len(&self) -> usize {
            self.n
        }
        fn key(&self, row: usize) -> u64 {
            row as u64
        }
        fn vector_into(&self, row: usize, out: &mut [f32]) {
            self.reads.fetch_add(1, Ordering::Relaxed);
            out.fill(0.0);
            out[row % 8] = 1.0;
            out[(row / 8) % 8] += 0.5;
        }
        fn id(&self, row: usize) -> Arc<str> {
            Arc::from(format!("r{row}"))
        }
    }

    /// A build nobody will take stops at its next row: dropping the
    /// `Build` (its partition gone) raises the flag the build checks.
    #[test]
    fn a_build_nobody_will_take_stops() {
        let rows = Counted {
            n: 1_000,
            reads: Default::default(),
        };
        let options = AnnOptions::default();
        assert_eq!(
            build(&rows, &options, &AtomicBool::new(false)).map(|g| g.size()),
            Ok(1_000)
        );
        let read = rows.reads.swap(0, Ordering::Relaxed);
        assert_eq!(read, 1_000);

        let cancel = Arc::new(AtomicBool::new(false));
        let (_tx, done) = mpsc::channel();
        drop(Build {
            done,
            from_key: 0,
            removed: Vec::new(),
            cancel: cancel.clone(),
        });
        assert!(cancel.load(Ordering::Relaxed), "dropping a build cancels it");
        assert!(build(&rows, &options, &cancel).is_err());
        assert_eq!(
            rows.reads.load(Ordering::Relaxed),
            0,
            "a cancelled build reads no row"
        );
    }
}
