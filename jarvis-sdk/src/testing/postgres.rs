//! [`TempPostgres`]: a throwaway Postgres cluster for tests and benchmarks.
//!
//! `initdb` into a fresh temporary directory, then `pg_ctl start` with the
//! server listening only on a Unix socket in that directory (so its port can
//! never collide with another server's) and `fsync=off` (fine for tests,
//! never for users). Run as root, the server runs as the `postgres` user
//! (`runuser`), which owns the directory.
//!
//! Clean-up does not depend on the test process ending well: before anything
//! is started, a watchdog shell is spawned that waits for its standard input
//! to close, which happens when the process that owns the cluster exits for
//! any reason (a panic, `SIGKILL`), or when the cluster is dropped. It then
//! stops the server (`pg_ctl stop -m immediate`) and removes the directory.

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

/// The environment variable that turns a missing Postgres into a failure.
pub const REQUIRE_POSTGRES_ENV: &str = "JARVIS_REQUIRE_POSTGRES";

/// A running throwaway Postgres cluster. See the module docs.
#[derive(Debug)]
pub struct TempPostgres {
    dir: PathBuf,
    port: u16,
    watchdog: Mutex<Option<(Child, ChildStdin)>>,
}

impl TempPostgres {
    /// Starts a cluster of its own; it is stopped and removed on drop, or
    /// when the process ends. `Err` explains why it could not start (no
    /// Postgres binaries, no `postgres` user when run as root, …).
    pub fn start() -> Result<Self, String> {
        let bin = find_bin_dir().ok_or_else(|| {
            "no Postgres server binaries (initdb, pg_ctl) on PATH or in /usr/lib/postgresql/*/bin".to_owned()
        })?;
        let root = running_as_root();
        if root && !user_exists("postgres") {
            return Err("running as root, but there is no `postgres` user to run the server as".into());
        }
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let dir = std::env::temp_dir().join(format!("jarvis-pg-{}-{nanos:x}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or(54329);
        let data = dir.join("data");
        let as_postgres = |program: &Path| -> Command {
            if root {
                let mut c = Command::new("runuser");
                c.args(["-u", "postgres", "--"]).arg(program);
                c
            } else {
                Command::new(program)
            }
        };
        let stop = as_postgres(&bin.join("pg_ctl"));
        let stop_line = format!(
            "{} -D {} -m immediate stop",
            shell_words(&stop),
            quote(&data.display().to_string())
        );
        let script = format!(
            "trap '' INT TERM HUP; cat >/dev/null; {stop_line} >/dev/null 2>&1; rm -rf {}",
            quote(&dir.display().to_string())
        );
        let mut child = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start the clean-up watchdog: {e}"))?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| "the clean-up watchdog has no standard input".to_owned())?;
        let cluster = TempPostgres {
            dir: dir.clone(),
            port,
            watchdog: Mutex::new(Some((child, stdin))),
        };
        if root {
            run(Command::new("chown").arg("postgres:postgres").arg(&dir))?;
        }
        run(as_postgres(&bin.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "-N"]))?;
        let server_options = format!(
            "-p {port} -k {} -c listen_addresses='' -c fsync=off -c synchronous_commit=off -c full_page_writes=off",
            dir.display()
        );
        run(as_postgres(&bin.join("pg_ctl"))
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(dir.join("log"))
            .args(["-w", "-t", "60", "-o", &server_options, "start"]))
        .map_err(|e| {
            let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
            format!("{e}\nserver log:\n{log}")
        })?;
        Ok(cluster)
    }

    /// The cluster shared by the whole process, started at the first call;
    /// it is stopped and removed when the process ends.
    pub fn shared() -> Result<&'static TempPostgres, String> {
        static SHARED: OnceLock<Result<TempPostgres, String>> = OnceLock::new();
        SHARED.get_or_init(TempPostgres::start).as_ref().map_err(Clone::clone)
    }

    /// The shared cluster, or `None` after printing a loud skip line naming
    /// `what`. With `JARVIS_REQUIRE_POSTGRES=1` a cluster that cannot start
    /// panics instead.
    pub fn shared_or_skip(what: &str) -> Option<&'static TempPostgres> {
        match TempPostgres::shared() {
            Ok(cluster) => Some(cluster),
            Err(reason) if required() => {
                panic!("{REQUIRE_POSTGRES_ENV}=1 but Postgres cannot start for {what}: {reason}")
            }
            Err(reason) => {
                // Written past the test harness's capture, so it is seen.
                let _ = writeln!(
                    std::io::stderr(),
                    "\n!!! SKIPPED {what}: {reason}\n!!! (set {REQUIRE_POSTGRES_ENV}=1 to make this a failure)\n"
                );
                None
            }
        }
    }

    /// The connection string of the `postgres` database.
    pub fn url(&self) -> String {
        self.url_for("postgres")
    }

    /// The connection string of database `dbname`.
    pub fn url_for(&self, dbname: &str) -> String {
        format!(
            "host={} port={} user=postgres dbname={dbname}",
            self.dir.display(),
            self.port
        )
    }

    /// The cluster's directory (data, log and socket).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The port (it names the socket file; the server listens on no TCP port).
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for TempPostgres {
    fn drop(&mut self) {
        let taken = self.watchdog.get_mut().map(Option::take).unwrap_or_else(|e| e.into_inner().take());
        if let Some((mut child, stdin)) = taken {
            drop(stdin);
            let _ = child.wait();
        }
    }
}

/// Whether `JARVIS_REQUIRE_POSTGRES=1`.
fn required() -> bool {
    std::env::var(REQUIRE_POSTGRES_ENV).is_ok_and(|v| v == "1")
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The directory holding `initdb` and `pg_ctl`: from PATH, else the newest
/// `/usr/lib/postgresql/<version>/bin` (where Debian puts them).
fn find_bin_dir() -> Option<PathBuf> {
    let has_both = |d: &Path| d.join("initdb").is_file() && d.join("pg_ctl").is_file();
    if let Some(path) = std::env::var_os("PATH") {
        for d in std::env::split_paths(&path) {
            if has_both(&d) {
                return Some(d);
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            has_both(&bin).then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("Uid:"))?;
            line.split_whitespace().nth(2).map(|euid| euid == "0")
        })
        .unwrap_or_else(|| std::env::var("USER").is_ok_and(|u| u == "root"))
}

fn user_exists(name: &str) -> bool {
    std::fs::read_to_string("/etc/passwd")
        .map(|p| p.lines().any(|l| l.split(':').next() == Some(name)))
        .unwrap_or(false)
        || Command::new("id")
            .arg(name)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

/// A command's program and arguments as one shell line.
fn shell_words(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| quote(&a.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `s` in single quotes for `sh`.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}
