//! Procedures (절차, PDM) as files: `$JARVIS_HOME/procedures/<agent_id>/<name>.md`
//! (SPEC.md §17.3 #11).
//!
//! The rules are documented on [`ProcedureLibrary`].

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::error::{MemoryError, printable};
use jarvis_common::update_file_locked;

/// The directory under `JARVIS_HOME`.
pub const PROCEDURES_DIR: &str = "procedures";
/// The agent that owns the legacy files directly under `procedures/`.
pub const LEGACY_PROCEDURE_AGENT: &str = "main";
/// The longest procedure file read.
pub const MAX_PROCEDURE_BYTES: u64 = 64 * 1024;
/// The longest procedure name, in characters.
pub const MAX_PROCEDURE_NAME_CHARS: usize = 64;

/// One procedure file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Procedure {
    /// The agent it belongs to.
    pub agent_id: String,
    /// Its name (the file name without `.md`).
    pub name: String,
    /// Its text.
    pub text: String,
    /// The file.
    pub path: PathBuf,
    /// Whether it is a legacy file directly under `procedures/`.
    pub legacy: bool,
}

/// The procedure files under one `JARVIS_HOME`.
///
/// Each agent has its own directory. Files directly under `procedures/`
/// come from before agents were split: they are read as `main`'s and never
/// moved (when `main` has a file of the same name in its own directory,
/// that one wins). Writes are atomic (R-IDEM-3) and made under the file's
/// lock, which also covers the read of [`update`](Self::update).
///
/// Names are checked before they touch the file system: 1 to 64 characters,
/// letters (any script), digits, `-`, `_` and inner spaces, so no name can
/// climb out of its directory or hide as a dot file. Agent ids are checked
/// the same way sessions check them. Files that cannot be procedures
/// (another extension, a bad name, not UTF-8, over 64 KiB) are skipped with
/// a warning.
#[derive(Debug, Clone)]
pub struct ProcedureLibrary {
    dir: PathBuf,
}

/// Why `name` cannot name a procedure or a task pattern, if it cannot.
pub(crate) fn name_problem(name: &str) -> Option<&'static str> {
    let count = name.chars().count();
    if count == 0 {
        return Some("it is empty");
    }
    if count > MAX_PROCEDURE_NAME_CHARS {
        return Some("it is longer than 64 characters");
    }
    if name.starts_with(' ') || name.ends_with(' ') {
        return Some("it starts or ends with a space");
    }
    if !name
        .chars()
        .all(|c| c.is_alphanumeric() || c == '-' || c == '_' || c == ' ')
    {
        return Some("only letters, digits, '-', '_' and inner spaces are allowed");
    }
    None
}

/// Checks a procedure name (see [`ProcedureLibrary`]).
pub fn validate_procedure_name(name: &str) -> Result<(), MemoryError> {
    match name_problem(name) {
        None => Ok(()),
        Some(reason) => Err(MemoryError::InvalidName {
            what: "procedure",
            name: printable(name),
            reason,
        }),
    }
}

/// Checks an agent id used as a directory name: 1 to 60 ASCII letters,
/// digits, `_` and `-`.
pub(crate) fn validate_agent_dir(agent_id: &str) -> Result<(), MemoryError> {
    let reason = if agent_id.is_empty() {
        Some("it is empty")
    } else if agent_id.len() > 60 {
        Some("it is too long")
    } else if !agent_id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        Some("only letters, digits, '_' and '-' are allowed")
    } else {
        None
    };
    match reason {
        None => Ok(()),
        Some(reason) => Err(MemoryError::InvalidAgentId {
            agent_id: printable(agent_id),
            reason,
        }),
    }
}

impl ProcedureLibrary {
    /// The procedures under `<home>/procedures`.
    pub fn new(home: &Path) -> Self {
        Self::at(home.join(PROCEDURES_DIR))
    }

    /// The procedures under `dir`.
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The `procedures` directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `agent_id`'s procedures, by name; `main` also gets the legacy files.
    pub fn list(&self, agent_id: &str) -> Result<Vec<Procedure>, MemoryError> {
        validate_agent_dir(agent_id)?;
        let mut out = read_dir_procedures(&self.dir.join(agent_id), agent_id, false)?;
        if agent_id == LEGACY_PROCEDURE_AGENT {
            for legacy in read_dir_procedures(&self.dir, agent_id, true)? {
                if !out.iter().any(|p| p.name == legacy.name) {
                    out.push(legacy);
                }
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// `agent_id`'s procedure `name`, if there is one.
    pub fn get(&self, agent_id: &str, name: &str) -> Result<Option<Procedure>, MemoryError> {
        validate_procedure_name(name)?;
        Ok(self.list(agent_id)?.into_iter().find(|p| p.name == name))
    }

    /// Writes `agent_id`'s procedure `name` (atomically, in the agent's
    /// own directory, never over a legacy file).
    pub fn save(&self, agent_id: &str, name: &str, text: &str) -> Result<Procedure, MemoryError> {
        self.update(agent_id, name, |_| Ok(text.to_owned()))
    }

    /// Reads `agent_id`'s own procedure `name` (`None` when it has none),
    /// lets `change` write its new text, and writes it back atomically, all
    /// under the file's lock
    /// ([`update_file_locked`](jarvis_common::update_file_locked): this
    /// process and others alike), so a rewrite always starts from the last
    /// saved text and two writers at once never lose one's work. An error
    /// from `change` leaves the file as it is. Legacy files are never
    /// written: the new text goes to the agent's own directory.
    pub fn update(
        &self,
        agent_id: &str,
        name: &str,
        change: impl FnOnce(Option<&str>) -> Result<String, MemoryError>,
    ) -> Result<Procedure, MemoryError> {
        validate_agent_dir(agent_id)?;
        validate_procedure_name(name)?;
        let path = self.dir.join(agent_id).join(format!("{name}.md"));
        let text = update_file_locked(&path, |old| {
            let old = old.map(|bytes| {
                String::from_utf8(bytes).map_err(|_| MemoryError::File {
                    op: "read",
                    path: path.clone(),
                    source: std::io::Error::new(ErrorKind::InvalidData, "the procedure is not UTF-8"),
                })
            });
            let old = old.transpose()?;
            let text = change(old.as_deref())?;
            Ok((Some(text.clone().into_bytes()), text))
        })
        .map_err(|source| MemoryError::File {
            op: "write",
            path: path.clone(),
            source,
        })??;
        Ok(Procedure {
            agent_id: agent_id.to_owned(),
            name: name.to_owned(),
            text,
            path,
            legacy: false,
        })
    }
}

/// The procedures directly in `dir` (a missing directory has none).
fn read_dir_procedures(dir: &Path, agent_id: &str, legacy: bool) -> Result<Vec<Procedure>, MemoryError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(MemoryError::File {
                op: "list",
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if !meta.is_file() || path.extension().and_then(|e| e.to_str()) != Some("md") {
            continue;
        }
        let Some(name) = path.file_stem().and_then(|s| s.to_str()).map(str::to_owned) else {
            tracing::warn!(path = %path.display(), "memory: skipped a procedure file whose name is not UTF-8");
            continue;
        };
        if let Some(reason) = name_problem(&name) {
            tracing::warn!(path = %path.display(), "memory: skipped procedure file {}: its name is not allowed ({reason})", path.display());
            continue;
        }
        if meta.len() > MAX_PROCEDURE_BYTES {
            tracing::warn!(path = %path.display(), "memory: skipped procedure file {}: larger than 64 KiB", path.display());
            continue;
        }
        match std::fs::read(&path).map(String::from_utf8) {
            Ok(Ok(text)) => out.push(Procedure {
                agent_id: agent_id.to_owned(),
                name,
                text,
                path,
                legacy,
            }),
            Ok(Err(_)) => {
                tracing::warn!(path = %path.display(), "memory: skipped procedure file {}: not UTF-8", path.display());
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), "memory: skipped procedure file {}: {e}", path.display());
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_could_escape_are_refused() {
        for bad in [
            "", "..", "../x", "a/b", "a\\b", ".hidden", " x", "x ", "a\0b", "a\nb", "x.md",
        ] {
            assert!(validate_procedure_name(bad).is_err(), "{bad:?}");
        }
        for good in ["weekly-report", "주간 보고", "notice_lookup2"] {
            validate_procedure_name(good).unwrap();
        }
        assert!(validate_procedure_name(&"a".repeat(65)).is_err());
        assert!(validate_agent_dir("../main").is_err());
    }

    #[test]
    fn legacy_files_are_mains_and_never_moved() {
        let home = tempfile::tempdir().unwrap();
        let lib = ProcedureLibrary::new(home.path());
        std::fs::create_dir_all(lib.dir()).unwrap();
        std::fs::write(lib.dir().join("old.md"), "legacy steps").unwrap();
        std::fs::write(lib.dir().join("both.md"), "legacy both").unwrap();
        std::fs::write(lib.dir().join("bad name!.md"), "x").unwrap();
        std::fs::write(lib.dir().join("notes.txt"), "x").unwrap();
        lib.save("main", "both", "own both").unwrap();
        lib.save("karen", "lookup", "karen steps").unwrap();

        let main: Vec<(String, String, bool)> = lib
            .list("main")
            .unwrap()
            .into_iter()
            .map(|p| (p.name, p.text, p.legacy))
            .collect();
        assert_eq!(
            main,
            [
                ("both".into(), "own both".into(), false),
                ("old".into(), "legacy steps".into(), true)
            ]
        );
        let karen = lib.list("karen").unwrap();
        assert_eq!(karen.len(), 1);
        assert!(
            lib.dir().join("old.md").exists(),
            "legacy files stay where they are"
        );
        assert!(lib.get("karen", "../main/both").is_err());
        assert_eq!(lib.list("nobody").unwrap(), []);
    }
}
