//! Reaching the home's sessions: through the server running for this
//! `JARVIS_HOME` when there is one, else in this process.
//!
//! A running server names itself in `$JARVIS_HOME/server.json` (URL and
//! process id) and holds the home lock. The CLI reads the file and asks the
//! URL's `/healthz`; when the same process answers, every command goes
//! through the server's HTTP API and WebSocket (with `JARVIS_WEB__TOKEN`
//! when set). Otherwise the CLI assembles the app itself, which takes the
//! home lock; if that fails because another process holds it, the error
//! names that process.

use anyhow::Context;
use jarvis_sdk::{AppAssembly, AppConfig, AppError, build_app};
use jarvis_server::client::Client;

/// Where the sessions are reached.
pub(crate) enum Home {
    /// Through the running server.
    Remote(Client),
    /// In this process.
    Local(AppAssembly),
}

/// The running server of `config`'s home, if one answers.
pub(crate) async fn running_server(config: &AppConfig) -> Option<Client> {
    Client::discover(&config.home, config.web_token.clone()).await
}

/// Assembles the app, explaining a home held by another process.
pub(crate) async fn assemble(config: AppConfig) -> anyhow::Result<AppAssembly> {
    let home = config.home.clone();
    match build_app(config).await {
        Ok(app) => Ok(app),
        Err(error @ AppError::Home(_)) => Err(anyhow::anyhow!(
            "{error}\n(no Jarvis server answered for {}: if one is starting, try again)",
            home.display()
        )),
        Err(error) => Err(error).context("assembling the app"),
    }
}

/// The home of the environment's configuration: remote when a server runs.
pub(crate) async fn open() -> anyhow::Result<Home> {
    let config = AppConfig::from_env()?;
    if let Some(client) = running_server(&config).await {
        eprintln!("jarvis: talking to the server at {}", client.base_url());
        return Ok(Home::Remote(client));
    }
    let app = assemble(config).await?;
    if let Some(notice) = app.notice() {
        eprintln!("jarvis: {notice}");
    }
    Ok(Home::Local(app))
}
