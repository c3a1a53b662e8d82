//! [`Client`]: talks to a running server over its HTTP API and WebSocket;
//! `jarvis chat` uses it when a server runs for its home. It speaks the
//! same [`protocol`](crate::protocol) types the server does.

use futures::{SinkExt, StreamExt};
use jarvis_sdk::SessionMeta;
use reqwest::{StatusCode, Url};
use serde::de::DeserializeOwned;
use std::fmt;
use std::path::Path;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

use crate::protocol::{AgentInfo, ClientMessage, ErrorBody, Health, ServerMessage, SessionDetail};
use crate::serve::ServerFile;

/// Why a request to the server failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The URL is not one the client can use.
    #[error("client: bad server URL {0:?}")]
    Url(String),
    /// The server could not be reached or answered nonsense.
    #[error("client: {0}")]
    Transport(String),
    /// The server answered with an error.
    #[error("server: {message} ({status}, {code})")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The error code of the body.
        code: String,
        /// The error message of the body.
        message: String,
    },
    /// The WebSocket is closed.
    #[error("client: the connection is closed")]
    Closed,
}

/// A client of one server.
#[derive(Clone)]
pub struct Client {
    base: Url,
    token: Option<String>,
    http: reqwest::Client,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base.as_str())
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Client {
    /// A client of the server at `base_url` (`http://127.0.0.1:8765`),
    /// presenting `token` when given.
    pub fn new(base_url: &str, token: Option<String>) -> Result<Self, ClientError> {
        let base = Url::parse(base_url).map_err(|_| ClientError::Url(base_url.to_owned()))?;
        if base.scheme() != "http" && base.scheme() != "https" {
            return Err(ClientError::Url(base_url.to_owned()));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| ClientError::Transport(e.to_string()))?;
        Ok(Self { base, token, http })
    }

    /// The server running for `home`, if one answers: the server file names
    /// it and its `/healthz` reports the same process.
    pub async fn discover(home: &Path, token: Option<String>) -> Option<Self> {
        let file = ServerFile::read(home)?;
        let client = Self::new(&file.url, token).ok()?;
        match tokio::time::timeout(Duration::from_secs(3), client.health()).await {
            Ok(Ok(health)) if health.pid == file.pid => Some(client),
            _ => None,
        }
    }

    /// The server's base URL.
    pub fn base_url(&self) -> &str {
        self.base.as_str()
    }

    fn url(&self, path: &str) -> Result<Url, ClientError> {
        self.base
            .join(path)
            .map_err(|_| ClientError::Url(path.to_owned()))
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let mut request = self.http.get(self.url(path)?);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response = request
            .send()
            .await
            .map_err(|e| ClientError::Transport(e.without_url().to_string()))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| ClientError::Transport(e.without_url().to_string()))?;
        if !status.is_success() {
            return Err(match serde_json::from_slice::<ErrorBody>(&bytes) {
                Ok(body) => ClientError::Status {
                    status: status.as_u16(),
                    code: body.error.code,
                    message: body.error.message,
                },
                Err(_) => ClientError::Status {
                    status: status.as_u16(),
                    code: String::new(),
                    message: status.canonical_reason().unwrap_or("error").to_owned(),
                },
            });
        }
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Transport(format!("unexpected answer: {e}")))
    }

    /// `GET /healthz`.
    pub async fn health(&self) -> Result<Health, ClientError> {
        self.get("/healthz").await
    }

    /// `GET /api/agents`.
    pub async fn agents(&self) -> Result<Vec<AgentInfo>, ClientError> {
        self.get("/api/agents").await
    }

    /// `GET /api/sessions`.
    pub async fn sessions(&self) -> Result<Vec<SessionMeta>, ClientError> {
        self.get("/api/sessions").await
    }

    /// `GET /api/sessions/{id}`; `None` when there is no such session.
    pub async fn session(&self, id: &str) -> Result<Option<SessionDetail>, ClientError> {
        let mut path = self.url("/api/sessions/")?;
        path.path_segments_mut()
            .map_err(|_| ClientError::Url(id.to_owned()))?
            .pop_if_empty()
            .push(id);
        match self.get(path.as_str()).await {
            Ok(detail) => Ok(Some(detail)),
            Err(ClientError::Status { status, .. }) if status == StatusCode::NOT_FOUND.as_u16() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Opens the WebSocket of session `session_id` (created for `agent`
    /// when it does not exist).
    pub async fn connect(&self, session_id: &str, agent: Option<&str>) -> Result<Connection, ClientError> {
        let mut url = self.url("/ws")?;
        let scheme = if self.base.scheme() == "https" {
            "wss"
        } else {
            "ws"
        };
        url.set_scheme(scheme)
            .map_err(|_| ClientError::Url(self.base.to_string()))?;
        url.query_pairs_mut().append_pair("session_id", session_id);
        if let Some(agent) = agent {
            url.query_pairs_mut().append_pair("agent", agent);
        }
        let mut request = url
            .as_str()
            .into_client_request()
            .map_err(|e| ClientError::Transport(e.to_string()))?;
        if let Some(token) = &self.token {
            let value = HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| ClientError::Transport("the token is not a valid header value".into()))?;
            request.headers_mut().insert("authorization", value);
        }
        let (socket, _) = tokio_tungstenite::connect_async_with_config(request, None, true)
            .await
            .map_err(|e| ClientError::Transport(format!("WebSocket: {e}")))?;
        let (outgoing_tx, mut outgoing_rx) = mpsc::channel::<ClientMessage>(64);
        let (incoming_tx, incoming_rx) = mpsc::channel::<Incoming>(1024);
        tokio::spawn(async move {
            let (mut sink, mut stream) = socket.split();
            loop {
                tokio::select! {
                    message = outgoing_rx.recv() => {
                        let Some(message) = message else { break };
                        let Ok(text) = serde_json::to_string(&message) else { continue };
                        if sink.send(Message::text(text)).await.is_err() {
                            let _ = incoming_tx.send(Incoming::Closed { code: None, reason: "send failed".into() }).await;
                            break;
                        }
                    }
                    frame = stream.next() => match frame {
                        Some(Ok(Message::Text(text))) => {
                            let message = ServerMessage::parse(&text)
                                .unwrap_or_else(|_| ServerMessage::Other(serde_json::Value::String(text.to_string())));
                            if incoming_tx.send(Incoming::Message(message)).await.is_err() {
                                break;
                            }
                        }
                        Some(Ok(Message::Close(frame))) => {
                            let (code, reason) = frame
                                .map(|f| (Some(u16::from(f.code)), f.reason.to_string()))
                                .unwrap_or((None, String::new()));
                            let _ = incoming_tx.send(Incoming::Closed { code, reason }).await;
                            break;
                        }
                        Some(Ok(_)) => {}
                        Some(Err(e)) => {
                            let _ = incoming_tx.send(Incoming::Closed { code: None, reason: e.to_string() }).await;
                            break;
                        }
                        None => {
                            let _ = incoming_tx.send(Incoming::Closed { code: None, reason: String::new() }).await;
                            break;
                        }
                    },
                }
            }
            let _ = sink.close().await;
        });
        Ok(Connection {
            outgoing: outgoing_tx,
            incoming: incoming_rx,
        })
    }
}

/// What arrives on a [`Connection`].
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A frame from the server.
    Message(ServerMessage),
    /// The connection ended, with the close code when the server sent one.
    Closed {
        /// The close code (4401, 4404, 1001, …).
        code: Option<u16>,
        /// The close reason.
        reason: String,
    },
}

/// An open WebSocket to one session.
#[derive(Debug)]
pub struct Connection {
    outgoing: mpsc::Sender<ClientMessage>,
    incoming: mpsc::Receiver<Incoming>,
}

impl Connection {
    /// Sends a message.
    pub async fn send(&self, message: ClientMessage) -> Result<(), ClientError> {
        self.outgoing.send(message).await.map_err(|_| ClientError::Closed)
    }

    /// A handle for sending from elsewhere.
    pub fn sender(&self) -> mpsc::Sender<ClientMessage> {
        self.outgoing.clone()
    }

    /// The next frame or the end; `None` after the end was reported.
    pub async fn recv(&mut self) -> Option<Incoming> {
        self.incoming.recv().await
    }
}
