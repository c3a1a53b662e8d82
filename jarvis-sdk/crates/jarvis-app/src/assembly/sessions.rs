//! Sessions: what [`AppAssembly`] offers screens (create, open, list,
//! fork, record, resume) and how one session is built (the session
//! builder, R-ASM-4): its tools, gate, broker, pipeline and harness.

use super::*;

impl AppAssembly {
    /// The team.
    pub fn registry(&self) -> &AgentRegistry {
        &self.inner.registry
    }

    /// The session store.
    pub fn store(&self) -> &Arc<dyn SessionStore> {
        &self.inner.store
    }

    /// This node's link to the other nodes of its deployment: `Some` when
    /// sessions are in Postgres ([`StoreBackend::Postgres`]), `None`
    /// otherwise (see [`ClusterLink`](crate::ClusterLink)).
    pub fn cluster(&self) -> Option<&Arc<dyn crate::cluster::ClusterLink>> {
        self.inner.cluster.as_ref()
    }

    /// `JARVIS_HOME`.
    pub fn home(&self) -> &Path {
        &self.inner.config.home
    }

    /// The team directory.
    pub fn team_dir(&self) -> &PathBuf {
        &self.inner.config.team_dir
    }

    /// Why this model was chosen, when it was not configured explicitly
    /// (for example the offline demo); screens show it.
    pub fn notice(&self) -> Option<&str> {
        self.inner.notice.as_deref()
    }

    /// Whether the built-in offline demo script is playing (no model is
    /// configured); screens say so.
    pub fn is_demo(&self) -> bool {
        self.inner.demo
    }

    /// The model provider.
    pub fn provider(&self) -> &Arc<dyn Provider> {
        &self.inner.provider
    }

    /// The person's time zone (`JARVIS_TIME__ZONE`): what schedules, the
    /// AGENDA, usage by day and budgets read local times in.
    pub fn time_zone(&self) -> &TimeZone {
        &self.inner.config.agenda.time_zone
    }

    /// The AGENDA: every agent's schedules and promises, each with its
    /// agent's name and colour (R-AGENDA-1).
    pub async fn agenda(&self) -> Vec<AgendaItem> {
        self.inner.agenda().await
    }

    /// The notification dispatcher (`$JARVIS_HOME/notifications.yaml`);
    /// [`spawn_background`](Self::spawn_background) ticks it.
    pub fn notifier(&self) -> &Arc<Notifier> {
        &self.inner.notifier
    }

    /// Every agent's goals (`$JARVIS_HOME/goals/`).
    pub fn goals(&self) -> &Arc<GoalStore> {
        &self.inner.goals
    }

    /// Every session's Focus tasks (`$JARVIS_HOME/focus/`).
    pub fn focus(&self) -> &Arc<FocusStore> {
        &self.inner.focus
    }

    /// What a screen attaching to `session_id` is sent about its active
    /// Focus task: `focus_state` (with `busy`) and `focus_panel`; nothing
    /// without one.
    pub fn focus_events(&self, session_id: &str, busy: bool) -> Vec<AgentEvent> {
        match self.inner.focus.active(session_id) {
            Some(task) => {
                let log = self.inner.focus.log(&task.task_id);
                vec![task.state_event(busy), task.panel_event(&log)]
            }
            None => Vec::new(),
        }
    }

    /// The open-loop store.
    pub fn open_loops(&self) -> &Arc<dyn OpenLoopStore> {
        &self.inner.loops
    }

    /// The MCP servers: their state and tools (feature `mcp`).
    #[cfg(feature = "mcp")]
    pub fn mcp(&self) -> &Arc<jarvis_turn::McpHub> {
        &self.inner.mcp
    }

    /// The memory service, unless memory is off.
    pub fn memory(&self) -> Option<&Arc<MemoryService>> {
        self.inner.memory.as_ref()
    }

    /// The embedder of recall (what `$JARVIS_HOME/embedder.json` records),
    /// unless memory is off. How far re-embedding has come is
    /// [`MemoryService::reembedding`].
    pub fn embedder(&self) -> Option<&EmbedderChoice> {
        self.inner.embedder.as_ref()
    }

    /// The reflector every agent's thought engine runs after turns
    /// (procedure learning, failure reflection), unless memory is off.
    pub fn reflector(&self) -> Option<&Arc<Reflector>> {
        self.inner.learners.as_ref().map(|l| &l.reflector)
    }

    /// The user-model distiller, unless memory is off: it runs every N
    /// turns of an agent whose thinking is on, and on demand
    /// ([`Distiller::distil_now`] with the scope from
    /// [`AppAssembly::memory_scope`]).
    pub fn distiller(&self) -> Option<&Arc<Distiller>> {
        self.inner.learners.as_ref().map(|l| &l.distiller)
    }

    /// The memory scope of `agent`'s session `session_id` (the app's
    /// memory user and the agent's `memory.read`), unless memory is off or
    /// the agent is unknown.
    pub fn memory_scope(&self, agent: &str, session_id: &str) -> Option<MemoryScope> {
        self.inner.memory.as_ref()?;
        let profile = self.inner.registry.get(agent)?;
        Some(
            MemoryScope::new(self.inner.config.memory.user.clone(), agent, session_id)
                .with_read(profile.memory_read.clone()),
        )
    }

    /// Every tool of the app (each agent sees its own subset).
    pub fn tools(&self) -> &ToolRegistry {
        &self.inner.tools
    }

    /// The usage ledger: one row per turn that called the model, with its
    /// tokens and cost (`$JARVIS_HOME/usage.jsonl`).
    pub fn usage(&self) -> &Arc<UsageLedger> {
        self.inner.usage.ledger()
    }

    /// The price table (`$JARVIS_HOME/prices.yaml`).
    pub fn prices(&self) -> &Arc<PriceTable> {
        self.inner.usage.prices()
    }

    /// What records each turn's usage, priced, in the ledger; every session
    /// of the app uses it, and so may work that runs turns of its own.
    pub fn usage_meter(&self) -> &UsageMeter {
        &self.inner.usage
    }

    /// The ledger's rows grouped `by` agent, session or day, sorted by key;
    /// days are the person's (the AGENDA's zone,
    /// [`AgendaSettings::time_zone`](crate::AgendaSettings::time_zone)).
    pub fn usage_summary(&self, by: UsageBy) -> Vec<UsageSummary> {
        self.usage().summary(by, &self.inner.config.agenda.time_zone)
    }

    /// Adds an observer of every session's events, from now on.
    pub fn observe(&self, observer: Arc<dyn SessionObserver>) {
        self.inner
            .observers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(observer);
    }

    /// The reflection daemon: it reminds of due promises and delivers queued
    /// messages in the open sessions of proactive agents. It runs once
    /// [`AppAssembly::spawn_background`] starts it; tests call its `tick`.
    pub fn proactive(&self) -> &Arc<ProactiveDaemon> {
        &self.inner.proactive
    }

    /// A person's reaction to the proactive message `message_id` (the
    /// `proactive_feedback` client message); it reaches the feedback learner
    /// of the agent that sent it. Answers whether the message was one the
    /// daemon sent and had not had a reaction yet.
    pub fn proactive_feedback(&self, message_id: &str, reaction: Reaction) -> bool {
        self.proactive().feedback(message_id, reaction)
    }

    /// The scheduler: job files in `$JARVIS_HOME/schedules/` and the jobs
    /// defined in code (the packs', the external sources); each file job runs in the session
    /// `sched-<agent>-<job>` of its agent, and its answer reaches that
    /// agent's open screens as `proactive_message {kind: "answer"}`. It runs
    /// once [`AppAssembly::spawn_background`] starts it; tests call its `tick`.
    pub fn scheduler(&self) -> &Arc<Scheduler> {
        &self.inner.scheduler
    }

    /// Starts the app's background work until `cancel` fires: the
    /// scheduler, and the reflection daemon unless
    /// `JARVIS_REFLECTION__ENABLED` is off. Servers and terminals call it
    /// once; an embedding app that wants no jobs and no unprompted messages
    /// does not.
    pub fn spawn_background(&self, cancel: CancellationToken) -> Vec<tokio::task::JoinHandle<()>> {
        let supervisor = &self.inner.supervisor;
        let scheduler = self.inner.scheduler.clone();
        let token = cancel.clone();
        let mut tasks = vec![supervisor.spawn(BACKGROUND_SCHEDULER, cancel.clone(), move || {
            scheduler.clone().run(token.clone())
        })];
        if self.inner.config.reflection.enabled {
            let daemon = self.proactive().clone();
            let token = cancel.clone();
            tasks.push(supervisor.spawn(BACKGROUND_REFLECTION, cancel.clone(), move || {
                daemon.clone().run(token.clone())
            }));
        }
        if !self.inner.notifier.is_empty() {
            let notifier = self.inner.notifier.clone();
            let token = cancel.clone();
            tasks.push(supervisor.spawn(BACKGROUND_NOTIFICATIONS, cancel, move || {
                notifier.clone().run(NOTIFY_INTERVAL, token.clone())
            }));
        }
        tasks
    }

    /// The health of the background work, by task: what
    /// [`AppAssembly::spawn_background`] started (`scheduler`,
    /// `reflection`): running or restarting after a failure, and failures
    /// counted (a scheduled job that failed counts for `scheduler`); and,
    /// with memory on, the re-embedding `build_app` started (`embedding`):
    /// `restarting` while the embedder does not answer, its failed tries
    /// counted.
    pub fn background_health(&self) -> std::collections::BTreeMap<String, TaskHealth> {
        let mut health = self.inner.supervisor.health();
        if let Some(scheduler) = health.get_mut(BACKGROUND_SCHEDULER) {
            scheduler.failures += self.inner.scheduler.failed_runs();
        }
        if let Some(memory) = &self.inner.memory {
            let status = memory.reembedding();
            health.insert(
                BACKGROUND_EMBEDDING.to_owned(),
                TaskHealth {
                    status: if status.phase == ReembedPhase::Waiting {
                        TaskStatus::Restarting
                    } else {
                        TaskStatus::Ok
                    },
                    failures: status.failures,
                    restarts: 0,
                    last_failure: status.error,
                },
            );
        }
        health
    }

    /// Sessions built so far (open in this process), with their agents.
    pub fn open_sessions(&self) -> Vec<Arc<AgentSession>> {
        let sessions = self.inner.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.values().map(|l| l.session.clone()).collect()
    }

    /// Creates a new session of `agent` (`main` when `None`).
    pub async fn create_session(&self, agent: Option<&str>) -> Result<SessionMeta, AppError> {
        let agent = agent.unwrap_or(MAIN_AGENT);
        self.require_agent(agent)?;
        let id = SessionId::new(self.inner.config.ids.next_id("s-"))?;
        Ok(self.inner.store.create(NewSession::user(id, agent)).await?)
    }

    /// The session `default-<agent>`, created when missing (the CLI's).
    pub async fn default_session(&self, agent: &str) -> Result<SessionMeta, AppError> {
        self.require_agent(agent)?;
        let id = SessionId::default_for(agent)?;
        Ok(self
            .inner
            .store
            .get_or_create(NewSession::user(id, agent))
            .await?
            .0)
    }

    /// The session `id`, created for `agent` when it does not exist; an
    /// existing session keeps its own agent and `agent` is ignored
    /// (R-WEB-3, SPEC.md §17.3 #6).
    pub async fn open_or_create(
        &self,
        id: &SessionId,
        agent: Option<&str>,
    ) -> Result<Arc<AgentSession>, AppError> {
        if self.inner.store.get(id).await?.is_none() {
            let agent = agent.unwrap_or(MAIN_AGENT);
            self.require_agent(agent)?;
            self.inner
                .store
                .get_or_create(NewSession::user(id.clone(), agent))
                .await?;
        }
        self.inner.open(id).await
    }

    /// The open session `id` (built on first use, then shared by every screen).
    pub async fn session(&self, id: &SessionId) -> Result<Arc<AgentSession>, AppError> {
        self.inner.open(id).await
    }

    /// Starts or stops recording session `id`'s cassette, for good (see
    /// [`jarvis_turn::cassette`]); answers the cassette's path.
    pub async fn set_recording(&self, id: &SessionId, enabled: bool) -> Result<PathBuf, AppError> {
        let session = self.inner.open(id).await?;
        let cassette = session
            .cassette()
            .ok_or_else(|| AppError::Config(format!("session {id} has no cassette recorder")))?;
        cassette.set_enabled(enabled).map_err(|source| AppError::Io {
            what: format!("switching the recording of {id}"),
            source,
        })?;
        Ok(cassette.path().to_owned())
    }

    /// Resumes the turn waiting for a person that this node took over with
    /// session `id` from a node that stopped ([`SessionStore::adopted_turn`]):
    /// the turn joins this home's journal and goes on here, asking again
    /// (with the same request ids) what it was waiting for. `early` is a
    /// person's answer that reached this node before the request was asked
    /// again: applied the moment it is, when the turn was waiting for that
    /// request. Answers whether a turn was resumed.
    pub async fn resume_adopted(
        &self,
        id: &SessionId,
        early: Option<(&str, jarvis_agent::ApprovalDecision)>,
    ) -> Result<bool, AppError> {
        let Some(turn) = self.inner.store.adopted_turn(id) else {
            return Ok(false);
        };
        self.inner
            .journal
            .adopt(&turn)
            .await
            .map_err(|e| AppError::Config(e.to_string()))?;
        let session = self.session(id).await?;
        if let Some((request_id, decision)) = early
            && turn
                .approvals
                .iter()
                .any(|a| a.decision.is_none() && a.request.request_id == request_id)
        {
            session.broker().decide_early(request_id, decision);
        }
        let (settle, _asked_again) = turn.settle_for_resume();
        tracing::info!(session_id = %id, turn_id = %turn.turn_id(), "resuming a turn taken over from a node that stopped");
        Ok(session.resume(turn, settle))
    }

    /// Every session, newest first.
    pub async fn list_sessions(&self) -> Result<Vec<SessionMeta>, AppError> {
        Ok(self.inner.store.list().await?)
    }

    /// A session's metadata and entries.
    pub async fn session_entries(
        &self,
        id: &SessionId,
    ) -> Result<(SessionMeta, Vec<SessionEntry>), AppError> {
        let meta = self
            .inner
            .store
            .get(id)
            .await?
            .ok_or_else(|| jarvis_agent::SessionError::not_found(id))?;
        Ok((meta, self.inner.store.entries(id).await?))
    }

    /// A new MCP client session of `agent`, `mcp-<agent>-<n>` (kind `mcp`,
    /// read-only for people), titled `title`. `n` counts each agent's MCP
    /// sessions from 1 and never names a session that exists, so a restart
    /// does not reuse an id: the first number tried is one past how many
    /// MCP sessions of the agent the store holds, and taken ones are
    /// passed over.
    pub async fn create_mcp_session(
        &self,
        agent: &str,
        title: Option<&str>,
    ) -> Result<SessionMeta, AppError> {
        self.require_agent(agent)?;
        let mut numbers = self.inner.mcp_numbers.lock().await;
        let mut n = match numbers.get(agent) {
            Some(n) => *n,
            None => {
                let held = self
                    .inner
                    .store
                    .list()
                    .await?
                    .iter()
                    .filter(|s| s.kind == SessionKind::Mcp && s.agent_id == agent)
                    .count();
                held as u64 + 1
            }
        };
        loop {
            let id = SessionId::new(format!("mcp-{agent}-{n}"))?;
            if self.inner.store.get(&id).await?.is_none() {
                let mut new = NewSession::mcp(id, agent);
                if let Some(title) = title.map(str::trim).filter(|t| !t.is_empty()) {
                    new = new.with_title(jarvis_common::truncate_chars(
                        title,
                        jarvis_agent::MAX_TITLE_CHARS,
                    ));
                }
                let meta = self.inner.store.create(new).await?;
                numbers.insert(agent.to_owned(), n + 1);
                return Ok(meta);
            }
            n += 1;
        }
    }

    /// A fork of `id` with a new id; it keeps the parent's agent.
    pub async fn fork(&self, id: &SessionId) -> Result<SessionMeta, AppError> {
        let child = SessionId::new(self.inner.config.ids.next_id("s-"))?;
        Ok(self.inner.store.fork(id, child).await?)
    }

    pub(super) fn require_agent(&self, agent: &str) -> Result<(), AppError> {
        if self.inner.registry.contains(agent) {
            Ok(())
        } else {
            Err(AppError::UnknownAgent(agent.to_owned()))
        }
    }
}

impl AppInner {
    pub(super) async fn open(&self, id: &SessionId) -> Result<Arc<AgentSession>, AppError> {
        let used = self.uses.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(loaded) = self
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(id.as_str())
        {
            loaded.used = used;
            return Ok(loaded.session.clone());
        }
        let meta = self
            .store
            .get(id)
            .await?
            .ok_or_else(|| jarvis_agent::SessionError::not_found(id))?;
        let (built, screens) = self.build_session(&meta)?;
        if let Some(note) = self
            .interrupted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id.as_str())
        {
            built.note_interrupted(note);
        }
        let built = Arc::new(built);
        let bridge = screens.attach_observer(Arc::new(ObserverBridge {
            session_id: id.to_string(),
            agent_id: meta.agent_id.clone(),
            observers: self.observers.clone(),
        }));
        let (session, unload) = {
            let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
            let session = sessions
                .entry(id.to_string())
                .or_insert(Loaded {
                    session: built,
                    _bridge: bridge,
                    used,
                })
                .session
                .clone();
            (
                session,
                least_used_idle(&mut sessions, self.config.max_loaded_sessions),
            )
        };
        for id in unload {
            self.store.unload(&id).await;
        }
        Ok(session)
    }

    /// The session builder: one session's sandbox-bound tools, gate,
    /// approval broker, security pipeline, harness and screens.
    pub(super) fn build_session(&self, meta: &SessionMeta) -> Result<(AgentSession, ScreenHub), AppError> {
        let profile = self
            .registry
            .get(&meta.agent_id)
            .ok_or_else(|| AppError::UnknownAgent(meta.agent_id.clone()))?;
        let id = meta.id.clone();
        let screens = ScreenHub::new();
        let cassette = Arc::new(CassetteRecorder::new(
            &self.config.home.join(CASSETTES_DIR),
            id.as_str(),
            self.config.record,
            secrets(&self.config),
        ));
        let broker = ApprovalBroker::new(id.as_str(), self.rules.clone(), self.config.ids.clone())
            .with_cassette(cassette.clone())
            .with_timeout(self.config.approval_timeout)
            .with_ask_always(profile.boundaries.ask.iter().cloned())
            .with_journal(self.journal.clone(), self.config.clock.clone());
        let mut gate = ToolGate::new()
            .with_policy(Arc::new(
                AgentToolPolicy::new(&profile.id, Some(profile.tools.iter().cloned()))
                    .with_boundaries(&profile.boundaries)
                    .with_mcp_tools(profile.mcp_tools.clone()),
            ))
            .with_approver(Arc::new(broker.clone()));
        for hook in &self.config.hooks {
            gate = gate.with_hook(hook.clone());
        }
        let tools = self.session_tools(profile, &id)?;
        let ctx = LoopContext::new(self.provider.clone())
            .with_tools(tools)
            .with_gate(gate)
            .with_ui(Arc::new(screens.clone()))
            .with_ids(self.config.ids.clone())
            .with_model(ModelSettings {
                model: profile.model.clone(),
                system_prompt: Some(profile.system_prompt.clone()),
                max_tokens: profile.max_tokens,
                temperature: profile.temperature,
            })
            .with_identity(AgentIdentity {
                agent_id: profile.id.clone(),
                agent_name: profile.name.clone(),
                session_id: id.to_string(),
            });
        let mut harness = Harness::new(self.store.clone(), ctx)
            .with_config(HarnessConfig::default().with_loop_config(self.config.loop_config.clone()))
            .with_journal(self.journal.clone())
            .with_clock(self.config.clock.clone())
            .with_brief(Arc::new(BriefLink(self.me.clone())));
        if let Some(memory) = &self.memory {
            harness = harness.with_memory(
                memory.clone(),
                self.config.memory.user.clone(),
                profile.memory_read.clone(),
            );
        }
        let mut parts = AgentSessionParts::new(
            id,
            profile.id.clone(),
            meta.kind,
            self.security.clone(),
            harness,
            screens.clone(),
            broker,
        )
        .with_usage(self.usage.clone())
        .with_notifier(self.notifier.clone())
        .with_budget(profile.budget, &self.config.agenda.time_zone)
        .with_cassette(cassette);
        if self.config.agenda.open_loops {
            let judge: Arc<dyn LoopJudge> = if self.config.agenda.model_judge {
                Arc::new(ModelJudge::new(self.provider.clone(), profile.model.clone()))
            } else {
                Arc::new(RuleJudge)
            };
            parts = parts.with_open_loops(Arc::new(open_loops(&self.config, self.loops.clone(), judge)));
        }
        parts = parts.with_commands(Arc::new(self.slash_commands(profile, &screens)));
        if profile.thinking.enabled {
            parts = parts.with_thinking(Arc::new(self.thinking_engine(profile)));
        }
        Ok((AgentSession::with_dual(parts, self.config.dual.clone()), screens))
    }

    /// The tools of one session of `profile`: the app's tools its
    /// definition lists (its own confined built-ins first), its MCP tools,
    /// and `run_subagent` when it defines sub-agents.
    fn session_tools(&self, profile: &AgentProfile, id: &SessionId) -> Result<ToolRegistry, AppError> {
        let mut tools = ToolRegistry::new();
        for name in &profile.tools {
            let own = self.sandboxed.get(&profile.id).and_then(|tools| tools.get(name));
            if let Some(tool) = own.or_else(|| self.tools.get(name)) {
                register(&mut tools, tool.clone())?;
            }
        }
        #[cfg(feature = "mcp")]
        tools.add_source(self.mcp.source_for(&profile.id, profile.mcp_tools.clone()));
        if !profile.subagents.is_empty() {
            let memory = self.memory.as_ref().map(|service| {
                let scope = MemoryScope {
                    read: profile.memory_read.clone(),
                    ..MemoryScope::new(&self.config.memory.user, &profile.id, id.as_str())
                };
                (service.clone(), scope)
            });
            let runtime = SubagentRuntime::new(self.store.clone(), self.sub_sessions.clone(), memory)
                .with_usage(self.usage.clone());
            register(
                &mut tools,
                RunSubagentTool::new(profile.subagents.clone(), runtime).into_tool(),
            )?;
        }
        Ok(tools)
    }

    /// The slash commands of one session of `profile`, with every part the
    /// app has (distillation only where the agent's thinking is on: it is a
    /// model call).
    fn slash_commands(&self, profile: &AgentProfile, screens: &ScreenHub) -> StandardCommands {
        let mut commands = StandardCommands::new().with_agenda(
            Arc::new(AgendaLink(self.me.clone())),
            &self.config.agenda.time_zone,
        );
        if let Some(memory) = &self.memory {
            commands = commands.with_memory(memory.clone(), self.config.memory.user.clone());
        }
        if let Some(learners) = self.learners.as_ref().filter(|_| profile.thinking.enabled) {
            commands = commands.with_distiller(learners.distiller.clone());
        }
        commands
            .with_schedule(self.scheduler.clone())
            .with_goals(self.goals.clone())
            .with_cassettes(self.config.home.join(CASSETTES_DIR))
            .with_focus(self.focus.clone(), Arc::new(screens.clone()))
    }

    /// The thinking slot of `profile`'s sessions, with the app's learners.
    fn thinking_engine(&self, profile: &AgentProfile) -> ThoughtEngine {
        let mut engine = ThoughtEngine::new(
            self.provider.clone(),
            self.store.clone(),
            ThoughtConfig {
                threshold: profile.thinking.threshold,
                template: Some(self.config.home.join(THOUGHT_TEMPLATE_FILE)),
                model: profile.model.clone(),
                ..ThoughtConfig::default()
            },
        );
        if let Some(learners) = &self.learners {
            engine = engine
                .with_reflector(learners.reflector.clone())
                .with_distiller(learners.distiller.clone());
        }
        engine
    }
}

/// A session the app built.
pub(super) struct Loaded {
    pub(super) session: Arc<AgentSession>,
    pub(super) _bridge: HubAttachment,
    /// When it was last used (a count of uses).
    pub(super) used: u64,
}

/// Removes the least recently used sessions not in use until at most `max`
/// remain (or none can go); answers their ids, for the store to unload.
pub(super) fn least_used_idle(sessions: &mut HashMap<String, Loaded>, max: usize) -> Vec<SessionId> {
    if sessions.len() <= max {
        return Vec::new();
    }
    let mut idle: Vec<(u64, String)> = sessions
        .iter()
        // The map's own handle is the only one of an unused session.
        .filter(|(_, l)| Arc::strong_count(&l.session) == 1 && !l.session.in_use())
        .map(|(id, l)| (l.used, id.clone()))
        .collect();
    idle.sort();
    let excess = sessions.len() - max;
    let mut gone = Vec::new();
    for (_, id) in idle.into_iter().take(excess) {
        if let Some(loaded) = sessions.remove(&id) {
            gone.push(loaded.session.id().clone());
        }
    }
    gone
}
