//! # jarvis-sdk
//!
//! Build teams of personal AI agents: a lead agent (JARVIS) and top-level
//! agents such as KAREN, each with its own sessions, memory, tools, approval
//! rules and colour.
//!
//! Most programs need only the [`prelude`]. The rest of the SDK is one
//! module per layer, bottom to top; each is a crate of its own
//! (`jarvis-common`, `jarvis-model`, …), so a layer can only use the ones
//! below it:
//!
//! | module | owns |
//! |---|---|
//! | [`common`] | clocks ([`Clock`](common::Clock)), ids, [`Timestamp`](common::Timestamp), character-counted text, atomic file writes, the home lock, [`Extensions`](common::Extensions) |
//! | [`model`] | the [`Provider`](model::Provider) trait, requests and stream events, the shared tool-call assembler, the OpenAI-compatible, Anthropic and Ollama providers, [`FauxProvider`](model::FauxProvider), the [`Embedder`](model::Embedder) trait and its embedders, token counts and prices |
//! | [`memory`] | [`MemoryService`](memory::MemoryService) (working; semantic, episodic and procedural memory; agent scopes; hybrid recall), the one injection point, the [`MemoryStore`](memory::MemoryStore) trait and its stores |
//! | [`agent`] | [`run_agent_loop`](agent::run_agent_loop) with the overflow resume, [`AgentEvent`](agent::AgentEvent), [`UIAdapter`](agent::UIAdapter), [`Tool`](agent::Tool), the tool-call gate, sessions ([`SessionStore`](agent::SessionStore)), the turn harness, the thinking slot and open loops |
//! | [`turn`] | the turn orchestrator [`AgentSession`](turn::AgentSession) (security → thinking → harness → loop), the security pipeline, approvals, the sandbox and built-in tools, the MCP client supervisor, delegation, cassettes, the usage ledger |
//! | [`initiative`] | what the team does on its own: the scheduler, the proactive daemon, the outbox and notification channels, goals, Focus tasks, the AGENDA, external sources, the standard slash commands |
//! | [`app`] | agent profiles and team definitions, the agent registry, the [`Pack`](app::Pack) plug point (domain packs are crates of their own), [`build_app`](app::build_app) and [`AppAssembly`](app::AppAssembly) |
//! | `testing` | test doubles (feature `test-utils`) |
//!
//! The plugin points are small object-safe traits held as `Arc<dyn …>`:
//! [`Provider`](model::Provider) (a model service),
//! [`UIAdapter`](agent::UIAdapter) (a screen), [`Tool`](agent::Tool), the
//! gate stages [`ToolPolicy`](agent::ToolPolicy),
//! [`BeforeToolCall`](agent::BeforeToolCall) and
//! [`Approver`](agent::Approver), [`SecurityStage`](turn::SecurityStage),
//! [`SessionStore`](agent::SessionStore), [`MemoryStore`](memory::MemoryStore)
//! and [`Embedder`](model::Embedder) (texts to vectors for memory recall).
//!
//! ## One turn, offline
//!
//! [`FauxProvider`](model::FauxProvider) plays a script, so everything runs
//! without a model:
//!
//! ```
//! use std::sync::Arc;
//! use jarvis_sdk::prelude::*;
//! use jarvis_sdk::agent::StopReason;
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let faux = FauxProvider::from_yaml(r#"
//! replies:
//!   - tool_calls: [ { name: final, arguments: { answer: "42" } } ]
//! "#).unwrap();
//! let mut tools = ToolRegistry::new();
//! tools.register_typed(FinalTool).unwrap();
//! let ctx = LoopContext::new(Arc::new(faux)).with_tools(tools);
//! let outcome = run_agent_loop(
//!     &ctx,
//!     &AgentLoopConfig::default(),
//!     vec![Message::user("What is six times seven?")],
//!     &CancellationToken::new(),
//! )
//! .await
//! .unwrap();
//! assert_eq!(outcome.final_message.content, "42");
//! assert_eq!(outcome.final_message.stop_reason, StopReason::Final);
//! # });
//! ```
//!
//! ## Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `sqlite` | yes | `SqliteMemoryStore`: memory in `$JARVIS_HOME/memory.sqlite3` (SQLite compiled in), the assembled app's default |
//! | `postgres` | no | `PostgresSessionStore`, `PostgresMemoryStore` and `PostgresOpenLoopStore` (tokio-postgres with a deadpool pool) |
//! | `test-utils` | no | `testing`: a recording `UIAdapter`, closure tools, a fixed approver, a throwaway Postgres cluster |
//! | `sources` | no | external sources watched on a schedule (`external_sources/*.yaml`: feeds, JSON, pages) |
//! | `email` | no | email notification channels (`notifications.yaml`, over SMTP with `lettre`) |
//! | `mcp` | no | tools from MCP servers (`McpHub`), the team as an MCP server (`McpTeamServer`, `serve_mcp_stdio`) and the stdio bridge to a running server's `/mcp` (`bridge_mcp_stdio`), over the official Rust SDK `rmcp` |
//!
//! The default build has no HTTP server, no terminal UI and no database
//! client: its one database is the SQLite library compiled into it.

/// The shared foundation: clocks, ids, timestamps, text and file helpers.
pub mod common {
    #[doc(inline)]
    pub use jarvis_common::*;
}

/// Model services: providers, requests, stream events, embedders, prices.
pub mod model {
    #[doc(inline)]
    pub use jarvis_model::*;
}

/// Memory: the service, recall, the one injection point, the stores.
pub mod memory {
    #[doc(inline)]
    pub use jarvis_memory::*;
}

/// The agent loop, events, screens, tools and their gate, sessions, the
/// turn harness, thinking and open loops.
pub mod agent {
    #[doc(inline)]
    pub use jarvis_agent::*;
}

/// The turn orchestrator and the turn pipeline: security, approvals, the
/// sandbox and built-in tools, MCP clients, delegation, cassettes, usage.
pub mod turn {
    #[doc(inline)]
    pub use jarvis_turn::*;
}

/// What the team does on its own: schedules, proactive messages, the
/// outbox and notifications, goals, Focus tasks, the AGENDA, sources.
pub mod initiative {
    #[doc(inline)]
    pub use jarvis_initiative::*;
}

/// The assembly: profiles, team definitions, the registry, packs,
/// [`build_app`](app::build_app) and [`AppAssembly`](app::AppAssembly).
pub mod app {
    #[doc(inline)]
    pub use jarvis_app::*;
}

#[cfg(any(test, feature = "test-utils"))]
pub mod testing;

/// The names most programs built on the SDK use: `use jarvis_sdk::prelude::*;`.
pub mod prelude {
    #[doc(no_inline)]
    pub use crate::agent::{
        AgentEvent, AgentLoopConfig, FinalTool, JsonlSessionStore, LoopContext, LoopOutcome,
        MemorySessionStore, SessionStore, Tool, ToolContext, ToolError, ToolRegistry, ToolResult, TypedTool,
        UIAdapter, run_agent_loop,
    };
    #[doc(no_inline)]
    pub use crate::app::{
        AgentProfile, AgentRegistry, AppAssembly, AppConfig, AppError, Pack, PackContext, build_app,
    };
    #[doc(no_inline)]
    pub use crate::common::{Clock, SystemClock, Timestamp};
    #[doc(no_inline)]
    pub use crate::memory::{InMemoryMemoryStore, MemoryRecord, MemoryService, MemoryStore};
    #[doc(no_inline)]
    pub use crate::model::{
        ChatRequest, Embedder, FauxProvider, HashEmbedder, Message, Provider, ProviderError,
    };
    #[doc(no_inline)]
    pub use crate::turn::{
        AgentSession, ApprovalBroker, SecurityError, SecurityInput, SecurityPipeline, SecurityStage,
    };
    #[doc(no_inline)]
    pub use crate::{CancellationToken, async_trait};
}

/// Re-exports the loop needs from outside crates, so users need not pin them.
pub use tokio_util::sync::CancellationToken;

/// The attribute for implementing [`Tool`](agent::Tool),
/// [`TypedTool`](agent::TypedTool) and the gate traits.
pub use async_trait::async_trait;
