//! Open-loop stores: in memory, and `$JARVIS_HOME/openloops.jsonl`, an
//! append-only log of `open` and `close` records folded on load.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::{LoopError, LoopFilter, OpenLoop, OpenLoopStore};
use jarvis_common::Timestamp;

/// The file name of the JSONL store in `$JARVIS_HOME`.
pub const OPEN_LOOPS_FILE: &str = "openloops.jsonl";

fn matches(l: &OpenLoop, f: &LoopFilter) -> bool {
    f.session_id.as_ref().is_none_or(|s| *s == l.session_id)
        && f.agent_id.as_ref().is_none_or(|a| *a == l.agent_id)
        && (!f.open_only || l.is_open())
}

fn remind_in(loops: &mut [OpenLoop], id: &str, at: Timestamp) -> bool {
    match loops.iter_mut().find(|l| l.id == id) {
        Some(l) if l.reminded_at.is_none() => {
            l.reminded_at = Some(at);
            true
        }
        _ => false,
    }
}

fn close_in(loops: &mut [OpenLoop], id: &str, session_id: &str, at: Timestamp) -> bool {
    match loops.iter_mut().find(|l| l.id == id) {
        Some(l) if l.is_open() && l.session_id == session_id => {
            l.closed_at = Some(at);
            true
        }
        _ => false,
    }
}

/// Loops in memory; for tests and embedding.
#[derive(Debug, Default)]
pub struct MemoryOpenLoopStore {
    loops: Mutex<Vec<OpenLoop>>,
}

impl MemoryOpenLoopStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl OpenLoopStore for MemoryOpenLoopStore {
    async fn open(&self, open_loop: OpenLoop) -> Result<(), LoopError> {
        self.loops
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(open_loop);
        Ok(())
    }

    async fn close(&self, id: &str, session_id: &str, at: Timestamp) -> Result<bool, LoopError> {
        let mut loops = self.loops.lock().unwrap_or_else(|e| e.into_inner());
        Ok(close_in(&mut loops, id, session_id, at))
    }

    async fn list(&self, filter: &LoopFilter) -> Result<Vec<OpenLoop>, LoopError> {
        let loops = self.loops.lock().unwrap_or_else(|e| e.into_inner());
        Ok(loops.iter().filter(|l| matches(l, filter)).cloned().collect())
    }

    async fn mark_reminded(&self, id: &str, at: Timestamp) -> Result<bool, LoopError> {
        let mut loops = self.loops.lock().unwrap_or_else(|e| e.into_inner());
        Ok(remind_in(&mut loops, id, at))
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Record {
    Open {
        v: u32,
        #[serde(rename = "loop")]
        open_loop: OpenLoop,
    },
    Close {
        v: u32,
        id: String,
        session_id: String,
        at: Timestamp,
    },
    Reminded {
        v: u32,
        id: String,
        at: Timestamp,
    },
}

/// `$JARVIS_HOME/openloops.jsonl`: one record per line, appended with one
/// write; a torn or damaged line is skipped with a warning on load.
#[derive(Debug)]
pub struct JsonlOpenLoopStore {
    path: PathBuf,
    loops: Mutex<Vec<OpenLoop>>,
}

impl JsonlOpenLoopStore {
    /// Opens (or starts) the file in `home`.
    pub fn open(home: &Path) -> Result<Self, LoopError> {
        let path = home.join(OPEN_LOOPS_FILE);
        let mut loops = Vec::new();
        match std::fs::read(&path) {
            Ok(bytes) => {
                for (n, line) in bytes.split(|b| *b == b'\n').enumerate() {
                    if line.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    match serde_json::from_slice::<Record>(line) {
                        Ok(Record::Open { open_loop, .. }) => loops.push(open_loop),
                        Ok(Record::Close {
                            id, session_id, at, ..
                        }) => {
                            close_in(&mut loops, &id, &session_id, at);
                        }
                        Ok(Record::Reminded { id, at, .. }) => {
                            remind_in(&mut loops, &id, at);
                        }
                        Err(error) => {
                            tracing::warn!(file = %path.display(), line = n + 1, %error, "open-loop record skipped")
                        }
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(LoopError::Io {
                    action: "read",
                    path,
                    source,
                });
            }
        }
        Ok(Self {
            path,
            loops: Mutex::new(loops),
        })
    }

    fn append(&self, record: &Record) -> Result<(), LoopError> {
        let mut line = serde_json::to_vec(record).unwrap_or_default();
        line.push(b'\n');
        let io = |action, source| LoopError::Io {
            action,
            path: self.path.clone(),
            source,
        };
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| io("open", e))?;
        file.write_all(&line).map_err(|e| io("write", e))?;
        file.sync_data().map_err(|e| io("sync", e))
    }
}

#[async_trait]
impl OpenLoopStore for JsonlOpenLoopStore {
    async fn open(&self, open_loop: OpenLoop) -> Result<(), LoopError> {
        let mut loops = self.loops.lock().unwrap_or_else(|e| e.into_inner());
        self.append(&Record::Open {
            v: 1,
            open_loop: open_loop.clone(),
        })?;
        loops.push(open_loop);
        Ok(())
    }

    async fn close(&self, id: &str, session_id: &str, at: Timestamp) -> Result<bool, LoopError> {
        let mut loops = self.loops.lock().unwrap_or_else(|e| e.into_inner());
        let open_here = loops
            .iter()
            .any(|l| l.id == id && l.is_open() && l.session_id == session_id);
        if !open_here {
            return Ok(false);
        }
        self.append(&Record::Close {
            v: 1,
            id: id.to_owned(),
            session_id: session_id.to_owned(),
            at,
        })?;
        Ok(close_in(&mut loops, id, session_id, at))
    }

    async fn list(&self, filter: &LoopFilter) -> Result<Vec<OpenLoop>, LoopError> {
        let loops = self.loops.lock().unwrap_or_else(|e| e.into_inner());
        Ok(loops.iter().filter(|l| matches(l, filter)).cloned().collect())
    }

    async fn mark_reminded(&self, id: &str, at: Timestamp) -> Result<bool, LoopError> {
        let mut loops = self.loops.lock().unwrap_or_else(|e| e.into_inner());
        if !loops.iter().any(|l| l.id == id && l.reminded_at.is_none()) {
            return Ok(false);
        }
        self.append(&Record::Reminded {
            v: 1,
            id: id.to_owned(),
            at,
        })?;
        Ok(remind_in(&mut loops, id, at))
    }
}
