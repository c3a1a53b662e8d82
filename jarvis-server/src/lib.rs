//! # jarvis-server
//!
//! The Jarvis reference web server. It receives the SDK's one assembly
//! result, [`AppAssembly`](jarvis_sdk::app::AppAssembly), and only draws: every
//! session, agent and turn comes from the assembly (R-ASM-7/8). It is the
//! only crate that knows HTTP and WebSocket framing.
//!
//! - [`router`] builds the axum `Router` over a [`ServerState`];
//! - [`serve`] runs it on a listener until a shutdown signal and shuts down
//!   gracefully (running turns aborted and recorded, sockets closed);
//! - [`protocol`] holds the wire types; [`client`] talks to a running
//!   server (the `jarvis chat` command uses it).
//!
//! | route | answer |
//! |---|---|
//! | `GET /` | the HUD page (embedded in the binary) |
//! | `GET /assets/{path}` | the HUD's style sheet and JavaScript modules (embedded) |
//! | `GET /healthz` | `{"status": "ok", "pid": …}` |
//! | `GET /api/agents` | the team, `main` first: `[{id, name, description, quote, palette, tools}]` |
//! | `GET /api/sessions` | every session, newest first |
//! | `POST /api/sessions {"agent"}` | 201 and the new session; no agent = `main`; unknown → 400 |
//! | `GET /api/sessions/{id}` | `{"session", "entries"}` |
//! | `POST /api/sessions/{id}/fork` | 201 and the fork (same agent) |
//! | `GET /api/agenda` | `{"items": […]}`: every agent's schedules and open promises, each `{kind, id, agent_id, agent_name, color, text, when?, detail?, session_id?}` |
//! | `GET /api/mcp` | the MCP servers: `[{name, owner, transport, state, pid, error, restarts, tools: [{name, remote, description, read_only}]}]` |
//! | `GET /api/system` | `{"embedder": {provider, model?, name, requested, reembedding, reembedded} \| null}`: the embedder of recall |
//! | `GET /api/usage?by=agent\|session\|day` | `{"by", "rows": [{key, turns, input_tokens, output_tokens, cached_input_tokens, cost_usd}]}`: tokens and cost (`null` when unknown) by agent (the default), session or day in the person's zone; any other `by` → 400 |
//! | `GET /ws?session_id=…&agent=…` | the WebSocket (see the `ws` module docs in the source) |
//! | `POST`, `GET`, `DELETE /mcp` | the team as an MCP server (streamable HTTP): one tool per agent, `ask_<agent_id> {request}` |
//!
//! Errors are `{"error": {"code", "message"}}` and never carry internals.
//! `/ws`, `/api/*`, `/mcp` and every state-changing request from a page of
//! another origin get 403 `forbidden_origin`; with a token configured,
//! `/api/*`, `/mcp` and `/ws` need it as `Authorization: Bearer …` or the
//! `jarvis_token` cookie.
//! [`ServerConfig::tls`] makes the server speak HTTPS; [`check_bind`] says
//! who may listen where.
//!
//! ```no_run
//! use jarvis_sdk::app::{AppConfig, build_app};
//! use jarvis_server::{ServerConfig, ServerState, serve};
//!
//! # async fn run() -> anyhow::Result<()> {
//! let app = build_app(AppConfig::from_env()?).await?;
//! let config = ServerConfig::from_env().map_err(anyhow::Error::msg)?;
//! let listener = tokio::net::TcpListener::bind(config.bind_address()).await?;
//! let shutdown = async { tokio::signal::ctrl_c().await.ok(); };
//! serve(listener, ServerState::new(app, config), shutdown).await?;
//! # Ok(()) }
//! ```

mod auth;
pub mod client;
mod cluster;
mod config;
mod error;
mod fanout;
mod http;
mod hud;
mod mcp;
pub mod protocol;
mod serve;
mod state;
mod tls;
mod ws;

pub use config::{DEFAULT_HOST, DEFAULT_PORT, Limits, ServerConfig, TlsFiles};
pub use hud::DEMO_HELP;
pub use serve::{SERVER_FILE, ServeError, Server, ServerFile, check_bind, local_url, serve};
pub use state::ServerState;
pub use tls::TlsError;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};

/// The server's routes over `state` (see the [crate docs](crate)).
pub fn router(state: ServerState) -> Router {
    let limit = state.config().limits.max_body_bytes;
    Router::new()
        .route("/", get(http::index))
        .route("/assets/{*path}", get(http::asset))
        .route("/healthz", get(http::healthz))
        .route("/api/agents", get(http::agents))
        .route(
            "/api/sessions",
            get(http::list_sessions).post(http::create_session),
        )
        .route("/api/sessions/{id}", get(http::get_session))
        .route("/api/sessions/{id}/fork", post(http::fork_session))
        .route("/api/sessions/{id}/record", post(http::record_session))
        .route("/api/agenda", get(http::agenda))
        .route("/api/mcp", get(http::mcp_servers))
        .route("/api/system", get(http::system))
        .route("/api/usage", get(http::usage))
        .route("/ws", get(ws::upgrade))
        .route_service("/mcp", state.inner.mcp_http.0.clone())
        .fallback(http::not_found)
        .method_not_allowed_fallback(http::method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(state.clone(), auth::guard))
        .with_state(state)
}
