//! One instance serving: the API ([`booking_api::router`]) and the `/ops/`
//! routes on one listener, and beside them, on the same instance, the
//! background loops:
//!
//! - the worker (queue → records);
//! - the reconciler (one leader per sale under the lock; this instance's
//!   owner token is its random instance id);
//! - the expiry handler (TTL deletions on the change stream → undo);
//! - the TTL service of the embedded record store: [`EmbeddedRecords::sweep_ttl`]
//!   every sweep interval, late by design as DynamoDB's is;
//! - a status refresh: a throttled [`StatusWriter::poke`] every throttle window
//!   (2 s), so the last change of a burst (which the throttle skipped) and
//!   releases (which no request pokes) reach the document and clear the full
//!   latches.
//!
//! Everything stops when `shutdown` completes: the server stops accepting
//! and finishes its requests, each loop finishes what it is doing (bounded),
//! and `serve` returns after all have ended, or after [`SHUTDOWN_GRACE`].
//!
//! [`EmbeddedRecords::sweep_ttl`]: booking_embedded::records::EmbeddedRecords::sweep_ttl
//! [`StatusWriter::poke`]: booking::StatusWriter::poke

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use booking_service::expiry::ExpiryHandler;
use booking_service::reconciler::{Reconciler, ReconcilerConfig, ReconcilerPorts};
use booking_service::worker::{Worker, WorkerConfig};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::build::Server;

/// Records the TTL service deletes per sweep at most.
pub const TTL_SWEEP_LIMIT: usize = 1_000;
/// The worker's long poll.
pub const WORKER_WAIT: Duration = Duration::from_secs(5);
/// The expiry handler's wait for stream records, and its back-off after a failure.
pub const EXPIRY_WAIT: Duration = Duration::from_secs(1);
/// How long the loops get to stop after the server has.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(60);

/// The API, the ops routes and every background loop, until `shutdown`.
pub async fn serve(
    server: Arc<Server>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let stop_tx = Arc::new(stop_tx);
    let mut loops = spawn_loops(&server, stop_rx);
    let app = booking_api::router(server.stack.clone()).merge(crate::admin::routes(server.clone()));
    let addr = listener.local_addr()?;
    tracing::info!(%addr, sale = %server.stack.sale, instance = %server.instance, "booking server listening");
    let stop = stop_tx.clone();
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            tracing::info!("shutting down");
            let _ = stop.send(true);
        })
        .await;
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

fn spawn_loops(server: &Arc<Server>, stop: watch::Receiver<bool>) -> JoinSet<()> {
    let stack = &server.stack;
    let settings = stack.settings.clone();
    let mut loops = JoinSet::new();

    let worker = Worker::new(
        stack.queue.clone(),
        stack.records.clone(),
        stack.ledger.clone(),
        stack.alerts.clone(),
        WorkerConfig {
            wait: WORKER_WAIT,
            ..WorkerConfig::default()
        },
    );
    let rx = stop.clone();
    loops.spawn(async move { worker.run(rx).await });

    let reconciler = Reconciler::new(
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
    );
    let rx = stop.clone();
    loops.spawn(async move { reconciler.run(rx).await });

    let expiry = ExpiryHandler::new(stack.stream.clone(), stack.ledger.clone(), 0);
    let rx = stop.clone();
    loops.spawn(async move { expiry.run(rx, EXPIRY_WAIT, EXPIRY_WAIT).await });

    let records = server.embedded.records.clone();
    let every = settings.sweep_interval.max(Duration::from_millis(10));
    let rx = stop.clone();
    loops.spawn(periodic("ttl sweep", every, rx, move || {
        let records = records.clone();
        async move {
            let deleted = records.sweep_ttl(TTL_SWEEP_LIMIT);
            if !deleted.is_empty() {
                tracing::info!(
                    deleted = deleted.len(),
                    "TTL service deleted expired records"
                );
            }
        }
    }));

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
