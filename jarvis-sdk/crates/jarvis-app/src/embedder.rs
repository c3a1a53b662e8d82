//! The embedder of recall: chosen from `JARVIS_EMBED__*` (or given in
//! code), and recorded in `$JARVIS_HOME/embedder.json` ([`EmbedderChoice`]).
//!
//! - An embedder given in code ([`AppConfig::with_embedder`]) wins.
//! - `hash` (the default), `openai` and `ollama` are used as configured,
//!   whether their server answers or not: an app never switches embedder
//!   by itself. One that does not answer is logged at start; recall then
//!   answers from what is already embedded with it, and re-embedding waits
//!   for it (`MemoryService::keep_embedded`).
//! - `auto` keeps the model it found at an earlier start (recorded with
//!   `"requested": "auto"`), so a start never moves to another model by
//!   itself; it looks again (within the start's one 300 ms discovery, shared
//!   with chat) only when nothing is recorded or what it recorded was the
//!   hash embedder because nothing was found. Found nothing: the hash
//!   embedder, logged.
//!
//! When the embedder differs from the one recorded, that is logged, and
//! the memories are embedded again in the background.

use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;

use super::config::AppConfig;
use super::error::AppError;
use jarvis_model::{EmbedConfig, EmbedProvider, Embedder};

/// The file in `JARVIS_HOME` that names the embedder of recall.
pub const EMBEDDER_FILE: &str = "embedder.json";

/// The embedder of recall, as `embedder.json` records it:
/// `{"v": 1, "provider", "model"?, "base_url"?, "embedder", "requested"}`.
/// Never a key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EmbedderChoice {
    /// `hash`, `openai`, `ollama`, or `custom` (given in code).
    pub provider: String,
    /// The model, for `openai` and `ollama`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The server, for `openai` and `ollama`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The name on the records it embedded (`Embedder::name`, such as
    /// `hash-v1-512` or `openai/text-embedding-3-small`).
    pub embedder: String,
    /// What was asked for: `JARVIS_EMBED__PROVIDER` (`hash`, `openai`,
    /// `ollama`, `auto`), or `code`.
    pub requested: String,
}

#[derive(Serialize, Deserialize)]
struct ChoiceFile {
    v: u32,
    #[serde(flatten)]
    choice: EmbedderChoice,
}

impl EmbedderChoice {
    /// What `config` (resolved: `auto` has become what it found) and the
    /// built `embedder` amount to.
    fn of(config: &EmbedConfig, requested: EmbedProvider, embedder: &dyn Embedder) -> Self {
        let remote = matches!(config.provider, EmbedProvider::OpenAi | EmbedProvider::Ollama);
        Self {
            provider: match config.provider {
                EmbedProvider::Auto => EmbedProvider::Hash.as_str(),
                other => other.as_str(),
            }
            .to_owned(),
            model: config.model.clone().filter(|_| remote),
            base_url: config.base_url.clone().filter(|_| remote),
            embedder: embedder.name().to_owned(),
            requested: requested.as_str().to_owned(),
        }
    }

    /// An embedder given in code.
    fn code(embedder: &dyn Embedder) -> Self {
        Self {
            provider: "custom".to_owned(),
            model: None,
            base_url: None,
            embedder: embedder.name().to_owned(),
            requested: "code".to_owned(),
        }
    }

    /// Whether `auto` keeps this choice: auto made it and found a model.
    fn kept_by_auto(&self) -> bool {
        self.requested == EmbedProvider::Auto.as_str()
            && matches!(
                EmbedProvider::parse(&self.provider),
                Some(EmbedProvider::OpenAi | EmbedProvider::Ollama)
            )
            && self.model.is_some()
            && self.base_url.is_some()
    }

    /// The recorded choice in `home`; `None` when there is none, or when
    /// the file cannot be read as one (logged; it is written again).
    pub fn load(home: &Path) -> Option<Self> {
        let path = home.join(EMBEDDER_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(path = %path.display(), "memory: cannot read the embedder file ({e}); it is written again");
                return None;
            }
        };
        match serde_json::from_slice::<ChoiceFile>(&bytes) {
            Ok(file) if file.v == 1 => Some(file.choice),
            Ok(file) => {
                tracing::warn!(path = %path.display(), version = file.v, "memory: the embedder file is of another version; it is written again");
                None
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), "memory: the embedder file is damaged ({e}); it is written again");
                None
            }
        }
    }

    /// Writes the choice to `home` (atomically), unless the file already
    /// says exactly this.
    pub fn save(&self, home: &Path) -> Result<(), AppError> {
        let path = home.join(EMBEDDER_FILE);
        let mut text = serde_json::to_string_pretty(&ChoiceFile {
            v: 1,
            choice: self.clone(),
        })
        .map_err(|e| AppError::Config(format!("cannot write the embedder choice: {e}")))?;
        text.push('\n');
        if std::fs::read(&path).is_ok_and(|old| old == text.as_bytes()) {
            return Ok(());
        }
        jarvis_common::write_atomic(&path, text.as_bytes()).map_err(|source| AppError::Io {
            what: format!("write {}", path.display()),
            source,
        })
    }
}

/// The embedder the app recalls with, and its record.
pub(super) struct ChosenEmbedder {
    pub(super) embedder: Arc<dyn Embedder>,
    pub(super) choice: EmbedderChoice,
}

/// Looks for model servers on this machine once for the whole start, when
/// chat has nothing configured and when `auto` must look (see the [module
/// docs](self)), and chooses the embedder. Answers `None` with memory off.
pub(super) async fn choose_at_start(config: &mut AppConfig) -> Result<Option<ChosenEmbedder>, AppError> {
    let memory = config.memory.enabled;
    let previous = memory.then(|| EmbedderChoice::load(&config.home)).flatten();
    let coded = config.memory.embedder.clone();
    let from_code = coded.is_some();
    let requested = config.memory.embed.provider;
    let mut embed = config.memory.embed.clone();
    let mut kept = false;
    if memory
        && !from_code
        && requested == EmbedProvider::Auto
        && let Some(previous) = previous.as_ref().filter(|p| p.kept_by_auto())
    {
        embed.provider = EmbedProvider::parse(&previous.provider).unwrap_or(EmbedProvider::Hash);
        embed.model = previous.model.clone();
        embed.base_url = previous.base_url.clone();
        kept = true;
    }
    #[cfg(feature = "http")]
    {
        let looks = memory && !from_code && embed.provider == EmbedProvider::Auto;
        let embed_targets = if looks { embed.discovery.take() } else { None };
        let chat_targets = if config.provider.is_none() {
            config.llm.discovery.take()
        } else {
            None
        };
        if embed_targets.is_some() || chat_targets.is_some() {
            let mut targets = chat_targets.clone().unwrap_or_default();
            for target in embed_targets.iter().flatten() {
                if !targets.contains(target) {
                    targets.push(target.clone());
                }
            }
            let servers = jarvis_model::discover_models(&targets, jarvis_model::DISCOVERY_BUDGET).await;
            let among = |wanted: &Option<Vec<jarvis_model::DiscoveryTarget>>| {
                let wanted = wanted.as_deref().unwrap_or_default();
                servers
                    .iter()
                    .filter(|s| wanted.contains(&s.target))
                    .cloned()
                    .collect::<Vec<_>>()
            };
            if chat_targets.is_some() && config.llm.use_discovered(&among(&chat_targets)) {
                tracing::info!("model: {}", config.llm.notice.as_deref().unwrap_or_default());
            }
            if embed_targets.is_some() {
                embed.use_discovered(&among(&embed_targets));
            }
        }
    }
    if !memory {
        return Ok(None);
    }
    let chosen = match coded {
        Some(embedder) => ChosenEmbedder {
            choice: EmbedderChoice::code(embedder.as_ref()),
            embedder,
        },
        None => {
            let embedder = embed.build()?;
            ChosenEmbedder {
                choice: EmbedderChoice::of(&embed, requested, embedder.as_ref()),
                embedder,
            }
        }
    };
    let choice = &chosen.choice;
    let at = choice.base_url.as_deref().unwrap_or("this process");
    if kept {
        tracing::info!(
            embedder = %choice.embedder,
            "memory: keeping the embedder JARVIS_EMBED__PROVIDER=auto found before ({at}, recorded in {EMBEDDER_FILE}); set JARVIS_EMBED__PROVIDER, or delete the file, to choose again"
        );
    } else if !from_code && embed.provider == EmbedProvider::Auto {
        tracing::info!(
            embedder = %choice.embedder,
            "memory: JARVIS_EMBED__PROVIDER=auto found no embedding model on this machine; recall uses the offline hash embedder"
        );
    } else {
        tracing::info!(embedder = %choice.embedder, "memory: recall embeds with {} ({at})", choice.embedder);
    }
    if let Some(previous) = &previous
        && previous.embedder != choice.embedder
    {
        tracing::info!(
            from = %previous.embedder,
            to = %choice.embedder,
            "memory: the embedder changed; the memories are embedded again in the background, and recall answers from those already embedded meanwhile"
        );
    }
    choice.save(&config.home)?;
    Ok(Some(chosen))
}
