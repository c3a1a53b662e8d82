//! Shared test set-up: a temporary home, an app on a faux script, a server
//! on 127.0.0.1:0, and a raw WebSocket client (tokio-tungstenite) that
//! waits on frames with timeouts, never on sleeps.

use futures::{SinkExt, StreamExt};
use jarvis_pack_housing::HousingPack;
use jarvis_sdk::app::{AppAssembly, AppConfig, build_app};
use jarvis_sdk::model::{FauxProvider, Provider};
use jarvis_server::{ServerConfig, ServerState, serve};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::{HeaderName, HeaderValue};
use tokio_tungstenite::tungstenite::protocol::frame::Frame as RawFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data as OpData, OpCode};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// How long any single wait in a test may take before it fails.
pub(crate) const WAIT: Duration = Duration::from_secs(20);

/// A home directory removed at the end of the test.
pub(crate) struct TempHome(pub(crate) PathBuf);

impl TempHome {
    pub(crate) fn new() -> Self {
        TempHome(tempfile::tempdir().unwrap().keep())
    }
}

impl Drop for TempHome {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An app in `home` (JSONL sessions, the built-in team: main and karen)
/// playing `script`.
pub(crate) async fn app(home: &TempHome, script: &str) -> AppAssembly {
    app_with(home, script, None).await
}

/// The same, requiring `token` from web callers.
pub(crate) async fn app_with(home: &TempHome, script: &str, token: Option<&str>) -> AppAssembly {
    let faux = Arc::new(FauxProvider::from_yaml(script).unwrap());
    app_on(home, faux, token).await
}

/// An app in `home` on `provider`, requiring `token` from web callers.
pub(crate) async fn app_on(home: &TempHome, provider: Arc<dyn Provider>, token: Option<&str>) -> AppAssembly {
    let mut config = AppConfig::for_home(&home.0).with_provider(provider);
    config.packs = vec![std::sync::Arc::new(HousingPack::in_memory())];
    config.web_token = token.map(str::to_owned);
    build_app(config).await.unwrap()
}

/// A server running on 127.0.0.1:0 in this runtime.
pub(crate) struct Server {
    pub(crate) addr: SocketAddr,
    pub(crate) state: ServerState,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), jarvis_server::ServeError>>>,
}

impl Server {
    pub(crate) async fn start(app: AppAssembly, config: ServerConfig) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = ServerState::new(app, config);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, state.clone(), async move {
            let _ = stopped.await;
        }));
        Server {
            addr,
            state,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub(crate) fn ws_url(&self, query: &str) -> String {
        format!("ws://{}/ws?{query}", self.addr)
    }

    /// Signals shutdown and waits for `serve` to return.
    pub(crate) async fn stop(mut self) -> Result<(), jarvis_server::ServeError> {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(WAIT, self.task.take().unwrap())
            .await
            .expect("the server stops in time")
            .unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// A raw WebSocket client.
pub(crate) struct Ws {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    /// Every frame received so far, parsed.
    pub(crate) seen: Vec<Value>,
    /// Every text frame received so far, as its bytes came.
    pub(crate) texts: Vec<String>,
}

/// How a connection attempt ended.
#[derive(Debug)]
pub(crate) enum Opened {
    Open(Box<Ws>),
    /// The server closed the connection right away with this code.
    Closed(u16, #[allow(dead_code)] String),
    /// The handshake failed with this HTTP status.
    Refused(u16),
}

impl Ws {
    /// Connects and reads the first frame: an open connection's first frame
    /// is `agent_activity`.
    pub(crate) async fn open(url: &str, headers: &[(&str, &str)]) -> Opened {
        let mut request = url.into_client_request().unwrap();
        for (name, value) in headers {
            request.headers_mut().insert(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        let socket = match tokio_tungstenite::connect_async(request).await {
            Ok((socket, _)) => socket,
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                return Opened::Refused(response.status().as_u16());
            }
            Err(e) => panic!("connect failed: {e}"),
        };
        let mut ws = Ws {
            socket,
            seen: Vec::new(),
            texts: Vec::new(),
        };
        match ws.next_frame().await {
            Frame::Json(first) => {
                assert_eq!(first["type"], "agent_activity", "{first}");
                ws.seen.push(first);
                Opened::Open(Box::new(ws))
            }
            Frame::Closed(code, reason) => Opened::Closed(code, reason),
        }
    }

    /// Connects; panics unless the connection opens.
    pub(crate) async fn connect(url: &str) -> Ws {
        match Ws::open(url, &[]).await {
            Opened::Open(ws) => *ws,
            other => panic!("the connection did not open: {other:?}"),
        }
    }

    pub(crate) async fn send(&mut self, value: Value) {
        self.send_text(&value.to_string()).await;
    }

    pub(crate) async fn send_text(&mut self, text: &str) {
        self.socket.send(Message::text(text)).await.unwrap();
    }

    pub(crate) async fn send_binary(&mut self, bytes: Vec<u8>) {
        self.socket.send(Message::binary(bytes)).await.unwrap();
    }

    /// Sends a text frame whose bytes may be anything (invalid UTF-8 too).
    pub(crate) async fn send_raw_text(&mut self, bytes: Vec<u8>) {
        self.send_raw(RawFrame::message(bytes, OpCode::Data(OpData::Text), true))
            .await;
    }

    /// Sends one frame as it is, whatever the protocol says of it.
    pub(crate) async fn send_raw(&mut self, frame: RawFrame) {
        self.socket.send(Message::Frame(frame)).await.unwrap();
    }

    /// Sends a text frame the server may refuse before reading it all (the
    /// write can then fail; the close frame tells what happened).
    pub(crate) async fn send_lenient(&mut self, text: &str) {
        let _ = self.socket.send(Message::text(text)).await;
    }

    async fn next_frame(&mut self) -> Frame {
        loop {
            let message = tokio::time::timeout(WAIT, self.socket.next())
                .await
                .expect("a frame arrives in time");
            match message {
                Some(Ok(Message::Text(text))) => {
                    self.texts.push(text.to_string());
                    return Frame::Json(serde_json::from_str(&text).unwrap());
                }
                Some(Ok(Message::Close(frame))) => {
                    let (code, reason) = frame
                        .map(|f| (u16::from(f.code), f.reason.to_string()))
                        .unwrap_or((1005, String::new()));
                    return Frame::Closed(code, reason);
                }
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => return Frame::Closed(1006, String::new()),
            }
        }
    }

    /// The next JSON frame; panics if the connection closes.
    pub(crate) async fn next(&mut self) -> Value {
        match self.next_frame().await {
            Frame::Json(value) => {
                self.seen.push(value.clone());
                value
            }
            Frame::Closed(code, reason) => panic!("closed ({code} {reason}); seen {:?}", kinds(&self.seen)),
        }
    }

    /// Frames up to and including the first of type `kind`.
    pub(crate) async fn until(&mut self, kind: &str) -> Vec<Value> {
        let mut frames = Vec::new();
        loop {
            let frame = self.next().await;
            let done = frame["type"] == kind;
            frames.push(frame);
            if done {
                return frames;
            }
        }
    }

    /// Frames up to and including the first matching `predicate`.
    pub(crate) async fn until_match(&mut self, predicate: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut frames = Vec::new();
        loop {
            let frame = self.next().await;
            let done = predicate(&frame);
            frames.push(frame);
            if done {
                return frames;
            }
        }
    }

    /// Reads until the server closes; returns the close code.
    pub(crate) async fn closed(&mut self) -> u16 {
        loop {
            match self.next_frame().await {
                Frame::Json(value) => self.seen.push(value),
                Frame::Closed(code, _) => return code,
            }
        }
    }
}

impl std::fmt::Debug for Ws {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ws(seen {:?})", kinds(&self.seen))
    }
}

enum Frame {
    Json(Value),
    Closed(u16, String),
}

/// The `type` of each frame.
pub(crate) fn kinds(frames: &[Value]) -> Vec<String> {
    frames
        .iter()
        .map(|f| f["type"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Waits until `check` holds, polling with a bounded number of tries
/// (for state that changes on another task without an event to wait on).
pub(crate) async fn eventually(mut check: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "the condition never held");
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
