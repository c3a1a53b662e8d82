//! [`SecurityError`]: why an input was refused, worded for the person.

/// A refused input. The message is shown to the person as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SecurityError {
    /// Nothing was said.
    #[error("security: the message is empty")]
    Empty,
    /// The input is longer than the limit (counted in Unicode characters).
    #[error("security: the message has {chars} characters; the limit is {limit}")]
    TooLong {
        /// Characters in the input (a lower bound when far over the limit).
        chars: usize,
        /// The limit.
        limit: usize,
    },
    /// The input contains a script pattern.
    #[error("security: the message contains a blocked script pattern ({pattern}); write it without markup")]
    ScriptPattern {
        /// Which pattern, in words.
        pattern: &'static str,
    },
    /// The caller could not be identified.
    #[error("security: not authenticated: {0}")]
    Unauthenticated(String),
    /// The caller may not do this.
    #[error("security: not allowed: {0}")]
    Forbidden(String),
}
