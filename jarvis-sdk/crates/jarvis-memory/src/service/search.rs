//! Recall: the searches of a query, their rankings fused and blended with
//! recency and rehearsal, and the records fetched with their neighbouring turns.

use std::collections::HashMap;

use super::MemoryService;
use crate::error::MemoryError;
use crate::recall::fuse;
use crate::record::{Layer, MemoryFilter, MemoryRecord, SearchHit, SearchQuery};
use crate::scope::MemoryScope;
use crate::when::{asks_latest, period_of};
use jarvis_common::{Timestamp, error_chain};

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
    /// The vector and word rankings fused (see
    /// [`RecallWeights::relevance`](super::RecallWeights::relevance)).
    pub relevance: f32,
    /// The blended score it was ranked by.
    pub score: f32,
    /// The turns just before and after it in its session, in time order,
    /// when [`MemoryConfig::context`](super::MemoryConfig::context) is on
    /// (episodes only; without the recalled record itself).
    pub context: Vec<MemoryRecord>,
}

/// A hit with its fused relevance and blended score.
#[derive(Debug)]
pub(super) struct Ranked {
    hit: SearchHit,
    relevance: f32,
    score: f32,
    /// Its neighbouring turns that come with it (see
    /// [`MemoryConfig::context_share`](super::MemoryConfig::context_share)).
    neighbours: Vec<String>,
}

impl MemoryService {
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
    pub(super) fn queries(
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
    pub(super) fn rank(&self, answers: Vec<Vec<SearchHit>>, k: usize, latest: bool) -> Vec<Ranked> {
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
    /// [`MemoryConfig::context`](super::MemoryConfig::context) is on and
    /// the ranking asks for them (its flag), read from the store in one
    /// call.
    pub(super) async fn fetch(
        &self,
        rankings: Vec<(Vec<Ranked>, bool)>,
    ) -> Result<Vec<Vec<Recalled>>, MemoryError> {
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
    pub(super) fn past_period(&self, query: &str) -> Option<(Timestamp, Timestamp)> {
        let now = self.now();
        let (today, _) = self.config.time_zone.day_bounds(now);
        period_of(query, now, &self.config.time_zone).filter(|(_, until)| *until <= today)
    }

    /// The query's embedding, or none (logged) when the embedder does not
    /// answer: recall then goes by words alone.
    pub(super) async fn query_vector(&self, scope: &MemoryScope, query: &str) -> Vec<f32> {
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
}
