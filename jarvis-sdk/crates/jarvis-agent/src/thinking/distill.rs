//! [`Distiller`]: user-model distillation (R-MEM-6). One structured model
//! call (`purpose: distillation`) reads the agent's turn episodes since the
//! last distillation and proposes facts about the person,
//! `{"facts": [{"key", "value", "episodes": [...]}]}`; the memory service
//! writes the new ones to `user_model.json` and the user profile with their
//! provenance ([`MemoryService::add_distilled_facts`], which also refuses
//! duplicates and anything the person asked to forget).
//!
//! It runs every [`DistillConfig::every_turns`] finished turns of an agent
//! (default 10; the count is kept per agent in the process and starts at 0
//! when it starts), and on demand ([`Distiller::distil_now`]). How far each
//! agent's episodes were read is kept in `user_model.json` (`distilled`), so
//! running it again over the same episodes makes no call and adds nothing.
//! Episodes that contain a forgotten secret are not shown to the model.
//! Distillations run one at a time per distiller; a failure (provider error,
//! timeout, unusable answer) writes nothing and leaves the episodes to be
//! read next time.

use serde::Deserialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::TurnReport;
use super::call::{LearnError, Learner, ask, json_object};
use jarvis_common::one_line;
use jarvis_memory::{
    DistillReport, DistilledFact, MAX_FACT_VALUE_CHARS, MemoryRecord, MemoryScope, MemoryService,
    ScopeResolver, contains_forgotten,
};
use jarvis_model::{ChatRequest, Message, Provider, Purpose};

/// The system prompt of distillation calls.
pub const DISTILL_PROMPT: &str = "\
# 사용자 모델 정리 (user-model distillation)

아래 대화 일화들에서 사용자에 대해 오래 유효한 사실만 골라 적는다: 이름, 가족, 사는 곳, 일, 선호, 말투,
반복되는 필요. 한 번뿐인 요청, 추측, 비밀번호나 계좌 같은 비밀은 적지 않는다. 이미 사용자 모델에 있는
사실은 다시 적지 않는다. 각 사실에는 근거가 된 일화의 표시([e1] 같은)를 붙인다.

(From the conversation episodes below, keep only lasting facts about the user: name, family, home, work,
preferences, tone, recurring needs. Leave out one-off requests, guesses and secrets such as passwords or
account numbers, and facts the user model already has. Give each fact the labels of the episodes it comes
from.)
";

/// The instruction that ends every distillation request.
pub const DISTILL_INSTRUCTION: &str = "Answer with one JSON object only, no prose: \
{\"facts\": [{\"key\": string (a short name: letters, digits, '-', '_', inner spaces; at most 64 characters), \
\"value\": string (one line), \"episodes\": [episode labels such as \"e1\"]}]}; {\"facts\": []} when there is nothing new.";

/// Settings of a [`Distiller`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistillConfig {
    /// Distil after every this many finished turns of an agent. Default
    /// 10; 0 distils only on demand.
    pub every_turns: usize,
    /// The most episodes one distillation reads (the newest). Default 30.
    pub max_episodes: usize,
    /// Each episode is shown cut to this many characters. Default 600.
    pub episode_chars: usize,
    /// Longest wait for the distillation call. Default 30 s.
    pub timeout: Duration,
    /// The model name for distillation calls (empty: the provider's default).
    pub model: String,
}

impl Default for DistillConfig {
    fn default() -> Self {
        Self {
            every_turns: 10,
            max_episodes: 30,
            episode_chars: 600,
            timeout: Duration::from_secs(30),
            model: String::new(),
        }
    }
}

#[derive(Debug, Deserialize)]
struct Answer {
    facts: Vec<AnswerFact>,
}

#[derive(Debug, Deserialize)]
struct AnswerFact {
    key: String,
    value: String,
    #[serde(default)]
    episodes: Vec<String>,
}

/// Parses a distillation answer against the episodes it was shown (in
/// order, labelled `e1`, `e2`, …): each fact's episodes given by label or
/// by id become ids; unknown ones are dropped (the memory service refuses a
/// fact left with none).
pub fn parse_facts(text: &str, shown: &[MemoryRecord]) -> Result<Vec<DistilledFact>, String> {
    let value = json_object(text)?;
    let answer: Answer = serde_json::from_value(value).map_err(|e| format!("not a list of facts: {e}"))?;
    if answer.facts.len() > 50 {
        return Err("more than 50 facts".into());
    }
    Ok(answer
        .facts
        .into_iter()
        .map(|fact| DistilledFact {
            key: fact.key,
            value: fact.value,
            episodes: fact
                .episodes
                .iter()
                .filter_map(|label| {
                    let label = label.trim().trim_start_matches('[').trim_end_matches(']');
                    label
                        .strip_prefix('e')
                        .and_then(|n| n.parse::<usize>().ok())
                        .and_then(|n| n.checked_sub(1))
                        .and_then(|i| shown.get(i))
                        .or_else(|| shown.iter().find(|e| e.id == label))
                        .map(|e| e.id.clone())
                })
                .collect(),
        })
        .collect())
}

/// The distiller; see the module docs. Share it as `Arc<Distiller>`.
pub struct Distiller {
    learner: Learner,
    config: DistillConfig,
    /// Finished turns per agent since its last periodic distillation.
    turns: Mutex<HashMap<String, usize>>,
}

impl std::fmt::Debug for Distiller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Distiller")
            .field("learner", &self.learner)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Distiller {
    /// A distiller asking `provider`, writing through `memory` (which needs
    /// a `JARVIS_HOME`), in the scopes `scopes` gives.
    pub fn new(
        provider: Arc<dyn Provider>,
        memory: Arc<MemoryService>,
        scopes: Arc<dyn ScopeResolver>,
        config: DistillConfig,
    ) -> Self {
        Self {
            learner: Learner::new(provider, memory, scopes),
            config,
            turns: Mutex::new(HashMap::new()),
        }
    }

    /// The settings.
    pub fn config(&self) -> &DistillConfig {
        &self.config
    }

    /// Counts a finished turn of its agent and distils on every
    /// [`DistillConfig::every_turns`]th; failures are logged. Answers the
    /// report when it distilled.
    pub async fn after_turn(&self, report: &TurnReport) -> Option<DistillReport> {
        let every = self.config.every_turns;
        if every == 0 {
            return None;
        }
        {
            let mut turns = self.turns.lock().unwrap_or_else(|e| e.into_inner());
            let count = turns.entry(report.agent_id.clone()).or_insert(0);
            *count += 1;
            if *count < every {
                return None;
            }
            *count = 0;
        }
        let scope = self.learner.scopes.scope(&report.agent_id, &report.session_id)?;
        match self.distil_now(&scope).await {
            Ok(done) => {
                tracing::info!(
                    agent = %report.agent_id,
                    episodes = done.episodes,
                    added = done.added,
                    duplicates = done.duplicates,
                    refused_forgotten = done.refused_forgotten,
                    "user-model distillation"
                );
                Some(done)
            }
            Err(e) => {
                tracing::warn!(
                    agent = %report.agent_id,
                    "user-model distillation wrote nothing: {}",
                    jarvis_common::error_chain(&e)
                );
                None
            }
        }
    }

    /// Distils now, over `scope`'s agent's episodes since the last
    /// distillation, into `scope`'s user's model. With no new episodes it
    /// makes no call and answers an empty report.
    pub async fn distil_now(&self, scope: &MemoryScope) -> Result<DistillReport, LearnError> {
        let _one_at_a_time = self.learner.busy.lock().await;
        let read = self
            .learner
            .memory
            .episodes_to_distil(scope, self.config.max_episodes)
            .await?;
        if read.is_empty() {
            return Ok(DistillReport::default());
        }
        let forgotten = self.learner.memory.forgotten().await;
        let shown: Vec<MemoryRecord> = read
            .iter()
            .filter(|e| !contains_forgotten(&e.text, &forgotten))
            .cloned()
            .collect();
        let facts = if shown.is_empty() {
            Vec::new()
        } else {
            let text = self.ask(scope, &shown).await?;
            parse_facts(&text, &shown).map_err(|reason| LearnError::Answer {
                purpose: "distillation",
                reason,
            })?
        };
        Ok(self
            .learner
            .memory
            .add_distilled_facts(scope, &read, facts)
            .await?)
    }

    async fn ask(&self, scope: &MemoryScope, shown: &[MemoryRecord]) -> Result<String, LearnError> {
        let model = self.learner.memory.user_model().await;
        let mut body = String::from("[사용자 모델 (user model)]\n");
        if model.entries.is_empty() {
            body.push_str("(비어 있음 / empty)\n");
        }
        for line in model.lines() {
            body.push_str(&format!("- {}\n", one_line(&line, MAX_FACT_VALUE_CHARS + 70)));
        }
        body.push_str("\n[일화 (episodes)]\n");
        for (i, episode) in shown.iter().enumerate() {
            let date = episode.created_at.to_string();
            body.push_str(&format!(
                "[e{}] {} {}\n",
                i + 1,
                date.get(..10).unwrap_or(&date),
                one_line(&episode.text, self.config.episode_chars)
            ));
        }
        let request = ChatRequest::new(self.config.model.clone(), vec![Message::user(body)])
            .with_system(DISTILL_PROMPT)
            .with_purpose(Purpose::Distillation)
            .with_metadata(&scope.agent_id, &scope.session_id)
            .with_instruction(DISTILL_INSTRUCTION);
        ask(
            &*self.learner.provider,
            request,
            self.config.timeout,
            "distillation",
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jarvis_memory::{KIND_EPISODE, Layer};

    /// A turn episode of `main` with id `id`: all a label is resolved to.
    fn episode(id: &str) -> MemoryRecord {
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

    #[test]
    fn answers_parse_and_labels_become_episode_ids() {
        let shown = [episode("mem_a"), episode("mem_b")];
        let facts = parse_facts(
            "```json\n{\"facts\": [{\"key\": \"child\", \"value\": \"서연, 3학년\", \"episodes\": [\"e2\", \"[e1]\", \"e9\", \"mem_a\", \"e0\"]}, {\"key\": \"city\", \"value\": \"서울\"}]}\n```",
            &shown,
        )
        .unwrap();
        assert_eq!(facts.len(), 2);
        assert_eq!(facts[0].episodes, ["mem_b", "mem_a", "mem_a"]);
        assert!(facts[1].episodes.is_empty());
        assert_eq!(parse_facts("{\"facts\": []}", &shown).unwrap(), []);
        for bad in [
            "nothing new",
            "{\"facts\": \"none\"}",
            "{\"facts\": [{\"key\": \"x\"}]}",
            "{\"fact\": []}",
        ] {
            assert!(parse_facts(bad, &shown).is_err(), "{bad}");
        }
    }
}
