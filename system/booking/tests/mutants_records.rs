//! The booking record's own decisions (due holds, owed emails, invariants,
//! query orders), the worker's conflict boundary, and the record store's
//! default methods, run against a tiny in-test store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use async_trait::async_trait;
use parking_lot::Mutex;

use booking::records::{sort_by_deadline, sort_by_paid};
use booking::{
    BookingRecord, CandidateHash, Condition, ConfirmPath, Level, PaymentId, RecordError,
    RecordStatus, RecordStore, SaleId, StreamKind, StreamRecord, Throttles, UserIdentity,
    WorkerVerdict, classify_conflict,
};

fn held(candidate: &str, sale: &str, payment: &str, created_ms: u64) -> BookingRecord {
    BookingRecord::held(
        CandidateHash::of(candidate),
        SaleId::parse(sale).unwrap(),
        Level::parse("gold").unwrap(),
        PaymentId::parse(payment).unwrap(),
        created_ms,
        created_ms + 600_000,
    )
}

fn with_deadline(candidate: &str, deadline_ms: u64) -> BookingRecord {
    BookingRecord::held(
        CandidateHash::of(candidate),
        SaleId::parse("launch").unwrap(),
        Level::parse("gold").unwrap(),
        PaymentId::parse("P1").unwrap(),
        0,
        deadline_ms,
    )
}

#[test]
fn a_hold_is_due_only_strictly_before_the_cut_and_only_while_held() {
    let r = with_deadline("c", 1_000);
    assert!(r.is_held_due(1_001));
    assert!(
        !r.is_held_due(1_000),
        "a deadline at the cut is not before it"
    );
    assert!(!r.is_held_due(999));
    let paid = r.into_paid(ConfirmPath::Webhook, 500);
    assert!(!paid.is_held_due(1_001), "a paid booking is never due");
    assert!(!paid.is_held_due(u64::MAX));
}

#[test]
fn an_email_is_owed_by_a_paid_unemailed_booking_paid_strictly_before_the_cut() {
    let paid = with_deadline("c", 10_000).into_paid(ConfirmPath::Callback, 2_000);
    assert!(paid.owes_email(2_001));
    assert!(!paid.owes_email(2_000), "paid at the cut is not before it");
    assert!(!paid.owes_email(1_999));
    let emailed = BookingRecord {
        email_sent: true,
        ..paid.clone()
    };
    assert!(!emailed.owes_email(2_001), "already sent");
    let held = with_deadline("c", 10_000);
    assert!(!held.owes_email(u64::MAX), "a hold owes no email");
    // a PAID record without a paid time (broken) owes nothing the sweep can date
    let undated = BookingRecord {
        paid_ms: None,
        ..paid
    };
    assert!(!undated.owes_email(u64::MAX));
}

#[test]
fn a_paid_record_needs_both_its_paid_time_and_its_path() {
    let paid = held("c", "launch", "P1", 1_000).into_paid(ConfirmPath::Reconciler, 1_500);
    paid.check().unwrap();
    let no_time = BookingRecord {
        paid_ms: None,
        ..paid.clone()
    };
    assert!(no_time.check().unwrap_err().contains("paid_ms/paid_by"));
    let no_path = BookingRecord {
        paid_by: None,
        ..paid.clone()
    };
    assert!(no_path.check().unwrap_err().contains("paid_ms/paid_by"));
}

#[test]
fn a_held_record_with_any_one_payment_detail_is_refused() {
    let h = held("c", "launch", "P1", 1_000);
    h.check().unwrap();
    for bad in [
        BookingRecord {
            paid_ms: Some(1_500),
            ..h.clone()
        },
        BookingRecord {
            paid_by: Some(ConfirmPath::Callback),
            ..h.clone()
        },
        BookingRecord {
            email_sent: true,
            ..h.clone()
        },
    ] {
        assert!(
            bad.check().unwrap_err().contains("payment details"),
            "{bad:?}"
        );
    }
}

#[test]
fn a_deadline_may_equal_the_creation_but_never_precede_it() {
    let mut r = held("c", "launch", "P1", 1_000);
    r.deadline_ms = 1_000;
    r.check().unwrap();
    r.deadline_ms = 999;
    assert!(r.check().unwrap_err().contains("before creation"));
    let paid = BookingRecord {
        deadline_ms: 999,
        ..held("c", "launch", "P1", 1_000).into_paid(ConfirmPath::Callback, 1_001)
    };
    assert!(paid.check().unwrap_err().contains("before creation"));
}

#[test]
fn due_holds_are_listed_most_overdue_first_ties_by_candidate() {
    let mut rs = vec![
        with_deadline("b", 300),
        with_deadline("a", 100),
        with_deadline("z", 300),
        with_deadline("y", 200),
    ];
    sort_by_deadline(&mut rs);
    let deadlines: Vec<u64> = rs.iter().map(|r| r.deadline_ms).collect();
    assert_eq!(deadlines, vec![100, 200, 300, 300]);
    assert!(rs[2].candidate < rs[3].candidate, "ties by candidate");
    let mut reversed = rs.clone();
    reversed.reverse();
    sort_by_deadline(&mut reversed);
    assert_eq!(reversed, rs);
}

#[test]
fn owed_emails_are_listed_oldest_paid_first_ties_by_candidate() {
    let paid = |c: &str, at: u64| with_deadline(c, 10_000).into_paid(ConfirmPath::Callback, at);
    let mut rs = vec![paid("b", 30), paid("a", 10), paid("z", 30), paid("y", 20)];
    sort_by_paid(&mut rs);
    let times: Vec<Option<u64>> = rs.iter().map(|r| r.paid_ms).collect();
    assert_eq!(times, vec![Some(10), Some(20), Some(30), Some(30)]);
    assert!(rs[2].candidate < rs[3].candidate, "ties by candidate");
    let mut reversed = rs.clone();
    reversed.reverse();
    sort_by_paid(&mut reversed);
    assert_eq!(reversed, rs);
}

#[test]
fn throttles_total_reads_and_writes() {
    assert_eq!(Throttles::default().total(), 0);
    assert_eq!(
        Throttles {
            reads: 3,
            writes: 4
        }
        .total(),
        7
    );
    assert_eq!(
        Throttles {
            reads: 0,
            writes: 5
        }
        .total(),
        5
    );
}

#[test]
fn a_vanished_blocker_of_the_same_millisecond_with_another_payment_is_not_older() {
    let incoming = held("c", "launch", "P2", 1_000);
    let same_ms = held("c", "launch", "P1", 1_000);
    assert_eq!(
        classify_conflict(&incoming, Some(&same_ms), &Ok(None)),
        WorkerVerdict::Released,
        "only a strictly older blocker lets the booking be put again"
    );
    let older = held("c", "launch", "P1", 999);
    assert_eq!(
        classify_conflict(&incoming, Some(&older), &Ok(None)),
        WorkerVerdict::PutAgain
    );
}

#[test]
fn only_a_remove_by_the_ttl_service_is_a_ttl_removal() {
    let ttl = UserIdentity::ttl_service();
    assert!(ttl.is_ttl_service());
    for (type_, principal) in [
        ("User", "dynamodb.amazonaws.com"),
        ("Service", "lambda.amazonaws.com"),
        ("User", "someone"),
    ] {
        let other = UserIdentity {
            type_: type_.into(),
            principal_id: principal.into(),
        };
        assert!(!other.is_ttl_service(), "{other:?}");
    }
    let removal = StreamRecord {
        kind: StreamKind::Remove,
        old: Some(held("c", "launch", "P1", 1)),
        new: None,
        user_identity: Some(ttl.clone()),
        sequence: 7,
        at_ms: 9,
    };
    assert!(removal.is_ttl_removal());
    for kind in [StreamKind::Insert, StreamKind::Modify] {
        let not_a_removal = StreamRecord {
            kind,
            ..removal.clone()
        };
        assert!(!not_a_removal.is_ttl_removal(), "{kind:?}");
    }
    let by_the_app = StreamRecord {
        user_identity: None,
        ..removal
    };
    assert!(!by_the_app.is_ttl_removal());
}

/// A record store with only the required methods: `put` and `delete` check
/// their condition against the live records; `scan_all` answers a snapshot
/// that the test may make stale on purpose.
#[derive(Debug, Default)]
struct TinyStore {
    live: Mutex<BTreeMap<CandidateHash, BookingRecord>>,
    /// What `scan_all` returns; `None`: the live records.
    snapshot: Mutex<Option<Vec<BookingRecord>>>,
    puts: Mutex<Vec<(BookingRecord, Condition)>>,
    /// `delete` fails with this, once, if set.
    fail_delete: Mutex<Option<RecordError>>,
}

impl TinyStore {
    fn with(records: &[BookingRecord]) -> TinyStore {
        let store = TinyStore::default();
        for r in records {
            store.live.lock().insert(r.candidate.clone(), r.clone());
        }
        store
    }
    fn live(&self) -> Vec<BookingRecord> {
        self.live.lock().values().cloned().collect()
    }
}

fn unused<T>() -> Result<T, RecordError> {
    Err(RecordError::Unavailable("not in this fake".into()))
}

#[async_trait]
impl RecordStore for TinyStore {
    async fn put(&self, record: BookingRecord, condition: Condition) -> Result<(), RecordError> {
        let mut live = self.live.lock();
        let current = live.get(&record.candidate).cloned();
        if !condition.holds(current.as_ref()) {
            return Err(RecordError::condition_failed(current));
        }
        self.puts.lock().push((record.clone(), condition));
        live.insert(record.candidate.clone(), record);
        Ok(())
    }
    async fn mark_paid(
        &self,
        _: &CandidateHash,
        _: &PaymentId,
        _: ConfirmPath,
        _: u64,
    ) -> Result<BookingRecord, RecordError> {
        unused()
    }
    async fn mark_emailed(
        &self,
        _: &CandidateHash,
        _: &PaymentId,
    ) -> Result<BookingRecord, RecordError> {
        unused()
    }
    async fn extend(
        &self,
        _: &CandidateHash,
        _: &PaymentId,
        _: u64,
    ) -> Result<BookingRecord, RecordError> {
        unused()
    }
    async fn note_query_failure(
        &self,
        _: &CandidateHash,
        _: &PaymentId,
    ) -> Result<BookingRecord, RecordError> {
        unused()
    }
    async fn clear_query_failures(
        &self,
        _: &CandidateHash,
        _: &PaymentId,
    ) -> Result<BookingRecord, RecordError> {
        unused()
    }
    async fn delete(
        &self,
        candidate: &CandidateHash,
        condition: Condition,
    ) -> Result<BookingRecord, RecordError> {
        if let Some(e) = self.fail_delete.lock().take() {
            return Err(e);
        }
        let mut live = self.live.lock();
        let current = live.get(candidate).cloned();
        if condition == Condition::NotExists || !condition.holds(current.as_ref()) {
            return Err(RecordError::condition_failed(current));
        }
        Ok(live.remove(candidate).unwrap())
    }
    async fn get(
        &self,
        candidate: &CandidateHash,
        _: bool,
    ) -> Result<Option<BookingRecord>, RecordError> {
        Ok(self.live.lock().get(candidate).cloned())
    }
    async fn by_payment(&self, _: &PaymentId) -> Result<Option<BookingRecord>, RecordError> {
        unused()
    }
    async fn held_due(&self, _: u64, _: usize) -> Result<Vec<BookingRecord>, RecordError> {
        unused()
    }
    async fn owed_emails(&self, _: u64, _: usize) -> Result<Vec<BookingRecord>, RecordError> {
        unused()
    }
    async fn scan_all(&self) -> Result<Vec<BookingRecord>, RecordError> {
        Ok(self.snapshot.lock().clone().unwrap_or_else(|| self.live()))
    }
    async fn throttles(&self) -> Result<Throttles, RecordError> {
        Ok(Throttles::default())
    }
}

#[tokio::test]
async fn replace_overwrites_under_a_condition_on_the_existing_record() {
    let old = held("c", "launch", "P1", 1_000);
    let store = TinyStore::with(std::slice::from_ref(&old));
    let newer = held("c", "launch", "P2", 2_000);
    let condition = Condition::StatusIsWithPayment(RecordStatus::Held, old.payment_id.clone());
    store
        .replace(newer.clone(), condition.clone())
        .await
        .unwrap();
    assert_eq!(store.live(), vec![newer.clone()]);
    assert_eq!(*store.puts.lock(), vec![(newer.clone(), condition.clone())]);
    // the same condition again no longer holds: the store's answer comes back
    let err = store
        .replace(held("c", "launch", "P3", 3_000), condition)
        .await
        .unwrap_err();
    assert_eq!(err, RecordError::condition_failed(Some(newer.clone())));
    assert_eq!(store.live(), vec![newer]);
}

#[tokio::test]
async fn replace_refuses_not_exists_without_writing() {
    let store = TinyStore::default();
    let r = held("c", "launch", "P1", 1_000);
    let err = store.replace(r, Condition::NotExists).await.unwrap_err();
    assert!(matches!(err, RecordError::Invalid(_)), "{err:?}");
    assert!(store.live().is_empty(), "nothing written");
    assert!(store.puts.lock().is_empty());
}

#[tokio::test]
async fn delete_sale_deletes_that_sales_records_only_and_counts_them() {
    let records = [
        held("a", "launch", "P1", 1),
        held("b", "other", "P2", 2),
        held("c", "launch", "P3", 3).into_paid(ConfirmPath::Callback, 4),
        held("d", "launch", "P4", 5),
    ];
    let store = TinyStore::with(&records);
    let sale = SaleId::parse("launch").unwrap();
    assert_eq!(store.delete_sale(&sale).await.unwrap(), 3);
    assert_eq!(store.live(), vec![records[1].clone()]);
    assert_eq!(store.delete_sale(&sale).await.unwrap(), 0, "nothing left");
    assert_eq!(store.live(), vec![records[1].clone()]);
}

#[tokio::test]
async fn delete_sale_follows_a_record_whose_payment_changed_since_the_scan() {
    let scanned = held("a", "launch", "P1", 1);
    let rebooked = held("a", "launch", "P2", 2);
    let store = TinyStore::with(std::slice::from_ref(&rebooked));
    *store.snapshot.lock() = Some(vec![scanned]);
    let sale = SaleId::parse("launch").unwrap();
    assert_eq!(store.delete_sale(&sale).await.unwrap(), 1);
    assert!(store.live().is_empty(), "the rebooked record is gone too");
}

#[tokio::test]
async fn delete_sale_leaves_a_record_that_now_belongs_to_another_sale() {
    let scanned = held("a", "launch", "P1", 1);
    let moved = held("a", "other", "P2", 2);
    let store = TinyStore::with(std::slice::from_ref(&moved));
    *store.snapshot.lock() = Some(vec![scanned]);
    let sale = SaleId::parse("launch").unwrap();
    assert_eq!(store.delete_sale(&sale).await.unwrap(), 0);
    assert_eq!(store.live(), vec![moved]);
}

#[tokio::test]
async fn delete_sale_skips_a_record_deleted_since_the_scan() {
    let gone = held("a", "launch", "P1", 1);
    let kept = held("b", "launch", "P2", 2);
    let store = TinyStore::with(std::slice::from_ref(&kept));
    *store.snapshot.lock() = Some(vec![gone, kept]);
    let sale = SaleId::parse("launch").unwrap();
    assert_eq!(store.delete_sale(&sale).await.unwrap(), 1);
    assert!(store.live().is_empty());
}

#[tokio::test]
async fn delete_sale_stops_at_a_store_failure() {
    let store = TinyStore::with(&[held("a", "launch", "P1", 1)]);
    *store.fail_delete.lock() = Some(RecordError::Throttled);
    let sale = SaleId::parse("launch").unwrap();
    assert_eq!(store.delete_sale(&sale).await, Err(RecordError::Throttled));
    assert_eq!(store.live().len(), 1);
}
