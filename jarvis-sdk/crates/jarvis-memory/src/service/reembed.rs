//! Re-embedding: records embedded by another embedder (or not at all) are
//! embedded again in the background, and where that stands ([`ReembedStatus`]).

use std::collections::{HashMap, HashSet};
use std::sync::Weak;
use std::time::Duration;
use tokio::sync::watch;

use super::MemoryService;
use super::embed::checked_embed;
use crate::error::MemoryError;
use jarvis_common::error_chain;
use jarvis_model::EmbedRole;

/// What the background re-embedding is doing ([`ReembedStatus::phase`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReembedPhase {
    /// Nothing has looked for stale records yet.
    Idle,
    /// Records embedded by another embedder (or not at all) are being
    /// embedded again.
    Running,
    /// The embedder did not answer; the next try waits (see
    /// [`MemoryService::keep_embedded`]).
    Waiting,
    /// Every record is embedded with the current embedder.
    Done,
}

impl ReembedPhase {
    /// `idle`, `running`, `waiting` or `done`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReembedPhase::Idle => "idle",
            ReembedPhase::Running => "running",
            ReembedPhase::Waiting => "waiting",
            ReembedPhase::Done => "done",
        }
    }
}

/// Where re-embedding stands: [`MemoryService::reembedding`], and
/// [`MemoryService::reembedding_updates`] to wait for a change.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct ReembedStatus {
    /// What it is doing.
    pub phase: ReembedPhase,
    /// Records embedded again since the service started.
    pub embedded: u64,
    /// Tries that failed since the service started (the embedder did not
    /// answer, or the store failed).
    pub failures: u64,
    /// Why the last try failed, while the phase is
    /// [`Waiting`](ReembedPhase::Waiting).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Default for ReembedStatus {
    fn default() -> Self {
        Self {
            phase: ReembedPhase::Idle,
            embedded: 0,
            failures: 0,
            error: None,
        }
    }
}

/// The first wait of [`MemoryService::keep_embedded`] after the embedder
/// failed; it doubles up to [`REEMBED_MAX_WAIT`].
const REEMBED_FIRST_WAIT: Duration = Duration::from_secs(5);

/// The longest wait between two tries of re-embedding.
const REEMBED_MAX_WAIT: Duration = Duration::from_secs(300);

/// Records re-embedded per embedder call.
const REEMBED_BATCH: usize = 64;

impl MemoryService {
    /// Re-embeds records whose embedding is missing or comes from another
    /// embedder (legacy rows, a changed embedder, records kept while the
    /// embedder did not answer); answers how many. Safe to run while the
    /// service is in use, and to stop at any point: what is left is found
    /// again by the next run. An app runs it in the background through
    /// [`keep_embedded`](Self::keep_embedded).
    pub async fn reembed_stale(&self) -> Result<usize, MemoryError> {
        self.reembed.send_modify(|s| {
            s.phase = ReembedPhase::Running;
            s.error = None;
        });
        let pass = reembed_pass(|| Some(self)).await;
        let pass = pass.map(|done| done.unwrap_or(0));
        self.reembed.send_modify(|s| match &pass {
            Ok(_) => s.phase = ReembedPhase::Done,
            Err(e) => {
                s.phase = ReembedPhase::Waiting;
                s.failures += 1;
                s.error = Some(error_chain(e));
            }
        });
        pass
    }

    /// Where re-embedding stands.
    pub fn reembedding(&self) -> ReembedStatus {
        self.reembed.borrow().clone()
    }

    /// Every change of [`reembedding`](Self::reembedding), for waiting on
    /// one (`wait_for(|s| s.phase == ReembedPhase::Done)`).
    pub fn reembedding_updates(&self) -> watch::Receiver<ReembedStatus> {
        self.reembed.subscribe()
    }

    /// Keeps every record embedded with the current embedder, until the
    /// service is dropped: runs [`reembed_stale`](Self::reembed_stale)'s
    /// pass, then waits for a record kept un-embedded. When the embedder
    /// does not answer, it logs it once, says
    /// [`Waiting`](ReembedPhase::Waiting), and tries again after 5 s,
    /// doubling to 5 minutes, or as soon as a turn finds the embedder
    /// answering. Recall meanwhile answers from the records already
    /// embedded with the current embedder; nothing falls back to another
    /// embedder.
    ///
    /// It holds the service only while it reads or writes the store, never
    /// while it waits for the embedder, so dropping the app releases the
    /// store. Spawn it: `tokio::spawn(MemoryService::keep_embedded(Arc::downgrade(&service)))`.
    pub async fn keep_embedded(service: Weak<MemoryService>) {
        let Some((wake, name)) = service
            .upgrade()
            .map(|s| (s.wake.0.clone(), s.embedder.name().to_owned()))
        else {
            return;
        };
        let mut wait = REEMBED_FIRST_WAIT;
        let mut last_error: Option<String> = None;
        let mut first = true;
        loop {
            if let Some(s) = service.upgrade() {
                s.reembed.send_modify(|st| st.phase = ReembedPhase::Running);
            }
            let mut pass = reembed_pass(|| service.upgrade()).await;
            // A start with nothing to embed again says so at once, then asks
            // the embedder once, so one that does not answer is said at start.
            if first && matches!(pass, Ok(Some(0))) {
                let Some(embedder) = service.upgrade().map(|s| {
                    s.reembed.send_modify(|st| st.phase = ReembedPhase::Done);
                    s.embedder.clone()
                }) else {
                    return;
                };
                if let Err(e) =
                    checked_embed(embedder.as_ref(), vec!["jarvis".to_owned()], EmbedRole::Document).await
                {
                    pass = Err(e);
                }
            }
            first = false;
            let Some(s) = service.upgrade() else {
                return;
            };
            match pass {
                Ok(None) => return,
                Ok(Some(done)) => {
                    if done > 0 || last_error.is_some() {
                        tracing::info!(
                            embedder = %name,
                            records = done,
                            "memory: every memory is embedded with the current embedder"
                        );
                        s.note_embedder(true);
                    }
                    s.reembed.send_modify(|st| {
                        st.phase = ReembedPhase::Done;
                        st.error = None;
                    });
                    wait = REEMBED_FIRST_WAIT;
                    last_error = None;
                    drop(s);
                    wake.notified().await;
                }
                Err(e) => {
                    let error = error_chain(&e);
                    let embedder_failed = matches!(e, MemoryError::Embed(_));
                    if last_error.as_deref() != Some(error.as_str()) {
                        if embedder_failed {
                            tracing::warn!(
                                embedder = %name,
                                retry_in = ?wait,
                                "memory: the embedder did not answer ({error}); it stays the embedder, recall answers from the memories already embedded with it, and re-embedding tries again later"
                            );
                        } else {
                            tracing::warn!(
                                embedder = %name,
                                retry_in = ?wait,
                                "memory: re-embedding failed ({error}); it tries again later"
                            );
                        }
                    }
                    if embedder_failed {
                        s.note_embedder(false);
                    }
                    s.reembed.send_modify(|st| {
                        st.phase = ReembedPhase::Waiting;
                        st.failures += 1;
                        st.error = Some(error.clone());
                    });
                    last_error = Some(error);
                    drop(s);
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = wake.notified() => {}
                    }
                    wait = (wait * 2).min(REEMBED_MAX_WAIT);
                }
            }
        }
    }
}

/// One re-embedding pass over the service `service()` gives (`None`: it is
/// gone, and so is the pass): batches of stale records, each embedded
/// without holding the service, then put back (under the profile lock,
/// held exclusively) when they still hold the text that was embedded and
/// are still stale, so a record forgotten or rewritten meanwhile is never
/// brought back. Answers how many were embedded again.
async fn reembed_pass<S>(service: impl Fn() -> Option<S>) -> Result<Option<usize>, MemoryError>
where
    S: std::ops::Deref<Target = MemoryService>,
{
    let mut done: HashSet<String> = HashSet::new();
    loop {
        let (batch, embedder) = {
            let Some(s) = service() else {
                return Ok(None);
            };
            let name = s.embedder.name().to_owned();
            (s.store.stale(&name, REEMBED_BATCH).await?, s.embedder.clone())
        };
        if batch.is_empty() {
            return Ok(Some(done.len()));
        }
        if batch.iter().any(|r| done.contains(&r.id)) {
            tracing::warn!("memory: records stay stale after re-embedding them; stopped");
            return Ok(Some(done.len()));
        }
        let texts = batch.iter().map(|r| r.text.clone()).collect();
        let vectors = checked_embed(embedder.as_ref(), texts, EmbedRole::Document).await?;
        let Some(s) = service() else {
            return Ok(None);
        };
        let name = embedder.name().to_owned();
        let embedded: HashMap<String, (String, Vec<f32>)> = batch
            .into_iter()
            .zip(vectors)
            .map(|(r, v)| (r.id, (r.text, v)))
            .collect();
        let ids: Vec<String> = embedded.keys().cloned().collect();
        let _profile = s.profile_lock.write().await;
        let current = s.store.get(&ids).await?;
        let mut puts = Vec::with_capacity(current.len());
        for mut record in current {
            let Some((text, vector)) = embedded.get(&record.id) else {
                continue;
            };
            if record.text != *text || record.embedder == name {
                continue;
            }
            record.embedding = vector.clone();
            record.embedder = name.clone();
            done.insert(record.id.clone());
            puts.push(s.store.put(record));
        }
        let count = puts.len() as u64;
        // ponytail: a rehearsal counted between the read above and these
        // puts is lost (recall does not take the lock); rare, and harmless.
        // Together, so a store that group-commits writes them in one go.
        futures::future::try_join_all(puts).await?;
        s.reembed.send_modify(|st| st.embedded += count);
    }
}
