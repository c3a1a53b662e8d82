//! The HTTP API through `router().oneshot`.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use jarvis_sdk::Caller;
use jarvis_server::{Limits, ServerConfig, ServerState, router};
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::support::{TempHome, app, app_with};

const HELLO: &str = "fallback: { text: \"hello there\", chunks: 2 }";

async fn call(state: &ServerState, request: Request<Body>) -> (StatusCode, header::HeaderMap, Value) {
    let response = router(state.clone()).oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, headers, body)
}

fn get(uri: &str) -> Request<Body> {
    Request::get(uri).body(Body::empty()).unwrap()
}

fn post(uri: &str, body: &str) -> Request<Body> {
    Request::post(uri)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap()
}

#[track_caller]
fn assert_error(status: StatusCode, body: &Value, want_status: StatusCode, want_code: &str) {
    assert_eq!(status, want_status, "{body}");
    assert_eq!(body["error"]["code"], want_code, "{body}");
    assert!(
        body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
}

#[tokio::test]
async fn agents_sessions_fork_agenda_and_health() {
    let home = TempHome::new();
    let state = ServerState::new(app(&home, HELLO).await, ServerConfig::loopback(0));

    let (status, _, agents) = call(&state, get("/api/agents")).await;
    assert_eq!(status, StatusCode::OK);
    let ids: Vec<&str> = agents
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["main", "karen"], "main first");
    let karen = &agents[1];
    assert_eq!(karen["name"], "K.A.R.E.N.");
    assert_eq!(karen["palette"]["primary"], "#97BC62");
    for field in ["description", "quote"] {
        assert!(karen[field].as_str().is_some_and(|s| !s.is_empty()), "{field}");
    }
    assert!(karen["tools"].as_array().unwrap().contains(&json!("sh_notice")));
    assert!(
        !agents[0]["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("sh_notice"))
    );

    // Create: omitted agent is main; a named agent; 201 with the session.
    let (status, _, main) = call(&state, post("/api/sessions", "")).await;
    assert_eq!(status, StatusCode::CREATED, "{main}");
    assert_eq!(main["agent_id"], "main");
    for field in ["id", "title", "created_at", "updated_at", "parent_id", "kind"] {
        assert!(main.get(field).is_some(), "{field} in {main}");
    }
    assert_eq!(main["kind"], "user");
    let (status, _, k) = call(&state, post("/api/sessions", r#"{"agent": "karen"}"#)).await;
    assert_eq!(
        (status, k["agent_id"].as_str()),
        (StatusCode::CREATED, Some("karen"))
    );

    // A turn, then the session with its entries.
    let id = main["id"].as_str().unwrap();
    let session = state.app().session(&id.parse().unwrap()).await.unwrap();
    session.prompt("hi", Caller::Local).await.unwrap();
    let (status, _, detail) = call(&state, get(&format!("/api/sessions/{id}"))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(detail["session"]["id"], id);
    let entries = detail["entries"].as_array().unwrap();
    assert!(
        entries.iter().any(|e| e["message"]["content"] == "hello there"),
        "{detail}"
    );

    // Newest first.
    let (_, _, list) = call(&state, get("/api/sessions")).await;
    let updated: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["updated_at"].as_str().unwrap())
        .collect();
    assert_eq!(updated.len(), 2);
    assert!(updated[0] >= updated[1], "newest first: {list}");

    // Fork keeps the agent and names its parent.
    let (status, _, fork) = call(
        &state,
        post(&format!("/api/sessions/{}/fork", k["id"].as_str().unwrap()), ""),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{fork}");
    assert_eq!(
        (fork["agent_id"].as_str(), fork["parent_id"].as_str()),
        (Some("karen"), k["id"].as_str())
    );

    // A fresh app's AGENDA: KAREN's built-in notice watch, nothing else.
    let (status, _, agenda) = call(&state, get("/api/agenda")).await;
    assert_eq!(status, StatusCode::OK);
    let items = agenda["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{agenda}");
    assert_eq!(
        (&items[0]["kind"], &items[0]["id"], &items[0]["agent_id"]),
        (&json!("schedule"), &json!("housing_watch"), &json!("karen"))
    );
    assert!(
        items[0]["when"].is_string() && items[0]["detail"] == "every 30m",
        "{agenda}"
    );
    let (status, _, health) = call(&state, get("/healthz")).await;
    assert_eq!((status, &health["status"]), (StatusCode::OK, &json!("ok")));
    assert_eq!(health["pid"], std::process::id());
}

#[tokio::test]
async fn bad_requests_get_json_errors_that_reveal_nothing() {
    let home = TempHome::new();
    let config = ServerConfig::loopback(0).with_limits(Limits {
        max_body_bytes: 1024,
        ..Limits::default()
    });
    let state = ServerState::new(app(&home, HELLO).await, config);

    let (s, _, b) = call(&state, post("/api/sessions", r#"{"agent": "nobody"}"#)).await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, "unknown_agent");
    let (s, _, b) = call(&state, post("/api/sessions", "{not json")).await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, "bad_request");
    let (s, _, b) = call(&state, post("/api/sessions", r#"{"agent": "main", "colour": 1}"#)).await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, "bad_request");
    let (s, _, b) = call(
        &state,
        post(
            "/api/sessions",
            &format!(r#"{{"agent": "{}"}}"#, "x".repeat(4096)),
        ),
    )
    .await;
    assert_error(s, &b, StatusCode::PAYLOAD_TOO_LARGE, "too_large");
    let (s, _, b) = call(&state, get("/api/sessions/no-such-session")).await;
    assert_error(s, &b, StatusCode::NOT_FOUND, "not_found");
    let (s, _, b) = call(&state, get("/api/sessions/bad%20id")).await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, "bad_request");
    let (s, _, b) = call(&state, post("/api/sessions/no-such-session/fork", "")).await;
    assert_error(s, &b, StatusCode::NOT_FOUND, "not_found");
    let (s, _, b) = call(&state, get("/api/nothing-here")).await;
    assert_error(s, &b, StatusCode::NOT_FOUND, "not_found");
    let (s, _, b) = call(
        &state,
        Request::delete("/api/agents").body(Body::empty()).unwrap(),
    )
    .await;
    assert_error(s, &b, StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");
    let (s, _, b) = call(&state, get("/ws?session_id=x")).await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, "bad_request");
    // Nothing from the inside shows: no paths of the home, no Rust types.
    let home_path = home.0.display().to_string();
    for uri in ["/api/sessions/no-such-session", "/api/sessions/bad%20id"] {
        let (_, _, b) = call(&state, get(uri)).await;
        assert!(!b.to_string().contains(&home_path), "{b}");
    }
}

#[tokio::test]
async fn a_configured_token_is_required_from_header_cookie_or_query() {
    let home = TempHome::new();
    let config = ServerConfig::loopback(0).with_token("s3cret");
    let state = ServerState::new(app_with(&home, HELLO, Some("s3cret")).await, config);

    let (s, _, b) = call(&state, get("/api/agents")).await;
    assert_error(s, &b, StatusCode::UNAUTHORIZED, "unauthorized");
    assert!(!b.to_string().contains("s3cret"));
    let wrong = Request::get("/api/agents")
        .header(header::AUTHORIZATION, "Bearer nope")
        .body(Body::empty())
        .unwrap();
    assert_eq!(call(&state, wrong).await.0, StatusCode::UNAUTHORIZED);
    let bearer = Request::get("/api/agents")
        .header(header::AUTHORIZATION, "Bearer s3cret")
        .body(Body::empty())
        .unwrap();
    assert_eq!(call(&state, bearer).await.0, StatusCode::OK);
    let cookie = Request::get("/api/sessions")
        .header(header::COOKIE, "jarvis_token=s3cret")
        .body(Body::empty())
        .unwrap();
    assert_eq!(call(&state, cookie).await.0, StatusCode::OK);
    assert_eq!(
        call(&state, get("/api/agenda?token=s3cret")).await.0,
        StatusCode::OK
    );
    // Health and the page need none; the page with the token sets the cookie.
    assert_eq!(call(&state, get("/healthz")).await.0, StatusCode::OK);
    let (s, headers, _) = call(&state, get("/?token=s3cret")).await;
    assert_eq!(s, StatusCode::OK);
    let cookie = headers.get(header::SET_COOKIE).unwrap().to_str().unwrap();
    assert!(
        cookie.starts_with("jarvis_token=s3cret;") && cookie.contains("HttpOnly"),
        "{cookie}"
    );
    let (_, headers, _) = call(&state, get("/?token=wrong")).await;
    assert!(headers.get(header::SET_COOKIE).is_none());
}

#[tokio::test]
async fn without_a_token_only_loopback_host_names_are_answered() {
    let home = TempHome::new();
    let state = ServerState::new(app(&home, HELLO).await, ServerConfig::loopback(0));
    for host in [
        "localhost:8765",
        "127.0.0.1:8765",
        "[::1]:8765",
        "jarvis.localhost",
    ] {
        let request = Request::get("/api/agents")
            .header(header::HOST, host)
            .body(Body::empty())
            .unwrap();
        assert_eq!(call(&state, request).await.0, StatusCode::OK, "{host}");
    }
    let rebound = Request::get("/api/sessions")
        .header(header::HOST, "evil.example:8765")
        .body(Body::empty())
        .unwrap();
    let (s, _, b) = call(&state, rebound).await;
    assert_error(s, &b, StatusCode::FORBIDDEN, "forbidden_origin");
}

#[tokio::test]
async fn the_page_is_embedded_and_says_when_the_demo_plays() {
    let home = TempHome::new();
    let mut config = jarvis_sdk::AppConfig::for_home(&home.0);
    config.housing = jarvis_sdk::HousingConfig::in_memory();
    let demo = jarvis_sdk::build_app(config).await.unwrap();
    assert!(demo.is_demo());
    let state = ServerState::new(demo, ServerConfig::loopback(0));
    let (s, headers, page) = call(&state, get("/")).await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let page = page.as_str().unwrap();
    assert!(page.contains("offline demo is playing"), "the page says so");
    assert!(
        page.contains("JARVIS_LLM__PROVIDER"),
        "and how to configure a model"
    );
    assert!(
        page.contains(r#"src="/assets/js/main.js""#),
        "the page loads its modules"
    );
    let csp = headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
    assert!(csp.contains("script-src 'self'"), "{csp}");

    // Its files are embedded too, each with its type.
    for (path, kind, needle) in [
        ("/assets/js/api.js", "text/javascript", "new WebSocket("),
        ("/assets/js/main.js", "text/javascript", "switchAgent"),
        ("/assets/hud.css", "text/css", "@property --primary"),
    ] {
        let (s, headers, body) = call(&state, get(path)).await;
        assert_eq!(s, StatusCode::OK, "{path}");
        assert!(
            headers[header::CONTENT_TYPE].to_str().unwrap().starts_with(kind),
            "{path}"
        );
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{path}");
        assert!(body.as_str().unwrap().contains(needle), "{path}");
    }
    for missing in ["/assets/js/nothing.js", "/assets/../Cargo.toml", "/assets/"] {
        let (s, _, b) = call(&state, get(missing)).await;
        assert_error(s, &b, StatusCode::NOT_FOUND, "not_found");
    }
}
