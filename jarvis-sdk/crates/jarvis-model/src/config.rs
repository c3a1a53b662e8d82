//! Choosing the model from the environment (DESIGN.md §5).
//!
//! | variable | meaning |
//! |---|---|
//! | `JARVIS_LLM__PROVIDER` | `openai`, `anthropic`, `ollama`, `faux`, or `demo` (the offline demo, no discovery) |
//! | `JARVIS_LLM__MODEL` | the model name (each provider has a default) |
//! | `JARVIS_LLM__MAX_TOKENS` | the most output tokens per answer (no default; 4,096 for a discovered local model) |
//! | `JARVIS_LLM__TEMPERATURE` | the sampling temperature (the provider's default when unset) |
//! | `JARVIS_LLM__DISCOVER` | where to look for a local model server: `off`, or `ollama=<url>,openai=<url>` |
//! | `JARVIS_LLM__BASE_URL` | another server: a proxy, llama.cpp, vLLM, LM Studio, a remote Ollama |
//! | `JARVIS_LLM__API_KEY` | the key; falls back to `OPENAI_API_KEY` / `ANTHROPIC_API_KEY` |
//! | `JARVIS_FAUX__SCRIPT` | the script `faux` plays (the built-in demo without one) |
//! | `JARVIS_FAUX__REQUEST_LOG` | a file `faux` appends every request it receives to, one JSON line each (for tests of whole binaries) |
//!
//! The embedder of recall is chosen apart, from `JARVIS_EMBED__*`
//! ([`EmbedConfig`](super::EmbedConfig)).
//!
//! Without `JARVIS_LLM__PROVIDER`, a lone key selects its provider
//! (`OPENAI_API_KEY` → OpenAI, `ANTHROPIC_API_KEY` → Anthropic; a
//! `JARVIS_LLM__API_KEY` starting with `sk-ant-` → Anthropic), a lone base URL
//! selects an OpenAI-compatible local server, and with nothing configured
//! [`LlmConfig::discover_local`] looks for a model server running on this
//! machine (see `discover.rs`); only when none answers does the offline
//! demo play. [`LlmConfig::notice`] says which choice was made and
//! why, for screens to show. Team agents may change only the model *name*
//! (R-MODEL-7): it travels per request in [`ChatRequest::model`](super::ChatRequest).

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use super::error::ProviderError;
use super::faux::FauxProvider;
use super::provider::{Provider, ProviderStream};
use super::request::ChatRequest;

/// Default model names.
pub const DEFAULT_OPENAI_MODEL: &str = "gpt-4o-mini";
/// Default Anthropic model.
pub const DEFAULT_ANTHROPIC_MODEL: &str = "claude-sonnet-4-5";
/// Default Ollama model.
pub const DEFAULT_OLLAMA_MODEL: &str = "gemma4:e4b";

/// A model service kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// OpenAI and OpenAI-compatible servers.
    OpenAi,
    /// Anthropic's Messages API.
    Anthropic,
    /// Ollama's chat API.
    Ollama,
    /// The scripted [`FauxProvider`].
    Faux,
}

impl ProviderKind {
    /// The name used in `JARVIS_LLM__PROVIDER`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Ollama => "ollama",
            ProviderKind::Faux => "faux",
        }
    }
}

/// Model settings read from the environment.
#[derive(Clone, PartialEq)]
pub struct LlmConfig {
    /// Which service.
    pub provider: ProviderKind,
    /// The model name (empty for `faux`).
    pub model: String,
    /// Another server's base URL.
    pub base_url: Option<String>,
    /// The key, when one is configured.
    pub api_key: Option<crate::ApiKey>,
    /// The script `faux` plays; the demo when absent.
    pub faux_script: Option<PathBuf>,
    /// Where `faux` logs the requests it receives, when set.
    pub faux_request_log: Option<PathBuf>,
    /// Why this provider was chosen, when it was not named explicitly
    /// (for example the offline demo); screens should show it.
    pub notice: Option<String>,
    /// The most output tokens per answer, for requests that do not say.
    pub max_tokens: Option<u32>,
    /// The sampling temperature, for requests that do not say.
    pub temperature: Option<f32>,
    /// Where [`discover_local`](Self::discover_local) looks: set only when
    /// nothing is configured and the demo would otherwise play.
    pub discovery: Option<Vec<DiscoveryTarget>>,
}

impl fmt::Debug for LlmConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("LlmConfig");
        d.field("provider", &self.provider)
            .field("model", &self.model)
            .field("base_url", &self.base_url);
        d.field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"));
        d.field("faux_script", &self.faux_script)
            .field("faux_request_log", &self.faux_request_log)
            .field("notice", &self.notice)
            .field("max_tokens", &self.max_tokens)
            .field("temperature", &self.temperature)
            .finish()
    }
}

impl LlmConfig {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ProviderError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads variables through `get` (tests pass a map). Empty values count as unset.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ProviderError> {
        let var = |name: &str| get(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let jarvis_key = var("JARVIS_LLM__API_KEY");
        let openai_key = var("OPENAI_API_KEY");
        let anthropic_key = var("ANTHROPIC_API_KEY");
        let base_url = var("JARVIS_LLM__BASE_URL");
        let mut notice = None;
        let mut may_discover = false;
        let provider = match var("JARVIS_LLM__PROVIDER").map(|p| p.to_ascii_lowercase()) {
            Some(p) => match p.as_str() {
                "openai" => ProviderKind::OpenAi,
                "anthropic" => ProviderKind::Anthropic,
                "ollama" => ProviderKind::Ollama,
                "faux" => ProviderKind::Faux,
                "demo" => {
                    notice = Some("playing the built-in offline demo (JARVIS_LLM__PROVIDER=demo)".to_owned());
                    ProviderKind::Faux
                }
                other => {
                    return Err(ProviderError::Config(format!(
                        "JARVIS_LLM__PROVIDER={other} is not a provider; use openai, anthropic, ollama, faux or demo"
                    )));
                }
            },
            None => {
                let (kind, why) = match (&jarvis_key, &openai_key, &anthropic_key) {
                    (Some(k), _, _) if k.starts_with("sk-ant-") => {
                        (ProviderKind::Anthropic, "JARVIS_LLM__API_KEY is an Anthropic key")
                    }
                    (Some(_), _, _) => (ProviderKind::OpenAi, "JARVIS_LLM__API_KEY is set"),
                    (None, Some(_), Some(_)) => (
                        ProviderKind::OpenAi,
                        "both OPENAI_API_KEY and ANTHROPIC_API_KEY are set (set JARVIS_LLM__PROVIDER to choose)",
                    ),
                    (None, Some(_), None) => (ProviderKind::OpenAi, "OPENAI_API_KEY is set"),
                    (None, None, Some(_)) => (ProviderKind::Anthropic, "ANTHROPIC_API_KEY is set"),
                    (None, None, None) if base_url.is_some() => (
                        ProviderKind::OpenAi,
                        "JARVIS_LLM__BASE_URL is set (an OpenAI-compatible server)",
                    ),
                    (None, None, None) => (
                        ProviderKind::Faux,
                        "no model is configured (set JARVIS_LLM__PROVIDER and a key); playing the built-in offline demo",
                    ),
                };
                notice = Some(match kind {
                    ProviderKind::Faux => why.to_owned(),
                    _ => format!("using {} because {why}", kind.as_str()),
                });
                may_discover = kind == ProviderKind::Faux && var(super::faux::FAUX_SCRIPT_ENV).is_none();
                kind
            }
        };
        let model = var("JARVIS_LLM__MODEL").unwrap_or_else(|| {
            match provider {
                ProviderKind::OpenAi => DEFAULT_OPENAI_MODEL,
                ProviderKind::Anthropic => DEFAULT_ANTHROPIC_MODEL,
                ProviderKind::Ollama => DEFAULT_OLLAMA_MODEL,
                ProviderKind::Faux => "",
            }
            .to_owned()
        });
        let key = match provider {
            ProviderKind::OpenAi => jarvis_key.or(openai_key),
            ProviderKind::Anthropic => jarvis_key.or(anthropic_key),
            ProviderKind::Ollama | ProviderKind::Faux => jarvis_key,
        };
        match provider {
            ProviderKind::Anthropic if key.is_none() => {
                return Err(ProviderError::Config(
                    "the anthropic provider needs JARVIS_LLM__API_KEY or ANTHROPIC_API_KEY".into(),
                ));
            }
            ProviderKind::OpenAi if key.is_none() && base_url.is_none() => {
                return Err(ProviderError::Config(
                    "the openai provider needs JARVIS_LLM__API_KEY or OPENAI_API_KEY \
                     (or JARVIS_LLM__BASE_URL for a local server that needs no key)"
                        .into(),
                ));
            }
            _ => {}
        }
        // Without the HTTP client there is nothing to discover with.
        #[cfg(not(feature = "http"))]
        let discovery = {
            let _ = may_discover;
            None
        };
        #[cfg(feature = "http")]
        let discovery = match var(super::discover::DISCOVER_ENV) {
            Some(spec) => super::discover::parse_targets(&spec)?.filter(|_| may_discover),
            None => may_discover.then(super::discover::default_targets),
        };
        let max_tokens = match var("JARVIS_LLM__MAX_TOKENS") {
            Some(v) => Some(v.parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(|| {
                ProviderError::Config(format!(
                    "JARVIS_LLM__MAX_TOKENS={v} is not a positive whole number"
                ))
            })?),
            None => None,
        };
        let temperature = match var("JARVIS_LLM__TEMPERATURE") {
            Some(v) => Some(
                v.parse::<f32>()
                    .ok()
                    .filter(|t| t.is_finite() && (0.0..=2.0).contains(t))
                    .ok_or_else(|| {
                        ProviderError::Config(format!(
                            "JARVIS_LLM__TEMPERATURE={v} is not a number from 0 to 2"
                        ))
                    })?,
            ),
            None => None,
        };
        Ok(Self {
            provider,
            model,
            base_url,
            api_key: key.map(crate::ApiKey::new),
            faux_script: var(super::faux::FAUX_SCRIPT_ENV).map(PathBuf::from),
            faux_request_log: var(super::faux::FAUX_REQUEST_LOG_ENV).map(PathBuf::from),
            notice,
            max_tokens,
            temperature,
            discovery,
        })
    }

    /// When nothing is configured (the demo would play), looks for a model
    /// server running on this machine ([`discovery`](Self::discovery),
    /// at most [`DISCOVERY_BUDGET`](super::DISCOVERY_BUDGET)) and, if one
    /// lists a chat model, switches to it: the provider, its base URL, the
    /// model, at most [`DISCOVERED_MAX_TOKENS`](super::DISCOVERED_MAX_TOKENS)
    /// output tokens unless `JARVIS_LLM__MAX_TOKENS` says otherwise, and a
    /// notice saying so. Answers whether it switched. Looks once: a second
    /// call does nothing.
    #[cfg(feature = "http")]
    pub async fn discover_local(&mut self) -> bool {
        let Some(targets) = self.discovery.take() else {
            return false;
        };
        let servers = super::discover::discover_models(&targets, super::discover::DISCOVERY_BUDGET).await;
        self.use_discovered(&servers)
    }

    /// What [`discover_local`](Self::discover_local) does with the servers
    /// that answered, for a caller that asked them itself (one discovery
    /// for chat and embeddings): switches to the first chat model they
    /// list. Answers whether it switched.
    #[cfg(feature = "http")]
    pub fn use_discovered(&mut self, servers: &[super::discover::FoundServer]) -> bool {
        let Some((server, model)) = super::discover::first_chat_model(servers) else {
            return false;
        };
        self.provider = server.target.kind;
        self.base_url = Some(server.target.base_url.clone());
        self.model = model.name.clone();
        self.max_tokens = self.max_tokens.or(Some(super::discover::DISCOVERED_MAX_TOKENS));
        let kind = match server.target.kind {
            ProviderKind::Ollama => "Ollama",
            _ => "an OpenAI-compatible server",
        };
        self.notice = Some(format!(
            "using the local model {} found running on this machine ({kind} at {}; JARVIS_LLM__PROVIDER=demo plays the offline demo instead)",
            model.name, server.target.base_url
        ));
        true
    }

    /// The provider these settings describe; requests that leave
    /// `max_tokens` or `temperature` unset get [`max_tokens`](Self::max_tokens)
    /// and [`temperature`](Self::temperature).
    pub fn build(&self) -> Result<Arc<dyn Provider>, ProviderError> {
        let provider = self.build_bare()?;
        if self.max_tokens.is_none() && self.temperature.is_none() {
            return Ok(provider);
        }
        Ok(Arc::new(WithDefaults {
            inner: provider,
            max_tokens: self.max_tokens,
            temperature: self.temperature,
        }))
    }

    fn build_bare(&self) -> Result<Arc<dyn Provider>, ProviderError> {
        Ok(match self.provider {
            // A long-running server keeps no history of the requests.
            ProviderKind::Faux => {
                let faux = match &self.faux_script {
                    Some(path) => FauxProvider::from_file(path)?,
                    None => FauxProvider::demo(),
                }
                .without_recording();
                Arc::new(match &self.faux_request_log {
                    Some(path) => faux.with_request_log(path)?,
                    None => faux,
                })
            }
            ProviderKind::OpenAi => {
                #[cfg(feature = "openai")]
                {
                    let mut c = super::openai::OpenAiConfig::new(self.api_key.clone(), self.model.clone());
                    if let Some(url) = &self.base_url {
                        c.base_url = url.clone();
                    }
                    Arc::new(super::openai::OpenAiProvider::new(c)?)
                }
                #[cfg(not(feature = "openai"))]
                return Err(missing_feature("openai"));
            }
            ProviderKind::Anthropic => {
                #[cfg(feature = "anthropic")]
                {
                    let key = self
                        .api_key
                        .clone()
                        .ok_or_else(|| ProviderError::Config("no anthropic key".into()))?;
                    let mut c = super::anthropic::AnthropicConfig::new(key, self.model.clone());
                    if let Some(url) = &self.base_url {
                        c.base_url = url.clone();
                    }
                    Arc::new(super::anthropic::AnthropicProvider::new(c)?)
                }
                #[cfg(not(feature = "anthropic"))]
                return Err(missing_feature("anthropic"));
            }
            ProviderKind::Ollama => {
                #[cfg(feature = "ollama")]
                {
                    let mut c = super::ollama::OllamaConfig::new(self.model.clone());
                    if let Some(url) = &self.base_url {
                        c.base_url = url.clone();
                    }
                    Arc::new(super::ollama::OllamaProvider::new(c)?)
                }
                #[cfg(not(feature = "ollama"))]
                return Err(missing_feature("ollama"));
            }
        })
    }
}

/// A provider that fills a request's `max_tokens` and `temperature` when
/// the request leaves them unset.
#[derive(Debug)]
struct WithDefaults {
    inner: Arc<dyn Provider>,
    max_tokens: Option<u32>,
    temperature: Option<f32>,
}

impl Provider for WithDefaults {
    fn stream(&self, mut request: ChatRequest) -> ProviderStream {
        request.max_tokens = request.max_tokens.or(self.max_tokens);
        request.temperature = request.temperature.or(self.temperature);
        self.inner.stream(request)
    }

    fn name(&self) -> &str {
        self.inner.name()
    }
}

/// The error for a provider whose cargo feature is off (used only in such builds).
#[cfg_attr(
    all(feature = "openai", feature = "anthropic", feature = "ollama"),
    allow(dead_code)
)]
fn missing_feature(feature: &str) -> ProviderError {
    ProviderError::Config(format!(
        "this build has no {feature} provider (cargo feature `{feature}`)"
    ))
}

/// Where discovery looks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveryTarget {
    /// How the server is spoken to: [`ProviderKind::Ollama`] or
    /// [`ProviderKind::OpenAi`] (OpenAI-compatible).
    pub kind: ProviderKind,
    /// Its base URL, as the provider takes it (`/v1` included for
    /// OpenAI-compatible servers).
    pub base_url: String,
}

impl DiscoveryTarget {
    /// An Ollama server at `base_url`.
    pub fn ollama(base_url: impl Into<String>) -> Self {
        Self {
            kind: ProviderKind::Ollama,
            base_url: base_url.into(),
        }
    }

    /// An OpenAI-compatible server at `base_url` (`/v1` included).
    pub fn openai(base_url: impl Into<String>) -> Self {
        Self {
            kind: ProviderKind::OpenAi,
            base_url: base_url.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(vars: &[(&str, &str)]) -> Result<LlmConfig, ProviderError> {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        LlmConfig::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn nothing_configured_plays_the_demo_and_says_so() {
        let c = config(&[]).unwrap();
        assert_eq!(c.provider, ProviderKind::Faux);
        assert!(c.notice.as_deref().unwrap().contains("offline demo"));
        assert_eq!(c.build().unwrap().name(), "faux");
        let blank = config(&[("JARVIS_LLM__PROVIDER", "  "), ("OPENAI_API_KEY", "")]).unwrap();
        assert_eq!(blank.provider, ProviderKind::Faux, "empty values count as unset");
    }

    #[test]
    fn a_lone_key_selects_its_provider_with_a_default_model() {
        let c = config(&[("OPENAI_API_KEY", "sk-1")]).unwrap();
        assert_eq!(
            (c.provider, c.model.as_str()),
            (ProviderKind::OpenAi, DEFAULT_OPENAI_MODEL)
        );
        assert!(c.notice.as_deref().unwrap().contains("OPENAI_API_KEY"));
        let c = config(&[("ANTHROPIC_API_KEY", "sk-ant-1")]).unwrap();
        assert_eq!(
            (c.provider, c.model.as_str()),
            (ProviderKind::Anthropic, DEFAULT_ANTHROPIC_MODEL)
        );
        let c = config(&[("JARVIS_LLM__API_KEY", "sk-ant-2")]).unwrap();
        assert_eq!(c.provider, ProviderKind::Anthropic);
        let c = config(&[("JARVIS_LLM__BASE_URL", "http://127.0.0.1:8080/v1")]).unwrap();
        assert_eq!(c.provider, ProviderKind::OpenAi);
        assert!(c.build().is_ok(), "a local server needs no key");
    }

    #[test]
    fn explicit_settings_win_and_keys_fall_back() {
        let c = config(&[
            ("JARVIS_LLM__PROVIDER", "Anthropic"),
            ("JARVIS_LLM__MODEL", "claude-haiku-4-5"),
            ("ANTHROPIC_API_KEY", "sk-ant-3"),
            ("OPENAI_API_KEY", "sk-4"),
        ])
        .unwrap();
        assert_eq!(
            (c.provider, c.model.as_str()),
            (ProviderKind::Anthropic, "claude-haiku-4-5")
        );
        assert_eq!(c.notice, None);
        assert_eq!(c.api_key.as_ref().unwrap().expose(), "sk-ant-3");
        assert_eq!(c.build().unwrap().name(), "anthropic");
        let o = config(&[("JARVIS_LLM__PROVIDER", "ollama")]).unwrap();
        assert_eq!(
            (o.model.as_str(), o.build().unwrap().name()),
            (DEFAULT_OLLAMA_MODEL, "ollama")
        );
    }

    #[test]
    fn mistakes_are_clear_errors() {
        let e = config(&[("JARVIS_LLM__PROVIDER", "gemini")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("gemini") && e.contains("openai, anthropic, ollama, faux or demo"),
            "{e}"
        );
        let e = config(&[("JARVIS_LLM__PROVIDER", "anthropic")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("ANTHROPIC_API_KEY"), "{e}");
        let e = config(&[("JARVIS_LLM__PROVIDER", "openai")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("OPENAI_API_KEY"), "{e}");
        let faux = config(&[
            ("JARVIS_LLM__PROVIDER", "faux"),
            ("JARVIS_FAUX__SCRIPT", "/no/such.yaml"),
        ])
        .unwrap();
        assert!(
            faux.build()
                .unwrap_err()
                .to_string()
                .contains("cannot read faux script")
        );
    }

    #[test]
    fn debug_hides_the_key() {
        let c = config(&[("OPENAI_API_KEY", "sk-very-secret")]).unwrap();
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("sk-very-secret") && shown.contains("<redacted>"),
            "{shown}"
        );
    }
}
