//! The audit's I/O half: [`gather`] reads a [`SaleSnapshot`] from a built
//! [`Server`]'s ports; `booking_audit::audit` judges it
//! ([`crate::ops::audit`] does both).
//!
//! What is read: the ledger's counters and, for each record's candidate,
//! its paid mark (else its hold); this sale's records; the queue's depth and
//! dead letters; the record store's throttles; the outbox; the status
//! document now and every write since the last reset; the back office on
//! the AWS stack with PostgreSQL; the gateway's truth when given, cut to
//! this sale's payments created since its last reset
//! (`GatewayTruth::of_sale_since`). Alerts are
//! not read: the server's audit never judged them (the virtual-time sale
//! does), and the rehearsal raises expected ones.

use std::collections::BTreeMap;

use booking::StatusDocument;
use booking::records::BookingRecord;
use booking_audit::invariants::back_office_diff;
use booking_audit::{
    BackOffice, BackOfficeRow, CurrentStatus, GatewayTruth, LandedStatus, LedgerMark, SaleSnapshot,
};

use crate::build::Server;
use crate::ops::OpsError;

/// How long the audit gives the sync handler to catch up with the table
/// (the copy is eventually consistent: a stream poll behind).
pub const BACK_OFFICE_SETTLE: std::time::Duration = std::time::Duration::from_secs(10);

/// The sale as `server`'s ports hold it now, with `gateway`'s truth when
/// given.
pub async fn gather(
    server: &Server,
    gateway: Option<&GatewayTruth>,
) -> Result<SaleSnapshot, OpsError> {
    let stack = &server.stack;
    let sale = &stack.sale;
    let counters = stack.ledger.counters(sale).await?;
    // the gateway's payments of this sale since its reset: an earlier run's
    // are not this run's to judge (their records went with the reset)
    let reset_at_ms = server.reset_at_ms().await?;
    let records = sale_records(server).await?;
    let mut marks = BTreeMap::new();
    for r in &records {
        let paid = stack.ledger.paid(sale, &r.candidate).await?;
        let hold = match paid {
            Some(_) => None,
            None => stack.ledger.hold(sale, &r.candidate).await?,
        };
        marks.insert(r.candidate.clone(), LedgerMark { paid, hold });
    }
    let dead_letters = stack
        .queue
        .dead_letters()
        .await?
        .into_iter()
        .map(|m| (m.group_id, m.deduplication_id))
        .collect();
    let back_office = if server.config.stack.kind != crate::config::StackKind::Embedded
        && server.config.stack.postgres_url.is_some()
    {
        Some(read_back_office(server, &records).await)
    } else {
        None
    };
    Ok(SaleSnapshot {
        sale: sale.clone(),
        settled: false,
        open: counters.open,
        levels: counters.levels,
        ledger_marks: Some(marks),
        queue: Some(stack.queue.depth().await?),
        dead_letters: Some(dead_letters),
        throttles: Some(stack.records.throttles().await?),
        emails: server.outputs.sent_mail().await?,
        alerts: None,
        status: Some(CurrentStatus {
            document: current_document(server).await?,
        }),
        landed: Some(landed(server).await?),
        gateway: gateway.map(|g| g.of_sale_since(sale, reset_at_ms)),
        hold_ms: stack.settings.hold.as_millis() as u64,
        back_office,
        records,
    })
}

/// This sale's records.
pub(crate) async fn sale_records(server: &Server) -> Result<Vec<BookingRecord>, OpsError> {
    let sale = &server.stack.sale;
    Ok(server
        .stack
        .records
        .scan_all()
        .await?
        .into_iter()
        .filter(|r| &r.sale == sale)
        .collect())
}

/// The status document the sink holds now, if it reads as one.
pub(crate) async fn current_document(server: &Server) -> Result<Option<StatusDocument>, OpsError> {
    Ok(server
        .stack
        .status_sink
        .get()
        .await?
        .and_then(|b| StatusDocument::from_json(&b).ok()))
}

/// This sale's status writes since the last reset, in landing order, by
/// every instance whose writes the output log holds.
async fn landed(server: &Server) -> Result<LandedStatus, OpsError> {
    let since = server.reset_at_ms().await?;
    let mut out = LandedStatus::default();
    for w in server.outputs.status_writes(since).await? {
        match StatusDocument::from_json(&w.document) {
            Ok(doc) if doc.sale == server.stack.sale => out.documents.push((w.at_ms, doc)),
            Ok(_) => {}
            Err(_) => out.unreadable_at_ms.push(w.at_ms),
        }
    }
    Ok(out)
}

/// The back office's rows of this sale, read again until they match the
/// PAID records or [`BACK_OFFICE_SETTLE`] has passed (the sync handler is a
/// stream poll behind); why not, if it cannot be read.
async fn read_back_office(server: &Server, records: &[BookingRecord]) -> BackOffice {
    let office = match crate::build::back_office(&server.config).await {
        Ok(Some(o)) => o,
        Ok(None) => return Err("no back office configured".into()),
        Err(e) => return Err(format!("back office unreachable: {e}")),
    };
    let paid: Vec<&BookingRecord> = records
        .iter()
        .filter(|r| r.status == booking::RecordStatus::Paid)
        .collect();
    let started = std::time::Instant::now();
    loop {
        let rows = office
            .paid(&server.stack.sale)
            .await
            .map(|rows| rows.iter().map(row).collect::<Vec<_>>())
            .map_err(|e| format!("back office unreadable: {e}"));
        let settled = rows
            .as_ref()
            .is_ok_and(|rows| back_office_diff(&paid, rows).is_empty());
        if settled || started.elapsed() >= BACK_OFFICE_SETTLE {
            return rows;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// A back-office row as the audit reads it.
pub fn row(r: &booking_postgres::PaidRow) -> BackOfficeRow {
    BackOfficeRow {
        payment_id: r.payment_id.clone(),
        candidate: r.candidate.clone(),
        level: r.level.clone(),
        paid_by: r.paid_by.clone(),
        email_sent: r.email_sent,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use booking::CandidateHash;

    #[test]
    fn back_office_rows_are_read_field_for_field() {
        let r = BookingRecord::held(
            CandidateHash::of("a"),
            booking::SaleId::parse("s").unwrap(),
            booking::Level::parse("l").unwrap(),
            booking::PaymentId::parse("P1").unwrap(),
            1,
            2,
        )
        .into_paid(booking::ConfirmPath::Webhook, 3);
        let pg = booking_postgres::PaidRow {
            payment_id: "P1".into(),
            sale: "s".into(),
            candidate: r.candidate.to_string(),
            level: "l".into(),
            paid_ms: 3,
            paid_by: "webhook".into(),
            email_sent: false,
        };
        assert!(back_office_diff(&[&r], &[row(&pg)]).is_empty());
        let emailed = booking_postgres::PaidRow {
            email_sent: true,
            ..pg.clone()
        };
        assert_eq!(back_office_diff(&[&r], &[row(&emailed)]).len(), 1);
        let by_callback = booking_postgres::PaidRow {
            paid_by: "callback".into(),
            ..pg
        };
        assert_eq!(back_office_diff(&[&r], &[row(&by_callback)]).len(), 1);
    }
}
