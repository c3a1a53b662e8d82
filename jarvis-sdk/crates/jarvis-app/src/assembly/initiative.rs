//! The app as the initiative layer sees it: the scheduler's job runner,
//! the proactive daemon's sessions, the AGENDA and the turn brief.

use super::*;

/// Open loops over the app's `store`, judged by `judge`.
pub(super) fn open_loops(
    config: &AppConfig,
    store: Arc<dyn OpenLoopStore>,
    judge: Arc<dyn LoopJudge>,
) -> OpenLoops {
    OpenLoops::new(store, judge, config.clock.clone(), config.ids.clone())
        .with_time_zone(&config.agenda.time_zone)
}

/// The open sessions of people, as the reflection daemon sees them: each
/// with its agent's `proactive` flag and feedback learner. Peer sessions
/// are never spoken in.
pub(super) struct OpenSessions(pub(super) Weak<AppInner>);

impl ProactiveSessions for OpenSessions {
    fn targets(&self) -> Vec<ProactiveTarget> {
        let Some(app) = self.0.upgrade() else {
            return Vec::new();
        };
        app.user_sessions(|_| true)
            .into_iter()
            .filter_map(|session| {
                let profile = app.registry.get(session.agent_id())?;
                Some(ProactiveTarget {
                    proactive: profile.proactive,
                    feedback: profile.feedback.clone(),
                    session,
                })
            })
            .collect()
    }

    fn agent(&self, agent_id: &str) -> Option<AgentStance> {
        let app = self.0.upgrade()?;
        let profile = app.registry.get(agent_id)?;
        Some(AgentStance {
            proactive: profile.proactive,
            feedback: profile.feedback.clone(),
        })
    }
}

/// The AGENDA as its sessions' `/agenda` reaches it: a weak link, so a
/// session never keeps the app alive.
pub(super) struct AgendaLink(pub(super) Weak<AppInner>);

#[async_trait]
impl AgendaSource for AgendaLink {
    async fn agenda(&self) -> Vec<AgendaItem> {
        match self.0.upgrade() {
            Some(app) => app.agenda().await,
            None => Vec::new(),
        }
    }
}

/// The goals and Focus task of a turn, reached through a weak link.
pub(super) struct BriefLink(pub(super) Weak<AppInner>);

#[async_trait]
impl TurnBrief for BriefLink {
    async fn sections(&self, agent_id: &str, session_id: &str) -> Vec<(SectionKind, Vec<String>)> {
        match self.0.upgrade() {
            Some(app) => app.brief(agent_id, session_id).await,
            None => Vec::new(),
        }
    }
}

/// The scheduler's side of the app: it runs file jobs as their agents and
/// hands watch results to the reflection daemon.
#[derive(Debug)]
pub(super) struct AppJobs(pub(super) Arc<OnceLock<Weak<AppInner>>>);

impl AppJobs {
    pub(super) fn app(&self) -> Result<Arc<AppInner>, String> {
        self.0
            .get()
            .and_then(Weak::upgrade)
            .ok_or_else(|| "the app has shut down".to_owned())
    }
}

#[async_trait]
impl JobRunner for AppJobs {
    /// Runs the job's prompt in the session `sched-<agent>-<job>` of its
    /// agent (that agent's model, system prompt, tools and memory scope,
    /// R-SCHED-1), as the system, and sends the answer to every open screen
    /// of that agent's sessions as `proactive_message {kind: "answer"}`.
    async fn run(&self, job: &Job, _slot: Timestamp) -> Result<JobOutput, String> {
        let app = self.app()?;
        if !app.registry.contains(&job.agent) {
            return Err(format!("there is no agent {:?} in the team", job.agent));
        }
        let id = SessionId::new(format!("sched-{}-{}", job.agent, job.id)).map_err(|e| e.to_string())?;
        app.store
            .get_or_create(NewSession::job(id.clone(), &job.agent))
            .await
            .map_err(|e| e.to_string())?;
        let session = app.open(&id).await.map_err(|e| e.to_string())?;
        let caller = Caller::System {
            name: format!("scheduler:{}", job.id),
        };
        // Nobody watches the job's own session: a tool that needs approval
        // asks on the screens of the agent's open session, as a delegated
        // turn asks on its caller's (with none open, it is denied when the
        // request times out).
        let screens = app.user_sessions(|agent| agent == job.agent);
        let mut options = PromptOptions::from(caller);
        options.approver = screens
            .iter()
            .find(|s| s.id() != &id)
            .map(|s| Arc::new(s.broker().clone()) as Arc<dyn Approver>);
        let outcome = session
            .prompt_with(job.prompt.clone(), options)
            .await
            .map_err(|e| e.to_string())?;
        let text = outcome.final_message.content;
        for target in screens {
            target.announce(text.clone(), ProactiveKind::Answer);
        }
        Ok(JobOutput {
            session_id: Some(id.to_string()),
            text,
        })
    }
}

#[async_trait]
impl ProactiveSink for AppJobs {
    /// Queues `item`, durably; the daemon records it in its session exactly
    /// once (unless the agent is `proactive: false`).
    async fn enqueue(&self, item: OutboxItem) -> Result<(), String> {
        let app = self.app()?;
        app.proactive.enqueue(item).await.map_err(|e| e.to_string())?;
        Ok(())
    }

    fn has_agent(&self, agent_id: &str) -> bool {
        self.app().is_ok_and(|app| app.registry.contains(agent_id))
    }

    fn now(&self) -> Timestamp {
        match self.app() {
            Ok(app) => Timestamp::from_system_time(app.config.clock.now()),
            Err(_) => Timestamp::from_system_time(std::time::SystemTime::now()),
        }
    }
}

#[cfg(feature = "sources")]
#[async_trait]
impl jarvis_initiative::SourceReporter for AppJobs {
    /// Queues the report, durably, for the source agent's `default-<agent>`
    /// session, like a watch report: recorded exactly once by the daemon.
    async fn report(
        &self,
        source: &jarvis_initiative::Source,
        message_id: &str,
        text: &str,
    ) -> Result<(), String> {
        let app = self.app()?;
        let agent = &source.file.agent;
        let item = OutboxItem {
            message_id: message_id.to_owned(),
            session_id: format!("default-{agent}"),
            agent_id: agent.clone(),
            kind: ProactiveKind::Proactive,
            text: text.to_owned(),
            at: Timestamp::from_system_time(app.config.clock.now()),
            meta: serde_json::json!({ "source_id": source.id }),
        };
        app.proactive.enqueue(item).await.map_err(|e| e.to_string())?;
        Ok(())
    }
}

impl AppInner {
    /// The open people's sessions (never peer sessions) whose agent
    /// `agent` accepts, by id: a stable order, so a queued message goes to
    /// the same session each run.
    pub(super) fn user_sessions(&self, agent: impl Fn(&str) -> bool) -> Vec<Arc<AgentSession>> {
        let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let mut found: Vec<Arc<AgentSession>> = sessions
            .values()
            .map(|l| &l.session)
            .filter(|s| s.kind() == SessionKind::User && agent(s.agent_id()))
            .cloned()
            .collect();
        found.sort_by(|a, b| a.id().as_str().cmp(b.id().as_str()));
        found
    }

    /// Every agent's schedules, soonest first, then their promises: due
    /// ones by due time, then the others oldest first.
    pub(super) async fn agenda(&self) -> Vec<AgendaItem> {
        let mut items: Vec<AgendaItem> = self
            .scheduler
            .jobs()
            .into_iter()
            .filter(|info| info.job.enabled && info.next_run.is_some())
            .map(|info| {
                let (agent_name, color) = self.label(&info.job.agent);
                let (kind, detail) = self.job_kind(&info.job.id, info.trigger);
                AgendaItem {
                    kind,
                    id: info.job.id,
                    agent_id: info.job.agent,
                    agent_name,
                    color,
                    text: info.job.prompt,
                    when: info.next_run,
                    detail: Some(detail),
                    session_id: None,
                }
            })
            .collect();
        items.sort_by_key(|s| s.when.map(Timestamp::as_millis));
        items.extend(self.promises().await);
        items.extend(self.goal_items().await);
        items
    }

    /// How a job shows on the AGENDA: an external source's job as `source`
    /// (failing ones say so), any other as `schedule`.
    pub(super) fn job_kind(&self, job_id: &str, trigger: String) -> (AgendaKind, String) {
        #[cfg(feature = "sources")]
        if let Some(id) = job_id.strip_prefix(jarvis_initiative::SOURCE_JOB_PREFIX) {
            let health = self
                .source_status
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(id)
                .cloned()
                .unwrap_or_default();
            let detail = match health.error {
                Some(error) => format!("{trigger} · failing ({}×): {error}", health.failures),
                None => trigger,
            };
            return (AgendaKind::Source, detail);
        }
        let _ = job_id;
        (AgendaKind::Schedule, trigger)
    }

    /// Every agent's active goals: those with a due first, soonest first,
    /// then by agent and number.
    pub(super) async fn goal_items(&self) -> Vec<AgendaItem> {
        let zone = self.goals.zone();
        let agents = self.goals.agents().await.unwrap_or_else(|error| {
            tracing::warn!(%error, "the AGENDA's goals could not be read");
            Vec::new()
        });
        let mut goals: Vec<Goal> = Vec::new();
        for agent in &agents {
            match self.goals.active(agent).await {
                Ok(active) => goals.extend(active),
                Err(error) => {
                    tracing::warn!(%error, agent, "an agent's goals could not be read for the AGENDA")
                }
            }
        }
        goals.sort_by_key(|g| {
            (
                g.due_at(zone).map_or((1, 0), |d| (0, d.as_millis())),
                g.agent_id.clone(),
                g.number(),
            )
        });
        goals
            .into_iter()
            .map(|g| {
                let (agent_name, color) = self.label(&g.agent_id);
                AgendaItem {
                    kind: AgendaKind::Goal,
                    when: g.due_at(zone),
                    detail: Some(format!("{}%", g.progress)),
                    id: g.id,
                    agent_id: g.agent_id,
                    agent_name,
                    color,
                    text: g.title,
                    session_id: None,
                }
            })
            .collect()
    }

    /// What opens a turn's injected message besides memory.
    pub(super) async fn brief(&self, agent_id: &str, session_id: &str) -> Vec<(SectionKind, Vec<String>)> {
        let goals = self.goals.active(agent_id).await.unwrap_or_else(|error| {
            tracing::warn!(%error, agent = agent_id, "the agent's goals could not be read");
            Vec::new()
        });
        let focus = self
            .focus
            .active(session_id)
            .map(|t| t.items())
            .unwrap_or_default();
        vec![
            (SectionKind::Goals, goal_items(&goals, self.goals.zone())),
            (SectionKind::Focus, focus),
        ]
    }

    pub(super) async fn promises(&self) -> Vec<AgendaItem> {
        let loops = match self
            .loops
            .list(&LoopFilter {
                open_only: true,
                ..LoopFilter::default()
            })
            .await
        {
            Ok(loops) => loops,
            Err(error) => {
                tracing::warn!(%error, "the AGENDA's promises could not be read");
                Vec::new()
            }
        };
        let mut promises: Vec<AgendaItem> = loops
            .into_iter()
            .map(|l| {
                let (agent_name, color) = self.label(&l.agent_id);
                AgendaItem {
                    kind: AgendaKind::Promise,
                    id: l.id,
                    agent_id: l.agent_id,
                    agent_name,
                    color,
                    text: l.text,
                    when: l.due,
                    detail: l.condition,
                    session_id: Some(l.session_id),
                }
            })
            .collect();
        // Stable: loops come oldest first; those with a due time go first, soonest first.
        promises.sort_by_key(|p| p.when.map_or((1, 0), |w| (0, w.as_millis())));
        promises
    }

    /// An agent's name and colour for its AGENDA label; an agent no longer
    /// in the team keeps its id and JARVIS's colour.
    pub(super) fn label(&self, agent_id: &str) -> (String, String) {
        match self.registry.get(agent_id) {
            Some(p) => (p.name.clone(), p.palette.primary.clone()),
            None => (agent_id.to_owned(), self.registry.main().palette.primary.clone()),
        }
    }
}

/// The notification channels of the home, naming agents by their names.
pub(super) fn notifier_for(config: &AppConfig, registry: &AgentRegistry) -> Result<Arc<Notifier>, AppError> {
    let notifier = Notifier::open(
        &config.home,
        config.clock.clone(),
        config.agenda.time_zone.clone(),
    )
    .map_err(AppError::Config)?
    .with_agent_names(
        registry
            .agents()
            .iter()
            .map(|p| (p.id.clone(), p.name.clone()))
            .collect(),
    );
    Ok(Arc::new(notifier))
}

/// The scheduler with the packs' jobs and the external sources' jobs, and
/// the approval rules; on a deployment both share their state with the
/// other nodes.
pub(super) struct Jobs {
    pub(super) scheduler: Scheduler,
    pub(super) rules: LayeredApprovalRules,
    #[cfg(feature = "sources")]
    pub(super) source_status: jarvis_initiative::SourceStatus,
}

/// Builds the [`Jobs`] of an app: jobs run through `app_link`.
pub(super) fn scheduler_for(
    config: &AppConfig,
    app_link: &Arc<OnceLock<Weak<AppInner>>>,
    packs: PackParts,
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))] stores: &super::stores::StoreParts,
    #[cfg_attr(not(feature = "sources"), allow(unused_variables))] registry: &AgentRegistry,
) -> Result<Jobs, AppError> {
    let mut scheduler = Scheduler::new(
        &config.home,
        config.clock.clone(),
        Arc::new(AppJobs(app_link.clone())),
        SchedulerConfig {
            time_zone: config.agenda.time_zone.clone(),
            poll_interval: config.schedule_poll,
            ..SchedulerConfig::default()
        },
    )?;
    for job in packs.jobs {
        scheduler = scheduler.with_builtin(job);
    }
    #[cfg_attr(not(feature = "postgres"), allow(unused_mut))]
    let mut rules = LayeredApprovalRules::new(&config.home);
    // Several nodes on one Postgres: each slot runs on one node, and
    // `/schedule` and "always allow" write for the whole deployment.
    #[cfg(feature = "postgres")]
    if let Some(store) = &stores.deployment {
        scheduler = scheduler
            .with_slot_claim(Arc::new(crate::cluster::PostgresSlotClaim(store.clone())))
            .with_shared_jobs(Arc::new(crate::cluster::PostgresJobs(store.clone())));
        rules = rules.with_shared(Arc::new(crate::cluster::PostgresApprovalRules(store.clone())));
    }
    #[cfg(feature = "sources")]
    let source_status = jarvis_initiative::SourceStatus::default();
    #[cfg(feature = "sources")]
    {
        let seen = Arc::new(jarvis_initiative::SeenStore::new(&config.home));
        for source in jarvis_initiative::load_sources(&config.home, &packs.source_kinds) {
            if !registry.contains(&source.file.agent) {
                tracing::warn!(source = %source.id, agent = %source.file.agent, "external source skipped: its agent is not in the team");
                continue;
            }
            scheduler = scheduler.with_builtin(Arc::new(jarvis_initiative::SourceJob::new(
                source,
                seen.clone(),
                Arc::new(AppJobs(app_link.clone())),
                config.clock.clone(),
                source_status.clone(),
                config.agenda.time_zone.clone(),
            )));
        }
    }
    Ok(Jobs {
        scheduler,
        rules,
        #[cfg(feature = "sources")]
        source_status,
    })
}
