//! Goose wiring: the three scenarios and their transactions registered with
//! goose, the attack's configuration, [`run`], and goose's figures read back
//! into a [`LoadResult`]. What each transaction does is in [`super::engine`].

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use goose::config::GooseConfiguration;
use goose::goose::{GooseUser, Scenario, Transaction, TransactionFunction};
use goose::metrics::{GooseCoordinatedOmissionMitigation, GooseMetrics};
use goose::prelude::{GooseAttack, GooseError, TransactionResult};
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

use super::balancer::{self, Balancer};
use super::engine::{
    EXECUTE_GRACE, Engine, GOOSE_REPORTS, RAMP_S, REQUEST_TIMEOUT, START_WAIT_MAX,
};
use super::queue::DueQueue;
use super::stats::{self, LiveStats, Recorder};
use super::{
    Arrival, GooseRequestSummary, GooseSummary, GooseThreshold, LoadConfig, LoadError, LoadProfile,
    LoadResult, PaymentTally, Targets,
};

type Step =
    fn(Arc<Engine>, &mut GooseUser) -> Pin<Box<dyn Future<Output = TransactionResult> + Send + '_>>;

fn transaction(engine: &Arc<Engine>, name: &str, step: Step) -> Transaction {
    let engine = engine.clone();
    let function: TransactionFunction = Arc::new(move |user| step(engine.clone(), user));
    Transaction::new(function).set_name(name)
}

fn scenario(
    name: &str,
    weight: usize,
    steps: &[(&str, Step)],
    engine: &Arc<Engine>,
) -> Result<Scenario, LoadError> {
    let mut s = Scenario::new(name)
        .set_weight(weight)
        .map_err(goose_error)?
        .register_transaction(
            transaction(engine, "start", |e, u| Box::pin(e.start(u))).set_on_start(),
        );
    for (i, (name, step)) in steps.iter().enumerate() {
        s = s.register_transaction(transaction(engine, name, *step).set_sequence(i + 1));
    }
    Ok(s)
}

fn goose_error(e: GooseError) -> LoadError {
    LoadError::Goose(e.to_string())
}

/// Runs `arrivals` against `targets` with goose, until every arrival and
/// what it caused is done or `config.stop_by` passes. The driver may read
/// `live` meanwhile.
pub async fn run(
    arrivals: Vec<Arrival>,
    targets: Targets,
    profile: &LoadProfile,
    config: LoadConfig,
    live: Arc<LiveStats>,
) -> Result<LoadResult, LoadError> {
    let called = Instant::now();
    profile.validate()?;
    let booking_endpoints = endpoints(&targets)?;
    let client = goose_reqwest::Client::builder()
        .redirect(goose_reqwest::redirect::Policy::none())
        .timeout(REQUEST_TIMEOUT)
        .no_proxy()
        .tcp_nodelay(true)
        .user_agent(concat!("sellout-load/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| LoadError::Client(e.to_string()))?;
    let retry_users = profile.retry_users();
    let total_users = profile.users + profile.payer_users + retry_users;
    let n = arrivals.len();
    let balancer = Arc::new(Balancer::new(&targets.booking_urls));
    let tokens = config
        .candidate_tokens
        .clone()
        .map(|signer| crate::candidate_tokens::CandidateTokens::presign(signer, &arrivals));
    let engine = Arc::new(Engine {
        tokens,
        arrivals,
        booking_endpoints,
        balancer: balancer.clone(),
        profile: profile.clone(),
        client,
        live: live.clone(),
        called,
        stop_at: called + config.stop_by,
        zero: watch::Sender::new(None),
        not_before: config.start_at.map(Instant::from_std),
        next: AtomicUsize::new(0),
        outstanding: AtomicUsize::new(n),
        done: watch::Sender::new(n == 0),
        stopped: AtomicBool::new(false),
        total_users,
        ready: AtomicUsize::new(0),
        announced: AtomicUsize::new(0),
        all_announced: watch::Sender::new(false),
        payers: DueQueue::new(),
        retries: DueQueue::new(),
        booking: Recorder::new("booking"),
        retry: Recorder::new("retry"),
        checkout: Recorder::new("checkout"),
        callback: Recorder::new("callback"),
        started: AtomicU64::new(0),
        late: AtomicU64::new(0),
        rush_started: AtomicU64::new(0),
        rush_first_ns: AtomicU64::new(u64::MAX),
        rush_last_ns: AtomicU64::new(0),
        outcomes: Mutex::new(BTreeMap::new()),
        retry_outcomes: Mutex::new(BTreeMap::new()),
        payments: Mutex::new(PaymentTally::default()),
    });

    let mut goose_files = Vec::new();
    let mut report_paths = Vec::new();
    if let Some(dir) = &config.out_dir {
        std::fs::create_dir_all(dir)
            .map_err(|e| LoadError::Goose(format!("creating {}: {e}", dir.display())))?;
        for name in GOOSE_REPORTS {
            report_paths.push(dir.join(name).display().to_string());
        }
    }
    let attack = attack(&engine, &targets, profile, &config, report_paths)?;

    // the helpers: the bound, the zero's fallback, the two dispatchers
    let helpers = {
        let e = engine.clone();
        let bound = tokio::spawn(async move {
            tokio::time::sleep_until(e.stop_at).await;
            e.stopped.store(true, Ordering::Release);
            e.done.send_replace(true);
        });
        let e = engine.clone();
        let zero = tokio::spawn(async move {
            tokio::time::sleep(START_WAIT_MAX).await;
            e.zero.send_if_modified(|z| {
                if z.is_none() {
                    tracing::warn!("not every goose user started; starting the schedule anyway");
                    *z = Some(e.zero_from(Instant::now()));
                    true
                } else {
                    false
                }
            });
        });
        let e = engine.clone();
        let payers = tokio::spawn(async move {
            let mut done = e.done.subscribe();
            let stop = async move {
                let _ = done.wait_for(|d| *d).await;
            };
            e.payers.dispatch(stop).await;
        });
        let e = engine.clone();
        let retries = tokio::spawn(async move {
            let mut done = e.done.subscribe();
            let stop = async move {
                let _ = done.wait_for(|d| *d).await;
            };
            e.retries.dispatch(stop).await;
        });
        let health = tokio::spawn(balancer::health_checks(balancer, engine.client.clone()));
        [bound, zero, payers, retries, health]
    };

    let executed =
        tokio::time::timeout_at(called + config.stop_by + EXECUTE_GRACE, attack.execute()).await;
    engine.done.send_replace(true);
    for h in &helpers {
        h.abort();
    }
    let goose = match executed {
        Ok(Ok(metrics)) => summary(&metrics),
        Ok(Err(GooseError::ThresholdsFailed { metrics, .. })) => summary(&metrics),
        Ok(Err(e)) => return Err(goose_error(e)),
        Err(_) => {
            tracing::warn!("goose did not finish in time; its reports are missing");
            GooseSummary::default()
        }
    };
    if let Some(dir) = &config.out_dir {
        goose_files = GOOSE_REPORTS
            .iter()
            .filter(|name| dir.join(name).is_file())
            .map(|name| (*name).to_owned())
            .collect();
    }
    Ok(result(&engine, goose, goose_files))
}

/// `{url}/bookings` for each instance.
fn endpoints(targets: &Targets) -> Result<Vec<String>, LoadError> {
    if targets.booking_urls.is_empty() {
        return Err(LoadError::Targets("no booking instance".into()));
    }
    url::Url::parse(&targets.gateway_url)
        .map_err(|e| LoadError::Targets(format!("gateway url {:?}: {e}", targets.gateway_url)))?;
    targets
        .booking_urls
        .iter()
        .map(|u| {
            url::Url::parse(u)
                .map_err(|e| LoadError::Targets(format!("booking url {u:?}: {e}")))?;
            Ok(format!("{}/bookings", u.trim_end_matches('/')))
        })
        .collect()
}

/// Goose, configured: quiet, no controllers, no back-fill, every user
/// started within [`RAMP_S`], bounded by `stop_by`.
fn attack(
    engine: &Arc<Engine>,
    targets: &Targets,
    profile: &LoadProfile,
    config: &LoadConfig,
    report_paths: Vec<String>,
) -> Result<GooseAttack, LoadError> {
    let mut c = GooseConfiguration::default();
    c.host = targets.booking_urls.first().cloned();
    c.users = Some(engine.total_users);
    c.increase_rate = Some(format!("{:.0}", engine.total_users as f64 / RAMP_S));
    c.run_time = Some(config.stop_by.as_secs().max(1).to_string());
    c.quiet = 1;
    c.no_print_metrics = true;
    c.no_reset_metrics = true;
    c.no_telnet = true;
    c.no_gzip = true;
    // the engine keeps its own figures per transaction (from each arrival's
    // intended start); goose's per-transaction and per-scenario ones would
    // only double its bookkeeping for every request (its request metrics
    // stay: its report and `GooseSummary` read them)
    c.no_transaction_metrics = true;
    c.no_scenario_metrics = true;
    c.co_mitigation = Some(GooseCoordinatedOmissionMitigation::Disabled);
    c.timeout = Some(REQUEST_TIMEOUT.as_secs().to_string());
    if !report_paths.is_empty() {
        c.notes = Some(format!(
            "sellout open-model load: {} bookings/s for {} s, then {}/s for {} s; goose's \
             request times are from the send; the rehearsal's own report measures from each \
             arrival's intended start",
            profile.rate, profile.rush_secs, profile.late_rate, profile.late_secs
        ));
    }
    c.report_file = report_paths;
    c.threshold = profile.goose_thresholds.clone();
    c.no_threshold_abort = !profile.goose_thresholds.is_empty();
    let retry_users = profile.retry_users();
    // One shared client for goose to hand out (each user's is replaced by
    // the engine's at `start`): building one client per user costs
    // milliseconds each.
    let attack = GooseAttack::initialize_with_config(c)
        .map_err(goose_error)?
        .set_client_builder_without_cookies(
            goose::client::GooseClientBuilder::new()
                .without_cookies()
                .gzip(false),
        )
        .map_err(goose_error)?
        .register_scenario(scenario(
            "Bookings",
            profile.users,
            &[
                ("arrival", |e, u| Box::pin(e.take_arrival(u))),
                ("booking", |e, u| Box::pin(e.book(u))),
            ],
            engine,
        )?)
        .register_scenario(scenario(
            "Payers",
            profile.payer_users,
            &[
                ("payer waits", |e, u| Box::pin(e.take_payment(u))),
                ("pay", |e, u| Box::pin(e.pay(u))),
            ],
            engine,
        )?)
        .register_scenario(scenario(
            "Retries",
            retry_users,
            &[
                ("retry waits", |e, u| Box::pin(e.take_retry(u))),
                ("retry", |e, u| Box::pin(e.retry_booking(u))),
            ],
            engine,
        )?);
    Ok(attack)
}

/// Goose's own figures.
fn summary(metrics: &GooseMetrics) -> GooseSummary {
    let mut s = GooseSummary {
        users: metrics.total_users as u64,
        duration_s: metrics.duration as u64,
        ..GooseSummary::default()
    };
    s.thresholds = metrics
        .thresholds
        .iter()
        .map(|t| GooseThreshold {
            rule: t.rule.clone(),
            passed: t.passed,
            observed: t.observed.clone(),
        })
        .collect();
    for (name, r) in &metrics.requests {
        let count = (r.success_count + r.fail_count) as u64;
        s.requests += count;
        s.failures += r.fail_count as u64;
        let t = &r.raw_data;
        let mean_ms = if t.counter > 0 {
            t.total_time_us as f64 / t.counter as f64 / 1_000.0
        } else {
            0.0
        };
        s.per_request.insert(
            name.clone(),
            GooseRequestSummary {
                count,
                failures: r.fail_count as u64,
                mean_ms,
                max_ms: t.maximum_time_us as f64 / 1_000.0,
            },
        );
    }
    s
}

/// The engine's figures at the end.
fn result(engine: &Engine, goose: GooseSummary, goose_files: Vec<String>) -> LoadResult {
    let scheduled = engine.arrivals.len() as u64;
    let started = engine.started.load(Ordering::Relaxed);
    let rush_started = engine.rush_started.load(Ordering::Relaxed);
    let first = engine.rush_first_ns.load(Ordering::Relaxed);
    let last = engine.rush_last_ns.load(Ordering::Relaxed);
    let zero = (*engine.zero.borrow())
        .map(|z| z.saturating_duration_since(engine.called))
        .unwrap_or_default();
    let rush_window = if rush_started > 0 {
        (Duration::from_nanos(first), Duration::from_nanos(last))
    } else {
        (zero, zero)
    };
    let mut transactions = vec![engine.booking.figures()];
    for r in [&engine.retry, &engine.checkout, &engine.callback] {
        let f = r.figures();
        if f.count > 0 {
            transactions.push(f);
        }
    }
    let live = &engine.live;
    let figures = reports::LoadFigures {
        requests: live.requests.load(Ordering::Relaxed),
        server_errors: live.server_errors.load(Ordering::Relaxed),
        connection_errors: live.connection_errors.load(Ordering::Relaxed),
        target_rate: engine.profile.rate,
        achieved_rate: stats::achieved_rate(
            rush_started,
            rush_window.1.saturating_sub(rush_window.0),
            engine.profile.rate,
        ),
        arrivals_scheduled: scheduled,
        arrivals_started: started,
        arrivals_dropped: scheduled.saturating_sub(started),
        arrivals_late: engine.late.load(Ordering::Relaxed),
        rush_started,
        // the rehearsal places `rush_window` on its own clock
        rush_first_ms: 0.0,
        rush_last_ms: 0.0,
        transactions,
    };
    let mut payments = engine.payments.lock().clone();
    payments.not_run += engine.payers.drain().len() as u64;
    let mut retry_outcomes = engine.retry_outcomes.lock().clone();
    let retries_left = engine.retries.drain().len() as u64;
    if retries_left > 0 {
        *retry_outcomes.entry("not_run".to_owned()).or_default() += retries_left;
    }
    LoadResult {
        figures,
        booking_outcomes: engine.outcomes.lock().clone(),
        retry_outcomes,
        payments,
        rush_window,
        schedule_zero: zero,
        stopped_by_bound: engine.stopped.load(Ordering::Acquire),
        goose_files,
        goose,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets(booking: &[&str], gateway: &str) -> Targets {
        Targets {
            booking_urls: booking.iter().map(|s| (*s).to_owned()).collect(),
            gateway_url: gateway.to_owned(),
        }
    }

    #[test]
    fn booking_endpoints_are_each_instances_bookings_route() {
        let e = endpoints(&targets(&["http://a:1/", "http://b:2"], "http://g:3")).unwrap();
        assert_eq!(e, vec!["http://a:1/bookings", "http://b:2/bookings"]);
    }

    #[test]
    fn unusable_targets_are_refused() {
        for t in [
            targets(&[], "http://g:3"),
            targets(&["not a url"], "http://g:3"),
            targets(&["http://a:1"], "nowhere"),
        ] {
            assert!(matches!(endpoints(&t), Err(LoadError::Targets(_))), "{t:?}");
        }
    }
}
