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

#[cfg(feature = "ann")]
use std::collections::HashMap;
#[cfg(feature = "ann")]
use std::hash::{BuildHasherDefault, Hasher};
#[cfg(feature = "ann")]
use std::sync::atomic::{AtomicBool, Ordering};
#[cfg(feature = "ann")]
use std::sync::{Arc, Mutex, mpsc};

#[cfg(feature = "ann")]
use super::graph_file::{self, Node, Shape};
use super::graph_file::{GraphFile, Saved};

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

#[cfg(feature = "ann")]
type Graph = usearch::Index;

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

/// A partition's graph, the build and the addition under way.
#[cfg(feature = "ann")]
#[derive(Default)]
struct State {
    /// What searches walk, when there is one (shared with an adder).
    graph: Option<Arc<Graph>>,
    /// The graph holds every live row with a key below this; rows at or
    /// above it are the tail.
    covered: u64,
    /// Keys of the live rows at or above `covered` (scanned exactly).
    tail: Vec<u64>,
    /// A graph being built from a snapshot (the first, or a rebuild after
    /// churn while `graph` keeps answering).
    build: Option<Build>,
    /// Tail rows being added to `graph`.
    adder: Option<Adder>,
    /// Rows removed from `graph` since it was built.
    churn: usize,
    /// Building or updating failed: exact scan from now on.
    failed: bool,
    /// `graph` being written to the partition's file.
    saver: Option<Saver>,
    /// The size of `graph` when it was last saved (0: not saved since it
    /// was built or changed by a removal).
    saved: usize,
    /// The partition's file may exist (saved, being saved, or loaded).
    written: bool,
    /// Saving failed once: not tried again for this partition.
    save_failed: bool,
}

#[cfg(feature = "ann")]
struct Build {
    done: mpsc::Receiver<Result<Graph, String>>,
    /// Keys at or above it were written after the snapshot.
    from_key: u64,
    /// Keys removed since the snapshot.
    removed: Vec<u64>,
    /// Set when nobody will take the graph (see `Drop`).
    cancel: Arc<AtomicBool>,
}

/// A build whose partition is gone (its store closed, or the graph no
/// longer wanted) stops at its next row instead of spending minutes of a
/// core on a graph nobody will search.
#[cfg(feature = "ann")]
impl Drop for Build {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
    }
}

/// A graph being written to its file on a background thread.
#[cfg(feature = "ann")]
struct Saver {
    /// Answers the size of the graph it saved.
    done: mpsc::Receiver<Result<usize, String>>,
    /// The graph it reads.
    graph: Arc<Graph>,
    /// Keys removed while it ran: removed from `graph` once it is done.
    removed: Vec<u64>,
}

#[cfg(feature = "ann")]
struct Adder {
    done: mpsc::Receiver<Result<(), String>>,
    /// When it is done, the graph covers the keys below this.
    to_key: u64,
    /// Keys removed while it ran (it may have added them after).
    removed: Vec<u64>,
}

/// Hashes row keys for the key-to-row map a search looks every candidate
/// up in: one multiply instead of SipHash (at 10,000 records, a search's
/// lookups of its ~50 candidates took 8 µs instead of 13). Keys are the
/// index's own counter, never input, so nothing can choose them to collide.
#[cfg(feature = "ann")]
#[derive(Default, Clone, Copy)]
struct KeyHasher(u64);

#[cfg(feature = "ann")]
impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, key: u64) {
        // Fibonacci hashing: the multiply spreads consecutive keys evenly.
        self.0 = (self.0.rotate_left(5) ^ key).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn finish(&self) -> u64 {
        // A product's low bits are its least mixed: rotated, its top bits
        // (38–63) become the bucket and bits 31–37 the table's tag (the top
        // seven on a 64-bit target).
        self.0.rotate_left(26)
    }
}

/// A partition's approximate index: the row of each key, and the graph's
/// state. See the module docs.
#[cfg(feature = "ann")]
#[derive(Default)]
pub(super) struct PartAnn {
    rows: HashMap<u64, u32, BuildHasherDefault<KeyHasher>>,
    state: Mutex<State>,
    /// Where the graph is kept between runs (stores with a file).
    file: Option<GraphFile>,
}

#[cfg(feature = "ann")]
impl std::fmt::Debug for PartAnn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state();
        f.debug_struct("PartAnn")
            .field("rows", &self.rows.len())
            .field("graph", &state.graph.as_ref().map(|g| g.size()))
            .field("tail", &state.tail.len())
            .field("building", &state.build.is_some())
            .field("adding", &state.adder.is_some())
            .field("churn", &state.churn)
            .field("failed", &state.failed)
            .field("saving", &state.saver.is_some())
            .field("saved", &state.saved)
            .finish()
    }
}

#[cfg(feature = "ann")]
fn new_graph(dims: usize, options: &AnnOptions, capacity: usize, threads: usize) -> Result<Graph, String> {
    let graph = usearch::Index::new(&usearch::IndexOptions {
        dimensions: dims,
        metric: usearch::MetricKind::IP,
        quantization: usearch::ScalarKind::I8,
        connectivity: options.connectivity,
        expansion_add: options.expansion_add,
        // Searches set their own `ef` (see `PartAnn::search`).
        expansion_search: 1,
        multi: false,
    })
    .map_err(|e| e.to_string())?;
    graph
        .reserve_capacity_and_threads(capacity.max(64), threads.max(2))
        .map_err(|e| e.to_string())?;
    Ok(graph)
}

/// Builds a graph over every row of `rows` (on `threads` threads).
#[cfg(feature = "ann")]
fn build(rows: &(dyn Rows + Sync), options: &AnnOptions, cancel: &AtomicBool) -> Result<Graph, String> {
    let (dims, n) = (rows.dims(), rows.len());
    let threads = options.build_threads.clamp(1, 64);
    let graph = new_graph(dims, options, n + n / 8, threads + 1)?;
    let failure: Mutex<Option<String>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (graph, failure) = (&graph, &failure);
            scope.spawn(move || {
                let mut vector = vec![0.0f32; dims];
                for row in (t..n).step_by(threads) {
                    if cancel.load(Ordering::Relaxed) {
                        *failure.lock().unwrap_or_else(|e| e.into_inner()) = Some("cancelled".into());
                        return;
                    }
                    rows.vector_into(row, &mut vector);
                    if let Err(e) = graph.add(rows.key(row), &vector) {
                        *failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.to_string());
                        return;
                    }
                }
            });
        }
    });
    match failure.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(e),
        None => Ok(graph),
    }
}

/// A graph from a saved file's bytes, ready to be searched and added to.
#[cfg(feature = "ann")]
fn load_graph(saved: &Saved, options: &AnnOptions) -> Result<Graph, String> {
    let threads = options.build_threads.clamp(1, 64) + 1;
    let graph = new_graph(saved.shape.dims, options, 0, threads)?;
    graph.load_from_buffer(&saved.graph).map_err(|e| e.to_string())?;
    if graph.dimensions() != saved.shape.dims || graph.size() > saved.nodes.len() {
        return Err("the graph does not match its nodes".into());
    }
    let size = graph.size();
    graph
        .reserve_capacity_and_threads((size + size / 8).max(64), threads.max(2))
        .map_err(|e| e.to_string())?;
    Ok(graph)
}

#[cfg(feature = "ann")]
fn spawn<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<mpsc::Receiver<Result<T, String>>, String> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("jarvis-recall-graph".into())
        .spawn(move || {
            let _ = tx.send(work());
        })
        .map_err(|e| e.to_string())?;
    Ok(rx)
}

/// What a background thread answered: `None` while it works (with
/// `block`, waits for it instead).
#[cfg(feature = "ann")]
fn outcome<T>(done: &mpsc::Receiver<Result<T, String>>, block: bool) -> Option<Result<T, String>> {
    let ended = || Err("the background thread ended".to_owned());
    if block {
        return Some(done.recv().unwrap_or_else(|_| ended()));
    }
    match done.try_recv() {
        Ok(result) => Some(result),
        Err(mpsc::TryRecvError::Empty) => None,
        Err(mpsc::TryRecvError::Disconnected) => Some(ended()),
    }
}

#[cfg(feature = "ann")]
impl State {
    fn fail(&mut self, what: &str, error: &str) {
        tracing::warn!(
            error,
            "memory: {what}; exact search from now on for this partition"
        );
        *self = State {
            failed: true,
            written: self.written,
            ..State::default()
        };
    }

    /// Whether searches walk the graph (there is one and no failure).
    fn walks(&self) -> bool {
        self.graph.is_some() && !self.failed
    }
}

#[cfg(feature = "ann")]
impl PartAnn {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A row with `key` was added at `row`.
    pub(super) fn pushed(&mut self, key: u64, row: usize) {
        self.rows.insert(key, row as u32);
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        if state.graph.is_some() && key >= state.covered {
            state.tail.push(key);
        }
    }

    /// The row with `key` moved to `row`.
    pub(super) fn moved(&mut self, key: u64, row: usize) {
        self.rows.insert(key, row as u32);
    }

    /// The row with `key` is gone. When the graph held it, the
    /// partition's file goes too (see `graph_file.rs`, Forgetting).
    pub(super) fn removed(&mut self, key: u64) {
        self.rows.remove(&key);
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(build) = &mut state.build {
            build.removed.push(key);
        }
        if let Some(adder) = &mut state.adder {
            adder.removed.push(key);
        }
        if key >= state.covered
            && let Some(at) = state.tail.iter().position(|&k| k == key)
        {
            state.tail.swap_remove(at);
        }
        if key < state.covered || state.saver.is_some() {
            state.saved = 0;
            if state.written
                && let Some(file) = &self.file
            {
                file.remove();
                state.written = false;
            }
        }
        if let Some(saver) = &mut state.saver {
            saver.removed.push(key);
            if state.graph.as_ref().is_some_and(|g| Arc::ptr_eq(g, &saver.graph)) {
                // Removed once the save has read the graph.
                return;
            }
        }
        if let Some(graph) = &state.graph {
            // Churn counts what leaves the graph, not tail rows it never held.
            match graph.remove(key) {
                Ok(removed) => state.churn += removed,
                Err(e) => state.fail("the recall graph could not remove a record", &e.to_string()),
            }
        }
    }

    /// Moves finished work in; starts a build when the partition reached
    /// the threshold or its graph has churned past a quarter of its rows,
    /// and an adder when the tail holds [`ADD_MIN`] rows; drops the graph when the
    /// partition shrank below half the threshold. `snapshot` is called only
    /// to start a build; `next_key` is the key the next written row gets.
    pub(super) fn poll<R: Rows + Send + Sync + 'static>(
        &self,
        rows: &dyn Rows,
        snapshot: impl Fn() -> R,
        next_key: u64,
        options: &AnnOptions,
    ) {
        let mut state = self.state();
        self.step(&mut state, rows, &snapshot, next_key, options, false);
    }

    /// Blocks until no build or addition is under way and the tail is in
    /// the graph (for tests and benchmarks).
    pub(super) fn wait<R: Rows + Send + Sync + 'static>(
        &self,
        rows: &dyn Rows,
        snapshot: impl Fn() -> R,
        next_key: u64,
        options: &AnnOptions,
    ) {
        let mut state = self.state();
        loop {
            self.step(&mut state, rows, &snapshot, next_key, options, true);
            if state.failed || (state.build.is_none() && state.adder.is_none() && state.saver.is_none()) {
                return;
            }
        }
    }

    /// One step of [`poll`](Self::poll); with `block`, waits for the work
    /// under way to finish first.
    fn step<R: Rows + Send + Sync + 'static>(
        &self,
        state: &mut State,
        rows: &dyn Rows,
        snapshot: &dyn Fn() -> R,
        next_key: u64,
        options: &AnnOptions,
        block: bool,
    ) {
        if state.failed {
            return;
        }
        if let Some(build) = &state.build {
            match outcome(&build.done, block) {
                Some(result) => self.install(state, result),
                // The tail waits for the new graph.
                None => return,
            }
        }
        if !self.finish_adder(state, block) || state.failed {
            return;
        }
        if !self.finish_saver(state, block) || state.failed {
            return;
        }
        let len = rows.len();
        if len < options.min_rows / 2 || rows.dims() == 0 {
            state.graph = None;
            state.tail.clear();
            return;
        }
        let rebuild = match &state.graph {
            None => len >= options.min_rows,
            Some(_) => state.churn > len / 4,
        };
        if rebuild {
            let snapshot = snapshot();
            let options = *options;
            let cancel = Arc::new(AtomicBool::new(false));
            let cancelled = cancel.clone();
            match spawn(move || build(&snapshot, &options, &cancelled)) {
                Ok(done) => {
                    state.build = Some(Build {
                        done,
                        from_key: next_key,
                        removed: Vec::new(),
                        cancel,
                    })
                }
                Err(e) => state.fail("could not start building a recall graph", &e),
            }
            return;
        }
        if state.tail.len() >= ADD_MIN || (block && !state.tail.is_empty()) {
            self.start_adder(state, rows, next_key);
        }
        if state.adder.is_none() && self.save_due(state, true) {
            self.start_saver(state, snapshot());
        }
    }

    /// Whether the graph should be written to the partition's file: it
    /// has not been since it was built or lost a row, or it grew by a
    /// quarter (with `growth` false, as at a clean close, by any amount).
    fn save_due(&self, state: &State, growth: bool) -> bool {
        let Some(graph) = &state.graph else {
            return false;
        };
        if self.file.is_none() || state.save_failed || state.saver.is_some() {
            return false;
        }
        let size = graph.size();
        match growth {
            true => state.saved == 0 || size >= state.saved + (state.saved / 4).max(SAVE_MIN_GROWTH),
            false => state.saved != size,
        }
    }

    /// Starts writing the graph to the partition's file on a background
    /// thread, with the id and vector fingerprint of every row it covers
    /// (from `snapshot`, taken now). Until it is done no adder starts and
    /// removals from this graph wait.
    fn start_saver<R: Rows + Send + Sync + 'static>(&self, state: &mut State, snapshot: R) {
        let (Some(graph), Some(file)) = (state.graph.clone(), self.file.clone()) else {
            return;
        };
        let covered = state.covered;
        let shape = Shape {
            dims: snapshot.dims(),
            connectivity: graph.connectivity(),
            expansion_add: graph.expansion_add(),
        };
        let saving = graph.clone();
        // Taken under the state's lock, so a removal after this point
        // (which deletes the file) keeps the save from putting it back.
        let deletions = file.deletions();
        let work = move || {
            let mut vector = vec![0.0f32; shape.dims];
            let mut nodes: Vec<Node> = Vec::with_capacity(snapshot.len());
            for row in 0..snapshot.len() {
                let key = snapshot.key(row);
                if key < covered {
                    snapshot.vector_into(row, &mut vector);
                    nodes.push((key, graph_file::fingerprint(&vector), snapshot.id(row)));
                }
            }
            let size = saving.size();
            file.write(
                deletions,
                shape,
                covered,
                &nodes,
                saving.serialized_length(),
                |out| saving.save_to_buffer(out).map_err(|e| e.to_string()),
            )?;
            Ok(size)
        };
        match spawn(work) {
            Ok(done) => {
                state.written = true;
                state.saver = Some(Saver {
                    done,
                    graph,
                    removed: Vec::new(),
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "memory: could not start saving a recall graph");
                state.save_failed = true;
            }
        }
    }

    /// Takes in the save under way once it has finished (with `block`,
    /// waits for it): removes from the graph what was removed meanwhile
    /// (such a removal deleted the file and kept the save from writing
    /// it). False while it runs.
    fn finish_saver(&self, state: &mut State, block: bool) -> bool {
        let Some(saver) = &state.saver else {
            return true;
        };
        let Some(result) = outcome(&saver.done, block) else {
            return false;
        };
        let Some(saver) = state.saver.take() else {
            return true;
        };
        let same = state.graph.as_ref().is_some_and(|g| Arc::ptr_eq(g, &saver.graph));
        if same {
            for &key in &saver.removed {
                match saver.graph.remove(key) {
                    Ok(removed) => state.churn += removed,
                    Err(e) => {
                        state.fail("the recall graph could not remove a record", &e.to_string());
                        break;
                    }
                }
            }
        }
        match result {
            // The removal deleted the file, and the save did not put it
            // back (`GraphFile::write`): the next save writes it anew.
            Ok(_) if !saver.removed.is_empty() => {
                state.written = false;
                state.saved = 0;
            }
            Ok(size) if same => state.saved = size,
            Ok(_) => {}
            Err(e) => {
                let path = self.file.as_ref().map(|f| f.path().display().to_string());
                tracing::warn!(error = %e, path, "memory: a recall graph could not be saved; it will be built again at the next start");
                state.save_failed = true;
            }
        }
        true
    }

    /// The partition's file, where its graph is kept between runs.
    pub(super) fn set_file(&mut self, file: GraphFile) {
        self.file = Some(file);
    }

    /// The partition's file, if it has one.
    pub(super) fn file(&self) -> Option<&GraphFile> {
        self.file.as_ref()
    }

    /// Takes back a graph saved by an earlier run, once every row has its
    /// key (the rows that matched a node have the node's key): nodes no
    /// row has any more leave the graph (and the file, when any did, is
    /// deleted, to be saved again without them), rows at or above what it
    /// covered are its tail. A file saved with other settings, or one the
    /// graph library refuses, is left unused.
    pub(super) fn restore(&mut self, saved: Saved, dims: usize, options: &AnnOptions) {
        let shape = Shape {
            dims,
            connectivity: options.connectivity,
            expansion_add: options.expansion_add,
        };
        if saved.shape != shape {
            tracing::info!(
                "memory: a saved recall graph has other settings ({:?}, now {shape:?}); building it again",
                saved.shape
            );
            return;
        }
        let graph = match load_graph(&saved, options) {
            Ok(graph) => graph,
            Err(e) => {
                tracing::warn!(error = %e, "memory: a saved recall graph could not be loaded; building it again");
                return;
            }
        };
        let mut removed = 0;
        for &(key, _) in saved.nodes.values() {
            if !self.rows.contains_key(&key) {
                match graph.remove(key) {
                    Ok(n) => removed += n,
                    Err(e) => {
                        tracing::warn!(error = %e, "memory: a saved recall graph could not be brought up to date; building it again");
                        return;
                    }
                }
            }
        }
        if removed > 0
            && let Some(file) = &self.file
        {
            file.remove();
        }
        let covered = saved.covered;
        let size = graph.size();
        *self.state.get_mut().unwrap_or_else(|e| e.into_inner()) = State {
            graph: Some(Arc::new(graph)),
            covered,
            tail: self.rows.keys().copied().filter(|&k| k >= covered).collect(),
            churn: removed,
            saved: if removed == 0 { size } else { 0 },
            written: removed == 0,
            ..State::default()
        };
    }

    /// Writes the graph to the partition's file now if it changed since
    /// it was last saved (a clean close), after the work under way.
    pub(super) fn save_now<R: Rows + Send + Sync + 'static>(&self, snapshot: impl Fn() -> R) {
        let mut state = self.state();
        if state.failed || !self.finish_adder(&mut state, true) || !self.finish_saver(&mut state, true) {
            return;
        }
        if self.save_due(&state, false) {
            self.start_saver(&mut state, snapshot());
            self.finish_saver(&mut state, true);
        }
    }

    /// Makes a finished build the graph searches walk: removes what was
    /// removed since its snapshot; the rows written since are its tail.
    fn install(&self, state: &mut State, result: Result<Graph, String>) {
        let Some(build) = state.build.take() else {
            return;
        };
        let graph = match result {
            Ok(graph) => graph,
            Err(e) => return state.fail("building a recall graph failed", &e),
        };
        for &key in &build.removed {
            if let Err(e) = graph.remove(key) {
                return state.fail("building a recall graph failed", &e.to_string());
            }
        }
        state.graph = Some(Arc::new(graph));
        state.covered = build.from_key;
        state.tail = self
            .rows
            .keys()
            .copied()
            .filter(|&k| k >= build.from_key)
            .collect();
        state.churn = 0;
        state.saved = 0;
        // An adder of the old graph no longer matters.
        state.adder = None;
    }

    /// Takes in the adder under way once it has finished (with `block`,
    /// waits for it); false while it still runs or when it failed.
    fn finish_adder(&self, state: &mut State, block: bool) -> bool {
        let Some(adder) = &state.adder else {
            return true;
        };
        match outcome(&adder.done, block) {
            Some(Ok(())) => {
                self.added(state);
                true
            }
            Some(Err(e)) => {
                state.fail("adding to a recall graph failed", &e);
                false
            }
            None => false,
        }
    }

    /// An adder finished: the graph covers what it added.
    fn added(&self, state: &mut State) {
        let Some(adder) = state.adder.take() else {
            return;
        };
        if let Some(graph) = &state.graph {
            for &key in &adder.removed {
                match graph.remove(key) {
                    Ok(removed) => state.churn += removed,
                    Err(e) => return state.fail("adding to a recall graph failed", &e.to_string()),
                }
            }
        }
        state.covered = adder.to_key;
        let covered = state.covered;
        state.tail.retain(|&k| k >= covered);
    }

    /// Starts adding the oldest tail rows (up to [`ADD_BATCH`]) to the
    /// graph on a background thread; searches go on meanwhile.
    fn start_adder(&self, state: &mut State, rows: &dyn Rows, next_key: u64) {
        let Some(graph) = state.graph.clone() else {
            return;
        };
        state.tail.sort_unstable();
        let batch: Vec<u64> = state.tail.iter().copied().take(ADD_BATCH).collect();
        // Once these are in, the graph covers every key below the first
        // tail key left (or below the next key, when none is left).
        let to_key = state.tail.get(batch.len()).copied().unwrap_or(next_key);
        let dims = rows.dims();
        let mut vectors = vec![0.0f32; batch.len() * dims];
        for (i, key) in batch.iter().enumerate() {
            if let Some(&row) = self.rows.get(key) {
                rows.vector_into(row as usize, &mut vectors[i * dims..(i + 1) * dims]);
            }
        }
        let wanted = graph.size() + batch.len();
        if wanted > graph.capacity()
            && let Err(e) = graph.reserve(wanted + wanted / 4)
        {
            return state.fail("the recall graph could not grow", &e.to_string());
        }
        let work = move || {
            for (i, key) in batch.iter().enumerate() {
                graph
                    .add(*key, &vectors[i * dims..(i + 1) * dims])
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        };
        match spawn(work) {
            Ok(done) => {
                state.adder = Some(Adder {
                    done,
                    to_key,
                    removed: Vec::new(),
                })
            }
            Err(e) => state.fail("could not start adding to a recall graph", &e),
        }
    }

    /// Whether the graph holds `key` (tests).
    #[cfg(test)]
    pub(super) fn holds(&self, key: u64) -> Option<bool> {
        self.state().graph.as_ref().map(|g| g.contains(key))
    }

    /// Whether an adder is under way (tests).
    #[cfg(test)]
    pub(super) fn adding(&self) -> bool {
        self.state().adder.is_some()
    }

    /// The live nodes in the graph, if there is one (tests).
    #[cfg(test)]
    pub(super) fn graph_size(&self) -> Option<usize> {
        self.state().graph.as_ref().map(|g| g.size())
    }

    /// Whether searches walk a graph.
    pub(super) fn is_ready(&self) -> bool {
        self.state().walks()
    }

    /// The graph's memory (quantised vectors and links), in bytes. Waits
    /// for an adder under way first: usearch's accounting reads every
    /// node, and one being added may not be written yet (reading it
    /// crashed the process).
    pub(super) fn memory_bytes(&self) -> usize {
        let mut state = self.state();
        self.finish_adder(&mut state, true);
        state.graph.as_ref().map_or(0, |g| g.memory_usage())
    }

    /// The `count` rows nearest `query` that `accept` takes (`extra`: how
    /// many it may turn away), as (row, exact similarity by `score`, which
    /// scores a set of rows at once), when
    /// there is a graph: the graph's candidates for the rows it covers and
    /// every tail row; `None` means "scan". The walk keeps `expansion`
    /// candidates (`ef`) or `count + extra` if that is more.
    pub(super) fn search(
        &self,
        query: &[f32],
        count: usize,
        extra: usize,
        expansion: usize,
        accept: &dyn Fn(usize) -> bool,
        score: &dyn Fn(&[usize]) -> Vec<f32>,
    ) -> Option<Vec<(usize, f32)>> {
        let state = self.state();
        if !state.walks() {
            return None;
        }
        let graph = state.graph.as_ref()?;
        let covered = state.covered;
        // Filtered after the walk rather than during it (a call back into
        // Rust per visited node costs more than it saves): the graph holds
        // no removed key, and the keys an adder is adding are in the tail;
        // `extra` covers what `accept` turns away.
        // The walk's `ef` is the larger of the graph's own setting and the
        // hits asked for, so asking for `expansion` hits sets it per search
        // (the graph is created with the smallest setting).
        let found = graph.search(query, (count + extra).max(expansion)).ok()?;
        let rows: Vec<usize> = found
            .keys
            .iter()
            .take(count + extra)
            .filter(|&&key| key < covered)
            .chain(&state.tail)
            .filter_map(|key| self.rows.get(key).map(|&row| row as usize))
            .filter(|&row| accept(row))
            .collect();
        let scores = score(&rows);
        Some(rows.into_iter().zip(scores).collect())
    }
}

#[cfg(all(test, feature = "ann"))]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

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
