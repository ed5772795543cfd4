//! One wrapper per port: each holds the backend it wraps and the run's
//! [`Injector`], asks the injector before every call, and surfaces an injected
//! failure in the port's own error type, the way the real service would.
//! Because they wrap the traits, they work the same over the embedded stack
//! and over Redis, DynamoDB, SQS or the gateway.
//!
//! | fault | ledger (`LedgerError`) | records, stream (`RecordError`) | queue (`QueueError`) | coordination (`CoordinationError`) | gateway (`GatewayError`) | mailer, alerts, status sink (`NotifyError`) |
//! |---|---|---|---|---|---|---|
//! | `error` | `Unavailable` | `Unavailable` | `Unavailable` | `Unavailable` | `Unavailable` | `Unavailable` |
//! | `timeout` | `Unavailable` ("timed out") | `Unavailable` ("timed out") | `Unavailable` ("timed out") | `Unavailable` ("timed out") | `Timeout` | `Unavailable` ("timed out") |
//! | `throttle` | `Unavailable` ("throttled": Redis has no throttling error; max clients reached) | `Throttled` | `Throttled` | `Unavailable` ("throttled") | `Unavailable` ("throttled", HTTP 429) | `Unavailable` ("throttled") |
//! | `reset` | `Unavailable` ("connection reset") | `Unavailable` ("connection reset") | `Unavailable` ("connection reset") | `Unavailable` ("connection reset") | `Timeout` (its "may or may not have taken effect") | `Unavailable` ("connection reset") |
//! | `latency`, `hang` | none: the call is late | none | none | none | `Timeout` once the call's `within` is spent | none |
//!
//! Every message starts with `injected fault <name>:`, so a log line says which
//! fault it was. Injected throttles are not added to
//! [`RecordStore::throttles`]: that figure is the backend's own (the audit
//! requires it to be zero); the fault log accounts for the injected ones.
//!
//! The gateway's calls carry the time they may use (`within`): injected delays
//! come out of it, and the wrapped call gets what is left.
//!
//! [`SkewedClock`] is the clock's wrapper: it reads its inner clock plus the
//! active `clock_skew` faults. The injector's own clock must be an unskewed one.
//!
//! Each wrapper may be labelled with an instance name (`on_instance`), so a
//! fault with `instances = [..]` hits only some instances of a fleet that
//! shares one backend.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use booking::coordination::Coordination;
use booking::gateway::{CreatePayment, CreatedPayment, Executed, PaymentGateway, PaymentStatus};
use booking::ledger::{Admission, Counters, Hold, Ledger, Step};
use booking::notify::{Alert, Alerts, Confirmation, Mailer, StatusSink};
use booking::queue::{Message, Queue, QueueDepth, ReceiptHandle, Received, SendOutcome};
use booking::records::{
    BookingRecord, ChangeStream, Condition, ConfirmPath, RecordStore, StreamRecord, Throttles,
};
use booking::{
    CandidateHash, Clock, CoordinationError, GatewayError, LedgerError, Level, NotifyError,
    PaymentId, QueueError, RecordError, RequestToken, SaleId,
};

use crate::injector::{Failure, Injector, Verdict};
use crate::schedule::Target;

/// A port's error type, built from an injected failure.
pub trait FaultError: Sized {
    /// The error the real service would give for `failure` (from fault
    /// `fault`).
    fn from_fault(fault: &str, failure: Failure) -> Self;
}

fn describe(fault: &str, failure: Failure) -> String {
    match failure {
        Failure::Error => format!("injected fault {fault}: error"),
        Failure::Timeout { after_ms } => {
            format!("injected fault {fault}: timed out after {after_ms} ms")
        }
        Failure::Throttle => format!("injected fault {fault}: throttled"),
        Failure::Reset => format!("injected fault {fault}: connection reset, outcome unknown"),
    }
}

impl FaultError for LedgerError {
    fn from_fault(fault: &str, failure: Failure) -> Self {
        LedgerError::Unavailable(describe(fault, failure))
    }
}

impl FaultError for RecordError {
    fn from_fault(fault: &str, failure: Failure) -> Self {
        match failure {
            Failure::Throttle => RecordError::Throttled,
            _ => RecordError::Unavailable(describe(fault, failure)),
        }
    }
}

impl FaultError for QueueError {
    fn from_fault(fault: &str, failure: Failure) -> Self {
        match failure {
            Failure::Throttle => QueueError::Throttled,
            _ => QueueError::Unavailable(describe(fault, failure)),
        }
    }
}

impl FaultError for CoordinationError {
    fn from_fault(fault: &str, failure: Failure) -> Self {
        CoordinationError::Unavailable(describe(fault, failure))
    }
}

impl FaultError for GatewayError {
    fn from_fault(fault: &str, failure: Failure) -> Self {
        match failure {
            Failure::Timeout { .. } | Failure::Reset => GatewayError::Timeout,
            Failure::Error => GatewayError::Unavailable(describe(fault, failure)),
            Failure::Throttle => {
                GatewayError::Unavailable(format!("{} (HTTP 429)", describe(fault, failure)))
            }
        }
    }
}

impl FaultError for NotifyError {
    fn from_fault(fault: &str, failure: Failure) -> Self {
        NotifyError::Unavailable(describe(fault, failure))
    }
}

/// Where a wrapper sits: the run's injector and the instance label.
#[derive(Debug, Clone)]
struct Site {
    injector: Arc<Injector>,
    instance: Option<String>,
}

impl Site {
    /// Runs `call` (a lazy future) under the faults active for `op`.
    async fn run<T, E: FaultError>(
        &self,
        target: Target,
        op: &str,
        call: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        self.run_where(target, op, call, |_| true).await
    }

    /// [`Site::run`], where a kill point after the call counts only an
    /// answer that `did` says did the work (an admission that counted a
    /// seat, not one that found the level full or the candidate holding:
    /// a kill after a refusal leaves nothing behind to recover).
    async fn run_where<T, E: FaultError>(
        &self,
        target: Target,
        op: &str,
        call: impl Future<Output = Result<T, E>>,
        did: impl FnOnce(&T) -> bool,
    ) -> Result<T, E> {
        let verdict = self
            .injector
            .intercept(target, op, self.instance.as_deref(), None)
            .await;
        let result = finish(verdict, call).await;
        let done = result.as_ref().is_ok_and(did);
        self.injector
            .after_call(target, op, self.instance.as_deref(), done);
        result
    }
}

async fn finish<T, E: FaultError>(
    verdict: Verdict,
    call: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    match verdict {
        Verdict::Proceed { .. } => call.await,
        Verdict::Fail { fault, failure } => Err(E::from_fault(&fault, failure)),
        Verdict::Reset { fault, applied } => {
            if applied {
                // the backend did the work; the answer is what was lost
                let _lost = call.await;
            }
            Err(E::from_fault(&fault, Failure::Reset))
        }
    }
}

macro_rules! labelled {
    ($name:ident) => {
        impl $name {
            /// Labels the wrapper with an instance name, for faults that
            /// name `instances`.
            pub fn on_instance(mut self, instance: impl Into<String>) -> Self {
                self.site.instance = Some(instance.into());
                self
            }

            /// The run's injector.
            pub fn injector(&self) -> &Arc<Injector> {
                &self.site.injector
            }
        }
    };
}

/// The seat ledger, with faults.
#[derive(Debug, Clone)]
pub struct FaultyLedger {
    inner: Arc<dyn Ledger>,
    site: Site,
}

impl FaultyLedger {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Ledger>, injector: Arc<Injector>) -> FaultyLedger {
        FaultyLedger {
            inner,
            site: Site {
                injector,
                instance: None,
            },
        }
    }
}
labelled!(FaultyLedger);

#[async_trait]
impl Ledger for FaultyLedger {
    async fn reset(&self, sale: &SaleId, levels: &[(Level, u32)]) -> Result<(), LedgerError> {
        self.site
            .run(Target::Ledger, "reset", self.inner.reset(sale, levels))
            .await
    }
    async fn load_candidates(
        &self,
        sale: &SaleId,
        candidates: &[CandidateHash],
    ) -> Result<u64, LedgerError> {
        self.site
            .run(
                Target::Ledger,
                "load_candidates",
                self.inner.load_candidates(sale, candidates),
            )
            .await
    }
    async fn set_open(&self, sale: &SaleId, open: bool) -> Result<(), LedgerError> {
        self.site
            .run(Target::Ledger, "set_open", self.inner.set_open(sale, open))
            .await
    }
    async fn admit(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        level: &Level,
        token: &RequestToken,
        now_ms: u64,
    ) -> Result<Admission, LedgerError> {
        self.site
            .run_where(
                Target::Ledger,
                "admit",
                self.inner.admit(sale, candidate, level, token, now_ms),
                |a| matches!(a, Admission::Admitted { .. }),
            )
            .await
    }
    async fn attach_payment(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        token: &RequestToken,
        payment_id: &PaymentId,
        deadline_ms: u64,
    ) -> Result<Step, LedgerError> {
        self.site
            .run(
                Target::Ledger,
                "attach_payment",
                self.inner
                    .attach_payment(sale, candidate, token, payment_id, deadline_ms),
            )
            .await
    }
    async fn undo_admission(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        token: &RequestToken,
    ) -> Result<Step, LedgerError> {
        self.site
            .run(
                Target::Ledger,
                "undo_admission",
                self.inner.undo_admission(sale, candidate, token),
            )
            .await
    }
    async fn release(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<Step, LedgerError> {
        self.site
            .run(
                Target::Ledger,
                "release",
                self.inner.release(sale, candidate, payment_id),
            )
            .await
    }
    async fn mark_paid(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<Step, LedgerError> {
        self.site
            .run(
                Target::Ledger,
                "mark_paid",
                self.inner.mark_paid(sale, candidate, payment_id),
            )
            .await
    }
    async fn extend(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
        deadline_ms: u64,
    ) -> Result<Step, LedgerError> {
        self.site
            .run(
                Target::Ledger,
                "extend",
                self.inner.extend(sale, candidate, payment_id, deadline_ms),
            )
            .await
    }
    async fn hold(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
    ) -> Result<Option<Hold>, LedgerError> {
        self.site
            .run(Target::Ledger, "hold", self.inner.hold(sale, candidate))
            .await
    }
    async fn paid(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
    ) -> Result<Option<PaymentId>, LedgerError> {
        self.site
            .run(Target::Ledger, "paid", self.inner.paid(sale, candidate))
            .await
    }
    async fn stale_pending(
        &self,
        sale: &SaleId,
        admitted_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<(CandidateHash, Hold)>, LedgerError> {
        self.site
            .run(
                Target::Ledger,
                "stale_pending",
                self.inner.stale_pending(sale, admitted_before_ms, limit),
            )
            .await
    }
    async fn stale_held(
        &self,
        sale: &SaleId,
        deadline_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<(CandidateHash, Hold)>, LedgerError> {
        self.site
            .run(
                Target::Ledger,
                "stale_held",
                self.inner.stale_held(sale, deadline_before_ms, limit),
            )
            .await
    }
    async fn counters(&self, sale: &SaleId) -> Result<Counters, LedgerError> {
        self.site
            .run(Target::Ledger, "counters", self.inner.counters(sale))
            .await
    }
}

/// The record store and its change stream, with faults (`records` and
/// `stream` targets).
#[derive(Debug, Clone)]
pub struct FaultyRecords {
    store: Arc<dyn RecordStore>,
    stream: Arc<dyn ChangeStream>,
    site: Site,
}

impl FaultyRecords {
    /// Wraps a store and its stream.
    pub fn new(
        store: Arc<dyn RecordStore>,
        stream: Arc<dyn ChangeStream>,
        injector: Arc<Injector>,
    ) -> FaultyRecords {
        FaultyRecords {
            store,
            stream,
            site: Site {
                injector,
                instance: None,
            },
        }
    }

    /// Wraps a backend that is both (like the embedded store).
    pub fn over<B: RecordStore + ChangeStream + 'static>(
        backend: Arc<B>,
        injector: Arc<Injector>,
    ) -> FaultyRecords {
        FaultyRecords::new(backend.clone(), backend, injector)
    }
}
labelled!(FaultyRecords);

#[async_trait]
impl RecordStore for FaultyRecords {
    async fn put(&self, record: BookingRecord, condition: Condition) -> Result<(), RecordError> {
        self.site
            .run(Target::Records, "put", self.store.put(record, condition))
            .await
    }
    async fn replace(
        &self,
        record: BookingRecord,
        condition: Condition,
    ) -> Result<(), RecordError> {
        self.site
            .run(
                Target::Records,
                "replace",
                self.store.replace(record, condition),
            )
            .await
    }
    async fn mark_paid(
        &self,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
        path: ConfirmPath,
        now_ms: u64,
    ) -> Result<BookingRecord, RecordError> {
        self.site
            .run(
                Target::Records,
                "mark_paid",
                self.store.mark_paid(candidate, payment_id, path, now_ms),
            )
            .await
    }
    async fn mark_emailed(
        &self,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<BookingRecord, RecordError> {
        self.site
            .run(
                Target::Records,
                "mark_emailed",
                self.store.mark_emailed(candidate, payment_id),
            )
            .await
    }
    async fn extend(
        &self,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
        deadline_ms: u64,
    ) -> Result<BookingRecord, RecordError> {
        self.site
            .run(
                Target::Records,
                "extend",
                self.store.extend(candidate, payment_id, deadline_ms),
            )
            .await
    }
    async fn note_query_failure(
        &self,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<BookingRecord, RecordError> {
        self.site
            .run(
                Target::Records,
                "note_query_failure",
                self.store.note_query_failure(candidate, payment_id),
            )
            .await
    }
    async fn clear_query_failures(
        &self,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<BookingRecord, RecordError> {
        self.site
            .run(
                Target::Records,
                "clear_query_failures",
                self.store.clear_query_failures(candidate, payment_id),
            )
            .await
    }
    async fn delete(
        &self,
        candidate: &CandidateHash,
        condition: Condition,
    ) -> Result<BookingRecord, RecordError> {
        self.site
            .run(
                Target::Records,
                "delete",
                self.store.delete(candidate, condition),
            )
            .await
    }
    async fn get(
        &self,
        candidate: &CandidateHash,
        consistent: bool,
    ) -> Result<Option<BookingRecord>, RecordError> {
        self.site
            .run(
                Target::Records,
                "get",
                self.store.get(candidate, consistent),
            )
            .await
    }
    async fn by_payment(
        &self,
        payment_id: &PaymentId,
    ) -> Result<Option<BookingRecord>, RecordError> {
        self.site
            .run(
                Target::Records,
                "by_payment",
                self.store.by_payment(payment_id),
            )
            .await
    }
    async fn held_due(
        &self,
        deadline_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<BookingRecord>, RecordError> {
        self.site
            .run(
                Target::Records,
                "held_due",
                self.store.held_due(deadline_before_ms, limit),
            )
            .await
    }
    async fn owed_emails(
        &self,
        paid_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<BookingRecord>, RecordError> {
        self.site
            .run(
                Target::Records,
                "owed_emails",
                self.store.owed_emails(paid_before_ms, limit),
            )
            .await
    }
    async fn scan_all(&self) -> Result<Vec<BookingRecord>, RecordError> {
        self.site
            .run(Target::Records, "scan_all", self.store.scan_all())
            .await
    }
    async fn throttles(&self) -> Result<Throttles, RecordError> {
        self.site
            .run(Target::Records, "throttles", self.store.throttles())
            .await
    }
}

#[async_trait]
impl ChangeStream for FaultyRecords {
    async fn read(
        &self,
        after_sequence: u64,
        limit: usize,
        wait: Duration,
    ) -> Result<Vec<StreamRecord>, RecordError> {
        self.site
            .run(
                Target::Stream,
                "read",
                self.stream.read(after_sequence, limit, wait),
            )
            .await
    }
}

/// The queue, with faults.
#[derive(Debug, Clone)]
pub struct FaultyQueue {
    inner: Arc<dyn Queue>,
    site: Site,
}

impl FaultyQueue {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Queue>, injector: Arc<Injector>) -> FaultyQueue {
        FaultyQueue {
            inner,
            site: Site {
                injector,
                instance: None,
            },
        }
    }
}
labelled!(FaultyQueue);

#[async_trait]
impl Queue for FaultyQueue {
    async fn send(&self, message: Message) -> Result<SendOutcome, QueueError> {
        self.site
            .run(Target::Queue, "send", self.inner.send(message))
            .await
    }
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Received>, QueueError> {
        self.site
            .run(Target::Queue, "receive", self.inner.receive(max, wait))
            .await
    }
    async fn delete(&self, receipt: &ReceiptHandle) -> Result<(), QueueError> {
        self.site
            .run(Target::Queue, "delete", self.inner.delete(receipt))
            .await
    }
    async fn change_visibility(
        &self,
        receipt: &ReceiptHandle,
        timeout: Duration,
    ) -> Result<(), QueueError> {
        self.site
            .run(
                Target::Queue,
                "change_visibility",
                self.inner.change_visibility(receipt, timeout),
            )
            .await
    }
    async fn oldest_age(&self) -> Result<Option<Duration>, QueueError> {
        self.site
            .run(Target::Queue, "oldest_age", self.inner.oldest_age())
            .await
    }
    async fn depth(&self) -> Result<QueueDepth, QueueError> {
        self.site
            .run(Target::Queue, "depth", self.inner.depth())
            .await
    }
    async fn dead_letters(&self) -> Result<Vec<Message>, QueueError> {
        self.site
            .run(Target::Queue, "dead_letters", self.inner.dead_letters())
            .await
    }
}

/// Coordination, with faults.
#[derive(Debug, Clone)]
pub struct FaultyCoordination {
    inner: Arc<dyn Coordination>,
    site: Site,
}

impl FaultyCoordination {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Coordination>, injector: Arc<Injector>) -> FaultyCoordination {
        FaultyCoordination {
            inner,
            site: Site {
                injector,
                instance: None,
            },
        }
    }
}
labelled!(FaultyCoordination);

#[async_trait]
impl Coordination for FaultyCoordination {
    async fn try_lock(
        &self,
        key: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<bool, CoordinationError> {
        self.site
            .run(
                Target::Coordination,
                "try_lock",
                self.inner.try_lock(key, owner, ttl),
            )
            .await
    }
    async fn unlock(&self, key: &str, owner: &str) -> Result<bool, CoordinationError> {
        self.site
            .run(
                Target::Coordination,
                "unlock",
                self.inner.unlock(key, owner),
            )
            .await
    }
    async fn extend_lock(
        &self,
        key: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<bool, CoordinationError> {
        self.site
            .run(
                Target::Coordination,
                "extend_lock",
                self.inner.extend_lock(key, owner, ttl),
            )
            .await
    }
    async fn get(&self, key: &str) -> Result<Option<String>, CoordinationError> {
        self.site
            .run(Target::Coordination, "get", self.inner.get(key))
            .await
    }
    async fn set(
        &self,
        key: &str,
        value: &str,
        ttl: Option<Duration>,
    ) -> Result<(), CoordinationError> {
        self.site
            .run(Target::Coordination, "set", self.inner.set(key, value, ttl))
            .await
    }
    async fn delete(&self, key: &str) -> Result<bool, CoordinationError> {
        self.site
            .run(Target::Coordination, "delete", self.inner.delete(key))
            .await
    }
    async fn set_once(
        &self,
        key: &str,
        value: &str,
        ttl: Option<Duration>,
    ) -> Result<bool, CoordinationError> {
        self.site
            .run(
                Target::Coordination,
                "set_once",
                self.inner.set_once(key, value, ttl),
            )
            .await
    }
}

/// The payment gateway, with faults. Injected delays come out of each call's
/// `within`; the wrapped call gets what is left.
#[derive(Debug, Clone)]
pub struct FaultyGateway {
    inner: Arc<dyn PaymentGateway>,
    site: Site,
}

impl FaultyGateway {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn PaymentGateway>, injector: Arc<Injector>) -> FaultyGateway {
        FaultyGateway {
            inner,
            site: Site {
                injector,
                instance: None,
            },
        }
    }

    async fn run<T, F, Fut>(&self, op: &str, within: Duration, call: F) -> Result<T, GatewayError>
    where
        F: FnOnce(Duration) -> Fut,
        Fut: Future<Output = Result<T, GatewayError>>,
    {
        let verdict = self
            .site
            .injector
            .intercept(
                Target::Gateway,
                op,
                self.site.instance.as_deref(),
                Some(within),
            )
            .await;
        let left = match &verdict {
            Verdict::Proceed { spent } => within.saturating_sub(*spent),
            _ => within,
        };
        let result = finish(verdict, call(left)).await;
        self.site.injector.after_call(
            Target::Gateway,
            op,
            self.site.instance.as_deref(),
            result.is_ok(),
        );
        result
    }
}
labelled!(FaultyGateway);

#[async_trait]
impl PaymentGateway for FaultyGateway {
    async fn create(
        &self,
        req: &CreatePayment,
        within: Duration,
    ) -> Result<CreatedPayment, GatewayError> {
        self.run("create", within, |left| self.inner.create(req, left))
            .await
    }
    async fn execute(
        &self,
        payment: &PaymentId,
        within: Duration,
    ) -> Result<Executed, GatewayError> {
        self.run("execute", within, |left| self.inner.execute(payment, left))
            .await
    }
    async fn query(
        &self,
        payment: &PaymentId,
        within: Duration,
    ) -> Result<PaymentStatus, GatewayError> {
        self.run("query", within, |left| self.inner.query(payment, left))
            .await
    }
}

/// The mailer, with faults.
#[derive(Debug, Clone)]
pub struct FaultyMailer {
    inner: Arc<dyn Mailer>,
    site: Site,
}

impl FaultyMailer {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Mailer>, injector: Arc<Injector>) -> FaultyMailer {
        FaultyMailer {
            inner,
            site: Site {
                injector,
                instance: None,
            },
        }
    }
}
labelled!(FaultyMailer);

#[async_trait]
impl Mailer for FaultyMailer {
    async fn send(&self, confirmation: &Confirmation) -> Result<(), NotifyError> {
        self.site
            .run(Target::Mailer, "send", self.inner.send(confirmation))
            .await
    }
}

/// Alerts, with faults.
#[derive(Debug, Clone)]
pub struct FaultyAlerts {
    inner: Arc<dyn Alerts>,
    site: Site,
}

impl FaultyAlerts {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Alerts>, injector: Arc<Injector>) -> FaultyAlerts {
        FaultyAlerts {
            inner,
            site: Site {
                injector,
                instance: None,
            },
        }
    }
}
labelled!(FaultyAlerts);

#[async_trait]
impl Alerts for FaultyAlerts {
    async fn raise(&self, alert: Alert) -> Result<(), NotifyError> {
        self.site
            .run(Target::Alerts, "raise", self.inner.raise(alert))
            .await
    }
}

/// The status document's store, with faults.
#[derive(Debug, Clone)]
pub struct FaultySink {
    inner: Arc<dyn StatusSink>,
    site: Site,
}

impl FaultySink {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn StatusSink>, injector: Arc<Injector>) -> FaultySink {
        FaultySink {
            inner,
            site: Site {
                injector,
                instance: None,
            },
        }
    }
}
labelled!(FaultySink);

#[async_trait]
impl StatusSink for FaultySink {
    async fn put(&self, document: &[u8]) -> Result<(), NotifyError> {
        self.site
            .run(Target::StatusSink, "put", self.inner.put(document))
            .await
    }
    async fn get(&self) -> Result<Option<Vec<u8>>, NotifyError> {
        self.site
            .run(Target::StatusSink, "get", self.inner.get())
            .await
    }
}

/// A clock that reads off by the active `clock_skew` faults.
#[derive(Debug, Clone)]
pub struct SkewedClock {
    inner: Arc<dyn Clock>,
    site: Site,
}

impl SkewedClock {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Clock>, injector: Arc<Injector>) -> SkewedClock {
        SkewedClock {
            inner,
            site: Site {
                injector,
                instance: None,
            },
        }
    }
}
labelled!(SkewedClock);

impl Clock for SkewedClock {
    fn now_ms(&self) -> u64 {
        let now = self.inner.now_ms();
        let skew = self.site.injector.skew_ms(self.site.instance.as_deref());
        now.saturating_add_signed(skew)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_map_to_each_ports_error_as_the_table_says() {
        let t = Failure::Timeout { after_ms: 5 };
        assert_eq!(
            RecordError::from_fault("f", Failure::Throttle),
            RecordError::Throttled
        );
        assert_eq!(
            QueueError::from_fault("f", Failure::Throttle),
            QueueError::Throttled
        );
        assert_eq!(GatewayError::from_fault("f", t), GatewayError::Timeout);
        assert_eq!(
            GatewayError::from_fault("f", Failure::Reset),
            GatewayError::Timeout
        );
        assert!(matches!(
            GatewayError::from_fault("f", Failure::Throttle),
            GatewayError::Unavailable(m) if m.contains("429")
        ));
        assert_eq!(
            LedgerError::from_fault("slow", t),
            LedgerError::Unavailable("injected fault slow: timed out after 5 ms".into())
        );
        assert!(matches!(
            LedgerError::from_fault("f", Failure::Throttle),
            LedgerError::Unavailable(m) if m.contains("throttled")
        ));
        assert!(matches!(
            RecordError::from_fault("f", Failure::Reset),
            RecordError::Unavailable(m) if m.contains("outcome unknown")
        ));
        assert!(matches!(
            QueueError::from_fault("f", Failure::Error),
            QueueError::Unavailable(_)
        ));
        assert!(matches!(
            CoordinationError::from_fault("f", Failure::Error),
            CoordinationError::Unavailable(_)
        ));
        assert!(matches!(
            NotifyError::from_fault("f", Failure::Error),
            NotifyError::Unavailable(m) if m.starts_with("injected fault f:")
        ));
    }
}
