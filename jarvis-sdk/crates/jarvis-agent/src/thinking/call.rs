//! What the thinking parts share around their one model call each: the
//! editable template with its default, the call under a timeout, the JSON
//! object in the answer, and [`LearnError`].

use serde_json::Value;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use jarvis_memory::{MemoryError, MemoryService, ScopeResolver};
use jarvis_model::{ChatRequest, Provider, ProviderError, ProviderExt};

/// What both learners ([`Reflector`](super::Reflector),
/// [`Distiller`](super::Distiller)) hold: the model they ask, the memory
/// they read and write, the scopes they act in, and the lock that runs
/// their passes one at a time.
pub(super) struct Learner {
    pub(super) provider: Arc<dyn Provider>,
    pub(super) memory: Arc<MemoryService>,
    pub(super) scopes: Arc<dyn ScopeResolver>,
    pub(super) busy: tokio::sync::Mutex<()>,
}

impl Learner {
    pub(super) fn new(
        provider: Arc<dyn Provider>,
        memory: Arc<MemoryService>,
        scopes: Arc<dyn ScopeResolver>,
    ) -> Self {
        Self {
            provider,
            memory,
            scopes,
            busy: tokio::sync::Mutex::new(()),
        }
    }
}

impl std::fmt::Debug for Learner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Learner")
            .field("provider", &self.provider.name())
            .finish_non_exhaustive()
    }
}

/// Why a learning pass (reflection, distillation) wrote nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LearnError {
    /// Memory could not be read or written.
    #[error("learning: memory failed")]
    Memory(#[from] MemoryError),
    /// The model call failed.
    #[error("learning: the {purpose} call failed")]
    Model {
        /// `reflection` or `distillation`.
        purpose: &'static str,
        /// The provider's error.
        #[source]
        source: ProviderError,
    },
    /// The model call took too long.
    #[error("learning: the {purpose} call took longer than {timeout:?}")]
    Timeout {
        /// `reflection` or `distillation`.
        purpose: &'static str,
        /// The limit.
        timeout: Duration,
    },
    /// The answer was not what was asked for.
    #[error("learning: the {purpose} answer is not usable: {reason}")]
    Answer {
        /// `reflection` or `distillation`.
        purpose: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// The template at `path`, or `default` when there is no path, the file is
/// missing or unreadable, or it holds only whitespace.
pub(super) fn read_template(path: Option<&Path>, default: &str) -> String {
    path.and_then(|path| std::fs::read_to_string(path).ok())
        .filter(|t| !t.trim().is_empty())
        .unwrap_or_else(|| default.to_owned())
}

/// The text of `provider`'s answer to `request`, within `timeout`.
pub(super) async fn ask(
    provider: &dyn Provider,
    request: ChatRequest,
    timeout: Duration,
    purpose: &'static str,
) -> Result<String, LearnError> {
    let response = tokio::time::timeout(timeout, provider.complete(request))
        .await
        .map_err(|_| LearnError::Timeout { purpose, timeout })?
        .map_err(|source| LearnError::Model { purpose, source })?;
    Ok(response.text)
}

/// The JSON object in a model's answer: from its first `{` to its last `}`
/// (models often wrap it in a code fence or a sentence). Line breaks and
/// tabs written raw inside its strings (models do that in multi-line
/// values such as a procedure's steps) are read as if escaped.
pub(super) fn json_object(text: &str) -> Result<Value, String> {
    let start = text.find('{').ok_or("no JSON object in the answer")?;
    let end = text.rfind('}').ok_or("no JSON object in the answer")?;
    if end < start {
        return Err("no JSON object in the answer".into());
    }
    let object = &text[start..=end];
    serde_json::from_str(object)
        .or_else(|first| serde_json::from_str(&escape_raw_controls(object)).map_err(|_| first))
        .map_err(|e| format!("invalid JSON: {e}"))
}

/// `json` with the line breaks and tabs that stand raw inside its strings
/// escaped; everything else as it was.
fn escape_raw_controls(json: &str) -> String {
    let mut out = String::with_capacity(json.len() + 16);
    let (mut in_string, mut escaped) = (false, false);
    for c in json.chars() {
        match c {
            '\n' if in_string => out.push_str("\\n"),
            '\r' if in_string => out.push_str("\\r"),
            '\t' if in_string => out.push_str("\\t"),
            _ => {
                if in_string && !escaped && c == '"' {
                    in_string = false;
                } else if !in_string && c == '"' {
                    in_string = true;
                }
                escaped = in_string && !escaped && c == '\\';
                out.push(c);
                continue;
            }
        }
        escaped = false;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_object_is_found_and_raw_line_breaks_in_strings_are_read() {
        let value = json_object("Sure:\n```json\n{\"a\": \"1. x\n2. \\\"y\\\"\t\"}\n```").unwrap();
        assert_eq!(value["a"], "1. x\n2. \"y\"\t");
        // Line breaks between tokens are JSON already.
        assert_eq!(json_object("{\n\"a\": 1\n}").unwrap()["a"], 1);
        for bad in ["none", "} {", "{\"a\": }", "{\"a\": \"x\u{1}\"}"] {
            assert!(json_object(bad).is_err(), "{bad:?}");
        }
    }
}
