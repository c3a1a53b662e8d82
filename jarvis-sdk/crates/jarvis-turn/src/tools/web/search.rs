//! `web_search {query, limit}`: titles, links and snippets from the
//! configured backend, as a numbered list.
//!
//! The three APIs, each as its documentation describes it:
//!
//! - SearXNG (<https://docs.searxng.org/dev/search_api.html>):
//!   `GET <base>/search?q=…&format=json`, answering `results[]` with
//!   `title`, `url` and `content`. An instance answers 403 when `json` is
//!   not among its `search.formats`.
//! - Brave Search (<https://api-dashboard.search.brave.com/app/documentation/web-search/get-started>,
//!   query parameters and response model in the same documentation):
//!   `GET https://api.search.brave.com/res/v1/web/search?q=…&count=…` with
//!   `X-Subscription-Token: <key>` and `Accept: application/json`,
//!   answering `web.results[]` with `title`, `url` and `description` (which
//!   may hold `<strong>` marks); no `web` means no results.
//! - Tavily (<https://docs.tavily.com/documentation/api-reference/endpoint/search>):
//!   `POST https://api.tavily.com/search` with `Authorization: Bearer <key>`
//!   and the JSON body `{query, max_results}`, answering `results[]` with
//!   `title`, `url` and `content`.
//!
//! A 429 answer says the backend is rate limiting (with its `Retry-After`
//! when given); other error statuses, transport failures and answers that
//! are not the expected JSON are `is_error` results too. Messages never
//! carry the endpoint or the key.

use async_trait::async_trait;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderValue, RETRY_AFTER};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use std::fmt::Write as _;

use super::{
    DEFAULT_SEARCH_RESULTS, MAX_SEARCH_RESULTS, SearchProvider, WEB_SEARCH_API_KEY_ENV, WEB_SEARCH_TOOL,
    WebSearchSettings,
};
use jarvis_agent::{ToolContext, ToolError, ToolResult, TypedTool};
use jarvis_common::{error_chain, one_line};

/// Bytes of an answer read at most.
const MAX_ANSWER: usize = 4 * 1024 * 1024;
/// Characters of a snippet kept.
const SNIPPET_CHARS: usize = 300;
/// Characters of a title kept.
const TITLE_CHARS: usize = 200;

/// Arguments of `web_search`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WebSearchArgs {
    /// What to search for.
    pub query: String,
    /// How many results to return, 1 to 10 (default 5).
    #[serde(default)]
    pub limit: Option<u32>,
}

/// `web_search {query, limit}` over one backend (see the module docs).
#[derive(Debug)]
pub struct WebSearchTool {
    settings: WebSearchSettings,
    endpoint: String,
    client: reqwest::Client,
}

/// One result as the model reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Hit {
    title: String,
    url: String,
    snippet: String,
}

impl WebSearchTool {
    /// The tool over `settings`' backend; an error when the HTTP client
    /// cannot be built.
    pub fn new(settings: WebSearchSettings) -> Result<Self, ToolError> {
        let client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .user_agent(concat!("jarvis-sdk/", env!("CARGO_PKG_VERSION"), " (web_search)"))
            .build()
            .map_err(|e| {
                ToolError::Failed(format!(
                    "web_search: cannot build the HTTP client: {}",
                    error_chain(&e)
                ))
            })?;
        Ok(Self {
            endpoint: settings.endpoint(),
            settings,
            client,
        })
    }

    fn request(&self, query: &str, limit: usize) -> Result<reqwest::RequestBuilder, String> {
        let key = self.settings.api_key.as_deref().unwrap_or_default();
        let secret = |value: String| -> Result<HeaderValue, String> {
            let mut value = HeaderValue::from_str(&value).map_err(|_| {
                format!("web_search: {WEB_SEARCH_API_KEY_ENV} has characters a header cannot carry")
            })?;
            value.set_sensitive(true);
            Ok(value)
        };
        Ok(match self.settings.provider {
            SearchProvider::Searxng => self
                .client
                .get(&self.endpoint)
                .query(&[("q", query), ("format", "json")])
                .header(ACCEPT, "application/json"),
            SearchProvider::Brave => self
                .client
                .get(&self.endpoint)
                .query(&[("q", query), ("count", &limit.to_string())])
                .header(ACCEPT, "application/json")
                .header("X-Subscription-Token", secret(key.to_owned())?),
            SearchProvider::Tavily => self
                .client
                .post(&self.endpoint)
                .header(ACCEPT, "application/json")
                .header(AUTHORIZATION, secret(format!("Bearer {key}"))?)
                .json(&json!({"query": query, "max_results": limit})),
        })
    }

    /// Runs one search: the hits, or the message for the model.
    async fn search(&self, query: &str, limit: usize) -> Result<Vec<Hit>, String> {
        let backend = self.settings.provider.display_name();
        let mut response = self
            .request(query, limit)?
            .send()
            .await
            .map_err(|e| self.transport_error(e))?;
        let status = response.status();
        if !status.is_success() {
            return Err(self.status_error(status, response).await);
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.transport_error(e))? {
            body.extend_from_slice(&chunk);
            if body.len() > MAX_ANSWER {
                return Err(format!(
                    "web_search: {backend}'s answer is longer than {MAX_ANSWER} bytes; not read"
                ));
            }
        }
        let answer: Value = serde_json::from_slice(&body)
            .map_err(|e| format!("web_search: {backend}'s answer is not the JSON a search returns ({e})"))?;
        let mut hits = parse_hits(self.settings.provider, &answer)
            .map_err(|what| format!("web_search: {backend}'s answer is not a search result: {what}"))?;
        hits.truncate(limit);
        Ok(hits)
    }

    async fn status_error(&self, status: StatusCode, response: reqwest::Response) -> String {
        let provider = self.settings.provider;
        let backend = provider.display_name();
        if status == StatusCode::TOO_MANY_REQUESTS {
            let wait = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(|v| match v.parse::<u64>() {
                    Ok(secs) => format!(" (Retry-After: {secs} s)"),
                    Err(_) => format!(" (Retry-After: {v})"),
                })
                .unwrap_or_default();
            return format!("web_search: the search backend is rate limiting (429); try again later{wait}");
        }
        let detail = short_body(response).await;
        let hint = match (provider, status.as_u16()) {
            (SearchProvider::Searxng, 403) => {
                "; a SearXNG instance answers 403 when `json` is not among its search.formats"
            }
            (SearchProvider::Brave | SearchProvider::Tavily, 401 | 403) => {
                "; check JARVIS_WEB_SEARCH__API_KEY"
            }
            _ => "",
        };
        let reason = status.canonical_reason().unwrap_or("error");
        let mut message = format!(
            "web_search: {backend} answered HTTP {} {reason}{hint}",
            status.as_u16()
        );
        if !detail.is_empty() {
            let _ = write!(message, " ({detail})");
        }
        message
    }

    /// A failed request in words, without the endpoint.
    fn transport_error(&self, e: reqwest::Error) -> String {
        let backend = self.settings.provider.display_name();
        let e = e.without_url();
        if e.is_timeout() {
            format!(
                "web_search: {backend} did not answer within {} s",
                self.settings.timeout.as_secs_f32()
            )
        } else if e.is_connect() {
            format!("web_search: cannot reach {backend}: {}", error_chain(&e))
        } else {
            format!("web_search: the search failed: {}", error_chain(&e))
        }
    }
}

#[async_trait]
impl TypedTool for WebSearchTool {
    type Args = WebSearchArgs;

    fn name(&self) -> &str {
        WEB_SEARCH_TOOL
    }

    fn description(&self) -> &str {
        "Searches the web and returns a numbered list of results, each with its title, link and a \
         short snippet. `limit` is how many results (1 to 10, default 5). Read a result's page \
         with web_fetch when you have it."
    }

    async fn run(&self, args: WebSearchArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        if ctx.cancel.is_cancelled() {
            return Err(ToolError::Cancelled);
        }
        let query = args.query.trim();
        if query.is_empty() {
            return Ok(ToolResult::error("web_search: the query is empty"));
        }
        let limit = args
            .limit
            .map_or(DEFAULT_SEARCH_RESULTS, |l| l as usize)
            .clamp(1, MAX_SEARCH_RESULTS);
        let found = tokio::select! {
            _ = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
            found = self.search(query, limit) => found,
        };
        Ok(match found {
            Ok(hits) => ToolResult::ok(render(query, self.settings.provider, &hits)),
            Err(message) => ToolResult::error(message),
        })
    }
}

/// The hits of an answer; `Err` names what is missing.
fn parse_hits(provider: SearchProvider, answer: &Value) -> Result<Vec<Hit>, &'static str> {
    let (list, snippet_field) = match provider {
        SearchProvider::Searxng => (answer.get("results"), "content"),
        SearchProvider::Tavily => (answer.get("results"), "content"),
        SearchProvider::Brave => {
            if !answer.is_object() {
                return Err("not a JSON object");
            }
            // A search answer (`type: search`) without a `web` section:
            // Brave found nothing on the web.
            match answer.get("web") {
                None | Some(Value::Null) if answer.get("type").and_then(Value::as_str) == Some("search") => {
                    return Ok(Vec::new());
                }
                web => (web.and_then(|w| w.get("results")), "description"),
            }
        }
    };
    let list = list.and_then(Value::as_array).ok_or(match provider {
        SearchProvider::Brave => "no `web.results` list",
        _ => "no `results` list",
    })?;
    let text = |item: &Value, field: &str| {
        item.get(field)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    Ok(list
        .iter()
        .filter_map(|item| {
            let url = text(item, "url");
            if url.trim().is_empty() {
                return None;
            }
            Some(Hit {
                title: one_line(&strip_tags(&text(item, "title")), TITLE_CHARS),
                url: url.trim().to_owned(),
                snippet: one_line(&strip_tags(&text(item, snippet_field)), SNIPPET_CHARS),
            })
        })
        .collect())
}

/// The numbered list the model reads.
fn render(query: &str, provider: SearchProvider, hits: &[Hit]) -> String {
    let backend = provider.display_name();
    if hits.is_empty() {
        return format!("No results for {query:?} ({backend}).");
    }
    let mut out = format!("Results for {query:?} ({backend}):\n");
    for (i, hit) in hits.iter().enumerate() {
        let title = if hit.title.is_empty() {
            "(no title)"
        } else {
            &hit.title
        };
        let _ = write!(out, "\n{}. {title}\n   {}\n", i + 1, hit.url);
        if !hit.snippet.is_empty() {
            let _ = writeln!(out, "   {}", hit.snippet);
        }
    }
    out.truncate(out.trim_end().len());
    out
}

/// Tags out (Brave marks matches with `<strong>`) and the common
/// entities decoded.
fn strip_tags(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_tag = false;
    for c in text.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&#x27;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&nbsp;", " ")
        .replace("&amp;", "&")
}

/// The start of an error answer on one line: a JSON `message`, `error` or
/// `detail` when there is one, else the text.
async fn short_body(mut response: reqwest::Response) -> String {
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        body.extend_from_slice(&chunk);
        if body.len() > 16 * 1024 {
            break;
        }
    }
    let text = String::from_utf8_lossy(&body);
    let from_json = serde_json::from_str::<Value>(&text).ok().and_then(|v| {
        ["message", "error", "detail"]
            .iter()
            .find_map(|k| match v.get(*k) {
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Object(o)) => ["message", "detail"]
                    .iter()
                    .find_map(|k| o.get(*k).and_then(Value::as_str).map(str::to_owned)),
                _ => None,
            })
    });
    one_line(&strip_tags(from_json.as_deref().unwrap_or(&text)), 200)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_backend_s_answer_becomes_hits() {
        let searx = json!({"results": [
            {"title": "Rust", "url": "https://www.rust-lang.org/", "content": "A language"},
            {"title": "no link", "content": "dropped"}
        ]});
        assert_eq!(
            parse_hits(SearchProvider::Searxng, &searx).unwrap(),
            [Hit {
                title: "Rust".into(),
                url: "https://www.rust-lang.org/".into(),
                snippet: "A language".into()
            }]
        );
        let brave = json!({"type": "search", "web": {"results": [
            {"title": "The <strong>Rust</strong> Book", "url": "https://doc.rust-lang.org/book/",
             "description": "Learn &amp; <strong>grow</strong>"}
        ]}});
        let hits = parse_hits(SearchProvider::Brave, &brave).unwrap();
        assert_eq!(hits[0].title, "The Rust Book");
        assert_eq!(hits[0].snippet, "Learn & grow");
        assert_eq!(
            parse_hits(SearchProvider::Brave, &json!({"type": "search"})).unwrap(),
            []
        );
        let tavily =
            json!({"query": "q", "results": [{"title": "T", "url": "https://t.example/", "content": "c"}]});
        assert_eq!(
            parse_hits(SearchProvider::Tavily, &tavily).unwrap()[0].snippet,
            "c"
        );
    }

    #[test]
    fn answers_of_another_shape_are_refused() {
        assert!(parse_hits(SearchProvider::Searxng, &json!({"hits": []})).is_err());
        assert!(parse_hits(SearchProvider::Brave, &json!([1, 2])).is_err());
        assert!(parse_hits(SearchProvider::Brave, &json!({"web": {"items": []}})).is_err());
        assert!(parse_hits(SearchProvider::Brave, &json!({"items": []})).is_err());
        assert!(parse_hits(SearchProvider::Tavily, &json!({"results": "none"})).is_err());
    }

    #[test]
    fn the_list_is_numbered_with_title_link_and_snippet() {
        let hits = [
            Hit {
                title: "One".into(),
                url: "https://one.example/".into(),
                snippet: "first".into(),
            },
            Hit {
                title: String::new(),
                url: "https://two.example/".into(),
                snippet: String::new(),
            },
        ];
        assert_eq!(
            render("q", SearchProvider::Searxng, &hits),
            "Results for \"q\" (SearXNG):\n\n1. One\n   https://one.example/\n   first\n\n2. (no title)\n   https://two.example/"
        );
        assert_eq!(
            render("q", SearchProvider::Brave, &[]),
            "No results for \"q\" (Brave Search)."
        );
    }
}
