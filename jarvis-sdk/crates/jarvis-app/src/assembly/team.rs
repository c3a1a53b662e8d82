//! The team: JARVIS's own profile, and the app as the directory
//! `ask_agent` delegates through (depth, bounce-back and busy rules).

use super::*;

pub(super) fn main_profile(
    config: &AppConfig,
    tools: &BTreeSet<String>,
    agent_only: &BTreeSet<String>,
) -> AgentProfile {
    AgentProfile {
        id: MAIN_AGENT.to_owned(),
        name: config.brand.name.clone(),
        description: "팀 총괄 (team lead)".to_owned(),
        quote: config.brand.quote.clone(),
        palette: Palette {
            primary: config.brand.primary.clone(),
            accent: config.brand.accent.clone(),
        },
        system_prompt: config.system_prompt.clone(),
        model: config.llm.model.clone(),
        max_tokens: None,
        temperature: None,
        tools: tools
            .iter()
            .filter(|t| !agent_only.contains(*t))
            .cloned()
            .collect(),
        mcp_tools: None,
        mcp_servers: Vec::new(),
        proactive: config.proactive,
        memory_read: MemoryRead::own_only(),
        boundaries: Boundaries::default(),
        sandbox: config.sandbox.clone(),
        thinking: config.thinking.clone(),
        feedback: Arc::new(CountingFeedback::default()),
        subagents: Vec::new(),
        budget: config.budget,
    }
}

/// Removes a pair from the delegations under way however the delegation ends.
pub(super) struct Delegating<'a> {
    set: &'a Mutex<BTreeSet<(String, String)>>,
    pair: (String, String),
}

impl Drop for Delegating<'_> {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.pair);
    }
}

#[async_trait]
impl AgentDirectory for AppInner {
    fn roster(&self) -> Vec<RosterEntry> {
        self.registry.roster()
    }

    /// Runs the callee's turn in `peer-<caller>-<callee>` (one session per
    /// ordered pair, reused), with `PEER_REQUEST_RULE` on each model call and
    /// approvals on the calling session's screens.
    async fn delegate(&self, d: Delegation) -> Result<String, DelegationError> {
        if !self.registry.contains(&d.callee) {
            return Err(DelegationError::UnknownAgent(d.callee));
        }
        let pair = (d.caller.clone(), d.callee.clone());
        if !self
            .delegating
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(pair.clone())
        {
            return Err(DelegationError::Busy {
                caller: d.caller,
                callee: d.callee,
            });
        }
        let _delegating = Delegating {
            set: &self.delegating,
            pair,
        };
        let failed = |message: String| DelegationError::Failed {
            callee: d.callee.clone(),
            message,
        };
        let peer_id =
            SessionId::new(format!("peer-{}-{}", d.caller, d.callee)).map_err(|e| failed(e.to_string()))?;
        self.store
            .get_or_create(NewSession::peer(peer_id.clone(), &d.caller, &d.callee))
            .await
            .map_err(|e| failed(e.to_string()))?;
        let peer = self.open(&peer_id).await.map_err(|e| failed(e.to_string()))?;
        // Approvals of the callee's tools go to the screens of the session
        // where the person started the chain (R-ASK-8), on every leg, with
        // the callee's own `boundaries.ask`.
        let origin = Some(d.chain.origin_session.as_str())
            .filter(|s| !s.is_empty())
            .unwrap_or(&d.caller_session);
        let callee_ask = self
            .registry
            .get(&d.callee)
            .map(|p| p.boundaries.ask.clone())
            .unwrap_or_default();
        let approver: Option<Arc<dyn Approver>> = match SessionId::new(origin) {
            Ok(origin_id) => match self.open(&origin_id).await {
                Ok(origin) => Some(Arc::new(origin.broker().for_agent(callee_ask))),
                Err(_) => None,
            },
            Err(_) => None,
        };
        let mut options = PromptOptions::from(Caller::Peer {
            agent_id: d.caller.clone(),
        });
        options.turn_instruction = Some(PEER_REQUEST_RULE.to_owned());
        options.extensions = Extensions::new().with(d.chain);
        options.approver = approver;
        options.parent_turn = Some(d.caller_turn).filter(|t| !t.is_empty());
        options.parent_usage = d.usage;
        match peer.prompt_with(d.request, options).await {
            Ok(outcome) if outcome.final_message.stop_reason == jarvis_agent::StopReason::Error => {
                Err(failed(
                    outcome
                        .error
                        .map(|e| e.to_string())
                        .unwrap_or_else(|| "the model failed".into()),
                ))
            }
            Ok(outcome) if outcome.final_message.content.trim().is_empty() => {
                Err(failed("it gave no answer".into()))
            }
            Ok(outcome) => Ok(outcome.final_message.content),
            Err(TurnError::Busy(_)) => Err(DelegationError::Busy {
                caller: d.caller,
                callee: d.callee,
            }),
            Err(error) => Err(failed(error.to_string())),
        }
    }
}

/// The team: JARVIS (the config's profile with `main.yaml` applied) and the
/// agents of the team directory and of the config's definitions (which
/// win), each checked against the app's tools; skipped definitions are
/// kept with their reasons.
pub(super) fn team_registry(
    config: &AppConfig,
    tools: &ToolRegistry,
    has_memory: bool,
    env: &dyn Fn(&str) -> Option<String>,
) -> AgentRegistry {
    // Known tools this app has not set up: a definition listing them is
    // not warned about every start; its sessions simply lack them.
    let unconfigured: BTreeSet<String> = [WEB_FETCH_TOOL, WEB_SEARCH_TOOL]
        .into_iter()
        .filter(|name| tools.get(name).is_none())
        .map(str::to_owned)
        .collect();
    let mut names: BTreeSet<String> = tools.names().map(str::to_owned).collect();
    names.insert("ask_agent".to_owned());
    if has_memory {
        names.insert(REMEMBER_TASK_PATTERN_TOOL.to_owned());
        names.insert(RECALL_EPISODES_TOOL.to_owned());
    }
    let agent_only: BTreeSet<String> = tools
        .names()
        .filter(|name| tools.get(name).is_some_and(|t| t.agent_only()))
        .map(str::to_owned)
        .collect();
    let mut main = main_profile(config, &names, &agent_only);
    let team = TeamContext {
        main: &main.clone(),
        app_tools: &names,
        agent_only: &agent_only,
        env,
        unconfigured: &unconfigured,
        budget: config.budget,
    };
    // JARVIS's own definition: `main.yaml` in the team directory, or one
    // given to the config (which wins).
    let main_yaml = config
        .definitions
        .iter()
        .find(|(id, _)| id == MAIN_AGENT)
        .map(|(_, y)| y.clone())
        .or_else(|| {
            ["main.yaml", "main.yml"]
                .iter()
                .find_map(|name| std::fs::read_to_string(config.team_dir.join(name)).ok())
        });
    if let Some(yaml) = main_yaml
        && let Err(reason) = apply_main_definition(&mut main, &yaml, &team)
    {
        tracing::warn!(%reason, "JARVIS's main.yaml was not applied; JARVIS runs with its defaults");
    }
    let (mut others, mut skipped) = load_team(&config.team_dir, &team);
    for (id, yaml) in config.definitions.iter().filter(|(id, _)| id != MAIN_AGENT) {
        match parse_definition(id, yaml, &team) {
            Ok(profile) => {
                others.retain(|p| p.id != profile.id);
                others.push(profile);
            }
            Err(reason) => {
                tracing::warn!(agent = %id, %reason, "agent definition skipped");
                skipped.push(crate::definition::Skipped {
                    path: PathBuf::from(format!("<{id}>")),
                    reason,
                });
            }
        }
    }
    others.sort_by(|a, b| a.id.cmp(&b.id));
    AgentRegistry::new(main, others, skipped)
}
