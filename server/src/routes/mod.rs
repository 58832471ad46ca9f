//! The HTTP surface: routes, the API-key check, body limits, request metrics and the JSON 404.

mod audio;
mod health;
mod live;
mod text;
mod transcription;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, MatchedPath, Path, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use crate::error::ApiError;
use crate::metrics::RequestLabel;
use crate::state::{AppState, Served};

pub fn router(state: Arc<AppState>) -> Router {
    let limits = &state.config;
    let api = Router::new()
        .route("/models", get(list_models))
        .route("/models/{id}", get(get_model))
        .route("/chat/completions", post(text::chat_completions))
        .route("/completions", post(text::completions))
        .route("/audio/speech", post(audio::speech))
        .route(
            "/audio/transcriptions",
            post(transcription::transcriptions).layer(DefaultBodyLimit::max(limits.max_upload_bytes)),
        )
        .route("/audio/transcriptions/live", get(live::live_transcription))
        .layer(DefaultBodyLimit::max(limits.max_body_bytes))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_api_key))
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() });
    Router::new()
        .nest("/v1", api)
        .route("/", get(index))
        .route("/health", get(health::health))
        .route("/metrics", get(metrics))
        .fallback(|req: Request| async move {
            ApiError::not_found(format!("no endpoint at {} {}", req.method(), req.uri().path()))
        })
        .layer(middleware::from_fn_with_state(state.clone(), count_requests))
        .with_state(state)
}

/// With an API key configured, /v1 requests must carry `Authorization: Bearer <key>`.
async fn require_api_key(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if let Some(key) = &state.config.api_key {
        let given = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        match given.and_then(|v| v.strip_prefix("Bearer ")) {
            Some(k) if k.trim() == key => {}
            Some(_) => return ApiError::unauthorized("incorrect API key").into_response(),
            None => {
                return ApiError::unauthorized("missing API key: send `Authorization: Bearer <key>`").into_response()
            }
        }
    }
    next.run(req).await
}

async fn count_requests(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    // The route's pattern, not the raw path, keeps the label set small.
    let path = req.extensions().get::<MatchedPath>().map(|p| p.as_str().to_string()).unwrap_or_else(|| "other".into());
    let response = next.run(req).await;
    state.metrics.requests.get_or_create(&RequestLabel { path, status: response.status().as_u16() }).inc();
    response
}

fn model_object(name: &str, served: &Served, created: u64) -> serde_json::Value {
    json!({ "id": name, "object": "model", "created": created, "owned_by": "infer", "kind": served.kind() })
}

async fn list_models(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let data: Vec<_> = state.models.iter().map(|(n, m)| model_object(n, m, state.created)).collect();
    Json(json!({ "object": "list", "data": data }))
}

async fn get_model(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    Ok(Json(model_object(&id, state.model(&id)?, state.created)))
}

/// The web page (server/web/index.html): chat, speech and transcription, no build step.
async fn index() -> axum::response::Html<&'static str> {
    axum::response::Html(include_str!("../../web/index.html"))
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
        state.metrics.render(),
    )
        .into_response()
}
