//! Tools from MCP servers: a server written here (fast, always run) and
//! real servers nobody here wrote (`mcp-server-time` from PyPI and
//! `@modelcontextprotocol/server-everything` from npm, installed by
//! `.ci/run` into `target/mcp-cache/`).

mod app;
mod fast;
mod real;
mod test_server;
