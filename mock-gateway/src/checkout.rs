//! The payer's side: the checkout page behind `bkashURL`.
//!
//! `GET` shows a page a person can click; `POST` with the form field
//! `action=pay|cancel|fail` (optionally `wallet`, and `reason` = a bKash code for
//! `fail`) acts as the payer without a browser and answers `302` to the
//! merchant's callback URL with `paymentID`, `status` and `signature`. Scripted
//! `redirect` rules delay, drop, duplicate or forge that redirect.

use std::sync::Arc;
use std::time::Duration;

use axum::Form;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;

use crate::App;
use crate::codes::Code;
use crate::gateway::redirect_url;
use crate::payments::{PayerAction, PaymentState};
use crate::script::{Action, Forgery, Operation, Subject};

/// Header carrying the bKash code when the checkout page refuses an action.
pub const STATUS_CODE_HEADER: &str = "x-bkash-status-code";

/// How long a server-side replay of a redirect waits for the merchant: a
/// merchant that never answers must not pin the replay task forever.
const REPLAY_TIMEOUT: Duration = Duration::from_secs(30);

/// The checkout routes.
pub fn routes() -> Router<Arc<App>> {
    Router::new().route("/checkout/{payment_id}", get(page).post(act))
}

/// The checkout URL's query.
#[derive(Debug, Deserialize)]
pub struct CheckoutQuery {
    #[serde(default)]
    hash: String,
}

/// The checkout form.
#[derive(Debug, Deserialize)]
pub struct CheckoutForm {
    #[serde(default)]
    action: String,
    #[serde(default)]
    wallet: Option<String>,
    #[serde(default)]
    reason: Option<String>,
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn refused(status: StatusCode, code: Code) -> Response {
    let body = format!(
        "<!doctype html><title>bKash checkout</title><h1>Payment not possible</h1><p>{} ({})</p>",
        escape(code.message()),
        code.as_str()
    );
    (status, [(STATUS_CODE_HEADER, code.as_str())], Html(body)).into_response()
}

async fn page(
    State(app): State<Arc<App>>,
    Path(payment_id): Path<String>,
    Query(q): Query<CheckoutQuery>,
) -> Response {
    let Some(p) = app
        .gateway
        .payment(&payment_id)
        .filter(|p| p.signature == q.hash)
    else {
        return refused(StatusCode::NOT_FOUND, Code::InvalidPaymentId);
    };
    let open = matches!(p.state, PaymentState::Initiated | PaymentState::Authorized);
    let buttons = if open {
        "<form method=post><input name=wallet value=01770618575 aria-label=wallet>\
         <button name=action value=pay>Pay</button>\
         <button name=action value=cancel>Cancel</button>\
         <button name=action value=fail>Fail</button></form>"
    } else {
        "<p>This payment is closed.</p>"
    };
    Html(format!(
        "<!doctype html><html><head><meta charset=utf-8><title>bKash checkout</title>\
         <style>body{{font-family:sans-serif;max-width:28em;margin:3em auto}}button{{margin:.3em;padding:.5em 1.2em}}</style></head>\
         <body><h1>bKash checkout (mock)</h1><dl><dt>Payment</dt><dd id=payment>{}</dd>\
         <dt>Invoice</dt><dd id=invoice>{}</dd><dt>Amount</dt><dd id=amount>{} {}</dd>\
         <dt>Status</dt><dd id=status>{}</dd></dl>{}</body></html>",
        escape(&p.payment_id),
        escape(&p.merchant_invoice_number),
        escape(&p.amount),
        escape(&p.currency),
        p.state.transaction_status(),
        buttons
    ))
    .into_response()
}

async fn act(
    State(app): State<Arc<App>>,
    Path(payment_id): Path<String>,
    Query(q): Query<CheckoutQuery>,
    form: Result<Form<CheckoutForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let gw = &app.gateway;
    let Ok(Form(form)) = form else {
        return refused(StatusCode::BAD_REQUEST, Code::InvalidRequestBody);
    };
    let Some(action) = PayerAction::parse(&form.action) else {
        return refused(StatusCode::BAD_REQUEST, Code::InvalidRequestBody);
    };
    let failure = form.reason.as_deref().and_then(Code::parse);
    let (status, payment) = match gw.payer_acts(
        &payment_id,
        &q.hash,
        action,
        form.wallet.as_deref(),
        failure,
    ) {
        Ok(x) => x,
        Err(Code::InvalidPaymentId) => {
            return refused(StatusCode::NOT_FOUND, Code::InvalidPaymentId);
        }
        Err(code) => return refused(StatusCode::CONFLICT, code),
    };
    gw.metrics.call(Operation::Redirect);
    let subject = Subject {
        payment_id: Some(&payment.payment_id),
        invoice: Some(&payment.merchant_invoice_number),
    };
    let mut location = redirect_url(&payment, status.as_str());
    let Some(mut decision) = gw.script().decide(Operation::Redirect, subject) else {
        return found(&location);
    };
    gw.record_fault(
        Operation::Redirect,
        &decision.rule,
        &decision.action,
        Some(&payment.payment_id),
    );
    match decision.action.clone() {
        Action::Drop => Html(
            "<!doctype html><title>bKash checkout</title><p>Payment step done. You may close this window.</p>",
        )
        .into_response(),
        Action::Delay(latency) => {
            tokio::time::sleep(latency.sample(&mut decision.rng)).await;
            found(&location)
        }
        Action::Duplicate { copies, spacing_ms } => {
            // The browser replays the redirect: the same GET reaches the merchant again.
            let http = app.http.clone();
            let again = location.clone();
            tokio::spawn(async move {
                for copy in 1..=copies {
                    tokio::time::sleep(Duration::from_millis(spacing_ms)).await;
                    tracing::debug!(copy, "replaying redirect");
                    let replay = http.get(&again).timeout(REPLAY_TIMEOUT).send().await;
                    if let Err(e) = replay {
                        tracing::warn!(error = %e, "duplicate redirect failed");
                    }
                }
            });
            found(&location)
        }
        Action::Forge(Forgery::RedirectStatus(forged)) => {
            location = redirect_url(&payment, &forged);
            found(&location)
        }
        _ => found(&location),
    }
}

fn found(location: &str) -> Response {
    (StatusCode::FOUND, [(header::LOCATION, location.to_owned())]).into_response()
}
