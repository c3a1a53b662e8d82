//! The streamable HTTP transport's client side over the SDK's own reqwest
//! client (rmcp's bundled one would bring a second HTTP stack), following
//! the transport section of the MCP specification
//! (<https://modelcontextprotocol.io/specification/2025-11-25/basic/transports#streamable-http>):
//! every message is a POST answered by `202 Accepted`, a JSON body or an
//! event stream; `Mcp-Session-Id` ties requests to a session; a GET opens
//! the server's own event stream; a DELETE ends the session.
//!
//! Bodies are bounded: a JSON answer at [`MAX_JSON_BODY`], one event of an
//! event stream at [`MAX_EVENT`], an error's text at [`MAX_ERROR_BODY`].

use futures::StreamExt;
use futures::stream::BoxStream;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, ErrorData, ServerJsonRpcMessage};
use rmcp::transport::common::http_header::{
    EVENT_STREAM_MIME_TYPE, HEADER_LAST_EVENT_ID, HEADER_SESSION_ID, JSON_MIME_TYPE,
};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};
use sse_stream::{Sse, SseStream};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

/// The largest JSON answer read, in bytes.
pub(crate) const MAX_JSON_BODY: usize = 16 * 1024 * 1024;
/// The largest single event of an event stream, in bytes.
pub(crate) const MAX_EVENT: usize = 16 * 1024 * 1024;
/// How much of an error answer's body is kept, in bytes.
pub(crate) const MAX_ERROR_BODY: usize = 4 * 1024;

/// An MCP streamable HTTP client over a reqwest client.
#[derive(Debug, Clone)]
pub(crate) struct McpHttpClient {
    http: reqwest::Client,
}

impl McpHttpClient {
    pub(crate) fn new(http: reqwest::Client) -> Self {
        Self { http }
    }
}

type Error = StreamableHttpError<reqwest::Error>;

fn client_error(error: reqwest::Error) -> Error {
    StreamableHttpError::Client(error)
}

fn unexpected(text: String) -> Error {
    StreamableHttpError::UnexpectedServerResponse(Cow::Owned(text))
}

fn media_type_is(value: Option<&HeaderValue>, wanted: &str) -> bool {
    value
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case(wanted))
}

fn with_headers(
    mut request: reqwest::RequestBuilder,
    auth: Option<String>,
    custom: HashMap<HeaderName, HeaderValue>,
) -> reqwest::RequestBuilder {
    if let Some(token) = auth {
        request = request.bearer_auth(token);
    }
    for (name, value) in custom {
        request = request.header(name, value);
    }
    request
}

/// Reads at most `limit` bytes of `response`; `Err(())` past the limit.
async fn read_bounded(response: reqwest::Response, limit: usize) -> Result<Result<Vec<u8>, ()>, Error> {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(client_error)?;
        if body.len() + chunk.len() > limit {
            return Ok(Err(()));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Ok(body))
}

/// The start of an error answer's body, as text.
async fn error_text(response: reqwest::Response) -> String {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(Ok(chunk)) = chunks.next().await {
        body.extend_from_slice(&chunk);
        if body.len() >= MAX_ERROR_BODY {
            body.truncate(MAX_ERROR_BODY);
            break;
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

/// A server that predates `server/discover` refuses it with an HTTP client
/// error; the client then falls back to `initialize`, so the refusal is
/// handed back as the JSON-RPC error of that request.
fn refused_discover(
    message: &ClientJsonRpcMessage,
    status: StatusCode,
    body: &str,
) -> Option<ServerJsonRpcMessage> {
    if !status.is_client_error() || matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
        return None;
    }
    let ClientJsonRpcMessage::Request(request) = message else {
        return None;
    };
    if !matches!(request.request, ClientRequest::DiscoverRequest(_)) {
        return None;
    }
    let error = match serde_json::from_str::<ServerJsonRpcMessage>(body) {
        Ok(ServerJsonRpcMessage::Error(error)) => error.error,
        _ => ErrorData::invalid_request(
            format!("server/discover refused with HTTP {status}: {body}"),
            None,
        ),
    };
    Some(ServerJsonRpcMessage::error(error, Some(request.id.clone())))
}

/// Where the last blank line (an event's end: `\n\n` or `\r\n\r\n`) of
/// `chunk` ends, if it has one.
fn last_event_end(chunk: &[u8]) -> Option<usize> {
    let lf = chunk.windows(2).rposition(|w| w == b"\n\n").map(|i| i + 2);
    let crlf = chunk.windows(3).rposition(|w| w == b"\n\r\n").map(|i| i + 3);
    lf.max(crlf)
}

/// An event stream whose events may not grow past [`MAX_EVENT`] bytes.
fn bounded_events(response: reqwest::Response) -> BoxStream<'static, Result<Sse, SseError>> {
    let mut since_event = 0usize;
    let bytes = response.bytes_stream().map(move |chunk| {
        let chunk = chunk.map_err(std::io::Error::other)?;
        match last_event_end(&chunk) {
            Some(end) => since_event = chunk.len() - end,
            None => since_event += chunk.len(),
        }
        if since_event > MAX_EVENT {
            return Err(std::io::Error::other(format!(
                "an event of the server's stream is longer than {MAX_EVENT} bytes"
            )));
        }
        Ok(chunk)
    });
    SseStream::from_bytes_stream(bytes).boxed()
}

fn session_of(headers: &HeaderMap) -> Option<String> {
    headers
        .get(HEADER_SESSION_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

impl StreamableHttpClient for McpHttpClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let mut request = self
            .http
            .post(uri.as_ref())
            .header(ACCEPT, format!("{EVENT_STREAM_MIME_TYPE}, {JSON_MIME_TYPE}"));
        request = with_headers(request, auth_header, custom_headers);
        let attached = session_id.is_some();
        if let Some(session) = session_id {
            request = request.header(HEADER_SESSION_ID, session.as_ref());
        }
        let response = request.json(&message).send().await.map_err(client_error)?;
        let status = response.status();
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == StatusCode::NOT_FOUND && attached {
            return Err(StreamableHttpError::SessionExpired);
        }
        let session = session_of(response.headers());
        let content_type = response.headers().get(CONTENT_TYPE).cloned();
        let answers_nothing = !matches!(message, ClientJsonRpcMessage::Request(_));
        if !status.is_success() {
            let body = error_text(response).await;
            if let Some(refusal) = refused_discover(&message, status, &body) {
                return Ok(StreamableHttpPostResponse::Json(refusal, None));
            }
            if media_type_is(content_type.as_ref(), JSON_MIME_TYPE)
                && let Ok(error @ ServerJsonRpcMessage::Error(_)) = serde_json::from_str(&body)
            {
                return Ok(StreamableHttpPostResponse::Json(error, session));
            }
            return Err(unexpected(format!("HTTP {status}: {}", body.trim())));
        }
        if media_type_is(content_type.as_ref(), EVENT_STREAM_MIME_TYPE) {
            return Ok(StreamableHttpPostResponse::Sse(bounded_events(response), session));
        }
        if media_type_is(content_type.as_ref(), JSON_MIME_TYPE) {
            let Ok(body) = read_bounded(response, MAX_JSON_BODY).await? else {
                return Err(StreamableHttpError::ResponseBodyTooLarge {
                    max_size: MAX_JSON_BODY,
                });
            };
            if body.is_empty() && answers_nothing {
                return Ok(StreamableHttpPostResponse::Accepted);
            }
            let message = serde_json::from_slice(&body)?;
            return Ok(StreamableHttpPostResponse::Json(message, session));
        }
        if answers_nothing {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        Err(StreamableHttpError::UnexpectedContentType(
            content_type.map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()),
        ))
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Error> {
        let request = with_headers(self.http.delete(uri.as_ref()), auth_header, custom_headers)
            .header(HEADER_SESSION_ID, session_id.as_ref());
        let response = request.send().await.map_err(client_error)?;
        if response.status() == StatusCode::METHOD_NOT_ALLOWED {
            return Ok(());
        }
        response.error_for_status().map_err(client_error)?;
        Ok(())
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Error> {
        let mut request = with_headers(
            self.http
                .get(uri.as_ref())
                .header(ACCEPT, format!("{EVENT_STREAM_MIME_TYPE}, {JSON_MIME_TYPE}")),
            auth_header,
            custom_headers,
        );
        if let Some(session) = session_id {
            request = request.header(HEADER_SESSION_ID, session.as_ref());
        }
        if let Some(id) = last_event_id {
            request = request.header(HEADER_LAST_EVENT_ID, id);
        }
        let response = request.send().await.map_err(client_error)?;
        let status = response.status();
        if status == StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        if !status.is_success() {
            let body = error_text(response).await;
            return Err(unexpected(format!("HTTP {status}: {}", body.trim())));
        }
        if !media_type_is(response.headers().get(CONTENT_TYPE), EVENT_STREAM_MIME_TYPE) {
            let found = response
                .headers()
                .get(CONTENT_TYPE)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
            return Err(StreamableHttpError::UnexpectedContentType(found));
        }
        Ok(bounded_events(response))
    }
}
