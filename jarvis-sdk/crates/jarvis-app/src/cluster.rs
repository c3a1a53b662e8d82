//! Several nodes on one Postgres: where a session's turns run, and how the
//! nodes talk ([`ClusterLink`]).
//!
//! Every session is owned by one node at a time through a lease (see
//! `jarvis_sdk::agent::lease`). A screen may be attached to any node: a node that
//! does not own a session forwards what its screens ask of it (prompts,
//! aborts, approval answers) to the owner as a [`NodeMessage`], and the
//! owner sends the session's frames back to every node with a screen on
//! it. The link is Postgres's `LISTEN`/`NOTIFY`: each node listens on a
//! channel of its own, so no node needs another's address.
//!
//! A node learns which other nodes show a session from `jarvis_watchers`
//! (a row per session and node with a screen on it) when it takes the
//! session, and from [`NodeMessage::Watch`] afterwards; frames are sent
//! only to those nodes, so a node alone pays nothing for the cluster.
//!
//! The transport lives behind the trait so the server needs no database
//! code: [`build_app`](super::build_app) makes one for the Postgres store
//! (feature `postgres`), and [`AppAssembly::cluster`](super::AppAssembly::cluster)
//! hands it out.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tokio::sync::mpsc;

use jarvis_agent::{ApprovalDecision, SessionError, SessionId};

/// A message from one node to another.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
#[non_exhaustive]
pub enum NodeMessage {
    /// Run a person's prompt in a session the receiver owns.
    Prompt {
        /// The session.
        session_id: String,
        /// What the person wrote.
        text: String,
        /// The web token the screen presented, checked again by the owner.
        token: Option<String>,
        /// The node asking (it gets [`NodeMessage::Accepted`] and the
        /// turn's frames).
        from: String,
        /// Names this prompt in the [`NodeMessage::Accepted`] answer.
        prompt_id: String,
    },
    /// The owner took a forwarded prompt or approval (it runs or was
    /// applied, or its refusal went out as a frame).
    Accepted {
        /// The id the prompt (its `prompt_id`) or the approval (its
        /// `forward_id`) came with.
        prompt_id: String,
    },
    /// Abort the running turn of a session.
    Abort {
        /// The session.
        session_id: String,
    },
    /// A person's answer to an approval request, from a screen on `from`.
    Approval {
        /// The session.
        session_id: String,
        /// The request.
        request_id: String,
        /// The answer.
        decision: ApprovalDecision,
        /// The node whose screen answered.
        from: String,
        /// Names this forwarding in the [`NodeMessage::Accepted`] answer;
        /// empty (as from a node that predates it) asks for none.
        #[serde(default)]
        forward_id: String,
    },
    /// `node` shows the session now (a screen attached there).
    Watch {
        /// The session.
        session_id: String,
        /// The node.
        node: String,
    },
    /// `node` no longer shows the session.
    Unwatch {
        /// The session.
        session_id: String,
        /// The node.
        node: String,
    },
    /// A frame for the screens of a session (an event, an approval
    /// message, an error), as the WebSocket protocol writes it.
    Frame {
        /// The session.
        session_id: String,
        /// The frame's JSON text.
        frame: String,
    },
}

/// Where a session's turns run now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionRoute {
    /// Here: this node owns the session.
    Local {
        /// It was just taken (it was free, another node's lease ran out,
        /// or this node had lost it): what this node knew of the session's
        /// other screens may be stale.
        taken: bool,
    },
    /// On another live node.
    Remote {
        /// The owner.
        node: String,
        /// How long its lease runs unless it renews it.
        expires_in: Duration,
    },
}

/// This node's part in a deployment of several nodes on one Postgres; see
/// the module docs.
#[async_trait]
pub trait ClusterLink: Send + Sync + std::fmt::Debug {
    /// This node's id.
    fn node_id(&self) -> &str;

    /// Where `session`'s turns run: claims it for this node when it is
    /// free, already this node's, or its owner's lease ran out.
    async fn route(&self, session: &SessionId) -> Result<SessionRoute, SessionError>;

    /// The live node owning `session` now, if any (nothing is claimed).
    async fn owner(&self, session: &SessionId) -> Result<Option<String>, SessionError>;

    /// Queues `message` for `node`; messages to one node arrive in the
    /// order they were queued. A node that is gone drops them.
    fn send(&self, node: &str, message: NodeMessage);

    /// Records that this node shows `session` (`on`) or no longer does.
    async fn set_watching(&self, session: &SessionId, on: bool) -> Result<(), SessionError>;

    /// The other live nodes that show `session`.
    async fn watchers(&self, session: &SessionId) -> Result<Vec<String>, SessionError>;

    /// Leaves the deployment (a clean stop): this node's sessions may be
    /// taken at once by others.
    async fn leave(&self) -> Result<(), SessionError>;

    /// The messages sent to this node; the first call takes the receiver,
    /// later calls answer `None`.
    fn incoming(&self) -> Option<mpsc::UnboundedReceiver<NodeMessage>>;
}

#[cfg(feature = "postgres")]
pub use pg::{PgCluster, PostgresApprovalRules, PostgresJobs, PostgresSlotClaim};

#[cfg(feature = "postgres")]
mod pg {
    //! [`ClusterLink`] over Postgres: `NOTIFY` on each node's channel, one
    //! dedicated connection that listens and sends in order, connected
    //! again when it breaks.

    use super::*;
    use jarvis_agent::{Claim, PostgresSessionStore};
    use jarvis_common::pg::forward_notifications;
    use std::sync::Mutex;
    use tokio_postgres::NoTls;

    /// The most bytes a `NOTIFY` payload may have (Postgres's limit is
    /// 8,000); a larger message is stored in `jarvis_node_payloads` and
    /// sent by reference.
    const MAX_PAYLOAD: usize = 7_000;

    /// A message sent by reference.
    #[derive(Serialize, Deserialize)]
    struct ByRef {
        #[serde(rename = "ref")]
        id: i64,
    }

    /// The channel a node listens on: `jarvis_node_` and a hash of its id,
    /// so any id makes a valid, short channel name.
    pub(crate) fn channel(node: &str) -> String {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in node.as_bytes() {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        format!("jarvis_node_{hash:016x}")
    }

    /// The longest wait between two attempts to connect the link again.
    const MAX_BACKOFF: Duration = Duration::from_secs(5);

    /// The [`ClusterLink`] of a node over Postgres (what
    /// [`build_app`](crate::build_app) makes for a store on Postgres).
    ///
    /// One dedicated connection (`application_name` `jarvis-link-<node>`)
    /// `LISTEN`s on the node's channel and sends the node's `NOTIFY`s in
    /// order, pipelined. When it breaks (the database restarted, a proxy
    /// cut it), the link connects again, waiting 0.1 s and then twice as
    /// long after each failed attempt, up to 5 s; messages sent to or by
    /// the node meanwhile are lost (a forwarded prompt that is not
    /// acknowledged is taken over once the owner's lease runs out; screens
    /// see the turn's outcome in the history).
    pub struct PgCluster {
        store: PostgresSessionStore,
        node: String,
        outgoing: mpsc::UnboundedSender<(String, String)>,
        incoming: Mutex<Option<mpsc::UnboundedReceiver<NodeMessage>>>,
        tasks: Vec<tokio::task::JoinHandle<()>>,
    }

    impl std::fmt::Debug for PgCluster {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("PgCluster")
                .field("node", &self.node)
                .finish_non_exhaustive()
        }
    }

    impl Drop for PgCluster {
        fn drop(&mut self) {
            for task in &self.tasks {
                task.abort();
            }
        }
    }

    fn db(op: &'static str) -> impl FnOnce(tokio_postgres::Error) -> SessionError {
        move |e| SessionError::Database {
            op,
            source: Box::new(e),
        }
    }

    impl PgCluster {
        /// Connects the link of `store`'s node (a store made a node with
        /// `PostgresSessionStore::with_node`) to the database at `url`
        /// (a URL or `key=value` settings), and starts listening. Fails when
        /// the first connection cannot be made; later breaks are mended.
        pub async fn start(url: &str, store: PostgresSessionStore) -> Result<Self, SessionError> {
            let node = store
                .node_id()
                .ok_or_else(|| SessionError::Database {
                    op: "start the cluster link",
                    source: "the session store is not a node".into(),
                })?
                .to_owned();
            let mut config: tokio_postgres::Config = url.parse().map_err(db("read the database address"))?;
            config.application_name(format!("jarvis-link-{node}"));
            let (raw_tx, mut raw_rx) = mpsc::unbounded_channel::<String>();
            let first = Link::open(&config, &node, raw_tx.clone())
                .await
                .map_err(db("connect the cluster link"))?;
            store
                .execute("DELETE FROM jarvis_watchers WHERE node = $1", &[&node])
                .await?;
            let (in_tx, in_rx) = mpsc::unbounded_channel();
            // Payloads in, sent by reference or not.
            let reader = store.clone();
            let decode = tokio::spawn(async move {
                while let Some(payload) = raw_rx.recv().await {
                    let text = match serde_json::from_str::<ByRef>(&payload) {
                        Ok(ByRef { id }) => {
                            match reader
                                .query_strings(
                                    "DELETE FROM jarvis_node_payloads WHERE id = $1 RETURNING body",
                                    &[&id],
                                )
                                .await
                            {
                                Ok(mut body) if !body.is_empty() => body.swap_remove(0),
                                Ok(_) => continue,
                                Err(error) => {
                                    tracing::warn!(%error, "cluster: a message sent by reference could not be read");
                                    continue;
                                }
                            }
                        }
                        Err(_) => payload,
                    };
                    match serde_json::from_str::<NodeMessage>(&text) {
                        Ok(message) => {
                            if in_tx.send(message).is_err() {
                                return;
                            }
                        }
                        Err(error) => {
                            tracing::warn!(%error, "cluster: ignored a message that is not a node message")
                        }
                    }
                }
            });
            // Payloads out, in order, pipelined on the link's connection,
            // which is mended when it breaks.
            let (out_tx, out_rx) = mpsc::unbounded_channel::<(String, String)>();
            let link = tokio::spawn(run_link(config, node.clone(), first, raw_tx, out_rx));
            Ok(Self {
                store,
                node,
                outgoing: out_tx,
                incoming: Mutex::new(Some(in_rx)),
                tasks: vec![link, decode],
            })
        }
    }

    /// One connection of the link: listening, and driven by a task that
    /// hands notifications on until it breaks.
    struct Link {
        client: tokio_postgres::Client,
        driver: tokio::task::JoinHandle<()>,
    }

    impl Link {
        async fn open(
            config: &tokio_postgres::Config,
            node: &str,
            raw: mpsc::UnboundedSender<String>,
        ) -> Result<Self, tokio_postgres::Error> {
            let (client, connection) = config.connect(NoTls).await?;
            let driver = tokio::spawn(forward_notifications(connection, raw, "cluster link"));
            let link = Self { client, driver };
            link.client
                .batch_execute(&format!("LISTEN {}", channel(node)))
                .await?;
            Ok(link)
        }
    }

    impl Drop for Link {
        fn drop(&mut self) {
            self.driver.abort();
        }
    }

    /// Sends what the node sends, on `link` and on the links that replace
    /// it when it breaks (see [`PgCluster`]); ends when the node drops its
    /// sender.
    async fn run_link(
        config: tokio_postgres::Config,
        node: String,
        first: Link,
        raw: mpsc::UnboundedSender<String>,
        mut out: mpsc::UnboundedReceiver<(String, String)>,
    ) {
        let mut link = Some(first);
        let mut backoff = Duration::from_millis(100);
        loop {
            let mut current = match link.take() {
                Some(current) => current,
                None => match Link::open(&config, &node, raw.clone()).await {
                    Ok(current) => {
                        tracing::info!(node = %node, "cluster: the link to the database is back");
                        backoff = Duration::from_millis(100);
                        current
                    }
                    Err(error) => {
                        tracing::warn!(%error, retry_in = ?backoff, "cluster: the link to the database could not be made again");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                        continue;
                    }
                },
            };
            loop {
                tokio::select! {
                    _ = &mut current.driver => break,
                    message = out.recv() => {
                        let Some(first) = message else {
                            return;
                        };
                        let mut batch = vec![first];
                        while batch.len() < 64 {
                            match out.try_recv() {
                                Ok(next) => batch.push(next),
                                Err(_) => break,
                            }
                        }
                        let sends = batch
                            .iter()
                            .map(|(channel, payload)| notify(&current.client, channel, payload));
                        for result in futures::future::join_all(sends).await {
                            if let Err(error) = result {
                                tracing::warn!(%error, "cluster: a message to another node was lost");
                            }
                        }
                    }
                }
            }
            tracing::warn!(node = %node, "cluster: the link to the database broke; connecting again");
        }
    }

    /// Sends `payload` on `channel`, by reference when it is too large.
    async fn notify(
        client: &tokio_postgres::Client,
        channel: &str,
        payload: &str,
    ) -> Result<(), tokio_postgres::Error> {
        if payload.len() <= MAX_PAYLOAD {
            client
                .execute("SELECT pg_notify($1, $2)", &[&channel, &payload])
                .await?;
            return Ok(());
        }
        let row = client
            .query_one(
                "INSERT INTO jarvis_node_payloads (body) VALUES ($1) RETURNING id",
                &[&payload],
            )
            .await?;
        let id: i64 = row.get(0);
        let reference = serde_json::to_string(&ByRef { id }).unwrap_or_default();
        client
            .execute("SELECT pg_notify($1, $2)", &[&channel, &reference])
            .await?;
        Ok(())
    }

    #[async_trait]
    impl ClusterLink for PgCluster {
        fn node_id(&self) -> &str {
            &self.node
        }

        async fn route(&self, session: &SessionId) -> Result<SessionRoute, SessionError> {
            let held = self.store.holds(session);
            match self.store.claim(session).await? {
                Claim::Held { .. } => Ok(SessionRoute::Local { taken: !held }),
                Claim::Elsewhere { node, expires_in } => Ok(SessionRoute::Remote { node, expires_in }),
            }
        }

        async fn owner(&self, session: &SessionId) -> Result<Option<String>, SessionError> {
            Ok(self.store.owner(session).await?.map(|(node, _)| node))
        }

        fn send(&self, node: &str, message: NodeMessage) {
            match serde_json::to_string(&message) {
                Ok(payload) => {
                    let _ = self.outgoing.send((channel(node), payload));
                }
                Err(error) => tracing::error!(%error, "cluster: a node message could not be encoded"),
            }
        }

        async fn set_watching(&self, session: &SessionId, on: bool) -> Result<(), SessionError> {
            let statement = if on {
                "INSERT INTO jarvis_watchers (session_id, node) VALUES ($1, $2) ON CONFLICT DO NOTHING"
            } else {
                "DELETE FROM jarvis_watchers WHERE session_id = $1 AND node = $2"
            };
            self.store
                .execute(statement, &[&session.as_str(), &self.node])
                .await
                .map(|_| ())
        }

        async fn watchers(&self, session: &SessionId) -> Result<Vec<String>, SessionError> {
            self.store
                .query_strings(
                    "SELECT w.node FROM jarvis_watchers w JOIN jarvis_nodes n ON n.id = w.node \
                     WHERE w.session_id = $1 AND w.node <> $2 AND n.expires_at > clock_timestamp()",
                    &[&session.as_str(), &self.node],
                )
                .await
        }

        async fn leave(&self) -> Result<(), SessionError> {
            self.store.leave().await
        }

        fn incoming(&self) -> Option<mpsc::UnboundedReceiver<NodeMessage>> {
            self.incoming.lock().unwrap_or_else(|e| e.into_inner()).take()
        }
    }

    /// Each schedule slot runs on the first node that claims it, in the
    /// table `jarvis_schedule_slots` of a node's session store
    /// (`Scheduler::with_slot_claim`; `build_app` sets it for a store on
    /// Postgres).
    #[derive(Debug, Clone)]
    pub struct PostgresSlotClaim(pub PostgresSessionStore);

    #[async_trait]
    impl jarvis_initiative::SlotClaim for PostgresSlotClaim {
        async fn claim(&self, job: &str, slot: jarvis_common::Timestamp) -> Result<bool, String> {
            let node = self.0.node_id().unwrap_or_default().to_owned();
            self.0
                .execute(
                    "INSERT INTO jarvis_schedule_slots (job, slot, node) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                    &[&job, &slot.to_system_time(), &node],
                )
                .await
                .map(|inserted| inserted == 1)
                .map_err(|e| e.to_string())
        }
    }

    /// "Always allow" for the whole deployment: the table
    /// `jarvis_approval_rules` (a row per agent and rule, the rule as its
    /// JSON text), read by `LayeredApprovalRules::with_shared` between the
    /// agent's file and `approvals.yaml`. `build_app` sets it for a store on
    /// Postgres.
    #[derive(Debug, Clone)]
    pub struct PostgresApprovalRules(pub PostgresSessionStore);

    #[async_trait]
    impl jarvis_turn::SharedRuleStore for PostgresApprovalRules {
        async fn rules(&self, agent_id: &str) -> Result<Vec<jarvis_turn::ApprovalRule>, String> {
            let texts = self
                .0
                .query_strings(
                    "SELECT rule FROM jarvis_approval_rules WHERE agent_id = $1 ORDER BY id",
                    &[&agent_id],
                )
                .await
                .map_err(|e| e.to_string())?;
            Ok(texts
                .iter()
                .filter_map(|text| match serde_json::from_str(text) {
                    Ok(rule) => Some(rule),
                    Err(error) => {
                        tracing::warn!(%error, agent = agent_id, "approval rules: a deployment rule does not parse; skipped");
                        None
                    }
                })
                .collect())
        }

        async fn add(&self, agent_id: &str, rule: &jarvis_turn::ApprovalRule) -> Result<bool, String> {
            let text = serde_json::to_string(rule).map_err(|e| e.to_string())?;
            self.0
                .execute(
                    "INSERT INTO jarvis_approval_rules (agent_id, rule) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                    &[&agent_id, &text],
                )
                .await
                .map(|inserted| inserted == 1)
                .map_err(|e| e.to_string())
        }
    }

    /// The deployment's scheduled jobs: the table `jarvis_jobs` (a row per
    /// job, its text as `Job::to_yaml` writes it), read by every node's
    /// scheduler before each tick (`Scheduler::with_shared_jobs`), written
    /// by `/schedule`. `build_app` sets it for a store on Postgres.
    #[derive(Debug, Clone)]
    pub struct PostgresJobs(pub PostgresSessionStore);

    #[async_trait]
    impl jarvis_initiative::SharedJobs for PostgresJobs {
        async fn load(&self) -> Result<Vec<String>, String> {
            self.0
                .query_strings("SELECT spec FROM jarvis_jobs ORDER BY seq", &[])
                .await
                .map_err(|e| e.to_string())
        }

        async fn insert(&self, id: &str, text: &str) -> Result<bool, String> {
            self.0
                .execute(
                    "INSERT INTO jarvis_jobs (id, spec) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                    &[&id, &text],
                )
                .await
                .map(|inserted| inserted == 1)
                .map_err(|e| e.to_string())
        }

        async fn remove(&self, id: &str) -> Result<bool, String> {
            self.0
                .execute("DELETE FROM jarvis_jobs WHERE id = $1", &[&id])
                .await
                .map(|removed| removed == 1)
                .map_err(|e| e.to_string())
        }
    }
}
