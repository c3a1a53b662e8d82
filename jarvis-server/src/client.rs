//! [`Client`]: talks to a running server over its HTTP API and WebSocket;
//! `jarvis chat` uses it when a server runs for its home. It speaks the
//! same [`protocol`](crate::protocol) types the server does, presents the
//! token as `Authorization: Bearer …` (never in the URL), and sends no
//! `Origin` (it is not a browser page). Over HTTPS it trusts the web's
//! public roots, or exactly the certificate the home's server file names.

use futures::{SinkExt, StreamExt};
use jarvis_sdk::agent::SessionMeta;
use reqwest::{StatusCode, Url};
use serde::de::DeserializeOwned;
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

use crate::protocol::{
    AgentInfo, ClientMessage, ErrorBody, Health, McpServerInfo, ServerMessage, SessionDetail, SystemInfo,
    UsageReport,
};
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
    /// For `https` servers: whom the WebSocket's TLS trusts.
    tls: Option<Arc<rustls::ClientConfig>>,
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
    /// presenting `token` when given. An `https` server must show a
    /// certificate the web's public roots vouch for.
    pub fn new(base_url: &str, token: Option<String>) -> Result<Self, ClientError> {
        Self::build(base_url, token, None)
    }

    /// A client of the `https` server at `base_url` that trusts exactly
    /// the certificate whose DER bytes have SHA-256 digest `cert_sha256`
    /// (hex), whatever its names or issuer: how clients of a home reach
    /// its server with a self-signed certificate ([`ServerFile::cert_sha256`]).
    pub fn with_certificate(
        base_url: &str,
        token: Option<String>,
        cert_sha256: &str,
    ) -> Result<Self, ClientError> {
        Self::build(base_url, token, Some(cert_sha256))
    }

    fn build(base_url: &str, token: Option<String>, pinned: Option<&str>) -> Result<Self, ClientError> {
        let base = Url::parse(base_url).map_err(|_| ClientError::Url(base_url.to_owned()))?;
        let mut http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(Duration::from_secs(30));
        let tls = match base.scheme() {
            "http" if pinned.is_none() => None,
            "https" => {
                let config = crate::tls::client_config(pinned).map_err(ClientError::Transport)?;
                http = http.use_preconfigured_tls(config.as_ref().clone());
                Some(config)
            }
            _ => return Err(ClientError::Url(base_url.to_owned())),
        };
        let http = http.build().map_err(|e| ClientError::Transport(e.to_string()))?;
        Ok(Self {
            base,
            token,
            http,
            tls,
        })
    }

    /// The server running for `home`, if one answers: the server file names
    /// it and its `/healthz` reports the same process.
    pub async fn discover(home: &Path, token: Option<String>) -> Option<Self> {
        let file = ServerFile::read(home)?;
        let client = match &file.cert_sha256 {
            Some(pinned) => Self::with_certificate(&file.url, token, pinned),
            None => Self::new(&file.url, token),
        }
        .ok()?;
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

    /// Speaks MCP on this process's stdin and stdout and forwards to the
    /// server's `/mcp` (with the token, trusting what this client trusts)
    /// until the stdio client closes stdin, the server goes away, or
    /// `shutdown` resolves (see [`jarvis_sdk::turn::bridge_mcp_stdio`]).
    pub async fn bridge_mcp_stdio(&self, shutdown: impl Future<Output = ()>) -> Result<(), ClientError> {
        // No overall timeout: a call lasts as long as the agent's turn.
        let mut http = reqwest::Client::builder().connect_timeout(CONNECT_TIMEOUT);
        if let Some(tls) = &self.tls {
            http = http.use_preconfigured_tls(tls.as_ref().clone());
        }
        let http = http.build().map_err(|e| ClientError::Transport(e.to_string()))?;
        let url = self.url("/mcp")?;
        jarvis_sdk::turn::bridge_mcp_stdio(http, url.as_str(), self.token.clone(), shutdown)
            .await
            .map_err(|e| ClientError::Transport(e.to_string()))
    }

    /// `GET /healthz`.
    pub async fn health(&self) -> Result<Health, ClientError> {
        self.get("/healthz").await
    }

    /// `GET /api/agents`.
    pub async fn agents(&self) -> Result<Vec<AgentInfo>, ClientError> {
        self.get("/api/agents").await
    }

    /// `GET /api/mcp`.
    pub async fn mcp_servers(&self) -> Result<Vec<McpServerInfo>, ClientError> {
        self.get("/api/mcp").await
    }

    /// `GET /api/system`.
    pub async fn system(&self) -> Result<SystemInfo, ClientError> {
        self.get("/api/system").await
    }

    /// `GET /api/usage?by=…`.
    pub async fn usage(&self, by: jarvis_sdk::turn::UsageBy) -> Result<UsageReport, ClientError> {
        self.get(&format!("/api/usage?by={by}")).await
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
        let (host, port) = host_and_port(&url)?;
        let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((host.as_str(), port)))
            .await
            .map_err(|_| ClientError::Transport("WebSocket: connecting timed out".into()))?
            .map_err(|e| ClientError::Transport(format!("WebSocket: {e}")))?;
        // Frames are small and latency matters: no Nagle delay.
        let _ = tcp.set_nodelay(true);
        let (outgoing_tx, outgoing_rx) = mpsc::channel::<ClientMessage>(64);
        let (incoming_tx, incoming_rx) = mpsc::channel::<Incoming>(1024);
        match &self.tls {
            Some(config) => {
                let name = ServerName::try_from(host.clone())
                    .map_err(|_| ClientError::Url(self.base.to_string()))?;
                let tls = tokio::time::timeout(
                    CONNECT_TIMEOUT,
                    TlsConnector::from(config.clone()).connect(name, tcp),
                )
                .await
                .map_err(|_| ClientError::Transport("WebSocket: the TLS handshake timed out".into()))?
                .map_err(|e| ClientError::Transport(format!("WebSocket: TLS: {e}")))?;
                let (socket, _) = tokio_tungstenite::client_async(request, tls)
                    .await
                    .map_err(|e| ClientError::Transport(format!("WebSocket: {e}")))?;
                tokio::spawn(pump(socket, outgoing_rx, incoming_tx));
            }
            None => {
                let (socket, _) = tokio_tungstenite::client_async(request, tcp)
                    .await
                    .map_err(|e| ClientError::Transport(format!("WebSocket: {e}")))?;
                tokio::spawn(pump(socket, outgoing_rx, incoming_tx));
            }
        }
        Ok(Connection {
            outgoing: outgoing_tx,
            incoming: incoming_rx,
        })
    }
}

/// How long connecting (TCP, then TLS) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The host (IPv6 without brackets) and port of `url`.
fn host_and_port(url: &Url) -> Result<(String, u16), ClientError> {
    let bad = || ClientError::Url(url.to_string());
    let host = url.host_str().ok_or_else(bad)?;
    let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
    let port = url.port_or_known_default().ok_or_else(bad)?;
    Ok((host, port))
}

/// Moves frames between a connection's channels and its socket until
/// either side ends.
async fn pump<S>(
    socket: WebSocketStream<S>,
    mut outgoing_rx: mpsc::Receiver<ClientMessage>,
    incoming_tx: mpsc::Sender<Incoming>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
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
