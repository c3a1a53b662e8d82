//! Which file a program name will run: the process tools' `PATH` and the
//! resolution of `run_command`'s `program` to a canonical file, done once
//! before the gate so approval rules match the file that runs.
//!
//! - A bare name (`git`) is looked up on the tool's `PATH`: the server's
//!   `PATH` without relative entries and without directories programs may
//!   not read (so never the sandbox, unless the server's own `PATH` names a
//!   readable directory inside it, which it does not by default).
//! - A path with a `/` is taken as written: an absolute one as it is, a
//!   relative one (`./build.sh`) normalised lexically and joined to the
//!   session's sandbox (climbing out is refused).
//! - Either way every symlink is then resolved: the canonical path is the
//!   file that will run, and nothing looks the name up again afterwards.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use super::BuiltinConfig;
use super::confine::{Reach, SYSTEM_READ, beneath_any};
use jarvis_agent::{ResolvedProgram, normalize_sandbox_path};

/// `PATH` when the server has none.
pub(super) const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// What one call's program may reach and where it looks programs up.
#[derive(Debug, Clone)]
pub(super) struct Surroundings {
    /// What the kernel lets the program reach.
    pub(super) reach: Reach,
    /// The directories bare names are looked up in, in order (the child's `PATH`).
    pub(super) path: Vec<PathBuf>,
}

impl Surroundings {
    /// The surroundings of a program run in the sandbox at `sandbox`.
    pub(super) fn new(config: &BuiltinConfig, sandbox: &Path) -> Self {
        let server_path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from(DEFAULT_PATH));
        let server_dirs: Vec<PathBuf> = std::env::split_paths(&server_path)
            .filter(|d| d.is_absolute())
            .collect();
        let mut read: Vec<PathBuf> = interpreter_prefixes(config, &server_dirs);
        read.extend(config.sandbox.read.iter().cloned());
        let write = config.sandbox.write.clone();
        let mut readable: Vec<PathBuf> = SYSTEM_READ.iter().map(PathBuf::from).collect();
        readable.extend(read.iter().cloned());
        readable.extend(write.iter().cloned());
        let mut path: Vec<PathBuf> = Vec::new();
        for dir in server_dirs {
            let dir = lexical(&dir);
            if beneath_any(&dir, &readable) && !path.contains(&dir) {
                path.push(dir);
            }
        }
        Self {
            reach: Reach {
                sandbox: sandbox.to_owned(),
                read,
                write,
                network: config.sandbox.network,
            },
            path,
        }
    }

    /// The child's `PATH` value.
    pub(super) fn path_var(&self) -> OsString {
        std::env::join_paths(&self.path).unwrap_or_else(|_| OsString::from(DEFAULT_PATH))
    }

    /// The first executable file named `name` on the tool's `PATH`.
    pub(super) fn lookup(&self, name: &str) -> Option<PathBuf> {
        self.path
            .iter()
            .map(|dir| dir.join(name))
            .find(|candidate| is_executable_file(candidate))
    }

    /// Resolves `written` (the `program` argument) to the file that will
    /// run; the error is the refusal the model reads.
    pub(super) fn resolve(&self, argument: &str, written: &str) -> Result<ResolvedProgram, String> {
        if written.trim().is_empty() {
            return Err("`program` is empty".to_owned());
        }
        if written.contains('\0') {
            return Err("`program` contains a NUL byte".to_owned());
        }
        let located = if written.starts_with('/') {
            lexical(Path::new(written))
        } else if written.contains('/') {
            let relative = normalize_sandbox_path(written).map_err(|e| format!("`program`: {e}"))?;
            self.reach.sandbox.join(relative)
        } else {
            self.lookup(written).ok_or_else(|| {
                format!(
                    "could not start {written:?}: no such program on the tool's PATH ({})",
                    self.path_var().to_string_lossy()
                )
            })?
        };
        let file = std::fs::canonicalize(&located)
            .map_err(|e| format!("could not start {written:?}: {}: {e}", located.display()))?;
        if !is_executable_file(&file) {
            return Err(format!(
                "could not start {written:?}: {} is not an executable file",
                file.display()
            ));
        }
        let mut resolved = ResolvedProgram::new(argument, written, located, file.clone());
        if let Ok(sandbox) = std::fs::canonicalize(&self.reach.sandbox)
            && let Ok(inside) = file.strip_prefix(&sandbox)
        {
            resolved = resolved.with_in_sandbox(inside.to_string_lossy().into_owned());
        }
        let names: Vec<String> = resolved
            .file_names()
            .into_iter()
            .filter(|name| {
                self.lookup(name)
                    .and_then(|found| std::fs::canonicalize(found).ok())
                    .is_some_and(|found| found == file)
            })
            .collect();
        Ok(resolved.with_path_names(names))
    }
}

/// Whether `path` is a regular file (after symlinks) someone may execute.
fn is_executable_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `path` with `.` and `..` resolved lexically (absolute paths only; `..`
/// at the root stays at the root).
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::Normal(name) => out.push(name),
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// The installation prefix of `run_python`'s interpreter when it lies
/// outside the system directories (a pyenv root, `/opt/python`): the
/// directory above the one holding the interpreter, for the file found on
/// the server's `PATH` and for its canonical file. A prefix that would open
/// too much is left out: `/` or a top-level directory, anything holding
/// the sandboxes or `JARVIS_HOME`, and the server user's home itself.
fn interpreter_prefixes(config: &BuiltinConfig, server_dirs: &[PathBuf]) -> Vec<PathBuf> {
    let python = &config.python;
    let found = if python.is_absolute() {
        Some(lexical(python))
    } else if python.components().count() == 1 {
        server_dirs
            .iter()
            .map(|dir| dir.join(python))
            .find(|candidate| is_executable_file(candidate))
    } else {
        None
    };
    let Some(found) = found else {
        return Vec::new();
    };
    let canonical = std::fs::canonicalize(&found).ok();
    let protected: Vec<PathBuf> = [
        Some(lexical(
            &std::path::absolute(&config.sandboxes_dir).unwrap_or_default(),
        )),
        std::env::var_os("HOME").map(|h| lexical(Path::new(&h))),
    ]
    .into_iter()
    .flatten()
    .collect();
    let system: Vec<PathBuf> = SYSTEM_READ.iter().map(PathBuf::from).collect();
    let mut out: Vec<PathBuf> = Vec::new();
    for file in std::iter::once(found).chain(canonical) {
        let Some(prefix) = file.parent().and_then(Path::parent).map(Path::to_owned) else {
            continue;
        };
        let depth = prefix
            .components()
            .filter(|c| matches!(c, Component::Normal(_)))
            .count();
        let opens_protected = protected.iter().any(|p| p.starts_with(&prefix));
        if depth >= 2 && !opens_protected && !beneath_any(&prefix, &system) && !out.contains(&prefix) {
            out.push(prefix);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_paths_lose_dots() {
        assert_eq!(lexical(Path::new("/usr/./bin/../lib")), PathBuf::from("/usr/lib"));
        assert_eq!(lexical(Path::new("/../x")), PathBuf::from("/x"));
    }

    #[test]
    fn the_tool_path_keeps_only_readable_absolute_directories() {
        let config = BuiltinConfig::new("/nonexistent/sandboxes");
        let s = Surroundings::new(&config, Path::new("/nonexistent/sandboxes/s"));
        for dir in &s.path {
            assert!(dir.is_absolute(), "{}", dir.display());
            assert!(
                beneath_any(dir, &SYSTEM_READ.iter().map(PathBuf::from).collect::<Vec<_>>())
                    || beneath_any(dir, &s.reach.read),
                "{} is not readable",
                dir.display()
            );
        }
    }
}
