//! [`Outbox`]: messages an agent will send on its own (a watch report, a
//! follow-up), kept durably until the reflection daemon has recorded each
//! one in its session.
//!
//! `$JARVIS_HOME/outbox.jsonl` is an append-only log:
//! `{"v":1,"op":"put","item":{…}}` when a message is queued (synced before
//! [`Outbox::put`] returns) and `{"v":1,"op":"done","message_id"}` once it
//! is recorded in its session. On open the log is folded: every `put`
//! without a `done` is still to deliver. A torn or damaged line is skipped
//! with a warning.
//!
//! The outbox is bounded by back-pressure, never by dropping: when it holds
//! [`Outbox::capacity`] messages, [`Outbox::put`] waits until the daemon has
//! delivered one. A message id is queued once: putting an id that is
//! waiting already changes nothing (a producer that repeats itself after a
//! crash does no harm), and recording in the session is keyed by the same
//! id, so a message delivered before a crash is not recorded twice.
//!
//! In a deployment on Postgres ([`Outbox::postgres`], feature `postgres`)
//! the messages are rows of `jarvis_outbox` instead, shared by every node:
//! a message queued on one node is recorded by whichever node owns its
//! session (the others leave it waiting), and outlives the node that
//! queued it. The capacity then bounds the whole deployment's waiting
//! messages; a producer waiting for room looks again when its own node
//! delivers one, and at least every second.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use tokio::sync::Notify;

use jarvis_agent::ProactiveKind;
use jarvis_common::Timestamp;

#[cfg(feature = "postgres")]
mod postgres;

/// The outbox's file name under `JARVIS_HOME`.
pub const OUTBOX_FILE: &str = "outbox.jsonl";

/// How many messages may wait by default.
pub const DEFAULT_OUTBOX_CAPACITY: usize = 1_000;

/// The log is rewritten with only the waiting messages once it is this long.
const COMPACT_OVER: u64 = 1 << 20;

/// A failure of the outbox's file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutboxError {
    /// The file could not be read or written.
    #[error("outbox: could not {op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The database of a shared outbox failed (feature `postgres`).
    #[error("outbox (postgres): could not {op}: {source}")]
    Database {
        /// What was being done.
        op: &'static str,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// How often a producer waiting for room in a shared outbox looks again
/// (other nodes' deliveries do not wake it).
#[cfg(feature = "postgres")]
const SHARED_ROOM_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// One message waiting to be recorded in its session and shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxItem {
    /// The message's id: the same message always gets the same id.
    pub message_id: String,
    /// The session it is recorded in.
    pub session_id: String,
    /// The agent that speaks.
    pub agent_id: String,
    /// What the `proactive_message` says it is.
    pub kind: ProactiveKind,
    /// The text.
    pub text: String,
    /// When it was queued.
    pub at: Timestamp,
    /// What the producer needs to recognise it again (a watch: its id and
    /// the notice keys reported).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub meta: Value,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Record {
    Put { v: u32, item: OutboxItem },
    Done { v: u32, message_id: String },
}

/// The outbox; see the module docs.
#[derive(Debug)]
pub struct Outbox {
    file: Option<(PathBuf, Mutex<File>)>,
    /// The deployment's table, instead of the file.
    #[cfg(feature = "postgres")]
    shared: Option<postgres::PostgresOutbox>,
    capacity: usize,
    state: Mutex<State>,
    room: Notify,
}

#[derive(Debug, Default)]
struct State {
    /// The waiting messages (of a shared outbox: as last read).
    pending: VecDeque<OutboxItem>,
    /// Every message put since the log was last compacted (for
    /// [`Outbox::logged`]).
    logged: Vec<OutboxItem>,
    len: u64,
}

impl Outbox {
    /// An outbox that keeps nothing on disk (tests, embedding without a home).
    pub fn in_memory(capacity: usize) -> Self {
        Self {
            file: None,
            #[cfg(feature = "postgres")]
            shared: None,
            capacity: capacity.max(1),
            state: Mutex::default(),
            room: Notify::new(),
        }
    }

    /// The outbox every node of a deployment shares, in the Postgres
    /// database at `url` (table `jarvis_outbox`, created when missing).
    #[cfg(feature = "postgres")]
    pub async fn postgres(url: &str, capacity: usize) -> Result<Self, OutboxError> {
        Ok(Self {
            shared: Some(postgres::PostgresOutbox::connect(url).await?),
            ..Self::in_memory(capacity)
        })
    }

    /// Opens (creating it when missing) the outbox at `path`.
    pub fn open(path: impl Into<PathBuf>, capacity: usize) -> Result<Self, OutboxError> {
        let path = path.into();
        let io = |op: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| OutboxError::Io { op, path, source }
        };
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io("read", &path)(e)),
        };
        let mut state = State::default();
        let mut good = 0usize;
        let mut skipped = 0usize;
        let mut offset = 0usize;
        while let Some(nl) = bytes[offset..].iter().position(|b| *b == b'\n') {
            let line = &bytes[offset..offset + nl];
            offset += nl + 1;
            good = offset;
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<Record>(line) {
                Ok(Record::Put { v: 1, item }) => {
                    if !state.pending.iter().any(|p| p.message_id == item.message_id) {
                        state.pending.push_back(item.clone());
                    }
                    state.logged.push(item);
                }
                Ok(Record::Done { v: 1, message_id }) => state.pending.retain(|p| p.message_id != message_id),
                _ => skipped += 1,
            }
        }
        if skipped > 0 {
            tracing::warn!(path = %path.display(), skipped, "outbox: skipped damaged lines");
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io("open", &path))?;
        if good < bytes.len() {
            tracing::warn!(path = %path.display(), "outbox: cut off a torn last line (a write was interrupted)");
            file.set_len(good as u64)
                .and_then(|()| file.sync_data())
                .map_err(io("repair", &path))?;
        }
        state.len = good as u64;
        Ok(Self {
            file: Some((path, Mutex::new(file))),
            #[cfg(feature = "postgres")]
            shared: None,
            capacity: capacity.max(1),
            state: Mutex::new(state),
            room: Notify::new(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many messages may wait.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many wait now (a shared outbox: how many waited when it was
    /// last read).
    pub fn len(&self) -> usize {
        self.state().pending.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The waiting messages, oldest first. A shared outbox that cannot be
    /// read answers none (with a warning); the next call reads again.
    pub async fn pending(&self) -> Vec<OutboxItem> {
        #[cfg(feature = "postgres")]
        if let Some(shared) = &self.shared {
            return match shared.pending(self.capacity).await {
                Ok(items) => {
                    self.state().pending = items.iter().cloned().collect();
                    items
                }
                Err(error) => {
                    tracing::warn!(%error, "outbox: the waiting messages could not be read; the next round tries again");
                    Vec::new()
                }
            };
        }
        self.state().pending.iter().cloned().collect()
    }

    /// Every message put since the log was last compacted, delivered or
    /// not: a producer that must know what it queued before a crash (a
    /// built-in job whose items count as reported once queued) reads it at
    /// start, before [`Outbox::compact`].
    pub async fn logged(&self) -> Vec<OutboxItem> {
        #[cfg(feature = "postgres")]
        if let Some(shared) = &self.shared {
            return shared.logged().await.unwrap_or_else(|error| {
                tracing::warn!(%error, "outbox: the queued messages could not be read");
                Vec::new()
            });
        }
        self.state().logged.clone()
    }

    /// Queues `item` durably, waiting while the outbox is full; answers
    /// `false` when a message with its id waits already.
    pub async fn put(&self, item: OutboxItem) -> Result<bool, OutboxError> {
        #[cfg(feature = "postgres")]
        if let Some(shared) = &self.shared {
            return self.put_shared(shared, item).await;
        }
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            {
                let mut state = self.state();
                if state.pending.iter().any(|p| p.message_id == item.message_id) {
                    return Ok(false);
                }
                if state.pending.len() < self.capacity {
                    self.append(
                        &mut state,
                        &Record::Put {
                            v: 1,
                            item: item.clone(),
                        },
                    )?;
                    state.pending.push_back(item.clone());
                    state.logged.push(item);
                    break;
                }
            }
            room.await;
        }
        self.sync().await?;
        Ok(true)
    }

    #[cfg(feature = "postgres")]
    async fn put_shared(
        &self,
        shared: &postgres::PostgresOutbox,
        item: OutboxItem,
    ) -> Result<bool, OutboxError> {
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            match shared.put(&item, self.capacity).await? {
                postgres::Put::Queued => {
                    let mut state = self.state();
                    if !state.pending.iter().any(|p| p.message_id == item.message_id) {
                        state.pending.push_back(item);
                    }
                    return Ok(true);
                }
                postgres::Put::Waiting => return Ok(false),
                postgres::Put::Full => {
                    let _ = tokio::time::timeout(SHARED_ROOM_POLL, room).await;
                }
            }
        }
    }

    /// Notes that `message_id` is recorded in its session: it no longer
    /// waits, and a producer waiting for room may go on. Not synced: were
    /// this line lost, the message would be delivered again, and its
    /// session records an id once (a shared outbox that cannot be written
    /// says so in a warning, with the same outcome).
    pub async fn done(&self, message_id: &str) {
        #[cfg(feature = "postgres")]
        if let Some(shared) = &self.shared {
            if let Err(error) = shared.done(message_id).await {
                tracing::warn!(%error, message_id, "outbox: a delivery could not be noted; it may be delivered again");
            }
            self.state().pending.retain(|p| p.message_id != message_id);
            self.room.notify_waiters();
            return;
        }
        let mut state = self.state();
        let before = state.pending.len();
        state.pending.retain(|p| p.message_id != message_id);
        if state.pending.len() == before {
            return;
        }
        let record = Record::Done {
            v: 1,
            message_id: message_id.to_owned(),
        };
        if let Err(e) = self.append(&mut state, &record) {
            tracing::warn!(error = %e, "outbox: a delivery could not be noted; it may be delivered again");
        }
        let compact = state.len > COMPACT_OVER;
        drop(state);
        if compact {
            self.compact_file();
        }
        self.room.notify_waiters();
    }

    /// Rewrites the log with only the waiting messages (and forgets what
    /// [`Outbox::logged`] answered); a shared outbox removes its delivered
    /// rows.
    pub async fn compact(&self) {
        #[cfg(feature = "postgres")]
        if let Some(shared) = &self.shared {
            if let Err(error) = shared.compact().await {
                tracing::warn!(%error, "outbox: could not compact");
            }
            return;
        }
        self.compact_file();
    }

    fn compact_file(&self) {
        let mut state = self.state();
        let Some((path, file)) = &self.file else {
            state.logged = state.pending.iter().cloned().collect();
            return;
        };
        let mut bytes = Vec::new();
        for item in &state.pending {
            let record = Record::Put {
                v: 1,
                item: item.clone(),
            };
            if serde_json::to_writer(&mut bytes, &record).is_ok() {
                bytes.push(b'\n');
            }
        }
        let reopened = jarvis_common::write_atomic(path, &bytes)
            .and_then(|()| OpenOptions::new().create(true).append(true).open(path));
        match reopened {
            Ok(handle) => {
                *file.lock().unwrap_or_else(|e| e.into_inner()) = handle;
                state.len = bytes.len() as u64;
                state.logged = state.pending.iter().cloned().collect();
            }
            Err(e) => tracing::warn!(path = %path.display(), error = %e, "outbox: could not compact"),
        }
    }

    fn append(&self, state: &mut State, record: &Record) -> Result<(), OutboxError> {
        let Some((path, file)) = &self.file else {
            return Ok(());
        };
        let mut line = serde_json::to_vec(record).unwrap_or_default();
        line.push(b'\n');
        let mut handle = file.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(source) = handle.write_all(&line) {
            let _ = handle.set_len(state.len);
            return Err(OutboxError::Io {
                op: "write",
                path: path.clone(),
                source,
            });
        }
        state.len += line.len() as u64;
        Ok(())
    }

    async fn sync(&self) -> Result<(), OutboxError> {
        let Some((path, file)) = &self.file else {
            return Ok(());
        };
        let io = |source| OutboxError::Io {
            op: "sync",
            path: path.clone(),
            source,
        };
        let handle = file
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .try_clone()
            .map_err(io)?;
        tokio::task::spawn_blocking(move || handle.sync_data())
            .await
            .map_err(|e| io(io::Error::other(e.to_string())))?
            .map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn item(id: &str) -> OutboxItem {
        OutboxItem {
            message_id: id.into(),
            session_id: "default-karen".into(),
            agent_id: "karen".into(),
            kind: ProactiveKind::Proactive,
            text: format!("message {id}"),
            at: Timestamp::from_millis(1),
            meta: Value::Null,
        }
    }

    #[tokio::test]
    async fn waiting_messages_survive_a_reopen_and_delivered_ones_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(OUTBOX_FILE);
        {
            let outbox = Outbox::open(&path, 10).unwrap();
            assert!(outbox.put(item("a")).await.unwrap());
            assert!(!outbox.put(item("a")).await.unwrap(), "an id waits once");
            assert!(outbox.put(item("b")).await.unwrap());
            outbox.done("a").await;
        }
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(b"{\"v\":1,\"op\":\"pu");
        std::fs::write(&path, &bytes).unwrap();
        let outbox = Outbox::open(&path, 10).unwrap();
        let ids: Vec<_> = outbox.pending().await.into_iter().map(|i| i.message_id).collect();
        assert_eq!(ids, ["b"]);
        assert_eq!(outbox.logged().await.len(), 2);
        outbox.compact().await;
        assert_eq!(outbox.logged().await.len(), 1);
        drop(outbox);
        let outbox = Outbox::open(&path, 10).unwrap();
        assert_eq!(outbox.len(), 1);
    }

    #[tokio::test]
    async fn a_full_outbox_makes_producers_wait_instead_of_dropping() {
        let outbox = Arc::new(Outbox::in_memory(2));
        outbox.put(item("a")).await.unwrap();
        outbox.put(item("b")).await.unwrap();
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        let producer = {
            let outbox = outbox.clone();
            tokio::spawn(async move {
                outbox.put(item("c")).await.unwrap();
                let _ = tx.send(());
            })
        };
        tokio::task::yield_now().await;
        assert!(rx.try_recv().is_err(), "the third message waits for room");
        assert_eq!(outbox.len(), 2);
        outbox.done("a").await;
        producer.await.unwrap();
        let ids: Vec<_> = outbox.pending().await.into_iter().map(|i| i.message_id).collect();
        assert_eq!(ids, ["b", "c"]);
    }
}
