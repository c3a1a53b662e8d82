//! The memory layer (SPEC.md §8): [`MemoryService`] with working memory and
//! semantic, episodic and procedural long-term memory, agent scopes, the
//! one injection point ([`MemoryService::observe`] → [`MemoryContext`]), and
//! recall.
//!
//! It sits above `model` (it embeds through an
//! [`Embedder`](jarvis_model::Embedder)) and below `agent` (the harness
//! calls the service before and after each turn, the loop applies the
//! context before each model call). It is a crate of its own, so the
//! compiler keeps it to `jarvis-model` and `jarvis-common`; `jarvis-sdk`
//! re-exports it.
//!
//! | file | what |
//! |---|---|
//! | `record.rs` | [`MemoryRecord`], [`Layer`], [`MemoryFilter`], [`SearchQuery`] |
//! | `rules.rs` | [`WRITE_RULES`]: which layer and kind each write path gets |
//! | `scope.rs` | [`MemoryScope`], [`MemoryRead`] (`memory.read`), [`ScopeResolver`] |
//! | `store.rs` | the [`MemoryStore`] trait, [`InMemoryMemoryStore`] |
//! | `index.rs` | the partitioned, contiguous vector index every store searches |
//! | `lexical.rs` | the word side of the index: terms (words, Hangul bigrams) and BM25 |
//! | `recall.rs` | fusing the vector and word rankings |
//! | `when.rs` | days a text states, periods a question names |
//! | `ann.rs` | [`AnnOptions`]: the approximate (HNSW) index of large partitions, built in the background |
//! | `graph_file.rs` | a partition's graph kept on disk between runs (`<database>-graphs/`) |
//! | `sqlite.rs` | `SqliteMemoryStore` (feature `sqlite`, default): `$JARVIS_HOME/memory.sqlite3` |
//! | `postgres.rs` | `PostgresMemoryStore` (feature `postgres`) |
//! | `postgres_notices.rs` | what a Postgres store hears of other writers (`LISTEN`/`NOTIFY`) |
//! | `working.rs` | [`WorkingMemory`] and its rule |
//! | `inject.rs` | [`MemoryContext`]: sections, budgets, the last 3 turns |
//! | `service.rs` | [`MemoryService`]: writing, recall, `observe`, `record_turn`, re-embedding ([`ReembedStatus`]) |
//! | `learn.rs` | forgetting, and the facts distillation proposes ([`MemoryService::forget`], [`MemoryService::add_distilled_facts`]) |
//! | `forget.rs` | what is kept of a forgotten text (a digest) and the window check |
//! | `user_model.rs` | `$JARVIS_HOME/user_model.json` |
//! | `user_model_postgres.rs` | the user model in Postgres (`jarvis_user_model`, feature `postgres`) |
//! | `procedures.rs` | `$JARVIS_HOME/procedures/<agent_id>/<name>.md` |

mod ann;
mod error;
mod forget;
mod graph_file;
mod index;
mod inject;
mod learn;
mod lexical;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "postgres")]
mod postgres_notices;
mod procedures;
mod recall;
mod record;
mod rules;
mod scope;
mod service;
#[cfg(feature = "sqlite")]
mod sqlite;
mod store;
mod user_model;
#[cfg(feature = "postgres")]
mod user_model_postgres;
mod when;
mod working;

pub use ann::AnnOptions;
pub use error::MemoryError;
pub use forget::{ForgottenSecret, MIN_FORGET_CHARS, contains_forgotten, fact_digest, normalise_fact};
pub use inject::{MemoryContext, MemorySection, SectionBudgets, SectionKind, last_turns};
pub use learn::{DistillReport, DistilledFact, ForgetReport, MAX_FACT_VALUE_CHARS, episode_request};
#[cfg(feature = "postgres")]
pub use postgres::PostgresMemoryStore;
pub use procedures::{
    LEGACY_PROCEDURE_AGENT, MAX_PROCEDURE_BYTES, MAX_PROCEDURE_NAME_CHARS, PROCEDURES_DIR, Procedure,
    ProcedureLibrary, validate_procedure_name,
};
pub use record::{Agents, Layer, META_PREV, META_WHEN, MemoryFilter, MemoryRecord, SearchHit, SearchQuery};
pub use rules::{
    DEFAULT_WRITE_RULE, KIND_EPISODE, KIND_FACT, KIND_NOTE, KIND_PROCEDURE, KIND_TASK_PATTERN,
    KIND_USER_MODEL, SOURCE_EPISODE_FACT, SOURCE_PROCEDURE, SOURCE_REMEMBER, SOURCE_TASK_PATTERN,
    SOURCE_TURN, SOURCE_USER_MODEL, WRITE_RULES, WriteRule, write_rule,
};
pub use scope::{DEFAULT_USER, MemoryRead, MemoryScope, READ_SELF, ScopeResolver, StaticScopes};
pub use service::{
    MemoryConfig, MemoryService, RecallK, RecallWeights, Recalled, ReembedPhase, ReembedStatus, TurnRecord,
};
#[cfg(feature = "sqlite")]
pub use sqlite::{MEMORY_DB_FILE, SQLITE_SCHEMA_VERSION, SqliteMemoryStore, SqliteOpenReport};
pub use store::{InMemoryMemoryStore, MemoryStore};
pub use user_model::{DistillMark, USER_MODEL_FILE, UserModel, UserModelFile, UserModelStore};
#[cfg(feature = "postgres")]
pub use user_model_postgres::PostgresUserModel;
pub use working::{WorkingConfig, WorkingItem, WorkingMemory};
