//! The built-in tools every agent may be given (DESIGN.md §5, "Tool names
//! and arguments"), all confined to the calling session's [`Sandbox`]:
//!
//! | tool | arguments | asks for approval |
//! |---|---|---|
//! | `read_file` | `{path}` | no |
//! | `list_dir` | `{path}` (default `.`) | no |
//! | `write_file` | `{path, content}` | yes |
//! | `run_command` | `{program, args}` | yes |
//! | `run_python` | `{code}` | yes |
//!
//! The `web` module adds `web_fetch` and `web_search` (feature `http`),
//! which read the web instead of the sandbox; the app registers them
//! beside these.
//!
//! Paths are relative to `<sandboxes_dir>/<session_id>/`; the session id
//! comes from the [`ToolContext`] of each call. Every refusal or failure is
//! an `is_error` result the model reads; nothing here panics on bad input.
//!
//! The file tools are confined by the sandbox itself; their `path`
//! arguments are declared as sandbox paths, so the loop normalises them
//! before the gate and rules match the path that is used. The process
//! tools (`run_command`, `run_python`) get the sandbox as working
//! directory, an argument list that no shell reads, an environment that
//! starts empty, a time limit that kills the whole process group and
//! capped output, and on Linux the kernel confines the program to the
//! sandbox (the `confine` module: Landlock, seccomp, no capabilities, no
//! network unless [`SandboxSettings::network`]). `run_command` resolves its
//! `program` to the canonical file that will run before the gate (the
//! `program` module), so approval rules match that file.

mod confine;
mod fs;
#[cfg(unix)]
mod process;
#[cfg(unix)]
mod program;
mod web;

pub use confine::{Confinement, SandboxSettings, kernel_confinement};
pub use web::{
    DEFAULT_SEARCH_RESULTS, DEFAULT_WEB_FETCH_MAX_BYTES, DEFAULT_WEB_FETCH_MAX_CHARS,
    DEFAULT_WEB_FETCH_MAX_REDIRECTS, DEFAULT_WEB_TIMEOUT, MAX_SEARCH_RESULTS, SearchProvider,
    WEB_FETCH_ALLOW_PRIVATE_ENV, WEB_FETCH_TOOL, WEB_SEARCH_API_KEY_ENV, WEB_SEARCH_BASE_URL_ENV,
    WEB_SEARCH_PROVIDER_ENV, WEB_SEARCH_TOOL, WebFetchSettings, WebSearchSettings, non_public_address_kind,
};
#[cfg(feature = "http")]
pub use web::{WebFetchArgs, WebFetchTool, WebSearchArgs, WebSearchTool, web_fetch_tool, web_search_tool};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::sandbox::{Sandbox, SandboxError};
use jarvis_agent::{Tool, ToolError, ToolRegistry, Typed};

/// Limits and places shared by the built-in tools.
///
/// Build it with [`BuiltinConfig::new`] (or [`BuiltinConfig::for_home`]) and
/// change the public fields as needed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct BuiltinConfig {
    /// The directory holding one sandbox per session
    /// (`$JARVIS_HOME/sandboxes`). Created when missing.
    pub sandboxes_dir: PathBuf,
    /// How long `run_command` and `run_python` may run before their process
    /// group is killed. Default 60 s.
    pub command_timeout: Duration,
    /// Bytes of stdout, and separately of stderr, kept from a program.
    /// Default 32 KiB each.
    pub output_cap: usize,
    /// The interpreter `run_python` runs (a name looked up on `PATH`, or a
    /// path). Default `python3`.
    pub python: PathBuf,
    /// Bytes `read_file` returns at most. Default 256 KiB.
    pub read_cap: usize,
    /// Bytes `write_file` accepts, and the longest `run_python` code.
    /// Default 1 MiB.
    pub write_cap: usize,
    /// Entries `list_dir` shows at most. Default 1,000.
    pub list_cap: usize,
    /// What programs may reach beyond the sandbox (default: nothing).
    pub sandbox: SandboxSettings,
    /// Refuse to run programs the kernel cannot fully confine
    /// (`JARVIS_SANDBOX__REQUIRE=1`) instead of running them with a note.
    pub require_confinement: bool,
}

/// Default of [`BuiltinConfig::command_timeout`].
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// Default of [`BuiltinConfig::output_cap`].
pub const DEFAULT_OUTPUT_CAP: usize = 32 * 1024;
/// Default of [`BuiltinConfig::read_cap`].
pub const DEFAULT_READ_CAP: usize = 256 * 1024;
/// Default of [`BuiltinConfig::write_cap`].
pub const DEFAULT_WRITE_CAP: usize = 1024 * 1024;
/// Default of [`BuiltinConfig::list_cap`].
pub const DEFAULT_LIST_CAP: usize = 1000;

impl BuiltinConfig {
    /// The defaults, with sandboxes under `sandboxes_dir`.
    pub fn new(sandboxes_dir: impl Into<PathBuf>) -> Self {
        Self {
            sandboxes_dir: sandboxes_dir.into(),
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            output_cap: DEFAULT_OUTPUT_CAP,
            python: PathBuf::from("python3"),
            read_cap: DEFAULT_READ_CAP,
            write_cap: DEFAULT_WRITE_CAP,
            list_cap: DEFAULT_LIST_CAP,
            sandbox: SandboxSettings::default(),
            require_confinement: false,
        }
    }

    /// The defaults, with sandboxes under `<jarvis_home>/sandboxes`.
    pub fn for_home(jarvis_home: &Path) -> Self {
        Self::new(jarvis_home.join("sandboxes"))
    }

    /// Sets [`BuiltinConfig::command_timeout`].
    pub fn with_command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// Sets [`BuiltinConfig::output_cap`].
    pub fn with_output_cap(mut self, bytes: usize) -> Self {
        self.output_cap = bytes;
        self
    }

    /// Sets [`BuiltinConfig::python`].
    pub fn with_python(mut self, interpreter: impl Into<PathBuf>) -> Self {
        self.python = interpreter.into();
        self
    }

    /// Sets [`BuiltinConfig::sandbox`].
    pub fn with_sandbox(mut self, sandbox: SandboxSettings) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// Sets [`BuiltinConfig::require_confinement`].
    pub fn with_require_confinement(mut self, require: bool) -> Self {
        self.require_confinement = require;
        self
    }
}

/// The built-in tools, in name order: `list_dir`, `read_file`,
/// `run_command`, `run_python` (the last two on Unix only) and `write_file`.
///
/// Give an agent a subset by filtering on [`Tool::name`].
pub fn builtin_tools(config: BuiltinConfig) -> Vec<Arc<dyn Tool>> {
    let config = Arc::new(config);
    let mut tools: Vec<Arc<dyn Tool>> = vec![
        Arc::new(Typed::new(fs::ListDir::new(config.clone()))),
        Arc::new(Typed::new(fs::ReadFile::new(config.clone()))),
    ];
    #[cfg(unix)]
    {
        tools.push(Arc::new(Typed::new(process::RunCommand::new(config.clone()))));
        tools.push(Arc::new(Typed::new(process::RunPython::new(config.clone()))));
    }
    tools.push(Arc::new(Typed::new(fs::WriteFile::new(config))));
    tools
}

/// Adds every [`builtin_tools`] tool to `registry`; a name already taken
/// there is an error ([`ToolError::Duplicate`]).
///
/// ```
/// use jarvis_agent::ToolRegistry;
/// use jarvis_turn::{BuiltinConfig, register_builtin_tools};
///
/// let home = tempfile::tempdir().unwrap();
/// let mut tools = ToolRegistry::new();
/// register_builtin_tools(&mut tools, BuiltinConfig::for_home(home.path())).unwrap();
/// assert!(!tools.get("read_file").unwrap().requires_approval());
/// assert!(tools.get("write_file").unwrap().requires_approval());
/// ```
pub fn register_builtin_tools(registry: &mut ToolRegistry, config: BuiltinConfig) -> Result<(), ToolError> {
    for tool in builtin_tools(config) {
        registry.register(tool)?;
    }
    Ok(())
}

/// Opens the session's sandbox and runs `work` in it on the blocking pool.
///
/// The outer error is the task itself failing; the inner one is the
/// sandbox's refusal, which the tools return as an `is_error` result.
async fn in_sandbox<T, F>(
    config: &Arc<BuiltinConfig>,
    session_id: &str,
    work: F,
) -> Result<Result<T, SandboxError>, ToolError>
where
    T: Send + 'static,
    F: FnOnce(&Sandbox) -> Result<T, SandboxError> + Send + 'static,
{
    let config = config.clone();
    let session_id = session_id.to_owned();
    tokio::task::spawn_blocking(move || {
        let sandbox = Sandbox::open(&config.sandboxes_dir, &session_id)?;
        work(&sandbox)
    })
    .await
    .map_err(|e| ToolError::Failed(format!("the sandbox task stopped: {e}")))
}
