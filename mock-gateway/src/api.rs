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
use crate::gateway::{Gateway, error_answer};
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

/// A bKash answer: HTTP 200 and JSON, success or not.
fn answer(gateway: &Gateway, op: Operation, result: Result<Value, Code>) -> Response {
    let body = match result {
        Ok(v) => v,
        Err(code) => {
            gateway.metrics.refused(op, code);
            error_answer(code)
        }
    };
    (StatusCode::OK, axum::Json(body)).into_response()
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
async fn scripted(
    app: &App,
    op: Operation,
    subject: Subject<'_>,
    work: impl FnOnce(Shape<'_>) -> Result<Value, Code>,
) -> Response {
    let gw = &app.gateway;
    gw.metrics.call(op);
    let Some(mut decision) = gw.script().decide(op, subject) else {
        return answer(gw, op, work(Shape::default()));
    };
    gw.record_fault(op, &decision.rule, &decision.action, subject.payment_id);
    let rule = Some(decision.rule.as_str());
    match &decision.action {
        Action::Fail(Failure::Code(c)) => {
            answer(gw, op, Err(Code::parse(c).unwrap_or(Code::ProcessFailed)))
        }
        Action::Fail(Failure::Http(s)) => {
            let status = StatusCode::from_u16(*s).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
            (
                status,
                axum::Json(serde_json::json!({ "message": status.canonical_reason() })),
            )
                .into_response()
        }
        Action::Fail(Failure::Reset) => reset_response(),
        Action::Delay(latency) => {
            let wait = latency.sample(&mut decision.rng);
            tokio::time::sleep(wait).await;
            answer(
                gw,
                op,
                work(Shape {
                    rule,
                    cancel: false,
                }),
            )
        }
        Action::Timeout { complete, hang_ms } => {
            let done = complete.then(|| {
                work(Shape {
                    rule,
                    cancel: false,
                })
            });
            tokio::time::sleep(Duration::from_millis(
                hang_ms.unwrap_or(gw.config().hang_ms),
            ))
            .await;
            match done {
                Some(result) => answer(gw, op, result),
                None => (
                    StatusCode::GATEWAY_TIMEOUT,
                    axum::Json(serde_json::json!({ "message": "Endpoint request timed out" })),
                )
                    .into_response(),
            }
        }
        Action::Cancel => answer(gw, op, work(Shape { rule, cancel: true })),
        // webhook- and redirect-only actions never match an API operation (validated)
        _ => answer(
            gw,
            op,
            work(Shape {
                rule,
                cancel: false,
            }),
        ),
    }
}

async fn grant(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let gw = &app.gateway;
    scripted(&app, Operation::Grant, Subject::default(), |_| {
        gw.grant(
            header(&headers, "username"),
            header(&headers, "password"),
            &body,
        )
    })
    .await
}

async fn refresh(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let gw = &app.gateway;
    scripted(&app, Operation::Refresh, Subject::default(), |_| {
        gw.refresh(
            header(&headers, "username"),
            header(&headers, "password"),
            &body,
        )
    })
    .await
}

fn authorize<'a>(gw: &Gateway, headers: &'a HeaderMap) -> Result<&'a str, Code> {
    gw.authorize(
        header(headers, "authorization"),
        header(headers, "x-app-key"),
    )
}

async fn create(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let gw = &app.gateway;
    let parsed = authorize(gw, &headers).and_then(|key| Ok((key, Gateway::parse_create(&body)?)));
    let invoice = parsed
        .as_ref()
        .ok()
        .map(|(_, req)| req.merchant_invoice_number.clone());
    let subject = Subject {
        payment_id: None,
        invoice: invoice.as_deref(),
    };
    scripted(&app, Operation::Create, subject, |shape| {
        let (key, req) = parsed?;
        let payment = gw.create(key, req);
        if shape.cancel {
            gw.cancel(&payment.payment_id);
        }
        Ok(gw.create_answer(&payment))
    })
    .await
}

async fn execute(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let gw = &app.gateway;
    let parsed = authorize(gw, &headers).and_then(|key| Ok((key, Gateway::payment_id_of(&body)?)));
    let payment_id = parsed.as_ref().ok().map(|(_, id)| id.clone());
    let invoice = payment_id.as_deref().and_then(|id| gw.invoice_of(id));
    let subject = Subject {
        payment_id: payment_id.as_deref(),
        invoice: invoice.as_deref(),
    };
    scripted(&app, Operation::Execute, subject, |shape| {
        let (key, id) = parsed?;
        if shape.cancel {
            gw.cancel(&id);
        }
        let (answer, payment) = gw.execute(key, &id, shape.rule.map(str::to_owned))?;
        let webhook = gw.script().decide(
            Operation::Webhook,
            Subject {
                payment_id: Some(&payment.payment_id),
                invoice: Some(&payment.merchant_invoice_number),
            },
        );
        if let Some(d) = &webhook {
            gw.record_fault(
                Operation::Webhook,
                &d.rule,
                &d.action,
                Some(&payment.payment_id),
            );
        }
        app.webhooks.publish(&payment, webhook);
        Ok(answer)
    })
    .await
}

async fn status(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let gw = &app.gateway;
    let parsed = authorize(gw, &headers).and_then(|key| Ok((key, Gateway::payment_id_of(&body)?)));
    let payment_id = parsed.as_ref().ok().map(|(_, id)| id.clone());
    let invoice = payment_id.as_deref().and_then(|id| gw.invoice_of(id));
    let subject = Subject {
        payment_id: payment_id.as_deref(),
        invoice: invoice.as_deref(),
    };
    scripted(&app, Operation::Status, subject, |_| {
        let (key, id) = parsed?;
        gw.status(key, &id)
    })
    .await
}

async fn search(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let gw = &app.gateway;
    scripted(&app, Operation::Search, Subject::default(), |_| {
        gw.search(authorize(gw, &headers)?, &body)
    })
    .await
}

async fn refund(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let gw = &app.gateway;
    let payment_id = Gateway::payment_id_of(&body).ok();
    let subject = Subject {
        payment_id: payment_id.as_deref(),
        invoice: None,
    };
    scripted(&app, Operation::Refund, subject, |_| {
        gw.refund(authorize(gw, &headers)?, &body)
    })
    .await
}
