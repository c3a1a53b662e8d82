//! [`ProviderError`]: everything that can go wrong in a model call. Every
//! variant names the provider (`openai`, `anthropic`, `ollama`, `faux`, …).

use std::time::Duration;

/// A failed model call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// The model service answered with an error.
    #[error("{provider} api error{}: {message}", status.map(|s| format!(" (status {s})")).unwrap_or_default())]
    Api {
        /// Which provider.
        provider: String,
        /// HTTP status, when there was one.
        status: Option<u16>,
        /// The service's message, or a short excerpt of its body.
        message: String,
        /// How long the service asked us to wait before retrying.
        retry_after: Option<Duration>,
    },
    /// The service could not be reached or the connection broke.
    #[error("{provider} transport error: {message}")]
    Transport {
        /// Which provider.
        provider: String,
        /// What happened.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The response stream was malformed.
    #[error("{provider} stream error: {message}")]
    Stream {
        /// Which provider.
        provider: String,
        /// What was wrong, with context.
        message: String,
    },
    /// The stream ended before its stop event.
    #[error("{provider} stream ended before the response was complete")]
    Incomplete {
        /// Which provider.
        provider: String,
    },
    /// The provider is misconfigured (missing key, bad URL, bad model name).
    #[error("provider configuration error: {0}")]
    Config(String),
    /// A `FauxProvider` script is invalid or has run out.
    #[error("faux provider script error: {0}")]
    Script(String),
}

impl ProviderError {
    /// A service error with an optional HTTP status.
    pub fn api(provider: impl Into<String>, status: Option<u16>, message: impl Into<String>) -> Self {
        ProviderError::Api {
            provider: provider.into(),
            status,
            message: message.into(),
            retry_after: None,
        }
    }

    /// A malformed stream.
    pub fn stream(provider: impl Into<String>, message: impl Into<String>) -> Self {
        ProviderError::Stream {
            provider: provider.into(),
            message: message.into(),
        }
    }

    /// A stream that ended early.
    pub fn incomplete(provider: impl Into<String>) -> Self {
        ProviderError::Incomplete {
            provider: provider.into(),
        }
    }

    /// A connection problem.
    pub fn transport(
        provider: impl Into<String>,
        message: impl Into<String>,
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        ProviderError::Transport {
            provider: provider.into(),
            message: message.into(),
            source,
        }
    }

    /// The HTTP status, when the service sent one.
    pub fn status(&self) -> Option<u16> {
        match self {
            ProviderError::Api { status, .. } => *status,
            _ => None,
        }
    }

    /// Whether retrying the same call later could succeed (timeout,
    /// overload, rate limit, server error, refused connection).
    pub fn is_transient(&self) -> bool {
        match self {
            ProviderError::Api { status: Some(s), .. } => *s == 408 || *s == 409 || *s == 429 || *s >= 500,
            ProviderError::Transport { .. } => true,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_provider() {
        assert_eq!(
            ProviderError::api("anthropic", Some(529), "overloaded_error: Overloaded").to_string(),
            "anthropic api error (status 529): overloaded_error: Overloaded"
        );
        assert_eq!(
            ProviderError::api("faux", None, "boom").to_string(),
            "faux api error: boom"
        );
        assert!(ProviderError::api("x", Some(529), "x").is_transient());
        assert!(ProviderError::api("x", Some(429), "x").is_transient());
        assert!(!ProviderError::api("x", Some(400), "x").is_transient());
        assert!(!ProviderError::incomplete("x").is_transient());
    }
}
