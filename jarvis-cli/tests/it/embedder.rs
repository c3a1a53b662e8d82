//! The embedder chosen by the environment, through the binary: a fact told
//! with the default hash embedder is recalled by the first question after
//! `JARVIS_EMBED__PROVIDER=openai` names a fake OpenAI-compatible server
//! on loopback (its answers shaped as platform.openai.com/docs/api-reference/embeddings
//! shows), whose vectors count words so texts sharing words are close.

use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

use super::{TempHome, http_server, scripted, text};

const FACT: &str = "Seoyeon plays the cello every Tuesday evening";
const QUESTION: &str = "Which instrument does Seoyeon play on Tuesday?";

/// One count per word, hashed (FNV-1a) into 512 numbers.
fn vector(text: &str) -> Vec<f32> {
    let mut v = vec![0.0f32; 512];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let hash = word
            .to_lowercase()
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            });
        v[(hash % 512) as usize] += 1.0;
    }
    v
}

/// The fake server: its base URL (`/v1` included) and the bodies of the
/// embedding requests it received.
fn embedding_server() -> (String, Arc<Mutex<Vec<Value>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let bodies = seen.clone();
    let url = http_server(move |request_line, body| {
        let reply = if request_line.starts_with("POST /v1/embeddings ") {
            let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
            let inputs = body["input"].as_array().cloned().unwrap_or_default();
            bodies.lock().unwrap().push(body.clone());
            let data: Vec<Value> = inputs
                .iter()
                .enumerate()
                .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": vector(t.as_str().unwrap_or(""))}))
                .collect();
            json!({"object": "list", "data": data, "model": body["model"]}).to_string()
        } else {
            json!({"error": {"message": "not here"}}).to_string()
        };
        ("application/json", reply)
    });
    (format!("{url}/v1"), seen)
}

#[test]
fn a_fact_told_before_switching_the_embedder_is_recalled_by_the_first_question_after() {
    let home = TempHome::new();
    let script = "fallback: { text: noted }";
    let out = scripted(&home, script)
        .args(["ask", &format!("/remember {FACT}")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let recorded = std::fs::read_to_string(home.0.join("embedder.json")).unwrap();
    assert!(recorded.contains(r#""provider": "hash""#), "{recorded}");

    let (url, seen) = embedding_server();
    let requests = home.0.join("requests.jsonl");
    let out = scripted(&home, script)
        .env("JARVIS_EMBED__PROVIDER", "openai")
        .env("JARVIS_EMBED__BASE_URL", &url)
        .env("JARVIS_EMBED__MODEL", "fake-embed")
        .env("JARVIS_FAUX__REQUEST_LOG", &requests)
        .args(["ask", QUESTION])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = std::fs::read_to_string(&requests).unwrap();
    let first: Value = serde_json::from_str(log.lines().next().unwrap()).unwrap();
    let messages = first["messages"].to_string();
    assert!(
        messages.contains("[핵심 사실]") && messages.contains(FACT),
        "the fact came back: {messages}"
    );
    let seen = seen.lock().unwrap();
    assert!(
        seen.iter()
            .any(|b| b["input"].as_array().is_some_and(|i| i.contains(&json!(FACT)))),
        "the fact was embedded again: {seen:?}"
    );
    let recorded: Value =
        serde_json::from_str(&std::fs::read_to_string(home.0.join("embedder.json")).unwrap()).unwrap();
    assert_eq!(
        (&recorded["provider"], &recorded["embedder"]),
        (&json!("openai"), &json!("openai/fake-embed"))
    );
}
