//! GET /health: whether the server can answer requests. 200 `{"status": "ok", "models": {...}}`
//! while every text model's scheduler runs; 503 naming the models whose scheduler is gone
//! (their requests can only fail), so a supervisor restarts the process.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use crate::state::{AppState, Served};

pub async fn health(State(state): State<Arc<AppState>>) -> Response {
    let mut models = Map::new();
    let mut dead = Vec::new();
    for (name, served) in &state.models {
        if let Served::Text(t) = served {
            models.insert(name.clone(), t.liveness.report());
            if !t.liveness.is_alive() {
                dead.push(name.clone());
            }
        }
    }
    if dead.is_empty() {
        return Json(json!({ "status": "ok", "models": Value::Object(models) })).into_response();
    }
    let body = json!({
        "status": "unavailable",
        "message": format!("the scheduler of {} stopped: restart the server", dead.join(", ")),
        "dead": dead,
        "models": Value::Object(models),
    });
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}
