//! [`MemoryService`]: the rules of memory over a [`MemoryStore`], an
//! [`Embedder`], a clock and an id source.
//!
//! The rules are documented on [`MemoryService`].

use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::{Notify, watch};

use super::error::{MemoryError, printable};
use super::forget::{ForgottenSecret, contains_forgotten};
use super::inject::{MemoryContext, SectionBudgets, SectionKind};
use super::learn::ANSWER_MARK;
use super::procedures::{ProcedureLibrary, name_problem};
use super::recall::fuse;
use super::record::{
    Agents, Layer, META_PREV, META_WHEN, MemoryFilter, MemoryRecord, SearchHit, SearchQuery,
};
use super::rules::{
    KIND_FACT, KIND_PROCEDURE, KIND_TASK_PATTERN, KIND_USER_MODEL, SOURCE_PROCEDURE, SOURCE_REMEMBER,
    SOURCE_TASK_PATTERN, SOURCE_TURN, SOURCE_USER_MODEL, write_rule,
};
use super::scope::MemoryScope;
use super::store::MemoryStore;
use super::user_model::{UserModel, UserModelFile, UserModelStore};
use super::when::{asks_latest, period_of, stated_days};
use super::working::{WorkingConfig, WorkingMemory};
use jarvis_common::{
    Clock, IdSource, SystemClock, TimeZone, Timestamp, UniqueIds, error_chain, truncate_with_marker,
};
use jarvis_model::{EmbedRole, Embedder};

/// The weights of the recall blend (see [`MemoryService`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecallWeights {
    /// Weight of relevance: the vector and word rankings fused by
    /// reciprocal rank, in `(0, 1]`. Default 0.75.
    pub relevance: f32,
    /// Weight of recency. Default 0.15.
    pub recency: f32,
    /// Weight of rehearsal. Default 0.10.
    pub rehearsal: f32,
}

impl Default for RecallWeights {
    fn default() -> Self {
        Self {
            relevance: 0.75,
            recency: 0.15,
            rehearsal: 0.10,
        }
    }
}

/// How many records each section recalls per turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecallK {
    /// User-profile facts for `[핵심 사실]`. Default 5.
    pub facts: usize,
    /// Episodes for `[장기 기억]`. Default 4.
    pub episodes: usize,
    /// Procedures for `[절차 기억]`. Default 2.
    pub procedures: usize,
    /// Task patterns for `[작업 패턴]`. Default 3.
    pub task_patterns: usize,
}

impl Default for RecallK {
    fn default() -> Self {
        Self {
            facts: 5,
            episodes: 4,
            procedures: 2,
            task_patterns: 3,
        }
    }
}

/// Settings of a [`MemoryService`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct MemoryConfig {
    /// `JARVIS_HOME`, where `user_model.json` and `procedures/` live; without
    /// it there is no user model and there are no procedure files.
    pub home: Option<PathBuf>,
    /// Characters per injected section.
    pub budgets: SectionBudgets,
    /// Records recalled per section.
    pub recall_k: RecallK,
    /// The recall blend.
    pub weights: RecallWeights,
    /// Records less similar than this to the query are not found by
    /// vector (they may be by their words). Default 0.2.
    pub min_similarity: f32,
    /// The constant of reciprocal-rank fusion: a record ranked `r`-th on
    /// one side gets `1 / (fusion_k + r)` from it. Default 10 (chosen on the dev half of `memory_quality`; 60 in the paper).
    pub fusion_k: f32,
    /// A recalled episode brings the turns just before and after it in
    /// its session. Default on.
    pub context: bool,
    /// A neighbouring turn comes with a recalled episode when it matched
    /// the query itself, with at least this share of the episode's
    /// relevance; 0: every neighbour comes. Default 0.7 (chosen on the
    /// dev half of `memory_quality`: every neighbour, taking the place of
    /// further hits, found less).
    pub context_share: f32,
    /// For a question about how things stand now, the records whose
    /// relevance is at least this share of the best one's are ordered
    /// newest first (a later record corrects an earlier one). Default 0.75.
    pub latest_band: f32,
    /// The user's time zone: recalled episodes are dated in it, and the
    /// days and periods texts and questions name are read in it. Default
    /// `Asia/Seoul`.
    pub time_zone: TimeZone,
    /// Recency halves every this long. Default 14 days.
    pub recency_half_life: Duration,
    /// Working memory.
    pub working: WorkingConfig,
    /// Turns of conversation the model sees, the current one included
    /// (R-MEM-3: 3).
    pub history_turns: usize,
    /// Longer memories are cut to this many characters. Default 4,000.
    pub max_text_chars: usize,
    /// A turn episode keeps this many characters of the answer. Default 500.
    pub episode_answer_chars: usize,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            home: None,
            budgets: SectionBudgets::default(),
            recall_k: RecallK::default(),
            weights: RecallWeights::default(),
            min_similarity: 0.2,
            fusion_k: 10.0,
            context: true,
            context_share: 0.7,
            latest_band: 0.75,
            time_zone: TimeZone::default(),
            recency_half_life: Duration::from_secs(14 * 24 * 3600),
            working: WorkingConfig::default(),
            history_turns: 3,
            max_text_chars: 4_000,
            episode_answer_chars: 500,
        }
    }
}

impl MemoryConfig {
    /// The defaults with `home` as `JARVIS_HOME`.
    pub fn for_home(home: impl Into<PathBuf>) -> Self {
        Self {
            home: Some(home.into()),
            ..Self::default()
        }
    }
}

/// A recalled record with how it matched the query and its blended score.
#[derive(Debug, Clone, PartialEq)]
pub struct Recalled {
    /// The record, without its embedding (left empty).
    pub record: MemoryRecord,
    /// Cosine similarity to the query (0 when it was found by its words
    /// in another vector space, or without the embedder).
    pub similarity: f32,
    /// Its BM25 score for the query's words (0: none matched).
    pub lexical: f32,
    /// The vector and word rankings fused (see [`RecallWeights::relevance`]).
    pub relevance: f32,
    /// The blended score it was ranked by.
    pub score: f32,
    /// The turns just before and after it in its session, in time order,
    /// when [`MemoryConfig::context`] is on (episodes only; without the
    /// recalled record itself).
    pub context: Vec<MemoryRecord>,
}

/// A hit with its fused relevance and blended score.
#[derive(Debug)]
struct Ranked {
    hit: SearchHit,
    relevance: f32,
    score: f32,
    /// Its neighbouring turns that come with it (see
    /// [`MemoryConfig::context_share`]).
    neighbours: Vec<String>,
}

/// What the harness knows about a finished turn, for its episode.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct TurnRecord {
    /// The request.
    pub prompt: String,
    /// The answer.
    pub answer: String,
    /// Tools called, each once, in first-call order.
    pub tools: Vec<String>,
    /// How long the turn took.
    pub duration: Duration,
    /// Steps run.
    pub turns: u32,
    /// Overflows (`agent_end.overflows`): 0, 1 or 2.
    pub overflows: u8,
    /// How the turn ended (`stop`, `final`, `overflow`, `aborted`, …).
    pub stop_reason: String,
}

impl TurnRecord {
    /// A turn that answered `answer` to `prompt`.
    pub fn new(prompt: impl Into<String>, answer: impl Into<String>) -> Self {
        Self {
            prompt: prompt.into(),
            answer: answer.into(),
            ..Self::default()
        }
    }

    /// Sets the tools used.
    pub fn with_tools(mut self, tools: Vec<String>) -> Self {
        self.tools = tools;
        self
    }

    /// Sets the duration, steps, overflows and stop reason.
    pub fn with_outcome(
        mut self,
        duration: Duration,
        turns: u32,
        overflows: u8,
        stop_reason: impl Into<String>,
    ) -> Self {
        self.duration = duration;
        self.turns = turns;
        self.overflows = overflows;
        self.stop_reason = stop_reason.into();
        self
    }
}

/// What the background re-embedding is doing ([`ReembedStatus::phase`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReembedPhase {
    /// Nothing has looked for stale records yet.
    Idle,
    /// Records embedded by another embedder (or not at all) are being
    /// embedded again.
    Running,
    /// The embedder did not answer; the next try waits (see
    /// [`MemoryService::keep_embedded`]).
    Waiting,
    /// Every record is embedded with the current embedder.
    Done,
}

impl ReembedPhase {
    /// `idle`, `running`, `waiting` or `done`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReembedPhase::Idle => "idle",
            ReembedPhase::Running => "running",
            ReembedPhase::Waiting => "waiting",
            ReembedPhase::Done => "done",
        }
    }
}

/// Where re-embedding stands: [`MemoryService::reembedding`], and
/// [`MemoryService::reembedding_updates`] to wait for a change.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct ReembedStatus {
    /// What it is doing.
    pub phase: ReembedPhase,
    /// Records embedded again since the service started.
    pub embedded: u64,
    /// Tries that failed since the service started (the embedder did not
    /// answer, or the store failed).
    pub failures: u64,
    /// Why the last try failed, while the phase is
    /// [`Waiting`](ReembedPhase::Waiting).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Default for ReembedStatus {
    fn default() -> Self {
        Self {
            phase: ReembedPhase::Idle,
            embedded: 0,
            failures: 0,
            error: None,
        }
    }
}

/// After the embedder failed, calls made for turns skip it this long
/// (recall answers without the store, writes are kept un-embedded), so a
/// server that is down does not cost every turn its timeouts and retries.
const OUTAGE_HOLD: Duration = Duration::from_secs(30);

/// The first wait of [`MemoryService::keep_embedded`] after the embedder
/// failed; it doubles up to [`REEMBED_MAX_WAIT`].
const REEMBED_FIRST_WAIT: Duration = Duration::from_secs(5);

/// The longest wait between two tries of re-embedding.
const REEMBED_MAX_WAIT: Duration = Duration::from_secs(300);

/// Records re-embedded per embedder call.
const REEMBED_BATCH: usize = 64;

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
    /// Until when calls for turns skip the embedder (see [`OUTAGE_HOLD`]).
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

    async fn embed(&self, texts: Vec<String>, role: EmbedRole) -> Result<Vec<Vec<f32>>, MemoryError> {
        let held = {
            let outage = self.outage.lock().unwrap_or_else(|e| e.into_inner());
            outage.is_some_and(|until| tokio::time::Instant::now() < until)
        };
        if held {
            return Err(MemoryError::Embed(jarvis_model::ProviderError::stream(
                "embedder",
                format!("not asked: it failed less than {} s ago", OUTAGE_HOLD.as_secs()),
            )));
        }
        let answer = checked_embed(self.embedder.as_ref(), texts, role).await;
        self.note_embedder(answer.is_ok());
        answer
    }

    /// Remembers whether the embedder just answered: a failure holds calls
    /// for turns off for [`OUTAGE_HOLD`]; an answer after a failure wakes
    /// the re-embedding task.
    fn note_embedder(&self, answered: bool) {
        let mut outage = self.outage.lock().unwrap_or_else(|e| e.into_inner());
        if answered {
            if outage.take().is_some() {
                self.wake.0.notify_one();
            }
        } else {
            *outage = Some(tokio::time::Instant::now() + OUTAGE_HOLD);
        }
    }

    /// Embeds `texts`, or answers `None` (logged) when the embedder does
    /// not answer: the caller then keeps its record un-embedded, and the
    /// re-embedding task embeds it once the embedder answers again.
    async fn embed_or_defer(&self, texts: Vec<String>) -> Option<Vec<Vec<f32>>> {
        match self.embed(texts, EmbedRole::Document).await {
            Ok(vectors) => Some(vectors),
            Err(e) => {
                tracing::warn!(
                    embedder = %self.embedder.name(),
                    "memory: the embedder did not answer ({}); the memory is kept and embedded when it answers again",
                    error_chain(&e)
                );
                None
            }
        }
    }

    async fn embed_one_or_defer(&self, text: &str) -> Vec<f32> {
        self.embed_or_defer(vec![text.to_owned()])
            .await
            .and_then(|mut v| v.pop())
            .unwrap_or_default()
    }

    async fn embed_query(&self, text: &str) -> Result<Vec<f32>, MemoryError> {
        let mut vectors = self.embed(vec![text.to_owned()], EmbedRole::Query).await?;
        Ok(vectors.pop().unwrap_or_default())
    }

    /// The embedding of a turn's prompt, remembered between `observe` and
    /// `record_turn` so a turn embeds its prompt once.
    async fn embed_prompt(&self, prompt: &str) -> Result<Vec<f32>, MemoryError> {
        {
            let last = self.last_prompt.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((text, vector)) = &*last
                && text == prompt
            {
                return Ok(vector.clone());
            }
        }
        let vector = self.embed_query(prompt).await?;
        *self.last_prompt.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((prompt.to_owned(), vector.clone()));
        Ok(vector)
    }

    fn clean_text(&self, source: &str, text: &str) -> Result<String, MemoryError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(MemoryError::EmptyText {
                source_name: source.to_owned(),
            });
        }
        Ok(truncate_with_marker(text, self.config.max_text_chars))
    }

    fn record(
        &self,
        scope: &MemoryScope,
        id: String,
        source: &str,
        text: String,
        metadata: Value,
        embedding: Vec<f32>,
    ) -> MemoryRecord {
        let rule = write_rule(source);
        let metadata = self.with_stated_days(metadata, &text);
        MemoryRecord {
            id,
            user: scope.user.clone(),
            agent_id: scope.agent_id.clone(),
            layer: rule.layer,
            kind: rule.kind.to_owned(),
            source: source.to_owned(),
            text,
            metadata,
            created_at: self.now(),
            rehearsal: 0,
            // An empty embedding is one the embedder could not give yet: no
            // embedder, so the record counts as stale until it is embedded.
            embedder: if embedding.is_empty() {
                String::new()
            } else {
                self.embedder.name().to_owned()
            },
            embedding,
        }
    }

    /// `metadata` with the days `text` states ([`META_WHEN`], instants of
    /// their local midnights), read from now in the user's zone; as it was
    /// when the text states none (or the metadata is not an object).
    fn with_stated_days(&self, mut metadata: Value, text: &str) -> Value {
        let days = stated_days(text, self.now(), &self.config.time_zone);
        if days.is_empty() {
            return metadata;
        }
        if metadata.is_null() {
            metadata = json!({});
        }
        if let Some(map) = metadata.as_object_mut() {
            let days: Vec<String> = days.iter().map(ToString::to_string).collect();
            map.insert(META_WHEN.to_owned(), json!(days));
        }
        metadata
    }

    /// Stores `record`; one kept un-embedded wakes the re-embedding task.
    async fn put_record(&self, record: MemoryRecord) -> Result<(), MemoryError> {
        let deferred = record.embedding.is_empty();
        self.store.put(record).await?;
        if deferred {
            self.wake.0.notify_one();
        }
        Ok(())
    }

    /// Writes a memory from the write path `source` in `scope`; the layer
    /// and kind come from [`WRITE_RULES`](super::WRITE_RULES). Writing a
    /// user-profile fact the user already has (the same text) rehearses the
    /// existing record instead of adding a copy. A user-profile fact that
    /// contains something the user asked to forget is refused
    /// ([`MemoryError::Forgotten`]).
    pub async fn write(
        &self,
        scope: &MemoryScope,
        source: &str,
        text: &str,
        metadata: Value,
    ) -> Result<MemoryRecord, MemoryError> {
        let text = self.clean_text(source, text)?;
        let rule = write_rule(source);
        // A profile write and its check against the forgotten list happen
        // under the profile lock, which forgetting takes exclusively.
        let _profile = match rule.layer {
            Layer::Semantic => Some(self.profile_lock.read().await),
            _ => None,
        };
        if rule.layer == Layer::Semantic {
            self.refuse_forgotten(source, &text).await?;
        }
        let embedding = self.embed_one_or_defer(&text).await;
        if rule.layer == Layer::Semantic
            && !embedding.is_empty()
            && let Some(existing) = self.same_fact(scope, rule.kind, &text, &embedding).await?
        {
            self.store.touch(std::slice::from_ref(&existing.id)).await?;
            return Ok(existing);
        }
        let id = self.ids.next_id("mem_");
        let record = self.record(scope, id, source, text, metadata, embedding);
        self.put_record(record.clone()).await?;
        Ok(record)
    }

    async fn same_fact(
        &self,
        scope: &MemoryScope,
        kind: &str,
        text: &str,
        embedding: &[f32],
    ) -> Result<Option<MemoryRecord>, MemoryError> {
        let query = SearchQuery {
            filter: MemoryFilter::for_user(scope.user.clone())
                .layer(Layer::Semantic, Agents::Any)
                .kinds([kind]),
            embedder: self.embedder.name().to_owned(),
            vector: embedding.to_vec(),
            terms: Vec::new(),
            k: 4,
            min_similarity: 0.999,
        };
        let hits = self.store.search(&query).await?;
        let ids: Vec<String> = hits.into_iter().map(|h| h.id).collect();
        Ok(self
            .store
            .get_texts(&ids)
            .await?
            .into_iter()
            .find(|r| r.text == text))
    }

    /// What the user asked to forget: the user-model file's `forgotten` list
    /// (and, for a service without a `JARVIS_HOME`, what was forgotten in
    /// this process).
    // ponytail: a damaged user-model file reads as empty, so its list counts
    // as empty too until a person fixes the file (it is never overwritten).
    pub async fn forgotten(&self) -> Vec<ForgottenSecret> {
        let mut out = self.user_model().await.forgotten;
        out.extend(
            self.forgotten_here
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .cloned(),
        );
        out
    }

    /// Fails with [`MemoryError::Forgotten`] when `text` contains something
    /// the user asked to forget.
    pub(super) async fn refuse_forgotten(&self, source: &str, text: &str) -> Result<(), MemoryError> {
        if contains_forgotten(text, &self.forgotten().await) {
            return Err(MemoryError::Forgotten {
                source_name: source.to_owned(),
            });
        }
        Ok(())
    }

    /// `/remember`: a fact for the user profile (semantic, shared); refused
    /// when it contains something the user asked to forget.
    pub async fn remember(&self, scope: &MemoryScope, text: &str) -> Result<MemoryRecord, MemoryError> {
        self.write(scope, SOURCE_REMEMBER, text, Value::Null).await
    }

    /// Writes or replaces a named record (task pattern, procedure,
    /// user-model entry) whose id comes from its name, keeping its
    /// rehearsal count.
    pub(super) async fn put_named(
        &self,
        scope: &MemoryScope,
        source: &str,
        name: &str,
        text: String,
        metadata: Value,
    ) -> Result<MemoryRecord, MemoryError> {
        let id = format!("{source}/{}/{}/{name}", scope.user, scope.agent_id);
        let existing = self.store.get_texts(std::slice::from_ref(&id)).await?.pop();
        if let Some(existing) = &existing
            && existing.text == text
            && existing.embedder == self.embedder.name()
        {
            return Ok(existing.clone());
        }
        let embedding = self.embed_one_or_defer(&text).await;
        let mut record = self.record(scope, id, source, text, metadata, embedding);
        record.rehearsal = existing.map_or(0, |e| e.rehearsal);
        self.put_record(record.clone()).await?;
        Ok(record)
    }

    /// `remember_task_pattern`: remembers how a kind of task is done, in
    /// the scope's agent's procedural memory (R-MEM-11). A pattern with the
    /// same name replaces the old one.
    pub async fn remember_task_pattern(
        &self,
        scope: &MemoryScope,
        name: &str,
        pattern: &str,
    ) -> Result<MemoryRecord, MemoryError> {
        let name = name.trim();
        if let Some(reason) = name_problem(name) {
            return Err(MemoryError::InvalidName {
                what: "task pattern",
                name: printable(name),
                reason,
            });
        }
        let pattern = self.clean_text(SOURCE_TASK_PATTERN, pattern)?;
        // A rewrite is never undone by re-embedding the old text.
        let _rewrite = self.profile_lock.read().await;
        self.put_named(
            scope,
            SOURCE_TASK_PATTERN,
            name,
            format!("{name}: {pattern}"),
            json!({ "name": name }),
        )
        .await
    }

    /// Writes the scope agent's procedure `name` to its file and to the
    /// store (procedural memory).
    pub async fn save_procedure(
        &self,
        scope: &MemoryScope,
        name: &str,
        text: &str,
    ) -> Result<MemoryRecord, MemoryError> {
        let library = self.procedures.as_ref().ok_or(MemoryError::NoHome {
            what: "procedure directory",
        })?;
        let text = self.clean_text(SOURCE_PROCEDURE, text)?;
        let procedure = library.save(&scope.agent_id, name, &text)?;
        let _rewrite = self.profile_lock.read().await;
        self.put_named(
            scope,
            SOURCE_PROCEDURE,
            name,
            text,
            json!({ "name": name, "path": procedure.path.display().to_string() }),
        )
        .await
    }

    /// The user model (empty when there is no `JARVIS_HOME`, or it is
    /// missing or damaged).
    pub async fn user_model(&self) -> UserModel {
        match &self.user_model {
            Some(store) => store.load().await,
            None => UserModel::default(),
        }
    }

    /// Sets user-model entries: merges `entries` into the user model file
    /// (an empty value removes its key) and writes each entry to the user
    /// profile (semantic, source `user_model`). `[핵심 사실]` shows the
    /// file's entries; the records keep what was distilled, for services
    /// without a `JARVIS_HOME`. Nothing is written when an entry contains
    /// something the user asked to forget ([`MemoryError::Forgotten`]).
    /// Distillation goes through
    /// [`add_distilled_facts`](Self::add_distilled_facts), which also keeps
    /// provenance and never duplicates.
    pub async fn update_user_model(
        &self,
        scope: &MemoryScope,
        entries: BTreeMap<String, String>,
    ) -> Result<UserModel, MemoryError> {
        let store = self
            .user_model
            .as_ref()
            .ok_or(MemoryError::NoHome { what: "user model" })?;
        let _profile = self.profile_lock.read().await;
        let forgotten_here = self
            .forgotten_here
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let (model, ()) = store
            .try_update(self.now(), |model| {
                let mut forgotten = model.forgotten.clone();
                forgotten.extend(forgotten_here);
                for (key, value) in &entries {
                    if !value.trim().is_empty()
                        && contains_forgotten(&format!("{key}: {}", value.trim()), &forgotten)
                    {
                        return Err(MemoryError::Forgotten {
                            source_name: SOURCE_USER_MODEL.to_owned(),
                        });
                    }
                }
                for (key, value) in &entries {
                    if value.trim().is_empty() {
                        model.entries.remove(key);
                    } else {
                        model.entries.insert(key.clone(), value.trim().to_owned());
                    }
                }
                Ok(())
            })
            .await?;
        for (key, value) in &entries {
            if value.trim().is_empty() {
                continue;
            }
            self.put_named(
                scope,
                SOURCE_USER_MODEL,
                key,
                format!("{key}: {}", value.trim()),
                json!({ "key": key }),
            )
            .await?;
        }
        Ok(model)
    }

    fn filter_for(&self, scope: &MemoryScope, layer: Layer) -> MemoryFilter {
        MemoryFilter::for_user(scope.user.clone()).layer(layer, scope.readable(layer))
    }

    /// The search of `filter` for a query with `vector` (empty: none) and
    /// `terms`, asking `max(4k, 16)` hits of each side so the blend has
    /// room to reorder.
    fn query(&self, filter: MemoryFilter, vector: &[f32], terms: &[String], k: usize) -> SearchQuery {
        SearchQuery {
            filter,
            embedder: self.embedder.name().to_owned(),
            vector: vector.to_vec(),
            terms: terms.to_vec(),
            k: (4 * k).max(16),
            min_similarity: self.config.min_similarity,
        }
    }

    /// The searches of one recall: `filter`'s, and when `period` is given,
    /// the same inside it (every similarity counts there).
    fn queries(
        &self,
        filter: MemoryFilter,
        vector: &[f32],
        terms: &[String],
        k: usize,
        period: Option<(Timestamp, Timestamp)>,
    ) -> Vec<SearchQuery> {
        let general = self.query(filter, vector, terms, k);
        let mut out = vec![general];
        if let Some((from, until)) = period {
            let mut during = out[0].clone();
            during.filter = during.filter.during(from, until);
            during.min_similarity = -1.0;
            out.push(during);
        }
        out
    }

    /// The blended score of a hit of `relevance` (see [`MemoryService`]).
    pub fn score(&self, relevance: f32, created_at: Timestamp, rehearsal: u32) -> f32 {
        let w = self.config.weights;
        let age_ms = (self.now().as_millis() - created_at.as_millis()).max(0) as f64;
        let half_life_ms = self.config.recency_half_life.as_millis().max(1) as f64;
        let recency = 0.5f64.powf(age_ms / half_life_ms) as f32;
        let rehearsal = rehearsal as f32 / (rehearsal as f32 + 3.0);
        w.relevance * relevance + w.recency * recency + w.rehearsal * rehearsal
    }

    /// The `k` best hits of one recall's searches by blended score, best
    /// first, each with its relevance and score.
    fn rank(&self, answers: Vec<Vec<SearchHit>>, k: usize, latest: bool) -> Vec<Ranked> {
        let fused = fuse(answers, self.config.min_similarity, self.config.fusion_k);
        let share = self.config.context_share;
        // A neighbour comes when it matched the query about as well itself.
        let comes = |id: &String, relevance: f32| {
            share <= 0.0 || fused.iter().any(|(h, r)| h.id == *id && *r >= share * relevance)
        };
        let neighbours: Vec<Vec<String>> = fused
            .iter()
            .map(|(hit, relevance)| {
                hit.prev
                    .iter()
                    .chain(&hit.next)
                    .filter(|id| comes(id, *relevance))
                    .cloned()
                    .collect()
            })
            .collect();
        let mut ranked: Vec<Ranked> = fused
            .into_iter()
            .zip(neighbours)
            .map(|((hit, relevance), neighbours)| Ranked {
                score: self.score(relevance, hit.created_at, hit.rehearsal),
                neighbours,
                hit,
                relevance,
            })
            .collect();
        ranked.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.hit.id.cmp(&b.hit.id)));
        if latest && self.config.latest_band < 1.0 {
            // How things stand now: among the records that match about
            // as well as the best, the newest first.
            let top = ranked.iter().map(|r| r.relevance).fold(0.0f32, f32::max);
            let floor = self.config.latest_band * top;
            // Stable: outside the band, the order by score stays.
            ranked.sort_by(|a, b| {
                let (a_in, b_in) = (a.relevance >= floor, b.relevance >= floor);
                b_in.cmp(&a_in).then_with(|| {
                    if a_in && b_in {
                        b.hit.created_at.cmp(&a.hit.created_at)
                    } else {
                        std::cmp::Ordering::Equal
                    }
                })
            });
        }
        ranked.truncate(k);
        ranked
    }

    /// The records of each ranking, with their neighbouring turns where
    /// [`MemoryConfig::context`] is on and the ranking asks for them (its
    /// flag), read from the store in one call.
    async fn fetch(&self, rankings: Vec<(Vec<Ranked>, bool)>) -> Result<Vec<Vec<Recalled>>, MemoryError> {
        let mut ids: Vec<String> = Vec::new();
        for (ranked, context) in &rankings {
            for r in ranked {
                ids.push(r.hit.id.clone());
                if *context && self.config.context {
                    ids.extend(r.neighbours.iter().cloned());
                }
            }
        }
        // Always right after a search, which caught the store up.
        let records: HashMap<String, MemoryRecord> = self
            .store
            .get_texts_cached(&ids)
            .await?
            .into_iter()
            .map(|r| (r.id.clone(), r))
            .collect();
        Ok(rankings
            .into_iter()
            .map(|(ranked, context)| {
                let context = context && self.config.context;
                ranked
                    .into_iter()
                    .filter_map(|r| {
                        let record = records.get(&r.hit.id)?.clone();
                        let neighbours = if context {
                            r.neighbours
                                .iter()
                                .filter_map(|id| records.get(id).cloned())
                                .collect()
                        } else {
                            Vec::new()
                        };
                        Some(Recalled {
                            record,
                            similarity: r.hit.similarity,
                            lexical: r.hit.lexical,
                            relevance: r.relevance,
                            score: r.score,
                            context: neighbours,
                        })
                    })
                    .collect()
            })
            .collect())
    }

    /// The period `query` asks about, when it lies wholly before today: a
    /// period still running ("this week") is what recency already favours,
    /// and searching it again would only cost time.
    fn past_period(&self, query: &str) -> Option<(Timestamp, Timestamp)> {
        let now = self.now();
        let (today, _) = self.config.time_zone.day_bounds(now);
        period_of(query, now, &self.config.time_zone).filter(|(_, until)| *until <= today)
    }

    /// The query's embedding, or none (logged) when the embedder does not
    /// answer: recall then goes by words alone.
    async fn query_vector(&self, scope: &MemoryScope, query: &str) -> Vec<f32> {
        match self.embed_prompt(query).await {
            Ok(vector) => vector,
            Err(e) => {
                tracing::warn!(
                    embedder = %self.embedder.name(),
                    session_id = %scope.session_id,
                    "memory: the query could not be embedded ({}); recall goes by its words alone",
                    error_chain(&e)
                );
                Vec::new()
            }
        }
    }

    /// The `k` records of `layer` the scope may read that best match
    /// `query`, best first, without rehearsing them; episodes come with
    /// their neighbouring turns (see [`Recalled::context`]).
    pub async fn search(
        &self,
        scope: &MemoryScope,
        query: &str,
        layer: Layer,
        k: usize,
    ) -> Result<Vec<Recalled>, MemoryError> {
        if k == 0 {
            return Ok(Vec::new());
        }
        self.sync_procedures(scope, layer).await;
        let vector = self.query_vector(scope, query).await;
        let terms = SearchQuery::terms_of(query);
        let period = match layer {
            Layer::Episodic => self.past_period(query),
            _ => None,
        };
        let queries = self.queries(self.filter_for(scope, layer), &vector, &terms, k, period);
        let answers = self.store.search_many(&queries).await?;
        let ranked = self.rank(answers, k, asks_latest(query));
        let mut found = self.fetch(vec![(ranked, layer == Layer::Episodic)]).await?;
        Ok(found.pop().unwrap_or_default())
    }

    /// Like [`search`](Self::search), and what comes back is rehearsed.
    pub async fn recall(
        &self,
        scope: &MemoryScope,
        query: &str,
        layer: Layer,
        k: usize,
    ) -> Result<Vec<Recalled>, MemoryError> {
        let recalled = self.search(scope, query, layer, k).await?;
        let ids: Vec<String> = recalled.iter().map(|r| r.record.id.clone()).collect();
        if !ids.is_empty() {
            self.store.touch(&ids).await?;
        }
        Ok(recalled)
    }

    /// A record's day in the user's zone, `YYYY-MM-DD`.
    pub fn date_of(&self, record: &MemoryRecord) -> String {
        let local = self.config.time_zone.format_local(record.created_at, ' ');
        local[..10.min(local.len())].to_owned()
    }

    /// The session's working memory (empty when it has none yet).
    pub async fn working(&self, scope: &MemoryScope) -> Result<WorkingMemory, MemoryError> {
        let mut memory = self
            .store
            .load_working(&scope.session_id)
            .await?
            .unwrap_or_else(|| WorkingMemory::new(&scope.session_id, &scope.user, &scope.agent_id));
        let missing: Vec<usize> = memory
            .items
            .iter()
            .enumerate()
            .filter(|(_, item)| item.embedding.is_empty())
            .map(|(i, _)| i)
            .collect();
        if !missing.is_empty() {
            let texts = missing.iter().map(|&i| memory.items[i].text.clone()).collect();
            // Without the embedder, the items stay unembedded (similar to
            // nothing) until it answers again; the caller says so.
            if let Ok(vectors) = self.embed(texts, EmbedRole::Query).await {
                for (i, vector) in missing.into_iter().zip(vectors) {
                    memory.items[i].embedding = vector;
                }
            }
        }
        Ok(memory)
    }

    /// Recalls once for a turn of `scope` on `query` and answers the
    /// context to apply before every model call of the turn (the only place
    /// memory enters a request, R-MEM-4). Recalled records are rehearsed.
    /// Episodes are dated (`[YYYY-MM-DD]` in the user's zone) and come with
    /// the turns just before and after them in their session, one item per
    /// run of neighbouring turns.
    ///
    /// When the embedder does not answer, recall goes by the prompt's words
    /// alone (records embedded or not), and it is logged.
    pub async fn observe(&self, scope: &MemoryScope, query: &str) -> Result<MemoryContext, MemoryError> {
        self.sync_procedures(scope, Layer::Procedural).await;
        let vector = self.query_vector(scope, query).await;
        let terms = SearchQuery::terms_of(query);
        let period = self.past_period(query);
        let latest = asks_latest(query);
        // The reads that need a shared database go together: the session's
        // working memory, the user model and the store's catch-up, one
        // round trip's wait between them; the searches then answer from
        // what the catch-up brought.
        let (working, user_model, caught_up) =
            tokio::join!(self.working(scope), self.user_model(), self.store.catch_up());
        let working = working?;
        caught_up?;
        let k = self.config.recall_k;
        let user = || MemoryFilter::for_user(scope.user.clone());
        // With a user-model file, the file is the truth about the user
        // model (a key removed from it stays removed); without one, the
        // distilled entries in the store stand in for it.
        let fact_kinds: &[&str] = if self.user_model.is_some() {
            &[KIND_FACT]
        } else {
            &[KIND_FACT, KIND_USER_MODEL]
        };
        let sections = [
            (
                SectionKind::KeyFacts,
                user()
                    .layer(Layer::Semantic, Agents::Any)
                    .kinds(fact_kinds.iter().copied()),
                k.facts,
                None,
            ),
            (
                SectionKind::LongTerm,
                user()
                    .layer(Layer::Episodic, scope.readable(Layer::Episodic))
                    .excluding(working.recent_episodes.clone()),
                k.episodes,
                period,
            ),
            (
                SectionKind::Procedures,
                user()
                    .layer(Layer::Procedural, scope.readable(Layer::Procedural))
                    .kinds([KIND_PROCEDURE]),
                k.procedures,
                None,
            ),
            (
                SectionKind::TaskPatterns,
                user()
                    .layer(Layer::Procedural, scope.readable(Layer::Procedural))
                    .kinds([KIND_TASK_PATTERN]),
                k.task_patterns,
                None,
            ),
        ];
        // Every section's searches in one call, then each section's share.
        let mut queries = Vec::new();
        let mut counts = Vec::with_capacity(sections.len());
        for (_, filter, k, period) in &sections {
            let q = self.queries(filter.clone(), &vector, &terms, *k, *period);
            counts.push(q.len());
            queries.extend(q);
        }
        let mut answers = self.store.search_many_cached(&queries).await?.into_iter();
        let mut kinds = Vec::with_capacity(sections.len());
        let mut rankings = Vec::with_capacity(sections.len());
        for ((kind, _, k, _), count) in sections.into_iter().zip(counts) {
            let ranked = self.rank(answers.by_ref().take(count).collect(), k, latest);
            kinds.push(kind);
            rankings.push((ranked, kind == SectionKind::LongTerm));
        }
        let recalled: Vec<(SectionKind, Vec<Recalled>)> =
            kinds.into_iter().zip(self.fetch(rankings).await?).collect();

        let mut touched: Vec<String> = Vec::new();
        let mut items_of: Vec<(SectionKind, Vec<String>)> = Vec::with_capacity(5);
        let mut user_model = Some(user_model);
        for (kind, found) in recalled {
            // The user model opens the key facts; a user-model record that
            // repeats one of its lines is not shown twice.
            let mut items = if kind == SectionKind::KeyFacts {
                user_model.take().map(|m| m.lines()).unwrap_or_default()
            } else {
                Vec::new()
            };
            touched.extend(found.iter().map(|r| r.record.id.clone()));
            let rendered = if kind == SectionKind::LongTerm {
                self.episode_items(&found)
            } else {
                found.iter().map(|r| render(kind, &r.record)).collect()
            };
            for item in rendered {
                if !items.contains(&item) {
                    items.push(item);
                }
            }
            items_of.push((kind, items));
        }
        items_of.push((
            SectionKind::Working,
            working
                .by_activity()
                .into_iter()
                .map(|item| {
                    let mut line = format!("{} (되뇌기 {})", one_line(&item.text), item.rehearsal);
                    if !item.notes.is_empty() {
                        line.push_str(" — 메모: ");
                        line.push_str(&item.notes.join(" / "));
                    }
                    line
                })
                .collect(),
        ));
        *self.last_working.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((scope.session_id.clone(), query.trim().to_owned(), working));
        if !touched.is_empty() {
            self.store.touch_soon(&touched).await?;
        }
        Ok(MemoryContext::new(
            items_of,
            &self.config.budgets,
            self.config.history_turns,
        ))
    }

    /// The `[장기 기억]` items of recalled episodes, best first: each
    /// episode with its neighbouring turns, in time order, one dated line
    /// per turn; a turn already shown is not shown again.
    fn episode_items(&self, found: &[Recalled]) -> Vec<String> {
        let mut shown: HashSet<&str> = HashSet::new();
        let mut items = Vec::with_capacity(found.len());
        for r in found {
            let mut turns: Vec<&MemoryRecord> = r.context.iter().chain([&r.record]).collect();
            turns.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
            let lines: Vec<String> = turns
                .into_iter()
                .filter(|t| shown.insert(t.id.as_str()))
                .map(|t| format!("[{}] {}", self.date_of(t), one_line(&t.text)))
                .collect();
            if !lines.is_empty() {
                items.push(lines.join("\n  "));
            }
        }
        items
    }

    /// After a turn: writes its episode (episodic, the scope's agent) with
    /// metadata `{session_id, tools, duration_ms, turns, overflows,
    /// overflow, stop_reason}` (`overflow` is true when `overflows ≥ 1`,
    /// R-LOOP-14), `prev` (the session's episode before it, when there is
    /// one) and `when` (the days the turn states, when it states any), and
    /// applies the working-memory rule. Answers the episode,
    /// or `None` for an empty prompt.
    pub async fn record_turn(
        &self,
        scope: &MemoryScope,
        turn: TurnRecord,
    ) -> Result<Option<MemoryRecord>, MemoryError> {
        let prompt = turn.prompt.trim();
        if prompt.is_empty() {
            return Ok(None);
        }
        let answer = turn.answer.trim();
        let text = if answer.is_empty() {
            prompt.to_owned()
        } else {
            format!(
                "{prompt}{ANSWER_MARK}{}",
                truncate_with_marker(answer, self.config.episode_answer_chars)
            )
        };
        let text = self.clean_text(SOURCE_TURN, &text)?;
        let mut metadata = json!({
            "session_id": scope.session_id,
            "tools": turn.tools,
            "duration_ms": u64::try_from(turn.duration.as_millis()).unwrap_or(u64::MAX),
            "turns": turn.turns,
            "overflows": turn.overflows,
            "overflow": turn.overflows >= 1,
            "stop_reason": turn.stop_reason,
        });
        // The working memory `observe` read for this prompt, or a read
        // that goes out first while the embeddings run (a round trip for
        // a shared database). Without the embedder, the request becomes a
        // working-memory item of its own (similar to nothing), embedded
        // when it is next loaded.
        let carried = self
            .last_working
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take_if(|(session, asked, _)| *session == scope.session_id && asked == prompt)
            .map(|(_, _, memory)| memory);
        let working = async {
            match carried {
                Some(memory) => Ok(memory),
                None => self.working(scope).await,
            }
        };
        let (working, (episode_vector, prompt_vector)) = tokio::join!(working, async {
            let episode = self.embed_one_or_defer(&text).await;
            (episode, self.embed_prompt(prompt).await.unwrap_or_default())
        });
        let mut working = working?;
        if let (Some(prev), Some(map)) = (&working.last_episode, metadata.as_object_mut()) {
            map.insert(META_PREV.to_owned(), json!(prev));
        }
        let id = self.ids.next_id("mem_");
        let episode = self.record(scope, id, SOURCE_TURN, text, metadata, episode_vector);

        working.record_turn(prompt, prompt_vector, answer, self.now(), &self.config.working);
        working.push_episode(episode.id.clone(), self.config.history_turns.saturating_sub(1));
        self.store.put_with_working(episode.clone(), &working).await?;
        if episode.embedding.is_empty() {
            self.wake.0.notify_one();
        }
        Ok(Some(episode))
    }

    /// Re-embeds records whose embedding is missing or comes from another
    /// embedder (legacy rows, a changed embedder, records kept while the
    /// embedder did not answer); answers how many. Safe to run while the
    /// service is in use, and to stop at any point: what is left is found
    /// again by the next run. An app runs it in the background through
    /// [`keep_embedded`](Self::keep_embedded).
    pub async fn reembed_stale(&self) -> Result<usize, MemoryError> {
        self.reembed.send_modify(|s| {
            s.phase = ReembedPhase::Running;
            s.error = None;
        });
        let pass = reembed_pass(|| Some(self)).await;
        let pass = pass.map(|done| done.unwrap_or(0));
        self.reembed.send_modify(|s| match &pass {
            Ok(_) => s.phase = ReembedPhase::Done,
            Err(e) => {
                s.phase = ReembedPhase::Waiting;
                s.failures += 1;
                s.error = Some(error_chain(e));
            }
        });
        pass
    }

    /// Where re-embedding stands.
    pub fn reembedding(&self) -> ReembedStatus {
        self.reembed.borrow().clone()
    }

    /// Every change of [`reembedding`](Self::reembedding), for waiting on
    /// one (`wait_for(|s| s.phase == ReembedPhase::Done)`).
    pub fn reembedding_updates(&self) -> watch::Receiver<ReembedStatus> {
        self.reembed.subscribe()
    }

    /// Keeps every record embedded with the current embedder, until the
    /// service is dropped: runs [`reembed_stale`](Self::reembed_stale)'s
    /// pass, then waits for a record kept un-embedded. When the embedder
    /// does not answer, it logs it once, says
    /// [`Waiting`](ReembedPhase::Waiting), and tries again after 5 s,
    /// doubling to 5 minutes, or as soon as a turn finds the embedder
    /// answering. Recall meanwhile answers from the records already
    /// embedded with the current embedder; nothing falls back to another
    /// embedder.
    ///
    /// It holds the service only while it reads or writes the store, never
    /// while it waits for the embedder, so dropping the app releases the
    /// store. Spawn it: `tokio::spawn(MemoryService::keep_embedded(Arc::downgrade(&service)))`.
    pub async fn keep_embedded(service: Weak<MemoryService>) {
        let Some((wake, name)) = service
            .upgrade()
            .map(|s| (s.wake.0.clone(), s.embedder.name().to_owned()))
        else {
            return;
        };
        let mut wait = REEMBED_FIRST_WAIT;
        let mut last_error: Option<String> = None;
        let mut first = true;
        loop {
            if let Some(s) = service.upgrade() {
                s.reembed.send_modify(|st| st.phase = ReembedPhase::Running);
            }
            let mut pass = reembed_pass(|| service.upgrade()).await;
            // A start with nothing to embed again says so at once, then asks
            // the embedder once, so one that does not answer is said at start.
            if first && matches!(pass, Ok(Some(0))) {
                let Some(embedder) = service.upgrade().map(|s| {
                    s.reembed.send_modify(|st| st.phase = ReembedPhase::Done);
                    s.embedder.clone()
                }) else {
                    return;
                };
                if let Err(e) =
                    checked_embed(embedder.as_ref(), vec!["jarvis".to_owned()], EmbedRole::Document).await
                {
                    pass = Err(e);
                }
            }
            first = false;
            let Some(s) = service.upgrade() else {
                return;
            };
            match pass {
                Ok(None) => return,
                Ok(Some(done)) => {
                    if done > 0 || last_error.is_some() {
                        tracing::info!(
                            embedder = %name,
                            records = done,
                            "memory: every memory is embedded with the current embedder"
                        );
                        s.note_embedder(true);
                    }
                    s.reembed.send_modify(|st| {
                        st.phase = ReembedPhase::Done;
                        st.error = None;
                    });
                    wait = REEMBED_FIRST_WAIT;
                    last_error = None;
                    drop(s);
                    wake.notified().await;
                }
                Err(e) => {
                    let error = error_chain(&e);
                    let embedder_failed = matches!(e, MemoryError::Embed(_));
                    if last_error.as_deref() != Some(error.as_str()) {
                        if embedder_failed {
                            tracing::warn!(
                                embedder = %name,
                                retry_in = ?wait,
                                "memory: the embedder did not answer ({error}); it stays the embedder, recall answers from the memories already embedded with it, and re-embedding tries again later"
                            );
                        } else {
                            tracing::warn!(
                                embedder = %name,
                                retry_in = ?wait,
                                "memory: re-embedding failed ({error}); it tries again later"
                            );
                        }
                    }
                    if embedder_failed {
                        s.note_embedder(false);
                    }
                    s.reembed.send_modify(|st| {
                        st.phase = ReembedPhase::Waiting;
                        st.failures += 1;
                        st.error = Some(error.clone());
                    });
                    last_error = Some(error);
                    drop(s);
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = wake.notified() => {}
                    }
                    wait = (wait * 2).min(REEMBED_MAX_WAIT);
                }
            }
        }
    }

    /// Indexes the procedure files of the agents whose procedural memory
    /// the scope reads, once per user and agent in this process.
    async fn sync_procedures(&self, scope: &MemoryScope, layer: Layer) {
        let Some(library) = &self.procedures else {
            return;
        };
        if layer != Layer::Procedural {
            return;
        }
        let Agents::Only(agents) = scope.readable(layer) else {
            return;
        };
        for agent in agents {
            let key = (scope.user.clone(), agent.clone());
            {
                let mut synced = self.synced.lock().unwrap_or_else(|e| e.into_inner());
                if !synced.insert(key) {
                    continue;
                }
            }
            // ponytail: procedure files are read once per agent and process,
            // on the caller's thread; they are few and small.
            let procedures = match library.list(&agent) {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(agent_id = %agent, "{e}; its procedures are not recalled");
                    continue;
                }
            };
            let owner = MemoryScope::new(scope.user.clone(), agent.clone(), scope.session_id.clone());
            for procedure in procedures {
                let text = match self.clean_text(SOURCE_PROCEDURE, &procedure.text) {
                    Ok(t) => t,
                    Err(_) => continue,
                };
                let metadata = json!({
                    "name": procedure.name,
                    "path": procedure.path.display().to_string(),
                    "legacy": procedure.legacy,
                });
                if let Err(e) = self
                    .put_named(&owner, SOURCE_PROCEDURE, &procedure.name, text, metadata)
                    .await
                {
                    tracing::warn!(agent_id = %agent, "memory: could not index procedure {}: {e}", procedure.name);
                }
            }
        }
    }
}

/// `text` on one line: line breaks become spaces.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// How a recalled record is written in its section (episodes are written
/// by [`MemoryService::episode_items`], dated and with their neighbours).
fn render(kind: SectionKind, record: &MemoryRecord) -> String {
    match kind {
        SectionKind::Procedures => {
            let name = record.metadata.get("name").and_then(Value::as_str).unwrap_or("");
            let body = record
                .text
                .lines()
                .map(str::trim_end)
                .filter(|l| !l.trim().is_empty())
                .collect::<Vec<_>>()
                .join("\n  ");
            if name.is_empty() {
                body
            } else {
                format!("{name}\n  {body}")
            }
        }
        _ => one_line(&record.text),
    }
}

/// `embedder`'s vectors for `texts` as `role`, checked to be one per text.
async fn checked_embed(
    embedder: &dyn Embedder,
    texts: Vec<String>,
    role: EmbedRole,
) -> Result<Vec<Vec<f32>>, MemoryError> {
    let count = texts.len();
    let vectors = embedder.embed(texts, role).await.map_err(MemoryError::Embed)?;
    if vectors.len() != count {
        return Err(MemoryError::Embed(jarvis_model::ProviderError::stream(
            "embedder",
            "the embedder answered a different number of vectors than texts",
        )));
    }
    Ok(vectors)
}

/// One re-embedding pass over the service `service()` gives (`None`: it is
/// gone, and so is the pass): batches of stale records, each embedded
/// without holding the service, then put back (under the profile lock,
/// held exclusively) when they still hold the text that was embedded and
/// are still stale, so a record forgotten or rewritten meanwhile is never
/// brought back. Answers how many were embedded again.
async fn reembed_pass<S>(service: impl Fn() -> Option<S>) -> Result<Option<usize>, MemoryError>
where
    S: std::ops::Deref<Target = MemoryService>,
{
    let mut done: HashSet<String> = HashSet::new();
    loop {
        let (batch, embedder) = {
            let Some(s) = service() else {
                return Ok(None);
            };
            let name = s.embedder.name().to_owned();
            (s.store.stale(&name, REEMBED_BATCH).await?, s.embedder.clone())
        };
        if batch.is_empty() {
            return Ok(Some(done.len()));
        }
        if batch.iter().any(|r| done.contains(&r.id)) {
            tracing::warn!("memory: records stay stale after re-embedding them; stopped");
            return Ok(Some(done.len()));
        }
        let texts = batch.iter().map(|r| r.text.clone()).collect();
        let vectors = checked_embed(embedder.as_ref(), texts, EmbedRole::Document).await?;
        let Some(s) = service() else {
            return Ok(None);
        };
        let name = embedder.name().to_owned();
        let embedded: HashMap<String, (String, Vec<f32>)> = batch
            .into_iter()
            .zip(vectors)
            .map(|(r, v)| (r.id, (r.text, v)))
            .collect();
        let ids: Vec<String> = embedded.keys().cloned().collect();
        let _profile = s.profile_lock.write().await;
        let current = s.store.get(&ids).await?;
        let mut puts = Vec::with_capacity(current.len());
        for mut record in current {
            let Some((text, vector)) = embedded.get(&record.id) else {
                continue;
            };
            if record.text != *text || record.embedder == name {
                continue;
            }
            record.embedding = vector.clone();
            record.embedder = name.clone();
            done.insert(record.id.clone());
            puts.push(s.store.put(record));
        }
        let count = puts.len() as u64;
        // ponytail: a rehearsal counted between the read above and these
        // puts is lost (recall does not take the lock); rare, and harmless.
        // Together, so a store that group-commits writes them in one go.
        futures::future::try_join_all(puts).await?;
        s.reembed.send_modify(|st| st.embedded += count);
    }
}
