//! The control API under `/__mock/`, the SNS endpoints (`/?Action=…`, the signing
//! certificate) and `/metrics`.
//!
//! | method | path | what |
//! |---|---|---|
//! | GET | `/__mock/rules` | the live script |
//! | PUT | `/__mock/rules` | replace the script (JSON, or TOML with `content-type: application/toml`) |
//! | POST | `/__mock/rules` | append one rule (JSON) |
//! | DELETE | `/__mock/rules` | no rules |
//! | GET | `/__mock/ledger` | ground truth: payments, execute calls, payer actions, webhook deliveries, faults |
//! | GET | `/__mock/ledger/payments/{id}` | one payment |
//! | GET | `/__mock/stats` | counters as JSON |
//! | POST | `/__mock/reset` | forget payments, tokens, grants, deliveries, faults, rules |
//! | GET/POST | `/__mock/subscriptions` | list; add `{"endpoint": url}` (a confirmation is sent) |
//! | POST | `/__mock/subscriptions/request-confirmation` | resend confirmations to unconfirmed endpoints |

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;

use crate::App;
use crate::script::{Rule, ScriptSpec};
use crate::webhooks::{ATTACKER_CERT_PATH, CERT_PATH};

/// The control, SNS and metrics routes.
pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route(
            "/__mock/rules",
            get(get_rules)
                .put(put_rules)
                .post(add_rule)
                .delete(clear_rules),
        )
        .route("/__mock/ledger", get(ledger))
        .route("/__mock/ledger/payments/{id}", get(ledger_payment))
        .route("/__mock/stats", get(stats))
        .route("/__mock/reset", post(reset))
        .route("/__mock/subscriptions", get(subscriptions).post(subscribe))
        .route(
            "/__mock/subscriptions/request-confirmation",
            post(request_confirmation),
        )
        .route(ATTACKER_CERT_PATH, get(attacker_cert))
        .route(CERT_PATH, get(cert))
        .route("/", get(sns_action))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        // ready whenever it serves: the mock has no warm-up and no drain
        .route("/readyz", get(|| async { "ready" }))
}

fn bad_request(why: impl std::fmt::Display) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({ "error": why.to_string() })),
    )
        .into_response()
}

async fn get_rules(State(app): State<Arc<App>>) -> Json<ScriptSpec> {
    Json(app.gateway.script().spec())
}

async fn put_rules(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let is_toml = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("toml"));
    let spec = if is_toml {
        match std::str::from_utf8(&body)
            .map_err(|e| e.to_string())
            .and_then(|t| ScriptSpec::from_toml(t).map_err(|e| e.to_string()))
        {
            Ok(s) => s,
            Err(e) => return bad_request(e),
        }
    } else {
        match serde_json::from_slice::<ScriptSpec>(&body) {
            Ok(s) => s,
            Err(e) => return bad_request(format!("script does not parse: {e}")),
        }
    };
    match app.gateway.set_script(spec) {
        Ok(()) => Json(app.gateway.script().spec()).into_response(),
        Err(e) => bad_request(e),
    }
}

async fn add_rule(State(app): State<Arc<App>>, body: Bytes) -> Response {
    let rule: Rule = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(format!("rule does not parse: {e}")),
    };
    match app.gateway.add_rule(rule) {
        Ok(()) => Json(app.gateway.script().spec()).into_response(),
        Err(e) => bad_request(e),
    }
}

async fn clear_rules(State(app): State<Arc<App>>) -> Response {
    let seed = app.gateway.script().spec().seed;
    match app.gateway.set_script(ScriptSpec {
        seed,
        rules: Vec::new(),
    }) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => bad_request(e),
    }
}

async fn ledger(State(app): State<Arc<App>>) -> Json<serde_json::Value> {
    Json(json!({
        "payments": app.gateway.payments(),
        "webhooks": app.webhooks.log(),
        "subscriptions": app.webhooks.subscriptions(),
        "faults": app.gateway.faults(),
        "grants_in_window": app.gateway.grants_in_window_json(),
    }))
}

async fn ledger_payment(State(app): State<Arc<App>>, Path(id): Path<String>) -> Response {
    match app.gateway.payment(&id) {
        Some(p) => Json(p).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({ "error": format!("no payment {id}") })),
        )
            .into_response(),
    }
}

async fn stats(State(app): State<Arc<App>>) -> Json<serde_json::Value> {
    let mut v = app.gateway.metrics.json();
    if let Some(o) = v.as_object_mut() {
        o.insert("payments".into(), app.gateway.state_counts());
        o.insert(
            "grants_in_window".into(),
            app.gateway.grants_in_window_json(),
        );
        o.insert(
            "rules_fired".into(),
            json!(
                app.gateway
                    .script()
                    .fired()
                    .into_iter()
                    .collect::<HashMap<_, _>>()
            ),
        );
    }
    Json(v)
}

async fn reset(State(app): State<Arc<App>>) -> StatusCode {
    app.gateway.reset();
    app.webhooks.clear_log();
    tracing::info!("gateway reset");
    StatusCode::NO_CONTENT
}

async fn subscriptions(State(app): State<Arc<App>>) -> Json<serde_json::Value> {
    Json(json!(app.webhooks.subscriptions()))
}

#[derive(Debug, Deserialize)]
struct NewSubscription {
    endpoint: String,
}

async fn subscribe(State(app): State<Arc<App>>, body: Bytes) -> Response {
    let Ok(req) = serde_json::from_slice::<NewSubscription>(&body) else {
        return bad_request("expected {\"endpoint\": \"http://…\"}");
    };
    match url::Url::parse(&req.endpoint) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => {}
        _ => return bad_request(format!("endpoint {:?} is not an http(s) URL", req.endpoint)),
    }
    let sub = app.webhooks.add_subscription(&req.endpoint);
    app.webhooks.request_confirmations();
    (StatusCode::CREATED, Json(json!(sub))).into_response()
}

async fn request_confirmation(State(app): State<Arc<App>>) -> StatusCode {
    app.webhooks.request_confirmations();
    StatusCode::ACCEPTED
}

async fn cert(State(app): State<Arc<App>>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/x-pem-file")],
        app.webhooks.cert_pem().to_owned(),
    )
        .into_response()
}

async fn attacker_cert(State(app): State<Arc<App>>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/x-pem-file")],
        app.webhooks.attacker_cert_pem().to_owned(),
    )
        .into_response()
}

fn sns_xml(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "text/xml")], body).into_response()
}

fn sns_error(code: &str, message: &str) -> Response {
    sns_xml(
        StatusCode::BAD_REQUEST,
        format!(
            "<ErrorResponse xmlns=\"http://sns.amazonaws.com/doc/2010-03-31/\"><Error><Type>Sender</Type><Code>{code}</Code><Message>{message}</Message></Error></ErrorResponse>"
        ),
    )
}

/// SNS's query API, the part a subscriber uses: `ConfirmSubscription` (the
/// `SubscribeURL`) and `Unsubscribe` (the `UnsubscribeURL`).
async fn sns_action(
    State(app): State<Arc<App>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    match q.get("Action").map(String::as_str) {
        Some("ConfirmSubscription") => {
            let (Some(topic), Some(token)) = (q.get("TopicArn"), q.get("Token")) else {
                return sns_error("InvalidParameter", "TopicArn and Token are required");
            };
            match app.webhooks.confirm(topic, token) {
                Some(arn) => sns_xml(
                    StatusCode::OK,
                    format!(
                        "<ConfirmSubscriptionResponse xmlns=\"http://sns.amazonaws.com/doc/2010-03-31/\"><ConfirmSubscriptionResult><SubscriptionArn>{arn}</SubscriptionArn></ConfirmSubscriptionResult></ConfirmSubscriptionResponse>"
                    ),
                ),
                None => sns_error("InvalidParameter", "Invalid token"),
            }
        }
        Some("Unsubscribe") => {
            let Some(arn) = q.get("SubscriptionArn") else {
                return sns_error("InvalidParameter", "SubscriptionArn is required");
            };
            if app.webhooks.unsubscribe(arn) {
                sns_xml(
                    StatusCode::OK,
                    "<UnsubscribeResponse xmlns=\"http://sns.amazonaws.com/doc/2010-03-31/\"/>"
                        .into(),
                )
            } else {
                sns_error("NotFound", "Subscription does not exist")
            }
        }
        _ => (
            StatusCode::OK,
            "mock-gateway: bKash Tokenized Checkout v1.2.0-beta (mock); see /__mock/stats\n",
        )
            .into_response(),
    }
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        app.gateway.metrics.prometheus(),
    )
        .into_response()
}
