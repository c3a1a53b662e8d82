//! Who may talk to the server.
//!
//! - **Origin.** Browsers say which page sent a request. A request that
//!   opens `/ws`, reaches `/api/*` or `/mcp`, or changes state (any method but `GET`,
//!   `HEAD` and `OPTIONS`) is refused with 403 `forbidden_origin` unless it
//!   comes from the server's own origin: its `Origin` must be exactly the
//!   scheme, host and port the browser reached the server at (the server's
//!   scheme and the request's `Host`; behind a proxy, `X-Forwarded-Proto`
//!   and `X-Forwarded-Host`). Without `Origin`, `Sec-Fetch-Site` decides
//!   (`same-origin` and `none` pass). `Origin: null` is refused. Requests
//!   with neither header are not from a browser's page (the CLI, scripts)
//!   and pass; the token still applies.
//! - **Token.** When one is configured, `/api/*` and `/mcp` answer 401 and `/ws`
//!   closes 4401 without it. It is read from `Authorization: Bearer …` or
//!   the `jarvis_token` cookie, never from the URL, and compared by SHA-256
//!   digest, so the comparison takes the same time whatever was presented.
//!   `GET /?token=…` with the right token sets the cookie (HttpOnly,
//!   SameSite=Strict, `Path=/`, `Secure` over HTTPS) and redirects to the
//!   same address without the token (see `http::index`).
//! - **Host.** Without a token the server is for this machine only: a
//!   request whose `Host` is not a loopback name (`localhost`,
//!   `*.localhost`, `127.0.0.1`, `[::1]`) or the configured host is refused
//!   with 403. This stops DNS-rebinding pages, whose requests are
//!   same-origin to themselves, from reading sessions.

use axum::extract::{Query, Request, State};
use axum::http::header::{AUTHORIZATION, COOKIE, HOST, ORIGIN};
use axum::http::{HeaderMap, HeaderName, Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use std::collections::HashMap;

use crate::config::ServerConfig;
use crate::error::AppError;
use crate::protocol::codes;
use crate::state::ServerState;

/// The cookie that carries the token.
pub(crate) const TOKEN_COOKIE: &str = "jarvis_token";

const SEC_FETCH_SITE: HeaderName = HeaderName::from_static("sec-fetch-site");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// The token a request presents: `Authorization: Bearer …`, else the
/// `jarvis_token` cookie. The URL's query is never read.
pub(crate) fn presented_token(headers: &HeaderMap) -> Option<String> {
    if let Some(value) = headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok())
        && let Some(token) = value.strip_prefix("Bearer ")
    {
        return Some(token.trim().to_owned());
    }
    for cookies in headers.get_all(COOKIE) {
        let Ok(cookies) = cookies.to_str() else { continue };
        for pair in cookies.split(';') {
            if let Some((name, value)) = pair.trim().split_once('=')
                && name == TOKEN_COOKIE
            {
                return Some(percent_decode(value));
            }
        }
    }
    None
}

/// The `Set-Cookie` value that carries `token` (percent-encoded, so any
/// token fits in a cookie).
pub(crate) fn token_cookie(token: &str, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!(
        "{TOKEN_COOKIE}={}; HttpOnly; SameSite=Strict; Path=/{secure}",
        percent_encode(token)
    )
}

/// One query parameter, percent-decoded.
pub(crate) fn query_param(uri: &Uri, name: &str) -> Option<String> {
    let Query(mut pairs) = Query::<HashMap<String, String>>::try_from_uri(uri).ok()?;
    pairs.remove(name)
}

/// `uri`'s path and query without any parameter called `name` (the other
/// parameters keep their order and encoding).
pub(crate) fn without_query_param(uri: &Uri, name: &str) -> String {
    let kept: Vec<&str> = uri
        .query()
        .unwrap_or_default()
        .split('&')
        .filter(|pair| {
            let key = pair.split_once('=').map_or(*pair, |(key, _)| key);
            !pair.is_empty() && percent_decode(&key.replace('+', " ")) != name
        })
        .collect();
    if kept.is_empty() {
        uri.path().to_owned()
    } else {
        format!("{}?{}", uri.path(), kept.join("&"))
    }
}

/// The SHA-256 digest of `token`.
fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Whether two digests are equal, looking at every byte.
fn digests_equal(a: &[u8; 32], b: &[u8; 32]) -> bool {
    std::hint::black_box(a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y))) == 0
}

/// Whether `presented` satisfies the server's token requirement. Both
/// tokens are hashed first, so the time taken says nothing about the
/// expected token's length or how much of it matched.
pub(crate) fn token_ok(state: &ServerState, presented: Option<&str>) -> bool {
    match (&state.config().token, presented) {
        (None, _) => true,
        (Some(expected), Some(given)) => digests_equal(&digest(expected), &digest(given)),
        (Some(_), None) => false,
    }
}

/// A host and port, as compared by the checks: the host in lower case
/// (IPv6 without brackets), the port when one was written.
fn split_authority(authority: &str) -> Option<(String, Option<u16>)> {
    let authority = authority.trim().to_ascii_lowercase();
    if authority.is_empty() || authority.contains(['/', '@', '?', '#', ' ', '\\']) {
        return None;
    }
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            after => Some(after.strip_prefix(':')?.parse().ok()?),
        };
        return Some((host.to_owned(), port));
    }
    match authority.split_once(':') {
        Some((host, port)) => Some((host.to_owned(), Some(port.parse().ok()?))),
        None => Some((authority, None)),
    }
}

fn is_loopback_name(host: &str) -> bool {
    host == "localhost"
        || host.ends_with(".localhost")
        || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// How the browser reached the server: scheme and authority (`host[:port]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reached {
    /// `http` or `https` (behind a proxy, what it forwarded).
    scheme: String,
    /// The `Host` (behind a proxy, `X-Forwarded-Host` when sent).
    authority: Option<String>,
}

impl Reached {
    /// Read from a request's headers.
    pub(crate) fn of(config: &ServerConfig, headers: &HeaderMap) -> Self {
        // A proxy's headers count only when the operator said there is one;
        // a page in a browser cannot set them without a CORS preflight.
        let forwarded = |name: &HeaderName| {
            if !config.behind_proxy {
                return None;
            }
            let value = headers.get(name)?.to_str().ok()?;
            let first = value.split(',').next()?.trim();
            (!first.is_empty()).then(|| first.to_owned())
        };
        let scheme = forwarded(&X_FORWARDED_PROTO)
            .map(|proto| proto.to_ascii_lowercase())
            .unwrap_or_else(|| if config.tls.is_some() { "https" } else { "http" }.to_owned());
        let authority = forwarded(&X_FORWARDED_HOST)
            .or_else(|| headers.get(HOST).and_then(|h| h.to_str().ok()).map(str::to_owned));
        Self { scheme, authority }
    }

    /// Whether the browser reached the server over HTTPS (the cookie is then `Secure`).
    pub(crate) fn is_https(&self) -> bool {
        self.scheme == "https"
    }

    /// Whether `origin` (an `Origin` header's value) is exactly this one.
    fn is_origin(&self, origin: &str) -> bool {
        let Some((scheme, authority)) = origin.split_once("://") else {
            return false; // "null" and other opaque origins
        };
        let scheme = scheme.to_ascii_lowercase();
        let (Some(origin), Some(own)) = (
            split_authority(authority),
            self.authority.as_deref().and_then(split_authority),
        ) else {
            return false;
        };
        let port = |(host, port): (String, Option<u16>), scheme: &str| {
            let default = match scheme {
                "http" => Some(80),
                "https" => Some(443),
                _ => None,
            };
            (host, port.or(default))
        };
        scheme == self.scheme && port(origin, &scheme) == port(own, &self.scheme)
    }
}

/// Whether a request's `Host` is one this server answers.
fn host_allowed(config: &ServerConfig, reached: &Reached) -> bool {
    if config.token.is_some() {
        return true;
    }
    let Some(authority) = &reached.authority else {
        // HTTP/1.0 and in-process callers send none; browsers always do.
        return true;
    };
    let Some((host, _)) = split_authority(authority) else {
        return false;
    };
    let configured = match config.host.parse::<std::net::IpAddr>() {
        Ok(ip) => Some(ip.to_string()),
        Err(_) => split_authority(&config.host).map(|(own, _)| own),
    };
    is_loopback_name(&host) || configured.is_some_and(|own| own == host)
}

/// Why a request from a browser's page was refused, for the log.
#[derive(Debug)]
enum Foreign<'a> {
    Origin(&'a str),
    Site(&'a str),
    Unreadable,
}

impl std::fmt::Display for Foreign<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Debug formatting escapes whatever the client put in the header.
        match self {
            Foreign::Origin(origin) => write!(f, "Origin {origin:?}"),
            Foreign::Site(site) => write!(f, "Sec-Fetch-Site {site:?}"),
            Foreign::Unreadable => f.write_str("a header that is not text"),
        }
    }
}

/// Whether the request comes from the server's own pages, or from no
/// page at all (see the module docs).
fn same_origin<'a>(reached: &Reached, headers: &'a HeaderMap) -> Result<(), Foreign<'a>> {
    if let Some(origin) = headers.get(ORIGIN) {
        let origin = origin.to_str().map_err(|_| Foreign::Unreadable)?;
        return if reached.is_origin(origin) {
            Ok(())
        } else {
            Err(Foreign::Origin(origin))
        };
    }
    if let Some(site) = headers.get(SEC_FETCH_SITE) {
        let site = site.to_str().map_err(|_| Foreign::Unreadable)?;
        return match site.trim().to_ascii_lowercase().as_str() {
            "same-origin" | "none" => Ok(()),
            _ => Err(Foreign::Site(site)),
        };
    }
    Ok(())
}

/// Whether the request must come from the server's own origin: the
/// WebSocket, the API, and anything that may change state.
fn needs_same_origin(method: &Method, path: &str) -> bool {
    path == "/ws" || needs_token(path) || !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Whether a request needs the token (when one is configured): the API and
/// the MCP endpoint. (The WebSocket checks its own, to close with 4401.)
fn needs_token(path: &str) -> bool {
    path == "/api" || path.starts_with("/api/") || path == "/mcp"
}

/// The middleware in front of every route: the `Host` check, the origin
/// check, and the token for `/api/*` and `/mcp` (the WebSocket checks its
/// own, to close with 4401).
pub(crate) async fn guard(State(state): State<ServerState>, request: Request, next: Next) -> Response {
    let config = state.config();
    let headers = request.headers();
    let reached = Reached::of(config, headers);
    if !host_allowed(config, &reached) {
        return AppError::new(
            StatusCode::FORBIDDEN,
            codes::FORBIDDEN_ORIGIN,
            "this server answers only loopback host names; set JARVIS_WEB__TOKEN to serve others",
        )
        .into_response();
    }
    let path = request.uri().path();
    if needs_same_origin(request.method(), path)
        && let Err(foreign) = same_origin(&reached, headers)
    {
        tracing::info!(method = %request.method(), path, %foreign, "refused a request from another origin");
        return AppError::new(
            StatusCode::FORBIDDEN,
            codes::FORBIDDEN_ORIGIN,
            "only this server's own pages may use its API and WebSocket",
        )
        .into_response();
    }
    if needs_token(path) && !token_ok(&state, presented_token(headers).as_deref()) {
        return AppError::unauthorized().into_response();
    }
    next.run(request).await
}

/// Every byte but ASCII letters, digits and `-._~` as `%XX`.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// `%XX` sequences to bytes (others left as they are), lossy UTF-8.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(hi), Some(lo)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(*name, value.parse().unwrap());
        }
        h
    }

    fn reached(config: &ServerConfig, pairs: &[(&'static str, &str)]) -> Reached {
        Reached::of(config, &headers(pairs))
    }

    #[test]
    fn authorities_split_into_host_and_port() {
        assert_eq!(
            split_authority("LocalHost:8765"),
            Some(("localhost".into(), Some(8765)))
        );
        assert_eq!(split_authority("[::1]:80"), Some(("::1".into(), Some(80))));
        assert_eq!(split_authority("[::1]"), Some(("::1".into(), None)));
        assert_eq!(split_authority("127.0.0.1"), Some(("127.0.0.1".into(), None)));
        for bad in ["", "a:b", "a:", "[::1]x", "u@evil.example", "a/b", "a:99999"] {
            assert_eq!(split_authority(bad), None, "{bad}");
        }
        assert!(is_loopback_name("app.localhost"));
        assert!(is_loopback_name("::1"));
        assert!(!is_loopback_name("evil.example"));
    }

    #[test]
    fn only_the_exact_own_origin_is_same_origin() {
        let plain = ServerConfig::loopback(8765);
        let own = reached(&plain, &[("host", "127.0.0.1:8765")]);
        assert!(own.is_origin("http://127.0.0.1:8765"));
        assert!(
            own.is_origin("HTTP://127.0.0.1:8765"),
            "schemes and hosts ignore case"
        );
        for other in [
            "http://127.0.0.1:5173",
            "http://localhost:8765",
            "https://127.0.0.1:8765",
            "http://127.0.0.1",
            "null",
            "http://127.0.0.1:8765/path",
            "file://",
            "",
        ] {
            assert!(!own.is_origin(other), "{other}");
        }
        // Default ports are the same origin written or not.
        let default = reached(&plain, &[("host", "jarvis.example")]);
        assert!(default.is_origin("http://jarvis.example:80"));
        assert!(default.is_origin("http://jarvis.example"));
        let tls = plain.clone().with_tls("c", "k");
        let https = reached(&tls, &[("host", "jarvis.example")]);
        assert!(https.is_https());
        assert!(https.is_origin("https://jarvis.example:443"));
        assert!(!https.is_origin("http://jarvis.example"));
        // No Host: nothing to compare with.
        assert!(!reached(&plain, &[]).is_origin("http://127.0.0.1:8765"));
    }

    #[test]
    fn a_proxys_headers_count_only_behind_a_proxy() {
        let forwarded = [
            ("host", "127.0.0.1:8765"),
            ("x-forwarded-proto", "https, http"),
            ("x-forwarded-host", "jarvis.example"),
        ];
        let direct = reached(&ServerConfig::loopback(8765), &forwarded);
        assert!(!direct.is_https());
        assert!(direct.is_origin("http://127.0.0.1:8765"));
        assert!(!direct.is_origin("https://jarvis.example"));
        let proxied_config = ServerConfig::loopback(8765).with_behind_proxy(true);
        let proxied = reached(&proxied_config, &forwarded);
        assert!(proxied.is_https());
        assert!(proxied.is_origin("https://jarvis.example"));
        assert!(!proxied.is_origin("http://127.0.0.1:8765"));
        // Reached directly, without the proxy's headers: plain HTTP and the Host.
        let local = reached(&proxied_config, &[("host", "127.0.0.1:8765")]);
        assert!(!local.is_https());
        assert!(local.is_origin("http://127.0.0.1:8765"));
    }

    #[test]
    fn browsers_pages_are_judged_by_origin_then_fetch_site() {
        let config = ServerConfig::loopback(8765);
        let check = |pairs: &[(&'static str, &str)]| {
            let h = headers(pairs);
            same_origin(&Reached::of(&config, &h), &h).is_ok()
        };
        let host = ("host", "127.0.0.1:8765");
        assert!(check(&[host]), "no Origin, no Sec-Fetch-Site: not a page");
        assert!(check(&[host, ("origin", "http://127.0.0.1:8765")]));
        assert!(!check(&[host, ("origin", "http://localhost:5173")]));
        assert!(!check(&[host, ("origin", "http://127.0.0.1:5173")]));
        assert!(!check(&[host, ("origin", "null")]));
        assert!(check(&[host, ("sec-fetch-site", "same-origin")]));
        assert!(check(&[host, ("sec-fetch-site", "none")]));
        assert!(!check(&[host, ("sec-fetch-site", "same-site")]));
        assert!(!check(&[host, ("sec-fetch-site", "cross-site")]));
        assert!(!check(&[host, ("sec-fetch-site", "whatever")]));
        // Origin decides when both are there.
        assert!(!check(&[
            host,
            ("origin", "http://localhost:5173"),
            ("sec-fetch-site", "same-origin")
        ]));
        assert!(needs_same_origin(&Method::GET, "/ws"));
        assert!(needs_same_origin(&Method::GET, "/api/sessions"));
        assert!(needs_same_origin(&Method::GET, "/mcp"));
        assert!(needs_token("/mcp") && needs_token("/api/agents") && !needs_token("/ws"));
        assert!(needs_same_origin(&Method::POST, "/"));
        assert!(needs_same_origin(&Method::PATCH, "/x"));
        assert!(needs_same_origin(&Method::DELETE, "/x"));
        assert!(needs_same_origin(&Method::PUT, "/x"));
        assert!(!needs_same_origin(&Method::GET, "/"), "a link to the HUD works");
        assert!(!needs_same_origin(&Method::GET, "/assets/hud.css"));
        assert!(!needs_same_origin(&Method::HEAD, "/healthz"));
    }

    #[test]
    fn host_names_without_a_token_are_loopback_or_the_configured_host() {
        let config = ServerConfig::loopback(8765);
        let allowed = |host: &str| {
            let h = headers(&[("host", host)]);
            host_allowed(&config, &Reached::of(&config, &h))
        };
        for host in [
            "localhost:8765",
            "127.0.0.1:8765",
            "[::1]:8765",
            "jarvis.localhost",
        ] {
            assert!(allowed(host), "{host}");
        }
        for host in ["evil.example:8765", "127.0.0.1.evil.example", "u@127.0.0.1"] {
            assert!(!allowed(host), "{host}");
        }
        let with_token = config.clone().with_token("t");
        let h = headers(&[("host", "evil.example")]);
        assert!(host_allowed(&with_token, &Reached::of(&with_token, &h)));
    }

    #[test]
    fn tokens_come_from_the_header_or_the_cookie_never_the_query() {
        let mut h = HeaderMap::new();
        assert_eq!(presented_token(&h), None);
        h.insert(COOKIE, "a=b; jarvis_token=c%3Bd".parse().unwrap());
        assert_eq!(presented_token(&h).as_deref(), Some("c;d"));
        h.insert(AUTHORIZATION, "Bearer h".parse().unwrap());
        assert_eq!(presented_token(&h).as_deref(), Some("h"));
        let cookie = token_cookie("a b;c", false);
        assert_eq!(
            cookie,
            "jarvis_token=a%20b%3Bc; HttpOnly; SameSite=Strict; Path=/"
        );
        assert!(token_cookie("t", true).ends_with("; Secure"));
        assert_eq!(percent_decode(&percent_encode("토큰 %zz")), "토큰 %zz");
        assert_eq!(percent_decode("%zz%4"), "%zz%4", "broken escapes stay");
    }

    #[test]
    fn digests_compare_every_byte() {
        assert!(digests_equal(&digest("abc"), &digest("abc")));
        assert!(!digests_equal(&digest("abc"), &digest("abd")));
        assert!(!digests_equal(&digest("abc"), &digest("ab")));
        assert!(!digests_equal(&digest(""), &digest("abc")));
    }

    #[test]
    fn the_token_parameter_leaves_the_address_and_the_rest_stays() {
        let strip = |uri: &str| without_query_param(&uri.parse().unwrap(), "token");
        assert_eq!(strip("/?token=s3cret"), "/");
        assert_eq!(
            strip("/?session=a%20b&token=t&agent=karen"),
            "/?session=a%20b&agent=karen"
        );
        assert_eq!(strip("/?to%6Ben=t&particles=low"), "/?particles=low");
        assert_eq!(strip("/?token&token=x&x=1"), "/?x=1");
        assert_eq!(strip("/?tokens=1"), "/?tokens=1");
        assert_eq!(strip("/"), "/");
    }
}
