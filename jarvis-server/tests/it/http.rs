//! The HTTP API through `router().oneshot`.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use jarvis_pack_housing::HousingPack;
use jarvis_sdk::turn::Caller;
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
    // The person's zone its times are shown in (Asia/Seoul by default).
    assert_eq!(agenda["time_zone"], "Asia/Seoul", "{agenda}");
    let (status, _, health) = call(&state, get("/healthz")).await;
    assert_eq!((status, &health["status"]), (StatusCode::OK, &json!("ok")));
    assert_eq!(health["pid"], std::process::id());
    assert_eq!(health["background"]["embedding"], "ok", "{health}");

    // The embedder of recall, as embedder.json records it: the offline
    // hash embedder by default.
    let (status, _, system) = call(&state, get("/api/system")).await;
    assert_eq!(status, StatusCode::OK);
    let embedder = &system["embedder"];
    assert_eq!(
        (&embedder["provider"], &embedder["name"], &embedder["requested"]),
        (&json!("hash"), &json!("hash-v1-512"), &json!("hash")),
        "{system}"
    );
    assert!(
        ["idle", "running", "done"].contains(&embedder["reembedding"].as_str().unwrap()),
        "{system}"
    );
    assert!(embedder.get("model").is_none(), "{system}");
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
async fn a_configured_token_is_required_from_the_header_or_the_cookie_never_the_query() {
    let home = TempHome::new();
    let config = ServerConfig::loopback(0).with_token("s3cret");
    let state = ServerState::new(app_with(&home, HELLO, Some("s3cret")).await, config);

    let (s, _, b) = call(&state, get("/api/agents")).await;
    assert_error(s, &b, StatusCode::UNAUTHORIZED, "unauthorized");
    assert!(!b.to_string().contains("s3cret"));
    for wrong in [
        "Bearer nope",
        "Bearer s3cre",
        "Bearer s3cret2",
        "Bearer ",
        "s3cret",
    ] {
        let request = Request::get("/api/agents")
            .header(header::AUTHORIZATION, wrong)
            .body(Body::empty())
            .unwrap();
        assert_eq!(call(&state, request).await.0, StatusCode::UNAUTHORIZED, "{wrong}");
    }
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
    // The URL is not a place for the token: the API ignores it there.
    let (s, _, b) = call(&state, get("/api/agenda?token=s3cret")).await;
    assert_error(s, &b, StatusCode::UNAUTHORIZED, "unauthorized");
    let (s, _, b) = call(&state, post("/api/sessions?token=s3cret", "")).await;
    assert_error(s, &b, StatusCode::UNAUTHORIZED, "unauthorized");

    // Health and the page need none.
    assert_eq!(call(&state, get("/healthz")).await.0, StatusCode::OK);
    let (s, headers, _) = call(&state, get("/")).await;
    assert_eq!(s, StatusCode::OK);
    assert!(headers.get(header::SET_COOKIE).is_none());
    // The page with the token sets the cookie and sends the browser on to
    // the same address without the token; other parameters stay as written.
    for (uri, location) in [
        ("/?token=s3cret", "/"),
        (
            "/?session=s%2D1&token=s3cret&agent=karen&particles=low",
            "/?session=s%2D1&agent=karen&particles=low",
        ),
    ] {
        let (s, headers, _) = call(&state, get(uri)).await;
        assert_eq!(s, StatusCode::SEE_OTHER, "{uri}");
        assert_eq!(headers[header::LOCATION], location, "{uri}");
        let cookie = headers[header::SET_COOKIE].to_str().unwrap();
        assert_eq!(
            cookie, "jarvis_token=s3cret; HttpOnly; SameSite=Strict; Path=/",
            "plain HTTP: not Secure"
        );
        assert_eq!(headers[header::REFERRER_POLICY], "no-referrer");
    }
    // A wrong token sets nothing; the page shows and says a token is needed.
    let (s, headers, _) = call(&state, get("/?token=wrong")).await;
    assert_eq!(s, StatusCode::OK);
    assert!(headers.get(header::SET_COOKIE).is_none());
}

#[tokio::test]
async fn the_cookie_is_secure_when_the_browser_came_over_https() {
    let home = TempHome::new();
    let app = app_with(&home, HELLO, Some("s3cret")).await;
    // TLS here (the router does not read the files; `serve` does).
    let tls = ServerState::new(
        app.clone(),
        ServerConfig::loopback(0)
            .with_token("s3cret")
            .with_tls("cert.pem", "key.pem"),
    );
    let (s, headers, _) = call(&tls, get("/?token=s3cret")).await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    let cookie = headers[header::SET_COOKIE].to_str().unwrap();
    assert!(cookie.ends_with("; Secure"), "{cookie}");
    // TLS in a proxy in front: what the proxy forwarded decides.
    let proxied = ServerState::new(
        app,
        ServerConfig::loopback(0)
            .with_token("s3cret")
            .with_behind_proxy(true),
    );
    for (proto, secure) in [(Some("https"), true), (Some("http"), false), (None, false)] {
        let mut request = Request::get("/?token=s3cret");
        if let Some(proto) = proto {
            request = request.header("x-forwarded-proto", proto);
        }
        let (_, headers, _) = call(&proxied, request.body(Body::empty()).unwrap()).await;
        let cookie = headers[header::SET_COOKIE].to_str().unwrap();
        assert_eq!(cookie.ends_with("; Secure"), secure, "{proto:?}: {cookie}");
    }
}

fn with_headers(method: &str, uri: &str, headers: &[(&str, &str)], body: &str) -> Request<Body> {
    let mut request = Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.body(Body::from(body.to_owned())).unwrap()
}

async fn session_count(state: &ServerState) -> usize {
    state.app().list_sessions().await.unwrap().len()
}

#[tokio::test]
async fn browser_requests_from_other_origins_are_refused_and_change_nothing() {
    let home = TempHome::new();
    let state = ServerState::new(app(&home, HELLO).await, ServerConfig::loopback(8765));
    let host = ("host", "127.0.0.1:8765");
    let (_, _, parent) = call(&state, post("/api/sessions", "")).await;
    let fork = format!("/api/sessions/{}/fork", parent["id"].as_str().unwrap());
    let before = session_count(&state).await;
    // What a page elsewhere can send without a preflight: a form, a
    // `no-cors` fetch. Browsers name the page's origin, or at least its site.
    let foreign: [&[(&str, &str)]; 8] = [
        &[host, ("origin", "http://localhost:5173")],
        &[host, ("origin", "http://127.0.0.1:5173")],
        &[host, ("origin", "https://127.0.0.1:8765")],
        &[host, ("origin", "http://evil.example")],
        &[host, ("origin", "null")],
        &[host, ("sec-fetch-site", "same-site")],
        &[host, ("sec-fetch-site", "cross-site")],
        &[
            host,
            ("origin", "http://localhost:5173"),
            ("sec-fetch-site", "same-origin"),
        ],
    ];
    for headers in foreign {
        for (method, uri, body) in [
            ("POST", "/api/sessions", ""),
            ("POST", "/api/sessions", "x"),
            ("POST", fork.as_str(), ""),
            ("PUT", "/api/sessions", ""),
            ("DELETE", fork.as_str(), ""),
            ("PATCH", "/api/sessions", "{}"),
            ("POST", "/", ""),
            ("GET", "/api/sessions", ""),
            ("GET", "/ws?session_id=s-x", ""),
        ] {
            let (s, _, b) = call(&state, with_headers(method, uri, headers, body)).await;
            assert_eq!(s, StatusCode::FORBIDDEN, "{method} {uri} {headers:?}: {b}");
            assert_eq!(
                b["error"]["code"], "forbidden_origin",
                "{method} {uri} {headers:?}: {b}"
            );
        }
    }
    assert_eq!(session_count(&state).await, before, "no session appeared");

    // The server's own pages, the address bar, and clients that are no page.
    let own: [&[(&str, &str)]; 5] = [
        &[host, ("origin", "http://127.0.0.1:8765")],
        &[host, ("origin", "HTTP://127.0.0.1:8765")],
        &[host, ("sec-fetch-site", "same-origin")],
        &[host, ("sec-fetch-site", "none")],
        &[host],
    ];
    for headers in own {
        let (s, _, b) = call(&state, with_headers("POST", "/api/sessions", headers, "")).await;
        assert_eq!(s, StatusCode::CREATED, "{headers:?}: {b}");
    }
    assert_eq!(session_count(&state).await, before + own.len());
    // Reading the page and its files needs no origin: a link from anywhere opens the HUD.
    for uri in ["/", "/assets/hud.css", "/healthz"] {
        let request = with_headers("GET", uri, &[host, ("sec-fetch-site", "cross-site")], "");
        assert_eq!(call(&state, request).await.0, StatusCode::OK, "{uri}");
    }
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
    let mut config = jarvis_sdk::app::AppConfig::for_home(&home.0);
    config.packs = vec![std::sync::Arc::new(HousingPack::in_memory())];
    let demo = jarvis_sdk::app::build_app(config).await.unwrap();
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

#[tokio::test]
async fn the_mcp_servers_are_listed_with_state_and_reason() {
    let home = TempHome::new();
    std::fs::create_dir_all(&home.0).unwrap();
    std::fs::write(
        home.0.join("mcp.yaml"),
        "servers:\n  broken:\n    command: /nonexistent/mcp-server\n    agents: [karen]\n",
    )
    .unwrap();
    let state = ServerState::new(app(&home, HELLO).await, ServerConfig::loopback(0));
    let (status, _, servers) = call(&state, get("/api/mcp")).await;
    assert_eq!(status, StatusCode::OK, "{servers}");
    let broken = &servers[0];
    assert_eq!(
        (
            &broken["name"],
            &broken["owner"],
            &broken["transport"],
            &broken["state"]
        ),
        (
            &json!("broken"),
            &Value::Null,
            &json!("/nonexistent/mcp-server"),
            &json!("restarting")
        )
    );
    assert!(
        broken["error"]
            .as_str()
            .unwrap()
            .contains("cannot run /nonexistent/mcp-server"),
        "{servers}"
    );
    assert_eq!(broken["tools"], json!([]));
}

/// JARVIS on a priced model and K.A.R.E.N. on one without a price, each
/// answering with the usage its provider would report.
const PRICED: &str = r#"
rules:
  - when: { agent: main }
    reply: { text: "done", usage: { input_tokens: 1000, output_tokens: 200, cached_input_tokens: 400 } }
  - when: { agent: karen }
    reply: { text: "found", usage: { input_tokens: 300, output_tokens: 50 } }
"#;

#[tokio::test]
async fn usage_is_summed_by_agent_session_and_day_and_unknown_costs_are_null() {
    let home = TempHome::new();
    std::fs::write(
        home.0.join(jarvis_sdk::model::PRICES_FILE),
        "lead-model: { input: 2.5, output: 10, cached_input: 1.25 }\n",
    )
    .unwrap();
    std::fs::create_dir_all(home.0.join("team")).unwrap();
    std::fs::write(
        home.0.join("team/karen.yaml"),
        "name: K.A.R.E.N.\nmodel: field-model\n",
    )
    .unwrap();
    let faux = std::sync::Arc::new(jarvis_sdk::model::FauxProvider::from_yaml(PRICED).unwrap());
    let mut config = jarvis_sdk::app::AppConfig::for_home(&home.0).with_provider(faux);
    config.packs = vec![std::sync::Arc::new(HousingPack::in_memory())];
    config.llm.model = "lead-model".into();
    // 2026-11-29T15:30:00Z: already the 30th in the person's zone (+09:00).
    config.clock = std::sync::Arc::new(jarvis_sdk::common::ManualClock::new(
        jarvis_sdk::common::Timestamp::from_millis(1_795_966_200_000).to_system_time(),
    ));
    let state = ServerState::new(
        jarvis_sdk::app::build_app(config).await.unwrap(),
        ServerConfig::loopback(0),
    );

    let (status, _, empty) = call(&state, get("/api/usage")).await;
    assert_eq!(status, StatusCode::OK, "{empty}");
    assert_eq!(empty, json!({"by": "agent", "rows": []}));

    for (session, agent, turns) in [("s-lead", "main", 2), ("s-field", "karen", 1)] {
        let session = state
            .app()
            .open_or_create(&session.parse().unwrap(), Some(agent))
            .await
            .unwrap();
        for _ in 0..turns {
            session.prompt("hi", Caller::Local).await.unwrap();
        }
    }
    // Two turns of 600 fresh × 2.5 + 400 cached × 1.25 + 200 out × 10, per million.
    let lead = json!({"turns": 2, "input_tokens": 2000, "output_tokens": 400,
                      "cached_input_tokens": 800, "cost_usd": 0.008});
    let field = json!({"turns": 1, "input_tokens": 300, "output_tokens": 50,
                       "cached_input_tokens": 0, "cost_usd": null});
    let keyed = |key: &str, row: &Value| {
        let mut row = row.clone();
        row["key"] = json!(key);
        row
    };
    for (uri, by) in [("/api/usage", "agent"), ("/api/usage?by=agent", "agent")] {
        let (status, _, body) = call(&state, get(uri)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(
            body,
            json!({"by": by, "rows": [keyed("karen", &field), keyed("main", &lead)]}),
            "{uri}"
        );
    }
    let (status, _, body) = call(&state, get("/api/usage?by=session")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({"by": "session", "rows": [keyed("s-field", &field), keyed("s-lead", &lead)]})
    );
    assert!(
        body["rows"][0].as_object().unwrap().contains_key("cost_usd"),
        "an unknown cost is null, not left out: {body}"
    );
    let (status, _, body) = call(&state, get("/api/usage?by=day")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({"by": "day", "rows": [{"key": "2026-11-30", "turns": 3, "input_tokens": 2300,
               "output_tokens": 450, "cached_input_tokens": 800, "cost_usd": null}]}),
        "one day in the person's zone; one unpriced turn makes its cost unknown"
    );

    for uri in ["/api/usage?by=week", "/api/usage?by=", "/api/usage?by=Agent"] {
        let (s, _, b) = call(&state, get(uri)).await;
        assert_error(s, &b, StatusCode::BAD_REQUEST, "bad_request");
        assert!(
            b["error"]["message"]
                .as_str()
                .unwrap()
                .contains("agent, session or day"),
            "{b}"
        );
    }
}

#[tokio::test]
async fn recording_is_switched_per_session_and_a_bad_switch_is_refused() {
    let home = TempHome::new();
    let state = ServerState::new(app(&home, HELLO).await, ServerConfig::loopback(0));
    let (_, _, a) = call(&state, post("/api/sessions", "")).await;
    let (_, _, b) = call(&state, post("/api/sessions", "")).await;
    let (a, b) = (a["id"].as_str().unwrap(), b["id"].as_str().unwrap());

    let (status, _, on) = call(
        &state,
        post(&format!("/api/sessions/{a}/record"), r#"{"enabled": true}"#),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{on}");
    assert_eq!(on["enabled"], true);
    let cassette = std::path::PathBuf::from(on["cassette"].as_str().unwrap());
    assert_eq!(cassette, home.0.join("cassettes").join(format!("{a}.jsonl")));
    for id in [a, b] {
        let session = state.app().session(&id.parse().unwrap()).await.unwrap();
        session.prompt("안녕", Caller::Local).await.unwrap();
    }
    let lines = std::fs::read_to_string(&cassette).unwrap();
    assert_eq!(lines.lines().count(), 1, "one model call of {a}: {lines}");
    assert!(
        !home.0.join("cassettes").join(format!("{b}.jsonl")).exists(),
        "{b} was not switched on"
    );

    let (status, _, off) = call(
        &state,
        post(&format!("/api/sessions/{a}/record"), r#"{"enabled": false}"#),
    )
    .await;
    assert_eq!((status, &off["enabled"]), (StatusCode::OK, &json!(false)));
    let session = state.app().session(&a.parse().unwrap()).await.unwrap();
    session.prompt("또 안녕", Caller::Local).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(&cassette).unwrap(),
        lines,
        "nothing recorded once off"
    );

    let (status, _, body) = call(
        &state,
        post(&format!("/api/sessions/{a}/record"), r#"{"enabled": "yes"}"#),
    )
    .await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "bad_request");
    let (status, _, body) = call(
        &state,
        post("/api/sessions/s-nobody/record", r#"{"enabled": true}"#),
    )
    .await;
    assert_error(status, &body, StatusCode::NOT_FOUND, "not_found");
}
