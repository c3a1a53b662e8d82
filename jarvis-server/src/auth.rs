//! Who may talk to the server.
//!
//! - **Token.** When one is configured, `/api/*` answers 401 and `/ws`
//!   closes 4401 without it. It is read from `Authorization: Bearer …`, the
//!   `jarvis_token` cookie or the `token` query parameter, and compared in
//!   constant time. `GET /?token=…` with the right token sets the cookie
//!   (HttpOnly, SameSite=Strict), so the page and its WebSocket carry it.
//! - **Host.** Without a token the server is for this machine only: a
//!   request whose `Host` is not a loopback name (`localhost`,
//!   `*.localhost`, `127.0.0.1`, `[::1]`) or the configured host is refused
//!   with 403. This stops DNS-rebinding pages from reading sessions.
//! - **Origin** (WebSocket only; browsers always send it): allowed when it
//!   is a loopback origin or the same origin as the request's `Host`;
//!   refused with 403 otherwise. Clients that send no `Origin` (the CLI,
//!   scripts) are not browsers and pass; the token still applies.

use axum::extract::{Query, Request, State};
use axum::http::header::{AUTHORIZATION, COOKIE, HOST, ORIGIN};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;

use crate::error::AppError;
use crate::protocol::codes;
use crate::state::ServerState;

/// The cookie that carries the token.
pub(crate) const TOKEN_COOKIE: &str = "jarvis_token";

/// The token a request presents, from the header, the cookie or the query.
pub(crate) fn presented_token(headers: &HeaderMap, uri: &Uri) -> Option<String> {
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
                return Some(value.to_owned());
            }
        }
    }
    query_param(uri, "token")
}

/// One query parameter, percent-decoded.
pub(crate) fn query_param(uri: &Uri, name: &str) -> Option<String> {
    let Query(mut pairs) = Query::<HashMap<String, String>>::try_from_uri(uri).ok()?;
    pairs.remove(name)
}

/// Equal lengths and bytes, without an early exit on the first difference.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether `presented` satisfies the server's token requirement.
pub(crate) fn token_ok(state: &ServerState, presented: Option<&str>) -> bool {
    match (&state.config().token, presented) {
        (None, _) => true,
        (Some(expected), Some(given)) => constant_time_eq(expected.as_bytes(), given.as_bytes()),
        (Some(_), None) => false,
    }
}

/// The host part of a `Host` header or an origin's authority, lower case,
/// without port or IPv6 brackets.
fn host_name(authority: &str) -> String {
    let authority = authority.trim().to_ascii_lowercase();
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default().to_owned();
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host.to_owned(),
        _ => authority,
    }
}

fn is_loopback_name(host: &str) -> bool {
    host == "localhost"
        || host.ends_with(".localhost")
        || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Whether a request's `Host` is one this server answers.
fn host_allowed(state: &ServerState, headers: &HeaderMap) -> bool {
    if state.config().token.is_some() {
        return true;
    }
    let Some(host) = headers.get(HOST).and_then(|h| h.to_str().ok()) else {
        // HTTP/1.0 and in-process callers send none; browsers always do.
        return true;
    };
    let host = host_name(host);
    is_loopback_name(&host) || host == host_name(&state.config().host)
}

/// Whether a WebSocket's `Origin` may connect.
pub(crate) fn origin_allowed(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(ORIGIN) else {
        return true;
    };
    let Ok(origin) = origin.to_str() else {
        return false;
    };
    let Some((_, authority)) = origin.split_once("://") else {
        return false; // "null" and other opaque origins
    };
    if is_loopback_name(&host_name(authority)) {
        return true;
    }
    headers
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .is_some_and(|host| host.eq_ignore_ascii_case(authority))
}

/// The middleware in front of every route: the `Host` check, and the token
/// for `/api/*` (the WebSocket checks its own, to close with 4401).
pub(crate) async fn guard(State(state): State<ServerState>, request: Request, next: Next) -> Response {
    if !host_allowed(&state, request.headers()) {
        return AppError::new(
            StatusCode::FORBIDDEN,
            codes::FORBIDDEN_ORIGIN,
            "this server answers only loopback host names; set JARVIS_WEB__TOKEN to serve others",
        )
        .into_response();
    }
    if request.uri().path().starts_with("/api/")
        && !token_ok(
            &state,
            presented_token(request.headers(), request.uri()).as_deref(),
        )
    {
        return AppError::unauthorized().into_response();
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_and_origins() {
        assert_eq!(host_name("LocalHost:8765"), "localhost");
        assert_eq!(host_name("[::1]:80"), "::1");
        assert_eq!(host_name("127.0.0.1"), "127.0.0.1");
        assert!(is_loopback_name("app.localhost"));
        assert!(is_loopback_name("::1"));
        assert!(!is_loopback_name("evil.example"));
        let mut h = HeaderMap::new();
        assert!(origin_allowed(&h), "no origin: not a browser");
        h.insert(ORIGIN, "http://localhost:3000".parse().unwrap());
        assert!(origin_allowed(&h));
        h.insert(ORIGIN, "https://evil.example".parse().unwrap());
        assert!(!origin_allowed(&h));
        h.insert(HOST, "evil.example".parse().unwrap());
        assert!(origin_allowed(&h), "same origin");
        h.insert(ORIGIN, "null".parse().unwrap());
        assert!(!origin_allowed(&h));
    }

    #[test]
    fn tokens_come_from_header_cookie_or_query() {
        let uri: Uri = "/ws?session_id=a&token=q%20t".parse().unwrap();
        let mut h = HeaderMap::new();
        assert_eq!(presented_token(&h, &uri).as_deref(), Some("q t"));
        h.insert(COOKIE, "a=b; jarvis_token=c".parse().unwrap());
        assert_eq!(presented_token(&h, &uri).as_deref(), Some("c"));
        h.insert(AUTHORIZATION, "Bearer h".parse().unwrap());
        assert_eq!(presented_token(&h, &uri).as_deref(), Some("h"));
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
