//! Notifications end to end: a proactive message recorded while no screen
//! shows its session goes once to a webhook served here (held by quiet
//! hours, retried after a failure, kept across a restart), and to an SMTP
//! server played here; a message a screen shows goes nowhere else.

use jarvis_pack_housing::{HousingPack, KAREN_DEFINITION};
use jarvis_sdk::agent::{Durability, ProactiveKind};
use jarvis_sdk::app::{AppAssembly, AppConfig, StoreBackend, build_app};
use jarvis_sdk::common::{ManualClock, Timestamp};
use jarvis_sdk::initiative::OutboxItem;
use jarvis_sdk::model::FauxProvider;
use jarvis_sdk::testing::RecordingAdapter;
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// A webhook on loopback: answers `500` to the first `failures` requests,
/// then `200`; every body it is sent reaches the channel.
async fn webhook(failures: usize) -> (String, mpsc::UnboundedReceiver<Value>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::unbounded_channel();
    let seen = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (tx, seen) = (tx.clone(), seen.clone());
            tokio::spawn(async move {
                let mut reader = BufReader::new(stream);
                let mut length = 0usize;
                let mut line = String::new();
                loop {
                    line.clear();
                    if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    if line == "\r\n" {
                        break;
                    }
                    if let Some((name, value)) = line.split_once(':')
                        && name.eq_ignore_ascii_case("content-length")
                    {
                        length = value.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).await.unwrap();
                let n = seen.fetch_add(1, Ordering::SeqCst);
                let status = if n < failures {
                    "500 Internal Server Error"
                } else {
                    "200 OK"
                };
                if n >= failures {
                    let _ = tx.send(serde_json::from_slice(&body).unwrap());
                }
                let reply = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                let _ = reader.get_mut().write_all(reply.as_bytes()).await;
            });
        }
    });
    (url, rx)
}

/// 2026-12-01T13:30:00Z: 22:30 in Seoul.
fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_083_200 + 13 * 3600 + 1800),
    ))
}

async fn app_at(home: &Path, clock: Arc<ManualClock>) -> AppAssembly {
    let faux = Arc::new(FauxProvider::from_yaml("fallback: { text: 네 }").unwrap());
    let mut config = AppConfig::embedded(home)
        .with_definition("karen", KAREN_DEFINITION)
        .with_provider(faux);
    config.store = StoreBackend::Jsonl;
    config.durability = Durability::Never;
    config.packs = vec![std::sync::Arc::new(HousingPack::in_memory())];
    config.memory.enabled = false;
    config.clock = clock;
    build_app(config).await.unwrap()
}

fn report(id: &str, at: Timestamp) -> OutboxItem {
    OutboxItem {
        message_id: id.into(),
        session_id: "default-karen".into(),
        agent_id: "karen".into(),
        kind: ProactiveKind::Proactive,
        text: format!("새 공고가 나왔어요 ({id})"),
        at,
        meta: Value::Null,
    }
}

fn now(clock: &ManualClock) -> Timestamp {
    Timestamp::from_system_time(jarvis_sdk::common::Clock::now(clock))
}

#[tokio::test]
async fn a_message_nobody_sees_goes_to_the_webhook_once_after_quiet_hours_and_across_a_restart() {
    let (url, mut bodies) = webhook(1).await;
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("notifications.yaml"),
        format!("channels:\n  - kind: webhook\n    url: {url}\n    quiet_hours: \"22:00-07:00\"\n  - kind: webhook\n    url: {url}\n    agents: [main]\n"),
    )
    .unwrap();
    let clock = clock();
    {
        let app = app_at(home.path(), clock.clone()).await;
        app.proactive().enqueue(report("r-1", now(&clock))).await.unwrap();
        app.proactive().tick().await;
        // KAREN's message: only the first channel takes it, and it is 22:30.
        assert_eq!(app.notifier().queued(), 1);
        let held = app.notifier().tick().await;
        assert_eq!((held.held, held.sent.len()), (1, 0));
        assert!(bodies.try_recv().is_err());
    }
    // A restart keeps the queued notification; at 07:30 the quiet hours are over.
    clock.advance(Duration::from_secs(9 * 3600));
    let app = app_at(home.path(), clock.clone()).await;
    assert_eq!(app.notifier().queued(), 1);
    let failed = app.notifier().tick().await;
    assert_eq!(
        (failed.failed, failed.sent.len()),
        (1, 0),
        "the webhook answers 500 first"
    );
    let waiting = app.notifier().tick().await;
    assert_eq!(waiting.waiting, 1, "tried again only after the backoff");
    clock.advance(Duration::from_secs(31));
    let sent = app.notifier().tick().await;
    assert_eq!(sent.sent, [("r-1".to_owned(), 1)]);
    let body = bodies.recv().await.unwrap();
    assert_eq!(body["message"], "새 공고가 나왔어요 (r-1)");
    assert_eq!(body["agent_id"], "karen");
    assert_eq!(body["kind"], "proactive");
    assert_eq!(body["session_id"], "default-karen");
    assert_eq!(body["message_id"], "r-1");
    assert!(body["title"].as_str().unwrap().contains("K.A.R.E.N."), "{body}");
    assert!(body["at"].as_str().unwrap().ends_with('Z'), "{body}");
    // Nothing more, however often it ticks or restarts.
    assert!(app.notifier().tick().await.sent.is_empty());
    app.proactive().tick().await;
    drop(app);
    let app = app_at(home.path(), clock.clone()).await;
    app.proactive().tick().await;
    assert!(app.notifier().tick().await.sent.is_empty());
    assert!(bodies.try_recv().is_err());

    // A message a screen shows is not sent anywhere else.
    let session = app
        .session(&jarvis_sdk::agent::SessionId::new("default-karen").unwrap())
        .await
        .unwrap();
    let screen = Arc::new(RecordingAdapter::new());
    let _attached = session.attach(screen.clone());
    clock.advance(Duration::from_secs(3600));
    app.proactive().enqueue(report("r-2", now(&clock))).await.unwrap();
    let shown = app.proactive().tick().await;
    assert_eq!(shown.sent.len(), 1, "{shown:?}");
    assert_eq!(app.notifier().queued(), 0);
}

/// An SMTP server on loopback that takes one message and hands over what
/// the client sent after `DATA`.
async fn smtp_server() -> (u16, tokio::sync::oneshot::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let mut reader = BufReader::new(stream);
        reader.get_mut().write_all(b"220 test ESMTP\r\n").await.unwrap();
        let mut line = String::new();
        let mut data = String::new();
        let mut in_data = false;
        loop {
            line.clear();
            if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                break;
            }
            if in_data {
                if line == ".\r\n" {
                    in_data = false;
                    reader.get_mut().write_all(b"250 queued\r\n").await.unwrap();
                } else {
                    data.push_str(&line);
                }
                continue;
            }
            let verb = line.get(..4).unwrap_or("").to_ascii_uppercase();
            let reply: &[u8] = match verb.as_str() {
                "EHLO" => b"250-test\r\n250 8BITMIME\r\n",
                "DATA" => {
                    in_data = true;
                    b"354 go on\r\n"
                }
                "QUIT" => {
                    reader.get_mut().write_all(b"221 bye\r\n").await.unwrap();
                    break;
                }
                _ => b"250 ok\r\n",
            };
            reader.get_mut().write_all(reply).await.unwrap();
        }
        let _ = tx.send(data);
    });
    (port, rx)
}

#[tokio::test]
async fn an_email_channel_sends_the_message_over_smtp() {
    let (port, received) = smtp_server().await;
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("notifications.yaml"),
        format!(
            "channels:\n  - kind: email\n    smtp: {{ host: 127.0.0.1, port: {port}, starttls: false }}\n    from: jarvis@example.test\n    to: me@example.test\n"
        ),
    )
    .unwrap();
    let clock = clock();
    let app = app_at(home.path(), clock.clone()).await;
    let mut item = report("r-9", now(&clock));
    item.text = "A new notice is out (r-9)".into();
    app.proactive().enqueue(item).await.unwrap();
    app.proactive().tick().await;
    let sent = app.notifier().tick().await;
    assert_eq!(sent.sent, [("r-9".to_owned(), 1)], "{sent:?}");
    let data = received.await.unwrap();
    assert!(data.contains("To: me@example.test"), "{data}");
    assert!(data.contains("From: jarvis@example.test"), "{data}");
    assert!(data.contains("Subject: K.A.R.E.N. - Jarvis"), "{data}");
    assert!(data.contains("A new notice is out (r-9)"), "{data}");
}

#[tokio::test]
async fn a_malformed_notifications_file_stops_the_start_naming_it() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("notifications.yaml"),
        "channels:\n  - kind: webhook\n",
    )
    .unwrap();
    let faux = Arc::new(FauxProvider::from_yaml("fallback: { text: 네 }").unwrap());
    let error = build_app(AppConfig::embedded(home.path()).with_provider(faux))
        .await
        .expect_err("the start fails")
        .to_string();
    assert!(
        error.contains("notifications.yaml") && error.contains("url"),
        "{error}"
    );
}
