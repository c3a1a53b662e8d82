//! Injection (R-MEM-3..5, SPEC.md §17.3 #7): the one place memory enters a
//! request.
//!
//! The rules are documented on [`MemoryContext`].

use serde::{Deserialize, Serialize};

use jarvis_common::{char_len, truncate_with_marker};
use jarvis_model::Message;

/// One section of the memory message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SectionKind {
    /// `[목표]`: the active goals of the session's agent (not memory: it
    /// is there also when memory is off).
    Goals,
    /// `[포커스]`: the session's active Focus task (not memory either).
    Focus,
    /// `[핵심 사실]`: the user model and user-profile facts.
    KeyFacts,
    /// `[장기 기억]`: recalled episodes.
    LongTerm,
    /// `[절차 기억]`: recalled procedures.
    Procedures,
    /// `[작업 패턴]`: recalled task patterns.
    TaskPatterns,
    /// `[작업 공유 메모리]`: working memory.
    Working,
}

impl SectionKind {
    /// The sections in the order they appear (R-MEM-5).
    pub const ORDER: [SectionKind; 7] = [
        SectionKind::Goals,
        SectionKind::Focus,
        SectionKind::KeyFacts,
        SectionKind::LongTerm,
        SectionKind::Procedures,
        SectionKind::TaskPatterns,
        SectionKind::Working,
    ];

    /// The literal header.
    pub fn header(self) -> &'static str {
        match self {
            SectionKind::Goals => "[목표]",
            SectionKind::Focus => "[포커스]",
            SectionKind::KeyFacts => "[핵심 사실]",
            SectionKind::LongTerm => "[장기 기억]",
            SectionKind::Procedures => "[절차 기억]",
            SectionKind::TaskPatterns => "[작업 패턴]",
            SectionKind::Working => "[작업 공유 메모리]",
        }
    }
}

/// Characters each section may hold (its lines after the header, newlines
/// included).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SectionBudgets {
    /// `[목표]`. Default 600.
    pub goals: usize,
    /// `[포커스]`. Default 1,200.
    pub focus: usize,
    /// `[핵심 사실]`. Default 800.
    pub key_facts: usize,
    /// `[장기 기억]`. Default 1,500.
    pub long_term: usize,
    /// `[절차 기억]`. Default 1,500.
    pub procedures: usize,
    /// `[작업 패턴]`. Default 800.
    pub task_patterns: usize,
    /// `[작업 공유 메모리]`. Default 800.
    pub working: usize,
}

impl Default for SectionBudgets {
    fn default() -> Self {
        Self {
            goals: 600,
            focus: 1_200,
            key_facts: 800,
            long_term: 1_500,
            procedures: 1_500,
            task_patterns: 800,
            working: 800,
        }
    }
}

impl SectionBudgets {
    /// The budget of `kind`.
    pub fn of(&self, kind: SectionKind) -> usize {
        match kind {
            SectionKind::Goals => self.goals,
            SectionKind::Focus => self.focus,
            SectionKind::KeyFacts => self.key_facts,
            SectionKind::LongTerm => self.long_term,
            SectionKind::Procedures => self.procedures,
            SectionKind::TaskPatterns => self.task_patterns,
            SectionKind::Working => self.working,
        }
    }
}

/// A section as injected: its kind and the item lines that fit its budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemorySection {
    /// Which section.
    pub kind: SectionKind,
    /// Its items, each starting with `- `, in order.
    pub items: Vec<String>,
}

/// What one turn's recall found, ready to be put into every request of the
/// turn.
///
/// [`MemoryService::observe`](super::MemoryService::observe) recalls once per
/// turn and answers a [`MemoryContext`]; the loop passes every request's
/// history through [`MemoryContext::apply`] just before the model call
/// (steps, nudges, summaries and continuations alike). `apply`:
///
/// 1. keeps only the last 3 turns of the history (a turn starts at a `user`
///    message; the current turn counts as one), so older conversation
///    reaches the model only through recall;
/// 2. puts **one** `user` message right before them holding the sections,
///    in this fixed order and with these literal headers:
///
/// | header | holds |
/// |---|---|
/// | `[목표]` | the active goals of the session's agent |
/// | `[포커스]` | the session's active Focus task |
/// | `[핵심 사실]` | the user model and recalled user-profile facts |
/// | `[장기 기억]` | recalled episodes |
/// | `[절차 기억]` | recalled procedures |
/// | `[작업 패턴]` | recalled task patterns |
/// | `[작업 공유 메모리]` | the session's working memory |
///
/// Each section has a budget in characters ([`SectionBudgets`]): items go
/// in, best first, while they fit whole; an item longer than the whole
/// budget is cut to it, ending in `…`. Empty sections are left out, and with
/// no section at all there is no memory message.
///
/// `[목표]` and `[포커스]` are not recalled: the harness adds them
/// ([`with_sections`](Self::with_sections)) from what it was given, and
/// they open the message also when memory is off. With memory off the
/// whole history is kept ([`briefing`](Self::briefing)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryContext {
    sections: Vec<MemorySection>,
    message: Option<String>,
    history_turns: usize,
}

impl Default for MemoryContext {
    fn default() -> Self {
        Self::empty(3)
    }
}

impl MemoryContext {
    /// A context with no memory that keeps the last `history_turns` turns.
    pub fn empty(history_turns: usize) -> Self {
        Self {
            sections: Vec::new(),
            message: None,
            history_turns: history_turns.max(1),
        }
    }

    /// A context from candidate items per section, best first. Sections
    /// are put in the fixed order whatever the order given; each keeps the
    /// items that fit its budget; empty ones are dropped. Items are written
    /// as given after `- `.
    pub fn new(
        candidates: Vec<(SectionKind, Vec<String>)>,
        budgets: &SectionBudgets,
        history_turns: usize,
    ) -> Self {
        let mut sections = Vec::new();
        for kind in SectionKind::ORDER {
            let items: Vec<String> = candidates
                .iter()
                .filter(|(k, _)| *k == kind)
                .flat_map(|(_, items)| items.iter().cloned())
                .collect();
            let fitted = fit(items, budgets.of(kind));
            if !fitted.is_empty() {
                sections.push(MemorySection { kind, items: fitted });
            }
        }
        Self::from_sections(sections, history_turns)
    }

    /// A context that only carries `candidates` (goals, Focus) and keeps
    /// the whole history: what a turn gets when memory is off.
    pub fn briefing(candidates: Vec<(SectionKind, Vec<String>)>, budgets: &SectionBudgets) -> Self {
        Self::new(candidates, budgets, usize::MAX)
    }

    /// This context with `candidates` added (fitted to `budgets`), each
    /// replacing a section of its kind.
    pub fn with_sections(
        &self,
        candidates: Vec<(SectionKind, Vec<String>)>,
        budgets: &SectionBudgets,
    ) -> Self {
        let added = Self::new(candidates, budgets, self.history_turns).sections;
        let mut sections: Vec<MemorySection> = self
            .sections
            .iter()
            .filter(|s| added.iter().all(|a| a.kind != s.kind))
            .cloned()
            .collect();
        sections.extend(added);
        sections.sort_by_key(|s| s.kind);
        Self::from_sections(sections, self.history_turns)
    }

    fn from_sections(sections: Vec<MemorySection>, history_turns: usize) -> Self {
        let message = if sections.is_empty() {
            None
        } else {
            let blocks: Vec<String> = sections
                .iter()
                .map(|s| format!("{}\n{}", s.kind.header(), s.items.join("\n")))
                .collect();
            Some(blocks.join("\n\n"))
        };
        Self {
            sections,
            message,
            history_turns: history_turns.max(1),
        }
    }

    /// The sections that made it in, in order.
    pub fn sections(&self) -> &[MemorySection] {
        &self.sections
    }

    /// The section of `kind`, if it made it in.
    pub fn section(&self, kind: SectionKind) -> Option<&MemorySection> {
        self.sections.iter().find(|s| s.kind == kind)
    }

    /// The text of the memory message, when there is one.
    pub fn message(&self) -> Option<&str> {
        self.message.as_deref()
    }

    /// Whether no section made it in.
    pub fn is_empty(&self) -> bool {
        self.sections.is_empty()
    }

    /// Turns of conversation kept by [`apply`](Self::apply).
    pub fn history_turns(&self) -> usize {
        self.history_turns
    }

    /// The messages a model call sends for `history`: the last turns, with
    /// the memory message right before them (see [`MemoryContext`]).
    pub fn apply(&self, history: &[Message]) -> Vec<Message> {
        let kept = last_turns(history, self.history_turns);
        let mut out = Vec::with_capacity(kept.len() + 1);
        if let Some(message) = &self.message {
            out.push(Message::user(message.clone()));
        }
        out.extend_from_slice(kept);
        out
    }
}

/// The tail of `history` holding its last `turns` turns; a turn starts at a
/// `user` message. With fewer turns, all of it.
pub fn last_turns(history: &[Message], turns: usize) -> &[Message] {
    let turns = turns.max(1);
    let mut seen = 0;
    for (i, message) in history.iter().enumerate().rev() {
        if matches!(message, Message::User(_)) {
            seen += 1;
            if seen == turns {
                return &history[i..];
            }
        }
    }
    history
}

/// The items, as `- item` lines, that fit `budget` characters in order.
fn fit(items: Vec<String>, budget: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut used = 0;
    for item in items {
        let line = format!("- {}", item.trim());
        let line = if char_len(&line) > budget {
            truncate_with_marker(&line, budget)
        } else {
            line
        };
        // Lines after the first cost their newline too.
        let cost = char_len(&line) + usize::from(!out.is_empty());
        if line.chars().count() > 2 && used + cost <= budget {
            used += cost;
            out.push(line);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(n: usize) -> Vec<Message> {
        vec![
            Message::user(format!("q{n}")),
            Message::assistant_text(format!("a{n}")),
        ]
    }

    #[test]
    fn only_the_last_turns_follow_the_memory_message() {
        let history: Vec<Message> = (1..=5).flat_map(turn).collect();
        let ctx = MemoryContext::new(
            vec![(SectionKind::Working, vec!["w".into()])],
            &SectionBudgets::default(),
            3,
        );
        let out = ctx.apply(&history);
        assert_eq!(out.len(), 7);
        assert_eq!(out[0], Message::user("[작업 공유 메모리]\n- w"));
        assert_eq!(out[1], Message::user("q3"));
        let none = MemoryContext::empty(3).apply(&history[..4]);
        assert_eq!(none, history[..4].to_vec());
    }

    #[test]
    fn budgets_keep_whole_items_and_cut_a_giant() {
        let budgets = SectionBudgets {
            key_facts: 10,
            ..SectionBudgets::default()
        };
        let ctx = MemoryContext::new(
            vec![(
                SectionKind::KeyFacts,
                vec!["abcdefghijklmnop".into(), "xy".into(), "z".into()],
            )],
            &budgets,
            3,
        );
        let items = &ctx.section(SectionKind::KeyFacts).unwrap().items;
        assert_eq!(items, &["- abcdefg…"]);
        let ctx = MemoryContext::new(
            vec![(
                SectionKind::KeyFacts,
                vec!["ab".into(), "cdefgh".into(), "z".into()],
            )],
            &budgets,
            3,
        );
        // "- ab" (4) + "\n- z" (4) fit; "- cdefgh" would make 13.
        assert_eq!(ctx.section(SectionKind::KeyFacts).unwrap().items, ["- ab", "- z"]);
    }

    #[test]
    fn sections_come_in_the_fixed_order_and_empty_ones_are_absent() {
        let ctx = MemoryContext::new(
            vec![
                (SectionKind::Working, vec!["w".into()]),
                (SectionKind::Procedures, vec![]),
                (SectionKind::KeyFacts, vec!["k".into()]),
            ],
            &SectionBudgets::default(),
            3,
        );
        assert_eq!(ctx.message(), Some("[핵심 사실]\n- k\n\n[작업 공유 메모리]\n- w"));
        assert!(
            MemoryContext::new(vec![], &SectionBudgets::default(), 3)
                .message()
                .is_none()
        );
    }
}
