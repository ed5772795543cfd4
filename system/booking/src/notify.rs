//! Where the system's outputs go: confirmation emails ([`Mailer`]), the live
//! status document ([`StatusSink`]) and alerts to a human ([`Alerts`]).

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::ids::{CandidateHash, Level, PaymentId, SaleId};

/// An output backend could not take the item.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotifyError {
    /// Unreachable, timed out or failed.
    #[error("output unavailable: {0}")]
    Unavailable(String),
}

/// The alert kind of a confirmation email's failed try (it stays owed and
/// is tried again after its back-off).
pub const ALERT_EMAIL_FAILED: &str = "email_failed";
/// The alert kind of a confirmation email whose tries are spent (it stays
/// owed; `booking emails resend` sends it).
pub const ALERT_EMAIL_UNDELIVERABLE: &str = "email_undeliverable";

/// The confirmation email of one PAID booking.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confirmation {
    /// Sale.
    pub sale: SaleId,
    /// Who paid.
    pub candidate: CandidateHash,
    /// Level of the seat.
    pub level: Level,
    /// The payment.
    pub payment_id: PaymentId,
    /// Gateway transaction.
    pub trx_id: Option<String>,
    /// Sent by the email sweep for a PAID record whose winner never marked
    /// its email sent: the winner may have sent it and died before the mark
    /// (an outcome nobody can know), so this one may be a repeat. The audit
    /// allows that one repeat, and no other.
    #[serde(default)]
    pub recovered: bool,
}

impl Confirmation {
    /// The confirmation of `record`'s booking.
    pub fn of(
        record: &crate::records::BookingRecord,
        trx_id: Option<String>,
        recovered: bool,
    ) -> Confirmation {
        Confirmation {
            sale: record.sale.clone(),
            candidate: record.candidate.clone(),
            level: record.level.clone(),
            payment_id: record.payment_id.clone(),
            trx_id,
            recovered,
        }
    }

    /// The email's Message-ID, `<payment.sale@domain>`: the same for every
    /// send of this booking's confirmation (the winner's and the email
    /// sweep's alike), so a receiver can drop a repeat. Ids hold only
    /// letters, digits, `-` and `_`, which a Message-ID takes as they are.
    pub fn message_id(&self, domain: &str) -> String {
        format!("<{}.{}@{domain}>", self.payment_id, self.sale)
    }
}

/// Sends confirmation emails. Sent only after the HELD→PAID update succeeded,
/// by its winner, or by the email sweep when the winner's send was never
/// marked done: the audit checks one per PAID booking, repeats only where
/// the sweep recovered a send of unknown outcome.
#[async_trait]
pub trait Mailer: Send + Sync + std::fmt::Debug {
    /// Sends one confirmation.
    async fn send(&self, confirmation: &Confirmation) -> Result<(), NotifyError>;
}

/// Stores the whole status document (S3 `status.json` in production): every
/// write replaces it.
#[async_trait]
pub trait StatusSink: Send + Sync + std::fmt::Debug {
    /// Overwrites the document.
    async fn put(&self, document: &[u8]) -> Result<(), NotifyError>;
    /// The current document, if any.
    async fn get(&self) -> Result<Option<Vec<u8>>, NotifyError>;
}

/// Something a human must look at (a hold extended to its limit, a message in
/// the dead-letter queue, a payment completed for a released seat).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Alert {
    /// Short machine-readable kind, e.g. "extensions_exhausted".
    pub kind: String,
    /// What happened, for the human.
    pub detail: String,
    /// The booking concerned, if any.
    pub candidate: Option<CandidateHash>,
    /// The payment concerned, if any.
    pub payment_id: Option<PaymentId>,
}

/// One landed write of the status document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusWrite {
    /// When it landed, ms since the epoch (the writer's clock).
    pub at_ms: u64,
    /// The whole document as written.
    pub document: Vec<u8>,
}

/// The outputs read back, as the audit reads them: every confirmation sent
/// (duplicates kept), every alert raised and every status write, in order,
/// by every instance of the deployment, not only this one.
#[async_trait]
pub trait OutputLog: Send + Sync + std::fmt::Debug {
    /// Every confirmation sent, in send order, duplicates included.
    async fn sent_mail(&self) -> Result<Vec<Confirmation>, NotifyError>;
    /// Every alert raised, oldest first.
    async fn alerts_raised(&self) -> Result<Vec<Alert>, NotifyError>;
    /// Every write of the status document landed at or after `since_ms`,
    /// in landing order.
    async fn status_writes(&self, since_ms: u64) -> Result<Vec<StatusWrite>, NotifyError>;

    /// Forgets `sale`'s sent mail, alerts and status writes (the current
    /// document with them): the ops reset, so the next run's audit judges
    /// its own mail only. `Ok(None)`: this log cannot be cleared (the
    /// default: a mail server's own store, SES); the caller reads what is
    /// left and refuses to call the sale clean while its mail is there.
    async fn clear_sale(&self, sale: &SaleId) -> Result<Option<OutputsCleared>, NotifyError> {
        let _ = sale;
        Ok(None)
    }
}

/// What [`OutputLog::clear_sale`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputsCleared {
    /// Confirmations sent.
    pub mail: u64,
    /// Alerts raised.
    pub alerts: u64,
    /// Status writes kept in the history.
    pub status_writes: u64,
}

/// Raises alerts.
#[async_trait]
pub trait Alerts: Send + Sync + std::fmt::Debug {
    /// Raises one alert.
    async fn raise(&self, alert: Alert) -> Result<(), NotifyError>;
}
