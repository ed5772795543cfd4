//! The one conditional HELD→PAID step that every confirm path (callback,
//! webhook, reconciler) ends in, and the confirmation email behind it.
//!
//! [`mark_paid`] runs, in this order:
//!
//! 1. `RecordStore::mark_paid`: succeeds only if the record is HELD with this
//!    payment; it sets PAID and removes the TTL attribute. **Winning this
//!    conditional update decides who goes on**: every other path gets
//!    "already paid" ([`MarkPaidOutcome::AlreadyPaid`]) and sends nothing.
//! 2. `Ledger::mark_paid` (payment-guarded; retried once): the seat is now
//!    permanent in the ledger too. `NoMatch` here means the ledger hold is
//!    gone (the reconciler released the seat between its own ledger release
//!    and its record delete, while this payment completed): money moved for
//!    a released seat, so a human is alerted (`paid_after_release`).
//! 3. `RecordStore::mark_emailed`: the at-most-once latch in front of the
//!    email. If it answers "already" (condition failed), nothing is sent.
//! 4. `Mailer::send`, never before steps 1 and 3.
//!
//! Crash windows, honestly:
//! - after 1, before 2: the record is PAID, the ledger still shows the hold
//!   as held (the seat stays counted, so no seat is lost or sold twice). Any
//!   later confirm path for the same payment gets `AlreadyPaid` and repeats
//!   the (idempotent) ledger step, which repairs it; the audit shows the
//!   difference until then.
//! - after 1, before 3: the record is PAID with `email_sent = false` and no
//!   email went out. Nothing here re-sends it (only the winner sends); the
//!   audit ("every PAID has exactly one email") shows it, and a re-send tool
//!   may use the latch safely.
//! - after 3, before 4 (or the mailer fails): `email_sent = true` but the
//!   email was lost. The latch prefers losing an email to sending two; a
//!   mailer failure raises an `email_failed` alert.

use booking::ledger::{Ledger, LedgerError, Step};
use booking::notify::{Alert, Alerts, Confirmation, Mailer, NotifyError};
use booking::records::{BookingRecord, ConfirmPath, RecordError, RecordStatus, RecordStore};
use booking::{Bug, Bugs, CandidateHash, PaymentId};

/// The ports the confirm step uses.
#[derive(Debug, Clone, Copy)]
pub struct ConfirmPorts<'a> {
    /// The record store (HELD→PAID, the email latch).
    pub records: &'a dyn RecordStore,
    /// The seat ledger (mark paid).
    pub ledger: &'a dyn Ledger,
    /// Confirmation emails.
    pub mailer: &'a dyn Mailer,
    /// Alerts to a human.
    pub alerts: &'a dyn Alerts,
    /// The bug zoo's switches (`email_before_paid` lives here).
    pub bugs: &'a Bugs,
}

/// What to mark paid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaidRequest {
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
    /// this path won).
    NoMatch,
    /// The ledger could not answer; the record is PAID regardless.
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

/// What happened to the confirmation email.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EmailOutcome {
    /// Latched and sent.
    Sent,
    /// The latch says it was sent already: nothing sent.
    AlreadySent,
    /// The latch could not be set: nothing sent.
    LatchFailed(RecordError),
    /// Latched, but the mailer failed: lost (alerted).
    SendFailed(NotifyError),
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
            MarkPaidOutcome::NotHeld { .. } => None,
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

/// The ledger step, tried twice.
async fn ledger_mark_paid(ledger: &dyn Ledger, record: &BookingRecord) -> LedgerMark {
    let mut last = LedgerMark::Failed(LedgerError::Unavailable("not tried".into()));
    for _ in 0..2 {
        last = LedgerMark::of(
            ledger
                .mark_paid(&record.sale, &record.candidate, &record.payment_id)
                .await,
        );
        if !matches!(last, LedgerMark::Failed(_)) {
            break;
        }
    }
    last
}

async fn raise(alerts: &dyn Alerts, alert: Alert) {
    if let Err(e) = alerts.raise(alert.clone()).await {
        tracing::error!(kind = %alert.kind, error = %e, detail = %alert.detail, "alert could not be raised");
    }
}

/// The HELD→PAID step. See the module documentation for the order and the
/// crash windows. Idempotent: a second call for the same payment returns
/// [`MarkPaidOutcome::AlreadyPaid`] and sends nothing.
pub async fn mark_paid(
    ports: ConfirmPorts<'_>,
    request: &PaidRequest,
) -> Result<MarkPaidOutcome, ConfirmError> {
    let emailed_early = if ports.bugs.on(Bug::EmailBeforePaid) {
        email_before_update(ports, request).await
    } else {
        false
    };
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
            let ledger = ledger_mark_paid(ports.ledger, &record).await;
            tracing::debug!(candidate = %record.candidate, payment = %record.payment_id,
                path = ?request.path, winner = ?record.paid_by, ?ledger, "already paid");
            Ok(MarkPaidOutcome::AlreadyPaid { record, ledger })
        }
        Claim::Won(record) => Ok(after_win(ports, request, record, emailed_early).await),
    }
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
    let confirmation = Confirmation {
        sale: record.sale.clone(),
        candidate: record.candidate.clone(),
        level: record.level.clone(),
        payment_id: record.payment_id.clone(),
        trx_id: request.trx_id.clone(),
    };
    ports.mailer.send(&confirmation).await.is_ok()
}

/// What the winner does: ledger, latch, email.
async fn after_win(
    ports: ConfirmPorts<'_>,
    request: &PaidRequest,
    record: BookingRecord,
    emailed_early: bool,
) -> MarkPaidOutcome {
    tracing::info!(candidate = %record.candidate, payment = %record.payment_id,
        path = ?request.path, "HELD→PAID won");
    let ledger = ledger_mark_paid(ports.ledger, &record).await;
    match &ledger {
        LedgerMark::NoMatch => {
            raise(
                ports.alerts,
                Alert {
                    kind: "paid_after_release".into(),
                    detail: format!(
                        "payment {} completed for a seat the ledger no longer holds",
                        record.payment_id
                    ),
                    candidate: Some(record.candidate.clone()),
                    payment_id: Some(record.payment_id.clone()),
                },
            )
            .await;
        }
        LedgerMark::Failed(e) => {
            tracing::error!(candidate = %record.candidate, payment = %record.payment_id, error = %e,
                "record PAID but the ledger step failed; the next confirm path repairs it");
        }
        LedgerMark::Done | LedgerMark::AlreadyPaid => {}
    }
    let email = if emailed_early {
        EmailOutcome::Sent
    } else {
        send_confirmation(ports, &record, request.trx_id.clone()).await
    };
    MarkPaidOutcome::Won {
        record,
        ledger,
        email,
    }
}

/// The winner's email: the record's email latch first (`mark_emailed`), then
/// the send, so a confirmation goes at most once whoever calls this twice.
/// Only the winner of a HELD→PAID step may call it.
pub async fn send_confirmation(
    ports: ConfirmPorts<'_>,
    record: &BookingRecord,
    trx_id: Option<String>,
) -> EmailOutcome {
    match ports
        .records
        .mark_emailed(&record.candidate, &record.payment_id)
        .await
    {
        Err(RecordError::ConditionFailed { .. }) => EmailOutcome::AlreadySent,
        Err(e) => {
            tracing::error!(candidate = %record.candidate, error = %e, "email latch failed; not sending");
            EmailOutcome::LatchFailed(e)
        }
        Ok(_) => {
            let confirmation = Confirmation {
                sale: record.sale.clone(),
                candidate: record.candidate.clone(),
                level: record.level.clone(),
                payment_id: record.payment_id.clone(),
                trx_id,
            };
            match ports.mailer.send(&confirmation).await {
                Ok(()) => EmailOutcome::Sent,
                Err(e) => {
                    raise(
                        ports.alerts,
                        Alert {
                            kind: "email_failed".into(),
                            detail: format!("confirmation email failed: {e}"),
                            candidate: Some(record.candidate.clone()),
                            payment_id: Some(record.payment_id.clone()),
                        },
                    )
                    .await;
                    EmailOutcome::SendFailed(e)
                }
            }
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
