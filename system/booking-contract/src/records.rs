//! The records contract suite: what every [`RecordStore`] must do, whatever
//! stands behind it (the embedded table, DynamoDB, Redis).
//!
//! Conditional writes and what a failed one reports (the record it was
//! checked against, nothing changed), HELD→PAID removing the TTL and won by
//! one confirm path only, the email latch, the reconciler's updates and its
//! guarded delete, the invariants refused before a write, the payment index,
//! the due-holds query, the audit's scan, the worker's conflict
//! classification on real reads, the TTL service deleting expired holds
//! only, and the ops reset's `delete_sale` (one sale's records and their
//! index entries gone, as application deletes on the stream).
//!
//! An adapter's test file implements [`RecordsFixture`] and writes
//! `booking_contract::records_contract!(make_fixture);` where
//! `async fn make_fixture() -> impl RecordsFixture` builds a fresh, empty
//! store: the macro expands to one `#[tokio::test]` per case, in a module
//! `records_contract`. Times are the fixture's own ([`RecordsFixture::now_ms`]):
//! a manual clock for the embedded and Redis stores, the system clock for
//! DynamoDB, so no case moves time; records due in the past are written with
//! past times.

// Test code, compiled into a library so each adapter runs it: a case
// fails by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use async_trait::async_trait;
use booking::records::{
    BookingRecord, ChangeStream, Condition, ConfirmPath, RecordError, RecordStatus, RecordStore,
    StreamKind, StreamRecord, WorkerVerdict, classify_conflict,
};
use booking::{CandidateHash, Level, PaymentId, SaleId};

/// A hold's length in the cases.
pub const HOLD_MS: u64 = 600_000;

/// A fresh, empty record store and its change stream, as one adapter builds
/// them for one case.
#[async_trait]
pub trait RecordsFixture: Send + Sync {
    /// The store.
    fn records(&self) -> &dyn RecordStore;

    /// The store's change stream, read from the start (sequence 0).
    fn stream(&self) -> &dyn ChangeStream;

    /// Now on the store's clock, ms since the epoch.
    fn now_ms(&self) -> u64;

    /// Runs the TTL service once, not late: deletes every record whose TTL
    /// (`expires_at_s`) has passed, as the TTL service does (REMOVE stream
    /// records with its identity). An adapter whose service also runs on its
    /// own may have deleted some already.
    async fn run_ttl_service(&self);

    /// Waits until the eventually consistent reads (`get(.., false)`,
    /// `by_payment`, `held_due`) see every write completed so far: moves a
    /// lagging replica's clock past its lag, or does nothing where those reads
    /// are never behind.
    async fn settle(&self);

    /// Whether a reader may read again from before a position it has already
    /// read past (`read(1, ..)` after `read(5, ..)`). DynamoDB's reader keeps
    /// only the records not yet read past (it is a shard iterator), so it
    /// answers `Invalid`; the embedded and Redis streams keep every retained
    /// record readable from anywhere.
    fn rereads_behind(&self) -> bool;

    /// Whether a write that changes nothing (a put of the very record there)
    /// leaves no stream record, as DynamoDB does. The embedded and Redis
    /// stores skip it; dynoxide, the local DynamoDB, writes a MODIFY whose
    /// images are equal (harmless: every handler is idempotent).
    fn skips_unchanged_writes(&self) -> bool {
        true
    }
}

/// The payment id `p`.
pub fn pay(p: &str) -> PaymentId {
    PaymentId::parse(p).unwrap_or_else(|e| panic!("payment id {p:?}: {e}"))
}

/// The candidate whose raw identifier is `c`.
pub fn cand(c: &str) -> CandidateHash {
    CandidateHash::of(c)
}

/// A HELD record of candidate `c` with payment `p` in sale `launch`, created
/// at `created_ms`, due [`HOLD_MS`] later.
pub fn held(c: &str, p: &str, created_ms: u64) -> BookingRecord {
    held_for(c, p, created_ms, HOLD_MS)
}

/// A HELD record due `hold_ms` after `created_ms`.
pub fn held_for(c: &str, p: &str, created_ms: u64, hold_ms: u64) -> BookingRecord {
    BookingRecord::held(
        cand(c),
        SaleId::parse("launch").unwrap_or_else(|e| panic!("{e}")),
        Level::parse("gold").unwrap_or_else(|e| panic!("{e}")),
        pay(p),
        created_ms,
        created_ms + hold_ms,
    )
}

/// The record a failed condition reported; panics on any other outcome.
pub fn current_of(outcome: RecordError) -> Option<BookingRecord> {
    match outcome {
        RecordError::ConditionFailed { current } => current.map(|b| *b),
        other => panic!("expected ConditionFailed, got {other:?}"),
    }
}

/// Reads after `after` until `n` records came (or 5 s passed), in batches as
/// the stream gives them.
pub async fn read_n(stream: &dyn ChangeStream, after: u64, n: usize) -> Vec<StreamRecord> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut got: Vec<StreamRecord> = Vec::new();
    while got.len() < n {
        let position = got.last().map_or(after, |r| r.sequence);
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let batch = stream
            .read(position, 1_000, left.min(Duration::from_secs(1)))
            .await
            .unwrap_or_else(|e| panic!("stream read after {position}: {e}"));
        if batch.is_empty() && left.is_zero() {
            break;
        }
        got.extend(batch);
    }
    got
}

/// Reads after `after` and asserts nothing more comes within `wait`.
pub async fn assert_nothing_after(stream: &dyn ChangeStream, after: u64, wait: Duration) {
    let more = stream
        .read(after, 1_000, wait)
        .await
        .unwrap_or_else(|e| panic!("stream read after {after}: {e}"));
    assert!(more.is_empty(), "unexpected stream records: {more:?}");
}

/// Expands to one `#[tokio::test]` per case of the records suite, in a
/// module `records_contract` (or the one named after `as`, to run the suite
/// on two fixtures in one file), each on a fresh fixture from `$make` (a
/// path to an `async fn() -> impl RecordsFixture`, visible from the test
/// file's root).
#[macro_export]
macro_rules! records_contract {
    ($make:path) => {
        $crate::records_contract!($make, as records_contract);
    };
    ($make:path, as $module:ident) => {
        $crate::__contract_cases!($module, records, $make;
            a_second_put_if_absent_fails_and_reports_the_record_in_the_way,
            conditions_on_a_missing_record_fail_with_no_current,
            replace_is_conditioned_on_the_old_payment,
            payment_is_matches_the_payment_whatever_the_status,
            held_to_paid_removes_the_ttl_and_only_the_first_path_wins,
            a_paid_write_carrying_a_ttl_is_refused_and_changes_nothing,
            delete_is_conditional_and_returns_what_it_deleted,
            extend_moves_deadline_and_ttl_and_counts_while_held,
            an_extension_before_the_creation_is_invalid_not_a_lost_race,
            the_email_latch_opens_once_and_only_on_a_paid_record,
            the_payment_index_finds_the_booking_and_forgets_replaced_payments,
            held_due_is_most_overdue_first_limited_and_held_only,
            owed_emails_lists_paid_records_whose_email_is_owed,
            scan_all_is_every_record_in_candidate_order,
            a_redelivered_old_message_neither_overwrites_nor_resurrects,
            a_stale_record_is_replaced_so_the_new_payment_can_be_marked_paid,
            the_ttl_service_deletes_expired_holds_only,
            no_throttles_without_a_configured_rate,
            delete_sale_removes_that_sales_records_and_nothing_else,
        );
    };
}

/// The cases as tests (the suites' macros expand to this).
#[doc(hidden)]
#[macro_export]
macro_rules! __contract_cases {
    ($module:ident, $suite:ident, $make:path; $($case:ident),+ $(,)?) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[::tokio::test]
                async fn $case() {
                    let fixture = $make().await;
                    $crate::$suite::$case(&fixture).await;
                }
            )+
        }
    };
}

/// `put(.., NotExists)` against an existing record fails with that record
/// and changes nothing.
pub async fn a_second_put_if_absent_fails_and_reports_the_record_in_the_way(
    f: &dyn RecordsFixture,
) {
    let (s, t0) = (f.records(), f.now_ms());
    let first = held("x", "P1", t0);
    s.put(first.clone(), Condition::NotExists).await.unwrap();
    let err = s
        .put(held("x", "P2", t0 + 5), Condition::NotExists)
        .await
        .unwrap_err();
    assert_eq!(current_of(err), Some(first.clone()));
    assert_eq!(
        s.get(&cand("x"), true).await.unwrap(),
        Some(first.clone()),
        "a failed condition changes nothing"
    );
    f.settle().await;
    assert_eq!(s.get(&cand("x"), false).await.unwrap(), Some(first));
}

/// Every condition but `NotExists` fails on a missing record, reporting none.
pub async fn conditions_on_a_missing_record_fail_with_no_current(f: &dyn RecordsFixture) {
    let (s, t0) = (f.records(), f.now_ms());
    let r = held("x", "P1", t0);
    for condition in [
        Condition::PaymentIs(pay("P1")),
        Condition::StatusIsWithPayment(RecordStatus::Held, pay("P1")),
    ] {
        let err = s.put(r.clone(), condition.clone()).await.unwrap_err();
        assert_eq!(current_of(err), None, "{condition:?}");
        let err = s.delete(&cand("x"), condition).await.unwrap_err();
        assert_eq!(current_of(err), None);
    }
    let (x, p1) = (cand("x"), pay("P1"));
    let err = s
        .mark_paid(&x, &p1, ConfirmPath::Callback, t0)
        .await
        .unwrap_err();
    assert_eq!(current_of(err), None);
    assert_eq!(current_of(s.mark_emailed(&x, &p1).await.unwrap_err()), None);
    assert_eq!(
        current_of(s.extend(&x, &p1, t0 + HOLD_MS).await.unwrap_err()),
        None
    );
    assert_eq!(
        current_of(s.note_query_failure(&x, &p1).await.unwrap_err()),
        None
    );
    assert_eq!(
        current_of(s.clear_query_failures(&x, &p1).await.unwrap_err()),
        None
    );
    assert_eq!(s.get(&x, true).await.unwrap(), None, "nothing written");
    assert!(s.scan_all().await.unwrap().is_empty());
}

/// The worker's replacement of a stale record holds only under the old
/// payment, once; `NotExists` is refused.
pub async fn replace_is_conditioned_on_the_old_payment(f: &dyn RecordsFixture) {
    let (s, t0) = (f.records(), f.now_ms());
    let stale = held("x", "P1", t0);
    s.put(stale.clone(), Condition::NotExists).await.unwrap();
    let newer = held("x", "P2", t0 + 60_000);

    let err = s
        .replace(
            newer.clone(),
            Condition::StatusIsWithPayment(RecordStatus::Held, pay("P9")),
        )
        .await
        .unwrap_err();
    assert_eq!(current_of(err), Some(stale.clone()));
    assert!(matches!(
        s.replace(newer.clone(), Condition::NotExists).await,
        Err(RecordError::Invalid(_))
    ));

    s.replace(
        newer.clone(),
        Condition::StatusIsWithPayment(RecordStatus::Held, pay("P1")),
    )
    .await
    .unwrap();
    assert_eq!(s.get(&cand("x"), true).await.unwrap(), Some(newer.clone()));

    // the old payment's condition no longer holds: a second replacement fails
    let err = s
        .replace(
            held("x", "P3", t0 + 1),
            Condition::StatusIsWithPayment(RecordStatus::Held, pay("P1")),
        )
        .await
        .unwrap_err();
    assert_eq!(current_of(err), Some(newer));
}

/// `PaymentIs` holds on the payment, HELD or PAID.
pub async fn payment_is_matches_the_payment_whatever_the_status(f: &dyn RecordsFixture) {
    let (s, t0) = (f.records(), f.now_ms());
    s.put(held("x", "P1", t0), Condition::NotExists)
        .await
        .unwrap();
    let paid = s
        .mark_paid(&cand("x"), &pay("P1"), ConfirmPath::Webhook, t0 + 10)
        .await
        .unwrap();
    let err = s
        .delete(&cand("x"), Condition::PaymentIs(pay("P2")))
        .await
        .unwrap_err();
    assert_eq!(current_of(err), Some(paid.clone()));
    let err = s
        .put(paid.clone(), Condition::PaymentIs(pay("P2")))
        .await
        .unwrap_err();
    assert_eq!(current_of(err), Some(paid.clone()));
    assert_eq!(
        s.delete(&cand("x"), Condition::PaymentIs(pay("P1")))
            .await
            .unwrap(),
        paid
    );
    assert_eq!(s.get(&cand("x"), true).await.unwrap(), None);
}

/// HELD→PAID sets the payment details and removes the TTL; only the first
/// confirm path wins, the others see the PAID record; the stream's MODIFY
/// shows the TTL going.
pub async fn held_to_paid_removes_the_ttl_and_only_the_first_path_wins(f: &dyn RecordsFixture) {
    let (s, t0) = (f.records(), f.now_ms());
    let r = held("x", "P1", t0);
    assert!(r.expires_at_s.is_some());
    s.put(r.clone(), Condition::NotExists).await.unwrap();

    let err = s
        .mark_paid(&cand("x"), &pay("P2"), ConfirmPath::Callback, t0 + 1)
        .await
        .unwrap_err();
    assert_eq!(current_of(err), Some(r.clone()), "another payment: no");

    let paid = s
        .mark_paid(&cand("x"), &pay("P1"), ConfirmPath::Callback, t0 + 2)
        .await
        .unwrap();
    assert_eq!(paid.status, RecordStatus::Paid);
    assert_eq!(paid.expires_at_s, None, "the TTL attribute is removed");
    assert_eq!(paid.paid_ms, Some(t0 + 2));
    assert_eq!(paid.paid_by, Some(ConfirmPath::Callback));
    assert_eq!(
        paid,
        r.clone().into_paid(ConfirmPath::Callback, t0 + 2),
        "nothing else changed"
    );
    assert_eq!(s.get(&cand("x"), true).await.unwrap(), Some(paid.clone()));

    // the webhook and the reconciler arrive later: they lose and see PAID
    for path in [ConfirmPath::Webhook, ConfirmPath::Reconciler] {
        let err = s
            .mark_paid(&cand("x"), &pay("P1"), path, t0 + 3)
            .await
            .unwrap_err();
        assert_eq!(current_of(err), Some(paid.clone()));
    }
    let stream = read_n(f.stream(), 0, 2).await;
    assert_eq!(stream.len(), 2, "insert and modify: {stream:?}");
    let modify = &stream[1];
    assert_eq!(modify.kind, StreamKind::Modify);
    assert_eq!(modify.old.as_ref(), Some(&r));
    assert_eq!(modify.new.as_ref(), Some(&paid));
    assert_nothing_after(f.stream(), 2, Duration::ZERO).await;
}

/// A PAID record with a TTL is refused (`Invalid`) before any write; the
/// callback's PAID-from-copy write, done right, is accepted.
pub async fn a_paid_write_carrying_a_ttl_is_refused_and_changes_nothing(f: &dyn RecordsFixture) {
    let (s, t0) = (f.records(), f.now_ms());
    let bad = BookingRecord {
        expires_at_s: Some(t0 / 1_000 + 600),
        ..held("x", "P1", t0).into_paid(ConfirmPath::Callback, t0)
    };
    match s.put(bad.clone(), Condition::NotExists).await {
        Err(RecordError::Invalid(why)) => assert!(why.contains("TTL"), "{why}"),
        other => panic!("expected Invalid, got {other:?}"),
    }
    s.put(held("y", "P2", t0), Condition::NotExists)
        .await
        .unwrap();
    assert!(matches!(
        s.replace(
            BookingRecord {
                candidate: cand("y"),
                ..bad
            },
            Condition::PaymentIs(pay("P2"))
        )
        .await,
        Err(RecordError::Invalid(_))
    ));
    assert_eq!(s.get(&cand("x"), true).await.unwrap(), None);
    assert_eq!(
        s.get(&cand("y"), true).await.unwrap().unwrap().status,
        RecordStatus::Held
    );
    let stream = read_n(f.stream(), 0, 1).await;
    assert_eq!(stream.len(), 1, "only y's insert");
    assert_nothing_after(f.stream(), 1, Duration::ZERO).await;

    let from_copy = held("x", "P1", t0).into_paid(ConfirmPath::Callback, t0 + 5);
    s.put(from_copy.clone(), Condition::NotExists)
        .await
        .unwrap();
    assert_eq!(s.get(&cand("x"), true).await.unwrap(), Some(from_copy));
}

/// The guarded delete: `NotExists` refused, the wrong status or payment
/// fails with the record, the right one returns what it deleted, a second
/// finds nothing; a PAID record is never taken by the reconciler's delete.
pub async fn delete_is_conditional_and_returns_what_it_deleted(f: &dyn RecordsFixture) {
    let (s, t0) = (f.records(), f.now_ms());
    let r = held("x", "P1", t0);
    s.put(r.clone(), Condition::NotExists).await.unwrap();
    assert!(matches!(
        s.delete(&cand("x"), Condition::NotExists).await,
        Err(RecordError::Invalid(_))
    ));
    for wrong in [
        Condition::StatusIsWithPayment(RecordStatus::Held, pay("P2")),
        Condition::StatusIsWithPayment(RecordStatus::Paid, pay("P1")),
    ] {
        let err = s.delete(&cand("x"), wrong).await.unwrap_err();
        assert_eq!(current_of(err), Some(r.clone()));
    }
    let release = Condition::StatusIsWithPayment(RecordStatus::Held, pay("P1"));
    let deleted = s.delete(&cand("x"), release.clone()).await.unwrap();
    assert_eq!(deleted, r);
    assert_eq!(s.get(&cand("x"), true).await.unwrap(), None);
    let gone = s.delete(&cand("x"), release).await.unwrap_err();
    assert_eq!(current_of(gone), None, "the second delete finds nothing");
    // and the worker does not resurrect it
    assert_eq!(
        classify_conflict(&r, Some(&r), &s.get(&cand("x"), true).await),
        WorkerVerdict::Released
    );

    s.put(held("y", "P2", t0), Condition::NotExists)
        .await
        .unwrap();
    let paid = s
        .mark_paid(&cand("y"), &pay("P2"), ConfirmPath::Webhook, t0)
        .await
        .unwrap();
    let err = s
        .delete(
            &cand("y"),
            Condition::StatusIsWithPayment(RecordStatus::Held, pay("P2")),
        )
        .await
        .unwrap_err();
    assert_eq!(current_of(err), Some(paid));
}

/// The reconciler's updates on a hold: failed queries counted and cleared
/// under the payment, an extension moves deadline and TTL, counts itself and
/// clears the failures; none of them touch a PAID record.
pub async fn extend_moves_deadline_and_ttl_and_counts_while_held(f: &dyn RecordsFixture) {
    let (s, t0) = (f.records(), f.now_ms());
    let (x, p1) = (cand("x"), pay("P1"));
    let r = held("x", "P1", t0);
    s.put(r.clone(), Condition::NotExists).await.unwrap();
    let once = s.note_query_failure(&x, &p1).await.unwrap();
    let twice = s.note_query_failure(&x, &p1).await.unwrap();
    assert_eq!((once.query_failures, twice.query_failures), (1, 2));
    assert_eq!(
        twice,
        BookingRecord {
            query_failures: 2,
            ..r
        },
        "nothing else changed"
    );
    let cleared = s.clear_query_failures(&x, &p1).await.unwrap();
    assert_eq!(cleared.query_failures, 0);
    let err = s.clear_query_failures(&x, &pay("P2")).await.unwrap_err();
    assert_eq!(current_of(err), Some(cleared), "guarded by the payment");
    let err = s.note_query_failure(&x, &pay("P2")).await.unwrap_err();
    assert_eq!(current_of(err).unwrap().query_failures, 0);
    s.note_query_failure(&x, &p1).await.unwrap();
    assert_eq!(s.get(&x, true).await.unwrap().unwrap().query_failures, 1);

    let new_deadline = t0 + 2 * HOLD_MS + 1;
    let extended = s.extend(&x, &p1, new_deadline).await.unwrap();
    assert_eq!(extended.deadline_ms, new_deadline);
    assert_eq!(extended.expires_at_s, Some(new_deadline.div_ceil(1000)));
    assert_eq!(extended.extensions, 1);
    assert_eq!(
        extended.query_failures, 0,
        "an extension starts the count again"
    );
    assert_eq!(s.get(&x, true).await.unwrap(), Some(extended.clone()));

    let err = s.extend(&x, &pay("P2"), new_deadline).await.unwrap_err();
    assert_eq!(current_of(err), Some(extended.clone()));

    let paid = s
        .mark_paid(&x, &p1, ConfirmPath::Reconciler, t0)
        .await
        .unwrap();
    let err = s.extend(&x, &p1, new_deadline + 1).await.unwrap_err();
    assert_eq!(
        current_of(err),
        Some(paid.clone()),
        "a paid hold is not extended"
    );
    let err = s.note_query_failure(&x, &p1).await.unwrap_err();
    assert_eq!(current_of(err), Some(paid.clone()));
    let err = s.clear_query_failures(&x, &p1).await.unwrap_err();
    assert_eq!(current_of(err), Some(paid));
}

/// An extension to before the record's creation breaks an invariant: a
/// programmer error (`Invalid`), not a lost race; with another payment the
/// condition decides first.
pub async fn an_extension_before_the_creation_is_invalid_not_a_lost_race(f: &dyn RecordsFixture) {
    let (s, t0) = (f.records(), f.now_ms());
    let r = held("x", "P1", t0);
    s.put(r.clone(), Condition::NotExists).await.unwrap();
    assert!(matches!(
        s.extend(&cand("x"), &pay("P1"), t0 - 1).await,
        Err(RecordError::Invalid(_))
    ));
    assert!(matches!(
        s.extend(&cand("x"), &pay("P9"), t0 - 1).await,
        Err(RecordError::ConditionFailed { .. })
    ));
    assert_eq!(s.get(&cand("x"), true).await.unwrap(), Some(r));
    let stream = read_n(f.stream(), 0, 1).await;
    assert_eq!(stream.len(), 1);
    assert_nothing_after(f.stream(), 1, Duration::ZERO).await;
}

/// The email latch: refused on a hold, opens once on the PAID record.
pub async fn the_email_latch_opens_once_and_only_on_a_paid_record(f: &dyn RecordsFixture) {
    let (s, t0) = (f.records(), f.now_ms());
    s.put(held("x", "P1", t0), Condition::NotExists)
        .await
        .unwrap();
    let err = s.mark_emailed(&cand("x"), &pay("P1")).await.unwrap_err();
    assert_eq!(current_of(err).unwrap().status, RecordStatus::Held);
    let paid = s
        .mark_paid(&cand("x"), &pay("P1"), ConfirmPath::Callback, t0)
        .await
        .unwrap();
    let err = s.mark_emailed(&cand("x"), &pay("P2")).await.unwrap_err();
    assert_eq!(current_of(err), Some(paid.clone()), "another payment: no");
    let emailed = s.mark_emailed(&cand("x"), &pay("P1")).await.unwrap();
    assert_eq!(
        emailed,
        BookingRecord {
            email_sent: true,
            ..paid
        }
    );
    let err = s.mark_emailed(&cand("x"), &pay("P1")).await.unwrap_err();
    assert_eq!(
        current_of(err),
        Some(emailed.clone()),
        "a second email is refused"
    );
    assert_eq!(s.get(&cand("x"), true).await.unwrap(), Some(emailed));
}

/// The payment index finds a booking by its payment, HELD or PAID, and
/// forgets a payment its record no longer carries (replaced or deleted).
pub async fn the_payment_index_finds_the_booking_and_forgets_replaced_payments(
    f: &dyn RecordsFixture,
) {
    let (s, t0) = (f.records(), f.now_ms());
    s.put(held("x", "P1", t0), Condition::NotExists)
        .await
        .unwrap();
    let y = held("y", "P2", t0);
    s.put(y.clone(), Condition::NotExists).await.unwrap();
    f.settle().await;
    assert_eq!(s.by_payment(&pay("P2")).await.unwrap(), Some(y));
    assert_eq!(s.by_payment(&pay("P9")).await.unwrap(), None);

    s.replace(
        held("x", "P3", t0 + 1),
        Condition::StatusIsWithPayment(RecordStatus::Held, pay("P1")),
    )
    .await
    .unwrap();
    f.settle().await;
    assert_eq!(s.by_payment(&pay("P1")).await.unwrap(), None);
    assert_eq!(
        s.by_payment(&pay("P3")).await.unwrap().unwrap().candidate,
        cand("x")
    );
    let paid = s
        .mark_paid(&cand("x"), &pay("P3"), ConfirmPath::Callback, t0)
        .await
        .unwrap();
    f.settle().await;
    assert_eq!(s.by_payment(&pay("P3")).await.unwrap(), Some(paid));

    s.delete(&cand("y"), Condition::PaymentIs(pay("P2")))
        .await
        .unwrap();
    f.settle().await;
    assert_eq!(s.by_payment(&pay("P2")).await.unwrap(), None);
}

/// `held_due`: HELD records due strictly before the bound, most overdue
/// first (ties by candidate), at most `limit`; PAID and deleted ones never.
pub async fn held_due_is_most_overdue_first_limited_and_held_only(f: &dyn RecordsFixture) {
    let (s, t0) = (f.records(), f.now_ms());
    // deadlines t0+HOLD+{30,10,20,40,10}: b and e tie
    for (c, p, offset) in [
        ("a", "P1", 30),
        ("b", "P2", 10),
        ("c", "P3", 20),
        ("d", "P4", 40),
        ("e", "P5", 10),
        ("f", "P6", 5),
    ] {
        s.put(held(c, p, t0 + offset), Condition::NotExists)
            .await
            .unwrap();
    }
    s.mark_paid(&cand("c"), &pay("P3"), ConfirmPath::Callback, t0)
        .await
        .unwrap();
    s.delete(&cand("f"), Condition::PaymentIs(pay("P6")))
        .await
        .unwrap();
    f.settle().await;

    let mut tied = vec![cand("b"), cand("e")];
    tied.sort();
    let candidates =
        |rs: Vec<BookingRecord>| rs.into_iter().map(|r| r.candidate).collect::<Vec<_>>();

    let before = t0 + HOLD_MS + 40; // strictly before: d (at +40) is not due
    let due = candidates(s.held_due(before, 10).await.unwrap());
    assert_eq!(
        due,
        [tied.clone(), vec![cand("a")]].concat(),
        "paid c, deleted f and not-yet-due d left out"
    );
    assert_eq!(
        candidates(s.held_due(u64::MAX, 2).await.unwrap()),
        tied,
        "the limit keeps the most overdue"
    );
    let every = s.held_due(u64::MAX, 10).await.unwrap();
    assert_eq!(every.len(), 4);
    assert!(every.iter().all(|r| r.status == RecordStatus::Held));
    assert!(
        every
            .windows(2)
            .all(|w| w[0].deadline_ms <= w[1].deadline_ms)
    );
    assert!(s.held_due(t0 + HOLD_MS + 10, 10).await.unwrap().is_empty());
    assert!(s.held_due(u64::MAX, 0).await.unwrap().is_empty());

    // an extension moves a hold back in the order
    s.extend(&cand("b"), &pay("P2"), t0 + 2 * HOLD_MS)
        .await
        .unwrap();
    f.settle().await;
    let due = candidates(s.held_due(before, 10).await.unwrap());
    assert_eq!(due, vec![cand("e"), cand("a")]);
}

/// `owed_emails`: PAID records whose email was not sent, paid strictly
/// before the bound, oldest paid first (ties by candidate), at most `limit`;
/// HELD, emailed, deleted and replaced-by-a-hold ones never.
pub async fn owed_emails_lists_paid_records_whose_email_is_owed(f: &dyn RecordsFixture) {
    let (s, t0) = (f.records(), f.now_ms());
    for (c, p) in [
        ("a", "P1"),
        ("b", "P2"),
        ("c", "P3"),
        ("d", "P4"),
        ("e", "P5"),
        ("f", "P6"),
    ] {
        s.put(held(c, p, t0), Condition::NotExists).await.unwrap();
    }
    f.settle().await;
    assert!(
        s.owed_emails(u64::MAX, 10).await.unwrap().is_empty(),
        "a hold owes no email"
    );

    // paid at t0+{30,10,20,40,10}: b and e tie; f stays HELD
    for (c, p, offset) in [
        ("a", "P1", 30),
        ("b", "P2", 10),
        ("c", "P3", 20),
        ("d", "P4", 40),
        ("e", "P5", 10),
    ] {
        s.mark_paid(&cand(c), &pay(p), ConfirmPath::Callback, t0 + offset)
            .await
            .unwrap();
    }
    f.settle().await;

    let mut tied = vec![cand("b"), cand("e")];
    tied.sort();
    let candidates =
        |rs: Vec<BookingRecord>| rs.into_iter().map(|r| r.candidate).collect::<Vec<_>>();
    let owed = |before: u64, limit: usize| async move {
        candidates(s.owed_emails(before, limit).await.unwrap())
    };

    assert_eq!(
        owed(t0 + 41, 10).await,
        [tied.clone(), vec![cand("c"), cand("a"), cand("d")]].concat(),
        "oldest paid first, the hold f left out"
    );
    assert_eq!(
        owed(t0 + 40, 10).await,
        [tied.clone(), vec![cand("c"), cand("a")]].concat(),
        "strictly before: d, paid at the bound, is not listed"
    );
    assert_eq!(owed(t0 + 11, 10).await, tied);
    assert!(owed(t0 + 10, 10).await.is_empty(), "paid at the bound");
    assert_eq!(owed(u64::MAX, 2).await, tied, "the limit keeps the oldest");
    assert_eq!(
        owed(u64::MAX, 3).await,
        [tied.clone(), vec![cand("c")]].concat()
    );
    assert!(owed(u64::MAX, 0).await.is_empty());
    // the records as they are
    for r in s.owed_emails(u64::MAX, 10).await.unwrap() {
        assert_eq!(r.status, RecordStatus::Paid);
        assert!(!r.email_sent);
        assert_eq!(s.get(&r.candidate, true).await.unwrap(), Some(r));
    }

    // emailed: no longer owed; deleted: neither
    s.mark_emailed(&cand("c"), &pay("P3")).await.unwrap();
    s.delete(&cand("a"), Condition::PaymentIs(pay("P1")))
        .await
        .unwrap();
    // a PAID record put whole (the callback's PAID-from-copy) is owed; one
    // replaced by a hold is not
    s.put(
        held("g", "P7", t0).into_paid(ConfirmPath::Webhook, t0 + 5),
        Condition::NotExists,
    )
    .await
    .unwrap();
    s.replace(held("d", "P8", t0 + 50), Condition::PaymentIs(pay("P4")))
        .await
        .unwrap();
    f.settle().await;
    assert_eq!(
        owed(u64::MAX, 10).await,
        [vec![cand("g")], tied].concat(),
        "emailed c, deleted a and replaced d left out"
    );
}

/// The audit's scan: every record, HELD and PAID, in candidate order, none
/// deleted.
pub async fn scan_all_is_every_record_in_candidate_order(f: &dyn RecordsFixture) {
    let (s, t0) = (f.records(), f.now_ms());
    let mut written = Vec::new();
    for i in 0..25u64 {
        let r = held(&format!("c{i}"), &format!("P{i}"), t0 + i);
        s.put(r.clone(), Condition::NotExists).await.unwrap();
        written.push(r);
    }
    let paid = s
        .mark_paid(&cand("c3"), &pay("P3"), ConfirmPath::Webhook, t0 + 100)
        .await
        .unwrap();
    written[3] = paid;
    s.delete(&cand("c7"), Condition::PaymentIs(pay("P7")))
        .await
        .unwrap();
    written.remove(7);
    written.sort_by(|a, b| a.candidate.cmp(&b.candidate));

    let scanned = s.scan_all().await.unwrap();
    assert_eq!(scanned, written);
}

/// The worker's conflict path end to end: a candidate books, is released,
/// books again, and the FIRST booking's message is delivered again.
pub async fn a_redelivered_old_message_neither_overwrites_nor_resurrects(f: &dyn RecordsFixture) {
    let (s, t0) = (f.records(), f.now_ms());
    let first = held("x", "P1", t0);
    let second = held("x", "P2", t0 + 120_000);
    s.put(first.clone(), Condition::NotExists).await.unwrap();
    // released by the reconciler, then booked again
    s.delete(
        &cand("x"),
        Condition::StatusIsWithPayment(RecordStatus::Held, pay("P1")),
    )
    .await
    .unwrap();
    s.put(second.clone(), Condition::NotExists).await.unwrap();

    // the old message comes back
    let blocked_by = current_of(
        s.put(first.clone(), Condition::NotExists)
            .await
            .unwrap_err(),
    );
    let read = s.get(&cand("x"), true).await;
    assert_eq!(
        classify_conflict(&first, blocked_by.as_ref(), &read),
        WorkerVerdict::Stale
    );
    assert_eq!(s.get(&cand("x"), true).await.unwrap(), Some(second.clone()));

    // the second booking's own message comes back: a duplicate
    let blocked_by = current_of(
        s.put(second.clone(), Condition::NotExists)
            .await
            .unwrap_err(),
    );
    let read = s.get(&cand("x"), true).await;
    assert_eq!(
        classify_conflict(&second, blocked_by.as_ref(), &read),
        WorkerVerdict::Duplicate
    );

    // the second is released between the worker's put and its read
    let blocked_by = current_of(
        s.put(second.clone(), Condition::NotExists)
            .await
            .unwrap_err(),
    );
    s.delete(
        &cand("x"),
        Condition::StatusIsWithPayment(RecordStatus::Held, pay("P2")),
    )
    .await
    .unwrap();
    let read = s.get(&cand("x"), true).await;
    assert_eq!(
        classify_conflict(&second, blocked_by.as_ref(), &read),
        WorkerVerdict::Released
    );
    assert_eq!(
        s.get(&cand("x"), true).await.unwrap(),
        None,
        "not resurrected"
    );
}

/// The article's QA bug: a stale record hid the new payment, so the new
/// booking could never be marked paid. Replacing it under the old payment
/// fixes it.
pub async fn a_stale_record_is_replaced_so_the_new_payment_can_be_marked_paid(
    f: &dyn RecordsFixture,
) {
    let (s, t0) = (f.records(), f.now_ms());
    let stale = held("x", "P1", t0);
    let fresh = held("x", "P2", t0 + 120_000);
    s.put(stale, Condition::NotExists).await.unwrap();
    let blocked_by = current_of(
        s.put(fresh.clone(), Condition::NotExists)
            .await
            .unwrap_err(),
    );
    let read = s.get(&cand("x"), true).await;
    let WorkerVerdict::ReplaceStale { condition } =
        classify_conflict(&fresh, blocked_by.as_ref(), &read)
    else {
        panic!("expected ReplaceStale");
    };
    s.replace(fresh, condition).await.unwrap();
    let paid = s
        .mark_paid(&cand("x"), &pay("P2"), ConfirmPath::Callback, t0 + 130_000)
        .await
        .unwrap();
    assert_eq!(paid.payment_id, pay("P2"));
    assert_eq!(paid.expires_at_s, None);
    f.settle().await;
    assert_eq!(s.by_payment(&pay("P2")).await.unwrap(), Some(paid));
    assert_eq!(s.by_payment(&pay("P1")).await.unwrap(), None);
}

/// The TTL service deletes a hold whose TTL passed, and only that: not a
/// hold still running, not a PAID record (no TTL), not twice.
pub async fn the_ttl_service_deletes_expired_holds_only(f: &dyn RecordsFixture) {
    let (s, t0) = (f.records(), f.now_ms());
    // due twenty minutes ago; due in ten minutes; paid, once due long ago
    let expired = held("a", "P1", t0 - 3 * HOLD_MS);
    let running = held("b", "P2", t0);
    s.put(expired.clone(), Condition::NotExists).await.unwrap();
    s.put(running.clone(), Condition::NotExists).await.unwrap();
    s.put(held("c", "P3", t0 - 3 * HOLD_MS), Condition::NotExists)
        .await
        .unwrap();
    let paid = s
        .mark_paid(&cand("c"), &pay("P3"), ConfirmPath::Callback, t0)
        .await
        .unwrap();

    f.run_ttl_service().await;
    assert_eq!(s.get(&cand("a"), true).await.unwrap(), None);
    assert_eq!(
        s.get(&cand("b"), true).await.unwrap(),
        Some(running.clone())
    );
    assert_eq!(s.get(&cand("c"), true).await.unwrap(), Some(paid.clone()));
    f.run_ttl_service().await;
    assert_eq!(
        s.scan_all().await.unwrap(),
        {
            let mut kept = vec![running, paid];
            kept.sort_by(|a, b| a.candidate.cmp(&b.candidate));
            kept
        },
        "nothing else, nothing twice"
    );
    let removals: Vec<StreamRecord> = read_n(f.stream(), 0, 5)
        .await
        .into_iter()
        .filter(|r| r.kind == StreamKind::Remove)
        .collect();
    assert_eq!(removals.len(), 1, "{removals:?}");
    assert_eq!(removals[0].old.as_ref(), Some(&expired));
    assert!(removals[0].is_ttl_removal());
}

/// Without a configured rate nothing is throttled, and every write lands.
pub async fn no_throttles_without_a_configured_rate(f: &dyn RecordsFixture) {
    let (s, t0) = (f.records(), f.now_ms());
    for i in 0..100 {
        s.put(
            held(&format!("c{i}"), &format!("P{i}"), t0),
            Condition::NotExists,
        )
        .await
        .unwrap();
    }
    assert_eq!(s.scan_all().await.unwrap().len(), 100);
    assert_eq!(s.throttles().await.unwrap().total(), 0);
}

/// The ops reset's clear: `delete_sale` deletes every record of the sale,
/// HELD and PAID, with their index entries (payment, due holds, owed
/// emails), leaves another sale's records alone, and shows each deletion on
/// the stream as an application REMOVE (no TTL identity: the expiry handler
/// must not release a seat for it). A second call finds nothing.
pub async fn delete_sale_removes_that_sales_records_and_nothing_else(f: &dyn RecordsFixture) {
    let (s, t0) = (f.records(), f.now_ms());
    let launch = SaleId::parse("launch").unwrap();
    let encore = SaleId::parse("encore").unwrap();
    let of_encore = |r: BookingRecord| BookingRecord {
        sale: encore.clone(),
        ..r
    };
    // launch: a due hold, a PAID record whose email is owed, a PAID one
    // emailed; encore: a due hold and a PAID record whose email is owed
    let past = t0 - 3 * HOLD_MS;
    s.put(held_for("a", "P1", past, HOLD_MS), Condition::NotExists)
        .await
        .unwrap();
    s.put(held("b", "P2", t0), Condition::NotExists)
        .await
        .unwrap();
    s.mark_paid(&cand("b"), &pay("P2"), ConfirmPath::Webhook, t0 + 1)
        .await
        .unwrap();
    s.put(held("c", "P3", t0), Condition::NotExists)
        .await
        .unwrap();
    s.mark_paid(&cand("c"), &pay("P3"), ConfirmPath::Callback, t0 + 2)
        .await
        .unwrap();
    s.mark_emailed(&cand("c"), &pay("P3")).await.unwrap();
    let d = of_encore(held_for("d", "P4", past, HOLD_MS));
    s.put(d.clone(), Condition::NotExists).await.unwrap();
    s.put(of_encore(held("e", "P5", t0)), Condition::NotExists)
        .await
        .unwrap();
    let e = s
        .mark_paid(&cand("e"), &pay("P5"), ConfirmPath::Webhook, t0 + 3)
        .await
        .unwrap();
    let written = read_n(f.stream(), 0, 9).await;
    assert!(written.len() >= 9, "nine writes on the stream: {written:?}");
    let position = written.last().unwrap().sequence;

    assert_eq!(s.delete_sale(&launch).await.unwrap(), 3, "a, b and c");
    f.settle().await;
    let mut left = vec![d.clone(), e.clone()];
    left.sort_by(|x, y| x.candidate.cmp(&y.candidate));
    assert_eq!(s.scan_all().await.unwrap(), left, "encore's records stay");
    for c in ["a", "b", "c"] {
        assert_eq!(s.get(&cand(c), true).await.unwrap(), None, "{c}");
    }
    for p in ["P1", "P2", "P3"] {
        assert_eq!(s.by_payment(&pay(p)).await.unwrap(), None, "{p} forgotten");
    }
    assert_eq!(s.by_payment(&pay("P5")).await.unwrap(), Some(e.clone()));
    assert_eq!(
        s.held_due(u64::MAX, 10).await.unwrap(),
        vec![d],
        "launch's due hold is gone"
    );
    assert_eq!(
        s.owed_emails(u64::MAX, 10).await.unwrap(),
        vec![e],
        "launch's owed email is gone"
    );

    let removals = read_n(f.stream(), position, 3).await;
    assert_eq!(removals.len(), 3, "one REMOVE per record: {removals:?}");
    let mut gone: Vec<CandidateHash> = Vec::new();
    for r in &removals {
        assert_eq!(r.kind, StreamKind::Remove);
        assert!(
            !r.is_ttl_removal() && r.user_identity.is_none(),
            "an application delete, not the TTL service's: {r:?}"
        );
        let old = r.old.as_ref().unwrap();
        assert_eq!(old.sale, launch);
        gone.push(old.candidate.clone());
    }
    gone.sort();
    let mut want = vec![cand("a"), cand("b"), cand("c")];
    want.sort();
    assert_eq!(gone, want);

    assert_eq!(s.delete_sale(&launch).await.unwrap(), 0, "nothing left");
}
