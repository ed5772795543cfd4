//! How the API says no: one JSON shape for every refusal and failure, mapped
//! to a status code in one place.
//!
//! Every error body is `{"error": "<code>", "message": "<for a human>"}`;
//! `503` answers also carry `Retry-After` (seconds). No handler answers 500:
//! anything unexpected (a backend down, a deadline passed, a task that
//! panicked) is `503 busy`, which a client may retry.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

/// What a client should wait before retrying a `503`, seconds.
pub const RETRY_AFTER_S: u64 = 1;

/// The body of every refusal and failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Machine-readable code: `level_full`, `sale_closed`, `not_eligible`,
    /// `unknown_level`, `already_paid`, `busy`, `deadline_exceeded`,
    /// `bad_request`, `payload_too_large`, `unsupported_media_type`,
    /// `unauthorized`, `draining`.
    pub error: String,
    /// For a human.
    pub message: String,
}

/// A JSON error answer.
pub fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    let body = ErrorBody {
        error: code.to_owned(),
        message: message.into(),
    };
    let mut response = (status, Json(body)).into_response();
    if status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::TOO_MANY_REQUESTS {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_S));
    }
    response
}

/// `400 bad_request`.
pub fn bad_request(message: impl Into<String>) -> Response {
    error(StatusCode::BAD_REQUEST, "bad_request", message)
}

/// `503 busy` with `Retry-After`: try again.
pub fn busy(message: impl Into<String>) -> Response {
    error(StatusCode::SERVICE_UNAVAILABLE, "busy", message)
}

/// `503 deadline_exceeded` with `Retry-After`: the request deadline passed.
pub fn deadline_exceeded() -> Response {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "deadline_exceeded",
        "the request deadline passed; try again",
    )
}
