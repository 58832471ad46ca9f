//! Errors as the OpenAI API shapes them:
//! `{"error": {"message", "type", "param", "code"}}` with the matching HTTP status.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// Seconds, for 429 and 503.
    pub retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, message: message.into(), kind, param: None, code: None, retry_after: None }
    }

    /// 400: a parameter is missing, malformed or out of range.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 400 naming the parameter at fault.
    pub fn param(param: &str, message: impl Into<String>) -> Self {
        ApiError { param: Some(param.to_string()), ..Self::invalid(message) }
    }

    /// 400: a parameter the API defines that this server does not implement.
    pub fn unsupported(param: &str, message: impl Into<String>) -> Self {
        ApiError { code: Some("unsupported_parameter"), ..Self::param(param, message) }
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        ApiError {
            code: Some("invalid_api_key"),
            ..Self::new(StatusCode::UNAUTHORIZED, "invalid_request_error", message)
        }
    }

    pub fn model_not_found(name: &str, known: &[String]) -> Self {
        ApiError {
            param: Some("model".into()),
            code: Some("model_not_found"),
            ..Self::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                format!("the model `{name}` does not exist (served: {})", known.join(", ")),
            )
        }
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "invalid_request_error", message)
    }

    pub fn method_not_allowed() -> Self {
        Self::new(StatusCode::METHOD_NOT_ALLOWED, "invalid_request_error", "method not allowed on this path")
    }

    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "invalid_request_error", message)
    }

    pub fn context_length(message: impl Into<String>) -> Self {
        ApiError { code: Some("context_length_exceeded"), param: Some("messages".into()), ..Self::invalid(message) }
    }

    /// 429: every slot is busy and the queue is full.
    pub fn queue_full(retry_after: u64) -> Self {
        ApiError {
            code: Some("rate_limit_exceeded"),
            retry_after: Some(retry_after),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                "the server is at capacity (all slots busy and the queue full): retry later",
            )
        }
    }

    /// 501: an endpoint whose kind of model this server has not loaded or cannot run yet.
    pub fn not_implemented(message: impl Into<String>) -> Self {
        ApiError { code: Some("not_implemented"), ..Self::new(StatusCode::NOT_IMPLEMENTED, "not_implemented", message) }
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError { retry_after: Some(1), ..Self::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", message) }
    }

    /// 504: the request reached its wall-clock limit (`request_timeout_secs`) before it could
    /// produce anything.
    pub fn timeout(message: impl Into<String>) -> Self {
        ApiError { code: Some("timeout"), ..Self::new(StatusCode::GATEWAY_TIMEOUT, "server_error", message) }
    }

    /// 500: the model failed.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// A core error from handling a request: bad input is the client's (400), the rest ours.
    pub fn from_core(e: &infer_core::Error) -> Self {
        use infer_core::Error as E;
        match e {
            E::InvalidInput(m) => Self::invalid(m.clone()),
            E::Unsupported(m) => Self::invalid(format!("unsupported: {m}")),
            E::Tokenizer(_) => Self::invalid(e.to_string()),
            _ => Self::internal(e.to_string()),
        }
    }

    /// The JSON body (also sent as the last event of a failed stream).
    pub fn body(&self) -> serde_json::Value {
        json!({ "error": { "message": self.message, "type": self.kind, "param": self.param, "code": self.code } })
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}
