//! Latency recorders (HDR histograms, microseconds) and the live counters
//! the driver reads once a second.
//!
//! A [`Recorder`] is a few histograms behind their own locks; each goose
//! user records into the shard of its own number, so two users rarely touch
//! the same lock, and [`Recorder::merged`] adds the shards at the end. A
//! record is one uncontended lock and one histogram increment.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use parking_lot::Mutex;

/// Shards of a [`Recorder`].
pub const SHARDS: usize = 8;

/// The histograms (µs), their bounds, and the report's figures of one, as
/// the reports crate defines them (a merge of shards' reports reads them
/// back the same way); the achieved rate likewise.
pub use reports::hdr::{LATENCY_US_MAX, SIGNIFICANT_FIGURES, figures, histogram};
pub use reports::verdicts::achieved_rate;

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

/// One transaction's latencies and error count, sharded by user.
#[derive(Debug)]
pub struct Recorder {
    name: &'static str,
    shards: Vec<Mutex<Histogram<u64>>>,
    errors: AtomicU64,
}

impl Recorder {
    /// An empty recorder for the transaction `name`.
    pub fn new(name: &'static str) -> Recorder {
        Recorder {
            name,
            shards: (0..SHARDS).map(|_| Mutex::new(histogram())).collect(),
            errors: AtomicU64::new(0),
        }
    }

    /// Records one completion `latency` after its intended start, by the
    /// user numbered `user`; `error` if it failed.
    pub fn record(&self, user: usize, latency: Duration, error: bool) {
        self.shards[user % SHARDS]
            .lock()
            .saturating_record(micros(latency));
        if error {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Every shard added up.
    pub fn merged(&self) -> Histogram<u64> {
        let mut all = histogram();
        for shard in &self.shards {
            // same bounds: adding cannot fail
            let _ = all.add(&*shard.lock());
        }
        all
    }

    /// The report's figures.
    pub fn figures(&self) -> reports::TransactionFigures {
        figures(
            self.name,
            &self.merged(),
            self.errors.load(Ordering::Relaxed),
        )
    }
}

/// Figures since the previous [`LiveStats::take_interval`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct IntervalStats {
    /// Arrivals started per second.
    pub bookings_per_s: f64,
    /// HTTP requests per second, all transactions.
    pub requests_per_s: f64,
    /// Booking latency (from intended start), 50th percentile, ms.
    pub p50_ms: f64,
    /// Booking latency, 99th percentile, ms.
    pub p99_ms: f64,
}

#[derive(Debug)]
struct IntervalMark {
    at: Instant,
    arrivals_started: u64,
    requests: u64,
}

/// Counters shared with the driver, which reads them while the load runs.
/// Everything is cumulative since [`run`](super::run) started except what
/// [`LiveStats::take_interval`] returns.
#[derive(Debug)]
pub struct LiveStats {
    /// Arrivals whose booking was sent.
    pub arrivals_started: AtomicU64,
    /// Bookings answered `201` (first attempts and retries).
    pub bookings_ok: AtomicU64,
    /// Answers `5xx`, and requests not answered at all.
    pub server_errors: AtomicU64,
    /// HTTP requests sent, all transactions.
    pub requests: AtomicU64,
    /// Redirects after paying delivered to the merchant and answered `200`.
    pub paid_redirects_delivered: AtomicU64,
    /// Requests sent and not yet answered.
    pub in_flight: AtomicU64,
    /// Connection errors (refused, or dropped before an answer): an
    /// instance gone. Counted apart from [`LiveStats::server_errors`].
    pub connection_errors: AtomicU64,
    connection_error_at: Mutex<Vec<Instant>>,
    /// Each server error's request: when it was sent, when it failed.
    server_error_at: Mutex<Vec<(Instant, Instant)>>,
    refused: Mutex<BTreeMap<String, u64>>,
    interval: Mutex<Histogram<u64>>,
    mark: Mutex<IntervalMark>,
}

impl Default for LiveStats {
    fn default() -> LiveStats {
        LiveStats {
            arrivals_started: AtomicU64::new(0),
            bookings_ok: AtomicU64::new(0),
            server_errors: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            paid_redirects_delivered: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            connection_errors: AtomicU64::new(0),
            connection_error_at: Mutex::new(Vec::new()),
            server_error_at: Mutex::new(Vec::new()),
            refused: Mutex::new(BTreeMap::new()),
            interval: Mutex::new(histogram()),
            mark: Mutex::new(IntervalMark {
                at: Instant::now(),
                arrivals_started: 0,
                requests: 0,
            }),
        }
    }
}

impl LiveStats {
    /// Fresh counters.
    pub fn new() -> LiveStats {
        LiveStats::default()
    }

    /// Bookings refused so far, by the API's error code (`level_full`, …).
    pub fn bookings_refused(&self) -> BTreeMap<String, u64> {
        self.refused.lock().clone()
    }

    /// Counts a refusal with `code`.
    pub fn refuse(&self, code: &str) {
        let mut refused = self.refused.lock();
        match refused.get_mut(code) {
            Some(n) => *n += 1,
            None => {
                refused.insert(code.to_owned(), 1);
            }
        }
    }

    /// Records a booking's latency (from its intended start) for the
    /// interval figures.
    pub fn record_booking(&self, latency: Duration) {
        self.interval.lock().saturating_record(micros(latency));
    }

    /// A request was sent.
    pub fn request_sent(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// A request sent at `sent` was answered (`status`) or failed (`None`).
    pub fn request_done(&self, status: Option<u16>, sent: Instant) {
        // never below zero: every done follows its sent
        let _ = self
            .in_flight
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        if status.is_none_or(|s| s >= 500) {
            self.server_errors.fetch_add(1, Ordering::Relaxed);
            self.server_error_at.lock().push((sent, Instant::now()));
        }
    }

    /// Each server error (5xx or no answer), in order: when its request was
    /// sent and when the error was seen. A request sent into a fault can
    /// fail long after it (an unanswered one at the client's timeout).
    pub fn server_error_spans(&self) -> Vec<(Instant, Instant)> {
        self.server_error_at.lock().clone()
    }

    /// A request failed with a connection error (counted as such, not as a
    /// server error).
    pub fn request_failed_to_connect(&self) {
        let _ = self
            .in_flight
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        self.connection_error();
    }

    /// A connection error seen now (also when no instance was live to send
    /// the request to).
    pub fn connection_error(&self) {
        self.connection_errors.fetch_add(1, Ordering::Relaxed);
        self.connection_error_at.lock().push(Instant::now());
    }

    /// When each connection error was seen, in order.
    pub fn connection_error_times(&self) -> Vec<Instant> {
        self.connection_error_at.lock().clone()
    }

    /// The figures since the previous call (or since these stats were made),
    /// and starts a new interval.
    pub fn take_interval(&self) -> IntervalStats {
        self.take_interval_with_histogram().0
    }

    /// [`LiveStats::take_interval`], and the interval's booking latencies
    /// (µs) themselves.
    pub fn take_interval_with_histogram(&self) -> (IntervalStats, Histogram<u64>) {
        let now = Instant::now();
        let arrivals = self.arrivals_started.load(Ordering::Relaxed);
        let requests = self.requests.load(Ordering::Relaxed);
        let (secs, d_arrivals, d_requests) = {
            let mut mark = self.mark.lock();
            let secs = now.duration_since(mark.at).as_secs_f64();
            let d = (
                secs,
                arrivals.saturating_sub(mark.arrivals_started),
                requests.saturating_sub(mark.requests),
            );
            *mark = IntervalMark {
                at: now,
                arrivals_started: arrivals,
                requests,
            };
            d
        };
        let h = std::mem::replace(&mut *self.interval.lock(), histogram());
        let per_s = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
        let (p50_ms, p99_ms) = reports::hdr::p50_p99_ms(&h);
        let stats = IntervalStats {
            bookings_per_s: per_s(d_arrivals),
            requests_per_s: per_s(d_requests),
            p50_ms,
            p99_ms,
        };
        (stats, h)
    }
}

/// Whether an arrival that started `lateness` after its intended time is
/// late, given the allowance.
pub fn is_late(lateness: Duration, allowance_ms: u64) -> bool {
    lateness > Duration::from_millis(allowance_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorder_merges_its_shards_and_counts_errors() {
        let r = Recorder::new("booking");
        for user in 0..100 {
            r.record(user, Duration::from_millis(user as u64 + 1), user % 10 == 0);
        }
        let f = r.figures();
        assert_eq!(f.name, "booking");
        assert_eq!(f.count, 100);
        assert_eq!(f.errors, 10);
        assert!((f.p50_ms - 50.0).abs() < 0.1, "{f:?}");
        assert!((f.p99_ms - 99.0).abs() < 0.1, "{f:?}");
        assert!((f.max_ms - 100.0).abs() < 0.1, "{f:?}");
        assert!((f.mean_ms - 50.5).abs() < 0.1, "{f:?}");
        assert!(f.p50_ms <= f.p90_ms && f.p90_ms <= f.p99_ms && f.p99_ms <= f.p999_ms);
        assert!(f.p999_ms <= f.max_ms);
    }

    #[test]
    fn an_empty_recorder_has_zero_figures() {
        let f = Recorder::new("retry").figures();
        assert_eq!((f.count, f.p99_ms, f.max_ms), (0, 0.0, 0.0));
    }

    #[test]
    fn huge_latencies_saturate_instead_of_failing() {
        let r = Recorder::new("x");
        r.record(0, Duration::from_secs(10 * 3600), false);
        let f = r.figures();
        assert_eq!(f.count, 1);
        assert!(f.max_ms >= 3_599_000.0, "{f:?}");
    }

    #[test]
    fn the_interval_restarts_at_each_take() {
        let live = LiveStats::default();
        live.arrivals_started.fetch_add(10, Ordering::Relaxed);
        for ms in 1..=100 {
            live.record_booking(Duration::from_millis(ms));
        }
        let sent = Instant::now();
        live.request_sent();
        live.request_done(Some(201), sent);
        live.request_sent();
        live.request_done(None, sent);
        live.request_sent();
        live.request_done(Some(503), sent);
        assert_eq!(live.server_error_spans().len(), 2);
        assert!(live.server_error_spans().iter().all(|(s, _)| *s == sent));
        std::thread::sleep(Duration::from_millis(20));
        let first = live.take_interval();
        assert!(first.bookings_per_s > 0.0);
        assert!(first.requests_per_s > 0.0);
        assert!((first.p50_ms - 50.0).abs() < 0.1, "{first:?}");
        assert!((first.p99_ms - 99.0).abs() < 0.1, "{first:?}");
        assert_eq!(live.server_errors.load(Ordering::Relaxed), 2);
        assert_eq!(live.in_flight.load(Ordering::Relaxed), 0);
        let second = live.take_interval();
        assert_eq!(second.bookings_per_s, 0.0);
        assert_eq!(second.p99_ms, 0.0);
    }

    #[test]
    fn refusals_are_counted_by_code() {
        let live = LiveStats::default();
        live.refuse("level_full");
        live.refuse("level_full");
        live.refuse("sale_closed");
        let r = live.bookings_refused();
        assert_eq!(r.get("level_full"), Some(&2));
        assert_eq!(r.get("sale_closed"), Some(&1));
    }

    #[test]
    fn lateness_is_judged_against_the_allowance() {
        assert!(!is_late(Duration::from_millis(10), 10));
        assert!(is_late(Duration::from_micros(10_001), 10));
        assert!(!is_late(Duration::ZERO, 0));
    }
}
