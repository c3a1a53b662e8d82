//! HTTP plumbing shared by the real providers (and by packs' look-ups,
//! through [`HttpClient`]): one client with connect and read timeouts, retries with exponential backoff and jitter (only before
//! the first byte of a response body), error bodies turned into short
//! messages, secrets kept out of logs, and the adapter that turns a response
//! body into a [`ProviderStream`] through a sans-IO [`StreamDecoder`].

pub(crate) mod ndjson;
pub(crate) mod sse;

use futures::future::BoxFuture;
use futures::{StreamExt, stream};
use serde_json::Value;
use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::error::ProviderError;
use super::event::ProviderEvent;
use super::provider::ProviderStream;

/// Waits; injected so retry tests need neither real time nor paused time
/// over real sockets.
pub trait Sleeper: Send + Sync + fmt::Debug {
    /// A future that completes after `duration`.
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()>;
}

/// The real sleeper (`tokio::time::sleep`).
#[derive(Debug, Default, Clone, Copy)]
pub struct TokioSleeper;

impl Sleeper for TokioSleeper {
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// When and how often a failed call is tried again.
///
/// Only failures before the first byte of the response body are retried:
/// HTTP 408, 409, 429 and 5xx answers and connection errors. Once output has
/// begun, a failure ends the call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt. Default 3.
    pub max_retries: u32,
    /// The first backoff; doubles per retry. Default 500 ms.
    pub initial_backoff: Duration,
    /// The backoff never exceeds this. Default 20 s.
    pub max_backoff: Duration,
    /// A `Retry-After` longer than this is cut to it. Default 60 s.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(20),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

/// Timeouts and retries of a provider's HTTP client.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// Time to establish a connection. Default 10 s.
    pub connect_timeout: Duration,
    /// Longest silence between two reads of a response. Default 120 s.
    pub read_timeout: Duration,
    /// Retries before the first byte.
    pub retry: RetryPolicy,
    /// How retries wait.
    pub sleeper: Arc<dyn Sleeper>,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(120),
            retry: RetryPolicy::default(),
            sleeper: Arc::new(TokioSleeper),
        }
    }
}

/// Turns a provider's response body into events; sans-IO, so it can be fed
/// bytes split anywhere.
pub trait StreamDecoder: Send + 'static {
    /// Feeds the next bytes of the body.
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<ProviderEvent>) -> Result<(), ProviderError>;
    /// The body ended. Emits the final `Stop` if the response was complete,
    /// or fails with [`ProviderError::Incomplete`] if it was cut off.
    fn finish(&mut self, out: &mut Vec<ProviderEvent>) -> Result<(), ProviderError>;
}

/// Runs `decoder` over `chunks` in order; for tests and offline replays.
pub fn decode_chunks<D: StreamDecoder>(
    mut decoder: D,
    chunks: impl IntoIterator<Item = impl AsRef<[u8]>>,
) -> Result<Vec<ProviderEvent>, ProviderError> {
    let mut out = Vec::new();
    for chunk in chunks {
        decoder.feed(chunk.as_ref(), &mut out)?;
    }
    decoder.finish(&mut out)?;
    Ok(out)
}

/// The HTTP client of one provider or look-up service: timeouts, retries
/// with jittered backoff on transient failures, and error messages that never
/// carry the URL (a key sent in the query stays out of logs). Packs use it
/// for their own services.
#[derive(Debug)]
pub struct HttpClient {
    provider: &'static str,
    client: reqwest::Client,
    settings: HttpSettings,
    jitter: AtomicU64,
}

impl HttpClient {
    /// A client for `provider` (named in its errors) with `settings`.
    pub fn new(provider: &'static str, settings: HttpSettings) -> Result<Self, ProviderError> {
        let client = reqwest::Client::builder()
            .connect_timeout(settings.connect_timeout)
            .read_timeout(settings.read_timeout)
            .build()
            .map_err(|e| ProviderError::Config(format!("{provider}: cannot build the HTTP client: {e}")))?;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x9e37_79b9_7f4a_7c15)
            | 1;
        Ok(Self {
            provider,
            client,
            settings,
            jitter: AtomicU64::new(seed),
        })
    }

    /// POSTs `body` as JSON, retrying per the policy until a success status.
    #[cfg_attr(
        not(any(feature = "openai", feature = "anthropic", feature = "ollama")),
        allow(dead_code)
    )]
    pub(crate) async fn post_json(
        &self,
        url: &str,
        headers: &[(&'static str, String, bool)],
        body: &Value,
    ) -> Result<reqwest::Response, ProviderError> {
        self.send_with_retries(|| {
            let mut request = self.client.post(url).json(body);
            for (name, value, sensitive) in headers {
                let mut value = reqwest::header::HeaderValue::from_str(value).map_err(|_| {
                    ProviderError::Config(format!(
                        "{}: the {name} header has invalid characters",
                        self.provider
                    ))
                })?;
                value.set_sensitive(*sensitive);
                request = request.header(*name, value);
            }
            Ok(request)
        })
        .await
    }

    /// GETs `url` with `query` appended (percent-encoded), retrying per the
    /// policy until a success status. Error messages never contain the URL,
    /// so a key sent in the query stays out of logs.
    pub async fn get(&self, url: &str, query: &[(&str, String)]) -> Result<reqwest::Response, ProviderError> {
        self.send_with_retries(|| Ok(self.client.get(url).query(query)))
            .await
    }

    /// Sends the request `build` makes, again after each transient failure
    /// before the first byte of a success answer.
    async fn send_with_retries(
        &self,
        build: impl Fn() -> Result<reqwest::RequestBuilder, ProviderError>,
    ) -> Result<reqwest::Response, ProviderError> {
        let retry = &self.settings.retry;
        let mut attempt = 0;
        loop {
            let error = match build()?.send().await {
                Ok(response) if response.status().is_success() => return Ok(response),
                Ok(response) => self.error_from_response(response).await,
                Err(e) => self.transport_error(e),
            };
            if attempt >= retry.max_retries || !error.is_transient() {
                return Err(error);
            }
            let delay = match &error {
                ProviderError::Api {
                    retry_after: Some(after),
                    ..
                } => (*after).min(retry.max_retry_after),
                _ => self.backoff(attempt),
            };
            tracing::warn!(provider = self.provider, attempt = attempt + 1, ?delay, %error, "retrying the call");
            self.settings.sleeper.sleep(delay).await;
            attempt += 1;
        }
    }

    /// Exponential backoff with equal jitter: half fixed, half random.
    fn backoff(&self, attempt: u32) -> Duration {
        let retry = &self.settings.retry;
        let full = retry
            .initial_backoff
            .saturating_mul(1u32 << attempt.min(16))
            .min(retry.max_backoff);
        let half = full / 2;
        let mut x = self.jitter.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.jitter.store(x, Ordering::Relaxed);
        let spread = half.as_nanos().max(1) as u64;
        half + Duration::from_nanos(x % spread)
    }

    /// Reads a whole success body, refusing one longer than `limit` bytes.
    pub async fn read_body(
        &self,
        response: reqwest::Response,
        limit: usize,
    ) -> Result<Vec<u8>, ProviderError> {
        let mut body = Vec::new();
        let mut bytes = response.bytes_stream();
        while let Some(chunk) = bytes.next().await {
            body.extend_from_slice(&chunk.map_err(|e| self.transport_error(e))?);
            if body.len() > limit {
                return Err(ProviderError::stream(
                    self.provider,
                    format!("the response is longer than {limit} bytes"),
                ));
            }
        }
        Ok(body)
    }

    /// A transport failure as a [`ProviderError`]; the URL is left out of
    /// the message (a query may carry a key).
    pub(crate) fn transport_error(&self, e: reqwest::Error) -> ProviderError {
        let e = e.without_url();
        let what = if e.is_timeout() {
            "the request timed out"
        } else if e.is_connect() {
            "cannot connect"
        } else if e.is_body() || e.is_decode() {
            "the response body broke off"
        } else {
            "the request failed"
        };
        let message = format!("{what}: {}", jarvis_common::error_chain(&e));
        ProviderError::transport(self.provider, message, Some(Box::new(e)))
    }

    async fn error_from_response(&self, response: reqwest::Response) -> ProviderError {
        let status = response.status().as_u16();
        let retry_after = retry_after(response.headers());
        let body = read_limited(response, 64 * 1024).await;
        ProviderError::Api {
            provider: self.provider.to_owned(),
            status: Some(status),
            message: error_message(&body),
            retry_after,
        }
    }

    /// A stream of events from a response that `send` will produce.
    #[cfg_attr(
        not(any(feature = "openai", feature = "anthropic", feature = "ollama")),
        allow(dead_code)
    )]
    pub(crate) fn event_stream<D: StreamDecoder>(
        self: &Arc<Self>,
        url: String,
        headers: Vec<(&'static str, String, bool)>,
        body: Value,
        decoder: D,
    ) -> ProviderStream {
        let client = Arc::clone(self);
        let state = State::Start {
            client,
            url,
            headers,
            body,
            decoder,
        };
        Box::pin(stream::unfold(state, next_event))
    }
}

#[cfg_attr(
    not(any(feature = "openai", feature = "anthropic", feature = "ollama")),
    allow(dead_code)
)]
enum State<D> {
    Start {
        client: Arc<HttpClient>,
        url: String,
        headers: Vec<(&'static str, String, bool)>,
        body: Value,
        decoder: D,
    },
    Body {
        client: Arc<HttpClient>,
        bytes: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
        decoder: D,
        pending: VecDeque<ProviderEvent>,
    },
    Draining(VecDeque<ProviderEvent>),
    Done,
}

#[cfg_attr(
    not(any(feature = "openai", feature = "anthropic", feature = "ollama")),
    allow(dead_code)
)]
async fn next_event<D: StreamDecoder>(
    mut state: State<D>,
) -> Option<(Result<ProviderEvent, ProviderError>, State<D>)> {
    loop {
        state = match state {
            State::Done => return None,
            State::Draining(mut pending) => {
                let event = pending.pop_front()?;
                return Some((Ok(event), State::Draining(pending)));
            }
            State::Start {
                client,
                url,
                headers,
                body,
                decoder,
            } => match client.post_json(&url, &headers, &body).await {
                Err(error) => return Some((Err(error), State::Done)),
                Ok(response) => State::Body {
                    client,
                    bytes: response.bytes_stream().boxed(),
                    decoder,
                    pending: VecDeque::new(),
                },
            },
            State::Body {
                client,
                mut bytes,
                mut decoder,
                mut pending,
            } => {
                if let Some(event) = pending.pop_front() {
                    return Some((
                        Ok(event),
                        State::Body {
                            client,
                            bytes,
                            decoder,
                            pending,
                        },
                    ));
                }
                let mut out = Vec::new();
                match bytes.next().await {
                    Some(Ok(chunk)) => {
                        if let Err(error) = decoder.feed(&chunk, &mut out) {
                            return Some((Err(error), State::Done));
                        }
                        pending.extend(out);
                        State::Body {
                            client,
                            bytes,
                            decoder,
                            pending,
                        }
                    }
                    Some(Err(e)) => return Some((Err(client.transport_error(e)), State::Done)),
                    None => match decoder.finish(&mut out) {
                        Err(error) => return Some((Err(error), State::Done)),
                        Ok(()) => State::Draining(out.into()),
                    },
                }
            }
        };
    }
}

/// Reads at most `limit` bytes of a body, lossily as text.
async fn read_limited(response: reqwest::Response, limit: usize) -> String {
    let mut body = Vec::new();
    let mut bytes = response.bytes_stream();
    while let Some(Ok(chunk)) = bytes.next().await {
        body.extend_from_slice(&chunk);
        if body.len() >= limit {
            body.truncate(limit);
            break;
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

/// `Retry-After` (seconds) or `retry-after-ms`.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return (ms.is_finite() && ms >= 0.0).then(|| Duration::from_secs_f64(ms / 1000.0));
    }
    let secs = get("retry-after")?.parse::<f64>().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(86_400.0)))
}

/// The message of an error body: `error.type: error.message` (OpenAI,
/// Anthropic), `error` as a string (Ollama), `message`, or an excerpt.
pub(crate) fn error_message(body: &str) -> String {
    if let Ok(json) = serde_json::from_str::<Value>(body) {
        let error = &json["error"];
        if let Some(message) = error["message"].as_str() {
            return match error["type"].as_str().or(error["code"].as_str()) {
                Some(kind) => format!("{kind}: {message}"),
                None => message.to_owned(),
            };
        }
        if let Some(message) = error.as_str().or(json["message"].as_str()) {
            return message.to_owned();
        }
    }
    excerpt(body, 300)
}

/// `text` with whitespace collapsed, cut to `max` characters.
pub(crate) fn excerpt(text: &str, max: usize) -> String {
    let line = jarvis_common::one_line(text, max);
    if line.is_empty() {
        return "(empty body)".to_owned();
    }
    line
}

/// Joins a base URL and a path without doubling or losing the slash.
pub fn join_url(base: &str, path: &str) -> String {
    format!("{}/{}", base.trim_end_matches('/'), path.trim_start_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_become_short_messages() {
        assert_eq!(
            error_message(r#"{"error":{"message":"Incorrect API key","type":"invalid_request_error"}}"#),
            "invalid_request_error: Incorrect API key"
        );
        assert_eq!(
            error_message(r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#),
            "overloaded_error: Overloaded"
        );
        assert_eq!(
            error_message(r#"{"error":"model 'x' not found"}"#),
            "model 'x' not found"
        );
        assert_eq!(
            error_message("<html>\n  502 Bad   Gateway</html>"),
            "<html> 502 Bad Gateway</html>"
        );
        assert_eq!(error_message(""), "(empty body)");
        assert_eq!(jarvis_common::char_len(&error_message(&"x".repeat(5000))), 300);
    }

    #[test]
    fn retry_after_reads_seconds_and_milliseconds() {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("retry-after", "7".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        h.insert("retry-after-ms", "1500".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_millis(1500)));
        let mut bad = reqwest::header::HeaderMap::new();
        bad.insert("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap());
        assert_eq!(retry_after(&bad), None);
    }

    #[test]
    fn backoff_doubles_within_jitter_and_is_capped() {
        let client = HttpClient::new("test", HttpSettings::default()).unwrap();
        for attempt in 0..8 {
            let full = Duration::from_millis(500 * (1 << attempt)).min(Duration::from_secs(20));
            let d = client.backoff(attempt);
            assert!(d >= full / 2 && d <= full, "attempt {attempt}: {d:?}");
        }
    }

    #[test]
    fn keys_never_show() {
        let key = crate::ApiKey::new("sk-secret-123");
        assert_eq!(format!("{key:?}"), "ApiKey(<redacted>)");
        assert_eq!(key.expose(), "sk-secret-123");
    }

    #[test]
    fn urls_join_with_one_slash() {
        assert_eq!(
            join_url("http://h/v1/", "/chat/completions"),
            "http://h/v1/chat/completions"
        );
        assert_eq!(
            join_url("http://h/v1", "chat/completions"),
            "http://h/v1/chat/completions"
        );
    }
}
