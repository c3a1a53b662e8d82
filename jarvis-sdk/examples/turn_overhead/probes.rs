//! The probes: a session store, the event subscriber, a security stage and
//! the thinking slot, each wrapping the real one and timing what it does.

use async_trait::async_trait;
use jarvis_sdk::agent::{
    AgentEvent, EntryBody, NewSession, SessionEntry, SessionError, SessionId, SessionMeta, SessionStore,
    ThinkingHook, ThinkingInput, ThinkingOutcome, TurnReport, UIAdapter,
};
use jarvis_sdk::turn::{SecurityError, SecurityInput, SecurityStage};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Nanoseconds since `since`, added to `counter`.
fn add(counter: &AtomicU64, since: Instant) {
    counter.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
}

/// A store that times the calls made on it.
#[derive(Debug)]
pub(crate) struct Timed {
    pub(crate) inner: Arc<dyn SessionStore>,
    pub(crate) read: AtomicU64,
    pub(crate) write: AtomicU64,
    pub(crate) phases: Arc<Phases>,
}

/// When this turn's phases ended: the harness reads the window (`recent`),
/// journals the turn's start and recalls (`observe`), runs the loop
/// (`agent_start` …), then appends and syncs the turn's block while the
/// turn episode is written (`record_turn`), and sends `agent_end` when both
/// are done. The recall column is `agent_start` minus the window read; the
/// memory-write column is the end of the turn minus the sync. With memory
/// off the same gaps are measured, so the two conditions compare like with
/// like.
#[derive(Debug, Default)]
pub(crate) struct Phases {
    pub(crate) read: Mutex<Option<Instant>>,
    pub(crate) synced: Mutex<Option<Instant>>,
    pub(crate) loop_started: Mutex<Option<Instant>>,
}

impl Phases {
    pub(crate) fn reset(&self) {
        *self.read.lock().unwrap() = None;
        *self.synced.lock().unwrap() = None;
        *self.loop_started.lock().unwrap() = None;
    }
}

#[async_trait]
impl SessionStore for Timed {
    async fn create(&self, new: NewSession) -> Result<SessionMeta, SessionError> {
        self.inner.create(new).await
    }
    async fn get(&self, id: &SessionId) -> Result<Option<SessionMeta>, SessionError> {
        let start = Instant::now();
        let out = self.inner.get(id).await;
        add(&self.read, start);
        out
    }
    async fn agent_of(&self, id: &SessionId) -> Result<Option<String>, SessionError> {
        let start = Instant::now();
        let out = self.inner.agent_of(id).await;
        add(&self.read, start);
        out
    }
    async fn append(&self, id: &SessionId, entries: Vec<EntryBody>) -> Result<u64, SessionError> {
        let start = Instant::now();
        let out = self.inner.append(id, entries).await;
        add(&self.write, start);
        out
    }
    async fn recent(&self, id: &SessionId, turns: usize) -> Result<Vec<SessionEntry>, SessionError> {
        let start = Instant::now();
        let out = self.inner.recent(id, turns).await;
        add(&self.read, start);
        *self.phases.read.lock().unwrap() = Some(Instant::now());
        out
    }
    async fn entries(&self, id: &SessionId) -> Result<Vec<SessionEntry>, SessionError> {
        self.inner.entries(id).await
    }
    async fn list(&self) -> Result<Vec<SessionMeta>, SessionError> {
        self.inner.list().await
    }
    async fn fork(&self, parent: &SessionId, child: SessionId) -> Result<SessionMeta, SessionError> {
        self.inner.fork(parent, child).await
    }
    async fn set_title(&self, id: &SessionId, title: Option<String>) -> Result<SessionMeta, SessionError> {
        self.inner.set_title(id, title).await
    }
    async fn sync(&self, id: &SessionId) -> Result<(), SessionError> {
        let start = Instant::now();
        let out = self.inner.sync(id).await;
        add(&self.write, start);
        *self.phases.synced.lock().unwrap() = Some(Instant::now());
        out
    }
}

/// The one event subscriber: serialises every event to JSON, as the web
/// server does, and times itself.
#[derive(Default)]
pub(crate) struct JsonEvents {
    pub(crate) spent: AtomicU64,
    pub(crate) buffer: Mutex<Vec<u8>>,
    pub(crate) phases: Arc<Phases>,
}

impl UIAdapter for JsonEvents {
    fn on_event(&self, event: &AgentEvent) -> ControlFlow<()> {
        let start = Instant::now();
        if matches!(event, AgentEvent::AgentStart { .. }) {
            *self.phases.loop_started.lock().unwrap() = Some(start);
        }
        let mut buffer = self.buffer.lock().unwrap();
        buffer.clear();
        serde_json::to_writer(&mut *buffer, event).unwrap();
        drop(buffer);
        add(&self.spent, start);
        ControlFlow::Continue(())
    }
}

/// A security stage that times the stage it wraps.
pub(crate) struct TimedStage {
    pub(crate) inner: Arc<dyn SecurityStage>,
    pub(crate) spent: Arc<AtomicU64>,
}

#[async_trait]
impl SecurityStage for TimedStage {
    fn name(&self) -> &str {
        self.inner.name()
    }
    async fn check(&self, input: &mut SecurityInput) -> Result<(), SecurityError> {
        let start = Instant::now();
        let out = self.inner.check(input).await;
        add(&self.spent, start);
        out
    }
}

/// A thinking slot that times the one it wraps, before the turn.
pub(crate) struct TimedThinking {
    pub(crate) inner: Arc<dyn ThinkingHook>,
    pub(crate) spent: Arc<AtomicU64>,
}

#[async_trait]
impl ThinkingHook for TimedThinking {
    async fn before_turn(&self, input: &ThinkingInput<'_>, ui: &dyn UIAdapter) -> ThinkingOutcome {
        let start = Instant::now();
        let out = self.inner.before_turn(input, ui).await;
        add(&self.spent, start);
        out
    }
    async fn after_turn(&self, report: &TurnReport) {
        self.inner.after_turn(report).await;
    }
}
