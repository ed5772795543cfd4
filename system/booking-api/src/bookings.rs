//! `POST /bookings`: the request as HTTP (the path itself is
//! `booking_service::admission`); the routes of [`crate::info`] are registered
//! here too.
//!
//! # The request path
//!
//! `booking_service::admission::book`, below HTTP (the simulator runs the
//! same function): admit → create the payment → attach → booking copy →
//! enqueue, undone by its token before any failure answer. This module parses
//! the request, runs the path in its own task (a client that hangs up does
//! not cancel it half-way, which would leave a seat counted with nobody to
//! undo it) and maps its answer to a status code.
//!
//! # The request
//!
//! `{"candidate": "...", "level": "..."}`, nothing else (unknown fields are
//! refused). `candidate` is either the candidate's 64-hex-digit hash (either
//! case) or their raw identifier, which is hashed with [`CandidateHash::of`]
//! (what the edge would do). A raw identifier that happens to be 64 hex digits
//! is taken as a hash. A raw identifier is 1..=[`RAW_CANDIDATE_LEN_MAX`]
//! characters (Unicode code points, what JSON Schema's `maxLength` counts)
//! without control characters; `level` follows [`Level::parse`]. The OpenAPI
//! document states both rules ([`crate::openapi::CANDIDATE_PATTERN`]).
//!
//! # The answers
//!
//! | status | body | when |
//! |---|---|---|
//! | 201 | booking, `outcome: "admitted"`, `status: "HELD"` | admitted: go to `redirect_url` and pay before `deadline` |
//! | 200 | booking, `outcome: "already_holding"`, `status: "HELD"` or `"PENDING"` | the candidate already holds a seat: the live hold (payment, deadline and redirect URL when known; `PENDING` while another request is creating its payment) |
//! | 400 | `error: "bad_request"` | malformed JSON, missing or unknown fields, bad candidate or level syntax |
//! | 401 | `error: "unauthorized"`, `WWW-Authenticate: Bearer` | `candidate_auth` is on and the request has no good token for its candidate ([`crate::candidate_auth`]); nothing was done |
//! | 403 | `error: "not_eligible"` | the candidate is not on the list |
//! | 404 | `error: "unknown_level"` | no such level in this sale |
//! | 409 | `error: "level_full"` | the level is at its cap |
//! | 409 | `error: "sale_closed"` | admissions are not open |
//! | 409 | `error: "already_paid"` | the candidate has paid for a seat already |
//! | 413 | `error: "payload_too_large"` | a body over [`BODY_BYTES_MAX`] |
//! | 415 | `error: "unsupported_media_type"` | a body not sent as `Content-Type: application/json` (a cross-site form or `text/plain` post is refused unread) |
//! | 503 | `error: "busy"` / `"deadline_exceeded"`, `Retry-After` | the gateway, the ledger or the queue failed, or the deadline passed; nothing is held |
//! | 503 | `error: "draining"`, `Retry-After`, `Connection: close` | the instance is shutting down ([`crate::drain`]); nothing was done: retry on another instance |
//!
//! # The invoice number
//!
//! `merchantInvoiceNumber` = `<sale>-<candidate hash, 64 hex>-<request ms>`
//! ([`booking::invoice_number`], read back by [`booking::parse_invoice`]): unique per admission,
//! and it names the booking record's key (the candidate hash), so the webhook
//! finds the booking from the invoice alone.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use booking::{AdmittedBooking, CandidateHash, Level, PaymentId};
use booking_service::admission::{self, BookAnswer, PathEvents, Refusal};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::Stack;
use crate::answers::{self, busy};
use crate::drain::Drain;
pub use crate::info::Health;
use crate::info::{healthz, metrics, openapi_json, status_json};
use crate::metrics::ApiMetrics;
pub use crate::status_poker::POKE_SPACING;
use crate::status_poker::StatusPoker;

/// The largest request body, bytes: a booking is two short strings.
pub const BODY_BYTES_MAX: usize = 16 * 1024;
/// The longest raw candidate identifier, characters (Unicode code points).
pub const RAW_CANDIDATE_LEN_MAX: usize = 256;
pub use booking_service::admission::UNDO_RESERVE;

/// What the bookings routes keep between requests: per router, not global.
#[derive(Debug)]
pub struct ApiState {
    /// The counters behind `/metrics`.
    pub metrics: ApiMetrics,
    /// Whether this instance is draining ([`crate::drain`]).
    pub drain: Drain,
    status: Arc<StatusPoker>,
    instance: String,
    /// Candidate tokens, when `candidate_auth` is on ([`crate::candidate_auth`]).
    pub(crate) candidate_auth: Option<Arc<crate::candidate_auth::CandidateAuth>>,
}

impl Default for ApiState {
    fn default() -> ApiState {
        ApiState::new()
    }
}

impl ApiState {
    /// Fresh counters and a random instance id.
    pub fn new() -> ApiState {
        ApiState {
            metrics: ApiMetrics::new(),
            drain: Drain::default(),
            status: Arc::new(StatusPoker::default()),
            instance: format!("api-{:016x}", rand::random::<u64>()),
            candidate_auth: None,
        }
    }
}

/// The routes of this module, sharing one fresh [`ApiState`].
pub fn routes() -> Router<Arc<Stack>> {
    routes_with(Arc::new(ApiState::new()))
}

/// The routes of this module with a given [`ApiState`] (to read its metrics).
pub fn routes_with(state: Arc<ApiState>) -> Router<Arc<Stack>> {
    Router::new()
        .route("/bookings", post(create_booking))
        .route("/status.json", get(status_json))
        .route("/status", get(crate::status_page::status_page))
        .route("/healthz", get(healthz))
        .route("/readyz", get(crate::drain::readyz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi_json))
        .layer(Extension(state))
        .layer(DefaultBodyLimit::max(BODY_BYTES_MAX))
}

/// The body of `POST /bookings`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BookingRequest {
    /// A raw candidate identifier, or its 64-hex-digit hash.
    pub candidate: String,
    /// The level.
    pub level: String,
}

/// The booking in a `201` or `200` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BookingView {
    /// `admitted` (201) or `already_holding` (200).
    pub outcome: String,
    /// Who.
    pub candidate_hash: CandidateHash,
    /// Which level.
    pub level: Level,
    /// `HELD`, or `PENDING` while another request creates the payment.
    pub status: String,
    /// The gateway payment.
    pub payment_id: Option<PaymentId>,
    /// The hold deadline, ms since the epoch.
    pub deadline_ms: Option<u64>,
    /// The hold deadline, RFC 3339 (UTC).
    pub deadline: Option<String>,
    /// Where the payer goes to pay.
    pub redirect_url: Option<String>,
}

/// The candidate named by a request: a 64-hex-digit hash as it is, anything
/// else hashed as a raw identifier.
pub fn candidate_hash(candidate: &str) -> Result<CandidateHash, String> {
    if candidate.is_empty() {
        return Err("candidate must not be empty".into());
    }
    if candidate.chars().count() > RAW_CANDIDATE_LEN_MAX {
        return Err(format!(
            "candidate must be at most {RAW_CANDIDATE_LEN_MAX} characters"
        ));
    }
    if candidate.chars().any(char::is_control) {
        return Err("candidate must not contain control characters".into());
    }
    if candidate.len() == 64 && candidate.bytes().all(|b| b.is_ascii_hexdigit()) {
        return CandidateHash::parse(candidate).map_err(|e| e.to_string());
    }
    Ok(CandidateHash::of(candidate))
}

/// A deadline in RFC 3339, UTC, to the millisecond.
pub fn rfc3339(ms: u64) -> Option<String> {
    let ms = i64::try_from(ms).ok()?;
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}

/// A request the path never sees: `400 bad_request`, `413
/// payload_too_large` or `415 unsupported_media_type`.
#[derive(Debug)]
struct BadInput {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl BadInput {
    fn bad(message: String) -> BadInput {
        BadInput {
            status: StatusCode::BAD_REQUEST,
            code: "bad_request",
            message,
        }
    }

    fn into_response(self) -> Response {
        answers::error(self.status, self.code, self.message)
    }
}

/// Whether `content_type` names JSON: `application/json`, with any
/// parameters (`; charset=utf-8`).
pub fn is_json(content_type: Option<&str>) -> bool {
    content_type
        .and_then(|c| c.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

/// Parses the body into (candidate, level). A body that does not say it is
/// JSON is refused with 415 before it is parsed: `text/plain`, a form or no
/// type at all is what a page on another origin can make a browser send
/// without a CORS preflight, so taking it would let any web page book a
/// seat in its visitor's name.
fn parse_request(
    content_type: Option<&str>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(CandidateHash, Level), BadInput> {
    if !is_json(content_type) {
        return Err(BadInput {
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            code: "unsupported_media_type",
            message: "the body must be JSON, sent with Content-Type: application/json".into(),
        });
    }
    let bytes = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            BadInput {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                code: "payload_too_large",
                message: format!("the body must be at most {BODY_BYTES_MAX} bytes"),
            }
        } else {
            BadInput::bad(format!("could not read the body: {rejection}"))
        }
    })?;
    let request: BookingRequest = serde_json::from_slice(&bytes)
        .map_err(|e| BadInput::bad(format!("invalid booking request: {e}")))?;
    let candidate =
        candidate_hash(&request.candidate).map_err(|e| BadInput::bad(format!("candidate: {e}")))?;
    let level = Level::parse(&request.level).map_err(|e| BadInput::bad(format!("level: {e}")))?;
    Ok((candidate, level))
}

/// The HTTP side of what the request path hears: the API's counters and
/// this instance's status poker.
struct HttpEvents<'a> {
    stack: &'a Arc<Stack>,
    api: &'a Arc<ApiState>,
}

impl PathEvents for HttpEvents<'_> {
    fn gateway_call(&self, op: &'static str, error: Option<&'static str>) {
        self.api.metrics.gateway_call(op, error);
    }

    fn undo(&self, failed: &'static str, step: &'static str) {
        self.api.metrics.undo(failed, step);
    }

    fn held(&self, _booking: &AdmittedBooking) {
        self.api.metrics.holds.inc();
    }

    fn counters_changed(&self) {
        self.api.status.poke(self.stack, &self.api.instance);
    }
}

/// The booking in an answer.
fn view(outcome: &str, candidate: &CandidateHash, level: &Level) -> BookingView {
    BookingView {
        outcome: outcome.into(),
        candidate_hash: candidate.clone(),
        level: level.clone(),
        status: "PENDING".into(),
        payment_id: None,
        deadline_ms: None,
        deadline: None,
        redirect_url: None,
    }
}

/// The path's answer as HTTP.
fn respond(candidate: &CandidateHash, answer: BookAnswer) -> Response {
    match answer {
        BookAnswer::Admitted {
            booking,
            redirect_url,
        } => {
            let view = BookingView {
                status: "HELD".into(),
                payment_id: Some(booking.payment_id),
                deadline_ms: Some(booking.deadline_ms),
                deadline: rfc3339(booking.deadline_ms),
                redirect_url: Some(redirect_url),
                ..view("admitted", candidate, &booking.level)
            };
            (StatusCode::CREATED, Json(view)).into_response()
        }
        BookAnswer::AlreadyHolding { level, held } => {
            let mut view = view("already_holding", candidate, &level);
            if let Some(held) = held {
                view.status = "HELD".into();
                view.payment_id = Some(held.payment_id);
                view.deadline_ms = Some(held.deadline_ms);
                view.deadline = rfc3339(held.deadline_ms);
                view.redirect_url = held.redirect_url;
            }
            (StatusCode::OK, Json(view)).into_response()
        }
        BookAnswer::Refused(refusal) => {
            let status = match refusal {
                Refusal::LevelFull | Refusal::SaleClosed | Refusal::AlreadyPaid => {
                    StatusCode::CONFLICT
                }
                Refusal::NotEligible => StatusCode::FORBIDDEN,
                Refusal::UnknownLevel => StatusCode::NOT_FOUND,
            };
            answers::error(status, refusal.code(), refusal.message().to_owned())
        }
        BookAnswer::Busy { failed, .. } => busy(format!(
            "could not hold a seat ({} failed); nothing is held, try again",
            failed.as_str()
        )),
    }
}

async fn create_booking(
    State(stack): State<Arc<Stack>>,
    Extension(api): Extension<Arc<ApiState>>,
    headers: axum::http::HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    if api.drain.is_draining() {
        api.metrics.outcome(crate::drain::DRAINING);
        return crate::drain::refusal();
    }
    let started = Instant::now();
    let content_type = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let (candidate, level) = match parse_request(content_type, body) {
        Ok(parsed) => parsed,
        Err(bad) => {
            api.metrics.outcome(bad.code);
            return bad.into_response();
        }
    };
    // a token for this candidate, when required: 401 before anything is done
    if let Some(refused) = crate::candidate_auth::guard(&api, &headers, &candidate) {
        return refused;
    }
    let deadline = started + stack.settings.request_deadline;
    // the path runs to its end (or its undo) even if this future is dropped
    let task = {
        let (stack, api, candidate) = (stack.clone(), api.clone(), candidate.clone());
        tokio::spawn(async move {
            let events = HttpEvents {
                stack: &stack,
                api: &api,
            };
            admission::book(&stack, &events, &candidate, &level, deadline).await
        })
    };
    let answer = match tokio::time::timeout_at(deadline, task).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(join)) => {
            tracing::error!(error = %join, "the booking task failed");
            api.metrics.outcome("busy");
            return busy("internal failure; nothing is held, try again");
        }
        Err(_) => {
            api.metrics.deadline("/bookings");
            api.metrics.outcome("deadline_exceeded");
            return answers::deadline_exceeded();
        }
    };
    api.metrics.outcome(answer.outcome());
    api.metrics.latency.observe(started.elapsed().as_secs_f64());
    respond(&candidate, answer)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn candidates_are_hashes_or_raw_ids() {
        let h = CandidateHash::of("c-1");
        assert_eq!(candidate_hash(h.as_str()).unwrap(), h);
        assert_eq!(
            candidate_hash(&h.as_str().to_uppercase()).unwrap(),
            h,
            "either case"
        );
        assert_eq!(candidate_hash("c-1").unwrap(), h);
        assert!(candidate_hash("").is_err());
        assert!(candidate_hash("a\nb").is_err());
        assert!(candidate_hash(&"x".repeat(RAW_CANDIDATE_LEN_MAX + 1)).is_err());
        assert_ne!(
            candidate_hash(&"g".repeat(64)).unwrap().as_str(),
            "g".repeat(64)
        );
    }

    #[test]
    fn deadlines_format_as_rfc3339() {
        assert_eq!(
            rfc3339(1_700_000_000_123).unwrap(),
            "2023-11-14T22:13:20.123Z"
        );
    }
}
