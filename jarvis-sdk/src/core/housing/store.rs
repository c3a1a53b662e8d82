//! The small JSON files the housing stores keep under `$JARVIS_HOME`: read
//! whole, replaced atomically, versioned with a `"v": 1` member.

use serde::Serialize;
use serde::de::DeserializeOwned;
use std::path::Path;

use super::error::HousingError;
use crate::common::write_atomic;

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
    let corrupt = |message: String| HousingError::Corrupt {
        path: path.to_owned(),
        message,
    };
    let value: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
    match value.get("v").and_then(serde_json::Value::as_u64) {
        Some(FILE_VERSION) => {}
        Some(other) => {
            return Err(corrupt(format!(
                "version {other} is not supported (expected {FILE_VERSION})"
            )));
        }
        None => return Err(corrupt("no `v` version member".to_owned())),
    }
    serde_json::from_value(value)
        .map(Some)
        .map_err(|e| corrupt(e.to_string()))
}

/// Replaces `path` with `doc` atomically, creating its directory first.
pub(crate) fn write_json<T: Serialize>(path: &Path, doc: &T) -> Result<(), HousingError> {
    let io = |source| HousingError::Io {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let mut bytes = serde_json::to_vec_pretty(doc).map_err(|e| io(std::io::Error::other(e)))?;
    bytes.push(b'\n');
    write_atomic(path, &bytes).map_err(io)
}
