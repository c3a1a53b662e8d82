//! The physical floor of a durable turn on this disk, sampled after each
//! turn of the fsync conditions: an overwrite in a synced file, then `fdatasync`.

use std::io::Write as _;
use std::path::Path;
use std::time::Instant;

/// The least a durable turn can cost on this disk: what the sessions'
/// write-ahead log pays for a turn's block, an overwrite of a turn's bytes
/// in a file whose blocks already exist and are synced (so `fdatasync`
/// flushes data, never the file's size or its block map), at the next
/// offset, wrapping around at the end as the log does.
pub(crate) struct Floor {
    file: std::fs::File,
    record: Vec<u8>,
    at: u64,
}

impl Floor {
    /// The size of the file, as the write-ahead log preallocates its own.
    const BYTES: u64 = 8 << 20;

    /// A file in `dir` of [`Self::BYTES`] of real zeros (not a hole),
    /// synced, and a record of `bytes` bytes to write in it.
    pub(crate) fn new(dir: &Path, bytes: usize) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(dir.join("floor.bin"))
            .unwrap();
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..Self::BYTES / zeros.len() as u64 {
            file.write_all(&zeros).unwrap();
        }
        file.sync_all().unwrap();
        let record = vec![b'x'; bytes.clamp(1, Self::BYTES as usize)];
        Self { file, record, at: 0 }
    }
}

/// One overwrite of the floor's record at its next offset and
/// `fdatasync`, in milliseconds.
pub(crate) fn floor_sample(floor: &mut Floor) -> f64 {
    use std::os::unix::fs::FileExt;
    if floor.at + floor.record.len() as u64 > Floor::BYTES {
        floor.at = 0;
    }
    let start = Instant::now();
    floor.file.write_all_at(&floor.record, floor.at).unwrap();
    floor.file.sync_data().unwrap();
    let took = start.elapsed().as_secs_f64() * 1e3;
    floor.at += floor.record.len() as u64;
    took
}
