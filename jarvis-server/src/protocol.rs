//! The wire contract of the HTTP API and the WebSocket (DESIGN.md §5), as
//! serde types shared by the server, [`crate::client`] and tests.
//!
//! Server → client frames are JSON objects with a `type`:
//!
//! - every harness event ([`AgentEvent`]) unchanged (R-EVT-2), the notices
//!   of the layers above the loop among them (`agenda_changed`,
//!   `focus_state`, `focus_panel`: [`AgentEvent::Notice`], each its own
//!   `type` with the fields of the type that made it);
//! - [`ServerNotice`]s the server adds: `approval_request`,
//!   `approval_resolved`, `agent_activity`, `error`.
//!
//! This module is where the frames are defined: which events go to one
//! session's screens and which to every screen is decided in
//! [`crate::fanout`], and `tests/it/wire.rs` holds the frames of a recorded
//! session byte for byte.
//!
//! Client → server frames are [`ClientMessage`]s: `prompt`, `approval`,
//! `abort`, `proactive_feedback`.

use jarvis_sdk::agent::{AgentEvent, ApprovalDecision, ApprovalRequest, SessionEntry, SessionMeta};
use jarvis_sdk::app::{AgentProfile, Palette};
use jarvis_sdk::initiative::Reaction;
use jarvis_sdk::turn::{UsageBy, UsageSummary};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// WebSocket close code: the token is missing or wrong.
pub const CLOSE_UNAUTHORIZED: u16 = 4401;
/// WebSocket close code: the agent of a new session is not in the team.
pub const CLOSE_UNKNOWN_AGENT: u16 = 4404;
/// WebSocket close code: `session_id` is missing or not a valid id.
pub const CLOSE_BAD_REQUEST: u16 = 4400;
/// WebSocket close code: the client fell too far behind and was dropped
/// (the standard "policy violation").
pub const CLOSE_TOO_SLOW: u16 = 1008;
/// WebSocket close code: the server is shutting down (the standard "going away").
pub const CLOSE_GOING_AWAY: u16 = 1001;
/// WebSocket close code: the server could not open the session.
pub const CLOSE_INTERNAL: u16 = 1011;
/// WebSocket close code: a text frame was not valid UTF-8 (the standard
/// "invalid frame payload data").
pub const CLOSE_INVALID_UTF8: u16 = 1007;
/// WebSocket close code: a message or frame was larger than
/// [`Limits::max_frame_bytes`](crate::Limits::max_frame_bytes) (the
/// standard "message too big").
pub const CLOSE_TOO_BIG: u16 = 1009;
/// WebSocket close code: the client broke the WebSocket protocol (an
/// unmasked or reserved frame, a stray continuation; the standard
/// "protocol error").
pub const CLOSE_PROTOCOL_ERROR: u16 = 1002;

/// Every close code the server sends, for clients and tests that check
/// they know the one they got.
pub const CLOSE_CODES: &[u16] = &[
    CLOSE_GOING_AWAY,
    CLOSE_PROTOCOL_ERROR,
    CLOSE_INVALID_UTF8,
    CLOSE_TOO_SLOW,
    CLOSE_TOO_BIG,
    CLOSE_INTERNAL,
    CLOSE_BAD_REQUEST,
    CLOSE_UNAUTHORIZED,
    CLOSE_UNKNOWN_AGENT,
];

/// Error codes of `error` frames and HTTP error bodies.
pub mod codes {
    /// The request or frame could not be understood.
    pub const BAD_REQUEST: &str = "bad_request";
    /// A prompt arrived while a turn of the session runs.
    pub const BUSY: &str = "busy";
    /// The input was refused by the security pipeline's validation.
    pub const INVALID_INPUT: &str = "invalid_input";
    /// The caller is not allowed to do this (a person prompting a peer session).
    pub const FORBIDDEN: &str = "forbidden";
    /// A token is required and was missing or wrong.
    pub const UNAUTHORIZED: &str = "unauthorized";
    /// The agent is not in the team.
    pub const UNKNOWN_AGENT: &str = "unknown_agent";
    /// No such session, route or approval request.
    pub const NOT_FOUND: &str = "not_found";
    /// The approval request is not waiting (already decided, or unknown).
    pub const APPROVAL_NOT_PENDING: &str = "approval_not_pending";
    /// The server is shutting down and starts no new turns.
    pub const SHUTTING_DOWN: &str = "shutting_down";
    /// Something failed inside the server; the log has the details.
    pub const INTERNAL: &str = "internal";
    /// The request body is larger than the limit.
    pub const TOO_LARGE: &str = "too_large";
    /// The method is not allowed on this route.
    pub const METHOD_NOT_ALLOWED: &str = "method_not_allowed";
    /// The request's `Host` or `Origin` is not one this server answers.
    pub const FORBIDDEN_ORIGIN: &str = "forbidden_origin";
    /// A turn of this session was cut short by a restart (sent once, to the
    /// first screen that opens the session afterwards).
    pub const INTERRUPTED: &str = "interrupted";
    /// A session or day budget is spent: the prompt did not run.
    pub const BUDGET_EXHAUSTED: &str = "budget_exhausted";

    /// Every code of `error` frames, for clients and tests that check they
    /// know the one they got.
    pub const ALL: &[&str] = &[
        BAD_REQUEST,
        BUSY,
        INVALID_INPUT,
        FORBIDDEN,
        UNAUTHORIZED,
        UNKNOWN_AGENT,
        NOT_FOUND,
        APPROVAL_NOT_PENDING,
        SHUTTING_DOWN,
        INTERNAL,
        TOO_LARGE,
        METHOD_NOT_ALLOWED,
        FORBIDDEN_ORIGIN,
        INTERRUPTED,
        BUDGET_EXHAUSTED,
    ];
}

/// A message the server adds to the harness events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ServerNotice {
    /// A tool call waits for a person: `{request_id, session_id, agent_id, tool_name, args}`.
    ApprovalRequest(ApprovalRequest),
    /// An approval request was decided (by any connection, or by timeout).
    ApprovalResolved {
        /// The request.
        request_id: String,
        /// The decision: `allow`, `always`, `deny`, `timeout` or `cancelled`.
        decision: ApprovalDecision,
    },
    /// The agents running a loop now, in team order; sent to every
    /// connection whenever the set changes, and once on connecting.
    AgentActivity {
        /// Agent ids.
        active: Vec<String>,
    },
    /// Something the client asked for did not happen.
    Error {
        /// A stable code (see [`codes`]).
        code: String,
        /// Words for the person.
        message: String,
    },
}

impl ServerNotice {
    /// An `error` notice.
    pub fn error(code: &str, message: impl Into<String>) -> Self {
        ServerNotice::Error {
            code: code.to_owned(),
            message: message.into(),
        }
    }
}

/// Anything the server sends over the WebSocket.
///
/// Read in this order: the server's own messages first, then events (an
/// object of any other `type` is an event, a notice of a layer above the
/// loop, see [`AgentEvent::Notice`]), then anything else.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ServerMessage {
    /// A message of the server's own.
    Notice(ServerNotice),
    /// A harness event, unchanged.
    Event(AgentEvent),
    /// A frame that is not an object with a `type`.
    Other(serde_json::Value),
}

impl ServerMessage {
    /// Parses one text frame.
    pub fn parse(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The `type` of the message.
    pub fn kind(&self) -> &str {
        match self {
            ServerMessage::Event(event) => event.kind(),
            ServerMessage::Notice(notice) => match notice {
                ServerNotice::ApprovalRequest(_) => "approval_request",
                ServerNotice::ApprovalResolved { .. } => "approval_resolved",
                ServerNotice::AgentActivity { .. } => "agent_activity",
                ServerNotice::Error { .. } => "error",
            },
            ServerMessage::Other(value) => value.get("type").and_then(|t| t.as_str()).unwrap_or(""),
        }
    }
}

/// A person's answer to an approval request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientDecision {
    /// Run the call once.
    Allow,
    /// Run it and remember the rule for the session's agent.
    Always,
    /// Refuse it.
    Deny,
}

impl From<ClientDecision> for ApprovalDecision {
    fn from(d: ClientDecision) -> Self {
        match d {
            ClientDecision::Allow => ApprovalDecision::Allow,
            ClientDecision::Always => ApprovalDecision::Always,
            ClientDecision::Deny => ApprovalDecision::Deny,
        }
    }
}

/// What a client sends over the WebSocket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ClientMessage {
    /// Run a turn with this text.
    Prompt {
        /// What the person said.
        text: String,
    },
    /// Answer an approval request; the first answer wins.
    Approval {
        /// The request.
        request_id: String,
        /// The answer.
        decision: ClientDecision,
    },
    /// Abort the running turn of the session.
    Abort,
    /// How the person reacted to a message the agent sent on its own.
    ProactiveFeedback {
        /// The `message_id` of the `proactive_message`.
        message_id: String,
        /// The reaction.
        reaction: Reaction,
    },
}

/// An MCP server as `GET /api/mcp` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpServerInfo {
    /// The server's name.
    pub name: String,
    /// The agent whose definition declares it (`null`: `mcp.yaml`).
    pub owner: Option<String>,
    /// The program or URL.
    pub transport: String,
    /// `starting`, `running`, `restarting` or `stopped`.
    pub state: String,
    /// The process id of a running stdio server.
    pub pid: Option<u32>,
    /// Why it last stopped or failed to start.
    pub error: Option<String>,
    /// How many times it was started again.
    pub restarts: u32,
    /// Its tools.
    pub tools: Vec<McpToolEntry>,
}

/// One tool of an [`McpServerInfo`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpToolEntry {
    /// The name agents call it by (`<server>__<tool>`).
    pub name: String,
    /// The name the server gave it.
    pub remote: String,
    /// Its description.
    pub description: String,
    /// Whether the server annotates it read-only.
    pub read_only: bool,
}

impl From<&jarvis_sdk::turn::McpServerStatus> for McpServerInfo {
    fn from(s: &jarvis_sdk::turn::McpServerStatus) -> Self {
        Self {
            name: s.name.clone(),
            owner: s.owner.clone(),
            transport: s.transport.clone(),
            state: s.state.to_string(),
            pid: s.pid,
            error: s.error.clone(),
            restarts: s.restarts,
            tools: s
                .tools
                .iter()
                .map(|t| McpToolEntry {
                    name: t.name.clone(),
                    remote: t.remote.clone(),
                    description: t.description.clone(),
                    read_only: t.read_only,
                })
                .collect(),
        }
    }
}

/// An agent as `GET /api/agents` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentInfo {
    /// The id (`main`, `karen`).
    pub id: String,
    /// The wordmark (`K.A.R.E.N.`).
    pub name: String,
    /// What the agent does.
    pub description: String,
    /// The quote line under the wordmark.
    pub quote: String,
    /// The colours.
    pub palette: Palette,
    /// The tools the agent may call.
    pub tools: Vec<String>,
}

impl From<&AgentProfile> for AgentInfo {
    fn from(p: &AgentProfile) -> Self {
        Self {
            id: p.id.clone(),
            name: p.name.clone(),
            description: p.description.clone(),
            quote: p.quote.clone(),
            palette: p.palette.clone(),
            tools: p.tools.clone(),
        }
    }
}

/// `GET /api/system`: what the HUD's SET card says about the app as a
/// whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SystemInfo {
    /// The embedder of recall; `null` with memory off.
    pub embedder: Option<EmbedderInfo>,
}

/// The embedder of recall (what `$JARVIS_HOME/embedder.json` records,
/// never a key) and how far re-embedding has come.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmbedderInfo {
    /// `hash`, `openai`, `ollama`, or `custom` (given in code).
    pub provider: String,
    /// The model, for `openai` and `ollama`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The name on the records it embedded (`hash-v1-512`,
    /// `openai/text-embedding-3-small`).
    pub name: String,
    /// What `JARVIS_EMBED__PROVIDER` asked for (`auto` included), or `code`.
    pub requested: String,
    /// Re-embedding: `idle`, `running`, `waiting` (the embedder does not
    /// answer; recall answers from what is already embedded) or `done`.
    pub reembedding: String,
    /// Records embedded again since the server started.
    pub reembedded: u64,
}

/// `GET /api/usage?by=…`: the usage ledger's turns summed by agent, session
/// or day (in the person's zone), each row `{key, turns, input_tokens,
/// output_tokens, cached_input_tokens, cost_usd}` with `cost_usd` `null`
/// when any turn of the group used a model without a price.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageReport {
    /// How the rows are grouped: `agent`, `session` or `day`.
    pub by: UsageBy,
    /// One row per group, sorted by key.
    pub rows: Vec<UsageSummary>,
}

/// `GET /api/sessions/{id}`: the session and its entries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionDetail {
    /// The session.
    pub session: SessionMeta,
    /// Its history, oldest first.
    pub entries: Vec<SessionEntry>,
}

/// `POST /api/sessions` body; every field optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSession {
    /// The agent of the new session; `main` when absent.
    #[serde(default)]
    pub agent: Option<String>,
}

/// `GET /healthz`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Health {
    /// Always `ok`.
    pub status: String,
    /// The server's process id (the CLI matches it with the server file).
    pub pid: u32,
    /// The background work, by task (`scheduler`, `reflection`, and
    /// `embedding` with memory on): `ok`, or `restarting` after a failure
    /// (for `embedding`: while the embedder does not answer).
    #[serde(default)]
    pub background: BTreeMap<String, String>,
    /// Failures of each background task since the server started (a panic,
    /// or a scheduled job that failed), each logged with its name.
    #[serde(default)]
    pub background_failures: BTreeMap<String, u64>,
}

/// The body of every HTTP error: `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// The inside of an [`ErrorBody`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// A stable code (see [`codes`]).
    pub code: String,
    /// Words for the person; never internal detail.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn frames_round_trip_with_their_type() {
        let n = ServerNotice::AgentActivity {
            active: vec!["main".into()],
        };
        assert_eq!(
            serde_json::to_value(&n).unwrap(),
            json!({"type": "agent_activity", "active": ["main"]})
        );
        let parsed =
            ServerMessage::parse(r#"{"type":"approval_resolved","request_id":"r1","decision":"deny"}"#)
                .unwrap();
        assert_eq!(parsed.kind(), "approval_resolved");
        let parsed = ServerMessage::parse(r#"{"type":"turn_start","turn":1}"#).unwrap();
        assert!(matches!(
            parsed,
            ServerMessage::Event(AgentEvent::TurnStart { turn: 1 })
        ));
        let parsed = ServerMessage::parse(r#"{"type":"focus_state","state":"x"}"#).unwrap();
        assert_eq!(parsed.kind(), "focus_state");
        assert!(matches!(parsed, ServerMessage::Event(AgentEvent::Notice(_))));
        // The server's own messages are never read as notices of a layer.
        let parsed = ServerMessage::parse(
            r#"{"type":"approval_request","request_id":"r","session_id":"s","agent_id":"main","tool_name":"t","args":{}}"#,
        )
        .unwrap();
        assert!(
            matches!(parsed, ServerMessage::Notice(ServerNotice::ApprovalRequest(_))),
            "{parsed:?}"
        );
        let parsed = ServerMessage::parse(r#"{"type":"agent_activity","active":[]}"#).unwrap();
        assert!(matches!(
            parsed,
            ServerMessage::Notice(ServerNotice::AgentActivity { .. })
        ));
        assert!(matches!(
            ServerMessage::parse("[1]").unwrap(),
            ServerMessage::Other(_)
        ));
        let req = ServerNotice::ApprovalRequest(ApprovalRequest {
            request_id: "r".into(),
            session_id: "s".into(),
            agent_id: "main".into(),
            tool_name: "write_file".into(),
            args: json!({"path": "a"}),
        });
        assert_eq!(
            serde_json::to_value(&req).unwrap(),
            json!({"type": "approval_request", "request_id": "r", "session_id": "s", "agent_id": "main",
                   "tool_name": "write_file", "args": {"path": "a"}})
        );
        let c: ClientMessage = serde_json::from_str(r#"{"type":"abort"}"#).unwrap();
        assert_eq!(c, ClientMessage::Abort);
        assert!(
            serde_json::from_str::<ClientMessage>(
                r#"{"type":"approval","request_id":"r","decision":"timeout"}"#
            )
            .is_err()
        );
    }
}
