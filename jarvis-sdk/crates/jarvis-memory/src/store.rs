//! [`MemoryStore`]: where memory records and working memory are kept, and
//! [`InMemoryMemoryStore`], the store that keeps them in the process.

use async_trait::async_trait;
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Mutex, MutexGuard};

use super::ann::AnnOptions;
use super::error::MemoryError;
use super::index::Index;
use super::record::{MemoryFilter, MemoryRecord, SearchHit, SearchQuery};
use super::working::WorkingMemory;

/// A store of long-term memory records and per-session working memory.
///
/// Required: `put`, `get`, `list`, `search`, `touch`, `delete`, `stale` and
/// the two working-memory methods; `get_texts` and `search_many` have
/// defaults built on them.
///
/// Stores keep records as they are given; the rules (which layer, who may
/// read, how recall ranks) belong to [`MemoryService`](super::MemoryService).
/// Implementations are shared as `Arc<dyn MemoryStore>`.
#[async_trait]
pub trait MemoryStore: Send + Sync + Debug {
    /// Inserts `record`, or replaces the record with the same id.
    async fn put(&self, record: MemoryRecord) -> Result<(), MemoryError>;

    /// The records with these ids, in the order of `ids`; unknown ids are
    /// left out.
    async fn get(&self, ids: &[String]) -> Result<Vec<MemoryRecord>, MemoryError>;

    /// Like [`get`](Self::get), but the records' `embedding` may come back
    /// empty: for callers that only read texts (recall fetching its winners).
    /// Stores that keep vectors apart from texts answer faster this way.
    async fn get_texts(&self, ids: &[String]) -> Result<Vec<MemoryRecord>, MemoryError> {
        self.get(ids).await
    }

    /// The records matching `filter`, newest first (ties by id), at most
    /// `filter.limit`.
    async fn list(&self, filter: &MemoryFilter) -> Result<Vec<MemoryRecord>, MemoryError>;

    /// The at most `query.k` records matching `query.filter` whose embedding
    /// is in `query.embedder`'s space and at least `query.min_similarity`
    /// similar to `query.vector`, most similar first (ties: newer first,
    /// then by id).
    async fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, MemoryError>;

    /// Several searches at once, answered in order. Stores that must catch
    /// up with a database first do so once for all of them.
    async fn search_many(&self, queries: &[SearchQuery]) -> Result<Vec<Vec<SearchHit>>, MemoryError> {
        let mut out = Vec::with_capacity(queries.len());
        for query in queries {
            out.push(self.search(query).await?);
        }
        Ok(out)
    }

    /// Catches up with the writes of other processes sharing this store's
    /// database, for the `_cached` reads that follow. A store that has no
    /// one to catch up with has nothing to do (the default).
    ///
    /// A recall catches up once, at its start and alongside its other
    /// reads, then searches and fetches with
    /// [`search_many_cached`](Self::search_many_cached) and
    /// [`get_texts_cached`](Self::get_texts_cached): it sees every write
    /// committed before it began, in one round trip to the database
    /// instead of one per read.
    async fn catch_up(&self) -> Result<(), MemoryError> {
        Ok(())
    }

    /// [`search_many`](Self::search_many) as of the last
    /// [`catch_up`](Self::catch_up) (or any read that caught up), without
    /// another round trip to a shared database; the default is
    /// `search_many`.
    async fn search_many_cached(&self, queries: &[SearchQuery]) -> Result<Vec<Vec<SearchHit>>, MemoryError> {
        self.search_many(queries).await
    }

    /// [`get_texts`](Self::get_texts) as of the last
    /// [`catch_up`](Self::catch_up), like
    /// [`search_many_cached`](Self::search_many_cached); the default is
    /// `get_texts`.
    async fn get_texts_cached(&self, ids: &[String]) -> Result<Vec<MemoryRecord>, MemoryError> {
        self.get_texts(ids).await
    }

    /// Adds one rehearsal to each record named in `ids`, once however often
    /// it is named (unknown ids are ignored).
    async fn touch(&self, ids: &[String]) -> Result<(), MemoryError>;

    /// [`touch`](Self::touch) when nobody waits for it: a recall's
    /// rehearsals. A store whose writes cross a network may send it in the
    /// background, so the turn does not wait for its round trip, as long as
    /// every later read and write of the same store comes after it (other
    /// instances see it once it lands; a failure is logged, not answered).
    /// The default is `touch`.
    async fn touch_soon(&self, ids: &[String]) -> Result<(), MemoryError> {
        self.touch(ids).await
    }

    /// Removes the records named in `ids` for good (unknown ids are
    /// ignored) and answers how many were removed. Forgetting
    /// ([`MemoryService::forget`](super::MemoryService::forget)) relies on
    /// it, so every store must really delete: after it returns, no read of
    /// this store, nor of another process sharing its database, may answer
    /// them again.
    async fn delete(&self, ids: &[String]) -> Result<usize, MemoryError>;

    /// At most `limit` records whose embedding is missing or comes from an
    /// embedder other than `embedder` (see
    /// [`MemoryService::reembed_stale`](super::MemoryService::reembed_stale)).
    async fn stale(&self, embedder: &str, limit: usize) -> Result<Vec<MemoryRecord>, MemoryError>;

    /// The working memory of `session_id`, if it has one.
    async fn load_working(&self, session_id: &str) -> Result<Option<WorkingMemory>, MemoryError>;

    /// Stores the working memory of `memory.session_id`, replacing what was there.
    async fn save_working(&self, memory: &WorkingMemory) -> Result<(), MemoryError>;

    /// [`put`](Self::put) then [`save_working`](Self::save_working): what
    /// the end of a turn writes (its episode and the session's working
    /// memory). Stores that can do both in one transaction do, so the turn
    /// pays for one durable write, and neither lands without the other.
    async fn put_with_working(
        &self,
        record: MemoryRecord,
        memory: &WorkingMemory,
    ) -> Result<(), MemoryError> {
        self.put(record).await?;
        self.save_working(memory).await
    }
}

/// Memory kept in the process: fast, and gone when the process ends.
///
/// Records live in the shared index (embeddings of one scope in one
/// contiguous matrix, tiles of 16 rows stored dimension by dimension, so a
/// search reads only the dimensions the query uses; the scan is exact), so
/// a recall over 100,000 records takes milliseconds.
#[derive(Debug, Default)]
pub struct InMemoryMemoryStore {
    index: Mutex<Index>,
    working: Mutex<HashMap<String, WorkingMemory>>,
}

impl InMemoryMemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store whose large partitions get approximate indexes as
    /// `ann` says ([`AnnOptions::exact`]: never).
    pub fn with_ann(ann: AnnOptions) -> Self {
        Self {
            index: Mutex::new(Index::with_ann(ann)),
            ..Self::default()
        }
    }

    /// Changes when partitions get approximate indexes (takes effect at
    /// once; graphs already built stay while their partitions stay large).
    pub fn set_ann(&self, ann: AnnOptions) {
        self.index().set_ann(ann);
    }

    /// Blocks until every approximate index being built in the background
    /// is ready (for tests and benchmarks; the store waits meanwhile).
    pub fn wait_for_graphs(&self) {
        self.index().wait_for_graphs();
    }

    /// How many records are searched through an approximate index, and
    /// those indexes' memory in bytes.
    pub fn graph_stats(&self) -> (usize, usize) {
        self.index().graph_stats()
    }

    /// How many records it holds.
    pub fn len(&self) -> usize {
        self.index().len()
    }

    /// Whether it holds no records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn index(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl MemoryStore for InMemoryMemoryStore {
    async fn put(&self, record: MemoryRecord) -> Result<(), MemoryError> {
        self.index().upsert(record);
        Ok(())
    }

    async fn get(&self, ids: &[String]) -> Result<Vec<MemoryRecord>, MemoryError> {
        let index = self.index();
        Ok(ids.iter().filter_map(|id| index.get(id)).collect())
    }

    async fn get_texts(&self, ids: &[String]) -> Result<Vec<MemoryRecord>, MemoryError> {
        let index = self.index();
        Ok(ids.iter().filter_map(|id| index.get_text(id)).collect())
    }

    async fn list(&self, filter: &MemoryFilter) -> Result<Vec<MemoryRecord>, MemoryError> {
        Ok(self.index().list(filter))
    }

    async fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, MemoryError> {
        Ok(self.index().search(query))
    }

    async fn search_many(&self, queries: &[SearchQuery]) -> Result<Vec<Vec<SearchHit>>, MemoryError> {
        Ok(self.index().search_many(queries))
    }

    async fn touch(&self, ids: &[String]) -> Result<(), MemoryError> {
        let mut index = self.index();
        let mut seen = std::collections::HashSet::with_capacity(ids.len());
        for id in ids {
            if seen.insert(id) {
                index.touch(id);
            }
        }
        Ok(())
    }

    async fn delete(&self, ids: &[String]) -> Result<usize, MemoryError> {
        let mut index = self.index();
        Ok(ids.iter().filter(|id| index.remove(id)).count())
    }

    async fn stale(&self, embedder: &str, limit: usize) -> Result<Vec<MemoryRecord>, MemoryError> {
        Ok(self.index().stale(embedder, limit))
    }

    async fn load_working(&self, session_id: &str) -> Result<Option<WorkingMemory>, MemoryError> {
        let working = self.working.lock().unwrap_or_else(|e| e.into_inner());
        Ok(working.get(session_id).cloned())
    }

    async fn save_working(&self, memory: &WorkingMemory) -> Result<(), MemoryError> {
        let mut working = self.working.lock().unwrap_or_else(|e| e.into_inner());
        working.insert(memory.session_id.clone(), memory.clone());
        Ok(())
    }
}
