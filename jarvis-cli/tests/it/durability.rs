//! What survives a restart, tested through the real `jarvis` binary on a
//! default home (no Postgres): a stop is a clean SIGTERM or a SIGKILL, and
//! everything the README promises must be there afterwards, once.
//!
//! - memory: a fact and an episode are recalled after either stop;
//! - a turn waiting for an approval resumes with the same request (allow,
//!   deny, a timeout counted from the first ask);
//! - a background turn and a foreground turn of one session land as
//!   contiguous blocks, and the next turn sees them in that order;
//! - a crash loop of SIGKILLs at random points during turns, `/remember`,
//!   due promises, a scheduled job and a watch report loses and doubles
//!   nothing.

use jarvis_pack_housing::{
    FileWatchStore, FixtureNoticeSource, MemoryWatchStore, NoticeSource, WATCHES_FILE, WatchStore,
    new_notices,
};
use jarvis_sdk::agent::{LoopKind, OpenLoop};
use jarvis_sdk::common::Timestamp;
use jarvis_sdk::memory::{Agents, Layer, MEMORY_DB_FILE, MemoryFilter, MemoryStore, SqliteMemoryStore};
use jarvis_server::client::{Client, Connection, Incoming};
use jarvis_server::protocol::{ClientDecision, ClientMessage};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

/// A home and a place for the servers' logs beside it.
pub(crate) struct Home {
    dir: tempfile::TempDir,
    logs: tempfile::TempDir,
    runs: usize,
}

impl Home {
    pub(crate) fn new(script: &str) -> Self {
        let home = Self {
            dir: tempfile::tempdir().unwrap(),
            logs: tempfile::tempdir().unwrap(),
            runs: 0,
        };
        std::fs::write(home.logs.path().join("script.yaml"), script).unwrap();
        home
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    fn requests_path(&self) -> PathBuf {
        self.logs.path().join("requests.jsonl")
    }

    /// Every request the model received so far, in order.
    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(self.requests_path())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Starts `jarvis` on this home with `env` on top of the defaults.
    pub(crate) fn serve(&mut self, env: &[(&str, &str)]) -> Server {
        self.runs += 1;
        let stderr =
            std::fs::File::create(self.logs.path().join(format!("server-{}.log", self.runs))).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_jarvis"));
        for (var, _) in std::env::vars() {
            if var.starts_with("JARVIS_") || var.ends_with("_API_KEY") {
                cmd.env_remove(var);
            }
        }
        cmd.env("JARVIS_HOME", self.path())
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "warn")
            .env("JARVIS_LLM__PROVIDER", "faux")
            .env("JARVIS_FAUX__SCRIPT", self.logs.path().join("script.yaml"))
            .env("JARVIS_FAUX__REQUEST_LOG", self.requests_path())
            .env("JARVIS_AGENDA__MODEL_JUDGE", "0")
            .env("JARVIS_THINKING__ENABLED", "0")
            .env("JARVIS_HOUSING__MODE", "fixture")
            .args(["--no-open", "--port", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(at) = line.find("http://") {
                    let url = &line[at..];
                    let base = url.split("/?").next().unwrap_or(url).to_owned();
                    let _ = tx.send(base);
                }
            }
        });
        let base = match rx.recv_timeout(WAIT) {
            Ok(base) => base,
            Err(_) => {
                let _ = child.kill();
                let log = std::fs::read_to_string(self.logs.path().join(format!("server-{}.log", self.runs)));
                panic!("jarvis did not start; its log: {log:?}");
            }
        };
        Server {
            child: Some(child),
            base,
        }
    }

    /// The history of session `id` as its file holds it.
    fn history(&self, id: &str) -> Vec<Value> {
        std::fs::read_to_string(self.path().join(format!("sessions/{id}.jsonl")))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

/// A running `jarvis`; killed if the test ends without stopping it.
pub(crate) struct Server {
    child: Option<Child>,
    base: String,
}

impl Server {
    fn client(&self) -> Client {
        Client::new(&self.base, None).unwrap()
    }

    /// SIGKILL: the process ends at once, whatever it was doing.
    pub(crate) fn kill(mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// SIGTERM: the server stops gracefully.
    pub(crate) fn stop(mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(status.success(), "a clean stop: {status}");
                return;
            }
            assert!(Instant::now() < deadline, "jarvis stops within {WAIT:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The frames of a connection, as JSON.
pub(crate) struct Ws(pub(crate) Connection);

impl Ws {
    pub(crate) async fn open(server: &Server, session: &str, agent: Option<&str>) -> Self {
        Ws(server.client().connect(session, agent).await.unwrap())
    }

    pub(crate) async fn prompt(&self, text: &str) {
        self.0
            .send(ClientMessage::Prompt {
                text: text.to_owned(),
            })
            .await
            .unwrap();
    }

    pub(crate) async fn decide(&self, request_id: &str, decision: ClientDecision) {
        self.0
            .send(ClientMessage::Approval {
                request_id: request_id.to_owned(),
                decision,
            })
            .await
            .unwrap();
    }

    /// Frames until one matches `stop` (included).
    pub(crate) async fn until(&mut self, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut frames = Vec::new();
        loop {
            let next = tokio::time::timeout(WAIT, self.0.recv()).await;
            let frame = match next {
                Ok(Some(Incoming::Message(message))) => serde_json::to_value(message).unwrap(),
                Ok(other) => {
                    panic!("the connection ended ({other:?}) before the frame came; saw {frames:#?}")
                }
                Err(_) => panic!("the frame did not come in time; saw {frames:#?}"),
            };
            let done = stop(&frame);
            frames.push(frame);
            if done {
                return frames;
            }
        }
    }
}

pub(crate) fn kind(frame: &Value) -> &str {
    frame["type"].as_str().unwrap_or_default()
}

pub(crate) fn is_end(frame: &Value) -> bool {
    kind(frame) == "agent_end"
}

// ------------------------------------------------------------------ memory

const RECALL: &str = r#"
rules:
  - when: { last_role: user, last_user: "뭐였지" }
    reply: { tool_calls: [ { name: recall_episodes, arguments: { query: "고양이 이름" } } ] }
  - when: { last_role: tool }
    reply: { text: "기억났어요." }
fallback: { text: "기억할게요." }
"#;

/// SIGTERM sent the moment the URL is printed is a clean stop: the
/// handler is in place before the server announces itself (before the fix
/// it was installed on the shutdown future's first poll, and a SIGTERM in
/// that gap killed the process by the default disposition).
#[test]
fn sigterm_as_soon_as_the_url_is_printed_is_a_clean_stop() {
    let mut home = Home::new(MEMO);
    for _ in 0..5 {
        home.serve(&[]).stop();
    }
}

#[test]
fn a_fact_and_an_episode_are_recalled_after_a_clean_stop_and_after_sigkill() {
    for kill in [false, true] {
        let mut home = Home::new(RECALL);
        let rt = runtime();
        let server = home.serve(&[]);
        rt.block_on(async {
            let mut ws = Ws::open(&server, "default-main", None).await;
            ws.prompt("/remember 고양이 목걸이는 초록색이다").await;
            ws.until(is_end).await;
            ws.prompt("내 고양이 이름은 나비야").await;
            ws.until(is_end).await;
        });
        // The answer was seen: from here on it must survive.
        if kill {
            server.kill();
        } else {
            server.stop();
        }
        let server = home.serve(&[]);
        rt.block_on(async {
            let mut ws = Ws::open(&server, "s-recall", Some("main")).await;
            ws.prompt("우리 고양이 이름이랑 목걸이 색이 뭐였지?").await;
            let frames = ws.until(is_end).await;
            assert_eq!(frames.last().unwrap()["final_message"]["content"], "기억났어요.");
        });
        server.stop();
        let requests: Vec<Value> = home
            .requests()
            .into_iter()
            .filter(|r| r["session_id"] == "s-recall" && r["purpose"] == "step")
            .collect();
        assert_eq!(requests.len(), 2, "a step that recalls, a step that answers");
        let texts = |r: &Value| -> Vec<String> {
            r["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
                .collect()
        };
        let first = texts(&requests[0]);
        let memory = first
            .iter()
            .find(|t| t.contains("[장기 기억]"))
            .unwrap_or_else(|| panic!("the request carries long-term memory (kill: {kill}): {first:#?}"));
        assert!(memory.contains("나비"), "the episode came back: {memory}");
        assert!(
            first
                .iter()
                .any(|t| t.contains("[핵심 사실]") && t.contains("초록색")),
            "the remembered fact came back: {first:#?}"
        );
        let second = texts(&requests[1]);
        let tool = requests[1]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "tool")
            .expect("the recall result");
        assert!(
            tool["content"].as_str().unwrap().contains("나비"),
            "recall_episodes found the episode: {second:#?}"
        );
    }
}

// --------------------------------------------------------------- approvals

pub(crate) const MEMO: &str = r#"
rules:
  - when: { last_role: user, last_user: "메모" }
    reply: { tool_calls: [ { name: write_file, arguments: { path: "memo.txt", content: "hello" } } ] }
  - when: { last_role: tool }
    reply: { text: "끝났어요." }
fallback: { text: "네." }
"#;

/// Starts a turn that asks for `write_file`, then SIGKILLs the server while
/// the request waits; answers the request's id.
fn kill_while_waiting(home: &mut Home, rt: &tokio::runtime::Runtime, env: &[(&str, &str)]) -> String {
    let server = home.serve(env);
    let request = rt.block_on(async {
        let mut ws = Ws::open(&server, "default-main", None).await;
        ws.prompt("메모 남겨 줘").await;
        let frames = ws.until(|f| kind(f) == "approval_request").await;
        frames.last().unwrap()["request_id"].as_str().unwrap().to_owned()
    });
    server.kill();
    request
}

/// After the resumed turn's end, a second turn and its end: no other
/// `agent_end` may come in between.
async fn one_end_then_a_fresh_turn(ws: &mut Ws, mut frames: Vec<Value>) -> Vec<Value> {
    ws.prompt("다음").await;
    let more = ws.until(is_end).await;
    let ends = more.iter().filter(|f| is_end(f)).count();
    assert_eq!(ends, 1, "exactly one agent_end for the resumed turn: {more:#?}");
    frames.extend(more);
    frames
}

fn tool_results(history: &[Value]) -> Vec<String> {
    history
        .iter()
        .filter(|e| e["kind"] == "message" && e["message"]["role"] == "tool")
        .map(|e| e["message"]["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn turn_ids(history: &[Value]) -> Vec<String> {
    history
        .iter()
        .filter(|e| e["kind"] == "turn_start")
        .map(|e| e["turn_id"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn an_approval_survives_sigkill_and_allow_runs_the_tool_once() {
    let mut home = Home::new(MEMO);
    let rt = runtime();
    let request_id = kill_while_waiting(&mut home, &rt, &[]);
    let server = home.serve(&[]);
    rt.block_on(async {
        let mut ws = Ws::open(&server, "default-main", None).await;
        let frames = ws.until(|f| kind(f) == "approval_request").await;
        assert!(
            frames
                .iter()
                .any(|f| kind(f) == "agent_start" && f["resumed"] == true),
            "the screen learns the turn resumed: {frames:#?}"
        );
        assert_eq!(frames.last().unwrap()["request_id"], request_id.as_str());
        ws.decide(&request_id, ClientDecision::Allow).await;
        let frames = ws.until(is_end).await;
        assert_eq!(frames.last().unwrap()["final_message"]["content"], "끝났어요.");
        one_end_then_a_fresh_turn(&mut ws, frames).await;
    });
    server.stop();
    let memo = home.path().join("sandboxes/default-main/memo.txt");
    assert_eq!(std::fs::read_to_string(memo).unwrap(), "hello");
    let history = home.history("default-main");
    let ids = turn_ids(&history);
    assert_eq!(
        ids.len(),
        2,
        "the resumed turn and the next, each once: {history:#?}"
    );
    assert_ne!(ids[0], ids[1]);
    assert_eq!(tool_results(&history).len(), 1, "the tool ran once");
}

#[test]
fn an_approval_survives_sigkill_and_deny_reaches_the_model() {
    let mut home = Home::new(MEMO);
    let rt = runtime();
    let request_id = kill_while_waiting(&mut home, &rt, &[]);
    let server = home.serve(&[]);
    rt.block_on(async {
        let mut ws = Ws::open(&server, "default-main", None).await;
        let frames = ws.until(|f| kind(f) == "approval_request").await;
        assert_eq!(frames.last().unwrap()["request_id"], request_id.as_str());
        ws.decide(&request_id, ClientDecision::Deny).await;
        let frames = ws.until(is_end).await;
        one_end_then_a_fresh_turn(&mut ws, frames).await;
    });
    server.stop();
    assert!(!home.path().join("sandboxes/default-main/memo.txt").exists());
    let results = tool_results(&home.history("default-main"));
    assert_eq!(results.len(), 1);
    assert!(results[0].contains("the person denied it"), "{results:?}");
}

#[test]
fn an_approval_timeout_counts_across_a_sigkill() {
    let mut home = Home::new(MEMO);
    let rt = runtime();
    let env = [("JARVIS_APPROVAL__TIMEOUT_SECS", "4")];
    let asked = Instant::now();
    let _request_id = kill_while_waiting(&mut home, &rt, &env);
    // The process stays down past the timeout, counted from the first ask.
    while asked.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let restarted = Instant::now();
    let server = home.serve(&env);
    let deadline = Instant::now() + WAIT;
    loop {
        let results = tool_results(&home.history("default-main"));
        if !results.is_empty() {
            assert!(results[0].contains("nobody approved it in time"), "{results:?}");
            break;
        }
        assert!(Instant::now() < deadline, "the resumed turn ends");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        restarted.elapsed() < Duration::from_secs(4),
        "the timeout was not counted again from the restart"
    );
    server.stop();
    assert!(!home.path().join("sandboxes/default-main/memo.txt").exists());
}

// ------------------------------------------------------------- interleaving

const DUAL: &str = r#"
rules:
  - when: { last_role: user, last_user: "천천히" }
    reply: { delay_ms: 2500, text: "느린 답" }
  - when: { last_role: user, last_user: "빨리" }
    reply: { text: "빠른 답" }
fallback: { text: "세 번째 답" }
"#;

#[test]
fn a_background_turn_and_a_quick_turn_each_land_as_one_block() {
    let mut home = Home::new(DUAL);
    let rt = runtime();
    let server = home.serve(&[("JARVIS_DUAL__AFTER_SECS", "1")]);
    rt.block_on(async {
        let mut ws = Ws::open(&server, "default-main", None).await;
        ws.prompt("천천히 해 줘").await;
        ws.until(|f| kind(f) == "proactive_message" && f["kind"] == "filler")
            .await;
        ws.prompt("빨리 해 줘").await;
        let frames = ws
            .until(|f| is_end(f) && f["final_message"]["content"] == "빠른 답")
            .await;
        assert!(!frames.is_empty());
        ws.until(|f| kind(f) == "proactive_message" && f["kind"] == "answer" && f["text"] == "느린 답")
            .await;
        ws.prompt("다음").await;
        ws.until(|f| is_end(f) && f["final_message"]["content"] == "세 번째 답")
            .await;
    });
    server.stop();
    let blocks: Vec<Vec<String>> = home
        .history("default-main")
        .split_inclusive(|e| e["kind"] == "turn_end")
        .map(|block| {
            block
                .iter()
                .map(|e| match e["kind"].as_str().unwrap() {
                    "message" => e["message"]["content"].as_str().unwrap_or_default().to_owned(),
                    other => other.to_owned(),
                })
                .collect()
        })
        .collect();
    assert_eq!(
        blocks,
        [
            vec!["turn_start", "빨리 해 줘", "빠른 답", "turn_end"],
            vec!["turn_start", "천천히 해 줘", "느린 답", "turn_end"],
            vec!["turn_start", "다음", "세 번째 답", "turn_end"],
        ],
        "every turn contiguous, in the order they ended"
    );
    let last = home
        .requests()
        .into_iter()
        .rev()
        .find(|r| r["purpose"] == "step")
        .unwrap();
    let conversation: Vec<&str> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| m["content"].as_str().unwrap())
        .filter(|t| !t.starts_with('['))
        .collect();
    assert_eq!(
        conversation,
        ["빨리 해 줘", "빠른 답", "천천히 해 줘", "느린 답", "다음"],
        "the next turn sees the background turn's block after the quick one"
    );
}

// --------------------------------------------------------------- crash loop

/// A small seeded generator (xorshift64*), so a seed replays a run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

const LOOP_SCRIPT: &str = r#"
rules:
  - when: { last_role: user, last_user: "^느린" }
    reply: { delay_ms: 120, text: "천천히 답합니다.", chunks: 4, chunk_delay_ms: 20 }
fallback: { text: "네, 알겠어요." }
"#;

/// Promises due in the past, in the sessions people would open.
fn due_loops(home: &Path) -> Vec<OpenLoop> {
    let loops: Vec<OpenLoop> = [
        ("loop-a", "default-main", "main"),
        ("loop-b", "default-main", "main"),
        ("loop-c", "default-karen", "karen"),
    ]
    .into_iter()
    .map(|(id, session, agent)| OpenLoop {
        id: id.into(),
        session_id: session.into(),
        agent_id: agent.into(),
        text: format!("{id}: 서류 챙기기"),
        kind: LoopKind::Promise,
        due: Some(Timestamp::from_millis(1_700_000_000_000)),
        condition: None,
        created_at: Timestamp::from_millis(1_690_000_000_000),
        closed_at: None,
        reminded_at: None,
    })
    .collect();
    let lines: String = loops
        .iter()
        .map(|l| format!("{}\n", json!({"op": "open", "v": 1, "loop": l})))
        .collect();
    std::fs::write(home.join("openloops.jsonl"), lines).unwrap();
    loops
}

/// What one cycle saw complete: (prompt, completed).
type Done = Vec<(String, bool)>;

/// Runs mixed activity against `server` until it is killed: turns in
/// `default-main` (some slow) and `/remember` facts, each recorded as sent
/// and, once its end arrived, as completed.
fn activity(
    server: &Server,
    cycle: usize,
    rng_seed: u64,
) -> (
    std::thread::JoinHandle<()>,
    std::sync::Arc<std::sync::Mutex<Done>>,
) {
    let base = server.base.clone();
    let done: std::sync::Arc<std::sync::Mutex<Done>> = std::sync::Arc::default();
    let record = done.clone();
    let handle = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let client = Client::new(&base, None).unwrap();
            let Ok(mut conn) = client.connect("default-main", None).await else {
                return;
            };
            let mut rng = Rng(rng_seed | 1);
            for n in 0.. {
                let text = match rng.below(3) {
                    0 => format!("/remember fact-{cycle}-{n} 는 꼭 기억할 사실이다"),
                    1 => format!("느린 turn-{cycle}-{n}"),
                    _ => format!("turn-{cycle}-{n}"),
                };
                record.lock().unwrap().push((text.clone(), false));
                if conn
                    .send(ClientMessage::Prompt { text: text.clone() })
                    .await
                    .is_err()
                {
                    return;
                }
                loop {
                    match tokio::time::timeout(WAIT, conn.recv()).await {
                        Ok(Some(Incoming::Message(message))) => {
                            let frame = serde_json::to_value(message).unwrap();
                            if is_end(&frame) {
                                let mut done = record.lock().unwrap();
                                if let Some(last) = done.last_mut() {
                                    last.1 = true;
                                }
                                break;
                            }
                            if kind(&frame) == "error" && frame["code"] == "busy" {
                                // A reminder or a resumed turn: try again.
                                record.lock().unwrap().pop();
                                break;
                            }
                        }
                        _ => return,
                    }
                }
            }
        });
    });
    (handle, done)
}

fn user_messages(history: &[Value]) -> Vec<String> {
    history
        .iter()
        .filter(|e| e["kind"] == "message" && e["message"]["role"] == "user")
        .map(|e| e["message"]["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn proactive(history: &[Value]) -> Vec<(String, String)> {
    history
        .iter()
        .filter(|e| e["kind"] == "proactive")
        .map(|e| {
            (
                e["message_id"].as_str().unwrap_or_default().to_owned(),
                e["text"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// The facts in the memory database, each with how often it is there.
fn facts(home: &Path, rt: &tokio::runtime::Runtime) -> BTreeMap<String, usize> {
    rt.block_on(async {
        let store = SqliteMemoryStore::open(home.join(MEMORY_DB_FILE)).await.unwrap();
        let records = store
            .list(&MemoryFilter::for_user("default").layer(Layer::Semantic, Agents::Any))
            .await
            .unwrap();
        let mut count = BTreeMap::new();
        for record in records {
            if let Some(fact) = record.text.split_whitespace().find(|w| w.starts_with("fact-")) {
                *count.entry(fact.to_owned()).or_insert(0) += 1;
            }
        }
        count
    })
}

#[test]
fn fifty_sigkills_at_random_points_lose_and_double_nothing() {
    let seed: u64 = std::env::var("JARVIS_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    let kills: usize = std::env::var("JARVIS_CRASH_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    eprintln!("crash loop: seed {seed} (JARVIS_CRASH_SEED={seed} replays it), {kills} kills");
    let mut rng = Rng(seed | 1);
    let mut home = Home::new(LOOP_SCRIPT);
    let rt = runtime();
    let loops = due_loops(home.path());
    rt.block_on(async {
        let watches = FileWatchStore::new(home.path().join(WATCHES_FILE));
        watches.add(Some("서울".into()), None).await.unwrap();
    });
    std::fs::create_dir_all(home.path().join("schedules")).unwrap();
    std::fs::write(home.path().join("schedules/ping.yaml"), "prompt: 핑\nevery: 1m\n").unwrap();
    let env = [
        ("JARVIS_REFLECTION__INTERVAL_SECS", "1"),
        ("JARVIS_REFLECTION__MIN_GAP_SECS", "0"),
        ("JARVIS_HOUSING__WATCH_EVERY_SECS", "60"),
        ("JARVIS_DUAL__AFTER_SECS", "0"),
    ];

    let mut sent: Vec<(String, bool)> = Vec::new();
    for cycle in 0..kills {
        let server = home.serve(&env);
        let (handle, done) = activity(&server, cycle, rng.next());
        // A random point: anywhere from the first moments to well into the run.
        std::thread::sleep(Duration::from_millis(rng.below(900)));
        server.kill();
        let _ = handle.join();
        sent.extend(done.lock().unwrap().drain(..));
    }

    // A last, clean run lets what was due go out: reminders, the outbox,
    // the next watch slot.
    let server = home.serve(&env);
    let expected_notices: BTreeSet<String> = rt.block_on(async {
        let probe = MemoryWatchStore::new();
        let watch = probe.add(Some("서울".into()), None).await.unwrap().watch;
        let mut keys = BTreeSet::new();
        for source in [FixtureNoticeSource::lh(), FixtureNoticeSource::sh()] {
            for notice in new_notices(&probe, &watch.id, &source as &dyn NoticeSource)
                .await
                .unwrap()
            {
                keys.insert(notice.key());
            }
        }
        keys
    });
    let fixture_titles: BTreeMap<String, String> = rt.block_on(async {
        let mut titles = BTreeMap::new();
        for source in [FixtureNoticeSource::lh(), FixtureNoticeSource::sh()] {
            for notice in source.notices() {
                titles.insert(notice.key(), notice.title.clone());
            }
        }
        titles
    });
    let deadline = Instant::now() + Duration::from_secs(150);
    loop {
        let main = proactive(&home.history("default-main"));
        let karen = proactive(&home.history("default-karen"));
        let reminded = loops
            .iter()
            .filter(|l| {
                let id = format!("remind-{}", l.id);
                main.iter().chain(&karen).any(|(m, _)| *m == id)
            })
            .count();
        let reported: BTreeSet<String> = expected_notices
            .iter()
            .filter(|key| {
                let line = format!(". {}", fixture_titles[*key]);
                karen
                    .iter()
                    .any(|(m, text)| m.starts_with("watch-") && text.contains(&line))
            })
            .cloned()
            .collect();
        if reminded == loops.len() && reported == expected_notices {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "everything due went out: {reminded}/{} reminders, {}/{} notices",
            loops.len(),
            reported.len(),
            expected_notices.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    server.stop();

    // Completed turns: each once; no prompt twice.
    let history = home.history("default-main");
    let users = user_messages(&history);
    let completed_turns: Vec<&String> = sent
        .iter()
        .filter(|(t, done)| *done && !t.starts_with('/'))
        .map(|(t, _)| t)
        .collect();
    let mut missing = 0;
    let mut doubled = 0;
    for turn in &completed_turns {
        match users.iter().filter(|u| u == turn).count() {
            0 => missing += 1,
            1 => {}
            _ => doubled += 1,
        }
    }
    let mut counts: BTreeMap<&String, usize> = BTreeMap::new();
    for u in &users {
        *counts.entry(u).or_insert(0) += 1;
    }
    doubled += counts.values().filter(|n| **n > 1).count();
    // Every turn's entries are one contiguous block.
    let mut open = false;
    for e in &history {
        match e["kind"].as_str().unwrap() {
            "turn_start" => {
                assert!(!open, "a turn began inside another: {e}");
                open = true;
            }
            "turn_end" => {
                assert!(open, "a turn ended that did not begin: {e}");
                open = false;
            }
            "message" => assert!(open, "a message outside a turn: {e}"),
            _ => {}
        }
    }
    assert!(!open, "the last turn is closed");

    // Remembered facts: each completed `/remember` is in memory once.
    let stored = facts(home.path(), &rt);
    let completed_facts: Vec<String> = sent
        .iter()
        .filter(|(t, done)| *done && t.starts_with("/remember"))
        .map(|(t, _)| t.split_whitespace().nth(1).unwrap().to_owned())
        .collect();
    for fact in &completed_facts {
        match stored.get(fact) {
            None => missing += 1,
            Some(1) => {}
            Some(_) => doubled += 1,
        }
    }
    doubled += stored.values().filter(|n| **n > 1).count();

    // Reminders and watch reports: each once.
    let all: Vec<(String, String)> = ["default-main", "default-karen"]
        .iter()
        .flat_map(|id| proactive(&home.history(id)))
        .collect();
    let mut ids = BTreeMap::new();
    for (id, _) in &all {
        *ids.entry(id.clone()).or_insert(0) += 1;
    }
    doubled += ids.values().filter(|n| **n > 1).count();
    let reminders = all.iter().filter(|(id, _)| id.starts_with("remind-")).count();
    let reports: Vec<&(String, String)> = all.iter().filter(|(id, _)| id.starts_with("watch-")).collect();
    for key in &expected_notices {
        let line = format!(". {}", fixture_titles[key]);
        match reports.iter().filter(|(_, text)| text.contains(&line)).count() {
            0 => missing += 1,
            1 => {}
            _ => doubled += 1,
        }
    }

    // The scheduled job: no slot started twice.
    let ledger = std::fs::read_to_string(home.path().join("schedule_runs.jsonl")).unwrap_or_default();
    let mut started: BTreeMap<(String, String), usize> = BTreeMap::new();
    for line in ledger
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    {
        if line["state"] == "started" {
            *started
                .entry((line["job"].to_string(), line["slot"].to_string()))
                .or_insert(0) += 1;
        }
    }
    doubled += started.values().filter(|n| **n > 1).count();

    println!(
        "crash loop: seed {seed}, {kills} SIGKILLs; turns completed {}, in history {}; facts remembered {}, stored {}; \
         reminders {reminders}/{}; watch reports {} covering {} notices; scheduled runs {}; missing {missing}, duplicated {doubled}",
        completed_turns.len(),
        users.len(),
        completed_facts.len(),
        stored.len(),
        loops.len(),
        reports.len(),
        expected_notices.len(),
        started.len(),
    );
    assert_eq!((missing, doubled), (0, 0), "seed {seed} reproduces this run");
    assert_eq!(reminders, loops.len());
    assert!(
        !completed_turns.is_empty() && !completed_facts.is_empty(),
        "the loop did some work"
    );
}
