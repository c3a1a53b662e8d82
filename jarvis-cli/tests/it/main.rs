//! The `jarvis` binary, run as a user runs it: piped stdin, signals, a
//! server in its own process. Every wait is on output, with a timeout.

mod cluster;
mod discovery;
mod durability;
mod embedder;
mod mcp;
mod mcp_list;
mod memory;
mod otel;
mod real_embedder;
mod replay;
mod usage;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

/// A home directory (and scripts) removed at the end of the test.
struct TempHome(PathBuf);

impl TempHome {
    fn new() -> Self {
        TempHome(tempfile::tempdir().unwrap().keep())
    }

    /// Writes a faux script and returns its path.
    fn script(&self, yaml: &str) -> PathBuf {
        let path = self.0.join("script.yaml");
        std::fs::write(&path, yaml).unwrap();
        path
    }
}

impl Drop for TempHome {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `jarvis` with a clean environment: nothing configured but the home, and
/// no local model server to be found (discovery looks only at port 1 of
/// loopback, where nobody listens), whatever runs on this machine.
fn jarvis(home: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_jarvis"));
    jarvis_env(&mut cmd, home);
    cmd
}

/// The environment of [`jarvis`], for a command that starts `jarvis` itself
/// (an MCP client).
fn jarvis_env(cmd: &mut Command, home: &Path) {
    for (var, _) in std::env::vars() {
        if var.starts_with("JARVIS_") || var.ends_with("_API_KEY") {
            cmd.env_remove(var);
        }
    }
    cmd.env("JARVIS_HOME", home)
        .env("NO_COLOR", "1")
        .env("JARVIS_LLM__DISCOVER", "ollama=http://127.0.0.1:1");
}

/// `jarvis` playing `script`.
fn scripted(home: &TempHome, script: &str) -> Command {
    let path = home.script(script);
    let mut cmd = jarvis(&home.0);
    // A script answers only what it was written for: thinking stays off
    // unless a test turns it on (the demo's tests run with the default, on).
    cmd.env("JARVIS_LLM__PROVIDER", "faux")
        .env("JARVIS_FAUX__SCRIPT", path)
        .env("JARVIS_THINKING__ENABLED", "0");
    cmd
}

/// A plain HTTP/1.1 server on a free loopback port, in a thread: for each
/// request, `answer(request line, body)` gives the content type and body
/// of a 200 reply. Returns the server's `http://127.0.0.1:<port>`.
fn http_server(answer: impl Fn(&str, &[u8]) -> (&'static str, String) + Send + 'static) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some((name, value)) = line.split_once(':')
                    && name.eq_ignore_ascii_case("content-length")
                {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let (kind, reply) = answer(&request_line, &body);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
                reply.len()
            );
        }
    });
    url
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn run_with_stdin(cmd: &mut Command, stdin: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    wait_output(child)
}

/// Waits for the child with a timeout (killing it if it hangs).
fn wait_output(child: Child) -> Output {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(WAIT) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            signal(pid, "KILL");
            panic!("jarvis did not finish in time");
        }
    }
}

fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(status.success(), "kill -{name} {pid}");
}

/// A running child whose stdout is collected as it comes; killed if the
/// test ends without finishing it (a failed assertion must not leave a
/// server running).
struct Running {
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    chunks: mpsc::Receiver<Vec<u8>>,
    out: String,
}

impl Running {
    fn start(cmd: &mut Command) -> Self {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let mut stdout = child.stdout.take().unwrap();
        let (tx, chunks) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        Running {
            child: Some(child),
            stdin,
            chunks,
            out: String::new(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or_default()
    }

    fn say(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Waits until stdout (from `from` on) contains `needle`; returns where it ends.
    fn expect(&mut self, from: usize, needle: &str) -> usize {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(at) = self.out[from..].find(needle) {
                return from + at + needle.len();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.chunks.recv_timeout(left) {
                Ok(chunk) => self.out.push_str(&text(&chunk)),
                Err(_) => panic!("{needle:?} never appeared; stdout so far:\n{}", self.out),
            }
        }
    }

    /// Closes stdin and waits for the exit; returns stderr.
    fn finish(mut self) -> (std::process::ExitStatus, String, String) {
        drop(self.stdin.take());
        let mut child = self.child.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let output = wait_output(child);
        while let Ok(chunk) = self.chunks.recv_timeout(Duration::from_secs(5)) {
            self.out.push_str(&text(&chunk));
        }
        let mut err = String::new();
        let _ = stderr.read_to_string(&mut err);
        (
            output.status,
            std::mem::take(&mut self.out),
            err + &text(&output.stderr),
        )
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn ask_prints_the_answer_of_a_faux_script() {
    let home = TempHome::new();
    let out = scripted(
        &home,
        "replies: [ { text: \"안녕하세요, 주인님.\", chunks: 4 } ]\n",
    )
    .args(["ask", "안녕"])
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "안녕하세요, 주인님.");
    assert!(
        text(&out.stderr).contains("J.A.R.V.I.S."),
        "activity goes to stderr"
    );
}

/// The binary people run keeps its sessions in Postgres when told to: a
/// second home on the same database lists the session the first one wrote.
#[test]
fn the_binary_keeps_sessions_in_postgres() {
    if jarvis_sdk::testing::TempPostgres::shared_or_skip("jarvis with the Postgres store").is_none() {
        return;
    }
    let cluster = jarvis_sdk::testing::TempPostgres::start().unwrap();
    let (one, two) = (TempHome::new(), TempHome::new());
    let postgres = |cmd: &mut Command| {
        cmd.env("JARVIS_STORE__BACKEND", "postgres")
            .env("JARVIS_STORE__POSTGRES_URL", cluster.url());
    };
    let list = |home: &TempHome| {
        let mut cmd = jarvis(&home.0);
        postgres(&mut cmd);
        let out = cmd.arg("sessions").output().unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    assert!(!list(&two).contains("default-karen"));

    let mut ask = scripted(&one, "replies: [ { text: \"기록했습니다.\" } ]\n");
    postgres(&mut ask);
    let out = ask
        .args(["ask", "--agent", "karen", "기억해 줘"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "기록했습니다.");

    let listed = list(&two);
    assert!(listed.contains("default-karen"), "{listed}");
    assert!(
        !two.0.join("sessions").exists(),
        "the second home keeps no session files of its own"
    );
}

#[test]
fn ask_with_a_subagent_prints_the_parents_answer_and_indents_the_subagents_work() {
    let home = TempHome::new();
    std::fs::create_dir_all(home.0.join("team")).unwrap();
    std::fs::write(
        home.0.join("team/main.yaml"),
        "subagents:\n  - { name: researcher, description: reads, tools: [list_dir] }\n",
    )
    .unwrap();
    let script = r#"
rules:
  - when: { agent: main, last_role: user }
    reply: { tool_calls: [ { name: run_subagent, arguments: { name: researcher, task: "목록을 봐" } } ] }
  - when: { agent: main.researcher, last_role: user }
    reply: { text: "보겠습니다", tool_calls: [ { name: list_dir, arguments: { path: "." } } ] }
  - when: { agent: main.researcher, last_role: tool }
    reply: { text: "연구원의 답: 비어 있다" }
  - when: { agent: main, last_role: tool }
    reply: { text: "JARVIS 의 답: 폴더가 비어 있습니다" }
"#;
    let out = scripted(&home, script)
        .args(["ask", "폴더 봐 줘"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "JARVIS 의 답: 폴더가 비어 있습니다");
    let info = text(&out.stderr);
    for line in [
        "    ↳ researcher",
        "      보겠습니다",
        "      · list_dir",
        "      ✓ list_dir",
        "      연구원의 답: 비어 있다",
        "  ✓ run_subagent: 연구원의 답: 비어 있다",
    ] {
        assert!(info.lines().any(|l| l.starts_with(line)), "{line:?} in:\n{info}");
    }
}

#[test]
fn a_spent_session_budget_refuses_the_next_ask_with_a_clear_error() {
    let home = TempHome::new();
    let script = "fallback: { text: \"첫 답\", usage: { input_tokens: 40, output_tokens: 10 } }\n";
    let ask = |words: &str| {
        scripted(&home, script)
            .env("JARVIS_BUDGET__SESSION_TOKENS", "30")
            .args(["ask", words])
            .output()
            .unwrap()
    };
    let first = ask("하나");
    assert!(first.status.success(), "{}", text(&first.stderr));
    assert_eq!(text(&first.stdout).trim(), "첫 답");
    // The ledger outlives the process: the next ask in the session is refused.
    let second = ask("둘");
    assert!(!second.status.success());
    assert_eq!(text(&second.stdout).trim(), "", "no answer");
    let info = text(&second.stderr);
    assert!(
        info.contains("the session budget of agent main (30 tokens) is spent: 50 tokens used"),
        "{info}"
    );
}

#[test]
fn without_a_model_the_demo_plays_and_says_so() {
    let home = TempHome::new();
    let out = jarvis(&home.0).args(["ask", "hello"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("offline demo"));
    assert!(text(&out.stdout).contains("Offline demo"));
    // The tour: KAREN looks notices up from the sample source.
    let out = jarvis(&home.0)
        .args(["ask", "청약 공고 찾아 줘"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("K.A.R.E.N."));
    assert!(
        text(&out.stderr).contains("✓ ask_agent: K.A.R.E.N."),
        "{}",
        text(&out.stderr)
    );
    let out = jarvis(&home.0).args(["sessions"]).output().unwrap();
    assert!(
        text(&out.stdout).contains("peer-main-karen"),
        "{}",
        text(&out.stdout)
    );
    let out = jarvis(&home.0).args(["agents"]).output().unwrap();
    let agents = text(&out.stdout);
    assert!(agents.starts_with("main") && agents.contains("karen"), "{agents}");
}

#[test]
fn mistakes_are_clear_errors() {
    let home = TempHome::new();
    let out = jarvis(&home.0)
        .args(["ask", "x"])
        .env("JARVIS_LLM__PROVIDER", "faux")
        .env("JARVIS_FAUX__SCRIPT", "/nonexistent/script.yaml")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("cannot read faux script"),
        "{}",
        text(&out.stderr)
    );
    let out = jarvis(&home.0)
        .args(["ask", "x"])
        .env("JARVIS_LLM__PROVIDER", "gpt9")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("gpt9"));
    let out = jarvis(&home.0)
        .args(["chat", "--agent", "nobody"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("main, karen"), "{}", text(&out.stderr));
    let out = jarvis(&home.0)
        .args(["chat", "--session", "no-such"])
        .output()
        .unwrap();
    assert!(
        text(&out.stderr).contains("no session no-such"),
        "{}",
        text(&out.stderr)
    );
    let out = jarvis(&home.0)
        .args(["--agent", "nobody", "--port", "0", "--no-open"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no agent \"nobody\""),
        "{}",
        text(&out.stderr)
    );
    let out = jarvis(&home.0)
        .args(["--host", "0.0.0.0", "--port", "0", "--no-open"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("JARVIS_WEB__TOKEN"),
        "{}",
        text(&out.stderr)
    );
    // A token alone would cross the network in the clear: TLS, here or in a proxy.
    let out = jarvis(&home.0)
        .env("JARVIS_WEB__TOKEN", "s3cret")
        .args(["--host", "0.0.0.0", "--port", "0", "--no-open"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("without TLS") && err.contains("--tls-cert") && err.contains("--behind-proxy"),
        "{err}"
    );
    assert!(!home.0.join("server.json").exists());
    let out = jarvis(&home.0)
        .args(["--tls-cert", "cert.pem", "--port", "0", "--no-open"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("--tls-key"), "{}", text(&out.stderr));
}

#[test]
fn a_tls_server_prints_an_https_address_and_ask_reaches_it_through_the_home() {
    let home = TempHome::new();
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let files = tempfile::tempdir().unwrap();
    let (cert_path, key_path) = (files.path().join("cert.pem"), files.path().join("key.pem"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, signing_key.serialize_pem()).unwrap();
    let mut server = Running::start(
        scripted(&home, SLOW)
            .env("JARVIS_WEB__TOKEN", "s3cret")
            .args(["--port", "0", "--no-open", "--tls-cert"])
            .arg(&cert_path)
            .arg("--tls-key")
            .arg(&key_path),
    );
    let at = server.expect(0, "HUD: https://127.0.0.1:");
    server.expect(at, "&token=<the token>");
    // The certificate names `localhost`, not 127.0.0.1, and no authority
    // signed it: the home's client trusts it because the server file names it.
    let out = scripted(&home, SLOW)
        .env("JARVIS_WEB__TOKEN", "s3cret")
        .args(["ask", "hello"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("talking to the server at https://127.0.0.1:"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(text(&out.stdout).trim(), "quick answer");
    signal(server.pid(), "TERM");
    let (status, out, err) = server.finish();
    assert!(status.success(), "{out}\n{err}");
}

const APPROVAL: &str = r#"
rules:
  - when: { agent: main, last_role: user, last_user: "write" }
    reply:
      thinking: "a file, then"
      tool_calls: [ { name: write_file, arguments: { path: "note.txt", content: "hi" } } ]
  - when: { agent: main, last_role: tool }
    reply: { text: "I wrote note.txt.", chunks: 3 }
fallback: { text: "Streaming works.", chunks: 5 }
"#;

#[test]
fn chat_streams_answers_and_asks_approvals_on_piped_stdin() {
    let home = TempHome::new();
    let out = run_with_stdin(scripted(&home, APPROVAL).arg("chat"), "hello\nwrite a note\ny\n");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("J.A.R.V.I.S. › Streaming works."), "{stdout}");
    assert!(stdout.contains("[thinking] a file, then"), "{stdout}");
    assert!(stdout.contains("· write_file"), "{stdout}");
    assert!(stdout.contains("? main wants to run write_file"), "{stdout}");
    assert!(stdout.contains("→ allow"), "{stdout}");
    assert!(stdout.contains("✓ write_file"), "{stdout}");
    assert!(stdout.contains("I wrote note.txt."), "{stdout}");
    let written = std::fs::read_to_string(home.0.join("sandboxes/default-main/note.txt")).unwrap();
    assert_eq!(written, "hi");

    // No answer left on stdin: the request is denied and the chat ends.
    let out = run_with_stdin(scripted(&home, APPROVAL).arg("chat"), "write again\n");
    let stdout = text(&out.stdout);
    assert!(stdout.contains("denied"), "{stdout}");
    assert!(stdout.contains("✗ write_file"), "{stdout}");
}

const SLOW: &str = r#"
rules:
  - when: { last_user: "slow" }
    reply: { delay_ms: 60000, text: "too late" }
fallback: { text: "quick answer" }
"#;

#[test]
fn ctrl_c_aborts_the_turn_and_not_the_program() {
    let home = TempHome::new();
    let mut chat = Running::start(scripted(&home, SLOW).args(["chat", "--agent", "karen"]));
    chat.say("slow please");
    let at = chat.expect(0, "K.A.R.E.N. › ");
    signal(chat.pid(), "INT");
    let at = chat.expect(at, "(aborted)");
    chat.say("and now?");
    // The answer's line ends when its turn ends (`agent_end`, which comes
    // once the turn is recorded).
    chat.expect(at, "quick answer\n");
    // Ctrl-C with no turn running leaves the chat running too.
    signal(chat.pid(), "INT");
    chat.expect(at, "Ctrl-D or /quit leaves");
    let (status, out, err) = chat.finish();
    assert!(status.success(), "{out}\n{err}");
    assert!(!out.contains("too late"));
}

#[test]
fn the_server_runs_in_its_own_process_and_chat_goes_through_it() {
    let home = TempHome::new();
    let mut server =
        Running::start(scripted(&home, SLOW).args(["--port", "0", "--no-open", "--agent", "karen"]));
    let at = server.expect(0, "HUD: http://127.0.0.1:");
    let end = server.expect(at, "\n");
    let url = server.out[at - "http://127.0.0.1:".len()..end]
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    assert!(url.ends_with("/?session=default-karen"), "{url}");

    // `ask` and `chat` find the server through the home and talk over its WebSocket.
    let out = scripted(&home, SLOW)
        .args(["ask", "hello", "--agent", "karen"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("talking to the server at http://127.0.0.1:"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(text(&out.stdout).trim(), "quick answer");
    let out = run_with_stdin(scripted(&home, SLOW).arg("chat"), "hi there\n");
    assert!(
        text(&out.stdout).contains("J.A.R.V.I.S. › quick answer"),
        "{}",
        text(&out.stdout)
    );
    let out = jarvis(&home.0).arg("sessions").output().unwrap();
    let sessions = text(&out.stdout);
    assert!(
        sessions.contains("default-karen") && sessions.contains("default-main"),
        "{sessions}"
    );
    // A second `jarvis` for the same home points at the running server.
    let out = jarvis(&home.0).args(["--no-open"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("already runs"),
        "{}",
        text(&out.stdout)
    );

    // SIGTERM stops it cleanly.
    assert!(home.0.join("server.json").exists());
    signal(server.pid(), "TERM");
    let (status, out, err) = server.finish();
    assert!(status.success(), "{out}\n{err}");
    assert!(!home.0.join("server.json").exists(), "the server file is removed");
}

#[test]
fn chat_shows_a_reminder_of_a_due_promise_without_being_asked() {
    let home = TempHome::new();
    let due = r#"{"op":"open","v":1,"loop":{"id":"l-1","session_id":"default-main","agent_id":"main","text":"SH 공고 확인하기","kind":"request","due":"2020-01-01T00:00:00Z","condition":null,"created_at":"2020-01-01T00:00:00Z","closed_at":null}}"#;
    std::fs::write(home.0.join("openloops.jsonl"), format!("{due}\n")).unwrap();
    let mut chat = Running::start(scripted(&home, "fallback: { text: \"네.\" }").arg("chat"));
    chat.expect(0, "» 잊지 않으셨죠? (A reminder:) SH 공고 확인하기");
    let (status, _, err) = chat.finish();
    assert!(status.success(), "{err}");
    // The reminder was the request: it is closed in its own session.
    let loops = std::fs::read_to_string(home.0.join("openloops.jsonl")).unwrap();
    assert!(
        loops
            .lines()
            .any(|l| l.contains("\"op\":\"close\"") && l.contains("\"l-1\"")),
        "{loops}"
    );
}

/// `jarvis eval`: a table and the pass rate on stdout; exit 0 at or above
/// the threshold, 1 below it, 2 for a suite that cannot be read; the home
/// itself is not written.
#[test]
fn eval_runs_a_suite_and_exits_by_its_threshold() {
    let home = TempHome::new();
    let script = r#"
rules:
  - when: { last_user: "날씨" }
    reply: { text: "맑아요, 20도." }
fallback: { text: "네." }
"#;
    let suite = home.0.join("suite.yaml");
    std::fs::write(
        &suite,
        "threshold: 0.5\ncases:\n  - { name: weather, prompt: 날씨 어때, checks: { contains: 맑아요, max_steps: 1 } }\n  - { name: greeting, prompt: 안녕, checks: { regex: \"^안녕\" } }\n",
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let out = scripted(&home, script)
            .arg("eval")
            .arg(&suite)
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, stderr) = run(&[]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("pass  weather"), "{stdout}");
    assert!(stdout.contains("FAIL  greeting"), "{stdout}");
    assert!(stdout.contains("the answer does not match /^안녕/"), "{stdout}");
    assert!(stdout.contains("1/2 passed (50%), threshold 50%: ok"), "{stdout}");

    let (code, stdout, _) = run(&["--threshold", "0.75"]);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.contains("below the threshold"), "{stdout}");

    std::fs::write(&suite, "cases: [{name: a, prompt: b, checks: {contain: x}}]").unwrap();
    let (code, stdout, stderr) = run(&[]);
    assert_eq!(code, Some(2), "{stdout}");
    assert!(stderr.contains("unknown field"), "{stderr}");

    let mut left: Vec<String> = std::fs::read_dir(&home.0)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["script.yaml", "suite.yaml"], "the home was not written");
}
