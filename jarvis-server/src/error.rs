//! [`AppError`]: an HTTP error as the client sees it,
//! `{"error": {"code", "message"}}`. Internal failures are logged here and
//! reach the client only as "internal error".

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::protocol::{ErrorBody, ErrorDetail, codes};

/// An error response; the message never carries internal detail.
#[derive(Debug)]
pub(crate) struct AppError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl AppError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, codes::BAD_REQUEST, message)
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, codes::NOT_FOUND, message)
    }

    pub(crate) fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            codes::UNAUTHORIZED,
            "this server requires a token: open /?token=… once in the browser, or send Authorization: Bearer …",
        )
    }

    /// Logs `error` and answers "internal error".
    pub(crate) fn internal(what: &str, error: &dyn std::fmt::Display) -> Self {
        tracing::error!(%error, "{what}");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            codes::INTERNAL,
            "internal error; the server's log has the details",
        )
    }
}

impl From<jarvis_sdk::app::AppError> for AppError {
    fn from(error: jarvis_sdk::app::AppError) -> Self {
        match &error {
            jarvis_sdk::app::AppError::UnknownAgent(agent) => Self::new(
                StatusCode::BAD_REQUEST,
                codes::UNKNOWN_AGENT,
                format!("there is no agent {agent:?} in the team"),
            ),
            jarvis_sdk::app::AppError::Session(e) if e.is_not_found() => Self::not_found("no such session"),
            jarvis_sdk::app::AppError::Session(e) if e.is_invalid_input() => Self::bad_request(e.to_string()),
            _ => Self::internal("request failed", &error),
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_owned(),
                message: self.message,
            },
        };
        (self.status, Json(body)).into_response()
    }
}
