//! The core layer: `AgentSession` directs one turn (security pipeline →
//! thinking → harness → loop); the real tool-gate stages, built-in tools,
//! slash commands, `ask_agent` and the scheduler live here.
//!
//! It sits above `agent` and below `app`. Built so far:
//!
//! - `sandbox`: the per-session working directory and the file operations
//!   confined to it ([`Sandbox`], [`SandboxError`]);
//! - `tools`: the built-in tools `read_file`, `list_dir`, `write_file`,
//!   `run_command` and `run_python` ([`builtin_tools`], [`BuiltinConfig`]).

mod sandbox;
mod tools;

pub use sandbox::{
    DirEntryInfo, DirListing, EntryKind, FileContent, MAX_COMPONENT_LEN, MAX_PATH_LEN, MAX_SESSION_ID_LEN,
    Sandbox, SandboxError, validate_session_id,
};
pub use tools::{
    BuiltinConfig, DEFAULT_COMMAND_TIMEOUT, DEFAULT_LIST_CAP, DEFAULT_OUTPUT_CAP, DEFAULT_READ_CAP,
    DEFAULT_WRITE_CAP, builtin_tools, register_builtin_tools,
};
