//! One instance serving: the API ([`booking_api::router`]) on the public
//! listener, the `/ops/` routes on the admin listener ([`Listeners`];
//! `admin_listen`, loopback by default, see [`crate::admin_settings`]), and
//! beside them, on the same instance, the background loops:
//!
//! - the worker (queue → records);
//! - the reconciler (one leader per sale under the lock; this instance's
//!   owner token is its random instance id);
//! - the stream handlers: the expiry handler (TTL deletions on the change
//!   stream → undo) and, with a back office, the sync (PAID records →
//!   PostgreSQL), each under an event-source mapping (`booking-streams`).
//!   On the embedded and Redis stacks, one instance of the fleet reads each
//!   handler's stream at a time, under a lease, from a durable checkpoint
//!   ([`LeasedMapping`]); on AWS each instance runs its own mapping over
//!   the DynamoDB stream (or the Lambda functions do);
//! - the TTL service of the embedded and Redis record stores
//!   ([`TtlService`]): every sweep interval, by the one instance that takes
//!   the interval's sweep lock, late by design as DynamoDB's is (not on
//!   AWS, where DynamoDB deletes);
//! - a status refresh: a throttled [`StatusWriter::poke`] every throttle window
//!   (2 s), so the last change of a burst (which the throttle skipped) and
//!   releases (which no request pokes) reach the document and clear the full
//!   latches;
//! - a metrics sampler: every [`METRICS_EVERY`], the loops' counters and the
//!   backends' figures (queue depth and oldest message, dead letters,
//!   throttles, alerts, token calls) go into the API's `/metrics`
//!   ([`booking_api::metrics::ApiMetrics::sync_services`]).
//!
//! With `[faults]` the admin listener also serves `/ops/faults` and
//! `/ops/faults/start`, and `/metrics` counts the fired faults
//! ([`crate::faults_routes`]); every loop above uses the stack's wrapped
//! ports ([`crate::armed`]).
//!
//! Everything stops when `shutdown` completes (`booking serve`: SIGTERM or
//! Ctrl-C), in this order ([`serve_with`], [`Drain`]):
//!
//! 1. draining at once: `POST /bookings` answers `503 draining` with
//!    `Retry-After` (nothing done: the client or load balancer retries on
//!    another instance) and `GET /readyz` answers `503`
//!    ([`booking_api::drain`]);
//! 2. for [`Drain::notice`] the listener stays open, so the load balancer
//!    sees `/readyz` fail and clients hear the 503 rather than a refused
//!    connection;
//! 3. the listener closes and the requests in flight finish, for at most
//!    [`Drain::grace`] (cut off after that);
//! 4. the loops stop: the worker hands back the messages it has not started
//!    (visibility zero), the reconciler releases its lock (owner-checked)
//!    so another instance leads at its next sweep, each loop finishing what
//!    it is doing (bounded), all within [`SHUTDOWN_GRACE`];
//! 5. `serve` returns, and `booking serve` exits 0.
//!
//! [`TtlService`]: crate::build::TtlService
//! [`LeasedMapping`]: booking_streams::LeasedMapping
//! [`StatusWriter::poke`]: booking::StatusWriter::poke

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use booking::ChangeStream;
use booking_api::bookings::ApiState;
use booking_api::metrics::ServiceFigures;
use booking_service::expiry::ExpiryHandler;
use booking_service::reconciler::{Reconciler, ReconcilerConfig, ReconcilerPorts};
use booking_service::worker::{Worker, WorkerConfig};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use booking_postgres::SyncHandler;
use booking_streams::{
    AlertDestination, BatchHandler, EventSourceMapping, LeaseConfig, LeasedMapping,
};

use crate::build::Server;
use crate::config::StackKind;
use crate::http_serve::HttpLimits;

/// Records the TTL service deletes per sweep at most.
pub const TTL_SWEEP_LIMIT: usize = 1_000;
/// The worker's long poll.
pub const WORKER_WAIT: Duration = Duration::from_secs(5);
/// The expiry handler's wait for stream records, and its back-off after a failure.
pub const EXPIRY_WAIT: Duration = Duration::from_secs(1);
/// How often the background figures are copied into `/metrics`.
pub const METRICS_EVERY: Duration = Duration::from_secs(1);
/// How long the loops get to stop after the server has.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(60);
/// `booking serve`'s [`Drain::notice`] unless `--drain-notice-ms` says
/// otherwise: a little over a load balancer's readiness check interval
/// (Kubernetes' default probe period is 10 s; set it to yours).
pub const DRAIN_NOTICE: Duration = Duration::from_secs(5);
/// `booking serve`'s [`Drain::grace`] unless `--drain-grace-ms` says
/// otherwise: twice the longest request (the 8 s request deadline) plus
/// slack. An orchestrator's kill timeout (`terminationGracePeriodSeconds`)
/// should cover notice + grace + a worker long poll ([`WORKER_WAIT`]).
pub const DRAIN_GRACE: Duration = Duration::from_secs(20);

/// How an instance drains on its way out (see the module's steps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drain {
    /// How long the listener stays open after the stop, refusing new sales
    /// with `503` and failing `/readyz`, before it closes.
    pub notice: Duration,
    /// How long the requests in flight get once the listener is closed.
    pub grace: Duration,
}

impl Drain {
    /// `booking serve`'s: [`DRAIN_NOTICE`], [`DRAIN_GRACE`].
    pub const PRODUCTION: Drain = Drain {
        notice: DRAIN_NOTICE,
        grace: DRAIN_GRACE,
    };
    /// No notice (the listener closes at once), [`DRAIN_GRACE`]: [`serve`]'s,
    /// for in-process instances with no load balancer in front.
    pub const IMMEDIATE: Drain = Drain {
        notice: Duration::ZERO,
        grace: DRAIN_GRACE,
    };
}

/// An instance's two listeners: the public one (the API) and the admin
/// one (the `/ops/` routes).
#[derive(Debug)]
pub struct Listeners {
    /// The API's: `listen`.
    pub public: TcpListener,
    /// The `/ops/` routes': `admin_listen`.
    pub admin: TcpListener,
}

impl Listeners {
    /// Binds `config.listen` and `config.admin_listen`.
    pub async fn bind(config: &crate::config::ServerConfig) -> std::io::Result<Listeners> {
        Ok(Listeners {
            public: TcpListener::bind(config.listen).await?,
            admin: TcpListener::bind(config.admin_listen).await?,
        })
    }

    /// Both on loopback, on ports of their own (in-process instances and
    /// tests).
    pub async fn loopback() -> std::io::Result<Listeners> {
        Ok(Listeners {
            public: TcpListener::bind("127.0.0.1:0").await?,
            admin: TcpListener::bind("127.0.0.1:0").await?,
        })
    }

    /// `public`'s base URL, `http://127.0.0.1:PORT`.
    pub fn public_url(&self) -> std::io::Result<String> {
        Ok(format!("http://{}", self.public.local_addr()?))
    }

    /// The admin listener's base URL, as a client on this machine reaches it.
    pub fn admin_url(&self) -> std::io::Result<String> {
        Ok(crate::admin_settings::admin_url(self.admin.local_addr()?))
    }
}

/// The API, the ops routes and every background loop, until `shutdown`;
/// then drains with [`Drain::IMMEDIATE`].
pub async fn serve(
    server: Arc<Server>,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(server, listeners, shutdown, Drain::IMMEDIATE).await
}

/// One listener serving `app` within `limits` until `shutdown`, then
/// finishing the connections it has (the caller bounds how long).
async fn serve_listener(
    listener: TcpListener,
    app: axum::Router,
    limits: HttpLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    crate::http_serve::serve(listener, app, limits, shutdown).await
}

/// [`serve`], draining as `drain` says once `shutdown` completes (the
/// module's steps). The admin listener closes with the public one.
pub async fn serve_with(
    server: Arc<Server>,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
    drain: Drain,
) -> std::io::Result<()> {
    let Listeners {
        public: listener,
        admin,
    } = listeners;
    let tokens = server
        .config
        .admin()
        .resolve()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
    let (stop_tx, stop_rx) = watch::channel(false);
    // `[candidate_auth]`: POST /bookings needs the candidate's token
    let candidate_auth =
        crate::candidate_auth_config::verifier_of(server.config.candidate_auth.as_ref())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
    let api = Arc::new(ApiState::new().with_candidate_auth(candidate_auth));
    let mut loops = spawn_loops(&server, &api, stop_rx);
    let app = booking_api::router_with(server.stack.clone(), api.clone());
    // armed: the fired faults' counter on /metrics (nothing added otherwise)
    let app = crate::faults_routes::with_metrics(app, &server);
    let admin_app = crate::admin::router(
        server.clone(),
        crate::admin::AdminGuard::new(tokens, api.clone()),
    );
    let addr = listener.local_addr()?;
    let admin_addr = admin.local_addr()?;
    tracing::info!(%addr, %admin_addr, sale = %server.stack.sale, instance = %server.instance, "booking server listening");
    // the admin listener closes when the public one does
    let (admin_stop, admin_stopped) = tokio::sync::oneshot::channel::<()>();
    let mut admin_served = tokio::spawn(serve_listener(
        admin,
        admin_app,
        HttpLimits::ADMIN,
        async move {
            let _ = admin_stopped.await;
        },
    ));
    // when the listener closed (step 3): the grace runs from then
    let (closed_tx, closed_rx) = tokio::sync::oneshot::channel::<tokio::time::Instant>();
    let draining = api.clone();
    let served = serve_listener(listener, app, HttpLimits::PUBLIC, async move {
        shutdown.await;
        draining.drain.start();
        tracing::info!(
            notice_ms = drain.notice.as_millis() as u64,
            "draining: POST /bookings refused (503, Retry-After), /readyz 503"
        );
        tokio::time::sleep(drain.notice).await;
        tracing::info!(
            grace_ms = drain.grace.as_millis() as u64,
            "listener closed; finishing the requests in flight"
        );
        let _ = closed_tx.send(tokio::time::Instant::now());
    });
    let cut_off = async {
        match closed_rx.await {
            Ok(closed) => tokio::time::sleep_until(closed + drain.grace).await,
            // the server ended on its own (an error): nothing to bound
            Err(_) => std::future::pending::<()>().await,
        }
    };
    let served = tokio::select! {
        served = served => served,
        () = cut_off => {
            tracing::warn!(
                grace_ms = drain.grace.as_millis() as u64,
                "requests still in flight after the drain grace: cut off"
            );
            Ok(())
        }
    };
    let _ = admin_stop.send(());
    match tokio::time::timeout(drain.grace, &mut admin_served).await {
        Ok(Ok(Err(e))) => tracing::warn!(error = %e, "admin listener failed"),
        Ok(Err(e)) => tracing::warn!(error = %e, "admin listener task failed"),
        Err(_) => {
            tracing::warn!("admin requests still in flight after the grace: cut off");
            admin_served.abort();
        }
        Ok(Ok(Ok(()))) => {}
    }
    tracing::info!("server stopped; stopping the background loops");
    let _ = stop_tx.send(true);
    let joined = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while let Some(done) = loops.join_next().await {
            if let Err(e) = done {
                tracing::error!(error = %e, "background loop failed");
            }
        }
    })
    .await;
    if joined.is_err() {
        tracing::warn!("background loops did not stop in time; aborting them");
        loops.abort_all();
    }
    tracing::info!("booking server stopped");
    served
}

fn spawn_loops(
    server: &Arc<Server>,
    api: &Arc<ApiState>,
    stop: watch::Receiver<bool>,
) -> JoinSet<()> {
    let stack = &server.stack;
    let settings = stack.settings.clone();
    let mut loops = JoinSet::new();

    let worker = Arc::new(Worker::new(
        stack.queue.clone(),
        stack.records.clone(),
        stack.ledger.clone(),
        stack.alerts.clone(),
        WorkerConfig {
            wait: WORKER_WAIT,
            bugs: settings.bugs.clone(),
            // the heartbeat extends a slow batch's messages before this runs out
            visibility: settings.visibility_timeout,
            // every SQS receive is a call: the pollers take turns
            receives_in_flight: match server.config.stack.kind {
                StackKind::Aws => booking_service::worker::AWS_RECEIVES_IN_FLIGHT,
                StackKind::Embedded | StackKind::Redis => 0,
            },
            ..WorkerConfig::default()
        },
    ));
    let rx = stop.clone();
    let w = worker.clone();
    loops.spawn(async move { w.run(rx).await });

    let reconciler = Arc::new(Reconciler::new(
        ReconcilerPorts {
            records: stack.records.clone(),
            ledger: stack.ledger.clone(),
            gateway: stack.gateway.clone(),
            coordination: stack.coordination.clone(),
            mailer: stack.mailer.clone(),
            alerts: stack.alerts.clone(),
            clock: stack.clock.clone(),
        },
        ReconcilerConfig::new(
            stack.sale.clone(),
            &stack.prefix,
            &server.instance,
            settings.clone(),
        ),
    ));
    let rx = stop.clone();
    let r = reconciler.clone();
    loops.spawn(async move { r.run(rx).await });

    let expiry = Arc::new(ExpiryHandler::new(
        stack.stream.clone(),
        stack.ledger.clone(),
        0,
    ));
    match server.config.stack.kind {
        StackKind::Aws => {
            if server.config.stack.aws.stream_mappings {
                let s = server.clone();
                let e = expiry.clone();
                let rx = stop.clone();
                loops.spawn(async move { stream_mappings(s, e, rx).await });
            }
        }
        StackKind::Embedded | StackKind::Redis => {
            let s = server.clone();
            let e = expiry.clone();
            let rx = stop.clone();
            loops.spawn(async move { leased_mappings(s, e, rx).await });
        }
    }

    let sampler = Sampler {
        server: server.clone(),
        api: api.clone(),
        worker,
        reconciler,
        expiry,
    };
    let sampler = Arc::new(sampler);
    let rx = stop.clone();
    loops.spawn(periodic("metrics sampler", METRICS_EVERY, rx, move || {
        let sampler = sampler.clone();
        async move { sampler.sample().await }
    }));

    // DynamoDB runs its own TTL service; the others run here, one sweep per
    // interval for the whole fleet (the sweep lock is left to expire, so
    // the next interval's sweep may run on any instance)
    if let Some(ttl) = server.ttl.clone() {
        let every = settings.sweep_interval;
        let coordination = stack.coordination.clone();
        let lock = booking::coordination::keys::ttl_sweep_lock(&stack.prefix, &stack.sale);
        let owner = server.instance.clone();
        let rx = stop.clone();
        loops.spawn(periodic("ttl sweep", every, rx, move || {
            let ttl = ttl.clone();
            let coordination = coordination.clone();
            let lock = lock.clone();
            let owner = owner.clone();
            async move {
                // a little under the interval: the next sweep is never
                // refused because this one's lock outlived it
                let hold = every.mul_f64(0.9);
                match coordination.try_lock(&lock, &owner, hold).await {
                    Ok(true) => {}
                    Ok(false) => return,
                    Err(e) => {
                        tracing::warn!(error = %e, "ttl sweep lock unavailable");
                        return;
                    }
                }
                match ttl.sweep(TTL_SWEEP_LIMIT).await {
                    Ok(deleted) if !deleted.is_empty() => tracing::info!(
                        deleted = deleted.len(),
                        "TTL service deleted expired records"
                    ),
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "TTL sweep failed"),
                }
            }
        }));
    }

    // Every throttle window, not every sweep: a burst's last admission is
    // skipped by the throttle, and this trailing poke publishes it.
    let status = server.status.clone();
    let every = settings.status_throttle.max(Duration::from_millis(10));
    loops.spawn(periodic("status refresh", every, stop, move || {
        let status = status.clone();
        async move {
            if let Err(e) = status.poke().await {
                tracing::warn!(error = %e, "status refresh failed");
            }
        }
    }));
    loops
}

/// On the embedded and Redis stacks, the stream handlers (expiry always,
/// the back-office sync with a back office), each a [`LeasedMapping`]: one
/// reader for the whole fleet, from the checkpoint in coordination, given-up
/// records raised as alerts.
async fn leased_mappings(
    server: Arc<Server>,
    expiry: Arc<ExpiryHandler>,
    stop: watch::Receiver<bool>,
) {
    let config = &server.config;
    let stack = &server.stack;
    let mut handlers: Vec<Arc<dyn BatchHandler>> = vec![expiry];
    match crate::build::back_office(config).await {
        Ok(Some(office)) => handlers.push(Arc::new(SyncHandler::new(office))),
        Ok(None) => {}
        Err(e) => {
            tracing::error!(error = %e, "back office unreachable: PAID records are not synced")
        }
    }
    let mut running = JoinSet::new();
    for handler in handlers {
        let name = handler.name();
        let lease = LeaseConfig::new(&stack.prefix, &stack.sale, name, &server.instance);
        let stream = stack.stream.clone();
        let destination = Arc::new(AlertDestination::new(stack.alerts.clone()));
        let clock = stack.clock.clone();
        let mapping = config.stack.mapping.clone();
        let leased = LeasedMapping::new(
            stack.coordination.clone(),
            lease,
            name,
            Box::new(move |start| {
                EventSourceMapping::new(
                    stream.clone(),
                    handler.clone(),
                    destination.clone(),
                    clock.clone(),
                    mapping.clone(),
                    start,
                )
            }),
        );
        let rx = stop.clone();
        running.spawn(async move { leased.run(rx).await });
    }
    while running.join_next().await.is_some() {}
}

/// On the AWS stack, the two stream handlers the way Lambda runs them: an
/// event-source mapping each (its own stream reader and position), the
/// expiry handler always, the back-office sync when a back office is
/// configured, both giving up to the on-failure queue.
async fn stream_mappings(
    server: Arc<Server>,
    expiry: Arc<ExpiryHandler>,
    stop: watch::Receiver<bool>,
) {
    let config = &server.config;
    let clock = server.stack.clock.clone();
    // the server's own clients (their calls counted with the others'),
    // else new ones
    let adapters = match &server.aws {
        Some(a) => a.clone(),
        None => match crate::build::aws_adapters(config, clock.clone()).await {
            Ok(a) => a,
            Err(e) => {
                tracing::error!(error = %e, "stream mappings cannot start");
                return;
            }
        },
    };
    let mut handlers: Vec<Arc<dyn BatchHandler>> = vec![expiry];
    match crate::build::back_office(config).await {
        Ok(Some(office)) => handlers.push(Arc::new(SyncHandler::new(office))),
        Ok(None) => tracing::warn!("no back office configured: PAID records are not synced"),
        Err(e) => {
            tracing::error!(error = %e, "back office unreachable: PAID records are not synced")
        }
    }
    let mut running = JoinSet::new();
    for handler in handlers {
        let name = handler.name();
        let stream: Arc<dyn ChangeStream> = match adapters.stream().await {
            Ok(s) => Arc::new(s),
            Err(e) => {
                tracing::error!(handler = name, error = %e, "no stream reader");
                continue;
            }
        };
        // armed: this reader goes through the stream faults too
        let stream = match (&server.faults, &config.faults) {
            (Some(injector), Some(f)) => crate::armed::stream(
                server.bare_stack().records.clone(),
                stream,
                injector,
                &f.instance,
            ),
            _ => stream,
        };
        match EventSourceMapping::new(
            stream,
            handler,
            adapters.failures.clone(),
            clock.clone(),
            config.stack.mapping.clone(),
            0,
        ) {
            Ok(m) => {
                let rx = stop.clone();
                running.spawn(async move { m.run(rx).await });
            }
            Err(e) => tracing::error!(handler = name, error = %e, "stream mapping refused"),
        }
    }
    while running.join_next().await.is_some() {}
}

/// Copies the loops' counters and the backends' figures into `/metrics`.
struct Sampler {
    server: Arc<Server>,
    api: Arc<ApiState>,
    worker: Arc<Worker>,
    reconciler: Arc<Reconciler>,
    expiry: Arc<ExpiryHandler>,
}

impl Sampler {
    async fn sample(&self) {
        let stack = &self.server.stack;
        let r = self.reconciler.stats();
        let w = self.worker.stats();
        let e = self.expiry.stats();
        let t = self.server.bkash.tokens().stats();
        let mut f = ServiceFigures {
            reconciler_paid: r.paid,
            reconciler_released: r.released,
            expiry_released: e.released,
            extensions: r.extended,
            query_failures: r.query_failures,
            orphans_recovered: r.orphans_recovered,
            pending_undone: r.pending_undone,
            alerts: 0,
            worker: vec![
                ("stored", w.stored),
                ("replaced", w.replaced),
                ("duplicate", w.duplicates),
                ("paid_already", w.paid_already),
                ("stale", w.stale),
                ("released", w.released),
                ("left", w.left),
                ("poison", w.poison),
                ("dead_letter", w.dead_letters),
                ("visibility_extended", w.visibility_extended),
                ("lost", w.lost),
            ],
            token_grants: t.grants,
            token_refreshes: t.refreshes,
            token_failures: t.failures,
            aws_calls: self.server.aws.as_ref().map_or_else(Vec::new, |a| {
                a.clients
                    .calls
                    .snapshot()
                    .into_iter()
                    .map(|c| (c.service, c.operation, c.calls))
                    .collect()
            }),
            redis_pools: self
                .server
                .redis_pools
                .iter()
                .map(|(name, pool)| (*name, pool.figures()))
                .collect(),
            ..ServiceFigures::default()
        };
        // the backends are asked, each within a bound; a figure that cannot
        // be read shows as 0 until the next sample (a counter never goes
        // back, so only the queue gauges dip)
        let within = METRICS_EVERY;
        if let Ok(Ok(d)) = tokio::time::timeout(within, stack.queue.depth()).await {
            f.queue_visible = d.visible;
            f.queue_in_flight = d.in_flight;
        }
        if let Ok(Ok(age)) = tokio::time::timeout(within, stack.queue.oldest_age()).await {
            f.queue_oldest_age_ms = age.map_or(0, |a| a.as_millis() as u64);
        }
        if let Ok(Ok(dead)) = tokio::time::timeout(within, stack.queue.dead_letters()).await {
            f.dead_letters = dead.len() as u64;
        }
        if let Ok(Ok(alerts)) =
            tokio::time::timeout(within, self.server.outputs.alerts_raised()).await
        {
            f.alerts = alerts.len() as u64;
        }
        if let Ok(Ok(th)) = tokio::time::timeout(within, stack.records.throttles()).await {
            f.throttled_reads = th.reads;
            f.throttled_writes = th.writes;
        }
        self.api.metrics.sync_services(&f);
    }
}

/// Runs `tick` every `every` until `stop` says so.
async fn periodic<F, Fut>(
    name: &'static str,
    every: Duration,
    mut stop: watch::Receiver<bool>,
    tick: F,
) where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let mut interval = tokio::time::interval(every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            _ = interval.tick() => {}
        }
        tick().await;
    }
    tracing::info!(name, "stopped");
}
