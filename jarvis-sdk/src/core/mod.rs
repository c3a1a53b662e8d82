//! The core layer: `AgentSession` directs one turn (security pipeline →
//! thinking → harness → loop); the real tool-gate stages, built-in tools,
//! slash commands, `ask_agent` and the scheduler live here.
//!
//! It sits above `agent` and below `app`. Nothing is built here yet; the
//! module exists so the layer order is fixed and enforced from the start.
