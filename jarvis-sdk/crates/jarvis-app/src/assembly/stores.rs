//! The stores an app keeps: the memory service and its store, open
//! loops, the outbox, goals, and the usage ledger with its price table.

use super::*;

/// The usage ledger and price table of `config`'s home:
/// `$JARVIS_HOME/usage.jsonl` (in the process when the app keeps its
/// sessions there, [`StoreBackend::Memory`]) and `$JARVIS_HOME/prices.yaml`
/// (missing: every cost unknown; malformed: the app does not start, and the
/// error names the file).
pub(super) fn usage_meter(config: &AppConfig) -> Result<UsageMeter, AppError> {
    let prices =
        PriceTable::load(config.home.join(PRICES_FILE)).map_err(|e| AppError::Config(e.to_string()))?;
    let ledger = match config.store {
        StoreBackend::Memory => UsageLedger::in_memory(),
        _ => UsageLedger::open(config.home.join(USAGE_FILE)).map_err(|e| AppError::Config(e.to_string()))?,
    };
    Ok(UsageMeter::new(
        Arc::new(ledger),
        Arc::new(prices),
        config.clock.clone(),
    ))
}

/// The memory service of `config`: its store (a given one, else Postgres
/// with the Postgres backend, else in memory), `embedder`, `JARVIS_HOME`
/// for procedures, and the user model: in Postgres beside memory in
/// Postgres (shared by every node), else the home's `user_model.json`.
pub(super) async fn memory_service(
    config: &AppConfig,
    embedder: Arc<dyn Embedder>,
) -> Result<Arc<MemoryService>, AppError> {
    let settings = &config.memory;
    let store: Arc<dyn MemoryStore> = match &settings.store {
        Some(store) => store.clone(),
        None => memory_store(config).await?,
    };
    let mut memory_config = settings.config.clone();
    memory_config.home = Some(config.home.clone());
    // Episodes are dated, and questions' periods read, in the person's zone.
    memory_config.time_zone = config.agenda.time_zone.clone();
    let service = MemoryService::new(store, embedder)
        .with_clock(config.clock.clone())
        .with_ids(config.ids.clone())
        .with_config(memory_config);
    #[cfg(feature = "postgres")]
    let service = match (&settings.store, memory_backend(config)) {
        (None, MemoryBackend::Postgres { url }) => service.with_user_model(
            jarvis_memory::UserModelStore::Postgres(jarvis_memory::PostgresUserModel::connect(&url).await?),
        ),
        _ => service,
    };
    Ok(Arc::new(service))
}

/// The memory backend `JARVIS_MEMORY__STORE` names, with `auto` resolved:
/// Postgres beside Postgres sessions, SQLite otherwise.
pub(super) fn memory_backend(config: &AppConfig) -> MemoryBackend {
    match (&config.memory.backend, &config.store) {
        (MemoryBackend::Auto, StoreBackend::Postgres { url }) => MemoryBackend::Postgres { url: url.clone() },
        (MemoryBackend::Auto, _) => MemoryBackend::Sqlite,
        (chosen, _) => chosen.clone(),
    }
}

/// The memory store `JARVIS_MEMORY__STORE` names (see [`MemoryBackend`]):
/// `auto` is Postgres beside Postgres sessions, SQLite in the home
/// otherwise.
pub(super) async fn memory_store(config: &AppConfig) -> Result<Arc<dyn MemoryStore>, AppError> {
    match memory_backend(config) {
        MemoryBackend::Memory => Ok(Arc::new(InMemoryMemoryStore::new())),
        #[cfg(feature = "sqlite")]
        MemoryBackend::Sqlite => {
            let store = jarvis_memory::SqliteMemoryStore::open_in_home(&config.home).await?;
            let report = store.open_report();
            tracing::info!(
                path = %store.path().display(),
                records = report.records,
                skipped = report.skipped,
                ms = report.elapsed.as_millis() as u64,
                "memory store opened"
            );
            Ok(Arc::new(store))
        }
        #[cfg(not(feature = "sqlite"))]
        MemoryBackend::Sqlite if config.memory.backend == MemoryBackend::Auto => {
            tracing::warn!(
                "this build has no SQLite store (cargo feature `sqlite`): memory is kept in the process"
            );
            Ok(Arc::new(InMemoryMemoryStore::new()))
        }
        #[cfg(not(feature = "sqlite"))]
        MemoryBackend::Sqlite => Err(AppError::Config(
            "JARVIS_MEMORY__STORE=sqlite, but this build has no SQLite store (cargo feature `sqlite`)".into(),
        )),
        #[cfg(feature = "postgres")]
        MemoryBackend::Postgres { url } => {
            Ok(Arc::new(jarvis_memory::PostgresMemoryStore::connect(&url).await?))
        }
        #[cfg(not(feature = "postgres"))]
        MemoryBackend::Postgres { .. } => Err(AppError::Config(
            "memory in Postgres, but this build has no Postgres store (cargo feature `postgres`)".into(),
        )),
        // Resolved above.
        MemoryBackend::Auto => Ok(Arc::new(InMemoryMemoryStore::new())),
    }
}

/// The reflector and the distiller every agent's thought engine shares
/// (per agent state lives inside them), with the app's model and JARVIS's
/// thinking settings (SPEC.md §17.3 #2).
pub(super) fn learners_for(
    config: &AppConfig,
    provider: &Arc<dyn Provider>,
    memory: &Arc<MemoryService>,
    scopes: Arc<dyn ScopeResolver>,
) -> Learners {
    let settings = &config.thinking;
    let reflection = ReflectionConfig {
        overflow_threshold: settings.reflect_after,
        learn_from_success: settings.learn_procedures,
        template: Some(config.home.join(REFLECTION_TEMPLATE_FILE)),
        model: config.llm.model.clone(),
        ..ReflectionConfig::default()
    };
    let distill = DistillConfig {
        every_turns: settings.distil_every,
        model: config.llm.model.clone(),
        ..DistillConfig::default()
    };
    Learners {
        reflector: Arc::new(Reflector::new(
            provider.clone(),
            memory.clone(),
            scopes.clone(),
            reflection,
        )),
        distiller: Arc::new(Distiller::new(provider.clone(), memory.clone(), scopes, distill)),
    }
}

/// The learners of an app with memory.
pub(super) struct Learners {
    pub(super) reflector: Arc<Reflector>,
    pub(super) distiller: Arc<Distiller>,
}

/// Where open loops are kept: Postgres with the Postgres backend,
/// `$JARVIS_HOME/openloops.jsonl` with JSONL, the process otherwise.
pub(super) async fn open_loop_store(config: &AppConfig) -> Result<Arc<dyn OpenLoopStore>, AppError> {
    let loop_error = |e: LoopError| AppError::Config(e.to_string());
    Ok(match &config.store {
        StoreBackend::Jsonl => Arc::new(JsonlOpenLoopStore::open(&config.home).map_err(loop_error)?),
        #[cfg(feature = "postgres")]
        StoreBackend::Postgres { url } => Arc::new(
            jarvis_agent::PostgresOpenLoopStore::connect(url)
                .await
                .map_err(loop_error)?,
        ),
        #[cfg(not(feature = "postgres"))]
        StoreBackend::Postgres { .. } => Arc::new(MemoryOpenLoopStore::new()),
        StoreBackend::Memory => Arc::new(MemoryOpenLoopStore::new()),
    })
}

/// The proactive outbox: `outbox.jsonl` in the home, or on Postgres the
/// table every node shares (a message outlives the node that queued it and
/// is recorded by the node owning its session).
pub(super) async fn outbox(config: &AppConfig) -> Result<Outbox, AppError> {
    let outbox = match &config.store {
        #[cfg(feature = "postgres")]
        StoreBackend::Postgres { url } => Outbox::postgres(url, DEFAULT_OUTBOX_CAPACITY).await,
        _ => Outbox::open(config.home.join(OUTBOX_FILE), DEFAULT_OUTBOX_CAPACITY),
    };
    outbox.map_err(|e| AppError::Config(e.to_string()))
}

/// Where goals are kept: Postgres with the Postgres backend (shared by
/// every node), `$JARVIS_HOME/goals/` otherwise.
pub(super) async fn goal_store(config: &AppConfig) -> Result<GoalStore, AppError> {
    let (clock, zone) = (config.clock.clone(), config.agenda.time_zone.clone());
    Ok(match &config.store {
        #[cfg(feature = "postgres")]
        StoreBackend::Postgres { url } => GoalStore::postgres(url, clock, zone)
            .await
            .map_err(|e| AppError::Config(e.to_string()))?,
        _ => GoalStore::new(&config.home, clock, zone),
    })
}

/// The session store of an app, and what a Postgres store brings with it.
pub(super) struct StoreParts {
    pub(super) store: Arc<dyn SessionStore>,
    /// This node's link to the others (a Postgres store).
    pub(super) cluster: Option<Arc<dyn crate::cluster::ClusterLink>>,
    /// The store as a node of a deployment, for the deployment-wide
    /// scheduler slots, jobs and approval rules.
    #[cfg(feature = "postgres")]
    pub(super) deployment: Option<jarvis_agent::PostgresSessionStore>,
}

/// Opens the sessions' store `config` names: JSONL files in the home (under
/// its lock), a node of a Postgres deployment, or the process.
pub(super) async fn session_store(config: &AppConfig, lock: &Arc<HomeLock>) -> Result<StoreParts, AppError> {
    let store: Arc<dyn SessionStore> = match &config.store {
        StoreBackend::Jsonl => {
            let options = JsonlOptions::default()
                .clock(config.clock.clone())
                .durability(config.durability);
            Arc::new(JsonlSessionStore::with_lock(lock.clone(), options)?)
        }
        #[cfg(feature = "postgres")]
        StoreBackend::Postgres { url } => {
            let node = jarvis_agent::NodeOptions::new(
                config
                    .node
                    .id
                    .clone()
                    .unwrap_or_else(jarvis_agent::NodeOptions::default_id),
            )
            .with_lease(config.node.lease)
            .with_home(config.home.display().to_string());
            let store = jarvis_agent::PostgresSessionStore::connect(url)
                .await?
                .with_clock(config.clock.clone())
                .with_node(node)
                .await?;
            let cluster = crate::cluster::PgCluster::start(url, store.clone()).await?;
            return Ok(StoreParts {
                store: Arc::new(store.clone()),
                cluster: Some(Arc::new(cluster)),
                deployment: Some(store),
            });
        }
        StoreBackend::Memory => Arc::new(jarvis_agent::MemorySessionStore::new()),
        #[cfg(not(feature = "postgres"))]
        StoreBackend::Postgres { .. } => {
            return Err(AppError::Config(
                "this build has no Postgres store (cargo feature `postgres`)".into(),
            ));
        }
    };
    Ok(StoreParts {
        store,
        cluster: None,
        #[cfg(feature = "postgres")]
        deployment: None,
    })
}

/// The stores of a home beside the sessions': memory (with an embedder),
/// open loops, the turn journal with the turns a stopped process left, the
/// outbox, usage, Focus tasks and goals.
pub(super) struct HomeStores {
    pub(super) memory: Option<Arc<MemoryService>>,
    pub(super) loops: Arc<dyn OpenLoopStore>,
    pub(super) journal: Arc<TurnJournal>,
    /// Turns in progress when the process last stopped, closed or resumed
    /// once the app stands.
    pub(super) pending_turns: Vec<PendingTurn>,
    /// Sub-agent runs are numbered on from the last `sub-<n>` of the home.
    pub(super) sub_sessions: Arc<std::sync::atomic::AtomicU64>,
    pub(super) outbox: Arc<Outbox>,
    pub(super) usage: UsageMeter,
    pub(super) focus: Arc<FocusStore>,
    pub(super) goals: Arc<GoalStore>,
}

/// Opens the [`HomeStores`] of `config`'s home next to the sessions'
/// `store`; memory only with an `embedder`.
pub(super) async fn home_stores(
    config: &AppConfig,
    store: &Arc<dyn SessionStore>,
    embedder: Option<Arc<dyn Embedder>>,
) -> Result<HomeStores, AppError> {
    let memory = match embedder {
        Some(embedder) => Some(memory_service(config, embedder).await?),
        None => None,
    };
    if let Some(service) = &memory {
        // Memories of another embedder are embedded again in the
        // background; the task ends when the service is dropped.
        tokio::spawn(MemoryService::keep_embedded(Arc::downgrade(service)));
    }
    let loops = open_loop_store(config).await?;
    let (journal, pending_turns) = TurnJournal::open(config.home.join(TURN_JOURNAL_FILE))
        .map_err(|e| AppError::Config(e.to_string()))?;
    // A node of a deployment keeps a turn waiting for a person with the
    // session's lease, so the node taking the session over resumes it.
    let journal = Arc::new(journal.with_mirror(store.clone()));
    let sub_sessions = Arc::new(std::sync::atomic::AtomicU64::new(last_sub_number(
        store.list().await?.iter().map(|m| m.id.as_str()),
    )));
    let outbox = Arc::new(outbox(config).await?);
    let usage = usage_meter(config)?;
    let focus = Arc::new(FocusStore::new(&config.home, config.clock.clone()));
    let goals = Arc::new(goal_store(config).await?);
    Ok(HomeStores {
        memory,
        loops,
        journal,
        pending_turns,
        sub_sessions,
        outbox,
        usage,
        focus,
        goals,
    })
}
