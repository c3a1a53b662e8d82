//! [`Reflector`]: procedure learning and failure reflection after a turn
//! (R-LOOP-17). One reflection is one structured model call
//! (`purpose: reflection`) over the template
//! `$JARVIS_HOME/inner_thought_reflection.md`, answering
//! `{"name", "procedure"}` (or `{"write": false}`); the procedure is saved
//! as `procedures/<agent_id>/<name>.md` and reaches later turns of the same
//! kind through `[절차 기억]`.
//!
//! **Same kind of task.** Two requests are of the same kind when the cosine
//! similarity of their embeddings (the memory service's embedder) is at
//! least [`ReflectionConfig::same_kind`] (default 0.5: with the offline hash
//! embedder, "1월 매출 데이터를 분석해서 보고서로 정리해 줘" and "3월 매출
//!데이터 분석 보고서 만들어 줘" score about 0.7, unrelated requests near
//! 0). An episode is compared through its request (the text before its
//! `→` answer line, [`episode_request`]); a procedure through its whole text
//! or its first line, whichever is closer. Every procedure the reflector
//! writes starts with the line `적용 (applies to): <the request>`, so it is
//! found again, and recalled, for requests of its kind.
//!
//! **Failure reflection.** After a turn that overflowed, the agent's own
//! turn episodes of the same kind that overflowed (`overflow: true`) are
//! counted, among those newer than the last (re)write of the kind's
//! procedure (the procedure's record time, or a rewrite this reflector
//! attempted). When the count reaches [`ReflectionConfig::overflow_threshold`]
//! (default 3), one call shows the model those requests and the current
//! procedure, if any, and asks for the task split into smaller steps. A
//! rewrite keeps the procedure's name. Because only newer episodes count,
//! the count starts again after a rewrite: the turn right after it does not
//! cause another one.
//!
//! **Procedure learning.** After a turn that ended well (`stop` or `final`,
//! no overflow) with at least [`ReflectionConfig::min_tool_calls`] tool
//! calls (default 2), when the agent has no procedure of that kind yet, one
//! call may answer a new procedure or `{"write": false}`. To keep this cheap,
//! a kind the model declined is not asked about again while the process
//! runs, and single-step turns never cost a call.
//!
//! Provider errors, timeouts and unusable answers write nothing and are
//! returned as [`LearnError`]; the engine logs them. Reflections run one at
//! a time per reflector.

use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::TurnReport;
use super::call::{LearnError, Learner, ask, json_object, read_template};
use crate::event::StopReason;
use jarvis_common::{Timestamp, one_line};
use jarvis_memory::{
    KIND_EPISODE, KIND_PROCEDURE, Layer, MemoryScope, MemoryService, Recalled, ScopeResolver,
    episode_request, validate_procedure_name,
};
use jarvis_model::{ChatRequest, Message, Provider, Purpose, cosine};

/// The template written to `$JARVIS_HOME/inner_thought_reflection.md` when
/// it is missing.
pub const DEFAULT_REFLECTION_TEMPLATE: &str = "\
# 성찰 (reflection)

방금 끝난 작업을 돌아보고, 같은 종류의 작업을 다음에 더 잘 하도록 절차를 쓴다.

- 절차는 번호를 붙인 짧은 단계로, 한 줄에 한 단계씩 쓴다. 한 단계는 도구 호출 한두 번으로 끝날 만큼 작게.
- 같은 종류의 작업이 여러 번 넘쳤다면(단계 예산을 다 썼다면), 지금의 절차를 더 작은 단계로 나누고,
  한 번에 한 부분씩 하며 중간 결과를 정리하는 단계를 넣는다.
- 작업이 잘 끝났다면, 다음에도 쓸 만할 때만 절차로 남긴다. 한 번뿐인 일이면 남기지 않는다.
- 이름(name)은 작업의 종류를 짧게 적는다: 글자, 숫자, '-', '_', 띄어쓰기, 64자 이내.

(Look back on the task that just ended and write a procedure for doing this kind of task better next
time: numbered short steps, one per line, each small enough for one or two tool calls. When this kind
of task overflowed repeatedly, split the current procedure into smaller steps done one part at a time,
with steps that note intermediate results. When the task went well, keep a procedure only if it will be
useful again. The name names the kind of task.)
";

/// The instruction that ends every reflection request.
pub const REFLECTION_INSTRUCTION: &str = "Answer with one JSON object only, no prose: \
{\"name\": string (letters, digits, '-', '_', inner spaces; at most 64 characters), \
\"procedure\": string (numbered steps, one per line)}, or {\"write\": false} when no procedure is worth keeping.";

/// The first line of every procedure the reflector writes, before the request.
pub const APPLIES_TO: &str = "적용 (applies to): ";

/// Settings of a [`Reflector`].
#[derive(Debug, Clone, PartialEq)]
pub struct ReflectionConfig {
    /// Overflowed episodes of one kind (since its procedure's last rewrite)
    /// that cause a rewrite. Default 3; 0 turns failure reflection off.
    pub overflow_threshold: usize,
    /// Cosine similarity from which two requests are of the same kind.
    /// Default 0.5.
    pub same_kind: f32,
    /// Whether successful multi-step turns may teach a new procedure.
    /// Default true.
    pub learn_from_success: bool,
    /// Tool calls from which a successful turn is multi-step. Default 2.
    pub min_tool_calls: usize,
    /// Longest wait for the reflection call. Default 30 s.
    pub timeout: Duration,
    /// The template file (`$JARVIS_HOME/inner_thought_reflection.md`); the
    /// default template when it is missing, unreadable or empty.
    pub template: Option<PathBuf>,
    /// The model name for reflection calls (empty: the provider's default).
    pub model: String,
    /// The longest procedure accepted, in characters. Default 4,000.
    pub max_procedure_chars: usize,
    /// Overflowed requests shown to the model, newest first. Default 5.
    pub max_requests: usize,
}

impl Default for ReflectionConfig {
    fn default() -> Self {
        Self {
            overflow_threshold: 3,
            same_kind: 0.5,
            learn_from_success: true,
            min_tool_calls: 2,
            timeout: Duration::from_secs(30),
            template: None,
            model: String::new(),
            max_procedure_chars: 4_000,
            max_requests: 5,
        }
    }
}

/// What a reflection did.
#[derive(Debug, Clone, PartialEq)]
pub enum Reflection {
    /// No call was made; the text says why.
    Skipped(&'static str),
    /// The model saw nothing worth keeping.
    Declined,
    /// A procedure was written.
    Written {
        /// Its name.
        name: String,
        /// Whether it replaced the kind's procedure (failure reflection).
        rewrite: bool,
        /// The overflowed episodes that caused it (0 when learning from success).
        overflows: usize,
    },
}

/// A procedure as the model proposed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcedureDraft {
    /// Its name (a valid procedure name).
    pub name: String,
    /// Its steps.
    pub procedure: String,
}

impl ProcedureDraft {
    /// Parses a reflection answer: `Ok(None)` for `{"write": false}`, a
    /// draft for `{"name", "procedure"}` with a valid name and a non-empty
    /// procedure of at most `max_chars` characters, an error otherwise.
    pub fn parse(text: &str, max_chars: usize) -> Result<Option<ProcedureDraft>, String> {
        let value = json_object(text)?;
        let field = |key: &str| value.get(key).and_then(Value::as_str).map(str::trim);
        let (name, procedure) = match (field("name"), field("procedure")) {
            (Some(name), Some(procedure)) => (name, procedure),
            _ if value.get("write") == Some(&Value::Bool(false)) => return Ok(None),
            _ => return Err("expected {\"name\", \"procedure\"} or {\"write\": false}".into()),
        };
        validate_procedure_name(name).map_err(|e| e.to_string())?;
        if procedure.is_empty() {
            return Err("the procedure is empty".into());
        }
        if procedure.chars().count() > max_chars {
            return Err(format!("the procedure is longer than {max_chars} characters"));
        }
        Ok(Some(ProcedureDraft {
            name: name.to_owned(),
            procedure: procedure.to_owned(),
        }))
    }
}

/// The reflector; see the module docs. Share it as `Arc<Reflector>`.
pub struct Reflector {
    learner: Learner,
    config: ReflectionConfig,
    /// When this reflector last (tried to) rewrite each (agent, procedure).
    rewritten: Mutex<HashMap<(String, String), Timestamp>>,
    /// Requests whose kind the model declined to learn, per agent.
    declined: Mutex<Vec<(String, Vec<f32>)>>,
}

impl std::fmt::Debug for Reflector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reflector")
            .field("learner", &self.learner)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Declined kinds remembered per reflector.
const MAX_DECLINED: usize = 64;
/// Episodes searched for the same kind.
const EPISODES_SEARCHED: usize = 32;
/// Procedures searched for the kind's procedure.
const PROCEDURES_SEARCHED: usize = 4;

/// What the reflector found about the kind of a turn's request.
struct Kind {
    prompt: Vec<f32>,
    /// The kind's procedure and its similarity to the request.
    procedure: Option<Recalled>,
    /// Overflowed episodes of the kind newer than the procedure, newest first.
    overflowed: Vec<Recalled>,
}

impl Reflector {
    /// A reflector asking `provider`, writing through `memory`, in the
    /// scopes `scopes` gives (only the agent's own episodes and procedures
    /// are read and written).
    pub fn new(
        provider: Arc<dyn Provider>,
        memory: Arc<MemoryService>,
        scopes: Arc<dyn ScopeResolver>,
        config: ReflectionConfig,
    ) -> Self {
        Self {
            learner: Learner::new(provider, memory, scopes),
            config,
            rewritten: Mutex::new(HashMap::new()),
            declined: Mutex::new(Vec::new()),
        }
    }

    /// The settings.
    pub fn config(&self) -> &ReflectionConfig {
        &self.config
    }

    /// Reflects on a finished turn; see the module docs.
    pub async fn reflect(&self, report: &TurnReport) -> Result<Reflection, LearnError> {
        let overflowed = report.overflows > 0;
        let went_well = matches!(report.stop_reason, StopReason::Stop | StopReason::Final)
            && report.tool_calls >= self.config.min_tool_calls;
        if overflowed && self.config.overflow_threshold == 0 {
            return Ok(Reflection::Skipped("failure reflection is off"));
        }
        let learns = went_well && self.config.learn_from_success;
        if !overflowed && !learns {
            return Ok(Reflection::Skipped("nothing to learn from this turn"));
        }
        let Some(scope) = self.learner.scopes.scope(&report.agent_id, &report.session_id) else {
            return Ok(Reflection::Skipped("the agent has no memory"));
        };
        // Only the agent's own episodes and procedures.
        let own = MemoryScope::new(scope.user, &report.agent_id, &report.session_id);
        let _one_at_a_time = self.learner.busy.lock().await;
        let kind = self.kind(&own, &report.prompt, overflowed).await?;
        if !overflowed {
            if kind.procedure.is_some() {
                return Ok(Reflection::Skipped("the agent has a procedure for this kind"));
            }
            if self.was_declined(&report.agent_id, &kind.prompt) {
                return Ok(Reflection::Skipped("the model declined this kind before"));
            }
            return self.learn(&own, report, kind).await;
        }
        if kind.overflowed.len() < self.config.overflow_threshold {
            return Ok(Reflection::Skipped("not enough overflows of this kind yet"));
        }
        self.rewrite(&own, report, kind).await
    }

    /// The request's embedding, the kind's procedure and (after an
    /// overflow) the kind's overflowed episodes since that procedure.
    async fn kind(&self, own: &MemoryScope, prompt: &str, overflowed: bool) -> Result<Kind, LearnError> {
        let procedures: Vec<Recalled> = self
            .learner
            .memory
            .search(own, prompt, Layer::Procedural, PROCEDURES_SEARCHED)
            .await?
            .into_iter()
            .filter(|r| r.record.kind == KIND_PROCEDURE)
            .collect();
        let episodes: Vec<Recalled> = if overflowed {
            self.learner
                .memory
                .search(own, prompt, Layer::Episodic, EPISODES_SEARCHED)
                .await?
                .into_iter()
                .filter(|r| {
                    r.record.kind == KIND_EPISODE
                        && r.record.metadata.get("overflow") == Some(&Value::Bool(true))
                })
                .collect()
        } else {
            Vec::new()
        };
        // One embedding call: the request, each episode's request, each
        // procedure's first line.
        let mut texts = vec![prompt.to_owned()];
        texts.extend(
            episodes
                .iter()
                .map(|e| episode_request(&e.record.text).to_owned()),
        );
        texts.extend(procedures.iter().map(|p| {
            p.record
                .text
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .to_owned()
        }));
        let vectors = self
            .learner
            .memory
            .embedder()
            .embed(texts, jarvis_model::EmbedRole::Query)
            .await
            .map_err(|e| LearnError::Memory(jarvis_memory::MemoryError::Embed(e)))?;
        let prompt_vector = vectors.first().cloned().unwrap_or_default();
        let similarity = |i: usize| vectors.get(i).map_or(0.0, |v| cosine(&prompt_vector, v));
        let threshold = self.config.same_kind;
        let procedure = procedures
            .into_iter()
            .enumerate()
            .map(|(i, mut p)| {
                p.similarity = p.similarity.max(similarity(1 + episodes.len() + i));
                p
            })
            .filter(|p| p.similarity >= threshold)
            .max_by(|a, b| a.similarity.total_cmp(&b.similarity));
        let since = procedure.as_ref().map(|p| {
            let name = p
                .record
                .metadata
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("");
            let attempted = self
                .rewritten
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&(own.agent_id.clone(), name.to_owned()))
                .copied()
                .unwrap_or(Timestamp::EPOCH);
            p.record.created_at.max(attempted)
        });
        let mut overflowed: Vec<Recalled> = episodes
            .into_iter()
            .enumerate()
            .filter(|(i, e)| similarity(1 + i) >= threshold && since.is_none_or(|t| e.record.created_at > t))
            .map(|(_, e)| e)
            .collect();
        overflowed.sort_by_key(|e| std::cmp::Reverse(e.record.created_at));
        Ok(Kind {
            prompt: prompt_vector,
            procedure,
            overflowed,
        })
    }

    fn was_declined(&self, agent_id: &str, prompt: &[f32]) -> bool {
        let declined = self.declined.lock().unwrap_or_else(|e| e.into_inner());
        declined
            .iter()
            .any(|(agent, v)| agent == agent_id && cosine(v, prompt) >= self.config.same_kind)
    }

    /// Learning from a turn that went well.
    async fn learn(
        &self,
        own: &MemoryScope,
        report: &TurnReport,
        kind: Kind,
    ) -> Result<Reflection, LearnError> {
        let body = format!(
            "[작업 (task)]\n{}\n\n[결과 (outcome)]\n도구 {}번으로 잘 끝났다 (finished well with {} tool calls: {}).\n{}\n\n\
             [할 일 (what to do)]\n같은 종류의 작업에 다시 쓸 만하면 절차로 남겨라. 아니면 {{\"write\": false}}.\n\
             (If this kind of task will come again, write its procedure; otherwise answer {{\"write\": false}}.)",
            one_line(&report.prompt, 1_000),
            report.tool_calls,
            report.tool_calls,
            report.tools.join(", "),
            one_line(&report.answer, 500),
        );
        match self.call(report, body).await? {
            None => {
                let mut declined = self.declined.lock().unwrap_or_else(|e| e.into_inner());
                if declined.len() == MAX_DECLINED {
                    declined.remove(0);
                }
                declined.push((report.agent_id.clone(), kind.prompt));
                Ok(Reflection::Declined)
            }
            Some(draft) => {
                let name = self.free_name(&own.agent_id, &draft.name)?;
                self.save(own, &name, &report.prompt, &draft.procedure).await?;
                tracing::info!(agent = %own.agent_id, procedure = %name, "learned a procedure from a turn that went well");
                Ok(Reflection::Written {
                    name,
                    rewrite: false,
                    overflows: 0,
                })
            }
        }
    }

    /// Failure reflection: the kind overflowed often enough.
    async fn rewrite(
        &self,
        own: &MemoryScope,
        report: &TurnReport,
        kind: Kind,
    ) -> Result<Reflection, LearnError> {
        let overflows = kind.overflowed.len();
        let requests: String = kind
            .overflowed
            .iter()
            .take(self.config.max_requests)
            .map(|e| format!("- {}\n", one_line(episode_request(&e.record.text), 500)))
            .collect();
        let current = kind.procedure.as_ref().map(|p| {
            let name = p
                .record
                .metadata
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            (name, p.record.text.clone())
        });
        let current_text = match &current {
            Some((name, text)) => format!("[지금의 절차 (current procedure): {name}]\n{}", text.trim()),
            None => "[지금의 절차 (current procedure)]\n(없음 / none)".to_owned(),
        };
        let body = format!(
            "[작업 (task)]\n{}\n\n[넘친 요청들 (requests that overflowed)]\n{requests}\n{current_text}\n\n\
             [할 일 (what to do)]\n이 종류의 작업이 {overflows}번 넘쳤다: 단계 예산을 다 쓰고도 끝나지 않았다. \
             절차를 더 작은 단계로 나눠 다시 써라.\n\
             (This kind of task overflowed {overflows} times: it ran out of steps before finishing. \
             Rewrite the procedure as smaller steps.)",
            one_line(&report.prompt, 1_000),
        );
        let current_name = current.map(|(name, _)| name).filter(|name| !name.is_empty());
        // A failed call leaves the count as it is, so the next overflow of
        // the kind tries again; an answer (a rewrite, or a decline of the
        // kind's procedure) starts it again.
        let Some(draft) = self.call(report, body).await? else {
            if let Some(name) = &current_name {
                self.mark_rewritten(&own.agent_id, name);
            }
            return Ok(Reflection::Declined);
        };
        let (name, rewrite) = match current_name {
            Some(name) => (name, true),
            None => (self.free_name(&own.agent_id, &draft.name)?, false),
        };
        self.save(own, &name, &report.prompt, &draft.procedure).await?;
        self.mark_rewritten(&own.agent_id, &name);
        tracing::info!(
            agent = %own.agent_id,
            procedure = %name,
            overflows,
            "rewrote a procedure into smaller steps after repeated overflows"
        );
        Ok(Reflection::Written {
            name,
            rewrite,
            overflows,
        })
    }

    /// Notes that `agent_id`'s procedure `name` was just (re)considered,
    /// also when its text did not change.
    fn mark_rewritten(&self, agent_id: &str, name: &str) {
        let now = Timestamp::from_system_time(self.learner.memory.clock().now());
        self.rewritten
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((agent_id.to_owned(), name.to_owned()), now);
    }

    /// The reflection call: `body` under the template, the answer parsed.
    async fn call(&self, report: &TurnReport, body: String) -> Result<Option<ProcedureDraft>, LearnError> {
        let template = read_template(self.config.template.as_deref(), DEFAULT_REFLECTION_TEMPLATE);
        let request = ChatRequest::new(self.config.model.clone(), vec![Message::user(body)])
            .with_system(template)
            .with_purpose(Purpose::Reflection)
            .with_metadata(&report.agent_id, &report.session_id)
            .with_instruction(REFLECTION_INSTRUCTION);
        let text = ask(
            &*self.learner.provider,
            request,
            self.config.timeout,
            "reflection",
        )
        .await?;
        ProcedureDraft::parse(&text, self.config.max_procedure_chars).map_err(|reason| LearnError::Answer {
            purpose: "reflection",
            reason,
        })
    }

    /// `name`, or `name-2` … `name-9` when an agent's procedure (of another
    /// kind) already has it: a new procedure never replaces another kind's.
    fn free_name(&self, agent_id: &str, name: &str) -> Result<String, LearnError> {
        let Some(library) = self.learner.memory.procedures() else {
            return Ok(name.to_owned());
        };
        let taken = |n: &str| library.get(agent_id, n).map(|p| p.is_some());
        if !taken(name)? {
            return Ok(name.to_owned());
        }
        for i in 2..=9 {
            let candidate = format!("{}-{i}", jarvis_common::truncate_chars(name, 60));
            if !taken(&candidate)? {
                return Ok(candidate);
            }
        }
        Err(LearnError::Answer {
            purpose: "reflection",
            reason: format!("the procedure names {name:?} to {name:?}-9 are all taken"),
        })
    }

    /// Saves `procedure` as the agent's procedure `name`, headed by the
    /// request it applies to.
    async fn save(
        &self,
        own: &MemoryScope,
        name: &str,
        prompt: &str,
        procedure: &str,
    ) -> Result<(), LearnError> {
        let text = format!("{APPLIES_TO}{}\n\n{}", one_line(prompt, 200), procedure.trim());
        self.learner.memory.save_procedure(own, name, &text).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_into_drafts_declines_or_errors() {
        let draft = ProcedureDraft::parse(
            "```json\n{\"name\": \" 월간 매출 보고 \", \"procedure\": \"1. 파일 목록\\n2. 한 달씩 합계\"}\n```",
            100,
        )
        .unwrap()
        .unwrap();
        assert_eq!(draft.name, "월간 매출 보고");
        assert_eq!(draft.procedure, "1. 파일 목록\n2. 한 달씩 합계");
        assert_eq!(ProcedureDraft::parse("{\"write\": false}", 100), Ok(None));
        for bad in [
            "I would not write one.",
            "{\"write\": true}",
            "{\"name\": \"../etc\", \"procedure\": \"1. x\"}",
            "{\"name\": \"ok\", \"procedure\": \"   \"}",
            "{\"name\": \"ok\"}",
            "{\"name\": 3, \"procedure\": \"1. x\"}",
            "{\"name\": \"ok\", \"procedure\": \"1. xxxxxxxxxxxx\"}",
        ] {
            assert!(ProcedureDraft::parse(bad, 10).is_err(), "{bad}");
        }
    }
}
