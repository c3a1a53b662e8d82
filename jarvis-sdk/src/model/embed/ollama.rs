//! The Ollama embedder: `POST {base_url}/api/embed` with
//! `{model, input: [..]}`, answered by `embeddings: [[..], ..]` in input
//! order (<https://github.com/ollama/ollama/blob/main/docs/api.md#generate-embeddings>).
//! No key; the default server is `http://localhost:11434`.

use futures::future::BoxFuture;
use serde_json::{Value, json};
use std::sync::Arc;

use super::Embedder;
use super::config::OLLAMA_EMBEDDING_MODEL;
use super::remote::{embed_batched, kind, malformed, post_for_json, space_name, vector};
use crate::model::error::ProviderError;
use crate::model::http::{HttpClient, HttpSettings, join_url};

const NAME: &str = "ollama";

/// The default base URL: a local Ollama.
const BASE_URL: &str = "http://localhost:11434";

/// Settings of an [`OllamaEmbedder`].
#[derive(Debug, Clone)]
pub struct OllamaEmbedderConfig {
    /// The server, without `/api`; default `http://localhost:11434`.
    pub base_url: String,
    /// The model; default [`OLLAMA_EMBEDDING_MODEL`].
    pub model: String,
    /// Asks for shorter vectors (`dimensions`, for models that support
    /// it); every answer is checked to have this length.
    pub dimensions: Option<usize>,
    /// Texts per request; longer lists are sent in several requests.
    /// Default 64.
    pub batch_size: usize,
    /// Timeouts and retries.
    pub http: HttpSettings,
}

impl Default for OllamaEmbedderConfig {
    fn default() -> Self {
        Self {
            base_url: BASE_URL.to_owned(),
            model: OLLAMA_EMBEDDING_MODEL.to_owned(),
            dimensions: None,
            batch_size: 64,
            http: HttpSettings::default(),
        }
    }
}

impl OllamaEmbedderConfig {
    /// A local Ollama with `model`.
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            model: model.into(),
            ..Self::default()
        }
    }

    /// The same settings against another server.
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into();
        self
    }

    /// The same settings asking for vectors of `dimensions` numbers.
    pub fn with_dimensions(mut self, dimensions: usize) -> Self {
        self.dimensions = Some(dimensions);
        self
    }
}

/// An embedder for Ollama's `/api/embed`.
#[derive(Debug)]
pub struct OllamaEmbedder {
    config: OllamaEmbedderConfig,
    client: Arc<HttpClient>,
    name: String,
}

impl OllamaEmbedder {
    /// An embedder with `config`.
    pub fn new(config: OllamaEmbedderConfig) -> Result<Self, ProviderError> {
        let name = space_name(NAME, &config.model, config.dimensions)?;
        let client = Arc::new(HttpClient::new(NAME, config.http.clone())?);
        Ok(Self { config, client, name })
    }

    /// The JSON body sent for `texts`.
    pub fn request_body(&self, texts: &[String]) -> Value {
        request_body(&self.config.model, self.config.dimensions, texts)
    }
}

impl Embedder for OllamaEmbedder {
    fn embed(&self, texts: Vec<String>) -> BoxFuture<'static, Result<Vec<Vec<f32>>, ProviderError>> {
        let url = join_url(&self.config.base_url, "api/embed");
        let client = Arc::clone(&self.client);
        let (model, dimensions, batch_size) = (
            self.config.model.clone(),
            self.config.dimensions,
            self.config.batch_size,
        );
        Box::pin(async move {
            embed_batched(NAME, texts, batch_size, dimensions, |batch| {
                let (client, url) = (&client, &url);
                let body = request_body(&model, dimensions, &batch);
                let count = batch.len();
                async move {
                    let json = post_for_json(client, NAME, url, &[], &body).await?;
                    parse(&json, count)
                }
            })
            .await
        })
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn dimensions(&self) -> Option<usize> {
        self.config.dimensions
    }
}

fn request_body(model: &str, dimensions: Option<usize>, texts: &[String]) -> Value {
    let mut body = json!({"model": model, "input": texts});
    if let Some(d) = dimensions {
        body["dimensions"] = json!(d);
    }
    body
}

/// `embeddings`, one list per input in input order.
fn parse(json: &Value, count: usize) -> Result<Vec<Vec<f32>>, ProviderError> {
    let Some(embeddings) = json.get("embeddings").and_then(Value::as_array) else {
        let what = json.get("embeddings").map_or("missing", kind);
        return Err(malformed(NAME, format!("`embeddings` is {what}, not a list")));
    };
    if embeddings.len() != count {
        return Err(malformed(
            NAME,
            format!("{} embeddings for {count} texts", embeddings.len()),
        ));
    }
    embeddings
        .iter()
        .enumerate()
        .map(|(i, e)| vector(NAME, e, &format!("embeddings[{i}]")))
        .collect()
}
