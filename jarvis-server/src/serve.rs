//! [`serve`]: run the server on a listener until a shutdown signal, and the
//! server file (`$JARVIS_HOME/server.json`) that lets `jarvis chat` find a
//! running server for its home.

use axum::serve::ListenerExt;
use jarvis_sdk::write_atomic;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::state::ServerState;

/// The server file's name inside `JARVIS_HOME`.
pub const SERVER_FILE: &str = "server.json";

/// Why the server could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// Listening beyond this machine needs a token.
    #[error(
        "server: refusing to listen on {addr} without a token; set JARVIS_WEB__TOKEN, or listen on 127.0.0.1"
    )]
    InsecureBind {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// The listener or the connection loop failed.
    #[error("server: {what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Refuses a non-loopback address unless a token is required.
pub fn check_bind(addr: SocketAddr, token_configured: bool) -> Result<(), ServeError> {
    if addr.ip().is_loopback() || token_configured {
        Ok(())
    } else {
        Err(ServeError::InsecureBind { addr })
    }
}

/// What `$JARVIS_HOME/server.json` says about the running server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerFile {
    /// Schema version, 1.
    pub v: u32,
    /// The server's process id (its `/healthz` reports the same).
    pub pid: u32,
    /// Where to reach it from this machine, `http://127.0.0.1:8765`.
    pub url: String,
}

impl ServerFile {
    /// The file's path in `home`.
    pub fn path(home: &Path) -> PathBuf {
        home.join(SERVER_FILE)
    }

    /// The file in `home`, if there is a readable one.
    pub fn read(home: &Path) -> Option<Self> {
        let text = std::fs::read_to_string(Self::path(home)).ok()?;
        serde_json::from_str(&text).ok()
    }
}

/// The URL this machine reaches `addr` at (a wildcard address becomes loopback).
pub fn local_url(addr: SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) if a.ip().is_unspecified() => format!("http://127.0.0.1:{}", a.port()),
        SocketAddr::V6(a) if a.ip().is_unspecified() => format!("http://[::1]:{}", a.port()),
        SocketAddr::V4(a) => format!("http://{a}"),
        SocketAddr::V6(a) => format!("http://[{}]:{}", a.ip(), a.port()),
    }
}

/// Serves `state` on `listener` until `shutdown` resolves, then shuts down
/// gracefully: the listener stops accepting and open HTTP requests finish,
/// then [`ServerState::shutdown`] aborts running turns and closes every
/// WebSocket (1001). While it runs, `$JARVIS_HOME/server.json` names it.
///
/// Refuses a non-loopback listener when no token is configured. The same
/// as [`Server::new`] followed by [`Server::run`].
pub async fn serve(
    listener: TcpListener,
    state: ServerState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    Server::new(listener, state)?.run(shutdown).await
}

/// A server that listens and has announced itself in the server file, but
/// does not answer yet: [`Server::run`] does. Dropping it removes the file.
#[derive(Debug)]
pub struct Server {
    listener: Option<TcpListener>,
    state: ServerState,
    home: PathBuf,
    file: Option<ServerFile>,
}

impl Server {
    /// Checks the address (no non-loopback listener without a token) and
    /// writes `$JARVIS_HOME/server.json`, so clients started from now on
    /// find the server (their connections wait in the listen queue until
    /// [`Server::run`]).
    pub fn new(listener: TcpListener, state: ServerState) -> Result<Self, ServeError> {
        let addr = listener.local_addr().map_err(|source| ServeError::Io {
            what: "read the listening address",
            source,
        })?;
        check_bind(addr, state.config().token.is_some())?;
        let home = state.app().home().to_path_buf();
        let file = ServerFile {
            v: 1,
            pid: std::process::id(),
            url: local_url(addr),
        };
        let written = match serde_json::to_vec(&file) {
            Ok(bytes) => write_atomic(&ServerFile::path(&home), &bytes),
            Err(e) => Err(std::io::Error::other(e)),
        };
        if let Err(error) = &written {
            tracing::warn!(%error, "the server file could not be written; `jarvis chat` will not find this server");
        }
        Ok(Self {
            listener: Some(listener),
            state,
            home,
            file: written.ok().map(|()| file),
        })
    }

    /// Where this machine reaches the server, `http://127.0.0.1:8765`.
    pub fn url(&self) -> String {
        self.listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
            .map(local_url)
            .unwrap_or_default()
    }

    /// Serves until `shutdown` resolves, then shuts down gracefully (see [`serve`]).
    pub async fn run(
        mut self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let url = self.url();
        let listener = self.listener.take().ok_or_else(|| ServeError::Io {
            what: "serve connections",
            source: std::io::Error::other("the server already ran"),
        })?;
        // Frames are small and latency matters: no Nagle delay.
        let listener = listener.tap_io(|tcp| {
            if let Err(error) = tcp.set_nodelay(true) {
                tracing::debug!(%error, "TCP_NODELAY could not be set");
            }
        });
        tracing::info!(%url, "listening");
        // The app's background work (the reflection daemon) runs as long as
        // the server does.
        let background = CancellationToken::new();
        let tasks = self.state.app().spawn_background(background.clone());
        let result = axum::serve(listener, crate::router(self.state.clone()))
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(|source| ServeError::Io {
                what: "serve connections",
                source,
            });
        background.cancel();
        for task in tasks {
            let _ = task.await;
        }
        self.state.shutdown().await;
        self.remove_file();
        tracing::info!("stopped");
        result
    }

    fn remove_file(&mut self) {
        if let Some(file) = self.file.take()
            && ServerFile::read(&self.home).is_some_and(|f| f == file)
        {
            let _ = std::fs::remove_file(ServerFile::path(&self.home));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.remove_file();
    }
}
