//! One admission, as every component sees it: [`AdmittedBooking`].
//!
//! The request path builds it once the payment is attached to the hold; the
//! same value is the booking copy kept in coordination storage for a payer
//! faster than the worker (with the gateway's per-payment signature), the
//! queue message the worker turns into the HELD record (without the
//! signature), and what the reconciler re-creates for a held hold that has
//! no record. [`invoice_number`] is the merchant invoice of an admission,
//! read back by [`parse_invoice`].

use serde::{Deserialize, Serialize};

use crate::ids::{CandidateHash, Level, PaymentId, RequestToken, SaleId, deduplication_id};
use crate::queue::Message;
use crate::records::BookingRecord;

/// One admission: who, which seat, which payment, until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdmittedBooking {
    /// The candidate.
    pub candidate: CandidateHash,
    /// The sale.
    pub sale: SaleId,
    /// The level the seat is counted in.
    pub level: Level,
    /// The gateway payment.
    pub payment_id: PaymentId,
    /// The per-payment signature the gateway returned at create; a callback
    /// must carry it. Kept in the booking copy only (never queued).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// The admission's request token, when known (lets the worker tell this
    /// admission's pending hold from a newer one's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<RequestToken>,
    /// When the request was admitted, ms since the epoch: the record's
    /// `created_ms`, the invoice's last part and half of the deduplication ID.
    pub request_ms: u64,
    /// The hold deadline, ms since the epoch.
    pub deadline_ms: u64,
}

impl AdmittedBooking {
    /// The HELD record this admission becomes (what the worker writes).
    pub fn held_record(&self) -> BookingRecord {
        BookingRecord::held(
            self.candidate.clone(),
            self.sale.clone(),
            self.level.clone(),
            self.payment_id.clone(),
            self.request_ms,
            self.deadline_ms,
        )
    }

    /// The merchant invoice number of this admission.
    pub fn invoice(&self) -> String {
        invoice_number(&self.sale, &self.candidate, self.request_ms)
    }

    /// The queue message: JSON body without the signature, group = the
    /// candidate hash's first 4 hex digits, deduplication ID = candidate
    /// hash + request timestamp.
    pub fn to_message(&self) -> Result<Message, serde_json::Error> {
        let queued = AdmittedBooking {
            signature: None,
            ..self.clone()
        };
        Ok(Message {
            body: serde_json::to_string(&queued)?,
            group_id: self.candidate.message_group().to_owned(),
            deduplication_id: deduplication_id(&self.candidate, self.request_ms),
        })
    }
}

/// The merchant invoice number of an admission:
/// `<sale>-<candidate hash>-<request ms>` (at most 126 characters). It names
/// the booking record's key (the candidate hash), so the webhook finds the
/// booking from the invoice alone.
pub fn invoice_number(sale: &SaleId, candidate: &CandidateHash, request_ms: u64) -> String {
    format!("{sale}-{candidate}-{request_ms}")
}

/// Reads an [`invoice_number`] back: the sale, the candidate and the request ms.
pub fn parse_invoice(invoice: &str) -> Option<(SaleId, CandidateHash, u64)> {
    let (rest, ms) = invoice.rsplit_once('-')?;
    let (sale, candidate) = rest.rsplit_once('-')?;
    if ms.starts_with('+') {
        return None;
    }
    let request_ms = ms.parse().ok()?;
    Some((
        SaleId::parse(sale).ok()?,
        CandidateHash::parse(candidate).ok()?,
        request_ms,
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::records::RecordStatus;

    fn admitted() -> AdmittedBooking {
        AdmittedBooking {
            candidate: CandidateHash::of("x"),
            sale: SaleId::parse("launch-2026").unwrap(),
            level: Level::parse("gold").unwrap(),
            payment_id: PaymentId::parse("TR1").unwrap(),
            signature: Some("secret".into()),
            token: Some(RequestToken::parse("t1").unwrap()),
            request_ms: 1_700_000_000_123,
            deadline_ms: 1_700_000_600_123,
        }
    }

    #[test]
    fn invoice_numbers_read_back() {
        let a = admitted();
        let inv = a.invoice();
        assert!(inv.len() <= 255);
        assert_eq!(
            parse_invoice(&inv),
            Some((a.sale.clone(), a.candidate.clone(), a.request_ms))
        );
        assert_eq!(parse_invoice("nope"), None);
        assert_eq!(parse_invoice("a-b-1"), None);
        assert_eq!(
            parse_invoice(&format!("s-{}-+1", a.candidate)),
            None,
            "a signed number is not ours"
        );
    }

    #[test]
    fn the_queued_message_carries_no_signature() {
        let a = admitted();
        let m = a.to_message().unwrap();
        assert!(!m.body.contains("secret"), "{}", m.body);
        let back: AdmittedBooking = serde_json::from_str(&m.body).unwrap();
        assert_eq!(
            back,
            AdmittedBooking {
                signature: None,
                ..a.clone()
            }
        );
        assert_eq!(m.group_id, a.candidate.message_group());
        assert_eq!(
            m.deduplication_id,
            deduplication_id(&a.candidate, a.request_ms)
        );
    }

    #[test]
    fn the_held_record_is_the_admission() {
        let a = admitted();
        let r = a.held_record();
        assert_eq!(r.status, RecordStatus::Held);
        assert_eq!(
            (r.created_ms, r.deadline_ms, &r.payment_id),
            (a.request_ms, a.deadline_ms, &a.payment_id)
        );
    }
}
