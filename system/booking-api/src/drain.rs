//! Draining: an instance that has been asked to stop (SIGTERM) stops taking
//! new sales at once while it finishes what it is doing.
//!
//! - `POST /bookings` answers `503 draining` with `Retry-After` and
//!   `Connection: close` ([`refusal`]): nothing was done, so a load balancer
//!   or client retries it on another instance, and the client's connection
//!   to this one is not reused.
//! - `GET /readyz` answers `503` ([`readyz`]), so the load balancer stops
//!   sending traffic here; `/healthz` stays `200` (the process is alive and
//!   must not be restarted while it drains).
//! - The confirm paths (`/payment/callback`, `/payment/webhook`) are still
//!   served: they settle bookings already held (a refused webhook would only
//!   wait for SNS's retry, a refused callback would send a payer to an error
//!   page), and each is one bounded step.
//!
//! The flag only goes one way: once draining, always draining (the process
//! is on its way out). Who sets it and what follows (the wait, the bound on
//! requests in flight, the loops' stop) is `booking-server`'s `run`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Extension;
use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::answers;
use crate::bookings::ApiState;

/// The error code of a request refused while draining.
pub const DRAINING: &str = "draining";

/// Whether this instance is draining.
#[derive(Debug, Default)]
pub struct Drain {
    draining: AtomicBool,
}

impl Drain {
    /// Starts draining; whether this call started it (false: it was
    /// already draining).
    pub fn start(&self) -> bool {
        !self.draining.swap(true, Ordering::SeqCst)
    }

    /// Whether the instance is draining.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }
}

/// The body of `GET /readyz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Readiness {
    /// Whether the instance takes traffic.
    pub ready: bool,
    /// `ready` or `draining`.
    pub status: String,
}

/// What `/readyz` answers for a drain state (pure): `200 ready`, or `503
/// draining`.
pub fn readiness(draining: bool) -> (StatusCode, Readiness) {
    if draining {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Readiness {
                ready: false,
                status: DRAINING.into(),
            },
        )
    } else {
        (
            StatusCode::OK,
            Readiness {
                ready: true,
                status: "ready".into(),
            },
        )
    }
}

/// `GET /readyz`: `200` while the instance takes traffic, `503` once it
/// drains. Touches no backend, like `/healthz`.
pub(crate) async fn readyz(Extension(api): Extension<Arc<ApiState>>) -> Response {
    let (status, body) = readiness(api.drain.is_draining());
    let mut response = (status, Json(body)).into_response();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        response.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(answers::RETRY_AFTER_S),
        );
    }
    response
}

/// The answer to a sale-changing request while draining: `503 draining`
/// with `Retry-After` and `Connection: close`.
pub fn refusal() -> Response {
    let mut response = answers::error(
        StatusCode::SERVICE_UNAVAILABLE,
        DRAINING,
        "this instance is shutting down; nothing was done: retry on another instance",
    );
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_goes_one_way_and_only_the_first_start_starts_it() {
        let d = Drain::default();
        assert!(!d.is_draining());
        assert!(d.start());
        assert!(d.is_draining());
        assert!(!d.start());
        assert!(d.is_draining());
    }

    #[test]
    fn readiness_is_200_until_draining_then_503() {
        let (s, b) = readiness(false);
        assert_eq!(s, StatusCode::OK);
        assert!(b.ready);
        let (s, b) = readiness(true);
        assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
        assert!(!b.ready);
        assert_eq!(b.status, DRAINING);
    }

    #[test]
    fn the_refusal_says_retry_elsewhere_and_closes_the_connection() {
        let r = refusal();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            r.headers().get(header::RETRY_AFTER),
            Some(&HeaderValue::from(answers::RETRY_AFTER_S))
        );
        assert_eq!(
            r.headers().get(header::CONNECTION),
            Some(&HeaderValue::from_static("close"))
        );
    }
}
