//! A local HTTP server that replays recorded responses in order and records
//! every request it receives.

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use futures::{StreamExt, stream};
use jarvis_sdk::model::Sleeper;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::fixtures::Fixture;

/// How a reply's body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// Normally.
    Complete,
    /// The connection breaks after the body's bytes.
    Abort,
    /// The server never finishes.
    Hang,
}

/// One scripted response.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
    /// Bytes per write; small values split lines and characters.
    pub(crate) chunk: usize,
    pub(crate) ending: Ending,
}

impl From<Fixture> for Reply {
    fn from(f: Fixture) -> Self {
        Self {
            status: f.status,
            headers: f.headers,
            body: f.body,
            chunk: 7,
            ending: Ending::Complete,
        }
    }
}

impl Reply {
    pub(crate) fn ending(mut self, ending: Ending) -> Self {
        self.ending = ending;
        self
    }
}

/// A request the server received.
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    pub(crate) path: String,
    /// The query string as sent (still percent-encoded), if any.
    pub(crate) query: Option<String>,
    pub(crate) headers: HeaderMap,
    pub(crate) body: serde_json::Value,
}

#[derive(Default)]
struct Shared {
    replies: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<Recorded>>,
}

/// The running server.
pub(crate) struct Replay {
    pub(crate) url: String,
    shared: Arc<Shared>,
}

impl Replay {
    /// Serves `replies` in order on 127.0.0.1 at a free port.
    pub(crate) async fn start(replies: Vec<Reply>) -> Replay {
        let shared = Arc::new(Shared {
            replies: Mutex::new(replies.into()),
            requests: Mutex::default(),
        });
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Replay { url, shared }
    }

    /// Requests received so far.
    pub(crate) fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap().clone()
    }
}

async fn handle(State(shared): State<Arc<Shared>>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    shared.requests.lock().unwrap().push(Recorded {
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
        headers,
        body: serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
    });
    let Some(reply) = shared.replies.lock().unwrap().pop_front() else {
        return Response::builder()
            .status(StatusCode::INTERNAL_SERVER_ERROR)
            .body(Body::from("replay: no reply left"))
            .unwrap();
    };
    let chunks: Vec<Result<Bytes, std::io::Error>> = reply
        .body
        .chunks(reply.chunk.max(1))
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let body = stream::iter(chunks);
    let body = match reply.ending {
        Ending::Complete => Body::from_stream(body),
        Ending::Abort => Body::from_stream(body.chain(stream::once(async {
            Err(std::io::Error::other("connection cut by the replay server"))
        }))),
        Ending::Hang => Body::from_stream(body.chain(stream::pending())),
    };
    let mut response = Response::builder().status(reply.status);
    for (k, v) in &reply.headers {
        response = response.header(k, v);
    }
    response.body(body).unwrap()
}

/// A sleeper that returns at once and records what it was asked to wait.
#[derive(Debug, Default)]
pub(crate) struct RecordingSleeper {
    pub(crate) waits: Mutex<Vec<Duration>>,
}

impl Sleeper for RecordingSleeper {
    fn sleep(&self, duration: Duration) -> futures::future::BoxFuture<'static, ()> {
        self.waits.lock().unwrap().push(duration);
        Box::pin(async {})
    }
}
