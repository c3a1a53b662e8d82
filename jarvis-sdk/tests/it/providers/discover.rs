//! Finding a local model server: fake Ollama and OpenAI-compatible servers
//! on loopback (listings written from the servers' documentation, cited in
//! `discover.rs`), a refused port, a server that never answers.

use jarvis_sdk::app::AppConfig;
use jarvis_sdk::model::{
    ChatRequest, DISCOVERED_MAX_TOKENS, DISCOVERY_BUDGET, DiscoveryTarget, LlmConfig, Message, ProviderKind,
    discover_models,
};
use std::collections::HashMap;
use std::time::Instant;

use super::fixtures;
use super::replay::{Ending, Replay, Reply};

fn json(body: &str) -> Reply {
    Reply {
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
        body: body.as_bytes().to_vec(),
        chunk: 5,
        ending: Ending::Complete,
    }
}

/// A port on 127.0.0.1 that refuses connections (bound, then released).
fn refused() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    url
}

fn llm(vars: &[(&str, &str)]) -> LlmConfig {
    let vars: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    LlmConfig::from_lookup(|name| vars.get(name).cloned()).unwrap()
}

const OLLAMA_TAGS: &str = r#"{"models":[
  {"name":"llama3.2:latest","modified_at":"2025-05-01T10:00:00.5-07:00","details":{"family":"llama"}},
  {"name":"nomic-embed-text:latest","modified_at":"2025-06-01T10:00:00Z","details":{"family":"nomic-bert"}},
  {"name":"qwen2.5:7b","modified_at":"2025-05-20T08:00:00.123456789+09:00","details":{"family":"qwen2"}}
]}"#;

#[tokio::test]
async fn ollama_is_found_and_its_newest_chat_model_chosen() {
    let ollama = Replay::start(vec![json(OLLAMA_TAGS)]).await;
    let spec = format!("openai={}/v1,ollama={}", refused(), ollama.url);
    let mut config = llm(&[("JARVIS_LLM__DISCOVER", &spec)]);
    assert_eq!(
        config.provider,
        ProviderKind::Faux,
        "nothing configured: the demo until discovery"
    );
    assert!(config.discover_local().await);
    assert_eq!(config.provider, ProviderKind::Ollama);
    assert_eq!(config.base_url.as_deref(), Some(ollama.url.as_str()));
    assert_eq!(
        config.model, "qwen2.5:7b",
        "the newest model that is not an embedding model"
    );
    assert_eq!(config.max_tokens, Some(DISCOVERED_MAX_TOKENS));
    let notice = config.notice.clone().unwrap();
    assert!(
        notice.contains("qwen2.5:7b") && notice.contains("JARVIS_LLM__PROVIDER=demo"),
        "{notice}"
    );
    assert_eq!(ollama.requests()[0].path, "/api/tags");
    assert!(!config.discover_local().await, "it looks once");
}

#[tokio::test]
async fn an_openai_compatible_server_is_found_and_answers_with_the_capped_tokens() {
    let listing = r#"{"object":"list","data":[{"id":"local-model","object":"model","created":1700000000,"owned_by":"me"}]}"#;
    let mut chat: Reply = fixtures::load("openai", "text").into();
    chat.chunk = 3;
    let server = Replay::start(vec![json(listing), chat]).await;
    let mut config = llm(&[
        ("JARVIS_LLM__DISCOVER", &format!("openai={}/v1", server.url)),
        ("JARVIS_LLM__TEMPERATURE", "0.2"),
    ]);
    assert!(config.discover_local().await);
    assert_eq!(config.provider, ProviderKind::OpenAi);
    assert_eq!(config.model, "local-model");
    let provider = config.build().unwrap();
    let request = ChatRequest::new(config.model.clone(), vec![Message::user("안녕")]);
    let answer = fixtures::collect(provider.as_ref(), request).await;
    assert!(!answer.is_empty());
    let requests = server.requests();
    assert_eq!(requests[0].path, "/v1/models");
    assert_eq!(requests[1].path, "/v1/chat/completions");
    assert_eq!(requests[1].body["model"], "local-model");
    assert_eq!(requests[1].body["max_tokens"], DISCOVERED_MAX_TOKENS);
    assert!((requests[1].body["temperature"].as_f64().unwrap() - 0.2).abs() < 1e-6);
}

#[tokio::test]
async fn with_no_server_the_demo_stays_and_a_hanging_server_costs_only_the_budget() {
    let hanging = Replay::start(vec![json(OLLAMA_TAGS).ending(Ending::Hang)]).await;
    let mut config = llm(&[(
        "JARVIS_LLM__DISCOVER",
        &format!("ollama={},openai={}/v1", refused(), hanging.url),
    )]);
    let started = Instant::now();
    assert!(!config.discover_local().await);
    let took = started.elapsed();
    // A bound, not a speed figure: a server that never finishes its answer
    // would otherwise hold the start for good.
    assert!(took < DISCOVERY_BUDGET * 5, "discovery took {took:?}");
    assert_eq!(config.provider, ProviderKind::Faux);
    assert!(config.notice.unwrap().contains("offline demo"));
}

#[tokio::test]
async fn embedding_only_servers_and_non_model_answers_are_passed_over() {
    let embed_only = Replay::start(vec![json(
        r#"{"models":[{"name":"bge-m3","details":{"family":"bert"}}]}"#,
    )])
    .await;
    let not_a_listing = Replay::start(vec![json("<html>hello</html>")]).await;
    let targets = [
        DiscoveryTarget::ollama(&embed_only.url),
        DiscoveryTarget::openai(format!("{}/v1", not_a_listing.url)),
    ];
    let found = discover_models(&targets, DISCOVERY_BUDGET).await;
    assert_eq!(found.len(), 1, "the page that is not a listing is left out");
    assert!(found[0].chat_model().is_none());
    assert!(jarvis_sdk::model::first_chat_model(&found).is_none());
}

#[test]
fn a_named_provider_or_the_demo_keyword_is_never_overridden() {
    for vars in [
        vec![("JARVIS_LLM__PROVIDER", "demo")],
        vec![("JARVIS_LLM__PROVIDER", "faux")],
        vec![("JARVIS_LLM__PROVIDER", "ollama")],
        vec![("JARVIS_LLM__BASE_URL", "http://127.0.0.1:9/v1")],
        vec![("OPENAI_API_KEY", "sk-test")],
        vec![("JARVIS_FAUX__SCRIPT", "/tmp/script.yaml")],
        vec![("JARVIS_LLM__DISCOVER", "off")],
    ] {
        assert_eq!(llm(&vars).discovery, None, "{vars:?}");
    }
    let demo = llm(&[("JARVIS_LLM__PROVIDER", "demo")]);
    assert_eq!(demo.provider, ProviderKind::Faux);
    assert!(demo.notice.unwrap().contains("offline demo"));
    assert!(
        llm(&[]).discovery.is_some(),
        "nothing configured: discovery looks"
    );
    assert_eq!(
        AppConfig::for_home("/tmp/x").llm.discovery,
        None,
        "code-built configs play the demo"
    );
}

#[test]
fn model_settings_are_read_and_bad_values_refused() {
    let config = llm(&[
        ("JARVIS_LLM__MAX_TOKENS", "512"),
        ("JARVIS_LLM__TEMPERATURE", "1.5"),
    ]);
    assert_eq!((config.max_tokens, config.temperature), (Some(512), Some(1.5)));
    assert_eq!(llm(&[]).max_tokens, None, "no default for configured providers");
    for (name, value) in [
        ("JARVIS_LLM__MAX_TOKENS", "0"),
        ("JARVIS_LLM__MAX_TOKENS", "many"),
        ("JARVIS_LLM__TEMPERATURE", "3"),
        ("JARVIS_LLM__TEMPERATURE", "NaN"),
        ("JARVIS_LLM__DISCOVER", "somewhere"),
    ] {
        let err = LlmConfig::from_lookup(|n| (n == name).then(|| value.to_owned())).unwrap_err();
        assert!(err.to_string().contains(name), "{err}");
    }
}

#[tokio::test]
async fn a_found_model_ends_the_demo() {
    let home = tempfile::tempdir().unwrap();
    let vars = |discover: String| {
        let home = home.path().display().to_string();
        move |name: &str| match name {
            "JARVIS_HOME" => Some(home.clone()),
            "JARVIS_LLM__DISCOVER" => Some(discover.clone()),
            _ => None,
        }
    };
    // Nothing found: the demo plays (and packs may stand samples in).
    let mut config = AppConfig::from_lookup(vars(format!("ollama={}", refused()))).unwrap();
    assert!(config.is_demo());
    assert!(!config.discover_local().await);
    assert!(config.is_demo());
    // A model found: the demo ends, so packs use what is configured.
    let ollama = Replay::start(vec![json(OLLAMA_TAGS)]).await;
    let mut config = AppConfig::from_lookup(vars(format!("ollama={}", ollama.url))).unwrap();
    assert!(config.is_demo());
    assert!(config.discover_local().await);
    assert!(!config.is_demo());
}
