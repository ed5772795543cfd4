//! The audit can fail: after a small green rehearsal the fleet's instances
//! are stopped (their state stays readable), then, one invariant at a time,
//! the state is broken the way that invariant forbids, and the verdicts are
//! taken again: each break is reported, under the invariant's name, and the
//! invariant held just before it.
//!
//! The breaks go through the same ports the system writes through (the
//! record store, the queue, the outbox, the status sink), except two that no
//! port can produce: a ledger counting past its cap (a wrapper over the real
//! ledger that overcounts) and a throttling record store (a real embedded
//! store configured with a write limit). The rehearsal's own thresholds are
//! broken by bounds no run can meet, and its observations (peaks, what the
//! settle phase left) by the state they are read from.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use booking::ledger::{Admission, Counters, Hold, Ledger, LedgerError, Step};
use booking::records::{BookingRecord, Condition, ConfirmPath, RecordStatus, RecordStore};
use booking::{
    CandidateHash, Confirmation, Level, Message, PaymentId, RequestToken, SaleId, StatusDocument,
    SystemClock,
};
use booking_embedded::records::{EmbeddedRecords, RecordsConfig};
use booking_server::{Embedded, Server};
use reports::InvariantResult;
use scenarios::fleet::Fleet;
use scenarios::rehearse::{Measured, admissions, run_on, verdicts};
use scenarios::thresholds::{Leftovers, turned_away};
use scenarios::{Profile, Progress};

/// A ledger that counts one seat more than it holds in its first level.
#[derive(Debug)]
struct Overcounting(Arc<dyn Ledger>);

#[async_trait]
impl Ledger for Overcounting {
    async fn reset(&self, sale: &SaleId, levels: &[(Level, u32)]) -> Result<(), LedgerError> {
        self.0.reset(sale, levels).await
    }
    async fn load_candidates(
        &self,
        sale: &SaleId,
        candidates: &[CandidateHash],
    ) -> Result<u64, LedgerError> {
        self.0.load_candidates(sale, candidates).await
    }
    async fn set_open(&self, sale: &SaleId, open: bool) -> Result<(), LedgerError> {
        self.0.set_open(sale, open).await
    }
    async fn admit(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        level: &Level,
        token: &RequestToken,
        now_ms: u64,
    ) -> Result<Admission, LedgerError> {
        self.0.admit(sale, candidate, level, token, now_ms).await
    }
    async fn attach_payment(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        token: &RequestToken,
        payment_id: &PaymentId,
        deadline_ms: u64,
    ) -> Result<Step, LedgerError> {
        self.0
            .attach_payment(sale, candidate, token, payment_id, deadline_ms)
            .await
    }
    async fn undo_admission(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        token: &RequestToken,
    ) -> Result<Step, LedgerError> {
        self.0.undo_admission(sale, candidate, token).await
    }
    async fn release(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<Step, LedgerError> {
        self.0.release(sale, candidate, payment_id).await
    }
    async fn mark_paid(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<Step, LedgerError> {
        self.0.mark_paid(sale, candidate, payment_id).await
    }
    async fn extend(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
        deadline_ms: u64,
    ) -> Result<Step, LedgerError> {
        self.0
            .extend(sale, candidate, payment_id, deadline_ms)
            .await
    }
    async fn hold(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
    ) -> Result<Option<Hold>, LedgerError> {
        self.0.hold(sale, candidate).await
    }
    async fn paid(
        &self,
        sale: &SaleId,
        candidate: &CandidateHash,
    ) -> Result<Option<PaymentId>, LedgerError> {
        self.0.paid(sale, candidate).await
    }
    async fn stale_pending(
        &self,
        sale: &SaleId,
        admitted_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<(CandidateHash, Hold)>, LedgerError> {
        self.0.stale_pending(sale, admitted_before_ms, limit).await
    }
    async fn stale_held(
        &self,
        sale: &SaleId,
        deadline_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<(CandidateHash, Hold)>, LedgerError> {
        self.0.stale_held(sale, deadline_before_ms, limit).await
    }
    async fn counters(&self, sale: &SaleId) -> Result<Counters, LedgerError> {
        let mut c = self.0.counters(sale).await?;
        if let Some(first) = c.levels.first_mut() {
            first.count = first.cap + 1;
        }
        Ok(c)
    }
}

/// A server like `old` whose ledger or record store is replaced.
fn swapped(
    old: &Server,
    ledger: Option<Arc<dyn Ledger>>,
    records: Option<Arc<EmbeddedRecords>>,
) -> Server {
    let mut stack = (*old.stack).clone();
    let mut embedded: Option<Embedded> = old.embedded.clone();
    let mut ttl = old.ttl.clone();
    if let Some(l) = ledger {
        stack.ledger = l;
    }
    if let Some(r) = records {
        stack.records = r.clone();
        stack.stream = r.clone();
        ttl = Some(r.clone());
        if let Some(e) = embedded.as_mut() {
            e.records = r;
        }
    }
    Server {
        stack: Arc::new(stack),
        outputs: old.outputs.clone(),
        local_outputs: old.local_outputs.clone(),
        ttl,
        embedded,
        aws: old.aws.clone(),
        redis_pools: old.redis_pools.clone(),
        config: old.config.clone(),
        instance: old.instance.clone(),
        status: old.status.clone(),
        bkash: old.bkash.clone(),
        faults: None,
        bare: None,
    }
}

fn verdict<'a>(all: &'a [InvariantResult], name: &str) -> &'a InvariantResult {
    all.iter()
        .find(|i| i.name == name)
        .unwrap_or_else(|| panic!("{name} not checked: {all:#?}"))
}

struct Check<'a> {
    fleet: &'a Fleet,
    profile: &'a Profile,
    measured: Measured,
    /// Every name reported broken so far.
    broken: &'a Mutex<BTreeSet<String>>,
}

impl Check<'_> {
    async fn run(&self) -> Vec<InvariantResult> {
        verdicts(self.fleet, self.profile, &self.measured)
            .await
            .unwrap()
    }

    async fn holds(&self, name: &str) {
        let all = self.run().await;
        let v = verdict(&all, name);
        assert!(v.passed, "{name} should hold before its break: {v:#?}");
    }

    async fn broken(&self, name: &str) -> InvariantResult {
        let all = self.run().await;
        let v = verdict(&all, name).clone();
        assert!(!v.passed, "{name} should be broken: {v:#?}");
        assert!(v.figure > v.threshold || v.bound == "at_least", "{v:#?}");
        self.broken.lock().unwrap().insert(v.name.clone());
        v
    }
}

fn a_record(candidate: &str, sale: &SaleId, level: &Level, payment: &str) -> BookingRecord {
    let now = now_ms();
    BookingRecord::held(
        CandidateHash::of(candidate),
        sale.clone(),
        level.clone(),
        PaymentId::parse(payment).unwrap(),
        now,
        now + 60_000,
    )
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_invariant_is_reported_broken_by_name() {
    let out = std::env::temp_dir().join(format!("rehearse-audit-{:016x}", rand::random::<u64>()));
    let profile = Profile::load(
        Some("ci"),
        &[format!("out={:?}", out.display().to_string())],
    )
    .unwrap();
    let mut fleet = Fleet::start(&profile).await.unwrap();
    let outcome = run_on(&fleet, &profile, Progress::Quiet).await.unwrap();
    let failed: Vec<_> = outcome.report.failed().collect();
    assert!(failed.is_empty(), "the run itself is green: {failed:#?}");
    fleet.stop_instances().await;

    let server = fleet.first().unwrap().clone();
    let stack = server.stack.clone();
    let sale = stack.sale.clone();
    let level = profile.levels[0].level.clone();
    let records = stack.records.scan_all().await.unwrap();
    let paid: Vec<BookingRecord> = records
        .into_iter()
        .filter(|r| r.status == RecordStatus::Paid)
        .collect();
    assert!(paid.len() >= 3, "a few paid bookings to break");

    let broken = Mutex::new(BTreeSet::new());
    let mut check = Check {
        fleet: &fleet,
        profile: &profile,
        measured: outcome.measured.clone(),
        broken: &broken,
    };
    let all = check.run().await;
    let failed: Vec<_> = all.iter().filter(|i| !i.passed).collect();
    assert!(failed.is_empty(), "stopped, still green: {failed:#?}");
    let every: BTreeSet<String> = all.iter().map(|i| i.name.clone()).collect();

    // status_matches_counters: a document that miscounts
    check.holds("status_matches_counters").await;
    let counters = stack.ledger.counters(&sale).await.unwrap();
    let mut doc = StatusDocument::from_counters(&sale, &counters, now_ms());
    doc.levels[0].taken += 1;
    stack
        .status_sink
        .put(&doc.to_json().unwrap())
        .await
        .unwrap();
    check.broken("status_matches_counters").await;

    // status_never_showed_full_level_open: a full level shown open
    check.holds("status_never_showed_full_level_open").await;
    let mut doc = StatusDocument::from_counters(&sale, &counters, now_ms());
    doc.open = true;
    doc.levels[0].taken = doc.levels[0].cap;
    doc.levels[0].left = 0;
    doc.levels[0].state = booking::status::LevelState::Open;
    stack
        .status_sink
        .put(&doc.to_json().unwrap())
        .await
        .unwrap();
    check.broken("status_never_showed_full_level_open").await;
    let right = StatusDocument::from_counters(&sale, &counters, now_ms());
    stack
        .status_sink
        .put(&right.to_json().unwrap())
        .await
        .unwrap();

    // status_writes_in_read_order: a document read before the last one,
    // written after it
    check.holds("status_writes_in_read_order").await;
    let stale = StatusDocument::from_counters(&sale, &counters, 1);
    stack
        .status_sink
        .put(&stale.to_json().unwrap())
        .await
        .unwrap();
    check.broken("status_writes_in_read_order").await;
    stack
        .status_sink
        .put(&right.to_json().unwrap())
        .await
        .unwrap();

    // one_email_per_paid: a second confirmation
    check.holds("one_email_per_paid").await;
    let p = &paid[0];
    stack
        .mailer
        .send(&Confirmation {
            sale: sale.clone(),
            candidate: p.candidate.clone(),
            level: p.level.clone(),
            payment_id: p.payment_id.clone(),
            trx_id: None,
            recovered: false,
        })
        .await
        .unwrap();
    check.broken("one_email_per_paid").await;

    // queue_drained, then dead_letter_queue_empty: a message nobody takes,
    // received until the queue gives up on it
    check.holds("queue_drained").await;
    check.holds("dead_letter_queue_empty").await;
    let stray = CandidateHash::of("stray");
    stack
        .queue
        .send(Message::admission(&stray, now_ms(), "{}".into()))
        .await
        .unwrap();
    check.broken("queue_drained").await;
    for _ in 0..=stack.settings.receives_max * 2 {
        for r in stack.queue.receive(10, Duration::ZERO).await.unwrap() {
            stack
                .queue
                .change_visibility(&r.receipt, Duration::ZERO)
                .await
                .unwrap();
        }
        if !stack.queue.dead_letters().await.unwrap().is_empty() {
            break;
        }
    }
    check.broken("dead_letter_queue_empty").await;

    // one_booking_per_candidate: a record the ledger knows nothing of
    check.holds("one_booking_per_candidate").await;
    let ghost = a_record("ghost", &sale, &level, "GHOST1");
    stack
        .records
        .put(ghost.clone(), Condition::NotExists)
        .await
        .unwrap();
    check.broken("one_booking_per_candidate").await;
    stack
        .records
        .delete(
            &ghost.candidate,
            Condition::PaymentIs(ghost.payment_id.clone()),
        )
        .await
        .unwrap();

    // ledger_matches_records and gateway_completed_have_paid_booking: a PAID
    // record lost
    check.holds("ledger_matches_records").await;
    check.holds("gateway_completed_have_paid_booking").await;
    let lost = &paid[1];
    stack
        .records
        .delete(
            &lost.candidate,
            Condition::PaymentIs(lost.payment_id.clone()),
        )
        .await
        .unwrap();
    check.broken("ledger_matches_records").await;
    check.broken("gateway_completed_have_paid_booking").await;
    stack
        .records
        .put(lost.clone(), Condition::NotExists)
        .await
        .unwrap();
    check.holds("ledger_matches_records").await;

    // paid_bookings_completed_at_gateway: PAID with a payment the gateway
    // never completed
    check.holds("paid_bookings_completed_at_gateway").await;
    let forged =
        a_record("forged", &sale, &level, "FORGED1").into_paid(ConfirmPath::Callback, now_ms());
    stack
        .records
        .put(forged.clone(), Condition::NotExists)
        .await
        .unwrap();
    check.broken("paid_bookings_completed_at_gateway").await;
    stack
        .records
        .delete(
            &forged.candidate,
            Condition::PaymentIs(forged.payment_id.clone()),
        )
        .await
        .unwrap();

    // no_payment_executed_after_deadline: a booking whose deadline passed
    // before its payment was executed
    check.holds("no_payment_executed_after_deadline").await;
    let p = &paid[2];
    let early = BookingRecord {
        created_ms: p.created_ms.saturating_sub(120_000),
        deadline_ms: p.created_ms.saturating_sub(60_000),
        ..p.clone()
    };
    stack
        .records
        .replace(early, Condition::PaymentIs(p.payment_id.clone()))
        .await
        .unwrap();
    check.broken("no_payment_executed_after_deadline").await;

    // sale_settled: a hold past its deadline that nobody released
    check.holds("sale_settled").await;
    let mut overdue = a_record("overdue", &sale, &level, "OVERDUE1");
    overdue.created_ms = now_ms() - 120_000;
    overdue.deadline_ms = now_ms() - 60_000;
    overdue.expires_at_s = Some(overdue.deadline_ms.div_ceil(1_000));
    stack
        .records
        .put(overdue, Condition::NotExists)
        .await
        .unwrap();
    let snap = fleet.snapshot(false).await.unwrap();
    check.measured.leftovers = Leftovers {
        overdue_holds: snap.overdue_holds,
        queued: snap.queued,
        quiet: true,
    };
    check.broken("sale_settled").await;

    // at_cap_when_demand_exceeded and never_above_cap_during_run: a level
    // that turned candidates away whose peak stopped short of its cap, then
    // one that went over
    check.holds("at_cap_when_demand_exceeded").await;
    check.holds("never_above_cap_during_run").await;
    let ledger = fleet.gateway_ledger().await.unwrap().unwrap();
    let admitted = admissions(&profile, &ledger).unwrap();
    let away = turned_away(&check.measured.first_asks, &admitted.candidates);
    let (name, _) = away
        .iter()
        .find(|(_, n)| **n > 0)
        .expect("the ci sale turns candidates away from a full level");
    let cap = u64::from(
        profile
            .levels
            .iter()
            .find(|l| l.level.as_str() == name.as_str())
            .unwrap()
            .cap,
    );
    assert_eq!(check.measured.peaks[name], cap, "it was full");
    check.measured.peaks.insert(name.clone(), cap - 1);
    check.broken("at_cap_when_demand_exceeded").await;
    check.measured.peaks.insert(name.clone(), cap + 1);
    check.broken("never_above_cap_during_run").await;
    check.measured.peaks.insert(name.clone(), cap);

    // approved_payers_told_paid: an approved payer's redirect answered
    // not_paid (the load engine counts them)
    check.holds("approved_payers_told_paid").await;
    check.measured.approved_told_not_paid = 1;
    check.broken("approved_payers_told_paid").await;
    check.measured.approved_told_not_paid = 0;

    // one_token_grant: a second token granted in the gateway's window (as an
    // instance that ignored the shared token would)
    check.holds("one_token_grant").await;
    let m = mock_gateway::config::Merchant::default();
    let body = serde_json::json!({"app_key": m.app_key, "app_secret": m.app_secret});
    fleet
        .mock
        .as_ref()
        .unwrap()
        .app
        .gateway
        .grant(
            Some(&m.username),
            Some(&m.password),
            body.to_string().as_bytes(),
        )
        .unwrap();
    check.broken("one_token_grant").await;

    // the rehearsal's thresholds: bounds no run can meet
    let mut strict = profile.clone();
    strict.thresholds.rush_rate_min = 1e12;
    strict.thresholds.booking_p99_ms_max = -1.0;
    strict.thresholds.queue_age_ms_max = -1.0;
    strict.thresholds.server_error_pct_max = -1.0;
    let strict_check = Check {
        fleet: &fleet,
        profile: &strict,
        measured: outcome.measured.clone(),
        broken: &broken,
    };
    for name in [
        "rush_rate",
        "booking_p99_ms",
        "queue_age_max_ms",
        "server_error_pct",
    ] {
        check.holds(name).await;
        strict_check.broken(name).await;
    }

    // admissions_within_cap: a ledger counting past its cap
    check.holds("admissions_within_cap").await;
    fleet.servers[0] = Arc::new(swapped(
        &server,
        Some(Arc::new(Overcounting(stack.ledger.clone()))),
        None,
    ));
    let check = Check {
        fleet: &fleet,
        profile: &profile,
        measured: outcome.measured.clone(),
        broken: &broken,
    };
    check.broken("admissions_within_cap").await;

    // no_throttling: a record store that throttled writes
    check.holds("no_throttling").await;
    let throttling = Arc::new(EmbeddedRecords::new(
        Arc::new(SystemClock),
        RecordsConfig {
            writes_per_s: Some(1),
            ..RecordsConfig::default()
        },
    ));
    let mut throttled = 0;
    for p in &paid {
        if throttling
            .put(p.clone(), Condition::NotExists)
            .await
            .is_err()
        {
            throttled += 1;
        }
    }
    assert!(throttled > 0, "the store refused writes over its limit");
    fleet.servers[0] = Arc::new(swapped(&server, None, Some(throttling)));
    let check = Check {
        fleet: &fleet,
        profile: &profile,
        measured: outcome.measured.clone(),
        broken: &broken,
    };
    let v = check.broken("no_throttling").await;
    assert_eq!(v.figure, f64::from(throttled));

    // nothing the rehearsal checks went unbroken
    let broken = broken.into_inner().unwrap();
    let unbroken: Vec<&String> = every.difference(&broken).collect();
    assert!(unbroken.is_empty(), "never broken here: {unbroken:?}");

    fleet.stop().await;
    std::fs::remove_dir_all(&out).unwrap();
}
