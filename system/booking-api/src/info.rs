//! The routes that show the instance rather than change the sale:
//! `GET /status.json`, `/healthz`, `/metrics` and `/openapi.json`.

use std::sync::{Arc, LazyLock};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use booking::SaleId;
use booking::status::StatusDocument;
use serde::{Deserialize, Serialize};

use crate::answers::{self, busy};
use crate::bookings::ApiState;
use crate::{Stack, openapi};

/// The status document: the latest written, or built from the counters if
/// none has been written yet.
pub(crate) async fn status_json(
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

pub(crate) async fn healthz(State(stack): State<Arc<Stack>>) -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        sale: stack.sale.clone(),
    })
}

pub(crate) async fn metrics(
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

pub(crate) async fn openapi_json() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        OPENAPI.clone(),
    )
        .into_response()
}
