//! [`ThoughtEngine`]: the inner thought engine. When the router says think,
//! one structured model call (`purpose: thought`) over the template
//! `$JARVIS_HOME/inner_thought.md` and the recent conversation returns a
//! frame `{interpretation, decision, confidence, plan, closed_loops}`,
//! validated. The frame's plan reaches the turn's model calls as an
//! unrecorded note; `closed_loops` feeds the open-loop judgement.
//!
//! Events: `thought_route` before every turn; when thinking,
//! `inner_thought` and then `thought_end {ok: true}`, or `thought_end
//! {ok: false}` when the call fails, times out or the frame is invalid — the
//! turn then goes on without it. Thinking never blocks or fails a turn.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::call::{ask, json_object, read_template};
use super::distill::Distiller;
use super::reflect::Reflector;
use super::router::{RouterSignals, ThoughtRouter};
use super::{ThinkingHook, ThinkingInput, ThinkingOutcome, TurnReport};
use crate::event::AgentEvent;
use crate::harness::history_messages;
use crate::session::{SessionId, SessionStore};
use crate::ui::UIAdapter;
use jarvis_model::{ChatRequest, Message, Provider, Purpose};

/// The template written to `$JARVIS_HOME/inner_thought.md` when it is missing.
pub const DEFAULT_THOUGHT_TEMPLATE: &str = "\
# 내적 사고 (inner thought)

당신은 답하기 전에 잠깐 생각한다. 사용자의 요청과 최근 대화를 보고:

1. 무엇을 원하는지 한 문장으로 해석한다 (interpretation).
2. 어떻게 할지 정한다 (decision): answer, use_tools, delegate, ask_clarification, background 중 하나.
3. 얼마나 확신하는지 0에서 1 사이로 적는다 (confidence).
4. 할 일을 짧은 단계로 나눈다 (plan, 최대 6단계).
5. 이번 요청으로 끝난 약속이 있으면 적는다 (closed_loops).

(Before answering, think briefly: interpret the request in one sentence, decide how to act, rate your
confidence, split the work into short steps, and list promises this request closes.)
";

/// The instruction that ends every thought request.
pub const FRAME_INSTRUCTION: &str = "Answer with one JSON object only, no prose: \
{\"interpretation\": string, \"decision\": \"answer\" | \"use_tools\" | \"delegate\" | \"ask_clarification\" | \"background\", \
\"confidence\": number 0..1, \"plan\": [string], \"closed_loops\": [string]}";

/// What the thought decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThoughtDecision {
    /// Answer directly.
    Answer,
    /// Use tools.
    UseTools,
    /// Delegate to another agent.
    Delegate,
    /// Ask the person a clarifying question.
    AskClarification,
    /// A long job: acknowledge now, work in the background.
    Background,
}

impl ThoughtDecision {
    /// The name in frames and events.
    pub fn as_str(self) -> &'static str {
        match self {
            ThoughtDecision::Answer => "answer",
            ThoughtDecision::UseTools => "use_tools",
            ThoughtDecision::Delegate => "delegate",
            ThoughtDecision::AskClarification => "ask_clarification",
            ThoughtDecision::Background => "background",
        }
    }
}

/// A validated thought frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThoughtFrame {
    /// What the request was understood to be.
    pub interpretation: String,
    /// What to do.
    pub decision: ThoughtDecision,
    /// How sure, 0 to 1.
    pub confidence: f32,
    /// Short steps.
    #[serde(default)]
    pub plan: Vec<String>,
    /// Promises this request closes (ids or descriptions).
    #[serde(default)]
    pub closed_loops: Vec<String>,
}

impl ThoughtFrame {
    /// Parses and validates a frame from a model's answer: the first JSON
    /// object in it (models often wrap it in a code fence).
    pub fn parse(text: &str) -> Result<(ThoughtFrame, Value), String> {
        let value = json_object(text)?;
        let frame: ThoughtFrame =
            serde_json::from_value(value.clone()).map_err(|e| format!("not a thought frame: {e}"))?;
        if frame.interpretation.trim().is_empty() || frame.interpretation.chars().count() > 2_000 {
            return Err("the interpretation must be 1 to 2,000 characters".into());
        }
        if !(0.0..=1.0).contains(&frame.confidence) {
            return Err(format!("confidence {} is not between 0 and 1", frame.confidence));
        }
        if frame.plan.len() > 12 || frame.closed_loops.len() > 50 {
            return Err("too many plan steps or closed loops".into());
        }
        Ok((frame, value))
    }

    /// The note the turn's model calls carry (never recorded).
    pub fn note(&self) -> String {
        let mut note = format!(
            "[생각 (inner thought)] 해석: {} / 결정: {} (확신 {:.2})",
            self.interpretation,
            self.decision.as_str(),
            self.confidence
        );
        if !self.plan.is_empty() {
            note.push_str("\n계획 (plan):");
            for (i, step) in self.plan.iter().enumerate() {
                note.push_str(&format!("\n{}. {step}", i + 1));
            }
        }
        note
    }
}

/// Settings of the engine.
#[derive(Debug, Clone)]
pub struct ThoughtConfig {
    /// The router's threshold.
    pub threshold: f32,
    /// Longest wait for the thought call. Default 20 s.
    pub timeout: Duration,
    /// The template file (`$JARVIS_HOME/inner_thought.md`); the default
    /// template when it is missing or unreadable.
    pub template: Option<PathBuf>,
    /// The model name for thought calls (empty: the provider's default).
    pub model: String,
    /// Earlier turns the thought sees. Default 2.
    pub context_turns: usize,
}

impl Default for ThoughtConfig {
    fn default() -> Self {
        Self {
            threshold: super::router::DEFAULT_THINK_THRESHOLD,
            timeout: Duration::from_secs(20),
            template: None,
            model: String::new(),
            context_turns: 2,
        }
    }
}

/// The inner thought engine; see the module docs.
///
/// After a turn ([`ThinkingHook::after_turn`]) it runs its learners, when it
/// carries them: the [`Reflector`] (procedure learning and failure
/// reflection), then the [`Distiller`] (user-model distillation every N
/// turns). Each logs its failures and never fails or delays a turn.
pub struct ThoughtEngine {
    router: ThoughtRouter,
    provider: Arc<dyn Provider>,
    store: Arc<dyn SessionStore>,
    config: ThoughtConfig,
    reflector: Option<Arc<Reflector>>,
    distiller: Option<Arc<Distiller>>,
}

impl std::fmt::Debug for ThoughtEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThoughtEngine")
            .field("router", &self.router)
            .field("provider", &self.provider.name())
            .field("config", &self.config)
            .field("reflector", &self.reflector.is_some())
            .field("distiller", &self.distiller.is_some())
            .finish()
    }
}

impl ThoughtEngine {
    /// An engine thinking with `provider` over sessions in `store`.
    pub fn new(provider: Arc<dyn Provider>, store: Arc<dyn SessionStore>, config: ThoughtConfig) -> Self {
        Self {
            router: ThoughtRouter::new(config.threshold),
            provider,
            store,
            config,
            reflector: None,
            distiller: None,
        }
    }

    /// Runs `reflector` after every turn (procedure learning, failure
    /// reflection). Share one reflector among the sessions of an app, so
    /// two sessions of an agent never reflect on the same kind at once.
    pub fn with_reflector(mut self, reflector: Arc<Reflector>) -> Self {
        self.reflector = Some(reflector);
        self
    }

    /// Hands every finished turn to `distiller` (user-model distillation
    /// every N turns of the agent). Share one distiller among the sessions
    /// of an app, so the count is per agent.
    pub fn with_distiller(mut self, distiller: Arc<Distiller>) -> Self {
        self.distiller = Some(distiller);
        self
    }

    /// The router it decides with.
    pub fn router(&self) -> &ThoughtRouter {
        &self.router
    }

    fn template(&self) -> String {
        read_template(self.config.template.as_deref(), DEFAULT_THOUGHT_TEMPLATE)
    }

    async fn think(&self, input: &ThinkingInput<'_>) -> Result<(ThoughtFrame, Value), String> {
        let mut messages = match SessionId::new(input.session_id) {
            Ok(id) => match self.store.recent(&id, self.config.context_turns).await {
                Ok(entries) => history_messages(&entries),
                Err(_) => Vec::new(),
            },
            Err(_) => Vec::new(),
        };
        messages.push(Message::user(input.prompt));
        let mut system = self.template();
        if !input.open_loops.is_empty() {
            system.push_str(
                "\n\n이 세션의 열린 약속 (open loops of this session; list the ids this request ends in closed_loops):",
            );
            for l in input.open_loops {
                system.push_str(&format!("\n- {}: {}", l.id, l.text));
            }
        }
        let request = ChatRequest::new(self.config.model.clone(), messages)
            .with_system(system)
            .with_purpose(Purpose::Thought)
            .with_metadata(input.agent_id, input.session_id)
            .with_instruction(FRAME_INSTRUCTION);
        let text = ask(&*self.provider, request, self.config.timeout, "thought")
            .await
            .map_err(|e| jarvis_common::error_chain(&e))?;
        ThoughtFrame::parse(&text)
    }
}

#[async_trait]
impl ThinkingHook for ThoughtEngine {
    async fn before_turn(&self, input: &ThinkingInput<'_>, ui: &dyn UIAdapter) -> ThinkingOutcome {
        let route = self.router.route(&RouterSignals {
            prompt: input.prompt,
            due_loops: input.due_loops,
            recent_failures: input.recent_failures,
        });
        let _ = ui.on_event(&AgentEvent::ThoughtRoute {
            think: route.think,
            p_think: route.p_think,
        });
        if !route.think {
            return ThinkingOutcome::default();
        }
        match self.think(input).await {
            Ok((frame, value)) => {
                let _ = ui.on_event(&AgentEvent::InnerThought {
                    interpretation: frame.interpretation.clone(),
                    decision: frame.decision.as_str().to_owned(),
                    confidence: frame.confidence,
                    frame: value,
                });
                let _ = ui.on_event(&AgentEvent::ThoughtEnd { ok: true });
                ThinkingOutcome {
                    note: Some(frame.note()),
                    background: frame.decision == ThoughtDecision::Background,
                    closed_loops: frame.closed_loops,
                }
            }
            Err(reason) => {
                tracing::info!(agent = input.agent_id, %reason, "thought skipped");
                let _ = ui.on_event(&AgentEvent::ThoughtEnd { ok: false });
                ThinkingOutcome::default()
            }
        }
    }

    async fn after_turn(&self, report: &TurnReport) {
        if let Some(reflector) = &self.reflector {
            match reflector.reflect(report).await {
                Ok(reflection) => tracing::debug!(agent = %report.agent_id, ?reflection, "reflection"),
                Err(e) => tracing::warn!(
                    agent = %report.agent_id,
                    "reflection wrote nothing: {}",
                    jarvis_common::error_chain(&e)
                ),
            }
        }
        if let Some(distiller) = &self.distiller {
            distiller.after_turn(report).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_parse_from_fenced_answers_and_are_validated() {
        let ok = "```json\n{\"interpretation\": \"공고 찾기\", \"decision\": \"delegate\", \"confidence\": 0.8, \"plan\": [\"KAREN 에게 묻기\"], \"extra\": 1}\n```";
        let (frame, value) = ThoughtFrame::parse(ok).unwrap();
        assert_eq!(frame.decision, ThoughtDecision::Delegate);
        assert_eq!(value["extra"], 1, "the whole frame is kept");
        assert!(frame.note().contains("1. KAREN 에게 묻기"));
        for bad in [
            "no json here",
            "{\"interpretation\": \"x\", \"decision\": \"dance\", \"confidence\": 0.5}",
            "{\"interpretation\": \"x\", \"decision\": \"answer\", \"confidence\": 7}",
            "{\"interpretation\": \"\", \"decision\": \"answer\", \"confidence\": 0.5}",
            "{\"decision\": \"answer\"}",
            "} {",
        ] {
            assert!(ThoughtFrame::parse(bad).is_err(), "{bad}");
        }
    }
}
