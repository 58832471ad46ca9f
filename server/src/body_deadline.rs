//! `body_timeout_secs`: the whole request body must arrive within the deadline, counted from its
//! headers. tower-http's `RequestBodyTimeoutLayer` restarts its clock at every frame, so a body
//! dripped a byte at a time never ends; this one does not, and the late request gets a 408.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::{Frame, SizeHint};
use tokio::time::Sleep;

use crate::error::ApiError;
use crate::state::AppState;

/// Wraps the request body in the deadline; a request whose body ran out of time is answered
/// 408 whatever its handler made of the failed read, and its connection closed.
pub async fn limit_body_time(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let limit = Duration::from_secs(state.config.body_timeout_secs);
    let expired = Arc::new(AtomicBool::new(false));
    let req = req.map(|body| {
        Body::new(DeadlineBody { inner: body, sleep: Box::pin(tokio::time::sleep(limit)), expired: expired.clone() })
    });
    let response = next.run(req).await;
    if !expired.load(Ordering::Relaxed) {
        return response;
    }
    let e = ApiError {
        status: StatusCode::REQUEST_TIMEOUT,
        message: format!("the request body did not arrive within {} s (body_timeout_secs)", limit.as_secs()),
        kind: "invalid_request_error",
        param: None,
        code: Some("request_timeout"),
        retry_after: None,
    };
    let mut r = e.into_response();
    r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

#[derive(Debug)]
struct BodyTimedOut;

impl std::fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body took too long")
    }
}

impl std::error::Error for BodyTimedOut {}

struct DeadlineBody {
    inner: Body,
    sleep: Pin<Box<Sleep>>,
    expired: Arc<AtomicBool>,
}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if self.sleep.as_mut().poll(cx).is_ready() {
            self.expired.store(true, Ordering::Relaxed);
            return Poll::Ready(Some(Err(Box::new(BodyTimedOut))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
