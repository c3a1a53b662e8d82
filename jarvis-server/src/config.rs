//! [`ServerConfig`]: where the server listens, its token and its limits
//! (`JARVIS_WEB__HOST`, `JARVIS_WEB__PORT`, `JARVIS_WEB__TOKEN`).

use std::fmt;
use std::time::Duration;

/// The default address: loopback only.
pub const DEFAULT_HOST: &str = "127.0.0.1";
/// The default port.
pub const DEFAULT_PORT: u16 = 8765;

/// Size limits and timings of the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// The largest HTTP request body (default 64 KiB; the API takes small JSON).
    pub max_body_bytes: usize,
    /// The largest WebSocket message or frame a client may send (default
    /// 256 KiB: a 10,000-character prompt is at most 40 KB of UTF-8).
    /// A larger one closes the connection (1009, "message too big").
    pub max_frame_bytes: usize,
    /// Frames queued for one connection before it counts as too slow and is
    /// closed with 1008 (default 1,024). Turns never wait for a client.
    pub outbox_frames: usize,
    /// How long shutdown waits for aborted turns and closing connections
    /// (default 10 s).
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: 64 << 10,
            max_frame_bytes: 256 << 10,
            outbox_frames: 1024,
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// How the server listens.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerConfig {
    /// The address to bind (`JARVIS_WEB__HOST`, default `127.0.0.1`).
    pub host: String,
    /// The port (`JARVIS_WEB__PORT`, default 8765; 0 picks a free one).
    pub port: u16,
    /// The token clients must present (`JARVIS_WEB__TOKEN`): header
    /// `Authorization: Bearer …`, cookie `jarvis_token` or query `token`.
    /// Required to listen on anything but loopback. The app's security
    /// pipeline must be given the same token (`AppConfig::web_token`).
    pub token: Option<String>,
    /// Limits.
    pub limits: Limits,
}

impl fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConfig")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("limits", &self.limits)
            .finish()
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            host: DEFAULT_HOST.to_owned(),
            port: DEFAULT_PORT,
            token: None,
            limits: Limits::default(),
        }
    }
}

impl ServerConfig {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, String> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads variables through `get`; empty values count as unset.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let var = |name: &str| get(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let mut config = Self::default();
        if let Some(host) = var("JARVIS_WEB__HOST") {
            config.host = host;
        }
        if let Some(port) = var("JARVIS_WEB__PORT") {
            config.port = port
                .parse()
                .map_err(|_| format!("JARVIS_WEB__PORT must be a port number (0 to 65535), got {port:?}"))?;
        }
        config.token = var("JARVIS_WEB__TOKEN");
        Ok(config)
    }

    /// A loopback server on `port` (0: any free port) without a token; tests.
    pub fn loopback(port: u16) -> Self {
        Self {
            port,
            ..Self::default()
        }
    }

    /// Requires `token` from every client.
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into()).filter(|t| !t.is_empty());
        self
    }

    /// Uses `limits`.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// `host:port`, ready for `TcpListener::bind` (IPv6 hosts bracketed).
    pub fn bind_address(&self) -> String {
        if self.host.contains(':') && !self.host.starts_with('[') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(vars: &'static [(&'static str, &'static str)]) -> Result<ServerConfig, String> {
        ServerConfig::from_lookup(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()))
    }

    #[test]
    fn defaults_and_environment() {
        let c = lookup(&[]).unwrap();
        assert_eq!(
            (c.host.as_str(), c.port, c.token.is_none()),
            ("127.0.0.1", 8765, true)
        );
        let c = lookup(&[
            ("JARVIS_WEB__HOST", "::1"),
            ("JARVIS_WEB__PORT", "9000"),
            ("JARVIS_WEB__TOKEN", "s3cret"),
        ])
        .unwrap();
        assert_eq!(c.bind_address(), "[::1]:9000");
        assert!(!format!("{c:?}").contains("s3cret"), "the token never prints");
        let e = lookup(&[("JARVIS_WEB__PORT", "eighty")]).unwrap_err();
        assert!(e.contains("JARVIS_WEB__PORT"), "{e}");
        assert_eq!(lookup(&[("JARVIS_WEB__TOKEN", " ")]).unwrap().token, None);
    }
}
