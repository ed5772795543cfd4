//! `POST /bookings`, the request path, plus `GET /status.json`, `/healthz`,
//! `/metrics` and `/openapi.json`.
//!
//! # The request path
//!
//! Admit (one atomic ledger step, under a random [`RequestToken`]) → create the
//! payment at the gateway → attach it to the hold (pending → held, deadline =
//! now + hold) → keep the [`BookingCopy`] in coordination storage (TTL = hold +
//! `booking_copy_slack`) → enqueue the [`AdmissionMessage`] → `201`. Nothing
//! durable happens on the way besides the queue send. If create, attach, the
//! copy or the enqueue fails (or the admission itself gives no answer), the
//! admission is undone by its token **before** the answer, the copy (if
//! written) is deleted so no callback can confirm a released seat, and the
//! client gets `503 busy` with `Retry-After`. A failed undo raises an alert
//! (`undo_failed`); a pending hold left behind is the reconciler's to clean.
//!
//! The path runs in its own task: a client that hangs up does not cancel it
//! half-way (which would leave a seat counted with nobody to undo it). Each
//! step gets what is left of the request deadline minus [`UNDO_RESERVE`], kept
//! back so the undo can still run before the deadline.
//!
//! # The request
//!
//! `{"candidate": "...", "level": "..."}`, nothing else (unknown fields are
//! refused). `candidate` is either the candidate's 64-hex-digit hash (either
//! case) or their raw identifier, which is hashed with [`CandidateHash::of`]
//! (what the edge would do). A raw identifier that happens to be 64 hex digits
//! is taken as a hash. A raw identifier is 1..=[`RAW_CANDIDATE_LEN_MAX`] bytes
//! without control characters; `level` follows [`Level::parse`].
//!
//! # The answers
//!
//! | status | body | when |
//! |---|---|---|
//! | 201 | booking, `outcome: "admitted"`, `status: "HELD"` | admitted: go to `redirect_url` and pay before `deadline` |
//! | 200 | booking, `outcome: "already_holding"`, `status: "HELD"` or `"PENDING"` | the candidate already holds a seat: the live hold (payment, deadline and redirect URL when known; `PENDING` while another request is creating its payment) |
//! | 400 | `error: "bad_request"` | malformed JSON, missing or unknown fields, bad candidate or level syntax |
//! | 403 | `error: "not_eligible"` | the candidate is not on the list |
//! | 404 | `error: "unknown_level"` | no such level in this sale |
//! | 409 | `error: "level_full"` | the level is at its cap |
//! | 409 | `error: "sale_closed"` | admissions are not open |
//! | 409 | `error: "already_paid"` | the candidate has paid for a seat already |
//! | 413 | `error: "payload_too_large"` | a body over [`BODY_BYTES_MAX`] |
//! | 503 | `error: "busy"` / `"deadline_exceeded"`, `Retry-After` | the gateway, the ledger or the queue failed, or the deadline passed; nothing is held |
//!
//! # The invoice number
//!
//! `merchantInvoiceNumber` = `<sale>-<candidate hash, 64 hex>-<request ms>`
//! ([`invoice_number`], read back by [`parse_invoice`]): unique per admission,
//! and it names the booking record's key (the candidate hash), so the webhook
//! finds the booking from the invoice alone.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use booking::coordination::keys;
use booking::gateway::{CreatePayment, GatewayError};
use booking::ledger::{Admission, HoldState, Step};
use booking::notify::Alert;
use booking::status::{StatusDocument, StatusWriter};
use booking::{CandidateHash, Level, PaymentId, RequestToken, SaleId};
use booking_service::worker::AdmissionMessage;
use serde::{Deserialize, Serialize};

use crate::answers::{self, busy};
use crate::metrics::ApiMetrics;
use crate::{BookingCopy, Stack, openapi};

/// The largest request body, bytes: a booking is two short strings.
pub const BODY_BYTES_MAX: usize = 16 * 1024;
/// The longest raw candidate identifier, bytes.
pub const RAW_CANDIDATE_LEN_MAX: usize = 256;
/// Time kept back from the request deadline for undoing a failed admission.
pub const UNDO_RESERVE: Duration = Duration::from_millis(500);
/// Pokes of the status writer from one instance are at least this far apart
/// during a burst (the document's own throttle is 2 s; this only keeps the
/// poke loop from spinning on every admission).
pub const POKE_SPACING: Duration = Duration::from_millis(20);

/// What the bookings routes keep between requests: per router, not global.
#[derive(Debug)]
pub struct ApiState {
    /// The counters behind `/metrics`.
    pub metrics: ApiMetrics,
    status: Arc<StatusPoker>,
    instance: String,
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
            status: Arc::new(StatusPoker::default()),
            instance: format!("api-{:016x}", rand::random::<u64>()),
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
        .route("/healthz", get(healthz))
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

/// What is kept at `keys::booking_copy`: the [`BookingCopy`] (whose readers
/// ignore extra fields) plus the checkout URL, so a duplicate booking request
/// can send the payer back to the same payment page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredCopy {
    /// The copy itself.
    #[serde(flatten)]
    pub copy: BookingCopy,
    /// The gateway's checkout URL of the payment.
    #[serde(default)]
    pub redirect_url: Option<String>,
}

/// The candidate named by a request: a 64-hex-digit hash as it is, anything
/// else hashed as a raw identifier.
pub fn candidate_hash(candidate: &str) -> Result<CandidateHash, String> {
    if candidate.is_empty() {
        return Err("candidate must not be empty".into());
    }
    if candidate.len() > RAW_CANDIDATE_LEN_MAX {
        return Err(format!(
            "candidate must be at most {RAW_CANDIDATE_LEN_MAX} bytes"
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

/// The merchant invoice number of an admission:
/// `<sale>-<candidate hash>-<request ms>` (at most 126 characters).
pub fn invoice_number(sale: &SaleId, candidate: &CandidateHash, request_ms: u64) -> String {
    format!("{sale}-{candidate}-{request_ms}")
}

/// Reads an [`invoice_number`] back: the sale, the candidate and the request ms.
pub fn parse_invoice(invoice: &str) -> Option<(SaleId, CandidateHash, u64)> {
    let (rest, ms) = invoice.rsplit_once('-')?;
    let (sale, candidate) = rest.rsplit_once('-')?;
    let request_ms = ms.parse().ok()?;
    if ms.starts_with('+') {
        return None;
    }
    Some((
        SaleId::parse(sale).ok()?,
        CandidateHash::parse(candidate).ok()?,
        request_ms,
    ))
}

/// A deadline in RFC 3339, UTC, to the millisecond.
pub fn rfc3339(ms: u64) -> Option<String> {
    let ms = i64::try_from(ms).ok()?;
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}

/// A random request token: 128 bits in hex (always a valid token).
fn new_token() -> Option<RequestToken> {
    RequestToken::parse(&format!("{:032x}", rand::random::<u128>())).ok()
}

/// A request the path never sees: `400 bad_request` or `413 payload_too_large`.
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

/// Parses the body into (candidate, level).
fn parse_request(body: Result<Bytes, BytesRejection>) -> Result<(CandidateHash, Level), BadInput> {
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

/// What the request path decided.
#[derive(Debug)]
enum Answer {
    Admitted(BookingView),
    Holding(BookingView),
    Refused {
        status: StatusCode,
        code: &'static str,
        message: String,
    },
    Busy(String),
}

impl Answer {
    fn outcome(&self) -> &'static str {
        match self {
            Answer::Admitted(_) => "admitted",
            Answer::Holding(_) => "already_holding",
            Answer::Refused { code, .. } => code,
            Answer::Busy(_) => "busy",
        }
    }
}

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        match self {
            Answer::Admitted(view) => (StatusCode::CREATED, Json(view)).into_response(),
            Answer::Holding(view) => (StatusCode::OK, Json(view)).into_response(),
            Answer::Refused {
                status,
                code,
                message,
            } => answers::error(status, code, message),
            Answer::Busy(message) => busy(message),
        }
    }
}

fn refused(status: StatusCode, code: &'static str, message: &str) -> Answer {
    Answer::Refused {
        status,
        code,
        message: message.to_owned(),
    }
}

async fn create_booking(
    State(stack): State<Arc<Stack>>,
    Extension(api): Extension<Arc<ApiState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let started = Instant::now();
    let (candidate, level) = match parse_request(body) {
        Ok(parsed) => parsed,
        Err(bad) => {
            api.metrics.outcome(bad.code);
            return bad.into_response();
        }
    };
    let deadline = started + stack.settings.request_deadline;
    // the path runs to its end (or its undo) even if this future is dropped
    let task = tokio::spawn(book(stack.clone(), api.clone(), candidate, level, deadline));
    let answer = match tokio::time::timeout_at(deadline.into(), task).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(join)) => {
            tracing::error!(error = %join, "the booking task failed");
            Answer::Busy("internal failure; nothing is held, try again".into())
        }
        Err(_) => {
            api.metrics.deadline("/bookings");
            api.metrics.outcome("deadline_exceeded");
            return answers::deadline_exceeded();
        }
    };
    api.metrics.outcome(answer.outcome());
    api.metrics.latency.observe(started.elapsed().as_secs_f64());
    answer.into_response()
}

/// Which step of the path failed, for the undo's metric.
#[derive(Debug, Clone, Copy)]
enum Failed {
    Admit,
    Create,
    Attach,
    Copy,
    Enqueue,
}

impl Failed {
    fn as_str(self) -> &'static str {
        match self {
            Failed::Admit => "admit",
            Failed::Create => "create",
            Failed::Attach => "attach",
            Failed::Copy => "copy",
            Failed::Enqueue => "enqueue",
        }
    }
}

/// One admission, from the ledger to the queue.
struct Booking {
    stack: Arc<Stack>,
    api: Arc<ApiState>,
    candidate: CandidateHash,
    level: Level,
    token: RequestToken,
    /// The end of the request.
    deadline: Instant,
    /// The end of the work before the undo reserve.
    work_until: Instant,
}

async fn book(
    stack: Arc<Stack>,
    api: Arc<ApiState>,
    candidate: CandidateHash,
    level: Level,
    deadline: Instant,
) -> Answer {
    let reserve = UNDO_RESERVE.min(stack.settings.request_deadline / 4);
    let work_until = deadline.checked_sub(reserve).unwrap_or(deadline);
    let Some(token) = new_token() else {
        return Answer::Busy("no request token".into());
    };
    let booking = Booking {
        stack,
        api,
        candidate,
        level,
        token,
        deadline,
        work_until,
    };
    booking.run().await
}

impl Booking {
    fn left(&self) -> Duration {
        self.work_until.saturating_duration_since(Instant::now())
    }

    /// Runs `f` until the work deadline; `None` if it passed.
    async fn timed<T>(&self, f: impl Future<Output = T>) -> Option<T> {
        tokio::time::timeout_at(self.work_until.into(), f)
            .await
            .ok()
    }

    async fn run(self) -> Answer {
        let stack = self.stack.clone();
        if !stack.prices.contains_key(&self.level) {
            return refused(
                StatusCode::NOT_FOUND,
                "unknown_level",
                "this sale has no such level",
            );
        }
        let request_ms = stack.clock.now_ms();
        let admitted = self
            .timed(stack.ledger.admit(
                &stack.sale,
                &self.candidate,
                &self.level,
                &self.token,
                request_ms,
            ))
            .await;
        match admitted {
            Some(Ok(Admission::Admitted { .. })) => {}
            Some(Ok(refusal)) => return self.refusal(refusal).await,
            Some(Err(e)) => return self.undo(Failed::Admit, None, &e.to_string()).await,
            None => return self.undo(Failed::Admit, None, "the ledger timed out").await,
        }
        self.api.status.poke(&stack, &self.api.instance);

        // create the payment
        let Some(amount) = stack.prices.get(&self.level).cloned() else {
            return self.undo(Failed::Create, None, "no price").await;
        };
        let request = CreatePayment {
            invoice: invoice_number(&stack.sale, &self.candidate, request_ms),
            amount,
            payer_reference: self.candidate.as_str()[..16].to_owned(),
            callback_url: format!(
                "{}/payment/callback",
                stack.public_url.trim_end_matches('/')
            ),
        };
        let created = self
            .timed(stack.gateway.create(&request, self.left()))
            .await;
        let created = match created {
            Some(Ok(created)) => {
                self.api.metrics.gateway_call("create", None);
                created
            }
            Some(Err(e)) => {
                self.api
                    .metrics
                    .gateway_call("create", Some(gateway_error_kind(&e)));
                return self.undo(Failed::Create, None, &e.to_string()).await;
            }
            None => {
                self.api.metrics.gateway_call("create", Some("deadline"));
                return self
                    .undo(Failed::Create, None, "the gateway timed out")
                    .await;
            }
        };
        let payment = created.payment_id.clone();

        // attach it: pending → held until the deadline
        let deadline_ms = stack
            .clock
            .now_ms()
            .saturating_add(stack.settings.hold.as_millis() as u64);
        let attached = self
            .timed(stack.ledger.attach_payment(
                &stack.sale,
                &self.candidate,
                &self.token,
                &payment,
                deadline_ms,
            ))
            .await;
        match attached {
            Some(Ok(Step::Done)) => {}
            Some(Ok(step)) => {
                let why = format!("the hold could not take the payment ({step:?})");
                return self.undo(Failed::Attach, None, &why).await;
            }
            Some(Err(e)) => return self.undo(Failed::Attach, None, &e.to_string()).await,
            None => {
                return self
                    .undo(Failed::Attach, None, "the ledger timed out")
                    .await;
            }
        }

        // keep the copy for a payer faster than the worker
        let stored = StoredCopy {
            copy: BookingCopy {
                candidate: self.candidate.clone(),
                sale: stack.sale.clone(),
                level: self.level.clone(),
                payment_id: payment.clone(),
                signature: created.signature.clone(),
                token: self.token.clone(),
                request_ms,
                deadline_ms,
            },
            redirect_url: Some(created.bkash_url.clone()),
        };
        let copy_key = keys::booking_copy(&stack.prefix, &stack.sale, &payment);
        let json = match serde_json::to_string(&stored) {
            Ok(json) => json,
            Err(e) => return self.undo(Failed::Copy, None, &e.to_string()).await,
        };
        let ttl = stack.settings.hold + stack.settings.booking_copy_slack;
        match self
            .timed(stack.coordination.set(&copy_key, &json, Some(ttl)))
            .await
        {
            Some(Ok(())) => {}
            Some(Err(e)) => {
                return self
                    .undo(Failed::Copy, Some(&copy_key), &e.to_string())
                    .await;
            }
            None => {
                return self
                    .undo(Failed::Copy, Some(&copy_key), "coordination timed out")
                    .await;
            }
        }

        // enqueue: the worker writes the HELD record
        let message = AdmissionMessage {
            candidate: self.candidate.clone(),
            sale: stack.sale.clone(),
            level: self.level.clone(),
            payment_id: payment.clone(),
            token: Some(self.token.clone()),
            request_ms,
            deadline_ms,
        };
        let message = match message.to_message() {
            Ok(message) => message,
            Err(e) => {
                return self
                    .undo(Failed::Enqueue, Some(&copy_key), &e.to_string())
                    .await;
            }
        };
        match self.timed(stack.queue.send(message)).await {
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                return self
                    .undo(Failed::Enqueue, Some(&copy_key), &e.to_string())
                    .await;
            }
            None => {
                return self
                    .undo(Failed::Enqueue, Some(&copy_key), "the queue timed out")
                    .await;
            }
        }
        self.api.metrics.holds.inc();
        Answer::Admitted(BookingView {
            outcome: "admitted".into(),
            candidate_hash: self.candidate.clone(),
            level: self.level.clone(),
            status: "HELD".into(),
            payment_id: Some(payment),
            deadline_ms: Some(deadline_ms),
            deadline: rfc3339(deadline_ms),
            redirect_url: Some(created.bkash_url),
        })
    }

    /// Undoes this request's admission (and deletes its copy), then answers busy.
    async fn undo(&self, failed: Failed, copy_key: Option<&str>, why: &str) -> Answer {
        let stack = &self.stack;
        tracing::warn!(
            candidate = %self.candidate,
            step = failed.as_str(),
            why,
            "undoing the admission"
        );
        // an undo whose answer was lost is tried once more: it is guarded by
        // the token, so a repeat that finds the hold gone changes nothing
        let undone = tokio::time::timeout_at(
            self.deadline.into(),
            booking::ledger::undo_admission_retried(
                stack.ledger.as_ref(),
                &stack.sale,
                &self.candidate,
                &self.token,
            ),
        )
        .await;
        let step = match &undone {
            Ok(Ok(Step::Done)) => "done",
            Ok(Ok(Step::NoMatch)) => "no_match",
            Ok(Ok(Step::Paid)) => "paid",
            Ok(Err(_)) | Err(_) => "failed",
        };
        self.api.metrics.undo(failed.as_str(), step);
        if let Some(key) = copy_key {
            let deleted =
                tokio::time::timeout_at(self.deadline.into(), stack.coordination.delete(key)).await;
            if !matches!(deleted, Ok(Ok(_))) {
                tracing::warn!(
                    key,
                    "could not delete the booking copy of an undone admission"
                );
            }
        }
        if step == "failed" {
            // the hold stays counted: the reconciler cleans a pending one, a
            // human looks at the rest
            let alerts = stack.alerts.clone();
            let alert = Alert {
                kind: "undo_failed".into(),
                detail: format!(
                    "the admission of request {} failed at {} ({why}) and could not be undone",
                    self.token,
                    failed.as_str()
                ),
                candidate: Some(self.candidate.clone()),
                payment_id: None,
            };
            tokio::spawn(async move {
                if let Err(e) = alerts.raise(alert).await {
                    tracing::error!(error = %e, "could not raise an alert");
                }
            });
        } else {
            self.api.status.poke(stack, &self.api.instance);
        }
        Answer::Busy(format!(
            "could not hold a seat ({} failed); nothing is held, try again",
            failed.as_str()
        ))
    }

    /// The answer to a refused admission.
    async fn refusal(&self, admission: Admission) -> Answer {
        match admission {
            Admission::LevelFull => refused(
                StatusCode::CONFLICT,
                "level_full",
                "every seat of this level is taken",
            ),
            Admission::SaleClosed => {
                refused(StatusCode::CONFLICT, "sale_closed", "the sale is not open")
            }
            Admission::NotEligible => refused(
                StatusCode::FORBIDDEN,
                "not_eligible",
                "this candidate is not on the list",
            ),
            Admission::UnknownLevel => refused(
                StatusCode::NOT_FOUND,
                "unknown_level",
                "this sale has no such level",
            ),
            Admission::AlreadyPaid { .. } => refused(
                StatusCode::CONFLICT,
                "already_paid",
                "this candidate has paid for a seat already",
            ),
            Admission::AlreadyHolding { hold } => {
                let mut view = BookingView {
                    outcome: "already_holding".into(),
                    candidate_hash: self.candidate.clone(),
                    level: hold.level.clone(),
                    status: "PENDING".into(),
                    payment_id: None,
                    deadline_ms: None,
                    deadline: None,
                    redirect_url: None,
                };
                if let HoldState::Held {
                    payment_id,
                    deadline_ms,
                } = hold.state
                {
                    let key = keys::booking_copy(&self.stack.prefix, &self.stack.sale, &payment_id);
                    if let Some(Ok(Some(json))) =
                        self.timed(self.stack.coordination.get(&key)).await
                    {
                        view.redirect_url = serde_json::from_str::<StoredCopy>(&json)
                            .ok()
                            .and_then(|c| c.redirect_url);
                    }
                    view.status = "HELD".into();
                    view.payment_id = Some(payment_id);
                    view.deadline_ms = Some(deadline_ms);
                    view.deadline = rfc3339(deadline_ms);
                }
                Answer::Holding(view)
            }
            Admission::Admitted { .. } => Answer::Busy("unexpected admission".into()),
        }
    }
}

fn gateway_error_kind(e: &GatewayError) -> &'static str {
    match e {
        GatewayError::Timeout => "timeout",
        GatewayError::Refused { .. } => "refused",
        GatewayError::Unavailable(_) => "unavailable",
        GatewayError::TokenUnavailable => "token_unavailable",
    }
}

/// Pokes the status writer after a change without holding up the answer.
/// Pokes that arrive while one runs collapse into one more run after it
/// (at least [`POKE_SPACING`] later), so a burst costs a few pokes a second
/// and the last change is always followed by a poke that reads it.
#[derive(Debug, Default)]
struct StatusPoker {
    writer: OnceLock<Arc<StatusWriter>>,
    running: AtomicBool,
    again: AtomicBool,
    failures: AtomicU64,
}

impl StatusPoker {
    fn writer(&self, stack: &Stack, instance: &str) -> Arc<StatusWriter> {
        self.writer
            .get_or_init(|| {
                Arc::new(
                    StatusWriter::new(
                        stack.sale.clone(),
                        &stack.prefix,
                        stack.ledger.clone(),
                        stack.coordination.clone(),
                        stack.status_sink.clone(),
                        stack.clock.clone(),
                    )
                    .with_throttle(stack.settings.status_throttle)
                    .with_writer_id(instance),
                )
            })
            .clone()
    }

    fn poke(self: &Arc<Self>, stack: &Stack, instance: &str) {
        self.again.store(true, Ordering::SeqCst);
        if self.running.swap(true, Ordering::SeqCst) {
            return; // the running loop sees `again`
        }
        let writer = self.writer(stack, instance);
        let poker = self.clone();
        tokio::spawn(async move {
            loop {
                while poker.again.swap(false, Ordering::SeqCst) {
                    if let Err(e) = writer.poke().await {
                        poker.failures.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(error = %e, "status document not written");
                    }
                    if poker.again.load(Ordering::SeqCst) {
                        tokio::time::sleep(POKE_SPACING).await;
                    }
                }
                poker.running.store(false, Ordering::SeqCst);
                // a poke between the last swap and the store found `running`
                // set and left: take the loop back if nobody else did
                if !poker.again.load(Ordering::SeqCst) || poker.running.swap(true, Ordering::SeqCst)
                {
                    break;
                }
            }
        });
    }
}

/// The status document: the latest written, or built from the counters if
/// none has been written yet.
async fn status_json(
    State(stack): State<Arc<Stack>>,
    Extension(api): Extension<Arc<ApiState>>,
) -> Response {
    let work = async {
        match stack.status_sink.get().await {
            Ok(Some(bytes)) => Ok(bytes),
            Ok(None) => {
                let counters = stack
                    .ledger
                    .counters(&stack.sale)
                    .await
                    .map_err(|e| e.to_string())?;
                StatusDocument::from_counters(&stack.sale, &counters, stack.clock.now_ms())
                    .to_json()
                    .map_err(|e| e.to_string())
            }
            Err(e) => Err(e.to_string()),
        }
    };
    match tokio::time::timeout(stack.settings.request_deadline, work).await {
        Ok(Ok(bytes)) => (
            [
                (
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                ),
                (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            ],
            bytes,
        )
            .into_response(),
        Ok(Err(e)) => busy(format!("the status document is unavailable: {e}")),
        Err(_) => {
            api.metrics.deadline("/status.json");
            answers::deadline_exceeded()
        }
    }
}

/// The instance is up and serving. Deliberately touches no backend: a blip in
/// one must not make an orchestrator restart the whole fleet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// `ok`.
    pub status: String,
    /// The sale this instance serves.
    pub sale: SaleId,
}

async fn healthz(State(stack): State<Arc<Stack>>) -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        sale: stack.sale.clone(),
    })
}

async fn metrics(
    State(stack): State<Arc<Stack>>,
    Extension(api): Extension<Arc<ApiState>>,
) -> Response {
    // the ledger's gauges are best effort: a scrape never waits past the deadline
    let wait = stack.settings.request_deadline / 2;
    let counters = tokio::time::timeout(wait, stack.ledger.counters(&stack.sale))
        .await
        .ok()
        .and_then(Result::ok);
    let text = api.metrics.render(counters.as_ref());
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
        )],
        text,
    )
        .into_response()
}

static OPENAPI: LazyLock<Bytes> = LazyLock::new(|| {
    Bytes::from(serde_json::to_vec(&openapi::document()).unwrap_or_else(|_| b"{}".to_vec()))
});

async fn openapi_json() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        OPENAPI.clone(),
    )
        .into_response()
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
    fn invoice_numbers_read_back() {
        let sale = SaleId::parse("launch-2026").unwrap();
        let c = CandidateHash::of("x");
        let inv = invoice_number(&sale, &c, 1_700_000_000_123);
        assert!(inv.len() <= 255);
        assert_eq!(parse_invoice(&inv), Some((sale, c, 1_700_000_000_123)));
        assert_eq!(parse_invoice("nope"), None);
        assert_eq!(parse_invoice("a-b-1"), None);
    }

    #[test]
    fn deadlines_format_as_rfc3339() {
        assert_eq!(
            rfc3339(1_700_000_000_123).unwrap(),
            "2023-11-14T22:13:20.123Z"
        );
    }

    #[test]
    fn stored_copies_read_as_booking_copies() {
        let copy = BookingCopy {
            candidate: CandidateHash::of("x"),
            sale: SaleId::parse("s").unwrap(),
            level: Level::parse("gold").unwrap(),
            payment_id: PaymentId::parse("TR1").unwrap(),
            signature: "sig".into(),
            token: RequestToken::parse("t").unwrap(),
            request_ms: 1,
            deadline_ms: 2,
        };
        let stored = StoredCopy {
            copy: copy.clone(),
            redirect_url: Some("http://g/pay".into()),
        };
        let json = serde_json::to_string(&stored).unwrap();
        assert_eq!(serde_json::from_str::<BookingCopy>(&json).unwrap(), copy);
        assert_eq!(serde_json::from_str::<StoredCopy>(&json).unwrap(), stored);
    }
}
