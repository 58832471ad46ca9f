//! The HTTP surface: routes, the API-key and `Host` checks, CORS, body limits and deadlines,
//! request metrics and the JSON 404.

mod audio;
mod embeddings;
mod health;
mod live;
mod text;
mod tokenize;
mod transcription;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::extract::{DefaultBodyLimit, MatchedPath, Path, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::auth::{check_host, require_api_key};
use crate::body_deadline::limit_body_time;
use crate::error::ApiError;
use crate::metrics::RequestLabel;
use crate::state::{AppState, Served};

/// `routes` as the API serves them: bodies up to `max_body_bytes`, the API key required, a JSON
/// 405 for a wrong method.
fn keyed(routes: Router<Arc<AppState>>, state: &Arc<AppState>) -> Router<Arc<AppState>> {
    routes
        .layer(DefaultBodyLimit::max(state.config.max_body_bytes))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_api_key))
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
}

pub fn router(state: Arc<AppState>) -> Result<Router> {
    let limits = &state.config;
    let cors = cors_layer(&limits.cors_origins)?;
    let api = Router::new()
        .route("/models", get(list_models))
        .route("/models/{id}", get(get_model))
        .route("/chat/completions", post(text::chat_completions))
        .route("/completions", post(text::completions))
        .route("/embeddings", post(embeddings::embeddings))
        .route("/audio/speech", post(audio::speech))
        .route(
            "/audio/transcriptions",
            post(transcription::transcriptions).layer(DefaultBodyLimit::max(limits.max_upload_bytes)),
        )
        .route("/audio/transcriptions/live", get(live::live_transcription));
    // llama-server's paths, outside /v1, behind the same key.
    let tokenizer = Router::new()
        .route("/tokenize", post(tokenize::tokenize))
        .route("/detokenize", post(tokenize::detokenize))
        .route("/apply-template", post(text::apply_template));
    let (api, tokenizer) = (keyed(api, &state), keyed(tokenizer, &state));
    let mut metrics_route = get(metrics);
    if limits.metrics_require_key {
        metrics_route = metrics_route.route_layer(middleware::from_fn_with_state(state.clone(), require_api_key));
    }
    let mut router = Router::new()
        .nest("/v1", api)
        .merge(tokenizer)
        .route("/", get(index))
        .route("/health", get(health::health))
        .route("/metrics", metrics_route)
        .fallback(|req: Request| async move {
            ApiError::not_found(format!("no endpoint at {} {}", req.method(), req.uri().path()))
        })
        .layer(middleware::from_fn_with_state(state.clone(), limit_body_time))
        .layer(middleware::from_fn_with_state(state.clone(), check_host))
        .layer(middleware::from_fn_with_state(state.clone(), count_requests));
    // Outermost, so preflights are answered before any check and refusals stay readable.
    if let Some(cors) = cors {
        router = router.layer(cors);
    }
    Ok(router.with_state(state))
}

/// `cors_origins` as a layer: none when empty (no CORS headers at all), any origin for `*`.
fn cors_layer(origins: &[String]) -> Result<Option<CorsLayer>> {
    if origins.is_empty() {
        return Ok(None);
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        let list = origins
            .iter()
            .map(|o| HeaderValue::from_str(o).with_context(|| format!("cors_origins: `{o}` is not a header value")))
            .collect::<Result<Vec<_>>>()?;
        AllowOrigin::list(list)
    };
    Ok(Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST])
            .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE])
            .max_age(Duration::from_secs(3600)),
    ))
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
