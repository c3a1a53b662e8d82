//! The records of long-term memory ([`MemoryRecord`], [`Layer`]) and the
//! questions a store answers about them ([`MemoryFilter`], [`SearchQuery`],
//! [`SearchHit`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

use jarvis_common::Timestamp;

/// Metadata key of a turn episode: the id of the episode before it in the
/// same session, so recall can bring a hit's neighbouring turns.
pub const META_PREV: &str = "prev";

/// Metadata key: the days the text states (`["2026-03-14"]`, in the
/// user's time zone), besides the day it was written, so a question about
/// a period finds what happened in it.
pub const META_WHEN: &str = "when";

/// A layer of long-term memory (R-MEM-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    /// Facts about the user: the user profile, shared by every agent of
    /// the same user (의미 기억).
    Semantic,
    /// What happened: turn episodes and notes, private to the agent that
    /// wrote them (EDM, 일화 기억).
    Episodic,
    /// How to do things: procedures and task patterns, private to the agent
    /// that wrote them (PDM, 절차 기억).
    Procedural,
}

impl Layer {
    /// Every layer, in order.
    pub const ALL: [Layer; 3] = [Layer::Semantic, Layer::Episodic, Layer::Procedural];

    /// The name used in tables and JSON: `semantic`, `episodic`, `procedural`.
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::Semantic => "semantic",
            Layer::Episodic => "episodic",
            Layer::Procedural => "procedural",
        }
    }

    /// The layer named `name` (as [`Layer::as_str`] writes it).
    pub fn parse(name: &str) -> Option<Layer> {
        Layer::ALL.into_iter().find(|l| l.as_str() == name)
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One long-term memory.
///
/// `agent_id` is the agent whose scope the record was written in. For
/// [`Layer::Semantic`] it is provenance only: every agent of the same `user`
/// reads semantic records. Episodic and procedural records are read by
/// their agent and by agents whose `memory.read` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryRecord {
    /// Unique id. Fresh writes get one from the service's
    /// [`IdSource`](jarvis_common::IdSource); records that are updated in
    /// place (task patterns, procedures, user-model entries) have ids
    /// derived from their name, so writing them again replaces them.
    pub id: String,
    /// The user the memory is about or belongs to.
    pub user: String,
    /// The agent whose scope it was written in.
    pub agent_id: String,
    /// Its layer, chosen by [`WRITE_RULES`](super::WRITE_RULES).
    pub layer: Layer,
    /// Its kind within the layer (`fact`, `user_model`, `episode`, `note`,
    /// `task_pattern`, `procedure`), chosen by the write rules from `source`.
    pub kind: String,
    /// The write path it came from (`remember`, `turn`, `task_pattern`, …).
    pub source: String,
    /// What is remembered.
    pub text: String,
    /// Anything else (a turn episode's tools, duration and overflow flag,
    /// [`META_PREV`], [`META_WHEN`]).
    pub metadata: Value,
    /// When it was written.
    pub created_at: Timestamp,
    /// How often it was recalled (rehearsed) since.
    pub rehearsal: u32,
    /// The embedding of `text`; empty when there is none.
    pub embedding: Vec<f32>,
    /// The [`Embedder::name`](jarvis_model::Embedder::name) of the space
    /// `embedding` lies in; empty when there is no embedding.
    pub embedder: String,
}

/// Which agents' records of a layer count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Agents {
    /// Every agent's.
    Any,
    /// Only these agents'.
    Only(Vec<String>),
}

impl Agents {
    /// Only the agents in `ids`.
    pub fn only<I, S>(ids: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Agents::Only(ids.into_iter().map(Into::into).collect())
    }

    /// Whether `agent_id` counts.
    pub fn contains(&self, agent_id: &str) -> bool {
        match self {
            Agents::Any => true,
            Agents::Only(ids) => ids.iter().any(|a| a == agent_id),
        }
    }
}

/// Which records a [`list`](super::MemoryStore::list) or a
/// [`search`](super::MemoryStore::search) covers.
///
/// A record matches when its `user` is the filter's, its layer is one of
/// `layers` with its agent among that layer's [`Agents`] (an empty `layers`
/// means every layer of every agent), its kind is one of `kinds` (empty:
/// any kind), its id is not in `exclude_ids`, and (with `during`) it was
/// written or states a day in that period. Each layer carries its own
/// agents because the permissions differ by layer (R-MEM-9): the user
/// profile from any agent, episodes and procedures from a few.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemoryFilter {
    /// The user.
    pub user: String,
    /// The layers, each with the agents whose records count.
    pub layers: Vec<(Layer, Agents)>,
    /// The kinds; empty for any.
    pub kinds: Vec<String>,
    /// Records left out.
    pub exclude_ids: Vec<String>,
    /// Only records written in this period (from, until: the end
    /// excluded), or stating a day in it ([`META_WHEN`]); `None` for any
    /// time.
    pub during: Option<(Timestamp, Timestamp)>,
    /// At most this many records (a `list`); `None` for all.
    pub limit: Option<usize>,
}

impl MemoryFilter {
    /// Every record of `user`.
    pub fn for_user(user: impl Into<String>) -> Self {
        Self {
            user: user.into(),
            ..Self::default()
        }
    }

    /// Adds `layer`, with the agents whose records of it count.
    pub fn layer(mut self, layer: Layer, agents: Agents) -> Self {
        self.layers.push((layer, agents));
        self
    }

    /// Keeps only records of these kinds.
    pub fn kinds<I, S>(mut self, kinds: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.kinds = kinds.into_iter().map(Into::into).collect();
        self
    }

    /// Leaves these records out.
    pub fn excluding(mut self, ids: Vec<String>) -> Self {
        self.exclude_ids = ids;
        self
    }

    /// Keeps only records written from `from` until `until` (excluded),
    /// or stating a day in that period.
    pub fn during(mut self, from: Timestamp, until: Timestamp) -> Self {
        self.during = Some((from, until));
        self
    }

    /// Whether a record written at `created_at` and stating the days
    /// starting at `stated` (midnights in the user's zone) lies in
    /// `during`; true without one.
    pub fn in_period(&self, created_at: Timestamp, stated: &[Timestamp]) -> bool {
        let Some((from, until)) = self.during else {
            return true;
        };
        let day = 24 * 3600 * 1000;
        (from <= created_at && created_at < until)
            || stated
                .iter()
                .any(|&d| d.as_millis() + day > from.as_millis() && d < until)
    }

    /// Answers at most `limit` records.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Whether a record with these fields matches (ignoring `exclude_ids`
    /// and `limit`).
    pub fn matches_scope(&self, user: &str, agent_id: &str, layer: Layer, kind: &str) -> bool {
        user == self.user
            && (self.layers.is_empty()
                || self
                    .layers
                    .iter()
                    .any(|(l, agents)| *l == layer && agents.contains(agent_id)))
            && (self.kinds.is_empty() || self.kinds.iter().any(|k| k == kind))
    }

    /// Whether `record` matches (ignoring `limit`).
    pub fn matches(&self, record: &MemoryRecord) -> bool {
        self.matches_scope(&record.user, &record.agent_id, record.layer, &record.kind)
            && !self.exclude_ids.contains(&record.id)
            && self.in_period(record.created_at, &metadata_days(&record.metadata))
    }
}

/// The days a record's metadata says its text states ([`META_WHEN`]):
/// `YYYY-MM-DD` strings read as midnights in UTC, or RFC 3339 times;
/// anything else is left out.
pub(crate) fn metadata_days(metadata: &Value) -> Vec<Timestamp> {
    metadata
        .get(META_WHEN)
        .and_then(Value::as_array)
        .map(|days| {
            days.iter()
                .filter_map(|d| d.as_str().and_then(parse_day))
                .collect()
        })
        .unwrap_or_default()
}

/// A stated day: an RFC 3339 time (the start of the day in the user's
/// zone, as the service writes it) or a bare `YYYY-MM-DD` (midnight UTC).
fn parse_day(text: &str) -> Option<Timestamp> {
    Timestamp::parse_rfc3339(text)
        .ok()
        .or_else(|| Timestamp::parse_rfc3339(&format!("{text}T00:00:00Z")).ok())
}

/// A search of the records matching `filter` two ways: by vector (those
/// whose embedding lies in the space `embedder` names, most similar to
/// `vector`) and by words (those holding the query's lexical `terms`,
/// ranked by BM25).
#[derive(Debug, Clone, PartialEq)]
pub struct SearchQuery {
    /// Which records count.
    pub filter: MemoryFilter,
    /// The embedder `vector` came from; records embedded by another are
    /// not compared.
    pub embedder: String,
    /// The query's embedding (unit length); empty for no vector search.
    pub vector: Vec<f32>,
    /// The query's terms ([`SearchQuery::terms_of`]); empty for no word
    /// search.
    pub terms: Vec<String>,
    /// At most this many hits from each side.
    pub k: usize,
    /// Records below this cosine similarity are not found by vector (they
    /// may still be found by their words).
    pub min_similarity: f32,
}

impl SearchQuery {
    /// The lexical terms of a query text, as the stores index records'
    /// texts (words and Hangul bigrams, see `lexical.rs`).
    pub fn terms_of(text: &str) -> Vec<String> {
        super::lexical::query_terms(text)
    }
}

/// One answer of a search: a record's id with what ranking needs, without
/// its text (fetch the winners with [`get`](super::MemoryStore::get)).
#[derive(Debug, Clone, PartialEq)]
pub struct SearchHit {
    /// The record's id.
    pub id: String,
    /// Cosine similarity to the query: exact for every hit whose record
    /// lies in the query's vector space, 0 for the others.
    pub similarity: f32,
    /// BM25 score for the query's terms: 0 when the record holds none of
    /// them.
    pub lexical: f32,
    /// When the record was written.
    pub created_at: Timestamp,
    /// How often it was rehearsed.
    pub rehearsal: u32,
    /// The episode before it in the same session ([`META_PREV`]).
    pub prev: Option<String>,
    /// The episode after it in the same session.
    pub next: Option<String>,
}

impl SearchHit {
    /// A hit found by vector, with no word score and no neighbours known:
    /// all a store that searches vectors alone answers.
    pub fn new(id: impl Into<String>, similarity: f32, created_at: Timestamp, rehearsal: u32) -> Self {
        Self {
            id: id.into(),
            similarity,
            lexical: 0.0,
            created_at,
            rehearsal,
            prev: None,
            next: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_round_trip_their_names() {
        for layer in Layer::ALL {
            assert_eq!(Layer::parse(layer.as_str()), Some(layer));
        }
        assert_eq!(Layer::parse("working"), None);
    }

    #[test]
    fn a_filter_checks_each_layer_with_its_own_agents() {
        let filter = MemoryFilter::for_user("u")
            .layer(Layer::Semantic, Agents::Any)
            .layer(Layer::Episodic, Agents::only(["main"]));
        assert!(filter.matches_scope("u", "karen", Layer::Semantic, "fact"));
        assert!(filter.matches_scope("u", "main", Layer::Episodic, "episode"));
        assert!(!filter.matches_scope("u", "karen", Layer::Episodic, "episode"));
        assert!(!filter.matches_scope("u", "main", Layer::Procedural, "procedure"));
        assert!(!filter.matches_scope("v", "main", Layer::Semantic, "fact"));
        let all = MemoryFilter::for_user("u").kinds(["fact"]);
        assert!(all.matches_scope("u", "x", Layer::Semantic, "fact"));
        assert!(!all.matches_scope("u", "x", Layer::Semantic, "user_model"));
    }
}
