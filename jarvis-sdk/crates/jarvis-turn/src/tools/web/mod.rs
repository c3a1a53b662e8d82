//! Reading the web: `web_fetch {url}` (a page as readable text) and
//! `web_search {query, limit}` (titles, links and snippets from a configured
//! search backend). The tools need the `http` feature; their settings are
//! plain data and exist in every build.
//!
//! | tool | arguments | asks for approval | offered |
//! |---|---|---|---|
//! | `web_fetch` | `{url}` | no | to agents whose definition lists it (agent-only) |
//! | `web_search` | `{query, limit}` | no | when a backend is configured |
//!
//! `web_fetch` refuses addresses that are not on the public internet
//! (loopback, private, link-local, …; see [`non_public_address_kind`]),
//! judged after DNS resolution and on every redirect, and connects only to
//! the addresses it judged. [`WebFetchSettings::allow_private`]
//! (`JARVIS_WEB_FETCH__ALLOW_PRIVATE=1`) lifts that for tests and home
//! networks. `web_search` goes only to the endpoint the operator set.
//!
//! Every refusal and failure is an `is_error` result the model reads.

mod address;
#[cfg(feature = "http")]
mod fetch;
#[cfg(feature = "http")]
mod page;
#[cfg(feature = "http")]
mod search;

pub use address::non_public_address_kind;

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

/// The name of the page-reading tool.
pub const WEB_FETCH_TOOL: &str = "web_fetch";
/// The name of the search tool.
pub const WEB_SEARCH_TOOL: &str = "web_search";

/// `1` lets `web_fetch` reach loopback, private and link-local addresses.
pub const WEB_FETCH_ALLOW_PRIVATE_ENV: &str = "JARVIS_WEB_FETCH__ALLOW_PRIVATE";
/// The search backend: `searxng`, `brave` or `tavily`.
pub const WEB_SEARCH_PROVIDER_ENV: &str = "JARVIS_WEB_SEARCH__PROVIDER";
/// The backend's address (required for SearXNG; replaces the public
/// endpoint of the others).
pub const WEB_SEARCH_BASE_URL_ENV: &str = "JARVIS_WEB_SEARCH__BASE_URL";
/// The backend's API key (required for Brave and Tavily).
pub const WEB_SEARCH_API_KEY_ENV: &str = "JARVIS_WEB_SEARCH__API_KEY";

/// Default of [`WebFetchSettings::timeout`] and [`WebSearchSettings::timeout`].
pub const DEFAULT_WEB_TIMEOUT: Duration = Duration::from_secs(20);
/// Default of [`WebFetchSettings::max_bytes`]: 2 MiB.
pub const DEFAULT_WEB_FETCH_MAX_BYTES: usize = 2 * 1024 * 1024;
/// Default of [`WebFetchSettings::max_chars`].
pub const DEFAULT_WEB_FETCH_MAX_CHARS: usize = 32 * 1024;
/// Default of [`WebFetchSettings::max_redirects`].
pub const DEFAULT_WEB_FETCH_MAX_REDIRECTS: usize = 5;
/// Results `web_search` returns when the call does not say (`limit`).
pub const DEFAULT_SEARCH_RESULTS: usize = 5;
/// The most results one `web_search` call returns.
pub const MAX_SEARCH_RESULTS: usize = 10;

/// How `web_fetch` reads pages.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WebFetchSettings {
    /// The longest a whole fetch may take, redirects and body included.
    /// Default 20 s.
    pub timeout: Duration,
    /// Bytes of a response body read at most; the rest is not downloaded
    /// and the text says it was cut. Default 2 MiB.
    pub max_bytes: usize,
    /// Characters of text returned at most (after the HTML became text).
    /// Default 32,768.
    pub max_chars: usize,
    /// Redirects followed at most, each one checked like the first
    /// address. Default 5.
    pub max_redirects: usize,
    /// Reach loopback, private, link-local and other non-public addresses
    /// too (`JARVIS_WEB_FETCH__ALLOW_PRIVATE=1`). Default off.
    pub allow_private: bool,
    /// Exact addresses (IP and port) reachable even though they are not
    /// public, when `allow_private` is off: a test server, one service on
    /// the home network. Set in code only.
    pub allowed_addresses: Vec<SocketAddr>,
}

impl Default for WebFetchSettings {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_WEB_TIMEOUT,
            max_bytes: DEFAULT_WEB_FETCH_MAX_BYTES,
            max_chars: DEFAULT_WEB_FETCH_MAX_CHARS,
            max_redirects: DEFAULT_WEB_FETCH_MAX_REDIRECTS,
            allow_private: false,
            allowed_addresses: Vec::new(),
        }
    }
}

impl WebFetchSettings {
    /// The settings `JARVIS_WEB_FETCH__*` describe, read through `get`
    /// (empty values count as unset): only `JARVIS_WEB_FETCH__ALLOW_PRIVATE`
    /// (`1`/`0`, `true`/`false`, `yes`/`no`, `on`/`off`; anything else is an
    /// error rather than a guess).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let mut settings = Self::default();
        if let Some(value) = get(WEB_FETCH_ALLOW_PRIVATE_ENV)
            .map(|v| v.trim().to_ascii_lowercase())
            .filter(|v| !v.is_empty())
        {
            settings.allow_private = match value.as_str() {
                "1" | "true" | "yes" | "on" => true,
                "0" | "false" | "no" | "off" => false,
                _ => return Err(format!("{WEB_FETCH_ALLOW_PRIVATE_ENV}={value} is not 0 or 1")),
            };
        }
        Ok(settings)
    }

    /// Sets [`WebFetchSettings::allow_private`].
    pub fn with_allow_private(mut self, allow: bool) -> Self {
        self.allow_private = allow;
        self
    }

    /// Adds an exact address to [`WebFetchSettings::allowed_addresses`].
    pub fn with_allowed_address(mut self, addr: SocketAddr) -> Self {
        self.allowed_addresses.push(addr);
        self
    }

    /// Sets [`WebFetchSettings::timeout`].
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets [`WebFetchSettings::max_bytes`].
    pub fn with_max_bytes(mut self, bytes: usize) -> Self {
        self.max_bytes = bytes;
        self
    }

    /// Sets [`WebFetchSettings::max_chars`].
    pub fn with_max_chars(mut self, chars: usize) -> Self {
        self.max_chars = chars;
        self
    }
}

/// A search backend of `web_search`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchProvider {
    /// A SearXNG instance (`JARVIS_WEB_SEARCH__BASE_URL` names it; its
    /// settings must allow the `json` format).
    Searxng,
    /// Brave's Web Search API (an API key).
    Brave,
    /// Tavily's search API (an API key).
    Tavily,
}

impl SearchProvider {
    /// The name used in `JARVIS_WEB_SEARCH__PROVIDER`.
    pub fn id(self) -> &'static str {
        match self {
            Self::Searxng => "searxng",
            Self::Brave => "brave",
            Self::Tavily => "tavily",
        }
    }

    /// The name shown to people and the model.
    pub fn display_name(self) -> &'static str {
        match self {
            Self::Searxng => "SearXNG",
            Self::Brave => "Brave Search",
            Self::Tavily => "Tavily",
        }
    }

    /// The public API's address, when the backend has one.
    pub fn default_base_url(self) -> Option<&'static str> {
        match self {
            Self::Searxng => None,
            Self::Brave => Some("https://api.search.brave.com"),
            Self::Tavily => Some("https://api.tavily.com"),
        }
    }

    /// The search operation's path, appended to the base URL.
    pub fn path(self) -> &'static str {
        match self {
            Self::Searxng | Self::Tavily => "/search",
            Self::Brave => "/res/v1/web/search",
        }
    }

    fn needs_key(self) -> bool {
        matches!(self, Self::Brave | Self::Tavily)
    }
}

/// Where `web_search` searches (`JARVIS_WEB_SEARCH__*`).
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WebSearchSettings {
    /// The backend.
    pub provider: SearchProvider,
    /// The backend's address; required for SearXNG, and for the others it
    /// replaces the public API's address (a proxy, a test server). The
    /// operation's path ([`SearchProvider::path`]) is appended unless the
    /// URL already ends with it.
    pub base_url: Option<String>,
    /// The API key (Brave, Tavily). Never shown by `Debug`.
    pub api_key: Option<String>,
    /// The longest one search may take. Default 20 s.
    pub timeout: Duration,
}

impl fmt::Debug for WebSearchSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebSearchSettings")
            .field("provider", &self.provider)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl WebSearchSettings {
    /// A SearXNG instance at `base_url`.
    pub fn searxng(base_url: impl Into<String>) -> Self {
        Self::new(SearchProvider::Searxng, Some(base_url.into()), None)
    }

    /// Brave's Web Search API with `api_key`.
    pub fn brave(api_key: impl Into<String>) -> Self {
        Self::new(SearchProvider::Brave, None, Some(api_key.into()))
    }

    /// Tavily's search API with `api_key`.
    pub fn tavily(api_key: impl Into<String>) -> Self {
        Self::new(SearchProvider::Tavily, None, Some(api_key.into()))
    }

    fn new(provider: SearchProvider, base_url: Option<String>, api_key: Option<String>) -> Self {
        Self {
            provider,
            base_url,
            api_key,
            timeout: DEFAULT_WEB_TIMEOUT,
        }
    }

    /// Sets [`WebSearchSettings::base_url`].
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = Some(base_url.into());
        self
    }

    /// Sets [`WebSearchSettings::timeout`].
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The backend `JARVIS_WEB_SEARCH__*` describes, read through `get`
    /// (empty values count as unset); `None` when no variable is set.
    ///
    /// | variable | meaning |
    /// |---|---|
    /// | `JARVIS_WEB_SEARCH__PROVIDER` | `searxng`, `brave` or `tavily` |
    /// | `JARVIS_WEB_SEARCH__BASE_URL` | required for `searxng`; replaces the public endpoint of the others |
    /// | `JARVIS_WEB_SEARCH__API_KEY` | required for `brave` and `tavily` |
    ///
    /// An unknown provider, a missing key or address, an address that is
    /// not `http(s)://`, or a key or address without a provider is an
    /// error naming the variable.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, String> {
        let var = |name: &str| get(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let base_url = var(WEB_SEARCH_BASE_URL_ENV);
        let api_key = var(WEB_SEARCH_API_KEY_ENV);
        let Some(name) = var(WEB_SEARCH_PROVIDER_ENV) else {
            if let Some(set) = [
                (WEB_SEARCH_BASE_URL_ENV, &base_url),
                (WEB_SEARCH_API_KEY_ENV, &api_key),
            ]
            .iter()
            .find_map(|(name, value)| value.is_some().then_some(*name))
            {
                return Err(format!(
                    "{set} is set but {WEB_SEARCH_PROVIDER_ENV} is not; set it to searxng, brave or tavily"
                ));
            }
            return Ok(None);
        };
        let provider = match name.to_ascii_lowercase().as_str() {
            "searxng" => SearchProvider::Searxng,
            "brave" => SearchProvider::Brave,
            "tavily" => SearchProvider::Tavily,
            _ => {
                return Err(format!(
                    "{WEB_SEARCH_PROVIDER_ENV}={name} is not a search backend; use searxng, brave or tavily"
                ));
            }
        };
        if provider == SearchProvider::Searxng && base_url.is_none() {
            return Err(format!(
                "{WEB_SEARCH_PROVIDER_ENV}=searxng needs {WEB_SEARCH_BASE_URL_ENV} (the address of the SearXNG instance)"
            ));
        }
        if provider.needs_key() && api_key.is_none() {
            return Err(format!(
                "{WEB_SEARCH_PROVIDER_ENV}={} needs {WEB_SEARCH_API_KEY_ENV}",
                provider.id()
            ));
        }
        if let Some(url) = &base_url {
            let lower = url.to_ascii_lowercase();
            let rest = lower
                .strip_prefix("https://")
                .or_else(|| lower.strip_prefix("http://"));
            if rest.is_none_or(|host| host.is_empty() || host.starts_with('/')) {
                return Err(format!(
                    "{WEB_SEARCH_BASE_URL_ENV}={url} is not an http:// or https:// address"
                ));
            }
        }
        Ok(Some(Self::new(provider, base_url, api_key)))
    }

    /// The URL searches go to: the base URL (the public API's by default)
    /// with the operation's path appended unless it already ends with it.
    pub fn endpoint(&self) -> String {
        let base = self
            .base_url
            .as_deref()
            .or(self.provider.default_base_url())
            .unwrap_or_default()
            .trim_end_matches('/');
        let path = self.provider.path();
        if base.ends_with(path) {
            base.to_owned()
        } else {
            format!("{base}{path}")
        }
    }
}

#[cfg(feature = "http")]
pub use search::WebSearchArgs;
#[cfg(feature = "http")]
pub use {fetch::WebFetchArgs, fetch::WebFetchTool, search::WebSearchTool};

/// The `web_fetch` tool with `settings`.
#[cfg(feature = "http")]
pub fn web_fetch_tool(settings: WebFetchSettings) -> std::sync::Arc<dyn jarvis_agent::Tool> {
    std::sync::Arc::new(jarvis_agent::Typed::new(WebFetchTool::new(settings)))
}

/// The `web_search` tool over the backend `settings` describes; an error
/// when its HTTP client cannot be built.
#[cfg(feature = "http")]
pub fn web_search_tool(
    settings: WebSearchSettings,
) -> Result<std::sync::Arc<dyn jarvis_agent::Tool>, jarvis_agent::ToolError> {
    Ok(std::sync::Arc::new(jarvis_agent::Typed::new(WebSearchTool::new(
        settings,
    )?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn the_endpoint_appends_the_operation_unless_it_is_there() {
        assert_eq!(
            WebSearchSettings::brave("k").endpoint(),
            "https://api.search.brave.com/res/v1/web/search"
        );
        assert_eq!(
            WebSearchSettings::tavily("k").endpoint(),
            "https://api.tavily.com/search"
        );
        assert_eq!(
            WebSearchSettings::searxng("http://127.0.0.1:8888/").endpoint(),
            "http://127.0.0.1:8888/search"
        );
        assert_eq!(
            WebSearchSettings::brave("k")
                .with_base_url("http://127.0.0.1:9/res/v1/web/search")
                .endpoint(),
            "http://127.0.0.1:9/res/v1/web/search"
        );
        assert_eq!(
            WebSearchSettings::brave("k")
                .with_base_url("http://127.0.0.1:9")
                .endpoint(),
            "http://127.0.0.1:9/res/v1/web/search"
        );
    }

    #[test]
    fn the_api_key_never_shows_in_debug() {
        let shown = format!("{:?}", WebSearchSettings::brave("sekrit-key"));
        assert!(!shown.contains("sekrit"), "{shown}");
        assert!(shown.contains("<redacted>"));
    }

    #[test]
    fn the_fetch_switch_is_strict() {
        assert!(!WebFetchSettings::from_vars(vars(&[])).unwrap().allow_private);
        assert!(
            WebFetchSettings::from_vars(vars(&[(WEB_FETCH_ALLOW_PRIVATE_ENV, "1")]))
                .unwrap()
                .allow_private
        );
        assert!(
            WebFetchSettings::from_vars(vars(&[(WEB_FETCH_ALLOW_PRIVATE_ENV, "maybe")]))
                .unwrap_err()
                .contains("JARVIS_WEB_FETCH__ALLOW_PRIVATE=maybe is not 0 or 1")
        );
    }

    #[test]
    fn a_base_url_must_be_http() {
        let err = WebSearchSettings::from_vars(vars(&[
            (WEB_SEARCH_PROVIDER_ENV, "searxng"),
            (WEB_SEARCH_BASE_URL_ENV, "localhost:8888"),
        ]))
        .unwrap_err();
        assert!(err.contains("is not an http:// or https:// address"), "{err}");
    }
}
