//! [`ProviderError`]: everything that can go wrong in a model call.

/// A failed model call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// The model service answered with an error.
    #[error("provider api error{}: {message}", status.map(|s| format!(" (status {s})")).unwrap_or_default())]
    Api {
        /// HTTP status, when there was one.
        status: Option<u16>,
        /// The service's message.
        message: String,
    },
    /// The service could not be reached or the connection broke.
    #[error("provider transport error: {message}")]
    Transport {
        /// What happened.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The response stream was malformed.
    #[error("provider stream error: {0}")]
    Stream(String),
    /// The stream ended before its stop event.
    #[error("provider stream ended without a stop event")]
    Incomplete,
    /// The provider is misconfigured (missing key, bad URL, bad model name).
    #[error("provider configuration error: {0}")]
    Config(String),
    /// A `FauxProvider` script is invalid or has run out.
    #[error("faux provider script error: {0}")]
    Script(String),
}

impl ProviderError {
    /// A service error with an optional HTTP status.
    pub fn api(status: Option<u16>, message: impl Into<String>) -> Self {
        ProviderError::Api {
            status,
            message: message.into(),
        }
    }

    /// Whether retrying the same call later could succeed (overload, rate
    /// limit, server error, broken connection).
    pub fn is_transient(&self) -> bool {
        match self {
            ProviderError::Api { status: Some(s), .. } => *s == 408 || *s == 429 || *s >= 500,
            ProviderError::Transport { .. } | ProviderError::Incomplete => true,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_subsystem() {
        assert_eq!(
            ProviderError::api(Some(529), "overloaded").to_string(),
            "provider api error (status 529): overloaded"
        );
        assert_eq!(
            ProviderError::api(None, "boom").to_string(),
            "provider api error: boom"
        );
        assert!(ProviderError::api(Some(529), "x").is_transient());
        assert!(!ProviderError::api(Some(400), "x").is_transient());
    }
}
