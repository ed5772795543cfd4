//! A whole sale in virtual time (issue 5): the real booking components over
//! the embedded backends, without HTTP, on a paused current-thread tokio
//! runtime, so a 40,000-candidate sale with its ten-minute holds and
//! twenty-second sweeps runs in seconds of wall time, and the same seed
//! gives the same sale.
//!
//! What runs, as tasks on the runtime:
//! - the candidates ([`plan::plan_arrivals`]): the burst at 2,000
//!   admissions/s, then late arrivals; each admission is what `POST /bookings`
//!   does (admit → create the payment → attach → booking copy → enqueue,
//!   undone by its token on failure), done directly on the ports, with the
//!   request deadline; refused candidates try another level, busy ones retry;
//! - the API instances (`sim-api-{i}`, a candidate's is
//!   `process_of(candidate) % instances`): each its own `Stack` whose gateway
//!   takes the fleet's token from the instance's own `booking_bkash`
//!   `TokenManager` before every create, execute and query, from the
//!   gateway's grant endpoint with bKash's allowance
//!   ([`ports::SimTokenEndpoint`]: two grants an hour, checked as
//!   `one_token_grant`);
//! - the payers ([`plan::PayerMix`]): pay now, pay late, abandon, approve and
//!   never come back, cancel, fail (and some book again), forge the
//!   redirect's status or come back after the deadline; each redirect back
//!   goes through the API's own callback
//!   ([`booking_service::callback::handle`], with the payment's signature
//!   and the status the payer claims), which executes the payment, and the
//!   gateway's IPN through the API's webhook decision
//!   ([`booking_service::webhook::handle`]; lost, late, twice, or at the
//!   same moment as the callback); both end in the confirm step
//!   (`confirm::confirm_payment`);
//! - the `Worker`s, the `Reconciler`s (sharing the lock), the
//!   `ExpiryHandler` on the change stream, and the TTL service deleting
//!   expired records a sweep window late.
//!
//! The backends sit behind the chaos wrappers ([`crate::wrappers`]), so a
//! [`crate::schedule::Schedule`]'s faults apply; a recording layer writes the [`History`] the
//! checkers read. When the sale is quiescent (no request or payer left, the
//! queue empty, no HELD record, no seat held in the ledger) and stays so for
//! a hold and a sweep window, the services stop and the invariants are
//! checked ([`checks::invariants`] and [`crate::history::check_all`]). A sale
//! that does not get there within [`SimConfig::virtual_limit`] is an error,
//! not a hang.

pub mod checks;
mod config;
mod payers;
pub mod plan;
pub mod ports;
mod report;

use config::validate;
pub use config::{ARTICLE_CANDIDATES, ARTICLE_CAPS, EPOCH_MS, SimConfig};
pub use report::{SimError, SimReport};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use booking::Settings;
use booking::gateway::{GatewayPaymentState, PaymentGateway};
use booking::ledger::Ledger;
use booking::notify::{Alerts, Mailer};
use booking::queue::Queue;
use booking::records::{ChangeStream, RecordStatus, RecordStore};
use booking::status::{StatusDocument, StatusWriter};
use booking::{CandidateHash, Clock, Coordination, Level, PaymentId, SaleId};
use booking::{Entropy, SeededEntropy};
use booking_bkash::{TokenConfig, TokenManager};
use booking_embedded::coordination::EmbeddedCoordination;
use booking_embedded::ledger::EmbeddedLedger;
use booking_embedded::outputs::{AlertLog, ObjectSink, OutboxMailer};
use booking_embedded::queue::{EmbeddedQueue, QueueConfig};
use booking_embedded::records::{EmbeddedRecords, RecordsConfig};
use booking_service::admission::{self, BookAnswer, PathEvents, Refusal};
use booking_service::callback::{self, CallbackOutcome, CallbackQuery};
use booking_service::confirm::ConfirmEvents;
use booking_service::expiry::ExpiryHandler;
use booking_service::reconciler::{Reconciler, ReconcilerConfig, ReconcilerPorts};
use booking_service::stack::{Stack, WebhookTrust};
use booking_service::webhook::{self, NotificationOutcome};
use booking_service::worker::{Worker, WorkerConfig};
use parking_lot::Mutex;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::history::{
    EmailSent, FinalState, History, LevelFinal, OpKind, OpValue, PaidBooking, check_all,
};
use crate::injector::{Injector, TokioClock};
use crate::wrappers::{
    FaultyAlerts, FaultyCoordination, FaultyGateway, FaultyLedger, FaultyMailer, FaultyQueue,
    FaultyRecords, SkewedClock,
};
use booking_audit::{SaleSnapshot, Verdict};
use checks::invariants;
use plan::{Behaviour, coin, plan_arrivals, rng_for};
use ports::{
    DiesAfterExecute, RecordingLedger, RecordingMailer, SimGateway, SimTokenEndpoint,
    TokenedGateway, TrackingQueue, process_of,
};

/// Runs one sale on its own paused current-thread runtime.
pub fn run(config: &SimConfig) -> Result<SimReport, SimError> {
    validate(config)?;
    let wall = std::time::Instant::now();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    let mut report = runtime.block_on(simulate(config))?;
    drop(runtime);
    report.wall_ms = wall.elapsed().as_millis() as u64;
    Ok(report)
}

/// Everything the sale's tasks share.
#[derive(Debug)]
struct Ctx {
    config: SimConfig,
    sale: SaleId,
    levels: Vec<Level>,
    candidates: Vec<CandidateHash>,
    clock: Arc<dyn Clock>,
    history: History,
    // raw backends, for the monitor and the final state
    raw_ledger: Arc<EmbeddedLedger>,
    raw_records: Arc<EmbeddedRecords>,
    raw_queue: Arc<EmbeddedQueue>,
    outbox: Arc<OutboxMailer>,
    alert_log: Arc<AlertLog>,
    sim_gateway: Arc<SimGateway>,
    /// One status writer per simulated API instance, and the object store
    /// they write `status.json` to.
    status: Vec<Arc<StatusWriter>>,
    sink: Arc<ObjectSink>,
    /// Which bookings' messages the worker finished.
    tracking: Arc<TrackingQueue>,
    /// Confirmations of a live booking whose message the worker had
    /// finished, refused because another payment's HELD record stood there.
    shadowed: Mutex<Vec<String>>,
    /// Payers who had approved the payment and whose redirect was answered
    /// not paid, with nothing executed.
    told_not_paid: Mutex<Vec<String>>,
    /// Each simulated API instance's ports (`sim-api-{i}`): the same
    /// backends, each its own gateway with its own `TokenManager`.
    stacks: Vec<Stack>,
    // what is going on
    live: AtomicU64,
    requests: AtomicU64,
    bookings: Mutex<Vec<(CandidateHash, PaymentId)>>,
}

/// Counts a task as live while it exists.
struct Live<'a>(&'a AtomicU64);

impl<'a> Live<'a> {
    fn new(n: &'a AtomicU64) -> Live<'a> {
        n.fetch_add(1, Ordering::SeqCst);
        Live(n)
    }
}

impl Drop for Live<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What one admission came to.
#[derive(Debug)]
enum Admitted {
    Held {
        payment: PaymentId,
        deadline_ms: u64,
    },
    Holding,
    Paid,
    Full,
    Busy,
    Refused,
}

fn uniform_ms(rng: &mut ChaCha8Rng, lo: Duration, hi: Duration) -> Duration {
    let (lo, hi) = (lo.as_millis() as u64, hi.as_millis() as u64);
    Duration::from_millis(rng.gen_range(lo..=hi.max(lo)))
}

/// What the sim hears from the request path: the instance's status writer is
/// poked, admitted bookings are remembered for the end state.
struct SimEvents<'a> {
    ctx: &'a Ctx,
    candidate: &'a CandidateHash,
}

impl PathEvents for SimEvents<'_> {
    fn held(&self, booking: &booking::AdmittedBooking) {
        self.ctx
            .bookings
            .lock()
            .push((booking.candidate.clone(), booking.payment_id.clone()));
    }

    fn counters_changed(&self) {
        self.ctx.poke(self.candidate);
    }
}

impl Ctx {
    fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    /// What the API does after a change of the counters: pokes its
    /// instance's status writer in the background.
    fn poke(&self, candidate: &CandidateHash) {
        if self.status.is_empty() {
            return;
        }
        let i = (process_of(candidate) % self.status.len() as u64) as usize;
        let writer = self.status[i].clone();
        tokio::spawn(async move {
            if let Err(e) = writer.poke().await {
                tracing::debug!(error = %e, "status poke failed");
            }
        });
    }

    /// The ports of the API instance serving `candidate`: the one whose
    /// status writer [`Ctx::poke`] pokes.
    fn stack_for(&self, candidate: &CandidateHash) -> &Stack {
        // at least one: `simulate` builds `api_instances.max(1)` of them
        let i = (process_of(candidate) % self.stacks.len() as u64) as usize;
        &self.stacks[i]
    }

    /// `POST /bookings`: the API's own request path
    /// ([`booking_service::admission::book`]) over the stack of the
    /// candidate's API instance.
    async fn admit(&self, candidate: &CandidateHash, level: &Level) -> Admitted {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let deadline = Instant::now() + self.config.settings.request_deadline;
        let events = SimEvents {
            ctx: self,
            candidate,
        };
        let stack = self.stack_for(candidate);
        // boxed: 40,000 candidate tasks each carrying the whole request
        // path's state inline cost more memory and copies than one
        // allocation a request
        match Box::pin(admission::book(stack, &events, candidate, level, deadline)).await {
            BookAnswer::Admitted { booking, .. } => Admitted::Held {
                payment: booking.payment_id,
                deadline_ms: booking.deadline_ms,
            },
            BookAnswer::AlreadyHolding { .. } => Admitted::Holding,
            BookAnswer::Refused(Refusal::AlreadyPaid) => Admitted::Paid,
            BookAnswer::Refused(Refusal::LevelFull) => Admitted::Full,
            BookAnswer::Refused(_) => Admitted::Refused,
            BookAnswer::Busy { .. } => Admitted::Busy,
        }
    }

    /// One arrival: the candidate's requests (another level when full, again
    /// when busy, once more after a cancelled payment) and, if admitted, the
    /// payer.
    async fn candidate(&self, arrival: usize, who: usize, first_level: usize) {
        let _live = Live::new(&self.live);
        let mut rng = rng_for(self.config.seed, 2, arrival as u64);
        let candidate = &self.candidates[who];
        let mut level = first_level;
        let mut rebooks = 1u32;
        let mut rebooking = false;
        for attempt in 0..12u32 {
            let answer = self.admit(candidate, &self.levels[level]).await;
            let pause = match answer {
                Admitted::Held {
                    payment,
                    deadline_ms,
                } => {
                    let again = self.payer(candidate, &payment, deadline_ms, &mut rng).await;
                    if !again || rebooks == 0 {
                        return;
                    }
                    rebooks -= 1;
                    rebooking = true;
                    uniform_ms(&mut rng, Duration::from_secs(30), Duration::from_secs(300))
                }
                // a double click, or the rebook before the old hold is released
                Admitted::Holding if rebooking => Duration::from_secs(60),
                Admitted::Full if attempt < 2 => {
                    level =
                        (level + rng.gen_range(1..self.levels.len().max(2))) % self.levels.len();
                    uniform_ms(&mut rng, Duration::from_secs(1), Duration::from_secs(3))
                }
                Admitted::Busy => {
                    uniform_ms(&mut rng, Duration::from_secs(1), Duration::from_secs(3))
                }
                Admitted::Holding | Admitted::Paid | Admitted::Full | Admitted::Refused => {
                    return;
                }
            };
            tokio::time::sleep(pause).await;
        }
    }

    /// Whether nothing is left to do, or what is.
    async fn busy(&self, arrivals_done: bool) -> Option<String> {
        // the cheap look first: while anyone is still at it, that is enough
        let live = self.live.load(Ordering::SeqCst);
        if !arrivals_done || live > 0 {
            return Some(format!("{live} candidates or payers still at it"));
        }
        let mut waiting = Vec::new();
        if let Ok(depth) = self.raw_queue.depth().await {
            if depth.visible + depth.in_flight > 0 {
                waiting.push(format!(
                    "{} queued messages",
                    depth.visible + depth.in_flight
                ));
            }
        }
        if let Ok(held) = self.raw_records.held_due(u64::MAX, usize::MAX).await {
            if !held.is_empty() {
                waiting.push(format!("{} HELD records", held.len()));
            }
        }
        if let Ok(pending) = self.raw_ledger.stale_pending(&self.sale, u64::MAX, 1).await {
            if !pending.is_empty() {
                waiting.push("pending holds in the ledger".into());
            }
        }
        if let Ok(held) = self
            .raw_ledger
            .stale_held(&self.sale, u64::MAX, usize::MAX)
            .await
        {
            // a held hold whose record is PAID is the ledger step a confirm
            // path failed to take: a check reports it, nothing will change it
            let mut open = 0usize;
            for (c, _) in &held {
                let paid = matches!(
                    self.raw_records.get(c, true).await,
                    Ok(Some(r)) if r.status == RecordStatus::Paid
                );
                open += usize::from(!paid);
            }
            if open > 0 {
                waiting.push(format!("{open} seats held in the ledger"));
            }
        }
        (!waiting.is_empty()).then(|| waiting.join(", "))
    }

    /// What the backends and the gateway hold now, as the audit reads it.
    async fn snapshot(&self) -> Result<SaleSnapshot, SimError> {
        let setup = |e: &dyn std::fmt::Display| SimError::Setup(e.to_string());
        let counters = self
            .raw_ledger
            .counters(&self.sale)
            .await
            .map_err(|e| setup(&e))?;
        let records = self.raw_records.scan_all().await.map_err(|e| setup(&e))?;
        let mut marks: BTreeMap<CandidateHash, booking_audit::LedgerMark> = BTreeMap::new();
        for c in &self.candidates {
            if let Some(p) = self
                .raw_ledger
                .paid(&self.sale, c)
                .await
                .map_err(|e| setup(&e))?
            {
                marks.entry(c.clone()).or_default().paid = Some(p);
            }
        }
        for (c, hold) in self
            .raw_ledger
            .stale_pending(&self.sale, u64::MAX, usize::MAX)
            .await
            .map_err(|e| setup(&e))?
            .into_iter()
            .chain(
                self.raw_ledger
                    .stale_held(&self.sale, u64::MAX, usize::MAX)
                    .await
                    .map_err(|e| setup(&e))?,
            )
        {
            marks.entry(c).or_default().hold = Some(hold);
        }
        let payer: BTreeMap<PaymentId, CandidateHash> = self
            .bookings
            .lock()
            .iter()
            .map(|(c, p)| (p.clone(), c.clone()))
            .collect();
        let payments = self
            .sim_gateway
            .payments()
            .into_iter()
            .map(|(id, p)| booking_audit::GatewayPayment {
                payment_id: id.to_string(),
                state: match p.state {
                    GatewayPaymentState::Initiated => booking_audit::GatewayState::Initiated,
                    GatewayPaymentState::Authorized => booking_audit::GatewayState::Authorized,
                    GatewayPaymentState::Completed { .. } => booking_audit::GatewayState::Completed,
                    GatewayPaymentState::Cancelled => booking_audit::GatewayState::Cancelled,
                    GatewayPaymentState::Failed => booking_audit::GatewayState::Failed,
                    GatewayPaymentState::Unknown(_) => booking_audit::GatewayState::Unknown,
                },
                candidate: payer.get(&id).cloned(),
                app_key: String::new(),
                amount_poisha: 0,
                merchant_invoice_number: p.invoice,
                created_ms: Some(p.created_ms),
                executed_ms: p.completed_ms,
            })
            .collect();
        let mut landed = booking_audit::LandedStatus::default();
        for w in self.sink.writes() {
            match StatusDocument::from_json(&w.document) {
                Ok(d) if d.sale == self.sale => landed.documents.push((w.at_ms, d)),
                Ok(_) => {}
                Err(_) => landed.unreadable_at_ms.push(w.at_ms),
            }
        }
        Ok(SaleSnapshot {
            sale: self.sale.clone(),
            settled: true,
            open: counters.open,
            levels: counters.levels,
            records,
            ledger_marks: Some(marks),
            queue: None,
            dead_letters: None,
            throttles: None,
            emails: self.outbox.sent(),
            alerts: Some(self.alert_log.raised()),
            status: None,
            landed: Some(landed),
            gateway: Some(booking_audit::GatewayTruth {
                payments,
                grants_in_window: None,
            }),
            hold_ms: self.config.settings.hold.as_millis() as u64,
            back_office: None,
        })
    }
}

/// The final state the history's checkers read.
fn final_state(s: &SaleSnapshot) -> FinalState {
    FinalState {
        levels: s
            .levels
            .iter()
            .map(|l| LevelFinal {
                level: l.level.clone(),
                cap: l.cap,
                count: l.count,
            })
            .collect(),
        paid: s
            .records
            .iter()
            .filter(|r| r.status == RecordStatus::Paid)
            .map(|r| PaidBooking {
                candidate: r.candidate.clone(),
                level: r.level.clone(),
                payment: r.payment_id.clone(),
            })
            .collect(),
        emails: s
            .emails
            .iter()
            .map(|e| EmailSent {
                candidate: e.candidate.clone(),
                payment: e.payment_id.clone(),
                recovered: e.recovered,
            })
            .collect(),
    }
}

/// The sale, on the current (paused) runtime.
async fn simulate(config: &SimConfig) -> Result<SimReport, SimError> {
    let setup = |e: &dyn std::fmt::Display| SimError::Setup(e.to_string());
    let settings = config.settings.clone();
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::new(EPOCH_MS));
    let injector = Arc::new(Injector::new(
        config.schedule.clone(),
        config.seed,
        clock.clone(),
    ));
    let history = History::new(clock.clone());
    let sale = SaleId::parse("sim").map_err(|e| setup(&e))?;
    let levels = (1..=config.caps.len())
        .map(|i| Level::parse(&format!("level-{i}")))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| setup(&e))?;
    let candidates: Vec<CandidateHash> = (0..config.load.candidates)
        .map(|i| CandidateHash::of(&format!("sim-candidate-{i}")))
        .collect();

    let raw_ledger = Arc::new(EmbeddedLedger::with_bugs(&config.bugs));
    let level_caps: Vec<(Level, u32)> = levels.iter().cloned().zip(config.caps.clone()).collect();
    raw_ledger
        .reset(&sale, &level_caps)
        .await
        .map_err(|e| setup(&e))?;
    raw_ledger
        .load_candidates(&sale, &candidates)
        .await
        .map_err(|e| setup(&e))?;
    raw_ledger
        .set_open(&sale, true)
        .await
        .map_err(|e| setup(&e))?;
    let raw_records = Arc::new(EmbeddedRecords::new(
        clock.clone(),
        RecordsConfig {
            ttl_delay_ms: settings.sweep_window.as_millis() as u64,
            bugs: config.bugs.clone(),
            ..RecordsConfig::default()
        },
    ));
    let raw_queue = Arc::new(EmbeddedQueue::new(
        clock.clone(),
        QueueConfig::from_settings(&settings),
    ));
    let outbox = Arc::new(OutboxMailer::new());
    let alert_log = Arc::new(AlertLog::new());
    // bKash keeps a checkout open longer than our hold: whether a payment
    // is taken after the hold is the callback's decision, not the gateway's
    let sim_gateway = Arc::new(SimGateway::new(clock.clone(), settings.hold * 2));

    let ledger = Arc::new(RecordingLedger::new(
        Arc::new(FaultyLedger::new(raw_ledger.clone(), injector.clone())),
        history.clone(),
    ));
    let records = Arc::new(FaultyRecords::over(raw_records.clone(), injector.clone()));
    let tracking = Arc::new(TrackingQueue::new(Arc::new(FaultyQueue::new(
        raw_queue.clone(),
        injector.clone(),
    ))));
    let queue: Arc<dyn Queue> = tracking.clone();
    let coordination: Arc<dyn Coordination> = Arc::new(FaultyCoordination::new(
        Arc::new(EmbeddedCoordination::new(clock.clone())),
        injector.clone(),
    ));
    let gateway: Arc<dyn PaymentGateway> =
        Arc::new(FaultyGateway::new(sim_gateway.clone(), injector.clone()));
    let mailer: Arc<dyn Mailer> = Arc::new(RecordingMailer::new(
        Arc::new(FaultyMailer::new(outbox.clone(), injector.clone())),
        history.clone(),
    ));
    let alerts: Arc<dyn Alerts> = Arc::new(FaultyAlerts::new(alert_log.clone(), injector.clone()));
    let sink = Arc::new(ObjectSink::new(clock.clone()));
    let status: Vec<Arc<StatusWriter>> = (0..config.api_instances)
        .map(|i| {
            let instance = format!("sim-api-{i}");
            let instance_clock: Arc<dyn Clock> = Arc::new(
                SkewedClock::new(clock.clone(), injector.clone()).on_instance(instance.clone()),
            );
            Arc::new(
                StatusWriter::new(
                    sale.clone(),
                    "sim",
                    ledger.clone(),
                    coordination.clone(),
                    sink.clone(),
                    instance_clock,
                )
                .with_writer_id(&instance)
                .with_throttle(settings.status_throttle)
                .with_bugs(&config.bugs),
            )
        })
        .collect();

    // each API instance's gateway: the fleet's token from its own
    // TokenManager (shared through coordination, the zoo's bugs switched
    // on), against the gateway's grant allowance
    let token_endpoint = Arc::new(SimTokenEndpoint::new(clock.clone(), config.grant_latency));
    let entropy: Arc<dyn Entropy> = Arc::new(SeededEntropy::new(config.seed));
    let instance_settings = Settings {
        bugs: config.bugs.clone(),
        ..settings.clone()
    };
    let stack = Stack {
        sale: sale.clone(),
        prefix: "sim".into(),
        settings: instance_settings.clone(),
        prices: levels
            .iter()
            .map(|l| (l.clone(), "500".to_owned()))
            .collect(),
        public_url: "https://sim.api".into(),
        ledger: ledger.clone(),
        records: records.clone(),
        stream: records.clone(),
        queue: queue.clone(),
        coordination: coordination.clone(),
        gateway: gateway.clone(),
        mailer: mailer.clone(),
        alerts: alerts.clone(),
        status_sink: sink.clone(),
        clock: clock.clone(),
        entropy: entropy.clone(),
        webhook_trust: WebhookTrust {
            cert_urls: sns::CertUrlPolicy::none(),
            topics: sns::TopicPolicy::any(),
        },
    };
    let stacks: Vec<Stack> = (0..config.api_instances.max(1))
        .map(|_| {
            let tokens = TokenManager::with_entropy(
                token_endpoint.clone(),
                coordination.clone(),
                clock.clone(),
                TokenConfig::from_settings(&instance_settings),
                &stack.prefix,
                entropy.clone(),
            );
            Stack {
                gateway: Arc::new(TokenedGateway::new(
                    tokens,
                    token_endpoint.clone(),
                    gateway.clone(),
                )),
                ..stack.clone()
            }
        })
        .collect();
    let ctx = Arc::new(Ctx {
        stacks: stacks.clone(),
        config: config.clone(),
        sale: sale.clone(),
        levels,
        candidates,
        clock: clock.clone(),
        history: history.clone(),
        raw_ledger,
        raw_records: raw_records.clone(),
        raw_queue,
        outbox,
        alert_log,
        sim_gateway,
        status: status.clone(),
        sink: sink.clone(),
        tracking: tracking.clone(),
        shadowed: Mutex::new(Vec::new()),
        told_not_paid: Mutex::new(Vec::new()),
        live: AtomicU64::new(0),
        requests: AtomicU64::new(0),
        bookings: Mutex::new(Vec::new()),
    });

    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut services: Vec<JoinHandle<()>> = Vec::new();
    let mut reconcilers = Vec::new();
    let mut workers = Vec::new();
    for i in 0..config.workers {
        let worker = Arc::new(Worker::new(
            queue.clone(),
            records.clone(),
            ledger.clone(),
            alerts.clone(),
            WorkerConfig {
                bugs: config.bugs.clone(),
                visibility: settings.visibility_timeout,
                ..WorkerConfig::default()
            },
        ));
        workers.push(worker.clone());
        let stopped = stopped.clone();
        services.push(tokio::spawn(async move {
            tracing::debug!(worker = i, "worker up");
            worker.run(stopped).await;
        }));
    }
    // releases change the counters too: each instance's writer is poked
    // once a throttle window, as the reconciler's and the expiry handler's
    // instances do after releasing
    for writer in &status {
        let (writer, mut stopped) = (writer.clone(), stopped.clone());
        let every = settings.status_throttle;
        services.push(tokio::spawn(async move {
            loop {
                tokio::select! {
                    biased;
                    _ = stopped.changed() => break,
                    () = tokio::time::sleep(every) => {}
                }
                if let Err(e) = writer.poke().await {
                    tracing::debug!(error = %e, "status poke failed");
                }
            }
        }));
    }
    let mut reconciler_settings = settings.clone();
    reconciler_settings.bugs = config.bugs.clone();
    for i in 0..config.reconcilers {
        let owner = format!("sim-reconciler-{i}");
        let instance_clock: Arc<dyn Clock> =
            Arc::new(SkewedClock::new(clock.clone(), injector.clone()).on_instance(owner.clone()));
        let reconciler = Arc::new(Reconciler::new(
            ReconcilerPorts {
                records: records.clone(),
                ledger: ledger.clone(),
                // the instance the reconciler runs on pays with its gateway
                gateway: stacks[i % stacks.len()].gateway.clone(),
                coordination: coordination.clone(),
                mailer: mailer.clone(),
                alerts: alerts.clone(),
                clock: instance_clock,
            },
            ReconcilerConfig::new(sale.clone(), "sim", &owner, reconciler_settings.clone()),
        ));
        reconcilers.push(reconciler.clone());
        let stopped = stopped.clone();
        services.push(tokio::spawn(async move { reconciler.run(stopped).await }));
    }
    let stream: Arc<dyn ChangeStream> = records.clone();
    let expiry = Arc::new(ExpiryHandler::new(stream, ledger.clone(), 0));
    {
        let expiry = expiry.clone();
        let stopped = stopped.clone();
        services.push(tokio::spawn(async move {
            expiry
                .run(stopped, Duration::from_secs(5), Duration::from_secs(1))
                .await;
        }));
    }
    {
        let mut stopped = stopped.clone();
        let every = config.ttl_every;
        services.push(tokio::spawn(async move {
            loop {
                tokio::select! {
                    biased;
                    _ = stopped.wait_for(|s| *s) => break,
                    _ = tokio::time::sleep(every) => {}
                }
                raw_records.sweep_ttl(usize::MAX);
            }
        }));
    }

    // the candidates
    let plan = plan_arrivals(&config.load, config.seed);
    let opened = Instant::now();
    let arrivals = {
        let ctx = ctx.clone();
        tokio::spawn(async move {
            for (n, a) in plan.into_iter().enumerate() {
                tokio::time::sleep_until(opened + Duration::from_millis(a.at_ms)).await;
                let ctx = ctx.clone();
                tokio::spawn(async move { ctx.candidate(n, a.candidate, a.level).await });
            }
        })
    };

    // until quiescent, and quiescent for a hold and a sweep window (a TTL
    // that should not be there has fired by then)
    let settle = settings.hold + settings.sweep_window + settings.sweep_interval;
    let mut quiet_since: Option<Instant> = None;
    loop {
        tokio::time::sleep(settings.sweep_interval).await;
        let now = Instant::now();
        match ctx.busy(arrivals.is_finished()).await {
            None => {
                let since = *quiet_since.get_or_insert(now);
                if now - since >= settle {
                    break;
                }
            }
            Some(waiting_on) => {
                quiet_since = None;
                if now - opened >= config.virtual_limit {
                    let _ = stop.send(true);
                    return Err(SimError::NoQuiescence {
                        virtual_secs: (now - opened).as_secs(),
                        waiting_on,
                    });
                }
            }
        }
    }
    let virtual_secs = (Instant::now() - opened).as_secs();
    // Every service loop puts its stop first (`biased;`), so a sweep, a
    // poke or a read due at this very moment does not run after the stop
    // (unbiased, tokio's select picked one at random: one sweep more or
    // less, and its reads of a skewed clock, from run to run). The services
    // wake in an order tokio's watch channel picks at random; after the
    // stop only the reconcilers call a port (the unlock), and each call
    // takes the next coin of its fault, so that order changes no figure.
    let _ = stop.send(true);
    for service in services {
        if tokio::time::timeout(Duration::from_secs(120), service)
            .await
            .is_err()
        {
            tracing::warn!("a service did not stop in time");
        }
    }

    let snapshot = ctx.snapshot().await?;
    let mut checks = invariants(&snapshot);
    let completed: BTreeMap<PaymentId, u64> = ctx
        .sim_gateway
        .payments()
        .into_iter()
        .filter_map(|(id, p)| p.completed_ms.map(|t| (id, history.ms_since_start(t))))
        .collect();
    checks.push(checks::confirm_paths_mark_paid(&completed, &history.ops()));
    checks.push(checks::verdict(
        "handled_bookings_have_their_record",
        "confirmations refused by another payment's record".to_owned(),
        ctx.shadowed.lock().clone(),
    ));
    checks.push(checks::verdict(
        "one_token_grant",
        token_endpoint.spent(),
        token_endpoint.regrants(),
    ));
    checks.extend(ctx.payer_checks());
    checks.extend(check_all(&history.ops(), &final_state(&snapshot)));
    let passed = checks.iter().all(|c| c.passed);
    let dead_letters = ctx
        .raw_queue
        .dead_letters()
        .await
        .map_or(0, |d| d.len() as u64);
    Ok(SimReport {
        seed: config.seed,
        virtual_secs,
        wall_ms: 0,
        requests: ctx.requests.load(Ordering::Relaxed),
        admitted: ledger.admitted(),
        undone: ledger.undone(),
        paid: snapshot
            .records
            .iter()
            .filter(|r| r.status == RecordStatus::Paid)
            .count() as u64,
        released: ledger.released(),
        extended: reconcilers.iter().map(|r| r.stats().extended).sum(),
        alerts: snapshot.alerts.as_ref().map_or(0, Vec::len) as u64,
        emails: snapshot.emails.len() as u64,
        email_figures: booking_audit::EmailFigures::of(&snapshot),
        redelivered: workers.iter().map(|w| w.stats().duplicates).sum(),
        dead_letters,
        faults_fired: injector.counts().iter().map(|c| c.fired).sum(),
        faults: injector.counts(),
        checks,
        passed,
    })
}
