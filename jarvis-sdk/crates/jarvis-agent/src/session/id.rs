//! [`SessionId`]: a validated session id, safe to use as a file name.
//!
//! Ids are opaque: `default-<agent>` and `peer-<caller>-<callee>` are
//! conventions for finding a session, never parsed for meaning (a peer
//! session records its caller and callee in its metadata).

use serde::{Deserialize, Serialize};
use std::fmt;

use super::error::SessionError;
use jarvis_common::IdSource;

/// The longest session id, in bytes.
pub const MAX_SESSION_ID_LEN: usize = 128;

/// The longest agent id, in bytes; two of them fit in a peer session id.
pub const MAX_AGENT_ID_LEN: usize = 60;

/// A session id: 1 to [`MAX_SESSION_ID_LEN`] characters of `A–Z a–z 0–9 _ -`.
///
/// Nothing else passes, so an id can never address a path outside the
/// sessions folder (no `.`, `/`, `\`, NUL or empty id), and the names
/// Windows reserves for devices (`con`, `nul`, `com1`, …) are refused too.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SessionId(String);

impl SessionId {
    /// Validates `id`.
    pub fn new(id: impl Into<String>) -> Result<Self, SessionError> {
        let id = id.into();
        match check(&id, MAX_SESSION_ID_LEN) {
            Ok(()) => Ok(SessionId(id)),
            Err(reason) => Err(SessionError::InvalidId {
                id: printable(&id),
                reason,
            }),
        }
    }

    /// `default-<agent>`, the session the CLI opens for an agent.
    pub fn default_for(agent_id: &str) -> Result<Self, SessionError> {
        validate_agent_id(agent_id)?;
        SessionId::new(format!("default-{agent_id}"))
    }

    /// `peer-<caller>-<callee>`, the session one agent delegates to another in.
    pub fn peer(caller: &str, callee: &str) -> Result<Self, SessionError> {
        validate_agent_id(caller)?;
        validate_agent_id(callee)?;
        SessionId::new(format!("peer-{caller}-{callee}"))
    }

    /// A fresh id `s_<unique>` from `ids`.
    pub fn generate(ids: &dyn IdSource) -> Result<Self, SessionError> {
        SessionId::new(ids.next_id("s_"))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for SessionId {
    type Err = SessionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SessionId::new(s)
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for SessionId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for SessionId {
    type Error = SessionError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        SessionId::new(value)
    }
}

impl TryFrom<&str> for SessionId {
    type Error = SessionError;
    fn try_from(value: &str) -> Result<Self, Self::Error> {
        SessionId::new(value)
    }
}

impl From<SessionId> for String {
    fn from(id: SessionId) -> Self {
        id.0
    }
}

/// Checks an agent id: 1 to [`MAX_AGENT_ID_LEN`] characters of
/// `A–Z a–z 0–9 _ -`, the same alphabet as session ids.
pub fn validate_agent_id(agent_id: &str) -> Result<(), SessionError> {
    check(agent_id, MAX_AGENT_ID_LEN).map_err(|reason| SessionError::InvalidAgentId {
        agent_id: printable(agent_id),
        reason,
    })
}

/// Why `id` is not a valid session id, if it is not (shared with the sandbox,
/// which names its directories by session id).
pub fn session_id_problem(id: &str) -> Option<&'static str> {
    check(id, MAX_SESSION_ID_LEN).err()
}

fn check(id: &str, max: usize) -> Result<(), &'static str> {
    if id.is_empty() {
        return Err("it is empty");
    }
    if id.len() > max {
        return Err("it is too long");
    }
    if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err("only letters, digits, '_' and '-' are allowed");
    }
    let lower = id.to_ascii_lowercase();
    let reserved = matches!(lower.as_str(), "con" | "prn" | "aux" | "nul")
        || ((lower.starts_with("com") || lower.starts_with("lpt"))
            && lower.len() == 4
            && lower.as_bytes()[3].is_ascii_digit());
    if reserved {
        return Err("it is a reserved device name");
    }
    Ok(())
}

/// `id` shortened and escaped for an error message.
fn printable(id: &str) -> String {
    let short: String = id.chars().take(MAX_SESSION_ID_LEN + 8).collect();
    format!("{short:?}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use jarvis_common::SequentialIds;

    #[test]
    fn accepts_the_fixed_forms_and_generated_ids() {
        assert_eq!(SessionId::default_for("karen").unwrap().as_str(), "default-karen");
        assert_eq!(
            SessionId::peer("main", "karen").unwrap().as_str(),
            "peer-main-karen"
        );
        let ids = SequentialIds::default();
        assert_eq!(SessionId::generate(&ids).unwrap().as_str(), "s_1");
        let unique = jarvis_common::UniqueIds::new();
        assert!(SessionId::generate(&unique).is_ok());
        assert!(SessionId::new("a".repeat(MAX_SESSION_ID_LEN)).is_ok());
        let longest_agent = "a".repeat(MAX_AGENT_ID_LEN);
        assert!(SessionId::peer(&longest_agent, &longest_agent).is_ok());
    }

    #[test]
    fn rejects_anything_that_could_leave_the_sessions_folder() {
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            "a\\b",
            "a\0b",
            "/etc/passwd",
            "x.jsonl",
            "sp ace",
            "é",
            "NUL",
            "com1",
            "Lpt9",
            &"a".repeat(MAX_SESSION_ID_LEN + 1),
        ] {
            let err = SessionId::new(bad).unwrap_err();
            assert!(matches!(err, SessionError::InvalidId { .. }), "{bad:?}");
            assert!(
                err.to_string().starts_with("session store: invalid session id"),
                "{err}"
            );
        }
        assert!(SessionId::default_for("ka/ren").is_err());
        assert!(SessionId::peer("main", "").is_err());
    }

    #[test]
    fn deserialising_validates() {
        let id: SessionId = serde_json::from_str("\"default-main\"").unwrap();
        assert_eq!(id.as_str(), "default-main");
        assert!(serde_json::from_str::<SessionId>("\"../etc\"").is_err());
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"default-main\"");
    }
}
