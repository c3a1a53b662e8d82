//! The user model (사용자 모델): `$JARVIS_HOME/user_model.json`, one file
//! every agent reads (R-MEM-9), updated under a lock and written
//! atomically (R-IDEM-3).
//!
//! The rules are documented on [`UserModelFile`].

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use super::error::MemoryError;
use super::forget::ForgottenSecret;
use jarvis_common::{Timestamp, update_file_locked};

/// The file name under `JARVIS_HOME`.
pub const USER_MODEL_FILE: &str = "user_model.json";

/// The user model's content (see [`UserModelFile`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UserModel {
    /// The format version (1).
    #[serde(default = "version")]
    pub v: u32,
    /// What is known about the user, by key.
    #[serde(default)]
    pub entries: BTreeMap<String, String>,
    /// When it was last written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<Timestamp>,
    /// Provenance of distilled entries: by key, the ids of the episodes the
    /// entry was distilled from.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub provenance: BTreeMap<String, Vec<String>>,
    /// What the person asked to forget, as digests (never the text).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forgotten: Vec<ForgottenSecret>,
    /// Per agent, how far distillation has read its episodes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub distilled: BTreeMap<String, DistillMark>,
    /// Other keys found in the file, kept when it is rewritten.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// How far distillation has read one agent's episodes: the newest
/// episode's time, and the ids of the episodes read with exactly that time
/// (so episodes written in the same millisecond are neither read twice nor
/// skipped).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DistillMark {
    /// The time of the newest episode read.
    pub through: Timestamp,
    /// The episodes read whose time is `through`.
    #[serde(default)]
    pub episodes: Vec<String>,
}

impl DistillMark {
    /// Whether an episode with this time and id was not read yet.
    pub fn is_after(&self, created_at: Timestamp, id: &str) -> bool {
        created_at > self.through || (created_at == self.through && !self.episodes.iter().any(|e| e == id))
    }
}

fn version() -> u32 {
    1
}

impl UserModel {
    /// The entries as `key: value` lines, in key order.
    pub fn lines(&self) -> Vec<String> {
        self.entries
            .iter()
            .filter(|(_, v)| !v.trim().is_empty())
            .map(|(k, v)| format!("{k}: {}", v.trim()))
            .collect()
    }
}

type Cached = (Option<SystemTime>, u64, UserModel);

/// The user-model file. Reads are cached until the file changes.
///
/// The file is a JSON object:
///
/// ```json
/// {"v": 1, "entries": {"name": "서연 아빠", "language": "한국어, 존댓말 없이"}, "updated_at": "2026-11-29T19:45:05.123Z"}
/// ```
///
/// `entries` maps a short key to what is known; they open the
/// `[핵심 사실]` section in key order. Distillation adds three more keys
/// (each left out while empty):
///
/// - `provenance`: `{key: [episode ids]}`, the episodes each distilled entry
///   came from;
/// - `forgotten`: `[{digest, chars, at}]`, what the person asked to forget,
///   as a digest and a length, never the text (see
///   [`ForgottenSecret`]);
/// - `distilled`: `{agent_id: {through, episodes}}`, how far distillation has
///   read each agent's episodes ([`DistillMark`]).
///
/// Other top-level keys are kept as they are when the file is rewritten.
///
/// Reading is tolerant: a missing file is an empty model, and a damaged one
/// (not JSON, not an object, `entries` not a map of strings) is an empty
/// model with a warning, so a turn never fails on it. Writing is not: a
/// damaged file is left as it is ([`MemoryError::DamagedUserModel`]) rather
/// than replaced, so nothing a person wrote is lost.
#[derive(Debug)]
pub struct UserModelFile {
    path: PathBuf,
    cache: Mutex<Option<Cached>>,
}

impl UserModelFile {
    /// The file `<home>/user_model.json`.
    pub fn new(home: &Path) -> Self {
        Self::at(home.join(USER_MODEL_FILE))
    }

    /// The file at `path`.
    pub fn at(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            cache: Mutex::new(None),
        }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The model; empty when the file is missing, and empty with a warning
    /// when it is damaged or unreadable. Never fails.
    pub fn load(&self) -> UserModel {
        let stamp = std::fs::metadata(&self.path)
            .ok()
            .map(|m| (m.modified().ok(), m.len()));
        let Some((modified, len)) = stamp else {
            return UserModel::default();
        };
        {
            let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((m, l, model)) = &*cache
                && *m == modified
                && *l == len
                && modified.is_some()
            {
                return model.clone();
            }
        }
        let model = match self.read() {
            Ok(model) => model.unwrap_or_default(),
            Err(e) => {
                tracing::warn!("{e}; the user model is read as empty");
                UserModel::default()
            }
        };
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        *cache = Some((modified, len, model.clone()));
        model
    }

    /// The model, `None` when the file is missing, an error when it cannot
    /// be read or is damaged.
    pub fn read(&self) -> Result<Option<UserModel>, MemoryError> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(MemoryError::File {
                    op: "read",
                    path: self.path.clone(),
                    source,
                });
            }
        };
        serde_json::from_slice::<UserModel>(&bytes)
            .map(Some)
            .map_err(|e| MemoryError::DamagedUserModel {
                path: self.path.clone(),
                reason: e.to_string(),
            })
    }

    /// Reads the model, lets `change` edit it, stamps it with `now` and
    /// writes it atomically; answers what was written. A damaged file is
    /// not overwritten. The read and the write happen under the file's
    /// lock (see [`try_update`](Self::try_update)).
    pub fn update(
        &self,
        now: Timestamp,
        change: impl FnOnce(&mut UserModel),
    ) -> Result<UserModel, MemoryError> {
        self.try_update(now, |model| {
            change(model);
            Ok(())
        })
        .map(|(model, ())| model)
    }

    /// Like [`update`](Self::update), but `change` may refuse: its error
    /// leaves the file as it is and is answered. Answers what was written
    /// and what `change` answered.
    ///
    /// The file is read and written under a lock that covers both
    /// ([`update_file_locked`]: a mutex in this process and an OS lock on
    /// `user_model.json.lock` against other processes), so `change` always
    /// sees the last update, and two updates at once (a distillation and a
    /// forgetting) both land: neither the forgotten digest nor a distilled
    /// entry is lost to the other's write.
    pub fn try_update<T>(
        &self,
        now: Timestamp,
        change: impl FnOnce(&mut UserModel) -> Result<T, MemoryError>,
    ) -> Result<(UserModel, T), MemoryError> {
        let path = &self.path;
        let outcome = update_file_locked(path, |old| {
            let mut model = match old {
                None => UserModel::default(),
                Some(bytes) => serde_json::from_slice::<UserModel>(&bytes).map_err(|e| {
                    MemoryError::DamagedUserModel {
                        path: path.clone(),
                        reason: e.to_string(),
                    }
                })?,
            };
            let out = change(&mut model)?;
            stamp(&mut model, now);
            let mut bytes = serde_json::to_vec_pretty(&model).map_err(|e| MemoryError::File {
                op: "write",
                path: path.clone(),
                source: std::io::Error::other(e),
            })?;
            bytes.push(b'\n');
            Ok((Some(bytes), (model, out)))
        })
        .map_err(|source| MemoryError::File {
            op: "update",
            path: path.clone(),
            source,
        })?;
        *self.cache.lock().unwrap_or_else(|e| e.into_inner()) = None;
        outcome
    }
}

/// Marks `model` as written at `now` in the current format.
pub(crate) fn stamp(model: &mut UserModel, now: Timestamp) {
    model.v = version();
    model.updated_at = Some(now);
}

/// Where the user model is kept: `user_model.json` in a home, or (feature
/// `postgres`) a row of `jarvis_user_model` shared by every node of a
/// deployment. Both read a damaged model as empty with a warning and never
/// overwrite it.
#[derive(Debug)]
#[non_exhaustive]
pub enum UserModelStore {
    /// `$JARVIS_HOME/user_model.json`.
    File(UserModelFile),
    /// The table `jarvis_user_model`.
    #[cfg(feature = "postgres")]
    Postgres(super::user_model_postgres::PostgresUserModel),
}

impl UserModelStore {
    /// The model; empty when there is none yet, and empty with a warning
    /// when it is damaged or cannot be read. Never fails.
    pub async fn load(&self) -> UserModel {
        match self {
            Self::File(file) => file.load(),
            #[cfg(feature = "postgres")]
            Self::Postgres(pg) => match pg.read().await {
                Ok(model) => model.unwrap_or_default(),
                Err(e) => {
                    tracing::warn!("{e}; the user model is read as empty");
                    UserModel::default()
                }
            },
        }
    }

    /// Reads the model, lets `change` edit it (or refuse, leaving it as it
    /// is), stamps it with `now` and writes it, atomically against every
    /// other writer; answers what was written and what `change` answered.
    pub async fn try_update<T>(
        &self,
        now: Timestamp,
        change: impl FnOnce(&mut UserModel) -> Result<T, MemoryError>,
    ) -> Result<(UserModel, T), MemoryError> {
        match self {
            Self::File(file) => file.try_update(now, change),
            #[cfg(feature = "postgres")]
            Self::Postgres(pg) => pg.try_update(now, change).await,
        }
    }

    /// Like [`try_update`](Self::try_update) with a change that cannot
    /// refuse.
    pub async fn update(
        &self,
        now: Timestamp,
        change: impl FnOnce(&mut UserModel),
    ) -> Result<UserModel, MemoryError> {
        self.try_update(now, |model| {
            change(model);
            Ok(())
        })
        .await
        .map(|(model, ())| model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_damaged_and_round_tripped_files() {
        let dir = tempfile::tempdir().unwrap();
        let file = UserModelFile::new(dir.path());
        assert_eq!(file.load(), UserModel::default());
        assert_eq!(file.read().unwrap(), None);

        std::fs::write(
            file.path(),
            b"{\"entries\": {\"name\": \"Ada\"}, \"legacy\": [1]}",
        )
        .unwrap();
        let model = file.update(Timestamp::from_millis(5), |m| {
            m.entries.insert("lang".into(), "ko".into());
        });
        let model = model.unwrap();
        assert_eq!(model.lines(), ["lang: ko", "name: Ada"]);
        let text = std::fs::read_to_string(file.path()).unwrap();
        assert!(
            text.contains("\"legacy\"") && text.contains("1970-01-01T00:00:00.005Z"),
            "{text}"
        );
        assert_eq!(file.load().entries.len(), 2);

        std::fs::write(file.path(), b"[not, json").unwrap();
        assert_eq!(file.load(), UserModel::default());
        let err = file.update(Timestamp::EPOCH, |_| {}).unwrap_err();
        assert!(matches!(err, MemoryError::DamagedUserModel { .. }), "{err}");
        assert_eq!(std::fs::read(file.path()).unwrap(), b"[not, json");
    }
}
