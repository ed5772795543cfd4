//! The one conditional HELD→PAID step that every confirm path (callback,
//! webhook, reconciler) ends in, and the confirmation email behind it.
//!
//! [`mark_paid`] runs, in this order:
//!
//! 0. **The ledger is asked first whose seat it is** (`Ledger::hold` and
//!    `Ledger::paid`, read together): a HELD record with this payment does
//!    *not* prove that the ledger still holds its seat. A HELD record can
//!    outlive its hold: the reconciler releases the ledger before it deletes
//!    the record, the worker's liveness read can be overtaken by a release
//!    before its put, and the reconciler's orphan sweep can re-create the
//!    record of a hold that the TTL safety net is releasing at that moment
//!    (a chaos rehearsal found this one: the net released a completed
//!    payment's seat while the reconciler lagged, the orphan sweep
//!    re-created its record, and the reconciler's query then marked that
//!    record PAID: a PAID booking with no seat in the ledger, "record Paid,
//!    ledger None"). If the ledger answers that the seat is neither held nor
//!    paid for this payment, nothing is written
//!    ([`MarkPaidOutcome::SeatNotHeld`] when the record is HELD with this
//!    payment) and a human is alerted (`paid_after_release`: money moved
//!    for a released seat). A ledger that cannot answer does not stop the
//!    step (the payment completed; see step 2).
//! 1. `RecordStore::mark_paid`: succeeds only if the record is HELD with this
//!    payment; it sets PAID and removes the TTL attribute. **Winning this
//!    conditional update decides who goes on**: every other path gets
//!    "already paid" ([`MarkPaidOutcome::AlreadyPaid`]) and sends nothing.
//!    The record goes first (after the check) because a PAID record carries
//!    no TTL: once it is PAID, the blind safety net can never release the
//!    seat of this completed payment, whatever the ledger step below does.
//! 2. `Ledger::mark_paid` (payment-guarded; retried once): the seat is now
//!    permanent in the ledger too. `NoMatch` here means a release slipped in
//!    between the check and the update (alerted, `paid_after_release`). A
//!    failed step leaves the seat counted as held: any later confirm path
//!    repeats it, and the reconciler's orphan sweep marks it paid once the
//!    hold is past its deadline.
//! 3. `Mailer::send`, never before step 1.
//! 4. `RecordStore::mark_emailed`: the email is no longer owed.
//!
//! The check and the update are two stores, so they cannot be one atomic
//! step; what the check leaves is a release landing in the moment between
//! them (alerted), instead of every HELD record that outlived its hold.
//!
//! An email is never lost: a PAID record whose email is not marked sent is
//! owed, and the email sweep ([`crate::outbox::send_owed_emails`], the
//! reconciler's leader, a grace after the payment, with a back-off after
//! each failed try) sends it, marked `recovered`. A repeat is
//! possible only where the outcome was unknown (sent, then the sender died
//! or its mark failed): the audit allows one repeat per recovered send and
//! no other.
//!
//! Crash windows, honestly:
//! - after 1, before 2: the record is PAID, the ledger still shows the hold
//!   as held (the seat stays counted, so no seat is lost or sold twice). Any
//!   later confirm path for the same payment gets `AlreadyPaid` and repeats
//!   the (idempotent) ledger step, and the reconciler's orphan sweep does
//!   once the hold is past its deadline.
//! - after 1, before 3 (or the mailer fails, alerted as `email_failed`):
//!   the record is PAID with its email owed; the sweep sends it.
//! - after 3, before 4 (or the mark fails): the email went out and is still
//!   owed; the sweep sends it again, marked `recovered`: the one repeat
//!   this design allows.
//!
//! **The fast payer** ([`mark_paid_from_copy`]): a payment completed before
//! the worker wrote the HELD record, so the conditional HELD→PAID update
//! found nothing. The PAID record is then written from the booking copy kept
//! at admission (`keys::booking_copy`), in this order:
//!
//! 1. `Ledger::mark_paid` (payment-guarded; the same [`ledger_mark_paid`],
//!    tried twice). **The ledger goes first here**: there is no record, and
//!    "no record" may also mean the reconciler released the hold. Only the
//!    ledger, which owns the seats, can tell: `NoMatch` means the seat is
//!    not held for this payment any more, so nothing is written (a released
//!    booking is never resurrected) and a human is alerted
//!    (`paid_after_release`). A ledger that cannot answer writes nothing
//!    either: the worker writes the HELD record later and the reconciler's
//!    query marks it paid.
//! 2. `RecordStore::put(PAID, NotExists)`: a PAID record carries no TTL
//!    ([`BookingRecord::into_paid`]). If the condition fails, a consistent
//!    read classifies the conflict exactly as the worker would
//!    ([`classify_conflict`], with the HELD record the copy stands for as the
//!    incoming one): the worker's HELD record with this payment → the normal
//!    HELD→PAID step; an older booking's stale record → replaced, conditioned
//!    on its payment; a newer booking or another payment's PAID record → not
//!    ours, nothing written; PAID with this payment → another path won.
//! 3. The winner, and only the winner: the email, then its mark (the
//!    same order and alerts as [`mark_paid`]'s winner).
//!
//! Crash windows: after 1, before 2, the ledger has the seat paid and there
//! is no record: the queued admission still becomes a HELD record (the worker
//! never touches the ledger), which any confirm path or the reconciler then
//! marks paid. After 2, before 3: PAID without an email, as above.
//!
//! [`confirm_payment`] is the end of the callback and the webhook
//! ([`crate::callback`], [`crate::webhook`]): [`mark_paid`], then, when there
//! is no HELD record with this payment and the booking copy is at hand,
//! [`mark_paid_from_copy`]. What a harness wants to count along the way it
//! hears through [`ConfirmEvents`].

use booking::ledger::{HoldState, Ledger, LedgerError, Step};
use booking::notify::{Alert, Alerts, Confirmation, Mailer};
use booking::records::{
    BookingRecord, Condition, ConfirmPath, RecordError, RecordStatus, RecordStore, WorkerVerdict,
    classify_conflict,
};
use booking::{AdmittedBooking, Bug, CandidateHash, Coordination, PaymentId, SaleId, Settings};

pub use crate::outbox::EmailOutcome;
use crate::outbox::{mark_sent, send_confirmation};

/// The ports the confirm step uses.
#[derive(Debug, Clone, Copy)]
pub struct ConfirmPorts<'a> {
    /// The record store (HELD→PAID, the email mark).
    pub records: &'a dyn RecordStore,
    /// The seat ledger (mark paid).
    pub ledger: &'a dyn Ledger,
    /// Confirmation emails.
    pub mailer: &'a dyn Mailer,
    /// Alerts to a human.
    pub alerts: &'a dyn Alerts,
    /// The owed emails' retry state ([`crate::outbox`]).
    pub coordination: &'a dyn Coordination,
    /// The coordination keys' prefix.
    pub prefix: &'a str,
    /// The email's back-off and budget, and the bug zoo's switches
    /// (`email_before_paid`, `email_latch_before_send` live here).
    pub settings: &'a Settings,
}

/// What to mark paid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaidRequest {
    /// The sale of the booking (the ledger's seats are per sale).
    pub sale: SaleId,
    /// Whose booking.
    pub candidate: CandidateHash,
    /// The payment the gateway confirmed.
    pub payment_id: PaymentId,
    /// The gateway's transaction ID, for the email.
    pub trx_id: Option<String>,
    /// Which confirm path is asking.
    pub path: ConfirmPath,
    /// Now, ms since the epoch.
    pub now_ms: u64,
}

/// The ledger's side of a won HELD→PAID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LedgerMark {
    /// Marked paid now.
    Done,
    /// The ledger already had this candidate paid.
    AlreadyPaid,
    /// No held hold with this payment: the seat was released (alerted when
    /// this path won: a release between the check and the update).
    NoMatch,
    /// The ledger could not answer; the record is PAID regardless (a later
    /// confirm path or the reconciler's orphan sweep marks the ledger).
    Failed(LedgerError),
}

impl LedgerMark {
    fn of(step: Result<Step, LedgerError>) -> LedgerMark {
        match step {
            Ok(Step::Done) => LedgerMark::Done,
            Ok(Step::Paid) => LedgerMark::AlreadyPaid,
            Ok(Step::NoMatch) => LedgerMark::NoMatch,
            Err(e) => LedgerMark::Failed(e),
        }
    }
}

/// Who won the HELD→PAID update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkPaidOutcome {
    /// This path won: the record is PAID.
    Won {
        /// The PAID record.
        record: BookingRecord,
        /// The ledger step.
        ledger: LedgerMark,
        /// The email.
        email: EmailOutcome,
    },
    /// The record was already PAID with this payment (`record.paid_by` says
    /// who won). Nothing was sent; the idempotent ledger step was repeated.
    AlreadyPaid {
        /// The PAID record.
        record: BookingRecord,
        /// The repeated ledger step.
        ledger: LedgerMark,
    },
    /// No HELD record with this payment: no record (the worker has not
    /// written it yet, or the hold was released), or another payment's record.
    /// Nothing changed.
    NotHeld {
        /// The record as the condition saw it.
        current: Option<BookingRecord>,
    },
    /// The record is HELD with this payment but the ledger holds no seat for
    /// it (the record outlived its hold): nothing was written, and a human
    /// was alerted (`paid_after_release`: the money moved for a seat that is
    /// not held).
    SeatNotHeld,
}

impl MarkPaidOutcome {
    /// Whether this call won.
    pub fn won(&self) -> bool {
        matches!(self, MarkPaidOutcome::Won { .. })
    }

    /// The path that marked the booking paid, if it is paid with this payment.
    pub fn winner(&self) -> Option<ConfirmPath> {
        match self {
            MarkPaidOutcome::Won { record, .. } | MarkPaidOutcome::AlreadyPaid { record, .. } => {
                record.paid_by
            }
            MarkPaidOutcome::NotHeld { .. } | MarkPaidOutcome::SeatNotHeld => None,
        }
    }
}

/// The store could not answer the HELD→PAID update: nothing is known to have
/// changed; the caller may retry (the step is idempotent).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfirmError {
    /// The record store failed (throttled, unavailable, invalid).
    #[error("record store: {0}")]
    Records(RecordError),
}

/// The result of the conditional update, classified (pure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The update succeeded: this path won.
    Won(BookingRecord),
    /// PAID already, with this payment.
    AlreadyPaid(BookingRecord),
    /// Not HELD with this payment.
    NotHeld(Option<BookingRecord>),
}

/// Classifies the answer of `RecordStore::mark_paid` for `payment_id`.
pub fn classify_claim(
    payment_id: &PaymentId,
    result: Result<BookingRecord, RecordError>,
) -> Result<Claim, RecordError> {
    match result {
        Ok(record) => Ok(Claim::Won(record)),
        Err(RecordError::ConditionFailed { current }) => {
            let current = current.map(|b| *b);
            match current {
                Some(r) if r.status == RecordStatus::Paid && r.payment_id == *payment_id => {
                    Ok(Claim::AlreadyPaid(r))
                }
                other => Ok(Claim::NotHeld(other)),
            }
        }
        Err(e) => Err(e),
    }
}

/// Ledger calls made for one mark-paid step before giving up: an answer
/// lost once is asked again (the step is payment-guarded, so a repeat that
/// finds it done answers "already paid").
const LEDGER_ATTEMPTS_MAX: usize = 2;

/// The ledger's mark-paid step for `payment`, tried
/// [`LEDGER_ATTEMPTS_MAX`] times while it fails. Every confirm path takes it
/// through here: after a won (or already won) HELD→PAID, and first of all
/// when the PAID record is written from the booking copy.
pub async fn ledger_mark_paid(
    ledger: &dyn Ledger,
    sale: &SaleId,
    candidate: &CandidateHash,
    payment: &PaymentId,
) -> LedgerMark {
    let mut last = LedgerMark::Failed(LedgerError::Unavailable("not tried".into()));
    for _ in 0..LEDGER_ATTEMPTS_MAX {
        last = LedgerMark::of(ledger.mark_paid(sale, candidate, payment).await);
        if !matches!(last, LedgerMark::Failed(_)) {
            break;
        }
    }
    last
}

/// Raises an alert to a human about `payment` of `candidate` (logged as an
/// error too); an alert that cannot be raised is logged, never fatal.
pub async fn alert(
    alerts: &dyn Alerts,
    kind: &str,
    detail: String,
    candidate: &CandidateHash,
    payment: &PaymentId,
) {
    tracing::error!(%candidate, %payment, kind, %detail, "alert");
    let alert = Alert {
        kind: kind.into(),
        detail,
        candidate: Some(candidate.clone()),
        payment_id: Some(payment.clone()),
    };
    if let Err(e) = alerts.raise(alert.clone()).await {
        tracing::error!(kind = %alert.kind, error = %e, detail = %alert.detail, "alert could not be raised");
    }
}

/// The HELD→PAID step: the ledger's check, the conditional update, the
/// ledger's mark. See the module documentation for the order and the crash
/// windows.
/// Idempotent: a second call for the same payment returns
/// [`MarkPaidOutcome::AlreadyPaid`] and sends nothing.
pub async fn mark_paid(
    ports: ConfirmPorts<'_>,
    request: &PaidRequest,
) -> Result<MarkPaidOutcome, ConfirmError> {
    let emailed_early = if ports.settings.bugs.on(Bug::EmailBeforePaid) {
        email_before_update(ports, request).await
    } else {
        false
    };
    if !seat_is_ours(ports.ledger, request).await {
        // the seat is not this payment's: claim nothing; tell why
        let current = ports
            .records
            .get(&request.candidate, true)
            .await
            .map_err(ConfirmError::Records)?;
        return Ok(match current {
            Some(r) if r.payment_id == request.payment_id && r.status == RecordStatus::Held => {
                // the HELD record outlived its hold: never PAID without a seat
                alert(
                    ports.alerts,
                    "paid_after_release",
                    format!(
                        "payment {} completed for a seat the ledger no longer holds; its HELD record is not marked PAID",
                        request.payment_id
                    ),
                    &request.candidate,
                    &request.payment_id,
                )
                .await;
                MarkPaidOutcome::SeatNotHeld
            }
            Some(r) if r.payment_id == request.payment_id && r.status == RecordStatus::Paid => {
                let ledger = ledger_mark_paid(
                    ports.ledger,
                    &request.sale,
                    &request.candidate,
                    &request.payment_id,
                )
                .await;
                MarkPaidOutcome::AlreadyPaid { record: r, ledger }
            }
            other => {
                tracing::info!(candidate = %request.candidate, payment = %request.payment_id,
                    path = ?request.path, "HELD→PAID refused: no HELD record with this payment");
                MarkPaidOutcome::NotHeld { current: other }
            }
        });
    }
    let result = ports
        .records
        .mark_paid(
            &request.candidate,
            &request.payment_id,
            request.path,
            request.now_ms,
        )
        .await;
    let claim = classify_claim(&request.payment_id, result).map_err(ConfirmError::Records)?;
    match claim {
        Claim::NotHeld(current) => {
            tracing::info!(candidate = %request.candidate, payment = %request.payment_id,
                path = ?request.path, "HELD→PAID refused: no HELD record with this payment");
            Ok(MarkPaidOutcome::NotHeld { current })
        }
        Claim::AlreadyPaid(record) => {
            let ledger = record_ledger_mark_paid(ports.ledger, &record).await;
            tracing::debug!(candidate = %record.candidate, payment = %record.payment_id,
                path = ?request.path, winner = ?record.paid_by, ?ledger, "already paid");
            Ok(MarkPaidOutcome::AlreadyPaid { record, ledger })
        }
        Claim::Won(record) => Ok(after_win(ports, request, record, emailed_early).await),
    }
}

/// Whether the ledger holds `request`'s seat for its payment (held with it,
/// or paid with it), read before the HELD→PAID update. A ledger that cannot
/// answer counts as "ours": the update then goes on, as it must for a
/// completed payment (see the module documentation).
async fn seat_is_ours(ledger: &dyn Ledger, request: &PaidRequest) -> bool {
    let (hold, paid) = tokio::join!(
        ledger.hold(&request.sale, &request.candidate),
        ledger.paid(&request.sale, &request.candidate)
    );
    match (hold, paid) {
        (Ok(hold), Ok(paid)) => {
            paid.as_ref() == Some(&request.payment_id)
                || hold.is_some_and(|h| {
                    matches!(h.state, HoldState::Held { payment_id, .. } if payment_id == request.payment_id)
                })
        }
        (Err(e), _) | (_, Err(e)) => {
            tracing::warn!(candidate = %request.candidate, payment = %request.payment_id, error = %e,
                "ledger unreadable before HELD→PAID; the update goes on");
            true
        }
    }
}

/// The ledger step for `record`'s booking.
async fn record_ledger_mark_paid(ledger: &dyn Ledger, record: &BookingRecord) -> LedgerMark {
    ledger_mark_paid(ledger, &record.sale, &record.candidate, &record.payment_id).await
}

/// The zoo's trap `email_before_paid`: the confirmation goes out for the
/// HELD record of this payment before the conditional update has decided
/// who won, so every path that gets here sends one. Whether one was sent.
async fn email_before_update(ports: ConfirmPorts<'_>, request: &PaidRequest) -> bool {
    let Ok(Some(record)) = ports.records.get(&request.candidate, true).await else {
        return false;
    };
    if record.payment_id != request.payment_id {
        return false;
    }
    let confirmation = Confirmation::of(&record, request.trx_id.clone(), false);
    ports.mailer.send(&confirmation).await.is_ok()
}

/// What the winner does: ledger, email, its mark.
async fn after_win(
    ports: ConfirmPorts<'_>,
    request: &PaidRequest,
    record: BookingRecord,
    emailed_early: bool,
) -> MarkPaidOutcome {
    tracing::info!(candidate = %record.candidate, payment = %record.payment_id,
        path = ?request.path, "HELD→PAID won");
    let ledger = record_ledger_mark_paid(ports.ledger, &record).await;
    match &ledger {
        LedgerMark::NoMatch => {
            alert(
                ports.alerts,
                "paid_after_release",
                format!(
                    "payment {} completed for a seat the ledger released after the check",
                    record.payment_id
                ),
                &record.candidate,
                &record.payment_id,
            )
            .await;
        }
        LedgerMark::Failed(e) => {
            tracing::error!(candidate = %record.candidate, payment = %record.payment_id, error = %e,
                "record PAID but the ledger step failed; a later confirm path or the orphan sweep repairs it");
        }
        LedgerMark::Done | LedgerMark::AlreadyPaid => {}
    }
    let email = if emailed_early {
        // sent before the update (the zoo's trap): only its mark is left
        mark_sent(ports, &record).await
    } else {
        send_confirmation(ports, &record, request.trx_id.clone(), request.now_ms).await
    };
    MarkPaidOutcome::Won {
        record,
        ledger,
        email,
    }
}

/// Writes attempted from the copy before giving up to the reconciler: a put,
/// then at most a replacement or a second put after the conflict it met
/// vanished.
const COPY_WRITE_ATTEMPTS_MAX: usize = 3;

/// What [`mark_paid_from_copy`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FromCopy {
    /// The PAID record was written from the copy by this call (or the worker's
    /// HELD record appeared meanwhile and this call won HELD→PAID on it).
    Won {
        /// The PAID record.
        record: BookingRecord,
        /// The email.
        email: EmailOutcome,
    },
    /// Another path had marked this payment paid already; nothing sent.
    AlreadyPaid {
        /// The PAID record.
        record: BookingRecord,
    },
    /// The seat is not this payment's (released, or a newer booking): nothing
    /// written. Alerted when the ledger no longer holds it.
    NotOurs {
        /// The record in the way, if any.
        current: Option<BookingRecord>,
    },
    /// A backend could not answer, or the conflict cannot be told: nothing
    /// more written; the reconciler decides.
    Uncertain(String),
}

/// Writes the PAID record of `copy`'s booking when no HELD record exists:
/// see the module documentation (the fast payer). Idempotent: a second call
/// finds the PAID record and answers [`FromCopy::AlreadyPaid`].
pub async fn mark_paid_from_copy(
    ports: ConfirmPorts<'_>,
    copy: &AdmittedBooking,
    trx_id: Option<String>,
    path: ConfirmPath,
    now_ms: u64,
) -> FromCopy {
    let payment = &copy.payment_id;
    match ledger_mark_paid(ports.ledger, &copy.sale, &copy.candidate, payment).await {
        LedgerMark::Done | LedgerMark::AlreadyPaid => {}
        LedgerMark::NoMatch => {
            alert(
                ports.alerts,
                "paid_after_release",
                format!(
                    "payment {payment} completed, no record exists and the ledger no longer holds its seat; nothing written"
                ),
                &copy.candidate,
                payment,
            )
            .await;
            return FromCopy::NotOurs { current: None };
        }
        LedgerMark::Failed(e) => {
            tracing::warn!(candidate = %copy.candidate, %payment, error = %e,
                "ledger unavailable; PAID not written from the copy, left to the reconciler");
            return FromCopy::Uncertain(format!("ledger: {e}"));
        }
    }
    let held = copy.held_record();
    let paid = held.clone().into_paid(path, now_ms);
    let mut condition = Condition::NotExists;
    for _ in 0..COPY_WRITE_ATTEMPTS_MAX {
        let blocked_by = match ports.records.put(paid.clone(), condition.clone()).await {
            Ok(()) => {
                tracing::info!(candidate = %copy.candidate, %payment, ?path,
                    "PAID written from the booking copy (no record yet)");
                let email = send_confirmation(ports, &paid, trx_id, now_ms).await;
                return FromCopy::Won {
                    record: paid,
                    email,
                };
            }
            Err(RecordError::ConditionFailed { current }) => current.map(|b| *b),
            Err(e) => return FromCopy::Uncertain(format!("record store: {e}")),
        };
        let read = ports.records.get(&copy.candidate, true).await;
        match classify_conflict(&held, blocked_by.as_ref(), &read) {
            WorkerVerdict::Skip => {
                let current = read.ok().flatten();
                return match current {
                    Some(r) if r.status == RecordStatus::Paid && r.payment_id == *payment => {
                        FromCopy::AlreadyPaid { record: r }
                    }
                    other => FromCopy::NotOurs { current: other },
                };
            }
            WorkerVerdict::Duplicate => {
                // the worker wrote the HELD record meanwhile: the normal step
                let request = PaidRequest {
                    sale: copy.sale.clone(),
                    candidate: copy.candidate.clone(),
                    payment_id: payment.clone(),
                    trx_id,
                    path,
                    now_ms,
                };
                return match mark_paid(ports, &request).await {
                    Ok(MarkPaidOutcome::Won { record, email, .. }) => {
                        FromCopy::Won { record, email }
                    }
                    Ok(MarkPaidOutcome::AlreadyPaid { record, .. }) => {
                        FromCopy::AlreadyPaid { record }
                    }
                    Ok(MarkPaidOutcome::NotHeld { current }) => {
                        FromCopy::Uncertain(format!("record changed again: {current:?}"))
                    }
                    Ok(MarkPaidOutcome::SeatNotHeld) => FromCopy::NotOurs {
                        current: read.ok().flatten(),
                    },
                    Err(e) => FromCopy::Uncertain(e.to_string()),
                };
            }
            WorkerVerdict::ReplaceStale { condition: stale } => condition = stale,
            WorkerVerdict::Stale => {
                return FromCopy::NotOurs {
                    current: read.ok().flatten(),
                };
            }
            // The record in the way was deleted meanwhile. The ledger (step 1)
            // has this payment's seat paid, so the record must say PAID: write
            // it (a worker would not, for fear of resurrecting a release; the
            // ledger rules that out here).
            WorkerVerdict::PutAgain | WorkerVerdict::Released => {
                condition = Condition::NotExists;
            }
            WorkerVerdict::Ambiguous | WorkerVerdict::LeaveUnacked => {
                return FromCopy::Uncertain(format!(
                    "conflict cannot be told: {:?}",
                    read.map_err(|e| e.to_string())
                ));
            }
        }
    }
    FromCopy::Uncertain("the record kept changing under the write".into())
}

/// What a harness hears from the confirm step of the callback and the
/// webhook. Every method does nothing by default.
pub trait ConfirmEvents: Send + Sync {
    /// This call marked a booking PAID on `path`: `source` is `record` (the
    /// HELD→PAID update) or `copy` (the fast payer's record written from the
    /// booking copy).
    fn paid(&self, _path: ConfirmPath, _source: &'static str) {}
    /// The HELD→PAID update of `payment` found no HELD record with it;
    /// `current` is the record the condition saw.
    fn not_held(&self, _payment: &PaymentId, _current: Option<&BookingRecord>) {}
}

impl ConfirmEvents for crate::admission::Quiet {}

/// Where a confirm path left the booking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirmed {
    /// PAID with this payment (`won`: by this call).
    Paid {
        /// Whether this call made it PAID (and so sent the email).
        won: bool,
    },
    /// The seat is not this payment's any more (released or superseded).
    NotOurs,
    /// Not known; the reconciler decides.
    Uncertain,
}

/// The end of the callback and the webhook: the conditional HELD→PAID of
/// `request`; if there is no HELD record with this payment and the booking
/// `copy` is at hand, the PAID-from-copy write (the fast payer). Idempotent.
pub async fn confirm_payment(
    ports: ConfirmPorts<'_>,
    events: &dyn ConfirmEvents,
    request: &PaidRequest,
    copy: Option<&AdmittedBooking>,
) -> Confirmed {
    let (candidate, payment) = (&request.candidate, &request.payment_id);
    match mark_paid(ports, request).await {
        Ok(MarkPaidOutcome::Won { .. }) => {
            events.paid(request.path, "record");
            Confirmed::Paid { won: true }
        }
        Ok(MarkPaidOutcome::AlreadyPaid { .. }) => Confirmed::Paid { won: false },
        Ok(MarkPaidOutcome::SeatNotHeld) => {
            // alerted; the copy would ask the same ledger the same question
            tracing::warn!(%candidate, %payment, "completed payment whose seat is not held");
            Confirmed::NotOurs
        }
        Ok(MarkPaidOutcome::NotHeld { current }) => {
            events.not_held(payment, current.as_ref());
            let Some(copy) = copy else {
                tracing::warn!(%candidate, %payment, ?current,
                    "no HELD record and no booking copy; left to the reconciler");
                return Confirmed::Uncertain;
            };
            let from_copy = mark_paid_from_copy(
                ports,
                copy,
                request.trx_id.clone(),
                request.path,
                request.now_ms,
            )
            .await;
            match from_copy {
                FromCopy::Won { .. } => {
                    events.paid(request.path, "copy");
                    Confirmed::Paid { won: true }
                }
                FromCopy::AlreadyPaid { .. } => Confirmed::Paid { won: false },
                FromCopy::NotOurs { current } => {
                    tracing::warn!(%candidate, %payment, ?current,
                        "completed payment whose seat is not its own");
                    Confirmed::NotOurs
                }
                FromCopy::Uncertain(why) => {
                    tracing::warn!(%candidate, %payment, %why, "PAID from copy uncertain");
                    Confirmed::Uncertain
                }
            }
        }
        Err(e) => {
            tracing::warn!(%candidate, %payment, error = %e,
                "HELD→PAID could not be tried; left to the reconciler");
            Confirmed::Uncertain
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use booking::{Level, SaleId};

    fn held(payment: &str) -> BookingRecord {
        BookingRecord::held(
            CandidateHash::of("c"),
            SaleId::parse("s").unwrap(),
            Level::parse("a").unwrap(),
            PaymentId::parse(payment).unwrap(),
            1,
            2,
        )
    }

    #[test]
    fn claims_are_classified_by_status_and_payment() {
        let p1 = PaymentId::parse("P1").unwrap();
        let paid = held("P1").into_paid(ConfirmPath::Webhook, 3);
        assert_eq!(
            classify_claim(&p1, Ok(paid.clone())).unwrap(),
            Claim::Won(paid.clone())
        );
        assert_eq!(
            classify_claim(&p1, Err(RecordError::condition_failed(Some(paid.clone())))).unwrap(),
            Claim::AlreadyPaid(paid)
        );
        let other = held("P2").into_paid(ConfirmPath::Webhook, 3);
        assert!(matches!(
            classify_claim(&p1, Err(RecordError::condition_failed(Some(other)))).unwrap(),
            Claim::NotHeld(Some(_))
        ));
        assert_eq!(
            classify_claim(&p1, Err(RecordError::condition_failed(None))).unwrap(),
            Claim::NotHeld(None)
        );
        assert_eq!(
            classify_claim(&p1, Err(RecordError::Throttled)),
            Err(RecordError::Throttled)
        );
    }
}
