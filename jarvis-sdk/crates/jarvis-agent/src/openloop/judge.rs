//! Judges: [`RuleJudge`] (the detector of `detect.rs`) and [`ModelJudge`]
//! (one small structured call on the agent's provider, strict JSON,
//! validated; the rule judge decides when the answer is unusable).

use async_trait::async_trait;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

use super::detect::{cancels, detect, has_cue};
use super::{JudgeInput, Judgement, LoopJudge, LoopKind, NewLoop};
use jarvis_common::{Timestamp, bigram_jaccard};
use jarvis_model::{ChatRequest, Message, Provider, ProviderExt, Purpose};

/// The rule-based judge.
#[derive(Debug, Default, Clone, Copy)]
pub struct RuleJudge;

#[async_trait]
impl LoopJudge for RuleJudge {
    async fn judge(&self, input: &JudgeInput<'_>) -> Judgement {
        let mut judgement = Judgement::default();
        if cancels(input.user) {
            let related: Vec<&str> = input
                .open
                .iter()
                .filter(|l| bigram_jaccard(&l.text, input.user) >= 0.2)
                .map(|l| l.id.as_str())
                .collect();
            judgement.close = match (related.is_empty(), input.open.len()) {
                // A bare "cancel it" with one loop open means that loop.
                (true, 1) => vec![input.open[0].id.clone()],
                (true, _) => Vec::new(),
                (false, _) => related.into_iter().map(str::to_owned).collect(),
            };
            return judgement;
        }
        if let Some(found) = detect(input.user, input.now, input.time_zone) {
            judgement.open.push(NewLoop {
                text: input.user.trim().to_owned(),
                kind: if found.promise {
                    LoopKind::Promise
                } else {
                    LoopKind::Request
                },
                due: found.due,
                condition: found.condition,
            });
        }
        judgement
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelAnswer {
    #[serde(default)]
    open: Vec<ModelLoop>,
    #[serde(default)]
    close: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelLoop {
    text: String,
    #[serde(default)]
    kind: Option<LoopKind>,
    #[serde(default)]
    due: Option<String>,
    #[serde(default)]
    condition: Option<String>,
}

/// The judgement instruction of [`ModelJudge`].
pub const JUDGE_INSTRUCTION: &str = "Find promises and requests with a time or a condition in the person's \
message (\"remind me tomorrow\", \"tell me when the notice is out\", \"I'll answer by Friday\"), and which of \
the open loops listed the message closes (a cancelling message). Answer with one JSON object only: \
{\"open\": [{\"text\": string, \"kind\": \"promise\" | \"request\", \"due\": RFC 3339 time or null, \
\"condition\": string or null}], \"close\": [loop id]}. Both lists may be empty.";

/// A judge that asks the model, falling back to [`RuleJudge`] when the
/// answer is unusable (not JSON, unknown fields, a loop id of another
/// session, a bad time) or the call fails or times out. Messages without
/// any cue ([`has_cue`]) are judged empty without a call.
pub struct ModelJudge {
    provider: Arc<dyn Provider>,
    model: String,
    timeout: Duration,
}

impl std::fmt::Debug for ModelJudge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelJudge")
            .field("provider", &self.provider.name())
            .field("model", &self.model)
            .finish()
    }
}

impl ModelJudge {
    /// A judge calling `provider` (model `model`; empty: the provider's).
    pub fn new(provider: Arc<dyn Provider>, model: impl Into<String>) -> Self {
        Self {
            provider,
            model: model.into(),
            timeout: Duration::from_secs(20),
        }
    }

    async fn ask(&self, input: &JudgeInput<'_>) -> Result<Judgement, String> {
        let open: Vec<String> = input
            .open
            .iter()
            .map(|l| format!("- {}: {}", l.id, l.text))
            .collect();
        let prompt = format!(
            "Now: {}\nOpen loops:\n{}\nThe person: {}\nThe answer: {}",
            input.now,
            if open.is_empty() {
                "(none)".to_owned()
            } else {
                open.join("\n")
            },
            input.user,
            input.answer
        );
        let request = ChatRequest::new(self.model.clone(), vec![Message::user(prompt)])
            .with_purpose(Purpose::Judgement)
            .with_metadata(input.agent_id, input.session_id)
            .with_instruction(JUDGE_INSTRUCTION);
        let response = tokio::time::timeout(self.timeout, self.provider.complete(request))
            .await
            .map_err(|_| "the judgement call timed out".to_owned())?
            .map_err(|e| e.to_string())?;
        let text = response.text.trim();
        let json = match (text.find('{'), text.rfind('}')) {
            (Some(a), Some(b)) if a < b => &text[a..=b],
            _ => return Err("no JSON object in the judgement".into()),
        };
        let answer: ModelAnswer =
            serde_json::from_str(json).map_err(|e| format!("invalid judgement: {e}"))?;
        let mut judgement = Judgement::default();
        for id in answer.close {
            if !input.open.iter().any(|l| l.id == id) {
                return Err(format!(
                    "the judgement closes {id:?}, which is not an open loop of this session"
                ));
            }
            judgement.close.push(id);
        }
        for l in answer.open {
            if l.text.trim().is_empty() {
                return Err("a loop without text".into());
            }
            let due = match l.due.as_deref().filter(|d| !d.is_empty()) {
                Some(d) => Some(Timestamp::parse_rfc3339(d).map_err(|e| e.to_string())?),
                None => None,
            };
            judgement.open.push(NewLoop {
                text: l.text,
                kind: l.kind.unwrap_or(LoopKind::Request),
                due,
                condition: l.condition.filter(|c| !c.trim().is_empty()),
            });
        }
        Ok(judgement)
    }
}

#[async_trait]
impl LoopJudge for ModelJudge {
    async fn judge(&self, input: &JudgeInput<'_>) -> Judgement {
        if !has_cue(input.user) {
            return Judgement::default();
        }
        match self.ask(input).await {
            Ok(judgement) => judgement,
            Err(reason) => {
                tracing::info!(%reason, "open-loop judgement falls back to the rules");
                RuleJudge.judge(input).await
            }
        }
    }
}
