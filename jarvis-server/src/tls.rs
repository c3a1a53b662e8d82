//! TLS with rustls (the ring provider): the server's configuration from PEM
//! files, the listener that completes handshakes without holding up the
//! accept loop, and the clients' configurations: one that trusts exactly
//! one certificate, named by the SHA-256 digest of its DER bytes (the
//! server file names the certificate of the server running for a home, so
//! `jarvis chat` reaches it whatever the certificate's names or issuer), and
//! one that trusts the web's public roots.

use axum::serve::Listener;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use sha2::{Digest, Sha256};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::config::TlsFiles;

/// How long a client may take to complete its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshakes in progress at most; further connections wait in the
/// kernel's listen queue.
const MAX_HANDSHAKES: usize = 1024;

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("{what} {path}: {reason}")]
    File {
        /// Which file: "certificate" or "private key".
        what: &'static str,
        /// Its path.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// rustls refused the certificate and key (for example a key that
    /// does not belong to the certificate).
    #[error("the certificate and key cannot be used: {0}")]
    Config(String),
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The SHA-256 digest of a certificate's DER bytes, in lower-case hex.
pub(crate) fn certificate_sha256(certificate: &[u8]) -> String {
    Sha256::digest(certificate)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A server's TLS set-up: the acceptor, and the digest of its certificate
/// for the server file.
pub(crate) struct ServerTls {
    pub(crate) acceptor: TlsAcceptor,
    pub(crate) certificate_sha256: String,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("certificate_sha256", &self.certificate_sha256)
            .finish_non_exhaustive()
    }
}

/// Reads the PEM certificate chain (leaf first) and key of `files`.
pub(crate) fn server_tls(files: &TlsFiles) -> Result<ServerTls, TlsError> {
    let file_error = |what: &'static str, path: &std::path::Path, reason: String| TlsError::File {
        what,
        path: path.display().to_string(),
        reason,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|certs| certs.collect::<Result<_, _>>())
        .map_err(|e| file_error("certificate", &files.cert, e.to_string()))?;
    let Some(leaf) = chain.first() else {
        return Err(file_error(
            "certificate",
            &files.cert,
            "no CERTIFICATE block in the file".into(),
        ));
    };
    let certificate_sha256 = certificate_sha256(leaf.as_ref());
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| file_error("private key", &files.key, e.to_string()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    // WebSockets ride on HTTP/1.1 upgrades.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(ServerTls {
        acceptor: TlsAcceptor::from(Arc::new(config)),
        certificate_sha256,
    })
}

/// A TCP listener whose connections are handed out once their TLS
/// handshake completed. Handshakes run on tasks of their own, so a client
/// that stalls in one holds up nobody; one that takes longer than 10 s is
/// dropped.
pub(crate) struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    handshakes: JoinSet<Option<(TlsStream<TcpStream>, SocketAddr)>>,
}

impl std::fmt::Debug for TlsListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsListener")
            .field("local_addr", &self.tcp.local_addr().ok())
            .field("handshakes", &self.handshakes.len())
            .finish()
    }
}

impl TlsListener {
    pub(crate) fn new(tcp: TcpListener, acceptor: TlsAcceptor) -> Self {
        Self {
            tcp,
            acceptor,
            handshakes: JoinSet::new(),
        }
    }

    fn start_handshake(&mut self, tcp: TcpStream, addr: SocketAddr) {
        // Frames are small and latency matters: no Nagle delay.
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%error, "TCP_NODELAY could not be set");
        }
        let acceptor = self.acceptor.clone();
        self.handshakes.spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => Some((stream, addr)),
                Ok(Err(error)) => {
                    tracing::debug!(%addr, %error, "a TLS handshake failed");
                    None
                }
                Err(_) => {
                    tracing::debug!(%addr, "a TLS handshake timed out");
                    None
                }
            }
        });
    }
}

impl Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let room = self.handshakes.len() < MAX_HANDSHAKES;
            tokio::select! {
                accepted = self.tcp.accept(), if room => match accepted {
                    Ok((tcp, addr)) => self.start_handshake(tcp, addr),
                    Err(error) => accept_failed(error).await,
                },
                Some(done) = self.handshakes.join_next() => {
                    if let Ok(Some(connection)) = done {
                        return connection;
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// What axum's own listener does on an accept error: a connection that
/// failed before it was accepted is nobody's concern; anything else (out
/// of file descriptors) is logged and the loop pauses a second, so it does
/// not spin.
async fn accept_failed(error: io::Error) {
    if matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(%error, "accepting a connection failed");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// A client configuration: trusting exactly the certificate whose DER
/// bytes have SHA-256 digest `pinned` (hex), or the web's public roots.
pub(crate) fn client_config(pinned: Option<&str>) -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = provider();
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let config = match pinned {
        Some(pinned) => {
            let sha256 = pinned.trim().to_ascii_lowercase();
            if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!("not a SHA-256 digest in hex: {pinned:?}"));
            }
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(PinnedCertificate {
                    sha256,
                    algorithms: provider.signature_verification_algorithms,
                }))
                .with_no_client_auth()
        }
        None => builder
            .with_root_certificates(rustls::RootCertStore::from_iter(
                webpki_roots::TLS_SERVER_ROOTS.iter().cloned(),
            ))
            .with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// Trusts one certificate, whatever its names, issuer and dates: the one
/// the server file of this home names. The handshake's signatures are
/// still checked against it, so only the holder of its key passes.
#[derive(Debug)]
struct PinnedCertificate {
    sha256: String,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PinnedCertificate {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if certificate_sha256(end_entity.as_ref()) == self.sha256 {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_or_empty_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let files = TlsFiles {
            cert: dir.path().join("cert.pem"),
            key: dir.path().join("key.pem"),
        };
        let error = server_tls(&files).unwrap_err().to_string();
        assert!(
            error.contains("certificate") && error.contains("cert.pem"),
            "{error}"
        );
        std::fs::write(&files.cert, "no pem here\n").unwrap();
        let error = server_tls(&files).unwrap_err().to_string();
        assert!(error.contains("no CERTIFICATE block"), "{error}");
    }

    #[test]
    fn a_pin_must_be_a_sha256_digest() {
        assert!(client_config(Some("abc")).is_err());
        assert!(client_config(Some(&"zz".repeat(32))).is_err());
        assert!(client_config(Some(&"AB".repeat(32))).is_ok());
        assert!(client_config(None).is_ok());
        assert_eq!(
            certificate_sha256(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
