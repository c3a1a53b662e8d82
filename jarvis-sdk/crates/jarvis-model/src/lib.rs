//! The model layer: the [`Provider`] trait and its request and event
//! vocabulary, the shared tool-call assembler, [`FauxProvider`], the
//! [`Embedder`] trait with its embedders, and what calls cost: token
//! [`estimate_tokens`] and the [`PriceTable`].
//!
//! `model` knows no layer above it: no memory, sessions, tools or UI.

#[cfg(feature = "anthropic")]
mod anthropic;
mod api_key;
mod assembler;
mod config;
#[cfg(feature = "http")]
mod discover;
mod embed;
mod error;
mod estimate;
mod event;
mod faux;
#[cfg(feature = "http")]
pub(crate) mod http;
mod message;
#[cfg(feature = "ollama")]
mod ollama;
#[cfg(feature = "openai")]
mod openai;
mod prices;
mod provider;
mod request;

#[cfg(feature = "anthropic")]
pub use anthropic::{
    ANTHROPIC_BASE_URL, ANTHROPIC_VERSION, AnthropicConfig, AnthropicDecoder, AnthropicProvider,
};
pub use api_key::ApiKey;
pub use assembler::{ModelResponse, ResponseAssembler};
pub use config::{
    DEFAULT_ANTHROPIC_MODEL, DEFAULT_OLLAMA_MODEL, DEFAULT_OPENAI_MODEL, DiscoveryTarget, LlmConfig,
    ProviderKind,
};
#[cfg(feature = "http")]
pub use discover::{
    DISCOVER_ENV, DISCOVERED_MAX_TOKENS, DISCOVERY_BUDGET, FoundModel, FoundServer, default_targets,
    discover_models, first_chat_model, first_embedding_model, parse_targets, pick_chat_model,
    pick_embedding_model,
};
pub use embed::{
    EMBED_PROVIDER_ENV, EmbedConfig, EmbedProvider, EmbedRole, EmbedRoles, Embedder, EmbedderExt,
    HASH_EMBEDDER_DIMENSIONS, HashEmbedder, OLLAMA_EMBED_BASE_URL, OLLAMA_EMBEDDING_MODEL,
    OPENAI_EMBEDDING_MODEL, cosine,
};
#[cfg(feature = "ollama")]
pub use embed::{OllamaEmbedder, OllamaEmbedderConfig};
#[cfg(feature = "openai")]
pub use embed::{OpenAiEmbedder, OpenAiEmbedderConfig};
pub use error::ProviderError;
pub use estimate::estimate_tokens;
pub use event::{FinishReason, ProviderEvent};
pub use faux::{
    DEMO_SCRIPT, FAUX_REQUEST_LOG_ENV, FAUX_SCRIPT_ENV, FauxError, FauxProvider, FauxReply, FauxRule,
    FauxScript, FauxToolCall, FauxWhen,
};
#[cfg(feature = "http")]
pub use http::ndjson::{NdjsonError, NdjsonParser};
#[cfg(feature = "http")]
pub use http::sse::{SseError, SseEvent, SseParser};
#[cfg(feature = "http")]
pub use http::{
    HttpClient, HttpSettings, RetryPolicy, Sleeper, StreamDecoder, TokioSleeper, decode_chunks, join_url,
};
pub use message::{
    AssistantMessage, Message, Role, ThinkingBlock, ToolCall, ToolResultMessage, Usage, UserMessage,
};
#[cfg(feature = "ollama")]
pub use ollama::{OLLAMA_BASE_URL, OllamaConfig, OllamaDecoder, OllamaProvider};
#[cfg(feature = "openai")]
pub use openai::{OPENAI_BASE_URL, OpenAiConfig, OpenAiDecoder, OpenAiProvider};
pub use prices::{ModelPrice, PRICES_FILE, PriceError, PriceTable};
pub use provider::{Provider, ProviderExt, ProviderStream};
pub use request::{ChatRequest, Purpose, RequestMetadata, ToolChoice, ToolSpec};
