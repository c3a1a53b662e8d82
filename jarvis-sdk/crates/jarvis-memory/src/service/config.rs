//! The settings of a [`MemoryService`](super::MemoryService): recall's
//! blend and sizes, budgets, time zone and limits.

use std::path::PathBuf;
use std::time::Duration;

use crate::inject::SectionBudgets;
use crate::working::WorkingConfig;
use jarvis_common::TimeZone;

/// The weights of the recall blend (see [`MemoryService`](super::MemoryService)).
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

/// Settings of a [`MemoryService`](super::MemoryService).
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
