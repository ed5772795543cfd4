#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use booking::gateway::{CreatePayment, CreatedPayment, Executed};
use booking::notify::{Alert, Alerts, Confirmation, Mailer, NotifyError};
use booking::{
    CandidateHash, GatewayError, GatewayPaymentState, Ledger, Level, ManualClock, PaymentGateway,
    PaymentId, PaymentStatus, RequestToken, SaleId, Settings,
};
use booking_embedded::coordination::EmbeddedCoordination;
use booking_embedded::ledger::EmbeddedLedger;
use booking_embedded::queue::{EmbeddedQueue, QueueConfig};
use booking_embedded::records::{EmbeddedRecords, RecordsConfig};
use booking_service::confirm::ConfirmPorts;
use booking_service::reconciler::{Reconciler, ReconcilerConfig, ReconcilerPorts};
use parking_lot::Mutex;

pub const START_MS: u64 = 1_700_000_000_000;

/// Records what it sent; while `down` is set it refuses every send (and
/// counts the tries in `refused`).
#[derive(Debug, Default)]
pub struct RecordingMailer(
    pub Mutex<Vec<Confirmation>>,
    pub std::sync::atomic::AtomicBool,
    pub std::sync::atomic::AtomicU64,
);

impl RecordingMailer {
    pub fn set_down(&self, down: bool) {
        self.1.store(down, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn refused(&self) -> u64 {
        self.2.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[async_trait]
impl Mailer for RecordingMailer {
    async fn send(&self, c: &Confirmation) -> Result<(), NotifyError> {
        if self.1.load(std::sync::atomic::Ordering::SeqCst) {
            self.2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            return Err(NotifyError::Unavailable("mailer down (test)".into()));
        }
        self.0.lock().push(c.clone());
        Ok(())
    }
}

#[derive(Debug, Default)]
pub struct RecordingAlerts(pub Mutex<Vec<Alert>>);

#[async_trait]
impl Alerts for RecordingAlerts {
    async fn raise(&self, a: Alert) -> Result<(), NotifyError> {
        self.0.lock().push(a);
        Ok(())
    }
}

impl RecordingAlerts {
    pub fn kinds(&self) -> Vec<String> {
        self.0.lock().iter().map(|a| a.kind.clone()).collect()
    }
}

/// What the scripted gateway answers for a payment.
#[derive(Debug, Clone)]
pub enum Script {
    State(GatewayPaymentState),
    Fail,
}

/// A gateway whose query answers are scripted per payment; records the order
/// of queries and the most queries in flight at once.
#[derive(Debug, Default)]
pub struct ScriptedGateway {
    pub answers: Mutex<HashMap<PaymentId, Script>>,
    pub delay: Mutex<Duration>,
    pub queried: Mutex<Vec<PaymentId>>,
    in_flight: AtomicUsize,
    pub max_in_flight: AtomicUsize,
}

impl ScriptedGateway {
    pub fn set(&self, p: &PaymentId, s: Script) {
        self.answers.lock().insert(p.clone(), s);
    }
}

#[async_trait]
impl PaymentGateway for ScriptedGateway {
    async fn create(&self, _: &CreatePayment, _: Duration) -> Result<CreatedPayment, GatewayError> {
        Err(GatewayError::Unavailable("not scripted".into()))
    }
    async fn execute(&self, _: &PaymentId, _: Duration) -> Result<Executed, GatewayError> {
        Err(GatewayError::Unavailable("not scripted".into()))
    }
    async fn query(&self, p: &PaymentId, _: Duration) -> Result<PaymentStatus, GatewayError> {
        self.queried.lock().push(p.clone());
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let delay = *self.delay.lock();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        let script = self
            .answers
            .lock()
            .get(p)
            .cloned()
            .unwrap_or(Script::State(GatewayPaymentState::Initiated));
        match script {
            Script::State(state) => Ok(PaymentStatus {
                payment_id: p.clone(),
                state,
                amount: None,
                invoice: None,
            }),
            Script::Fail => Err(GatewayError::Unavailable("scripted failure".into())),
        }
    }
}

#[derive(Debug)]
pub struct Stack {
    pub clock: ManualClock,
    pub settings: Settings,
    pub sale: SaleId,
    pub level: Level,
    pub ledger: Arc<EmbeddedLedger>,
    pub records: Arc<EmbeddedRecords>,
    pub queue: Arc<EmbeddedQueue>,
    pub coordination: Arc<EmbeddedCoordination>,
    pub mailer: Arc<RecordingMailer>,
    pub alerts: Arc<RecordingAlerts>,
    pub gateway: Arc<ScriptedGateway>,
}

pub fn pay(s: &str) -> PaymentId {
    PaymentId::parse(s).unwrap()
}

pub fn cand(s: &str) -> CandidateHash {
    CandidateHash::of(s)
}

impl Stack {
    /// A sale with one level of `cap` seats and these candidates, open.
    pub async fn new(cap: u32, candidates: &[&str]) -> Stack {
        Stack::new_with(cap, candidates, RecordsConfig::default()).await
    }

    /// [`Stack::new`] with a record store configured so.
    pub async fn new_with(cap: u32, candidates: &[&str], records: RecordsConfig) -> Stack {
        let clock = ManualClock::new(START_MS);
        let shared: Arc<dyn booking::Clock> = Arc::new(clock.clone());
        let settings = Settings::default();
        let stack = Stack {
            sale: SaleId::parse("launch").unwrap(),
            level: Level::parse("gold").unwrap(),
            ledger: Arc::new(EmbeddedLedger::new()),
            records: Arc::new(EmbeddedRecords::new(shared.clone(), records)),
            queue: Arc::new(EmbeddedQueue::new(
                shared.clone(),
                QueueConfig::from_settings(&settings),
            )),
            coordination: Arc::new(EmbeddedCoordination::new(shared)),
            mailer: Arc::default(),
            alerts: Arc::default(),
            gateway: Arc::default(),
            clock,
            settings,
        };
        stack
            .ledger
            .reset(&stack.sale, &[(stack.level.clone(), cap)])
            .await
            .unwrap();
        let cs: Vec<_> = candidates.iter().map(|c| cand(c)).collect();
        stack
            .ledger
            .load_candidates(&stack.sale, &cs)
            .await
            .unwrap();
        stack.ledger.set_open(&stack.sale, true).await.unwrap();
        stack
    }

    pub fn now(&self) -> u64 {
        booking::Clock::now_ms(&self.clock)
    }

    /// Admits `who` now with `token`, attaches `payment`, and returns the
    /// admission message (deadline = now + hold).
    pub async fn book(&self, who: &str, token: &str, payment: &str) -> booking::AdmittedBooking {
        let now = self.now();
        let deadline = now + self.settings.hold.as_millis() as u64;
        let c = cand(who);
        let t = RequestToken::parse(token).unwrap();
        let admitted = self
            .ledger
            .admit(&self.sale, &c, &self.level, &t, now)
            .await
            .unwrap();
        assert!(
            matches!(admitted, booking::Admission::Admitted { .. }),
            "{admitted:?}"
        );
        let step = self
            .ledger
            .attach_payment(&self.sale, &c, &t, &pay(payment), deadline)
            .await
            .unwrap();
        assert_eq!(step, booking::Step::Done);
        booking::AdmittedBooking {
            signature: None,
            candidate: c,
            sale: self.sale.clone(),
            level: self.level.clone(),
            payment_id: pay(payment),
            token: Some(t),
            request_ms: now,
            deadline_ms: deadline,
        }
    }

    pub async fn count(&self) -> u32 {
        self.ledger.counters(&self.sale).await.unwrap().levels[0].count
    }

    pub fn confirm_ports(&self) -> ConfirmPorts<'_> {
        ConfirmPorts {
            records: self.records.as_ref(),
            ledger: self.ledger.as_ref(),
            mailer: self.mailer.as_ref(),
            alerts: self.alerts.as_ref(),
            coordination: self.coordination.as_ref(),
            prefix: "test",
            settings: &self.settings,
        }
    }

    pub fn reconciler(&self, owner: &str) -> Reconciler {
        self.reconciler_with(owner, self.settings.clone())
    }

    pub fn reconciler_with(&self, owner: &str, settings: Settings) -> Reconciler {
        Reconciler::new(
            ReconcilerPorts {
                records: self.records.clone(),
                ledger: self.ledger.clone(),
                gateway: self.gateway.clone(),
                coordination: self.coordination.clone(),
                mailer: self.mailer.clone(),
                alerts: self.alerts.clone(),
                clock: Arc::new(self.clock.clone()),
            },
            ReconcilerConfig::new(self.sale.clone(), "test", owner, settings),
        )
    }
}

/// A reconciler of `s` whose ledger and record store suffer `fault` (the
/// body of one `[[fault]]` table: target, ops, kind; open for an hour),
/// with `config`.
pub fn faulty_reconciler(s: &Stack, fault: &str, config: ReconcilerConfig) -> Reconciler {
    use faults::wrappers::{FaultyLedger, FaultyRecords};
    let schedule = faults::Schedule::from_toml(&format!(
        "[[fault]]\nname = \"f\"\nstart_ms = 0\nduration_ms = 3_600_000\n{fault}\n"
    ))
    .unwrap();
    let injector = Arc::new(faults::Injector::new(
        schedule,
        7,
        Arc::new(s.clock.clone()),
    ));
    Reconciler::new(
        ReconcilerPorts {
            records: Arc::new(FaultyRecords::new(
                s.records.clone(),
                s.records.clone(),
                injector.clone(),
            )),
            ledger: Arc::new(FaultyLedger::new(s.ledger.clone(), injector)),
            gateway: s.gateway.clone(),
            coordination: s.coordination.clone(),
            mailer: s.mailer.clone(),
            alerts: s.alerts.clone(),
            clock: Arc::new(s.clock.clone()),
        },
        config,
    )
}
