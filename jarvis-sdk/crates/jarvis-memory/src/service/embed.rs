//! Asking the embedder: checked answers, the outage hold after a failure,
//! and writes kept un-embedded while it does not answer.

use std::time::Duration;

use super::MemoryService;
use crate::error::MemoryError;
use jarvis_common::error_chain;
use jarvis_model::{EmbedRole, Embedder};

/// After the embedder failed, calls made for turns skip it this long
/// (recall answers without the store, writes are kept un-embedded), so a
/// server that is down does not cost every turn its timeouts and retries.
const OUTAGE_HOLD: Duration = Duration::from_secs(30);

impl MemoryService {
    pub(super) async fn embed(
        &self,
        texts: Vec<String>,
        role: EmbedRole,
    ) -> Result<Vec<Vec<f32>>, MemoryError> {
        let held = {
            let outage = self.outage.lock().unwrap_or_else(|e| e.into_inner());
            outage.is_some_and(|until| tokio::time::Instant::now() < until)
        };
        if held {
            return Err(MemoryError::Embed(jarvis_model::ProviderError::stream(
                "embedder",
                format!("not asked: it failed less than {} s ago", OUTAGE_HOLD.as_secs()),
            )));
        }
        let answer = checked_embed(self.embedder.as_ref(), texts, role).await;
        self.note_embedder(answer.is_ok());
        answer
    }

    /// Remembers whether the embedder just answered: a failure holds calls
    /// for turns off for [`OUTAGE_HOLD`]; an answer after a failure wakes
    /// the re-embedding task.
    pub(super) fn note_embedder(&self, answered: bool) {
        let mut outage = self.outage.lock().unwrap_or_else(|e| e.into_inner());
        if answered {
            if outage.take().is_some() {
                self.wake.0.notify_one();
            }
        } else {
            *outage = Some(tokio::time::Instant::now() + OUTAGE_HOLD);
        }
    }

    /// Embeds `texts`, or answers `None` (logged) when the embedder does
    /// not answer: the caller then keeps its record un-embedded, and the
    /// re-embedding task embeds it once the embedder answers again.
    async fn embed_or_defer(&self, texts: Vec<String>) -> Option<Vec<Vec<f32>>> {
        match self.embed(texts, EmbedRole::Document).await {
            Ok(vectors) => Some(vectors),
            Err(e) => {
                tracing::warn!(
                    embedder = %self.embedder.name(),
                    "memory: the embedder did not answer ({}); the memory is kept and embedded when it answers again",
                    error_chain(&e)
                );
                None
            }
        }
    }

    pub(super) async fn embed_one_or_defer(&self, text: &str) -> Vec<f32> {
        self.embed_or_defer(vec![text.to_owned()])
            .await
            .and_then(|mut v| v.pop())
            .unwrap_or_default()
    }

    async fn embed_query(&self, text: &str) -> Result<Vec<f32>, MemoryError> {
        let mut vectors = self.embed(vec![text.to_owned()], EmbedRole::Query).await?;
        Ok(vectors.pop().unwrap_or_default())
    }

    /// The embedding of a turn's prompt, remembered between `observe` and
    /// `record_turn` so a turn embeds its prompt once.
    pub(super) async fn embed_prompt(&self, prompt: &str) -> Result<Vec<f32>, MemoryError> {
        {
            let last = self.last_prompt.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((text, vector)) = &*last
                && text == prompt
            {
                return Ok(vector.clone());
            }
        }
        let vector = self.embed_query(prompt).await?;
        *self.last_prompt.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((prompt.to_owned(), vector.clone()));
        Ok(vector)
    }
}

/// `embedder`'s vectors for `texts` as `role`, checked to be one per text.
pub(super) async fn checked_embed(
    embedder: &dyn Embedder,
    texts: Vec<String>,
    role: EmbedRole,
) -> Result<Vec<Vec<f32>>, MemoryError> {
    let count = texts.len();
    let vectors = embedder.embed(texts, role).await.map_err(MemoryError::Embed)?;
    if vectors.len() != count {
        return Err(MemoryError::Embed(jarvis_model::ProviderError::stream(
            "embedder",
            "the embedder answered a different number of vectors than texts",
        )));
    }
    Ok(vectors)
}
