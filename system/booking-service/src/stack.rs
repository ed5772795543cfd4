//! What every request handler of one instance shares: the ports, the sale,
//! the settings. The API, the simulator and the ops tools build one and call
//! the same request path ([`crate::admission`]), callback and webhook
//! decisions ([`crate::callback`], [`crate::webhook`]) over it.
//!
//! Nothing in here is state another instance needs: every piece of shared
//! state lives behind a port (ledger, records, queue, coordination), so any
//! number of instances can serve one sale.

use std::collections::BTreeMap;
use std::sync::Arc;

use booking::{
    Alerts, ChangeStream, Clock, Coordination, Entropy, Ledger, Level, Mailer, PaymentGateway,
    Queue, RecordStore, SaleId, Settings, StatusSink,
};

/// How webhooks are verified: which certificate URLs and topics are trusted.
#[derive(Debug, Clone)]
pub struct WebhookTrust {
    /// Where a `SigningCertURL` may point (the real SNS pattern by default; the
    /// mock's loopback host in rehearsals).
    pub cert_urls: sns::CertUrlPolicy,
    /// Which topics may notify us.
    pub topics: sns::TopicPolicy,
}

/// The ports and settings of one instance.
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
    /// Request tokens and lock owner tokens.
    pub entropy: Arc<dyn Entropy>,
    /// Webhook verification.
    pub webhook_trust: WebhookTrust,
}

impl Stack {
    /// The confirm step's ports.
    pub fn confirm_ports(&self) -> crate::confirm::ConfirmPorts<'_> {
        crate::confirm::ConfirmPorts {
            records: self.records.as_ref(),
            ledger: self.ledger.as_ref(),
            mailer: self.mailer.as_ref(),
            alerts: self.alerts.as_ref(),
            coordination: self.coordination.as_ref(),
            prefix: &self.prefix,
            settings: &self.settings,
        }
    }

    /// The URL the gateway sends the payer back to.
    pub fn callback_url(&self) -> String {
        format!("{}/payment/callback", self.public_url.trim_end_matches('/'))
    }
}
