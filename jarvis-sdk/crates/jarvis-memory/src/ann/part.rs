//! [`PartAnn`], a partition's approximate index: the row of each key, the
//! graph built, extended and searched beside the partition's writes.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::state::{Adder, Build, Graph, State, outcome, spawn};
use super::{ADD_BATCH, ADD_MIN, AnnOptions, Rows};
use crate::graph_file::GraphFile;

/// Hashes row keys for the key-to-row map a search looks every candidate
/// up in: one multiply instead of SipHash (at 10,000 records, a search's
/// lookups of its ~50 candidates took 8 µs instead of 13). Keys are the
/// index's own counter, never input, so nothing can choose them to collide.
#[derive(Default, Clone, Copy)]
pub(super) struct KeyHasher(u64);

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
#[derive(Default)]
pub(crate) struct PartAnn {
    pub(super) rows: HashMap<u64, u32, BuildHasherDefault<KeyHasher>>,
    pub(super) state: Mutex<State>,
    /// Where the graph is kept between runs (stores with a file).
    pub(super) file: Option<GraphFile>,
}

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

pub(super) fn new_graph(
    dims: usize,
    options: &AnnOptions,
    capacity: usize,
    threads: usize,
) -> Result<Graph, String> {
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
pub(super) fn build(
    rows: &(dyn Rows + Sync),
    options: &AnnOptions,
    cancel: &AtomicBool,
) -> Result<Graph, String> {
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

impl PartAnn {
    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A row with `key` was added at `row`.
    pub(crate) fn pushed(&mut self, key: u64, row: usize) {
        self.rows.insert(key, row as u32);
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        if state.graph.is_some() && key >= state.covered {
            state.tail.push(key);
        }
    }

    /// The row with `key` moved to `row`.
    pub(crate) fn moved(&mut self, key: u64, row: usize) {
        self.rows.insert(key, row as u32);
    }

    /// The row with `key` is gone. When the graph held it, the
    /// partition's file goes too (see `graph_file.rs`, Forgetting).
    pub(crate) fn removed(&mut self, key: u64) {
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
    pub(crate) fn poll<R: Rows + Send + Sync + 'static>(
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
    pub(crate) fn wait<R: Rows + Send + Sync + 'static>(
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
    pub(super) fn finish_adder(&self, state: &mut State, block: bool) -> bool {
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
    pub(crate) fn holds(&self, key: u64) -> Option<bool> {
        self.state().graph.as_ref().map(|g| g.contains(key))
    }

    /// Whether an adder is under way (tests).
    #[cfg(test)]
    pub(crate) fn adding(&self) -> bool {
        self.state().adder.is_some()
    }

    /// The live nodes in the graph, if there is one (tests).
    #[cfg(test)]
    pub(crate) fn graph_size(&self) -> Option<usize> {
        self.state().graph.as_ref().map(|g| g.size())
    }

    /// Whether searches walk a graph.
    pub(crate) fn is_ready(&self) -> bool {
        self.state().walks()
    }

    /// The graph's memory (quantised vectors and links), in bytes. Waits
    /// for an adder under way first: usearch's accounting reads every
    /// node, and one being added may not be written yet (reading it
    /// crashed the process).
    pub(crate) fn memory_bytes(&self) -> usize {
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
    pub(crate) fn search(
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
