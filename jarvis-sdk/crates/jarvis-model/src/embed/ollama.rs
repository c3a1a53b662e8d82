//! The Ollama embedder: `POST {base_url}/api/embed` with
//! `{model, input: [..]}`, answered by `embeddings: [[..], ..]` in input
//! order (<https://github.com/ollama/ollama/blob/main/docs/api.md#generate-embeddings>).
//! No key; the default server is `http://localhost:11434`.

use futures::future::BoxFuture;
use serde_json::{Value, json};
use std::sync::Arc;

use super::config::OLLAMA_EMBEDDING_MODEL;
use super::remote::{embed_batched, kind, malformed, post_for_json, space_name, vector};
use super::{EmbedRole, EmbedRoles, Embedder};
use crate::error::ProviderError;
use crate::http::{HttpClient, HttpSettings, join_url};

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
    /// How queries and documents are told apart; `None` (the default):
    /// as the model's family expects, recognised by its name
    /// ([`EmbedRoles::for_model`]).
    pub roles: Option<EmbedRoles>,
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
            roles: None,
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

    /// The same settings telling queries and documents apart as `roles`
    /// says, whatever the model.
    pub fn with_roles(mut self, roles: EmbedRoles) -> Self {
        self.roles = Some(roles);
        self
    }

    /// How queries and documents are told apart: as set, or as the
    /// model's family expects.
    pub fn roles(&self) -> EmbedRoles {
        self.roles
            .clone()
            .unwrap_or_else(|| EmbedRoles::for_model(&self.model))
    }
}

/// An embedder for Ollama's `/api/embed`.
#[derive(Debug)]
pub struct OllamaEmbedder {
    config: OllamaEmbedderConfig,
    roles: EmbedRoles,
    client: Arc<HttpClient>,
    name: String,
}

impl OllamaEmbedder {
    /// An embedder with `config`.
    pub fn new(config: OllamaEmbedderConfig) -> Result<Self, ProviderError> {
        let roles = config.roles();
        let name = space_name(NAME, &config.model, config.dimensions, &roles)?;
        let client = Arc::new(HttpClient::new(NAME, config.http.clone())?);
        Ok(Self {
            config,
            roles,
            client,
            name,
        })
    }

    /// The JSON body sent for `texts` embedded as `role`.
    pub fn request_body(&self, texts: &[String], role: EmbedRole) -> Value {
        request_body(
            &self.config.model,
            self.config.dimensions,
            &self.roles,
            texts,
            role,
        )
    }
}

impl Embedder for OllamaEmbedder {
    fn embed(
        &self,
        texts: Vec<String>,
        role: EmbedRole,
    ) -> BoxFuture<'static, Result<Vec<Vec<f32>>, ProviderError>> {
        let url = join_url(&self.config.base_url, "api/embed");
        let client = Arc::clone(&self.client);
        let (model, dimensions, batch_size, roles) = (
            self.config.model.clone(),
            self.config.dimensions,
            self.config.batch_size,
            self.roles.clone(),
        );
        Box::pin(async move {
            embed_batched(NAME, texts, batch_size, dimensions, |batch| {
                let (client, url) = (&client, &url);
                let body = request_body(&model, dimensions, &roles, &batch, role);
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

fn request_body(
    model: &str,
    dimensions: Option<usize>,
    roles: &EmbedRoles,
    texts: &[String],
    role: EmbedRole,
) -> Value {
    let input: Vec<String> = texts.iter().map(|t| roles.text(t.clone(), role)).collect();
    let mut body = json!({"model": model, "input": input});
    if let Some(d) = dimensions {
        body["dimensions"] = json!(d);
    }
    roles.add_field(&mut body, role);
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
