//! [`MemoryService`]: the rules of memory over a [`MemoryStore`], an
//! [`Embedder`], a clock and an id source.
//!
//! The rules are documented on [`MemoryService`].

use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::error::{MemoryError, printable};
use super::forget::{ForgottenSecret, contains_forgotten};
use super::inject::{MemoryContext, SectionBudgets, SectionKind};
use super::learn::ANSWER_MARK;
use super::procedures::{ProcedureLibrary, name_problem};
use super::record::{Agents, Layer, MemoryFilter, MemoryRecord, SearchHit, SearchQuery};
use super::rules::{
    KIND_FACT, KIND_PROCEDURE, KIND_TASK_PATTERN, KIND_USER_MODEL, SOURCE_PROCEDURE, SOURCE_REMEMBER,
    SOURCE_TASK_PATTERN, SOURCE_TURN, SOURCE_USER_MODEL, write_rule,
};
use super::scope::MemoryScope;
use super::store::MemoryStore;
use super::user_model::{UserModel, UserModelFile};
use super::working::{WorkingConfig, WorkingMemory};
use crate::common::{Clock, IdSource, SystemClock, Timestamp, UniqueIds, truncate_with_marker};
use crate::model::Embedder;

/// The weights of the recall blend (see [`MemoryService`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecallWeights {
    /// Weight of cosine similarity. Default 0.75.
    pub similarity: f32,
    /// Weight of recency. Default 0.15.
    pub recency: f32,
    /// Weight of rehearsal. Default 0.10.
    pub rehearsal: f32,
}

impl Default for RecallWeights {
    fn default() -> Self {
        Self {
            similarity: 0.75,
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
    /// Records less similar than this to the query are never recalled.
    /// Default 0.2.
    pub min_similarity: f32,
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

/// A recalled record with its similarity to the query and its blended score.
#[derive(Debug, Clone, PartialEq)]
pub struct Recalled {
    /// The record, without its embedding (left empty).
    pub record: MemoryRecord,
    /// Cosine similarity to the query.
    pub similarity: f32,
    /// The blended score it was ranked by.
    pub score: f32,
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

/// Working memory, long-term memory, scopes, injection and recall (SPEC.md
/// §8). Share it as `Arc<MemoryService>`.
///
/// - **Writing** ([`MemoryService::write`]): the source picks the layer and
///   kind ([`WRITE_RULES`](super::WRITE_RULES)); the scope's user and agent
///   are recorded; the text is embedded once.
/// - **Recall** ([`MemoryService::recall`]): the store answers the most
///   similar records the scope may read; they are ranked by
///
///   `score = 0.75 · similarity + 0.15 · recency + 0.10 · rehearsal`
///
///   where `recency = 0.5^(age / 14 days)` and
///   `rehearsal = r / (r + 3)` for a record recalled `r` times. Records
///   below the similarity floor ([`MemoryConfig::min_similarity`]) never
///   come back, however new or rehearsed; the blend only reorders the
///   `max(4k, 16)` most similar. What is recalled is rehearsed (`r + 1`).
/// - **Injection** ([`MemoryService::observe`]): once per turn, recall for
///   each section and build the [`MemoryContext`] the loop applies before
///   every model call (its contract is on [`MemoryContext`]).
/// - **After a turn** ([`MemoryService::record_turn`]): the turn episode
///   and the working-memory rule (see [`WorkingMemory`]).
///
/// ```
/// use std::sync::Arc;
/// use jarvis_sdk::{HashEmbedder, InMemoryMemoryStore, MemoryScope, MemoryService, Message, TurnRecord};
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
    user_model: Option<UserModelFile>,
    procedures: Option<ProcedureLibrary>,
    /// `(user, agent)` pairs whose procedure files were indexed.
    synced: Mutex<HashSet<(String, String)>>,
    /// The last prompt embedded by `observe`, which `record_turn` embeds
    /// again at the end of the same turn.
    last_prompt: Mutex<Option<(String, Vec<f32>)>>,
    /// What was forgotten, when there is no user-model file to keep it in.
    pub(super) forgotten_here: Mutex<Vec<ForgottenSecret>>,
    /// Orders user-profile writes and forgetting: a profile write (its
    /// check against the forgotten list and its record) holds it shared,
    /// [`forget`](Self::forget) holds it exclusively for its record and
    /// delete, so a write that passed the check lands before the delete
    /// that removes it, never after.
    pub(super) profile_lock: tokio::sync::RwLock<()>,
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
            forgotten_here: Mutex::new(Vec::new()),
            profile_lock: tokio::sync::RwLock::new(()),
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

    /// Sets the settings (and with them `JARVIS_HOME`).
    pub fn with_config(mut self, config: MemoryConfig) -> Self {
        self.user_model = config.home.as_deref().map(UserModelFile::new);
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

    /// The user-model file, when there is a `JARVIS_HOME`.
    pub fn user_model_file(&self) -> Option<&UserModelFile> {
        self.user_model.as_ref()
    }

    pub(super) fn now(&self) -> Timestamp {
        Timestamp::from_system_time(self.clock.now())
    }

    async fn embed(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, MemoryError> {
        let count = texts.len();
        let vectors = self.embedder.embed(texts).await.map_err(MemoryError::Embed)?;
        if vectors.len() != count {
            return Err(MemoryError::Embed(crate::model::ProviderError::stream(
                "embedder",
                "the embedder answered a different number of vectors than texts",
            )));
        }
        Ok(vectors)
    }

    async fn embed_one(&self, text: &str) -> Result<Vec<f32>, MemoryError> {
        let mut vectors = self.embed(vec![text.to_owned()]).await?;
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
        let vector = self.embed_one(prompt).await?;
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
            embedder: self.embedder.name().to_owned(),
            embedding,
        }
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
            self.refuse_forgotten(source, &text)?;
        }
        let embedding = self.embed_one(&text).await?;
        if rule.layer == Layer::Semantic
            && let Some(existing) = self.same_fact(scope, rule.kind, &text, &embedding).await?
        {
            self.store.touch(std::slice::from_ref(&existing.id)).await?;
            return Ok(existing);
        }
        let id = self.ids.next_id("mem_");
        let record = self.record(scope, id, source, text, metadata, embedding);
        self.store.put(record.clone()).await?;
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
    pub fn forgotten(&self) -> Vec<ForgottenSecret> {
        let mut out = self.user_model().forgotten;
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
    pub(super) fn refuse_forgotten(&self, source: &str, text: &str) -> Result<(), MemoryError> {
        if contains_forgotten(text, &self.forgotten()) {
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
        let embedding = self.embed_one(&text).await?;
        let mut record = self.record(scope, id, source, text, metadata, embedding);
        record.rehearsal = existing.map_or(0, |e| e.rehearsal);
        self.store.put(record.clone()).await?;
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
        self.put_named(
            scope,
            SOURCE_PROCEDURE,
            name,
            text,
            json!({ "name": name, "path": procedure.path.display().to_string() }),
        )
        .await
    }

    /// The user model (empty when there is no `JARVIS_HOME`, the file is
    /// missing or damaged).
    pub fn user_model(&self) -> UserModel {
        self.user_model
            .as_ref()
            .map(UserModelFile::load)
            .unwrap_or_default()
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
        let file = self
            .user_model
            .as_ref()
            .ok_or(MemoryError::NoHome { what: "user model" })?;
        let _profile = self.profile_lock.read().await;
        let forgotten_here = self
            .forgotten_here
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let (model, ()) = file.try_update(self.now(), |model| {
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
        })?;
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

    fn query(&self, filter: MemoryFilter, vector: &[f32], k: usize) -> SearchQuery {
        SearchQuery {
            filter,
            embedder: self.embedder.name().to_owned(),
            vector: vector.to_vec(),
            k: (4 * k).max(16),
            min_similarity: self.config.min_similarity,
        }
    }

    /// The blended score of a hit (see [`MemoryService`]).
    pub fn score(&self, similarity: f32, created_at: Timestamp, rehearsal: u32) -> f32 {
        let w = self.config.weights;
        let age_ms = (self.now().as_millis() - created_at.as_millis()).max(0) as f64;
        let half_life_ms = self.config.recency_half_life.as_millis().max(1) as f64;
        let recency = 0.5f64.powf(age_ms / half_life_ms) as f32;
        let rehearsal = rehearsal as f32 / (rehearsal as f32 + 3.0);
        w.similarity * similarity + w.recency * recency + w.rehearsal * rehearsal
    }

    /// The `k` best hits by blended score, best first.
    fn rank(&self, hits: Vec<SearchHit>, k: usize) -> Vec<(SearchHit, f32)> {
        let mut scored: Vec<(SearchHit, f32)> = hits
            .into_iter()
            .map(|h| {
                let s = self.score(h.similarity, h.created_at, h.rehearsal);
                (h, s)
            })
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.id.cmp(&b.0.id)));
        scored.truncate(k);
        scored
    }

    async fn fetch(&self, ranked: Vec<(SearchHit, f32)>) -> Result<Vec<Recalled>, MemoryError> {
        let ids: Vec<String> = ranked.iter().map(|(h, _)| h.id.clone()).collect();
        let records = self.store.get_texts(&ids).await?;
        Ok(ranked
            .into_iter()
            .filter_map(|(hit, score)| {
                records.iter().find(|r| r.id == hit.id).map(|record| Recalled {
                    record: record.clone(),
                    similarity: hit.similarity,
                    score,
                })
            })
            .collect())
    }

    /// The `k` records of `layer` the scope may read that best match
    /// `query`, best first, without rehearsing them.
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
        let vector = self.embed_one(query).await?;
        let hits = self
            .store
            .search(&self.query(self.filter_for(scope, layer), &vector, k))
            .await?;
        self.fetch(self.rank(hits, k)).await
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
            for (i, vector) in missing.into_iter().zip(self.embed(texts).await?) {
                memory.items[i].embedding = vector;
            }
        }
        Ok(memory)
    }

    /// Recalls once for a turn of `scope` on `query` and answers the
    /// context to apply before every model call of the turn (the only place
    /// memory enters a request, R-MEM-4). Recalled records are rehearsed.
    pub async fn observe(&self, scope: &MemoryScope, query: &str) -> Result<MemoryContext, MemoryError> {
        self.sync_procedures(scope, Layer::Procedural).await;
        let vector = self.embed_prompt(query).await?;
        let working = self.working(scope).await?;
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
        let queries = [
            self.query(
                user()
                    .layer(Layer::Semantic, Agents::Any)
                    .kinds(fact_kinds.iter().copied()),
                &vector,
                k.facts,
            ),
            self.query(
                user()
                    .layer(Layer::Episodic, scope.readable(Layer::Episodic))
                    .excluding(working.recent_episodes.clone()),
                &vector,
                k.episodes,
            ),
            self.query(
                user()
                    .layer(Layer::Procedural, scope.readable(Layer::Procedural))
                    .kinds([KIND_PROCEDURE]),
                &vector,
                k.procedures,
            ),
            self.query(
                user()
                    .layer(Layer::Procedural, scope.readable(Layer::Procedural))
                    .kinds([KIND_TASK_PATTERN]),
                &vector,
                k.task_patterns,
            ),
        ];
        let answers = self.store.search_many(&queries).await?;
        let ks = [k.facts, k.episodes, k.procedures, k.task_patterns];
        let ranked: Vec<Vec<(SearchHit, f32)>> = answers
            .into_iter()
            .zip(ks)
            .map(|(hits, k)| self.rank(hits, k))
            .collect();
        let ids: Vec<String> = ranked.iter().flatten().map(|(h, _)| h.id.clone()).collect();
        let records: HashMap<String, MemoryRecord> = self
            .store
            .get_texts(&ids)
            .await?
            .into_iter()
            .map(|r| (r.id.clone(), r))
            .collect();

        let mut sections: Vec<(SectionKind, Vec<String>)> = Vec::with_capacity(5);
        let mut touched: Vec<String> = Vec::with_capacity(ids.len());
        let recalled_kinds = [
            SectionKind::KeyFacts,
            SectionKind::LongTerm,
            SectionKind::Procedures,
            SectionKind::TaskPatterns,
        ];
        for (kind, hits) in recalled_kinds.into_iter().zip(&ranked) {
            // The user model opens the key facts; a user-model record that
            // repeats one of its lines is not shown twice.
            let mut items = if kind == SectionKind::KeyFacts {
                self.user_model().lines()
            } else {
                Vec::new()
            };
            for (hit, _) in hits {
                let Some(record) = records.get(&hit.id) else {
                    continue;
                };
                touched.push(record.id.clone());
                let item = render(kind, record);
                if !items.contains(&item) {
                    items.push(item);
                }
            }
            sections.push((kind, items));
        }
        sections.push((
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
        if !touched.is_empty() {
            self.store.touch(&touched).await?;
        }
        Ok(MemoryContext::new(
            sections,
            &self.config.budgets,
            self.config.history_turns,
        ))
    }

    /// After a turn: writes its episode (episodic, the scope's agent) with
    /// metadata `{session_id, tools, duration_ms, turns, overflows,
    /// overflow, stop_reason}` (`overflow` is true when `overflows ≥ 1`,
    /// R-LOOP-14), and applies the working-memory rule. Answers the episode,
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
        let metadata = json!({
            "session_id": scope.session_id,
            "tools": turn.tools,
            "duration_ms": u64::try_from(turn.duration.as_millis()).unwrap_or(u64::MAX),
            "turns": turn.turns,
            "overflows": turn.overflows,
            "overflow": turn.overflows >= 1,
            "stop_reason": turn.stop_reason,
        });
        let episode_vector = self.embed_one(&text).await?;
        let prompt_vector = self.embed_prompt(prompt).await?;
        let id = self.ids.next_id("mem_");
        let episode = self.record(scope, id, SOURCE_TURN, text, metadata, episode_vector);

        let mut working = self.working(scope).await?;
        working.record_turn(prompt, prompt_vector, answer, self.now(), &self.config.working);
        working.push_episode(episode.id.clone(), self.config.history_turns.saturating_sub(1));
        self.store.put_with_working(episode.clone(), &working).await?;
        Ok(Some(episode))
    }

    /// Re-embeds records whose embedding is missing or comes from another
    /// embedder (legacy rows, a changed embedder); answers how many. Call
    /// it when the service starts.
    pub async fn reembed_stale(&self) -> Result<usize, MemoryError> {
        let name = self.embedder.name().to_owned();
        let mut done: HashSet<String> = HashSet::new();
        loop {
            let batch = self.store.stale(&name, 256).await?;
            if batch.is_empty() {
                return Ok(done.len());
            }
            if batch.iter().any(|r| done.contains(&r.id)) {
                tracing::warn!("memory: records stay stale after re-embedding them; stopped");
                return Ok(done.len());
            }
            let vectors = self.embed(batch.iter().map(|r| r.text.clone()).collect()).await?;
            for (mut record, vector) in batch.into_iter().zip(vectors) {
                record.embedding = vector;
                record.embedder = name.clone();
                done.insert(record.id.clone());
                self.store.put(record).await?;
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

/// How a recalled record is written in its section.
fn render(kind: SectionKind, record: &MemoryRecord) -> String {
    match kind {
        SectionKind::LongTerm => {
            let date = record.created_at.to_string();
            format!("[{}] {}", &date[..10.min(date.len())], one_line(&record.text))
        }
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
