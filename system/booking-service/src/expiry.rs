//! The TTL safety net: the expiry handler on the table's change stream.
//!
//! It acts only on REMOVE records made by the TTL service (`userIdentity`
//! type `Service`, principal `dynamodb.amazonaws.com`) whose old image is
//! still HELD, and runs the same payment-guarded ledger release as the
//! reconciler. If the reconciler already released the seat the release is a
//! no-op (`NoMatch`); a paid candidate is never touched (`Paid`). The
//! reconciler's own deletes carry no identity and are ignored, as are PAID
//! records (which carry no TTL anyway).
//!
//! It also ignores a HELD record on which the reconciler wrote down doubt (a
//! failed gateway query, or an extension): the net releases without asking
//! the gateway, and "never release when you are not sure" outranks it. Such
//! a seat stays held; the reconciler, which keeps asking, finds the hold
//! without its record ([`Ledger::stale_held`]), writes the record again and
//! decides when the gateway answers. The lifecycle property test found the
//! case: a gateway silent through all three extensions, then the TTL of the
//! last extended deadline releasing a payment that had completed.
//!
//! [`Ledger::stale_held`]: booking::Ledger::stale_held
//!
//! Batches are handled in order with partial-batch failure: a record whose
//! release fails stops the batch, and the next read starts again from it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use booking::ledger::{Ledger, LedgerError, Step};
use booking::records::{ChangeStream, RecordError, RecordStatus, StreamRecord};
use booking::{CandidateHash, PaymentId, SaleId};
use serde::{Deserialize, Serialize};

use crate::{Shutdown, stopped, stopping};

/// What the handler does with one stream record (pure).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum ExpiryAction {
    /// A TTL deletion of a HELD record: release its seat, payment-guarded.
    Release {
        /// Sale.
        sale: SaleId,
        /// Candidate.
        candidate: CandidateHash,
        /// The payment the release is guarded by.
        payment_id: PaymentId,
    },
    /// Anything else.
    Ignore,
}

/// The decision for one stream record.
pub fn decide(record: &StreamRecord) -> ExpiryAction {
    if !record.is_ttl_removal() {
        return ExpiryAction::Ignore;
    }
    match &record.old {
        Some(old)
            if old.status == RecordStatus::Held
                && old.query_failures == 0
                && old.extensions == 0 =>
        {
            ExpiryAction::Release {
                sale: old.sale.clone(),
                candidate: old.candidate.clone(),
                payment_id: old.payment_id.clone(),
            }
        }
        _ => ExpiryAction::Ignore,
    }
}

/// A snapshot of the handler's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpiryCounts {
    /// Stream records read.
    pub read: u64,
    /// Ignored.
    pub ignored: u64,
    /// Seats given back.
    pub released: u64,
    /// Releases that found nothing to do (already released, or another hold).
    pub no_match: u64,
    /// Releases refused because the candidate is paid.
    pub paid: u64,
    /// Releases that failed (retried from that record).
    pub failures: u64,
    /// The position: the last sequence fully handled.
    pub position: u64,
}

#[derive(Debug, Default)]
struct Counters {
    read: AtomicU64,
    ignored: AtomicU64,
    released: AtomicU64,
    no_match: AtomicU64,
    paid: AtomicU64,
    failures: AtomicU64,
}

/// The result of one batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchResult {
    /// Records handled.
    pub handled: usize,
    /// The first record that failed (the batch item failure), if any.
    pub failed_at: Option<u64>,
}

/// The expiry handler.
#[derive(Debug)]
pub struct ExpiryHandler {
    stream: Arc<dyn ChangeStream>,
    ledger: Arc<dyn Ledger>,
    position: AtomicU64,
    batch: usize,
    counters: Counters,
}

impl ExpiryHandler {
    /// A handler reading the stream after `position` (0: from the start).
    pub fn new(
        stream: Arc<dyn ChangeStream>,
        ledger: Arc<dyn Ledger>,
        position: u64,
    ) -> ExpiryHandler {
        ExpiryHandler {
            stream,
            ledger,
            position: AtomicU64::new(position),
            batch: 100,
            counters: Counters::default(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> ExpiryCounts {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let c = &self.counters;
        ExpiryCounts {
            read: g(&c.read),
            ignored: g(&c.ignored),
            released: g(&c.released),
            no_match: g(&c.no_match),
            paid: g(&c.paid),
            failures: g(&c.failures),
            position: g(&self.position),
        }
    }

    /// Handles one record.
    pub async fn handle(&self, record: &StreamRecord) -> Result<ExpiryAction, LedgerError> {
        self.counters.read.fetch_add(1, Ordering::Relaxed);
        let action = decide(record);
        match &action {
            ExpiryAction::Ignore => {
                self.counters.ignored.fetch_add(1, Ordering::Relaxed);
            }
            ExpiryAction::Release {
                sale,
                candidate,
                payment_id,
            } => {
                let step = self
                    .ledger
                    .release(sale, candidate, payment_id)
                    .await
                    .inspect_err(|_| {
                        self.counters.failures.fetch_add(1, Ordering::Relaxed);
                    })?;
                let counter = match step {
                    Step::Done => {
                        tracing::info!(candidate = %candidate, payment = %payment_id,
                            "TTL deletion of a HELD record: seat released by the safety net");
                        &self.counters.released
                    }
                    Step::NoMatch => &self.counters.no_match,
                    Step::Paid => &self.counters.paid,
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(action)
    }

    /// Handles a batch in order, stopping at the first failure; the position
    /// moves past every record handled.
    pub async fn handle_batch(&self, records: &[StreamRecord]) -> BatchResult {
        for (i, record) in records.iter().enumerate() {
            if let Err(e) = self.handle(record).await {
                tracing::warn!(sequence = record.sequence, error = %e, "expiry release failed; retried from here");
                return BatchResult {
                    handled: i,
                    failed_at: Some(record.sequence),
                };
            }
            self.position.fetch_max(record.sequence, Ordering::Relaxed);
        }
        BatchResult {
            handled: records.len(),
            failed_at: None,
        }
    }

    /// One read (waiting up to `wait`) and its batch.
    pub async fn poll_once(&self, wait: Duration) -> Result<BatchResult, RecordError> {
        let after = self.position.load(Ordering::Relaxed);
        let records = self.stream.read(after, self.batch, wait).await?;
        Ok(self.handle_batch(&records).await)
    }

    /// Reads the stream until `shutdown` says stop. A failed read or batch
    /// waits `backoff` before the next try. A stop wins over a read or a
    /// back-off that ends at the same moment.
    pub async fn run(&self, mut shutdown: Shutdown, wait: Duration, backoff: Duration) {
        while !stopping(&shutdown) {
            let result = tokio::select! {
                // the stop first, every time: an unbiased select picks at
                // random among ready branches
                biased;
                _ = stopped(&mut shutdown) => break,
                r = self.poll_once(wait) => r,
            };
            let failed = match result {
                Ok(batch) => batch.failed_at.is_some(),
                Err(e) => {
                    tracing::error!(error = %e, "stream read failed");
                    true
                }
            };
            if failed {
                tokio::select! {
                    biased;
                    _ = stopped(&mut shutdown) => break,
                    _ = tokio::time::sleep(backoff) => {}
                }
            }
        }
        tracing::info!("expiry handler stopped");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use booking::Level;
    use booking::records::{BookingRecord, ConfirmPath, StreamKind, UserIdentity};

    fn held() -> BookingRecord {
        BookingRecord::held(
            CandidateHash::of("c"),
            SaleId::parse("s").unwrap(),
            Level::parse("a").unwrap(),
            PaymentId::parse("P1").unwrap(),
            1,
            2,
        )
    }

    fn removal(old: BookingRecord, who: Option<UserIdentity>) -> StreamRecord {
        StreamRecord {
            kind: StreamKind::Remove,
            old: Some(old),
            new: None,
            user_identity: who,
            sequence: 1,
            at_ms: 3,
        }
    }

    #[test]
    fn only_ttl_removals_of_held_records_release() {
        assert!(matches!(
            decide(&removal(held(), Some(UserIdentity::ttl_service()))),
            ExpiryAction::Release { .. }
        ));
        assert_eq!(decide(&removal(held(), None)), ExpiryAction::Ignore);
        let paid = held().into_paid(ConfirmPath::Callback, 2);
        assert_eq!(
            decide(&removal(paid, Some(UserIdentity::ttl_service()))),
            ExpiryAction::Ignore
        );
        let stranger = UserIdentity {
            type_: "Service".into(),
            principal_id: "other.amazonaws.com".into(),
        };
        assert_eq!(
            decide(&removal(held(), Some(stranger))),
            ExpiryAction::Ignore
        );
        let insert = StreamRecord {
            kind: StreamKind::Insert,
            old: None,
            new: Some(held()),
            ..removal(held(), Some(UserIdentity::ttl_service()))
        };
        assert_eq!(decide(&insert), ExpiryAction::Ignore);
        // doubt written down by the reconciler: never released by the net
        for doubt in [
            BookingRecord {
                query_failures: 1,
                ..held()
            },
            BookingRecord {
                extensions: 1,
                ..held()
            },
        ] {
            assert_eq!(
                decide(&removal(doubt, Some(UserIdentity::ttl_service()))),
                ExpiryAction::Ignore
            );
        }
    }
}
