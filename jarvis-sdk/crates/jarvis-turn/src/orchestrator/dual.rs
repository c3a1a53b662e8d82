//! The dual channel: a long job acknowledged at once and finished in the
//! background while the person keeps talking ([`AgentSession::prompt_dual`]).

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{AgentSession, PromptOptions, TurnError};
use jarvis_agent::{AgentError, AgentEvent, LoopOutcome, ProactiveKind, UIAdapter};

/// Settings of the dual channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DualConfig {
    /// A turn still running after this long goes to the background
    /// (`None`: only when the thought frame says so). Default 20 s.
    pub after: Option<Duration>,
    /// The acknowledgement the person gets when a job goes to the background.
    pub acknowledgement: String,
}

impl Default for DualConfig {
    fn default() -> Self {
        Self {
            after: Some(Duration::from_secs(20)),
            acknowledgement: "시간이 걸리는 일이라 뒤에서 계속할게요. 끝나면 알려 드릴게요. \
                              (This takes a while: I will keep working on it and tell you when it is done.)"
                .to_owned(),
        }
    }
}

/// What [`AgentSession::prompt_dual`] answered.
#[derive(Debug)]
#[non_exhaustive]
pub enum DualReply {
    /// The turn finished in the foreground.
    Done(LoopOutcome),
    /// The turn continues in the background; its answer will arrive as a
    /// `proactive_message` of kind `answer` with this id.
    Background {
        /// The id of the answer's `proactive_message`.
        message_id: String,
        /// The acknowledgement sent to the screens.
        acknowledgement: String,
    },
}

impl AgentSession {
    /// Runs one turn; a long one is acknowledged at once and continues in
    /// the background (see the module docs).
    pub async fn prompt_dual(
        &self,
        text: impl Into<String>,
        options: PromptOptions,
    ) -> Result<DualReply, TurnError> {
        let (mut pending, background, foreground) = self.start(text.into(), options).await?;
        let mut result = pending.result.take().expect("a started turn has a receiver");
        if !background {
            let waited = match self.inner.dual.after {
                Some(after) => tokio::time::timeout(after, &mut result).await.ok(),
                None => Some((&mut result).await),
            };
            if let Some(outcome) = waited {
                return Ok(DualReply::Done(outcome.map_err(|_| {
                    TurnError::Agent(AgentError::InvalidConfig("the turn was lost".into()))
                })??));
            }
        }
        // The foreground is free again; the job goes on.
        drop(foreground);
        let inner = &self.inner;
        let job = inner.next_job.fetch_add(1, Ordering::Relaxed);
        let message_id = format!("{}-answer-{job}", inner.parts.id);
        inner
            .background
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((job, pending.cancel.clone()));
        let acknowledgement = inner.dual.acknowledgement.clone();
        if inner.parts.broker.screens() == 0 {
            // Only a filler may be dropped: it says "still working", which
            // the answer makes moot; it is counted.
            inner.fillers_dropped.fetch_add(1, Ordering::Relaxed);
        }
        let _ = inner.parts.screens.on_event(&AgentEvent::ProactiveMessage {
            text: acknowledgement.clone(),
            kind: ProactiveKind::Filler,
            message_id: format!("{}-ack-{job}", inner.parts.id),
        });
        let session = self.clone();
        let id = message_id.clone();
        tokio::spawn(async move {
            let text = match result.await {
                // An aborted job says so through its own agent_end; no answer follows.
                Ok(Ok(outcome)) if outcome.final_message.stop_reason == jarvis_agent::StopReason::Aborted => {
                    None
                }
                Ok(Ok(outcome)) => Some(outcome.final_message.content),
                Ok(Err(error)) => Some(format!("the background job failed: {error}")),
                Err(_) => Some("the background job was lost".to_owned()),
            };
            session
                .inner
                .background
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|(j, _)| *j != job);
            if let Some(text) = text {
                let parts = &session.inner.parts;
                if parts.screens.is_empty()
                    && let Some(notifier) = &parts.notifier
                {
                    notifier
                        .notify_answer(parts.id.as_ref(), &parts.agent_id, &id, &text)
                        .await;
                }
                let _ = parts.screens.on_event(&AgentEvent::ProactiveMessage {
                    text,
                    kind: ProactiveKind::Answer,
                    message_id: id,
                });
            }
        });
        drop(pending);
        Ok(DualReply::Background {
            message_id,
            acknowledgement,
        })
    }
}
