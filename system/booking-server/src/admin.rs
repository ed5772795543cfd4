//! The `/ops/` routes: the ops steps over HTTP, so the `booking` CLI can drive
//! a running instance (the only way to reach an embedded stack's state).
//!
//! | method | path | body | answer |
//! | --- | --- | --- | --- |
//! | POST | `/ops/reset` | none | [`ResetReport`](crate::ops::ResetReport) |
//! | POST | `/ops/load-candidates` | JSON list of strings, or text, one per line | [`LoadReport`](crate::ops::LoadReport) |
//! | POST | `/ops/open`, `/ops/close` | none | [`StatusReport`](crate::ops::StatusReport) |
//! | GET | `/ops/status` | | [`StatusReport`](crate::ops::StatusReport) (reads every record: an operator's look, not a poll) |
//! | GET | `/ops/counters` | | the ledger's [`Counters`](booking::ledger::Counters) (open, per-level counts, paid), one O(levels) read: what a live view polls |
//! | GET | `/ops/audit` | | [`AuditReport`](crate::ops::AuditReport); with `gateway.mock_ledger` in the configuration, the configured gateway's `/__mock/ledger` is fetched for the ground-truth checks (a URL in the request is refused: 400) |
//! | GET | `/ops/emails/pending` | | [`EmailsPending`](crate::ops::EmailsPending): PAID bookings whose email is owed, oldest first |
//! | POST | `/ops/emails/resend` | none | [`OwedSweep`](booking_service::outbox::OwedSweep) (owed, sent, failed, waiting, given up): the email sweep, now |
//!
//! With `admin_token` configured every route needs `Authorization: Bearer
//! <token>` (401 otherwise). A failed step answers 503 with `{"error": …}`.
//!
//! With `[faults]`, `/ops/faults` and `/ops/faults/start` too, under the same
//! token ([`crate::faults_routes`]).

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::build::Server;
use crate::ops;

/// How long fetching the gateway's ledger may take.
pub const GATEWAY_LEDGER_TIMEOUT: Duration = Duration::from_secs(30);

/// The ops routes, with their state.
pub fn routes(server: Arc<Server>) -> Router {
    Router::new()
        .route("/ops/reset", post(reset))
        .route(
            "/ops/load-candidates",
            post(load_candidates).layer(DefaultBodyLimit::max(ops::LOAD_BODY_BYTES_MAX)),
        )
        .route("/ops/open", post(open))
        .route("/ops/close", post(close))
        .route("/ops/status", get(status))
        .route("/ops/counters", get(counters))
        .route("/ops/audit", get(audit))
        .route("/ops/emails/pending", get(emails_pending))
        .route("/ops/emails/resend", post(emails_resend))
        .with_state(server)
}

/// A JSON `{"error": why}` answer.
pub(crate) fn error(status: StatusCode, why: impl std::fmt::Display) -> Response {
    (status, Json(json!({ "error": why.to_string() }))).into_response()
}

fn answer<T: Serialize>(r: Result<T, ops::OpsError>) -> Response {
    match r {
        Ok(v) => Json(v).into_response(),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e),
    }
}

/// `None` if the request may go on, else the refusal.
pub(crate) fn refused(server: &Server, headers: &HeaderMap) -> Option<Response> {
    let Some(token) = &server.config.admin_token else {
        return None;
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if given.is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes())) {
        None
    } else {
        Some(error(StatusCode::UNAUTHORIZED, "admin token required"))
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn reset(State(server): State<Arc<Server>>, headers: HeaderMap) -> Response {
    if let Some(r) = refused(&server, &headers) {
        return r;
    }
    answer(ops::reset(&server).await)
}

/// The body of `/ops/load-candidates`: a JSON array of strings, or text with
/// one entry per line.
pub fn parse_candidate_list(body: &[u8]) -> Result<Vec<String>, String> {
    let text = std::str::from_utf8(body).map_err(|e| format!("not UTF-8: {e}"))?;
    if text.trim_start().starts_with('[') {
        serde_json::from_str(text).map_err(|e| format!("not a JSON list of strings: {e}"))
    } else {
        Ok(text.lines().map(str::to_owned).collect())
    }
}

async fn load_candidates(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(r) = refused(&server, &headers) {
        return r;
    }
    match parse_candidate_list(&body) {
        Ok(list) => answer(ops::load_candidates(&server, list).await),
        Err(e) => error(StatusCode::BAD_REQUEST, e),
    }
}

async fn emails_pending(State(server): State<Arc<Server>>, headers: HeaderMap) -> Response {
    if let Some(r) = refused(&server, &headers) {
        return r;
    }
    answer(ops::emails_pending(&server).await)
}

async fn emails_resend(State(server): State<Arc<Server>>, headers: HeaderMap) -> Response {
    if let Some(r) = refused(&server, &headers) {
        return r;
    }
    answer(ops::emails_resend(&server).await)
}

async fn open(State(server): State<Arc<Server>>, headers: HeaderMap) -> Response {
    if let Some(r) = refused(&server, &headers) {
        return r;
    }
    answer(ops::open(&server).await)
}

async fn close(State(server): State<Arc<Server>>, headers: HeaderMap) -> Response {
    if let Some(r) = refused(&server, &headers) {
        return r;
    }
    answer(ops::close(&server).await)
}

async fn status(State(server): State<Arc<Server>>, headers: HeaderMap) -> Response {
    if let Some(r) = refused(&server, &headers) {
        return r;
    }
    answer(ops::status(&server).await)
}

async fn counters(State(server): State<Arc<Server>>, headers: HeaderMap) -> Response {
    if let Some(r) = refused(&server, &headers) {
        return r;
    }
    let stack = &server.stack;
    answer(
        stack
            .ledger
            .counters(&stack.sale)
            .await
            .map_err(ops::OpsError::from),
    )
}

/// `/ops/audit` query: none is taken. A `gateway` (the URL an older
/// client named for the ground truth) is refused, so that no request can
/// make the server fetch a URL of the caller's choosing.
#[derive(Debug, Deserialize)]
pub struct AuditQuery {
    /// Refused when present.
    pub gateway: Option<String>,
}

/// Why `/ops/audit?gateway=…` is refused.
pub const AUDIT_GATEWAY_REFUSED: &str = "the gateway's ground truth is read only from the configured gateway (gateway.mock_ledger = true), never from a URL in the request";

/// Fetches `<base>/__mock/ledger`, typed.
pub async fn fetch_gateway_ledger(
    base: &str,
) -> Result<booking_audit::GatewayTruth, reqwest::Error> {
    let url = format!("{}/__mock/ledger", base.trim_end_matches('/'));
    reqwest::Client::builder()
        .timeout(GATEWAY_LEDGER_TIMEOUT)
        .build()?
        .get(url)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await
}

async fn audit(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
    Query(q): Query<AuditQuery>,
) -> Response {
    if let Some(r) = refused(&server, &headers) {
        return r;
    }
    if q.gateway.is_some() {
        return error(StatusCode::BAD_REQUEST, AUDIT_GATEWAY_REFUSED.to_owned());
    }
    let gateway = &server.config.gateway;
    let ledger = if gateway.mock_ledger {
        match fetch_gateway_ledger(&gateway.base_url).await {
            Ok(v) => Some(v),
            Err(e) => return error(StatusCode::BAD_GATEWAY, format!("gateway ledger: {e}")),
        }
    } else {
        None
    };
    answer(ops::audit(&server, ledger.as_ref()).await)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn candidate_lists_are_json_or_lines() {
        assert_eq!(
            parse_candidate_list(br#"["a", "b"]"#).unwrap(),
            vec!["a", "b"]
        );
        assert_eq!(parse_candidate_list(b"a\nb\n").unwrap(), vec!["a", "b"]);
        assert!(parse_candidate_list(b"[1, 2]").is_err());
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
