//! The per-session sandbox (R-SEC-5): one working directory per session
//! under `$JARVIS_HOME/sandboxes/<session_id>/`, and file operations
//! confined to it.
//!
//! Confinement has two layers:
//!
//! 1. A lexical check of every path before it touches the file system:
//!    absolute paths, NUL bytes, `..` that climbs above the sandbox root and
//!    over-long paths or components are refused with a typed
//!    [`SandboxError`].
//! 2. Every operation then goes through a [`cap_std::fs::Dir`] handle on the
//!    sandbox directory, which opens paths *beneath* that handle: on Linux
//!    with `openat2(RESOLVE_BENEATH)`, elsewhere component by component
//!    without following a symlink blindly. A symlink that points outside
//!    (absolute, or with `..` that climbs out, dangling or not) is refused by
//!    construction, and there is no window between a check and the use of
//!    the path in which a swapped symlink could redirect it outside.
//!
//! A hard link is a name like any other: a file hard-linked into the
//! sandbox (only a program, such as one `run_command` starts, can make one)
//! is read as the sandbox's own. Writes replace names, never inodes,
//! so a write through such a link does not reach the other name.
//!
//! The sandbox confines this module's file operations. Programs started by
//! `run_command` and `run_python` get the sandbox as their working
//! directory and, on Linux, are locked into it by the kernel (Landlock and
//! seccomp; see the `tools` module's `confine`).

use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use jarvis_agent::{
    MAX_SANDBOX_COMPONENT_LEN, MAX_SANDBOX_PATH_LEN, MAX_SESSION_ID_LEN, SandboxPathError,
    normalize_sandbox_path, session_id_problem,
};

/// The longest tool path accepted, in bytes.
pub const MAX_PATH_LEN: usize = MAX_SANDBOX_PATH_LEN;
/// The longest single path component accepted, in bytes (`NAME_MAX`).
pub const MAX_COMPONENT_LEN: usize = MAX_SANDBOX_COMPONENT_LEN;

/// Why the sandbox refused or failed an operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The session id is not one safe path component.
    #[error("sandbox: invalid session id {id:?}: {reason}")]
    InvalidSessionId {
        /// The id as given (at most [`MAX_SESSION_ID_LEN`] + 1 characters of it).
        id: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An absolute path; tool paths are relative to the sandbox.
    #[error("sandbox: absolute path {path:?} refused: paths are relative to the session's sandbox")]
    AbsolutePath {
        /// The path as given.
        path: String,
    },
    /// The path, or a symlink on it, leads outside the sandbox.
    #[error("sandbox: path {path:?} leads outside the sandbox")]
    Escape {
        /// The path as given.
        path: String,
    },
    /// The path contains a NUL byte.
    #[error("sandbox: path {path:?} contains a NUL byte")]
    NulByte {
        /// The path as given.
        path: String,
    },
    /// The whole path is longer than [`MAX_PATH_LEN`] bytes.
    #[error("sandbox: path is too long ({len} bytes, at most {max})")]
    PathTooLong {
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// One component is longer than [`MAX_COMPONENT_LEN`] bytes.
    #[error("sandbox: a path component is too long ({len} bytes, at most {max})")]
    ComponentTooLong {
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Symbolic links on the path form a loop (or nest too deeply).
    #[error("sandbox: too many levels of symbolic links in {path:?}")]
    SymlinkLoop {
        /// The path as given.
        path: String,
    },
    /// Nothing exists at the path (or a symlink on it is dangling).
    #[error("sandbox: {path:?} does not exist")]
    NotFound {
        /// The path as given.
        path: String,
    },
    /// The path names a directory or a special file where a regular file is needed.
    #[error("sandbox: {path:?} is not a regular file")]
    NotAFile {
        /// The path as given.
        path: String,
    },
    /// The path, or a component of it, is not a directory.
    #[error("sandbox: {path:?} is not a directory")]
    NotADirectory {
        /// The path as given.
        path: String,
    },
    /// The path cannot name what the operation needs (e.g. writing to `.`).
    #[error("sandbox: invalid path {path:?}: {reason}")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Content to write is larger than allowed.
    #[error("sandbox: content is too large ({len} bytes, at most {max})")]
    TooLarge {
        /// Its size in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Any other file-system failure.
    #[error("sandbox: i/o error on {path:?}: {source}")]
    Io {
        /// The path as given.
        path: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// Checks that `id` can name a sandbox directory: 1 to
/// [`MAX_SESSION_ID_LEN`] ASCII letters, digits, `-` or `_`. That rules out
/// `/`, `.`, `..`, NUL and anything a shell or a file system might read
/// specially.
pub fn validate_session_id(id: &str) -> Result<(), SandboxError> {
    match session_id_problem(id) {
        None => Ok(()),
        Some(reason) => Err(SandboxError::InvalidSessionId {
            id: id.chars().take(MAX_SESSION_ID_LEN + 1).collect(),
            reason,
        }),
    }
}

/// The lexical half of confinement: refuses what no file-system lookup should
/// even see, and returns the path in its lexical normal form
/// ([`normalize_sandbox_path`]: no `.`, no `..`; the empty path is `.`).
/// The loop has already normalised the paths of tool calls the same way,
/// so this is the same path the gate's stages saw.
pub(crate) fn check_path(raw: &str) -> Result<PathBuf, SandboxError> {
    normalize_sandbox_path(raw)
        .map(PathBuf::from)
        .map_err(|e| match e {
            SandboxPathError::Absolute(path) => SandboxError::AbsolutePath { path },
            SandboxPathError::NulByte(path) => SandboxError::NulByte { path },
            SandboxPathError::TooLong(len) => SandboxError::PathTooLong {
                len,
                max: MAX_PATH_LEN,
            },
            SandboxPathError::ComponentTooLong(len) => SandboxError::ComponentTooLong {
                len,
                max: MAX_COMPONENT_LEN,
            },
            _ => SandboxError::Escape { path: raw.to_owned() },
        })
}

/// Turns an error of a beneath-lookup into the typed refusal it stands for.
fn map_io(path: &str, error: io::Error) -> SandboxError {
    let path = path.to_owned();
    // cap-std reports an escape as a `PermissionDenied` error it made itself
    // (no OS error code); a real `EACCES` carries its code.
    if error.kind() == io::ErrorKind::PermissionDenied && error.raw_os_error().is_none() {
        return SandboxError::Escape { path };
    }
    if is_symlink_loop(&error) {
        return SandboxError::SymlinkLoop { path };
    }
    if is_name_too_long(&error) {
        return SandboxError::PathTooLong {
            len: path.len(),
            max: MAX_PATH_LEN,
        };
    }
    match error.kind() {
        io::ErrorKind::NotFound => SandboxError::NotFound { path },
        io::ErrorKind::NotADirectory => SandboxError::NotADirectory { path },
        io::ErrorKind::IsADirectory => SandboxError::NotAFile { path },
        _ => SandboxError::Io { path, source: error },
    }
}

#[cfg(unix)]
fn is_symlink_loop(error: &io::Error) -> bool {
    error.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error())
}

#[cfg(not(unix))]
fn is_symlink_loop(_error: &io::Error) -> bool {
    false
}

#[cfg(unix)]
fn is_name_too_long(error: &io::Error) -> bool {
    error.raw_os_error() == Some(rustix::io::Errno::NAMETOOLONG.raw_os_error())
}

#[cfg(not(unix))]
fn is_name_too_long(_error: &io::Error) -> bool {
    false
}

/// Open flags for reading: never block on a FIFO, never adopt a terminal.
#[cfg(unix)]
fn read_options() -> OpenOptions {
    use cap_std::fs::OpenOptionsExt;
    let mut options = OpenOptions::new();
    options.read(true);
    let flags = rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY;
    // The flag bits are small positive values; the cast cannot wrap.
    options.custom_flags(flags.bits() as i32);
    options
}

#[cfg(not(unix))]
fn read_options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.read(true);
    options
}

/// What [`Sandbox::read`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileContent {
    /// The first bytes of the file, at most the requested cap.
    pub bytes: Vec<u8>,
    /// The file's size in bytes.
    pub size: u64,
}

impl FileContent {
    /// Whether the file holds more than [`FileContent::bytes`].
    pub fn is_truncated(&self) -> bool {
        (self.bytes.len() as u64) < self.size
    }
}

/// The kind of a directory entry; symlinks are reported as themselves, not
/// followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (wherever it points).
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

impl EntryKind {
    /// `file`, `dir`, `symlink` or `other`.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::File => "file",
            EntryKind::Dir => "dir",
            EntryKind::Symlink => "symlink",
            EntryKind::Other => "other",
        }
    }
}

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntryInfo {
    /// The entry's name (lossily decoded if it is not UTF-8).
    pub name: String,
    /// What it is.
    pub kind: EntryKind,
    /// Its size in bytes (of the link itself for a symlink).
    pub size: u64,
}

/// What [`Sandbox::list`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirListing {
    /// Entries sorted by name, at most the requested cap.
    pub entries: Vec<DirEntryInfo>,
    /// How many entries the directory holds.
    pub total: usize,
}

/// The working directory of one session, and confined file operations in it.
///
/// Paths given to its methods are relative to the sandbox root; see the
/// module documentation for what is refused. The methods do blocking I/O:
/// call them from a blocking context (`tokio::task::spawn_blocking`).
#[derive(Debug)]
pub struct Sandbox {
    session_id: String,
    root: PathBuf,
    dir: Dir,
}

impl Sandbox {
    /// Opens (creating it if needed) the sandbox of `session_id` under
    /// `sandboxes_dir`, which is created too when missing.
    ///
    /// The session id is checked with [`validate_session_id`] before it is
    /// used. The session directory is opened beneath `sandboxes_dir`, so a
    /// symlink planted in its place cannot point elsewhere.
    pub fn open(sandboxes_dir: &Path, session_id: &str) -> Result<Sandbox, SandboxError> {
        validate_session_id(session_id)?;
        let base_name = sandboxes_dir.display().to_string();
        let io = |source| SandboxError::Io {
            path: base_name.clone(),
            source,
        };
        // Programs get the root as working directory and `HOME`: make it absolute.
        let sandboxes_dir = std::path::absolute(sandboxes_dir).map_err(io)?;
        std::fs::create_dir_all(&sandboxes_dir).map_err(io)?;
        let base = Dir::open_ambient_dir(&sandboxes_dir, ambient_authority()).map_err(io)?;
        match base.create_dir(session_id) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(map_io(session_id, e)),
        }
        let dir = base.open_dir(session_id).map_err(|e| map_io(session_id, e))?;
        Ok(Sandbox {
            session_id: session_id.to_owned(),
            root: sandboxes_dir.join(session_id),
            dir,
        })
    }

    /// The session this sandbox belongs to.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The sandbox directory on the host, absolute (the working directory of
    /// programs run in it).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Reads at most `max_bytes` of the regular file at `path`, following
    /// symlinks that stay inside the sandbox.
    pub fn read(&self, path: &str, max_bytes: usize) -> Result<FileContent, SandboxError> {
        let rel = check_path(path)?;
        let mut file = self
            .dir
            .open_with(&rel, &read_options())
            .map_err(|e| map_io(path, e))?;
        let meta = file.metadata().map_err(|e| map_io(path, e))?;
        if !meta.is_file() {
            return Err(SandboxError::NotAFile {
                path: path.to_owned(),
            });
        }
        let mut bytes = Vec::new();
        let limit = u64::try_from(max_bytes).unwrap_or(u64::MAX);
        Read::by_ref(&mut file)
            .take(limit)
            .read_to_end(&mut bytes)
            .map_err(|e| map_io(path, e))?;
        let size = meta.len().max(bytes.len() as u64);
        Ok(FileContent { bytes, size })
    }

    /// Lists the directory at `path` (`.` or empty for the root), sorted by
    /// name, keeping at most `max_entries`.
    pub fn list(&self, path: &str, max_entries: usize) -> Result<DirListing, SandboxError> {
        let rel = check_path(path)?;
        let dir = self.dir.open_dir(&rel).map_err(|e| map_io(path, e))?;
        let mut entries = Vec::new();
        for entry in dir.entries().map_err(|e| map_io(path, e))? {
            let entry = entry.map_err(|e| map_io(path, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            // An entry removed while listing is skipped, not an error.
            let Ok(meta) = entry.metadata() else { continue };
            let file_type = meta.file_type();
            let kind = if file_type.is_symlink() {
                EntryKind::Symlink
            } else if file_type.is_dir() {
                EntryKind::Dir
            } else if file_type.is_file() {
                EntryKind::File
            } else {
                EntryKind::Other
            };
            entries.push(DirEntryInfo {
                name,
                kind,
                size: meta.len(),
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        let total = entries.len();
        entries.truncate(max_entries);
        Ok(DirListing { entries, total })
    }

    /// Replaces the file at `path` with `content` atomically (a temporary
    /// file beside it, flushed, then renamed over it), creating missing
    /// parent directories inside the sandbox.
    ///
    /// A symlink at `path` is followed when its target is inside the
    /// sandbox and exists; a symlink that leads outside is refused, and a
    /// dangling one is reported as not found.
    pub fn write(&self, path: &str, content: &[u8]) -> Result<(), SandboxError> {
        let rel = check_path(path)?;
        let target = match self.dir.symlink_metadata(&rel) {
            Ok(meta) if meta.is_symlink() => {
                // `canonicalize` resolves beneath the root: an escape or a
                // loop is refused, a dangling link is `NotFound`.
                let real = self.dir.canonicalize(&rel).map_err(|e| map_io(path, e))?;
                if real.as_os_str().is_empty() {
                    return Err(SandboxError::NotAFile {
                        path: path.to_owned(),
                    });
                }
                real
            }
            Ok(meta) if meta.is_dir() => {
                return Err(SandboxError::NotAFile {
                    path: path.to_owned(),
                });
            }
            _ => rel,
        };
        let (parent, name) = split_target(path, &target)?;
        let parent_dir = match parent {
            Some(parent) => self.parent_dir(path, parent)?,
            None => self.dir.try_clone().map_err(|e| map_io(path, e))?,
        };
        write_atomic_in(&parent_dir, name, content).map_err(|e| map_io(path, e))
    }
}

impl Sandbox {
    /// Creates the directory `path` (and missing parents) inside the
    /// sandbox unless it is there; an existing directory is fine.
    pub fn create_dir(&self, path: &str) -> Result<(), SandboxError> {
        let rel = check_path(path)?;
        match self.dir.create_dir_all(&rel) {
            Ok(()) => Ok(()),
            Err(e) => match self.dir.open_dir(&rel) {
                Ok(_) => Ok(()),
                Err(_) => Err(map_io(path, e)),
            },
        }
    }

    /// Opens `parent` beneath the root, creating it first when it is
    /// missing. An existing symlink on the way that leads outside is
    /// reported as the escape it is, not as "already exists".
    fn parent_dir(&self, path: &str, parent: &Path) -> Result<Dir, SandboxError> {
        match self.dir.open_dir(parent) {
            Ok(dir) => return Ok(dir),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(map_io(path, e)),
        }
        if let Err(created) = self.dir.create_dir_all(parent) {
            return Err(match self.dir.open_dir(parent) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => map_io(path, e),
                _ => map_io(path, created),
            });
        }
        self.dir.open_dir(parent).map_err(|e| map_io(path, e))
    }
}

/// Splits a checked path into its parent (if any) and a final name that is
/// an ordinary file name.
fn split_target<'a>(raw: &str, path: &'a Path) -> Result<(Option<&'a Path>, &'a Path), SandboxError> {
    let invalid = || SandboxError::InvalidPath {
        path: raw.to_owned(),
        reason: "it must end in a file name",
    };
    match path.components().next_back() {
        Some(Component::Normal(name)) => {
            let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
            Ok((parent, Path::new(name)))
        }
        _ => Err(invalid()),
    }
}

/// Temporary-file names are unique within the process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// [`jarvis_common::write_atomic`] for a directory handle: the temporary
/// file is created (never opened if it exists) in `dir` and renamed over
/// `name` in the same directory.
fn write_atomic_in(dir: &Dir, name: &Path, content: &[u8]) -> io::Result<()> {
    let tmp = format!(
        ".jarvis-write-{}-{}.tmp",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let result = (|| {
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        let mut file = dir.open_with(&tmp, &options)?;
        file.write_all(content)?;
        file.sync_all()?;
        dir.rename(&tmp, dir, name)
    })();
    if result.is_err() {
        let _ = dir.remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_single_safe_components() {
        for good in ["default-main", "peer-main-karen", "a", "A_9", &"x".repeat(128)] {
            assert!(validate_session_id(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "../x",
            "a\0b",
            "a b",
            "세션",
            "a.b",
            &"x".repeat(129),
        ] {
            assert!(
                matches!(
                    validate_session_id(bad),
                    Err(SandboxError::InvalidSessionId { .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn lexical_check_refuses_what_no_lookup_should_see() {
        assert_eq!(check_path("").unwrap(), PathBuf::from("."));
        assert_eq!(check_path("./a/./b").unwrap(), PathBuf::from("a/b"));
        assert_eq!(check_path("a/../b").unwrap(), PathBuf::from("b"));
        assert_eq!(check_path("notes/../x").unwrap(), PathBuf::from("x"));
        assert!(matches!(
            check_path("/etc/passwd"),
            Err(SandboxError::AbsolutePath { .. })
        ));
        assert!(matches!(check_path(".."), Err(SandboxError::Escape { .. })));
        assert!(matches!(
            check_path("a/../../x"),
            Err(SandboxError::Escape { .. })
        ));
        assert!(matches!(check_path("a\0"), Err(SandboxError::NulByte { .. })));
        assert!(matches!(
            check_path(&"a/".repeat(600)),
            Err(SandboxError::PathTooLong { .. })
        ));
        assert!(matches!(
            check_path(&"n".repeat(256)),
            Err(SandboxError::ComponentTooLong { len: 256, .. })
        ));
    }

    #[test]
    fn messages_are_lowercase_and_name_the_sandbox() {
        let e = check_path("../x").unwrap_err().to_string();
        assert_eq!(e, "sandbox: path \"../x\" leads outside the sandbox");
    }
}
