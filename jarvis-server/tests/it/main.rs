//! Integration tests of the server: the HTTP API through `router().oneshot`,
//! the WebSocket against a server on 127.0.0.1:0, and the HUD in a real
//! headless Chromium.

mod browser;
mod http;
mod hud;
mod support;
mod ws;
