//! The `/ops/` routes: the ops steps over HTTP, so the `booking` CLI can drive
//! a running instance (the only way to reach an embedded stack's state).
//! They are served on the admin listener (`admin_listen`, loopback by
//! default), never on the public one ([`crate::run`]).
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
//! With an admin token configured ([`crate::admin_settings`]) every route
//! needs `Authorization: Bearer <token>`: 401 otherwise, logged and counted
//! on `/metrics` (`booking_admin_refused_total{reason}`). In production,
//! `reset`, `load-candidates` and `close` also need the sale's id in the
//! `X-Confirm-Sale` header (428 otherwise). A `reset` the sale's state
//! forbids (open, or holding what cannot be cleared) answers 409; a failed
//! step 503; both with `{"error": …}`.
//!
//! With `[faults]`, `/ops/faults` and `/ops/faults/start` too, under the same
//! guard ([`crate::faults_routes`]).

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use booking_api::bookings::ApiState;
use booking_api::metrics::RefusedLabels;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::admin_settings::{AdminTokens, CONFIRM_HEADER};
use crate::build::Server;
use crate::config::Environment;
use crate::ops;

/// How long fetching the gateway's ledger may take.
pub const GATEWAY_LEDGER_TIMEOUT: Duration = Duration::from_secs(30);

/// What the admin listener checks before any route runs: the tokens it
/// accepts, and the counters it reports refusals on.
#[derive(Debug, Clone)]
pub struct AdminGuard {
    tokens: AdminTokens,
    api: Arc<ApiState>,
}

impl AdminGuard {
    /// A guard accepting `tokens` (none: every request passes; loopback
    /// only, as [`crate::admin_settings`] checks), counting on `api`'s
    /// `/metrics`.
    pub fn new(tokens: AdminTokens, api: Arc<ApiState>) -> AdminGuard {
        AdminGuard { tokens, api }
    }

    /// `None` if a request with `headers` may go on; else why not:
    /// `missing` or `wrong`.
    pub fn check(&self, headers: &HeaderMap) -> Option<&'static str> {
        if self.tokens.is_empty() {
            return None;
        }
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match given {
            None => Some("missing"),
            Some(g) if self.tokens.accepts(g.trim()) => None,
            Some(_) => Some("wrong"),
        }
    }

    fn refuse(&self, reason: &'static str, request: &Request) -> Response {
        self.api
            .metrics
            .admin_refused
            .get_or_create(&RefusedLabels { reason })
            .inc();
        tracing::warn!(
            reason,
            method = %request.method(),
            path = request.uri().path(),
            "admin request refused"
        );
        let mut r = error(StatusCode::UNAUTHORIZED, "admin token required");
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"sellout-admin\""),
        );
        r
    }
}

async fn guard(State(g): State<Arc<AdminGuard>>, request: Request, next: Next) -> Response {
    match g.check(request.headers()) {
        None => next.run(request).await,
        Some(reason) => g.refuse(reason, &request),
    }
}

/// Everything the admin listener serves: the ops routes, the fault routes
/// when armed, all behind `guard`'s token check.
pub fn router(server: Arc<Server>, guard_with: AdminGuard) -> Router {
    let guard_with = Arc::new(guard_with);
    routes(server.clone(), guard_with.clone())
        .merge(crate::faults_routes::routes(server))
        // behind the guard too: without the token, no path tells which
        // routes exist
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such admin route") })
        .layer(middleware::from_fn_with_state(guard_with, guard))
}

/// The ops routes, with their state.
fn routes(server: Arc<Server>, guard: Arc<AdminGuard>) -> Router {
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
        .with_state(Admin { server, guard })
}

/// The ops routes' state.
#[derive(Debug, Clone)]
struct Admin {
    server: Arc<Server>,
    guard: Arc<AdminGuard>,
}

/// Why a production step that needs the sale named is refused: `None`
/// when it may go on (not production, or `headers` name the sale).
pub fn unconfirmed(environment: Environment, sale: &str, headers: &HeaderMap) -> Option<String> {
    if environment != Environment::Production {
        return None;
    }
    let named = headers.get(CONFIRM_HEADER).and_then(|v| v.to_str().ok());
    if named == Some(sale) {
        return None;
    }
    Some(format!(
        "this step changes the production sale {sale}: confirm it with the header \
         `X-Confirm-Sale: {sale}` (booking --confirm {sale})"
    ))
}

impl Admin {
    /// The confirmation check of a production step, counted when refused.
    fn confirmed(&self, headers: &HeaderMap, step: &'static str) -> Option<Response> {
        let why = unconfirmed(
            self.server.config.environment,
            self.server.stack.sale.as_str(),
            headers,
        )?;
        self.guard
            .api
            .metrics
            .admin_refused
            .get_or_create(&RefusedLabels {
                reason: "unconfirmed",
            })
            .inc();
        tracing::warn!(step, "production step refused: the sale was not confirmed");
        Some(error(StatusCode::PRECONDITION_REQUIRED, why))
    }
}

/// A JSON `{"error": why}` answer.
pub(crate) fn error(status: StatusCode, why: impl std::fmt::Display) -> Response {
    (status, Json(json!({ "error": why.to_string() }))).into_response()
}

fn answer<T: Serialize>(r: Result<T, ops::OpsError>) -> Response {
    match r {
        Ok(v) => Json(v).into_response(),
        // the sale's state forbids the step: nothing was done
        Err(e @ (ops::OpsError::SaleOpen(_) | ops::OpsError::ResetRefused(_))) => {
            error(StatusCode::CONFLICT, e)
        }
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e),
    }
}

async fn reset(State(admin): State<Admin>, headers: HeaderMap) -> Response {
    if let Some(r) = admin.confirmed(&headers, "reset") {
        return r;
    }
    answer(ops::reset(&admin.server).await)
}

/// A candidate list file: a JSON array of strings when it starts with
/// `[`, else text with one entry per line (what `booking load-candidates
/// FILE` reads).
pub fn parse_candidate_list(body: &[u8]) -> Result<Vec<String>, String> {
    let text = std::str::from_utf8(body).map_err(|e| format!("not UTF-8: {e}"))?;
    if text.trim_start().starts_with('[') {
        json_candidate_list(text)
    } else {
        Ok(text.lines().map(str::to_owned).collect())
    }
}

fn json_candidate_list(text: &str) -> Result<Vec<String>, String> {
    serde_json::from_str(text).map_err(|e| format!("not a JSON list of strings: {e}"))
}

/// The body of `/ops/load-candidates` as its `Content-Type` says: a JSON
/// list of strings for `application/json` (anything else in JSON is
/// refused), else text with one entry per line.
pub fn parse_candidate_body(
    content_type: Option<&str>,
    body: &[u8],
) -> Result<Vec<String>, String> {
    let text = std::str::from_utf8(body).map_err(|e| format!("not UTF-8: {e}"))?;
    if booking_api::bookings::is_json(content_type) {
        json_candidate_list(text)
    } else {
        Ok(text.lines().map(str::to_owned).collect())
    }
}

async fn load_candidates(State(admin): State<Admin>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(r) = admin.confirmed(&headers, "load-candidates") {
        return r;
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    match parse_candidate_body(content_type, &body) {
        Ok(list) => answer(ops::load_candidates(&admin.server, list).await),
        Err(e) => error(StatusCode::BAD_REQUEST, e),
    }
}

async fn emails_pending(State(admin): State<Admin>) -> Response {
    answer(ops::emails_pending(&admin.server).await)
}

async fn emails_resend(State(admin): State<Admin>) -> Response {
    answer(ops::emails_resend(&admin.server).await)
}

async fn open(State(admin): State<Admin>) -> Response {
    answer(ops::open(&admin.server).await)
}

async fn close(State(admin): State<Admin>, headers: HeaderMap) -> Response {
    if let Some(r) = admin.confirmed(&headers, "close") {
        return r;
    }
    answer(ops::close(&admin.server).await)
}

async fn status(State(admin): State<Admin>) -> Response {
    answer(ops::status(&admin.server).await)
}

async fn counters(State(admin): State<Admin>) -> Response {
    let stack = &admin.server.stack;
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
/// Within [`GATEWAY_LEDGER_TIMEOUT`], and at most
/// [`GATEWAY_LEDGER_BYTES_MAX`] of answer.
pub async fn fetch_gateway_ledger(
    base: &str,
) -> Result<booking_audit::GatewayTruth, LedgerFetchError> {
    let url = format!("{}/__mock/ledger", base.trim_end_matches('/'));
    let resp = reqwest::Client::builder()
        .timeout(GATEWAY_LEDGER_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()?
        .get(url)
        .send()
        .await?
        .error_for_status()?;
    let body = booking_bkash::capped::read_capped(resp, GATEWAY_LEDGER_BYTES_MAX).await?;
    Ok(serde_json::from_slice(&body)?)
}

/// The largest gateway ledger [`fetch_gateway_ledger`] reads: every payment
/// of the sale with its execute calls, about 1 KiB a payment, so room for a
/// few hundred thousand payments (a rehearsal's sale has a few thousand).
pub const GATEWAY_LEDGER_BYTES_MAX: usize = 512 * 1024 * 1024;

/// Why [`fetch_gateway_ledger`] failed.
#[derive(Debug, thiserror::Error)]
pub enum LedgerFetchError {
    /// Not fetched: unreachable, an error status, out of time.
    #[error("{0}")]
    Http(#[from] reqwest::Error),
    /// Too large, or broken off while reading.
    #[error("{0}")]
    Body(#[from] booking_bkash::capped::CappedError),
    /// Not a gateway ledger.
    #[error("unreadable ledger: {0}")]
    Json(#[from] serde_json::Error),
}

async fn audit(State(admin): State<Admin>, Query(q): Query<AuditQuery>) -> Response {
    let server = &admin.server;
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
    answer(ops::audit(server, ledger.as_ref()).await)
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
        let json = Some("application/json; charset=utf-8");
        assert_eq!(parse_candidate_body(json, br#"["a"]"#).unwrap(), vec!["a"]);
        assert!(
            parse_candidate_body(json, b"{}").is_err(),
            "JSON, not a list"
        );
        assert!(parse_candidate_body(json, b"a\nb").is_err(), "not JSON");
        // text is text, whatever it starts with
        assert_eq!(
            parse_candidate_body(Some("text/plain"), b"[x\ny").unwrap(),
            vec!["[x", "y"]
        );
        assert_eq!(parse_candidate_body(None, b"a\n").unwrap(), vec!["a"]);
        assert!(parse_candidate_body(None, b"\xff").is_err());
    }

    #[test]
    fn production_steps_need_the_sale_named() {
        let mut h = HeaderMap::new();
        assert_eq!(unconfirmed(Environment::Rehearsal, "launch", &h), None);
        let why = unconfirmed(Environment::Production, "launch", &h).unwrap();
        assert!(why.contains("--confirm launch"), "{why}");
        h.insert(CONFIRM_HEADER, HeaderValue::from_static("other"));
        assert!(unconfirmed(Environment::Production, "launch", &h).is_some());
        h.insert(CONFIRM_HEADER, HeaderValue::from_static("launch"));
        assert_eq!(unconfirmed(Environment::Production, "launch", &h), None);
    }

    #[test]
    fn the_guard_tells_a_missing_token_from_a_wrong_one() {
        let api = Arc::new(ApiState::new());
        let open = AdminGuard::new(AdminTokens::default(), api.clone());
        assert_eq!(open.check(&HeaderMap::new()), None);
        let g = AdminGuard::new(
            AdminTokens::of(["current-token-0123456", "previous-token-012345"]),
            api,
        );
        let with = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, HeaderValue::from_static(v));
            h
        };
        assert_eq!(g.check(&HeaderMap::new()), Some("missing"));
        assert_eq!(g.check(&with("Basic abc")), Some("missing"));
        assert_eq!(
            g.check(&with("Bearer current-token-0123457")),
            Some("wrong")
        );
        assert_eq!(g.check(&with("Bearer current-token-0123456")), None);
        assert_eq!(g.check(&with("Bearer previous-token-012345")), None);
    }
}
