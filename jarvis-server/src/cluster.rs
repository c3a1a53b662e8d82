//! This server as one node of several on one Postgres (the SDK's
//! `ClusterLink`): screens may attach to any node, and what they ask of a
//! session owned elsewhere goes to its owner.
//!
//! - **Screens.** The node keeps its own screens per session. The first
//!   one on a session records it in `jarvis_watchers` and tells the owner
//!   (`watch`); the last one leaving undoes both.
//! - **Prompts.** A prompt is routed through the session's lease: a free
//!   session (or one whose owner's lease ran out) is taken and runs here;
//!   one owned by a live node is forwarded, and the owner answers
//!   `accepted` at once. No answer within [`ACCEPT_WAIT`] means the owner
//!   is gone: the node waits for its lease to run out, takes the session
//!   and runs the prompt itself.
//! - **Frames.** The owner attaches a screen to each session that other
//!   nodes show, which sends every event and approval message to them
//!   (`frame`); a node hands the frames it receives to its screens of that
//!   session. Nothing is sent for a session no other node shows.
//! - **Aborts and approvals** for a session running elsewhere go to its
//!   owner; an answer the owner no longer waits for comes back as
//!   `error {code: "approval_not_pending"}`. An approval is routed like a
//!   prompt: an owner that does not answer `accepted` is waited out, and
//!   the node that then takes the session resumes the turn that waited
//!   for the answer (kept with the lease) and applies it.

use jarvis_sdk::agent::{AgentEvent, ApprovalDecision, ApprovalRequest, SessionId, UIAdapter};
use jarvis_sdk::app::{ClusterLink, NodeMessage, SessionRoute};
use jarvis_sdk::turn::{AgentSession, SessionAttachment};
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

use crate::fanout::{Outbox, frame};
use crate::protocol::{ServerNotice, codes};
use crate::state::ServerState;

/// How long a forwarded prompt or approval waits for its owner's `accepted`.
pub(crate) const ACCEPT_WAIT: Duration = Duration::from_millis(750);

/// How many times a prompt is routed again (an owner that went away, then
/// another that took the session meanwhile) before it is given up.
const MAX_ROUTES: usize = 4;

/// This node's side of the cluster.
pub(crate) struct Cluster {
    pub(crate) link: Arc<dyn ClusterLink>,
    /// This node's screens, per session.
    screens: Mutex<HashMap<String, HashMap<u64, Outbox>>>,
    next_screen: AtomicU64,
    /// The other nodes showing each session this node has run turns of,
    /// and the screen sending them its frames.
    remote: Mutex<HashMap<String, Remote>>,
    /// Forwarded prompts waiting for `accepted`.
    accepts: Mutex<HashMap<String, oneshot::Sender<()>>>,
    next_prompt: AtomicU64,
    /// The ids of the prompts other nodes forwarded here lately: a prompt
    /// sent again (its `accepted` came late) runs once.
    seen: Mutex<(HashSet<String>, VecDeque<String>)>,
}

/// How many forwarded prompt ids a node remembers.
const SEEN_PROMPTS: usize = 10_000;

struct Remote {
    nodes: Arc<Mutex<BTreeSet<String>>>,
    _attached: SessionAttachment,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("node", &self.link.node_id())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where a turn's refusals go: the screen that asked, or the node that
/// forwarded the prompt (to every screen it has on the session).
#[derive(Clone)]
pub(crate) enum Reply {
    Screen(Outbox),
    Node {
        cluster: Arc<Cluster>,
        node: String,
        session_id: String,
    },
}

impl Reply {
    pub(crate) fn error(&self, code: &str, message: impl Into<String>) {
        match self {
            Reply::Screen(outbox) => outbox.error(code, message),
            Reply::Node {
                cluster,
                node,
                session_id,
            } => cluster.link.send(
                node,
                NodeMessage::Frame {
                    session_id: session_id.clone(),
                    frame: frame(&ServerNotice::error(code, message)).to_string(),
                },
            ),
        }
    }
}

/// A screen on the owner that sends a session's frames to the other nodes
/// showing it.
struct RemoteScreens {
    link: Arc<dyn ClusterLink>,
    session_id: String,
    nodes: Arc<Mutex<BTreeSet<String>>>,
}

impl RemoteScreens {
    fn send(&self, message: &impl serde::Serialize) {
        let nodes: Vec<String> = lock(&self.nodes).iter().cloned().collect();
        if nodes.is_empty() {
            return;
        }
        let text = frame(message).to_string();
        for node in nodes {
            self.link.send(
                &node,
                NodeMessage::Frame {
                    session_id: self.session_id.clone(),
                    frame: text.clone(),
                },
            );
        }
    }
}

impl UIAdapter for RemoteScreens {
    fn on_event(&self, event: &AgentEvent) -> ControlFlow<()> {
        if event.kind() != "agenda_changed" {
            self.send(event);
        }
        ControlFlow::Continue(())
    }

    fn on_approval_request(&self, request: &ApprovalRequest) {
        self.send(&ServerNotice::ApprovalRequest(request.clone()));
    }

    fn on_approval_resolved(&self, request_id: &str, decision: ApprovalDecision) {
        self.send(&ServerNotice::ApprovalResolved {
            request_id: request_id.to_owned(),
            decision,
        });
    }
}

/// A screen's place among this node's screens of a session; dropping it
/// removes it (and, for the last one, this node's watch).
pub(crate) struct ScreenGuard {
    cluster: Arc<Cluster>,
    session: SessionId,
    id: u64,
}

impl Drop for ScreenGuard {
    fn drop(&mut self) {
        let last = {
            let mut screens = lock(&self.cluster.screens);
            let key = self.session.as_str();
            let mut last = false;
            if let Some(of_session) = screens.get_mut(key) {
                of_session.remove(&self.id);
                if of_session.is_empty() {
                    screens.remove(key);
                    last = true;
                }
            }
            last
        };
        if last && let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let cluster = self.cluster.clone();
            let session = self.session.clone();
            runtime.spawn(async move { cluster.watch(&session, false).await });
        }
    }
}

impl Cluster {
    pub(crate) fn new(link: Arc<dyn ClusterLink>) -> Arc<Self> {
        Arc::new(Self {
            link,
            screens: Mutex::default(),
            next_screen: AtomicU64::new(0),
            remote: Mutex::default(),
            accepts: Mutex::default(),
            next_prompt: AtomicU64::new(0),
            seen: Mutex::default(),
        })
    }

    fn me(&self) -> String {
        self.link.node_id().to_owned()
    }

    /// Adds a screen of `session` on this node until the guard drops.
    pub(crate) async fn add_screen(self: &Arc<Self>, session: &SessionId, outbox: Outbox) -> ScreenGuard {
        let id = self.next_screen.fetch_add(1, Ordering::Relaxed);
        let first = {
            let mut screens = lock(&self.screens);
            let of_session = screens.entry(session.as_str().to_owned()).or_default();
            of_session.insert(id, outbox);
            of_session.len() == 1
        };
        if first {
            self.watch(session, true).await;
        }
        ScreenGuard {
            cluster: self.clone(),
            session: session.clone(),
            id,
        }
    }

    /// Records (or ends) this node's watch of `session` and tells its owner.
    async fn watch(&self, session: &SessionId, on: bool) {
        if let Err(error) = self.link.set_watching(session, on).await {
            tracing::warn!(session = %session, %error, "cluster: this node's screens of a session could not be recorded");
        }
        match self.link.owner(session).await {
            Ok(Some(owner)) if owner != self.link.node_id() => {
                let (session_id, node) = (session.as_str().to_owned(), self.me());
                self.link.send(
                    &owner,
                    if on {
                        NodeMessage::Watch { session_id, node }
                    } else {
                        NodeMessage::Unwatch { session_id, node }
                    },
                );
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(session = %session, %error, "cluster: a session's owner could not be read")
            }
        }
    }

    /// Sends `session`'s frames to `nodes` too (this node runs its turns).
    fn show_on(&self, session: &Arc<AgentSession>, nodes: impl IntoIterator<Item = String>, replace: bool) {
        let me = self.me();
        let nodes: Vec<String> = nodes.into_iter().filter(|n| *n != me).collect();
        let mut remote = lock(&self.remote);
        let key = session.id().as_str().to_owned();
        if let Some(existing) = remote.get(&key) {
            let mut set = lock(&existing.nodes);
            if replace {
                set.clear();
            }
            set.extend(nodes);
            return;
        }
        if nodes.is_empty() {
            return;
        }
        let set = Arc::new(Mutex::new(nodes.into_iter().collect::<BTreeSet<_>>()));
        let attached = session.attach(Arc::new(RemoteScreens {
            link: self.link.clone(),
            session_id: key.clone(),
            nodes: set.clone(),
        }));
        remote.insert(
            key,
            Remote {
                nodes: set,
                _attached: attached,
            },
        );
    }

    fn unshow(&self, session_id: &str, node: &str) {
        let mut remote = lock(&self.remote);
        let empty = remote.get(session_id).is_some_and(|r| {
            let mut set = lock(&r.nodes);
            set.remove(node);
            set.is_empty()
        });
        if empty {
            remote.remove(session_id);
        }
    }

    /// Runs a person's prompt where the session's lease says: here
    /// ([`crate::ws::run_turn`]), or on its owner. Never fails: refusals go
    /// to `reply`.
    pub(crate) async fn prompt(
        self: &Arc<Self>,
        session: Arc<AgentSession>,
        text: String,
        token: Option<String>,
        reply: Reply,
        state: &ServerState,
    ) {
        // One id for every forwarding of this prompt, so an owner that
        // answers late runs it once.
        let prompt_id = self.forward_id();
        for _ in 0..MAX_ROUTES {
            let route = match self.link.route(session.id()).await {
                Ok(route) => route,
                Err(error) => {
                    tracing::error!(session = %session.id(), %error, "cluster: a session could not be routed");
                    return reply.error(
                        codes::INTERNAL,
                        "the session's owner could not be found; the server's log has the details",
                    );
                }
            };
            match route {
                SessionRoute::Local { taken } => {
                    if taken {
                        self.taken_over(&session, state, None).await;
                    }
                    return crate::ws::run_turn(state, session, text, token, reply).await;
                }
                SessionRoute::Remote { node, expires_in } => {
                    let message = NodeMessage::Prompt {
                        session_id: session.id().as_str().to_owned(),
                        text: text.clone(),
                        token: token.clone(),
                        from: self.me(),
                        prompt_id: prompt_id.clone(),
                    };
                    if self.forward(&node, expires_in, &prompt_id, message).await {
                        return;
                    }
                }
            }
        }
        reply.error(
            codes::BUSY,
            "the session's owner did not take the prompt; try again",
        );
    }

    /// A session this node just took over: its other screens are shown
    /// again from here, and a turn that waited for a person on the node
    /// that stopped resumes here (`early`: an answer to one of its requests
    /// that came with the takeover). Answers whether a turn resumed.
    async fn taken_over(
        &self,
        session: &Arc<AgentSession>,
        state: &ServerState,
        early: Option<(&str, ApprovalDecision)>,
    ) -> bool {
        match self.link.watchers(session.id()).await {
            Ok(nodes) => self.show_on(session, nodes, true),
            Err(error) => {
                tracing::warn!(session = %session.id(), %error, "cluster: the session's other screens could not be read")
            }
        }
        match state.app().resume_adopted(session.id(), early).await {
            Ok(resumed) => resumed,
            Err(error) => {
                tracing::error!(session = %session.id(), %error, "cluster: a turn taken over from a stopped node could not be resumed");
                false
            }
        }
    }

    /// A person's answer to an approval this node does not wait for,
    /// routed through the session's lease like a prompt: sent to a live
    /// owner (which answers `accepted`); when the owner is gone, its lease
    /// is waited out and this node takes the session, resuming the turn
    /// that waited for the answer with it. Answers whether the answer went
    /// somewhere that waits for it.
    pub(crate) async fn approve(
        self: &Arc<Self>,
        session: &Arc<AgentSession>,
        state: &ServerState,
        request_id: &str,
        decision: ApprovalDecision,
    ) -> bool {
        let forward_id = self.forward_id();
        for _ in 0..MAX_ROUTES {
            let route = match self.link.route(session.id()).await {
                Ok(route) => route,
                Err(error) => {
                    tracing::error!(session = %session.id(), %error, "cluster: a session could not be routed");
                    return false;
                }
            };
            match route {
                SessionRoute::Local { taken: true } => {
                    return self
                        .taken_over(session, state, Some((request_id, decision)))
                        .await;
                }
                // Held here already: the turn may have been resumed here meanwhile.
                SessionRoute::Local { taken: false } => return session.broker().decide(request_id, decision),
                SessionRoute::Remote { node, expires_in } => {
                    let message = NodeMessage::Approval {
                        session_id: session.id().as_str().to_owned(),
                        request_id: request_id.to_owned(),
                        decision,
                        from: self.me(),
                        forward_id: forward_id.clone(),
                    };
                    if self.forward(&node, expires_in, &forward_id, message).await {
                        return true;
                    }
                }
            }
        }
        false
    }

    /// A new id for a forwarded prompt or approval.
    fn forward_id(&self) -> String {
        format!(
            "{}-{}",
            self.me(),
            self.next_prompt.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// Sends `message` (carrying `id`) to `owner` and waits for its
    /// `accepted`: true when it came; otherwise false once the owner's
    /// lease (`expires_in` when routed) has run out, so the caller routes
    /// again and takes the session.
    async fn forward(&self, owner: &str, expires_in: Duration, id: &str, message: NodeMessage) -> bool {
        let (tx, rx) = oneshot::channel();
        lock(&self.accepts).insert(id.to_owned(), tx);
        self.link.send(owner, message);
        let accepted = tokio::time::timeout(ACCEPT_WAIT, rx).await;
        lock(&self.accepts).remove(id);
        if matches!(accepted, Ok(Ok(()))) {
            return true;
        }
        tracing::warn!(%owner, "cluster: a session's owner did not answer; taking the session over once its lease runs out");
        tokio::time::sleep(expires_in.saturating_sub(ACCEPT_WAIT) + Duration::from_millis(50)).await;
        false
    }

    /// An abort of a session whose turn runs on another node.
    pub(crate) async fn forward_abort(&self, session: &SessionId) {
        if let Ok(Some(owner)) = self.link.owner(session).await
            && owner != self.link.node_id()
        {
            self.link.send(
                &owner,
                NodeMessage::Abort {
                    session_id: session.as_str().to_owned(),
                },
            );
        }
    }

    /// Hands `frame` to this node's screens of `session_id`.
    fn to_screens(&self, session_id: &str, frame: String) {
        let screens = lock(&self.screens);
        if let Some(of_session) = screens.get(session_id) {
            let frame = axum::extract::ws::Utf8Bytes::from(frame);
            for outbox in of_session.values() {
                outbox.push(frame.clone());
            }
        }
    }

    /// Answers the other nodes' messages until the link ends.
    pub(crate) async fn serve(self: Arc<Self>, state: ServerState) {
        let Some(mut incoming) = self.link.incoming() else {
            return;
        };
        while let Some(message) = incoming.recv().await {
            self.handle(&state, message).await;
        }
    }

    async fn handle(self: &Arc<Self>, state: &ServerState, message: NodeMessage) {
        let open = async |session_id: &str| -> Option<Arc<AgentSession>> {
            let id = SessionId::new(session_id).ok()?;
            match state.app().session(&id).await {
                Ok(session) => Some(session),
                Err(error) => {
                    tracing::warn!(session = %id, %error, "cluster: a session another node asked about could not be opened");
                    None
                }
            }
        };
        match message {
            NodeMessage::Prompt {
                session_id,
                text,
                token,
                from,
                prompt_id,
            } => {
                self.link.send(
                    &from,
                    NodeMessage::Accepted {
                        prompt_id: prompt_id.clone(),
                    },
                );
                {
                    let mut seen = lock(&self.seen);
                    let (ids, order) = &mut *seen;
                    if !ids.insert(prompt_id.clone()) {
                        return; // sent again; it runs already
                    }
                    order.push_back(prompt_id);
                    if order.len() > SEEN_PROMPTS
                        && let Some(old) = order.pop_front()
                    {
                        ids.remove(&old);
                    }
                }
                let reply = Reply::Node {
                    cluster: self.clone(),
                    node: from.clone(),
                    session_id: session_id.clone(),
                };
                let Some(session) = open(&session_id).await else {
                    return reply.error(codes::INTERNAL, "the session could not be opened on its owner");
                };
                self.show_on(&session, [from], false);
                let cluster = self.clone();
                let state = state.clone();
                // Tracked as the turns of this node's own screens are, so a
                // clean stop aborts it and waits for its end to be written.
                let turns = state.inner.turns.clone();
                tokio::spawn(turns.track_future(async move {
                    cluster.prompt(session, text, token, reply, &state).await;
                }));
            }
            NodeMessage::Accepted { prompt_id } => {
                if let Some(tx) = lock(&self.accepts).remove(&prompt_id) {
                    let _ = tx.send(());
                }
            }
            NodeMessage::Abort { session_id } => {
                if let Some(session) = open(&session_id).await {
                    session.abort();
                }
            }
            NodeMessage::Approval {
                session_id,
                request_id,
                decision,
                from,
                forward_id,
            } => {
                if !forward_id.is_empty() {
                    self.link.send(
                        &from,
                        NodeMessage::Accepted {
                            prompt_id: forward_id,
                        },
                    );
                }
                let decided = match open(&session_id).await {
                    Some(session) => session.broker().decide(&request_id, decision),
                    None => false,
                };
                if !decided {
                    Reply::Node {
                        cluster: self.clone(),
                        node: from,
                        session_id,
                    }
                    .error(
                        codes::APPROVAL_NOT_PENDING,
                        format!(
                            "approval request {request_id:?} is not waiting (already decided, or unknown)"
                        ),
                    );
                }
            }
            NodeMessage::Watch { session_id, node } => {
                if let Some(session) = open(&session_id).await {
                    self.show_on(&session, [node], false);
                }
            }
            NodeMessage::Unwatch { session_id, node } => self.unshow(&session_id, &node),
            NodeMessage::Frame { session_id, frame } => self.to_screens(&session_id, frame),
            other => tracing::debug!(?other, "cluster: ignored a message this version does not know"),
        }
    }
}
