//! Confirm path 1, below HTTP: the payer's redirect back from the checkout
//! (`GET /payment/callback?paymentID=…&status=…&signature=…`), decided over
//! the ports of a [`Stack`]. The API maps the [`CallbackOutcome`] to a status
//! code and a page; the simulator sends its payers' redirects here.
//!
//! Anyone can type the callback URL, so:
//! - only a payment ID we issued (its booking copy exists) with that payment's
//!   signature (compared in constant time, [`secrets_equal`]) is acted on;
//!   anything else is [`CallbackOutcome::Forbidden`] or
//!   [`CallbackOutcome::Unknown`] and changes nothing;
//! - `status` decides nothing: a forged `cancel` neither releases nor blocks
//!   anything (only the reconciler releases);
//! - a booking already PAID with this payment answers "paid" with no gateway
//!   call; after the hold deadline nothing is executed
//!   ([`CallbackOutcome::Expired`]): the reconciler may release the seat, and
//!   we must never take money for it;
//! - execute runs under the per-payment lock (`keys::execute_lock`, an owner
//!   token from the stack's entropy, released only by its owner): a redirect
//!   delivered twice executes once; the second answers
//!   [`CallbackOutcome::Processing`];
//! - the gateway port queries once after an execute timeout, only to recover
//!   a completed payment; an execute refused as already completed
//!   (2117/2062) is queried too; anything uncertain is left to the
//!   reconciler ([`CallbackOutcome::Pending`]);
//! - a completed payment ends in [`confirm_payment`]: HELD→PAID, or the PAID
//!   record from the booking copy for a payer faster than the worker.
//!
//! Three of the zoo's bugs live here, behind their switches:
//! `trust_redirect_cancel`, `trust_redirect_success` and
//! `execute_after_deadline`.

use std::time::Duration;

use booking::coordination::keys;
use booking::gateway::{GatewayError, GatewayPaymentState, codes};
use booking::records::{BookingRecord, Condition, ConfirmPath, RecordStatus};
use booking::{AdmittedBooking, Bug, PaymentId};
use serde::Deserialize;
use tokio::time::Instant;

use crate::admission::load_copy;
use crate::confirm::{ConfirmEvents, Confirmed, PaidRequest, confirm_payment};
use crate::stack::Stack;

/// bKash 2062: the payment has already been completed (beside
/// [`codes::EXECUTION_ALREADY_COMPLETED`], 2117).
pub const PAYMENT_ALREADY_COMPLETED: &str = "2062";

/// Of the request deadline, the part execute may use; the rest is kept for
/// the HELD→PAID step behind it.
const EXECUTE_SHARE_NUM: u32 = 3;
const EXECUTE_SHARE_DEN: u32 = 4;

/// The execute lock lives this many request deadlines: longer than any holder
/// works (its task ends within about one), short enough that a crashed holder
/// blocks a payment only briefly.
const EXECUTE_LOCK_DEADLINES: u32 = 2;

/// The callback's query, as the gateway's redirect carries it. `status` is
/// read only to be logged (and by the zoo's trust bugs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct CallbackQuery {
    /// The gateway's payment ID.
    #[serde(rename = "paymentID", default)]
    pub payment_id: Option<String>,
    /// What the redirect claims happened: never decides anything.
    #[serde(default)]
    pub status: Option<String>,
    /// The per-payment signature.
    #[serde(default)]
    pub signature: Option<String>,
}

/// What the callback decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallbackOutcome {
    /// PAID with this payment.
    Paid,
    /// Another request for this payment is executing it.
    Processing,
    /// Not known to be paid yet; the reconciler decides.
    Pending,
    /// The gateway did not complete the payment (not approved, cancelled,
    /// failed), or the booking was superseded. Nothing changed.
    NotPaid,
    /// Money moved but the seat is no longer this booking's; a human was
    /// alerted.
    NeedsAttention,
    /// The hold deadline passed; nothing executed.
    Expired,
    /// The signature does not match, or cannot be checked.
    Forbidden,
    /// A payment ID we did not issue.
    Unknown,
    /// A backend could not answer, or nothing was sent to the gateway: try
    /// again.
    Unavailable,
}

impl CallbackOutcome {
    /// The machine-readable name (the page's `data-result`).
    pub fn name(self) -> &'static str {
        match self {
            CallbackOutcome::Paid => "paid",
            CallbackOutcome::Processing => "processing",
            CallbackOutcome::Pending => "pending",
            CallbackOutcome::NotPaid => "not_paid",
            CallbackOutcome::NeedsAttention => "needs_attention",
            CallbackOutcome::Expired => "expired",
            CallbackOutcome::Forbidden => "forbidden",
            CallbackOutcome::Unknown => "unknown_payment",
            CallbackOutcome::Unavailable => "unavailable",
        }
    }
}

/// Confirm path 1: what the redirect `query` comes to. See the module
/// documentation. The request's time starts now (tokio's clock).
pub async fn handle(
    stack: &Stack,
    events: &dyn ConfirmEvents,
    query: &CallbackQuery,
) -> CallbackOutcome {
    let started = Instant::now();
    let Some(payment) = query
        .payment_id
        .as_deref()
        .and_then(|p| PaymentId::parse(p).ok())
    else {
        return CallbackOutcome::Unknown;
    };
    tracing::debug!(%payment, claimed = ?query.status, "callback (status ignored)");
    let copy = match load_copy(stack, &payment).await {
        Ok(copy) => copy,
        Err(e) => {
            tracing::warn!(%payment, error = %e, "booking copy unreadable now");
            return CallbackOutcome::Unavailable;
        }
    };
    let Some(copy) = copy else {
        return without_copy(stack, &payment).await;
    };
    let signature = query.signature.as_deref().unwrap_or_default();
    let expected = copy.signature.as_deref().unwrap_or_default();
    if signature.is_empty() || !secrets_equal(signature, expected) {
        tracing::warn!(%payment, "callback with a wrong signature refused");
        return CallbackOutcome::Forbidden;
    }
    let bugs = &stack.settings.bugs;
    if bugs.on(Bug::TrustRedirectCancel) && query.status.as_deref() == Some("cancel") {
        return trust_cancel(stack, &copy).await;
    }
    let record = match stack.records.get(&copy.candidate, true).await {
        Ok(record) => record,
        Err(e) => {
            // the copy is enough to go on: every write behind is conditional
            tracing::warn!(%payment, error = %e, "record unreadable; going on from the copy");
            None
        }
    };
    let deadline_ms = match gate(&copy, record.as_ref()) {
        Gate::Paid => return CallbackOutcome::Paid,
        Gate::Superseded => return CallbackOutcome::NotPaid,
        Gate::Open { deadline_ms } => deadline_ms,
    };
    let now_ms = stack.clock.now_ms();
    if now_ms >= deadline_ms && !bugs.on(Bug::ExecuteAfterDeadline) {
        tracing::info!(%payment, deadline_ms, now_ms, "callback after the hold deadline: not executed");
        return CallbackOutcome::Expired;
    }
    let hold_left = if now_ms >= deadline_ms {
        // the zoo's trap `execute_after_deadline`: as if the hold went on
        stack.settings.request_deadline
    } else {
        Duration::from_millis(deadline_ms - now_ms)
    };
    if bugs.on(Bug::TrustRedirectSuccess) && query.status.as_deref() == Some("success") {
        // the zoo's trap: PAID on the browser's word, nothing executed
        return confirmed(stack, events, &copy, "UNVERIFIED").await;
    }
    let lock = keys::execute_lock(&stack.prefix, &stack.sale, &payment);
    let owner = booking::entropy::owner_token(stack.entropy.as_ref());
    let lock_ttl = stack.settings.request_deadline * EXECUTE_LOCK_DEADLINES;
    match stack.coordination.try_lock(&lock, &owner, lock_ttl).await {
        Ok(true) => {}
        Ok(false) => {
            tracing::info!(%payment, "execute lock held by another request");
            return CallbackOutcome::Processing;
        }
        Err(e) => {
            tracing::warn!(%payment, error = %e, "execute lock unavailable; not executing");
            return CallbackOutcome::Unavailable;
        }
    }
    let outcome = execute_under_lock(stack, events, &copy, started, hold_left).await;
    match stack.coordination.unlock(&lock, &owner).await {
        Ok(true) => {}
        Ok(false) => tracing::warn!(%payment, "execute lock expired before its owner released it"),
        Err(e) => tracing::warn!(%payment, error = %e, "execute lock not released; it expires"),
    }
    outcome
}

/// The zoo's bug `trust_redirect_cancel`: the redirect says cancel, so the
/// seat is given back (payment-guarded, as every release) and the HELD record
/// deleted, without asking the gateway.
async fn trust_cancel(stack: &Stack, copy: &AdmittedBooking) -> CallbackOutcome {
    let released = stack
        .ledger
        .release(&stack.sale, &copy.candidate, &copy.payment_id)
        .await;
    let deleted = stack
        .records
        .delete(
            &copy.candidate,
            Condition::StatusIsWithPayment(RecordStatus::Held, copy.payment_id.clone()),
        )
        .await;
    tracing::warn!(payment = %copy.payment_id, ?released, deleted = deleted.is_ok(),
        "redirect status=cancel trusted (bug switched on)");
    CallbackOutcome::NotPaid
}

/// What the record says before anything is executed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// PAID with this payment: nothing to do.
    Paid,
    /// The candidate's record belongs to a newer booking, or the candidate
    /// paid with another payment: this payment must not be executed.
    Superseded,
    /// Go on; the hold ends at `deadline_ms` (the record's, which the
    /// reconciler may have extended, else the copy's).
    Open {
        /// The hold deadline, ms.
        deadline_ms: u64,
    },
}

/// Decides from the copy and the candidate's record (pure).
pub fn gate(copy: &AdmittedBooking, record: Option<&BookingRecord>) -> Gate {
    match record {
        Some(r) if r.payment_id == copy.payment_id => match r.status {
            RecordStatus::Paid => Gate::Paid,
            RecordStatus::Held => Gate::Open {
                deadline_ms: r.deadline_ms,
            },
        },
        Some(r) if r.status == RecordStatus::Paid || r.created_ms > copy.request_ms => {
            Gate::Superseded
        }
        // no record yet (fast payer), or an older booking's stale record
        _ => Gate::Open {
            deadline_ms: copy.deadline_ms,
        },
    }
}

/// Without a booking copy the signature cannot be checked: nothing is
/// executed. A PAID record still answers "paid" (it changes nothing).
async fn without_copy(stack: &Stack, payment: &PaymentId) -> CallbackOutcome {
    match stack.records.by_payment(payment).await {
        Ok(Some(r)) if r.status == RecordStatus::Paid => CallbackOutcome::Paid,
        Ok(Some(r)) if stack.clock.now_ms() >= r.deadline_ms => CallbackOutcome::Expired,
        Ok(Some(_)) => {
            tracing::warn!(%payment, "HELD record without a booking copy: signature cannot be checked");
            CallbackOutcome::Forbidden
        }
        Ok(None) => CallbackOutcome::Unknown,
        Err(e) => {
            tracing::warn!(%payment, error = %e, "payment index unreadable");
            CallbackOutcome::Unavailable
        }
    }
}

/// Execute (the port queries once after a timeout), then confirm. Runs only
/// under the execute lock.
async fn execute_under_lock(
    stack: &Stack,
    events: &dyn ConfirmEvents,
    copy: &AdmittedBooking,
    started: Instant,
    hold_left: Duration,
) -> CallbackOutcome {
    let payment = &copy.payment_id;
    let deadline = stack.settings.request_deadline;
    let execute_share = deadline * EXECUTE_SHARE_NUM / EXECUTE_SHARE_DEN;
    // never let an execute outlive the hold: past the deadline the reconciler
    // may release the seat
    let within = execute_share
        .saturating_sub(started.elapsed())
        .min(hold_left);
    let trx_id = match stack.gateway.execute(payment, within).await {
        Ok(executed) => executed.trx_id,
        Err(GatewayError::Refused { code, message })
            if code == codes::EXECUTION_ALREADY_COMPLETED || code == PAYMENT_ALREADY_COMPLETED =>
        {
            tracing::info!(%payment, %code, %message, "execute: already completed; querying");
            let left = deadline.saturating_sub(started.elapsed());
            match stack.gateway.query(payment, left).await {
                Ok(status) => match status.state {
                    GatewayPaymentState::Completed { trx_id } => trx_id,
                    other => {
                        tracing::warn!(%payment, state = ?other, "already completed, yet not completed");
                        return CallbackOutcome::Pending;
                    }
                },
                Err(e) => {
                    tracing::warn!(%payment, error = %e, "query after 'already completed' failed");
                    return CallbackOutcome::Pending;
                }
            }
        }
        Err(GatewayError::Refused { code, message }) => {
            tracing::info!(%payment, %code, %message, "execute refused: payment not completed");
            return CallbackOutcome::NotPaid;
        }
        Err(GatewayError::TokenUnavailable) => {
            tracing::warn!(%payment, "no gateway token: nothing executed");
            return CallbackOutcome::Unavailable;
        }
        Err(e @ (GatewayError::Timeout | GatewayError::Unavailable(_))) => {
            tracing::warn!(%payment, error = %e, "execute uncertain; left to the reconciler");
            return CallbackOutcome::Pending;
        }
    };
    confirmed(stack, events, copy, &trx_id).await
}

/// The confirm step for the callback's booking, as the callback answers it.
async fn confirmed(
    stack: &Stack,
    events: &dyn ConfirmEvents,
    copy: &AdmittedBooking,
    trx_id: &str,
) -> CallbackOutcome {
    let request = PaidRequest {
        sale: copy.sale.clone(),
        candidate: copy.candidate.clone(),
        payment_id: copy.payment_id.clone(),
        trx_id: Some(trx_id.to_owned()),
        path: ConfirmPath::Callback,
        now_ms: stack.clock.now_ms(),
    };
    match confirm_payment(stack.confirm_ports(), events, &request, Some(copy)).await {
        Confirmed::Paid { .. } => CallbackOutcome::Paid,
        Confirmed::NotOurs => CallbackOutcome::NeedsAttention,
        Confirmed::Uncertain => CallbackOutcome::Pending,
    }
}

/// Constant-time equality of two secrets (the length is not secret).
pub fn secrets_equal(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use booking::{CandidateHash, Level, RequestToken, SaleId};

    use super::*;

    fn copy() -> AdmittedBooking {
        AdmittedBooking {
            candidate: CandidateHash::of("c"),
            sale: SaleId::parse("s").unwrap(),
            level: Level::parse("a").unwrap(),
            payment_id: PaymentId::parse("P2").unwrap(),
            signature: Some("sig".into()),
            token: Some(RequestToken::parse("t").unwrap()),
            request_ms: 2_000,
            deadline_ms: 602_000,
        }
    }

    fn record(payment: &str, created_ms: u64) -> BookingRecord {
        let c = copy();
        BookingRecord::held(
            c.candidate,
            c.sale,
            c.level,
            PaymentId::parse(payment).unwrap(),
            created_ms,
            created_ms + 600_000,
        )
    }

    #[test]
    fn the_gate_executes_only_a_live_booking() {
        let c = copy();
        assert_eq!(
            gate(&c, None),
            Gate::Open {
                deadline_ms: 602_000
            }
        );
        let extended = BookingRecord {
            deadline_ms: 900_000,
            ..record("P2", 2_000)
        };
        assert_eq!(
            gate(&c, Some(&extended)),
            Gate::Open {
                deadline_ms: 900_000
            },
            "the record's deadline, which the reconciler extends"
        );
        let paid = record("P2", 2_000).into_paid(ConfirmPath::Webhook, 3_000);
        assert_eq!(gate(&c, Some(&paid)), Gate::Paid);
        assert_eq!(gate(&c, Some(&record("P3", 3_000))), Gate::Superseded);
        let paid_other = record("P1", 1_000).into_paid(ConfirmPath::Webhook, 1_500);
        assert_eq!(gate(&c, Some(&paid_other)), Gate::Superseded);
        assert_eq!(
            gate(&c, Some(&record("P1", 1_000))),
            Gate::Open {
                deadline_ms: 602_000
            },
            "an older booking's stale record"
        );
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(secrets_equal("abc", "abc"));
        assert!(!secrets_equal("abc", "abd"));
        assert!(!secrets_equal("abc", "ab"));
        assert!(!secrets_equal("", "a"));
        assert!(secrets_equal("", ""));
    }

    #[test]
    fn outcomes_have_the_pages_names() {
        assert_eq!(CallbackOutcome::Paid.name(), "paid");
        assert_eq!(CallbackOutcome::Unknown.name(), "unknown_payment");
        assert_eq!(CallbackOutcome::NotPaid.name(), "not_paid");
        assert_eq!(CallbackOutcome::NeedsAttention.name(), "needs_attention");
    }
}
