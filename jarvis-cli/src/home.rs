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
use jarvis_pack_housing::HousingPack;
use jarvis_sdk::app::{AppAssembly, AppConfig, AppError, build_app};
use jarvis_sdk::memory::ReembedPhase;
use jarvis_server::client::Client;
use std::time::Duration;

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

/// The environment's configuration with the packs the `jarvis` binary
/// ships: KAREN's housing pack.
pub(crate) fn config_from_env() -> anyhow::Result<AppConfig> {
    Ok(AppConfig::from_env()?.with_pack(std::sync::Arc::new(HousingPack::from_env())))
}

/// The home of the environment's configuration: remote when a server runs.
pub(crate) async fn open() -> anyhow::Result<Home> {
    let config = config_from_env()?;
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

/// How long a chat in this process waits for memories to be embedded
/// again before its first turn, at most.
const SETTLE_MEMORY: Duration = Duration::from_secs(60);

/// Before a chat in this process: lets re-embedding (after the embedder
/// changed) finish its first pass, or find the embedder not answering, so
/// a question asked right after a switch recalls what was told before it.
/// Says so when it takes more than a second; gives up after a minute (the
/// rest is embedded at a later start). A server never waits: it answers
/// from what is embedded meanwhile.
pub(crate) async fn settle_memory(app: &AppAssembly) {
    let Some(memory) = app.memory() else {
        return;
    };
    let mut updates = memory.reembedding_updates();
    let settled =
        |s: &jarvis_sdk::memory::ReembedStatus| matches!(s.phase, ReembedPhase::Done | ReembedPhase::Waiting);
    if tokio::time::timeout(Duration::from_secs(1), updates.wait_for(settled))
        .await
        .is_ok()
    {
        return;
    }
    eprintln!(
        "jarvis: embedding memories again with {}…",
        memory.embedder().name()
    );
    if tokio::time::timeout(SETTLE_MEMORY, updates.wait_for(settled))
        .await
        .is_err()
    {
        eprintln!("jarvis: not done yet; recall answers from the memories embedded so far");
    }
}
