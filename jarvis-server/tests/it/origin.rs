//! The origin rules in a real headless Chromium (see [`crate::browser`]): a
//! page served from a second loopback port, as a local dev server would,
//! tries to drive the HUD's server with what browsers send without a
//! preflight (a WebSocket, an auto-submitted HTML form `POST`, a `no-cors`
//! `fetch` `POST`). The server's own request log shows each refused with
//! 403 `forbidden_origin`, and no session appears; the HUD on its own
//! origin still works. Skips loudly without Chromium unless
//! `JARVIS_REQUIRE_BROWSER=1`.

use axum::Router;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use fantoccini::Locator;
use jarvis_server::{ServerConfig, ServerState, router};
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;

use crate::browser::{Browser, BrowserOptions};
use crate::support::{TempHome, app, eventually};

/// One request as the HUD's server answered it.
#[derive(Debug, Clone, PartialEq)]
struct Logged {
    method: String,
    path: String,
    origin: Option<String>,
    status: u16,
    /// The error code of a JSON error body.
    code: Option<String>,
}

type Log = Arc<Mutex<Vec<Logged>>>;

/// Records every request and its answer (the error code of JSON errors).
async fn record(log: Log, request: Request, next: Next) -> Response {
    let method = request.method().to_string();
    let path = request.uri().path().to_owned();
    let origin = request
        .headers()
        .get("origin")
        .and_then(|o| o.to_str().ok())
        .map(str::to_owned);
    let response = next.run(request).await;
    let status = response.status().as_u16();
    let is_json = response
        .headers()
        .get("content-type")
        .is_some_and(|t| t.as_bytes().starts_with(b"application/json"));
    if !is_json || response.status().is_success() {
        log.lock().unwrap().push(Logged {
            method,
            path,
            origin,
            status,
            code: None,
        });
        return response;
    }
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap_or_default();
    let code = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_owned));
    log.lock().unwrap().push(Logged {
        method,
        path,
        origin,
        status,
        code,
    });
    Response::from_parts(parts, axum::body::Body::from(bytes))
}

async fn listen(router: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

/// The other page: it opens the HUD server's WebSocket, submits a form to
/// its API into an iframe, and `fetch`es it in `no-cors` mode, recording
/// what it sees in `window.results`.
fn attack_page(hud: SocketAddr) -> String {
    format!(
        r#"<!doctype html>
<html><head><title>another local app</title></head><body>
<iframe name="sink" id="sink"></iframe>
<form id="form" method="post" action="http://{hud}/api/sessions" target="sink" enctype="text/plain"></form>
<script>
window.results = {{ ws: [], fetch: null }};
const ws = new WebSocket("ws://{hud}/ws?session_id=from-elsewhere&agent=main");
ws.onopen = () => {{
  window.results.ws.push("open");
  ws.send(JSON.stringify({{ type: "prompt", text: "run something" }}));
}};
ws.onerror = () => window.results.ws.push("error");
ws.onclose = (e) => window.results.ws.push("close " + e.code);
fetch("http://{hud}/api/sessions", {{ method: "POST", mode: "no-cors", body: "x" }})
  .then((r) => {{ window.results.fetch = "answered " + r.type; }},
        (e) => {{ window.results.fetch = "failed " + e; }});
document.getElementById("form").submit();
</script>
</body></html>"#
    )
}

fn refused(log: &[Logged], method: &str, path: &str) -> usize {
    log.iter()
        .filter(|l| {
            l.method == method
                && l.path == path
                && l.status == 403
                && l.code.as_deref() == Some("forbidden_origin")
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_on_another_local_port_cannot_drive_the_hud_server_and_the_hud_still_works() {
    let test = "a_page_on_another_local_port_cannot_drive_the_hud_server";
    let Some(browser) = Browser::start(test, BrowserOptions::default()).await else {
        return;
    };
    let home = TempHome::new();
    let state = ServerState::new(
        app(&home, "fallback: { text: \"at your service\" }").await,
        ServerConfig::loopback(0),
    );
    let log: Log = Arc::default();
    let logged = log.clone();
    let hud = listen(router(state.clone()).layer(axum::middleware::from_fn(
        move |request: Request, next: Next| record(logged.clone(), request, next),
    )))
    .await;
    let page = attack_page(hud);
    let elsewhere = listen(Router::new().route(
        "/",
        axum::routing::get(move || {
            let page = page.clone();
            async move { Html(page).into_response() }
        }),
    ))
    .await;
    let sessions = || async { state.app().list_sessions().await.unwrap().len() };
    assert_eq!(sessions().await, 0);

    browser
        .client
        .goto(&format!("http://{elsewhere}/"))
        .await
        .unwrap();
    // The socket never opens: the page sees an error and a close.
    let ws = browser
        .wait_js(
            "the other page's WebSocket is refused",
            "return window.results && window.results.ws.some((e) => e.startsWith('close'))",
            |v| v == &Value::Bool(true),
        )
        .await;
    assert_eq!(ws, Value::Bool(true));
    let seen = browser.js("return window.results.ws", vec![]).await;
    assert!(
        !seen.as_array().unwrap().iter().any(|e| e == "open"),
        "the socket opened: {seen}"
    );
    assert!(seen.as_array().unwrap().iter().any(|e| e == "error"), "{seen}");
    browser
        .wait_js("the no-cors fetch settles", "return window.results.fetch", |v| {
            !v.is_null()
        })
        .await;
    // The server refused all three, each with 403 `forbidden_origin`.
    let other_origin = format!("http://{elsewhere}");
    eventually(async || {
        let log = log.lock().unwrap();
        refused(&log, "GET", "/ws") >= 1 && refused(&log, "POST", "/api/sessions") >= 2
    })
    .await;
    {
        let log = log.lock().unwrap();
        for entry in log.iter() {
            assert_eq!(
                (entry.status, entry.code.as_deref(), entry.origin.as_deref()),
                (403, Some("forbidden_origin"), Some(other_origin.as_str())),
                "everything the other page sent was refused: {entry:?}"
            );
        }
        assert_eq!(refused(&log, "POST", "/api/sessions"), 2, "{log:?}");
    }
    assert_eq!(sessions().await, 0, "no session appeared");
    browser.screenshot("origin-other-page").await;

    // The HUD on its own origin works: the page, its API calls, its socket.
    log.lock().unwrap().clear();
    browser
        .open_hud(&format!("http://{hud}/?session=s-own&agent=main"))
        .await;
    let c = &browser.client;
    c.find(Locator::Css("#prompt"))
        .await
        .unwrap()
        .send_keys("hello")
        .await
        .unwrap();
    c.find(Locator::Css("#send"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser
        .wait_js(
            "the answer shows on the HUD",
            "const t = document.querySelector('#log .agent-turn .text'); return t ? t.textContent : ''",
            |v| v == "at your service",
        )
        .await;
    {
        let log = log.lock().unwrap();
        // (A new session's history is 404 until its first turn: the HUD
        // asks before it opens the socket.)
        assert!(
            log.iter()
                .all(|l| l.status != 403 && l.status != 401 && l.status < 500),
            "the HUD's own requests pass: {log:?}"
        );
        assert!(log.iter().any(|l| l.path == "/ws" && l.status == 101), "{log:?}");
    }
    assert_eq!(sessions().await, 1, "the HUD's own session");
    browser.finish().await;
}
