//! The bKash Tokenized Checkout HTTP API, with scripted faults applied.
//!
//! Routes are served both at `/tokenized/checkout/...` and under the version
//! prefix `/v1.2.0-beta/tokenized/checkout/...`, so a client whose base URL
//! includes the version works by swapping only the host.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::Value;

use crate::App;
use crate::codes::Code;
use crate::gateway::{Gateway, error_answer_bytes, to_json_bytes};
use crate::script::{Action, Failure, Operation, Subject};

/// The version prefix real base URLs carry.
pub const VERSION_PREFIX: &str = "/v1.2.0-beta";

/// The API routes.
pub fn routes() -> Router<Arc<App>> {
    let api = Router::new()
        .route("/tokenized/checkout/token/grant", post(grant))
        .route("/tokenized/checkout/token/refresh", post(refresh))
        .route("/tokenized/checkout/create", post(create))
        .route("/tokenized/checkout/execute", post(execute))
        .route("/tokenized/checkout/payment/status", post(status))
        .route(
            "/tokenized/checkout/general/searchTransaction",
            post(search),
        )
        .route("/tokenized/checkout/payment/refund", post(refund));
    Router::new().merge(api.clone()).nest(VERSION_PREFIX, api)
}

/// A bKash answer: HTTP 200 and JSON (already serialized), success or not.
fn answer(gateway: &Gateway, op: Operation, result: Result<Vec<u8>, Code>) -> Response {
    let body = match result {
        Ok(v) => v,
        Err(code) => {
            gateway.metrics.refused(op, code);
            error_answer_bytes(code)
        }
    };
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

/// A `Value` answer, serialized.
fn json(result: Result<Value, Code>) -> Result<Vec<u8>, Code> {
    result.map(|v| to_json_bytes(&v))
}

/// A response whose body breaks after the headers: the client sees the
/// connection reset mid-answer.
fn reset_response() -> Response {
    let broken = futures_util::stream::once(async {
        Err::<Bytes, io::Error>(io::Error::new(
            io::ErrorKind::ConnectionReset,
            "scripted reset",
        ))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(broken))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// What a scripted rule asked the work to do besides running.
#[derive(Debug, Clone, Copy, Default)]
struct Shape<'a> {
    rule: Option<&'a str>,
    cancel: bool,
}

/// Runs `work` for one call of `op`, shaped by the script's decision.
///
/// A call that does not authenticate or parse is answered with its bKash code
/// before any rule is consulted: scripts shape what valid callers see, and a
/// rule's side effect (a cancel) never runs for a caller that may not act.
/// Execute calls a rule answers without executing are still written to the
/// payment's `execute_calls`, so the ledger keeps every call.
async fn scripted<T>(
    app: &App,
    op: Operation,
    subject: Subject<'_>,
    parsed: Result<T, Code>,
    work: impl FnOnce(T, Shape<'_>) -> Result<Vec<u8>, Code>,
) -> Response {
    let gw = &app.gateway;
    gw.metrics.call(op);
    let input = match parsed {
        Ok(input) => input,
        Err(code) => return answer(gw, op, Err(code)),
    };
    let Some(mut decision) = gw.script().decide(op, subject) else {
        return answer(gw, op, work(input, Shape::default()));
    };
    gw.record_fault(op, &decision.rule, &decision.action, subject.payment_id);
    let rule = Some(decision.rule.as_str());
    let unexecuted = |what: &str| {
        if let (Operation::Execute, Some(id)) = (op, subject.payment_id) {
            gw.note_unexecuted_call(id, what, &decision.rule);
        }
    };
    match &decision.action {
        Action::Fail(Failure::Code(c)) => {
            let code = Code::parse(c).unwrap_or(Code::ProcessFailed);
            unexecuted(code.as_str());
            answer(gw, op, Err(code))
        }
        Action::Fail(Failure::Http(s)) => {
            let status = StatusCode::from_u16(*s).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
            unexecuted(&format!("http {}", status.as_u16()));
            let body = serde_json::json!({ "message": status.canonical_reason() });
            (status, axum::Json(body)).into_response()
        }
        Action::Fail(Failure::Reset) => {
            unexecuted("reset");
            reset_response()
        }
        Action::Delay(latency) => {
            let wait = latency.sample(&mut decision.rng);
            tokio::time::sleep(wait).await;
            answer(
                gw,
                op,
                work(
                    input,
                    Shape {
                        rule,
                        cancel: false,
                    },
                ),
            )
        }
        Action::Timeout { complete, hang_ms } => {
            let done = if *complete {
                Some(work(
                    input,
                    Shape {
                        rule,
                        cancel: false,
                    },
                ))
            } else {
                unexecuted("timeout");
                None
            };
            let hang = Duration::from_millis(hang_ms.unwrap_or(gw.config().hang_ms));
            tokio::time::sleep(hang).await;
            match done {
                Some(result) => answer(gw, op, result),
                None => {
                    let body = serde_json::json!({ "message": "Endpoint request timed out" });
                    (StatusCode::GATEWAY_TIMEOUT, axum::Json(body)).into_response()
                }
            }
        }
        Action::Cancel => answer(gw, op, work(input, Shape { rule, cancel: true })),
        // webhook- and redirect-only actions never match an API operation (validated)
        _ => answer(
            gw,
            op,
            work(
                input,
                Shape {
                    rule,
                    cancel: false,
                },
            ),
        ),
    }
}

async fn grant(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let gw = &app.gateway;
    let user = header(&headers, "username");
    let pass = header(&headers, "password");
    scripted(
        &app,
        Operation::Grant,
        Subject::default(),
        Ok(()),
        |(), _| json(gw.grant(user, pass, &body)),
    )
    .await
}

async fn refresh(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let gw = &app.gateway;
    let user = header(&headers, "username");
    let pass = header(&headers, "password");
    scripted(
        &app,
        Operation::Refresh,
        Subject::default(),
        Ok(()),
        |(), _| json(gw.refresh(user, pass, &body)),
    )
    .await
}

fn authorize<'a>(gw: &Gateway, headers: &'a HeaderMap) -> Result<&'a str, Code> {
    gw.authorize(
        header(headers, "authorization"),
        header(headers, "x-app-key"),
    )
}

/// Authorises a call about one payment and reads its `paymentID`; returns the
/// app key, the payment ID and the payment's invoice (for selectors).
fn payment_call<'a>(
    gw: &Gateway,
    headers: &'a HeaderMap,
    body: &[u8],
) -> Result<(&'a str, String, Option<String>), Code> {
    let key = authorize(gw, headers)?;
    let id = Gateway::payment_id_of(body)?;
    let invoice = gw.invoice_of(&id);
    Ok((key, id, invoice))
}

/// The payment ID and invoice of a parsed payment call (empty if it did not parse).
fn payment_and_invoice(
    parsed: &Result<(&str, String, Option<String>), Code>,
) -> (String, Option<String>) {
    parsed
        .as_ref()
        .map(|(_, id, invoice)| (id.clone(), invoice.clone()))
        .unwrap_or_default()
}

async fn create(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let gw = &app.gateway;
    let parsed =
        authorize(gw, &headers).and_then(|key| Ok((key, Gateway::parse_create_with_url(&body)?)));
    let invoice = parsed
        .as_ref()
        .ok()
        .map(|(_, (req, _))| req.merchant_invoice_number.clone());
    let subject = Subject {
        payment_id: None,
        invoice: invoice.as_deref(),
    };
    scripted(
        &app,
        Operation::Create,
        subject,
        parsed,
        |(key, (req, callback)), shape| {
            let (payment_id, answer) = gw.create_serialized(key, req, &callback);
            if shape.cancel {
                gw.cancel(&payment_id);
            }
            Ok(answer)
        },
    )
    .await
}

async fn execute(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let gw = &app.gateway;
    let parsed = payment_call(gw, &headers, &body);
    let (id, invoice) = payment_and_invoice(&parsed);
    let subject = Subject {
        payment_id: Some(&id),
        invoice: invoice.as_deref(),
    };
    scripted(
        &app,
        Operation::Execute,
        subject,
        parsed,
        |(key, id, _), shape| {
            if shape.cancel && gw.payment_owned_by(key, &id) {
                gw.cancel(&id);
            }
            // the payment is copied for the webhook only when someone listens
            let (answer, payment) = gw.execute_serialized(
                key,
                &id,
                shape.rule.map(str::to_owned),
                app.webhooks.has_subscriptions(),
            )?;
            // the script sees every webhook (its call counts and `nth` hold),
            // subscribed or not; `id` and `invoice` are the executed payment's
            let webhook = gw.script().decide(
                Operation::Webhook,
                Subject {
                    payment_id: Some(&id),
                    invoice: invoice.as_deref(),
                },
            );
            if let Some(d) = &webhook {
                gw.record_fault(Operation::Webhook, &d.rule, &d.action, Some(&id));
            }
            if let Some(payment) = payment {
                app.webhooks.publish(&payment, webhook);
            }
            Ok(answer)
        },
    )
    .await
}

async fn status(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let gw = &app.gateway;
    let parsed = payment_call(gw, &headers, &body);
    let (id, invoice) = payment_and_invoice(&parsed);
    let subject = Subject {
        payment_id: Some(&id),
        invoice: invoice.as_deref(),
    };
    scripted(
        &app,
        Operation::Status,
        subject,
        parsed,
        |(key, id, _), _| json(gw.status(key, &id)),
    )
    .await
}

async fn search(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let gw = &app.gateway;
    let parsed = authorize(gw, &headers);
    scripted(
        &app,
        Operation::Search,
        Subject::default(),
        parsed,
        |key, _| json(gw.search(key, &body)),
    )
    .await
}

async fn refund(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let gw = &app.gateway;
    let parsed = payment_call(gw, &headers, &body);
    let id = parsed.as_ref().map(|(_, id, _)| id.clone()).ok();
    let subject = Subject {
        payment_id: id.as_deref(),
        invoice: None,
    };
    scripted(
        &app,
        Operation::Refund,
        subject,
        parsed,
        |(key, _, _), _| json(gw.refund(key, &body)),
    )
    .await
}
