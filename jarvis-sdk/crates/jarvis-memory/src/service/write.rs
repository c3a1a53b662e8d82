//! Writing memories: the write rules, facts the user already has, what the
//! user asked to forget, named records, procedures and the user model.

use serde_json::{Value, json};
use std::collections::BTreeMap;

use super::MemoryService;
use crate::error::{MemoryError, printable};
use crate::forget::{ForgottenSecret, contains_forgotten};
use crate::procedures::name_problem;
use crate::record::{Agents, Layer, META_WHEN, MemoryFilter, MemoryRecord, SearchQuery};
use crate::rules::{SOURCE_PROCEDURE, SOURCE_REMEMBER, SOURCE_TASK_PATTERN, SOURCE_USER_MODEL, write_rule};
use crate::scope::MemoryScope;
use crate::user_model::UserModel;
use crate::when::stated_days;
use jarvis_common::truncate_with_marker;

impl MemoryService {
    pub(super) fn clean_text(&self, source: &str, text: &str) -> Result<String, MemoryError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(MemoryError::EmptyText {
                source_name: source.to_owned(),
            });
        }
        Ok(truncate_with_marker(text, self.config.max_text_chars))
    }

    pub(super) fn record(
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
    /// and kind come from [`WRITE_RULES`](crate::WRITE_RULES). Writing a
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
    pub(crate) async fn refuse_forgotten(&self, source: &str, text: &str) -> Result<(), MemoryError> {
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
    pub(crate) async fn put_named(
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

    /// Indexes the procedure files of the agents whose procedural memory
    /// the scope reads, once per user and agent in this process.
    pub(super) async fn sync_procedures(&self, scope: &MemoryScope, layer: Layer) {
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
