//! [`TempPostgres`]: a throwaway Postgres cluster for tests and benchmarks.
//!
//! `initdb` into a fresh temporary directory, then `pg_ctl start` with the
//! server listening only on a Unix socket in that directory (so its port can
//! never collide with another server's), `fsync=off` (fine for tests,
//! never for users) and 300 connections (a benchmark runs several nodes,
//! each with its pools). Run as root, the server runs as the `postgres` user
//! (`runuser`), which owns the directory.
//!
//! Clean-up does not depend on the test process ending well: one shell
//! process makes the directory, starts the server and then waits for its
//! standard input to close, which happens when the process that owns the
//! cluster exits for any reason (a panic, `SIGKILL`) or drops the cluster.
//! It then stops the server (`pg_ctl stop -m immediate`) and removes the
//! directory. A crash of the owner at any moment, even during `initdb`,
//! still ends in that clean-up, because the shell does every step in order.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};

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
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or(54329);
        let mut child = Command::new("sh")
            .args(["-c", &lifecycle_script(&bin, root, port)])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start the cluster's shell: {e}"))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err("the cluster's shell has no standard input or output".into());
        };
        let mut cluster = TempPostgres {
            dir: PathBuf::new(),
            port,
            watchdog: Mutex::new(Some((child, stdin))),
        };
        // The shell reports its directory, then `ready`, or `failed` and the
        // logs up to `end`. A drop of `cluster` on the error paths closes its
        // input, and the shell cleans up.
        let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
        let mut failure = None;
        for line in lines.by_ref() {
            if let Some(dir) = line.strip_prefix("dir ") {
                cluster.dir = PathBuf::from(dir);
            } else if line == "ready" {
                return Ok(cluster);
            } else if line == "failed" {
                failure = Some(String::new());
                break;
            }
        }
        let mut log = failure.unwrap_or_else(|| "the cluster's shell ended early\n".to_owned());
        for line in lines.take_while(|l| l != "end") {
            log.push_str(&line);
            log.push('\n');
        }
        Err(format!("the throwaway Postgres cluster did not start:\n{log}"))
    }

    /// The cluster shared by the whole process, started at the first call;
    /// it is stopped and removed when the process ends.
    pub fn shared() -> Result<&'static TempPostgres, String> {
        static SHARED: OnceLock<Result<TempPostgres, String>> = OnceLock::new();
        SHARED
            .get_or_init(TempPostgres::start)
            .as_ref()
            .map_err(Clone::clone)
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
        let taken = self
            .watchdog
            .get_mut()
            .map(Option::take)
            .unwrap_or_else(|e| e.into_inner().take());
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

/// The shell script that owns the cluster's whole life: it makes the
/// directory, starts the server, reports, waits for its input to close (the
/// owner dropped the cluster or exited in any way), then stops the server
/// and removes the directory. Everything happens in this one process, in
/// order, so a crash of the owner at any moment still ends in a clean-up.
fn lifecycle_script(bin: &Path, root: bool, port: u16) -> String {
    let as_postgres = if root {
        format!(
            "{} -u postgres -- ",
            quote(&find_program("runuser").display().to_string())
        )
    } else {
        String::new()
    };
    let initdb = quote(&bin.join("initdb").display().to_string());
    let pg_ctl = quote(&bin.join("pg_ctl").display().to_string());
    let tmp = quote(
        &std::env::temp_dir()
            .join("jarvis-pg-XXXXXX")
            .display()
            .to_string(),
    );
    let chown = if root {
        "chown postgres:postgres \"$d\" && "
    } else {
        ""
    };
    format!(
        r#"trap '' INT TERM HUP PIPE
d=$(mktemp -d {tmp}) || exit 1
echo "dir $d"
if {{ {chown}{as_postgres}{initdb} -D "$d/data" -A trust -U postgres -E UTF8 --locale=C -N && \
     {as_postgres}{pg_ctl} -D "$d/data" -l "$d/log" -w -t 60 start \
       -o "-p {port} -k $d -c listen_addresses='' -c max_connections=300 -c fsync=off -c synchronous_commit=off -c full_page_writes=off"; \
   }} >"$d/setup.log" 2>&1
then echo ready
else echo failed; cat "$d/setup.log" "$d/log" 2>/dev/null; echo end
fi
cat >/dev/null
{as_postgres}{pg_ctl} -D "$d/data" -m immediate stop >/dev/null 2>&1
rm -rf "$d"
"#
    )
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

/// `name` from PATH, else from the system folders (which a reduced PATH
/// may leave out); the bare name when it is nowhere.
fn find_program(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from(name))
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

/// `s` in single quotes for `sh`.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}
