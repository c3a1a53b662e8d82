//! The writes learning makes through [`MemoryService`]: forgetting
//! ([`MemoryService::forget`]) and the facts user-model distillation
//! proposes ([`MemoryService::add_distilled_facts`]), with provenance, never
//! duplicated and never containing something the user asked to forget.
//!
//! The model call that proposes facts lives above, in the agent layer
//! (`Distiller`); the rules about what reaches the user model live here.

use serde_json::json;
use std::collections::BTreeMap;

use super::error::MemoryError;
use super::forget::{ForgottenSecret, MIN_FORGET_CHARS, contains_forgotten, normalise_fact};
use super::procedures::name_problem;
use super::record::{Agents, Layer, MemoryFilter, MemoryRecord};
use super::rules::{KIND_EPISODE, KIND_USER_MODEL, SOURCE_USER_MODEL};
use super::scope::MemoryScope;
use super::service::MemoryService;
use super::user_model::DistillMark;

/// The longest value of a distilled fact, in characters.
pub const MAX_FACT_VALUE_CHARS: usize = 300;

/// What separates a turn episode's request from its answer in the
/// episode's text (`"<request>\n→ <answer>"`).
pub(super) const ANSWER_MARK: &str = "\n→ ";

/// The request part of a turn episode's text (the whole text when it has no
/// answer).
pub fn episode_request(text: &str) -> &str {
    text.split(ANSWER_MARK).next().unwrap_or(text)
}

/// What [`MemoryService::forget`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ForgetReport {
    /// User-model entries removed from `user_model.json`.
    pub entries: usize,
    /// User-profile records removed from the store.
    pub records: usize,
}

/// A fact about the person that distillation proposes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistilledFact {
    /// A short key (the rules of procedure names: letters, digits, `-`,
    /// `_`, inner spaces, at most 64 characters).
    pub key: String,
    /// What is known, one line, at most [`MAX_FACT_VALUE_CHARS`].
    pub value: String,
    /// The ids of the episodes it was distilled from.
    pub episodes: Vec<String>,
}

/// What one distillation did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DistillReport {
    /// Episodes read.
    pub episodes: usize,
    /// Facts written (new keys, or a new value for a key).
    pub added: usize,
    /// Facts the user model already had (the same value, under any key).
    pub duplicates: usize,
    /// Facts refused because they contain something the user asked to forget.
    pub refused_forgotten: usize,
    /// Facts refused because their key or value is not allowed, or because
    /// they name none of the episodes read.
    pub invalid: usize,
}

/// Why a proposed fact is not written, if it is not.
enum Verdict {
    Add {
        key: String,
        value: String,
        episodes: Vec<String>,
    },
    Duplicate,
    Forgotten,
    Invalid,
}

fn judge(
    fact: DistilledFact,
    read: &[MemoryRecord],
    entries: &BTreeMap<String, String>,
    forgotten: &[ForgottenSecret],
) -> Verdict {
    let key = fact.key.trim().to_owned();
    let value = fact.value.split_whitespace().collect::<Vec<_>>().join(" ");
    if name_problem(&key).is_some() || value.is_empty() || value.chars().count() > MAX_FACT_VALUE_CHARS {
        return Verdict::Invalid;
    }
    if contains_forgotten(&format!("{key}: {value}"), forgotten) {
        return Verdict::Forgotten;
    }
    let mut episodes: Vec<String> = Vec::new();
    for id in fact.episodes {
        if read.iter().any(|r| r.id == id) && !episodes.contains(&id) {
            episodes.push(id);
        }
    }
    if episodes.is_empty() {
        return Verdict::Invalid;
    }
    let normalised = normalise_fact(&value);
    if entries.values().any(|v| normalise_fact(v) == normalised) {
        return Verdict::Duplicate;
    }
    Verdict::Add { key, value, episodes }
}

impl MemoryService {
    /// Forgets `text` (R-MEM-6: "never writing secrets it was told to
    /// forget"):
    ///
    /// 1. records it in `user_model.json`'s `forgotten` list as a digest and
    ///    a length, never the text (without a `JARVIS_HOME`, in this
    ///    process only);
    /// 2. removes the user-model entries whose key equals it or whose value
    ///    contains it (compared normalised: case, whitespace, NFC), with
    ///    their provenance;
    /// 3. deletes the user's user-profile records (semantic: `/remember`
    ///    facts, facts from episodes, user-model entries) that contain it,
    ///    from the store ([`MemoryStore::delete`](super::MemoryStore::delete)).
    ///
    /// From then on every user-profile write that contains it is refused
    /// ([`MemoryError::Forgotten`]), also inside a longer text. Profile
    /// writes wait while this runs, and it waits for those already past
    /// their check, so none of them can bring the text back. Episodes
    /// and working memory are not rewritten: what the person said stays in
    /// the turns it was said in, but nothing distilled from them can bring
    /// it back.
    pub async fn forget(&self, scope: &MemoryScope, text: &str) -> Result<ForgetReport, MemoryError> {
        let needle = normalise_fact(text);
        let secret = ForgottenSecret::new(text, self.now()).ok_or(MemoryError::ForgetTooShort {
            min: MIN_FORGET_CHARS,
        })?;
        // No profile write runs between recording the secret and deleting
        // what holds it: one that already passed its check lands first (and
        // is deleted below), the next one sees the secret.
        let _profile = self.profile_lock.write().await;
        let hit =
            |key: &str, value: &str| normalise_fact(key) == needle || normalise_fact(value).contains(&needle);
        let mut removed_keys: Vec<String> = Vec::new();
        match self.user_model_store() {
            Some(store) => {
                store
                    .update(self.now(), |model| {
                        if !model.forgotten.iter().any(|f| f.same_as(&secret)) {
                            model.forgotten.push(secret);
                        }
                        model.entries.retain(|key, value| {
                            let forget = hit(key, value);
                            if forget {
                                removed_keys.push(key.clone());
                            }
                            !forget
                        });
                        for key in &removed_keys {
                            model.provenance.remove(key);
                        }
                    })
                    .await?;
            }
            None => {
                let mut here = self.forgotten_here.lock().unwrap_or_else(|e| e.into_inner());
                if !here.iter().any(|f| f.same_as(&secret)) {
                    here.push(secret);
                }
            }
        }
        let profile = self
            .store()
            .list(&MemoryFilter::for_user(scope.user.clone()).layer(Layer::Semantic, Agents::Any))
            .await?;
        let ids: Vec<String> = profile
            .into_iter()
            .filter(|record| {
                let entry = (record.kind == KIND_USER_MODEL)
                    .then(|| record.metadata.get("key").and_then(|k| k.as_str()))
                    .flatten();
                match entry {
                    Some(key) => {
                        let value = record
                            .text
                            .strip_prefix(&format!("{key}: "))
                            .unwrap_or(&record.text);
                        hit(key, value) || removed_keys.iter().any(|k| k == key)
                    }
                    None => normalise_fact(&record.text).contains(&needle),
                }
            })
            .map(|record| record.id)
            .collect();
        let records = self.store().delete(&ids).await?;
        tracing::info!(
            entries = removed_keys.len(),
            records,
            "memory: forgot what the user asked to forget"
        );
        Ok(ForgetReport {
            entries: removed_keys.len(),
            records,
        })
    }

    /// The scope agent's turn episodes that distillation has not read yet,
    /// oldest first: of its newest `limit` episodes, those after the
    /// agent's mark in `user_model.json` (all of them without a mark).
    // ponytail: when more than `limit` episodes arrived since the last
    // distillation, only the newest `limit` are read and the mark moves past
    // the older ones too.
    pub async fn episodes_to_distil(
        &self,
        scope: &MemoryScope,
        limit: usize,
    ) -> Result<Vec<MemoryRecord>, MemoryError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mark = self.user_model().await.distilled.get(&scope.agent_id).cloned();
        let filter = MemoryFilter::for_user(scope.user.clone())
            .layer(Layer::Episodic, Agents::only([scope.agent_id.clone()]))
            .kinds([KIND_EPISODE])
            .limit(limit);
        let mut episodes: Vec<MemoryRecord> = self
            .store()
            .list(&filter)
            .await?
            .into_iter()
            .filter(|e| mark.as_ref().is_none_or(|m| m.is_after(e.created_at, &e.id)))
            .map(|mut e| {
                e.embedding = Vec::new();
                e
            })
            .collect();
        episodes.reverse();
        Ok(episodes)
    }

    /// Writes the facts distillation proposed after reading `read` (the
    /// scope agent's episodes, from
    /// [`episodes_to_distil`](Self::episodes_to_distil)), and moves the
    /// agent's mark past them. Needs a `JARVIS_HOME`.
    ///
    /// Each fact is checked in turn: its key must follow the rules of
    /// procedure names and its value be one line of 1 to
    /// [`MAX_FACT_VALUE_CHARS`] characters; it must name at least one of the
    /// episodes read (the others are dropped from its provenance); it must
    /// not contain anything the user asked to forget; and the user model
    /// must not already hold its value (normalised) under any key — the
    /// same key with the same value, or the same value under another key,
    /// adds nothing. A fact that passes is written to `user_model.json`
    /// (`entries[key]`, and `provenance[key]` = its episode ids, replacing
    /// an older value of the key) and to the user profile (a `user_model`
    /// record whose metadata is `{key, episodes}`). The entries and the
    /// mark are written in one atomic file update.
    pub async fn add_distilled_facts(
        &self,
        scope: &MemoryScope,
        read: &[MemoryRecord],
        facts: Vec<DistilledFact>,
    ) -> Result<DistillReport, MemoryError> {
        let file = self
            .user_model_store()
            .ok_or(MemoryError::NoHome { what: "user model" })?;
        // The facts are judged against the forgotten list and recorded under
        // the profile lock (see `forget`).
        let _profile = self.profile_lock.read().await;
        let mut report = DistillReport {
            episodes: read.len(),
            ..DistillReport::default()
        };
        let mut added: Vec<(String, String, Vec<String>)> = Vec::new();
        let forgotten_here = self
            .forgotten_here
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        file.update(self.now(), |model| {
            let mut forgotten = model.forgotten.clone();
            forgotten.extend(forgotten_here);
            for fact in facts {
                match judge(fact, read, &model.entries, &forgotten) {
                    Verdict::Add { key, value, episodes } => {
                        model.entries.insert(key.clone(), value.clone());
                        model.provenance.insert(key.clone(), episodes.clone());
                        added.push((key, value, episodes));
                    }
                    Verdict::Duplicate => report.duplicates += 1,
                    Verdict::Forgotten => report.refused_forgotten += 1,
                    Verdict::Invalid => report.invalid += 1,
                }
            }
            if let Some(newest) = read.iter().map(|e| e.created_at).max() {
                let mark = model.distilled.entry(scope.agent_id.clone()).or_default();
                if newest > mark.through {
                    *mark = DistillMark {
                        through: newest,
                        episodes: Vec::new(),
                    };
                }
                for episode in read.iter().filter(|e| e.created_at == mark.through) {
                    if !mark.episodes.contains(&episode.id) {
                        mark.episodes.push(episode.id.clone());
                    }
                }
            }
        })
        .await?;
        report.added = added.len();
        for (key, value, episodes) in added {
            self.put_named(
                scope,
                SOURCE_USER_MODEL,
                &key,
                format!("{key}: {value}"),
                json!({ "key": key, "episodes": episodes }),
            )
            .await?;
        }
        Ok(report)
    }
}

/// A turn episode of `main` with id `id`, for the learning tests.
#[cfg(test)]
pub(crate) fn test_episode(id: &str) -> MemoryRecord {
    MemoryRecord {
        id: id.into(),
        user: "u".into(),
        agent_id: "main".into(),
        layer: Layer::Episodic,
        kind: KIND_EPISODE.into(),
        source: "turn".into(),
        text: "x".into(),
        metadata: serde_json::Value::Null,
        created_at: jarvis_common::Timestamp::EPOCH,
        rehearsal: 0,
        embedding: Vec::new(),
        embedder: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jarvis_common::Timestamp;

    use super::test_episode as episode;

    fn fact(key: &str, value: &str, episodes: &[&str]) -> DistilledFact {
        DistilledFact {
            key: key.into(),
            value: value.into(),
            episodes: episodes.iter().map(|e| (*e).to_owned()).collect(),
        }
    }

    #[test]
    fn facts_are_judged_by_key_value_provenance_duplicates_and_secrets() {
        let read = [episode("e1"), episode("e2")];
        let entries: BTreeMap<String, String> =
            [("child".to_owned(), "서연, 초등학교 3학년".to_owned())].into();
        let forgotten = [ForgottenSecret::new("비밀번호는 1234", Timestamp::EPOCH).unwrap()];
        let verdict = |f| match judge(f, &read, &entries, &forgotten) {
            Verdict::Add { key, value, episodes } => format!("add {key}={value} {episodes:?}"),
            Verdict::Duplicate => "duplicate".into(),
            Verdict::Forgotten => "forgotten".into(),
            Verdict::Invalid => "invalid".into(),
        };
        let long = "가".repeat(MAX_FACT_VALUE_CHARS + 1);
        for (key, value, episodes, expected) in [
            (
                " city ",
                "  서울   마포구 ",
                &["e2", "zz", "e2"][..],
                "add city=서울 마포구 [\"e2\"]",
            ),
            ("child", "서연,  초등학교 3학년", &["e1"], "duplicate"),
            ("daughter", "서연, 초등학교 3학년", &["e1"], "duplicate"),
            ("note", "그의 비밀번호는  1234 이다", &["e1"], "forgotten"),
            ("city", "서울", &["nope"], "invalid"),
            ("a/b", "x", &["e1"], "invalid"),
            ("city", "  ", &["e1"], "invalid"),
            ("city", &long, &["e1"], "invalid"),
        ] {
            assert_eq!(verdict(fact(key, value, episodes)), expected, "{key}: {value}");
        }
    }

    #[test]
    fn the_request_of_an_episode() {
        assert_eq!(
            episode_request("매출 분석해 줘\n→ 지금까지의 답: …"),
            "매출 분석해 줘"
        );
        assert_eq!(episode_request("just a prompt"), "just a prompt");
    }
}
