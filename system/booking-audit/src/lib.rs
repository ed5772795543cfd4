//! The end-of-sale audit, written once and pure: no I/O, no clock.
//!
//! - [`snapshot`]: [`SaleSnapshot`], everything the audit reads, as plain
//!   data; the gatherers (`booking-server`'s `audit_snapshot` for a
//!   deployment, `chaos`'s `sim` for the virtual-time sale, whose
//!   `sim::checks` reports the verdicts) fill it.
//! - [`emails`]: [`EmailFigures`], what became of the confirmation emails
//!   (delivered, recovered, repeats, missing, owed, failed tries), counted.
//! - [`gateway`]: [`GatewayTruth`], the gateway's ground truth, and its one
//!   reader of the mock's `/__mock/ledger` JSON.
//! - [`invariants`]: one function per invariant, and [`audit`], which runs
//!   every one that applies. Its module docs are the table of every
//!   invariant, and of the verdicts checked elsewhere.
//! - [`verdict`]: [`Verdict`], the one result type of every invariant,
//!   checker and threshold, and of the reports.

pub mod emails;
pub mod gateway;
pub mod invariants;
pub mod snapshot;
pub mod verdict;

pub use emails::EmailFigures;
pub use gateway::{GatewayPayment, GatewayState, GatewayTruth};
pub use invariants::audit;
pub use snapshot::{
    BackOffice, BackOfficeRow, CurrentStatus, LandedStatus, LedgerMark, SaleSnapshot,
};
pub use verdict::{AT_LEAST, AT_MOST, COUNT, DETAILS_MAX, Verdict};
