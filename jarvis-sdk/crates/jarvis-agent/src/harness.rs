//! [`Harness`]: one turn of one session, from the store and back.
//!
//! A turn reads the session's recent window from its [`SessionStore`],
//! runs [`run_agent_loop`]'s loop, and writes the whole turn to the history
//! as **one contiguous block** when it ends (`turn_start`, the prompt, what
//! the loop produced, `turn_end`), then asks the store to make it durable
//! ([`SessionStore::sync`]). Only then does `agent_end` go out: an answer a
//! person saw is in the history as far as the store's durability setting
//! promises. Two turns of one session that overlap (a job in the background
//! and the person's next prompt) never interleave: each block lands whole,
//! in the order the turns end.
//!
//! While the turn runs, what it has done so far is kept in the
//! [`TurnJournal`] (the prompt, each step, each tool result, approval
//! requests and decisions), so a crash loses nothing:
//! [`Harness::resume_turn`] picks up a turn that was waiting for a person,
//! and [`PendingTurn::interrupted_block`] closes any other.
//!
//! Security and thinking wrap around this in the layers above; the harness
//! knows no HTTP and no screen beyond the [`UIAdapter`](super::ui::UIAdapter)
//! in its [`LoopContext`].
//!
//! With memory on ([`Harness::with_memory`], R-MEM-2) the harness calls the
//! [`MemoryService`] around the loop: before it, `observe` recalls once for
//! the prompt and the loop applies the answer before every model call;
//! after it, `record_turn` writes the turn episode (tools used, duration,
//! steps, overflows, `overflow: true` when `overflows ≥ 1`, stop reason)
//! and updates working memory. The episode is written while the history
//! block is being synced (so it adds nothing to the turn unless it is
//! slower than the sync), and both are done before `agent_end`: the next
//! turn's recall sees it, and a crash after `agent_end` loses neither. The scope is the
//! session's: the harness's agent, the session, the user and `memory.read`
//! given to `with_memory`. Memory failures never fail a turn: they are
//! logged and the turn runs (or is kept) without memory.
//!
//! A [`TurnBrief`] ([`Harness::with_brief`]) adds sections that are not
//! recalled, the agent's goals and the session's Focus task, at the head of
//! the same injected message; they are there also when memory is off (the
//! whole history is then kept after them).

use std::fmt;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use super::error::AgentError;
use super::event::AgentEvent;
use super::journal::{PendingTurn, TurnBegin, TurnJournal};
use super::run::{AgentLoopConfig, LoopContext, LoopOutcome, LoopState, Resume, TurnRecorder, run_loop};
use super::session::{EntryBody, SessionEntry, SessionError, SessionId, SessionStore};
use jarvis_common::{Clock, SystemClock, Timestamp, trace};
use jarvis_memory::{
    MemoryContext, MemoryRead, MemoryScope, MemoryService, SectionBudgets, SectionKind, TurnRecord,
};
use jarvis_model::{Message, ToolResultMessage};
use tracing::Instrument;

/// Settings of a [`Harness`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HarnessConfig {
    /// The loop's settings.
    pub loop_config: AgentLoopConfig,
    /// Turns of conversation the model receives, the current one included
    /// (R-MEM-3: 3). At least 1.
    pub history_turns: usize,
}

impl Default for HarnessConfig {
    fn default() -> Self {
        Self {
            loop_config: AgentLoopConfig::default(),
            history_turns: 3,
        }
    }
}

impl HarnessConfig {
    /// Sets the loop's settings.
    pub fn with_loop_config(mut self, loop_config: AgentLoopConfig) -> Self {
        self.loop_config = loop_config;
        self
    }

    /// Sets the turns the model receives (at least 1).
    pub fn with_history_turns(mut self, turns: usize) -> Self {
        self.history_turns = turns.max(1);
        self
    }
}

/// How a turn stands among others, for the journal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TurnOptions {
    /// The turn that delegated this one (`ask_agent`).
    pub parent_turn: Option<String>,
    /// Whether the turn may be resumed after a restart when it stops for a
    /// person (a person's turn in their own session).
    pub resumable: bool,
}

impl TurnOptions {
    /// Options of a turn a person started in their own session.
    pub fn resumable() -> Self {
        Self {
            parent_turn: None,
            resumable: true,
        }
    }

    /// Sets the delegating turn.
    pub fn with_parent(mut self, parent: Option<String>) -> Self {
        self.parent_turn = parent.filter(|p| !p.is_empty());
        self
    }
}

/// Runs turns of one agent's sessions against a store.
///
/// The agent is the one in the context's
/// [`identity`](LoopContext::identity); a session of another agent is
/// refused ([`SessionError::WrongAgent`]), since a session's agent never
/// changes (R-SESS-1).
///
/// ```
/// use std::sync::Arc;
/// use jarvis_agent::{Harness, LoopContext, MemorySessionStore, NewSession, SessionId, SessionStore};
/// use jarvis_model::FauxProvider;
/// use tokio_util::sync::CancellationToken;
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let store = Arc::new(MemorySessionStore::new());
/// let id = SessionId::default_for("main").unwrap();
/// store.create(NewSession::user(id.clone(), "main")).await.unwrap();
/// let faux = FauxProvider::from_yaml(r#"fallback: { text: "Hello." }"#).unwrap();
/// let harness = Harness::new(store.clone(), LoopContext::new(Arc::new(faux)));
/// let outcome = harness.run_turn(&id, "Hi", &CancellationToken::new()).await.unwrap();
/// assert_eq!(outcome.final_message.content, "Hello.");
/// // turn_start, the user message, the answer, turn_end
/// assert_eq!(store.entries(&id).await.unwrap().len(), 4);
/// # });
/// ```
#[derive(Clone)]
pub struct Harness {
    store: Arc<dyn SessionStore>,
    ctx: LoopContext,
    config: HarnessConfig,
    memory: Option<HarnessMemory>,
    journal: Arc<TurnJournal>,
    clock: Arc<dyn Clock>,
    brief: Option<Arc<dyn TurnBrief>>,
}

/// Sections a turn's requests open with that memory does not recall: the
/// agent's goals (`[목표]`) and the session's Focus task (`[포커스]`). The
/// assembly layer, which knows both, implements it.
#[async_trait::async_trait]
pub trait TurnBrief: Send + Sync {
    /// The candidate items per section for a turn of `agent_id` in
    /// `session_id`, best first (each is fitted to its budget).
    async fn sections(&self, agent_id: &str, session_id: &str) -> Vec<(SectionKind, Vec<String>)>;
}

/// The memory a harness uses: the service and the scope's user and reads.
#[derive(Clone, Debug)]
struct HarnessMemory {
    service: Arc<MemoryService>,
    user: String,
    read: MemoryRead,
}

impl fmt::Debug for Harness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Harness")
            .field("store", &self.store)
            .field("ctx", &self.ctx)
            .field("config", &self.config)
            .field("memory", &self.memory)
            .field("journal", &self.journal.path())
            .finish()
    }
}

/// Journals what a turn records as it goes.
struct JournalRecorder {
    journal: Arc<TurnJournal>,
    turn_id: String,
}

impl TurnRecorder for JournalRecorder {
    fn step(&self, message: &Message, state: &LoopState) {
        self.journal.step(&self.turn_id, message, state);
    }

    fn result(&self, result: &ToolResultMessage) {
        self.journal.result(&self.turn_id, result);
    }
}

impl Harness {
    /// A harness over `store` running the loop with `ctx` and default
    /// settings; turns in progress are journaled in memory only until
    /// [`with_journal`](Self::with_journal) names a journal.
    pub fn new(store: Arc<dyn SessionStore>, ctx: LoopContext) -> Self {
        Self {
            store,
            ctx,
            config: HarnessConfig::default(),
            memory: None,
            journal: Arc::new(TurnJournal::in_memory()),
            clock: Arc::new(SystemClock),
            brief: None,
        }
    }

    /// Opens every turn's injected message with `brief`'s sections.
    pub fn with_brief(mut self, brief: Arc<dyn TurnBrief>) -> Self {
        self.brief = Some(brief);
        self
    }

    /// Turns memory on: each turn's scope is `user`'s, with this harness's
    /// agent, the turn's session, and `read` (the agent definition's
    /// `memory.read`). For a peer session pass the *caller's* user
    /// (R-MEM-12): the callee reads that user's profile and writes into its
    /// own scope. While memory is on, the turns the model sees are the
    /// memory's ([`MemoryConfig::history_turns`](jarvis_memory::MemoryConfig::history_turns), 3).
    pub fn with_memory(
        mut self,
        service: Arc<MemoryService>,
        user: impl Into<String>,
        read: MemoryRead,
    ) -> Self {
        self.memory = Some(HarnessMemory {
            service,
            user: user.into(),
            read,
        });
        self
    }

    /// Journals turns in progress in `journal` (the app's, shared by every
    /// harness of a home).
    pub fn with_journal(mut self, journal: Arc<TurnJournal>) -> Self {
        self.journal = journal;
        self
    }

    /// The clock the journal's times come from (default the system clock).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The memory scope of a turn of `session`, when memory is on.
    pub fn memory_scope(&self, session: &SessionId) -> Option<MemoryScope> {
        self.memory.as_ref().map(|m| {
            MemoryScope::new(
                m.user.clone(),
                self.ctx.identity.agent_id.clone(),
                session.to_string(),
            )
            .with_read(m.read.clone())
        })
    }

    /// Sets the settings.
    pub fn with_config(mut self, config: HarnessConfig) -> Self {
        self.config = config;
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn SessionStore> {
        &self.store
    }

    /// The loop's context.
    pub fn context(&self) -> &LoopContext {
        &self.ctx
    }

    /// The journal of turns in progress.
    pub fn journal(&self) -> &Arc<TurnJournal> {
        &self.journal
    }

    /// Runs one turn of `session` on `prompt` and answers what the loop
    /// produced. `cancel` aborts the turn as in [`run_agent_loop`]; an
    /// aborted turn is recorded like any other.
    ///
    /// [`run_agent_loop`]: super::run_agent_loop
    pub async fn run_turn(
        &self,
        session: &SessionId,
        prompt: impl Into<String>,
        cancel: &CancellationToken,
    ) -> Result<LoopOutcome, AgentError> {
        self.run_turn_with(session, prompt, |_| {}, cancel).await
    }

    /// [`Harness::run_turn`], with `adjust` applied to this turn's copy of
    /// the loop context (a delegated turn's instruction, extensions, or the
    /// approver of the session that delegated).
    pub async fn run_turn_with(
        &self,
        session: &SessionId,
        prompt: impl Into<String>,
        adjust: impl FnOnce(&mut LoopContext),
        cancel: &CancellationToken,
    ) -> Result<LoopOutcome, AgentError> {
        self.run_turn_in(session, prompt, TurnOptions::default(), adjust, cancel)
            .await
    }

    /// [`Harness::run_turn_with`], with the turn's place among others
    /// (its delegating turn, whether it may resume after a restart).
    ///
    /// The history receives, when the turn ends, one block: `turn_start`
    /// (with the turn's id), the user message, the loop's new messages and
    /// `turn_end`; `agent_end` goes out after the block is synced.
    pub async fn run_turn_in(
        &self,
        session: &SessionId,
        prompt: impl Into<String>,
        options: TurnOptions,
        adjust: impl FnOnce(&mut LoopContext),
        cancel: &CancellationToken,
    ) -> Result<LoopOutcome, AgentError> {
        self.config.loop_config.validate()?;
        self.check_session(session).await?;
        let mut history = self.window(session).await?;
        let prompt: String = prompt.into();
        let turn_id = self.ctx.ids.next_id("t-");
        self.journal.begin(TurnBegin {
            turn_id: turn_id.clone(),
            session_id: session.to_string(),
            agent_id: self.ctx.identity.agent_id.clone(),
            at: Timestamp::from_system_time(self.clock.now()),
            prompt: prompt.clone(),
            parent: options.parent_turn,
            resumable: options.resumable,
        });
        self.store.turn_begins(session, &turn_id, &prompt);
        history.push(Message::user(prompt.clone()));
        let ctx = self.turn_context(session, &turn_id, adjust);
        let turn = self.drive(session, &turn_id, prompt, ctx, history, None, cancel);
        self.traced(session, turn).await
    }

    /// Picks up `pending`, a turn of `session` that was waiting for a
    /// person when the process stopped: its recorded steps are its history,
    /// calls already settled keep their results, `settled` adds results for
    /// the calls that will not run again (see
    /// [`PendingTurn::settle_for_resume`]), and the rest run through the
    /// gate (the approver finds its request in the journal and asks with
    /// the same id). The turn ends as any other: one block, then `agent_end`;
    /// it starts with `agent_start {resumed: true}`.
    pub async fn resume_turn(
        &self,
        pending: &PendingTurn,
        settled: Vec<ToolResultMessage>,
        adjust: impl FnOnce(&mut LoopContext),
        cancel: &CancellationToken,
    ) -> Result<LoopOutcome, AgentError> {
        self.config.loop_config.validate()?;
        let session = SessionId::new(pending.begin.session_id.as_str())?;
        self.check_session(&session).await?;
        let Some(last) = pending.steps.last() else {
            return Err(AgentError::InvalidConfig(
                "a turn can only resume from a recorded step".into(),
            ));
        };
        let turn_id = pending.turn_id().to_owned();
        let prompt = pending.begin.prompt.clone();
        let mut history = self.window(&session).await?;
        history.push(Message::user(prompt.clone()));
        let turn_start = history.len();
        for step in &pending.steps[..pending.steps.len() - 1] {
            history.push(step.message.clone());
            history.extend(step.results.iter().cloned().map(Message::Tool));
        }
        history.push(last.message.clone());
        for result in &settled {
            self.journal.result(&turn_id, result);
        }
        let mut known = last.results.clone();
        known.extend(settled);
        let resume = Resume {
            turn_start,
            state: last.state.clone(),
            known,
        };
        let ctx = self.turn_context(&session, &turn_id, adjust);
        let turn = self.drive(&session, &turn_id, prompt, ctx, history, Some(resume), cancel);
        self.traced(&session, turn).await
    }

    /// Runs `turn` in an `invoke_agent` span of its own, unless it runs in
    /// one already (an [`AgentSession`](crate::AgentSession) opens it
    /// before the security stages), and puts its outcome on that span.
    async fn traced(
        &self,
        session: &SessionId,
        turn: impl Future<Output = Result<LoopOutcome, AgentError>>,
    ) -> Result<LoopOutcome, AgentError> {
        if trace::in_invoke_agent() {
            return turn.await;
        }
        let identity = &self.ctx.identity;
        let span = trace::invoke_agent_span(&identity.agent_id, &identity.agent_name, session.as_str());
        let outcome = turn.instrument(span.clone()).await;
        record_turn_outcome(&span, &outcome);
        outcome
    }

    /// Checks that `session` exists and is this harness's agent's.
    async fn check_session(&self, session: &SessionId) -> Result<(), AgentError> {
        let agent_id = self
            .store
            .agent_of(session)
            .await?
            .ok_or_else(|| SessionError::not_found(session))?;
        if agent_id != self.ctx.identity.agent_id {
            return Err(SessionError::WrongAgent {
                session_id: session.to_string(),
                session_agent: agent_id,
                agent_id: self.ctx.identity.agent_id.clone(),
            }
            .into());
        }
        Ok(())
    }

    /// The messages of the turns before this one the model sees.
    async fn window(&self, session: &SessionId) -> Result<Vec<Message>, AgentError> {
        let previous = self.config.history_turns.max(1) - 1;
        let window = self.store.recent(session, previous).await?;
        Ok(history_messages(&window))
    }

    fn turn_context(
        &self,
        session: &SessionId,
        turn_id: &str,
        adjust: impl FnOnce(&mut LoopContext),
    ) -> LoopContext {
        let mut ctx = self.ctx.clone();
        ctx.identity.session_id = session.to_string();
        ctx.turn_id = turn_id.to_owned();
        ctx.recorder = Some(Arc::new(JournalRecorder {
            journal: self.journal.clone(),
            turn_id: turn_id.to_owned(),
        }));
        adjust(&mut ctx);
        ctx
    }

    /// Recall, the loop, then the turn's block, the episode and `agent_end`.
    #[allow(clippy::too_many_arguments)]
    async fn drive(
        &self,
        session: &SessionId,
        turn_id: &str,
        prompt: String,
        mut ctx: LoopContext,
        history: Vec<Message>,
        resume: Option<Resume>,
        cancel: &CancellationToken,
    ) -> Result<LoopOutcome, AgentError> {
        let memory = self.memory.as_ref().zip(self.memory_scope(session));
        let started = memory.as_ref().map(|(m, _)| m.service.clock().now());
        if let Some((m, scope)) = &memory {
            match m.service.observe(scope, &prompt).await {
                Ok(context) => ctx.memory = Some(Arc::new(context)),
                Err(e) => tracing::warn!(
                    session_id = %session,
                    "harness: memory recall failed, the turn runs without memory: {e}"
                ),
            }
        }
        if let Some(brief) = &self.brief {
            let sections = brief
                .sections(&self.ctx.identity.agent_id, session.as_str())
                .await;
            if sections.iter().any(|(_, items)| !items.is_empty()) {
                let budgets = memory
                    .as_ref()
                    .map_or_else(SectionBudgets::default, |(m, _)| m.service.config().budgets);
                ctx.memory = Some(Arc::new(match &ctx.memory {
                    Some(recalled) => recalled.with_sections(sections, &budgets),
                    None => MemoryContext::briefing(sections, &budgets),
                }));
            }
        }
        let outcome = match run_loop(&ctx, &self.config.loop_config, history, resume, cancel).await {
            Ok(outcome) => outcome,
            Err(e) => {
                self.journal.end(turn_id);
                return Err(e);
            }
        };

        // The episode is written while the block is synced: it is polled
        // first, so its store write (on a blocking thread, for stores that
        // block) is under way while this thread syncs the block.
        let episode = match (&memory, started) {
            (Some((m, scope)), Some(started)) => {
                let duration = m
                    .service
                    .clock()
                    .now()
                    .duration_since(started)
                    .unwrap_or_default();
                let stop_reason = serde_json::to_value(outcome.final_message.stop_reason)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default();
                let turn = TurnRecord::new(prompt.clone(), outcome.final_message.content.clone())
                    .with_tools(tools_used(&outcome.new_messages))
                    .with_outcome(duration, outcome.turns, outcome.overflows, stop_reason);
                Some(async move {
                    if let Err(e) = m.service.record_turn(scope, turn).await {
                        tracing::warn!(
                            session_id = %session,
                            "harness: the turn episode could not be written: {e}"
                        );
                    }
                })
            }
            _ => None,
        };

        let mut block: Vec<EntryBody> = Vec::with_capacity(outcome.new_messages.len() + 3);
        block.push(EntryBody::turn_start(turn_id));
        block.push(EntryBody::message(Message::user(prompt)));
        block.extend(outcome.new_messages.iter().cloned().map(EntryBody::message));
        block.push(EntryBody::TurnEnd {
            stop_reason: outcome.final_message.stop_reason,
            turns: outcome.turns,
            overflows: outcome.overflows,
        });
        let commit = async {
            self.store.append(session, block).await?;
            self.store.sync(session).await
        };
        let episode = async {
            if let Some(episode) = episode {
                episode.await;
            }
        };
        let ((), committed) = tokio::join!(episode, commit);
        if let Err(e) = &committed {
            // The journal keeps the turn: the next start closes it as
            // interrupted with what it recorded.
            tracing::error!(session_id = %session, error = %e, "harness: the turn could not be recorded");
            let _ = ctx.ui.on_event(&AgentEvent::AgentError {
                message: format!("the turn could not be recorded: {e}"),
            });
        } else {
            self.journal.end(turn_id);
        }
        let _ = ctx.ui.on_event(&outcome.end_event());
        committed?;
        Ok(outcome)
    }
}

/// The names of the tools called in `messages`, each once, in first-call order.
pub(crate) fn tools_used(messages: &[Message]) -> Vec<String> {
    let mut tools: Vec<String> = Vec::new();
    for message in messages {
        if let Message::Assistant(a) = message {
            for call in &a.tool_calls {
                if !tools.contains(&call.name) {
                    tools.push(call.name.clone());
                }
            }
        }
    }
    tools
}

/// The messages of `entries` as the model may see them.
///
/// A turn cut short by a crash can leave an assistant message whose tool
/// calls have no results, which providers refuse; such a message is dropped
/// together with the partial results, and so are tool results whose call is
/// not in the window.
pub(crate) fn history_messages(entries: &[SessionEntry]) -> Vec<Message> {
    let messages: Vec<&Message> = entries.iter().filter_map(SessionEntry::message).collect();
    let mut out = Vec::with_capacity(messages.len());
    let mut i = 0;
    while i < messages.len() {
        match messages[i] {
            Message::Assistant(a) if !a.tool_calls.is_empty() => {
                let end = i
                    + 1
                    + messages[i + 1..]
                        .iter()
                        .take_while(|m| matches!(m, Message::Tool(_)))
                        .count();
                let results = &messages[i + 1..end];
                let answered = a.tool_calls.iter().all(|call| {
                    results
                        .iter()
                        .any(|m| matches!(m, Message::Tool(t) if t.tool_call_id == call.id))
                });
                if answered {
                    out.extend(messages[i..end].iter().map(|m| (*m).clone()));
                } else {
                    tracing::warn!(
                        "harness: left out of the history an assistant message whose tool calls have no results (an interrupted turn)"
                    );
                }
                i = end;
            }
            Message::Tool(_) => i += 1,
            other => {
                out.push(other.clone());
                i += 1;
            }
        }
    }
    out
}

/// Puts a finished turn's token counts, or its failure, on its
/// `invoke_agent` span.
pub fn record_turn_outcome(span: &tracing::Span, outcome: &Result<LoopOutcome, AgentError>) {
    match outcome {
        Ok(outcome) => {
            trace::record_usage(
                span,
                outcome.usage_total.input_tokens,
                outcome.usage_total.output_tokens,
            );
            if outcome.error.is_some() {
                trace::record_error(span, "turn_error");
            }
        }
        Err(_) => trace::record_error(span, "agent_error"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jarvis_common::Timestamp;
    use jarvis_model::{AssistantMessage, ToolCall, ToolResultMessage};

    fn entries(messages: Vec<Message>) -> Vec<SessionEntry> {
        messages
            .into_iter()
            .enumerate()
            .map(|(i, m)| SessionEntry {
                v: 1,
                seq: i as u64 + 1,
                ts: Timestamp::EPOCH,
                body: EntryBody::message(m),
            })
            .collect()
    }

    fn calling(ids: &[&str]) -> Message {
        Message::Assistant(AssistantMessage {
            tool_calls: ids
                .iter()
                .map(|id| ToolCall {
                    id: (*id).into(),
                    name: "t".into(),
                    arguments: serde_json::json!({}),
                })
                .collect(),
            ..AssistantMessage::default()
        })
    }

    fn result(id: &str) -> Message {
        Message::Tool(ToolResultMessage {
            tool_call_id: id.into(),
            tool_name: "t".into(),
            content: "ok".into(),
            is_error: false,
        })
    }

    #[test]
    fn whole_tool_exchanges_are_kept() {
        let messages = vec![
            Message::user("u"),
            calling(&["a", "b"]),
            result("b"),
            result("a"),
            Message::assistant_text("done"),
        ];
        assert_eq!(history_messages(&entries(messages.clone())), messages);
    }

    #[test]
    fn unanswered_calls_and_orphan_results_are_left_out() {
        let messages = vec![
            result("orphan"),
            Message::user("u1"),
            calling(&["a", "b"]),
            result("a"),
            Message::user("u2"),
        ];
        assert_eq!(
            history_messages(&entries(messages)),
            vec![Message::user("u1"), Message::user("u2")]
        );
    }

    #[test]
    fn markers_are_not_messages() {
        let mut list = entries(vec![Message::user("u")]);
        list.insert(
            0,
            SessionEntry {
                v: 1,
                seq: 0,
                ts: Timestamp::EPOCH,
                body: EntryBody::TurnStart { turn_id: None },
            },
        );
        assert_eq!(history_messages(&list), vec![Message::user("u")]);
    }
}
