//! The DynamoDB record store and its stream against dynoxide (through the
//! real SDK): every operation, every failed condition and what it is
//! classified as, the worker's conflict classification on real reads, the
//! indexes, the TTL attribute, and the stream's images and TTL identity.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use booking::CandidateHash;
use booking::records::{
    BookingRecord, ChangeStream, Condition, ConfirmPath, RecordError, RecordStatus, RecordStore,
    StreamKind, WorkerVerdict, classify_conflict,
};
use common::{held, now_ms, pay, provisioned};

const HOUR: Duration = Duration::from_secs(3_600);

fn current(e: RecordError) -> Option<BookingRecord> {
    match e {
        RecordError::ConditionFailed { current } => current.map(|b| *b),
        other => panic!("expected a failed condition, got {other:?}"),
    }
}

#[tokio::test]
async fn conditional_writes_fail_with_the_record_they_were_checked_against() {
    let (_local, a) = provisioned(HOUR, Duration::from_secs(60)).await;
    let store = &a.records;
    let t = now_ms();
    let first = held("alice", "P1", t, 600_000);
    store
        .put(first.clone(), Condition::NotExists)
        .await
        .unwrap();
    assert_eq!(
        store.get(&first.candidate, true).await.unwrap(),
        Some(first.clone())
    );
    assert_eq!(
        store.get(&first.candidate, false).await.unwrap(),
        Some(first.clone())
    );

    // attribute_not_exists fails with the blocking record
    let again = held("alice", "P2", t + 5, 600_000);
    let blocked = current(
        store
            .put(again.clone(), Condition::NotExists)
            .await
            .unwrap_err(),
    );
    assert_eq!(blocked.as_ref(), Some(&first));
    // …and the worker's classification on a consistent read says: replace the stale one
    let read = store.get(&again.candidate, true).await;
    let verdict = classify_conflict(&again, blocked.as_ref(), &read);
    assert_eq!(
        verdict,
        WorkerVerdict::ReplaceStale {
            condition: Condition::StatusIsWithPayment(RecordStatus::Held, pay("P1"))
        }
    );
    // the replacement under the old payment succeeds once, then fails
    let WorkerVerdict::ReplaceStale { condition } = verdict else {
        unreachable!()
    };
    store
        .replace(again.clone(), condition.clone())
        .await
        .unwrap();
    assert_eq!(
        store.get(&again.candidate, true).await.unwrap(),
        Some(again.clone())
    );
    let late = current(store.replace(first.clone(), condition).await.unwrap_err());
    assert_eq!(
        late.as_ref(),
        Some(&again),
        "a guarded replace never overwrites the newer"
    );
    assert!(matches!(
        store.replace(first.clone(), Condition::NotExists).await,
        Err(RecordError::Invalid(_))
    ));

    // a redelivered old message: Stale; the same message: Duplicate
    let read = store.get(&first.candidate, true).await;
    assert_eq!(
        classify_conflict(&first, Some(&again), &read),
        WorkerVerdict::Stale
    );
    assert_eq!(
        classify_conflict(&again, Some(&again), &read),
        WorkerVerdict::Duplicate
    );

    // PaymentIs: only with the same payment
    let none = store
        .put(again.clone(), Condition::PaymentIs(pay("P9")))
        .await
        .unwrap_err();
    assert_eq!(current(none).as_ref(), Some(&again));
    store
        .put(again.clone(), Condition::PaymentIs(pay("P2")))
        .await
        .unwrap();

    // a condition on a record that does not exist fails with nothing
    let nobody = held("nobody", "P7", t, 600_000);
    assert_eq!(
        current(
            store
                .put(nobody.clone(), Condition::PaymentIs(pay("P7")))
                .await
                .unwrap_err()
        ),
        None
    );
    assert_eq!(
        store.get(&nobody.candidate, true).await.unwrap(),
        None,
        "nothing written"
    );
}

#[tokio::test]
async fn held_to_paid_removes_the_ttl_once_and_the_email_latch_is_once() {
    let (_local, a) = provisioned(HOUR, Duration::from_secs(60)).await;
    let store = &a.records;
    let t = now_ms();
    let r = held("bob", "P1", t, 600_000);
    store.put(r.clone(), Condition::NotExists).await.unwrap();
    let c = r.candidate.clone();

    // the wrong payment loses without changing anything
    let wrong = current(
        store
            .mark_paid(&c, &pay("P2"), ConfirmPath::Callback, t + 1)
            .await
            .unwrap_err(),
    );
    assert_eq!(wrong.as_ref(), Some(&r));
    assert!(
        matches!(
            store.mark_emailed(&c, &pay("P1")).await,
            Err(RecordError::ConditionFailed { .. })
        ),
        "no email before PAID"
    );

    let paid = store
        .mark_paid(&c, &pay("P1"), ConfirmPath::Webhook, t + 2)
        .await
        .unwrap();
    assert_eq!(paid.status, RecordStatus::Paid);
    assert_eq!(paid.expires_at_s, None, "the TTL attribute is gone");
    assert_eq!(
        (paid.paid_ms, paid.paid_by),
        (Some(t + 2), Some(ConfirmPath::Webhook))
    );
    assert_eq!(store.get(&c, true).await.unwrap(), Some(paid.clone()));
    // the raw item has neither the TTL nor the held-index key
    let raw = a
        .clients
        .dynamodb
        .get_item()
        .table_name(&a.resources.table)
        .key(
            "candidate",
            aws_sdk_dynamodb::types::AttributeValue::S(c.to_string()),
        )
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    let item = raw.item().unwrap();
    assert!(!item.contains_key("expires_at_s"));
    assert!(!item.contains_key("held_bucket"));

    // the second confirm path loses and sees the PAID record
    let second = current(
        store
            .mark_paid(&c, &pay("P1"), ConfirmPath::Reconciler, t + 3)
            .await
            .unwrap_err(),
    );
    assert_eq!(second.as_ref(), Some(&paid));

    let emailed = store.mark_emailed(&c, &pay("P1")).await.unwrap();
    assert!(emailed.email_sent);
    let twice = current(store.mark_emailed(&c, &pay("P1")).await.unwrap_err());
    assert_eq!(twice.map(|r| r.email_sent), Some(true));

    // a PAID record is refused anything a hold may do
    assert!(store.extend(&c, &pay("P1"), t + 10_000_000).await.is_err());
    assert!(store.note_query_failure(&c, &pay("P1")).await.is_err());
    assert!(
        store
            .delete(
                &c,
                Condition::StatusIsWithPayment(RecordStatus::Held, pay("P1"))
            )
            .await
            .is_err()
    );
    // and a PAID record with a TTL never reaches the table
    let bad = BookingRecord {
        expires_at_s: Some(1),
        ..paid.clone()
    };
    assert!(matches!(
        store.put(bad, Condition::PaymentIs(pay("P1"))).await,
        Err(RecordError::Invalid(_))
    ));
    assert_eq!(
        store.get(&c, true).await.unwrap().unwrap().expires_at_s,
        None
    );
}

#[tokio::test]
async fn the_reconcilers_updates_and_the_guarded_delete() {
    let (_local, a) = provisioned(HOUR, Duration::from_secs(60)).await;
    let store = &a.records;
    let t = now_ms();
    let r = held("carol", "P1", t, 600_000);
    let c = r.candidate.clone();
    store.put(r.clone(), Condition::NotExists).await.unwrap();

    let one = store.note_query_failure(&c, &pay("P1")).await.unwrap();
    let two = store.note_query_failure(&c, &pay("P1")).await.unwrap();
    assert_eq!((one.query_failures, two.query_failures), (1, 2));
    assert_eq!(
        store
            .clear_query_failures(&c, &pay("P1"))
            .await
            .unwrap()
            .query_failures,
        0
    );
    store.note_query_failure(&c, &pay("P1")).await.unwrap();
    let extended = store
        .extend(&c, &pay("P1"), r.deadline_ms + 600_000)
        .await
        .unwrap();
    assert_eq!(extended.extensions, 1);
    assert_eq!(
        extended.query_failures, 0,
        "an extension clears the failures"
    );
    assert_eq!(extended.deadline_ms, r.deadline_ms + 600_000);
    assert_eq!(
        extended.expires_at_s,
        Some((r.deadline_ms + 600_000).div_ceil(1000)),
        "the TTL moves too"
    );
    // an extension before the creation is a programmer error, not a race
    assert!(matches!(
        store.extend(&c, &pay("P1"), t - 1).await,
        Err(RecordError::Invalid(_))
    ));
    assert!(matches!(
        store.extend(&c, &pay("P9"), t + 1).await,
        Err(RecordError::ConditionFailed { .. })
    ));

    // the guarded delete: another payment fails, the right one returns what it deleted
    let wrong = current(
        store
            .delete(
                &c,
                Condition::StatusIsWithPayment(RecordStatus::Held, pay("P2")),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(wrong.as_ref(), Some(&extended));
    assert!(matches!(
        store.delete(&c, Condition::NotExists).await,
        Err(RecordError::Invalid(_))
    ));
    let deleted = store
        .delete(
            &c,
            Condition::StatusIsWithPayment(RecordStatus::Held, pay("P1")),
        )
        .await
        .unwrap();
    assert_eq!(deleted, extended);
    assert_eq!(store.get(&c, true).await.unwrap(), None);
    let gone = current(
        store
            .delete(
                &c,
                Condition::StatusIsWithPayment(RecordStatus::Held, pay("P1")),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(gone, None, "the second delete finds nothing");
    // and the worker does not resurrect it
    assert_eq!(
        classify_conflict(&r, Some(&r), &store.get(&c, true).await),
        WorkerVerdict::Released
    );
}

#[tokio::test]
async fn indexes_find_by_payment_and_holds_by_deadline_most_overdue_first() {
    let (_local, a) = provisioned(HOUR, Duration::from_secs(60)).await;
    let store = &a.records;
    let t = now_ms();
    // 40 holds over every bucket, deadlines spread; two paid
    let mut all = Vec::new();
    for i in 0..40u64 {
        let r = held(&format!("c{i}"), &format!("P{i}"), t, 1_000 * (40 - i));
        store.put(r.clone(), Condition::NotExists).await.unwrap();
        all.push(r);
    }
    for r in &all[..2] {
        store
            .mark_paid(&r.candidate, &r.payment_id, ConfirmPath::Callback, t + 1)
            .await
            .unwrap();
    }
    let found = store.by_payment(&pay("P7")).await.unwrap().unwrap();
    assert_eq!(found.candidate, all[7].candidate);
    assert_eq!(store.by_payment(&pay("nope")).await.unwrap(), None);
    let paid = store.by_payment(&pay("P0")).await.unwrap().unwrap();
    assert_eq!(
        paid.status,
        RecordStatus::Paid,
        "the GSI keeps paid records"
    );

    // due before t + 20 s: holds 21..=39 (deadlines t+19s .. t+1s), most overdue first
    let due = store.held_due(t + 20_000, 100).await.unwrap();
    let want: Vec<CandidateHash> = (21..40).rev().map(|i| all[i].candidate.clone()).collect();
    assert_eq!(
        due.iter().map(|r| r.candidate.clone()).collect::<Vec<_>>(),
        want
    );
    assert!(due.windows(2).all(|w| w[0].deadline_ms <= w[1].deadline_ms));
    let top = store.held_due(t + 20_000, 5).await.unwrap();
    assert_eq!(top, due[..5].to_vec());
    // paid records are not in the held index at all
    let every = store.held_due(u64::MAX, 1_000).await.unwrap();
    assert_eq!(every.len(), 38);
    assert!(every.iter().all(|r| r.status == RecordStatus::Held));
    assert!(store.held_due(t, 0).await.unwrap().is_empty());

    let scanned = store.scan_all().await.unwrap();
    assert_eq!(scanned.len(), 40);
    assert!(
        scanned.windows(2).all(|w| w[0].candidate < w[1].candidate),
        "candidate order"
    );
    assert_eq!(store.throttles().await.unwrap().total(), 0);
}

#[tokio::test]
async fn a_missing_table_is_reported_as_such() {
    let (_local, a) = provisioned(HOUR, Duration::from_secs(60)).await;
    let wrong = booking_aws::DynamoRecords::new(a.clients.dynamodb.clone(), "no-such-table");
    let e = wrong.get(&CandidateHash::of("x"), true).await.unwrap_err();
    assert!(
        matches!(&e, RecordError::Unavailable(m) if m.contains("no-such-table") && m.contains("provision")),
        "{e:?}"
    );
}

#[tokio::test]
async fn the_stream_carries_old_and_new_images_and_marks_ttl_deletions() {
    // the TTL service 5 s late: a hold due now is deleted by it 5 s from now
    let (local, a) = provisioned(Duration::from_secs(5), Duration::from_secs(60)).await;
    let store = &a.records;
    let stream = a.stream().await.unwrap();
    assert!(
        stream.arn().contains(&a.resources.table),
        "{}",
        stream.arn()
    );
    let t = now_ms();
    let expiring = held("dave", "P1", t - 120_000, 60_000); // due a minute ago
    let kept = held("erin", "P2", t, 600_000);
    store
        .put(expiring.clone(), Condition::NotExists)
        .await
        .unwrap();
    store.put(kept.clone(), Condition::NotExists).await.unwrap();
    let paid = store
        .mark_paid(&kept.candidate, &pay("P2"), ConfirmPath::Callback, t)
        .await
        .unwrap();
    store
        .put(held("frank", "P3", t, 600_000), Condition::NotExists)
        .await
        .unwrap();
    store
        .delete(&CandidateHash::of("frank"), Condition::PaymentIs(pay("P3")))
        .await
        .unwrap();

    let records = stream.read(0, 100, Duration::from_secs(5)).await.unwrap();
    let kinds: Vec<StreamKind> = records.iter().map(|r| r.kind).collect();
    assert_eq!(
        kinds,
        [
            StreamKind::Insert,
            StreamKind::Insert,
            StreamKind::Modify,
            StreamKind::Insert,
            StreamKind::Remove
        ]
    );
    assert_eq!(
        records.iter().map(|r| r.sequence).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5]
    );
    assert_eq!(records[2].old.as_ref(), Some(&kept));
    assert_eq!(records[2].new.as_ref(), Some(&paid));
    assert!(
        !records[4].is_ttl_removal(),
        "the application's delete carries no identity"
    );
    assert!(records.iter().all(|r| r.at_ms > 0));

    // a partial failure reads again from the failed record
    let again = stream.read(2, 100, Duration::ZERO).await.unwrap();
    assert_eq!(again.first().map(|r| r.sequence), Some(3));
    assert!(
        matches!(
            stream.read(1, 100, Duration::ZERO).await,
            Err(RecordError::Invalid(_))
        ),
        "read past"
    );

    // the late TTL service deletes the overdue hold; its REMOVE names the service
    local.dynoxide.set_ttl_lag(Duration::ZERO);
    let swept = local.dynoxide.sweep_ttl().await.unwrap();
    assert!(swept >= 1, "swept {swept}");
    let removal = stream.read(5, 100, Duration::from_secs(5)).await.unwrap();
    let ttl: Vec<_> = removal.iter().filter(|r| r.is_ttl_removal()).collect();
    assert_eq!(ttl.len(), 1, "{removal:?}");
    assert_eq!(ttl[0].old.as_ref(), Some(&expiring));
    assert_eq!(store.get(&expiring.candidate, true).await.unwrap(), None);
    assert!(
        store.get(&kept.candidate, true).await.unwrap().is_some(),
        "a PAID record has no TTL"
    );
}

// Why the Streams endpoint goes through the front: read straight from
// dynoxide, the SDK finds no identity in the lower-case keys, and a TTL
// deletion would look like the application's own.
#[tokio::test]
async fn without_the_front_the_sdk_cannot_see_the_ttl_service() {
    let (local, a) = provisioned(Duration::ZERO, Duration::from_secs(60)).await;
    let t = now_ms();
    a.records
        .put(
            held("gina", "P1", t - 120_000, 60_000),
            Condition::NotExists,
        )
        .await
        .unwrap();
    local.dynoxide.sweep_ttl().await.unwrap();
    let mut direct = local.settings();
    direct.endpoints.dynamodb_streams = Some(local.dynoxide.dynamodb_url.clone());
    let clients = direct.clients().await;
    let stream =
        booking_aws::DynamoStream::connect(&clients.dynamodb, clients.streams, &a.resources.table)
            .await
            .unwrap();
    let records = stream.read(0, 100, Duration::from_secs(5)).await.unwrap();
    let removal = records
        .iter()
        .find(|r| r.kind == StreamKind::Remove)
        .expect("a REMOVE");
    assert!(
        !removal.is_ttl_removal(),
        "if this fails, dynoxide spells userIdentity as the API does: drop the front"
    );
    let front = a.stream().await.unwrap();
    let fixed = front.read(0, 100, Duration::from_secs(5)).await.unwrap();
    assert!(fixed.iter().any(|r| r.is_ttl_removal()));
}
