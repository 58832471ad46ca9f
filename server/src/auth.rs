//! Who may call: the API key (constant-time), and without one, which `Host` names are served.
//!
//! The key comes as `Authorization: Bearer <key>`, or on a WebSocket upgrade (browsers cannot
//! set headers on one) as a subprotocol: the client offers `infer` and `bearer.<key>` in
//! `Sec-WebSocket-Protocol`, and the server answers selecting `infer`, never echoing the key.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::state::AppState;

/// The subprotocol a live-transcription client offers, and the server selects.
pub const WS_PROTOCOL: &str = "infer";
/// The prefix of the subprotocol that carries the key.
const WS_KEY_PREFIX: &str = "bearer.";

/// The key's bytes compared in time that does not depend on where they differ (only the
/// length can show).
fn key_matches(given: &str, key: &str) -> bool {
    given.as_bytes().ct_eq(key.as_bytes()).into()
}

/// The key a request carries: its bearer token, else on a WebSocket upgrade its `bearer.`
/// subprotocol.
fn given_key(headers: &HeaderMap) -> Option<&str> {
    if let Some(v) = headers.get(header::AUTHORIZATION) {
        return v.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")).map(str::trim).or(Some(""));
    }
    let upgrade = headers.get(header::UPGRADE).and_then(|v| v.to_str().ok());
    if !upgrade.is_some_and(|u| u.eq_ignore_ascii_case("websocket")) {
        return None;
    }
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|p| p.trim().strip_prefix(WS_KEY_PREFIX))
}

/// With an API key configured, the request must carry it.
pub async fn require_api_key(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if let Some(key) = &state.config.api_key {
        match given_key(req.headers()) {
            Some(k) if key_matches(k, key) => {}
            Some(_) => return ApiError::unauthorized("incorrect API key").into_response(),
            None => {
                return ApiError::unauthorized(
                    "missing API key: send `Authorization: Bearer <key>` (WebSocket: subprotocols `infer` and `bearer.<key>`)",
                )
                .into_response()
            }
        }
    }
    next.run(req).await
}

/// Without an API key, only requests naming a loopback host or one of `allowed_hosts` are
/// served: a page on another site that rebinds its DNS name to this address still sends its
/// own name as `Host`. With a key every host is served (the key is the guard).
pub async fn check_host(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if state.config.api_key.is_none() {
        let host = req.headers().get(header::HOST).and_then(|v| v.to_str().ok()).or(req.uri().host());
        // A request without a Host header does not come from a browser.
        if let Some(host) = host {
            if !host_allowed(host, &state.config.allowed_hosts) {
                return host_refused(host).into_response();
            }
        }
    }
    next.run(req).await
}

fn host_refused(host: &str) -> ApiError {
    ApiError {
        status: StatusCode::FORBIDDEN,
        message: format!(
            "Host `{host}` is not served: without an API key only loopback names are (list it in allowed_hosts, or set an API key)"
        ),
        kind: "invalid_request_error",
        param: None,
        code: Some("host_not_allowed"),
        retry_after: None,
    }
}

/// `host` (a `Host` value, with or without its port) is loopback or listed.
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let name = strip_port(host);
    let loopback = name.eq_ignore_ascii_case("localhost")
        || name.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    loopback || allowed.iter().any(|a| a.eq_ignore_ascii_case(name) || a.eq_ignore_ascii_case(host))
}

fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn keys_compare_whole() {
        assert!(key_matches("test-key-123", "test-key-123"));
        assert!(!key_matches("test-key-124", "test-key-123"));
        assert!(!key_matches("test-key-12", "test-key-123"));
        assert!(!key_matches("", "test-key-123"));
    }

    #[test]
    fn the_key_comes_from_the_bearer_header_or_a_websocket_subprotocol() {
        let mut h = HeaderMap::new();
        assert_eq!(given_key(&h), None);
        h.insert(header::SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static("infer, bearer.k1"));
        assert_eq!(given_key(&h), None, "a subprotocol counts on an upgrade only");
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        assert_eq!(given_key(&h), Some("k1"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer k2"));
        assert_eq!(given_key(&h), Some("k2"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic k2"));
        assert_eq!(given_key(&h), Some(""), "a malformed Authorization is a wrong key, not none");
    }

    #[test]
    fn loopback_and_listed_hosts_pass() {
        let listed = vec!["box.lan".to_string(), "10.0.0.2:8080".to_string()];
        for h in ["localhost", "LOCALHOST:8080", "127.0.0.1", "127.0.0.1:1", "[::1]", "[::1]:8080", "box.lan:9"] {
            assert!(host_allowed(h, &listed), "{h}");
        }
        assert!(host_allowed("10.0.0.2:8080", &listed));
        for h in ["evil.example", "evil.example:8080", "localhost.evil.example", "10.0.0.2", "[::2]:80", "0.0.0.0"] {
            assert!(!host_allowed(h, &listed), "{h}");
        }
    }
}
