//! The window cache: the entries of a session's last few turns, kept in
//! memory so reading the recent window reads no file.

use std::collections::VecDeque;

use crate::session::SessionEntry;

/// The entries of the last `cap` turns (all entries while the session has
/// no more turns than that).
#[derive(Debug, Clone)]
pub(super) struct Tail {
    pub(super) entries: VecDeque<SessionEntry>,
    turns: usize,
    cap: usize,
    /// Nothing was ever dropped: the tail is the whole history.
    pub(super) complete: bool,
}

impl Tail {
    pub(super) fn new(cap: usize) -> Self {
        Self {
            entries: VecDeque::new(),
            turns: 0,
            cap,
            complete: true,
        }
    }

    pub(super) fn push(&mut self, entry: SessionEntry) {
        if entry.starts_turn() {
            self.turns += 1;
        }
        self.entries.push_back(entry);
        if self.turns > self.cap {
            // Drop the oldest turn: everything before the second turn start.
            let mut dropped_start = false;
            while let Some(front) = self.entries.front() {
                if front.starts_turn() {
                    if dropped_start {
                        break;
                    }
                    dropped_start = true;
                    self.turns -= 1;
                }
                self.entries.pop_front();
            }
            self.complete = false;
        }
    }

    /// The last `turns` turns, when the tail holds them.
    pub(super) fn recent(&self, turns: usize) -> Option<Vec<SessionEntry>> {
        if turns == 0 {
            return Some(Vec::new());
        }
        let mut seen = 0;
        for (i, e) in self.entries.iter().enumerate().rev() {
            if e.starts_turn() {
                seen += 1;
                if seen == turns {
                    return Some(self.entries.range(i..).cloned().collect());
                }
            }
        }
        self.complete.then(|| self.entries.iter().cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::EntryBody;
    use jarvis_common::Timestamp;
    use jarvis_model::Message;

    fn entry(seq: u64, body: EntryBody) -> SessionEntry {
        SessionEntry {
            v: 1,
            seq,
            ts: Timestamp::EPOCH,
            body,
        }
    }

    #[test]
    fn the_tail_keeps_the_last_turns_whole() {
        let mut tail = Tail::new(2);
        let mut seq = 0;
        let mut push = |tail: &mut Tail, body| {
            seq += 1;
            tail.push(entry(seq, body));
        };
        push(&mut tail, EntryBody::TurnStart { turn_id: None });
        for turn in 0..4 {
            push(&mut tail, EntryBody::message(Message::user(format!("u{turn}"))));
            push(
                &mut tail,
                EntryBody::message(Message::assistant_text(format!("a{turn}"))),
            );
            push(&mut tail, EntryBody::TurnStart { turn_id: None });
        }
        assert!(!tail.complete);
        assert_eq!(tail.turns, 2);
        let window = tail.recent(2).unwrap();
        assert_eq!(window.first().unwrap().message(), Some(&Message::user("u2")));
        assert_eq!(window.len(), 6);
        assert_eq!(tail.recent(1).unwrap().len(), 3);
        assert!(tail.recent(3).is_none(), "three turns are not in a two-turn tail");
        assert!(tail.recent(0).unwrap().is_empty());
    }

    #[test]
    fn a_complete_tail_answers_any_window() {
        let mut tail = Tail::new(4);
        tail.push(entry(1, EntryBody::TurnStart { turn_id: None }));
        tail.push(entry(2, EntryBody::message(Message::user("u"))));
        assert_eq!(tail.recent(10).unwrap().len(), 2);
    }
}
