//! Errors of the housing tools: [`NoticeError`] for notice look-ups and
//! [`HousingError`] for the profile and watch stores.

use std::path::PathBuf;

/// A failed notice look-up. Every message names the source (`lh`, `sh`,
/// `fixture`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NoticeError {
    /// The source cannot be used as configured (no service key, no feed).
    #[error("{service} notice source is not configured: {message}")]
    NotConfigured {
        /// Which source.
        service: String,
        /// What is missing and how to supply it.
        message: String,
    },
    /// The service could not be reached (offline, refused, timed out).
    #[error("{service} notice source is unreachable: {message}")]
    Unreachable {
        /// Which source.
        service: String,
        /// What happened.
        message: String,
        /// The underlying error.
        #[source]
        cause: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The service answered with a refusal: an HTTP error status, a gateway
    /// error (an unregistered key, a quota), or a result code other than
    /// success.
    #[error("{service} notice service refused the request{}: {message}", status.map(|s| format!(" (status {s})")).unwrap_or_default())]
    Api {
        /// Which source.
        service: String,
        /// The HTTP status, when there was one.
        status: Option<u16>,
        /// The service's message or a short excerpt of its answer.
        message: String,
    },
    /// The answer did not have the documented shape.
    #[error("{service} notice answer is malformed: {message}")]
    Malformed {
        /// Which source.
        service: String,
        /// What was wrong, with a short excerpt.
        message: String,
    },
}

impl NoticeError {
    /// A source that lacks configuration.
    pub fn not_configured(service: impl Into<String>, message: impl Into<String>) -> Self {
        NoticeError::NotConfigured {
            service: service.into(),
            message: message.into(),
        }
    }

    /// An answer of the wrong shape.
    pub fn malformed(service: impl Into<String>, message: impl Into<String>) -> Self {
        NoticeError::Malformed {
            service: service.into(),
            message: message.into(),
        }
    }

    /// A refusal by the service.
    pub fn api(service: impl Into<String>, status: Option<u16>, message: impl Into<String>) -> Self {
        NoticeError::Api {
            service: service.into(),
            status,
            message: message.into(),
        }
    }

    /// Whether the source is missing configuration (rather than failing).
    pub fn is_not_configured(&self) -> bool {
        matches!(self, NoticeError::NotConfigured { .. })
    }

    /// Whether the service could not be reached.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, NoticeError::Unreachable { .. })
    }
}

/// A failure of the housing profile or watch stores.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HousingError {
    /// Reading or writing a store file failed.
    #[error("housing store i/o error on {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A store file exists but does not parse; it is left untouched.
    #[error("housing store file {} is not valid: {message}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },
    /// A value was out of range or inconsistent.
    #[error("housing input is invalid: {0}")]
    Invalid(String),
    /// A notice look-up failed while checking a watch.
    #[error(transparent)]
    Notice(#[from] NoticeError),
}
