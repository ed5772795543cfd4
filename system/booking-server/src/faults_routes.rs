//! The fault hooks' HTTP surface, present only when the instance is armed
//! (`[faults]`; 404 otherwise), on the admin listener under its guard like
//! every `/ops/` route ([`crate::admin::router`]):
//!
//! | method | path | body | answer |
//! | --- | --- | --- | --- |
//! | POST | `/ops/faults/start` | `{"started_unix_ms": <u64>}` | [`FaultsState`]; 400 for a body that is not that, or a start more than [`START_AHEAD_MAX_MS`] ahead |
//! | GET | `/ops/faults` | | [`FaultsState`] |
//!
//! The schedule's times count from `started_unix_ms` (Unix ms, the run's
//! start as the conductor took it); until the first start the injector is
//! dormant and nothing fires. A second start moves the origin (an instance
//! started again mid-run is told the run's start, not its own).
//!
//! `/metrics` gains `booking_faults_fired_total{fault="<name>"}`, one
//! series per fault of the schedule, from the injector's counts.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use booking::{Clock, SystemClock};
use faults::{FaultCount, FiredFault, Injector};
use serde::{Deserialize, Serialize};

use crate::admin::error;
use crate::build::Server;

/// Fired faults `GET /ops/faults` lists at most (the last ones).
pub const FIRED_SHOWN_MAX: usize = 1_000;
/// How far ahead of this machine's clock a start may be, ms: a start
/// further ahead is a mistake (seconds for milliseconds, another epoch).
pub const START_AHEAD_MAX_MS: u64 = 3_600_000;
/// The largest `/metrics` body the counter is added to, bytes.
pub const METRICS_BODY_MAX: usize = 16 * 1024 * 1024;

/// The body of `POST /ops/faults/start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    /// When the run started, Unix ms: the schedule's `start_ms` count from it.
    pub started_unix_ms: u64,
}

/// The answer of both routes: the instance's fault hooks now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultsState {
    /// The instance's label (`faults.instance`).
    pub instance: String,
    /// The run's start, Unix ms; `null` while dormant.
    pub started_unix_ms: Option<u64>,
    /// Every fault of the schedule, in order, with its totals (faults of
    /// other scopes, which the conductor carries out, stay at 0).
    pub counts: Vec<FaultCount>,
    /// The last [`FIRED_SHOWN_MAX`] fired faults at most, in firing order.
    pub fired: Vec<FiredFault>,
    /// Fired faults not in `fired` (older ones, and those past the
    /// injector's log): `fired.len() + dropped` is every fault that fired.
    pub dropped: u64,
}

impl FaultsState {
    /// The state of `injector`, labelled `instance`.
    pub fn of(injector: &Injector, instance: &str) -> FaultsState {
        let mut fired = injector.fired();
        let older = fired.len().saturating_sub(FIRED_SHOWN_MAX);
        fired.drain(..older);
        FaultsState {
            instance: instance.to_owned(),
            started_unix_ms: injector.started_at(),
            counts: injector.counts(),
            fired,
            dropped: injector.dropped() + older as u64,
        }
    }
}

/// The routes, when `server` is armed; none otherwise (404).
pub fn routes(server: Arc<Server>) -> Router {
    if server.faults.is_none() {
        return Router::new();
    }
    Router::new()
        .route("/ops/faults", get(state))
        .route("/ops/faults/start", post(start))
        .with_state(server)
}

/// `app` with the fired faults' counter added to its `/metrics`, when
/// `server` is armed; `app` untouched otherwise.
pub fn with_metrics(app: Router, server: &Server) -> Router {
    match &server.faults {
        Some(injector) => app.layer(middleware::from_fn_with_state(
            injector.clone(),
            add_fault_metrics,
        )),
        None => app,
    }
}

fn armed(server: &Server) -> Option<(&Arc<Injector>, &str)> {
    let injector = server.faults.as_ref()?;
    let label = server
        .config
        .faults
        .as_ref()
        .map_or("", |f| f.instance.as_str());
    Some((injector, label))
}

async fn state(State(server): State<Arc<Server>>) -> Response {
    match armed(&server) {
        Some((injector, label)) => Json(FaultsState::of(injector, label)).into_response(),
        None => error(StatusCode::NOT_FOUND, "no [faults] configured"),
    }
}

/// Why a start is refused, if it is: `now_ms` is this machine's clock.
pub fn check_start(body: &[u8], now_ms: u64) -> Result<StartRequest, String> {
    let req: StartRequest = serde_json::from_slice(body)
        .map_err(|e| format!("expected {{\"started_unix_ms\": <u64>}}: {e}"))?;
    let latest = now_ms.saturating_add(START_AHEAD_MAX_MS);
    if req.started_unix_ms > latest {
        return Err(format!(
            "started_unix_ms {} is more than {START_AHEAD_MAX_MS} ms ahead of this machine's \
             clock ({now_ms})",
            req.started_unix_ms
        ));
    }
    Ok(req)
}

async fn start(State(server): State<Arc<Server>>, body: Bytes) -> Response {
    let Some((injector, label)) = armed(&server) else {
        return error(StatusCode::NOT_FOUND, "no [faults] configured");
    };
    // the injector's clock is the system clock: the start is on it
    match check_start(&body, SystemClock.now_ms()) {
        Ok(req) => {
            injector.start_at(req.started_unix_ms);
            tracing::warn!(
                instance = label,
                started_unix_ms = req.started_unix_ms,
                "fault schedule started"
            );
            Json(FaultsState::of(injector, label)).into_response()
        }
        Err(why) => error(StatusCode::BAD_REQUEST, why),
    }
}

/// The counter family in OpenMetrics text (no `# EOF`).
pub fn render_counts(counts: &[FaultCount]) -> String {
    let mut out = String::from(
        "# HELP booking_faults_fired Injected faults that fired in this instance, by fault.\n\
         # TYPE booking_faults_fired counter\n",
    );
    for c in counts {
        out.push_str(&format!(
            "booking_faults_fired_total{{fault=\"{}\"}} {}\n",
            escape_label(&c.fault),
            c.fired
        ));
    }
    out
}

/// A label value as OpenMetrics writes it.
fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `family` added to an OpenMetrics `text`, before its `# EOF`.
pub fn add_family(text: &str, family: &str) -> String {
    match text.strip_suffix("# EOF\n") {
        Some(body) => format!("{body}{family}# EOF\n"),
        None => format!("{text}{family}"),
    }
}

async fn add_fault_metrics(
    State(injector): State<Arc<Injector>>,
    request: Request,
    next: Next,
) -> Response {
    if request.uri().path() != "/metrics" {
        return next.run(request).await;
    }
    let response = next.run(request).await;
    if !response.status().is_success() {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = match axum::body::to_bytes(body, METRICS_BODY_MAX).await {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, format!("metrics: {e}")),
    };
    let merged = add_family(&text, &render_counts(&injector.counts()));
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(merged))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn starts_are_json_with_one_field_and_not_far_ahead() {
        let now = 1_700_000_000_000;
        assert_eq!(
            check_start(br#"{"started_unix_ms": 1700000000000}"#, now),
            Ok(StartRequest {
                started_unix_ms: now
            })
        );
        let ahead = now + START_AHEAD_MAX_MS;
        assert!(check_start(format!(r#"{{"started_unix_ms": {ahead}}}"#).as_bytes(), now).is_ok());
        let too_far = check_start(
            format!(r#"{{"started_unix_ms": {}}}"#, ahead + 1).as_bytes(),
            now,
        )
        .unwrap_err();
        assert!(too_far.contains("ahead"), "{too_far}");
        // u64::MAX would be the injector's dormant mark
        assert!(
            check_start(
                format!(r#"{{"started_unix_ms": {}}}"#, u64::MAX).as_bytes(),
                now
            )
            .is_err()
        );
        for bad in [
            &b""[..],
            b"{}",
            br#"{"started_unix_ms": -1}"#,
            br#"{"started_unix_ms": "1"}"#,
            br#"{"started_unix_ms": 1, "more": 2}"#,
        ] {
            assert!(
                check_start(bad, now).is_err(),
                "{:?}",
                std::str::from_utf8(bad)
            );
        }
    }

    #[test]
    fn the_counter_goes_before_the_end_of_the_text_with_its_labels_escaped() {
        let count = |fault: &str, fired| FaultCount {
            fault: fault.into(),
            kind: "error".into(),
            target: faults::Target::Ledger,
            calls: fired,
            fired,
            resets_applied: 0,
            delayed_ms: 0,
        };
        let family = render_counts(&[count("ledger-down", 3), count("a\"b\\c", 0)]);
        let text = add_family(
            "# TYPE booking_holds counter\nbooking_holds_total 1\n# EOF\n",
            &family,
        );
        assert_eq!(
            text,
            "# TYPE booking_holds counter\nbooking_holds_total 1\n\
             # HELP booking_faults_fired Injected faults that fired in this instance, by fault.\n\
             # TYPE booking_faults_fired counter\n\
             booking_faults_fired_total{fault=\"ledger-down\"} 3\n\
             booking_faults_fired_total{fault=\"a\\\"b\\\\c\"} 0\n\
             # EOF\n"
        );
        assert_eq!(add_family("x 1\n", "y 2\n"), "x 1\ny 2\n");
    }
}
