//! [`SessionEntry`]: one line of a session's history, and [`SessionMeta`],
//! the session's metadata. Both are stable outside contracts: entries are
//! the lines of `sessions/<id>.jsonl` (each with `"v": 1`), metadata is the
//! `<id>.meta.json` file and the session object of the HTTP API.

use serde::{Deserialize, Serialize};

use super::id::SessionId;
use crate::event::{ProactiveKind, StopReason};
use jarvis_common::Timestamp;
use jarvis_model::Message;

/// The schema version every entry carries as `"v"`.
pub const ENTRY_SCHEMA_VERSION: u32 = 1;

/// One stored record of a session, in order of `seq`.
///
/// As JSON: `{"v":1,"seq":7,"ts":"2026-11-29T19:45:05.123Z","kind":"message","message":{"role":"user","content":"…"}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionEntry {
    /// Schema version, [`ENTRY_SCHEMA_VERSION`].
    pub v: u32,
    /// Position in the session: 1, 2, … in the order the entries were stored.
    pub seq: u64,
    /// When the entry was stored.
    pub ts: Timestamp,
    /// What the entry records.
    #[serde(flatten)]
    pub body: EntryBody,
}

impl SessionEntry {
    /// The message this entry records, if it records one.
    pub fn message(&self) -> Option<&Message> {
        match &self.body {
            EntryBody::Message { message } => Some(message),
            _ => None,
        }
    }

    /// Whether this entry begins a turn: turns begin at user messages.
    pub fn starts_turn(&self) -> bool {
        self.body.starts_turn()
    }
}

/// What one entry records, tagged by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EntryBody {
    /// A conversation record: a user message, an assistant message (text,
    /// thinking, tool calls, usage) or a tool result.
    Message {
        /// The record.
        message: Message,
    },
    /// A turn begins (written just before its user message). A turn's
    /// entries are one contiguous block, from this marker to its `turn_end`.
    TurnStart {
        /// The turn's id (entries written before turns had ids have none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        turn_id: Option<String>,
    },
    /// A turn ended.
    TurnEnd {
        /// How it ended.
        stop_reason: StopReason,
        /// Steps it ran.
        turns: u32,
        /// Overflows in it: 0, 1 or 2.
        overflows: u8,
    },
    /// A message the agent sent without being asked in that moment (a
    /// reminder, a queued message, a watch report), recorded before any
    /// screen was shown it. Never part of the model's window: the model
    /// sees conversation messages only.
    Proactive {
        /// `proactive` or `answer` (what the `proactive_message` event says).
        proactive_kind: ProactiveKind,
        /// Identifies the message; a session records one id once.
        message_id: String,
        /// The text.
        text: String,
    },
}

impl EntryBody {
    /// An entry recording `message`.
    pub fn message(message: Message) -> Self {
        EntryBody::Message { message }
    }

    /// A `turn_start` marker of the turn `turn_id`.
    pub fn turn_start(turn_id: impl Into<String>) -> Self {
        EntryBody::TurnStart {
            turn_id: Some(turn_id.into()),
        }
    }

    /// The id of the proactive message this entry records, if it records one.
    pub fn proactive_id(&self) -> Option<&str> {
        match self {
            EntryBody::Proactive { message_id, .. } => Some(message_id),
            _ => None,
        }
    }

    /// The turn this `turn_start` marker begins, if it is one with an id.
    pub fn turn_id(&self) -> Option<&str> {
        match self {
            EntryBody::TurnStart { turn_id } => turn_id.as_deref(),
            _ => None,
        }
    }

    /// Whether this body begins a turn: turns begin at user messages.
    pub fn starts_turn(&self) -> bool {
        matches!(
            self,
            EntryBody::Message {
                message: Message::User(_)
            }
        )
    }
}

/// What a session is for. Only `user` sessions are a person's to write:
/// every other kind is read-only for people (they may open and read it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionKind {
    /// A person talks to the session's agent.
    #[default]
    User,
    /// One agent (the caller) delegates to another (the callee, the
    /// session's agent).
    Peer,
    /// A scheduled job's turns run here.
    Job,
    /// An MCP client's requests run here.
    Mcp,
    /// A sub-agent's work inside a parent turn runs here.
    Sub,
}

impl SessionKind {
    /// `"user"`, `"peer"`, `"job"`, `"mcp"` or `"sub"`.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionKind::User => "user",
            SessionKind::Peer => "peer",
            SessionKind::Job => "job",
            SessionKind::Mcp => "mcp",
            SessionKind::Sub => "sub",
        }
    }

    /// Parses a kind's name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "user" => Some(SessionKind::User),
            "peer" => Some(SessionKind::Peer),
            "job" => Some(SessionKind::Job),
            "mcp" => Some(SessionKind::Mcp),
            "sub" => Some(SessionKind::Sub),
            _ => None,
        }
    }

    /// Whether people may only read it: every kind but `user`.
    pub fn is_read_only(self) -> bool {
        self != SessionKind::User
    }
}

/// A session's metadata; also the session object of the HTTP API.
///
/// As JSON: `{"id","agent_id","title","created_at","updated_at","parent_id","kind"}`
/// plus `"caller"` and `"callee"` for peer sessions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionMeta {
    /// The session id.
    pub id: SessionId,
    /// The agent the session belongs to, fixed at creation (R-SESS-1).
    #[serde(default = "main_agent")]
    pub agent_id: String,
    /// A title people can set.
    #[serde(default)]
    pub title: Option<String>,
    /// When the session was created.
    pub created_at: Timestamp,
    /// When the session last changed (an entry, a title).
    pub updated_at: Timestamp,
    /// The session this one was forked from.
    #[serde(default)]
    pub parent_id: Option<SessionId>,
    /// What the session is for: `user` (a person's), `peer`, `job`, `mcp`
    /// or `sub` (read-only for people).
    #[serde(default)]
    pub kind: SessionKind,
    /// The delegating agent of a peer session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
    /// The agent delegated to in a peer session (the session's agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callee: Option<String>,
    /// Where a sub-agent run (`kind: "sub"`) was started; its fields sit
    /// at the top level of the JSON object.
    #[serde(default, flatten, skip_serializing_if = "Option::is_none")]
    pub sub: Option<SubOrigin>,
}

/// Where a sub-agent's run was started: the parent's session and tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubOrigin {
    /// The session whose turn ran the sub-agent.
    pub parent_session_id: SessionId,
    /// The `run_subagent` call that ran it.
    pub parent_tool_call_id: String,
    /// The sub-agent's id, `<parent>.<name>` (`main.researcher`).
    pub subagent: String,
}

fn main_agent() -> String {
    super::LEGACY_AGENT_ID.to_owned()
}

impl SessionMeta {
    /// Checks that the session's agent is one the caller knows; the stores
    /// themselves know no agents. The app layer calls this when it opens a
    /// session, with its registry's lookup.
    pub fn check_agent(&self, is_known: impl Fn(&str) -> bool) -> Result<(), super::SessionError> {
        if is_known(&self.agent_id) {
            Ok(())
        } else {
            Err(super::SessionError::UnknownAgent {
                session_id: self.id.as_str().to_owned(),
                agent_id: self.agent_id.clone(),
            })
        }
    }
}

/// Index of the first entry of the last `turns` turns of `entries`: the
/// `turns`-th user message from the end, or 0 when there are fewer turns.
/// `entries.len()` when `turns` is 0.
pub(crate) fn window_start(entries: &[SessionEntry], turns: usize) -> usize {
    if turns == 0 {
        return entries.len();
    }
    let mut seen = 0;
    for (i, e) in entries.iter().enumerate().rev() {
        if e.starts_turn() {
            seen += 1;
            if seen == turns {
                return i;
            }
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(seq: u64, body: EntryBody) -> SessionEntry {
        SessionEntry {
            v: ENTRY_SCHEMA_VERSION,
            seq,
            ts: Timestamp::from_millis(1_795_981_505_123),
            body,
        }
    }

    #[test]
    fn entries_have_a_stable_json_shape() {
        let e = entry(7, EntryBody::message(Message::user("안녕")));
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            json!({"v": 1, "seq": 7, "ts": "2026-11-29T19:45:05.123Z", "kind": "message",
                   "message": {"role": "user", "content": "안녕"}})
        );
        let end = entry(
            9,
            EntryBody::TurnEnd {
                stop_reason: StopReason::MaxTurns,
                turns: 20,
                overflows: 1,
            },
        );
        assert_eq!(
            serde_json::to_value(&end).unwrap(),
            json!({"v": 1, "seq": 9, "ts": "2026-11-29T19:45:05.123Z", "kind": "turn_end",
                   "stop_reason": "max_turns", "turns": 20, "overflows": 1})
        );
        let start = entry(8, EntryBody::turn_start("t-1"));
        assert_eq!(
            serde_json::to_value(&start).unwrap(),
            json!({"v": 1, "seq": 8, "ts": "2026-11-29T19:45:05.123Z", "kind": "turn_start", "turn_id": "t-1"})
        );
        let legacy: SessionEntry = serde_json::from_value(
            json!({"v": 1, "seq": 1, "ts": "2026-11-29T19:45:05.123Z", "kind": "turn_start"}),
        )
        .unwrap();
        assert_eq!(legacy.body, EntryBody::TurnStart { turn_id: None });
        let proactive = entry(
            10,
            EntryBody::Proactive {
                proactive_kind: ProactiveKind::Proactive,
                message_id: "remind-l1".into(),
                text: "잊지 않으셨죠?".into(),
            },
        );
        assert_eq!(
            serde_json::to_value(&proactive).unwrap(),
            json!({"v": 1, "seq": 10, "ts": "2026-11-29T19:45:05.123Z", "kind": "proactive",
                   "proactive_kind": "proactive", "message_id": "remind-l1", "text": "잊지 않으셨죠?"})
        );
        assert!(!proactive.starts_turn() && proactive.message().is_none());
        for e in [e, end, start, proactive] {
            let back: SessionEntry = serde_json::from_str(&serde_json::to_string(&e).unwrap()).unwrap();
            assert_eq!(back, e);
        }
    }

    #[test]
    fn meta_has_the_http_shape_and_legacy_defaults() {
        let meta: SessionMeta = serde_json::from_value(json!({
            "id": "s1", "created_at": "2026-11-29T19:45:05.123Z", "updated_at": "2026-11-29T19:45:05.123Z"
        }))
        .unwrap();
        assert_eq!(meta.agent_id, "main");
        assert_eq!(meta.kind, SessionKind::User);
        assert_eq!(
            serde_json::to_value(&meta).unwrap(),
            json!({"id": "s1", "agent_id": "main", "title": null, "created_at": "2026-11-29T19:45:05.123Z",
                   "updated_at": "2026-11-29T19:45:05.123Z", "parent_id": null, "kind": "user"})
        );
        assert!(meta.check_agent(|a| a == "main").is_ok());
        let err = meta.check_agent(|_| false).unwrap_err();
        assert_eq!(
            err.to_string(),
            "session store: session s1 belongs to agent \"main\", which is not defined"
        );
    }

    #[test]
    fn the_window_starts_at_a_user_message() {
        let entries = vec![
            entry(1, EntryBody::TurnStart { turn_id: None }),
            entry(2, EntryBody::message(Message::user("a"))),
            entry(3, EntryBody::message(Message::assistant_text("A"))),
            entry(4, EntryBody::TurnStart { turn_id: None }),
            entry(5, EntryBody::message(Message::user("b"))),
            entry(6, EntryBody::message(Message::assistant_text("B"))),
        ];
        assert_eq!(window_start(&entries, 0), 6);
        assert_eq!(window_start(&entries, 1), 4);
        assert_eq!(window_start(&entries, 2), 1);
        assert_eq!(window_start(&entries, 3), 0);
    }
}
