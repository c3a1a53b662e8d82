//! The recent window kept in the process, per session, with the `last_seq`
//! it ends at; and the bound on how many sessions' windows are kept.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::session::{SessionEntry, SessionId};

/// Sessions whose recent window (and, apart, whose agent) a store keeps at
/// most; past it, any one is let go (it is read again when next needed).
pub(super) const MAX_KEPT_WINDOWS: usize = 4_096;

/// A session's recent entries as this process last saw them; see the
/// module docs.
#[derive(Debug, Clone)]
pub(super) struct Window {
    /// The session's last `seq` when the window was read or extended.
    pub(super) last_seq: u64,
    /// How many turns it holds (it starts at the start of the `turns`-th
    /// last turn), unless `whole`.
    pub(super) turns: usize,
    /// It holds the whole session (fewer turns than asked for).
    pub(super) whole: bool,
    pub(super) entries: Vec<SessionEntry>,
}

impl Window {
    /// The window `recent(turns)` answers, when this one holds it.
    pub(super) fn tail(&self, turns: usize) -> Option<Vec<SessionEntry>> {
        if !self.whole && self.turns < turns {
            return None;
        }
        let start = self
            .entries
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, e)| e.body.starts_turn())
            .nth(turns - 1)
            .map_or(0, |(i, _)| i);
        Some(self.entries[start..].to_vec())
    }

    /// Adds what was appended after `last_seq`, and lets go of turns older
    /// than the window keeps.
    pub(super) fn extend(&mut self, entries: impl IntoIterator<Item = SessionEntry>) {
        self.entries.extend(entries);
        self.last_seq = self.entries.last().map_or(self.last_seq, |e| e.seq);
        let starts: Vec<usize> = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.body.starts_turn())
            .map(|(i, _)| i)
            .collect();
        if starts.len() > self.turns {
            self.entries.drain(..starts[starts.len() - self.turns]);
            self.whole = false;
        }
    }
}

/// Keeps `value` for `id` in `map`, letting any other one go when
/// [`MAX_KEPT_WINDOWS`] are kept already.
pub(super) fn keep<T>(map: &Mutex<HashMap<SessionId, T>>, id: &SessionId, value: T) {
    let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
    if map.len() >= MAX_KEPT_WINDOWS
        && !map.contains_key(id)
        && let Some(other) = map.keys().next().cloned()
    {
        map.remove(&other);
    }
    map.insert(id.clone(), value);
}
