//! What a stopped process left: turns in progress in the journal,
//! settled at start, and reports queued in the outbox.

use super::*;

impl AppInner {
    /// Settles the turns a stopped process left in progress (see the
    /// harness and journal docs): a turn whose block is in its history
    /// already is forgotten; a person's top-level turn that was waiting for
    /// a person (itself, or a turn it delegated to) is resumed; every other
    /// turn is closed as interrupted, with what it recorded and no answer,
    /// and the first screen that opens its session is told. Failures are
    /// logged: the journal keeps the turn for the next start.
    pub(super) async fn recover(&self, pending: Vec<PendingTurn>) {
        if pending.is_empty() {
            return;
        }
        let mut settled: BTreeSet<String> = BTreeSet::new();
        for turn in &pending {
            let Ok(id) = SessionId::new(turn.begin.session_id.as_str()) else {
                self.journal.end(turn.turn_id());
                settled.insert(turn.turn_id().to_owned());
                continue;
            };
            let recorded = match self.store.get(&id).await {
                Ok(None) => true, // its session is gone
                Ok(Some(_)) => match self.store.has_turn(&id, turn.turn_id()).await {
                    Ok(found) => found,
                    Err(error) => {
                        tracing::warn!(turn_id = %turn.turn_id(), %error, "recovery: the history could not be read");
                        settled.insert(turn.turn_id().to_owned());
                        continue;
                    }
                },
                Err(error) => {
                    tracing::warn!(turn_id = %turn.turn_id(), %error, "recovery: the session could not be read");
                    settled.insert(turn.turn_id().to_owned());
                    continue;
                }
            };
            if recorded {
                self.journal.end(turn.turn_id());
                settled.insert(turn.turn_id().to_owned());
            }
        }
        let by_id: HashMap<&str, &PendingTurn> = pending.iter().map(|t| (t.turn_id(), t)).collect();
        let mut resume: Vec<&PendingTurn> = Vec::new();
        for (top, below) in descendants(&pending) {
            let Some(turn) = by_id.get(top.as_str()) else {
                continue;
            };
            let waits = turn.waits_for_a_person()
                || below
                    .iter()
                    .filter_map(|b| by_id.get(b.as_str()))
                    .any(|b| b.waits_for_a_person());
            if turn.begin.resumable && waits && !turn.steps.is_empty() && !settled.contains(&top) {
                resume.push(turn);
            }
        }
        for turn in &pending {
            if settled.contains(turn.turn_id()) || resume.iter().any(|r| r.turn_id() == turn.turn_id()) {
                continue;
            }
            let Ok(id) = SessionId::new(turn.begin.session_id.as_str()) else {
                continue;
            };
            let written = match self.store.append(&id, turn.interrupted_block()).await {
                Ok(_) => self.store.sync(&id).await,
                Err(e) => Err(e),
            };
            match written {
                Ok(()) => {
                    self.journal.end(turn.turn_id());
                    tracing::warn!(session_id = %id, turn_id = %turn.turn_id(), "a turn cut short by a restart was closed as interrupted");
                    if turn.begin.parent.is_none() {
                        self.interrupted
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .insert(id.to_string(), interrupted_note(&turn.begin.prompt));
                    }
                }
                Err(error) => {
                    tracing::error!(session_id = %id, turn_id = %turn.turn_id(), %error, "an interrupted turn could not be closed; it stays in the journal");
                }
            }
        }
        for turn in resume {
            let Ok(id) = SessionId::new(turn.begin.session_id.as_str()) else {
                continue;
            };
            match self.open(&id).await {
                Ok(session) => {
                    let (settle, _asked_again) = turn.settle_for_resume();
                    tracing::info!(session_id = %id, turn_id = %turn.turn_id(), "resuming a turn that waits for a person");
                    session.resume(turn.clone(), settle);
                }
                Err(error) => {
                    tracing::error!(session_id = %id, turn_id = %turn.turn_id(), %error, "a waiting turn could not be resumed; it stays in the journal");
                }
            }
        }
    }
}

/// What the first screen of a session hears of its interrupted turn.
pub(super) fn interrupted_note(prompt: &str) -> String {
    let prompt = jarvis_common::truncate_with_marker(prompt, 60);
    format!(
        "the turn \"{prompt}\" was interrupted by a restart; what it did before is in the history, and it has no answer"
    )
}

impl AppInner {
    /// Reports a job queued before a stop or a crash may be unrecorded by
    /// the job: each built-in job sees every message the outbox still holds
    /// and finishes its records ([`BuiltinJob::recover`](jarvis_initiative::BuiltinJob::recover)),
    /// then the outbox forgets what it delivered.
    pub(super) async fn recover_reports(&self) {
        let queued = self.proactive.outbox().logged().await;
        for job in self.scheduler.builtins() {
            job.recover(&queued).await;
        }
        self.proactive.outbox().compact().await;
    }
}
