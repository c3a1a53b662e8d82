//! [`MemoryService`]: the rules of memory over a [`MemoryStore`], an
//! [`Embedder`], a clock and an id source.
//!
//! The rules are documented on [`MemoryService`].
//!
//! Files: `service/config.rs` (settings), `service/embed.rs` (asking the
//! embedder), `service/write.rs` (writing), `service/search.rs` (recall),
//! `service/turn.rs` (before and after a turn), `service/reembed.rs`
//! (re-embedding).

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, Mutex};
use tokio::sync::{Notify, watch};

use super::forget::ForgottenSecret;
use super::procedures::ProcedureLibrary;
use super::store::MemoryStore;
use super::user_model::{UserModelFile, UserModelStore};
use super::working::WorkingMemory;
use jarvis_common::{Clock, IdSource, SystemClock, Timestamp, UniqueIds};
use jarvis_model::Embedder;

mod config;
mod embed;
mod reembed;
mod search;
mod turn;
mod write;

pub use config::{MemoryConfig, RecallK, RecallWeights};
pub use reembed::{ReembedPhase, ReembedStatus};
pub use search::Recalled;
pub use turn::TurnRecord;

/// Wakes [`MemoryService::keep_embedded`] when the service goes away.
#[derive(Debug, Default)]
struct Wake(Arc<Notify>);

impl Drop for Wake {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

/// Working memory, long-term memory, scopes, injection and recall (SPEC.md
/// §8). Share it as `Arc<MemoryService>`.
///
/// - **Writing** ([`MemoryService::write`]): the source picks the layer and
///   kind ([`WRITE_RULES`](super::WRITE_RULES)); the scope's user and agent
///   are recorded; the text is embedded once.
/// - **Recall** ([`MemoryService::recall`]): the store answers the most
///   similar records the scope may read and those whose words match best
///   (BM25); the two rankings are fused by reciprocal rank into a
///   relevance in `(0, 1]` (see `recall.rs`), searched again inside the
///   period a question names ("last month"), and ranked by
///
///   `score = 0.75 · relevance + 0.15 · recency + 0.10 · rehearsal`
///
///   where `recency = 0.5^(age / 14 days)` and
///   `rehearsal = r / (r + 3)` for a record recalled `r` times. A record
///   neither similar enough ([`MemoryConfig::min_similarity`]) nor
///   matching enough words never comes back, however new or rehearsed; the
///   blend only reorders the `max(4k, 16)` best of each side. What is
///   recalled is rehearsed (`r + 1`), and an episode brings its
///   neighbouring turns.
/// - **Injection** ([`MemoryService::observe`]): once per turn, recall for
///   each section and build the [`MemoryContext`] the loop applies before
///   every model call (its contract is on [`MemoryContext`]).
/// - **After a turn** ([`MemoryService::record_turn`]): the turn episode
///   and the working-memory rule (see [`WorkingMemory`]).
///
/// ```
/// use std::sync::Arc;
/// use jarvis_memory::{InMemoryMemoryStore, MemoryScope, MemoryService, TurnRecord};
/// use jarvis_model::{HashEmbedder, Message};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let memory = MemoryService::new(Arc::new(InMemoryMemoryStore::new()), Arc::new(HashEmbedder::default()));
/// let scope = MemoryScope::new("me", "main", "default-main");
/// memory.remember(&scope, "서연이는 초등학교 3학년이다").await.unwrap();
/// memory
///     .record_turn(&scope, TurnRecord::new("SH 행복주택 공고 찾아줘", "3건을 찾았습니다"))
///     .await
///     .unwrap();
///
/// let context = memory.observe(&scope, "서연이 학년이 어떻게 되지?").await.unwrap();
/// let request = context.apply(&[Message::user("서연이 학년이 어떻게 되지?")]);
/// let Message::User(injected) = &request[0] else { unreachable!() };
/// assert!(injected.content.starts_with("[핵심 사실]\n- 서연이는 초등학교 3학년이다"));
/// assert!(injected.content.contains("[작업 공유 메모리]\n- SH 행복주택 공고 찾아줘"));
/// # });
/// ```
///
/// [`MemoryContext`]: super::MemoryContext
pub struct MemoryService {
    store: Arc<dyn MemoryStore>,
    embedder: Arc<dyn Embedder>,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdSource>,
    config: MemoryConfig,
    user_model: Option<UserModelStore>,
    procedures: Option<ProcedureLibrary>,
    /// `(user, agent)` pairs whose procedure files were indexed.
    synced: Mutex<HashSet<(String, String)>>,
    /// The last prompt embedded by `observe`, which `record_turn` embeds
    /// again at the end of the same turn.
    last_prompt: Mutex<Option<(String, Vec<f32>)>>,
    /// The working memory `observe` read for a session's prompt (session,
    /// prompt, memory), which `record_turn` of the same turn updates
    /// instead of reading it again: only `record_turn` writes working
    /// memory, and a session has one turn at a time.
    last_working: Mutex<Option<(String, String, WorkingMemory)>>,
    /// What was forgotten, when there is no user-model file to keep it in.
    pub(super) forgotten_here: Mutex<Vec<ForgottenSecret>>,
    /// Orders user-profile writes and forgetting: a profile write (its
    /// check against the forgotten list and its record) holds it shared,
    /// [`forget`](Self::forget) holds it exclusively for its record and
    /// delete, so a write that passed the check lands before the delete
    /// that removes it, never after. Every write that replaces a record's
    /// text holds it shared too, and re-embedding holds it exclusively to
    /// put back what it embedded (only where the text is unchanged), so it
    /// never brings back a forgotten fact or an old text.
    pub(super) profile_lock: tokio::sync::RwLock<()>,
    /// Where re-embedding stands.
    reembed: watch::Sender<ReembedStatus>,
    /// Wakes the re-embedding task: a record was kept un-embedded, the
    /// embedder answered again, or the service is gone.
    wake: Wake,
    /// Until when calls for turns skip the embedder (see `OUTAGE_HOLD` in
    /// `service/embed.rs`).
    outage: Mutex<Option<tokio::time::Instant>>,
}

impl fmt::Debug for MemoryService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryService")
            .field("store", &self.store)
            .field("embedder", &self.embedder.name())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl MemoryService {
    /// A service over `store` embedding with `embedder`, with the system
    /// clock, unique ids and the default settings (no `JARVIS_HOME`).
    pub fn new(store: Arc<dyn MemoryStore>, embedder: Arc<dyn Embedder>) -> Self {
        Self {
            store,
            embedder,
            clock: Arc::new(SystemClock),
            ids: Arc::new(UniqueIds::new()),
            config: MemoryConfig::default(),
            user_model: None,
            procedures: None,
            synced: Mutex::new(HashSet::new()),
            last_prompt: Mutex::new(None),
            last_working: Mutex::new(None),
            forgotten_here: Mutex::new(Vec::new()),
            profile_lock: tokio::sync::RwLock::new(()),
            reembed: watch::Sender::new(ReembedStatus::default()),
            wake: Wake::default(),
            outage: Mutex::new(None),
        }
    }

    /// Sets the clock timestamps and recency come from.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Sets the source of record ids.
    pub fn with_ids(mut self, ids: Arc<dyn IdSource>) -> Self {
        self.ids = ids;
        self
    }

    /// Sets the settings (and with them `JARVIS_HOME`, whose
    /// `user_model.json` becomes the user model; set another store after
    /// this with [`with_user_model`](Self::with_user_model)).
    pub fn with_config(mut self, config: MemoryConfig) -> Self {
        self.user_model = config
            .home
            .as_deref()
            .map(|home| UserModelStore::File(UserModelFile::new(home)));
        self.procedures = config.home.as_deref().map(ProcedureLibrary::new);
        self.config = config;
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn MemoryStore> {
        &self.store
    }

    /// The embedder.
    pub fn embedder(&self) -> &Arc<dyn Embedder> {
        &self.embedder
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The settings.
    pub fn config(&self) -> &MemoryConfig {
        &self.config
    }

    /// The procedure files, when there is a `JARVIS_HOME`.
    pub fn procedures(&self) -> Option<&ProcedureLibrary> {
        self.procedures.as_ref()
    }

    /// Keeps the user model in `store` (a deployment's shared row in
    /// Postgres, for instance) instead of the home's `user_model.json`.
    pub fn with_user_model(mut self, store: UserModelStore) -> Self {
        self.user_model = Some(store);
        self
    }

    /// The user-model file, when the user model is the home's file.
    pub fn user_model_file(&self) -> Option<&UserModelFile> {
        match self.user_model.as_ref()? {
            UserModelStore::File(file) => Some(file),
            #[cfg(feature = "postgres")]
            UserModelStore::Postgres(_) => None,
        }
    }

    /// Where the user model is kept, when there is one.
    pub fn user_model_store(&self) -> Option<&UserModelStore> {
        self.user_model.as_ref()
    }

    pub(super) fn now(&self) -> Timestamp {
        Timestamp::from_system_time(self.clock.now())
    }
}
