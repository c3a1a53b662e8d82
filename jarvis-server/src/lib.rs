//! The Jarvis reference web server: it receives the SDK's assembly result
//! and only draws. It will expose `router(state) -> Router` and
//! `serve(listener, state, shutdown)`, the HTTP API, the WebSocket and the
//! embedded HUD (DESIGN.md §5).
//!
//! The crate is part of the workspace from the start so its place in the
//! layering is fixed: it depends on `jarvis-sdk`, never the other way round.
//! Until the server is built, `jarvis ask` in `jarvis-cli` is the way to run
//! a turn.
