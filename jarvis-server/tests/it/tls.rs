//! HTTPS with a self-signed certificate generated in the test: the server
//! answers over TLS only, its token cookie is `Secure`, and a client of the
//! home trusts exactly the certificate the server file names and runs a
//! turn over `wss://`.

use jarvis_server::client::{Client, ClientError, Incoming};
use jarvis_server::protocol::{ClientMessage, ServerMessage};
use jarvis_server::{ServeError, ServerConfig, ServerFile};
use sha2::{Digest, Sha256};
use std::path::PathBuf;

use crate::support::{Server, TempHome, WAIT, app_with};

/// A self-signed certificate for 127.0.0.1 and localhost, written as PEM
/// files into `dir`: (certificate path, key path, certificate PEM, DER).
fn self_signed(dir: &std::path::Path) -> (PathBuf, PathBuf, String, Vec<u8>) {
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    let cert_path = dir.join("cert.pem");
    let key_path = dir.join("key.pem");
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, signing_key.serialize_pem()).unwrap();
    (cert_path, key_path, cert.pem(), cert.der().to_vec())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_server_answers_over_https_sets_a_secure_cookie_and_its_home_reaches_it() {
    let home = TempHome::new();
    let files = tempfile::tempdir().unwrap();
    let (cert, key, pem, der) = self_signed(files.path());
    let app = app_with(&home, "fallback: { text: \"over tls\" }", Some("s3cret")).await;
    let config = ServerConfig::loopback(0)
        .with_token("s3cret")
        .with_tls(&cert, &key);
    let server = Server::start(app, config).await;
    let base = format!("https://{}", server.addr);

    // A browser-like client that trusts the certificate.
    let https = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(pem.as_bytes()).unwrap())
        .redirect(reqwest::redirect::Policy::none())
        .timeout(WAIT)
        .build()
        .unwrap();
    let health: serde_json::Value = https
        .get(format!("{base}/healthz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["status"], "ok");
    let page = https
        .get(format!("{base}/?session=s-1&token=s3cret"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), reqwest::StatusCode::SEE_OTHER);
    assert_eq!(page.headers()["location"], "/?session=s-1");
    let cookie = page.headers()["set-cookie"].to_str().unwrap();
    assert_eq!(
        cookie,
        "jarvis_token=s3cret; HttpOnly; SameSite=Strict; Path=/; Secure"
    );

    // Plain HTTP on the TLS port gets no answer.
    let plain = reqwest::Client::builder().timeout(WAIT).build().unwrap();
    assert!(
        plain
            .get(format!("http://{}/healthz", server.addr))
            .send()
            .await
            .is_err()
    );

    // The server file names the URL and the certificate; a client of the
    // home trusts exactly that certificate.
    let file = ServerFile::read(&home.0).unwrap();
    assert_eq!(file.url, base);
    assert_eq!(
        file.cert_sha256.as_deref(),
        Some(hex(&Sha256::digest(&der)).as_str())
    );
    let client = Client::discover(&home.0, Some("s3cret".into()))
        .await
        .expect("the home's client reaches its TLS server");
    assert_eq!(client.agents().await.unwrap()[0].id, "main");
    let mut connection = client.connect("s-tls", None).await.unwrap();
    connection
        .send(ClientMessage::Prompt { text: "hello".into() })
        .await
        .unwrap();
    let answer = loop {
        match tokio::time::timeout(WAIT, connection.recv()).await.unwrap() {
            Some(Incoming::Message(ServerMessage::Event(event))) if event.kind() == "agent_end" => {
                break serde_json::to_value(&event).unwrap();
            }
            Some(Incoming::Message(_)) => {}
            other => panic!("the connection ended: {other:?}"),
        }
    };
    assert_eq!(answer["final_message"]["content"], "over tls");

    // Without the pin, a self-signed certificate is trusted by nobody; with
    // another pin neither.
    let unpinned = Client::new(&base, Some("s3cret".into())).unwrap();
    assert!(matches!(unpinned.health().await, Err(ClientError::Transport(_))));
    let wrong = Client::with_certificate(&base, None, &"ab".repeat(32)).unwrap();
    assert!(matches!(wrong.health().await, Err(ClientError::Transport(_))));
    assert!(wrong.connect("s-tls", None).await.is_err());
    server.stop().await.unwrap();
}

#[tokio::test]
async fn unusable_certificates_stop_the_server_before_it_announces_itself() {
    let home = TempHome::new();
    let files = tempfile::tempdir().unwrap();
    let (cert, key, _, _) = self_signed(files.path());
    let other = tempfile::tempdir().unwrap();
    let (_, other_key, _, _) = self_signed(other.path());
    let app = app_with(&home, "fallback: { text: x }", Some("t")).await;
    for (cert, key, needle) in [
        (files.path().join("missing.pem"), key.clone(), "missing.pem"),
        (key.clone(), key.clone(), "no CERTIFICATE"),
        (cert.clone(), cert.clone(), "private key"),
        (cert.clone(), other_key.clone(), "cannot be used"),
    ] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let config = ServerConfig::loopback(0).with_token("t").with_tls(&cert, &key);
        let state = jarvis_server::ServerState::new(app.clone(), config);
        let error = jarvis_server::serve(listener, state, std::future::pending())
            .await
            .unwrap_err();
        assert!(matches!(error, ServeError::Tls(_)), "{error}");
        assert!(error.to_string().contains(needle), "{needle}: {error}");
        assert!(ServerFile::read(&home.0).is_none());
    }
}
