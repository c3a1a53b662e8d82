//! Searching the index: the top-k heap, the exact scan of a partition's
//! tiles, the walk of its graph, the word side beside them, and several
//! searches shared with a helper thread.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::atomic::{self, AtomicBool};

use super::Index;
use super::partition::Partition;
use super::tiles::{CHUNK_ROWS, TILE};
use crate::record::{SearchHit, SearchQuery};

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
pub(super) fn sparse_of(vector: &[f32]) -> Vec<(usize, f32)> {
    vector
        .iter()
        .enumerate()
        .filter(|(_, v)| **v != 0.0 && v.is_finite())
        .map(|(j, v)| (j, *v))
        .collect()
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

/// The cores this process may use, read once (on Linux the standard
/// library reads cgroup files on every call, which costs more than a
/// small search).
pub(super) fn cores() -> usize {
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
pub(super) struct Lent(&'static Helper);

impl Drop for Lent {
    fn drop(&mut self) {
        self.0.busy.store(false, atomic::Ordering::Release);
    }
}

/// Claims the helper thread (started on first use); `None` when it is
/// busy or could not be started.
pub(super) fn lend() -> Option<Lent> {
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
