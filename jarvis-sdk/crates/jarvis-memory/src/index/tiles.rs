//! A partition's vectors ([`Tiles`]): chunks of 16-row tiles, dimension-major
//! or row-major, and the dot products that score them against a query.

use std::sync::Arc;

/// Rows per tile.
pub(super) const TILE: usize = 16;

/// Rows per chunk of tiles (the unit a snapshot shares).
pub(super) const CHUNK_ROWS: usize = 1024;

/// A partition's vectors: `ceil(rows / TILE)` tiles of `dims × TILE`
/// values, in chunks of [`CHUNK_ROWS`] rows, each chunk's tiles
/// dimension-major or (once the partition walks a graph) row-major. See
/// the `index` module docs.
#[derive(Debug, Clone, Default)]
pub(super) struct Tiles {
    pub(super) dims: usize,
    /// New chunks are row-major, and older ones are being rewritten so.
    pub(super) row_major: bool,
    /// By chunk: its tiles' rows one after the other (a row's values
    /// contiguous) rather than dimension by dimension.
    pub(super) by_row: Vec<bool>,
    pub(super) chunks: Vec<Arc<Vec<f32>>>,
}

impl Tiles {
    pub(super) fn new(dims: usize) -> Self {
        Self {
            dims,
            row_major: false,
            by_row: Vec::new(),
            chunks: Vec::new(),
        }
    }

    /// The chunk of `row`, where its dimension 0 is in it, and the step
    /// from one of its dimensions to the next.
    pub(super) fn slot(&self, row: usize) -> (usize, usize, usize) {
        let (chunk, within) = (row / CHUNK_ROWS, row % CHUNK_ROWS);
        let tile = (within / TILE) * self.dims * TILE;
        if self.by_row[chunk] {
            (chunk, tile + (within % TILE) * self.dims, 1)
        } else {
            (chunk, tile + within % TILE, TILE)
        }
    }

    pub(super) fn write(&mut self, row: usize, vector: &[f32]) {
        if self.dims == 0 {
            return;
        }
        let (chunk, base, step) = self.slot(row);
        let chunk = Arc::make_mut(&mut self.chunks[chunk]);
        for (j, value) in vector.iter().enumerate().take(self.dims) {
            chunk[base + j * step] = *value;
        }
    }

    pub(super) fn read_into(&self, row: usize, out: &mut [f32]) {
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
    pub(super) fn dot(&self, row: usize, sparse: &[(usize, f32)]) -> f32 {
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
    pub(super) fn settled(&self) -> bool {
        self.row_major && self.by_row.iter().all(|&by_row| by_row)
    }

    /// The 16 scores of one tile (`tile`, of chunk `chunk`) for a query
    /// given by its non-zero dimensions.
    pub(super) fn scores(&self, chunk: usize, tile: &[f32], sparse: &[(usize, f32)]) -> [f32; TILE] {
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
    pub(super) fn make_row_major(&mut self, budget: usize) -> usize {
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
    pub(super) fn dot_rows(&self, rows: &[usize], sparse: &[(usize, f32)]) -> Vec<f32> {
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
    pub(super) fn holds(&self, row: usize, vector: &[f32]) -> bool {
        let (chunk, base, step) = self.slot(row);
        let chunk = &self.chunks[chunk];
        vector.len() == self.dims
            && vector
                .iter()
                .enumerate()
                .all(|(j, v)| chunk[base + j * step] == *v)
    }

    pub(super) fn read(&self, row: usize) -> Vec<f32> {
        let mut out = vec![0.0; self.dims];
        if self.dims > 0 {
            self.read_into(row, &mut out);
        }
        out
    }

    /// Makes room for `rows` rows (adds a tile when `rows - 1` starts one).
    pub(super) fn grow_to(&mut self, rows: usize) {
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
    pub(super) fn shrink_to(&mut self, rows: usize) {
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
