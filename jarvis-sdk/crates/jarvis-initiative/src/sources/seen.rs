//! The record of reported items, `external_seen.jsonl`: which items of
//! each source were reported, and whether its baseline was taken.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::SEEN_FILE;
use jarvis_common::Timestamp;

/// One line of `external_seen.jsonl` for a source.
#[derive(Debug, Serialize, Deserialize)]
struct SeenLine {
    v: u64,
    source: String,
    key: String,
    at: Timestamp,
}

/// The items each source reported, as `external_seen.jsonl` records them.
#[derive(Debug)]
pub struct SeenStore {
    path: PathBuf,
    /// Source id → keys (`""` marks the baseline). Loaded on first use.
    keys: Mutex<Option<HashMap<String, HashSet<String>>>>,
}

impl SeenStore {
    /// The record in `home/external_seen.jsonl`.
    pub fn new(home: &Path) -> Self {
        Self {
            path: home.join(SEEN_FILE),
            keys: Mutex::new(None),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, HashSet<String>>) -> T) -> T {
        let mut guard = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        let keys = guard.get_or_insert_with(|| self.load());
        f(keys)
    }

    fn load(&self) -> HashMap<String, HashSet<String>> {
        let mut keys: HashMap<String, HashSet<String>> = HashMap::new();
        let Ok(bytes) = std::fs::read(&self.path) else {
            return keys;
        };
        for line in bytes.split(|b| *b == b'\n') {
            let Ok(value) = serde_json::from_slice::<Value>(line) else {
                continue;
            };
            // Lines of other writers (a pack's watches: `watch_id`) are theirs.
            if value.get("watch_id").is_some() {
                continue;
            }
            if let Ok(seen) = serde_json::from_value::<SeenLine>(value) {
                keys.entry(seen.source).or_default().insert(seen.key);
            }
        }
        keys
    }

    /// Whether `source` was checked before (its baseline is recorded).
    pub fn has_baseline(&self, source: &str) -> bool {
        self.with(|k| k.get(source).is_some_and(|s| s.contains("")))
    }

    /// Whether `key` of `source` was reported.
    pub fn contains(&self, source: &str, key: &str) -> bool {
        self.with(|k| k.get(source).is_some_and(|s| s.contains(key)))
    }

    /// Records `keys` of `source` (those new), one synced append.
    pub fn record(&self, source: &str, keys: &[String], at: Timestamp) -> Result<(), String> {
        self.with(|known| {
            let set = known.entry(source.to_owned()).or_default();
            let fresh: Vec<&String> = keys.iter().filter(|k| !set.contains(*k)).collect();
            if fresh.is_empty() {
                return Ok(());
            }
            let mut bytes = Vec::new();
            // A torn last line stays alone on its own line.
            if ends_torn(&self.path) {
                bytes.push(b'\n');
            }
            for key in &fresh {
                let line = SeenLine {
                    v: 1,
                    source: source.to_owned(),
                    key: (*key).clone(),
                    at,
                };
                bytes.extend(serde_json::to_vec(&line).unwrap_or_default());
                bytes.push(b'\n');
            }
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
                .map_err(|e| format!("{}: {e}", self.path.display()))?;
            file.write_all(&bytes)
                .and_then(|()| file.sync_data())
                .map_err(|e| format!("{}: {e}", self.path.display()))?;
            set.extend(fresh.into_iter().cloned());
            Ok(())
        })
    }
}

/// Whether the file at `path` ends without a newline: its last byte only
/// is read (a pack's watches may append to the same file).
fn ends_torn(path: &Path) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(path) else {
        return false;
    };
    let mut last = [0u8; 1];
    file.seek(SeekFrom::End(-1)).is_ok() && file.read_exact(&mut last).is_ok() && last[0] != b'\n'
}
