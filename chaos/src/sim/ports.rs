//! The simulation's own ports: a gateway with seeded payers behind it
//! ([`SimGateway`]), and the layers that record a history as the ledger and
//! the mailer see it ([`RecordingLedger`], [`RecordingMailer`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use booking::gateway::{
    CreatePayment, CreatedPayment, Executed, ExecutedVia, GatewayError, GatewayPaymentState,
    PaymentGateway, PaymentStatus, codes,
};
use booking::ledger::{Admission, Counters, Hold, Ledger, LedgerError, Step};
use booking::notify::{Confirmation, Mailer, NotifyError};
use booking::{CandidateHash, Clock, Level, PaymentId, RequestToken, SaleId};
use parking_lot::Mutex;

use crate::history::{History, OpKind, OpValue};

/// One payment at the simulated gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimPayment {
    /// The merchant invoice it was created with.
    pub invoice: String,
    /// The per-payment signature every redirect of this payment carries.
    pub signature: String,
    /// Where it stands.
    pub state: GatewayPaymentState,
    /// When it was created, clock ms.
    pub created_ms: u64,
    /// After this the gateway executes nothing (the checkout expired).
    pub expires_ms: u64,
    /// When it was executed (money moved), clock ms.
    pub completed_ms: Option<u64>,
}

/// A bKash-like gateway in memory: payments are created by the API (with
/// a per-payment signature, as bKash appends to its redirects), approved,
/// cancelled or failed by the payers (directly, as at the gateway's own
/// pages), executed by the callback and queried by the reconciler and the
/// webhook. A payment completes only when executed before it expires. The
/// payers take the signature for their redirect back
/// ([`SimGateway::signature`]) and the webhook its IPN ([`SimGateway::ipn`])
/// from here.
#[derive(Debug)]
pub struct SimGateway {
    clock: Arc<dyn Clock>,
    checkout_ms: u64,
    next: AtomicU64,
    payments: Mutex<BTreeMap<PaymentId, SimPayment>>,
}

impl SimGateway {
    /// A gateway whose checkouts expire `checkout` after creation.
    pub fn new(clock: Arc<dyn Clock>, checkout: Duration) -> SimGateway {
        SimGateway {
            clock,
            checkout_ms: checkout.as_millis() as u64,
            next: AtomicU64::new(1),
            payments: Mutex::new(BTreeMap::new()),
        }
    }

    fn payer_step(
        &self,
        payment: &PaymentId,
        from: impl Fn(&GatewayPaymentState) -> bool,
        to: GatewayPaymentState,
    ) -> bool {
        let now = self.clock.now_ms();
        let mut book = self.payments.lock();
        match book.get_mut(payment) {
            Some(p) if from(&p.state) && now < p.expires_ms => {
                p.state = to;
                true
            }
            _ => false,
        }
    }

    /// The payer verifies (PIN/OTP): initiated → authorized, before expiry.
    pub fn approve(&self, payment: &PaymentId) -> bool {
        self.payer_step(
            payment,
            |s| *s == GatewayPaymentState::Initiated,
            GatewayPaymentState::Authorized,
        )
    }

    /// The payer cancels: initiated or authorized → cancelled.
    pub fn cancel(&self, payment: &PaymentId) -> bool {
        self.payer_step(
            payment,
            |s| {
                matches!(
                    s,
                    GatewayPaymentState::Initiated | GatewayPaymentState::Authorized
                )
            },
            GatewayPaymentState::Cancelled,
        )
    }

    /// The wallet refuses: initiated or authorized → failed.
    pub fn fail(&self, payment: &PaymentId) -> bool {
        self.payer_step(
            payment,
            |s| {
                matches!(
                    s,
                    GatewayPaymentState::Initiated | GatewayPaymentState::Authorized
                )
            },
            GatewayPaymentState::Failed,
        )
    }

    /// A payment's state.
    pub fn state(&self, payment: &PaymentId) -> Option<GatewayPaymentState> {
        self.payments.lock().get(payment).map(|p| p.state.clone())
    }

    /// Whether `payment` is approved and its checkout still open: an execute
    /// now would complete it.
    pub fn executable(&self, payment: &PaymentId) -> bool {
        let now = self.clock.now_ms();
        self.payments
            .lock()
            .get(payment)
            .is_some_and(|p| p.state == GatewayPaymentState::Authorized && now < p.expires_ms)
    }

    /// The signature the gateway appends to `payment`'s redirects.
    pub fn signature(&self, payment: &PaymentId) -> Option<String> {
        self.payments
            .lock()
            .get(payment)
            .map(|p| p.signature.clone())
    }

    /// The IPN the gateway notifies for `payment` once it completed, as
    /// bKash sends it (the `Message` of the SNS notification): `paymentID`,
    /// `trxID`, `merchantInvoiceNumber`, `transactionStatus`. `None` before
    /// it completed.
    pub fn ipn(&self, payment: &PaymentId) -> Option<String> {
        let book = self.payments.lock();
        let p = book.get(payment)?;
        let GatewayPaymentState::Completed { trx_id } = &p.state else {
            return None;
        };
        let ipn = serde_json::json!({
            "paymentID": payment.as_str(),
            "trxID": trx_id,
            "merchantInvoiceNumber": p.invoice,
            "transactionStatus": "Completed",
        });
        Some(ipn.to_string())
    }

    /// Every payment, by ID.
    pub fn payments(&self) -> BTreeMap<PaymentId, SimPayment> {
        self.payments.lock().clone()
    }
}

/// A payment's signature: 64 bits of a keyed hash of its ID, in hex. Not a
/// secret here (the sim's payers never guess one), but not the ID either, so
/// a redirect without the gateway's signature is refused as in production.
fn signature_of(payment: &PaymentId) -> String {
    let mut h: u64 = 0x5349_4d2d_5349_474e; // the gateway's key
    for b in payment.as_str().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
        h ^= h >> 29;
    }
    format!("{h:016x}")
}

/// A gateway through which the API instance dies right after its execute
/// call (the money may have moved): the answer never comes back, the
/// callback never goes on. The sim's `callback_crash`.
#[derive(Debug)]
pub struct DiesAfterExecute(pub Arc<dyn PaymentGateway>);

#[async_trait]
impl PaymentGateway for DiesAfterExecute {
    async fn create(
        &self,
        req: &CreatePayment,
        within: Duration,
    ) -> Result<CreatedPayment, GatewayError> {
        self.0.create(req, within).await
    }

    async fn execute(
        &self,
        payment: &PaymentId,
        within: Duration,
    ) -> Result<Executed, GatewayError> {
        let _lost = self.0.execute(payment, within).await;
        std::future::pending().await
    }

    async fn query(
        &self,
        payment: &PaymentId,
        within: Duration,
    ) -> Result<PaymentStatus, GatewayError> {
        self.0.query(payment, within).await
    }
}

fn refused(code: &str, message: &str) -> GatewayError {
    GatewayError::Refused {
        code: code.to_owned(),
        message: message.to_owned(),
    }
}

#[async_trait]
impl PaymentGateway for SimGateway {
    async fn create(
        &self,
        req: &CreatePayment,
        _within: Duration,
    ) -> Result<CreatedPayment, GatewayError> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let id = PaymentId::parse(&format!("SIM{n:09}"))
            .map_err(|e| GatewayError::Unavailable(e.to_string()))?;
        let now = self.clock.now_ms();
        let signature = signature_of(&id);
        self.payments.lock().insert(
            id.clone(),
            SimPayment {
                invoice: req.invoice.clone(),
                signature: signature.clone(),
                state: GatewayPaymentState::Initiated,
                created_ms: now,
                expires_ms: now.saturating_add(self.checkout_ms),
                completed_ms: None,
            },
        );
        Ok(CreatedPayment {
            bkash_url: format!("https://sim.gateway/checkout/{id}"),
            signature,
            payment_id: id,
        })
    }

    async fn execute(
        &self,
        payment: &PaymentId,
        _within: Duration,
    ) -> Result<Executed, GatewayError> {
        let now = self.clock.now_ms();
        let mut book = self.payments.lock();
        let Some(p) = book.get_mut(payment) else {
            return Err(refused(codes::INVALID_PAYMENT_ID, "Invalid Payment ID"));
        };
        match &p.state {
            GatewayPaymentState::Authorized if now < p.expires_ms => {
                let trx_id = format!("TRX{payment}");
                p.state = GatewayPaymentState::Completed {
                    trx_id: trx_id.clone(),
                };
                p.completed_ms = Some(now);
                Ok(Executed {
                    payment_id: payment.clone(),
                    trx_id,
                    amount: None,
                    via: ExecutedVia::Answer,
                })
            }
            GatewayPaymentState::Completed { .. } => Err(refused(
                codes::EXECUTION_ALREADY_COMPLETED,
                "Execution Already Completed",
            )),
            _ => Err(refused(
                codes::INVALID_PAYMENT_STATE,
                "Invalid Payment State",
            )),
        }
    }

    async fn query(
        &self,
        payment: &PaymentId,
        _within: Duration,
    ) -> Result<PaymentStatus, GatewayError> {
        let book = self.payments.lock();
        let p = book
            .get(payment)
            .ok_or_else(|| refused(codes::INVALID_PAYMENT_ID, "Invalid Payment ID"))?;
        Ok(PaymentStatus {
            payment_id: payment.clone(),
            state: p.state.clone(),
            amount: None,
            invoice: Some(p.invoice.clone()),
        })
    }
}

/// A refused admission's name, for the history.
fn refusal_name(admission: &Admission) -> &'static str {
    match admission {
        Admission::Admitted { .. } => "admitted",
        Admission::LevelFull => "level_full",
        Admission::SaleClosed => "sale_closed",
        Admission::NotEligible => "not_eligible",
        Admission::UnknownLevel => "unknown_level",
        Admission::AlreadyHolding { .. } => "already_holding",
        Admission::AlreadyPaid { .. } => "already_paid",
    }
}

/// The history's process for a candidate's operations.
pub fn process_of(candidate: &CandidateHash) -> u64 {
    u64::from_str_radix(&candidate.as_str()[..15], 16).unwrap_or(0)
}

/// A ledger that records every admission and every release (undo or
/// payment-guarded release) as the ledger answered it, for the history's
/// checkers. An error is an unknown outcome (a reset may have applied it); a
/// call dropped half-way (a request deadline) stays unknown.
#[derive(Debug)]
pub struct RecordingLedger {
    inner: Arc<dyn Ledger>,
    history: History,
    /// The level of each admission's token and of each attached payment.
    levels: Mutex<(HashMap<RequestToken, Level>, HashMap<PaymentId, Level>)>,
    admitted: AtomicU64,
    released: AtomicU64,
    undone: AtomicU64,
}

impl RecordingLedger {
    /// Records the calls to `inner` into `history`.
    pub fn new(inner: Arc<dyn Ledger>, history: History) -> RecordingLedger {
        RecordingLedger {
            inner,
            history,
            levels: Mutex::new((HashMap::new(), HashMap::new())),
            admitted: AtomicU64::new(0),
            released: AtomicU64::new(0),
            undone: AtomicU64::new(0),
        }
    }

    /// Admissions the ledger answered `Admitted`.
    pub fn admitted(&self) -> u64 {
        self.admitted.load(Ordering::Relaxed)
    }

    /// Payment-guarded releases the ledger answered `Done`.
    pub fn released(&self) -> u64 {
        self.released.load(Ordering::Relaxed)
    }

    /// Undos of admissions the ledger answered `Done`.
    pub fn undone(&self) -> u64 {
        self.undone.load(Ordering::Relaxed)
    }

    fn release_value(step: Step) -> OpValue {
        match step {
            Step::Done => OpValue::Released,
            Step::NoMatch => OpValue::Refused {
                reason: "no_match".into(),
            },
            Step::Paid => OpValue::Refused {
                reason: "paid".into(),
            },
        }
    }
}

#[async_trait]
impl Ledger for RecordingLedger {
    async fn reset(&self, sale: &SaleId, levels: &[(Level, u32)]) -> Result<(), LedgerError> {
        self.inner.reset(sale, levels).await
    }

    async fn load_candidates(
        &self,
        sale: &SaleId,
        candidates: &[CandidateHash],
    ) -> Result<u64, LedgerError> {
        self.inner.load_candidates(sale, candidates).await
    }

    async fn set_open(&self, sale: &SaleId, open: bool) -> Result<(), LedgerError> {
        self.inner.set_open(sale, open).await
    }

    async fn admit(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        level: &Level,
        token: &RequestToken,
        now_ms: u64,
    ) -> Result<Admission, LedgerError> {
        let op = self.history.invoke(
            process_of(candidate),
            OpKind::Admit {
                candidate: candidate.clone(),
                level: level.clone(),
            },
        );
        self.levels.lock().0.insert(token.clone(), level.clone());
        let answer = self
            .inner
            .admit(sale, candidate, level, token, now_ms)
            .await;
        match &answer {
            Ok(Admission::Admitted { .. }) => {
                self.admitted.fetch_add(1, Ordering::Relaxed);
                op.ok(OpValue::Admitted { payment: None });
            }
            Ok(refusal) => op.ok(OpValue::Refused {
                reason: refusal_name(refusal).to_owned(),
            }),
            Err(_) => op.unknown(),
        }
        answer
    }

    async fn attach_payment(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        token: &RequestToken,
        payment_id: &PaymentId,
        deadline_ms: u64,
    ) -> Result<Step, LedgerError> {
        {
            let mut levels = self.levels.lock();
            if let Some(level) = levels.0.get(token).cloned() {
                levels.1.insert(payment_id.clone(), level);
            }
        }
        self.inner
            .attach_payment(sale, candidate, token, payment_id, deadline_ms)
            .await
    }

    async fn undo_admission(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        token: &RequestToken,
    ) -> Result<Step, LedgerError> {
        let level = self.levels.lock().0.get(token).cloned();
        let op = level.map(|level| {
            self.history.invoke(
                process_of(candidate),
                OpKind::Release {
                    candidate: candidate.clone(),
                    level,
                    payment: None,
                },
            )
        });
        let answer = self.inner.undo_admission(sale, candidate, token).await;
        if answer == Ok(Step::Done) {
            self.undone.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(op) = op {
            match &answer {
                Ok(step) => op.ok(Self::release_value(*step)),
                Err(_) => op.unknown(),
            }
        }
        answer
    }

    async fn release(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<Step, LedgerError> {
        let level = self.levels.lock().1.get(payment_id).cloned();
        let op = level.map(|level| {
            self.history.invoke(
                process_of(candidate),
                OpKind::Release {
                    candidate: candidate.clone(),
                    level,
                    payment: Some(payment_id.clone()),
                },
            )
        });
        let answer = self.inner.release(sale, candidate, payment_id).await;
        if answer == Ok(Step::Done) {
            self.released.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(op) = op {
            match &answer {
                Ok(step) => op.ok(Self::release_value(*step)),
                Err(_) => op.unknown(),
            }
        }
        answer
    }

    async fn mark_paid(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<Step, LedgerError> {
        self.inner.mark_paid(sale, candidate, payment_id).await
    }

    async fn extend(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
        deadline_ms: u64,
    ) -> Result<Step, LedgerError> {
        self.inner
            .extend(sale, candidate, payment_id, deadline_ms)
            .await
    }

    async fn hold(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
    ) -> Result<Option<Hold>, LedgerError> {
        self.inner.hold(sale, candidate).await
    }

    async fn paid(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
    ) -> Result<Option<PaymentId>, LedgerError> {
        self.inner.paid(sale, candidate).await
    }

    async fn stale_pending(
        &self,
        sale: &SaleId,
        admitted_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<(CandidateHash, Hold)>, LedgerError> {
        self.inner
            .stale_pending(sale, admitted_before_ms, limit)
            .await
    }

    async fn stale_held(
        &self,
        sale: &SaleId,
        deadline_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<(CandidateHash, Hold)>, LedgerError> {
        self.inner.stale_held(sale, deadline_before_ms, limit).await
    }

    async fn counters(&self, sale: &SaleId) -> Result<Counters, LedgerError> {
        self.inner.counters(sale).await
    }
}

/// A mailer that records every send in the history (an error is unknown:
/// the message may have gone out).
#[derive(Debug)]
pub struct RecordingMailer {
    inner: Arc<dyn Mailer>,
    history: History,
}

impl RecordingMailer {
    /// Records the sends to `inner` into `history`.
    pub fn new(inner: Arc<dyn Mailer>, history: History) -> RecordingMailer {
        RecordingMailer { inner, history }
    }
}

#[async_trait]
impl Mailer for RecordingMailer {
    async fn send(&self, confirmation: &Confirmation) -> Result<(), NotifyError> {
        let op = self.history.invoke(
            process_of(&confirmation.candidate),
            OpKind::Email {
                candidate: confirmation.candidate.clone(),
                payment: confirmation.payment_id.clone(),
            },
        );
        let sent = self.inner.send(confirmation).await;
        match &sent {
            Ok(()) => op.ok(OpValue::Sent),
            Err(_) => op.unknown(),
        }
        sent
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use booking::ManualClock;

    #[tokio::test]
    async fn payments_complete_only_when_approved_and_executed_before_expiry() {
        let clock = ManualClock::new(1_000);
        let gw = SimGateway::new(Arc::new(clock.clone()), Duration::from_secs(600));
        let req = CreatePayment {
            invoice: "inv".into(),
            amount: "500".into(),
            payer_reference: "p".into(),
            callback_url: "u".into(),
        };
        let w = Duration::from_secs(8);
        let a = gw.create(&req, w).await.unwrap().payment_id;
        let b = gw.create(&req, w).await.unwrap().payment_id;
        assert_ne!(a, b);
        // not approved: the execute is refused and nothing moves
        let e = gw.execute(&a, w).await.unwrap_err();
        assert_eq!(e.refused_code(), Some(codes::INVALID_PAYMENT_STATE));
        assert!(gw.approve(&a));
        assert!(!gw.approve(&a), "approved once");
        let done = gw.execute(&a, w).await.unwrap();
        assert_eq!(done.trx_id, format!("TRX{a}"));
        let again = gw.execute(&a, w).await.unwrap_err();
        assert_eq!(
            again.refused_code(),
            Some(codes::EXECUTION_ALREADY_COMPLETED)
        );
        assert!(!gw.cancel(&a), "a completed payment is not cancelled");
        // expired: approved too late, executed too late
        assert!(gw.approve(&b));
        clock.advance(Duration::from_secs(600));
        assert!(gw.execute(&b, w).await.is_err());
        assert_eq!(gw.state(&b), Some(GatewayPaymentState::Authorized));
        let q = gw.query(&a, w).await.unwrap();
        assert!(matches!(q.state, GatewayPaymentState::Completed { .. }));
        let missing = PaymentId::parse("NOPE").unwrap();
        assert!(gw.query(&missing, w).await.is_err());
        assert_eq!(q.invoice.as_deref(), Some("inv"));
    }

    #[tokio::test]
    async fn signatures_are_per_payment_and_the_ipn_comes_only_once_completed() {
        let clock = ManualClock::new(1_000);
        let gw = SimGateway::new(Arc::new(clock.clone()), Duration::from_secs(600));
        let req = CreatePayment {
            invoice: "sim-c-1".into(),
            amount: "500".into(),
            payer_reference: "p".into(),
            callback_url: "u".into(),
        };
        let w = Duration::from_secs(8);
        let a = gw.create(&req, w).await.unwrap();
        let b = gw.create(&req, w).await.unwrap();
        assert_eq!(gw.signature(&a.payment_id), Some(a.signature.clone()));
        assert_ne!(a.signature, b.signature);
        assert!(!a.signature.contains(a.payment_id.as_str()));
        assert_eq!(gw.ipn(&a.payment_id), None, "not completed yet");
        assert!(!gw.executable(&a.payment_id));
        assert!(gw.approve(&a.payment_id));
        assert!(gw.executable(&a.payment_id));
        gw.execute(&a.payment_id, w).await.unwrap();
        let ipn: serde_json::Value = serde_json::from_str(&gw.ipn(&a.payment_id).unwrap()).unwrap();
        assert_eq!(ipn["paymentID"], a.payment_id.as_str());
        assert_eq!(ipn["trxID"], format!("TRX{}", a.payment_id));
        assert_eq!(ipn["merchantInvoiceNumber"], "sim-c-1");
        assert_eq!(ipn["transactionStatus"], "Completed");
    }
}

/// The queue as the worker sees it, remembering which bookings' messages
/// the worker has finished with (deleted), so a confirmation can tell "the
/// worker has not got to it yet" from "the worker got to it and left the
/// wrong record".
#[derive(Debug)]
pub struct TrackingQueue {
    inner: Arc<dyn booking::queue::Queue>,
    receipts: Mutex<HashMap<String, PaymentId>>,
    handled: Mutex<std::collections::BTreeSet<PaymentId>>,
}

impl TrackingQueue {
    /// Tracks `inner`.
    pub fn new(inner: Arc<dyn booking::queue::Queue>) -> TrackingQueue {
        TrackingQueue {
            inner,
            receipts: Mutex::new(HashMap::new()),
            handled: Mutex::new(std::collections::BTreeSet::new()),
        }
    }

    /// Whether the worker deleted a message of the booking with `payment`.
    pub fn handled(&self, payment: &PaymentId) -> bool {
        self.handled.lock().contains(payment)
    }
}

#[async_trait]
impl booking::queue::Queue for TrackingQueue {
    async fn send(
        &self,
        message: booking::queue::Message,
    ) -> Result<booking::queue::SendOutcome, booking::queue::QueueError> {
        self.inner.send(message).await
    }

    async fn receive(
        &self,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<booking::queue::Received>, booking::queue::QueueError> {
        let got = self.inner.receive(max, wait).await?;
        let mut receipts = self.receipts.lock();
        for r in &got {
            if let Ok(m) = serde_json::from_str::<booking::AdmittedBooking>(&r.message.body) {
                receipts.insert(r.receipt.0.clone(), m.payment_id);
            }
        }
        Ok(got)
    }

    async fn delete(
        &self,
        receipt: &booking::queue::ReceiptHandle,
    ) -> Result<(), booking::queue::QueueError> {
        self.inner.delete(receipt).await?;
        if let Some(p) = self.receipts.lock().remove(&receipt.0) {
            self.handled.lock().insert(p);
        }
        Ok(())
    }

    async fn change_visibility(
        &self,
        receipt: &booking::queue::ReceiptHandle,
        timeout: Duration,
    ) -> Result<(), booking::queue::QueueError> {
        self.inner.change_visibility(receipt, timeout).await
    }

    async fn oldest_age(&self) -> Result<Option<Duration>, booking::queue::QueueError> {
        self.inner.oldest_age().await
    }

    async fn depth(&self) -> Result<booking::queue::QueueDepth, booking::queue::QueueError> {
        self.inner.depth().await
    }

    async fn dead_letters(
        &self,
    ) -> Result<Vec<booking::queue::Message>, booking::queue::QueueError> {
        self.inner.dead_letters().await
    }
}
