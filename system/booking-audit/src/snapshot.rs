//! [`SaleSnapshot`]: everything the audit reads, as plain data.
//!
//! Two gatherers fill it: `booking-server`'s `audit_snapshot` (from the ports
//! of a running deployment: `booking audit`, `/ops/audit`, the rehearsal)
//! and `chaos`'s `sim` (from the virtual-time sale's backends, at
//! quiescence). A part left `None` was not read, and the invariants that
//! need it do not apply ([`crate::invariants`] says which need what).

use std::collections::BTreeMap;

use booking::ledger::{Hold, LevelCount};
use booking::notify::{Alert, Confirmation};
use booking::queue::QueueDepth;
use booking::records::{BookingRecord, Throttles};
use booking::{CandidateHash, PaymentId, SaleId, StatusDocument};

use crate::gateway::GatewayTruth;

/// What a sale left behind, as the audit reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct SaleSnapshot {
    /// The sale.
    pub sale: SaleId,
    /// Whether the sale is over and every hold decided (the virtual-time
    /// sale, audited at quiescence): then no hold may be left, and each
    /// level must count exactly its PAID bookings. `false` for an audit of a
    /// deployment, which may run while holds are live.
    pub settled: bool,
    /// The ledger's open flag.
    pub open: bool,
    /// The ledger's levels: cap and count (pending + held + paid).
    pub levels: Vec<LevelCount>,
    /// Every booking record of the sale.
    pub records: Vec<BookingRecord>,
    /// The ledger's marks per candidate: of each record's candidate (a
    /// deployment's audit), or of every candidate with a paid mark or a
    /// hold (the virtual-time sale, which reads them all).
    pub ledger_marks: Option<BTreeMap<CandidateHash, LedgerMark>>,
    /// The admission queue's depth.
    pub queue: Option<QueueDepth>,
    /// The dead-letter queue's messages, each as `(group, deduplication ID)`.
    pub dead_letters: Option<Vec<(String, String)>>,
    /// Throttled record-store requests.
    pub throttles: Option<Throttles>,
    /// Every confirmation email sent (of any sale: the audit keeps this one's).
    pub emails: Vec<Confirmation>,
    /// Every alert raised.
    pub alerts: Option<Vec<Alert>>,
    /// The status document now.
    pub status: Option<CurrentStatus>,
    /// The status documents written (since the last reset), in landing order.
    pub landed: Option<LandedStatus>,
    /// The gateway's ground truth.
    pub gateway: Option<GatewayTruth>,
    /// The hold, ms: a payment whose booking record is gone is held to its
    /// creation plus one hold.
    pub hold_ms: u64,
    /// The back office (PostgreSQL), where the deployment has one.
    pub back_office: Option<BackOffice>,
}

impl SaleSnapshot {
    /// An empty snapshot of `sale`: no levels, no records, nothing read.
    pub fn empty(sale: SaleId) -> SaleSnapshot {
        SaleSnapshot {
            sale,
            settled: false,
            open: false,
            levels: Vec::new(),
            records: Vec::new(),
            ledger_marks: None,
            queue: None,
            dead_letters: None,
            throttles: None,
            emails: Vec::new(),
            alerts: None,
            status: None,
            landed: None,
            gateway: None,
            hold_ms: 0,
            back_office: None,
        }
    }

    /// The sale's PAID records.
    pub fn paid(&self) -> impl Iterator<Item = &BookingRecord> {
        self.records
            .iter()
            .filter(|r| r.status == booking::RecordStatus::Paid)
    }
}

/// One candidate in the ledger.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerMark {
    /// The paid mark: the payment that paid for the seat.
    pub paid: Option<PaymentId>,
    /// The current hold (pending or held).
    pub hold: Option<Hold>,
}

/// The status document as the sink holds it now.
#[derive(Debug, Clone, PartialEq)]
pub struct CurrentStatus {
    /// The document (`None`: nothing published, or unreadable).
    pub document: Option<StatusDocument>,
}

/// The status documents as they landed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LandedStatus {
    /// `(landed_at_ms, document)` of this sale, in landing order.
    pub documents: Vec<(u64, StatusDocument)>,
    /// When a write that is no document landed, ms.
    pub unreadable_at_ms: Vec<u64>,
}

/// The back office as read (or why it could not be).
pub type BackOffice = Result<Vec<BackOfficeRow>, String>;

/// One PAID booking as the back office holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackOfficeRow {
    /// The payment.
    pub payment_id: String,
    /// The candidate hash.
    pub candidate: String,
    /// The level.
    pub level: String,
    /// `callback`, `webhook` or `reconciler`.
    pub paid_by: String,
    /// Whether the confirmation was sent.
    pub email_sent: bool,
}
