//! [`ServerConfig`]: where the server listens, its token, its TLS and its
//! limits (`JARVIS_WEB__HOST`, `JARVIS_WEB__PORT`, `JARVIS_WEB__TOKEN`,
//! `JARVIS_WEB__TLS_CERT`, `JARVIS_WEB__TLS_KEY`, `JARVIS_WEB__BEHIND_PROXY`).

use std::fmt;
use std::path::PathBuf;
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
    /// A larger one closes the connection (1009, "message too big"); a
    /// frame up to twice this size is read to its end first, so the
    /// client is not cut off while it still writes and sees the close.
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
    /// `Authorization: Bearer …` or cookie `jarvis_token` (which opening
    /// `/?token=…` once sets). Required to listen on anything but loopback.
    /// The app's security pipeline must be given the same token
    /// (`AppConfig::web_token`).
    pub token: Option<String>,
    /// Serve HTTPS with this certificate and key (`JARVIS_WEB__TLS_CERT`,
    /// `JARVIS_WEB__TLS_KEY`). Listening on anything but loopback needs
    /// this or [`behind_proxy`](Self::behind_proxy).
    pub tls: Option<TlsFiles>,
    /// A reverse proxy in front terminates TLS (`JARVIS_WEB__BEHIND_PROXY`).
    /// The server then takes the scheme and host the browser used from the
    /// proxy's `X-Forwarded-Proto` and `X-Forwarded-Host` (else `Host`), for
    /// the origin check and the cookie's `Secure` flag. Requires a token,
    /// on any address: the proxy lets other machines in.
    pub behind_proxy: bool,
    /// Limits.
    pub limits: Limits,
}

/// The PEM files the server answers TLS with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first (`JARVIS_WEB__TLS_CERT`).
    pub cert: PathBuf,
    /// The private key: PKCS #8, PKCS #1 or SEC1 (`JARVIS_WEB__TLS_KEY`).
    pub key: PathBuf,
}

impl fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConfig")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("tls", &self.tls)
            .field("behind_proxy", &self.behind_proxy)
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
            tls: None,
            behind_proxy: false,
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
        config.tls = match (var("JARVIS_WEB__TLS_CERT"), var("JARVIS_WEB__TLS_KEY")) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert: cert.into(),
                key: key.into(),
            }),
            (None, None) => None,
            (Some(_), None) => {
                return Err(
                    "JARVIS_WEB__TLS_CERT is set but JARVIS_WEB__TLS_KEY is not; TLS needs both".into(),
                );
            }
            (None, Some(_)) => {
                return Err(
                    "JARVIS_WEB__TLS_KEY is set but JARVIS_WEB__TLS_CERT is not; TLS needs both".into(),
                );
            }
        };
        if let Some(value) = var("JARVIS_WEB__BEHIND_PROXY") {
            config.behind_proxy = match value.to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => true,
                "0" | "false" | "no" | "off" => false,
                _ => {
                    return Err(format!(
                        "JARVIS_WEB__BEHIND_PROXY must be 1 or 0 (true/false, yes/no, on/off), got {value:?}"
                    ));
                }
            };
        }
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

    /// Serves HTTPS with the PEM certificate chain `cert` and key `key`.
    pub fn with_tls(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.tls = Some(TlsFiles {
            cert: cert.into(),
            key: key.into(),
        });
        self
    }

    /// Says whether a reverse proxy in front terminates TLS (see
    /// [`behind_proxy`](Self::behind_proxy)).
    pub fn with_behind_proxy(mut self, behind_proxy: bool) -> Self {
        self.behind_proxy = behind_proxy;
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

    #[test]
    fn tls_and_proxy_from_the_environment() {
        let c = lookup(&[]).unwrap();
        assert_eq!((c.tls, c.behind_proxy), (None, false));
        let c = lookup(&[
            ("JARVIS_WEB__TLS_CERT", "/etc/jarvis/cert.pem"),
            ("JARVIS_WEB__TLS_KEY", "/etc/jarvis/key.pem"),
            ("JARVIS_WEB__BEHIND_PROXY", "true"),
        ])
        .unwrap();
        assert_eq!(
            c.tls,
            Some(TlsFiles {
                cert: "/etc/jarvis/cert.pem".into(),
                key: "/etc/jarvis/key.pem".into()
            })
        );
        assert!(c.behind_proxy);
        for (value, want) in [
            ("1", true),
            ("on", true),
            ("YES", true),
            ("0", false),
            ("off", false),
        ] {
            let vars: &'static [(&'static str, &'static str)] =
                Box::leak(vec![("JARVIS_WEB__BEHIND_PROXY", value)].into_boxed_slice());
            assert_eq!(lookup(vars).unwrap().behind_proxy, want, "{value}");
        }
        let e = lookup(&[("JARVIS_WEB__BEHIND_PROXY", "maybe")]).unwrap_err();
        assert!(e.contains("JARVIS_WEB__BEHIND_PROXY"), "{e}");
        let e = lookup(&[("JARVIS_WEB__TLS_CERT", "/c.pem")]).unwrap_err();
        assert!(
            e.contains("JARVIS_WEB__TLS_KEY"),
            "one file without the other: {e}"
        );
        let e = lookup(&[("JARVIS_WEB__TLS_KEY", "/k.pem")]).unwrap_err();
        assert!(e.contains("JARVIS_WEB__TLS_CERT"), "{e}");
    }
}
