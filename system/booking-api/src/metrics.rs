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
//! | `booking_candidate_auth_refusals_total` | `reason` | candidate tokens refused (`401`, [`crate::candidate_auth`]): `missing`, `malformed`, `wrong_algorithm`, `unknown_key`, `bad_signature`, `expired`, `not_yet_valid`, `wrong_issuer`, `wrong_audience`, `wrong_subject` |
//! | `booking_level_cap`, `booking_level_taken` | `level` | the ledger, read at scrape |
//! | `booking_sale_open` | | 1 while admissions are open |
//! | `booking_paid_total` | `path`, `source` | bookings marked PAID by this instance: `path` is `callback`, `webhook` or `reconciler`; `source` is `record` (HELD→PAID) or `copy` (the fast payer's record written from the booking copy) |
//!
//! The background services of the instance (worker, reconciler, expiry
//! handler) and the backends' figures are added by whoever runs them, through
//! [`ApiMetrics::sync_services`] (the server does it every second):
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `booking_releases_total` | `by` | holds given back: `reconciler` (cancelled, failed, expired) or `expiry` (the TTL safety net) |
//! | `booking_extensions_total` | | holds extended after unanswered queries |
//! | `booking_reconciler_query_failures_total` | | gateway queries that went unanswered |
//! | `booking_orphans_recovered_total` | | records re-created for held holds that had none |
//! | `booking_pending_undone_total` | | stale pending admissions undone |
//! | `booking_alerts_total` | | alerts raised to a human (all instances' log, where shared) |
//! | `booking_worker_messages_total` | `outcome` | admission messages by what the worker did |
//! | `booking_queue_messages` | `state` | `visible`, `in_flight`, `dead_letter` |
//! | `booking_queue_oldest_age_seconds` | | age of the oldest queued message |
//! | `booking_throttles_total` | `op` | record-store requests throttled: `read`, `write` |
//! | `booking_token_calls_total` | `call` | gateway token calls of this instance: `grant`, `refresh`, `failure` |
//! | `booking_redis_pool_connections` | `pool`, `state` | a Redis pool's connections now: `in_use`, `idle`, `max` (`pool`: `ledger`, `coordination`, `records`, `queue`, `outputs`) |
//! | `booking_redis_pool_waiting` | `pool` | callers waiting for a connection now |
//! | `booking_redis_pool_gets_total` | `pool` | connections asked for |
//! | `booking_redis_pool_waits_total` | `pool` | of which asked for while every connection was in use (the caller waited) |
//! | `booking_redis_pool_wait_seconds_total` | `pool` | time those callers waited |
//! | `booking_redis_pool_timeouts_total` | `pool` | of which gave up at the pool's wait bound |
//! | `booking_admin_refused_total` | `reason` | requests to the admin listener refused: `missing` or `wrong` token, `unconfirmed` production step (counted by the server's admin routes) |
//! | `booking_aws_calls_total` | `service`, `op` | AWS calls of this process's clients (`--stack aws`; instances of one process share them) by the SDK's service name and the operation, e.g. `SQS`/`SendMessageBatch` |

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use booking::ledger::Counters;
use booking::records::ConfirmPath;

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

/// A confirm path that won the HELD→PAID step.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PaidLabels {
    /// `callback`, `webhook`, `reconciler`.
    pub path: &'static str,
    /// `record` or `copy`.
    pub source: &'static str,
}

/// One label named `by`, `outcome`, `state`, `op` or `call`.
macro_rules! one_label {
    ($name:ident, $field:ident, $doc:literal) => {
        #[doc = $doc]
        #[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
        pub struct $name {
            #[doc = $doc]
            pub $field: &'static str,
        }
    };
}
one_label!(ByLabels, by, "Who released a hold.");
one_label!(WorkerLabels, outcome, "What the worker did with a message.");
one_label!(StateLabels, state, "Where queued messages are.");
one_label!(OpLabel, op, "A record-store operation kind.");
one_label!(CallLabels, call, "A token call.");
one_label!(ReasonLabels, reason, "Why a candidate token was refused.");
one_label!(
    RefusedLabels,
    reason,
    "Why an admin request was refused: `missing` (no bearer token), `wrong` (a token not accepted), `unconfirmed` (a production step without the sale's confirmation)."
);

/// The background services' and backends' figures of one instance, as
/// running totals (counters) and current values (gauges). Every field is
/// plain data, so any runner can fill it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceFigures {
    /// Bookings the reconciler marked PAID.
    pub reconciler_paid: u64,
    /// Holds the reconciler released.
    pub reconciler_released: u64,
    /// Holds the expiry handler released.
    pub expiry_released: u64,
    /// Holds extended.
    pub extensions: u64,
    /// Unanswered gateway queries.
    pub query_failures: u64,
    /// Records re-created for held holds without one.
    pub orphans_recovered: u64,
    /// Stale pending admissions undone.
    pub pending_undone: u64,
    /// Alerts raised.
    pub alerts: u64,
    /// Worker outcomes: (outcome, total).
    pub worker: Vec<(&'static str, u64)>,
    /// Messages waiting.
    pub queue_visible: u64,
    /// Messages received and not yet deleted.
    pub queue_in_flight: u64,
    /// Dead letters.
    pub dead_letters: u64,
    /// Age of the oldest queued message, ms (0: none queued).
    pub queue_oldest_age_ms: u64,
    /// Throttled record-store reads.
    pub throttled_reads: u64,
    /// Throttled record-store writes.
    pub throttled_writes: u64,
    /// Token grant calls.
    pub token_grants: u64,
    /// Token refresh calls.
    pub token_refreshes: u64,
    /// Token refresher failures.
    pub token_failures: u64,
    /// AWS calls so far: (service, operation, total).
    pub aws_calls: Vec<(String, String, u64)>,
    /// The Redis pools of the instance: (adapter, figures).
    pub redis_pools: Vec<(&'static str, booking::PoolFigures)>,
}

/// Brings a counter up to a running total kept elsewhere (never down).
fn mirror<N, A>(counter: &Counter<N, A>, total: N)
where
    N: PartialOrd + std::ops::Sub<Output = N> + Copy,
    A: prometheus_client::metrics::counter::Atomic<N>,
{
    let now = counter.get();
    if total > now {
        counter.inc_by(total - now);
    }
}

/// An AWS operation.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AwsCallLabels {
    /// The SDK's service name: `SQS`, `S3`, `DynamoDB`, `DynamoDB Streams`.
    pub service: String,
    /// The operation: `SendMessageBatch`, `PutObject`, `GetItem`, ….
    pub op: String,
}

/// A Redis pool, by the adapter that owns it.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    /// `ledger`, `coordination`, `records`, `queue`, `outputs`.
    pub pool: &'static str,
}

/// A Redis pool's connections in one state.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolStateLabels {
    /// The adapter.
    pub pool: &'static str,
    /// `in_use`, `idle`, `max`.
    pub state: &'static str,
}

/// The Redis pools' figures on `/metrics`.
#[derive(Debug, Clone, Default)]
struct PoolMetrics {
    connections: Family<PoolStateLabels, Gauge>,
    waiting: Family<PoolLabels, Gauge>,
    gets: Family<PoolLabels, Counter>,
    waits: Family<PoolLabels, Counter>,
    wait_seconds: Family<PoolLabels, Counter<f64, std::sync::atomic::AtomicU64>>,
    timeouts: Family<PoolLabels, Counter>,
}

impl PoolMetrics {
    fn register(&self, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("redis_pool");
        sub.register(
            "connections",
            "A Redis pool's connections now, by state",
            self.connections.clone(),
        );
        sub.register(
            "waiting",
            "Callers waiting for a Redis connection now",
            self.waiting.clone(),
        );
        sub.register("gets", "Redis connections asked for", self.gets.clone());
        sub.register(
            "waits",
            "Redis connections asked for while every one was in use",
            self.waits.clone(),
        );
        sub.register(
            "wait_seconds",
            "Time callers waited for a Redis connection",
            self.wait_seconds.clone(),
        );
        sub.register(
            "timeouts",
            "Callers that gave up waiting for a Redis connection",
            self.timeouts.clone(),
        );
    }

    fn sync(&self, pool: &'static str, f: &booking::PoolFigures) {
        let gauge = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        for (state, v) in [
            ("in_use", f.in_use),
            ("idle", f.open.saturating_sub(f.in_use)),
            ("max", f.max_size),
        ] {
            self.connections
                .get_or_create(&PoolStateLabels { pool, state })
                .set(gauge(v));
        }
        let labels = PoolLabels { pool };
        self.waiting.get_or_create(&labels).set(gauge(f.waiting));
        mirror(&self.gets.get_or_create(&labels), f.gets);
        mirror(&self.waits.get_or_create(&labels), f.waits);
        mirror(&self.timeouts.get_or_create(&labels), f.timeouts);
        mirror(
            &self.wait_seconds.get_or_create(&labels),
            f.wait_micros as f64 / 1e6,
        );
    }
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
    /// Candidate tokens refused, by reason.
    pub candidate_auth_refusals: Family<ReasonLabels, Counter>,
    level_cap: Family<LevelLabels, Gauge>,
    level_taken: Family<LevelLabels, Gauge>,
    sale_open: Gauge,
    /// Bookings marked PAID, by path and source.
    pub paid_total: Family<PaidLabels, Counter>,
    releases: Family<ByLabels, Counter>,
    extensions: Counter,
    query_failures: Counter,
    orphans_recovered: Counter,
    pending_undone: Counter,
    alerts: Counter,
    worker: Family<WorkerLabels, Counter>,
    queue_messages: Family<StateLabels, Gauge>,
    queue_oldest_age: Gauge<f64, std::sync::atomic::AtomicU64>,
    throttles: Family<OpLabel, Counter>,
    token_calls: Family<CallLabels, Counter>,
    aws_calls: Family<AwsCallLabels, Counter>,
    redis_pools: PoolMetrics,
    /// Admin requests refused, by reason.
    pub admin_refused: Family<RefusedLabels, Counter>,
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
        let candidate_auth_refusals = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "candidate_auth_refusals",
            "Candidate tokens refused (401), by reason",
            candidate_auth_refusals.clone(),
        );
        let level_cap = Family::<LevelLabels, Gauge>::default();
        let level_taken = Family::<LevelLabels, Gauge>::default();
        let sale_open = Gauge::default();
        let paid_total = Family::<PaidLabels, Counter>::default();
        let releases = Family::<ByLabels, Counter>::default();
        let extensions = Counter::default();
        let query_failures = Counter::default();
        let orphans_recovered = Counter::default();
        let pending_undone = Counter::default();
        let alerts = Counter::default();
        let worker = Family::<WorkerLabels, Counter>::default();
        let queue_messages = Family::<StateLabels, Gauge>::default();
        let queue_oldest_age = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        let throttles = Family::<OpLabel, Counter>::default();
        let token_calls = Family::<CallLabels, Counter>::default();
        let aws_calls = Family::<AwsCallLabels, Counter>::default();
        let redis_pools = PoolMetrics::default();
        redis_pools.register(&mut registry);
        let admin_refused = Family::<RefusedLabels, Counter>::default();
        registry.register(
            "admin_refused",
            "Admin requests refused (no or a wrong token, or unconfirmed), by reason",
            admin_refused.clone(),
        );
        registry.register(
            "paid",
            "Bookings marked PAID by this instance, by confirm path and source",
            paid_total.clone(),
        );
        registry.register(
            "releases",
            "Holds given back, by who released them",
            releases.clone(),
        );
        registry.register(
            "extensions",
            "Holds extended after unanswered gateway queries",
            extensions.clone(),
        );
        registry.register(
            "reconciler_query_failures",
            "Reconciler gateway queries that went unanswered",
            query_failures.clone(),
        );
        registry.register(
            "orphans_recovered",
            "Records re-created for held holds that had none",
            orphans_recovered.clone(),
        );
        registry.register(
            "pending_undone",
            "Stale pending admissions undone",
            pending_undone.clone(),
        );
        registry.register("alerts", "Alerts raised to a human", alerts.clone());
        registry.register(
            "worker_messages",
            "Admission messages by what the worker did",
            worker.clone(),
        );
        registry.register(
            "queue_messages",
            "Queued admission messages by state",
            queue_messages.clone(),
        );
        registry.register(
            "queue_oldest_age_seconds",
            "Age of the oldest queued admission message",
            queue_oldest_age.clone(),
        );
        registry.register(
            "throttles",
            "Record-store requests throttled",
            throttles.clone(),
        );
        registry.register(
            "token_calls",
            "Gateway token calls of this instance",
            token_calls.clone(),
        );
        registry.register(
            "aws_calls",
            "AWS calls of this process's clients, by service and operation",
            aws_calls.clone(),
        );
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
            candidate_auth_refusals,
            level_cap,
            level_taken,
            sale_open,
            paid_total,
            releases,
            extensions,
            query_failures,
            orphans_recovered,
            pending_undone,
            alerts,
            worker,
            queue_messages,
            queue_oldest_age,
            throttles,
            token_calls,
            aws_calls,
            redis_pools,
            admin_refused,
        }
    }

    /// Counts one booking marked PAID by `path` (`source`: `record` or `copy`).
    pub fn paid(&self, path: ConfirmPath, source: &'static str) {
        let path = match path {
            ConfirmPath::Callback => "callback",
            ConfirmPath::Webhook => "webhook",
            ConfirmPath::Reconciler => "reconciler",
        };
        self.paid_total
            .get_or_create(&PaidLabels { path, source })
            .inc();
    }

    /// Brings the background services' figures up to date: counters follow
    /// the running totals (never backwards), gauges take the current values.
    pub fn sync_services(&self, f: &ServiceFigures) {
        mirror(
            &self.paid_total.get_or_create(&PaidLabels {
                path: "reconciler",
                source: "record",
            }),
            f.reconciler_paid,
        );
        mirror(
            &self.releases.get_or_create(&ByLabels { by: "reconciler" }),
            f.reconciler_released,
        );
        mirror(
            &self.releases.get_or_create(&ByLabels { by: "expiry" }),
            f.expiry_released,
        );
        mirror(&self.extensions, f.extensions);
        mirror(&self.query_failures, f.query_failures);
        mirror(&self.orphans_recovered, f.orphans_recovered);
        mirror(&self.pending_undone, f.pending_undone);
        mirror(&self.alerts, f.alerts);
        for (outcome, total) in &f.worker {
            mirror(
                &self.worker.get_or_create(&WorkerLabels { outcome }),
                *total,
            );
        }
        let gauge = |state: &'static str, v: u64| {
            self.queue_messages
                .get_or_create(&StateLabels { state })
                .set(i64::try_from(v).unwrap_or(i64::MAX));
        };
        gauge("visible", f.queue_visible);
        gauge("in_flight", f.queue_in_flight);
        gauge("dead_letter", f.dead_letters);
        self.queue_oldest_age
            .set(f.queue_oldest_age_ms as f64 / 1_000.0);
        mirror(
            &self.throttles.get_or_create(&OpLabel { op: "read" }),
            f.throttled_reads,
        );
        mirror(
            &self.throttles.get_or_create(&OpLabel { op: "write" }),
            f.throttled_writes,
        );
        for (call, total) in [
            ("grant", f.token_grants),
            ("refresh", f.token_refreshes),
            ("failure", f.token_failures),
        ] {
            mirror(&self.token_calls.get_or_create(&CallLabels { call }), total);
        }
        for (service, op, total) in &f.aws_calls {
            let labels = AwsCallLabels {
                service: service.clone(),
                op: op.clone(),
            };
            mirror(&self.aws_calls.get_or_create(&labels), *total);
        }
        for (pool, figures) in &f.redis_pools {
            self.redis_pools.sync(pool, figures);
        }
    }

    /// Counts one `POST /bookings` answer.
    pub fn outcome(&self, outcome: &'static str) {
        self.admissions
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// Counts one refused candidate token.
    pub fn candidate_auth_refusal(&self, reason: &'static str) {
        self.candidate_auth_refusals
            .get_or_create(&ReasonLabels { reason })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(total: u64) -> ServiceFigures {
        ServiceFigures {
            reconciler_paid: total,
            reconciler_released: total + 1,
            expiry_released: 2,
            extensions: 3,
            worker: vec![("stored", total * 10)],
            queue_visible: 7,
            queue_oldest_age_ms: 1_500,
            throttled_writes: 4,
            token_grants: 1,
            aws_calls: vec![("SQS".into(), "SendMessageBatch".into(), total * 2)],
            redis_pools: vec![(
                "ledger",
                booking::PoolFigures {
                    max_size: 8,
                    open: 8,
                    in_use: 6,
                    waiting: 3,
                    gets: total * 100,
                    waits: total * 40,
                    wait_micros: total * 250_000,
                    timeouts: total,
                },
            )],
            ..ServiceFigures::default()
        }
    }

    #[test]
    fn services_figures_are_mirrored_and_counters_never_go_back() {
        let m = ApiMetrics::new();
        m.paid(ConfirmPath::Callback, "record");
        m.sync_services(&figures(5));
        m.sync_services(&figures(5)); // the same totals again add nothing
        let text = m.render(None);
        for line in [
            r#"booking_paid_total{path="callback",source="record"} 1"#,
            r#"booking_paid_total{path="reconciler",source="record"} 5"#,
            r#"booking_releases_total{by="reconciler"} 6"#,
            r#"booking_releases_total{by="expiry"} 2"#,
            "booking_extensions_total 3",
            r#"booking_worker_messages_total{outcome="stored"} 50"#,
            r#"booking_queue_messages{state="visible"} 7"#,
            "booking_queue_oldest_age_seconds 1.5",
            r#"booking_throttles_total{op="write"} 4"#,
            r#"booking_token_calls_total{call="grant"} 1"#,
            r#"booking_aws_calls_total{service="SQS",op="SendMessageBatch"} 10"#,
            r#"booking_redis_pool_connections{pool="ledger",state="in_use"} 6"#,
            r#"booking_redis_pool_connections{pool="ledger",state="idle"} 2"#,
            r#"booking_redis_pool_connections{pool="ledger",state="max"} 8"#,
            r#"booking_redis_pool_waiting{pool="ledger"} 3"#,
            r#"booking_redis_pool_gets_total{pool="ledger"} 500"#,
            r#"booking_redis_pool_waits_total{pool="ledger"} 200"#,
            r#"booking_redis_pool_wait_seconds_total{pool="ledger"} 1.25"#,
            r#"booking_redis_pool_timeouts_total{pool="ledger"} 5"#,
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        // a restarted service's totals start again at zero: the counter holds
        m.sync_services(&figures(0));
        let text = m.render(None);
        assert!(text.contains(r#"booking_paid_total{path="reconciler",source="record"} 5"#));
        m.sync_services(&figures(9));
        let text = m.render(None);
        assert!(text.contains(r#"booking_paid_total{path="reconciler",source="record"} 9"#));
        assert!(text.trim_end().ends_with("# EOF"));
    }
}
