//! The per-session sandbox and the built-in tools: the escape suite
//! (`escape`), the process tools' limits (`process`), the kernel's
//! confinement of programs (`confine`), approval rules matching what runs
//! (`rules`) and one turn of the loop using them (`through_loop`).
//! Everything runs in temporary directories.

mod confine;
mod escape;
mod process;
mod rules;
mod through_loop;

use jarvis_sdk::agent::{Tool, ToolContext, ToolResult};
use jarvis_sdk::turn::{BuiltinConfig, builtin_tools};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The text of the canary file kept outside every sandbox.
const CANARY: &str = "CANARY-7f3a: this file lives outside the sandbox";

/// A temporary `JARVIS_HOME`-like tree:
///
/// ```text
/// <tmp>/sandboxes/         the sandboxes (one per session)
/// <tmp>/outside/canary.txt a file no tool may read or change
/// ```
struct Fixture {
    tmp: tempfile::TempDir,
    config: BuiltinConfig,
}

impl Fixture {
    fn new() -> Self {
        let tmp = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(tmp.path().join("outside")).unwrap();
        std::fs::write(tmp.path().join("outside/canary.txt"), CANARY).unwrap();
        let config = BuiltinConfig::new(tmp.path().join("sandboxes"));
        Self { tmp, config }
    }

    fn with(mut self, change: impl FnOnce(&mut BuiltinConfig)) -> Self {
        change(&mut self.config);
        self
    }

    fn base(&self) -> PathBuf {
        self.config.sandboxes_dir.clone()
    }

    fn outside(&self) -> PathBuf {
        self.tmp.path().join("outside")
    }

    /// The sandbox directory of `session` on the host, created.
    fn sandbox(&self, session: &str) -> PathBuf {
        jarvis_sdk::turn::Sandbox::open(&self.base(), session)
            .expect("valid session")
            .root()
            .to_owned()
    }

    fn tool(&self, name: &str) -> Arc<dyn Tool> {
        builtin_tools(self.config.clone())
            .into_iter()
            .find(|t| t.name() == name)
            .unwrap_or_else(|| panic!("no built-in tool {name}"))
    }

    /// Calls `tool` for `session`; a `ToolError` becomes the `is_error`
    /// result the loop would make of it.
    async fn call(&self, tool: &str, session: &str, args: Value) -> ToolResult {
        let ctx = ToolContext::new(session, "main");
        self.tool(tool)
            .call(args, &ctx)
            .await
            .unwrap_or_else(ToolResult::from)
    }

    /// Every file and directory under the temporary root but outside the
    /// sandboxes, with its content: compared before and after an attack.
    fn outside_snapshot(&self) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
        let mut out = BTreeMap::new();
        walk(self.tmp.path(), &self.base(), &mut out);
        out
    }
}

fn walk(dir: &Path, skip: &Path, out: &mut BTreeMap<PathBuf, Option<Vec<u8>>>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path == skip {
            continue;
        }
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.is_dir() {
            out.insert(path.clone(), None);
            walk(&path, skip, out);
        } else {
            out.insert(path.clone(), Some(std::fs::read(&path).unwrap_or_default()));
        }
    }
}

/// Polls `check` until it returns `Some`, failing after `limit`.
async fn eventually<T>(what: &str, limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            start.elapsed() < limit,
            "gave up waiting for {what} after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
