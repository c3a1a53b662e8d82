//! The OpenAI-compatible embedder: `POST {base_url}/embeddings` with
//! `{model, input: [..]}`, answered by `data[].embedding` with an `index`
//! per input (<https://platform.openai.com/docs/api-reference/embeddings/create>).
//!
//! Any server speaking this API works by changing the base URL (llama.cpp's
//! `llama-server --embeddings`, vLLM, LM Studio, Ollama's `/v1`).

use futures::future::BoxFuture;
use serde_json::{Value, json};
use std::sync::Arc;

use super::config::OPENAI_EMBEDDING_MODEL;
use super::remote::{embed_batched, kind, malformed, post_for_json, space_name, vector};
use super::{EmbedRole, EmbedRoles, Embedder};
use crate::ApiKey;
use crate::error::ProviderError;
use crate::http::{HttpClient, HttpSettings, join_url};
use crate::openai::OPENAI_BASE_URL;

const NAME: &str = "openai";

/// Settings of an [`OpenAiEmbedder`].
#[derive(Debug, Clone)]
pub struct OpenAiEmbedderConfig {
    /// Base URL up to and including `/v1`.
    pub base_url: String,
    /// Sent as `Authorization: Bearer …` when present (local servers need none).
    pub api_key: Option<ApiKey>,
    /// The model; default [`OPENAI_EMBEDDING_MODEL`].
    pub model: String,
    /// Asks for shorter vectors (`dimensions`, `text-embedding-3` models
    /// and later); every answer is checked to have this length.
    pub dimensions: Option<usize>,
    /// How queries and documents are told apart; `None` (the default):
    /// as the model's family expects, recognised by its name
    /// ([`EmbedRoles::for_model`]).
    pub roles: Option<EmbedRoles>,
    /// Texts per request; longer lists are sent in several requests.
    /// Default 256 (the API takes up to 2,048).
    pub batch_size: usize,
    /// Timeouts and retries.
    pub http: HttpSettings,
}

impl OpenAiEmbedderConfig {
    /// OpenAI itself with `api_key` and the default model.
    pub fn new(api_key: Option<ApiKey>) -> Self {
        Self {
            base_url: OPENAI_BASE_URL.to_owned(),
            api_key,
            model: OPENAI_EMBEDDING_MODEL.to_owned(),
            dimensions: None,
            roles: None,
            batch_size: 256,
            http: HttpSettings::default(),
        }
    }

    /// The same settings against another server.
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into();
        self
    }

    /// The same settings with another model.
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
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

/// An embedder for OpenAI-compatible `/embeddings`.
#[derive(Debug)]
pub struct OpenAiEmbedder {
    config: OpenAiEmbedderConfig,
    roles: EmbedRoles,
    client: Arc<HttpClient>,
    name: String,
}

impl OpenAiEmbedder {
    /// An embedder with `config`.
    pub fn new(config: OpenAiEmbedderConfig) -> Result<Self, ProviderError> {
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

impl Embedder for OpenAiEmbedder {
    fn embed(
        &self,
        texts: Vec<String>,
        role: EmbedRole,
    ) -> BoxFuture<'static, Result<Vec<Vec<f32>>, ProviderError>> {
        let url = join_url(&self.config.base_url, "embeddings");
        let mut headers = Vec::new();
        if let Some(key) = &self.config.api_key {
            headers.push(("authorization", format!("Bearer {}", key.expose()), true));
        }
        let client = Arc::clone(&self.client);
        let (model, dimensions, batch_size, roles) = (
            self.config.model.clone(),
            self.config.dimensions,
            self.config.batch_size,
            self.roles.clone(),
        );
        Box::pin(async move {
            embed_batched(NAME, texts, batch_size, dimensions, |batch| {
                let (client, url, headers) = (&client, &url, &headers);
                let body = request_body(&model, dimensions, &roles, &batch, role);
                let count = batch.len();
                async move {
                    let json = post_for_json(client, NAME, url, headers, &body).await?;
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

/// `data[].embedding`, put in the order of `data[].index`.
fn parse(json: &Value, count: usize) -> Result<Vec<Vec<f32>>, ProviderError> {
    let Some(data) = json.get("data").and_then(Value::as_array) else {
        let what = json.get("data").map_or("missing", kind);
        return Err(malformed(NAME, format!("`data` is {what}, not a list")));
    };
    if data.len() != count {
        return Err(malformed(
            NAME,
            format!("{} embeddings for {count} texts", data.len()),
        ));
    }
    let mut ordered: Vec<Option<Vec<f32>>> = vec![None; count];
    for (position, item) in data.iter().enumerate() {
        let index = match item.get("index") {
            // Some compatible servers leave the index out: the list order.
            None | Some(Value::Null) => position,
            Some(index) => index
                .as_u64()
                .and_then(|i| usize::try_from(i).ok())
                .filter(|i| *i < count)
                .ok_or_else(|| {
                    malformed(
                        NAME,
                        format!("`data[{position}].index` is {index}, not an index below {count}"),
                    )
                })?,
        };
        if ordered[index].is_some() {
            return Err(malformed(NAME, format!("index {index} appears twice")));
        }
        let embedding = item
            .get("embedding")
            .ok_or_else(|| malformed(NAME, format!("`data[{position}].embedding` is missing")))?;
        ordered[index] = Some(vector(NAME, embedding, &format!("data[{position}].embedding"))?);
    }
    // `count` items, none twice, all below `count`: every slot is filled.
    Ok(ordered.into_iter().flatten().collect())
}
