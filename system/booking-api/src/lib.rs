//! The booking system's HTTP API (axum on hyper).
//!
//! - [`stack`]: the ports and settings every handler shares (from
//!   `booking_service`).
//! - [`bookings`]: `POST /bookings`, the request path (admit → create payment →
//!   keep the copy → enqueue → respond; undo before answering on failure), plus
//!   `GET /status.json`, `/healthz`, `/readyz`, `/metrics`, `/openapi.json`.
//! - [`status_page`]: `GET /status`, the static page that shows
//!   `status.json` (also uploaded beside it on S3), and its rule
//!   ([`status_page::shown`]).
//! - [`drain`]: draining on the way out (SIGTERM): `POST /bookings` refused
//!   with `503` + `Retry-After`, `/readyz` `503`.
//! - [`candidate_auth`]: signed candidates (off unless configured): the
//!   token a request in a candidate's name must carry, `401` without it.
//! - [`confirm_paths`]: `GET /payment/callback` (confirm path 1) and
//!   `POST /payment/webhook` (confirm path 2, SNS-verified), the HTTP mapping
//!   of `booking_service::callback` and `booking_service::webhook`.
//! - [`sns_delivery`]: SNS verification (allowlists, certificate cache) and
//!   safe subscription confirmation.

pub mod answers;
pub mod bookings;
pub mod candidate_auth;
pub mod confirm_paths;
pub mod deadline;
pub mod drain;
pub mod info;
pub mod metrics;
pub mod openapi;
pub mod sns_delivery;
pub mod stack;
pub mod status_page;
pub mod status_poker;

use std::sync::Arc;

pub use stack::{Stack, WebhookTrust};

/// Every route of the API. The bookings routes enforce the request deadline
/// themselves (they must undo before answering); the confirm paths run their
/// work in a task of its own, so the deadline layer may drop their answer at
/// any point without leaving anything half done.
pub fn router(stack: Arc<Stack>) -> axum::Router {
    router_with(stack, Arc::new(bookings::ApiState::new()))
}

/// [`router`] counting into `state`: the caller keeps a handle on the
/// metrics (to add the background services' figures with
/// [`metrics::ApiMetrics::sync_services`]).
pub fn router_with(stack: Arc<Stack>, state: Arc<bookings::ApiState>) -> axum::Router {
    let confirm = confirm_paths::routes_with(state.clone()).layer(
        axum::middleware::from_fn_with_state(stack.clone(), deadline::request_deadline),
    );
    axum::Router::new()
        .merge(bookings::routes_with(state))
        .merge(confirm)
        .with_state(stack)
}
