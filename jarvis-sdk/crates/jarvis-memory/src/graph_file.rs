//! A partition's recall graph kept on disk between runs (feature `ann`),
//! so a store that reopens walks its graphs at once instead of scanning
//! while it builds them again (minutes at a million records).
//!
//! **Where.** Beside the database, in `<database>-graphs/` (for the
//! default store `memory.sqlite3-graphs/`): one file per partition, named
//! by a digest of the partition (user, agent, layer, kind, embedding
//! space), written to a temporary file, flushed and renamed, so a crash
//! leaves the previous file or the new one, never half of one.
//!
//! **What.** A header (the partition, the graph's settings, the key below
//! which it holds every row), one line per node (its key, the record's id
//! and a fingerprint of the record's vector) and the graph as the graph
//! library serialises it; a checksum over all of it comes first.
//!
//! **Trust nothing.** The database stays the truth. Reopening gives a
//! record its old key only when its id and vector fingerprint match a
//! node; a node no record matches (forgotten, changed) leaves the graph
//! before the first search, and rows the file does not cover are the
//! graph's tail, scanned exactly and added in the background. A file that
//! is damaged, of another version, another partition or other settings is
//! ignored (the graph is built again, as without a file).
//!
//! **Forgetting.** A record that leaves a partition takes the partition's
//! file with it (deleted at once; the graph is saved again in the
//! background), so a forgotten record's id and quantised vector do not
//! stay on disk.
#![cfg_attr(not(feature = "ann"), allow(dead_code))]

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use jarvis_common::StagedFile;

/// First bytes of a graph file.
const MAGIC: &[u8; 4] = b"JRVG";

/// Format version of the files this build writes and reads.
const VERSION: u32 = 1;

/// Bytes before the checksummed part: magic, version, checksum.
const PREFIX: usize = 16;

/// A multiplier with well-spread bits (the golden ratio in 64 bits).
const SPREAD: u64 = 0x9E37_79B9_7F4A_7C15;

fn mix(h: u64, word: u64) -> u64 {
    (h ^ word).wrapping_mul(SPREAD).rotate_left(29)
}

fn fold(lanes: [u64; 4], len: u64) -> u64 {
    let mut h = len.wrapping_mul(SPREAD);
    for lane in lanes {
        h = mix(h, lane);
    }
    h ^ (h >> 31)
}

/// A 64-bit digest of `bytes` (not cryptographic: it finds damage, not
/// forgery), four words at a time.
pub(super) fn checksum(bytes: &[u8]) -> u64 {
    let mut lanes = [1u64, 2, 3, 4];
    let mut chunks = bytes.chunks_exact(32);
    for chunk in &mut chunks {
        for (i, lane) in lanes.iter_mut().enumerate() {
            let mut word = [0u8; 8];
            word.copy_from_slice(&chunk[i * 8..i * 8 + 8]);
            *lane = mix(*lane, u64::from_le_bytes(word));
        }
    }
    for (i, rest) in chunks.remainder().chunks(8).enumerate() {
        let mut word = [0u8; 8];
        word[..rest.len()].copy_from_slice(rest);
        lanes[i] = mix(lanes[i], u64::from_le_bytes(word));
    }
    fold(lanes, bytes.len() as u64)
}

/// A 64-bit digest of a vector's bit patterns (a changed vector, however
/// slightly, changes it).
pub(super) fn fingerprint(vector: &[f32]) -> u64 {
    let mut lanes = [1u64, 2, 3, 4];
    let mut chunks = vector.chunks_exact(8);
    let pair = |a: f32, b: f32| u64::from(a.to_bits()) | (u64::from(b.to_bits()) << 32);
    for chunk in &mut chunks {
        for (i, lane) in lanes.iter_mut().enumerate() {
            *lane = mix(*lane, pair(chunk[i * 2], chunk[i * 2 + 1]));
        }
    }
    for (i, rest) in chunks.remainder().chunks(2).enumerate() {
        lanes[i] = mix(lanes[i], pair(rest[0], rest.get(1).copied().unwrap_or(0.0)));
    }
    fold(lanes, vector.len() as u64)
}

/// The folder of a database's graph files: `<database>-graphs`.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub(crate) fn graphs_dir(database: &Path) -> PathBuf {
    let mut name = database.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push("-graphs");
    database.with_file_name(name)
}

/// Removes what a crash while saving left in `dir` (temporary files);
/// errors are logged, never fatal (the folder is a cache).
pub(crate) fn clean(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name.to_string_lossy().ends_with(".tmp")
            && let Err(e) = std::fs::remove_file(entry.path())
        {
            tracing::warn!(path = %entry.path().display(), error = %e, "memory: a half-written recall graph could not be removed");
        }
    }
}

/// A partition's graph file: where it is and which partition it is of.
#[derive(Debug, Clone)]
pub(super) struct GraphFile {
    path: PathBuf,
    /// The partition, spelt out (checked against the file's header).
    partition: String,
    /// Deletions of the file so far, shared by every clone: a write
    /// started before a deletion must not put the file back.
    deletions: Arc<Mutex<u64>>,
}

/// The graph's settings a file must share with the store reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Shape {
    pub(super) dims: usize,
    pub(super) connectivity: usize,
    pub(super) expansion_add: usize,
}

/// What a graph file holds, read back.
pub(super) struct Saved {
    pub(super) shape: Shape,
    /// The graph holds every live row with a key below this.
    pub(super) covered: u64,
    /// By record id: the node's key and the vector's fingerprint.
    pub(super) nodes: HashMap<Box<str>, (u64, u64)>,
    /// The graph as the library serialised it.
    pub(super) graph: Vec<u8>,
}

/// A node to save: its key, its vector's fingerprint and its record's id.
pub(super) type Node = (u64, u64, std::sync::Arc<str>);

/// Appends `bytes`' length (`u32`) and `bytes`.
fn put_str(out: &mut Vec<u8>, bytes: &[u8]) -> io::Result<()> {
    let len = u32::try_from(bytes.len()).map_err(|_| io::Error::other("a name too long to save"))?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(bytes);
    Ok(())
}

/// Reads from a byte slice, failing cleanly at its end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("the file ends early".into());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u32(&mut self) -> Result<u32, String> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(b))
    }

    fn u64(&mut self) -> Result<u64, String> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }

    fn str(&mut self) -> Result<&'a str, String> {
        let len = self.u32()? as usize;
        std::str::from_utf8(self.take(len)?).map_err(|_| "a name is not UTF-8".into())
    }

    fn size(&mut self) -> Result<usize, String> {
        usize::try_from(self.u64()?).map_err(|_| "a size too large".into())
    }
}

impl GraphFile {
    /// The file of the partition spelt `partition` in `dir`.
    pub(super) fn new(dir: &Path, partition: String) -> Self {
        let name = format!("{:016x}.graph", checksum(partition.as_bytes()));
        Self {
            path: dir.join(name),
            partition,
            deletions: Arc::default(),
        }
    }

    /// Where it is.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// How many times the file was deleted so far: what [`Self::write`]
    /// is given, taken when its content was read from the graph.
    pub(super) fn deletions(&self) -> u64 {
        *self.deletions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes the graph `graph_bytes` long (serialised into the buffer by
    /// `serialise`) with its nodes, replacing the file atomically, unless
    /// the file was deleted since [`Self::deletions`] answered `deletions`
    /// (the content may hold what was forgotten meanwhile): then nothing
    /// is written and the answer is false.
    pub(super) fn write(
        &self,
        deletions: u64,
        shape: Shape,
        covered: u64,
        nodes: &[Node],
        graph_bytes: usize,
        serialise: impl FnOnce(&mut [u8]) -> Result<(), String>,
    ) -> Result<bool, String> {
        let ids: usize = nodes.iter().map(|n| n.2.len() + 20).sum();
        let mut out = Vec::with_capacity(PREFIX + 128 + self.partition.len() + ids + graph_bytes);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
        let io = |e: io::Error| e.to_string();
        put_str(&mut out, self.partition.as_bytes()).map_err(io)?;
        for n in [shape.dims, shape.connectivity, shape.expansion_add] {
            out.extend_from_slice(&(n as u64).to_le_bytes());
        }
        out.extend_from_slice(&covered.to_le_bytes());
        out.extend_from_slice(&(nodes.len() as u64).to_le_bytes());
        for (key, fingerprint, id) in nodes {
            out.extend_from_slice(&key.to_le_bytes());
            out.extend_from_slice(&fingerprint.to_le_bytes());
            put_str(&mut out, id.as_bytes()).map_err(io)?;
        }
        out.extend_from_slice(&(graph_bytes as u64).to_le_bytes());
        let start = out.len();
        out.resize(start + graph_bytes, 0);
        serialise(&mut out[start..])?;
        let sum = checksum(&out[PREFIX..]);
        out[8..PREFIX].copy_from_slice(&sum.to_le_bytes());
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let staged = StagedFile::write(&self.path, &out).map_err(io)?;
        let gate = self.deletions.lock().unwrap_or_else(|e| e.into_inner());
        if *gate != deletions {
            return Ok(false);
        }
        staged.commit().map_err(io)?;
        Ok(true)
    }

    /// Reads the file back: `Ok(None)` when there is none, `Err` when it
    /// cannot be used (damaged, another version or partition).
    pub(super) fn read(&self) -> Result<Option<Saved>, String> {
        let bytes = match std::fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.to_string()),
        };
        let mut r = Reader(&bytes);
        if r.take(4)? != MAGIC {
            return Err("not a recall graph file".into());
        }
        let version = r.u32()?;
        if version != VERSION {
            return Err(format!("format version {version}, this build reads {VERSION}"));
        }
        let sum = r.u64()?;
        if checksum(r.0) != sum {
            return Err("the checksum does not match (the file is damaged)".into());
        }
        if r.str()? != self.partition {
            return Err("the file is of another partition".into());
        }
        let shape = Shape {
            dims: r.size()?,
            connectivity: r.size()?,
            expansion_add: r.size()?,
        };
        let covered = r.u64()?;
        let count = r.size()?;
        // Each node takes at least 20 bytes: a count beyond that is damage.
        if count > r.0.len() / 20 {
            return Err("the node count is larger than the file".into());
        }
        let mut nodes = HashMap::with_capacity(count);
        for _ in 0..count {
            let key = r.u64()?;
            let fingerprint = r.u64()?;
            if key >= covered {
                return Err("a node's key is beyond what the graph covers".into());
            }
            nodes.insert(Box::from(r.str()?), (key, fingerprint));
        }
        let len = r.size()?;
        let graph = r.take(len)?.to_vec();
        Ok(Some(Saved {
            shape,
            covered,
            nodes,
            graph,
        }))
    }

    /// Deletes the file (when there is one); failures are logged.
    pub(super) fn remove(&self) {
        let mut gate = self.deletions.lock().unwrap_or_else(|e| e.into_inner());
        *gate += 1;
        match std::fs::remove_file(&self.path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "memory: a recall graph file could not be deleted")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn shape() -> Shape {
        Shape {
            dims: 4,
            connectivity: 16,
            expansion_add: 64,
        }
    }

    fn nodes() -> Vec<Node> {
        vec![(3, 33, Arc::from("ep-1")), (7, 77, Arc::from("기억-2"))]
    }

    fn written(dir: &Path) -> GraphFile {
        let file = GraphFile::new(dir, "user\0agent".into());
        let wrote = file.write(file.deletions(), shape(), 9, &nodes(), 5, |out| {
            out.copy_from_slice(b"graph");
            Ok(())
        });
        assert_eq!(wrote, Ok(true));
        file
    }

    /// A write whose content was read before the file was deleted (a
    /// record was forgotten meanwhile) leaves no file and no temporary
    /// one; a write started after the deletion puts it back.
    #[test]
    fn a_write_from_before_a_deletion_is_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = written(dir.path());
        let before = file.deletions();
        file.clone().remove();
        assert!(!file.path().exists());
        let wrote = file.write(before, shape(), 9, &nodes(), 5, |out| {
            out.copy_from_slice(b"stale");
            Ok(())
        });
        assert_eq!(wrote, Ok(false));
        let left: Vec<_> = std::fs::read_dir(dir.path()).expect("list").collect();
        assert!(left.is_empty(), "nothing is left: {left:?}");
        let again = file.write(file.deletions(), shape(), 9, &nodes(), 5, |out| {
            out.copy_from_slice(b"graph");
            Ok(())
        });
        assert_eq!(wrote, Ok(false));
        assert_eq!(again, Ok(true));
        assert_eq!(file.read().expect("read").expect("a file").graph, b"graph");
    }

    #[test]
    fn what_is_written_reads_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let saved = written(dir.path()).read().expect("read").expect("a file");
        assert_eq!(saved.shape, shape());
        assert_eq!(saved.covered, 9);
        assert_eq!(saved.nodes.len(), 2);
        assert_eq!(saved.nodes.get("기억-2"), Some(&(7, 77)));
        assert_eq!(saved.graph, b"graph");
        let other = GraphFile::new(dir.path(), "user\0other".into());
        assert!(
            other.read().expect("read").is_none(),
            "another partition has no file yet"
        );
    }

    /// Any flipped byte and any truncation is refused with a reason, never
    /// a panic or a graph built from garbage.
    #[test]
    fn damaged_or_cut_files_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = written(dir.path());
        let good = std::fs::read(file.path()).expect("read");
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x20;
            std::fs::write(file.path(), &bad).expect("write");
            assert!(file.read().is_err(), "a flipped byte at {at} was accepted");
        }
        for len in 0..good.len() {
            std::fs::write(file.path(), &good[..len]).expect("write");
            assert!(file.read().is_err(), "a file cut at {len} was accepted");
        }
    }

    #[test]
    fn fingerprints_tell_vectors_apart() {
        let a = [0.5f32, -0.25, 0.125, 0.0, 1.0, 0.75, -1.0, 0.5, 0.3];
        let mut b = a;
        b[8] = f32::from_bits(b[8].to_bits() ^ 1);
        assert_ne!(fingerprint(&a), fingerprint(&b));
        assert_ne!(fingerprint(&a[..8]), fingerprint(&a));
        assert_eq!(fingerprint(&a), fingerprint(&a.clone()));
    }
}
