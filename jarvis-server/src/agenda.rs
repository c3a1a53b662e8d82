//! The AGENDA behind `GET /api/agenda`: every agent's schedules and open
//! loops (promises) in one list (SPEC.md §11.6, R-AGENDA-1).
//!
//! The server asks an [`AgendaSource`]. By default it is [`AppAgenda`], the
//! app's own AGENDA ([`AppAssembly::agenda`]), so the HUD's AGENDA card
//! lists what the SDK's open loops (and schedules) hold, each with its
//! agent's name and colour. [`ServerState::with_agenda`](crate::ServerState::with_agenda)
//! replaces it (for example with [`NoAgenda`]).

use futures::future::BoxFuture;
use jarvis_sdk::{AgendaKind, AppAssembly};
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
    /// The job's or the loop's id, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The agent's display name (`K.A.R.E.N.`), for the label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_name: Option<String>,
    /// The agent's `primary` colour (`#rrggbb`), for the label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub color: Option<String>,
    /// How a schedule repeats, or the condition a promise waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl From<jarvis_sdk::AgendaItem> for AgendaItem {
    fn from(item: jarvis_sdk::AgendaItem) -> Self {
        let kind = match item.kind {
            AgendaKind::Schedule => "schedule",
            AgendaKind::Promise => "promise",
        };
        Self {
            agent_id: item.agent_id,
            kind: kind.to_owned(),
            text: item.text,
            due: item.when.map(|t| t.to_string()),
            session_id: item.session_id,
            id: Some(item.id),
            agent_name: Some(item.agent_name),
            color: Some(item.color),
            detail: item.detail,
        }
    }
}

/// Where the AGENDA's items come from.
pub trait AgendaSource: Send + Sync + std::fmt::Debug {
    /// Every agent's schedules and open loops, in display order.
    fn items(&self) -> BoxFuture<'_, Vec<AgendaItem>>;
}

/// An AGENDA that lists nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoAgenda;

impl AgendaSource for NoAgenda {
    fn items(&self) -> BoxFuture<'_, Vec<AgendaItem>> {
        Box::pin(async { Vec::new() })
    }
}

/// The app's own AGENDA: its agents' schedules and open promises.
#[derive(Debug, Clone)]
pub struct AppAgenda(pub AppAssembly);

impl AgendaSource for AppAgenda {
    fn items(&self) -> BoxFuture<'_, Vec<AgendaItem>> {
        Box::pin(async { self.0.agenda().await.into_iter().map(AgendaItem::from).collect() })
    }
}
