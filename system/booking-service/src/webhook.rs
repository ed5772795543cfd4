//! Confirm path 2, below HTTP: bKash's IPN, the `Message` of an SNS
//! notification the API has already verified (signature, certificate URL,
//! topic: `booking_api::sns_delivery`), decided over the ports of a
//! [`Stack`]. The simulator's gateway sends its IPNs here.
//!
//! The booking is found by its invoice number (which names the candidate;
//! [`booking::invoice_number`]) and the payment ID (the booking copy; the
//! records' payment index when the invoice is unreadable), the gateway is
//! queried and its transaction ID (and invoice) compared with the IPN's
//! before the booking is marked paid ([`confirm_payment`]). The IPN's own
//! `transactionStatus` decides nothing. Replays are harmless: every step is
//! idempotent. Whatever the outcome, the API answers a verified
//! notification `200`: the reconciler decides what is left uncertain.

use booking::gateway::GatewayPaymentState;
use booking::records::{ConfirmPath, RecordStatus};
use booking::{PaymentId, parse_invoice};
use serde::{Deserialize, Serialize};

use crate::admission::load_copy;
use crate::confirm::{ConfirmEvents, Confirmed, PaidRequest, confirm_payment};
use crate::stack::Stack;

/// bKash's IPN, the `Message` of a notification: the fields we read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ipn {
    /// The payment.
    #[serde(rename = "paymentID", default)]
    pub payment_id: Option<String>,
    /// The transaction.
    #[serde(rename = "trxID", default)]
    pub trx_id: Option<String>,
    /// Our invoice number.
    #[serde(rename = "merchantInvoiceNumber", default)]
    pub invoice: Option<String>,
    /// What the gateway says happened (only the query decides).
    #[serde(rename = "transactionStatus", default)]
    pub transaction_status: Option<String>,
}

/// What a verified notification led to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotificationOutcome {
    /// Marked paid by this notification.
    MarkedPaid,
    /// Already PAID with this payment.
    AlreadyPaid,
    /// The IPN is not readable or names no payment.
    Unreadable,
    /// No booking has this payment.
    UnknownBooking,
    /// The gateway could not be asked, or does not report it completed.
    NotConfirmed(String),
    /// The gateway's transaction or invoice differs from the IPN's.
    Mismatch(String),
    /// Completed, but the seat is not this payment's (alerted).
    NotOurs,
    /// A backend could not answer; the reconciler decides.
    Uncertain(String),
}

impl NotificationOutcome {
    /// The outcome's name, as logs and metrics count it.
    pub fn name(&self) -> &'static str {
        match self {
            NotificationOutcome::MarkedPaid => "marked_paid",
            NotificationOutcome::AlreadyPaid => "already_paid",
            NotificationOutcome::Unreadable => "unreadable",
            NotificationOutcome::UnknownBooking => "unknown_booking",
            NotificationOutcome::NotConfirmed(_) => "not_confirmed",
            NotificationOutcome::Mismatch(_) => "mismatch",
            NotificationOutcome::NotOurs => "not_ours",
            NotificationOutcome::Uncertain(_) => "uncertain",
        }
    }
}

/// Confirm path 2 for a verified notification whose `Message` is `message`
/// (the IPN JSON). See the module documentation.
pub async fn handle(
    stack: &Stack,
    events: &dyn ConfirmEvents,
    message: &str,
) -> NotificationOutcome {
    let Ok(ipn) = serde_json::from_str::<Ipn>(message) else {
        return NotificationOutcome::Unreadable;
    };
    let (Some(payment), Some(ipn_trx)) = (
        ipn.payment_id
            .as_deref()
            .and_then(|p| PaymentId::parse(p).ok()),
        ipn.trx_id.as_deref().filter(|t| !t.is_empty()),
    ) else {
        return NotificationOutcome::Unreadable;
    };
    // the invoice names the booking: `<sale>-<candidate hash>-<request ms>`
    let invoice = ipn.invoice.as_deref().and_then(parse_invoice);
    if let Some((sale, _, _)) = &invoice {
        if *sale != stack.sale {
            return NotificationOutcome::UnknownBooking;
        }
    }
    let copy = match load_copy(stack, &payment).await {
        Ok(copy) => copy,
        Err(e) => {
            tracing::warn!(%payment, error = %e, "booking copy unreadable; trying the records");
            None
        }
    };
    if let (Some(c), Some((_, candidate, request_ms))) = (&copy, &invoice) {
        if c.candidate != *candidate || c.request_ms != *request_ms {
            return NotificationOutcome::Mismatch(format!(
                "invoice {:?} names another booking than payment {payment}",
                ipn.invoice
            ));
        }
    }
    let read = match &invoice {
        Some((_, candidate, _)) => stack.records.get(candidate, true).await,
        None => stack.records.by_payment(&payment).await,
    };
    let record = match read {
        // only this payment's record is this booking's
        Ok(record) => record.filter(|r| r.payment_id == payment),
        Err(e) if copy.is_some() => {
            tracing::warn!(%payment, error = %e, "records unreadable; going on from the copy");
            None
        }
        Err(e) => return NotificationOutcome::Uncertain(format!("records: {e}")),
    };
    let candidate = match (&copy, &record) {
        (Some(c), _) => c.candidate.clone(),
        (None, Some(r)) => r.candidate.clone(),
        (None, None) => return NotificationOutcome::UnknownBooking,
    };
    if record
        .as_ref()
        .is_some_and(|r| r.status == RecordStatus::Paid && r.payment_id == payment)
    {
        return NotificationOutcome::AlreadyPaid;
    }
    let status = match stack
        .gateway
        .query(&payment, stack.settings.request_deadline)
        .await
    {
        Ok(status) => status,
        Err(e) => return NotificationOutcome::NotConfirmed(format!("query: {e}")),
    };
    let GatewayPaymentState::Completed { trx_id } = status.state else {
        return NotificationOutcome::NotConfirmed(format!("gateway says {:?}", status.state));
    };
    if trx_id != ipn_trx {
        tracing::warn!(%payment, gateway = %trx_id, ipn = %ipn_trx, "transaction IDs differ");
        return NotificationOutcome::Mismatch(format!("trxID {ipn_trx} vs {trx_id}"));
    }
    if let (Some(ours), Some(theirs)) = (status.invoice.as_deref(), ipn.invoice.as_deref()) {
        if ours != theirs {
            return NotificationOutcome::Mismatch(format!("invoice {theirs} vs {ours}"));
        }
    }
    let request = PaidRequest {
        sale: stack.sale.clone(),
        candidate,
        payment_id: payment,
        trx_id: Some(trx_id),
        path: ConfirmPath::Webhook,
        now_ms: stack.clock.now_ms(),
    };
    match confirm_payment(stack.confirm_ports(), events, &request, copy.as_ref()).await {
        Confirmed::Paid { won: true } => NotificationOutcome::MarkedPaid,
        Confirmed::Paid { won: false } => NotificationOutcome::AlreadyPaid,
        Confirmed::NotOurs => NotificationOutcome::NotOurs,
        Confirmed::Uncertain => NotificationOutcome::Uncertain("confirm".into()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_ipn_reads_bkash_field_names_and_ignores_the_rest() {
        let ipn: Ipn = serde_json::from_str(
            r#"{"paymentID":"P1","trxID":"T1","merchantInvoiceNumber":"s-c-1",
                "transactionStatus":"Completed","amount":"500"}"#,
        )
        .unwrap();
        assert_eq!(ipn.payment_id.as_deref(), Some("P1"));
        assert_eq!(ipn.trx_id.as_deref(), Some("T1"));
        assert_eq!(ipn.invoice.as_deref(), Some("s-c-1"));
        assert_eq!(ipn.transaction_status.as_deref(), Some("Completed"));
        let back: Ipn = serde_json::from_str(&serde_json::to_string(&ipn).unwrap()).unwrap();
        assert_eq!(back, ipn);
    }
}
