//! Integration tests of the server: the HTTP API through `router().oneshot`,
//! the WebSocket against a server on 127.0.0.1:0 (and a fuzz run of it),
//! TLS, `/mcp` spoken as raw JSON-RPC over HTTP, and the HUD and the origin
//! rules in a real headless Chromium.

mod browser;
mod fuzz;
mod http;
mod hud;
mod mcp;
mod origin;
mod support;
mod tls;
mod wire;
mod ws;
