//! A model server already running on this machine is found when nothing is
//! configured: a fake OpenAI-compatible server on loopback (its listing and
//! stream written from platform.openai.com/docs/api-reference/models/list
//! and .../chat-streaming) that records what it is asked.

use std::sync::{Arc, Mutex};

use super::{TempHome, http_server, jarvis, text};

const LISTING: &str = r#"{"object":"list","data":[
  {"id":"nomic-embed-text","object":"model","created":1800000000,"owned_by":"me"},
  {"id":"local-chat","object":"model","created":1700000000,"owned_by":"me"}]}"#;

const ANSWER: &str = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"local-chat\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"로컬 모델이 \"},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"local-chat\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"답합니다\"},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"local-chat\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
data: [DONE]\n\n";

/// The fake server: its base URL (`/v1` included) and the request bodies
/// of chat calls it received.
fn local_server() -> (String, Arc<Mutex<Vec<String>>>) {
    let chats = Arc::new(Mutex::new(Vec::new()));
    let seen = chats.clone();
    let url = http_server(move |request_line, body| {
        if request_line.starts_with("GET /v1/models ") {
            ("application/json", LISTING.to_owned())
        } else if request_line.starts_with("POST /v1/chat/completions ") {
            seen.lock()
                .unwrap()
                .push(String::from_utf8_lossy(body).into_owned());
            ("text/event-stream", ANSWER.to_owned())
        } else {
            ("text/plain", "not here".to_owned())
        }
    });
    (format!("{url}/v1"), chats)
}

#[test]
fn without_a_configured_model_a_local_server_is_found_and_used() {
    let home = TempHome::new();
    let (url, chats) = local_server();
    let target = format!("openai={url}");
    let out = jarvis(&home.0)
        .env("JARVIS_LLM__DISCOVER", &target)
        .args(["ask", "안녕"])
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        text(&out.stdout).contains("로컬 모델이 답합니다"),
        "{}",
        text(&out.stdout)
    );
    assert!(stderr.contains("using the local model local-chat"), "{stderr}");
    assert!(!stderr.contains("offline demo playing"), "{stderr}");
    let chats = chats.lock().unwrap();
    let first: serde_json::Value = serde_json::from_str(&chats[0]).unwrap();
    assert_eq!(
        first["model"], "local-chat",
        "the chat model, not the newer embedding model"
    );
    assert_eq!(
        first["max_tokens"], 4096,
        "a discovered model's answers are capped"
    );
    drop(chats);

    let out = jarvis(&home.0)
        .env("JARVIS_LLM__DISCOVER", &target)
        .arg("models")
        .output()
        .unwrap();
    let listed = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(listed.contains("* local-chat"), "{listed}");
    assert!(listed.contains("+ nomic-embed-text  (embedding)"), "{listed}");
    assert!(
        listed.contains(&format!(
            "JARVIS_EMBED__PROVIDER=auto embeds with nomic-embed-text at {url}"
        )),
        "{listed}"
    );

    // The demo keyword and a configured provider are never overridden.
    let out = jarvis(&home.0)
        .env("JARVIS_LLM__DISCOVER", &target)
        .env("JARVIS_LLM__PROVIDER", "demo")
        .args(["ask", "hello"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("Offline demo"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn models_says_when_nothing_answers() {
    let home = TempHome::new();
    let out = jarvis(&home.0).arg("models").output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("no model server answered"),
        "{}",
        text(&out.stdout)
    );
}
