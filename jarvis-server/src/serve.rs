//! [`serve`]: run the server on a listener until a shutdown signal (over
//! TLS when configured), [`check_bind`], the rule for who may listen where,
//! and the server file (`$JARVIS_HOME/server.json`) that lets `jarvis chat`
//! find a running server for its home.

use axum::serve::ListenerExt;
use jarvis_sdk::common::write_atomic;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::ServerConfig;
use crate::state::ServerState;
use crate::tls::{ServerTls, TlsError, TlsListener, server_tls};

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
    /// A proxy in front serves other machines: a token is required.
    #[error(
        "server: refusing to serve behind a proxy without a token: the proxy lets other machines in; set JARVIS_WEB__TOKEN"
    )]
    ProxyWithoutToken {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// Listening beyond this machine needs TLS, here or in a proxy in front.
    #[error(
        "server: refusing to listen on {addr} without TLS, where the token would cross the network in the clear; \
         give a certificate and key (jarvis --tls-cert PATH --tls-key PATH, or JARVIS_WEB__TLS_CERT and JARVIS_WEB__TLS_KEY), \
         or say that a proxy in front terminates TLS (jarvis --behind-proxy, or JARVIS_WEB__BEHIND_PROXY=1)"
    )]
    NoTls {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// The TLS certificate or key could not be used.
    #[error("server: TLS: {0}")]
    Tls(#[from] TlsError),
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

/// Refuses a non-loopback address (a wildcard such as `0.0.0.0` included)
/// unless `config` requires a token *and* the connection is encrypted:
/// TLS here ([`ServerConfig::tls`]) or in a proxy in front
/// ([`ServerConfig::behind_proxy`]). A proxy in front lets other machines
/// in, so it needs a token on any address.
pub fn check_bind(addr: SocketAddr, config: &ServerConfig) -> Result<(), ServeError> {
    if config.behind_proxy && config.token.is_none() {
        Err(ServeError::ProxyWithoutToken { addr })
    } else if addr.ip().is_loopback() {
        Ok(())
    } else if config.token.is_none() {
        Err(ServeError::InsecureBind { addr })
    } else if config.tls.is_none() && !config.behind_proxy {
        Err(ServeError::NoTls { addr })
    } else {
        Ok(())
    }
}

/// What `$JARVIS_HOME/server.json` says about the running server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerFile {
    /// Schema version, 1.
    pub v: u32,
    /// The server's process id (its `/healthz` reports the same).
    pub pid: u32,
    /// Where to reach it from this machine, `http://127.0.0.1:8765`
    /// (`https://…` under TLS).
    pub url: String,
    /// Under TLS, the SHA-256 digest (hex) of the server's certificate:
    /// clients of this home trust exactly that certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_sha256: Option<String>,
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

/// The URL this machine reaches `addr` at (a wildcard address becomes
/// loopback), `https://…` when `tls`.
pub fn local_url(addr: SocketAddr, tls: bool) -> String {
    let scheme = if tls { "https" } else { "http" };
    match addr {
        SocketAddr::V4(a) if a.ip().is_unspecified() => format!("{scheme}://127.0.0.1:{}", a.port()),
        SocketAddr::V6(a) if a.ip().is_unspecified() => format!("{scheme}://[::1]:{}", a.port()),
        SocketAddr::V4(a) => format!("{scheme}://{a}"),
        SocketAddr::V6(a) => format!("{scheme}://[{}]:{}", a.ip(), a.port()),
    }
}

/// Serves `state` on `listener` until `shutdown` resolves, then shuts down
/// gracefully: the listener stops accepting and open HTTP requests finish,
/// then [`ServerState::shutdown`] aborts running turns and closes every
/// WebSocket (1001). While it runs, `$JARVIS_HOME/server.json` names it.
///
/// Refuses a non-loopback listener without a token and TLS (see
/// [`check_bind`]). Serves HTTPS when [`ServerConfig::tls`] names a
/// certificate and key. The same as [`Server::new`] followed by
/// [`Server::run`].
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
    tls: Option<ServerTls>,
    state: ServerState,
    home: PathBuf,
    file: Option<ServerFile>,
}

impl Server {
    /// Checks the address (see [`check_bind`]), reads the TLS certificate
    /// and key when configured, and writes `$JARVIS_HOME/server.json`, so
    /// clients started from now on find the server (their connections wait
    /// in the listen queue until [`Server::run`]).
    pub fn new(listener: TcpListener, state: ServerState) -> Result<Self, ServeError> {
        let addr = listener.local_addr().map_err(|source| ServeError::Io {
            what: "read the listening address",
            source,
        })?;
        check_bind(addr, state.config())?;
        let tls = state.config().tls.as_ref().map(server_tls).transpose()?;
        let home = state.app().home().to_path_buf();
        let file = ServerFile {
            v: 1,
            pid: std::process::id(),
            url: local_url(addr, tls.is_some()),
            cert_sha256: tls.as_ref().map(|t| t.certificate_sha256.clone()),
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
            tls,
            state,
            home,
            file: written.ok().map(|()| file),
        })
    }

    /// Where this machine reaches the server, `http://127.0.0.1:8765`
    /// (`https://…` under TLS).
    pub fn url(&self) -> String {
        self.listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
            .map(|addr| local_url(addr, self.tls.is_some()))
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
        tracing::info!(%url, "listening");
        // The app's background work (the reflection daemon) runs as long as
        // the server does.
        let background = CancellationToken::new();
        let tasks = self.state.app().spawn_background(background.clone());
        let cluster = self
            .state
            .inner
            .cluster
            .clone()
            .map(|cluster| tokio::spawn(cluster.serve(self.state.clone())));
        let router = crate::router(self.state.clone());
        // `/mcp`'s open streams end as soon as shutdown begins, so the
        // graceful shutdown does not wait for them.
        let mcp_stop = self.state.inner.mcp_stop.clone();
        let shutdown = async move {
            shutdown.await;
            mcp_stop.cancel();
        };
        let served = match self.tls.take() {
            Some(tls) => {
                axum::serve(TlsListener::new(listener, tls.acceptor), router)
                    .with_graceful_shutdown(shutdown)
                    .await
            }
            None => {
                // Frames are small and latency matters: no Nagle delay.
                let listener = listener.tap_io(|tcp| {
                    if let Err(error) = tcp.set_nodelay(true) {
                        tracing::debug!(%error, "TCP_NODELAY could not be set");
                    }
                });
                axum::serve(listener, router)
                    .with_graceful_shutdown(shutdown)
                    .await
            }
        };
        let result = served.map_err(|source| ServeError::Io {
            what: "serve connections",
            source,
        });
        background.cancel();
        for task in tasks {
            let _ = task.await;
        }
        self.state.shutdown().await;
        if let Some(task) = cluster {
            task.abort();
        }
        if let Some(cluster) = &self.state.inner.cluster
            && let Err(error) = cluster.link.leave().await
        {
            tracing::warn!(%error, "this node could not leave its deployment; its sessions wait for its lease to run out");
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn loopback_needs_nothing_and_other_addresses_a_token_and_tls() {
        let plain = ServerConfig::default();
        for loopback in ["127.0.0.1:8765", "127.3.4.5:1", "[::1]:8765"] {
            assert!(check_bind(addr(loopback), &plain).is_ok(), "{loopback}");
        }
        for open in [
            "0.0.0.0:8765",
            "[::]:8765",
            "192.168.1.20:8765",
            "[2001:db8::1]:443",
        ] {
            let error = check_bind(addr(open), &plain).unwrap_err();
            assert!(
                matches!(error, ServeError::InsecureBind { .. }),
                "{open}: {error}"
            );
            assert!(error.to_string().contains("JARVIS_WEB__TOKEN"), "{error}");
            // A token alone is not enough: it would travel in the clear.
            let token = plain.clone().with_token("t");
            let error = check_bind(addr(open), &token).unwrap_err();
            assert!(matches!(error, ServeError::NoTls { .. }), "{open}: {error}");
            let message = error.to_string();
            for hint in [
                "--tls-cert",
                "--tls-key",
                "--behind-proxy",
                "JARVIS_WEB__TLS_CERT",
                "JARVIS_WEB__BEHIND_PROXY",
            ] {
                assert!(message.contains(hint), "{hint} missing from: {message}");
            }
            assert!(check_bind(addr(open), &token.clone().with_tls("c.pem", "k.pem")).is_ok());
            assert!(check_bind(addr(open), &token.clone().with_behind_proxy(true)).is_ok());
            // TLS or a proxy without a token still refuses.
            let error = check_bind(addr(open), &plain.clone().with_tls("c.pem", "k.pem")).unwrap_err();
            assert!(matches!(error, ServeError::InsecureBind { .. }), "{error}");
            let error = check_bind(addr(open), &plain.clone().with_behind_proxy(true)).unwrap_err();
            assert!(matches!(error, ServeError::ProxyWithoutToken { .. }), "{error}");
        }
        // Behind a proxy other machines come in, whatever address the
        // server itself listens on.
        let proxied = plain.clone().with_behind_proxy(true);
        let error = check_bind(addr("127.0.0.1:8765"), &proxied).unwrap_err();
        assert!(matches!(error, ServeError::ProxyWithoutToken { .. }), "{error}");
        assert!(error.to_string().contains("JARVIS_WEB__TOKEN"), "{error}");
        assert!(check_bind(addr("127.0.0.1:8765"), &proxied.with_token("t")).is_ok());
        // TLS on loopback without a token is this machine's business.
        assert!(check_bind(addr("127.0.0.1:8765"), &plain.with_tls("c.pem", "k.pem")).is_ok());
    }

    #[test]
    fn local_urls_name_the_scheme_and_a_reachable_address() {
        assert_eq!(local_url(addr("0.0.0.0:80"), false), "http://127.0.0.1:80");
        assert_eq!(local_url(addr("[::]:443"), true), "https://[::1]:443");
        assert_eq!(local_url(addr("10.0.0.2:8765"), true), "https://10.0.0.2:8765");
        assert_eq!(local_url(addr("[::1]:8765"), false), "http://[::1]:8765");
    }

    #[test]
    fn the_server_file_names_the_certificate_only_under_tls() {
        let plain = ServerFile {
            v: 1,
            pid: 7,
            url: "http://127.0.0.1:1".into(),
            cert_sha256: None,
        };
        let text = serde_json::to_string(&plain).unwrap();
        assert_eq!(text, r#"{"v":1,"pid":7,"url":"http://127.0.0.1:1"}"#);
        assert_eq!(serde_json::from_str::<ServerFile>(&text).unwrap(), plain);
    }
}
