//! Safe file replacement (R-IDEM-3).
//!
//! [`write_atomic`] writes a temporary file beside the target under a name
//! no other writer uses, flushes it to disk, renames it over the target and
//! flushes the directory, so a reader sees either the old content or the
//! new, never half of one, and a power loss after it returned keeps the new.
//!
//! [`StagedFile`] is the same write with the rename left to the caller.
//!
//! [`update_file_locked`] is the one way to read, change and write back a
//! file that several writers share: it holds a lock for the read and the
//! write together, in this process (one mutex per path) and across
//! processes (an OS lock on a sidecar `<file>.lock`), so no update is lost
//! and none is made from a stale read.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Temporary files written by this process so far (part of their names).
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Directory flushes done by [`write_atomic`] (observed by the tests).
#[cfg(test)]
static DIR_SYNCS: AtomicU64 = AtomicU64::new(0);

/// A name for a temporary file beside `name`: the process id, a counter
/// no other call of this process gets, and 64 random bits (so two
/// processes sharing a pid namespace's numbers still differ).
fn temp_name(name: &std::ffi::OsStr) -> OsString {
    let count = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut hasher = std::hash::RandomState::new().build_hasher();
    hasher.write_u64(count);
    if let Ok(since) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        hasher.write_u128(since.as_nanos());
    }
    let mut tmp = OsString::from(".");
    tmp.push(name);
    tmp.push(format!(
        ".{}.{count}.{:016x}.tmp",
        std::process::id(),
        hasher.finish()
    ));
    tmp
}

/// The directory `path` lives in (`.` for a bare file name).
fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Flushes the directory entry changes of `dir` (a rename) to disk.
fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)?.sync_all()?;
        #[cfg(test)]
        DIR_SYNCS.fetch_add(1, Ordering::Relaxed);
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Replaces `path` with `contents` atomically and durably.
///
/// The temporary file lives in the same directory (a rename across file
/// systems would not be atomic), is created new under a name no other
/// writer uses (so concurrent writers of one file never share one), is
/// flushed before the rename, and is removed again if anything fails. The
/// directory is flushed after the rename, so once this returns the new
/// content survives a power loss. The parent directory must exist.
pub fn write_atomic(path: &Path, contents: &[u8]) -> io::Result<()> {
    StagedFile::write(path, contents)?.commit()
}

/// New content for a file, written and flushed beside it but not yet in
/// its place: [`StagedFile::commit`] renames it over the file, dropping
/// it removes it. [`write_atomic`] is a write and a commit; staging lets
/// a writer that spent long on the content decide at the last moment
/// (under its own lock) whether the content may still replace the file.
#[derive(Debug)]
pub struct StagedFile {
    tmp: PathBuf,
    path: PathBuf,
    committed: bool,
}

impl StagedFile {
    /// Writes `contents` to a new temporary file beside `path` and
    /// flushes it. The parent directory must exist.
    pub fn write(path: &Path, contents: &[u8]) -> io::Result<Self> {
        let dir = parent_of(path);
        let name = path
            .file_name()
            .ok_or_else(|| io::Error::new(ErrorKind::InvalidInput, "path has no file name"))?;
        let (tmp, mut file) = loop {
            let tmp = dir.join(temp_name(name));
            match OpenOptions::new().write(true).create_new(true).open(&tmp) {
                Ok(file) => break (tmp, file),
                // Left behind by a crashed writer with the same numbers: pick another.
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        };
        let staged = Self {
            tmp,
            path: path.to_path_buf(),
            committed: false,
        };
        file.write_all(contents)?;
        file.sync_all()?;
        Ok(staged)
    }

    /// Renames the content over the file and flushes the directory.
    pub fn commit(mut self) -> io::Result<()> {
        std::fs::rename(&self.tmp, &self.path)?;
        self.committed = true;
        sync_dir(parent_of(&self.path))
    }
}

impl Drop for StagedFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// The sidecar lock file of `path`: `<file>.lock` beside it.
pub fn lock_file_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(OsString::from).unwrap_or_default();
    name.push(".lock");
    parent_of(path).join(name)
}

type PathLocks = Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>;

/// One mutex per file updated in this process.
fn path_locks() -> &'static PathLocks {
    static LOCKS: OnceLock<PathLocks> = OnceLock::new();
    LOCKS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Reads `path`, lets `change` decide its new content, and writes it back
/// with [`write_atomic`], all under a lock that covers the read and the
/// write: a mutex per path in this process, and an exclusive OS lock
/// (`flock` on Unix) on the sidecar [`lock_file_path`] (`<file>.lock`,
/// created when missing and left in place) across processes. Updates of
/// one file therefore never interleave: each one reads what the last one
/// wrote.
///
/// `change` gets the current bytes (`None` when the file does not exist)
/// and answers the bytes to write (`None` leaves the file as it is) and a
/// value handed back to the caller; an `Err` from it leaves the file as it
/// is and is handed back as the inner error. The outer error is a failure
/// to lock, read or write. The parent directory is created when missing.
///
/// The lock waits as long as another holder keeps it, blocking the
/// calling thread; holders only read, change and write one small file.
pub fn update_file_locked<T, E>(
    path: &Path,
    change: impl FnOnce(Option<Vec<u8>>) -> Result<(Option<Vec<u8>>, T), E>,
) -> io::Result<Result<T, E>> {
    let dir = parent_of(path);
    std::fs::create_dir_all(dir)?;
    let key = std::path::absolute(path)?;
    let here = {
        let mut locks = path_locks().lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(key.clone()).or_default().clone()
    };
    let result = (|| {
        let _in_process = here.lock().unwrap_or_else(|e| e.into_inner());
        let lock_file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(lock_file_path(path))?;
        lock_file.lock()?;
        let old = match std::fs::read(path) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        match change(old) {
            Ok((Some(new), out)) => write_atomic(path, &new).map(|()| Ok(out)),
            Ok((None, out)) => Ok(Ok(out)),
            Err(e) => Ok(Err(e)),
        }
        // The OS lock goes with `lock_file`, then the mutex.
    })();
    // Forget the mutex of a path nobody else is updating.
    let mut locks = path_locks().lock().unwrap_or_else(|e| e.into_inner());
    if Arc::strong_count(&here) == 2 {
        locks.remove(&key);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names_in(dir: &Path) -> Vec<OsString> {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn replaces_content_flushes_the_directory_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("a.json");
        let before = DIR_SYNCS.load(Ordering::Relaxed);
        write_atomic(&target, b"one").unwrap();
        write_atomic(&target, b"two").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"two");
        assert_eq!(names_in(dir.path()), vec![OsString::from("a.json")]);
        #[cfg(unix)]
        assert!(
            DIR_SYNCS.load(Ordering::Relaxed) >= before + 2,
            "every replacement flushes its directory"
        );
        let _ = before;
    }

    #[test]
    fn missing_directory_is_an_error_not_a_panic() {
        let target = std::env::temp_dir().join("jarvis-no-such-dir-x/y/z.json");
        assert!(write_atomic(&target, b"x").is_err());
        assert!(write_atomic(Path::new("/"), b"x").is_err());
    }

    #[test]
    fn temporary_names_are_never_shared() {
        let names: std::collections::HashSet<OsString> = (0..10_000)
            .map(|_| temp_name(std::ffi::OsStr::new("f")))
            .collect();
        assert_eq!(names.len(), 10_000);
    }

    #[test]
    fn concurrent_writers_of_one_file_never_collide() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("shared.json");
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let target = target.clone();
                std::thread::spawn(move || {
                    for i in 0..100 {
                        let body = format!("{{\"writer\": {t}, \"n\": {i}}}").repeat(200);
                        write_atomic(&target, body.as_bytes()).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let text = String::from_utf8(std::fs::read(&target).unwrap()).unwrap();
        let unit = &text[..text.find('}').unwrap() + 1];
        assert_eq!(text, unit.repeat(200), "one writer's whole content");
        assert_eq!(names_in(dir.path()), vec![OsString::from("shared.json")]);
    }

    #[test]
    fn locked_updates_from_many_threads_lose_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let counter = dir.path().join("sub").join("counter");
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let counter = counter.clone();
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        update_file_locked(&counter, |old| {
                            let n: u64 = old.map_or(0, |b| String::from_utf8(b).unwrap().parse().unwrap());
                            Ok::<_, ()>((Some((n + 1).to_string().into_bytes()), ()))
                        })
                        .unwrap()
                        .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(std::fs::read_to_string(&counter).unwrap(), "400");
        assert!(lock_file_path(&counter).exists());
        let key = std::path::absolute(&counter).unwrap();
        assert!(
            !path_locks().lock().unwrap().contains_key(&key),
            "no mutex kept for a file nobody updates"
        );
    }

    #[test]
    fn a_refused_or_unchanged_update_leaves_the_file_alone() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        let out = update_file_locked(&file, |old| {
            assert_eq!(old, None);
            Ok::<_, &str>((None, 7))
        })
        .unwrap();
        assert_eq!(out, Ok(7));
        assert!(!file.exists());
        std::fs::write(&file, b"keep").unwrap();
        let refused = update_file_locked(&file, |_| Err::<(Option<Vec<u8>>, ()), _>("damaged")).unwrap();
        assert_eq!(refused, Err("damaged"));
        assert_eq!(std::fs::read(&file).unwrap(), b"keep");
    }
}
