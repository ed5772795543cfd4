//! The verdicts on a run's load figures, held to a bound: one definition
//! for the rehearsal (`scenarios::thresholds` passes its profile's bounds)
//! and for `reports merge` (which judges the merged figures again, against
//! the whole run's bounds the shards wrote down).
//!
//! | name | figure | passes when |
//! |---|---|---|
//! | `rush_rate` | bookings started per second during the rush | at least the bound |
//! | `booking_p99_ms` | p99 booking latency from the intended start | at most the bound |
//! | `queue_age_max_ms` | oldest queued message seen during the run | at most the bound |
//! | `server_error_pct` | 5xx or unanswered, % of requests | at most the bound |
//! | `approved_payers_told_paid` | redirects of payers who approved at the checkout answered `not_paid` | at most 0 |

use std::time::Duration;

use crate::model::{LoadFigures, Verdict};

/// The name of the rush-rate threshold.
pub const RUSH_RATE: &str = "rush_rate";
/// The name of the booking-latency threshold.
pub const BOOKING_P99: &str = "booking_p99_ms";
/// The name of the queue-age threshold.
pub const QUEUE_AGE: &str = "queue_age_max_ms";
/// The name of the server-error threshold.
pub const SERVER_ERRORS: &str = "server_error_pct";
/// The name of the client-side check on approved payers' redirects.
pub const APPROVED_TOLD_PAID: &str = "approved_payers_told_paid";
/// The booking transaction's name in the load figures.
pub const BOOKING_TRANSACTION: &str = "booking";

/// The rush's achieved rate: `started` arrivals whose starts spanned
/// `first..=last`, at an intended spacing of `1 / target` s. A punctual rush
/// achieves exactly `target`: `n / ((n - 1) / target + 1 / target)`.
pub fn achieved_rate(started: u64, span: Duration, target: f64) -> f64 {
    if started == 0 || target <= 0.0 {
        return 0.0;
    }
    started as f64 / (span.as_secs_f64() + 1.0 / target)
}

/// `rush_rate`: the achieved rush rate against its floor.
pub fn rush_rate(load: &LoadFigures, min: f64) -> Verdict {
    Verdict::at_least(
        RUSH_RATE,
        load.achieved_rate,
        min,
        "bookings/s",
        format!(
            "target {:.0}/s; {} arrivals scheduled, {} started, {} late, {} dropped",
            load.target_rate,
            load.arrivals_scheduled,
            load.arrivals_started,
            load.arrivals_late,
            load.arrivals_dropped
        ),
    )
}

/// `booking_p99_ms`: the booking transaction's p99 against its ceiling; a
/// run that measured no booking fails it.
pub fn booking_p99(load: &LoadFigures, max: f64) -> Verdict {
    match load
        .transactions
        .iter()
        .find(|t| t.name == BOOKING_TRANSACTION && t.count > 0)
    {
        Some(t) => Verdict::at_most(
            BOOKING_P99,
            t.p99_ms,
            max,
            "ms",
            format!(
                "{} bookings: p50 {:.1} ms, p99.9 {:.1} ms, max {:.1} ms",
                t.count, t.p50_ms, t.p999_ms, t.max_ms
            ),
        ),
        None => Verdict {
            passed: false,
            ..Verdict::at_most(
                BOOKING_P99,
                0.0,
                max,
                "ms",
                "no booking was measured".to_owned(),
            )
        },
    }
}

/// `queue_age_max_ms`: the oldest queued message seen, against its ceiling.
pub fn queue_age(max_ms: u64, samples: u64, bound: f64) -> Verdict {
    Verdict::at_most(
        QUEUE_AGE,
        max_ms as f64,
        bound,
        "ms",
        format!("{samples} samples"),
    )
}

/// Server errors as a percentage of requests (0 with no requests).
pub fn error_pct(requests: u64, server_errors: u64) -> f64 {
    if requests == 0 {
        0.0
    } else {
        server_errors as f64 * 100.0 / requests as f64
    }
}

/// `server_error_pct`: 5xx and unanswered requests against their ceiling.
pub fn server_errors(load: &LoadFigures, max_pct: f64) -> Verdict {
    Verdict::at_most(
        SERVER_ERRORS,
        error_pct(load.requests, load.server_errors),
        max_pct,
        "%",
        format!("{} of {} requests", load.server_errors, load.requests),
    )
}

/// `approved_payers_told_paid`: no payer who approved at the checkout was
/// answered `not_paid` on the redirect (whatever `status` the redirect
/// claimed: the system asks the gateway, never the browser). A late payer is
/// told `expired`, a concurrent tab `processing`; `not_paid` after an
/// approval means the seat was given up on the redirect's word.
pub fn approved_payers_told_paid(told_not_paid: u64) -> Verdict {
    Verdict::at_most(
        APPROVED_TOLD_PAID,
        told_not_paid as f64,
        0.0,
        "count",
        format!("{told_not_paid} approved payers' redirects answered not_paid"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_punctual_rush_achieves_its_target() {
        // 2,000 arrivals at 1,000/s: the last starts 1.999 s after the first
        let r = achieved_rate(2_000, Duration::from_micros(1_999_000), 1_000.0);
        assert!((r - 1_000.0).abs() < 1e-6, "{r}");
        // the same arrivals stretched over 4 s
        let slow = achieved_rate(2_000, Duration::from_secs(4), 1_000.0);
        assert!((slow - 2_000.0 / 4.001).abs() < 1e-6, "{slow}");
        assert_eq!(achieved_rate(0, Duration::ZERO, 1_000.0), 0.0);
    }

    #[test]
    fn approved_payers_told_not_paid_fail_it() {
        assert!(approved_payers_told_paid(0).passed);
        let v = approved_payers_told_paid(2);
        assert!(!v.passed);
        assert_eq!((v.name.as_str(), v.figure), (APPROVED_TOLD_PAID, 2.0));
    }
}
