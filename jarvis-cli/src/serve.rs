//! `jarvis`: start the server on the chosen session and open the HUD.
//!
//! When a server already runs for this home, `jarvis` does not start a
//! second one: it prints (and opens) the running server's HUD URL for the
//! chosen session.

use anyhow::{Context, bail};
use clap::Args;
use jarvis_sdk::agent::{SessionId, SessionMeta};
use jarvis_sdk::app::AppAssembly;
use jarvis_server::client::Client;
use jarvis_server::{DEMO_HELP, Server, ServerConfig, ServerState, check_bind};
use std::path::PathBuf;
use std::process::ExitCode;

use crate::Target;
use crate::home;

/// Options of `jarvis` without a subcommand.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    target: Target,
    /// The address to listen on (default `JARVIS_WEB__HOST` or 127.0.0.1).
    #[arg(long)]
    host: Option<String>,
    /// The port (default `JARVIS_WEB__PORT` or 8765; 0 picks a free one).
    #[arg(long)]
    port: Option<u16>,
    /// Print the HUD URL without opening a browser.
    #[arg(long)]
    no_open: bool,
    /// Serve HTTPS with this PEM certificate chain (default
    /// `JARVIS_WEB__TLS_CERT`); needs `--tls-key`.
    #[arg(long, value_name = "PATH", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of `--tls-cert` (default `JARVIS_WEB__TLS_KEY`).
    #[arg(long, value_name = "PATH", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// A reverse proxy in front terminates TLS (default
    /// `JARVIS_WEB__BEHIND_PROXY`): it must pass `Host` (or
    /// `X-Forwarded-Host`) and `X-Forwarded-Proto`.
    #[arg(long)]
    behind_proxy: bool,
}

/// Runs the server until Ctrl-C or SIGTERM.
pub(crate) async fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let mut app_config = crate::home::config_from_env()?;
    let mut server_config = ServerConfig::from_env().map_err(anyhow::Error::msg)?;
    if let Some(host) = args.host.clone() {
        server_config.host = host;
    }
    if let Some(port) = args.port {
        server_config.port = port;
    }
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        server_config = server_config.with_tls(cert, key);
    }
    if args.behind_proxy {
        server_config = server_config.with_behind_proxy(true);
    }
    // One token for both checks: the server's and the security pipeline's.
    app_config.web_token = server_config.token.clone();

    if let Some(client) = home::running_server(&app_config).await {
        let url = running_url(&client, &args.target).await?;
        println!("A Jarvis server already runs for this home. HUD: {url}");
        open(&args, &url, server_config.token.is_some());
        return Ok(ExitCode::SUCCESS);
    }

    let address = server_config.bind_address();
    let listener = tokio::net::TcpListener::bind(&address)
        .await
        .with_context(|| format!("cannot listen on {address} (is something else using it? try --port)"))?;
    check_bind(listener.local_addr()?, &server_config)?;
    let app = home::assemble(app_config).await?;
    let session = open_session(&app, &args.target).await?;
    let demo = app.is_demo();
    let notice = app.notice().map(str::to_owned);
    let token = server_config.token.clone();
    // The signal handlers go in before the server is announced (its file
    // written, then its URL printed): whoever finds it may stop it at once.
    let shutdown = shutdown_signal();
    // Announced (server file written) before the URL is printed, so a
    // client started on seeing the URL finds it.
    let server = Server::new(listener, ServerState::new(app, server_config))?;

    let url = format!("{}/?session={}", server.url(), session.id);
    println!(
        "J.A.R.V.I.S. HUD: {url}  (session {} of agent {})",
        session.id, session.agent_id
    );
    if token.is_some() {
        println!("This server requires JARVIS_WEB__TOKEN: open the URL with &token=<the token> added, once.");
    }
    if demo {
        tracing::warn!("{DEMO_HELP}");
        println!("{DEMO_HELP}");
    } else if let Some(notice) = notice {
        tracing::info!("model: {notice}");
    }
    open(&args, &url, token.is_some());
    println!("Press Ctrl-C to stop.");
    server.run(shutdown).await?;
    Ok(ExitCode::SUCCESS)
}

/// The session the HUD opens on.
async fn open_session(app: &AppAssembly, target: &Target) -> anyhow::Result<SessionMeta> {
    if let Some(id) = &target.session {
        let id = SessionId::new(id.as_str())?;
        return match app.session_entries(&id).await {
            Ok((meta, _)) => Ok(meta),
            Err(e) if e.is_not_found() => bail!("there is no session {id} (`jarvis sessions` lists them)"),
            Err(e) => Err(e.into()),
        };
    }
    let agent = target.agent.as_deref().unwrap_or(jarvis_sdk::app::MAIN_AGENT);
    if !app.registry().contains(agent) {
        let agents: Vec<&str> = app.registry().ids().collect();
        bail!("there is no agent {agent:?}; the team is {}", agents.join(", "));
    }
    if target.new {
        return Ok(app.create_session(Some(agent)).await?);
    }
    Ok(app.default_session(agent).await?)
}

/// The HUD URL of the running server for `target`.
async fn running_url(client: &Client, target: &Target) -> anyhow::Result<String> {
    let base = client.base_url().trim_end_matches('/');
    if let Some(id) = &target.session {
        if client.session(id).await?.is_none() {
            bail!("there is no session {id} (`jarvis sessions` lists them)");
        }
        return Ok(format!("{base}/?session={id}"));
    }
    let agent = target.agent.as_deref().unwrap_or(jarvis_sdk::app::MAIN_AGENT);
    if !client.agents().await?.iter().any(|a| a.id == agent) {
        bail!("there is no agent {agent:?} in the running server's team");
    }
    if target.new {
        // The HUD's connection creates a session the server does not know.
        let id = jarvis_sdk::common::IdSource::next_id(&jarvis_sdk::common::UniqueIds::new(), "s-");
        return Ok(format!("{base}/?session={id}&agent={agent}"));
    }
    Ok(format!("{base}/?session=default-{agent}&agent={agent}"))
}

/// Opens `url` in a browser where one can be started; never fails. The
/// token never goes on a command line (other users could read it there):
/// with one configured, nothing is opened and the printed URL says how.
fn open(args: &ServeArgs, url: &str, token_required: bool) {
    if args.no_open || token_required {
        return;
    }
    if cfg!(target_os = "linux")
        && std::env::var_os("DISPLAY").is_none()
        && std::env::var_os("WAYLAND_DISPLAY").is_none()
    {
        return; // no desktop: xdg-open would start a text browser in this terminal
    }
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let spawned = std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if let Ok(mut child) = spawned {
        std::thread::spawn(move || child.wait());
    }
}

/// A future that resolves on Ctrl-C or SIGTERM.
///
/// On Unix the handlers are installed here, when it is called, not when
/// the future is first polled: a server announces itself before it polls
/// its shutdown future, and a SIGTERM sent on seeing it must already find
/// the handler (without one the default disposition kills the process); a
/// signal that arrives early ends the server at the first poll. Elsewhere
/// Ctrl-C is watched from the first poll. Must be called inside the
/// runtime.
pub(crate) fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let streams = {
        use tokio::signal::unix::{SignalKind, signal};
        (
            signal(SignalKind::interrupt()).ok(),
            signal(SignalKind::terminate()).ok(),
        )
    };
    async move {
        #[cfg(unix)]
        match streams {
            (Some(mut int), Some(mut term)) => {
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
            }
            (Some(mut int), None) => {
                int.recv().await;
            }
            (None, Some(mut term)) => {
                term.recv().await;
            }
            (None, None) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutting down");
    }
}
