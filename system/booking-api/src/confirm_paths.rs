//! Confirm paths 1 and 2: the browser callback and the gateway's SNS webhook.
//! Both end in the one conditional HELD→PAID step
//! (`booking_service::confirm::mark_paid`), or, for a payer faster than the
//! worker, in the PAID-from-copy write ([`crate::paid_from_copy`]); see
//! [`confirm_payment`].
//!
//! **`GET /payment/callback?paymentID=…&status=…&signature=…`** (the redirect
//! after checkout). Anyone can type this URL, so:
//! - only a payment ID we issued (its booking copy exists) with that payment's
//!   signature (compared in constant time) is acted on; anything else is
//!   `403`/`404` and changes nothing;
//! - `status` decides nothing: a forged `cancel` neither releases nor blocks
//!   anything (only the reconciler releases);
//! - a booking already PAID with this payment answers "paid" with no gateway
//!   call; after the hold deadline nothing is executed (`410`): the reconciler
//!   may release the seat, and we must never take money for it;
//! - execute runs under the per-payment lock (`keys::execute_lock`, an owner
//!   token, released only by its owner): a redirect delivered twice executes
//!   once; the second answers "processing" (`202`);
//! - the gateway port queries once after an execute timeout, only to recover a
//!   completed payment; an execute refused as already completed (2117/2062) is
//!   queried too; anything uncertain is left to the reconciler (`202`).
//!
//! **`POST /payment/webhook`** (SNS HTTP delivery, `text/plain`). Verified
//! before anything is read ([`crate::sns_delivery`]): unsigned, badly signed,
//! untrusted certificate URL or topic → `403`, nothing changed. A
//! `SubscriptionConfirmation` is confirmed only by visiting a `SubscribeURL` on
//! a host the certificate-URL policy allows. A `Notification` carries bKash's
//! IPN: the booking is found by its invoice number (which names the
//! candidate; `bookings::invoice_number`) and the payment ID (the booking
//! copy; the records' payment index when the invoice is unreadable), the gateway is queried and its transaction ID compared with
//! the IPN's before the booking is marked paid. Every correctly signed message
//! is answered `200`, also when the decision is left to the reconciler
//! (unknown booking, query failed, mismatch): SNS must not pile up
//! redeliveries. Replays are harmless: every step is idempotent.
//!
//! Both handlers do their work in a task of their own, so a request deadline
//! or a client that goes away never abandons an execute under its lock or a
//! confirm halfway. No answer is a 500.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use booking::coordination::keys;
use booking::gateway::{GatewayError, GatewayPaymentState, codes};
use booking::records::{BookingRecord, Condition, ConfirmPath, RecordStatus};
use booking::{Bug, CandidateHash, PaymentId};
use booking_service::admission::StoredCopy;
use booking_service::confirm::{ConfirmPorts, MarkPaidOutcome, PaidRequest, mark_paid};
use serde::Deserialize;
use sns::{MessageType, SnsMessage};
use tokio::time::Instant;

use crate::Stack;
use crate::bookings::ApiState;
use crate::metrics::ApiMetrics;
use crate::paid_from_copy::{FromCopy, mark_paid_from_copy};
use crate::sns_delivery::{Confirm, Rejected, SnsDelivery};
use booking::AdmittedBooking;
use booking::parse_invoice;

/// bKash 2062: the payment has already been completed (beside
/// [`codes::EXECUTION_ALREADY_COMPLETED`], 2117).
pub const PAYMENT_ALREADY_COMPLETED: &str = "2062";

/// Of the request deadline, the part execute may use; the rest is kept for
/// the HELD→PAID step behind it.
const EXECUTE_SHARE_NUM: u32 = 3;
const EXECUTE_SHARE_DEN: u32 = 4;

/// The execute lock lives this many request deadlines: longer than any holder
/// works (its task ends within about one), short enough that a crashed holder
/// blocks a payment only briefly.
const EXECUTE_LOCK_DEADLINES: u32 = 2;

/// The routes of confirm paths 1 and 2, counting into a fresh [`ApiState`].
pub fn routes() -> Router<Arc<Stack>> {
    routes_with(Arc::new(ApiState::new()))
}

/// The routes of confirm paths 1 and 2, counting into `state`'s metrics (the
/// same state as the bookings routes, so one `/metrics` shows both).
pub fn routes_with(state: Arc<ApiState>) -> Router<Arc<Stack>> {
    let sns = Arc::new(SnsDelivery::new());
    Router::new()
        .route("/payment/callback", get(callback))
        .route(
            "/payment/webhook",
            post(
                move |State(stack): State<Arc<Stack>>,
                      Extension(api): Extension<Arc<ApiState>>,
                      body: Bytes| {
                    let sns = sns.clone();
                    async move { webhook(stack, api, sns, body).await }
                },
            ),
        )
        .layer(Extension(state))
}

// ---------------------------------------------------------------------------
// Answers

/// What the callback tells the payer's browser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallbackAnswer {
    /// PAID with this payment: `200`.
    Paid,
    /// Another request for this payment is executing it: `202`.
    Processing,
    /// Not known to be paid yet; the reconciler decides: `202`.
    Pending,
    /// The gateway did not complete the payment (not approved, cancelled,
    /// failed), or the booking was superseded: `402`. Nothing changed.
    NotPaid,
    /// Money moved but the seat is no longer this booking's; a human was
    /// alerted: `409`.
    NeedsAttention,
    /// The hold deadline passed; nothing executed: `410`.
    Expired,
    /// The signature does not match, or cannot be checked: `403`.
    Forbidden,
    /// A payment ID we did not issue: `404`.
    Unknown,
    /// Malformed query: `400`.
    BadRequest,
    /// A backend could not answer, or nothing was sent to the gateway: try
    /// again: `503`.
    Unavailable,
}

impl CallbackAnswer {
    /// The HTTP status.
    pub fn status(self) -> StatusCode {
        match self {
            CallbackAnswer::Paid => StatusCode::OK,
            CallbackAnswer::Processing | CallbackAnswer::Pending => StatusCode::ACCEPTED,
            CallbackAnswer::NotPaid => StatusCode::PAYMENT_REQUIRED,
            CallbackAnswer::NeedsAttention => StatusCode::CONFLICT,
            CallbackAnswer::Expired => StatusCode::GONE,
            CallbackAnswer::Forbidden => StatusCode::FORBIDDEN,
            CallbackAnswer::Unknown => StatusCode::NOT_FOUND,
            CallbackAnswer::BadRequest => StatusCode::BAD_REQUEST,
            CallbackAnswer::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The machine-readable name (the page's `data-result`).
    pub fn name(self) -> &'static str {
        match self {
            CallbackAnswer::Paid => "paid",
            CallbackAnswer::Processing => "processing",
            CallbackAnswer::Pending => "pending",
            CallbackAnswer::NotPaid => "not_paid",
            CallbackAnswer::NeedsAttention => "needs_attention",
            CallbackAnswer::Expired => "expired",
            CallbackAnswer::Forbidden => "forbidden",
            CallbackAnswer::Unknown => "unknown_payment",
            CallbackAnswer::BadRequest => "bad_request",
            CallbackAnswer::Unavailable => "unavailable",
        }
    }

    fn text(self) -> (&'static str, &'static str) {
        match self {
            CallbackAnswer::Paid => (
                "Payment received",
                "Your seat is booked. A confirmation email is on its way.",
            ),
            CallbackAnswer::Processing => (
                "Processing",
                "Your payment is being confirmed. This page can be reloaded in a few seconds.",
            ),
            CallbackAnswer::Pending => (
                "Payment pending",
                "We could not confirm your payment yet. Your seat stays held; we will confirm it shortly and email you.",
            ),
            CallbackAnswer::NotPaid => (
                "Payment not completed",
                "The payment was not completed. Your seat stays held until the hold ends.",
            ),
            CallbackAnswer::NeedsAttention => (
                "We are looking into it",
                "We received a payment for a hold that had already ended. Our team has been alerted and will contact you.",
            ),
            CallbackAnswer::Expired => (
                "Hold expired",
                "The hold on this seat has ended, so the payment was not taken.",
            ),
            CallbackAnswer::Forbidden => {
                ("Link not valid", "This payment link could not be verified.")
            }
            CallbackAnswer::Unknown => ("Unknown payment", "We have no booking with this payment."),
            CallbackAnswer::BadRequest => ("Bad request", "This payment link is malformed."),
            CallbackAnswer::Unavailable => (
                "Please try again",
                "We could not confirm your payment right now. Please reload this page in a moment.",
            ),
        }
    }
}

impl IntoResponse for CallbackAnswer {
    fn into_response(self) -> Response {
        let (title, message) = self.text();
        let body = format!(
            "<!doctype html><html><head><meta charset=utf-8><title>{title}</title></head>\
             <body><main data-result=\"{}\"><h1>{title}</h1><p>{message}</p></main></body></html>",
            self.name()
        );
        let mut response = (self.status(), Html(body)).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if self == CallbackAnswer::Unavailable || self == CallbackAnswer::Processing {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
        }
        response
    }
}

fn webhook_answer(status: StatusCode, text: &'static str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text,
    )
        .into_response()
}

// ---------------------------------------------------------------------------
// The shared confirm step

/// Where a confirm path left the booking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirmed {
    /// PAID with this payment (`won`: by this call).
    Paid {
        /// Whether this call made it PAID (and so sent the email).
        won: bool,
    },
    /// The seat is not this payment's any more (released or superseded).
    NotOurs,
    /// Not known; the reconciler decides.
    Uncertain,
}

/// The end of every confirm path in this API: the conditional HELD→PAID; if
/// there is no HELD record with this payment and the booking copy is at hand,
/// the PAID-from-copy write (the fast payer). Idempotent.
pub async fn confirm_payment(
    stack: &Stack,
    metrics: &ApiMetrics,
    candidate: &CandidateHash,
    payment_id: &PaymentId,
    copy: Option<&AdmittedBooking>,
    trx_id: &str,
    path: ConfirmPath,
) -> Confirmed {
    let ports = ConfirmPorts {
        records: stack.records.as_ref(),
        ledger: stack.ledger.as_ref(),
        mailer: stack.mailer.as_ref(),
        alerts: stack.alerts.as_ref(),
        bugs: &stack.settings.bugs,
    };
    let now_ms = stack.clock.now_ms();
    let request = PaidRequest {
        candidate: candidate.clone(),
        payment_id: payment_id.clone(),
        trx_id: Some(trx_id.to_owned()),
        path,
        now_ms,
    };
    match mark_paid(ports, &request).await {
        Ok(MarkPaidOutcome::Won { .. }) => {
            metrics.paid(path, "record");
            Confirmed::Paid { won: true }
        }
        Ok(MarkPaidOutcome::AlreadyPaid { .. }) => Confirmed::Paid { won: false },
        Ok(MarkPaidOutcome::NotHeld { current }) => {
            let Some(copy) = copy else {
                tracing::warn!(%candidate, payment = %payment_id, ?current,
                    "no HELD record and no booking copy; left to the reconciler");
                return Confirmed::Uncertain;
            };
            match mark_paid_from_copy(ports, copy, Some(trx_id.to_owned()), path, now_ms).await {
                FromCopy::Won { .. } => {
                    metrics.paid(path, "copy");
                    Confirmed::Paid { won: true }
                }
                FromCopy::AlreadyPaid { .. } => Confirmed::Paid { won: false },
                FromCopy::NotOurs { current } => {
                    tracing::warn!(%candidate, payment = %payment_id, ?current,
                        "completed payment whose seat is not its own");
                    Confirmed::NotOurs
                }
                FromCopy::Uncertain(why) => {
                    tracing::warn!(%candidate, payment = %payment_id, %why, "PAID from copy uncertain");
                    Confirmed::Uncertain
                }
            }
        }
        Err(e) => {
            tracing::warn!(%candidate, payment = %payment_id, error = %e,
                "HELD→PAID could not be tried; left to the reconciler");
            Confirmed::Uncertain
        }
    }
}

/// The booking copy of `payment`, if one is kept. A copy that does not parse
/// is treated as absent (and logged).
pub async fn load_copy(
    stack: &Stack,
    payment: &PaymentId,
) -> Result<Option<AdmittedBooking>, booking::CoordinationError> {
    let key = keys::booking_copy(&stack.prefix, &stack.sale, payment);
    let Some(raw) = stack.coordination.get(&key).await? else {
        return Ok(None);
    };
    match serde_json::from_str::<StoredCopy>(&raw).map(|c| c.booking) {
        Ok(copy) if copy.payment_id == *payment && copy.sale == stack.sale => Ok(Some(copy)),
        Ok(_) => {
            tracing::error!(%payment, "booking copy names another payment or sale; ignored");
            Ok(None)
        }
        Err(e) => {
            tracing::error!(%payment, error = %e, "booking copy unreadable; ignored");
            Ok(None)
        }
    }
}

/// Constant-time equality of two secrets (the length is not secret).
pub fn secrets_equal(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

// ---------------------------------------------------------------------------
// Confirm path 1: the browser callback

/// The callback's query. `status` is read only to be logged.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct CallbackQuery {
    /// The gateway's payment ID.
    #[serde(rename = "paymentID", default)]
    pub payment_id: Option<String>,
    /// What the redirect claims happened: never decides anything.
    #[serde(default)]
    pub status: Option<String>,
    /// The per-payment signature.
    #[serde(default)]
    pub signature: Option<String>,
}

async fn callback(
    State(stack): State<Arc<Stack>>,
    Extension(api): Extension<Arc<ApiState>>,
    query: Result<Query<CallbackQuery>, QueryRejection>,
) -> Response {
    let Ok(Query(query)) = query else {
        return CallbackAnswer::BadRequest.into_response();
    };
    // own task: a dropped request must not abandon an execute under its lock
    let task = tokio::spawn(async move { handle_callback(&stack, &api.metrics, &query).await });
    match task.await {
        Ok(answer) => answer.into_response(),
        Err(e) => {
            tracing::error!(error = %e, "callback task failed");
            CallbackAnswer::Unavailable.into_response()
        }
    }
}

/// Confirm path 1, free of HTTP: what the callback answers.
pub async fn handle_callback(
    stack: &Stack,
    metrics: &ApiMetrics,
    query: &CallbackQuery,
) -> CallbackAnswer {
    let started = Instant::now();
    let Some(payment) = query
        .payment_id
        .as_deref()
        .and_then(|p| PaymentId::parse(p).ok())
    else {
        return CallbackAnswer::Unknown;
    };
    tracing::debug!(%payment, claimed = ?query.status, "callback (status ignored)");
    let copy = match load_copy(stack, &payment).await {
        Ok(copy) => copy,
        Err(e) => {
            tracing::warn!(%payment, error = %e, "booking copy unreadable now");
            return CallbackAnswer::Unavailable;
        }
    };
    let Some(copy) = copy else {
        return without_copy(stack, &payment).await;
    };
    let signature = query.signature.as_deref().unwrap_or_default();
    let expected = copy.signature.as_deref().unwrap_or_default();
    if signature.is_empty() || !secrets_equal(signature, expected) {
        tracing::warn!(%payment, "callback with a wrong signature refused");
        return CallbackAnswer::Forbidden;
    }
    let bugs = &stack.settings.bugs;
    if bugs.on(Bug::TrustRedirectCancel) && query.status.as_deref() == Some("cancel") {
        return trust_cancel(stack, &copy).await;
    }
    let record = match stack.records.get(&copy.candidate, true).await {
        Ok(record) => record,
        Err(e) => {
            // the copy is enough to go on: every write behind is conditional
            tracing::warn!(%payment, error = %e, "record unreadable; going on from the copy");
            None
        }
    };
    let deadline_ms = match gate(&copy, record.as_ref()) {
        Gate::Paid => return CallbackAnswer::Paid,
        Gate::Superseded => return CallbackAnswer::NotPaid,
        Gate::Open { deadline_ms } => deadline_ms,
    };
    let now_ms = stack.clock.now_ms();
    if now_ms >= deadline_ms && !bugs.on(Bug::ExecuteAfterDeadline) {
        tracing::info!(%payment, deadline_ms, now_ms, "callback after the hold deadline: not executed");
        return CallbackAnswer::Expired;
    }
    let hold_left = if now_ms >= deadline_ms {
        // the zoo's trap `execute_after_deadline`: as if the hold went on
        stack.settings.request_deadline
    } else {
        Duration::from_millis(deadline_ms - now_ms)
    };
    if bugs.on(Bug::TrustRedirectSuccess) && query.status.as_deref() == Some("success") {
        // the zoo's trap: PAID on the browser's word, nothing executed
        return match confirm_payment(
            stack,
            metrics,
            &copy.candidate,
            &payment,
            Some(&copy),
            "UNVERIFIED",
            ConfirmPath::Callback,
        )
        .await
        {
            Confirmed::Paid { .. } => CallbackAnswer::Paid,
            Confirmed::NotOurs => CallbackAnswer::NeedsAttention,
            Confirmed::Uncertain => CallbackAnswer::Pending,
        };
    }
    let lock = keys::execute_lock(&stack.prefix, &stack.sale, &payment);
    let owner = booking::entropy::owner_token(stack.entropy.as_ref());
    let lock_ttl = stack.settings.request_deadline * EXECUTE_LOCK_DEADLINES;
    match stack.coordination.try_lock(&lock, &owner, lock_ttl).await {
        Ok(true) => {}
        Ok(false) => {
            tracing::info!(%payment, "execute lock held by another request");
            return CallbackAnswer::Processing;
        }
        Err(e) => {
            tracing::warn!(%payment, error = %e, "execute lock unavailable; not executing");
            return CallbackAnswer::Unavailable;
        }
    }
    let answer = execute_under_lock(stack, metrics, &copy, started, hold_left).await;
    match stack.coordination.unlock(&lock, &owner).await {
        Ok(true) => {}
        Ok(false) => tracing::warn!(%payment, "execute lock expired before its owner released it"),
        Err(e) => tracing::warn!(%payment, error = %e, "execute lock not released; it expires"),
    }
    answer
}

/// The zoo's bug `trust_redirect_cancel`: the redirect says cancel, so the
/// seat is given back (payment-guarded, as every release) and the HELD record
/// deleted, without asking the gateway.
async fn trust_cancel(stack: &Stack, copy: &AdmittedBooking) -> CallbackAnswer {
    let released = stack
        .ledger
        .release(&stack.sale, &copy.candidate, &copy.payment_id)
        .await;
    let deleted = stack
        .records
        .delete(
            &copy.candidate,
            Condition::StatusIsWithPayment(RecordStatus::Held, copy.payment_id.clone()),
        )
        .await;
    tracing::warn!(payment = %copy.payment_id, ?released, deleted = deleted.is_ok(),
        "redirect status=cancel trusted (bug switched on)");
    CallbackAnswer::NotPaid
}

/// What the record says before anything is executed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// PAID with this payment: nothing to do.
    Paid,
    /// The candidate's record belongs to a newer booking, or the candidate
    /// paid with another payment: this payment must not be executed.
    Superseded,
    /// Go on; the hold ends at `deadline_ms` (the record's, which the
    /// reconciler may have extended, else the copy's).
    Open {
        /// The hold deadline, ms.
        deadline_ms: u64,
    },
}

/// Decides from the copy and the candidate's record (pure).
pub fn gate(copy: &AdmittedBooking, record: Option<&BookingRecord>) -> Gate {
    match record {
        Some(r) if r.payment_id == copy.payment_id => match r.status {
            RecordStatus::Paid => Gate::Paid,
            RecordStatus::Held => Gate::Open {
                deadline_ms: r.deadline_ms,
            },
        },
        Some(r) if r.status == RecordStatus::Paid || r.created_ms > copy.request_ms => {
            Gate::Superseded
        }
        // no record yet (fast payer), or an older booking's stale record
        _ => Gate::Open {
            deadline_ms: copy.deadline_ms,
        },
    }
}

/// Without a booking copy the signature cannot be checked: nothing is
/// executed. A PAID record still answers "paid" (it changes nothing).
async fn without_copy(stack: &Stack, payment: &PaymentId) -> CallbackAnswer {
    match stack.records.by_payment(payment).await {
        Ok(Some(r)) if r.status == RecordStatus::Paid => CallbackAnswer::Paid,
        Ok(Some(r)) if stack.clock.now_ms() >= r.deadline_ms => CallbackAnswer::Expired,
        Ok(Some(_)) => {
            tracing::warn!(%payment, "HELD record without a booking copy: signature cannot be checked");
            CallbackAnswer::Forbidden
        }
        Ok(None) => CallbackAnswer::Unknown,
        Err(e) => {
            tracing::warn!(%payment, error = %e, "payment index unreadable");
            CallbackAnswer::Unavailable
        }
    }
}

/// Execute (the port queries once after a timeout), then confirm. Runs only
/// under the execute lock.
async fn execute_under_lock(
    stack: &Stack,
    metrics: &ApiMetrics,
    copy: &AdmittedBooking,
    started: Instant,
    hold_left: Duration,
) -> CallbackAnswer {
    let payment = &copy.payment_id;
    let deadline = stack.settings.request_deadline;
    let execute_share = deadline * EXECUTE_SHARE_NUM / EXECUTE_SHARE_DEN;
    // never let an execute outlive the hold: past the deadline the reconciler
    // may release the seat
    let within = execute_share
        .saturating_sub(started.elapsed())
        .min(hold_left);
    let trx_id = match stack.gateway.execute(payment, within).await {
        Ok(executed) => executed.trx_id,
        Err(GatewayError::Refused { code, message })
            if code == codes::EXECUTION_ALREADY_COMPLETED || code == PAYMENT_ALREADY_COMPLETED =>
        {
            tracing::info!(%payment, %code, %message, "execute: already completed; querying");
            let left = deadline.saturating_sub(started.elapsed());
            match stack.gateway.query(payment, left).await {
                Ok(status) => match status.state {
                    GatewayPaymentState::Completed { trx_id } => trx_id,
                    other => {
                        tracing::warn!(%payment, state = ?other, "already completed, yet not completed");
                        return CallbackAnswer::Pending;
                    }
                },
                Err(e) => {
                    tracing::warn!(%payment, error = %e, "query after 'already completed' failed");
                    return CallbackAnswer::Pending;
                }
            }
        }
        Err(GatewayError::Refused { code, message }) => {
            tracing::info!(%payment, %code, %message, "execute refused: payment not completed");
            return CallbackAnswer::NotPaid;
        }
        Err(GatewayError::TokenUnavailable) => {
            tracing::warn!(%payment, "no gateway token: nothing executed");
            return CallbackAnswer::Unavailable;
        }
        Err(e @ (GatewayError::Timeout | GatewayError::Unavailable(_))) => {
            tracing::warn!(%payment, error = %e, "execute uncertain; left to the reconciler");
            return CallbackAnswer::Pending;
        }
    };
    match confirm_payment(
        stack,
        metrics,
        &copy.candidate,
        payment,
        Some(copy),
        &trx_id,
        ConfirmPath::Callback,
    )
    .await
    {
        Confirmed::Paid { .. } => CallbackAnswer::Paid,
        Confirmed::NotOurs => CallbackAnswer::NeedsAttention,
        Confirmed::Uncertain => CallbackAnswer::Pending,
    }
}

// ---------------------------------------------------------------------------
// Confirm path 2: the SNS webhook

async fn webhook(
    stack: Arc<Stack>,
    api: Arc<ApiState>,
    sns: Arc<SnsDelivery>,
    body: Bytes,
) -> Response {
    // own task: a correctly signed message is always worked through to the end
    let task = tokio::spawn(async move { handle_webhook(&stack, &api.metrics, &sns, &body).await });
    match task.await {
        Ok(response) => response,
        Err(e) => {
            tracing::error!(error = %e, "webhook task failed");
            webhook_answer(StatusCode::SERVICE_UNAVAILABLE, "try again\n")
        }
    }
}

async fn handle_webhook(
    stack: &Stack,
    metrics: &ApiMetrics,
    sns: &SnsDelivery,
    body: &[u8],
) -> Response {
    let msg = match sns.verify(&stack.webhook_trust, body).await {
        Ok(msg) => msg,
        Err(Rejected::Untrusted(why)) => {
            tracing::warn!(%why, "webhook rejected");
            return webhook_answer(StatusCode::FORBIDDEN, "rejected\n");
        }
        Err(e @ Rejected::CertUnavailable(_)) => {
            tracing::warn!(error = %e, "webhook not verifiable now");
            return webhook_answer(StatusCode::SERVICE_UNAVAILABLE, "try again\n");
        }
    };
    match msg.message_type {
        MessageType::SubscriptionConfirmation => {
            match sns.confirm_subscription(&stack.webhook_trust, &msg).await {
                Ok(()) => {
                    tracing::info!(topic = %msg.topic_arn, "webhook subscription confirmed");
                    webhook_answer(StatusCode::OK, "subscribed\n")
                }
                Err(e @ Confirm::Unsafe(_)) => {
                    // signed by a trusted certificate, yet not a URL we visit
                    tracing::error!(error = %e, "SubscribeURL not visited");
                    webhook_answer(StatusCode::OK, "not subscribed\n")
                }
                Err(e @ Confirm::Failed(_)) => {
                    // SNS delivers the confirmation again
                    tracing::warn!(error = %e, "subscription confirmation failed");
                    webhook_answer(StatusCode::SERVICE_UNAVAILABLE, "try again\n")
                }
            }
        }
        MessageType::UnsubscribeConfirmation => {
            tracing::warn!(topic = %msg.topic_arn, "unsubscribed from the topic");
            webhook_answer(StatusCode::OK, "ok\n")
        }
        MessageType::Notification => {
            let outcome = handle_notification(stack, metrics, &msg).await;
            tracing::info!(message_id = %msg.message_id, ?outcome, "webhook notification");
            webhook_answer(StatusCode::OK, "ok\n")
        }
    }
}

/// bKash's IPN, the `Message` of a notification: the fields we read.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Ipn {
    /// The payment.
    #[serde(rename = "paymentID", default)]
    pub payment_id: Option<String>,
    /// The transaction.
    #[serde(rename = "trxID", default)]
    pub trx_id: Option<String>,
    /// Our invoice number.
    #[serde(rename = "merchantInvoiceNumber", default)]
    pub invoice: Option<String>,
    /// What the gateway says happened (only the query decides).
    #[serde(rename = "transactionStatus", default)]
    pub transaction_status: Option<String>,
}

/// What a verified notification led to (logged; always answered 200).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotificationOutcome {
    /// Marked paid by this notification.
    MarkedPaid,
    /// Already PAID with this payment.
    AlreadyPaid,
    /// The IPN is not readable or names no payment.
    Unreadable,
    /// No booking has this payment.
    UnknownBooking,
    /// The gateway could not be asked, or does not report it completed.
    NotConfirmed(String),
    /// The gateway's transaction or invoice differs from the IPN's.
    Mismatch(String),
    /// Completed, but the seat is not this payment's (alerted).
    NotOurs,
    /// A backend could not answer; the reconciler decides.
    Uncertain(String),
}

/// Confirm path 2 for a verified notification.
pub async fn handle_notification(
    stack: &Stack,
    metrics: &ApiMetrics,
    msg: &SnsMessage,
) -> NotificationOutcome {
    let Ok(ipn) = serde_json::from_str::<Ipn>(&msg.message) else {
        return NotificationOutcome::Unreadable;
    };
    let (Some(payment), Some(ipn_trx)) = (
        ipn.payment_id
            .as_deref()
            .and_then(|p| PaymentId::parse(p).ok()),
        ipn.trx_id.as_deref().filter(|t| !t.is_empty()),
    ) else {
        return NotificationOutcome::Unreadable;
    };
    // the invoice names the booking: `<sale>-<candidate hash>-<request ms>`
    let invoice = ipn.invoice.as_deref().and_then(parse_invoice);
    if let Some((sale, _, _)) = &invoice {
        if *sale != stack.sale {
            return NotificationOutcome::UnknownBooking;
        }
    }
    let copy = match load_copy(stack, &payment).await {
        Ok(copy) => copy,
        Err(e) => {
            tracing::warn!(%payment, error = %e, "booking copy unreadable; trying the records");
            None
        }
    };
    if let (Some(c), Some((_, candidate, request_ms))) = (&copy, &invoice) {
        if c.candidate != *candidate || c.request_ms != *request_ms {
            return NotificationOutcome::Mismatch(format!(
                "invoice {:?} names another booking than payment {payment}",
                ipn.invoice
            ));
        }
    }
    let read = match &invoice {
        Some((_, candidate, _)) => stack.records.get(candidate, true).await,
        None => stack.records.by_payment(&payment).await,
    };
    let record = match read {
        // only this payment's record is this booking's
        Ok(record) => record.filter(|r| r.payment_id == payment),
        Err(e) if copy.is_some() => {
            tracing::warn!(%payment, error = %e, "records unreadable; going on from the copy");
            None
        }
        Err(e) => return NotificationOutcome::Uncertain(format!("records: {e}")),
    };
    let candidate = match (&copy, &record) {
        (Some(c), _) => c.candidate.clone(),
        (None, Some(r)) => r.candidate.clone(),
        (None, None) => return NotificationOutcome::UnknownBooking,
    };
    if record
        .as_ref()
        .is_some_and(|r| r.status == RecordStatus::Paid && r.payment_id == payment)
    {
        return NotificationOutcome::AlreadyPaid;
    }
    let status = match stack
        .gateway
        .query(&payment, stack.settings.request_deadline)
        .await
    {
        Ok(status) => status,
        Err(e) => return NotificationOutcome::NotConfirmed(format!("query: {e}")),
    };
    let GatewayPaymentState::Completed { trx_id } = status.state else {
        return NotificationOutcome::NotConfirmed(format!("gateway says {:?}", status.state));
    };
    if trx_id != ipn_trx {
        tracing::warn!(%payment, gateway = %trx_id, ipn = %ipn_trx, "transaction IDs differ");
        return NotificationOutcome::Mismatch(format!("trxID {ipn_trx} vs {trx_id}"));
    }
    if let (Some(ours), Some(theirs)) = (status.invoice.as_deref(), ipn.invoice.as_deref()) {
        if ours != theirs {
            return NotificationOutcome::Mismatch(format!("invoice {theirs} vs {ours}"));
        }
    }
    match confirm_payment(
        stack,
        metrics,
        &candidate,
        &payment,
        copy.as_ref(),
        &trx_id,
        ConfirmPath::Webhook,
    )
    .await
    {
        Confirmed::Paid { won: true } => NotificationOutcome::MarkedPaid,
        Confirmed::Paid { won: false } => NotificationOutcome::AlreadyPaid,
        Confirmed::NotOurs => NotificationOutcome::NotOurs,
        Confirmed::Uncertain => NotificationOutcome::Uncertain("confirm".into()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use booking::{Level, RequestToken, SaleId};

    use super::*;

    fn copy() -> AdmittedBooking {
        AdmittedBooking {
            candidate: CandidateHash::of("c"),
            sale: SaleId::parse("s").unwrap(),
            level: Level::parse("a").unwrap(),
            payment_id: PaymentId::parse("P2").unwrap(),
            signature: Some("sig".into()),
            token: Some(RequestToken::parse("t").unwrap()),
            request_ms: 2_000,
            deadline_ms: 602_000,
        }
    }

    fn record(payment: &str, created_ms: u64) -> BookingRecord {
        let c = copy();
        BookingRecord::held(
            c.candidate,
            c.sale,
            c.level,
            PaymentId::parse(payment).unwrap(),
            created_ms,
            created_ms + 600_000,
        )
    }

    #[test]
    fn the_gate_executes_only_a_live_booking() {
        let c = copy();
        assert_eq!(
            gate(&c, None),
            Gate::Open {
                deadline_ms: 602_000
            }
        );
        let extended = BookingRecord {
            deadline_ms: 900_000,
            ..record("P2", 2_000)
        };
        assert_eq!(
            gate(&c, Some(&extended)),
            Gate::Open {
                deadline_ms: 900_000
            },
            "the record's deadline, which the reconciler extends"
        );
        let paid = record("P2", 2_000).into_paid(ConfirmPath::Webhook, 3_000);
        assert_eq!(gate(&c, Some(&paid)), Gate::Paid);
        assert_eq!(gate(&c, Some(&record("P3", 3_000))), Gate::Superseded);
        let paid_other = record("P1", 1_000).into_paid(ConfirmPath::Webhook, 1_500);
        assert_eq!(gate(&c, Some(&paid_other)), Gate::Superseded);
        assert_eq!(
            gate(&c, Some(&record("P1", 1_000))),
            Gate::Open {
                deadline_ms: 602_000
            },
            "an older booking's stale record"
        );
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(secrets_equal("abc", "abc"));
        assert!(!secrets_equal("abc", "abd"));
        assert!(!secrets_equal("abc", "ab"));
        assert!(!secrets_equal("", "a"));
        assert!(secrets_equal("", ""));
    }

    #[test]
    fn answers_have_their_status() {
        assert_eq!(CallbackAnswer::Paid.status(), StatusCode::OK);
        assert_eq!(CallbackAnswer::Forbidden.status(), StatusCode::FORBIDDEN);
        assert_eq!(CallbackAnswer::Expired.status(), StatusCode::GONE);
        assert_eq!(CallbackAnswer::Processing.status(), StatusCode::ACCEPTED);
    }
}
