//! [`HomeLock`]: one process owns a `JARVIS_HOME` at a time (DESIGN.md §5).
//!
//! The lock is an advisory OS lock (`flock` on Unix) on `<home>/jarvis.lock`,
//! taken without waiting. The file holds the holder's process id and host, so
//! a second process that finds the lock taken can say who holds it. The OS
//! drops the lock when its holder exits in any way, a crash or `SIGKILL`
//! included, so a lock never goes stale; the file itself stays and is
//! overwritten by the next holder.

use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The lock file's name inside the home directory.
pub const HOME_LOCK_FILE: &str = "jarvis.lock";

/// Who holds a home lock, as written in the lock file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockHolder {
    /// The holder's process id.
    pub pid: u32,
    /// The holder's host name.
    pub host: String,
}

impl std::fmt::Display for LockHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "process {} on host {}", self.pid, self.host)
    }
}

/// Why a home lock could not be taken.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HomeLockError {
    /// Another process (or another lock in this one) holds the home.
    #[error(
        "home lock: {home} is in use by {} (lock file {lock_file}); stop it, or talk to it as a client",
        holder.as_ref().map_or_else(|| "another process".to_owned(), ToString::to_string)
    )]
    Held {
        /// The home directory.
        home: PathBuf,
        /// The lock file.
        lock_file: PathBuf,
        /// The holder, when the lock file names one.
        holder: Option<LockHolder>,
    },
    /// The lock file could not be created, locked or written.
    #[error("home lock: cannot {op} {path}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// Exclusive ownership of a home directory, held until dropped.
#[derive(Debug)]
pub struct HomeLock {
    home: PathBuf,
    file: File,
    holder: LockHolder,
}

impl HomeLock {
    /// Creates `home` if needed and takes its lock, without waiting.
    ///
    /// Fails with [`HomeLockError::Held`] naming the holder when another
    /// process, or another `HomeLock` in this process, has it.
    pub fn acquire(home: impl AsRef<Path>) -> Result<Self, HomeLockError> {
        let home = home.as_ref().to_path_buf();
        std::fs::create_dir_all(&home).map_err(|source| HomeLockError::Io {
            op: "create",
            path: home.clone(),
            source,
        })?;
        let lock_file = home.join(HOME_LOCK_FILE);
        let io_err = |op, source| HomeLockError::Io {
            op,
            path: lock_file.clone(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_file)
            .map_err(|e| io_err("open", e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let holder = file
                    .read_to_string(&mut text)
                    .ok()
                    .and_then(|_| serde_json::from_str(text.trim()).ok());
                return Err(HomeLockError::Held {
                    home,
                    lock_file,
                    holder,
                });
            }
            Err(TryLockError::Error(e)) => return Err(io_err("lock", e)),
        }
        let holder = LockHolder {
            pid: std::process::id(),
            host: host_name(),
        };
        let mut line = serde_json::to_vec(&holder).map_err(|e| io_err("write", e.into()))?;
        line.push(b'\n');
        (|| {
            file.set_len(0)?;
            file.seek(SeekFrom::Start(0))?;
            file.write_all(&line)?;
            file.sync_data()
        })()
        .map_err(|e| io_err("write", e))?;
        Ok(Self { home, file, holder })
    }

    /// The home directory this lock owns.
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// The holder written in the lock file (this process).
    pub fn holder(&self) -> &LockHolder {
        &self.holder
    }
}

impl Drop for HomeLock {
    fn drop(&mut self) {
        // Closing the file releases the lock too; unlocking first makes the
        // release independent of other handles to the same open file.
        let _ = self.file.unlock();
    }
}

/// The machine's host name, best effort and without a system call wrapper.
fn host_name() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .chain(
            ["HOSTNAME", "COMPUTERNAME"]
                .iter()
                .filter_map(|v| std::env::var(v).ok()),
        )
        .map(|s| s.trim().to_owned())
        .find(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_names_the_holder_and_the_lock_is_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let first = HomeLock::acquire(&home).unwrap();
        assert_eq!(first.home(), home);
        assert_eq!(first.holder().pid, std::process::id());

        let err = HomeLock::acquire(&home).unwrap_err();
        match &err {
            HomeLockError::Held { holder, .. } => assert_eq!(holder.as_ref(), Some(first.holder())),
            other => panic!("unexpected error {other:?}"),
        }
        let text = err.to_string();
        assert!(text.starts_with("home lock: "), "{text}");
        assert!(
            text.contains(&format!("process {}", std::process::id())),
            "{text}"
        );
        assert!(text.contains(&first.holder().host), "{text}");

        drop(first);
        let again = HomeLock::acquire(&home).unwrap();
        drop(again);
    }

    #[test]
    fn an_unreadable_holder_is_still_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let _held = HomeLock::acquire(dir.path()).unwrap();
        std::fs::write(dir.path().join(HOME_LOCK_FILE), b"garbage").unwrap();
        let err = HomeLock::acquire(dir.path()).unwrap_err();
        assert!(err.to_string().contains("in use by another process"), "{err}");
    }

    #[test]
    fn a_home_that_cannot_be_created_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        let err = HomeLock::acquire(file.join("home")).unwrap_err();
        assert!(matches!(err, HomeLockError::Io { op: "create", .. }), "{err:?}");
    }
}
