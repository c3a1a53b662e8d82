//! The AGENDA behind `GET /api/agenda`: every agent's schedules and open
//! loops (promises) in one list (SPEC.md §11.6, R-AGENDA-1).
//!
//! The SDK has neither the scheduler nor open loops yet, so the server asks
//! an [`AgendaSource`] and, until one is given, uses [`NoAgenda`], which
//! lists nothing: the route answers `{"items": []}`. The issue that builds
//! schedules and open loops fills this in from the assembly; the route and
//! its shape stay.

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

/// One line of the AGENDA card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgendaItem {
    /// The agent it belongs to (its label is drawn in the agent's primary colour).
    pub agent_id: String,
    /// `schedule` or `promise`.
    pub kind: String,
    /// What it is about, for the person.
    pub text: String,
    /// When it is due or next runs (RFC 3339), if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due: Option<String>,
    /// The session it came from, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// Where the AGENDA's items come from.
pub trait AgendaSource: Send + Sync + std::fmt::Debug {
    /// Every agent's schedules and open loops, in display order.
    fn items(&self) -> BoxFuture<'_, Vec<AgendaItem>>;
}

/// The AGENDA of an app without a scheduler or open loops: empty.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoAgenda;

impl AgendaSource for NoAgenda {
    fn items(&self) -> BoxFuture<'_, Vec<AgendaItem>> {
        Box::pin(async { Vec::new() })
    }
}
