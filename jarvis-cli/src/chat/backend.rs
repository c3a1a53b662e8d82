//! One session, reached through the running server's WebSocket or in this
//! process; both speak the server's wire messages, so the chat loop and
//! its rendering are the same either way.

use anyhow::{Context, bail};
use jarvis_sdk::agent::{AgentEvent, ApprovalDecision, ApprovalRequest, SessionId, UIAdapter};
use jarvis_sdk::app::AppAssembly;
use jarvis_sdk::turn::{AgentSession, Caller, PromptOptions, SecurityError, SessionAttachment, TurnError};
use jarvis_server::client::{Connection, Incoming};
use jarvis_server::protocol::{ClientMessage, ServerMessage, ServerNotice, codes};
use std::ops::ControlFlow;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::Target;
use crate::home::Home;

/// The session the chat talks to.
pub(crate) enum Backend {
    /// Through the server.
    Remote(Connection),
    /// In this process.
    Local(Local),
}

impl Backend {
    /// Opens the session `target` names in `home`; with `background`, an app
    /// assembled in this process also runs its background work (reminders)
    /// while the session is open.
    pub(crate) async fn open(home: Home, target: &Target, background: bool) -> anyhow::Result<Self> {
        match home {
            Home::Remote(client) => {
                let (id, agent) = match (&target.session, &target.agent) {
                    (None, agent) if target.new => {
                        // The server creates a session it does not know
                        // with the agent the connection names.
                        let agent = agent
                            .clone()
                            .unwrap_or_else(|| jarvis_sdk::app::MAIN_AGENT.to_owned());
                        let id = jarvis_sdk::common::IdSource::next_id(
                            &jarvis_sdk::common::UniqueIds::new(),
                            "s-",
                        );
                        eprintln!("session {id}");
                        (id, Some(agent))
                    }
                    (Some(id), _) => {
                        if client.session(id).await?.is_none() {
                            bail!("there is no session {id} (`jarvis sessions` lists them)");
                        }
                        (id.clone(), None)
                    }
                    (None, agent) => {
                        let agent = agent
                            .clone()
                            .unwrap_or_else(|| jarvis_sdk::app::MAIN_AGENT.to_owned());
                        (format!("default-{agent}"), Some(agent))
                    }
                };
                let mut connection = client.connect(&id, agent.as_deref()).await?;
                // The first frame of an open connection is `agent_activity`;
                // a refused one is closed at once.
                match connection.recv().await {
                    Some(Incoming::Message(_)) => Ok(Backend::Remote(connection)),
                    Some(Incoming::Closed { code, reason }) => match code {
                        Some(4404) => bail!("there is no agent {:?} in the team", agent.unwrap_or_default()),
                        Some(4401) => bail!("the server requires a token: set JARVIS_WEB__TOKEN"),
                        _ => bail!("the server closed the connection ({code:?} {reason})"),
                    },
                    None => bail!("the server closed the connection"),
                }
            }
            Home::Local(app) => Ok(Backend::Local(Local::open(app, target, background).await?)),
        }
    }

    /// Sends a message to the session.
    pub(crate) async fn send(&mut self, message: ClientMessage) -> anyhow::Result<()> {
        match self {
            Backend::Remote(connection) => Ok(connection.send(message).await?),
            Backend::Local(local) => {
                local.handle(message);
                Ok(())
            }
        }
    }

    /// Lets a turn of this process that already answered finish its
    /// recording (and close its span) before the chat ends.
    pub(crate) async fn finish(&self) {
        if let Backend::Local(local) = self {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), local.session.until_idle()).await;
        }
    }

    /// The next message, or the end of the connection.
    pub(crate) async fn recv(&mut self) -> Option<Incoming> {
        match self {
            Backend::Remote(connection) => connection.recv().await,
            Backend::Local(local) => local.rx.recv().await.map(Incoming::Message),
        }
    }
}

/// A session of an app assembled in this process.
pub(crate) struct Local {
    app: AppAssembly,
    session: Arc<AgentSession>,
    tx: mpsc::UnboundedSender<ServerMessage>,
    rx: mpsc::UnboundedReceiver<ServerMessage>,
    _attachment: SessionAttachment,
    /// Stops the app's background work when the chat ends.
    _background: tokio_util::sync::DropGuard,
}

/// Hands the session's events to the chat loop. The loop drains it
/// promptly; a terminal is never too slow to keep.
struct Screen(mpsc::UnboundedSender<ServerMessage>);

impl UIAdapter for Screen {
    fn on_event(&self, event: &AgentEvent) -> ControlFlow<()> {
        let _ = self.0.send(ServerMessage::Event(event.clone()));
        ControlFlow::Continue(())
    }

    fn on_approval_request(&self, request: &ApprovalRequest) {
        let _ = self.0.send(ServerMessage::Notice(ServerNotice::ApprovalRequest(
            request.clone(),
        )));
    }

    fn on_approval_resolved(&self, request_id: &str, decision: ApprovalDecision) {
        let _ = self.0.send(ServerMessage::Notice(ServerNotice::ApprovalResolved {
            request_id: request_id.to_owned(),
            decision,
        }));
    }
}

impl Local {
    async fn open(app: AppAssembly, target: &Target, background: bool) -> anyhow::Result<Self> {
        let session = match (&target.session, &target.agent) {
            (None, agent) if target.new => {
                let meta = app.create_session(agent.as_deref()).await?;
                eprintln!("session {}", meta.id);
                app.session(&meta.id).await?
            }
            (Some(id), _) => {
                let id = SessionId::new(id.as_str())?;
                match app.session(&id).await {
                    Ok(session) => session,
                    Err(e) if e.is_not_found() => {
                        bail!("there is no session {id} (`jarvis sessions` lists them)")
                    }
                    Err(e) => return Err(e).context("opening the session"),
                }
            }
            (None, agent) => {
                let agent = agent.as_deref().unwrap_or(jarvis_sdk::app::MAIN_AGENT);
                if !app.registry().contains(agent) {
                    let team: Vec<&str> = app.registry().ids().collect();
                    bail!("there is no agent {agent:?}; the team is {}", team.join(", "));
                }
                let meta = app.default_session(agent).await?;
                app.session(&meta.id).await?
            }
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let attachment = session.attach(Arc::new(Screen(tx.clone())));
        // Reminders and other unprompted messages reach this terminal while
        // the chat runs.
        let stop = CancellationToken::new();
        if background {
            app.spawn_background(stop.clone());
        }
        Ok(Self {
            app,
            session,
            tx,
            rx,
            _attachment: attachment,
            _background: stop.drop_guard(),
        })
    }

    fn error(&self, code: &str, message: impl Into<String>) {
        let _ = self
            .tx
            .send(ServerMessage::Notice(ServerNotice::error(code, message)));
    }

    fn handle(&self, message: ClientMessage) {
        match message {
            ClientMessage::Prompt { text } => {
                let session = self.session.clone();
                let tx = self.tx.clone();
                tokio::spawn(async move {
                    let error = match session
                        .prompt_dual(text, PromptOptions::from(Caller::Local))
                        .await
                    {
                        Ok(_) => return,
                        Err(TurnError::Busy(_)) => {
                            ServerNotice::error(codes::BUSY, "a turn is running in this session")
                        }
                        Err(TurnError::Rejected(e)) => ServerNotice::error(
                            match e {
                                SecurityError::Forbidden(_) => codes::FORBIDDEN,
                                _ => codes::INVALID_INPUT,
                            },
                            e.to_string(),
                        ),
                        Err(TurnError::BudgetExhausted(message)) => {
                            ServerNotice::error(codes::BUDGET_EXHAUSTED, message)
                        }
                        Err(e) => ServerNotice::error(codes::INTERNAL, e.to_string()),
                    };
                    let _ = tx.send(ServerMessage::Notice(error));
                });
            }
            ClientMessage::Approval { request_id, decision } => {
                if !self.session.broker().decide(&request_id, decision.into()) {
                    self.error(
                        codes::APPROVAL_NOT_PENDING,
                        "that approval request is not waiting",
                    );
                }
            }
            ClientMessage::Abort => {
                self.session.abort();
            }
            ClientMessage::ProactiveFeedback { message_id, reaction } => {
                self.app.proactive_feedback(&message_id, reaction);
            }
            _ => self.error(codes::BAD_REQUEST, "this message is not supported"),
        }
    }
}
