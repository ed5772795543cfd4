//! The embedded record store against DynamoDB's semantics: conditional writes
//! and what they report, HELD→PAID, the GSI, the due-holds query, lagging
//! reads, TTL deletions on the stream, and throttling.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use booking::clock::ManualClock;
use booking::records::{
    BookingRecord, ChangeStream, Condition, ConfirmPath, RecordError, RecordStatus, RecordStore,
    StreamKind, Throttles, UserIdentity, WorkerVerdict, classify_conflict,
};
use booking::{CandidateHash, Level, PaymentId, SaleId};
use booking_embedded::records::{EmbeddedRecords, RecordsConfig};

const T0: u64 = 1_700_000_000_000;
const HOLD_MS: u64 = 600_000;

fn pay(s: &str) -> PaymentId {
    PaymentId::parse(s).unwrap()
}

fn cand(s: &str) -> CandidateHash {
    CandidateHash::of(s)
}

fn held(candidate: &str, payment: &str, created_ms: u64) -> BookingRecord {
    BookingRecord::held(
        cand(candidate),
        SaleId::parse("launch").unwrap(),
        Level::parse("gold").unwrap(),
        pay(payment),
        created_ms,
        created_ms + HOLD_MS,
    )
}

fn store_with(config: RecordsConfig) -> (EmbeddedRecords, ManualClock) {
    let clock = ManualClock::new(T0);
    (EmbeddedRecords::new(Arc::new(clock.clone()), config), clock)
}

fn store() -> (EmbeddedRecords, ManualClock) {
    store_with(RecordsConfig::default())
}

fn current_of(err: RecordError) -> Option<BookingRecord> {
    match err {
        RecordError::ConditionFailed { current } => current.map(|b| *b),
        other => panic!("expected ConditionFailed, got {other:?}"),
    }
}

async fn everything(s: &EmbeddedRecords) -> Vec<booking::records::StreamRecord> {
    s.read(0, 10_000, Duration::ZERO).await.unwrap()
}

#[tokio::test]
async fn a_second_put_if_absent_fails_and_reports_the_record_in_the_way() {
    let (s, _) = store();
    let first = held("x", "P1", T0);
    s.put(first.clone(), Condition::NotExists).await.unwrap();
    let err = s
        .put(held("x", "P2", T0 + 5), Condition::NotExists)
        .await
        .unwrap_err();
    assert_eq!(current_of(err), Some(first.clone()));
    assert_eq!(
        s.get(&cand("x"), true).await.unwrap(),
        Some(first),
        "a failed condition changes nothing"
    );
}

#[tokio::test]
async fn conditions_on_a_missing_record_fail_with_no_current() {
    let (s, _) = store();
    let r = held("x", "P1", T0);
    for condition in [
        Condition::PaymentIs(pay("P1")),
        Condition::StatusIsWithPayment(RecordStatus::Held, pay("P1")),
    ] {
        let err = s.put(r.clone(), condition.clone()).await.unwrap_err();
        assert_eq!(current_of(err), None, "{condition:?}");
        let err = s.delete(&cand("x"), condition).await.unwrap_err();
        assert_eq!(current_of(err), None);
    }
    let err = s
        .mark_paid(&cand("x"), &pay("P1"), ConfirmPath::Callback, T0)
        .await
        .unwrap_err();
    assert_eq!(current_of(err), None);
    assert!(s.scan_all().await.unwrap().is_empty());
}

#[tokio::test]
async fn replace_is_conditioned_on_the_old_payment() {
    let (s, _) = store();
    let stale = held("x", "P1", T0);
    s.put(stale.clone(), Condition::NotExists).await.unwrap();
    let newer = held("x", "P2", T0 + 60_000);

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
            held("x", "P3", T0 + 1),
            Condition::StatusIsWithPayment(RecordStatus::Held, pay("P1")),
        )
        .await
        .unwrap_err();
    assert_eq!(current_of(err), Some(newer));
}

#[tokio::test]
async fn payment_is_matches_the_payment_whatever_the_status() {
    let (s, _) = store();
    s.put(held("x", "P1", T0), Condition::NotExists)
        .await
        .unwrap();
    let paid = s
        .mark_paid(&cand("x"), &pay("P1"), ConfirmPath::Webhook, T0 + 10)
        .await
        .unwrap();
    let err = s
        .delete(&cand("x"), Condition::PaymentIs(pay("P2")))
        .await
        .unwrap_err();
    assert_eq!(current_of(err), Some(paid.clone()));
    assert_eq!(
        s.delete(&cand("x"), Condition::PaymentIs(pay("P1")))
            .await
            .unwrap(),
        paid
    );
}

#[tokio::test]
async fn held_to_paid_removes_the_ttl_and_only_the_first_path_wins() {
    let (s, _) = store();
    let r = held("x", "P1", T0);
    assert!(r.expires_at_s.is_some());
    s.put(r.clone(), Condition::NotExists).await.unwrap();

    let err = s
        .mark_paid(&cand("x"), &pay("P2"), ConfirmPath::Callback, T0 + 1)
        .await
        .unwrap_err();
    assert_eq!(current_of(err), Some(r.clone()), "another payment: no");

    let paid = s
        .mark_paid(&cand("x"), &pay("P1"), ConfirmPath::Callback, T0 + 2)
        .await
        .unwrap();
    assert_eq!(paid.status, RecordStatus::Paid);
    assert_eq!(paid.expires_at_s, None, "the TTL attribute is removed");
    assert_eq!(paid.paid_ms, Some(T0 + 2));
    assert_eq!(paid.paid_by, Some(ConfirmPath::Callback));
    assert_eq!(s.get(&cand("x"), true).await.unwrap(), Some(paid.clone()));

    // the webhook and the reconciler arrive later: they lose and see PAID
    for path in [ConfirmPath::Webhook, ConfirmPath::Reconciler] {
        let err = s
            .mark_paid(&cand("x"), &pay("P1"), path, T0 + 3)
            .await
            .unwrap_err();
        assert_eq!(current_of(err), Some(paid.clone()));
    }
    let stream = everything(&s).await;
    let modify = stream.last().unwrap();
    assert_eq!(modify.kind, StreamKind::Modify);
    assert_eq!(modify.old.as_ref().unwrap().expires_at_s, r.expires_at_s);
    assert_eq!(modify.new.as_ref().unwrap().expires_at_s, None);
}

#[tokio::test]
async fn a_paid_write_carrying_a_ttl_is_refused_and_changes_nothing() {
    let (s, _) = store();
    let bad = BookingRecord {
        expires_at_s: Some(1_700_000_600),
        ..held("x", "P1", T0).into_paid(ConfirmPath::Callback, T0)
    };
    match s.put(bad.clone(), Condition::NotExists).await {
        Err(RecordError::Invalid(why)) => assert!(why.contains("TTL"), "{why}"),
        other => panic!("expected Invalid, got {other:?}"),
    }
    s.put(held("y", "P2", T0), Condition::NotExists)
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
    assert_eq!(everything(&s).await.len(), 1, "only y's insert");

    // the callback's PAID-from-copy write, done right, is accepted
    let from_copy = held("x", "P1", T0).into_paid(ConfirmPath::Callback, T0 + 5);
    s.put(from_copy.clone(), Condition::NotExists)
        .await
        .unwrap();
    assert_eq!(s.get(&cand("x"), true).await.unwrap(), Some(from_copy));
}

#[tokio::test]
async fn delete_is_conditional_and_returns_what_it_deleted() {
    let (s, _) = store();
    let r = held("x", "P1", T0);
    s.put(r.clone(), Condition::NotExists).await.unwrap();
    assert!(matches!(
        s.delete(&cand("x"), Condition::NotExists).await,
        Err(RecordError::Invalid(_))
    ));
    let err = s
        .delete(
            &cand("x"),
            Condition::StatusIsWithPayment(RecordStatus::Held, pay("P2")),
        )
        .await
        .unwrap_err();
    assert_eq!(current_of(err), Some(r.clone()));
    let err = s
        .delete(
            &cand("x"),
            Condition::StatusIsWithPayment(RecordStatus::Paid, pay("P1")),
        )
        .await
        .unwrap_err();
    assert_eq!(current_of(err), Some(r.clone()));
    let deleted = s
        .delete(
            &cand("x"),
            Condition::StatusIsWithPayment(RecordStatus::Held, pay("P1")),
        )
        .await
        .unwrap();
    assert_eq!(deleted, r);
    assert_eq!(s.get(&cand("x"), true).await.unwrap(), None);

    // the reconciler's delete never takes a PAID record
    s.put(held("y", "P2", T0), Condition::NotExists)
        .await
        .unwrap();
    let paid = s
        .mark_paid(&cand("y"), &pay("P2"), ConfirmPath::Webhook, T0)
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

#[tokio::test]
async fn extend_moves_deadline_and_ttl_and_counts_while_held() {
    let (s, _) = store();
    s.put(held("x", "P1", T0), Condition::NotExists)
        .await
        .unwrap();
    let once = s.note_query_failure(&cand("x"), &pay("P1")).await.unwrap();
    let twice = s.note_query_failure(&cand("x"), &pay("P1")).await.unwrap();
    assert_eq!((once.query_failures, twice.query_failures), (1, 2));
    let cleared = s
        .clear_query_failures(&cand("x"), &pay("P1"))
        .await
        .unwrap();
    assert_eq!(cleared.query_failures, 0);
    let err = s
        .clear_query_failures(&cand("x"), &pay("P2"))
        .await
        .unwrap_err();
    assert_eq!(current_of(err), Some(cleared), "guarded by the payment");
    let once = s.note_query_failure(&cand("x"), &pay("P1")).await.unwrap();
    let twice = s.note_query_failure(&cand("x"), &pay("P1")).await.unwrap();
    assert_eq!((once.query_failures, twice.query_failures), (1, 2));

    let new_deadline = T0 + 2 * HOLD_MS + 1;
    let extended = s
        .extend(&cand("x"), &pay("P1"), new_deadline)
        .await
        .unwrap();
    assert_eq!(extended.deadline_ms, new_deadline);
    assert_eq!(extended.expires_at_s, Some(new_deadline.div_ceil(1000)));
    assert_eq!(extended.extensions, 1);
    assert_eq!(
        extended.query_failures, 0,
        "an extension starts the count again"
    );

    let err = s
        .extend(&cand("x"), &pay("P2"), new_deadline)
        .await
        .unwrap_err();
    assert_eq!(current_of(err), Some(extended.clone()));

    let paid = s
        .mark_paid(&cand("x"), &pay("P1"), ConfirmPath::Reconciler, T0)
        .await
        .unwrap();
    let err = s
        .extend(&cand("x"), &pay("P1"), new_deadline + 1)
        .await
        .unwrap_err();
    assert_eq!(
        current_of(err),
        Some(paid.clone()),
        "a paid hold is not extended"
    );
    let err = s
        .note_query_failure(&cand("x"), &pay("P1"))
        .await
        .unwrap_err();
    assert_eq!(current_of(err), Some(paid));
}

#[tokio::test]
async fn the_email_latch_opens_once_and_only_on_a_paid_record() {
    let (s, _) = store();
    s.put(held("x", "P1", T0), Condition::NotExists)
        .await
        .unwrap();
    let err = s.mark_emailed(&cand("x"), &pay("P1")).await.unwrap_err();
    assert_eq!(current_of(err).unwrap().status, RecordStatus::Held);
    s.mark_paid(&cand("x"), &pay("P1"), ConfirmPath::Callback, T0)
        .await
        .unwrap();
    let emailed = s.mark_emailed(&cand("x"), &pay("P1")).await.unwrap();
    assert!(emailed.email_sent);
    let err = s.mark_emailed(&cand("x"), &pay("P1")).await.unwrap_err();
    assert_eq!(current_of(err), Some(emailed), "a second email is refused");
}

#[tokio::test]
async fn the_payment_index_finds_the_booking_and_forgets_replaced_payments() {
    let (s, _) = store();
    s.put(held("x", "P1", T0), Condition::NotExists)
        .await
        .unwrap();
    s.put(held("y", "P2", T0), Condition::NotExists)
        .await
        .unwrap();
    assert_eq!(
        s.by_payment(&pay("P2")).await.unwrap().unwrap().candidate,
        cand("y")
    );
    assert_eq!(s.by_payment(&pay("P9")).await.unwrap(), None);

    s.replace(
        held("x", "P3", T0 + 1),
        Condition::StatusIsWithPayment(RecordStatus::Held, pay("P1")),
    )
    .await
    .unwrap();
    assert_eq!(s.by_payment(&pay("P1")).await.unwrap(), None);
    assert_eq!(
        s.by_payment(&pay("P3")).await.unwrap().unwrap().candidate,
        cand("x")
    );
    let paid = s
        .mark_paid(&cand("x"), &pay("P3"), ConfirmPath::Callback, T0)
        .await
        .unwrap();
    assert_eq!(s.by_payment(&pay("P3")).await.unwrap(), Some(paid));
}

#[tokio::test]
async fn eventually_consistent_reads_serve_the_previous_version_within_the_lag() {
    let (s, clock) = store_with(RecordsConfig {
        replication_lag_ms: 1_000,
        ..RecordsConfig::default()
    });
    let r = held("x", "P1", T0);
    s.put(r.clone(), Condition::NotExists).await.unwrap();
    assert_eq!(s.get(&cand("x"), true).await.unwrap(), Some(r.clone()));
    assert_eq!(
        s.get(&cand("x"), false).await.unwrap(),
        None,
        "not replicated yet"
    );
    assert_eq!(
        s.by_payment(&pay("P1")).await.unwrap(),
        None,
        "the GSI lags too"
    );

    clock.advance_ms(1_000);
    assert_eq!(s.get(&cand("x"), false).await.unwrap(), Some(r.clone()));
    assert_eq!(s.by_payment(&pay("P1")).await.unwrap(), Some(r.clone()));

    let paid = s
        .mark_paid(&cand("x"), &pay("P1"), ConfirmPath::Webhook, T0 + 1_000)
        .await
        .unwrap();
    clock.advance_ms(999);
    assert_eq!(s.get(&cand("x"), false).await.unwrap(), Some(r.clone()));
    assert_eq!(s.get(&cand("x"), true).await.unwrap(), Some(paid.clone()));
    clock.advance_ms(1);
    assert_eq!(s.get(&cand("x"), false).await.unwrap(), Some(paid.clone()));

    // a delete is seen late by the lagging reads, at once by the consistent one
    s.delete(&cand("x"), Condition::PaymentIs(pay("P1")))
        .await
        .unwrap();
    assert_eq!(s.get(&cand("x"), true).await.unwrap(), None);
    assert_eq!(s.get(&cand("x"), false).await.unwrap(), Some(paid.clone()));
    assert_eq!(s.by_payment(&pay("P1")).await.unwrap(), Some(paid));
    assert!(
        s.scan_all().await.unwrap().is_empty(),
        "the audit scan is consistent"
    );
    clock.advance_ms(1_000);
    assert_eq!(s.get(&cand("x"), false).await.unwrap(), None);
    assert_eq!(s.by_payment(&pay("P1")).await.unwrap(), None);
}

#[tokio::test]
async fn two_quick_writes_are_seen_in_order_by_a_lagging_reader() {
    let (s, clock) = store_with(RecordsConfig {
        replication_lag_ms: 100,
        ..RecordsConfig::default()
    });
    let v1 = held("x", "P1", T0);
    s.put(v1.clone(), Condition::NotExists).await.unwrap();
    clock.advance_ms(50);
    let v2 = s.note_query_failure(&cand("x"), &pay("P1")).await.unwrap();
    clock.advance_ms(50);
    let v3 = s.note_query_failure(&cand("x"), &pay("P1")).await.unwrap();
    assert_eq!(s.get(&cand("x"), false).await.unwrap(), Some(v1));
    clock.advance_ms(50);
    assert_eq!(s.get(&cand("x"), false).await.unwrap(), Some(v2));
    clock.advance_ms(50);
    assert_eq!(s.get(&cand("x"), false).await.unwrap(), Some(v3));
}

#[tokio::test]
async fn held_due_is_most_overdue_first_limited_and_held_only() {
    let (s, _) = store();
    // deadlines T0+HOLD+{30,10,20,40}
    for (c, p, offset) in [
        ("a", "P1", 30),
        ("b", "P2", 10),
        ("c", "P3", 20),
        ("d", "P4", 40),
    ] {
        s.put(held(c, p, T0 + offset), Condition::NotExists)
            .await
            .unwrap();
    }
    s.mark_paid(&cand("c"), &pay("P3"), ConfirmPath::Callback, T0)
        .await
        .unwrap();

    let before = T0 + HOLD_MS + 40; // strictly before: d (at +40) is not due
    let due: Vec<_> = s
        .held_due(before, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.candidate)
        .collect();
    assert_eq!(
        due,
        vec![cand("b"), cand("a")],
        "paid c and not-yet-due d left out"
    );

    let first: Vec<_> = s.held_due(u64::MAX, 2).await.unwrap();
    assert_eq!(
        first
            .iter()
            .map(|r| r.candidate.clone())
            .collect::<Vec<_>>(),
        vec![cand("b"), cand("a")]
    );
    assert_eq!(s.held_due(u64::MAX, 10).await.unwrap().len(), 3);
    assert!(s.held_due(T0 + HOLD_MS + 10, 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn the_ttl_sweep_is_late_and_marks_only_its_own_removals() {
    let (s, clock) = store();
    let expiring = held("a", "P1", T0);
    let later = held("b", "P2", T0 + 60_000);
    s.put(expiring.clone(), Condition::NotExists).await.unwrap();
    s.put(later.clone(), Condition::NotExists).await.unwrap();
    s.put(held("c", "P3", T0), Condition::NotExists)
        .await
        .unwrap();
    let paid = s
        .mark_paid(&cand("c"), &pay("P3"), ConfirmPath::Callback, T0 + 1)
        .await
        .unwrap();
    s.put(held("d", "P4", T0), Condition::NotExists)
        .await
        .unwrap();
    let released = s
        .delete(
            &cand("d"),
            Condition::StatusIsWithPayment(RecordStatus::Held, pay("P4")),
        )
        .await
        .unwrap();

    // long past a's TTL, nothing happens until the TTL service gets round to it
    clock.advance(Duration::from_secs(630));
    assert_eq!(
        s.get(&cand("a"), true).await.unwrap(),
        Some(expiring.clone()),
        "TTL deletion is late, not on time"
    );
    let after = s.last_sequence();
    let swept = s.sweep_ttl(100);
    assert_eq!(
        swept,
        vec![expiring.clone()],
        "only a: b's TTL has not passed, c has none"
    );
    assert_eq!(s.get(&cand("a"), true).await.unwrap(), None);
    assert_eq!(s.get(&cand("c"), true).await.unwrap(), Some(paid));
    assert!(s.sweep_ttl(100).is_empty(), "nothing twice");

    let stream = everything(&s).await;
    let removals: Vec<_> = stream
        .iter()
        .filter(|r| r.kind == StreamKind::Remove)
        .collect();
    assert_eq!(removals.len(), 2);
    let app = removals[0];
    assert_eq!(app.old, Some(released));
    assert_eq!(
        app.user_identity, None,
        "application deletes carry no identity"
    );
    assert!(!app.is_ttl_removal());
    let ttl = removals[1];
    assert!(ttl.sequence > after);
    assert_eq!(ttl.old, Some(expiring));
    assert_eq!(ttl.new, None);
    assert_eq!(ttl.user_identity, Some(UserIdentity::ttl_service()));
    assert!(ttl.is_ttl_removal());
    let sequences: Vec<u64> = stream.iter().map(|r| r.sequence).collect();
    assert_eq!(sequences, (1..=sequences.len() as u64).collect::<Vec<_>>());

    clock.advance(Duration::from_secs(60));
    assert_eq!(s.sweep_ttl(100), vec![later]);
}

#[tokio::test]
async fn the_stream_is_in_write_order_skips_no_op_writes_and_reads_from_a_position() {
    let (s, _) = store();
    let r = held("x", "P1", T0);
    s.put(r.clone(), Condition::NotExists).await.unwrap();
    s.replace(r.clone(), Condition::PaymentIs(pay("P1")))
        .await
        .unwrap();
    let paid = s
        .mark_paid(&cand("x"), &pay("P1"), ConfirmPath::Webhook, T0)
        .await
        .unwrap();
    let stream = everything(&s).await;
    assert_eq!(
        stream.len(),
        2,
        "the identical replace wrote no stream record"
    );
    assert_eq!(
        (stream[0].kind, stream[0].old.clone(), stream[0].new.clone()),
        (StreamKind::Insert, None, Some(r.clone()))
    );
    assert_eq!(
        (stream[1].kind, stream[1].old.clone(), stream[1].new.clone()),
        (StreamKind::Modify, Some(r), Some(paid))
    );
    assert_eq!(s.read(1, 10, Duration::ZERO).await.unwrap(), stream[1..]);
    assert_eq!(s.read(0, 1, Duration::ZERO).await.unwrap(), stream[..1]);
    assert!(s.read(2, 10, Duration::ZERO).await.unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_stream_reader_waits_for_the_next_write() {
    let clock = ManualClock::new(T0);
    let s = Arc::new(EmbeddedRecords::new(
        Arc::new(clock),
        RecordsConfig::default(),
    ));
    let reader = {
        let s = Arc::clone(&s);
        tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            let batch = s.read(0, 10, Duration::from_secs(30)).await.unwrap();
            (batch, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    s.put(held("x", "P1", T0), Condition::NotExists)
        .await
        .unwrap();
    let (batch, waited) = reader.await.unwrap();
    assert_eq!(batch.len(), 1);
    assert!(
        waited < Duration::from_secs(3),
        "woken by the write: {waited:?}"
    );

    let started = tokio::time::Instant::now();
    assert!(
        s.read(1, 10, Duration::from_secs(5))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(started.elapsed() >= Duration::from_secs(5));
}

#[tokio::test]
async fn a_reader_behind_the_retained_stream_gets_an_error_not_a_gap() {
    let (s, _) = store_with(RecordsConfig {
        stream_retained_max: 2,
        ..RecordsConfig::default()
    });
    for (c, p) in [("a", "P1"), ("b", "P2"), ("c", "P3")] {
        s.put(held(c, p, T0), Condition::NotExists).await.unwrap();
    }
    assert!(matches!(
        s.read(0, 10, Duration::ZERO).await,
        Err(RecordError::Invalid(_))
    ));
    let kept = s.read(1, 10, Duration::ZERO).await.unwrap();
    assert_eq!(
        kept.iter().map(|r| r.sequence).collect::<Vec<_>>(),
        vec![2, 3]
    );
}

#[tokio::test]
async fn writes_over_the_rate_are_throttled_counted_and_change_nothing() {
    let (s, clock) = store_with(RecordsConfig {
        writes_per_s: Some(2),
        reads_per_s: Some(1),
        ..RecordsConfig::default()
    });
    assert_eq!(s.throttles().await.unwrap(), Throttles::default());
    s.put(held("a", "P1", T0), Condition::NotExists)
        .await
        .unwrap();
    s.put(held("b", "P2", T0), Condition::NotExists)
        .await
        .unwrap();
    assert_eq!(
        s.put(held("c", "P3", T0), Condition::NotExists).await,
        Err(RecordError::Throttled)
    );
    assert_eq!(
        s.mark_paid(&cand("a"), &pay("P1"), ConfirmPath::Callback, T0)
            .await,
        Err(RecordError::Throttled)
    );
    s.get(&cand("c"), true).await.unwrap();
    assert_eq!(s.get(&cand("c"), true).await, Err(RecordError::Throttled));
    assert_eq!(
        s.throttles().await.unwrap(),
        Throttles {
            reads: 1,
            writes: 2
        }
    );

    // half a second refills one write at 2/s
    clock.advance_ms(500);
    s.put(held("c", "P3", T0), Condition::NotExists)
        .await
        .unwrap();
    assert_eq!(
        s.put(held("d", "P4", T0), Condition::NotExists).await,
        Err(RecordError::Throttled)
    );
    clock.advance_ms(1_000);
    assert_eq!(
        s.scan_all().await.unwrap().len(),
        3,
        "throttled writes wrote nothing"
    );
    assert_eq!(s.throttles().await.unwrap().total(), 4);
}

#[tokio::test]
async fn unlimited_by_default_never_throttles() {
    let (s, _) = store();
    for i in 0..2_000 {
        s.put(
            held(&format!("c{i}"), &format!("P{i}"), T0),
            Condition::NotExists,
        )
        .await
        .unwrap();
    }
    assert_eq!(s.throttles().await.unwrap().total(), 0);
    assert_eq!(s.scan_all().await.unwrap().len(), 2_000);
}

/// The worker's conflict path end to end: a candidate books, is released,
/// books again, and the FIRST booking's message is delivered again.
#[tokio::test]
async fn a_redelivered_old_message_against_the_store_neither_overwrites_nor_resurrects() {
    let (s, _) = store();
    let first = held("x", "P1", T0);
    let second = held("x", "P2", T0 + 120_000);
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
/// booking could never be marked paid. Replacing it under the old payment fixes it.
#[tokio::test]
async fn a_stale_record_is_replaced_so_the_new_payment_can_be_marked_paid() {
    let (s, _) = store();
    let stale = held("x", "P1", T0);
    let fresh = held("x", "P2", T0 + 120_000);
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
        .mark_paid(&cand("x"), &pay("P2"), ConfirmPath::Callback, T0 + 130_000)
        .await
        .unwrap();
    assert_eq!(paid.payment_id, pay("P2"));
    assert_eq!(paid.expires_at_s, None);
}

/// The zoo's bug `paid_keeps_ttl`: the PAID record keeps the hold's TTL, and
/// the TTL service deletes a paid booking later. Without it, never.
#[tokio::test]
async fn the_paid_keeps_ttl_bug_lets_the_ttl_service_delete_a_paid_booking() {
    for (bugs, deleted) in [
        (booking::Bugs::none(), 0),
        (booking::Bugs::of([booking::Bug::PaidKeepsTtl]), 1),
    ] {
        let (s, clock) = store_with(RecordsConfig {
            bugs: bugs.clone(),
            ..RecordsConfig::default()
        });
        s.put(held("x", "P1", T0), Condition::NotExists)
            .await
            .unwrap();
        let paid = s
            .mark_paid(&cand("x"), &pay("P1"), ConfirmPath::Callback, T0)
            .await
            .unwrap();
        assert_eq!(paid.status, RecordStatus::Paid);
        assert_eq!(paid.expires_at_s.is_some(), deleted == 1, "{bugs:?}");
        clock.advance(std::time::Duration::from_millis(2 * HOLD_MS));
        assert_eq!(s.sweep_ttl(10).len(), deleted, "{bugs:?}");
        assert_eq!(
            s.get(&cand("x"), true).await.unwrap().is_none(),
            deleted == 1
        );
    }
}

/// The TTL service is late by `ttl_delay_ms`: nothing goes before.
#[tokio::test]
async fn the_ttl_service_deletes_only_after_its_delay() {
    let (s, clock) = store_with(RecordsConfig {
        ttl_delay_ms: 30_000,
        ..RecordsConfig::default()
    });
    s.put(held("x", "P1", T0), Condition::NotExists)
        .await
        .unwrap();
    clock.advance(std::time::Duration::from_millis(HOLD_MS + 29_000));
    assert!(s.sweep_ttl(10).is_empty(), "expired, but not yet swept");
    clock.advance(std::time::Duration::from_millis(1_000));
    assert_eq!(s.sweep_ttl(10).len(), 1);
}
