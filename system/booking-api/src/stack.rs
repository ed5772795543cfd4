//! What every handler shares: the ports, the sale, the settings.
//!
//! Nothing in here is state another instance needs: every piece of shared
//! state lives behind a port (ledger, records, queue, coordination), so any
//! number of API instances can serve one sale.

use std::collections::BTreeMap;
use std::sync::Arc;

use booking::{
    Alerts, CandidateHash, ChangeStream, Clock, Coordination, Ledger, Level, Mailer,
    PaymentGateway, PaymentId, Queue, RecordStore, RequestToken, SaleId, Settings, StatusSink,
};
use serde::{Deserialize, Serialize};

/// How webhooks are verified: which certificate URLs and topics are trusted.
#[derive(Debug, Clone)]
pub struct WebhookTrust {
    /// Where a `SigningCertURL` may point (the real SNS pattern by default; the
    /// mock's loopback host in rehearsals).
    pub cert_urls: sns::CertUrlPolicy,
    /// Which topics may notify us.
    pub topics: sns::TopicPolicy,
}

/// The ports and settings of one API instance.
#[derive(Debug, Clone)]
pub struct Stack {
    /// The sale this instance serves.
    pub sale: SaleId,
    /// Key prefix for coordination keys (`booking::coordination::keys`).
    pub prefix: String,
    /// Timings and bounds.
    pub settings: Settings,
    /// Price of a seat per level, as the gateway's amount string.
    pub prices: BTreeMap<Level, String>,
    /// The base URL the gateway redirects payers back to (our own), e.g.
    /// `http://127.0.0.1:8080`; the callback URL is this plus `/payment/callback`.
    pub public_url: String,
    /// Seats.
    pub ledger: Arc<dyn Ledger>,
    /// Booking records.
    pub records: Arc<dyn RecordStore>,
    /// The records' change stream.
    pub stream: Arc<dyn ChangeStream>,
    /// The admission queue.
    pub queue: Arc<dyn Queue>,
    /// Locks, the booking copy, latches.
    pub coordination: Arc<dyn Coordination>,
    /// The payment gateway.
    pub gateway: Arc<dyn PaymentGateway>,
    /// Confirmation emails.
    pub mailer: Arc<dyn Mailer>,
    /// Alerts to a human.
    pub alerts: Arc<dyn Alerts>,
    /// `status.json`.
    pub status_sink: Arc<dyn StatusSink>,
    /// The clock.
    pub clock: Arc<dyn Clock>,
    /// Webhook verification.
    pub webhook_trust: WebhookTrust,
}

/// The copy of a booking kept in coordination storage at admission, keyed by
/// payment ID (`keys::booking_copy`), with a TTL of the hold plus
/// `booking_copy_slack`: the record source for a payer faster than the worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BookingCopy {
    /// Who.
    pub candidate: CandidateHash,
    /// Which sale.
    pub sale: SaleId,
    /// Which level.
    pub level: Level,
    /// The payment.
    pub payment_id: PaymentId,
    /// The per-payment signature the gateway returned at create; a callback
    /// must carry it.
    pub signature: String,
    /// The admission request.
    pub token: RequestToken,
    /// When the request was admitted, ms.
    pub request_ms: u64,
    /// The hold deadline, ms.
    pub deadline_ms: u64,
}
