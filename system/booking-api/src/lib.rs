//! The booking system's HTTP API (axum on hyper).
//!
//! - [`stack`]: the ports and settings every handler shares; [`BookingCopy`].
//! - [`bookings`]: `POST /bookings`, the request path (admit → create payment →
//!   keep the copy → enqueue → respond; undo before answering on failure), plus
//!   `GET /status.json`, `/healthz`, `/metrics`, `/openapi.json`.
//! - [`confirm_paths`]: `GET /payment/callback` (confirm path 1) and
//!   `POST /payment/webhook` (confirm path 2, SNS-verified).

pub mod bookings;
pub mod confirm_paths;
pub mod stack;

use std::sync::Arc;

pub use stack::{BookingCopy, Stack, WebhookTrust};

/// Every route of the API.
pub fn router(stack: Arc<Stack>) -> axum::Router {
    axum::Router::new()
        .merge(bookings::routes())
        .merge(confirm_paths::routes())
        .with_state(stack)
}
