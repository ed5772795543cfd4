//! The record store: one DynamoDB table of bookings. The worker owns it, plus
//! the conditional HELD→PAID update that every confirm path ends in.
//!
//! - [`BookingRecord`]: one candidate's booking (partition key = candidate
//!   hash), HELD or PAID; RELEASED is the absence of a record.
//! - [`Condition`]: the conditions a write may carry; [`RecordStore`]: the port.
//! - [`classify_conflict`]: the worker's decision when its conditional put
//!   fails, pure.
//! - [`StreamRecord`] and [`ChangeStream`]: the table's change stream, which
//!   feeds the expiry and sync handlers.
//!
//! Invariants are checked before every write ([`BookingRecord::check`]): a PAID
//! record carries no TTL attribute (DynamoDB would delete a confirmed booking),
//! a HELD one always does (it is the safety net). Breaking one is a programmer
//! error, which a store refuses with [`RecordError::Invalid`].

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::ids::{CandidateHash, Level, PaymentId, SaleId};

/// A booking's durable state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RecordStatus {
    /// The seat is counted and a payment exists; the hold runs to the deadline.
    Held,
    /// The gateway confirmed the payment; the seat is permanent.
    Paid,
}

/// Which confirm path marked a booking paid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConfirmPath {
    /// The browser's redirect after checkout.
    Callback,
    /// The gateway's signed webhook.
    Webhook,
    /// The reconciler's status query.
    Reconciler,
}

/// One candidate's booking.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BookingRecord {
    /// Partition key.
    pub candidate: CandidateHash,
    /// The sale.
    pub sale: SaleId,
    /// The level the seat is counted in.
    pub level: Level,
    /// The gateway payment; the GSI's key.
    pub payment_id: PaymentId,
    /// HELD or PAID.
    pub status: RecordStatus,
    /// The hold deadline, ms since the epoch.
    pub deadline_ms: u64,
    /// The TTL attribute, seconds since the epoch: present on HELD records (the
    /// safety net), absent on PAID ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_s: Option<u64>,
    /// When the admission was made, ms since the epoch. Carried in the queue
    /// message, so it orders two bookings of one candidate.
    pub created_ms: u64,
    /// When it was marked paid.
    #[serde(default)]
    pub paid_ms: Option<u64>,
    /// Which confirm path marked it paid.
    #[serde(default)]
    pub paid_by: Option<ConfirmPath>,
    /// How many times the reconciler extended the hold.
    #[serde(default)]
    pub extensions: u32,
    /// Gateway queries that failed in a row since the last extension.
    #[serde(default)]
    pub query_failures: u32,
    /// Whether the confirmation email went out (set once, after PAID).
    #[serde(default)]
    pub email_sent: bool,
}

/// The TTL attribute for a hold deadline: the deadline in whole seconds,
/// rounded up, so the TTL never fires before the deadline.
pub fn ttl_for_deadline(deadline_ms: u64) -> u64 {
    deadline_ms.div_ceil(1_000)
}

impl BookingRecord {
    /// A fresh HELD record, with the TTL on its deadline.
    pub fn held(
        candidate: CandidateHash,
        sale: SaleId,
        level: Level,
        payment_id: PaymentId,
        created_ms: u64,
        deadline_ms: u64,
    ) -> BookingRecord {
        BookingRecord {
            candidate,
            sale,
            level,
            payment_id,
            status: RecordStatus::Held,
            deadline_ms,
            expires_at_s: Some(ttl_for_deadline(deadline_ms)),
            created_ms,
            paid_ms: None,
            paid_by: None,
            extensions: 0,
            query_failures: 0,
            email_sent: false,
        }
    }

    /// This booking, paid: status PAID, the TTL attribute removed, the time and
    /// the path recorded. What HELD→PAID writes, and what the callback writes
    /// from the Redis copy when no record exists yet.
    pub fn into_paid(self, path: ConfirmPath, paid_ms: u64) -> BookingRecord {
        BookingRecord {
            status: RecordStatus::Paid,
            expires_at_s: None,
            paid_ms: Some(paid_ms),
            paid_by: Some(path),
            ..self
        }
    }

    /// HELD with a deadline before `deadline_before_ms`: what
    /// [`RecordStore::held_due`] returns.
    pub fn is_held_due(&self, deadline_before_ms: u64) -> bool {
        self.status == RecordStatus::Held && self.deadline_ms < deadline_before_ms
    }

    /// PAID before `paid_before_ms` with its email not marked sent: what
    /// [`RecordStore::owed_emails`] returns.
    pub fn owes_email(&self, paid_before_ms: u64) -> bool {
        self.status == RecordStatus::Paid
            && !self.email_sent
            && self.paid_ms.is_some_and(|p| p < paid_before_ms)
    }

    /// The record's invariants; a store checks them before every write and an
    /// adapter after every read. A PAID record carries no TTL and says when and
    /// how it was paid; a HELD record carries a TTL and no payment details.
    pub fn check(&self) -> Result<(), String> {
        match self.status {
            RecordStatus::Paid => {
                if let Some(ttl) = self.expires_at_s {
                    return Err(format!(
                        "PAID record of {} carries a TTL ({ttl}): it would be deleted",
                        self.candidate
                    ));
                }
                if self.paid_ms.is_none() || self.paid_by.is_none() {
                    return Err(format!(
                        "PAID record of {} without paid_ms/paid_by",
                        self.candidate
                    ));
                }
            }
            RecordStatus::Held => {
                if self.expires_at_s.is_none() {
                    return Err(format!(
                        "HELD record of {} without a TTL: no safety net",
                        self.candidate
                    ));
                }
                if self.paid_ms.is_some() || self.paid_by.is_some() || self.email_sent {
                    return Err(format!(
                        "HELD record of {} with payment details",
                        self.candidate
                    ));
                }
            }
        }
        if self.deadline_ms < self.created_ms {
            return Err(format!(
                "record of {}: deadline {} before creation {}",
                self.candidate, self.deadline_ms, self.created_ms
            ));
        }
        Ok(())
    }
}

/// [`RecordStore::held_due`]'s order: most overdue first, ties by candidate.
pub fn sort_by_deadline(records: &mut [BookingRecord]) {
    records.sort_by(|a, b| {
        a.deadline_ms
            .cmp(&b.deadline_ms)
            .then_with(|| a.candidate.cmp(&b.candidate))
    });
}

/// [`RecordStore::owed_emails`]' order: oldest paid first, ties by
/// candidate.
pub fn sort_by_paid(records: &mut [BookingRecord]) {
    records.sort_by(|a, b| {
        a.paid_ms
            .cmp(&b.paid_ms)
            .then_with(|| a.candidate.cmp(&b.candidate))
    });
}

/// The condition a write carries. A write whose condition does not hold
/// changes nothing and fails with [`RecordError::ConditionFailed`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Condition {
    /// No record for the candidate (`attribute_not_exists`).
    NotExists,
    /// A record with this status and this payment.
    StatusIsWithPayment(RecordStatus, PaymentId),
    /// A record with this payment, whatever its status.
    PaymentIs(PaymentId),
}

impl Condition {
    /// Whether the condition holds for the current record (`None`: absent).
    pub fn holds(&self, current: Option<&BookingRecord>) -> bool {
        match (self, current) {
            (Condition::NotExists, current) => current.is_none(),
            (Condition::StatusIsWithPayment(status, payment), Some(r)) => {
                r.status == *status && r.payment_id == *payment
            }
            (Condition::PaymentIs(payment), Some(r)) => r.payment_id == *payment,
            (_, None) => false,
        }
    }
}

/// Why a store call did not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The condition did not hold: nothing changed. An expected outcome, which
    /// the caller classifies; `current` is the record as the check saw it
    /// (`ReturnValuesOnConditionCheckFailure = ALL_OLD`), `None` if absent.
    #[error("condition failed (current: {current:?})")]
    ConditionFailed {
        /// The record the condition was checked against.
        current: Option<Box<BookingRecord>>,
    },
    /// Over the table's throughput: retry later. The audit counts these.
    #[error("throttled")]
    Throttled,
    /// The store is unreachable, timed out or failed.
    #[error("record store unavailable: {0}")]
    Unavailable(String),
    /// The call broke an invariant or was malformed: a programmer error.
    #[error("invalid record operation: {0}")]
    Invalid(String),
}

impl RecordError {
    /// A failed condition against `current`.
    pub fn condition_failed(current: Option<BookingRecord>) -> RecordError {
        RecordError::ConditionFailed {
            current: current.map(Box::new),
        }
    }
}

/// Throttled requests seen so far, which the audit requires to be zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Throttles {
    /// Throttled reads.
    pub reads: u64,
    /// Throttled writes.
    pub writes: u64,
}

impl Throttles {
    /// Reads and writes.
    pub fn total(&self) -> u64 {
        self.reads + self.writes
    }
}

/// The record store: one table, partition key = candidate hash, a GSI on
/// payment ID. Every write is one conditional step.
#[async_trait]
pub trait RecordStore: Send + Sync + std::fmt::Debug {
    /// Writes the whole record if `condition` holds (PutItem). The worker's
    /// write is `put(held, NotExists)`; so is the callback's PAID-from-copy.
    async fn put(&self, record: BookingRecord, condition: Condition) -> Result<(), RecordError>;

    /// Overwrites an existing record if `condition` holds: the worker's
    /// replacement of a stale record, conditioned on the old payment. The same
    /// PutItem as [`RecordStore::put`]; `NotExists` is refused as `Invalid`.
    async fn replace(
        &self,
        record: BookingRecord,
        condition: Condition,
    ) -> Result<(), RecordError> {
        if condition == Condition::NotExists {
            return Err(RecordError::Invalid(
                "replace needs a condition on the existing record".into(),
            ));
        }
        self.put(record, condition).await
    }

    /// HELD→PAID, the update every confirm path ends in: succeeds only if the
    /// record is HELD with `payment_id`; sets PAID, `paid_ms`, `paid_by` and
    /// REMOVES the TTL attribute. Returns the paid record. A second path gets
    /// `ConditionFailed` with the PAID record: it lost, and does nothing more.
    async fn mark_paid(
        &self,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
        path: ConfirmPath,
        now_ms: u64,
    ) -> Result<BookingRecord, RecordError>;

    /// Sets `email_sent` on a PAID record with `payment_id` whose email was not
    /// yet sent: the at-most-once latch in front of the confirmation email.
    async fn mark_emailed(
        &self,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<BookingRecord, RecordError>;

    /// Moves the deadline (and the TTL with it) of a record HELD with
    /// `payment_id`, counts the extension and clears `query_failures`.
    async fn extend(
        &self,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
        deadline_ms: u64,
    ) -> Result<BookingRecord, RecordError>;

    /// Counts one failed gateway query on a record HELD with `payment_id`, so
    /// the count survives the reconciler moving to another instance.
    async fn note_query_failure(
        &self,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<BookingRecord, RecordError>;

    /// Sets `query_failures` back to zero on a record HELD with `payment_id`:
    /// the gateway answered, so failures count "in a row" again from the next
    /// one. The reconciler calls it only when the count is above zero.
    async fn clear_query_failures(
        &self,
        candidate: &CandidateHash,
        payment_id: &PaymentId,
    ) -> Result<BookingRecord, RecordError>;

    /// Deletes the record if `condition` holds (the reconciler's release uses
    /// `StatusIsWithPayment(Held, payment)`); returns what was deleted.
    /// `NotExists` is refused as `Invalid`.
    async fn delete(
        &self,
        candidate: &CandidateHash,
        condition: Condition,
    ) -> Result<BookingRecord, RecordError>;

    /// The candidate's record. A consistent read sees every completed write; an
    /// eventually consistent one may serve an older version.
    async fn get(
        &self,
        candidate: &CandidateHash,
        consistent: bool,
    ) -> Result<Option<BookingRecord>, RecordError>;

    /// The record with this payment, through the GSI: eventually consistent.
    async fn by_payment(
        &self,
        payment_id: &PaymentId,
    ) -> Result<Option<BookingRecord>, RecordError>;

    /// HELD records whose deadline is before `deadline_before_ms`, most overdue
    /// first (ties by candidate), at most `limit`: the reconciler's query.
    /// Eventually consistent, like the index it stands for; every action on a
    /// result is conditional anyway.
    async fn held_due(
        &self,
        deadline_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<BookingRecord>, RecordError>;

    /// PAID records whose confirmation email is owed (`email_sent` false),
    /// paid before `paid_before_ms`, oldest paid first (ties by candidate),
    /// at most `limit`: the email sweep's query, which sends what a winner
    /// that died between its HELD→PAID update and its send never sent.
    async fn owed_emails(
        &self,
        paid_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<BookingRecord>, RecordError>;

    /// Every record, consistently, in candidate order: the audit's scan.
    async fn scan_all(&self) -> Result<Vec<BookingRecord>, RecordError>;

    /// Deletes every record of `sale` (and with them their payment-index,
    /// due-holds and owed-email entries), leaving other sales' records;
    /// returns how many were deleted. The ops reset's clear, in batches
    /// (an adapter logs its progress per batch): run with the sale closed
    /// and quiet, since it deletes whatever it finds, HELD or PAID.
    ///
    /// Each deletion is an application delete: its REMOVE stream record
    /// carries no [`UserIdentity`], so the expiry handler (which acts on
    /// TTL removals only, [`StreamRecord::is_ttl_removal`]) never releases
    /// a seat for it into the just-reset ledger, and the back-office sync
    /// (PAID images only) ignores it.
    ///
    /// The default scans the table and deletes each record of the sale
    /// under [`Condition::PaymentIs`] its payment (a record that changed
    /// payment since the scan is read and deleted again); adapters with a
    /// cheaper bulk delete override it.
    async fn delete_sale(&self, sale: &SaleId) -> Result<u64, RecordError> {
        let mut removed = 0;
        for record in self.scan_all().await? {
            if record.sale != *sale {
                continue;
            }
            let mut condition = Condition::PaymentIs(record.payment_id.clone());
            loop {
                match self.delete(&record.candidate, condition).await {
                    Ok(_) => {
                        removed += 1;
                        break;
                    }
                    Err(RecordError::ConditionFailed { current: Some(now) })
                        if now.sale == *sale =>
                    {
                        condition = Condition::PaymentIs(now.payment_id.clone());
                    }
                    Err(RecordError::ConditionFailed { .. }) => break,
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(removed)
    }

    /// Throttled requests so far (CloudWatch `ThrottledRequests` in AWS).
    async fn throttles(&self) -> Result<Throttles, RecordError>;
}

/// What the worker does with a message whose conditional put failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum WorkerVerdict {
    /// The record is PAID (the callback got there first): delete the message.
    Skip,
    /// HELD with the same payment: a repeated delivery. Delete the message.
    Duplicate,
    /// HELD with another payment from an EARLIER admission: a stale record of a
    /// released attempt, after which the candidate booked again. Replace it
    /// under `condition` (HELD with the old payment), then delete the message;
    /// if that condition fails, read and classify again.
    ReplaceStale {
        /// The condition the replacement carries.
        condition: Condition,
    },
    /// HELD with another payment from a LATER admission: this message is a
    /// redelivered old one and must not overwrite the newer booking. Delete
    /// the message.
    Stale,
    /// No record any more, and the record that blocked the put was this
    /// booking's own or a newer one: it was released in between. Writing now
    /// would resurrect it. Delete the message.
    Released,
    /// No record any more, and what blocked the put was an older booking's
    /// stale record (released and deleted in between), or the blocker is
    /// unknown: put again with `NotExists`. Losing a live booking's record
    /// would hold its seat forever; a wrongly written hold is released by the
    /// reconciler at its deadline.
    PutAgain,
    /// Another payment admitted in the same millisecond: the order cannot be
    /// told. Leave the message unacknowledged; it ends in the dead-letter
    /// queue, whose alarm brings a human. A guess is not good enough.
    Ambiguous,
    /// The read failed: leave the message unacknowledged, SQS delivers it again.
    LeaveUnacked,
}

impl WorkerVerdict {
    /// Whether the message is done with and can be deleted without another
    /// write (`ReplaceStale` and `PutAgain` delete it after their write succeeds).
    pub fn deletes_message(&self) -> bool {
        matches!(
            self,
            WorkerVerdict::Skip
                | WorkerVerdict::Duplicate
                | WorkerVerdict::Stale
                | WorkerVerdict::Released
        )
    }
}

/// Classifies a failed conditional put of `incoming` (the HELD record the
/// worker built from a message).
///
/// `blocked_by` is the record the failed put reported (`ConditionFailed {
/// current }`); `current_read` is the consistent read the worker made after it.
/// The read decides; `blocked_by` only matters when the read finds nothing.
///
/// - read failed → [`WorkerVerdict::LeaveUnacked`];
/// - PAID → `Skip` (whatever its payment: a paid candidate never books again);
/// - HELD, same payment → `Duplicate`;
/// - HELD, another payment: the admission times (`created_ms`) decide, because
///   one candidate holds one seat at a time, so only the latest admission can
///   be live: incoming later → `ReplaceStale`; incoming earlier → `Stale` (the
///   trap: a redelivered old message must not overwrite a newer booking);
///   same millisecond → `Ambiguous`;
/// - no record: released in between. If the blocker was an older booking with
///   another payment, the incoming booking is the newer one → `PutAgain`; if it
///   was this booking or a newer one → `Released` (the other half of the trap:
///   never resurrect a released booking); blocker unknown → `PutAgain`.
pub fn classify_conflict(
    incoming: &BookingRecord,
    blocked_by: Option<&BookingRecord>,
    current_read: &Result<Option<BookingRecord>, RecordError>,
) -> WorkerVerdict {
    let current = match current_read {
        Err(_) => return WorkerVerdict::LeaveUnacked,
        Ok(current) => current,
    };
    match current {
        Some(current) if current.status == RecordStatus::Paid => WorkerVerdict::Skip,
        Some(current) if current.payment_id == incoming.payment_id => WorkerVerdict::Duplicate,
        Some(current) => match incoming.created_ms.cmp(&current.created_ms) {
            std::cmp::Ordering::Greater => WorkerVerdict::ReplaceStale {
                condition: Condition::StatusIsWithPayment(
                    RecordStatus::Held,
                    current.payment_id.clone(),
                ),
            },
            std::cmp::Ordering::Less => WorkerVerdict::Stale,
            std::cmp::Ordering::Equal => WorkerVerdict::Ambiguous,
        },
        None => match blocked_by {
            Some(blocker)
                if blocker.payment_id != incoming.payment_id
                    && blocker.created_ms < incoming.created_ms =>
            {
                WorkerVerdict::PutAgain
            }
            Some(_) => WorkerVerdict::Released,
            None => WorkerVerdict::PutAgain,
        },
    }
}

/// What a change-stream record says happened to an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StreamKind {
    /// A new item.
    Insert,
    /// An existing item changed.
    Modify,
    /// An item was deleted.
    Remove,
}

/// Who made a change, when it was not the application: DynamoDB marks TTL
/// deletions with `{"type": "Service", "principalId": "dynamodb.amazonaws.com"}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UserIdentity {
    /// `Service` for the TTL service.
    #[serde(rename = "type")]
    pub type_: String,
    /// `dynamodb.amazonaws.com` for the TTL service.
    pub principal_id: String,
}

impl UserIdentity {
    /// The identity on deletions made by the TTL service.
    pub fn ttl_service() -> UserIdentity {
        UserIdentity {
            type_: "Service".into(),
            principal_id: "dynamodb.amazonaws.com".into(),
        }
    }

    /// Whether this is the TTL service.
    pub fn is_ttl_service(&self) -> bool {
        self.type_ == "Service" && self.principal_id == "dynamodb.amazonaws.com"
    }
}

/// One change to the table, as the stream delivers it (NEW_AND_OLD_IMAGES).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamRecord {
    /// Insert, modify or remove.
    pub kind: StreamKind,
    /// The item before (none on insert).
    pub old: Option<BookingRecord>,
    /// The item after (none on remove).
    pub new: Option<BookingRecord>,
    /// Set only on changes the application did not make (TTL deletions).
    pub user_identity: Option<UserIdentity>,
    /// Position in the stream: strictly increasing, in write order.
    pub sequence: u64,
    /// When the change was made, ms since the epoch (for a max record age).
    pub at_ms: u64,
}

impl StreamRecord {
    /// A deletion by the TTL service: the only kind the expiry handler acts on.
    pub fn is_ttl_removal(&self) -> bool {
        self.kind == StreamKind::Remove
            && self
                .user_identity
                .as_ref()
                .is_some_and(UserIdentity::is_ttl_service)
    }
}

/// The table's change stream, read from a position like a shard iterator, so
/// a handler that fails part of a batch reads again from the failed record.
#[async_trait]
pub trait ChangeStream: Send + Sync + std::fmt::Debug {
    /// Records with a sequence above `after_sequence` (0: from the start), in
    /// order, at most `limit`; waits up to `wait` for the first one. Reading
    /// from a position the stream no longer retains is `Invalid`: records were
    /// lost, and a handler must not carry on as if they were not.
    async fn read(
        &self,
        after_sequence: u64,
        limit: usize,
        wait: Duration,
    ) -> Result<Vec<StreamRecord>, RecordError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(payment: &str, created_ms: u64) -> BookingRecord {
        BookingRecord::held(
            CandidateHash::of("candidate"),
            SaleId::parse("launch").unwrap(),
            Level::parse("gold").unwrap(),
            PaymentId::parse(payment).unwrap(),
            created_ms,
            created_ms + 600_000,
        )
    }

    fn read(r: &BookingRecord) -> Result<Option<BookingRecord>, RecordError> {
        Ok(Some(r.clone()))
    }

    #[test]
    fn a_paid_record_is_skipped_whatever_its_payment() {
        let incoming = record("P2", 2_000);
        for paid in [
            record("P2", 2_000).into_paid(ConfirmPath::Callback, 2_500),
            record("P1", 1_000).into_paid(ConfirmPath::Webhook, 1_500),
            record("P3", 3_000).into_paid(ConfirmPath::Reconciler, 3_500),
        ] {
            assert_eq!(
                classify_conflict(&incoming, Some(&paid), &read(&paid)),
                WorkerVerdict::Skip
            );
        }
    }

    #[test]
    fn held_with_the_same_payment_is_a_duplicate() {
        let incoming = record("P1", 1_000);
        let current = record("P1", 1_000);
        let verdict = classify_conflict(&incoming, Some(&current), &read(&current));
        assert_eq!(verdict, WorkerVerdict::Duplicate);
        assert!(verdict.deletes_message());
    }

    #[test]
    fn an_older_record_with_another_payment_is_replaced_under_the_old_payment() {
        let incoming = record("P2", 2_000);
        let stale = record("P1", 1_000);
        let verdict = classify_conflict(&incoming, Some(&stale), &read(&stale));
        assert_eq!(
            verdict,
            WorkerVerdict::ReplaceStale {
                condition: Condition::StatusIsWithPayment(
                    RecordStatus::Held,
                    PaymentId::parse("P1").unwrap()
                )
            }
        );
        assert!(!verdict.deletes_message(), "only after the replacement");
    }

    // The trap: cancel, book again, then the FIRST booking's message comes back.
    #[test]
    fn a_redelivered_old_message_never_overwrites_a_newer_booking() {
        let old_message = record("P1", 1_000);
        let newer = record("P2", 2_000);
        let verdict = classify_conflict(&old_message, Some(&newer), &read(&newer));
        assert_eq!(verdict, WorkerVerdict::Stale);
        assert!(verdict.deletes_message());
    }

    #[test]
    fn the_same_millisecond_with_two_payments_is_not_guessed() {
        let incoming = record("P2", 1_000);
        let current = record("P1", 1_000);
        let verdict = classify_conflict(&incoming, Some(&current), &read(&current));
        assert_eq!(verdict, WorkerVerdict::Ambiguous);
        assert!(!verdict.deletes_message());
    }

    // The other half of the trap: the record was released between the put and
    // the read; writing now would resurrect a released booking.
    #[test]
    fn a_booking_released_in_between_is_not_resurrected() {
        let incoming = record("P1", 1_000);
        let own = record("P1", 1_000);
        assert_eq!(
            classify_conflict(&incoming, Some(&own), &Ok(None)),
            WorkerVerdict::Released
        );
        let newer = record("P2", 2_000);
        assert_eq!(
            classify_conflict(&incoming, Some(&newer), &Ok(None)),
            WorkerVerdict::Released,
            "an old message whose newer successor was released stays dead too"
        );
    }

    #[test]
    fn a_new_booking_whose_stale_blocker_vanished_is_put_again() {
        let incoming = record("P2", 2_000);
        let stale = record("P1", 1_000);
        assert_eq!(
            classify_conflict(&incoming, Some(&stale), &Ok(None)),
            WorkerVerdict::PutAgain
        );
        assert_eq!(
            classify_conflict(&incoming, None, &Ok(None)),
            WorkerVerdict::PutAgain,
            "an unknown blocker must not lose a live booking"
        );
    }

    #[test]
    fn a_failed_read_leaves_the_message_unacknowledged() {
        let incoming = record("P1", 1_000);
        for err in [
            RecordError::Throttled,
            RecordError::Unavailable("timeout".into()),
        ] {
            let verdict = classify_conflict(&incoming, None, &Err(err));
            assert_eq!(verdict, WorkerVerdict::LeaveUnacked);
            assert!(!verdict.deletes_message());
        }
    }

    #[test]
    fn conditions_hold_only_on_what_they_name() {
        let held = record("P1", 1_000);
        let paid = held.clone().into_paid(ConfirmPath::Callback, 1_500);
        let p1 = PaymentId::parse("P1").unwrap();
        let p2 = PaymentId::parse("P2").unwrap();
        assert!(Condition::NotExists.holds(None));
        assert!(!Condition::NotExists.holds(Some(&held)));
        let held_p1 = Condition::StatusIsWithPayment(RecordStatus::Held, p1.clone());
        assert!(held_p1.holds(Some(&held)));
        assert!(!held_p1.holds(Some(&paid)));
        assert!(!held_p1.holds(None));
        assert!(!Condition::StatusIsWithPayment(RecordStatus::Held, p2.clone()).holds(Some(&held)));
        assert!(Condition::PaymentIs(p1).holds(Some(&paid)));
        assert!(!Condition::PaymentIs(p2.clone()).holds(Some(&paid)));
        assert!(!Condition::PaymentIs(p2).holds(None));
    }

    #[test]
    fn invariants_refuse_a_paid_record_with_a_ttl_and_a_held_one_without() {
        let held = record("P1", 1_000);
        held.check().unwrap();
        assert_eq!(
            held.expires_at_s,
            Some(601),
            "TTL on the deadline, in seconds"
        );
        let paid = held.clone().into_paid(ConfirmPath::Webhook, 1_500);
        paid.check().unwrap();
        assert_eq!(paid.expires_at_s, None, "paying removes the TTL");
        let with_ttl = BookingRecord {
            expires_at_s: Some(601),
            ..paid.clone()
        };
        assert!(with_ttl.check().unwrap_err().contains("TTL"));
        let without_ttl = BookingRecord {
            expires_at_s: None,
            ..held.clone()
        };
        assert!(without_ttl.check().is_err());
        let emailed_hold = BookingRecord {
            email_sent: true,
            ..held.clone()
        };
        assert!(emailed_hold.check().is_err());
        assert_eq!(ttl_for_deadline(600_001), 601, "rounded up, never early");
        assert_eq!(ttl_for_deadline(600_000), 600);
    }

    #[test]
    fn records_and_stream_identities_serialise_like_dynamodb() {
        let paid = record("P1", 1_000).into_paid(ConfirmPath::Reconciler, 2_000);
        let json = serde_json::to_value(&paid).unwrap();
        assert_eq!(json["status"], "PAID");
        assert_eq!(json["paid_by"], "reconciler");
        assert!(
            json.get("expires_at_s").is_none(),
            "no TTL attribute at all"
        );
        assert_eq!(serde_json::from_value::<BookingRecord>(json).unwrap(), paid);
        let identity = serde_json::to_value(UserIdentity::ttl_service()).unwrap();
        assert_eq!(
            identity,
            serde_json::json!({"type": "Service", "principalId": "dynamodb.amazonaws.com"})
        );
        let removal = StreamRecord {
            kind: StreamKind::Remove,
            old: Some(record("P1", 1_000)),
            new: None,
            user_identity: Some(UserIdentity::ttl_service()),
            sequence: 1,
            at_ms: 5,
        };
        assert!(removal.is_ttl_removal());
        let app_delete = StreamRecord {
            user_identity: None,
            ..removal.clone()
        };
        assert!(!app_delete.is_ttl_removal());
        let other = StreamRecord {
            user_identity: Some(UserIdentity {
                type_: "Service".into(),
                principal_id: "example.amazonaws.com".into(),
            }),
            ..removal
        };
        assert!(!other.is_ttl_removal());
    }
}
