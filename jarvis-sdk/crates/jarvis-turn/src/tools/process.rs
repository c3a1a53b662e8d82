//! The process tools: `run_command` and `run_python` (Unix).
//!
//! Each call starts one program, never a shell, in its own process group:
//!
//! - `run_command`'s `program` is resolved to the canonical file that will
//!   run before the gate (see the `program` module); the prepared call
//!   carries it as `file`, approval rules match it, and the tool runs
//!   exactly that file (its `argv[0]` is the name as written). Should the
//!   name resolve to another file by the time the call runs, it is refused;
//! - the kernel confines the program on Linux (see the `confine` module);
//!   a result of a program that is not (fully) confined ends with a note
//!   saying so;
//! - the working directory is the session's sandbox and `HOME` points there;
//!   `TMPDIR` is `<sandbox>/.tmp` (created);
//! - the environment starts empty; only `LANG`, `LC_ALL`, `LC_CTYPE` and
//!   `TZ` are copied from the server's, and `PATH` is the server's without
//!   relative entries and without directories the program may not read, so
//!   no API key and no `JARVIS_*` setting reaches the program;
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
//! receive the signal.

use async_trait::async_trait;
use rustix::process::{Pid, Signal, kill_process_group};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
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

use super::confine::{SpawnError, Spawned, spawn_confined};
use super::program::Surroundings;
use super::{BuiltinConfig, in_sandbox};
use crate::sandbox::SandboxError;
use jarvis_agent::{PreparedCall, ResolvedProgram, ToolContext, ToolError, ToolResult, TypedTool};

/// Variables copied from the server's environment when set; nothing else is.
const PASSED_ENV: [&str; 4] = ["LANG", "LC_ALL", "LC_CTYPE", "TZ"];
/// The sandbox directory programs get as `TMPDIR`.
const TMP_DIR: &str = ".tmp";
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
    /// The canonical file `program` resolved to when the call was
    /// prepared; set by the tool, never by the model.
    #[serde(default)]
    #[schemars(skip)]
    file: Option<String>,
}

/// `run_command {program, args}`.
#[derive(Debug)]
pub(super) struct RunCommand {
    config: Arc<BuiltinConfig>,
}

/// A program found, with the surroundings it was found in.
type Found = (Surroundings, ResolvedProgram);

impl RunCommand {
    pub(super) fn new(config: Arc<BuiltinConfig>) -> Self {
        Self { config }
    }
}

/// Resolves `program` (the argument `argument`) in the surroundings of the
/// session's sandbox, on the blocking pool. The inner error is the refusal
/// the model reads.
async fn find(
    config: &Arc<BuiltinConfig>,
    session_id: &str,
    argument: &'static str,
    program: &str,
) -> Result<Result<Found, String>, ToolError> {
    let shared = config.clone();
    let program = program.to_owned();
    let found = in_sandbox(config, session_id, move |sb| {
        let surroundings = Surroundings::new(&shared, sb.root());
        Ok(surroundings
            .resolve(argument, &program)
            .map(|resolved| (surroundings, resolved)))
    })
    .await?;
    Ok(found.unwrap_or_else(|e| Err(e.to_string())))
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
         past the time limit. It can write only inside your sandbox, read only the sandbox and the \
         system's programs and libraries, and has no network unless your settings allow it."
    }

    fn requires_approval(&self) -> bool {
        true
    }

    /// Resolves `program` to the canonical file that will run and records
    /// it as `file`, so rules, people and the tool see the same program.
    async fn prepare(&self, args: Value, ctx: &ToolContext) -> Result<PreparedCall, ToolError> {
        let parsed: RunCommandArgs =
            serde_json::from_value(args).map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
        let (_, resolved) = find(&self.config, &ctx.session_id, "program", &parsed.program)
            .await?
            .map_err(ToolError::Failed)?;
        let arguments = json!({
            "program": parsed.program,
            "args": parsed.args,
            "file": resolved.file.to_string_lossy(),
        });
        Ok(PreparedCall::new(arguments).with_program(resolved))
    }

    async fn run(&self, args: RunCommandArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        if ctx.cancel.is_cancelled() {
            return Err(ToolError::Cancelled);
        }
        let (surroundings, resolved) =
            match find(&self.config, &ctx.session_id, "program", &args.program).await? {
                Ok(found) => found,
                Err(refusal) => return Ok(ToolResult::error(refusal)),
            };
        if let Some(checked) = &args.file
            && Path::new(checked) != resolved.file
        {
            return Ok(ToolResult::error(format!(
                "run_command: not run: {:?} now resolves to {}, not to {checked}, the file the call \
                 was checked with",
                args.program,
                resolved.file.display()
            )));
        }
        let job = Job {
            program: resolved.file.into_os_string(),
            arg0: OsString::from(&args.program),
            args: args.args.into_iter().map(OsString::from).collect(),
            stdin: None,
        };
        run_job(&self.config, ctx, surroundings, job).await
    }
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
         sandbox. It is killed when it runs past the time limit. Like run_command, it can write \
         only inside your sandbox and has no network unless your settings allow it."
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
        if ctx.cancel.is_cancelled() {
            return Err(ToolError::Cancelled);
        }
        let python = self.config.python.to_string_lossy().into_owned();
        let (surroundings, interpreter) = match find(&self.config, &ctx.session_id, "python", &python).await?
        {
            Ok(found) => found,
            Err(refusal) => return Ok(ToolResult::error(refusal)),
        };
        let job = Job {
            program: interpreter.file.into_os_string(),
            arg0: self.config.python.clone().into_os_string(),
            args: vec![OsString::from("-I"), OsString::from("-")],
            stdin: Some(args.code.into_bytes()),
        };
        run_job(&self.config, ctx, surroundings, job).await
    }
}

/// One program to run.
struct Job {
    /// The canonical file to run.
    program: OsString,
    /// Its `argv[0]`: the name it was asked for by.
    arg0: OsString,
    args: Vec<OsString>,
    stdin: Option<Vec<u8>>,
}

/// How the wait for the program ended.
enum Ending {
    Exited(std::io::Result<ExitStatus>),
    TimedOut,
    Cancelled,
}

/// Runs `job` in the session's sandbox under the configured limits,
/// confined to `surroundings`.
async fn run_job(
    config: &Arc<BuiltinConfig>,
    ctx: &ToolContext,
    surroundings: Surroundings,
    job: Job,
) -> Result<ToolResult, ToolError> {
    if ctx.cancel.is_cancelled() {
        return Err(ToolError::Cancelled);
    }
    let tmp = match in_sandbox(config, &ctx.session_id, |sb| sb.create_dir(TMP_DIR)).await? {
        Ok(()) => surroundings.reach.sandbox.join(TMP_DIR),
        Err(e) => return Ok(ToolResult::error(e.to_string())),
    };
    let root = surroundings.reach.sandbox.clone();
    let mut command = tokio::process::Command::new(&job.program);
    command
        .arg0(&job.arg0)
        .args(&job.args)
        .current_dir(&root)
        .env_clear()
        .envs(child_env(&root, &tmp, surroundings.path_var()))
        .stdin(if job.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let spawned = spawn_confined(command, surroundings.reach, config.require_confinement).await;
    let (mut child, confinement) = match spawned.map(Spawned::into_parts) {
        Ok(Some(parts)) => parts,
        Ok(None) => {
            return Ok(ToolResult::error(
                "the started program was lost before it could be watched",
            ));
        }
        Err(SpawnError::Refused(reason)) => return Ok(ToolResult::error(reason)),
        Err(SpawnError::Start(e)) => {
            return Ok(ToolResult::error(format!(
                "could not start {:?}: {e}",
                job.arg0.to_string_lossy()
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
    let mut text = report(head, &stdout, &stderr);
    if let Some(note) = confinement.note() {
        let _ = write!(text, "\n[{note}]");
    }
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
fn child_env(root: &Path, tmp: &Path, path: OsString) -> Vec<(OsString, OsString)> {
    let mut env = vec![
        (OsString::from("PATH"), path),
        (OsString::from("HOME"), root.as_os_str().to_owned()),
        (OsString::from("TMPDIR"), tmp.as_os_str().to_owned()),
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
    fn the_environment_is_an_allow_list() {
        let env = child_env(
            Path::new("/sb/s1"),
            Path::new("/sb/s1/.tmp"),
            OsString::from("/usr/bin"),
        );
        let names: Vec<_> = env
            .iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        for name in &names {
            assert!(
                ["PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "LC_CTYPE", "TZ"].contains(&name.as_str()),
                "{name} passed on"
            );
        }
        assert!(env.contains(&(OsString::from("HOME"), OsString::from("/sb/s1"))));
        assert!(env.contains(&(OsString::from("TMPDIR"), OsString::from("/sb/s1/.tmp"))));
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
