//! The API's Prometheus metrics (`GET /metrics`, OpenMetrics text).
//!
//! One [`ApiMetrics`] per router (it travels to the handlers as an axum
//! `Extension`), so two API instances in one process keep their own figures.
//! Counters only go up; the per-level gauges are read from the ledger at
//! scrape time, so they are never stale.
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `booking_admissions_total` | `outcome` | every `POST /bookings` answer, by outcome |
//! | `booking_holds_total` | | holds created (201 answers) |
//! | `booking_gateway_calls_total` | `op` | gateway calls made by the API |
//! | `booking_gateway_errors_total` | `op`, `kind` | of which failed |
//! | `booking_undos_total` | `reason`, `step` | admissions undone before answering |
//! | `booking_deadline_expired_total` | `route` | answers cut short by the request deadline |
//! | `booking_request_duration_seconds` | | `POST /bookings` latency |
//! | `booking_level_cap`, `booking_level_taken` | `level` | the ledger, read at scrape |
//! | `booking_sale_open` | | 1 while admissions are open |

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use booking::ledger::Counters;

/// The outcome of one `POST /bookings`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `admitted`, `level_full`, `sale_closed`, … (the answer's `error` code).
    pub outcome: &'static str,
}

/// A gateway operation.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabels {
    /// `create`.
    pub op: &'static str,
}

/// A failed gateway operation.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpErrorLabels {
    /// `create`.
    pub op: &'static str,
    /// `timeout`, `refused`, `unavailable`, `token_unavailable`, `deadline`.
    pub kind: &'static str,
}

/// An undone admission.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UndoLabels {
    /// Which step failed: `admit`, `create`, `attach`, `copy`, `enqueue`.
    pub reason: &'static str,
    /// What the undo did: `done`, `no_match`, `paid`, `failed`.
    pub step: &'static str,
}

/// A route.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    /// The route's path.
    pub route: &'static str,
}

/// A level.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LevelLabels {
    /// The level.
    pub level: String,
}

/// Latency buckets of `POST /bookings`, seconds: 0.5 ms … 8 s (the deadline).
const LATENCY_BUCKETS_S: [f64; 14] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0,
];

/// The API's counters and the registry that renders them.
#[derive(Debug)]
pub struct ApiMetrics {
    registry: Registry,
    /// Answers of `POST /bookings` by outcome.
    pub admissions: Family<OutcomeLabels, Counter>,
    /// Holds created.
    pub holds: Counter,
    /// Gateway calls.
    pub gateway_calls: Family<OpLabels, Counter>,
    /// Gateway calls that failed.
    pub gateway_errors: Family<OpErrorLabels, Counter>,
    /// Undone admissions.
    pub undos: Family<UndoLabels, Counter>,
    /// Answers cut short by the request deadline.
    pub deadline_expired: Family<RouteLabels, Counter>,
    /// `POST /bookings` latency, seconds.
    pub latency: Histogram,
    level_cap: Family<LevelLabels, Gauge>,
    level_taken: Family<LevelLabels, Gauge>,
    sale_open: Gauge,
}

impl Default for ApiMetrics {
    fn default() -> ApiMetrics {
        ApiMetrics::new()
    }
}

impl ApiMetrics {
    /// Fresh counters, registered.
    pub fn new() -> ApiMetrics {
        let mut registry = Registry::with_prefix("booking");
        let admissions = Family::<OutcomeLabels, Counter>::default();
        let holds = Counter::default();
        let gateway_calls = Family::<OpLabels, Counter>::default();
        let gateway_errors = Family::<OpErrorLabels, Counter>::default();
        let undos = Family::<UndoLabels, Counter>::default();
        let deadline_expired = Family::<RouteLabels, Counter>::default();
        let latency = Histogram::new(LATENCY_BUCKETS_S);
        let level_cap = Family::<LevelLabels, Gauge>::default();
        let level_taken = Family::<LevelLabels, Gauge>::default();
        let sale_open = Gauge::default();
        registry.register(
            "admissions",
            "POST /bookings answers by outcome",
            admissions.clone(),
        );
        registry.register("holds", "Holds created (201 answers)", holds.clone());
        registry.register(
            "gateway_calls",
            "Gateway calls made by the API",
            gateway_calls.clone(),
        );
        registry.register(
            "gateway_errors",
            "Gateway calls made by the API that failed",
            gateway_errors.clone(),
        );
        registry.register("undos", "Admissions undone before answering", undos.clone());
        registry.register(
            "deadline_expired",
            "Answers cut short by the request deadline",
            deadline_expired.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "POST /bookings latency",
            latency.clone(),
        );
        registry.register("level_cap", "Seats per level", level_cap.clone());
        registry.register(
            "level_taken",
            "Seats counted per level (pending + held + paid)",
            level_taken.clone(),
        );
        registry.register(
            "sale_open",
            "1 while admissions are open",
            sale_open.clone(),
        );
        ApiMetrics {
            registry,
            admissions,
            holds,
            gateway_calls,
            gateway_errors,
            undos,
            deadline_expired,
            latency,
            level_cap,
            level_taken,
            sale_open,
        }
    }

    /// Counts one `POST /bookings` answer.
    pub fn outcome(&self, outcome: &'static str) {
        self.admissions
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// Counts one undo.
    pub fn undo(&self, reason: &'static str, step: &'static str) {
        self.undos.get_or_create(&UndoLabels { reason, step }).inc();
    }

    /// Counts one gateway call and, if it failed, its error kind.
    pub fn gateway_call(&self, op: &'static str, error: Option<&'static str>) {
        self.gateway_calls.get_or_create(&OpLabels { op }).inc();
        if let Some(kind) = error {
            self.gateway_errors
                .get_or_create(&OpErrorLabels { op, kind })
                .inc();
        }
    }

    /// Counts one answer cut short by the deadline.
    pub fn deadline(&self, route: &'static str) {
        self.deadline_expired
            .get_or_create(&RouteLabels { route })
            .inc();
    }

    /// The OpenMetrics text, with the ledger's figures if they could be read.
    pub fn render(&self, counters: Option<&Counters>) -> String {
        if let Some(c) = counters {
            self.sale_open.set(i64::from(c.open));
            for l in &c.levels {
                let labels = LevelLabels {
                    level: l.level.to_string(),
                };
                self.level_cap.get_or_create(&labels).set(i64::from(l.cap));
                self.level_taken
                    .get_or_create(&labels)
                    .set(i64::from(l.count));
            }
        }
        let mut out = String::new();
        // writing into a String cannot fail
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
