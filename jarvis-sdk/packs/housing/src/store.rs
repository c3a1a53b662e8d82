//! The files the housing stores keep under `$JARVIS_HOME`: small JSON
//! documents read whole, updated under a lock that covers the read and the
//! write, replaced atomically and versioned with a `"v": 1` member, and the append-only `external_seen.jsonl` of notices already
//! reported by watches.

use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::Path;

use super::error::HousingError;
use jarvis_sdk::common::{Timestamp, update_file_locked};

/// The file format version written and accepted.
pub(crate) const FILE_VERSION: u64 = 1;

/// The document in `path`, or `None` when the file does not exist. A file
/// that does not parse, or has another version, is an error and is left as
/// it is.
pub(crate) fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, HousingError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(HousingError::Io {
                path: path.to_owned(),
                source,
            });
        }
    };
    parse_json(path, &bytes).map(Some)
}

/// The document in `bytes`, read from `path`: JSON with `"v": 1`.
fn parse_json<T: DeserializeOwned>(path: &Path, bytes: &[u8]) -> Result<T, HousingError> {
    let corrupt = |message: String| HousingError::Corrupt {
        path: path.to_owned(),
        message,
    };
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
    match value.get("v").and_then(serde_json::Value::as_u64) {
        Some(FILE_VERSION) => {}
        Some(other) => {
            return Err(corrupt(format!(
                "version {other} is not supported (expected {FILE_VERSION})"
            )));
        }
        None => return Err(corrupt("no `v` version member".to_owned())),
    }
    serde_json::from_value(value).map_err(|e| corrupt(e.to_string()))
}

/// The bytes of `doc` as written: pretty JSON and a final newline.
fn json_bytes<T: Serialize>(path: &Path, doc: &T) -> Result<Vec<u8>, HousingError> {
    let mut bytes = serde_json::to_vec_pretty(doc).map_err(|e| HousingError::Io {
        path: path.to_owned(),
        source: std::io::Error::other(e),
    })?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Reads the document in `path` (`None` when the file does not exist),
/// lets `change` make the new one, and writes it back atomically, all
/// under the file's lock ([`update_file_locked`]: this process and other
/// processes alike), so no update is lost to another made at the same
/// time. A file that does not parse is an error and is left as it is, and
/// so is the file when `change` fails.
pub(crate) fn update_json<D, T>(
    path: &Path,
    change: impl FnOnce(Option<D>) -> Result<(D, T), HousingError>,
) -> Result<T, HousingError>
where
    D: Serialize + DeserializeOwned,
{
    update_file_locked(path, |old| {
        let doc = old.map(|bytes| parse_json::<D>(path, &bytes)).transpose()?;
        let (doc, out) = change(doc)?;
        Ok((Some(json_bytes(path, &doc)?), out))
    })
    .map_err(|source| HousingError::Io {
        path: path.to_owned(),
        source,
    })?
}

/// The file name of the log of external items already reported, under
/// `$JARVIS_HOME` (SPEC.md §9.1).
pub const EXTERNAL_SEEN_FILE: &str = "external_seen.jsonl";
/// The `source` of the records `housing_watch` writes there.
pub(crate) const WATCH_SEEN_SOURCE: &str = "housing_watch";

/// One line of `external_seen.jsonl` written for a watch:
/// `{"v":1,"source":"housing_watch","watch_id","key","at"}`.
#[derive(Debug, Serialize, serde::Deserialize)]
struct SeenRecord {
    v: u64,
    source: String,
    watch_id: String,
    key: String,
    at: Timestamp,
}

/// The notice keys already reported, per watch, as read from
/// `external_seen.jsonl` and kept up to date by [`SeenLog::append`].
#[derive(Debug, Default)]
pub(crate) struct SeenLog {
    keys: HashMap<String, HashSet<String>>,
    /// The file ends without a newline (a torn last line): the next append
    /// starts a new line first, so the torn line stays alone and skipped.
    torn_tail: bool,
}

impl SeenLog {
    /// Reads the records of `housing_watch` in `path` (a missing file is an
    /// empty log). Records of other sources are left alone; a torn or
    /// damaged line is skipped with a warning, never fatal.
    pub(crate) fn load(path: &Path) -> Result<Self, HousingError> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(source) => {
                return Err(HousingError::Io {
                    path: path.to_owned(),
                    source,
                });
            }
        };
        let mut log = Self {
            torn_tail: bytes.last().is_some_and(|b| *b != b'\n'),
            ..Self::default()
        };
        for (n, line) in bytes.split(|b| *b == b'\n').enumerate() {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let value = match serde_json::from_slice::<serde_json::Value>(line) {
                Ok(value) => value,
                Err(error) => {
                    tracing::warn!(file = %path.display(), line = n + 1, %error, "external_seen: damaged line skipped");
                    continue;
                }
            };
            if value.get("source").and_then(serde_json::Value::as_str) != Some(WATCH_SEEN_SOURCE) {
                continue;
            }
            match serde_json::from_value::<SeenRecord>(value) {
                Ok(record) => {
                    log.keys.entry(record.watch_id).or_default().insert(record.key);
                }
                Err(error) => {
                    tracing::warn!(file = %path.display(), line = n + 1, %error, "external_seen: damaged line skipped")
                }
            }
        }
        Ok(log)
    }

    /// The keys reported for `watch_id`.
    pub(crate) fn keys(&self, watch_id: &str) -> HashSet<String> {
        self.keys.get(watch_id).cloned().unwrap_or_default()
    }

    /// Appends one record per new key (one write, then `fsync`) and adds
    /// them to the index; keys already recorded are not written again.
    pub(crate) fn append(
        &mut self,
        path: &Path,
        watch_id: &str,
        keys: Vec<String>,
        at: Timestamp,
    ) -> Result<(), HousingError> {
        let known = self.keys.entry(watch_id.to_owned()).or_default();
        let mut fresh: Vec<String> = Vec::new();
        for key in keys {
            if !known.contains(&key) && !fresh.contains(&key) {
                fresh.push(key);
            }
        }
        if fresh.is_empty() {
            return Ok(());
        }
        let mut bytes = Vec::new();
        if self.torn_tail {
            bytes.push(b'\n');
        }
        for key in &fresh {
            let record = SeenRecord {
                v: FILE_VERSION,
                source: WATCH_SEEN_SOURCE.to_owned(),
                watch_id: watch_id.to_owned(),
                key: key.clone(),
                at,
            };
            bytes.extend(serde_json::to_vec(&record).unwrap_or_default());
            bytes.push(b'\n');
        }
        let io = |source| HousingError::Io {
            path: path.to_owned(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(io)?;
        file.write_all(&bytes).map_err(io)?;
        file.sync_data().map_err(io)?;
        self.torn_tail = false;
        self.keys.entry(watch_id.to_owned()).or_default().extend(fresh);
        Ok(())
    }
}
