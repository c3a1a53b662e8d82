//! `GET /ws?session_id=…&agent=…`: one screen attached to one session.
//!
//! Opening: a request from another origin is refused with 403 before the
//! upgrade (`auth::guard`: only the server's own pages, or clients that are
//! not browser pages); then a missing or wrong token closes 4401 (the
//! token comes from `Authorization: Bearer …` or the cookie, never the
//! URL), a missing or invalid `session_id` 4400, and an unknown agent for a
//! new session 4404. An existing session opens with its stored agent and
//! ignores `agent` (even an unknown one, SPEC.md §17.3 #6).
//!
//! Once open, the connection is attached to the session's events and
//! approval broker (so it also gets approval requests already waiting),
//! receives the current `agent_activity`, and then reads client frames:
//!
//! - `prompt` starts a turn on a task of its own; the session is claimed
//!   before the next frame is read, so of two prompts the second gets
//!   `error {code: "busy"}`. A refused input gets `input_rejected` (every
//!   screen) and `error` (this one); peer sessions refuse people.
//! - `approval` decides a waiting request; the first answer wins and every
//!   connection sees `approval_resolved`; a late answer gets
//!   `error {code: "approval_not_pending"}`.
//! - `abort` aborts the running turn (nothing happens when none runs).
//!
//! Sessions other than `user` ones are read-only for people: `prompt`,
//! `abort` and `approval` get `error {code: "forbidden"}` there, except
//! that an MCP session (`mcp-<agent>-<n>`) takes `approval`: its turns ask
//! its own screens (and the MCP client, where it can be asked).
//! - `proactive_feedback` goes to the reflection daemon, which hands it to
//!   the feedback learner of the agent that sent the message (once per
//!   message; feedback on other messages changes nothing).
//! - anything else gets `error {code: "bad_request"}`; the connection
//!   stays. Binary frames too: the protocol is JSON text, and a binary
//!   frame is a well-formed frame carrying the wrong thing, like a text
//!   frame that is not JSON.
//!
//! Frames that break the WebSocket itself end the connection with a close
//! frame: a text frame that is not valid UTF-8 1007, a message or frame
//! over [`crate::Limits::max_frame_bytes`] 1009, a protocol violation 1002.
//!
//! A client that stops reading is closed with 1008 once its queue is full
//! (see [`crate::Limits::outbox_frames`]); turns never wait for it. On
//! shutdown every connection gets what was queued for it and a 1001.

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::{OriginalUri, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures::stream::SplitSink;
use futures::{SinkExt, StreamExt};
use jarvis_sdk::agent::{SessionId, SessionKind};
use jarvis_sdk::turn::{AgentSession, Caller, PromptOptions, SecurityError, TurnError};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::auth::{presented_token, query_param, token_ok};
use crate::cluster::Reply;
use crate::error::AppError;
use crate::fanout::{ConnectionScreen, Outbox};
use crate::protocol::{
    CLOSE_BAD_REQUEST, CLOSE_GOING_AWAY, CLOSE_INTERNAL, CLOSE_INVALID_UTF8, CLOSE_PROTOCOL_ERROR,
    CLOSE_TOO_BIG, CLOSE_TOO_SLOW, CLOSE_UNAUTHORIZED, CLOSE_UNKNOWN_AGENT, ClientMessage, codes,
};
use crate::state::ServerState;

/// The upgrade handler.
pub(crate) async fn upgrade(
    State(state): State<ServerState>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let ws = match ws {
        Ok(ws) => ws,
        Err(_) => return AppError::bad_request("this route takes a WebSocket upgrade").into_response(),
    };
    let token = presented_token(&headers);
    let request = Opening {
        authorized: token_ok(&state, token.as_deref()),
        token,
        session_id: query_param(&uri, "session_id"),
        agent: query_param(&uri, "agent"),
    };
    let limits = &state.config().limits;
    let tracker = state.inner.sockets.clone();
    // Frames are small: small buffers keep a thousand connections cheap.
    // A frame up to twice the limit is read to its end before it is
    // refused, so the client is not cut off mid-write and reads the 1009
    // close; a larger one is refused from its header.
    ws.max_message_size(limits.max_frame_bytes)
        .max_frame_size(limits.max_frame_bytes.saturating_mul(2))
        .read_buffer_size(SOCKET_BUFFER)
        .write_buffer_size(SOCKET_BUFFER)
        .on_upgrade(move |socket| tracker.track_future(connection(state, socket, request)))
}

/// What the upgrade request asked for.
struct Opening {
    authorized: bool,
    token: Option<String>,
    session_id: Option<String>,
    agent: Option<String>,
}

async fn close(mut socket: WebSocket, code: u16, reason: &'static str) {
    let _ = socket
        .send(Message::Close(Some(CloseFrame {
            code,
            reason: Utf8Bytes::from_static(reason),
        })))
        .await;
}

/// One connection, from the upgrade to its end.
async fn connection(state: ServerState, socket: WebSocket, request: Opening) {
    if !request.authorized {
        return close(socket, CLOSE_UNAUTHORIZED, "unauthorized").await;
    }
    if state.is_closing() {
        return close(socket, CLOSE_GOING_AWAY, "server shutting down").await;
    }
    let Some(id) = request.session_id.and_then(|id| SessionId::new(id).ok()) else {
        return close(
            socket,
            CLOSE_BAD_REQUEST,
            "session_id is missing or not a valid id",
        )
        .await;
    };
    let session = match state.app().open_or_create(&id, request.agent.as_deref()).await {
        Ok(session) => session,
        Err(jarvis_sdk::app::AppError::UnknownAgent(_)) => {
            return close(socket, CLOSE_UNKNOWN_AGENT, "unknown agent").await;
        }
        Err(error) => {
            tracing::error!(session = %id, %error, "a WebSocket could not open its session");
            return close(socket, CLOSE_INTERNAL, "the session could not be opened").await;
        }
    };

    let (outbox, rx, too_slow) = Outbox::new(state.config().limits.outbox_frames);
    let _registered = state.inner.connections.register(outbox.clone());
    outbox.send(&state.inner.activity.message());
    let _attached = session.attach(Arc::new(ConnectionScreen {
        outbox: outbox.clone(),
    }));
    // In a deployment, this node shows the session: its owner sends the
    // frames of turns it runs here.
    let _shown = match &state.inner.cluster {
        Some(cluster) => Some(cluster.add_screen(&id, outbox.clone()).await),
        None => None,
    };
    // A Focus task in progress is on the screen from the start.
    for event in state.app().focus_events(id.as_str(), session.is_answering()) {
        outbox.send(&event);
    }
    if let Some(note) = session.take_interrupted() {
        outbox.error(codes::INTERRUPTED, note);
    }
    let ended = CancellationToken::new();
    let broken: Arc<OnceLock<Close>> = Arc::default();
    let (sink, mut stream) = socket.split();
    let writer = tokio::spawn(write_loop(
        sink,
        rx,
        too_slow,
        state.inner.shutdown.clone(),
        Ended {
            token: ended.clone(),
            close: broken.clone(),
        },
    ));
    let conn = Connection {
        state: &state,
        session,
        outbox,
        token: request.token,
    };
    loop {
        tokio::select! {
            biased;
            _ = ended.cancelled() => break,
            message = stream.next() => match message {
                Some(Ok(Message::Text(text))) => conn.handle(&text).await,
                Some(Ok(Message::Binary(_))) => {
                    conn.outbox.error(codes::BAD_REQUEST, "frames are JSON text, not binary");
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                Some(Ok(Message::Close(_))) | None => break,
                Some(Err(error)) => {
                    tracing::debug!(%error, "a WebSocket connection failed");
                    if let Some(close) = close_for(error) {
                        let _ = broken.set(close);
                    }
                    break;
                }
            },
        }
    }
    ended.cancel();
    let _ = writer.await;
}

/// A close frame's code and reason.
type Close = (u16, &'static str);

/// How the reader tells the writer the connection ended: the token, and
/// the close frame to send when the client broke the protocol.
struct Ended {
    token: CancellationToken,
    close: Arc<OnceLock<Close>>,
}

/// The close frame for a frame that broke the WebSocket, if it calls for one
/// (a connection that simply went away does not).
fn close_for(error: axum::Error) -> Option<Close> {
    use tokio_tungstenite::tungstenite::Error;
    use tokio_tungstenite::tungstenite::error::ProtocolError;
    match error.into_inner().downcast_ref::<Error>()? {
        Error::Utf8(_) => Some((CLOSE_INVALID_UTF8, "text frames must be valid UTF-8")),
        Error::Capacity(_) => Some((CLOSE_TOO_BIG, "message too big")),
        // The client went away without a close frame: nobody to tell.
        Error::Protocol(ProtocolError::ResetWithoutClosingHandshake) => None,
        Error::Protocol(_) => Some((CLOSE_PROTOCOL_ERROR, "WebSocket protocol error")),
        _ => None,
    }
}

/// Drains the connection's queue into the socket until the connection
/// ends, the client is too slow, or the server shuts down.
async fn write_loop(
    mut sink: SplitSink<WebSocket, Message>,
    mut rx: mpsc::Receiver<Utf8Bytes>,
    too_slow: CancellationToken,
    shutdown: CancellationToken,
    ended: Ended,
) {
    let Ended {
        token: ended,
        close: broken,
    } = ended;
    let close = loop {
        tokio::select! {
            biased;
            _ = too_slow.cancelled() => break Some((CLOSE_TOO_SLOW, "client too slow")),
            _ = ended.cancelled() => {
                let close = broken.get().copied();
                if close.is_some() {
                    // Frames read before the broken one were answered; the
                    // answers go out before the close.
                    let mut batch = Vec::new();
                    while let Ok(frame) = rx.try_recv() {
                        batch.push(frame);
                    }
                    let _ = write_batch(&mut sink, batch).await;
                }
                break close;
            }
            frame = rx.recv() => match frame {
                Some(frame) => {
                    // Frames queued together go out in one write.
                    let mut batch = vec![frame];
                    while batch.len() < WRITE_BATCH {
                        match rx.try_recv() {
                            Ok(frame) => batch.push(frame),
                            Err(_) => break,
                        }
                    }
                    if write_batch(&mut sink, batch).await.is_err() {
                        break None;
                    }
                }
                None => break None,
            },
            _ = shutdown.cancelled() => {
                // What was queued before shutdown (the aborted turns' ends) goes out first.
                while let Ok(frame) = rx.try_recv() {
                    if sink.send(Message::Text(frame)).await.is_err() {
                        break;
                    }
                }
                break Some((CLOSE_GOING_AWAY, "server shutting down"));
            }
        }
    };
    if let Some((code, reason)) = close {
        let _ = sink
            .send(Message::Close(Some(CloseFrame {
                code,
                reason: Utf8Bytes::from_static(reason),
            })))
            .await;
    }
    ended.cancel();
}

/// The read and write buffer of a connection (axum's default is 128 KiB each).
const SOCKET_BUFFER: usize = 8 << 10;

/// The most frames written to a socket with one flush.
const WRITE_BATCH: usize = 64;

async fn write_batch(
    sink: &mut SplitSink<WebSocket, Message>,
    batch: Vec<Utf8Bytes>,
) -> Result<(), axum::Error> {
    for frame in batch {
        sink.feed(Message::Text(frame)).await?;
    }
    sink.flush().await
}

/// An open connection's view of its session.
struct Connection<'a> {
    state: &'a ServerState,
    session: Arc<AgentSession>,
    outbox: Outbox,
    token: Option<String>,
}

impl Connection<'_> {
    async fn handle(&self, text: &str) {
        let message: ClientMessage = match serde_json::from_str(text) {
            Ok(message) => message,
            Err(error) => {
                return self
                    .outbox
                    .error(codes::BAD_REQUEST, format!("not a client message: {error}"));
            }
        };
        // Sessions other than a person's own are read-only for people: the
        // turns there belong to an agent, a job or a caller, and their
        // approval requests are answered on the screens they are shown on
        // (the delegating session's, the agent's own). An MCP session's turns
        // ask on its own screens, so a person may answer approvals there.
        // (A prompt is refused by the security pipeline, which says so to
        // every screen.)
        let kind = self.session.kind();
        let read_only = kind.is_read_only();
        let approvals_here = kind == SessionKind::Mcp;
        match message {
            ClientMessage::Abort if read_only => {
                self.outbox.error(
                    codes::FORBIDDEN,
                    format!(
                        "{} is a {} session: it can be read, not aborted",
                        self.session.id(),
                        kind.as_str()
                    ),
                );
            }
            ClientMessage::Approval { .. } if read_only && !approvals_here => {
                self.outbox.error(
                    codes::FORBIDDEN,
                    format!(
                        "{} is a {} session: it can be read, not approved in",
                        self.session.id(),
                        kind.as_str()
                    ),
                );
            }
            ClientMessage::Prompt { text } => self.prompt(text).await,
            ClientMessage::Approval { request_id, decision } => {
                let decision = decision.into();
                if self.session.broker().decide(&request_id, decision) {
                    return;
                }
                // The turn may wait on the node that owns the session.
                let forwarded = match &self.state.inner.cluster {
                    Some(cluster) => {
                        cluster
                            .approve(&self.session, self.state, &request_id, decision)
                            .await
                    }
                    None => false,
                };
                if !forwarded {
                    self.outbox.error(
                        codes::APPROVAL_NOT_PENDING,
                        format!(
                            "approval request {request_id:?} is not waiting (already decided, or unknown)"
                        ),
                    );
                }
            }
            ClientMessage::Abort => {
                if !self.session.abort()
                    && let Some(cluster) = &self.state.inner.cluster
                {
                    cluster.forward_abort(self.session.id()).await;
                }
            }
            ClientMessage::ProactiveFeedback { message_id, reaction } => {
                if message_id.trim().is_empty() {
                    return self.outbox.error(codes::BAD_REQUEST, "message_id is empty");
                }
                // Only messages the reflection daemon sent teach its
                // learner; a reaction to an answer or a filler, or a second
                // reaction, changes nothing.
                if !self.state.app().proactive_feedback(&message_id, reaction) {
                    tracing::debug!(%message_id, "feedback on a message the daemon is not waiting on");
                }
            }
        }
    }

    /// Starts a turn. The first poll claims the session (or finds it busy)
    /// before the next frame is read; the rest runs on its own task.
    async fn prompt(&self, text: String) {
        let inner = &self.state.inner;
        if inner.closing.load(Ordering::SeqCst) {
            return self
                .outbox
                .error(codes::SHUTTING_DOWN, "the server is shutting down");
        }
        let session = self.session.clone();
        let reply = Reply::Screen(self.outbox.clone());
        let token = self.token.clone();
        let state = self.state.clone();
        let turn = inner.turns.track_future(async move {
            match state.inner.cluster.clone() {
                // The session's lease says where it runs.
                Some(cluster) => cluster.prompt(session, text, token, reply, &state).await,
                None => run_turn(&state, session, text, token, reply).await,
            }
        });
        let mut turn = Box::pin(turn);
        if futures::poll!(turn.as_mut()).is_pending() {
            tokio::spawn(turn);
        }
    }
}

/// Runs a person's turn in `session` here; refusals go to `reply`.
pub(crate) async fn run_turn(
    state: &ServerState,
    session: Arc<AgentSession>,
    text: String,
    token: Option<String>,
    reply: Reply,
) {
    if state.is_closing() {
        return reply.error(codes::SHUTTING_DOWN, "the server is shutting down");
    }
    let caller = Caller::Web { token };
    // A long job is acknowledged and goes on in the background; its
    // answer reaches every screen as `proactive_message`.
    match session.prompt_dual(text, PromptOptions::from(caller)).await {
        Ok(_) => {}
        Err(TurnError::Busy(_)) => reply.error(
            codes::BUSY,
            "a turn is running in this session; wait for it to end or abort it",
        ),
        Err(TurnError::Rejected(error)) => reply.error(rejection_code(&error), error.to_string()),
        Err(TurnError::BudgetExhausted(message)) => reply.error(codes::BUDGET_EXHAUSTED, message),
        Err(error) => {
            tracing::error!(session = %session.id(), %error, "a turn could not run");
            reply.error(
                codes::INTERNAL,
                "the turn could not run; the server's log has the details",
            );
        }
    }
}

fn rejection_code(error: &SecurityError) -> &'static str {
    match error {
        SecurityError::Unauthenticated(_) => codes::UNAUTHORIZED,
        SecurityError::Forbidden(_) => codes::FORBIDDEN,
        _ => codes::INVALID_INPUT,
    }
}
