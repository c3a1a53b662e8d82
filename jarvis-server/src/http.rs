//! The HTTP API (DESIGN.md §5): agents, sessions, the AGENDA, usage, health
//! and the HUD (its page and embedded files). Every handler only reads from or asks the assembly.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, LOCATION, REFERRER_POLICY, SET_COOKIE,
    X_CONTENT_TYPE_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use jarvis_sdk::agent::{SessionId, SessionMeta};
use jarvis_sdk::turn::UsageBy;
use serde_json::json;

use crate::auth::{Reached, query_param, token_cookie, token_ok, without_query_param};
use crate::error::AppError;
use crate::hud;
use crate::protocol::{
    AgentInfo, CreateSession, EmbedderInfo, Health, McpServerInfo, SessionDetail, SystemInfo, UsageReport,
    codes,
};
use crate::state::ServerState;

/// `GET /healthz`.
pub(crate) async fn healthz(State(state): State<ServerState>) -> Json<Health> {
    let health = state.app().background_health();
    Json(Health {
        status: "ok".to_owned(),
        pid: std::process::id(),
        background: health
            .iter()
            .map(|(name, h)| (name.clone(), h.status.as_str().to_owned()))
            .collect(),
        background_failures: health
            .iter()
            .map(|(name, h)| (name.clone(), h.failures))
            .collect(),
    })
}

/// `GET /api/agents`: the team, `main` first.
pub(crate) async fn agents(State(state): State<ServerState>) -> Json<Vec<AgentInfo>> {
    Json(
        state
            .app()
            .registry()
            .agents()
            .iter()
            .map(|a| AgentInfo::from(a.as_ref()))
            .collect(),
    )
}

/// `GET /api/mcp`: the MCP servers, their state and tools.
pub(crate) async fn mcp_servers(State(state): State<ServerState>) -> Json<Vec<McpServerInfo>> {
    Json(
        state
            .app()
            .mcp()
            .statuses()
            .iter()
            .map(McpServerInfo::from)
            .collect(),
    )
}

/// `GET /api/system`: the embedder of recall and its re-embedding.
pub(crate) async fn system(State(state): State<ServerState>) -> Json<SystemInfo> {
    let app = state.app();
    let embedder = app.embedder().map(|choice| {
        let status = app.memory().map(|m| m.reembedding()).unwrap_or_default();
        EmbedderInfo {
            provider: choice.provider.clone(),
            model: choice.model.clone(),
            name: choice.embedder.clone(),
            requested: choice.requested.clone(),
            reembedding: status.phase.as_str().to_owned(),
            reembedded: status.embedded,
        }
    });
    Json(SystemInfo { embedder })
}

/// `GET /api/usage?by=agent|session|day`: tokens and cost summed by agent
/// (the default), session or day in the person's zone.
pub(crate) async fn usage(State(state): State<ServerState>, uri: Uri) -> Result<Json<UsageReport>, AppError> {
    let by = match query_param(&uri, "by") {
        None => UsageBy::default(),
        Some(name) => UsageBy::parse(&name).ok_or_else(|| {
            AppError::bad_request(format!(
                "`by` must be agent, session or day, not {:?}",
                jarvis_sdk::common::truncate_chars(&name, 40)
            ))
        })?,
    };
    Ok(Json(UsageReport {
        by,
        rows: state.app().usage_summary(by),
    }))
}

/// `GET /api/sessions`: every session, newest first, peer sessions included.
pub(crate) async fn list_sessions(
    State(state): State<ServerState>,
) -> Result<Json<Vec<SessionMeta>>, AppError> {
    Ok(Json(state.app().list_sessions().await?))
}

/// `POST /api/sessions {"agent": …}` → 201 with the new session.
pub(crate) async fn create_session(
    State(state): State<ServerState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<SessionMeta>), AppError> {
    let body = body.map_err(body_error)?;
    let request: CreateSession = if body.iter().all(u8::is_ascii_whitespace) {
        CreateSession::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| AppError::bad_request(format!("the body is not a session request: {e}")))?
    };
    let meta = state.app().create_session(request.agent.as_deref()).await?;
    Ok((StatusCode::CREATED, Json(meta)))
}

/// `GET /api/sessions/{id}`: the session and its entries.
pub(crate) async fn get_session(
    State(state): State<ServerState>,
    Path(id): Path<String>,
) -> Result<Json<SessionDetail>, AppError> {
    let id = parse_id(id)?;
    let (session, entries) = state.app().session_entries(&id).await?;
    Ok(Json(SessionDetail { session, entries }))
}

/// `POST /api/sessions/{id}/fork` → 201 with the fork (same agent).
pub(crate) async fn fork_session(
    State(state): State<ServerState>,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<SessionMeta>), AppError> {
    let id = parse_id(id)?;
    Ok((StatusCode::CREATED, Json(state.app().fork(&id).await?)))
}

/// `POST /api/sessions/{id}/record` with `{"enabled": bool}`: starts or
/// stops recording the session's cassette, for good → 200
/// `{"session_id", "enabled", "cassette"}` (the file's path in the home).
pub(crate) async fn record_session(
    State(state): State<ServerState>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<serde_json::Value>, AppError> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Record {
        enabled: bool,
    }
    let id = parse_id(id)?;
    let body = body.map_err(body_error)?;
    let request: Record = serde_json::from_slice(&body)
        .map_err(|e| AppError::bad_request(format!("the body is not {{\"enabled\": true|false}}: {e}")))?;
    let path = state.app().set_recording(&id, request.enabled).await?;
    Ok(Json(json!({
        "session_id": id.as_str(),
        "enabled": request.enabled,
        "cassette": path.display().to_string(),
    })))
}

/// `GET /api/agenda`: `{"items": […], "time_zone": "Asia/Seoul"}`, the
/// app's AGENDA (every agent's schedules and open promises with the agent's
/// name and colour) and the person's zone its times are shown in.
pub(crate) async fn agenda(State(state): State<ServerState>) -> Json<serde_json::Value> {
    Json(json!({
        "items": state.app().agenda().await,
        "time_zone": state.app().time_zone().to_string(),
    }))
}

/// `GET /`: the HUD page. With `?token=` equal to the server's token, it
/// sets the token cookie for the page's API calls and WebSocket and
/// redirects (303) to the same address without the token, so the token
/// does not stay in the address bar, the history or a `Referer`.
pub(crate) async fn index(State(state): State<ServerState>, uri: Uri, headers: HeaderMap) -> Response {
    if state.config().token.is_some()
        && let Some(token) = query_param(&uri, "token")
        && token_ok(&state, Some(&token))
    {
        let secure = Reached::of(state.config(), &headers).is_https();
        let location = without_query_param(&uri, "token");
        if let (Ok(cookie), Ok(location)) = (
            HeaderValue::from_str(&token_cookie(&token, secure)),
            HeaderValue::from_str(&location),
        ) {
            let mut headers = HeaderMap::new();
            headers.insert(SET_COOKIE, cookie);
            headers.insert(LOCATION, location);
            headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
            headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
            return (StatusCode::SEE_OTHER, headers).into_response();
        }
    }
    let app = state.app();
    let page = hud::index_html(app.is_demo(), app.notice());
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(hud::CONTENT_SECURITY_POLICY),
    );
    (headers, page).into_response()
}

/// `GET /assets/{*path}`: a file of the HUD, embedded in the binary.
pub(crate) async fn asset(Path(path): Path<String>) -> Response {
    let Some((content_type, body)) = hud::asset(&path) else {
        return AppError::not_found("no such file").into_response();
    };
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    (headers, body).into_response()
}

/// Unknown routes.
pub(crate) async fn not_found() -> AppError {
    AppError::not_found("no such route")
}

/// Known routes with the wrong method.
pub(crate) async fn method_not_allowed() -> AppError {
    AppError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        codes::METHOD_NOT_ALLOWED,
        "this route does not take that method",
    )
}

fn parse_id(id: String) -> Result<SessionId, AppError> {
    SessionId::new(id).map_err(|e| AppError::bad_request(e.to_string()))
}

fn body_error(rejection: BytesRejection) -> AppError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        AppError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            codes::TOO_LARGE,
            "the request body is too large",
        )
    } else {
        AppError::bad_request("the request body could not be read")
    }
}
