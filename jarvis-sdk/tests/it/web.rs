//! `web_fetch` and `web_search` against servers on loopback: pages become
//! readable text, non-public addresses are refused (directly, by name and
//! through redirects) unless allowed, and fake SearXNG, Brave and Tavily
//! backends answer searches, errors and rate limits. Then the settings
//! from the environment and the tools' place in an app.
//!
//! Refused addresses are never contacted: the refusal comes before any
//! connection, and the servers count the requests they received.

use axum::Router;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::housing::{assert_error, assert_ok, call};

use jarvis_pack_housing::{HousingPack, KAREN_DEFINITION};
use jarvis_sdk::agent::{Tool, ToolContext};
use jarvis_sdk::app::{AppConfig, AppError, build_app};
use jarvis_sdk::model::{FauxProvider, Message};
use jarvis_sdk::turn::{
    Caller, SearchProvider, WebFetchSettings, WebSearchSettings, web_fetch_tool, web_search_tool,
};

// ------------------------------------------------------------- helpers

/// Serves `router` on an ephemeral loopback port until the test ends.
async fn serve(router: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

const PAGE: &str = r#"<!doctype html>
<html><head><meta charset="utf-8"><title>Seoul  housing &amp; notes</title>
<style>body { color: red }</style><script>document.write("hidden")</script></head>
<body><h1>Gangseo notices</h1>
<p>Applications open on <b>1 March</b>; see <a href="/apply">the form</a>.</p>
<ul><li>Rent: 450,000 won</li><li>Deposit: 20,000,000 won</li></ul>
</body></html>"#;

/// A page server counting every request it receives.
#[derive(Clone, Default)]
struct Site {
    hits: Arc<AtomicUsize>,
}

impl Site {
    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// `/page` (HTML), `/plain`, `/json`, `/image`, `/long`, `/missing` (404),
/// `/loop` (redirects to itself), `/to-page` (redirects to `/page`) and
/// `/go?to=URL` (redirects to any URL).
async fn site() -> (SocketAddr, Site) {
    let state = Site::default();
    let router = Router::new()
        .route("/page", get(|| async { ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE) }))
        .route("/plain", get(|| async { ([(header::CONTENT_TYPE, "text/plain")], "line one\nline two\n") }))
        .route(
            "/json",
            get(|| async { ([(header::CONTENT_TYPE, "application/json")], r#"{"ok": true}"#) }),
        )
        .route(
            "/image",
            get(|| async { ([(header::CONTENT_TYPE, "image/png")], vec![0x89u8, b'P', b'N', b'G', 0, 0, 0]) }),
        )
        .route(
            "/long",
            get(|| async {
                let body = format!("<html><head><title>Long</title></head><body><p>{}</p></body></html>", "word ".repeat(20_000));
                ([(header::CONTENT_TYPE, "text/html")], body)
            }),
        )
        .route("/missing", get(|| async { (StatusCode::NOT_FOUND, "no such page") }))
        .route("/loop", get(|| async { Redirect::temporary("/loop") }))
        .route("/to-page", get(|| async { Redirect::to("/page") }))
        .route(
            "/go",
            get(|Query(q): Query<HashMap<String, String>>| async move { Redirect::temporary(&q["to"]) }),
        )
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            |State(site): State<Site>, request: axum::extract::Request, next: axum::middleware::Next| async move {
                site.hits.fetch_add(1, Ordering::SeqCst);
                next.run(request).await
            },
        ));
    (serve(router).await, state)
}

/// `web_fetch` allowing private addresses, as on a home network.
fn open_fetch() -> Arc<dyn Tool> {
    web_fetch_tool(WebFetchSettings::default().with_allow_private(true))
}

/// `web_fetch` as configured by default, with a short timeout so a broken
/// refusal fails quickly instead of waiting on an unreachable address.
fn strict_fetch() -> Arc<dyn Tool> {
    web_fetch_tool(WebFetchSettings::default().with_timeout(Duration::from_secs(3)))
}

const ALLOW_HINT: &str = "(set JARVIS_WEB_FETCH__ALLOW_PRIVATE=1 to allow private addresses)";

// ------------------------------------------------------------ web_fetch

#[tokio::test]
async fn a_loopback_page_becomes_readable_text_headed_by_its_url_and_title() {
    let (addr, site) = site().await;
    let tool = open_fetch();
    assert_eq!(tool.name(), "web_fetch");
    assert!(!tool.requires_approval(), "reading is not an action");

    let result = call(tool.as_ref(), json!({"url": format!("http://{addr}/to-page")})).await;
    assert_ok(&result);
    let text = &result.content;
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some(format!("URL: http://{addr}/page").as_str()),
        "{text}"
    );
    assert_eq!(lines.next(), Some("Title: Seoul housing & notes"), "{text}");
    assert_eq!(lines.next(), Some(""), "{text}");
    for words in [
        "Gangseo notices",
        "Applications open on",
        "1 March",
        "the form",
        "Rent: 450,000 won",
        "Deposit",
    ] {
        assert!(text.contains(words), "{words:?} missing from {text}");
    }
    assert!(
        text.contains(&format!("[1]: http://{addr}/apply")),
        "links are absolute: {text}"
    );
    for markup in ["<p>", "<b>", "<li>", "color: red", "document.write", "&amp;"] {
        assert!(!text.contains(markup), "{markup:?} left in {text}");
    }
    assert_eq!(site.hits(), 2, "the redirect and the page");
}

#[tokio::test]
async fn text_passes_through_and_binary_content_is_refused() {
    let (addr, _) = site().await;
    let tool = open_fetch();
    let plain = call(tool.as_ref(), json!({"url": format!("http://{addr}/plain")})).await;
    assert_ok(&plain);
    assert_eq!(
        plain.content,
        format!("URL: http://{addr}/plain\nTitle: (none)\n\nline one\nline two")
    );
    let data = call(tool.as_ref(), json!({"url": format!("http://{addr}/json")})).await;
    assert_ok(&data);
    assert!(data.content.ends_with(r#"{"ok": true}"#), "{}", data.content);
    let image = call(tool.as_ref(), json!({"url": format!("http://{addr}/image")})).await;
    assert_error(&image, "is image/png, not a web page or text");
}

#[tokio::test]
async fn long_pages_are_cut_by_bytes_and_by_characters_and_say_so() {
    let (addr, _) = site().await;
    let url = format!("http://{addr}/long");
    let by_bytes = web_fetch_tool(
        WebFetchSettings::default()
            .with_allow_private(true)
            .with_max_bytes(4_000),
    );
    let result = call(by_bytes.as_ref(), json!({"url": url})).await;
    assert_ok(&result);
    assert!(
        result
            .content
            .contains("[truncated: only the first 4000 bytes of the page were read]"),
        "{}",
        result.content
    );
    assert!(result.content.len() < 5_000);

    let by_chars = web_fetch_tool(
        WebFetchSettings::default()
            .with_allow_private(true)
            .with_max_chars(500),
    );
    let result = call(by_chars.as_ref(), json!({"url": url})).await;
    assert_ok(&result);
    assert!(result.content.contains("Title: Long"), "{}", result.content);
    assert!(
        result.content.contains("[truncated: showing the first 500 of "),
        "{}",
        result.content
    );
    assert!(!result.content.contains("bytes of the page were read"));
    assert!(
        result.content.chars().count() < 700,
        "{}",
        result.content.chars().count()
    );
}

#[tokio::test]
async fn error_statuses_endless_redirects_and_other_schemes_are_clear_errors() {
    let (addr, _) = site().await;
    let tool = open_fetch();
    let missing = call(tool.as_ref(), json!({"url": format!("http://{addr}/missing")})).await;
    assert_error(&missing, "answered HTTP 404 Not Found");
    let looping = call(tool.as_ref(), json!({"url": format!("http://{addr}/loop")})).await;
    assert_error(&looping, "redirects more than 5 times");
    let file = call(tool.as_ref(), json!({"url": "file:///etc/passwd"})).await;
    assert_error(&file, "only http:// and https://");
    let nonsense = call(tool.as_ref(), json!({"url": "not a url"})).await;
    assert_error(&nonsense, "is not a URL");
}

#[tokio::test]
async fn loopback_private_and_link_local_addresses_are_refused_by_default() {
    let (addr, site) = site().await;
    let port = addr.port();
    let tool = strict_fetch();
    for (url, message) in [
        (
            format!("http://127.0.0.1:{port}/page"),
            "refused: 127.0.0.1 is a loopback address",
        ),
        (
            "http://10.0.0.1/".to_owned(),
            "refused: 10.0.0.1 is a private address",
        ),
        (
            "http://169.254.169.254/latest/meta-data".to_owned(),
            "refused: 169.254.169.254 is a link-local address",
        ),
        (
            "http://192.168.1.1/admin".to_owned(),
            "refused: 192.168.1.1 is a private address",
        ),
        (
            format!("http://[::1]:{port}/page"),
            "refused: ::1 is a loopback address",
        ),
        (
            format!("http://[::ffff:127.0.0.1]:{port}/page"),
            "is a loopback address",
        ),
        (
            "http://0.0.0.0/".to_owned(),
            "refused: 0.0.0.0 is an unspecified address",
        ),
        (
            format!("http://localhost:{port}/page"),
            "refused: localhost resolves to ",
        ),
    ] {
        let result = call(tool.as_ref(), json!({"url": url})).await;
        assert_error(&result, message);
        assert_error(&result, ALLOW_HINT);
    }
    assert_eq!(site.hits(), 0, "no refused address was contacted");
}

#[tokio::test]
async fn a_redirect_to_a_non_public_address_is_refused_at_that_hop() {
    // The first server stands for a public site: exactly its address is
    // allowed. The second one stands for a private service behind it.
    let (public, front) = site().await;
    let (private, back) = site().await;
    let tool = web_fetch_tool(
        WebFetchSettings::default()
            .with_allowed_address(public)
            .with_timeout(Duration::from_secs(3)),
    );
    let allowed = call(tool.as_ref(), json!({"url": format!("http://{public}/page")})).await;
    assert_ok(&allowed);
    assert!(allowed.content.contains("Gangseo notices"));

    let go = |to: &str| format!("http://{public}/go?to={to}");
    for (target, message) in [
        (
            "http://169.254.169.254/latest/meta-data".to_owned(),
            "169.254.169.254 is a link-local address",
        ),
        ("http://10.0.0.1/".to_owned(), "10.0.0.1 is a private address"),
        (
            format!("http://{private}/page"),
            "127.0.0.1 is a loopback address",
        ),
        (
            format!("http://localhost:{}/page", private.port()),
            "localhost resolves to ",
        ),
    ] {
        let result = call(tool.as_ref(), json!({"url": go(&target)})).await;
        assert_error(&result, "refused: ");
        assert_error(&result, &format!("redirects to {target}"));
        assert_error(&result, message);
        assert_error(&result, ALLOW_HINT);
    }
    assert_eq!(back.hits(), 0, "the private server was never reached");
    assert_eq!(front.hits(), 5, "the allowed page and the four redirects");
}

#[tokio::test]
async fn an_aborted_turn_cancels_the_fetch() {
    let slow = Router::new().route(
        "/slow",
        get(|| async {
            std::future::pending::<()>().await;
            "never"
        }),
    );
    let addr = serve(slow).await;
    let tool = open_fetch();
    let cancel = tokio_util::sync::CancellationToken::new();
    let ctx = ToolContext::new("s1", "karen").with_cancel(cancel.clone());
    let url = format!("http://{addr}/slow");
    let call = tool.call(json!({"url": url}), &ctx);
    tokio::pin!(call);
    // Let the request reach the server, then abort.
    tokio::select! {
        _ = &mut call => panic!("a page that never answers finished"),
        _ = tokio::task::yield_now() => {}
    }
    cancel.cancel();
    let outcome = call.await;
    assert!(
        matches!(outcome, Err(jarvis_sdk::agent::ToolError::Cancelled)),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn the_whole_fetch_is_bounded_by_the_timeout() {
    let slow = Router::new().route(
        "/slow",
        get(|| async {
            std::future::pending::<()>().await;
            "never"
        }),
    );
    let addr = serve(slow).await;
    let tool = web_fetch_tool(
        WebFetchSettings::default()
            .with_allow_private(true)
            .with_timeout(Duration::from_millis(300)),
    );
    let result = call(tool.as_ref(), json!({"url": format!("http://{addr}/slow")})).await;
    assert_error(&result, "did not finish within 0.3 s");
}

// ----------------------------------------------------------- web_search

/// One request a fake backend received: its query, headers and body.
type Received = (HashMap<String, String>, HeaderMap, String);

/// A fake backend's fixed answer.
type Answer = fn() -> Response;

/// What a fake backend saw.
#[derive(Clone, Default)]
struct Seen(Arc<std::sync::Mutex<Vec<Received>>>);

impl Seen {
    fn last(&self) -> Received {
        self.0
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("a request reached the backend")
    }
}

/// A backend answering every request on `path` with `answer`, recording
/// the query, headers and body it received.
async fn backend(path: &str, answer: Answer) -> (String, Seen) {
    let seen = Seen::default();
    let record = seen.clone();
    let handler = move |Query(q): Query<HashMap<String, String>>, headers: HeaderMap, body: String| {
        let record = record.clone();
        async move {
            record.0.lock().unwrap().push((q, headers, body));
            answer()
        }
    };
    let router = Router::new().route(path, get(handler.clone()).post(handler));
    let addr = serve(router).await;
    (format!("http://{addr}"), seen)
}

fn json_answer(body: Value) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

fn searxng_results() -> Response {
    json_answer(json!({
        "query": "rust",
        "number_of_results": 3,
        "results": [
            {"title": "Rust Programming Language", "url": "https://www.rust-lang.org/",
             "content": "A language empowering everyone to build reliable and efficient software.",
             "engine": "duckduckgo"},
            {"title": "The Rust Book", "url": "https://doc.rust-lang.org/book/",
             "content": "An introductory book about Rust."},
            {"title": "Rust (video game)", "url": "https://rust.facepunch.com/", "content": "Survive."}
        ],
        "answers": [], "suggestions": [], "unresponsive_engines": []
    }))
}

fn brave_results() -> Response {
    json_answer(json!({
        "type": "search",
        "query": {"original": "rust"},
        "web": {"type": "search", "results": [
            {"title": "Rust Programming Language", "url": "https://www.rust-lang.org/",
             "description": "A language empowering everyone to build <strong>reliable</strong> software.",
             "type": "search_result"},
            {"title": "<strong>Rust</strong> by Example", "url": "https://doc.rust-lang.org/rust-by-example/",
             "description": "Learn Rust with examples &amp; exercises."}
        ]}
    }))
}

fn tavily_results() -> Response {
    json_answer(json!({
        "query": "rust",
        "results": [
            {"title": "Rust", "url": "https://www.rust-lang.org/", "content": "Fast and safe.", "score": 0.9}
        ],
        "response_time": 0.5
    }))
}

fn rate_limited() -> Response {
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(header::RETRY_AFTER, "30")],
        "slow down",
    )
        .into_response()
}

fn rate_limited_without_a_wait() -> Response {
    (StatusCode::TOO_MANY_REQUESTS, "slow down").into_response()
}

fn server_error() -> Response {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        r#"{"message": "engine crashed"}"#,
    )
        .into_response()
}

fn garbage() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        "<html>not json</html>",
    )
        .into_response()
}

fn not_results() -> Response {
    json_answer(json!({"items": []}))
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        Body::from(r#"{"error": {"detail": "invalid token"}}"#),
    )
        .into_response()
}

fn search_tool(settings: WebSearchSettings) -> Arc<dyn Tool> {
    web_search_tool(settings).unwrap()
}

#[tokio::test]
async fn searxng_results_become_a_numbered_list_of_titles_links_and_snippets() {
    let (base, seen) = backend("/search", searxng_results).await;
    let tool = search_tool(WebSearchSettings::searxng(&base));
    assert_eq!(tool.name(), "web_search");
    assert!(!tool.requires_approval());
    let result = call(tool.as_ref(), json!({"query": "rust", "limit": 2})).await;
    assert_ok(&result);
    assert_eq!(
        result.content,
        "Results for \"rust\" (SearXNG):\n\
         \n1. Rust Programming Language\n   https://www.rust-lang.org/\n   A language empowering everyone to build reliable and efficient software.\n\
         \n2. The Rust Book\n   https://doc.rust-lang.org/book/\n   An introductory book about Rust."
    );
    let (query, headers, _) = seen.last();
    assert_eq!(query.get("q").map(String::as_str), Some("rust"));
    assert_eq!(query.get("format").map(String::as_str), Some("json"));
    assert_eq!(headers[header::ACCEPT], "application/json");

    let all = call(tool.as_ref(), json!({"query": "rust"})).await;
    assert!(all.content.contains("3. Rust (video game)"), "{}", all.content);
}

#[tokio::test]
async fn brave_results_are_parsed_and_the_key_travels_in_its_header() {
    let (base, seen) = backend("/res/v1/web/search", brave_results).await;
    let tool = search_tool(WebSearchSettings::brave("brave-key-123").with_base_url(&base));
    let result = call(tool.as_ref(), json!({"query": "rust", "limit": 3})).await;
    assert_ok(&result);
    assert_eq!(
        result.content,
        "Results for \"rust\" (Brave Search):\n\
         \n1. Rust Programming Language\n   https://www.rust-lang.org/\n   A language empowering everyone to build reliable software.\n\
         \n2. Rust by Example\n   https://doc.rust-lang.org/rust-by-example/\n   Learn Rust with examples & exercises."
    );
    let (query, headers, _) = seen.last();
    assert_eq!(query.get("q").map(String::as_str), Some("rust"));
    assert_eq!(query.get("count").map(String::as_str), Some("3"));
    assert_eq!(headers["x-subscription-token"], "brave-key-123");
    assert_eq!(headers[header::ACCEPT], "application/json");
}

#[tokio::test]
async fn tavily_is_asked_with_a_bearer_key_and_a_json_body() {
    let (base, seen) = backend("/search", tavily_results).await;
    let tool = search_tool(WebSearchSettings::tavily("tvly-key").with_base_url(&base));
    let result = call(tool.as_ref(), json!({"query": "rust"})).await;
    assert_ok(&result);
    assert!(
        result
            .content
            .contains("1. Rust\n   https://www.rust-lang.org/\n   Fast and safe."),
        "{}",
        result.content
    );
    let (_, headers, body) = seen.last();
    assert_eq!(headers[header::AUTHORIZATION], "Bearer tvly-key");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body, json!({"query": "rust", "max_results": 5}));
}

#[tokio::test]
async fn rate_limits_errors_and_unreadable_answers_are_clear_errors() {
    for provider in [SearchProvider::Searxng, SearchProvider::Brave] {
        let settings = |base: &str| match provider {
            SearchProvider::Brave => WebSearchSettings::brave("k").with_base_url(base),
            _ => WebSearchSettings::searxng(base),
        };
        let path = match provider {
            SearchProvider::Brave => "/res/v1/web/search",
            _ => "/search",
        };
        let cases: [(Answer, &str); 6] = [
            (
                rate_limited,
                "the search backend is rate limiting (429); try again later (Retry-After: 30 s)",
            ),
            (
                rate_limited_without_a_wait,
                "rate limiting (429); try again later",
            ),
            (
                server_error,
                "answered HTTP 500 Internal Server Error (engine crashed)",
            ),
            (garbage, "answer is not the JSON a search returns"),
            (not_results, "answer is not a search result"),
            (unauthorized, "answered HTTP 401 Unauthorized"),
        ];
        for (answer, message) in cases {
            let (base, _) = backend(path, answer).await;
            let tool = search_tool(settings(&base));
            let result = call(tool.as_ref(), json!({"query": "rust"})).await;
            assert_error(&result, message);
            assert!(
                !result.content.contains(&base),
                "no endpoint in {:?}",
                result.content
            );
        }
    }
    let (base, _) = backend("/res/v1/web/search", unauthorized).await;
    let brave = search_tool(WebSearchSettings::brave("k").with_base_url(&base));
    let result = call(brave.as_ref(), json!({"query": "rust"})).await;
    assert_error(&result, "check JARVIS_WEB_SEARCH__API_KEY");
    assert_error(&result, "(invalid token)");
}

#[tokio::test]
async fn an_unreachable_backend_and_an_empty_query_are_errors() {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let tool = search_tool(WebSearchSettings::searxng(format!("http://127.0.0.1:{port}")));
    let result = call(tool.as_ref(), json!({"query": "rust"})).await;
    assert_error(&result, "web_search: cannot reach SearXNG");
    assert!(!result.content.contains(&port.to_string()), "{}", result.content);
    let empty = call(tool.as_ref(), json!({"query": "  "})).await;
    assert_error(&empty, "the query is empty");
}

// ------------------------------------------------ settings and the app

fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let mut map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    map.entry("JARVIS_HOME".into())
        .or_insert_with(|| "/tmp/jarvis-web-config".into());
    move |name| map.get(name).cloned()
}

fn config_error(pairs: &[(&str, &str)]) -> String {
    match AppConfig::from_lookup(vars(pairs)) {
        Err(AppError::Config(message)) => message,
        Err(other) => panic!("not a configuration error: {other}"),
        Ok(_) => panic!("{pairs:?} was accepted"),
    }
}

#[test]
fn the_environment_configures_both_tools_and_misconfiguration_is_refused() {
    let plain = AppConfig::from_lookup(vars(&[])).unwrap();
    assert!(!plain.web_fetch.allow_private);
    assert_eq!(plain.web_search, None);
    let home = AppConfig::for_home("/tmp/jarvis-web-home");
    assert!(!home.web_fetch.allow_private && home.web_fetch.allowed_addresses.is_empty());
    assert_eq!(home.web_search, None);

    let open = AppConfig::from_lookup(vars(&[("JARVIS_WEB_FETCH__ALLOW_PRIVATE", "1")])).unwrap();
    assert!(open.web_fetch.allow_private);
    assert!(config_error(&[("JARVIS_WEB_FETCH__ALLOW_PRIVATE", "perhaps")]).contains("is not 0 or 1"));

    let searx = AppConfig::from_lookup(vars(&[
        ("JARVIS_WEB_SEARCH__PROVIDER", "searxng"),
        ("JARVIS_WEB_SEARCH__BASE_URL", "http://127.0.0.1:8888"),
    ]))
    .unwrap()
    .web_search
    .unwrap();
    assert_eq!(searx.provider, SearchProvider::Searxng);
    assert_eq!(searx.endpoint(), "http://127.0.0.1:8888/search");
    let brave = AppConfig::from_lookup(vars(&[
        ("JARVIS_WEB_SEARCH__PROVIDER", "Brave"),
        ("JARVIS_WEB_SEARCH__API_KEY", "brave-secret"),
    ]))
    .unwrap()
    .web_search
    .unwrap();
    assert_eq!(brave.provider, SearchProvider::Brave);
    assert_eq!(brave.endpoint(), "https://api.search.brave.com/res/v1/web/search");
    assert!(!format!("{brave:?}").contains("brave-secret"), "{brave:?}");
    let tavily = AppConfig::from_lookup(vars(&[
        ("JARVIS_WEB_SEARCH__PROVIDER", "tavily"),
        ("JARVIS_WEB_SEARCH__API_KEY", "key"),
        ("JARVIS_WEB_SEARCH__BASE_URL", "http://127.0.0.1:9/"),
    ]))
    .unwrap()
    .web_search
    .unwrap();
    assert_eq!(tavily.endpoint(), "http://127.0.0.1:9/search");

    for (pairs, message) in [
        (
            &[("JARVIS_WEB_SEARCH__PROVIDER", "bing")][..],
            "JARVIS_WEB_SEARCH__PROVIDER=bing is not a search backend; use searxng, brave or tavily",
        ),
        (
            &[("JARVIS_WEB_SEARCH__PROVIDER", "brave")][..],
            "JARVIS_WEB_SEARCH__PROVIDER=brave needs JARVIS_WEB_SEARCH__API_KEY",
        ),
        (
            &[
                ("JARVIS_WEB_SEARCH__PROVIDER", "tavily"),
                ("JARVIS_WEB_SEARCH__BASE_URL", "http://x"),
            ][..],
            "JARVIS_WEB_SEARCH__PROVIDER=tavily needs JARVIS_WEB_SEARCH__API_KEY",
        ),
        (
            &[("JARVIS_WEB_SEARCH__PROVIDER", "searxng")][..],
            "JARVIS_WEB_SEARCH__PROVIDER=searxng needs JARVIS_WEB_SEARCH__BASE_URL",
        ),
        (
            &[("JARVIS_WEB_SEARCH__API_KEY", "key")][..],
            "JARVIS_WEB_SEARCH__API_KEY is set but JARVIS_WEB_SEARCH__PROVIDER is not",
        ),
        (
            &[
                ("JARVIS_WEB_SEARCH__PROVIDER", "searxng"),
                ("JARVIS_WEB_SEARCH__BASE_URL", "ftp://x"),
            ][..],
            "is not an http:// or https:// address",
        ),
    ] {
        let error = config_error(pairs);
        assert!(error.contains(message), "{message:?} not in {error:?}");
    }
}

struct TempHome(tempfile::TempDir);

impl TempHome {
    fn new() -> Self {
        Self(tempfile::tempdir().unwrap())
    }
    fn config(&self, faux: Arc<FauxProvider>) -> AppConfig {
        let mut config = AppConfig::for_home(self.0.path()).with_provider(faux);
        config.packs = vec![std::sync::Arc::new(HousingPack::in_memory())];
        config
    }
}

#[tokio::test]
async fn without_a_backend_karen_lists_web_search_quietly_and_has_web_fetch_alone() {
    let home = TempHome::new();
    let faux = Arc::new(FauxProvider::from_yaml("fallback: { text: ok }").unwrap());
    let (logs, _guard) = crate::capture::capture();
    let app = build_app(home.config(faux)).await.unwrap();
    assert!(app.tools().get("web_fetch").is_some());
    assert!(app.tools().get("web_search").is_none(), "no backend, no tool");
    let karen = app.registry().get("karen").unwrap();
    assert!(karen.has_tool("web_fetch"));
    assert!(!karen.has_tool("web_search"));
    assert!(KAREN_DEFINITION.contains("web_search") && KAREN_DEFINITION.contains("web_fetch"));
    assert!(
        !logs
            .warnings()
            .iter()
            .any(|w| w.contains("web_search") || w.contains("web_fetch")),
        "{:?}",
        logs.warnings()
    );
    let main = app.registry().main();
    assert!(app.tools().get("web_fetch").is_some_and(|t| t.agent_only()));
    assert!(!main.has_tool("web_fetch"), "web_fetch is agent-only");
    assert!(!main.has_tool("web_search"));
    // A name nobody knows is still warned about.
    drop(app);
    let other = TempHome::new();
    let faux = Arc::new(FauxProvider::from_yaml("fallback: { text: ok }").unwrap());
    let config = other
        .config(faux)
        .with_definition("scout", "tools: [web_fetch, web_serch]");
    let app = build_app(config).await.unwrap();
    assert!(app.registry().get("scout").unwrap().has_tool("web_fetch"));
    assert!(
        logs.warned(&["unknown tool", "web_serch"]),
        "{:?}",
        logs.warnings()
    );
}

#[tokio::test]
async fn karen_searches_and_reads_a_page_in_a_turn() {
    let (site_addr, _) = site().await;
    let (base, seen) = backend("/search", searxng_results).await;
    let home = TempHome::new();
    let script = format!(
        r#"
rules:
  - when: {{ agent: karen, last_role: user }}
    reply: {{ tool_calls: [ {{ name: web_search, arguments: {{ query: "강서구 공고" }} }}, {{ name: web_fetch, arguments: {{ url: "http://{site_addr}/page" }} }} ] }}
  - when: {{ agent: karen, last_role: tool }}
    reply: {{ text: "찾았습니다." }}
fallback: {{ text: ok }}
"#
    );
    let faux = Arc::new(FauxProvider::from_yaml(&script).unwrap());
    let mut config = home.config(faux.clone());
    config.web_fetch = WebFetchSettings::default().with_allow_private(true);
    config.web_search = Some(WebSearchSettings::searxng(&base));
    let app = build_app(config).await.unwrap();
    assert!(app.registry().get("karen").unwrap().has_tool("web_search"));
    let meta = app.create_session(Some("karen")).await.unwrap();
    let session = app.session(&meta.id).await.unwrap();
    session
        .prompt("강서구 공고를 찾아 줘", Caller::Local)
        .await
        .unwrap();

    let requests = faux.requests();
    let step = requests
        .iter()
        .find(|r| !r.tools.is_empty())
        .expect("a step offered tools");
    let offered: Vec<&str> = step.tools.iter().map(|t| t.name.as_str()).collect();
    assert!(
        offered.contains(&"web_search") && offered.contains(&"web_fetch"),
        "{offered:?}"
    );
    let answered = requests
        .iter()
        .rev()
        .find(|r| r.messages.iter().any(|m| matches!(m, Message::Tool(_))))
        .expect("a step read the tool results");
    let results: Vec<(String, bool, String)> = answered
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(t) => Some((t.tool_name.clone(), t.is_error, t.content.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(
        (results[0].0.as_str(), results[0].1),
        ("web_search", false),
        "{results:?}"
    );
    assert!(results[0].2.contains("1. Rust Programming Language"));
    assert_eq!(
        (results[1].0.as_str(), results[1].1),
        ("web_fetch", false),
        "{results:?}"
    );
    assert!(results[1].2.starts_with(&format!(
        "URL: http://{site_addr}/page\nTitle: Seoul housing & notes"
    )));
    assert_eq!(seen.last().0.get("q").map(String::as_str), Some("강서구 공고"));
}
