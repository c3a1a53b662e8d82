//! `web_fetch {url}`: one page as readable text, headed by its final URL
//! and its title.
//!
//! Each hop (the first request and every redirect, at most
//! [`WebFetchSettings::max_redirects`]) goes through the same steps: only
//! `http` and `https`; the host resolved here (an IP literal is taken as it
//! is); every address it resolved to judged by the address policy, any
//! non-public one refusing the whole fetch; then a client that connects to
//! exactly those addresses (`resolve_to_addrs`), never follows redirects by
//! itself and ignores proxy settings, so what was judged is what is reached.
//! The body is read up to [`WebFetchSettings::max_bytes`]; the whole fetch
//! is bounded by [`WebFetchSettings::timeout`] and the turn's abort.

use async_trait::async_trait;
use reqwest::header::{ACCEPT, CONTENT_TYPE, LOCATION};
use reqwest::{StatusCode, Url};
use schemars::JsonSchema;
use serde::Deserialize;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use super::address::AddressPolicy;
use super::page::{Kind, declared_charset, html_to_text, is_utf8_compatible, kind_of_media_type, sniff};
use super::{WEB_FETCH_ALLOW_PRIVATE_ENV, WEB_FETCH_TOOL, WebFetchSettings};
use jarvis_agent::{ToolContext, ToolError, ToolResult, TypedTool};
use jarvis_common::{char_len, error_chain, truncate_chars};

/// What `web_fetch` asks for: pages first, any text after.
const ACCEPT_PAGES: &str =
    "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.9,*/*;q=0.5";
/// The `User-Agent` of every fetch.
const USER_AGENT: &str = concat!("jarvis-sdk/", env!("CARGO_PKG_VERSION"), " (web_fetch)");

/// Arguments of `web_fetch`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WebFetchArgs {
    /// The page's address, `http://` or `https://`.
    pub url: String,
}

/// `web_fetch {url}`: reads one web page (see the module docs).
#[derive(Debug)]
pub struct WebFetchTool {
    settings: WebFetchSettings,
    policy: AddressPolicy,
}

impl WebFetchTool {
    /// The tool with `settings`.
    pub fn new(settings: WebFetchSettings) -> Self {
        let policy = AddressPolicy {
            allow_private: settings.allow_private,
            exceptions: settings.allowed_addresses.clone(),
        };
        Self { settings, policy }
    }
}

#[async_trait]
impl TypedTool for WebFetchTool {
    type Args = WebFetchArgs;

    fn name(&self) -> &str {
        WEB_FETCH_TOOL
    }

    /// It reaches any page on the web: only agents that list it have it.
    fn agent_only(&self) -> bool {
        true
    }

    fn description(&self) -> &str {
        "Reads one web page and returns it as plain text, starting with its final URL and its title; \
         links become numbered references listed at the end. `url` must be http:// or https://. \
         Addresses on private networks are refused. Long pages are cut and say so; images, PDFs \
         and other binary files cannot be read."
    }

    async fn run(&self, args: WebFetchArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        if ctx.cancel.is_cancelled() {
            return Err(ToolError::Cancelled);
        }
        let timeout = self.settings.timeout;
        let work = async {
            let fetched = self.fetch(&args.url).await?;
            self.render(fetched).await
        };
        tokio::select! {
            _ = ctx.cancel.cancelled() => Err(ToolError::Cancelled),
            done = tokio::time::timeout(timeout, work) => Ok(match done {
                Ok(Ok(text)) => ToolResult::ok(text),
                Ok(Err(message)) => ToolResult::error(message),
                Err(_) => ToolResult::error(format!(
                    "web_fetch: {} did not finish within {} s",
                    args.url,
                    timeout.as_secs_f32()
                )),
            }),
        }
    }
}

/// A response body as it was read.
struct Fetched {
    url: Url,
    content_type: Option<String>,
    body: Vec<u8>,
    /// Whether reading stopped at the byte cap.
    cut: bool,
}

impl WebFetchTool {
    /// Follows `raw` through its redirects, each hop checked, and reads
    /// the final body. `Err` is the message for the model.
    async fn fetch(&self, raw: &str) -> Result<Fetched, String> {
        let mut url = Url::parse(raw.trim()).map_err(|e| format!("web_fetch: {raw:?} is not a URL: {e}"))?;
        let mut redirected_from: Option<Url> = None;
        let mut hops = 0;
        loop {
            let addrs = self.checked_addresses(&url, redirected_from.as_ref()).await?;
            let response = self.request(&url, &addrs).await?;
            let status = response.status();
            if status.is_redirection()
                && let Some(location) = response.headers().get(LOCATION)
            {
                let location = location
                    .to_str()
                    .map_err(|_| format!("web_fetch: {url} redirects to an address that is not text"))?;
                let next = url.join(location).map_err(|e| {
                    format!("web_fetch: {url} redirects to {location:?}, which is not a URL: {e}")
                })?;
                hops += 1;
                if hops > self.settings.max_redirects {
                    return Err(format!(
                        "web_fetch: {raw} redirects more than {} times (the last hop went to {next}); stopped",
                        self.settings.max_redirects
                    ));
                }
                redirected_from = Some(url);
                url = next;
                continue;
            }
            if !status.is_success() {
                return Err(format!("web_fetch: {url} answered HTTP {}", status_words(status)));
            }
            return self.read(url, response).await;
        }
    }

    /// The addresses `url`'s host stands for, each allowed by the policy;
    /// a refusal names the address and why.
    async fn checked_addresses(
        &self,
        url: &Url,
        redirected_from: Option<&Url>,
    ) -> Result<Vec<SocketAddr>, String> {
        let refuse = |detail: String| {
            let hop = match redirected_from {
                Some(from) => format!("{from} redirects to {url}, and "),
                None => String::new(),
            };
            format!("refused: {hop}{detail} (set {WEB_FETCH_ALLOW_PRIVATE_ENV}=1 to allow private addresses)")
        };
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "refused: web_fetch reads only http:// and https:// addresses, not {}:",
                url.scheme()
            ));
        }
        let host = url
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| format!("web_fetch: {url} has no host"))?;
        let port = url
            .port_or_known_default()
            .ok_or_else(|| format!("web_fetch: {url} has no port"))?;
        let literal = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host)
            .parse::<IpAddr>()
            .ok();
        if let Some(ip) = literal {
            let addr = SocketAddr::new(ip, port);
            return match self.policy.refusal(addr) {
                Some(kind) => Err(refuse(format!("{ip} is {kind}"))),
                None => Ok(vec![addr]),
            };
        }
        let mut addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| format!("web_fetch: cannot resolve {host}: {e}"))?
            .collect();
        addrs.sort();
        addrs.dedup();
        if addrs.is_empty() {
            return Err(format!("web_fetch: {host} resolves to no address"));
        }
        for addr in &addrs {
            if let Some(kind) = self.policy.refusal(*addr) {
                return Err(refuse(format!("{host} resolves to {}, {kind}", addr.ip())));
            }
        }
        Ok(addrs)
    }

    /// One GET of `url`, connecting only to `addrs`, redirects not followed.
    async fn request(&self, url: &Url, addrs: &[SocketAddr]) -> Result<reqwest::Response, String> {
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(self.settings.timeout)
            .user_agent(USER_AGENT);
        if let Some(host) = url
            .host_str()
            .filter(|h| h.parse::<IpAddr>().is_err() && !h.starts_with('['))
        {
            // The addresses just checked, and no others: a second DNS
            // answer cannot point the connection somewhere else.
            builder = builder.resolve_to_addrs(host, addrs);
        }
        let client = builder
            .build()
            .map_err(|e| format!("web_fetch: cannot build the HTTP client: {}", error_chain(&e)))?;
        client
            .get(url.clone())
            .header(ACCEPT, ACCEPT_PAGES)
            .send()
            .await
            .map_err(|e| transport_error(url, e))
    }

    /// Reads the body of a success answer up to the byte cap; binary media
    /// types are refused before their body is read.
    async fn read(&self, url: Url, mut response: reqwest::Response) -> Result<Fetched, String> {
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if let Some(media_type) = content_type.as_deref().map(media_type)
            && kind_of_media_type(&media_type) == Some(Kind::Binary)
        {
            return Err(binary_refusal(&url, &media_type));
        }
        let cap = self.settings.max_bytes;
        let mut body = Vec::new();
        let mut cut = false;
        while let Some(chunk) = response.chunk().await.map_err(|e| transport_error(&url, e))? {
            let room = cap - body.len();
            if chunk.len() > room {
                body.extend_from_slice(&chunk[..room]);
                cut = true;
                break;
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Fetched {
            url,
            content_type,
            body,
            cut,
        })
    }

    /// The page as the model reads it: `URL:` and `Title:` lines, a blank
    /// line, the text (cut to the character cap), then notes.
    async fn render(&self, fetched: Fetched) -> Result<String, String> {
        let Fetched {
            url,
            content_type,
            mut body,
            cut,
        } = fetched;
        let media_type = content_type.as_deref().map(media_type).unwrap_or_default();
        let kind = kind_of_media_type(&media_type).unwrap_or_else(|| sniff(&body));
        if kind == Kind::Binary {
            let shown = if media_type.is_empty() {
                "binary data"
            } else {
                &media_type
            };
            return Err(binary_refusal(&url, shown));
        }
        let mut notes = Vec::new();
        if let Some(charset) =
            declared_charset(content_type.as_deref(), &body).filter(|c| !is_utf8_compatible(c))
        {
            notes.push(format!(
                "[note: the page declares the charset {charset}; it was read as UTF-8, so some characters may be wrong]"
            ));
        }
        if cut {
            // The cap may split the last character; drop its partial bytes.
            if let Err(e) = std::str::from_utf8(&body)
                && e.error_len().is_none()
            {
                body.truncate(e.valid_up_to());
            }
        }
        let (title, text) = if kind == Kind::Html {
            let (title, text) = tokio::task::spawn_blocking(move || html_to_text(&body))
                .await
                .map_err(|e| format!("web_fetch: reading the page stopped: {e}"))?
                .map_err(|e| format!("web_fetch: {url}: {e}"))?;
            (title, absolute_links(&text, &url))
        } else {
            (
                String::new(),
                String::from_utf8_lossy(&body).trim_end().to_owned(),
            )
        };
        let mut out = String::new();
        let _ = writeln!(out, "URL: {url}");
        let title = if title.is_empty() {
            "(none)"
        } else {
            title.as_str()
        };
        let _ = writeln!(out, "Title: {title}");
        out.push('\n');
        let chars = char_len(&text);
        if text.trim().is_empty() {
            out.push_str("(the page has no text)");
        } else if chars > self.settings.max_chars {
            out.push_str(truncate_chars(&text, self.settings.max_chars));
            notes.push(format!(
                "[truncated: showing the first {} of {chars} characters]",
                self.settings.max_chars
            ));
        } else {
            out.push_str(&text);
        }
        if cut {
            notes.push(format!(
                "[truncated: only the first {} bytes of the page were read]",
                self.settings.max_bytes
            ));
        }
        for note in notes {
            out.push('\n');
            out.push_str(&note);
        }
        Ok(out)
    }
}

/// The link references the text ends with (`[3]: /apply`) as absolute
/// URLs, so the model can fetch them as they are.
fn absolute_links(text: &str, base: &Url) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let reference = line
            .strip_prefix('[')
            .and_then(|rest| rest.split_once("]: "))
            .filter(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        match reference.and_then(|(n, link)| Some((n, base.join(link.trim_end()).ok()?))) {
            Some((n, link)) => {
                let _ = write!(out, "[{n}]: {link}");
                if line.ends_with('\n') {
                    out.push('\n');
                }
            }
            None => out.push_str(line),
        }
    }
    out
}

/// The media type of a `Content-Type` value: lower case, no parameters.
fn media_type(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

fn binary_refusal(url: &Url, what: &str) -> String {
    format!("web_fetch: {url} is {what}, not a web page or text; only HTML and text can be read")
}

/// `404 Not Found` and the like.
fn status_words(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

/// A failed request in words, naming the page once (reqwest's own message
/// would repeat the URL).
fn transport_error(url: &Url, e: reqwest::Error) -> String {
    let e = e.without_url();
    let what = if e.is_timeout() {
        "did not answer in time"
    } else if e.is_connect() {
        "cannot be reached"
    } else if e.is_body() || e.is_decode() {
        "broke off while sending the page"
    } else {
        "could not be fetched"
    };
    format!("web_fetch: {url} {what}: {}", error_chain(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_references_become_absolute() {
        let base = Url::parse("https://example.org/news/item?id=1").unwrap();
        let text = "See [the form][1] and [home][2].\n\n[1]: /apply\n[2]: ../\n[x]: not/a/ref\n[3]: https://other.example/a";
        assert_eq!(
            absolute_links(text, &base),
            "See [the form][1] and [home][2].\n\n[1]: https://example.org/apply\n[2]: https://example.org/\n\
             [x]: not/a/ref\n[3]: https://other.example/a"
        );
    }
}
