//! The frames on the wire, byte for byte: a recorded session (a Focus task,
//! a tool that waits for a person's approval, a promise on the AGENDA, a
//! second screen opening mid-task) against `tests/it/wire/session.jsonl`.
//!
//! The file was recorded from the server as it was before the events of
//! the layers above the loop became notices; a change to the wire format
//! fails here. `JARVIS_RECORD_FRAMES=1` writes the file from this build
//! instead (only for a deliberate change of the contract).

use serde_json::{Value, json};

use jarvis_pack_housing::HousingPack;
use jarvis_sdk::app::{AppAssembly, AppConfig, build_app};
use jarvis_sdk::common::ManualClock;
use jarvis_sdk::model::FauxProvider;
use jarvis_server::ServerConfig;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::support::{Server, TempHome, Ws};

/// J.A.R.V.I.S. starts a Focus task, writes a file (approval), answers.
const SESSION: &str = r#"
rules:
  - when: { agent: main, purpose: step, last_role: user }
    reply: { tool_calls: [ { name: start_focus, arguments: { title: "이사 준비", plan: ["견적", "계약"] } } ], usage: { input_tokens: 120, output_tokens: 20 } }
    times: 1
  - when: { agent: main, purpose: step, last_role: tool }
    reply: { tool_calls: [ { name: write_file, arguments: { path: "plan.txt", content: "견적 → 계약" } } ], usage: { input_tokens: 150, output_tokens: 25 } }
    times: 1
  - when: { agent: main, purpose: step, last_role: tool }
    reply: { text: "적어 두었습니다. 공고가 올라오면 바로 말씀드릴게요", chunks: 3, usage: { input_tokens: 180, output_tokens: 30 } }
"#;

/// The app on the script, with its clock standing still (the Focus log
/// shows the time).
async fn app(home: &TempHome) -> AppAssembly {
    let faux = Arc::new(FauxProvider::from_yaml(SESSION).unwrap());
    let mut config = AppConfig::for_home(&home.0).with_provider(faux);
    config.packs = vec![Arc::new(HousingPack::in_memory())];
    config.clock = Arc::new(ManualClock::new(
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_000_000),
    ));
    build_app(config).await.unwrap()
}

const RECORDED: &str = "tests/it/wire/session.jsonl";

/// A frame with what differs from run to run (the approval's random id)
/// put back to a fixed value; nothing else is touched.
fn steady(text: &str, ids: &mut Vec<String>) -> String {
    let mut out = text.to_owned();
    let value: Value = serde_json::from_str(text).unwrap();
    if let Some(id) = value.get("request_id").and_then(Value::as_str) {
        if !ids.iter().any(|known| known == id) {
            ids.push(id.to_owned());
        }
        let n = ids.iter().position(|known| known == id).unwrap();
        out = out.replace(id, &format!("request-{n}"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_frames_of_a_recorded_session_are_byte_identical() {
    let home = TempHome::new();
    let server = Server::start(app(&home).await, ServerConfig::loopback(0)).await;
    let url = server.ws_url("session_id=s-wire&agent=main");
    let mut ws = Ws::connect(&url).await;
    ws.send(json!({"type": "prompt", "text": "이사 준비 시작해 줘. 공고 올라오면 바로 말해 줘"}))
        .await;
    let asked = ws.until("approval_request").await.pop().unwrap();
    ws.send(json!({"type": "approval", "request_id": asked["request_id"], "decision": "allow"}))
        .await;
    ws.until("agent_end").await;
    ws.until("agenda_changed").await;
    // A second screen opens on the task.
    let mut other = Ws::connect(&url).await;
    other.until("focus_panel").await;

    let mut ids = Vec::new();
    let mut frames: Vec<String> = ws.texts.iter().map(|t| steady(t, &mut ids)).collect();
    frames.push(String::new());
    frames.extend(other.texts.iter().map(|t| steady(t, &mut ids)));
    // The turn's events arrive in order; `agent_activity` and
    // `agenda_changed` go to every screen from other tasks, so where they
    // fall among the turn's events is not part of the contract.
    let (mut turn, mut broadcast): (Vec<String>, Vec<String>) = frames.into_iter().partition(|f| {
        !(f.starts_with(r#"{"type":"agent_activity""#) || f.starts_with(r#"{"type":"agenda_changed""#))
    });
    broadcast.sort();
    turn.push(String::new());
    turn.extend(broadcast);
    let got = turn.join("\n") + "\n";

    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(RECORDED);
    if std::env::var_os("JARVIS_RECORD_FRAMES").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &got).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap();
    assert_eq!(got, want, "the wire changed; see {RECORDED}");
}
