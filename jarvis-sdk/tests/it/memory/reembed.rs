//! Re-embedding while the service is in use: what is forgotten or
//! rewritten meanwhile is never brought back, records kept un-embedded
//! while the embedder was down are embedded once it answers, and the
//! background task lets go of the store when the service goes.

use futures::future::BoxFuture;
use jarvis_sdk::memory::{
    Agents, InMemoryMemoryStore, Layer, MemoryFilter, MemoryScope, MemoryService, MemoryStore, ReembedPhase,
    SectionKind,
};
use jarvis_sdk::model::{EmbedRole, Embedder, HashEmbedder, ProviderError};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::watch;

fn scope() -> MemoryScope {
    MemoryScope::new("u", "main", "s1")
}

/// The hash embedder under another name, whose calls wait while `gate`
/// is closed (`false`) and fail while `up` is off.
#[derive(Debug)]
struct Gated {
    inner: HashEmbedder,
    gate: watch::Sender<bool>,
    /// Calls that reached the embedder.
    calls: watch::Sender<usize>,
    up: AtomicBool,
}

impl Gated {
    fn new(open: bool, up: bool) -> Arc<Self> {
        Arc::new(Self {
            inner: HashEmbedder::default(),
            gate: watch::Sender::new(open),
            calls: watch::Sender::new(0),
            up: AtomicBool::new(up),
        })
    }
}

impl Embedder for Gated {
    fn embed(
        &self,
        texts: Vec<String>,
        role: EmbedRole,
    ) -> BoxFuture<'static, Result<Vec<Vec<f32>>, ProviderError>> {
        self.calls.send_modify(|n| *n += 1);
        let mut gate = self.gate.subscribe();
        let up = self.up.load(Ordering::SeqCst);
        let answer = self.inner.embed(texts, role);
        Box::pin(async move {
            let _ = gate.wait_for(|open| *open).await;
            if !up {
                return Err(ProviderError::stream("embedder", "connection refused"));
            }
            answer.await
        })
    }

    fn name(&self) -> &str {
        "gated"
    }
}

async fn texts(store: &dyn MemoryStore) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = store
        .list(&MemoryFilter::for_user("u").layer(Layer::Semantic, Agents::Any))
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.text, r.embedder))
        .collect();
    out.sort();
    out
}

async fn until(memory: &MemoryService, phase: ReembedPhase) {
    let mut updates = memory.reembedding_updates();
    tokio::time::timeout(Duration::from_secs(600), updates.wait_for(|s| s.phase == phase))
        .await
        .unwrap_or_else(|_| panic!("never {phase:?}: {:?}", memory.reembedding()))
        .unwrap();
}

#[tokio::test]
async fn a_fact_forgotten_or_rewritten_while_it_is_embedded_again_is_not_brought_back() {
    let store = Arc::new(InMemoryMemoryStore::new());
    let before = MemoryService::new(store.clone(), Arc::new(HashEmbedder::default()));
    before.remember(&scope(), "the door code is 4321").await.unwrap();
    before
        .remember(&scope(), "Seoyeon likes the cello")
        .await
        .unwrap();
    let pattern = before
        .remember_task_pattern(&scope(), "report", "sum the week")
        .await
        .unwrap();
    drop(before);

    let embedder = Gated::new(false, true);
    let memory = Arc::new(MemoryService::new(store.clone(), embedder.clone()));
    let pass = tokio::spawn({
        let memory = memory.clone();
        async move { memory.reembed_stale().await }
    });
    let mut calls = embedder.calls.subscribe();
    calls.wait_for(|n| *n >= 1).await.unwrap();
    assert_eq!(memory.reembedding().phase, ReembedPhase::Running);
    // While the batch is with the embedder: one fact is forgotten, the
    // pattern rewritten (its new text waits for the embedder too).
    let forgot = memory.forget(&scope(), "code is 4321").await.unwrap();
    let rewrite = tokio::spawn({
        let memory = memory.clone();
        async move {
            memory
                .remember_task_pattern(&scope(), "report", "sum the month")
                .await
        }
    });
    calls.wait_for(|n| *n >= 2).await.unwrap();
    embedder.gate.send_replace(true);
    rewrite.await.unwrap().unwrap();
    assert_eq!(forgot.records, 1);
    pass.await.unwrap().unwrap();
    assert_eq!(memory.reembedding().phase, ReembedPhase::Done);

    assert_eq!(
        texts(store.as_ref()).await,
        [("Seoyeon likes the cello".to_owned(), "gated".to_owned())],
        "the forgotten fact stayed gone"
    );
    let patterns = store.get(std::slice::from_ref(&pattern.id)).await.unwrap();
    assert_eq!(patterns[0].text, "report: sum the month", "the rewrite stands");
    assert_eq!(patterns[0].embedder, "gated");
}

#[tokio::test(start_paused = true)]
async fn memories_kept_while_the_embedder_is_down_are_embedded_once_it_answers() {
    let store = Arc::new(InMemoryMemoryStore::new());
    let embedder = Gated::new(true, false);
    let memory = Arc::new(MemoryService::new(store.clone(), embedder.clone()));
    let task = tokio::spawn(MemoryService::keep_embedded(Arc::downgrade(&memory)));
    until(&memory, ReembedPhase::Waiting).await;
    let status = memory.reembedding();
    assert!(status.error.unwrap().contains("connection refused"));
    assert_eq!(status.failures, 1);

    // Told while it is down: kept, un-embedded; recall finds it by its words.
    memory
        .remember(&scope(), "Seoyeon likes the cello")
        .await
        .unwrap();
    assert_eq!(
        texts(store.as_ref()).await,
        [("Seoyeon likes the cello".to_owned(), String::new())]
    );
    let context = memory.observe(&scope(), "what does Seoyeon like?").await.unwrap();
    let facts = context
        .section(SectionKind::KeyFacts)
        .expect("found by its words");
    assert!(facts.items[0].contains("Seoyeon likes the cello"), "{facts:?}");

    // It answers again: the next try (time runs on by itself here) embeds it.
    embedder.up.store(true, Ordering::SeqCst);
    until(&memory, ReembedPhase::Done).await;
    assert_eq!(
        texts(store.as_ref()).await,
        [("Seoyeon likes the cello".to_owned(), "gated".to_owned())]
    );
    let context = memory.observe(&scope(), "what does Seoyeon like?").await.unwrap();
    let facts = context.section(SectionKind::KeyFacts).unwrap().items.join("\n");
    assert!(facts.contains("cello"), "{facts}");

    // The task holds neither the service nor the store once it is gone.
    drop(memory);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(Arc::strong_count(&store), 1);
}
