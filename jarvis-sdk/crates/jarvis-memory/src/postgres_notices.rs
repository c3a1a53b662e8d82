//! What a [`PostgresMemoryStore`](super::PostgresMemoryStore) hears of
//! the writes of other processes sharing its tables.
//!
//! Every statement that changes `jarvis_ltm_entries`, `jarvis_ltm_deleted`
//! or `jarvis_working_memory` fires a trigger ([`TRIGGERS`]) that sends a
//! notice on [`CHANNEL`]: the table's schema and the writer's token (the
//! `jarvis.writer` setting each store's connections start with; empty for
//! anyone else, such as an administrator's `psql`). Each store keeps one
//! connection of its own that `LISTEN`s, and counts the notices of other
//! writers in its schema as a [`generation`](Notices::generation). A
//! store whose generation has not moved since its mirror last caught up,
//! and whose own writes are all in the mirror, has nothing to catch up
//! with, so a recall costs no round trip to the database.
//!
//! A notice arrives shortly after the write commits, not before the
//! writer's statement returns: a read that must see every write committed
//! anywhere before it began refreshes anyway (every read but the recall's
//! [`catch_up`](super::MemoryStore::catch_up)). While the connection is
//! down the store is not [`listening`](Notices::listening) and catches up
//! on every recall, as before there were notices; the connection is made
//! again after 0.5 s, then after twice as long each time up to 10 s, and
//! coming back counts as a notice. The connection's `application_name` is
//! `jarvis-memory-notices`.

use std::hash::{BuildHasher, Hash};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio_postgres::NoTls;

use jarvis_common::pg::forward_notifications;

/// The channel the triggers notify on.
pub(crate) const CHANNEL: &str = "jarvis_memory";

/// The `application_name` of the listening connection, as
/// `pg_stat_activity` shows it.
pub(crate) const APPLICATION_NAME: &str = "jarvis-memory-notices";

/// The server setting that names a store's connections as the writer.
pub(crate) const WRITER_SETTING: &str = "jarvis.writer";

/// The trigger function and the triggers of the three tables, created once
/// (idempotent: each trigger only when it is missing; the function is
/// replaced, which changes nothing when it is the same). Statement-level:
/// a statement that writes many rows sends one notice, and Postgres folds
/// equal notices of one transaction into one.
pub(crate) const TRIGGERS: &str = r#"
CREATE OR REPLACE FUNCTION jarvis_memory_notice() RETURNS trigger LANGUAGE plpgsql AS $notice$
BEGIN
    PERFORM pg_notify('jarvis_memory', TG_TABLE_SCHEMA || ' ' || COALESCE(current_setting('jarvis.writer', true), ''));
    RETURN NULL;
END
$notice$;
DO $triggers$
DECLARE
    t TEXT;
BEGIN
    FOREACH t IN ARRAY ARRAY['jarvis_ltm_entries', 'jarvis_ltm_deleted', 'jarvis_working_memory'] LOOP
        IF NOT EXISTS (
            SELECT 1 FROM pg_trigger WHERE tgname = t || '_notice' AND tgrelid = t::regclass
        ) THEN
            EXECUTE format(
                'CREATE TRIGGER %I AFTER INSERT OR UPDATE OR DELETE ON %I '
                'FOR EACH STATEMENT EXECUTE FUNCTION jarvis_memory_notice()',
                t || '_notice', t
            );
        END IF;
    END LOOP;
END
$triggers$;
"#;

/// A token no other store shares: what its connections set as
/// [`WRITER_SETTING`], so it can tell its own notices from others'.
pub(crate) fn writer_token() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    // `RandomState` is seeded from the operating system's randomness.
    let state = std::collections::hash_map::RandomState::new();
    let mut hasher = state.build_hasher();
    (std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed), nanos).hash(&mut hasher);
    format!("{:016x}", std::hash::Hasher::finish(&hasher))
}

/// What a store has heard, shared with its listening task.
#[derive(Debug)]
pub(crate) struct Notices {
    writer: String,
    listening: watch::Sender<bool>,
    generation: AtomicU64,
    /// Notices of other writers heard, for those who wait for one.
    heard: watch::Sender<u64>,
}

impl Notices {
    fn new(writer: String) -> Self {
        Self {
            writer,
            listening: watch::channel(false).0,
            generation: AtomicU64::new(0),
            heard: watch::channel(0).0,
        }
    }

    /// Whether the listening connection is up: only then does a quiet
    /// [`generation`](Self::generation) mean nothing changed elsewhere.
    pub(crate) fn listening(&self) -> bool {
        *self.listening.borrow()
    }

    /// Waits until [`listening`](Self::listening) is `listening`.
    pub(crate) async fn until_listening(&self, listening: bool) {
        let mut state = self.listening.subscribe();
        // The sender lives as long as `self`.
        let _ = state.wait_for(|now| *now == listening).await;
    }

    /// Moves with every notice of another writer and every time the
    /// listening connection goes or comes back.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// How many notices of other writers were heard (coming back after the
    /// connection broke counts as one: the notices sent meanwhile are lost).
    pub(crate) fn heard(&self) -> u64 {
        *self.heard.borrow()
    }

    /// Waits until more than `after` notices of other writers were heard.
    pub(crate) async fn hear(&self, after: u64) {
        let mut heard = self.heard.subscribe();
        // The sender lives as long as `self`.
        let _ = heard.wait_for(|n| *n > after).await;
    }

    fn moved(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    fn set_listening(&self, listening: bool) {
        // The generation first: whoever sees the new state sees it moved.
        self.moved();
        self.listening.send_replace(listening);
    }

    /// Takes in one payload (`schema writer`) heard in `schema`.
    fn take(&self, schema: &str, payload: &str) {
        let (from, writer) = payload.split_once(' ').unwrap_or((payload, ""));
        if from == schema && writer != self.writer {
            self.moved();
            self.heard.send_modify(|n| *n += 1);
        }
    }
}

/// The listening task of a store; dropping it (with the store's last
/// clone) stops the task and closes its connection.
#[derive(Debug)]
pub(crate) struct Listener {
    notices: Arc<Notices>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Listener {
    /// Starts listening with the connection settings `config` (those of the
    /// store's pool, so the same schema) for a store whose writes carry
    /// the token `writer`. Returns once the first connection listens, or,
    /// when it cannot be made, at once, not listening (the task keeps
    /// trying).
    pub(crate) async fn start(config: tokio_postgres::Config, writer: String) -> Self {
        let notices = Arc::new(Notices::new(writer));
        let first = match Link::open(&config).await {
            Ok(link) => {
                notices.set_listening(true);
                Some(link)
            }
            Err(error) => {
                tracing::warn!(%error, "memory store (postgres): cannot listen for other writers' notices yet; every recall catches up meanwhile");
                None
            }
        };
        let task = tokio::spawn(run(config, Arc::clone(&notices), first));
        Self { notices, task }
    }

    /// What the store has heard.
    pub(crate) fn notices(&self) -> &Notices {
        &self.notices
    }
}

/// One listening connection: its client (which must live for the
/// connection to), its schema, the payloads its driver hands on, and the
/// driver.
struct Link {
    _client: tokio_postgres::Client,
    schema: String,
    payloads: mpsc::UnboundedReceiver<String>,
    driver: tokio::task::JoinHandle<()>,
}

impl Drop for Link {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl Link {
    async fn open(config: &tokio_postgres::Config) -> Result<Self, tokio_postgres::Error> {
        let mut config = config.clone();
        config.application_name(APPLICATION_NAME);
        let (client, connection) = config.connect(NoTls).await?;
        let (tx, payloads) = mpsc::unbounded_channel();
        // Only `CHANNEL` is listened on.
        let driver = tokio::spawn(forward_notifications(connection, tx, "memory store (postgres)"));
        // No schema when the search path names none that exists: then no
        // table of the store's can have sent a notice either.
        let schema: Option<String> = client
            .query_one("SELECT current_schema()::TEXT", &[])
            .await?
            .try_get(0)?;
        let schema = schema.unwrap_or_default();
        client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
        Ok(Self {
            _client: client,
            schema,
            payloads,
            driver,
        })
    }
}

/// Hears notices on `first` and the links that replace it when it breaks.
async fn run(config: tokio_postgres::Config, notices: Arc<Notices>, mut first: Option<Link>) {
    let mut wait = Duration::from_millis(500);
    loop {
        let link = match first.take() {
            Some(link) => Some(link),
            None => match Link::open(&config).await {
                Ok(link) => {
                    tracing::info!("memory store (postgres): listening for other writers' notices again");
                    notices.set_listening(true);
                    // What others wrote meanwhile went unheard: as if heard.
                    notices.heard.send_modify(|n| *n += 1);
                    wait = Duration::from_millis(500);
                    Some(link)
                }
                Err(error) => {
                    tracing::debug!(%error, "memory store (postgres): still cannot listen");
                    None
                }
            },
        };
        if let Some(mut link) = link {
            while let Some(payload) = link.payloads.recv().await {
                notices.take(&link.schema, &payload);
            }
            notices.set_listening(false);
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_other_writers_in_the_same_schema_move_the_generation() {
        let notices = Notices::new("me".into());
        notices.take("s", "s me");
        notices.take("s", "t other");
        assert_eq!((notices.generation(), notices.heard()), (0, 0));
        notices.take("s", "s other");
        notices.take("s", "s ");
        notices.take("s", "s");
        assert_eq!((notices.generation(), notices.heard()), (3, 3));
        notices.set_listening(false);
        assert!(!notices.listening());
        assert_eq!((notices.generation(), notices.heard()), (4, 3));
    }

    #[test]
    fn tokens_differ() {
        assert_ne!(writer_token(), writer_token());
        assert_eq!(writer_token().len(), 16);
    }
}
