//! Keeping a partition's graph between runs: saving it to its file in the
//! background, and taking a saved graph back at open.

use std::sync::Arc;

use super::part::{PartAnn, new_graph};
use super::state::{Graph, Saver, State, outcome, spawn};
use super::{AnnOptions, Rows, SAVE_MIN_GROWTH};
use crate::graph_file::{self, GraphFile, Node, Saved, Shape};

/// A graph from a saved file's bytes, ready to be searched and added to.
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

impl PartAnn {
    /// Whether the graph should be written to the partition's file: it
    /// has not been since it was built or lost a row, or it grew by a
    /// quarter (with `growth` false, as at a clean close, by any amount).
    pub(super) fn save_due(&self, state: &State, growth: bool) -> bool {
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
    pub(super) fn start_saver<R: Rows + Send + Sync + 'static>(&self, state: &mut State, snapshot: R) {
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
    pub(super) fn finish_saver(&self, state: &mut State, block: bool) -> bool {
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
    pub(crate) fn set_file(&mut self, file: GraphFile) {
        self.file = Some(file);
    }

    /// The partition's file, if it has one.
    pub(crate) fn file(&self) -> Option<&GraphFile> {
        self.file.as_ref()
    }

    /// Takes back a graph saved by an earlier run, once every row has its
    /// key (the rows that matched a node have the node's key): nodes no
    /// row has any more leave the graph (and the file, when any did, is
    /// deleted, to be saved again without them), rows at or above what it
    /// covered are its tail. A file saved with other settings, or one the
    /// graph library refuses, is left unused.
    pub(crate) fn restore(&mut self, saved: Saved, dims: usize, options: &AnnOptions) {
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
    pub(crate) fn save_now<R: Rows + Send + Sync + 'static>(&self, snapshot: impl Fn() -> R) {
        let mut state = self.state();
        if state.failed || !self.finish_adder(&mut state, true) || !self.finish_saver(&mut state, true) {
            return;
        }
        if self.save_due(&state, false) {
            self.start_saver(&mut state, snapshot());
            self.finish_saver(&mut state, true);
        }
    }
}
