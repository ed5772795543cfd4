//! The fast payer: a payment completed before the worker wrote the HELD
//! record, so the conditional HELD→PAID update found nothing. The PAID record
//! is then written from the booking copy kept at admission
//! (`keys::booking_copy`).
//!
//! [`mark_paid_from_copy`] runs, in this order:
//!
//! 1. `Ledger::mark_paid` (payment-guarded; tried twice). **The ledger goes
//!    first here**, unlike in `booking_service::confirm::mark_paid`: there, a
//!    record HELD with this payment proves the hold is live; here there is no
//!    record, and "no record" may also mean the reconciler released the hold.
//!    Only the ledger, which owns the seats, can tell: `NoMatch` means the
//!    seat is not held for this payment any more, so nothing is written (a
//!    released booking is never resurrected) and a human is alerted
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
//! 3. The winner, and only the winner: the email latch, then the email (the
//!    same order and alerts as `confirm::mark_paid`'s winner).
//!
//! Crash windows: after 1, before 2, the ledger has the seat paid and there
//! is no record: the queued admission still becomes a HELD record (the worker
//! never touches the ledger), which any confirm path or the reconciler then
//! marks paid. After 2, before 3: PAID without an email, as in `confirm`.

use booking::ledger::{LedgerError, Step};
use booking::notify::Alert;
use booking::records::{
    BookingRecord, Condition, ConfirmPath, RecordError, RecordStatus, WorkerVerdict,
    classify_conflict,
};
use booking_service::confirm::{
    ConfirmPorts, EmailOutcome, LedgerMark, MarkPaidOutcome, PaidRequest, mark_paid,
};

use booking::AdmittedBooking;

/// Writes attempted before giving up to the reconciler: a put, then at most a
/// replacement or a second put after the conflict it met vanished.
const WRITE_ATTEMPTS_MAX: usize = 3;

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

impl FromCopy {
    /// Whether the booking is PAID with this payment now.
    pub fn is_paid(&self) -> bool {
        matches!(self, FromCopy::Won { .. } | FromCopy::AlreadyPaid { .. })
    }
}

/// Writes the PAID record of `copy`'s booking when no HELD record exists:
/// see the module documentation. Idempotent: a second call finds the PAID
/// record and answers [`FromCopy::AlreadyPaid`].
pub async fn mark_paid_from_copy(
    ports: ConfirmPorts<'_>,
    copy: &AdmittedBooking,
    trx_id: Option<String>,
    path: ConfirmPath,
    now_ms: u64,
) -> FromCopy {
    let payment = &copy.payment_id;
    match ledger_mark_paid(ports, copy).await {
        LedgerMark::Done | LedgerMark::AlreadyPaid => {}
        LedgerMark::NoMatch => {
            raise(
                ports,
                copy,
                "paid_after_release",
                format!(
                    "payment {payment} completed, no record exists and the ledger no longer holds its seat; nothing written"
                ),
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
    for _ in 0..WRITE_ATTEMPTS_MAX {
        let blocked_by = match ports.records.put(paid.clone(), condition.clone()).await {
            Ok(()) => {
                tracing::info!(candidate = %copy.candidate, %payment, ?path,
                    "PAID written from the booking copy (no record yet)");
                let email = booking_service::confirm::send_confirmation(ports, &paid, trx_id).await;
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

/// The ledger step, tried twice (as in `confirm`).
async fn ledger_mark_paid(ports: ConfirmPorts<'_>, copy: &AdmittedBooking) -> LedgerMark {
    let mut last: Result<Step, LedgerError> = Err(LedgerError::Unavailable("not tried".into()));
    for _ in 0..2 {
        last = ports
            .ledger
            .mark_paid(&copy.sale, &copy.candidate, &copy.payment_id)
            .await;
        if last.is_ok() {
            break;
        }
    }
    match last {
        Ok(Step::Done) => LedgerMark::Done,
        Ok(Step::Paid) => LedgerMark::AlreadyPaid,
        Ok(Step::NoMatch) => LedgerMark::NoMatch,
        Err(e) => LedgerMark::Failed(e),
    }
}

async fn raise(ports: ConfirmPorts<'_>, copy: &AdmittedBooking, kind: &str, detail: String) {
    tracing::error!(candidate = %copy.candidate, payment = %copy.payment_id, kind, %detail, "alert");
    let alert = Alert {
        kind: kind.into(),
        detail,
        candidate: Some(copy.candidate.clone()),
        payment_id: Some(copy.payment_id.clone()),
    };
    if let Err(e) = ports.alerts.raise(alert).await {
        tracing::error!(error = %e, "alert could not be raised");
    }
}
