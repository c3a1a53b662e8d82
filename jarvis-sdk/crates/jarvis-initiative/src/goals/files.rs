//! Goals as files: `$JARVIS_HOME/goals/<agent_id>/<goal_id>.json`, each
//! written to a temporary file and renamed. One writer at a time in this
//! process (numbering reads the directory first); a home belongs to one
//! process.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use super::{GOALS_DIR, Goal, GoalError, checked_agent, goal_number};
use jarvis_common::write_atomic;

/// The goal files of one home.
#[derive(Debug)]
pub(super) struct FileGoals {
    dir: PathBuf,
    /// One writer at a time: numbering reads the directory first.
    lock: Mutex<()>,
}

impl FileGoals {
    pub(super) fn new(home: &Path) -> Self {
        Self {
            dir: home.join(GOALS_DIR),
            lock: Mutex::new(()),
        }
    }

    fn guard(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn agent_dir(&self, agent_id: &str) -> Result<PathBuf, GoalError> {
        checked_agent(agent_id)?;
        Ok(self.dir.join(agent_id))
    }

    fn goal_path(&self, agent_id: &str, number: u64) -> Result<PathBuf, GoalError> {
        Ok(self.agent_dir(agent_id)?.join(format!("g-{number}.json")))
    }

    /// Every readable goal of `agent_id`, in no order.
    pub(super) fn list(&self, agent_id: &str) -> Result<Vec<Goal>, GoalError> {
        let dir = self.agent_dir(agent_id)?;
        Ok(read_dir_names(&dir)?
            .into_iter()
            .filter_map(|(_, path)| read_goal(&path))
            .filter(|g| g.agent_id == agent_id)
            .collect())
    }

    /// The agents that have a goal directory.
    pub(super) fn agents(&self) -> Result<Vec<String>, GoalError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(GoalError::Io {
                    op: "list",
                    path: self.dir.clone(),
                    source,
                });
            }
        };
        Ok(entries
            .filter_map(Result::ok)
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|name| checked_agent(name).is_ok())
            .collect())
    }

    pub(super) fn get(&self, agent_id: &str, number: u64) -> Result<Option<Goal>, GoalError> {
        let path = self.goal_path(agent_id, number)?;
        Ok(read_goal(&path).filter(|g| g.agent_id == agent_id))
    }

    /// Writes the goal `make` builds from the next number of `agent_id`.
    /// Every file counts, readable or not: a number is never given twice.
    pub(super) fn insert(&self, agent_id: &str, make: impl FnOnce(u64) -> Goal) -> Result<Goal, GoalError> {
        let dir = self.agent_dir(agent_id)?;
        let _guard = self.guard();
        std::fs::create_dir_all(&dir).map_err(|source| GoalError::Io {
            op: "create",
            path: dir.clone(),
            source,
        })?;
        let next = read_dir_names(&dir)?
            .iter()
            .filter_map(|(name, _)| goal_number(name.strip_suffix(".json")?))
            .max()
            .unwrap_or(0)
            + 1;
        let goal = make(next);
        self.write(&goal, next)?;
        Ok(goal)
    }

    /// Reads goal `number` of `agent_id`, lets `change` edit it, and writes
    /// it when `change` answers `true`; under the writers' lock.
    pub(super) fn modify(
        &self,
        agent_id: &str,
        number: u64,
        change: impl FnOnce(&mut Goal) -> Result<bool, GoalError>,
    ) -> Result<Option<Goal>, GoalError> {
        let _guard = self.guard();
        let Some(mut goal) = self.get(agent_id, number)? else {
            return Ok(None);
        };
        if change(&mut goal)? {
            self.write(&goal, number)?;
        }
        Ok(Some(goal))
    }

    fn write(&self, goal: &Goal, number: u64) -> Result<(), GoalError> {
        let path = self.goal_path(&goal.agent_id, number)?;
        let mut json = serde_json::to_vec_pretty(goal).map_err(|e| GoalError::Invalid(e.to_string()))?;
        json.push(b'\n');
        write_atomic(&path, &json).map_err(|source| GoalError::Io {
            op: "write",
            path,
            source,
        })
    }
}

/// `(file name, path)` of every `*.json` in `dir`; none when it is missing.
fn read_dir_names(dir: &Path) -> Result<Vec<(String, PathBuf)>, GoalError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(GoalError::Io {
                op: "list",
                path: dir.to_owned(),
                source,
            });
        }
    };
    Ok(entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.ends_with(".json").then(|| (name, e.path()))
        })
        .collect())
}

fn read_goal(path: &Path) -> Option<Goal> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "a goal file could not be read; it is skipped");
            return None;
        }
    };
    match serde_json::from_slice::<Goal>(&bytes) {
        Ok(goal) if goal_number(&goal.id).is_some() => Some(goal),
        Ok(_) => {
            tracing::warn!(path = %path.display(), "a goal file has a bad id; it is skipped");
            None
        }
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "a goal file is not a goal; it is skipped and left in place");
            None
        }
    }
}
