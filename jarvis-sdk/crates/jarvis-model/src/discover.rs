//! Finding a model server already running on this machine (Ollama,
//! llama.cpp, LM Studio, vLLM), for when no provider is configured.
//!
//! [`discover_models`] asks every [`DiscoveryTarget`] at once (Ollama's
//! `/api/tags`, an OpenAI-compatible server's `/v1/models`) and waits at
//! most its budget ([`DISCOVERY_BUDGET`], 300 ms in total) for the answers;
//! a port nobody listens on answers at once with a refused connection. The
//! first target in order that lists a chat model wins, and its most
//! recently modified chat model is chosen ([`pick_chat_model`]); embedding
//! models (`embed`, `bge`, `e5`, `minilm`, `bert` in the name or family)
//! are never chosen for chat. With `JARVIS_EMBED__PROVIDER=auto`, the
//! same answers give recall its embedder: the first target that lists an
//! embedding model, and its most recently modified one
//! ([`pick_embedding_model`]).
//!
//! `JARVIS_LLM__DISCOVER` replaces the default targets
//! ([`default_targets`]): `off`, or a comma-separated list of
//! `ollama=<base URL>` and `openai=<base URL>` (an OpenAI-compatible
//! server's base URL, `/v1` included).

use serde::Deserialize;
use std::time::Duration;

use super::config::{DiscoveryTarget, ProviderKind};
use super::error::ProviderError;
use jarvis_common::Timestamp;

/// How long discovery waits for every target together.
pub const DISCOVERY_BUDGET: Duration = Duration::from_millis(300);

/// The variable that replaces the default targets.
pub const DISCOVER_ENV: &str = "JARVIS_LLM__DISCOVER";

/// The most output tokens a discovered local model may write in one answer,
/// unless `JARVIS_LLM__MAX_TOKENS` says otherwise (a small local model
/// cannot ramble until its context is full).
pub const DISCOVERED_MAX_TOKENS: u32 = 4096;

/// Words that mark an embedding model in a model's name or family.
const EMBEDDING_MARKS: [&str; 5] = ["embed", "bge", "e5", "minilm", "bert"];

impl DiscoveryTarget {
    fn list_url(&self) -> String {
        let base = self.base_url.trim_end_matches('/');
        match self.kind {
            ProviderKind::Ollama => format!("{base}/api/tags"),
            _ => format!("{base}/models"),
        }
    }
}

/// Ollama on its port, then OpenAI-compatible servers on the ports
/// llama.cpp (8080), LM Studio (1234) and vLLM (8000) use by default.
pub fn default_targets() -> Vec<DiscoveryTarget> {
    vec![
        DiscoveryTarget::ollama("http://127.0.0.1:11434"),
        DiscoveryTarget::openai("http://127.0.0.1:8080/v1"),
        DiscoveryTarget::openai("http://127.0.0.1:1234/v1"),
        DiscoveryTarget::openai("http://127.0.0.1:8000/v1"),
    ]
}

/// Reads a [`DISCOVER_ENV`] value: `off` (no discovery, `None`), or
/// `ollama=<url>` and `openai=<url>` separated by commas.
pub fn parse_targets(spec: &str) -> Result<Option<Vec<DiscoveryTarget>>, ProviderError> {
    let spec = spec.trim();
    if spec.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let mut targets = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (kind, url) = item.split_once('=').ok_or_else(|| bad_target(item))?;
        let url = url.trim();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(bad_target(item));
        }
        targets.push(match kind.trim().to_ascii_lowercase().as_str() {
            "ollama" => DiscoveryTarget::ollama(url),
            "openai" => DiscoveryTarget::openai(url),
            _ => return Err(bad_target(item)),
        });
    }
    if targets.is_empty() {
        return Err(bad_target(spec));
    }
    Ok(Some(targets))
}

fn bad_target(item: &str) -> ProviderError {
    ProviderError::Config(format!(
        "{DISCOVER_ENV}: {item:?} is not a target; use off, or ollama=<url> and openai=<url> separated by commas"
    ))
}

/// A model a server lists.
#[derive(Debug, Clone, PartialEq)]
pub struct FoundModel {
    /// Its name, as requests name it.
    pub name: String,
    /// Its family, when the server says.
    pub family: Option<String>,
    /// When it was last modified (Ollama) or created (OpenAI-compatible),
    /// when the server says.
    pub modified: Option<Timestamp>,
}

impl FoundModel {
    /// Whether it is an embedding model (by name or family).
    pub fn is_embedding(&self) -> bool {
        let marked = |text: &str| {
            let text = text.to_ascii_lowercase();
            EMBEDDING_MARKS.iter().any(|mark| {
                text.split(|c: char| !c.is_ascii_alphanumeric())
                    .any(|word| word == *mark || (*mark != "e5" && word.contains(mark)))
            })
        };
        marked(&self.name) || self.family.as_deref().is_some_and(marked)
    }
}

/// A server that answered, with what it lists.
#[derive(Debug, Clone, PartialEq)]
pub struct FoundServer {
    /// Where it was found.
    pub target: DiscoveryTarget,
    /// Its models, as listed.
    pub models: Vec<FoundModel>,
}

impl FoundServer {
    /// The model chat would use on this server, if any.
    pub fn chat_model(&self) -> Option<&FoundModel> {
        pick_chat_model(&self.models)
    }

    /// The model recall would embed with on this server, if any.
    pub fn embedding_model(&self) -> Option<&FoundModel> {
        pick_embedding_model(&self.models)
    }
}

/// The most recently modified model that is not an embedding model (the
/// first listed among equals, or when no dates are known).
pub fn pick_chat_model(models: &[FoundModel]) -> Option<&FoundModel> {
    newest(models.iter().filter(|m| !m.is_embedding()))
}

/// The most recently modified embedding model (the first listed among
/// equals, or when no dates are known): the other half of
/// [`pick_chat_model`].
pub fn pick_embedding_model(models: &[FoundModel]) -> Option<&FoundModel> {
    newest(models.iter().filter(|m| m.is_embedding()))
}

fn newest<'a>(models: impl Iterator<Item = &'a FoundModel>) -> Option<&'a FoundModel> {
    models.fold(None, |best: Option<&FoundModel>, m| match best {
        Some(b) if m.modified <= b.modified => Some(b),
        _ => Some(m),
    })
}

/// Asks every target at once; answers the servers that answered within
/// `budget`, in the targets' order. Targets that refuse, time out or answer
/// something else are left out (logged at debug level).
pub async fn discover_models(targets: &[DiscoveryTarget], budget: Duration) -> Vec<FoundServer> {
    let client = match reqwest::Client::builder()
        .timeout(budget)
        .connect_timeout(budget)
        .no_proxy()
        .build()
    {
        Ok(client) => client,
        Err(e) => {
            tracing::warn!("model discovery: cannot build an HTTP client: {e}");
            return Vec::new();
        }
    };
    let probes = targets.iter().map(|target| probe(&client, target));
    match tokio::time::timeout(budget, futures::future::join_all(probes)).await {
        Ok(found) => found.into_iter().flatten().collect(),
        Err(_) => Vec::new(),
    }
}

/// The first server that lists a chat model, and that model.
pub fn first_chat_model(servers: &[FoundServer]) -> Option<(&FoundServer, &FoundModel)> {
    servers
        .iter()
        .find_map(|server| server.chat_model().map(|model| (server, model)))
}

/// The first server that lists an embedding model, and that model.
pub fn first_embedding_model(servers: &[FoundServer]) -> Option<(&FoundServer, &FoundModel)> {
    servers
        .iter()
        .find_map(|server| server.embedding_model().map(|model| (server, model)))
}

async fn probe(client: &reqwest::Client, target: &DiscoveryTarget) -> Option<FoundServer> {
    let url = target.list_url();
    let response = match client.get(&url).send().await {
        Ok(response) if response.status().is_success() => response,
        Ok(response) => {
            tracing::debug!("model discovery: {url} answered {}", response.status());
            return None;
        }
        Err(e) => {
            tracing::debug!("model discovery: {url}: {e}");
            return None;
        }
    };
    let body = response.bytes().await.ok()?;
    match parse_listing(target.kind, &body) {
        Ok(models) => Some(FoundServer {
            target: target.clone(),
            models,
        }),
        Err(e) => {
            tracing::debug!("model discovery: {url} answered something else: {e}");
            None
        }
    }
}

#[derive(Deserialize)]
struct OllamaTags {
    models: Vec<OllamaModel>,
}

#[derive(Deserialize)]
struct OllamaModel {
    name: String,
    #[serde(default)]
    modified_at: Option<String>,
    #[serde(default)]
    details: Option<OllamaDetails>,
}

#[derive(Deserialize)]
struct OllamaDetails {
    #[serde(default)]
    family: Option<String>,
}

#[derive(Deserialize)]
struct OpenAiModels {
    data: Vec<OpenAiModel>,
}

#[derive(Deserialize)]
struct OpenAiModel {
    id: String,
    #[serde(default)]
    created: Option<i64>,
}

/// Reads a model listing: Ollama's `/api/tags` or an OpenAI-compatible
/// `/v1/models`.
pub(crate) fn parse_listing(kind: ProviderKind, body: &[u8]) -> Result<Vec<FoundModel>, serde_json::Error> {
    Ok(match kind {
        ProviderKind::Ollama => serde_json::from_slice::<OllamaTags>(body)?
            .models
            .into_iter()
            .map(|m| FoundModel {
                name: m.name,
                family: m.details.and_then(|d| d.family),
                modified: m.modified_at.and_then(|at| Timestamp::parse_rfc3339(&at).ok()),
            })
            .collect(),
        _ => serde_json::from_slice::<OpenAiModels>(body)?
            .data
            .into_iter()
            .map(|m| FoundModel {
                name: m.id,
                family: None,
                modified: m
                    .created
                    .and_then(|s| s.checked_mul(1000))
                    .map(Timestamp::from_millis),
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(name: &str, family: Option<&str>, modified: Option<i64>) -> FoundModel {
        FoundModel {
            name: name.into(),
            family: family.map(Into::into),
            modified: modified.map(Timestamp::from_millis),
        }
    }

    #[test]
    fn embedding_models_are_known_by_name_or_family() {
        for name in [
            "nomic-embed-text:latest",
            "mxbai-embed-large",
            "bge-m3",
            "multilingual-e5-large",
            "all-minilm:l6",
            "text-embedding-3-small",
        ] {
            assert!(model(name, None, None).is_embedding(), "{name}");
        }
        assert!(model("granite:latest", Some("bert"), None).is_embedding());
        for name in [
            "llama3.2:latest",
            "gemma4:e4b",
            "qwen2.5:7b",
            "gpt-4o-mini",
            "e50-chat",
        ] {
            assert!(!model(name, Some("llama"), None).is_embedding(), "{name}");
        }
    }

    #[test]
    fn the_newest_chat_model_is_chosen() {
        let models = [
            model("old-chat", None, Some(1_000)),
            model("nomic-embed-text", None, Some(9_000)),
            model("new-chat", None, Some(5_000)),
            model("same-age", None, Some(5_000)),
        ];
        assert_eq!(pick_chat_model(&models).unwrap().name, "new-chat");
        let undated = [model("first", None, None), model("second", None, None)];
        assert_eq!(pick_chat_model(&undated).unwrap().name, "first");
        assert!(pick_chat_model(&[model("bge-m3", None, Some(1))]).is_none());
    }

    #[test]
    fn the_newest_embedding_model_is_chosen_for_recall() {
        let models = [
            model("new-chat", None, Some(9_000)),
            model("bge-m3", None, Some(1_000)),
            model("nomic-embed-text:latest", None, Some(5_000)),
            model("granite", Some("bert"), Some(5_000)),
        ];
        assert_eq!(
            pick_embedding_model(&models).unwrap().name,
            "nomic-embed-text:latest",
            "the newest, the first listed among equals"
        );
        let undated = [
            model("chat", None, None),
            model("all-minilm", None, None),
            model("e5-small", None, None),
        ];
        assert_eq!(pick_embedding_model(&undated).unwrap().name, "all-minilm");
        assert!(pick_embedding_model(&[model("llama3.2", Some("llama"), Some(1))]).is_none());
        let server = |models: Vec<FoundModel>| FoundServer {
            target: DiscoveryTarget::ollama("http://127.0.0.1:1"),
            models,
        };
        let servers = [
            server(vec![model("llama3.2", None, None)]),
            server(vec![model("qwen", None, None), model("bge-m3", None, None)]),
        ];
        let (found, chosen) = first_embedding_model(&servers).unwrap();
        assert_eq!((found.models.len(), chosen.name.as_str()), (2, "bge-m3"));
        assert_eq!(first_chat_model(&servers).unwrap().1.name, "llama3.2");
    }

    #[test]
    fn listings_of_both_kinds_are_read() {
        // https://github.com/ollama/ollama/blob/main/docs/api.md#list-local-models
        let ollama = br#"{"models":[{"name":"llama3.2:latest","model":"llama3.2:latest",
            "modified_at":"2025-05-04T17:37:44.706015396-07:00","size":2019393189,
            "digest":"a80c4f17acd5","details":{"format":"gguf","family":"llama",
            "families":["llama"],"parameter_size":"3.2B","quantization_level":"Q4_K_M"}}]}"#;
        let found = parse_listing(ProviderKind::Ollama, ollama).unwrap();
        assert_eq!(found[0].name, "llama3.2:latest");
        assert_eq!(found[0].family.as_deref(), Some("llama"));
        assert!(found[0].modified.is_some());
        // https://platform.openai.com/docs/api-reference/models/list
        let openai = br#"{"object":"list","data":[{"id":"qwen2.5-7b-instruct","object":"model",
            "created":1686935002,"owned_by":"organization-owner"}]}"#;
        let found = parse_listing(ProviderKind::OpenAi, openai).unwrap();
        assert_eq!(found[0].name, "qwen2.5-7b-instruct");
        assert_eq!(found[0].modified, Some(Timestamp::from_millis(1_686_935_002_000)));
        assert!(parse_listing(ProviderKind::OpenAi, b"<html>").is_err());
    }

    #[test]
    fn targets_are_read_from_the_variable() {
        assert_eq!(parse_targets("off").unwrap(), None);
        assert_eq!(
            parse_targets("ollama=http://127.0.0.1:1, openai=http://127.0.0.1:2/v1").unwrap(),
            Some(vec![
                DiscoveryTarget::ollama("http://127.0.0.1:1"),
                DiscoveryTarget::openai("http://127.0.0.1:2/v1"),
            ])
        );
        for bad in ["", "ollama", "llamacpp=http://x", "ollama=ftp://x"] {
            assert!(parse_targets(bad).is_err(), "{bad}");
        }
    }
}
