//! The reconciler: the only release path.
//!
//! One instance per sale runs it, under a lock with an owner token
//! (`keys::reconciler_lock`, renewed every sweep, with a TTL longer than the
//! longest sweep: [`ReconcilerConfig::lock_ttl`]). Every sweep:
//!
//! 1. undoes stale pending admissions (requests that died before their hold
//!    was enqueued), by request token (the bug zoo's
//!    `no_stale_pending_cleanup` skips this step);
//! 2. takes HELD records of the sale whose deadline is within the sweep
//!    window or past (the due records);
//! 3. re-creates the HELD record of every ledger hold whose deadline passed
//!    more than `booking_copy_slack` ago and that has no record at all (its
//!    admission message was dead-lettered, so no worker will ever write it):
//!    without this, nothing would ever release that seat. The record gets the
//!    hold's deadline (so it is due in this very sweep and decided on a
//!    gateway query like any other) and a TTL one hold later than now (so
//!    the safety net does not release it before the reconciler has asked the
//!    gateway). A hold whose record is PAID with its payment gets its ledger
//!    paid mark (the confirm path's ledger step failed:
//!    [`crate::confirm::mark_paid`] marks the record PAID regardless). The
//!    holds of the due records are not read again, and the step stops at
//!    half the budget: before, it read the record of every overdue hold one
//!    by one ahead of the due records and inside their budget, so a backlog
//!    of overdue holds (a chaos rehearsal's Redis blackhole) left no time to
//!    start a single due record, sweep after sweep, while the TTL safety net
//!    released the overdue seats, completed payments among them. The hold
//!    may be released between the scan and the re-creation (by the TTL
//!    safety net, on the deletion of the record the scan found missing): the
//!    re-created record then has no seat, and the confirm step, which asks
//!    the ledger whose seat it is before it claims a record, never marks it
//!    PAID (step 5 deletes it);
//! 4. handles the due records most overdue first, `sweep_concurrency` at a
//!    time, and starts no new one once `sweep_budget` has passed;
//! 5. queries the gateway for each and acts on [`decide`]: completed → PAID
//!    through [`crate::confirm::mark_paid`] (if the ledger no longer holds
//!    the seat, nothing is marked PAID, a human is alerted and the record is
//!    deleted like a released one; if the record went away under the query,
//!    deleted by the TTL service, the PAID record is written from the record
//!    in hand, ledger first, so the safety net's release finds the seat
//!    paid); cancelled/failed, or not
//!    completed after the deadline → payment-guarded ledger release, then a
//!    conditional delete of the record; pending before the deadline → leave;
//!    the query failed → count it on the record; at the threshold extend the
//!    hold by `hold`, at most `extensions_max` times, then alert a human.
//!    Never release on uncertainty;
//! 6. if the budget is not spent, sends the confirmation email of every
//!    PAID record whose email is still owed a sweep interval after its
//!    payment (its winner died between the HELD→PAID update and the mark,
//!    or its mailer failed): [`crate::outbox::send_owed_emails`], each after its back-off.
//!
//! Release order: ledger first, record second. A crash in between leaves a
//! HELD record whose ledger hold is gone; the next sweep releases again (a
//! no-op) and deletes the record.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use booking::clock::Clock;
use booking::coordination::{Coordination, keys};
use booking::gateway::{GatewayError, GatewayPaymentState, PaymentGateway, PaymentStatus};
use booking::ledger::{HoldState, Ledger, Step};
use booking::notify::{Alert, Alerts, Mailer};
use booking::records::{
    BookingRecord, Condition, ConfirmPath, RecordError, RecordStatus, RecordStore,
    sort_by_deadline, ttl_for_deadline,
};
use booking::{AdmittedBooking, Bug, CandidateHash, PaymentId, SaleId, Settings};
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;

use crate::confirm::{self, ConfirmPorts, MarkPaidOutcome, PaidRequest};
use crate::outbox;
use crate::{Shutdown, stopped, stopping};

/// Why a hold is released.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseReason {
    /// The gateway says cancelled.
    Cancelled,
    /// The gateway says failed.
    Failed,
    /// Not completed, and the deadline has passed.
    Expired,
}

/// What the reconciler does with one due record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Completed at the gateway: HELD→PAID and the email.
    MarkPaid {
        /// The gateway transaction.
        trx_id: String,
    },
    /// Payment-guarded release, then the conditional delete.
    Release {
        /// Why.
        reason: ReleaseReason,
    },
    /// Pending before the deadline: the user may still be paying.
    Leave,
    /// The query failed (or said something uncertain): count it.
    NoteFailure,
    /// The query failed for the threshold'th time: extend the hold.
    Extend {
        /// The new deadline.
        deadline_ms: u64,
    },
    /// The query failed for the threshold'th time and the extensions are used
    /// up: count it and alert a human. Never release.
    Alert,
}

/// The reconciler's decision for one HELD record (pure).
///
/// `query` is the gateway's answer (`Err`: no answer). An answer about
/// another payment, or a state this adapter does not know, is uncertainty,
/// like a failed query.
pub fn decide(
    record: &BookingRecord,
    query: &Result<PaymentStatus, GatewayError>,
    now_ms: u64,
    settings: &Settings,
) -> Action {
    let past_deadline = now_ms >= record.deadline_ms;
    let state = match query {
        Ok(status) if status.payment_id == record.payment_id => Some(&status.state),
        _ => None,
    };
    match state {
        Some(GatewayPaymentState::Completed { trx_id }) => Action::MarkPaid {
            trx_id: trx_id.clone(),
        },
        Some(GatewayPaymentState::Cancelled) => Action::Release {
            reason: ReleaseReason::Cancelled,
        },
        Some(GatewayPaymentState::Failed) => Action::Release {
            reason: ReleaseReason::Failed,
        },
        Some(GatewayPaymentState::Initiated | GatewayPaymentState::Authorized) => {
            if past_deadline {
                Action::Release {
                    reason: ReleaseReason::Expired,
                }
            } else {
                Action::Leave
            }
        }
        Some(GatewayPaymentState::Unknown(_)) | None
            if past_deadline && settings.bugs.on(Bug::ReleaseOnUnansweredQuery) =>
        {
            // the zoo's trap: uncertainty taken for "not paid"
            Action::Release {
                reason: ReleaseReason::Expired,
            }
        }
        Some(GatewayPaymentState::Unknown(_)) | None => {
            let failures = record.query_failures.saturating_add(1);
            if failures < settings.query_failures_before_extension {
                Action::NoteFailure
            } else if record.extensions < settings.extensions_max {
                Action::Extend {
                    deadline_ms: record
                        .deadline_ms
                        .saturating_add(settings.hold.as_millis() as u64),
                }
            } else if failures == settings.query_failures_before_extension {
                Action::Alert
            } else {
                // alerted already: keep counting, keep asking, never release
                Action::NoteFailure
            }
        }
    }
}

/// How one reconciler instance runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ReconcilerConfig {
    /// The sale it reconciles.
    pub sale: SaleId,
    /// Key prefix of the coordination store.
    pub prefix: String,
    /// This instance's owner token for the lock.
    pub owner: String,
    /// The numbers (interval, window, concurrency, budget, thresholds, hold).
    pub settings: Settings,
    /// Due records taken per sweep at most.
    pub due_limit: usize,
    /// Stale pending admissions undone per sweep at most.
    pub pending_limit: usize,
    /// The time one gateway query may use.
    pub query_timeout: Duration,
}

impl ReconcilerConfig {
    /// The defaults for a sale and an owner.
    pub fn new(sale: SaleId, prefix: &str, owner: &str, settings: Settings) -> ReconcilerConfig {
        ReconcilerConfig {
            sale,
            prefix: prefix.to_owned(),
            owner: owner.to_owned(),
            query_timeout: settings.request_deadline,
            settings,
            due_limit: 10_000,
            pending_limit: 10_000,
        }
    }

    /// The lock's TTL: longer than the longest sweep (the budget, plus one
    /// gateway query started just before it ran out) plus two intervals, so
    /// the lock never lapses under a sweep still running (two leaders would
    /// release the same records: harmless, the steps are guarded, but wasted
    /// work and noise). A dead leader is replaced within this long.
    pub fn lock_ttl(&self) -> Duration {
        self.settings
            .sweep_interval
            .saturating_mul(2)
            .saturating_add(self.settings.sweep_budget)
            .saturating_add(self.query_timeout)
    }
}

/// The ports the reconciler uses.
#[derive(Debug, Clone)]
pub struct ReconcilerPorts {
    /// Records.
    pub records: Arc<dyn RecordStore>,
    /// Seats.
    pub ledger: Arc<dyn Ledger>,
    /// Status queries.
    pub gateway: Arc<dyn PaymentGateway>,
    /// The leader lock.
    pub coordination: Arc<dyn Coordination>,
    /// Confirmation emails.
    pub mailer: Arc<dyn Mailer>,
    /// Alerts.
    pub alerts: Arc<dyn Alerts>,
    /// The time decisions use.
    pub clock: Arc<dyn Clock>,
}

impl ReconcilerPorts {
    /// The ports the confirm step takes, with the sale's settings.
    fn confirm<'a>(&'a self, config: &'a ReconcilerConfig) -> ConfirmPorts<'a> {
        ConfirmPorts {
            records: self.records.as_ref(),
            ledger: self.ledger.as_ref(),
            mailer: self.mailer.as_ref(),
            alerts: self.alerts.as_ref(),
            coordination: self.coordination.as_ref(),
            prefix: &config.prefix,
            settings: &config.settings,
        }
    }
}

/// What one sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepReport {
    /// Whether this instance held the lock (nothing else happened if not).
    pub leader: bool,
    /// Stale pending admissions undone.
    pub pending_undone: u64,
    /// Records re-created for held holds that had none.
    pub orphans_recovered: u64,
    /// Seats of PAID records marked paid in the ledger by the orphan sweep
    /// (their confirm path's ledger step had failed).
    #[serde(default)]
    pub paid_marks_repaired: u64,
    /// Due records found.
    pub due: u64,
    /// Due records handled (the rest waited for the budget).
    pub started: u64,
    /// Marked PAID by this sweep.
    pub paid: u64,
    /// Released.
    pub released: u64,
    /// Left alone.
    pub left: u64,
    /// Failed queries counted.
    pub query_failures: u64,
    /// Holds extended.
    pub extended: u64,
    /// Alerts raised.
    pub alerts: u64,
    /// Steps that failed (retried next sweep).
    pub errors: u64,
    /// Owed confirmation emails sent by this sweep (their winner died, or
    /// its mailer or mark failed).
    pub emails_recovered: u64,
    /// Owed emails this sweep tried and could not send (or mark): tried
    /// again after their back-off.
    #[serde(default)]
    pub emails_failed: u64,
    /// Owed emails left for a later sweep: their back-off is running.
    #[serde(default)]
    pub emails_waiting: u64,
    /// Owed emails left owed: their tries are spent (alerted).
    #[serde(default)]
    pub emails_given_up: u64,
}

/// The reconciler's counters (totals over all sweeps).
#[derive(Debug, Default)]
struct Totals {
    sweeps: AtomicU64,
    not_leader: AtomicU64,
    pending_undone: AtomicU64,
    orphans_recovered: AtomicU64,
    paid_marks_repaired: AtomicU64,
    started: AtomicU64,
    paid: AtomicU64,
    released: AtomicU64,
    left: AtomicU64,
    query_failures: AtomicU64,
    extended: AtomicU64,
    alerts: AtomicU64,
    errors: AtomicU64,
    deferred: AtomicU64,
    emails_recovered: AtomicU64,
    emails_failed: AtomicU64,
    emails_waiting: AtomicU64,
    emails_given_up: AtomicU64,
}

/// A snapshot of the reconciler's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct ReconcilerCounts {
    pub sweeps: u64,
    pub not_leader: u64,
    pub pending_undone: u64,
    pub orphans_recovered: u64,
    /// Seats of PAID records marked paid in the ledger by the orphan sweep.
    #[serde(default)]
    pub paid_marks_repaired: u64,
    pub started: u64,
    pub paid: u64,
    pub released: u64,
    pub left: u64,
    pub query_failures: u64,
    pub extended: u64,
    pub alerts: u64,
    pub errors: u64,
    /// Due records not started because the budget ran out.
    pub deferred: u64,
    /// Owed confirmation emails sent by the sweeps.
    #[serde(default)]
    pub emails_recovered: u64,
    /// The sweeps' tries of owed emails that failed.
    #[serde(default)]
    pub emails_failed: u64,
    /// Owed emails waiting out a back-off at the last sweep.
    #[serde(default)]
    pub emails_waiting: u64,
    /// Owed emails given up at the last sweep (tries spent, alerted).
    #[serde(default)]
    pub emails_given_up: u64,
}

/// What handling one record came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Done {
    Paid,
    Released,
    Left,
    QueryFailure,
    Extended,
    Alerted,
    Error,
}

/// One reconciler instance.
#[derive(Debug)]
pub struct Reconciler {
    ports: ReconcilerPorts,
    config: Arc<ReconcilerConfig>,
    totals: Totals,
}

impl Reconciler {
    /// A reconciler over these ports.
    pub fn new(ports: ReconcilerPorts, config: ReconcilerConfig) -> Reconciler {
        Reconciler {
            ports,
            config: Arc::new(config),
            totals: Totals::default(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> ReconcilerCounts {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let t = &self.totals;
        ReconcilerCounts {
            sweeps: g(&t.sweeps),
            not_leader: g(&t.not_leader),
            pending_undone: g(&t.pending_undone),
            orphans_recovered: g(&t.orphans_recovered),
            paid_marks_repaired: g(&t.paid_marks_repaired),
            started: g(&t.started),
            paid: g(&t.paid),
            released: g(&t.released),
            left: g(&t.left),
            query_failures: g(&t.query_failures),
            extended: g(&t.extended),
            alerts: g(&t.alerts),
            errors: g(&t.errors),
            deferred: g(&t.deferred),
            emails_recovered: g(&t.emails_recovered),
            emails_failed: g(&t.emails_failed),
            emails_waiting: g(&t.emails_waiting),
            emails_given_up: g(&t.emails_given_up),
        }
    }

    fn lock_key(&self) -> String {
        keys::reconciler_lock(&self.config.prefix, &self.config.sale)
    }

    /// Renews the lock if this instance holds it, or takes it if free.
    pub async fn acquire(&self) -> bool {
        let key = self.lock_key();
        let ttl = self.config.lock_ttl();
        let coordination = &self.ports.coordination;
        match coordination
            .extend_lock(&key, &self.config.owner, ttl)
            .await
        {
            Ok(true) => return true,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(error = %e, "reconciler lock renewal failed");
                return false;
            }
        }
        match coordination.try_lock(&key, &self.config.owner, ttl).await {
            Ok(taken) => {
                if taken {
                    tracing::info!(owner = %self.config.owner, "reconciler lock taken");
                }
                taken
            }
            Err(e) => {
                tracing::warn!(error = %e, "reconciler lock failed");
                false
            }
        }
    }

    /// Gives the lock up, if held.
    pub async fn release_lock(&self) {
        if let Err(e) = self
            .ports
            .coordination
            .unlock(&self.lock_key(), &self.config.owner)
            .await
        {
            tracing::warn!(error = %e, "reconciler unlock failed");
        }
    }

    /// One sweep, if this instance is (or becomes) the leader.
    pub async fn tick(&self) -> SweepReport {
        if !self.acquire().await {
            self.totals.not_leader.fetch_add(1, Ordering::Relaxed);
            return SweepReport::default();
        }
        self.sweep().await
    }

    /// One sweep, without the lock (call [`Reconciler::tick`] in production).
    pub async fn sweep(&self) -> SweepReport {
        let started_at = tokio::time::Instant::now();
        let mut report = SweepReport {
            leader: true,
            ..SweepReport::default()
        };
        self.totals.sweeps.fetch_add(1, Ordering::Relaxed);
        let now_ms = self.ports.clock.now_ms();
        let settings = &self.config.settings;
        let sale = &self.config.sale;

        // (1) stale pending admissions (the zoo's `no_stale_pending_cleanup`
        // skips them: their seats stay counted forever)
        if settings.bugs.on(Bug::NoStalePendingCleanup) {
            tracing::debug!("bug no_stale_pending_cleanup: stale pending admissions left counted");
        } else {
            self.undo_stale_pending(now_ms, &mut report).await;
        }

        // (2) due records of this sale, read before the orphan step: the
        // holds behind them have their records, so it need not read those
        let window_end = now_ms.saturating_add(settings.sweep_window.as_millis() as u64);
        let mut due = match self
            .ports
            .records
            .held_due(window_end, self.config.due_limit)
            .await
        {
            Ok(mut due) => {
                due.retain(|r| r.sale == *sale && r.status == RecordStatus::Held);
                Some(due)
            }
            Err(e) => {
                tracing::warn!(error = %e, "due-holds query failed");
                report.errors += 1;
                None
            }
        };

        // (3) held holds with no record at all, within half the budget (the
        // due records must never wait for it); the records it re-creates
        // are due now
        let with_record: HashSet<(&CandidateHash, &PaymentId)> = due
            .iter()
            .flatten()
            .map(|r| (&r.candidate, &r.payment_id))
            .collect();
        let orphans_until = started_at + settings.sweep_budget / 2;
        let recovered = self
            .recover_orphans(now_ms, &with_record, orphans_until, &mut report)
            .await;
        let Some(mut due) = due.take() else {
            self.send_owed_emails(now_ms, started_at, &mut report).await;
            self.add_totals(&report);
            return report;
        };
        due.extend(recovered);
        sort_by_deadline(&mut due);
        report.due = due.len() as u64;

        // (4, 5) SWEEP_CONCURRENCY at a time, no new start after the budget
        let concurrency = settings.sweep_concurrency;
        let mut running: JoinSet<Done> = JoinSet::new();
        let mut deferred = 0u64;
        let mut records = due.into_iter();
        while let Some(record) = records.next() {
            if started_at.elapsed() >= settings.sweep_budget {
                deferred = budget_spent(1 + records.len() as u64);
                break;
            }
            while running.len() >= concurrency {
                if let Some(done) = running.join_next().await {
                    tally(&mut report, done);
                }
            }
            if started_at.elapsed() >= settings.sweep_budget {
                deferred = budget_spent(1 + records.len() as u64);
                break;
            }
            report.started += 1;
            let ports = self.ports.clone();
            let config = Arc::clone(&self.config);
            running.spawn(async move { handle(&ports, &config, record).await });
        }
        while let Some(done) = running.join_next().await {
            tally(&mut report, done);
        }
        self.totals.deferred.fetch_add(deferred, Ordering::Relaxed);

        // (6) PAID records whose email is still owed a sweep interval after
        // the payment (their winner died before sending or marking it),
        // after the due records and only while the budget lasts: an email
        // owed waits a sweep more, a hold past its deadline must not
        if started_at.elapsed() < settings.sweep_budget {
            self.send_owed_emails(now_ms, started_at, &mut report).await;
        }
        self.add_totals(&report);
        tracing::debug!(?report, "sweep done");
        report
    }

    /// Step 1: undoes every stale pending admission (admitted more than
    /// `pending_stale_after` ago, no payment attached: its request died
    /// before its hold was enqueued), by request token.
    async fn undo_stale_pending(&self, now_ms: u64, report: &mut SweepReport) {
        let settings = &self.config.settings;
        let sale = &self.config.sale;
        let stale_before = now_ms.saturating_sub(settings.pending_stale_after.as_millis() as u64);
        match self
            .ports
            .ledger
            .stale_pending(sale, stale_before, self.config.pending_limit)
            .await
        {
            Ok(stale) => {
                for (candidate, hold) in stale {
                    match self
                        .ports
                        .ledger
                        .undo_admission(sale, &candidate, &hold.token)
                        .await
                    {
                        Ok(Step::Done) => {
                            tracing::info!(candidate = %candidate, token = %hold.token, "stale pending admission undone");
                            report.pending_undone += 1;
                        }
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(error = %e, "stale pending undo failed");
                            report.errors += 1;
                        }
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "stale pending scan failed");
                report.errors += 1;
            }
        }
    }

    /// Step 6: the email sweep ([`outbox::send_owed_emails`]) over the
    /// records paid more than a sweep interval ago (a winner still sending
    /// is given that long) whose back-off is over.
    /// None is started after the sweep's budget (from `started_at`).
    async fn send_owed_emails(
        &self,
        now_ms: u64,
        started_at: tokio::time::Instant,
        report: &mut SweepReport,
    ) {
        let settings = &self.config.settings;
        let before = outbox::owed_paid_before(now_ms, settings);
        let ports = self.ports.confirm(&self.config);
        let clock = self.ports.clock.clone();
        match outbox::send_owed_emails(
            ports,
            &self.config.sale,
            before,
            self.config.due_limit,
            outbox::SweepMode::Scheduled,
            started_at + settings.sweep_budget,
            &move || clock.now_ms(),
        )
        .await
        {
            Ok(sweep) => {
                report.emails_recovered += sweep.sent;
                report.emails_failed += sweep.failed;
                report.emails_waiting = sweep.waiting;
                report.emails_given_up = sweep.given_up;
                self.totals
                    .deferred
                    .fetch_add(sweep.deferred, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::warn!(error = %e, "owed-emails query failed");
                report.errors += 1;
            }
        }
    }

    /// Step 3: a HELD record for every held hold past its deadline by more
    /// than `booking_copy_slack` that has no record (the holds of the due
    /// records, `with_record`, are not read again), until `until`; returns
    /// the records it wrote. A PAID record of the hold's payment gets its
    /// ledger mark; a record of another payment or sale is left to its own
    /// path.
    async fn recover_orphans(
        &self,
        now_ms: u64,
        with_record: &HashSet<(&CandidateHash, &PaymentId)>,
        until: tokio::time::Instant,
        report: &mut SweepReport,
    ) -> Vec<BookingRecord> {
        let settings = &self.config.settings;
        let sale = &self.config.sale;
        let before = now_ms.saturating_sub(settings.booking_copy_slack.as_millis() as u64);
        let stale = match self
            .ports
            .ledger
            .stale_held(sale, before, self.config.pending_limit)
            .await
        {
            Ok(stale) => stale,
            Err(e) => {
                tracing::warn!(error = %e, "stale held scan failed");
                report.errors += 1;
                return Vec::new();
            }
        };
        let hold_ms = settings.hold.as_millis() as u64;
        let mut recovered = Vec::new();
        for (candidate, hold) in stale {
            let HoldState::Held {
                payment_id,
                deadline_ms,
            } = hold.state
            else {
                continue;
            };
            if with_record.contains(&(&candidate, &payment_id)) {
                continue;
            }
            if tokio::time::Instant::now() >= until {
                tracing::debug!("orphan step out of time; the rest waits for the next sweep");
                break;
            }
            match self.ports.records.get(&candidate, true).await {
                Ok(Some(r))
                    if r.status == RecordStatus::Paid
                        && r.payment_id == payment_id
                        && r.sale == *sale =>
                {
                    // PAID while its ledger step failed: the seat is paid
                    self.repair_paid_mark(&r, report).await;
                    continue;
                }
                Ok(Some(_)) => continue,
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "record read failed; next sweep retries");
                    report.errors += 1;
                    continue;
                }
            }
            // the admission the ledger still holds, its request time read
            // back from the deadline; its TTL runs a hold past now (or the
            // deadline, if later), so the next sweep sees it before the TTL
            // service could delete it
            let admitted = AdmittedBooking {
                candidate: candidate.clone(),
                sale: sale.clone(),
                level: hold.level.clone(),
                payment_id: payment_id.clone(),
                signature: None,
                token: Some(hold.token.clone()),
                request_ms: deadline_ms.saturating_sub(hold_ms),
                deadline_ms,
            };
            let record = BookingRecord {
                expires_at_s: Some(ttl_for_deadline(
                    now_ms.max(deadline_ms).saturating_add(hold_ms),
                )),
                ..admitted.held_record()
            };
            match self
                .ports
                .records
                .put(record.clone(), Condition::NotExists)
                .await
            {
                Ok(()) => {
                    tracing::warn!(candidate = %candidate, payment = %payment_id, deadline_ms,
                        "held hold had no record (dead-lettered admission?): record re-created");
                    report.orphans_recovered += 1;
                    recovered.push(record);
                }
                Err(RecordError::ConditionFailed { .. }) => {} // a worker was faster
                Err(e) => {
                    tracing::warn!(error = %e, "re-creating a record failed; next sweep retries");
                    report.errors += 1;
                }
            }
        }
        recovered
    }

    /// Marks paid in the ledger the seat of a PAID record whose hold the
    /// ledger still has as held (its confirm path's ledger step failed and
    /// no later path repeated it), so the ledger's paid marks are the PAID
    /// records.
    async fn repair_paid_mark(&self, record: &BookingRecord, report: &mut SweepReport) {
        let mark = confirm::ledger_mark_paid(
            self.ports.ledger.as_ref(),
            &record.sale,
            &record.candidate,
            &record.payment_id,
        )
        .await;
        match mark {
            confirm::LedgerMark::Done => {
                tracing::warn!(candidate = %record.candidate, payment = %record.payment_id,
                    "PAID record whose seat the ledger still held: marked paid");
                report.paid_marks_repaired += 1;
            }
            confirm::LedgerMark::AlreadyPaid => {}
            confirm::LedgerMark::NoMatch => {
                // released between the scan and the mark: nothing to mark
                tracing::warn!(candidate = %record.candidate, payment = %record.payment_id,
                    "PAID record whose hold went away before its ledger mark");
            }
            confirm::LedgerMark::Failed(e) => {
                tracing::warn!(error = %e, "ledger mark of a PAID record failed; next sweep retries");
                report.errors += 1;
            }
        }
    }

    fn add_totals(&self, r: &SweepReport) {
        let t = &self.totals;
        for (a, v) in [
            (&t.pending_undone, r.pending_undone),
            (&t.orphans_recovered, r.orphans_recovered),
            (&t.paid_marks_repaired, r.paid_marks_repaired),
            (&t.started, r.started),
            (&t.paid, r.paid),
            (&t.released, r.released),
            (&t.left, r.left),
            (&t.query_failures, r.query_failures),
            (&t.extended, r.extended),
            (&t.alerts, r.alerts),
            (&t.errors, r.errors),
            (&t.emails_recovered, r.emails_recovered),
            (&t.emails_failed, r.emails_failed),
        ] {
            a.fetch_add(v, Ordering::Relaxed);
        }
        // gauges: what the last sweep of the outbox saw
        t.emails_waiting.store(r.emails_waiting, Ordering::Relaxed);
        t.emails_given_up
            .store(r.emails_given_up, Ordering::Relaxed);
    }

    /// Sweeps every `sweep_interval` until `shutdown` says stop, then gives
    /// the lock up. A sweep in progress is finished first (it is bounded by
    /// the budget and the query timeout). A stop and a tick due at the same
    /// moment stop it: no sweep starts after the stop was seen.
    pub async fn run(&self, mut shutdown: Shutdown) {
        let mut interval = tokio::time::interval(self.config.settings.sweep_interval);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !stopping(&shutdown) {
            tokio::select! {
                // the stop first: an unbiased select picks at random among
                // ready branches, so runs on paused time would differ
                biased;
                _ = stopped(&mut shutdown) => break,
                _ = interval.tick() => {}
            }
            self.tick().await;
        }
        self.release_lock().await;
        tracing::info!("reconciler stopped");
    }
}

/// The sweep stops starting records: logs it (what the operators watch for)
/// and answers how many wait for the next sweep.
fn budget_spent(deferred: u64) -> u64 {
    tracing::warn!(
        deferred,
        "sweep budget spent; the rest waits for the next sweep"
    );
    deferred
}

fn tally(report: &mut SweepReport, done: Result<Done, tokio::task::JoinError>) {
    match done {
        Ok(Done::Paid) => report.paid += 1,
        Ok(Done::Released) => report.released += 1,
        Ok(Done::Left) => report.left += 1,
        Ok(Done::QueryFailure) => report.query_failures += 1,
        Ok(Done::Extended) => {
            report.query_failures += 1;
            report.extended += 1;
        }
        Ok(Done::Alerted) => {
            report.query_failures += 1;
            report.alerts += 1;
        }
        Ok(Done::Error) => report.errors += 1,
        Err(e) => {
            tracing::error!(error = %e, "reconciler task failed");
            report.errors += 1;
        }
    }
}

/// Queries the gateway for one record and carries out the decision.
async fn handle(ports: &ReconcilerPorts, config: &ReconcilerConfig, record: BookingRecord) -> Done {
    let within = config.query_timeout;
    let query =
        match tokio::time::timeout(within, ports.gateway.query(&record.payment_id, within)).await {
            Ok(answer) => answer,
            Err(_) => Err(GatewayError::Timeout),
        };
    let now_ms = ports.clock.now_ms();
    let action = decide(&record, &query, now_ms, &config.settings);
    tracing::debug!(candidate = %record.candidate, payment = %record.payment_id, ?action, "reconcile");
    let (candidate, payment) = (&record.candidate, &record.payment_id);
    match action {
        Action::Leave => {
            // the gateway answered: failures count "in a row" from zero again
            if record.query_failures > 0 {
                if let Err(e) = ports.records.clear_query_failures(candidate, payment).await {
                    tracing::warn!(error = %e, "could not clear the query failures; next answer retries");
                }
            }
            Done::Left
        }
        Action::MarkPaid { trx_id } => {
            let request = PaidRequest {
                sale: record.sale.clone(),
                candidate: candidate.clone(),
                payment_id: payment.clone(),
                trx_id: Some(trx_id),
                path: ConfirmPath::Reconciler,
                now_ms,
            };
            let confirm_ports = ports.confirm(config);
            match confirm::mark_paid(confirm_ports, &request).await {
                Ok(MarkPaidOutcome::Won { .. }) => Done::Paid,
                Ok(MarkPaidOutcome::SeatNotHeld) => {
                    // the record outlived its hold (alerted): the seat is
                    // released, so is the booking
                    delete_released(ports, &record, None).await
                }
                Ok(MarkPaidOutcome::NotHeld { current: None }) => {
                    // the record went away under the query (the TTL service
                    // deleted it): the booking is written from the record
                    // in hand, the ledger first
                    paid_from_record(ports, config, &record, request).await
                }
                Ok(_) => Done::Left,
                Err(e) => {
                    tracing::warn!(error = %e, "HELD→PAID failed; next sweep retries");
                    Done::Error
                }
            }
        }
        Action::Release { reason } => {
            match ports.ledger.release(&record.sale, candidate, payment).await {
                Ok(Step::Done | Step::NoMatch) => {}
                Ok(Step::Paid) => {
                    // the ledger says paid while the record is HELD: do not
                    // delete a booking that may be paid; a human looks
                    raise(
                        &*ports.alerts,
                        "ledger_paid_record_held",
                        format!("release of {payment} refused: the ledger has the candidate paid"),
                        &record,
                    )
                    .await;
                    return Done::Error;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "ledger release failed; next sweep retries");
                    return Done::Error;
                }
            }
            delete_released(ports, &record, Some(reason)).await
        }
        Action::NoteFailure => {
            note_failure(ports, &record, &query).await;
            Done::QueryFailure
        }
        Action::Extend { deadline_ms } => {
            match ports.records.extend(candidate, payment, deadline_ms).await {
                Ok(extended) => {
                    if let Err(e) = ports
                        .ledger
                        .extend(&record.sale, candidate, payment, deadline_ms)
                        .await
                    {
                        tracing::warn!(error = %e, "ledger extend failed (informational)");
                    }
                    tracing::warn!(candidate = %candidate, payment = %payment, deadline_ms,
                        extensions = extended.extensions, "gateway unanswered; hold extended");
                    Done::Extended
                }
                Err(e) => {
                    tracing::warn!(error = %e, "extend failed; next sweep retries");
                    Done::Error
                }
            }
        }
        Action::Alert => {
            note_failure(ports, &record, &query).await;
            raise(
                &*ports.alerts,
                "extensions_exhausted",
                format!(
                    "no gateway answer for {payment} after {} extensions; the seat stays held",
                    record.extensions
                ),
                &record,
            )
            .await;
            Done::Alerted
        }
    }
}

/// A completed payment whose HELD record vanished between the due query and
/// the HELD→PAID update: the TTL service deleted it (its TTL is the
/// deadline) while the gateway query was out, and the safety net releases
/// the seat on that deletion without asking the gateway. Leaving it (as
/// this path did) lost completed payments in a chaos rehearsal: money
/// taken, no booking. The record in hand stands for the booking copy:
/// [`confirm::mark_paid_from_copy`] marks the ledger paid first (so the
/// net's payment-guarded release finds the seat paid; if the net was
/// faster the ledger answers `NoMatch`, nothing is written and a human is
/// alerted), then writes the PAID record.
async fn paid_from_record(
    ports: &ReconcilerPorts,
    config: &ReconcilerConfig,
    record: &BookingRecord,
    request: PaidRequest,
) -> Done {
    let copy = AdmittedBooking {
        candidate: record.candidate.clone(),
        sale: record.sale.clone(),
        level: record.level.clone(),
        payment_id: record.payment_id.clone(),
        signature: None,
        token: None,
        request_ms: record.created_ms,
        deadline_ms: record.deadline_ms,
    };
    tracing::warn!(candidate = %record.candidate, payment = %record.payment_id,
        "completed payment whose HELD record went away under the query: PAID from the record");
    let confirm_ports = ports.confirm(config);
    match confirm::mark_paid_from_copy(
        confirm_ports,
        &copy,
        request.trx_id,
        request.path,
        request.now_ms,
    )
    .await
    {
        confirm::FromCopy::Won { .. } => Done::Paid,
        confirm::FromCopy::AlreadyPaid { .. } | confirm::FromCopy::NotOurs { .. } => Done::Left,
        confirm::FromCopy::Uncertain(why) => {
            tracing::warn!(candidate = %record.candidate, payment = %record.payment_id, %why,
                "PAID from the record uncertain; the orphan sweep retries while the seat is held");
            Done::Error
        }
    }
}

/// The second half of a release: the conditional delete of the HELD record
/// whose ledger hold is gone (released by this sweep for `reason`, or found
/// gone by the confirm step: `None`).
async fn delete_released(
    ports: &ReconcilerPorts,
    record: &BookingRecord,
    reason: Option<ReleaseReason>,
) -> Done {
    let (candidate, payment) = (&record.candidate, &record.payment_id);
    let held = Condition::StatusIsWithPayment(RecordStatus::Held, payment.clone());
    match ports.records.delete(candidate, held).await {
        Ok(_) => {
            match &reason {
                Some(reason) => {
                    tracing::info!(candidate = %candidate, payment = %payment, ?reason, "hold released");
                }
                None => {
                    tracing::warn!(candidate = %candidate, payment = %payment,
                        "HELD record of a seat the ledger no longer holds: deleted");
                }
            }
            Done::Released
        }
        Err(RecordError::ConditionFailed { current }) => {
            tracing::warn!(candidate = %candidate, payment = %payment, ?current,
                "record changed under the release; not deleted");
            Done::Released
        }
        Err(e) => {
            tracing::warn!(error = %e, "record delete failed; next sweep retries");
            Done::Error
        }
    }
}

async fn note_failure(
    ports: &ReconcilerPorts,
    record: &BookingRecord,
    query: &Result<PaymentStatus, GatewayError>,
) {
    tracing::warn!(candidate = %record.candidate, payment = %record.payment_id, ?query,
        failures = record.query_failures + 1, "gateway query gave no usable answer");
    if let Err(e) = ports
        .records
        .note_query_failure(&record.candidate, &record.payment_id)
        .await
    {
        tracing::warn!(error = %e, "could not count the query failure");
    }
}

async fn raise(alerts: &dyn Alerts, kind: &str, detail: String, record: &BookingRecord) {
    tracing::error!(kind, detail = %detail, "alert");
    let alert = Alert {
        kind: kind.into(),
        detail,
        candidate: Some(record.candidate.clone()),
        payment_id: Some(record.payment_id.clone()),
    };
    if let Err(e) = alerts.raise(alert).await {
        tracing::error!(error = %e, "alert could not be raised");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use booking::{CandidateHash, Level, PaymentId};

    const DEADLINE: u64 = 1_000_000;

    fn record(failures: u32, extensions: u32) -> BookingRecord {
        BookingRecord {
            query_failures: failures,
            extensions,
            ..BookingRecord::held(
                CandidateHash::of("c"),
                SaleId::parse("s").unwrap(),
                Level::parse("a").unwrap(),
                PaymentId::parse("P1").unwrap(),
                1,
                DEADLINE,
            )
        }
    }

    fn answer(state: GatewayPaymentState) -> Result<PaymentStatus, GatewayError> {
        Ok(PaymentStatus {
            payment_id: PaymentId::parse("P1").unwrap(),
            state,
            amount: None,
            invoice: None,
        })
    }

    #[test]
    fn decide_covers_every_gateway_state_before_and_after_the_deadline() {
        let s = Settings::default();
        let r = record(0, 0);
        use GatewayPaymentState as G;
        let release = |reason| Action::Release { reason };
        for now in [DEADLINE - 1, DEADLINE, DEADLINE + 1] {
            let past = now >= DEADLINE;
            assert_eq!(
                decide(&r, &answer(G::Completed { trx_id: "T".into() }), now, &s),
                Action::MarkPaid { trx_id: "T".into() }
            );
            assert_eq!(
                decide(&r, &answer(G::Cancelled), now, &s),
                release(ReleaseReason::Cancelled)
            );
            assert_eq!(
                decide(&r, &answer(G::Failed), now, &s),
                release(ReleaseReason::Failed)
            );
            for pending in [G::Initiated, G::Authorized] {
                let expect = if past {
                    release(ReleaseReason::Expired)
                } else {
                    Action::Leave
                };
                assert_eq!(decide(&r, &answer(pending), now, &s), expect, "now {now}");
            }
            // uncertainty is never a release, before or after the deadline
            assert_eq!(
                decide(&r, &answer(G::Unknown("?".into())), now, &s),
                Action::NoteFailure
            );
            assert_eq!(
                decide(&r, &Err(GatewayError::Timeout), now, &s),
                Action::NoteFailure
            );
        }
        let other = Ok(PaymentStatus {
            payment_id: PaymentId::parse("P2").unwrap(),
            state: G::Cancelled,
            amount: None,
            invoice: None,
        });
        assert_eq!(
            decide(&r, &other, DEADLINE + 1, &s),
            Action::NoteFailure,
            "another payment's answer"
        );
    }

    #[test]
    fn the_zoos_trap_releases_on_an_unanswered_query_only_past_the_deadline() {
        let s = Settings {
            bugs: booking::Bugs::of([Bug::ReleaseOnUnansweredQuery]),
            ..Settings::default()
        };
        let r = record(0, 0);
        let err = Err(GatewayError::Timeout);
        assert_eq!(decide(&r, &err, DEADLINE - 1, &s), Action::NoteFailure);
        assert_eq!(
            decide(&r, &err, DEADLINE, &s),
            Action::Release {
                reason: ReleaseReason::Expired
            }
        );
        // without the switch, the same answer is never a release
        assert_eq!(
            decide(&r, &err, DEADLINE, &Settings::default()),
            Action::NoteFailure
        );
    }

    #[test]
    fn failures_extend_three_times_then_alert_once_and_never_release() {
        let s = Settings::default();
        let hold = s.hold.as_millis() as u64;
        let err = Err(GatewayError::Unavailable("down".into()));
        let late = DEADLINE + 10 * hold;
        assert_eq!(decide(&record(0, 0), &err, late, &s), Action::NoteFailure);
        assert_eq!(decide(&record(1, 0), &err, late, &s), Action::NoteFailure);
        for ext in 0..3 {
            assert_eq!(
                decide(&record(2, ext), &err, late, &s),
                Action::Extend {
                    deadline_ms: DEADLINE + hold
                }
            );
        }
        assert_eq!(decide(&record(2, 3), &err, late, &s), Action::Alert);
        for failures in 3..10 {
            assert_eq!(
                decide(&record(failures, 3), &err, late, &s),
                Action::NoteFailure
            );
        }
        // an answer after all that still decides
        assert_eq!(
            decide(
                &record(7, 3),
                &answer(GatewayPaymentState::Cancelled),
                late,
                &s
            ),
            Action::Release {
                reason: ReleaseReason::Cancelled
            }
        );
        for f in 0..10 {
            for e in 0..5 {
                assert!(!matches!(
                    decide(&record(f, e), &err, late, &s),
                    Action::Release { .. }
                ));
            }
        }
    }
}
