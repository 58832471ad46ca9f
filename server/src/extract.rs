//! A JSON body extractor whose rejections are OpenAI-shaped errors (axum's are plain text).

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(ApiJson(v)),
            Err(e) => Err(rejection(e)),
        }
    }
}

fn rejection(e: JsonRejection) -> ApiError {
    match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::too_large("request body too large"),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            ApiError::invalid("expected a JSON body (Content-Type: application/json)")
        }
        _ => match e {
            // serde's message names the field and what was wrong with it.
            JsonRejection::JsonDataError(d) => ApiError::invalid(format!("invalid request: {}", d.body_text())),
            JsonRejection::JsonSyntaxError(s) => {
                ApiError::invalid(format!("the body is not valid JSON: {}", s.body_text()))
            }
            other => ApiError::invalid(other.body_text()),
        },
    }
}
