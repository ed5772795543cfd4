//! An instance armed with a fault schedule (`[faults]`, rehearsals only):
//! one [`Injector`] per instance, dormant until `POST /ops/faults/start`,
//! and every port of its stack behind its `faults` wrapper, labelled with
//! the instance's name.
//!
//! What is wrapped is what the instance uses: the request path, the confirm
//! paths, the worker, the reconciler, the stream handlers, the TTL sweep's
//! lock, the status writer and the gateway client's token cache all reach
//! the backends through these ports. What is not: the outputs the audit
//! reads back ([`booking::OutputLog`]), the TTL service's sweep itself (not
//! a port), and the AWS stream mappings' own readers, which read the stream
//! through a wrapper of their own ([`stream`]).
//!
//! The injector's clock is the unskewed system clock; the instance's clock
//! (the stack's, the status writer's, the gateway client's) is a
//! [`SkewedClock`] over it, so `clock_skew` faults move it. The backends'
//! own clocks (the embedded stores stand for remote services) are not
//! skewed.

use std::sync::Arc;

use booking::{
    Alerts, ChangeStream, Clock, Coordination, Ledger, Mailer, PaymentGateway, Queue, RecordStore,
    StatusSink, SystemClock,
};
use faults::{
    FaultKind, FaultyAlerts, FaultyCoordination, FaultyGateway, FaultyLedger, FaultyMailer,
    FaultyQueue, FaultyRecords, FaultySink, Injector, Killer, Scope, SkewedClock,
};

use crate::config::FaultsConfig;

/// The ports of one instance that a fault schedule can reach.
#[derive(Debug, Clone)]
pub struct Ports {
    /// Seats.
    pub ledger: Arc<dyn Ledger>,
    /// Booking records.
    pub records: Arc<dyn RecordStore>,
    /// The records' change stream.
    pub stream: Arc<dyn ChangeStream>,
    /// The admission queue.
    pub queue: Arc<dyn Queue>,
    /// Locks, values, latches.
    pub coordination: Arc<dyn Coordination>,
    /// Confirmation emails.
    pub mailer: Arc<dyn Mailer>,
    /// Alerts to a human.
    pub alerts: Arc<dyn Alerts>,
    /// The status document's store.
    pub status_sink: Arc<dyn StatusSink>,
    /// The instance's clock.
    pub clock: Arc<dyn Clock>,
}

/// Whether the server carries out `fault` itself: a port fault, or a kill
/// at a point of the request path. The rest is the fleet's conductor's.
pub fn carried_out_here(fault: &faults::FaultSpec) -> bool {
    fault.target.scope() == Scope::Port || matches!(fault.kind, FaultKind::Kill { point: Some(_) })
}

/// The injector of an instance armed with `config`: dormant, on the
/// unskewed system clock, its coins seeded by the run's seed and the
/// instance's label, with `killer` run at the armed kill points (none: a
/// kill point is logged and the call goes on).
pub fn injector(config: &FaultsConfig, killer: Option<Killer>) -> Arc<Injector> {
    let ignored: Vec<&str> = config
        .schedule
        .faults
        .iter()
        .filter(|f| !carried_out_here(f))
        .map(|f| f.name.as_str())
        .collect();
    if !ignored.is_empty() {
        tracing::info!(
            faults = ?ignored,
            "faults of other scopes are the fleet conductor's: this instance ignores them"
        );
    }
    let armed = killer.is_some();
    let injector = Injector::dormant(
        config.schedule.clone(),
        config.seed_for_instance(),
        Arc::new(SystemClock),
    );
    let injector = match killer {
        Some(k) => injector.with_killer(k),
        None => injector,
    };
    tracing::warn!(
        instance = %config.instance,
        faults = config.schedule.faults.len(),
        kill_points_kill = armed,
        "fault hooks armed (dormant until POST /ops/faults/start)"
    );
    Arc::new(injector)
}

/// `bare`'s ports, each behind its fault wrapper labelled `instance`.
pub fn wrap(bare: &Ports, injector: &Arc<Injector>, instance: &str) -> Ports {
    let records = Arc::new(
        FaultyRecords::new(bare.records.clone(), bare.stream.clone(), injector.clone())
            .on_instance(instance),
    );
    Ports {
        ledger: Arc::new(
            FaultyLedger::new(bare.ledger.clone(), injector.clone()).on_instance(instance),
        ),
        records: records.clone(),
        stream: records,
        queue: Arc::new(
            FaultyQueue::new(bare.queue.clone(), injector.clone()).on_instance(instance),
        ),
        coordination: Arc::new(
            FaultyCoordination::new(bare.coordination.clone(), injector.clone())
                .on_instance(instance),
        ),
        mailer: Arc::new(
            FaultyMailer::new(bare.mailer.clone(), injector.clone()).on_instance(instance),
        ),
        alerts: Arc::new(
            FaultyAlerts::new(bare.alerts.clone(), injector.clone()).on_instance(instance),
        ),
        status_sink: Arc::new(
            FaultySink::new(bare.status_sink.clone(), injector.clone()).on_instance(instance),
        ),
        clock: Arc::new(
            SkewedClock::new(bare.clock.clone(), injector.clone()).on_instance(instance),
        ),
    }
}

/// The gateway behind its fault wrapper (`create`, `execute`, `query`, and
/// the kill points after them).
pub fn gateway(
    bare: Arc<dyn PaymentGateway>,
    injector: &Arc<Injector>,
    instance: &str,
) -> Arc<dyn PaymentGateway> {
    Arc::new(FaultyGateway::new(bare, injector.clone()).on_instance(instance))
}

/// A change stream of its own (the AWS stream mappings' readers) behind the
/// `stream` faults; `records` is only there to fill the wrapper.
pub fn stream(
    records: Arc<dyn RecordStore>,
    stream: Arc<dyn ChangeStream>,
    injector: &Arc<Injector>,
    instance: &str,
) -> Arc<dyn ChangeStream> {
    Arc::new(FaultyRecords::new(records, stream, injector.clone()).on_instance(instance))
}
