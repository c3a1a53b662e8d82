//! The prompt path over one store: sessions built as the app's session
//! builder builds them, and each turn run and timed into a [`Sample`].

use crate::floor::{Floor, floor_sample};
use crate::probes::{JsonEvents, Phases, Timed, TimedStage, TimedThinking};
use jarvis_sdk::agent::{
    Harness, LoopContext, NewSession, ScreenHub, SessionId, SessionKind, SessionStore, ThoughtConfig,
    ThoughtEngine, ToolGate,
};
use jarvis_sdk::common::SequentialIds;
use jarvis_sdk::memory::{
    DEFAULT_USER, InMemoryMemoryStore, MemoryRead, MemoryService, MemoryStore, PostgresMemoryStore,
    SqliteMemoryStore,
};
use jarvis_sdk::model::{FauxProvider, FauxReply, FauxScript, HashEmbedder, Provider};
use jarvis_sdk::turn::{
    AgentSession, AgentSessionParts, ApprovalBroker, Caller, LayeredApprovalRules, SecurityPipeline,
    SecurityStage, SessionPolicy, TokenAuth, Validation,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The threshold no `p_think` reaches: thinking on, routed off.
pub(crate) const ROUTED_OFF: f32 = 1.0;

/// The prompt of turn `n`.
pub(crate) fn prompt(n: usize) -> String {
    format!("Question {n}: which housing notices close this week?")
}

/// One turn's figures, in milliseconds.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sample {
    pub(crate) total: f64,
    pub(crate) read: f64,
    pub(crate) write: f64,
    pub(crate) events: f64,
    pub(crate) security: f64,
    pub(crate) recall: f64,
    pub(crate) memory_write: f64,
    pub(crate) thinking: f64,
    /// The floor, sampled right after this turn (fsync conditions).
    pub(crate) floor: f64,
}

fn ms(nanos: u64) -> f64 {
    nanos as f64 / 1e6
}

/// The prompt path over one store.
pub(crate) struct Bench {
    timed: Arc<Timed>,
    events: Arc<JsonEvents>,
    security: Arc<AtomicU64>,
    provider: Arc<dyn Provider>,
    rules: Arc<LayeredApprovalRules>,
    attached: Vec<jarvis_sdk::turn::SessionAttachment>,
    sessions: usize,
    memory: Option<Arc<MemoryService>>,
    phases: Arc<Phases>,
    /// With thinking on (routed off): the time its slot took.
    thinking: Option<Arc<AtomicU64>>,
    /// Sampled after every turn (see [`floor_sample`]).
    floor: Option<Floor>,
    /// The embedded memory store, when the memory is in one (its graphs
    /// are reported after the long session).
    pub(crate) embedded: Option<Arc<SqliteMemoryStore>>,
}

/// Where the benchmark's memory lives.
#[derive(Debug, Clone)]
pub(crate) enum Memory {
    Off,
    /// `InMemoryMemoryStore`.
    InProcess,
    /// `SqliteMemoryStore` in this file, as a home keeps it.
    Embedded(PathBuf),
    /// `PostgresMemoryStore` at this connection string (the default
    /// memory of a deployment on Postgres).
    Postgres(String),
}

impl Bench {
    pub(crate) async fn new(store: Arc<dyn SessionStore>, memory: Memory, with_thinking: bool) -> Self {
        let phases = Arc::new(Phases::default());
        let timed = Arc::new(Timed {
            inner: store,
            read: AtomicU64::new(0),
            write: AtomicU64::new(0),
            phases: phases.clone(),
        });
        let mut embedded = None;
        let store: Option<Arc<dyn MemoryStore>> = match memory {
            Memory::Off => None,
            Memory::InProcess => Some(Arc::new(InMemoryMemoryStore::new())),
            Memory::Embedded(path) => {
                let store = Arc::new(SqliteMemoryStore::open(path).await.unwrap());
                embedded = Some(store.clone());
                Some(store)
            }
            Memory::Postgres(url) => Some(Arc::new(PostgresMemoryStore::connect(&url).await.unwrap())),
        };
        let memory =
            store.map(|store| Arc::new(MemoryService::new(store, Arc::new(HashEmbedder::default()))));
        let events = Arc::new(JsonEvents {
            phases: phases.clone(),
            ..JsonEvents::default()
        });
        let script = FauxScript::new().fallback(FauxReply::text(
            "Noted. The notice closes on Friday; I will remind you the day before.",
        ));
        let faux = FauxProvider::new(script).unwrap().without_recording();
        let rules = Arc::new(LayeredApprovalRules::new(
            std::env::temp_dir().join("jarvis-turn-overhead-rules"),
        ));
        Self {
            timed,
            events,
            security: Arc::default(),
            provider: Arc::new(faux),
            rules,
            attached: Vec::new(),
            sessions: 0,
            memory,
            phases,
            thinking: with_thinking.then(Arc::default),
            floor: None,
            embedded,
        }
    }

    /// Samples the floor after every turn from now on: an overwrite of
    /// `bytes` bytes in a preallocated, synced file in `dir`, then
    /// `fdatasync`.
    pub(crate) fn with_floor(&mut self, dir: &Path, bytes: usize) {
        self.floor = Some(Floor::new(dir, bytes));
    }

    fn timed(&self, stage: Arc<dyn SecurityStage>) -> Arc<dyn SecurityStage> {
        Arc::new(TimedStage {
            inner: stage,
            spent: self.security.clone(),
        })
    }

    /// A fresh, empty session, as the app's session builder would make it.
    pub(crate) async fn new_session(&mut self) -> Arc<AgentSession> {
        self.sessions += 1;
        let id = SessionId::new(format!("bench-{}", self.sessions)).unwrap();
        self.timed
            .create(NewSession::user(id.clone(), "main"))
            .await
            .unwrap();
        let screens = ScreenHub::new();
        let broker = ApprovalBroker::new(
            id.as_str(),
            self.rules.clone(),
            Arc::new(SequentialIds::default()),
        );
        let ctx = LoopContext::new(self.provider.clone())
            .with_ui(Arc::new(screens.clone()))
            .with_gate(ToolGate::new().with_approver(Arc::new(broker.clone())));
        let security = SecurityPipeline::new(
            self.timed(Arc::new(Validation::default())),
            self.timed(Arc::new(TokenAuth::default())),
            self.timed(Arc::new(SessionPolicy)),
        );
        let mut harness = Harness::new(self.timed.clone(), ctx);
        if let Some(memory) = &self.memory {
            harness = harness.with_memory(memory.clone(), DEFAULT_USER, MemoryRead::own_only());
        }
        let mut parts =
            AgentSessionParts::new(id, "main", SessionKind::User, security, harness, screens, broker);
        if let Some(spent) = &self.thinking {
            let engine = ThoughtEngine::new(
                self.provider.clone(),
                self.timed.clone(),
                ThoughtConfig {
                    threshold: ROUTED_OFF,
                    ..ThoughtConfig::default()
                },
            );
            parts = parts.with_thinking(Arc::new(TimedThinking {
                inner: Arc::new(engine),
                spent: spent.clone(),
            }));
        }
        let session = Arc::new(AgentSession::new(parts));
        // The one subscriber stays attached for the session's life.
        self.attached.push(session.attach(self.events.clone()));
        session
    }

    /// Runs turn `n` of `session` and answers its figures.
    pub(crate) async fn turn(&mut self, session: &AgentSession, n: usize) -> Sample {
        self.timed.read.store(0, Ordering::Relaxed);
        self.timed.write.store(0, Ordering::Relaxed);
        self.events.spent.store(0, Ordering::Relaxed);
        self.security.store(0, Ordering::Relaxed);
        if let Some(spent) = &self.thinking {
            spent.store(0, Ordering::Relaxed);
        }
        self.phases.reset();
        let start = Instant::now();
        session.prompt(prompt(n), Caller::Local).await.unwrap();
        let end = Instant::now();
        let total = end - start;
        let gap = |from: &Mutex<Option<Instant>>, to: Option<Instant>| match (*from.lock().unwrap(), to) {
            (Some(from), Some(to)) => to.saturating_duration_since(from).as_secs_f64() * 1e3,
            _ => f64::NAN,
        };
        let recall = gap(&self.phases.read, *self.phases.loop_started.lock().unwrap());
        let memory_write = gap(&self.phases.synced, Some(end));
        let floor = match &mut self.floor {
            Some(floor) => floor_sample(floor),
            None => f64::NAN,
        };
        Sample {
            floor,
            total: total.as_secs_f64() * 1e3,
            read: ms(self.timed.read.load(Ordering::Relaxed)),
            write: ms(self.timed.write.load(Ordering::Relaxed)),
            events: ms(self.events.spent.load(Ordering::Relaxed)),
            security: ms(self.security.load(Ordering::Relaxed)),
            recall,
            memory_write,
            thinking: self
                .thinking
                .as_ref()
                .map_or(0.0, |t| ms(t.load(Ordering::Relaxed))),
        }
    }

    /// Runs a fresh session of `turns` turns and answers every turn's figures.
    pub(crate) async fn session(&mut self, turns: usize) -> Vec<Sample> {
        let id = self.new_session().await;
        let mut samples = Vec::with_capacity(turns);
        for n in 1..=turns {
            samples.push(self.turn(&id, n).await);
        }
        samples
    }
}
