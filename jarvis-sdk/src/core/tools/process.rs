//! The process tools: `run_command` and `run_python` (Unix).
//!
//! Each call starts one program, never a shell, in its own process group:
//!
//! - the working directory is the session's sandbox and `HOME` points there;
//! - the environment starts empty; only `PATH`, `LANG`, `LC_ALL`, `LC_CTYPE`
//!   and `TZ` are copied from the server's, so no API key and no `JARVIS_*`
//!   setting reaches the program;
//! - stdin is closed (`run_python` feeds its code there instead);
//! - stdout and stderr are captured, each capped at
//!   [`BuiltinConfig::output_cap`] bytes (the rest is drained and counted);
//! - when the program exits, times out, or the turn is aborted, the whole
//!   process group is killed with `SIGKILL`, so nothing it started in the
//!   background outlives the call. The same happens when the call's future
//!   is dropped.
//!
//! Limits, precisely: a descendant that leaves the process group (`setsid`,
//! `setpgid`) escapes the kill, and the call then stops waiting for its
//! output after a short grace period. After a normal exit the group is
//! killed right after the program is reaped; were its process id reused by
//! an unrelated process group leader within that instant, that group would
//! receive the signal. The programs are not confined by the kernel: they can
//! touch whatever the server's user can, which is why both tools ask for
//! approval.

use async_trait::async_trait;
use rustix::process::{Pid, Signal, kill_process_group};
use schemars::JsonSchema;
use serde::Deserialize;
use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{BuiltinConfig, in_sandbox};
use crate::agent::{ToolContext, ToolError, ToolResult, TypedTool};
use crate::core::sandbox::{SandboxError, check_path};

/// Variables copied from the server's environment when set; nothing else is.
const PASSED_ENV: [&str; 4] = ["LANG", "LC_ALL", "LC_CTYPE", "TZ"];
/// `PATH` when the server has none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// How long output is still awaited after the group was killed.
const OUTPUT_GRACE: Duration = Duration::from_secs(2);

/// Arguments of `run_command`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct RunCommandArgs {
    /// The program: a name looked up on PATH (`git`), an absolute path, or a
    /// path relative to the sandbox containing a `/` (`./build.sh`).
    program: String,
    /// Its arguments, one string each; no shell interprets them.
    #[serde(default)]
    args: Vec<String>,
}

/// `run_command {program, args}`.
#[derive(Debug)]
pub(super) struct RunCommand {
    config: Arc<BuiltinConfig>,
}

impl RunCommand {
    pub(super) fn new(config: Arc<BuiltinConfig>) -> Self {
        Self { config }
    }
}

#[async_trait]
impl TypedTool for RunCommand {
    type Args = RunCommandArgs;

    fn name(&self) -> &str {
        "run_command"
    }

    fn description(&self) -> &str {
        "Runs a program in your sandbox directory with an argument list (no shell: pipes, \
         redirections and variables are not interpreted). Returns the exit status, stdout and \
         stderr, cut when long. The program is killed, with everything it started, when it runs \
         past the time limit."
    }

    fn requires_approval(&self) -> bool {
        true
    }

    async fn run(&self, args: RunCommandArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        if let Err(refusal) = check_program(&args.program) {
            return Ok(ToolResult::error(refusal));
        }
        let job = Job {
            program: OsString::from(&args.program),
            args: args.args.into_iter().map(OsString::from).collect(),
            stdin: None,
        };
        run_job(&self.config, ctx, job).await
    }
}

/// Refuses a program that is empty, holds a NUL byte, or is a relative path
/// that leaves the sandbox. Bare names and absolute paths are allowed: the
/// program is not confined by the kernel either way.
fn check_program(program: &str) -> Result<(), String> {
    if program.trim().is_empty() {
        return Err("run_command: `program` is empty".to_owned());
    }
    if program.contains('\0') {
        return Err("run_command: `program` contains a NUL byte".to_owned());
    }
    if program.contains('/') && !program.starts_with('/') {
        check_path(program).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Arguments of `run_python`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct RunPythonArgs {
    /// The Python 3 source to run; print what you want to see.
    code: String,
}

/// `run_python {code}`: the interpreter in isolated mode (`-I`), reading the
/// code from stdin, under the same limits as `run_command`.
#[derive(Debug)]
pub(super) struct RunPython {
    config: Arc<BuiltinConfig>,
}

impl RunPython {
    pub(super) fn new(config: Arc<BuiltinConfig>) -> Self {
        Self { config }
    }
}

#[async_trait]
impl TypedTool for RunPython {
    type Args = RunPythonArgs;

    fn name(&self) -> &str {
        "run_python"
    }

    fn description(&self) -> &str {
        "Runs Python 3 code in your sandbox directory and returns what it prints (stdout and \
         stderr, cut when long) and its exit status. Files it opens by relative path are in the \
         sandbox. It is killed when it runs past the time limit."
    }

    fn requires_approval(&self) -> bool {
        true
    }

    async fn run(&self, args: RunPythonArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let len = args.code.len();
        if len > self.config.write_cap {
            let e = SandboxError::TooLarge {
                len,
                max: self.config.write_cap,
            };
            return Ok(ToolResult::error(format!(
                "run_python: the code is too long: {e}"
            )));
        }
        let job = Job {
            program: self.config.python.clone().into_os_string(),
            args: vec![OsString::from("-I"), OsString::from("-")],
            stdin: Some(args.code.into_bytes()),
        };
        run_job(&self.config, ctx, job).await
    }
}

/// One program to run.
struct Job {
    program: OsString,
    args: Vec<OsString>,
    stdin: Option<Vec<u8>>,
}

/// How the wait for the program ended.
enum Ending {
    Exited(std::io::Result<ExitStatus>),
    TimedOut,
    Cancelled,
}

/// Runs `job` in the session's sandbox under the configured limits.
async fn run_job(config: &Arc<BuiltinConfig>, ctx: &ToolContext, job: Job) -> Result<ToolResult, ToolError> {
    if ctx.cancel.is_cancelled() {
        return Err(ToolError::Cancelled);
    }
    let root = match in_sandbox(config, &ctx.session_id, |sb| Ok(sb.root().to_owned())).await? {
        Ok(root) => root,
        Err(e) => return Ok(ToolResult::error(e.to_string())),
    };
    let mut command = tokio::process::Command::new(&job.program);
    command
        .args(&job.args)
        .current_dir(&root)
        .env_clear()
        .envs(child_env(&root))
        .stdin(if job.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            return Ok(ToolResult::error(format!(
                "could not start {:?}: {e}",
                job.program.to_string_lossy()
            )));
        }
    };
    // From here on, every way out of this function kills the group.
    let mut group = ProcessGroup::of(child.id());
    let stdout = Capture::spawn(child.stdout.take(), config.output_cap);
    let stderr = Capture::spawn(child.stderr.take(), config.output_cap);
    if let (Some(input), Some(mut stdin)) = (job.stdin, child.stdin.take()) {
        // A program that exits without reading makes this fail; that is
        // fine. The time limit bounds it should the pipe stay open.
        let limit = config.command_timeout;
        tokio::spawn(async move {
            let _ = tokio::time::timeout(limit, stdin.write_all(&input)).await;
        });
    }
    let ending = wait(&mut child, config.command_timeout, &ctx.cancel).await;
    group.kill();
    if !matches!(ending, Ending::Exited(_)) {
        // The group kill reached the program too; killing it by pid as well
        // costs nothing. Then reap it: SIGKILL cannot be ignored.
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
    let stdout = stdout.finish().await;
    let stderr = stderr.finish().await;
    let (head, is_error) = match ending {
        Ending::Cancelled => return Err(ToolError::Cancelled),
        Ending::TimedOut => (
            format!(
                "timed out after {:?}; the program and every process it started were killed",
                config.command_timeout
            ),
            true,
        ),
        Ending::Exited(Err(e)) => (format!("could not wait for the program: {e}"), true),
        Ending::Exited(Ok(status)) => describe(status),
    };
    let text = report(head, &stdout, &stderr);
    Ok(if is_error {
        ToolResult::error(text)
    } else {
        ToolResult::ok(text)
    })
}

async fn wait(child: &mut tokio::process::Child, timeout: Duration, cancel: &CancellationToken) -> Ending {
    tokio::select! {
        status = child.wait() => Ending::Exited(status),
        () = tokio::time::sleep(timeout) => Ending::TimedOut,
        () = cancel.cancelled() => Ending::Cancelled,
    }
}

/// The whole environment a program sees.
fn child_env(root: &Path) -> Vec<(OsString, OsString)> {
    let mut env = vec![
        (
            OsString::from("PATH"),
            std::env::var_os("PATH").unwrap_or_else(|| OsString::from(DEFAULT_PATH)),
        ),
        (OsString::from("HOME"), root.as_os_str().to_owned()),
    ];
    for name in PASSED_ENV {
        if let Some(value) = std::env::var_os(name) {
            env.push((OsString::from(name), value));
        }
    }
    if !env.iter().any(|(k, _)| k == OsStr::new("LANG")) {
        env.push((OsString::from("LANG"), OsString::from("C.UTF-8")));
    }
    env
}

/// The program's own process group (its id is the program's pid); killed
/// once, explicitly or on drop.
struct ProcessGroup(Option<Pid>);

impl ProcessGroup {
    fn of(pid: Option<u32>) -> Self {
        Self(pid.and_then(|p| i32::try_from(p).ok()).and_then(Pid::from_raw))
    }

    fn kill(&mut self) {
        if let Some(pgid) = self.0.take() {
            // ESRCH (the group is already empty) is the usual answer after a
            // clean exit.
            let _ = kill_process_group(pgid, Signal::KILL);
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What was read from one output stream.
#[derive(Debug, Default)]
struct Captured {
    kept: Vec<u8>,
    total: u64,
    incomplete: bool,
}

/// A stream being read in the background into a capped buffer.
struct Capture {
    buffer: Arc<Mutex<Captured>>,
    task: Option<JoinHandle<()>>,
}

impl Capture {
    fn spawn<R: AsyncRead + Unpin + Send + 'static>(stream: Option<R>, cap: usize) -> Self {
        let buffer = Arc::new(Mutex::new(Captured::default()));
        let task = stream.map(|mut stream| {
            let buffer = buffer.clone();
            tokio::spawn(async move {
                let mut chunk = vec![0u8; 8192];
                // Read to the end even past the cap, so the program never
                // blocks on a full pipe.
                while let Ok(n) = stream.read(&mut chunk).await {
                    if n == 0 {
                        break;
                    }
                    let mut b = buffer.lock().unwrap_or_else(|e| e.into_inner());
                    let room = cap.saturating_sub(b.kept.len());
                    b.kept.extend_from_slice(&chunk[..n.min(room)]);
                    b.total += n as u64;
                }
            })
        });
        Self { buffer, task }
    }

    /// Waits (briefly) for the stream to end and returns what was read.
    async fn finish(mut self) -> Captured {
        let mut incomplete = false;
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(OUTPUT_GRACE, &mut task).await.is_err()
        {
            task.abort();
            incomplete = true;
        }
        let mut b = self.buffer.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = std::mem::take(&mut *b);
        out.incomplete = incomplete;
        out
    }
}

/// The first line of the report, and whether the run counts as failed.
fn describe(status: ExitStatus) -> (String, bool) {
    match (status.code(), status.signal()) {
        (Some(0), _) => ("exit status 0".to_owned(), false),
        (Some(code), _) => (format!("exit status {code}"), true),
        (None, Some(signal)) => (format!("terminated by signal {signal}"), true),
        (None, None) => (format!("ended: {status}"), true),
    }
}

fn report(head: String, stdout: &Captured, stderr: &Captured) -> String {
    let mut text = head;
    for (name, out) in [("stdout", stdout), ("stderr", stderr)] {
        if out.total == 0 && !out.incomplete {
            continue;
        }
        let _ = write!(text, "\n--- {name} ---\n{}", String::from_utf8_lossy(&out.kept));
        if (out.kept.len() as u64) < out.total {
            let _ = write!(
                text,
                "\n[{name} truncated: showing the first {} of {} bytes]",
                out.kept.len(),
                out.total
            );
        }
        if out.incomplete {
            let _ = write!(
                text,
                "\n[{name} may be incomplete: a process outside the killed group kept it open]"
            );
        }
    }
    if stdout.total == 0 && stderr.total == 0 {
        text.push_str("\n(no output)");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_checked() {
        assert!(check_program("git").is_ok());
        assert!(check_program("/usr/bin/env").is_ok());
        assert!(check_program("./build.sh").is_ok());
        assert!(check_program("").is_err());
        assert!(check_program("a\0b").is_err());
        let e = check_program("../../bin/sh").unwrap_err();
        assert!(e.contains("leads outside the sandbox"), "{e}");
    }

    #[test]
    fn the_environment_is_an_allow_list() {
        let env = child_env(Path::new("/sb/s1"));
        let names: Vec<_> = env
            .iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        for name in &names {
            assert!(
                ["PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ"].contains(&name.as_str()),
                "{name} passed on"
            );
        }
        assert!(env.contains(&(OsString::from("HOME"), OsString::from("/sb/s1"))));
        assert!(names.iter().any(|n| n == "LANG"));
    }

    #[test]
    fn reports_say_what_was_cut() {
        let out = Captured {
            kept: b"abc".to_vec(),
            total: 10,
            incomplete: false,
        };
        let text = report("exit status 0".into(), &out, &Captured::default());
        assert_eq!(
            text,
            "exit status 0\n--- stdout ---\nabc\n[stdout truncated: showing the first 3 of 10 bytes]"
        );
        let none = report("exit status 0".into(), &Captured::default(), &Captured::default());
        assert_eq!(none, "exit status 0\n(no output)");
    }
}
