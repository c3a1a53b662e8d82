//! The store as a node of a deployment: claiming sessions under leases,
//! the turns a node leaves running (closed or taken over), and fenced writes.

use std::time::Duration;

use super::PostgresSessionStore;
use super::window::keep;
use crate::PendingTurn;
use crate::session::lease::{Claim, Node, NodeOptions, RunningTurn};
use crate::session::{EntryBody, SessionError, SessionId, SessionStore};

impl PostgresSessionStore {
    /// Makes this store a node of a deployment (see [`crate::session::lease`]):
    /// registers the node, starts its heartbeat, and from now on claims a
    /// session before writing it and fences every history write with the
    /// session's lease. A session another live node owns refuses writes
    /// with [`SessionError::OwnedElsewhere`]; a write whose lease was taken
    /// over fails with [`SessionError::Fenced`].
    ///
    /// While the node's lease certainly runs, the recent window of a
    /// session it holds is answered from the process without a round trip.
    pub async fn with_node(mut self, options: NodeOptions) -> Result<Self, SessionError> {
        self.node = Some(
            Node::start(
                options,
                self.pool.clone(),
                self.beats.clone(),
                self.target.clone(),
            )
            .await?,
        );
        Ok(self)
    }

    /// This store's node, when it is one.
    pub fn node_id(&self) -> Option<&str> {
        self.node.as_deref().map(|n| n.options.id.as_str())
    }

    /// Claims `id` for this store's node ([`Claim::Held`] with the token
    /// its writes carry), or says which live node owns it. A store that is
    /// not a node holds every session.
    ///
    /// A session taken from a node that died during a turn gets that turn
    /// closed as interrupted (its question, what it recorded and a
    /// `turn_end` with `interrupted`), once, before the claim answers;
    /// unless the turn was a person's and waited for a person: that one is
    /// kept for the app to resume here ([`SessionStore::adopted_turn`]).
    pub async fn claim(&self, id: &SessionId) -> Result<Claim, SessionError> {
        match &self.node {
            Some(node) => self.claim_node(node, id).await,
            None => Ok(Claim::Held { token: 0 }),
        }
    }

    pub(super) async fn claim_node(&self, node: &Node, id: &SessionId) -> Result<Claim, SessionError> {
        let (claim, left) = node.claim_with_turn(id).await?;
        if let Some(turn) = left {
            let waiting = turn
                .records
                .as_deref()
                .and_then(PendingTurn::from_records)
                .filter(|p| {
                    p.begin.resumable
                        && p.begin.parent.is_none()
                        && p.waits_for_a_person()
                        && !p.steps.is_empty()
                });
            match waiting {
                Some(pending) if !self.has_turn(id, &turn.turn_id).await? => {
                    // Recorded as this node's from now on, so a node taking
                    // the session from this one resumes it in turn.
                    let from = turn.node.clone();
                    let mine = RunningTurn {
                        node: node.options.id.clone(),
                        ..turn
                    };
                    let text = serde_json::to_string(&mine).map_err(SessionError::Encode)?;
                    self.execute(
                        "UPDATE jarvis_leases SET turn = $3::TEXT::JSONB WHERE session_id = $1 AND node = $2",
                        &[&id.as_str(), &node.options.id, &text],
                    )
                    .await?;
                    tracing::info!(session_id = %id, turn_id = %mine.turn_id, %from,
                        "session store (postgres): took over a turn waiting for a person");
                    keep(&self.adopted, id, pending);
                }
                _ => Box::pin(self.close_interrupted(node, id, turn)).await?,
            }
        }
        Ok(claim)
    }

    /// Closes a turn another node left running as interrupted, unless its
    /// block is in the history already; clears it from the lease either way.
    pub(super) async fn close_interrupted(
        &self,
        node: &Node,
        id: &SessionId,
        turn: RunningTurn,
    ) -> Result<(), SessionError> {
        if self.has_turn(id, &turn.turn_id).await? {
            self.execute(
                "UPDATE jarvis_leases SET turn = NULL WHERE session_id = $1 AND node = $2 AND turn->>'turn_id' = $3",
                &[&id.as_str(), &node.options.id, &turn.turn_id],
            )
            .await?;
            return Ok(());
        }
        // With what it recorded, when it stopped for a person at least once.
        let block = match turn.records.as_deref().and_then(PendingTurn::from_records) {
            Some(recorded) if recorded.turn_id() == turn.turn_id => recorded.interrupted_block(),
            _ => vec![
                EntryBody::turn_start(turn.turn_id.clone()),
                EntryBody::message(jarvis_model::Message::user(turn.prompt)),
                EntryBody::TurnEnd {
                    stop_reason: crate::StopReason::Interrupted,
                    turns: 0,
                    overflows: 0,
                },
            ],
        };
        self.append(id, block).await?;
        tracing::warn!(session_id = %id, turn_id = %turn.turn_id, from = %turn.node,
            "session store (postgres): a turn left running by node {} was closed as interrupted", turn.node);
        Ok(())
    }

    /// Records that turn `turn_id` of `id` runs on this node (see
    /// [`SessionStore::turn_begins`]); the fenced write of its block clears
    /// it. Does nothing for a store that is not a node.
    pub async fn record_turn(&self, id: &SessionId, turn_id: &str, prompt: &str) -> Result<(), SessionError> {
        let Some(node) = &self.node else {
            return Ok(());
        };
        let Claim::Held { token } = self.claim_node(node, id).await? else {
            return Ok(());
        };
        let turn = serde_json::to_string(&RunningTurn {
            node: node.options.id.clone(),
            turn_id: turn_id.to_owned(),
            prompt: prompt.to_owned(),
            records: None,
        })
        .map_err(SessionError::Encode)?;
        let token = i64::try_from(token).unwrap_or(i64::MAX);
        // Runs on a task of its own: never over what the same turn
        // recorded later (`turn_progress`).
        self.execute(
            "UPDATE jarvis_leases SET turn = $3::TEXT::JSONB WHERE session_id = $1 AND node = $2 AND token = $4 \
             AND (turn IS NULL OR turn->>'turn_id' IS DISTINCT FROM $5)",
            &[&id.as_str(), &node.options.id, &turn, &token, &turn_id],
        )
        .await?;
        Ok(())
    }

    /// Keeps what a person's turn recorded with the session's lease (see
    /// [`SessionStore::turn_progress`]); fenced like a history write.
    pub(super) async fn keep_progress(
        &self,
        node: &Node,
        id: &SessionId,
        turn: &PendingTurn,
    ) -> Result<(), SessionError> {
        let Claim::Held { token } = self.claim_node(node, id).await? else {
            return Ok(());
        };
        let text = serde_json::to_string(&RunningTurn {
            node: node.options.id.clone(),
            turn_id: turn.turn_id().to_owned(),
            prompt: turn.begin.prompt.clone(),
            records: Some(turn.to_records()),
        })
        .map_err(SessionError::Encode)?;
        let token = i64::try_from(token).unwrap_or(i64::MAX);
        self.execute(
            "UPDATE jarvis_leases SET turn = $3::TEXT::JSONB WHERE session_id = $1 AND node = $2 AND token = $4",
            &[&id.as_str(), &node.options.id, &text, &token],
        )
        .await?;
        Ok(())
    }

    /// Whether this store's node holds `id`'s lease (as far as it knows;
    /// a store that is not a node holds nothing).
    pub fn holds(&self, id: &SessionId) -> bool {
        self.node.as_ref().is_some_and(|node| node.token(id).is_some())
    }

    /// The node owning `id` now and how long its lease has left, if a live
    /// node owns it.
    pub async fn owner(&self, id: &SessionId) -> Result<Option<(String, Duration)>, SessionError> {
        let node = match &self.node {
            Some(node) => node.clone(),
            None => return Ok(None),
        };
        Ok(node
            .owner(id)
            .await?
            .filter(|(_, _, left)| !left.is_zero())
            .map(|(owner, _, left)| (owner, left)))
    }

    /// Leaves the deployment: the node's row is removed, so
    /// other nodes can take its sessions at once (a clean stop; a crash
    /// waits for the lease). The store writes no history afterwards.
    pub async fn leave(&self) -> Result<(), SessionError> {
        match &self.node {
            Some(node) => node.leave().await,
            None => Ok(()),
        }
    }

    /// Why a fenced append wrote nothing: the lease was taken over
    /// ([`SessionError::Fenced`], and the node forgets it), or there is
    /// no such session.
    pub(super) async fn refused(&self, node: &Node, id: &SessionId, token: i64) -> SessionError {
        match node.owner(id).await {
            Ok(Some((owner, current, _))) if owner != node.options.id || current != token => {
                node.forget(id);
                self.windows.lock().unwrap_or_else(|e| e.into_inner()).remove(id);
                tracing::warn!(session_id = %id, node = %node.options.id, owner = %owner,
                    "session store (postgres): a write was fenced off: node {owner} owns session {id} now");
                SessionError::Fenced {
                    id: id.to_string(),
                    owner,
                }
            }
            Ok(_) => SessionError::not_found(id),
            Err(error) => error,
        }
    }
}
