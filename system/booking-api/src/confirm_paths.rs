//! Confirm paths 1 and 2 over HTTP: the browser callback and the gateway's
//! SNS webhook. The decisions live below HTTP, in `booking_service`
//! ([`booking_service::callback`] and [`booking_service::webhook`], both
//! ending in `booking_service::confirm::confirm_payment`), so the simulator
//! runs the same code; this module is only their HTTP mapping.
//!
//! **`GET /payment/callback?paymentID=…&status=…&signature=…`** (the redirect
//! after checkout): a malformed query is `400`; otherwise the
//! [`CallbackOutcome`] answers with its status code and a small HTML page
//! (`data-result` is the outcome's name): paid `200`; processing or pending
//! `202`; not paid `402`; needs attention `409`; expired `410`; forbidden
//! (wrong signature) `403`; unknown payment `404`; unavailable `503`.
//! `status` decides nothing, a callback after the hold deadline never
//! executes, and a redirect delivered twice executes once (see
//! [`booking_service::callback`]).
//!
//! **`POST /payment/webhook`** (SNS HTTP delivery, `text/plain`). Verified
//! before anything is read ([`crate::sns_delivery`]): unsigned, badly signed,
//! untrusted certificate URL or topic → `403`, nothing changed. A
//! `SubscriptionConfirmation` is confirmed only by visiting a `SubscribeURL` on
//! a host the certificate-URL policy allows. A `Notification` carries bKash's
//! IPN, handed to [`booking_service::webhook::handle`]. Every correctly
//! signed message is answered `200`, also when the decision is left to the
//! reconciler (unknown booking, query failed, mismatch): SNS must not pile up
//! redeliveries. Replays are harmless: every step is idempotent.
//!
//! Both handlers do their work in a task of their own, so a request deadline
//! or a client that goes away never abandons an execute under its lock or a
//! confirm halfway. No answer is a 500.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use booking::records::ConfirmPath;
use booking_service::callback::{self, CallbackOutcome};
use booking_service::confirm::ConfirmEvents;
use booking_service::webhook::{self, NotificationOutcome};
use sns::{MessageType, SnsMessage};

use crate::Stack;
use crate::bookings::ApiState;
use crate::metrics::ApiMetrics;
use crate::sns_delivery::{Confirm, Rejected, SnsDelivery};

pub use booking_service::admission::load_copy;
pub use booking_service::callback::{CallbackQuery, PAYMENT_ALREADY_COMPLETED};
pub use booking_service::webhook::Ipn;

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

/// The HTTP side of what the confirm step hears: the API's counters.
struct Counted<'a>(&'a ApiMetrics);

impl ConfirmEvents for Counted<'_> {
    fn paid(&self, path: ConfirmPath, source: &'static str) {
        self.0.paid(path, source);
    }
}

// ---------------------------------------------------------------------------
// Answers

/// What the callback tells the payer's browser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallbackAnswer {
    /// What [`booking_service::callback::handle`] decided.
    Decided(CallbackOutcome),
    /// Malformed query: `400`.
    BadRequest,
}

impl CallbackAnswer {
    /// The HTTP status.
    pub fn status(self) -> StatusCode {
        match self {
            CallbackAnswer::Decided(outcome) => match outcome {
                CallbackOutcome::Paid => StatusCode::OK,
                CallbackOutcome::Processing | CallbackOutcome::Pending => StatusCode::ACCEPTED,
                CallbackOutcome::NotPaid => StatusCode::PAYMENT_REQUIRED,
                CallbackOutcome::NeedsAttention => StatusCode::CONFLICT,
                CallbackOutcome::Expired => StatusCode::GONE,
                CallbackOutcome::Forbidden => StatusCode::FORBIDDEN,
                CallbackOutcome::Unknown => StatusCode::NOT_FOUND,
                CallbackOutcome::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            },
            CallbackAnswer::BadRequest => StatusCode::BAD_REQUEST,
        }
    }

    /// The machine-readable name (the page's `data-result`).
    pub fn name(self) -> &'static str {
        match self {
            CallbackAnswer::Decided(outcome) => outcome.name(),
            CallbackAnswer::BadRequest => "bad_request",
        }
    }

    fn text(self) -> (&'static str, &'static str) {
        let CallbackAnswer::Decided(outcome) = self else {
            return ("Bad request", "This payment link is malformed.");
        };
        match outcome {
            CallbackOutcome::Paid => (
                "Payment received",
                "Your seat is booked. A confirmation email is on its way.",
            ),
            CallbackOutcome::Processing => (
                "Processing",
                "Your payment is being confirmed. This page can be reloaded in a few seconds.",
            ),
            CallbackOutcome::Pending => (
                "Payment pending",
                "We could not confirm your payment yet. Your seat stays held; we will confirm it shortly and email you.",
            ),
            CallbackOutcome::NotPaid => (
                "Payment not completed",
                "The payment was not completed. Your seat stays held until the hold ends.",
            ),
            CallbackOutcome::NeedsAttention => (
                "We are looking into it",
                "We received a payment for a hold that had already ended. Our team has been alerted and will contact you.",
            ),
            CallbackOutcome::Expired => (
                "Hold expired",
                "The hold on this seat has ended, so the payment was not taken.",
            ),
            CallbackOutcome::Forbidden => {
                ("Link not valid", "This payment link could not be verified.")
            }
            CallbackOutcome::Unknown => {
                ("Unknown payment", "We have no booking with this payment.")
            }
            CallbackOutcome::Unavailable => (
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
        if matches!(
            self,
            CallbackAnswer::Decided(CallbackOutcome::Unavailable | CallbackOutcome::Processing)
        ) {
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
// Confirm path 1: the browser callback

async fn callback(
    State(stack): State<Arc<Stack>>,
    Extension(api): Extension<Arc<ApiState>>,
    query: Result<Query<CallbackQuery>, QueryRejection>,
) -> Response {
    let Ok(Query(query)) = query else {
        return CallbackAnswer::BadRequest.into_response();
    };
    // own task: a dropped request must not abandon an execute under its lock
    let task =
        tokio::spawn(async move { callback::handle(&stack, &Counted(&api.metrics), &query).await });
    match task.await {
        Ok(outcome) => CallbackAnswer::Decided(outcome).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "callback task failed");
            CallbackAnswer::Decided(CallbackOutcome::Unavailable).into_response()
        }
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
            // signed: always 200, whatever came of it
            webhook_answer(StatusCode::OK, "ok\n")
        }
    }
}

/// Confirm path 2 for a verified notification: its `Message` (the IPN) to
/// [`booking_service::webhook::handle`], counting into `metrics`.
pub async fn handle_notification(
    stack: &Stack,
    metrics: &ApiMetrics,
    msg: &SnsMessage,
) -> NotificationOutcome {
    webhook::handle(stack, &Counted(metrics), &msg.message).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_have_their_status() {
        let decided = CallbackAnswer::Decided;
        assert_eq!(decided(CallbackOutcome::Paid).status(), StatusCode::OK);
        assert_eq!(
            decided(CallbackOutcome::Forbidden).status(),
            StatusCode::FORBIDDEN
        );
        assert_eq!(decided(CallbackOutcome::Expired).status(), StatusCode::GONE);
        assert_eq!(
            decided(CallbackOutcome::Processing).status(),
            StatusCode::ACCEPTED
        );
        assert_eq!(
            decided(CallbackOutcome::NotPaid).status(),
            StatusCode::PAYMENT_REQUIRED
        );
        assert_eq!(
            decided(CallbackOutcome::Unknown).status(),
            StatusCode::NOT_FOUND
        );
        assert_eq!(CallbackAnswer::BadRequest.status(), StatusCode::BAD_REQUEST);
        assert_eq!(CallbackAnswer::BadRequest.name(), "bad_request");
    }

    #[test]
    fn busy_answers_ask_to_retry_and_no_answer_is_cached() {
        for (answer, retry) in [
            (CallbackAnswer::Decided(CallbackOutcome::Unavailable), true),
            (CallbackAnswer::Decided(CallbackOutcome::Processing), true),
            (CallbackAnswer::Decided(CallbackOutcome::Pending), false),
            (CallbackAnswer::BadRequest, false),
        ] {
            let response = answer.into_response();
            assert_eq!(response.headers()[header::CACHE_CONTROL], "no-store");
            assert_eq!(
                response.headers().contains_key(header::RETRY_AFTER),
                retry,
                "{answer:?}"
            );
        }
    }
}
