//! What the load examples share (`ws_load`, `cluster_load`): the faux
//! script, one client's loop over its turns, the server child process and
//! its peak memory.

use futures::{SinkExt, StreamExt};
use jarvis_sdk::app::{AppConfig, build_app};
use jarvis_server::{Limits, ServerConfig, ServerState, serve};
use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Barrier;
use tokio_tungstenite::tungstenite::Message;

pub(crate) const SCRIPT: &str = r#"fallback: { text: "부하 시험 중입니다. This is a load test answer of a reasonable length.", chunks: 8 }"#;
pub(crate) const TURN_TIMEOUT: Duration = Duration::from_secs(60);

/// One run's settings.
#[derive(Clone, Copy)]
pub(crate) struct Load {
    pub(crate) sessions: usize,
    pub(crate) turns: usize,
    /// Time between a session's prompts; `None`: back to back.
    pub(crate) interval: Option<Duration>,
}

/// What one client saw.
#[derive(Default)]
pub(crate) struct ClientResult {
    pub(crate) latencies: Vec<Duration>,
    pub(crate) events: usize,
    pub(crate) errors: usize,
    /// Why the client stopped early, if it did.
    pub(crate) stopped: Option<String>,
}

/// One client: connect, wait for everyone, run the turns.
pub(crate) async fn client(
    url: String,
    load: Load,
    offset: Option<Duration>,
    ready: Arc<Barrier>,
) -> ClientResult {
    let mut result = ClientResult::default();
    let connected = tokio_tungstenite::connect_async_with_config(url.as_str(), None, true).await;
    let mut socket = match connected {
        Ok((socket, _)) => Some(socket),
        Err(_) => None,
    };
    // The first frame of an open connection is `agent_activity`.
    if let Some(s) = socket.as_mut()
        && !matches!(s.next().await, Some(Ok(Message::Text(_))))
    {
        socket = None;
    }
    ready.wait().await;
    // A client that cannot go on stops; its missing turns count as errors.
    let Some(mut socket) = socket else {
        result.stopped = Some("could not connect".into());
        return result;
    };
    let start = tokio::time::Instant::now() + offset.unwrap_or_default();
    for n in 0..load.turns {
        if let Some(every) = load.interval {
            // Pacing, not synchronisation: the schedule of this session.
            tokio::time::sleep_until(start + every * n as u32).await;
        }
        let prompt = format!(r#"{{"type":"prompt","text":"load turn {n}"}}"#);
        let sent = Instant::now();
        if socket.send(Message::text(prompt)).await.is_err() {
            result.stopped = Some("send failed".into());
            return result;
        }
        let ended = tokio::time::timeout(TURN_TIMEOUT, async {
            while let Some(frame) = socket.next().await {
                let text = match frame {
                    Ok(Message::Text(text)) => text,
                    Ok(Message::Close(close)) => {
                        result.stopped = Some(format!("closed: {close:?}"));
                        return false;
                    }
                    Ok(_) => continue,
                    Err(e) => {
                        result.stopped = Some(format!("error: {e}"));
                        return false;
                    }
                };
                result.events += 1;
                let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) else {
                    result.errors += 1;
                    continue;
                };
                match value["type"].as_str() {
                    Some("agent_end") => {
                        if value["final_message"]["stop_reason"] != "stop" {
                            result.errors += 1;
                        }
                        return true;
                    }
                    Some("error" | "agent_error") => result.errors += 1,
                    _ => {}
                }
            }
            false
        })
        .await;
        match ended {
            Ok(true) => result.latencies.push(sent.elapsed()),
            Ok(false) => return result,
            Err(_) => {
                result.stopped = Some("turn timed out".into());
                return result;
            }
        }
    }
    let _ = socket.close(None).await;
    result
}

/// The peak resident set of process `pid`, in KiB (Linux `VmHWM`).
pub(crate) fn peak_rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The value of `--flag N` in `args` (at least 1), or `default` when the
/// flag is absent.
pub(crate) fn number_arg(args: &[String], flag: &str, default: usize) -> anyhow::Result<usize> {
    match args.iter().position(|a| a == flag) {
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .filter(|n| *n > 0)
            .ok_or_else(|| anyhow::anyhow!("{flag} takes a number of at least 1")),
        None => Ok(default),
    }
}

/// The server process: the app from the environment on 127.0.0.1:0, until
/// stdin closes.
pub(crate) fn serve_child() -> anyhow::Result<()> {
    // Errors go to stderr (`JARVIS_LOG=warn` for more, as the binary reads it):
    // under saturation every slow turn would warn.
    let filter = tracing_subscriber::EnvFilter::try_from_env("JARVIS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let app = build_app(AppConfig::from_env()?).await?;
        let config = ServerConfig::loopback(0).with_limits(Limits {
            shutdown_grace: Duration::from_secs(2),
            ..Limits::default()
        });
        let listener = tokio::net::TcpListener::bind(config.bind_address()).await?;
        println!("listening {}", listener.local_addr()?);
        let (closed, stop) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            let mut stdin = std::io::stdin();
            while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
            let _ = closed.send(());
        });
        let stop = async {
            let _ = stop.await;
        };
        serve(listener, ServerState::new(app, config), stop).await?;
        anyhow::Ok(())
    })
}
