//! The stream contract suite: what every [`ChangeStream`] of a record store
//! must deliver. One record per change, in write order, with strictly
//! increasing sequences; INSERT / MODIFY / REMOVE with the old and new
//! images; no record for a write that changes nothing or fails; the TTL
//! service's removals, and only those, carrying its identity; reads from a
//! position (a handler that fails part of a batch reads again from the
//! failed record); a read that waits for the next write; and, where the
//! adapter can retain fewer records, an error instead of a silent gap.
//!
//! The fixture is the records suite's [`RecordsFixture`]; an adapter's test
//! file writes `booking_contract::stream_contract!(make_fixture);` or, if it
//! can build a store whose stream keeps at most two records,
//! `booking_contract::stream_contract!(make_fixture, trimmed: make_trimmed);`.
//! Waits are in real time (tokio's clock): the cases wait at most a few
//! seconds.

use std::time::{Duration, Instant};

use booking::records::{
    BookingRecord, Condition, ConfirmPath, RecordError, RecordStatus, StreamKind, StreamRecord,
};

use crate::records::{RecordsFixture, assert_nothing_after, cand, held, pay, read_n};

/// Expands to one `#[tokio::test]` per case of the stream suite, in a module
/// `stream_contract`, each on a fresh fixture from `$make`. With
/// `trimmed: $trimmed` (a fixture whose stream keeps at most two records),
/// also the case of a reader behind the retained stream.
#[macro_export]
macro_rules! stream_contract {
    ($make:path) => {
        $crate::__contract_cases!(stream_contract, stream, $make;
            every_change_is_one_record_in_write_order_with_its_images,
            writes_that_change_nothing_or_fail_leave_no_record,
            only_the_ttl_services_removals_carry_its_identity,
            a_failed_batch_is_read_again_from_its_failed_record,
            a_reader_waits_for_the_next_write,
            an_idle_read_waits_out_its_wait_and_returns_nothing,
            a_read_of_no_records_is_invalid,
            a_read_from_anywhere_retained_is_answered_unless_read_past,
        );
    };
    ($make:path, trimmed: $trimmed:path) => {
        $crate::stream_contract!($make);
        $crate::__contract_cases!(stream_contract_trimmed, stream, $trimmed;
            a_reader_behind_the_retained_stream_gets_an_error_not_a_gap,
        );
    };
}

fn kinds(records: &[StreamRecord]) -> Vec<StreamKind> {
    records.iter().map(|r| r.kind).collect()
}

fn sequences(records: &[StreamRecord]) -> Vec<u64> {
    records.iter().map(|r| r.sequence).collect()
}

/// Five changes, five records: sequences 1..=5 in write order, each with the
/// images of its kind; the application's delete carries no identity.
pub async fn every_change_is_one_record_in_write_order_with_its_images(f: &dyn RecordsFixture) {
    let (s, t0) = (f.records(), f.now_ms());
    let x = held("x", "P1", t0);
    let y = held("y", "P2", t0);
    let z = held("z", "P3", t0);
    s.put(x.clone(), Condition::NotExists).await.unwrap();
    s.put(y.clone(), Condition::NotExists).await.unwrap();
    let paid = s
        .mark_paid(&cand("y"), &pay("P2"), ConfirmPath::Callback, t0)
        .await
        .unwrap();
    s.put(z.clone(), Condition::NotExists).await.unwrap();
    s.delete(&cand("z"), Condition::PaymentIs(pay("P3")))
        .await
        .unwrap();

    let records = read_n(f.stream(), 0, 5).await;
    assert_eq!(
        kinds(&records),
        [
            StreamKind::Insert,
            StreamKind::Insert,
            StreamKind::Modify,
            StreamKind::Insert,
            StreamKind::Remove
        ]
    );
    assert_eq!(sequences(&records), vec![1, 2, 3, 4, 5]);
    let images: Vec<(Option<BookingRecord>, Option<BookingRecord>)> = records
        .iter()
        .map(|r| (r.old.clone(), r.new.clone()))
        .collect();
    assert_eq!(
        images,
        vec![
            (None, Some(x)),
            (None, Some(y.clone())),
            (Some(y), Some(paid)),
            (None, Some(z.clone())),
            (Some(z), None),
        ]
    );
    assert!(
        records.iter().all(|r| r.user_identity.is_none()),
        "the application's changes carry no identity"
    );
    assert!(records.iter().all(|r| r.at_ms > 0));
    assert!(records.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
    assert_nothing_after(f.stream(), 5, Duration::ZERO).await;
}

/// A write whose condition fails, one refused as invalid, and a put of the
/// very record already there change nothing, and the stream says nothing.
pub async fn writes_that_change_nothing_or_fail_leave_no_record(f: &dyn RecordsFixture) {
    let (s, t0) = (f.records(), f.now_ms());
    let r = held("x", "P1", t0);
    s.put(r.clone(), Condition::NotExists).await.unwrap();
    // the same record again: no change
    s.replace(r.clone(), Condition::PaymentIs(pay("P1")))
        .await
        .unwrap();
    // failed conditions
    assert!(s.put(r.clone(), Condition::NotExists).await.is_err());
    assert!(
        s.mark_paid(&cand("x"), &pay("P2"), ConfirmPath::Webhook, t0)
            .await
            .is_err()
    );
    assert!(
        s.delete(
            &cand("x"),
            Condition::StatusIsWithPayment(RecordStatus::Paid, pay("P1"))
        )
        .await
        .is_err()
    );
    // refused
    assert!(matches!(
        s.delete(&cand("x"), Condition::NotExists).await,
        Err(RecordError::Invalid(_))
    ));
    let paid = s
        .mark_paid(&cand("x"), &pay("P1"), ConfirmPath::Webhook, t0)
        .await
        .unwrap();

    let records = read_n(f.stream(), 0, 2).await;
    assert_eq!(kinds(&records), [StreamKind::Insert, StreamKind::Modify]);
    assert_eq!(records[1].old.as_ref(), Some(&r));
    assert_eq!(records[1].new.as_ref(), Some(&paid));
    assert_eq!(sequences(&records), vec![1, 2], "no gap for the failures");
    assert_nothing_after(f.stream(), 2, Duration::from_millis(300)).await;
}

/// The TTL service's REMOVE carries its identity, after every record written
/// before it; the application's own delete of a hold does not.
pub async fn only_the_ttl_services_removals_carry_its_identity(f: &dyn RecordsFixture) {
    let (s, t0) = (f.records(), f.now_ms());
    let expired = held("a", "P1", t0 - 3 * crate::records::HOLD_MS);
    s.put(expired.clone(), Condition::NotExists).await.unwrap();
    let released = held("b", "P2", t0 - 3 * crate::records::HOLD_MS);
    s.put(released.clone(), Condition::NotExists).await.unwrap();
    s.delete(
        &cand("b"),
        Condition::StatusIsWithPayment(RecordStatus::Held, pay("P2")),
    )
    .await
    .unwrap();
    let before = read_n(f.stream(), 0, 3).await;
    assert_eq!(before.len(), 3);
    assert_eq!(before[2].kind, StreamKind::Remove);
    assert_eq!(before[2].old.as_ref(), Some(&released));
    assert!(!before[2].is_ttl_removal());
    assert_eq!(before[2].user_identity, None);

    f.run_ttl_service().await;
    let after = read_n(f.stream(), 3, 1).await;
    assert_eq!(after.len(), 1, "{after:?}");
    let removal = &after[0];
    assert_eq!(removal.kind, StreamKind::Remove);
    assert_eq!(removal.sequence, 4);
    assert_eq!(removal.old.as_ref(), Some(&expired));
    assert_eq!(removal.new, None);
    assert!(removal.is_ttl_removal());
    assert_nothing_after(f.stream(), 4, Duration::ZERO).await;
}

/// A handler that handled records 1 and 2 of a batch of five reads again
/// after 2 and gets 3, 4, 5; a limit cuts a batch.
pub async fn a_failed_batch_is_read_again_from_its_failed_record(f: &dyn RecordsFixture) {
    let (s, t0) = (f.records(), f.now_ms());
    for (c, p) in [
        ("a", "P1"),
        ("b", "P2"),
        ("c", "P3"),
        ("d", "P4"),
        ("e", "P5"),
    ] {
        s.put(held(c, p, t0), Condition::NotExists).await.unwrap();
    }
    let all = read_n(f.stream(), 0, 5).await;
    assert_eq!(sequences(&all), vec![1, 2, 3, 4, 5]);
    let stream = f.stream();
    let again = stream.read(2, 100, Duration::ZERO).await.unwrap();
    assert_eq!(again, all[2..].to_vec());
    let one = stream.read(3, 1, Duration::ZERO).await.unwrap();
    assert_eq!(one, all[3..4].to_vec());
    let rest = stream.read(4, 100, Duration::ZERO).await.unwrap();
    assert_eq!(rest, all[4..].to_vec());
}

/// A reader waiting on an idle stream is answered by the next write, well
/// before its wait is out.
pub async fn a_reader_waits_for_the_next_write(f: &dyn RecordsFixture) {
    let (s, t0) = (f.records(), f.now_ms());
    let started = Instant::now();
    let reader = f.stream().read(0, 10, Duration::from_secs(20));
    let writer = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        s.put(held("x", "P1", t0), Condition::NotExists)
            .await
            .unwrap();
    };
    let (batch, ()) = tokio::join!(reader, writer);
    let batch = batch.unwrap();
    let waited = started.elapsed();
    assert_eq!(kinds(&batch), [StreamKind::Insert]);
    assert!(
        waited >= Duration::from_millis(300),
        "answered before the write: {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(10),
        "woken by the write, not by the end of the wait: {waited:?}"
    );
}

/// An idle stream answers nothing, after the whole wait.
pub async fn an_idle_read_waits_out_its_wait_and_returns_nothing(f: &dyn RecordsFixture) {
    let started = Instant::now();
    let batch = f
        .stream()
        .read(0, 10, Duration::from_millis(600))
        .await
        .unwrap();
    assert!(batch.is_empty());
    assert!(started.elapsed() >= Duration::from_millis(600));
}

/// Asking for no records is a programmer error.
pub async fn a_read_of_no_records_is_invalid(f: &dyn RecordsFixture) {
    assert!(matches!(
        f.stream().read(0, 0, Duration::ZERO).await,
        Err(RecordError::Invalid(_))
    ));
}

/// A reader may read the same position again; one that can re-read behind a
/// later position gets the records again, one that cannot says so
/// (`Invalid`) rather than skipping them.
pub async fn a_read_from_anywhere_retained_is_answered_unless_read_past(f: &dyn RecordsFixture) {
    let (s, t0) = (f.records(), f.now_ms());
    for (c, p) in [("a", "P1"), ("b", "P2"), ("c", "P3")] {
        s.put(held(c, p, t0), Condition::NotExists).await.unwrap();
    }
    let all = read_n(f.stream(), 0, 3).await;
    assert_eq!(sequences(&all), vec![1, 2, 3]);
    let stream = f.stream();
    assert_eq!(
        stream.read(1, 100, Duration::ZERO).await.unwrap(),
        all[1..].to_vec()
    );
    assert_eq!(
        stream.read(1, 100, Duration::ZERO).await.unwrap(),
        all[1..].to_vec(),
        "the same position twice"
    );
    stream.read(2, 100, Duration::ZERO).await.unwrap();
    let behind = stream.read(0, 100, Duration::ZERO).await;
    if f.rereads_behind() {
        assert_eq!(behind.unwrap(), all);
    } else {
        assert!(matches!(behind, Err(RecordError::Invalid(_))), "{behind:?}");
    }
}

/// A stream that keeps two records: a reader behind them gets `Invalid`
/// (records were lost), a reader at the first kept one reads on.
pub async fn a_reader_behind_the_retained_stream_gets_an_error_not_a_gap(f: &dyn RecordsFixture) {
    let (s, t0) = (f.records(), f.now_ms());
    for (c, p) in [("a", "P1"), ("b", "P2"), ("c", "P3")] {
        s.put(held(c, p, t0), Condition::NotExists).await.unwrap();
    }
    let stream = f.stream();
    let kept = stream.read(1, 10, Duration::ZERO).await.unwrap();
    assert_eq!(sequences(&kept), vec![2, 3]);
    assert!(matches!(
        stream.read(0, 10, Duration::ZERO).await,
        Err(RecordError::Invalid(_))
    ));
    s.put(held("d", "P4", t0), Condition::NotExists)
        .await
        .unwrap();
    assert!(matches!(
        stream.read(1, 10, Duration::ZERO).await,
        Err(RecordError::Invalid(_))
    ));
    assert_eq!(
        sequences(&stream.read(2, 10, Duration::ZERO).await.unwrap()),
        vec![3, 4]
    );
}
