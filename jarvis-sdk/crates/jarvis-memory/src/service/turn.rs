//! A turn's memory: the context injected before it ([`MemoryService::observe`])
//! and its episode and working memory after it ([`MemoryService::record_turn`]).

use serde_json::{Value, json};
use std::collections::HashSet;
use std::time::Duration;

use super::MemoryService;
use crate::error::MemoryError;
use crate::inject::{MemoryContext, SectionKind};
use crate::learn::ANSWER_MARK;
use crate::record::{Agents, Layer, META_PREV, MemoryFilter, MemoryRecord, SearchQuery};
use crate::rules::{KIND_FACT, KIND_PROCEDURE, KIND_TASK_PATTERN, KIND_USER_MODEL, SOURCE_TURN};
use crate::scope::MemoryScope;
use crate::when::asks_latest;
use crate::working::WorkingMemory;
use jarvis_common::truncate_with_marker;
use jarvis_model::EmbedRole;

use super::search::Recalled;

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

impl MemoryService {
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
