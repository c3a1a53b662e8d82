//! What the Postgres stores of sessions, memory and open loops share
//! (feature `postgres`): a connection pool from a connection string, a
//! description of the target for error messages that never shows the
//! password, migrations under an advisory lock, and the failures of getting
//! a connection, which each store maps into its own error type.

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime};
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::NoTls;

/// A boxed error cause.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a pool or a connection could not be had.
#[derive(Debug)]
pub enum PgSetupError {
    /// The database cannot be reached (bad connection string, refused,
    /// timed out); `target` names host, port, database and user.
    Unreachable {
        /// What was being reached.
        target: String,
        /// The cause.
        source: BoxError,
    },
    /// Anything else.
    Other {
        /// What was being done.
        op: &'static str,
        /// The cause.
        source: BoxError,
    },
}

/// A pool of at most `max_size` connections to `url` (`postgres://…` or
/// `host=… user=… dbname=…`; no TLS), and the description of its target.
/// No connection is made yet.
pub fn build_pool(url: &str, max_size: usize) -> Result<(Pool, Arc<str>), PgSetupError> {
    build_pool_with(url, max_size, &[])
}

/// [`build_pool`] whose connections start with the server settings
/// `settings` (`name`, `value`), after any the connection string's own
/// `options` sets.
pub fn build_pool_with(
    url: &str,
    max_size: usize,
    settings: &[(&str, &str)],
) -> Result<(Pool, Arc<str>), PgSetupError> {
    let config = config_with(url, settings)?;
    let target: Arc<str> = describe(&config).into();
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    let pool = Pool::builder(manager)
        .max_size(max_size)
        .runtime(Runtime::Tokio1)
        .create_timeout(Some(Duration::from_secs(15)))
        .wait_timeout(Some(Duration::from_secs(30)))
        .build()
        .map_err(|e| PgSetupError::Other {
            op: "build the connection pool",
            source: Box::new(e),
        })?;
    Ok((pool, target))
}

/// The connection settings of `url` with the server settings `settings`
/// added to its `options`, and a connect timeout of 10 s unless it names
/// one: what [`build_pool_with`] connects with, for a connection of its
/// own beside the pool (a `LISTEN`ing one).
pub fn config_with(url: &str, settings: &[(&str, &str)]) -> Result<tokio_postgres::Config, PgSetupError> {
    let mut config: tokio_postgres::Config = url.parse().map_err(|e| PgSetupError::Unreachable {
        target: "(the connection string could not be read)".into(),
        source: Box::new(e),
    })?;
    if !settings.is_empty() {
        let mut options = config.get_options().unwrap_or_default().to_owned();
        for (name, value) in settings {
            if !options.is_empty() {
                options.push(' ');
            }
            options.push_str(&format!("-c {name}={value}"));
        }
        config.options(options);
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(10));
    }
    Ok(config)
}

/// A connection from `pool`.
pub async fn connection(pool: &Pool, target: &str) -> Result<Object, PgSetupError> {
    pool.get().await.map_err(|e| match e {
        PoolError::Backend(e) => PgSetupError::Unreachable {
            target: target.to_owned(),
            source: Box::new(e),
        },
        PoolError::Timeout(t) => PgSetupError::Unreachable {
            target: target.to_owned(),
            source: format!("timed out ({t:?})").into(),
        },
        other => PgSetupError::Other {
            op: "get a connection",
            source: other.to_string().into(),
        },
    })
}

/// Runs `migrations` in one transaction holding the advisory lock `lock`,
/// so several processes starting at once migrate one after the other.
pub async fn migrate_locked(client: &mut Object, lock: i64, migrations: &str) -> Result<(), PgSetupError> {
    let db = |op: &'static str| {
        move |e: tokio_postgres::Error| PgSetupError::Other {
            op,
            source: Box::new(e),
        }
    };
    let tx = client.transaction().await.map_err(db("start the migration"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&lock])
        .await
        .map_err(db("lock the schema for migration"))?;
    tx.batch_execute(migrations)
        .await
        .map_err(db("migrate the schema"))?;
    tx.commit().await.map_err(db("commit the migration"))
}

/// Drives a `LISTEN`ing connection, handing every notification's payload
/// to `out`, until the connection ends (logged as `what`'s connection
/// ending) or `out` is dropped.
pub async fn forward_notifications<S, T>(
    mut connection: tokio_postgres::Connection<S, T>,
    out: tokio::sync::mpsc::UnboundedSender<String>,
    what: &'static str,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use futures::StreamExt;
    let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
    while let Some(message) = messages.next().await {
        match message {
            Ok(tokio_postgres::AsyncMessage::Notification(n)) => {
                if out.send(n.payload().to_owned()).is_err() {
                    return;
                }
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%error, "{what}: the listening connection ended");
                return;
            }
        }
    }
}

/// Host, port, database and user of `config`, for error messages.
pub fn describe(config: &tokio_postgres::Config) -> String {
    use tokio_postgres::config::Host;
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    format!(
        "host={} port={} dbname={} user={}",
        if hosts.is_empty() {
            "(default)".into()
        } else {
            hosts.join(",")
        },
        if ports.is_empty() {
            "5432".into()
        } else {
            ports.join(",")
        },
        config.get_dbname().unwrap_or("(default)"),
        config.get_user().unwrap_or("(default)"),
    )
}
