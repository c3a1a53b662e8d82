//! Working memory (R-MEM-1, 작업 기억): a few items per session, each with a
//! rehearsal count (되뇌기 횟수) and notes (메모).
//!
//! The rules are documented on [`WorkingMemory`].

use serde::{Deserialize, Serialize};

use jarvis_common::{Timestamp, truncate_with_marker};
use jarvis_model::cosine;

/// Settings of working memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkingConfig {
    /// Items kept per session; at least 1. Default 8.
    pub capacity: usize,
    /// Similarity at which a request uses an existing item. Default 0.6.
    pub match_similarity: f32,
    /// Notes kept per item. Default 3.
    pub notes: usize,
    /// An item's text is the request cut to this many characters. Default 200.
    pub item_chars: usize,
    /// A note is the answer's first line cut to this many characters. Default 120.
    pub note_chars: usize,
}

impl Default for WorkingConfig {
    fn default() -> Self {
        Self {
            capacity: 8,
            match_similarity: 0.6,
            notes: 3,
            item_chars: 200,
            note_chars: 120,
        }
    }
}

/// One item of working memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkingItem {
    /// What the session is working on (the request that started the item).
    pub text: String,
    /// How often a later request used it.
    pub rehearsal: u32,
    /// The first lines of the answers given about it, oldest first.
    #[serde(default)]
    pub notes: Vec<String>,
    /// When it was made.
    pub created_at: Timestamp,
    /// The session's turn counter when it was last used (or made).
    pub last_used: u64,
    /// The embedding of `text`; not stored, recomputed after loading.
    #[serde(skip)]
    pub embedding: Vec<f32>,
}

/// The working memory of one session.
///
/// **The rule.** After every turn the request is compared with the
/// session's items (cosine similarity of their embeddings):
///
/// 1. If the most similar item reaches [`WorkingConfig::match_similarity`]
///    (0.6), the request is *using* that item again: its rehearsal count
///    rises by one, it becomes the most recently used, and the first line of
///    the answer joins its notes (the last [`WorkingConfig::notes`], 3, are
///    kept).
/// 2. Otherwise the request becomes a new item (rehearsal 0), with the
///    answer's first line as its first note. When the session already holds
///    [`WorkingConfig::capacity`] items (8), the least active one is evicted
///    first: the lowest rehearsal count, then the least recently used, then
///    the oldest.
///
/// So one-off requests come and go, while what the session keeps coming
/// back to stays. The items are shown, most active first, in the
/// `[작업 공유 메모리]` section of every request of the session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkingMemory {
    /// The session.
    pub session_id: String,
    /// The user of the session's scope.
    pub user: String,
    /// The session's agent.
    pub agent_id: String,
    /// The items, in no particular order.
    #[serde(default)]
    pub items: Vec<WorkingItem>,
    /// Ids of this session's latest turn episodes, oldest first; recall
    /// leaves them out while their turns are still in the prompt.
    #[serde(default)]
    pub recent_episodes: Vec<String>,
    /// The id of this session's latest turn episode, which the next one
    /// names as the one before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_episode: Option<String>,
    /// Turns recorded so far.
    #[serde(default)]
    pub turns: u64,
}

impl WorkingMemory {
    /// An empty working memory.
    pub fn new(session_id: impl Into<String>, user: impl Into<String>, agent_id: impl Into<String>) -> Self {
        Self {
            session_id: session_id.into(),
            user: user.into(),
            agent_id: agent_id.into(),
            items: Vec::new(),
            recent_episodes: Vec::new(),
            last_episode: None,
            turns: 0,
        }
    }

    /// The items, most active first (rehearsal, then recent use, then age).
    pub fn by_activity(&self) -> Vec<&WorkingItem> {
        let mut items: Vec<&WorkingItem> = self.items.iter().collect();
        items.sort_by(|a, b| {
            b.rehearsal
                .cmp(&a.rehearsal)
                .then_with(|| b.last_used.cmp(&a.last_used))
                .then_with(|| b.created_at.cmp(&a.created_at))
        });
        items
    }

    /// Applies the rule (see [`WorkingMemory`]) for one finished turn.
    /// `request_embedding` is the embedding of `request`. Answers whether an
    /// existing item was used (true) or a new one made (false).
    pub fn record_turn(
        &mut self,
        request: &str,
        request_embedding: Vec<f32>,
        answer: &str,
        now: Timestamp,
        config: &WorkingConfig,
    ) -> bool {
        self.turns += 1;
        let note = first_line(answer, config.note_chars);
        let best = self
            .items
            .iter()
            .enumerate()
            .map(|(i, item)| (i, cosine(&item.embedding, &request_embedding)))
            .filter(|(_, s)| *s >= config.match_similarity)
            .max_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((i, _)) = best {
            let item = &mut self.items[i];
            item.rehearsal = item.rehearsal.saturating_add(1);
            item.last_used = self.turns;
            if let Some(note) = note
                && item.notes.last() != Some(&note)
            {
                item.notes.push(note);
            }
            let excess = item.notes.len().saturating_sub(config.notes);
            item.notes.drain(..excess);
            return true;
        }
        let capacity = config.capacity.max(1);
        while self.items.len() >= capacity {
            let least = self
                .items
                .iter()
                .enumerate()
                .min_by(|(_, a), (_, b)| {
                    a.rehearsal
                        .cmp(&b.rehearsal)
                        .then_with(|| a.last_used.cmp(&b.last_used))
                        .then_with(|| a.created_at.cmp(&b.created_at))
                })
                .map(|(i, _)| i);
            match least {
                Some(i) => {
                    self.items.remove(i);
                }
                None => break,
            }
        }
        self.items.push(WorkingItem {
            text: truncate_with_marker(request.trim(), config.item_chars),
            rehearsal: 0,
            notes: note.into_iter().take(config.notes).collect(),
            created_at: now,
            last_used: self.turns,
            embedding: request_embedding,
        });
        false
    }

    /// Remembers `episode_id` as this session's latest episode, keeping `keep`.
    pub(crate) fn push_episode(&mut self, episode_id: String, keep: usize) {
        self.last_episode = Some(episode_id.clone());
        self.recent_episodes.push(episode_id);
        let excess = self.recent_episodes.len().saturating_sub(keep);
        self.recent_episodes.drain(..excess);
    }
}

/// The first non-empty line of `text`, cut to `max` characters.
fn first_line(text: &str, max: usize) -> Option<String> {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| truncate_with_marker(l, max))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(i: usize) -> Vec<f32> {
        let mut v = vec![0.0; 16];
        v[i] = 1.0;
        v
    }

    fn config(capacity: usize) -> WorkingConfig {
        WorkingConfig {
            capacity,
            ..WorkingConfig::default()
        }
    }

    #[test]
    fn a_similar_request_rehearses_and_keeps_the_last_notes() {
        let mut wm = WorkingMemory::new("s", "u", "main");
        let c = config(8);
        assert!(!wm.record_turn("find notices", unit(0), "\n  first\nmore", Timestamp::EPOCH, &c));
        for n in 2..=5 {
            assert!(wm.record_turn(
                "find notices again",
                unit(0),
                &format!("answer {n}"),
                Timestamp::EPOCH,
                &c
            ));
        }
        assert_eq!(wm.items.len(), 1);
        let item = &wm.items[0];
        assert_eq!(item.rehearsal, 4);
        assert_eq!(item.notes, ["answer 3", "answer 4", "answer 5"]);
        assert_eq!(item.text, "find notices");
        assert_eq!(item.last_used, 5);
    }

    #[test]
    fn the_least_active_item_is_evicted() {
        let mut wm = WorkingMemory::new("s", "u", "main");
        let c = config(3);
        wm.record_turn("a", unit(0), "", Timestamp::EPOCH, &c);
        wm.record_turn("b", unit(1), "", Timestamp::EPOCH, &c);
        wm.record_turn("a again", unit(0), "", Timestamp::EPOCH, &c); // a: rehearsal 1
        wm.record_turn("c", unit(2), "", Timestamp::EPOCH, &c);
        // Full: b (rehearsal 0, used at turn 2) and c (0, turn 4); b goes.
        wm.record_turn("d", unit(3), "", Timestamp::EPOCH, &c);
        let texts: Vec<&str> = wm.by_activity().iter().map(|i| i.text.as_str()).collect();
        assert_eq!(texts, ["a", "d", "c"]);
        assert!(wm.items.iter().all(|i| i.notes.is_empty()));
    }

    #[test]
    fn recent_episodes_keep_the_latest() {
        let mut wm = WorkingMemory::new("s", "u", "main");
        for i in 0..5 {
            wm.push_episode(format!("e{i}"), 2);
        }
        assert_eq!(wm.recent_episodes, ["e3", "e4"]);
    }
}
