//! Kernel confinement of the programs `run_command` and `run_python` start
//! (Linux): what a program may touch is decided by the kernel, not by the
//! program's good will.
//!
//! Each program is started from a short-lived thread of its own that first
//! restricts *itself* and then spawns the program, which inherits every
//! restriction (they are per thread and survive `execve`):
//!
//! - its capabilities are dropped and `no_new_privs` is set, so neither a
//!   root server's powers nor a set-uid program give the child more rights;
//! - a **Landlock** ruleset allows, and nothing else: reading, writing and
//!   running files in the session's sandbox; reading and running the system
//!   directories programs need (`/usr`, `/bin`, `/sbin`, `/lib*`, the
//!   interpreter's installation prefix when it lives elsewhere, such as a
//!   pyenv root); reading `/etc` except the secrets in it (`shadow`,
//!   `gshadow`, `sudoers`, SSH host keys, `ssl/private`); reading `/proc`;
//!   `/dev/null` (read and write), `/dev/zero`, `/dev/random` and
//!   `/dev/urandom` (read); and the paths a [`SandboxSettings`] adds. On
//!   kernels with those Landlock features it also refuses TCP `bind` and
//!   `connect` (without `network`), signals to processes outside the
//!   program's own tree, connections to abstract Unix sockets made outside
//!   it, and (Landlock ABI 9) connections to Unix socket files outside the
//!   sandbox. Landlock also keeps the program from tracing other processes,
//!   so `/proc/<pid>/environ` and `/proc/<pid>/mem` of the server and of
//!   anything else outside its domain cannot be opened, while `/proc/<pid>/`
//!   entries without that check (`cmdline`, `status`) stay readable;
//! - without `network`, a **seccomp** filter makes `socket(2)` fail with
//!   `EACCES` for every address family (IP, packet, netlink and Unix
//!   sockets alike; `socketpair(2)` still works) and refuses `io_uring`,
//!   which could open sockets past the filter. A program built for another
//!   system-call ABI than the server's (a 32-bit binary on x86-64) is killed
//!   at its first system call.
//!
//! What is **not** promised: the program runs with the server's user id
//! (files that user owns elsewhere are protected by Landlock, not by
//! permissions); `/proc` shows which processes run and their command
//! lines; with `network` on, every local service (TCP or Unix socket) is
//! reachable; no limits are set on memory, processes or disk space beyond
//! the time limit; a symlink is resolved where it is used, so a rule on a
//! path inside the sandbox is a rule on whatever that path names when the
//! program runs. On kernels without Landlock (or seccomp), and on other
//! operating systems, programs run unconfined: the start-up log says so
//! once, every result of such a call carries a note ("not confined: kernel
//! lacks Landlock"), and with [`BuiltinConfig::require_confinement`]
//! (`JARVIS_SANDBOX__REQUIRE=1`) such calls are refused instead.
//!
//! [`BuiltinConfig::require_confinement`]: super::BuiltinConfig::require_confinement

#[cfg(target_os = "linux")]
mod linux;

use serde::Deserialize;
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

/// What the programs of an agent's sessions may reach beyond the session's
/// sandbox: a definition's `sandbox:` key, or `JARVIS_SANDBOX__NETWORK`,
/// `JARVIS_SANDBOX__READ` and `JARVIS_SANDBOX__WRITE` for JARVIS. The
/// default reaches nothing more.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct SandboxSettings {
    /// Whether programs may open network sockets (TCP, UDP, Unix sockets
    /// to local services).
    #[serde(default)]
    pub network: bool,
    /// Absolute paths programs may also read (and run programs from).
    #[serde(default)]
    pub read: Vec<PathBuf>,
    /// Absolute paths programs may also read and write.
    #[serde(default)]
    pub write: Vec<PathBuf>,
}

impl SandboxSettings {
    /// Reaches nothing beyond the sandbox.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`SandboxSettings::network`].
    pub fn with_network(mut self, network: bool) -> Self {
        self.network = network;
        self
    }

    /// Adds a path programs may read.
    pub fn with_read(mut self, path: impl Into<PathBuf>) -> Self {
        self.read.push(path.into());
        self
    }

    /// Adds a path programs may read and write.
    pub fn with_write(mut self, path: impl Into<PathBuf>) -> Self {
        self.write.push(path.into());
        self
    }

    /// Checks that every path is absolute, holds no NUL byte and no `..`;
    /// the error names the first bad one.
    pub fn validate(&self) -> Result<(), String> {
        for (key, paths) in [("read", &self.read), ("write", &self.write)] {
            for path in paths {
                let text = path.to_string_lossy();
                if !path.is_absolute() {
                    return Err(format!("sandbox.{key}: {text:?} is not an absolute path"));
                }
                if text.contains('\0') {
                    return Err(format!("sandbox.{key}: {text:?} contains a NUL byte"));
                }
                if path.components().any(|c| matches!(c, Component::ParentDir)) {
                    return Err(format!("sandbox.{key}: {text:?} contains `..`"));
                }
            }
        }
        Ok(())
    }

    /// Reads colon-separated absolute paths (`JARVIS_SANDBOX__READ`); empty
    /// items are skipped.
    pub fn parse_path_list(text: &str) -> Vec<PathBuf> {
        text.split(':')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .collect()
    }
}

/// How far the kernel confined a program (or could confine programs, for
/// [`kernel_confinement`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Confinement {
    /// Every restriction described in the module documentation is enforced.
    pub full: bool,
    /// What is missing, in words (`kernel lacks Landlock`); empty when
    /// `full`.
    pub gaps: Vec<String>,
}

impl Confinement {
    /// Not (fully) confined, for these reasons.
    pub(crate) fn lacking(gaps: Vec<String>) -> Self {
        Self {
            full: gaps.is_empty(),
            gaps,
        }
    }

    /// The note added to a tool result when confinement was not full:
    /// `not confined: kernel lacks Landlock`, or `not fully confined: …`
    /// when only part of the rules are enforced.
    pub fn note(&self) -> Option<String> {
        if self.full {
            return None;
        }
        let none = self
            .gaps
            .iter()
            .any(|g| g.contains("lacks Landlock") || g.contains("only on Linux"));
        let lead = if none {
            "not confined"
        } else {
            "not fully confined"
        };
        Some(format!("{lead}: {}", self.gaps.join("; ")))
    }
}

/// What this machine's kernel can enforce, found once per process by
/// confining a throwaway thread; the assembled app logs it at start.
pub fn kernel_confinement() -> &'static Confinement {
    static PROBED: OnceLock<Confinement> = OnceLock::new();
    PROBED.get_or_init(probe)
}

#[cfg(target_os = "linux")]
fn probe() -> Confinement {
    linux::probe().confinement()
}

#[cfg(not(target_os = "linux"))]
fn probe() -> Confinement {
    Confinement::lacking(vec!["programs are confined only on Linux".to_owned()])
}

/// Everything one program may reach, absolute paths only.
#[derive(Debug, Clone)]
pub(crate) struct Reach {
    /// The session's sandbox: read, write, run.
    pub(crate) sandbox: PathBuf,
    /// Read and run, besides the system directories.
    pub(crate) read: Vec<PathBuf>,
    /// Read, write and run.
    pub(crate) write: Vec<PathBuf>,
    /// Sockets allowed.
    pub(crate) network: bool,
}

/// Directories programs may read and run files from, whole.
pub(crate) const SYSTEM_READ: [&str; 7] = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"];

/// A program just started and how far it is confined. Until
/// [`into_parts`](Self::into_parts) takes it, dropping it kills the
/// program's whole process group (the command must start one:
/// `process_group(0)`): a call dropped while the program was being handed
/// over from the confining thread leaves nothing running, not even what
/// the program started in the background.
#[derive(Debug)]
pub(crate) struct Spawned(Option<(tokio::process::Child, Confinement)>);

impl Spawned {
    /// The child and its confinement; the caller now owns the group.
    pub(crate) fn into_parts(mut self) -> Option<(tokio::process::Child, Confinement)> {
        self.0.take()
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(pgid) = self
            .0
            .as_ref()
            .and_then(|(child, _)| child.id())
            .and_then(|pid| i32::try_from(pid).ok())
            .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
    }
}

/// Spawns `command` from a thread confined to `reach`, on the runtime of
/// `handle`. With `require`, a program that could not be fully confined is
/// not started (the error says why). Returns the child and how far it is
/// confined, as a [`Spawned`] that kills the program's group if the caller
/// is gone before it takes it.
pub(crate) async fn spawn_confined(
    command: tokio::process::Command,
    reach: Reach,
    require: bool,
) -> Result<Spawned, SpawnError> {
    let handle = tokio::runtime::Handle::current();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("jarvis-confine".into())
        .spawn(move || {
            let _runtime = handle.enter();
            let _ = tx.send(confine_and_spawn(command, &reach, require));
        })
        .map_err(SpawnError::Start)?;
    rx.await
        .unwrap_or_else(|_| Err(SpawnError::Refused("the confining thread stopped".into())))
}

/// Why a program was not started.
#[derive(Debug)]
pub(crate) enum SpawnError {
    /// Confinement was required and is not available (or failed).
    Refused(String),
    /// The program (or the thread) could not be started.
    Start(std::io::Error),
}

/// Runs on the dedicated thread: restricts it, then spawns.
fn confine_and_spawn(
    mut command: tokio::process::Command,
    reach: &Reach,
    require: bool,
) -> Result<Spawned, SpawnError> {
    let confinement = confine_this_thread(reach);
    if let Some(reason) = refusal(require, &confinement) {
        return Err(SpawnError::Refused(reason));
    }
    let child = command.spawn().map_err(SpawnError::Start)?;
    Ok(Spawned(Some((child, confinement))))
}

/// Why a program is not started: confinement is required and not full.
fn refusal(require: bool, confinement: &Confinement) -> Option<String> {
    let note = confinement.note()?;
    require.then(|| {
        format!("the program was not started: JARVIS_SANDBOX__REQUIRE is set and it would run {note}")
    })
}

#[cfg(target_os = "linux")]
fn confine_this_thread(reach: &Reach) -> Confinement {
    linux::confine_this_thread(reach, kernel_target())
}

#[cfg(target_os = "linux")]
fn kernel_target() -> linux::Target {
    linux::probe().target()
}

#[cfg(not(target_os = "linux"))]
fn confine_this_thread(_reach: &Reach) -> Confinement {
    probe()
}

/// Whether `path` lies beneath (or is) one of `roots`, lexically.
pub(crate) fn beneath_any(path: &Path, roots: &[PathBuf]) -> bool {
    roots.iter().any(|root| path.starts_with(root))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_take_absolute_paths_only() {
        assert!(SandboxSettings::new().with_read("/opt/data").validate().is_ok());
        let e = SandboxSettings::new().with_read("data").validate().unwrap_err();
        assert!(e.contains("not an absolute path"), "{e}");
        let e = SandboxSettings::new()
            .with_write("/srv/../etc")
            .validate()
            .unwrap_err();
        assert!(e.contains("`..`"), "{e}");
        assert_eq!(
            SandboxSettings::parse_path_list(" /a: :/b/c:"),
            vec![PathBuf::from("/a"), PathBuf::from("/b/c")]
        );
    }

    #[test]
    fn required_confinement_refuses_what_is_not_fully_confined() {
        let none = Confinement::lacking(vec!["kernel lacks Landlock".into()]);
        let partial = Confinement::lacking(vec![
            "the kernel's Landlock ABI 3 enforces only part of the rules".into(),
        ]);
        let full = Confinement::lacking(Vec::new());
        assert_eq!(refusal(false, &none), None, "without the switch: run with a note");
        assert_eq!(refusal(true, &full), None);
        assert_eq!(
            refusal(true, &none).as_deref(),
            Some(
                "the program was not started: JARVIS_SANDBOX__REQUIRE is set and it would run not confined: kernel lacks Landlock"
            )
        );
        let partly = refusal(true, &partial).unwrap();
        assert!(
            partly.contains("not fully confined") && partly.contains("ABI 3"),
            "{partly}"
        );
    }

    #[test]
    fn notes_say_how_far_confinement_went() {
        assert_eq!(Confinement::lacking(Vec::new()).note(), None);
        assert_eq!(
            Confinement::lacking(vec!["kernel lacks Landlock".into()])
                .note()
                .as_deref(),
            Some("not confined: kernel lacks Landlock")
        );
        assert_eq!(
            Confinement::lacking(vec!["kernel lacks seccomp".into()])
                .note()
                .as_deref(),
            Some("not fully confined: kernel lacks seccomp")
        );
    }

    /// Whether `pid` is a live process (a zombie awaiting its reaper is dead).
    #[cfg(unix)]
    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            let state = stat.rsplit(") ").next().and_then(|rest| rest.chars().next());
            !matches!(state, Some('Z' | 'X' | 'x'))
        })
    }

    /// A call dropped after the confining thread started the program but
    /// before the call took it over (a turn aborted at that moment) leaves
    /// nothing running: the program's whole group goes, including what it
    /// started in the background.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_program_nobody_took_over_takes_its_group_with_it() {
        use std::time::{Duration, Instant};
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("child.pid");
        let mut command = tokio::process::Command::new("sh");
        command
            .arg("-c")
            .arg(format!("sleep 300 & echo $! > {}; sleep 300", pid_file.display()))
            .process_group(0)
            .kill_on_drop(true);
        let reach = Reach {
            sandbox: dir.path().to_owned(),
            read: Vec::new(),
            write: Vec::new(),
            network: false,
        };
        let mut call = Box::pin(spawn_confined(command, reach, false));
        assert!(
            futures::poll!(&mut call).is_pending(),
            "the program starts on its own thread"
        );
        // The call is never polled again: the program runs, handed to no one.
        let deadline = Instant::now() + Duration::from_secs(20);
        let background = loop {
            let pid = std::fs::read_to_string(&pid_file)
                .ok()
                .and_then(|t| t.strip_suffix('\n')?.trim().parse::<u32>().ok());
            if let Some(pid) = pid {
                break pid;
            }
            assert!(
                Instant::now() < deadline,
                "the program never wrote its child's pid"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        drop(call);
        while alive(background) {
            assert!(
                Instant::now() < deadline,
                "the background child {background} outlived the dropped call"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
