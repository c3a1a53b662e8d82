//! Integration tests of the server: the HTTP API through `router().oneshot`
//! and the WebSocket against a server on 127.0.0.1:0.

mod http;
mod support;
mod ws;
