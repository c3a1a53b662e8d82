//! Keeps the team's long-term memory in a file of its own: `FileMemoryStore`
//! implements the `MemoryStore` trait over one append-only JSON-lines log,
//! and the app uses it through `AppConfig::with_memory_store`.
//!
//! The run shows what the trait buys: a fact remembered and a turn episode
//! written by the first app are recalled by a second app that opens the
//! same file after the first one is gone; then the second app forgets the
//! fact, which deletes it from the file for good. The model is the offline
//! demo model, so it runs anywhere.
//!
//! Run with `cargo run -p example-custom-memory-store`.

use async_trait::async_trait;
use jarvis_sdk::app::{AppConfig, build_app};
use jarvis_sdk::common::write_atomic;
use jarvis_sdk::memory::{
    DEFAULT_USER, Layer, MemoryError, MemoryFilter, MemoryRecord, MemoryScope, MemoryStore, SearchHit,
    SearchQuery, WorkingMemory,
};
use jarvis_sdk::model::cosine;
use jarvis_sdk::turn::Caller;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// One line of the log: every change is appended, and replaying the lines
/// in order rebuilds the store.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Op {
    /// A record written or replaced.
    Put { record: Box<MemoryRecord> },
    /// Records rehearsed once more.
    Touch { ids: Vec<String> },
    /// Records deleted (forgetting). The log is compacted right after, so
    /// the lines that wrote them are gone from the file; this line makes
    /// replay remove them should the process stop before that.
    Delete { ids: Vec<String> },
    /// A session's working memory replaced.
    Working { memory: Box<WorkingMemory> },
}

#[derive(Debug, Default)]
struct State {
    records: HashMap<String, MemoryRecord>,
    working: HashMap<String, WorkingMemory>,
}

impl State {
    fn apply(&mut self, op: Op) {
        match op {
            Op::Put { record } => {
                self.records.insert(record.id.clone(), *record);
            }
            Op::Touch { ids } => {
                let mut seen: Vec<&String> = Vec::new();
                for id in &ids {
                    if seen.contains(&id) {
                        continue;
                    }
                    seen.push(id);
                    if let Some(record) = self.records.get_mut(id) {
                        record.rehearsal = record.rehearsal.saturating_add(1);
                    }
                }
            }
            Op::Delete { ids } => {
                for id in &ids {
                    self.records.remove(id);
                }
            }
            Op::Working { memory } => {
                self.working.insert(memory.session_id.clone(), *memory);
            }
        }
    }
}

/// Long-term and working memory in one JSON-lines file.
///
/// Reads are served from memory; every write appends one line and flushes
/// it before answering. A line that cannot be read back (a torn last line
/// after a crash, a hand edit gone wrong) is skipped with a warning and
/// counted, never fatal. The search is an exact scan, fine for the tens of
/// thousands of records one person gathers.
#[derive(Debug)]
struct FileMemoryStore {
    path: PathBuf,
    state: Mutex<State>,
    log: Mutex<File>,
    skipped: usize,
}

impl FileMemoryStore {
    /// Opens (or creates) the log at `path` and replays it.
    fn open(path: impl Into<PathBuf>) -> std::io::Result<Self> {
        let path = path.into();
        let mut state = State::default();
        let mut skipped = 0;
        if path.exists() {
            for line in BufReader::new(File::open(&path)?).lines() {
                let line = line?;
                if line.trim().is_empty() {
                    continue;
                }
                match serde_json::from_str::<Op>(&line) {
                    Ok(op) => state.apply(op),
                    Err(e) => {
                        skipped += 1;
                        eprintln!("{}: skipped an unreadable line: {e}", path.display());
                    }
                }
            }
        }
        let log = OpenOptions::new().create(true).append(true).open(&path)?;
        Ok(Self {
            path,
            state: Mutex::new(state),
            log: Mutex::new(log),
            skipped,
        })
    }

    /// Appends `op` to the log, then applies it (holding the log, so a
    /// compaction sees every line written before it).
    fn write(&self, op: Op) -> Result<(), MemoryError> {
        let mut line = serde_json::to_vec(&op).map_err(|e| self.error(e))?;
        line.push(b'\n');
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        log.write_all(&line).map_err(|e| self.error(e))?;
        log.flush().map_err(|e| self.error(e))?;
        self.state.lock().unwrap_or_else(|e| e.into_inner()).apply(op);
        Ok(())
    }

    /// Rewrites the log as one line per live record and working memory
    /// (atomically), so deleted records leave no trace in the file.
    fn compact(&self) -> Result<(), MemoryError> {
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let mut bytes = Vec::new();
        {
            let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let records = state
                .records
                .values()
                .cloned()
                .map(|r| Op::Put { record: Box::new(r) });
            let working = state
                .working
                .values()
                .cloned()
                .map(|m| Op::Working { memory: Box::new(m) });
            for op in records.chain(working) {
                serde_json::to_writer(&mut bytes, &op).map_err(|e| self.error(e))?;
                bytes.push(b'\n');
            }
        }
        write_atomic(&self.path, &bytes).map_err(|e| self.error(e))?;
        *log = OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(|e| self.error(e))?;
        Ok(())
    }

    fn error(&self, e: impl std::fmt::Display) -> MemoryError {
        MemoryError::Store(format!("{}: {e}", self.path.display()))
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

/// Newest first, ties by id: the order `list` promises.
fn newest_first(a: &MemoryRecord, b: &MemoryRecord) -> std::cmp::Ordering {
    b.created_at.cmp(&a.created_at).then_with(|| a.id.cmp(&b.id))
}

#[async_trait]
impl MemoryStore for FileMemoryStore {
    async fn put(&self, record: MemoryRecord) -> Result<(), MemoryError> {
        self.write(Op::Put {
            record: Box::new(record),
        })
    }

    async fn get(&self, ids: &[String]) -> Result<Vec<MemoryRecord>, MemoryError> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        Ok(ids
            .iter()
            .filter_map(|id| state.records.get(id).cloned())
            .collect())
    }

    async fn list(&self, filter: &MemoryFilter) -> Result<Vec<MemoryRecord>, MemoryError> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<MemoryRecord> = state
            .records
            .values()
            .filter(|r| filter.matches(r))
            .cloned()
            .collect();
        out.sort_by(newest_first);
        out.truncate(filter.limit.unwrap_or(usize::MAX));
        Ok(out)
    }

    async fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, MemoryError> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut hits: Vec<SearchHit> = state
            .records
            .values()
            .filter(|r| r.embedder == query.embedder && query.filter.matches(r))
            .filter_map(|r| {
                let similarity = cosine(&query.vector, &r.embedding);
                // Vectors alone: a store may leave the word side out (its
                // hits then rank by similarity only).
                (similarity >= query.min_similarity)
                    .then(|| SearchHit::new(r.id.clone(), similarity, r.created_at, r.rehearsal))
            })
            .collect();
        hits.sort_by(|a, b| {
            b.similarity
                .total_cmp(&a.similarity)
                .then_with(|| b.created_at.cmp(&a.created_at))
                .then_with(|| a.id.cmp(&b.id))
        });
        hits.truncate(query.k);
        Ok(hits)
    }

    async fn touch(&self, ids: &[String]) -> Result<(), MemoryError> {
        if ids.is_empty() {
            return Ok(());
        }
        self.write(Op::Touch { ids: ids.to_vec() })
    }

    async fn delete(&self, ids: &[String]) -> Result<usize, MemoryError> {
        let present = {
            let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            ids.iter().filter(|id| state.records.contains_key(*id)).count()
        };
        if present > 0 {
            self.write(Op::Delete { ids: ids.to_vec() })?;
            self.compact()?;
        }
        Ok(present)
    }

    async fn stale(&self, embedder: &str, limit: usize) -> Result<Vec<MemoryRecord>, MemoryError> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<MemoryRecord> = state
            .records
            .values()
            .filter(|r| r.embedding.is_empty() || r.embedder != embedder)
            .cloned()
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out.truncate(limit);
        Ok(out)
    }

    async fn load_working(&self, session_id: &str) -> Result<Option<WorkingMemory>, MemoryError> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        Ok(state.working.get(session_id).cloned())
    }

    async fn save_working(&self, memory: &WorkingMemory) -> Result<(), MemoryError> {
        self.write(Op::Working {
            memory: Box::new(memory.clone()),
        })
    }
}

/// An app over `store`, with `home` for sandboxes and rules.
async fn app(home: &Path, store: Arc<FileMemoryStore>) -> anyhow::Result<jarvis_sdk::app::AppAssembly> {
    Ok(build_app(AppConfig::embedded(home).with_memory_store(store)).await?)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("memory.jsonl");

    // First app: remember a fact, then have one turn (its episode is written).
    {
        let store = Arc::new(FileMemoryStore::open(&log)?);
        let app = app(&dir.path().join("home-1"), store.clone()).await?;
        let session = app.create_session(None).await?;
        let memory = app.memory().expect("memory is on by default");
        let scope = MemoryScope::new(DEFAULT_USER, "main", session.id.as_str());
        memory
            .remember(&scope, "The user's lease ends on 2027-03-31.")
            .await?;
        let turn = app.session(&session.id).await?;
        let outcome = turn.prompt("When does my lease end?", Caller::Local).await?;
        println!("first app answered: {}", outcome.final_message.content);
        let lines = std::fs::read_to_string(store.path())?.lines().count();
        println!("{} holds {lines} lines", store.path().display());
    }

    // Second app, same file: the fact and the episode are back.
    let store = Arc::new(FileMemoryStore::open(&log)?);
    let app = app(&dir.path().join("home-2"), store.clone()).await?;
    let memory = app.memory().expect("memory is on by default");
    let scope = MemoryScope::new(DEFAULT_USER, "main", "another-session");
    let recalled = memory
        .recall(&scope, "lease end date", Layer::Semantic, 3)
        .await?;
    let facts: Vec<&str> = recalled.iter().map(|r| r.record.text.as_str()).collect();
    let episodes = store
        .list(&MemoryFilter::for_user(DEFAULT_USER).layer(Layer::Episodic, jarvis_sdk::memory::Agents::Any))
        .await?;
    println!("second app recalls: {facts:?}");
    println!("second app sees {} turn episode(s)", episodes.len());
    println!("unreadable lines skipped: {}", store.skipped);
    anyhow::ensure!(
        facts.iter().any(|f| f.contains("2027-03-31")),
        "the fact did not survive the restart"
    );
    anyhow::ensure!(episodes.len() == 1, "expected the first app's turn episode");

    // Forgetting deletes the fact through `MemoryStore::delete`: the log is
    // compacted, so the date leaves the file, and it cannot be remembered again.
    let forgot = memory.forget(&scope, "2027-03-31").await?;
    let after = memory
        .recall(&scope, "lease end date", Layer::Semantic, 3)
        .await?;
    let on_disk = std::fs::read_to_string(store.path())?;
    println!(
        "forgot {} record(s); recalled after: {}; the log still names the date: {}",
        forgot.records,
        after.len(),
        on_disk.contains("2027-03-31")
    );
    anyhow::ensure!(after.is_empty(), "the forgotten fact was recalled");
    anyhow::ensure!(
        !on_disk.contains("2027-03-31"),
        "the forgotten fact is still in the log"
    );
    anyhow::ensure!(
        memory.remember(&scope, "Lease ends 2027-03-31").await.is_err(),
        "a forgotten fact was remembered again"
    );
    Ok(())
}
