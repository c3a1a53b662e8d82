//! Slash commands (SPEC.md §17.1 #12): `/remember`, `/forget`, `/distil`,
//! `/schedule`, `/agenda`, `/goals`, `/goal`, `/focus`, `/help`. A command is answered by Jarvis itself and never reaches the
//! model; its reply is shown like an answer but is not recorded in the
//! session, so it never enters the model's window either.
//!
//! A message is a command when it starts with `/` and a word of ASCII
//! letters followed by a space or the end (`/remember 내 생일은 3월 2일`,
//! `/help`); `/tmp/a.txt 읽어 줘` is not one. An unknown command answers with
//! the list of commands.

use async_trait::async_trait;
use std::fmt;
use std::sync::Arc;

use crate::agenda::AgendaSource;
use crate::focus::FocusStore;
use crate::goals::{GoalStore, goal_command};
use jarvis_agent::Distiller;
use jarvis_agent::UIAdapter;
use jarvis_common::TimeZone;
use jarvis_memory::{MemoryScope, MemoryService};
use jarvis_turn::{CommandContext, SlashCommands, parse_command};

/// Creates a job from `/schedule <when> <prompt>` for an agent; the
/// scheduler implements it.
#[async_trait]
pub trait ScheduleCommand: Send + Sync {
    /// Creates the job and answers a confirmation, or an error text that
    /// lists the accepted forms.
    async fn schedule(&self, agent_id: &str, spec: &str) -> Result<String, String>;
}

/// The standard commands. Parts that are missing (no memory, no
/// scheduler) make their commands answer that they are off.
pub struct StandardCommands {
    memory: Option<(Arc<MemoryService>, String)>,
    distiller: Option<Arc<Distiller>>,
    schedule: Option<Arc<dyn ScheduleCommand>>,
    agenda: Option<Arc<dyn AgendaSource>>,
    goals: Option<Arc<GoalStore>>,
    focus: Option<(Arc<FocusStore>, Arc<dyn UIAdapter>)>,
    cassettes: Option<std::path::PathBuf>,
    time_zone: TimeZone,
}

impl fmt::Debug for StandardCommands {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StandardCommands")
            .field("memory", &self.memory.is_some())
            .field("distiller", &self.distiller.is_some())
            .field("schedule", &self.schedule.is_some())
            .field("agenda", &self.agenda.is_some())
            .field("goals", &self.goals.is_some())
            .finish()
    }
}

/// `(name, usage, what it does)` of every command, for `/help`.
pub const COMMANDS: [(&str, &str, &str); 9] = [
    (
        "remember",
        "/remember <fact>",
        "keeps a fact about you in the profile every agent reads",
    ),
    (
        "forget",
        "/forget <text>",
        "removes every fact about you that contains <text> and never keeps it again",
    ),
    (
        "distil",
        "/distil",
        "distils facts about you from this agent's recent conversations into the user model now",
    ),
    (
        "schedule",
        "/schedule <when> <prompt>",
        "runs <prompt> with this session's agent at <when> (매일 9시, every 30m, at 2026-12-01 09:00, cron \"0 9 * * 1\")",
    ),
    ("agenda", "/agenda", "every agent's schedules, promises and goals"),
    ("goals", "/goals", "this agent's active goals"),
    (
        "goal",
        "/goal add <title> | done <id> | drop <id>",
        "sets a goal of this agent, or closes one as done or dropped",
    ),
    (
        "focus",
        "/focus [<task>]",
        "starts a Focus task (long multi-step work) in this session, or shows the active one",
    ),
    ("help", "/help", "this list"),
];

fn help() -> String {
    let mut out = String::from("명령 (commands):");
    for (_, usage, what) in COMMANDS {
        out.push_str(&format!("\n{usage} — {what}"));
    }
    out
}

impl StandardCommands {
    /// No parts yet: `/help` and `/agenda` (empty) work.
    pub fn new() -> Self {
        Self {
            memory: None,
            distiller: None,
            schedule: None,
            agenda: None,
            cassettes: None,
            time_zone: TimeZone::UTC,
            goals: None,
            focus: None,
        }
    }

    /// `/remember` writes to `memory` for `user`.
    pub fn with_memory(mut self, memory: Arc<MemoryService>, user: impl Into<String>) -> Self {
        self.memory = Some((memory, user.into()));
        self
    }

    /// `/distil` distils through `distiller` (without one, it answers that
    /// distillation is off).
    pub fn with_distiller(mut self, distiller: Arc<Distiller>) -> Self {
        self.distiller = Some(distiller);
        self
    }

    /// `/schedule` creates jobs through `schedule`.
    pub fn with_schedule(mut self, schedule: Arc<dyn ScheduleCommand>) -> Self {
        self.schedule = Some(schedule);
        self
    }

    /// `/agenda` lists `agenda`, with times local to `zone` (the person's).
    pub fn with_agenda(mut self, agenda: Arc<dyn AgendaSource>, zone: impl Into<TimeZone>) -> Self {
        self.agenda = Some(agenda);
        self.time_zone = zone.into();
        self
    }

    /// `/forget` also rewrites the cassettes in `dir` without the lines
    /// that hold the forgotten text (see [`jarvis_turn::cassette`]).
    pub fn with_cassettes(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.cassettes = Some(dir.into());
        self
    }

    /// `/goals` and `/goal` act on the session agent's goals in `goals`.
    pub fn with_goals(mut self, goals: Arc<GoalStore>) -> Self {
        self.goals = Some(goals);
        self
    }

    /// `/focus` starts and shows the session's Focus task in `focus`,
    /// telling the session's `screens`.
    pub fn with_focus(mut self, focus: Arc<FocusStore>, screens: Arc<dyn UIAdapter>) -> Self {
        self.focus = Some((focus, screens));
        self
    }

    fn focus(&self, ctx: &CommandContext<'_>, task: &str) -> String {
        let Some((store, screens)) = &self.focus else {
            return "포커스 작업이 꺼져 있어요. (Focus tasks are off.)".into();
        };
        if task.is_empty() {
            return match store.active(ctx.session_id) {
                Some(task) => {
                    let mut out = format!("포커스 (focus): {} {}", task.task_id, task.title);
                    for item in task.items().iter().skip(1) {
                        out.push('\n');
                        out.push_str(item);
                    }
                    out
                }
                None => "진행 중인 포커스 작업이 없어요. 사용법 (usage): /focus <task>".into(),
            };
        }
        if let Some(active) = store.active(ctx.session_id) {
            return format!(
                "이 세션은 이미 {} {} 작업 중이에요; 먼저 끝내 주세요. (This session already works on it.)",
                active.task_id, active.title
            );
        }
        match store.start(ctx.session_id, ctx.agent_id, task, &[]) {
            Ok(change) => {
                let _ = screens.on_event(&change.task.state_event(false));
                let _ = screens.on_event(&change.task.panel_event(&change.log));
                format!(
                    "포커스 작업을 시작했어요 (Focus task started): {} {}. 다음 메시지부터 이어서 해요.",
                    change.task.task_id, change.task.title
                )
            }
            Err(e) => format!("시작하지 못했어요 (not started): {e}"),
        }
    }

    /// The memory and the scope of `ctx`, or the reply saying memory is off.
    fn memory(&self, ctx: &CommandContext<'_>) -> Result<(&MemoryService, MemoryScope), String> {
        let (memory, user) = self
            .memory
            .as_ref()
            .ok_or("메모리가 꺼져 있어요. (Memory is off.)")?;
        Ok((
            memory,
            MemoryScope::new(user.clone(), ctx.agent_id, ctx.session_id),
        ))
    }

    async fn remember(&self, ctx: &CommandContext<'_>, fact: &str) -> String {
        let (memory, scope) = match self.memory(ctx) {
            Ok(found) => found,
            Err(off) => return off,
        };
        if fact.is_empty() {
            return "사용법 (usage): /remember <fact>".into();
        }
        match memory.remember(&scope, fact).await {
            Ok(_) => format!("기억했어요 (remembered): {fact}"),
            Err(e) => format!("기억하지 못했어요 (not remembered): {e}"),
        }
    }

    /// `/forget`: the reply never repeats the text. Recorded cassettes
    /// lose their lines holding it even when memory is off.
    async fn forget(&self, ctx: &CommandContext<'_>, text: &str) -> String {
        if text.is_empty() {
            return "사용법 (usage): /forget <text>".into();
        }
        let cassettes = self.forget_in_cassettes(text).await;
        let (memory, scope) = match self.memory(ctx) {
            Ok(found) => found,
            Err(off) => return format!("{off}{cassettes}"),
        };
        match memory.forget(&scope, text).await {
            Ok(done) => format!(
                "잊었어요: 사용자 모델 항목 {}개와 프로필 기록 {}개를 지웠고, 앞으로 기억하지 않아요. \
                 (Forgotten: {} user-model entries and {} profile records removed; it will not be kept again.){cassettes}",
                done.entries, done.records, done.entries, done.records
            ),
            Err(e) => format!("잊지 못했어요 (not forgotten): {e}{cassettes}"),
        }
    }

    /// Removes `text` from the cassettes; a sentence for the reply when
    /// lines went or the rewrite failed, else nothing.
    async fn forget_in_cassettes(&self, text: &str) -> String {
        let Some(dir) = self.cassettes.clone() else {
            return String::new();
        };
        let text = text.to_owned();
        let done =
            tokio::task::spawn_blocking(move || jarvis_turn::cassette::forget_in_cassettes(&dir, &text))
                .await;
        match done {
            Ok(Ok(0)) => String::new(),
            Ok(Ok(lines)) => format!(" 녹화에서 {lines}줄을 지웠어요. ({lines} cassette lines removed.)"),
            Ok(Err(e)) => format!(" 녹화를 고치지 못했어요 (cassettes not rewritten): {e}"),
            Err(e) => format!(" 녹화를 고치지 못했어요 (cassettes not rewritten): {e}"),
        }
    }

    async fn distil(&self, ctx: &CommandContext<'_>) -> String {
        let Some(distiller) = &self.distiller else {
            return "사용자 모델 정리가 꺼져 있어요 (생각이나 메모리가 꺼짐). \
                    (Distillation is off: thinking or memory is off.)"
                .into();
        };
        let scope = match self.memory(ctx) {
            Ok((_, scope)) => scope,
            Err(off) => return off,
        };
        match distiller.distil_now(&scope).await {
            Ok(done) => format!(
                "정리했어요: 일화 {}개에서 새 사실 {}개 (이미 있던 것 {}개, 잊은 것이라 뺀 것 {}개). \
                 (Distilled {} episodes: {} new facts, {} already known, {} refused as forgotten.)",
                done.episodes,
                done.added,
                done.duplicates,
                done.refused_forgotten,
                done.episodes,
                done.added,
                done.duplicates,
                done.refused_forgotten
            ),
            Err(e) => format!(
                "정리하지 못했어요 (not distilled): {}",
                jarvis_common::error_chain(&e)
            ),
        }
    }

    async fn schedule(&self, ctx: &CommandContext<'_>, spec: &str) -> String {
        let Some(schedule) = &self.schedule else {
            return "스케줄러가 꺼져 있어요. (The scheduler is off.)".into();
        };
        if spec.is_empty() {
            return "사용법 (usage): /schedule <when> <prompt>".into();
        }
        match schedule.schedule(ctx.agent_id, spec).await {
            Ok(confirmation) | Err(confirmation) => confirmation,
        }
    }

    async fn agenda(&self) -> String {
        let items = match &self.agenda {
            Some(agenda) => agenda.agenda().await,
            None => Vec::new(),
        };
        if items.is_empty() {
            return "AGENDA 가 비어 있어요. (The AGENDA is empty.)".into();
        }
        let mut out = String::from("AGENDA:");
        for item in items {
            out.push_str("\n- ");
            out.push_str(&item.line(&self.time_zone));
        }
        out
    }
}

impl Default for StandardCommands {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl SlashCommands for StandardCommands {
    async fn handle(&self, ctx: &CommandContext<'_>, text: &str) -> Option<String> {
        let (name, rest) = parse_command(text)?;
        Some(match name.as_str() {
            "remember" => self.remember(ctx, rest).await,
            "forget" => self.forget(ctx, rest).await,
            "distil" | "distill" => self.distil(ctx).await,
            "schedule" => self.schedule(ctx, rest).await,
            "agenda" => self.agenda().await,
            "goals" | "goal" => match &self.goals {
                Some(goals) => goal_command(goals, ctx.agent_id, &name, rest).await,
                None => "목표가 꺼져 있어요. (Goals are off.)".into(),
            },
            "focus" => self.focus(ctx, rest),
            "help" => help(),
            other => format!("/{other} 는 없는 명령이에요. (Unknown command.)\n{}", help()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn help_lists_every_command_and_unknown_ones_get_the_list() {
        let commands = StandardCommands::new();
        let ctx = CommandContext {
            agent_id: "main",
            session_id: "s1",
        };
        let help = commands.handle(&ctx, "/help").await.unwrap();
        for (name, _, _) in COMMANDS {
            assert!(help.contains(&format!("/{name}")), "{help}");
        }
        let unknown = commands.handle(&ctx, "/dance now").await.unwrap();
        assert!(
            unknown.contains("/dance") && unknown.contains("/remember"),
            "{unknown}"
        );
        assert_eq!(commands.handle(&ctx, "안녕").await, None);
        for command in ["/remember x", "/forget xy"] {
            let off = commands.handle(&ctx, command).await.unwrap();
            assert!(off.contains("Memory is off"), "{command}: {off}");
        }
        let off = commands.handle(&ctx, "/distil").await.unwrap();
        assert!(off.contains("Distillation is off"), "{off}");
    }
}
