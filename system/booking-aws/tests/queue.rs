//! The SQS FIFO queue, the on-failure destination and the S3 status document
//! against moto, through the real SDK: send, long-poll receive, delete
//! (single and batch), order within a group, deduplication, visibility,
//! redrive to the dead-letter queue after 5 receives, depth and age; and
//! `status.json` with its cache headers.
//!
//! moto forgets a deduplication ID once its message is deleted, ignores
//! `DeduplicationScope=messageGroup` and may reorder a group after a
//! visibility-timeout redelivery: the tests assert none of that here (the
//! embedded queue's tests cover those semantics), and each uses its own
//! queue, so none is deep.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use booking::StatusSink;
use booking::queue::{Message, Queue, QueueError, ReceiptHandle};
use booking_streams::{BatchFailure, DiscardReason, FailureDestination};
use common::provisioned;

const HOUR: Duration = Duration::from_secs(3_600);

fn msg(group: &str, dedup: &str, body: &str) -> Message {
    Message {
        body: body.into(),
        group_id: group.into(),
        deduplication_id: dedup.into(),
    }
}

#[tokio::test]
async fn a_group_is_delivered_in_order_and_a_duplicate_send_once() {
    let (_local, a) = provisioned(HOUR, Duration::from_secs(30)).await;
    let q = &a.queue;
    for i in 0..4 {
        q.send(msg("ab12", &format!("d{i}"), &format!("m{i}")))
            .await
            .unwrap();
    }
    // a retried send: same (group, deduplication ID) while the first is queued
    q.send(msg("ab12", "d1", "m1-again")).await.unwrap();
    q.send(msg("cd34", "x", "other")).await.unwrap();
    let depth = q.depth().await.unwrap();
    assert_eq!(
        (depth.visible, depth.in_flight),
        (5, 0),
        "the duplicate was not queued"
    );

    let mut bodies = Vec::new();
    let mut receipts = Vec::new();
    for _ in 0..5 {
        for r in q.receive(10, Duration::from_secs(1)).await.unwrap() {
            assert_eq!(r.receive_count, 1);
            assert!(r.sent_ms > 0);
            if r.message.group_id == "ab12" {
                bodies.push(r.message.body.clone());
                assert_eq!(r.message.deduplication_id, format!("d{}", bodies.len() - 1));
            }
            receipts.push(r.receipt);
        }
        if receipts.len() == 5 {
            break;
        }
    }
    assert_eq!(bodies, ["m0", "m1", "m2", "m3"], "in order, m1 once");
    assert_eq!(q.depth().await.unwrap().in_flight, 5);
    assert!(q.oldest_age().await.unwrap().is_some());
    // batch delete of all five, then the queue is empty
    let results = q.delete_batch(&receipts).await.unwrap();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(q.depth().await.unwrap(), Default::default());
    assert_eq!(q.oldest_age().await.unwrap(), None);
    assert!(matches!(
        q.delete_batch(&[]).await,
        Err(QueueError::Invalid(_))
    ));
    // an empty long poll waits and comes back empty
    let started = std::time::Instant::now();
    assert!(
        q.receive(10, Duration::from_secs(1))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(started.elapsed() >= Duration::from_millis(900));
}

#[tokio::test]
async fn a_message_received_five_times_moves_to_the_dead_letter_queue() {
    let (_local, a) = provisioned(HOUR, Duration::from_secs(30)).await;
    let q = &a.queue;
    q.send(msg("ef56", "poison", "{not json")).await.unwrap();
    for n in 1..=5u32 {
        let got = q.receive(1, Duration::from_secs(1)).await.unwrap();
        assert_eq!(got.len(), 1, "receive {n}");
        assert_eq!(got[0].receive_count, n);
        // left unacknowledged, given back at once (what the worker does with poison)
        q.change_visibility(&got[0].receipt, Duration::ZERO)
            .await
            .unwrap();
    }
    assert!(
        q.dead_letters().await.unwrap().is_empty(),
        "not yet: five receives so far"
    );
    assert!(
        q.receive(1, Duration::from_secs(1))
            .await
            .unwrap()
            .is_empty(),
        "the sixth receive redrives it"
    );
    let dead = q.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].body, "{not json");
    assert_eq!(dead[0].group_id, "ef56");
    // a reading takes nothing: it is still there
    assert_eq!(q.dead_letters().await.unwrap().len(), 1);
    assert_eq!(q.depth().await.unwrap(), Default::default());
}

#[tokio::test]
async fn receipts_and_limits_are_checked() {
    let (_local, a) = provisioned(HOUR, Duration::from_secs(30)).await;
    let q = &a.queue;
    q.send(msg("aa00", "1", "one")).await.unwrap();
    let got = q.receive(1, Duration::from_secs(1)).await.unwrap();
    q.delete(&got[0].receipt).await.unwrap();
    let bogus = ReceiptHandle("not-a-receipt".into());
    assert_eq!(
        q.change_visibility(&bogus, Duration::ZERO).await,
        Err(QueueError::InvalidReceipt)
    );
    assert!(matches!(
        q.receive(0, Duration::ZERO).await,
        Err(QueueError::Invalid(_))
    ));
    assert!(matches!(
        q.receive(11, Duration::ZERO).await,
        Err(QueueError::Invalid(_))
    ));
    assert!(matches!(
        q.receive(1, Duration::from_secs(21)).await,
        Err(QueueError::Invalid(_))
    ));
    let big = msg("aa00", "2", &"x".repeat(256 * 1024 + 1));
    assert!(
        matches!(q.send(big).await, Err(QueueError::Invalid(_))),
        "refused before the call"
    );
    assert!(matches!(
        q.send(msg("", "3", "x")).await,
        Err(QueueError::Invalid(_))
    ));
    assert_eq!(
        q.depth().await.unwrap(),
        Default::default(),
        "nothing was queued"
    );
}

#[tokio::test]
async fn the_visibility_timeout_brings_an_unacknowledged_message_back() {
    let (_local, a) = provisioned(HOUR, Duration::from_secs(1)).await;
    let q = &a.queue;
    q.send(msg("bb11", "1", "one")).await.unwrap();
    let first = q.receive(1, Duration::from_secs(1)).await.unwrap();
    assert_eq!(first.len(), 1);
    assert!(
        q.receive(1, Duration::ZERO).await.unwrap().is_empty(),
        "hidden while in flight"
    );
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let again = q.receive(1, Duration::from_secs(2)).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].receive_count, 2);
    assert!(q.oldest_age().await.unwrap().unwrap() >= Duration::from_secs(1));
    q.delete(&again[0].receipt).await.unwrap();
}

#[tokio::test]
async fn given_up_stream_records_reach_the_failure_queue() {
    let (_local, a) = provisioned(HOUR, Duration::from_secs(30)).await;
    let failure = BatchFailure {
        handler: "sync".into(),
        reason: DiscardReason::RetriesExhausted,
        attempts: 11,
        records: vec![],
    };
    a.failures.send(&failure).await.unwrap();
    let out = a
        .clients
        .sqs
        .receive_message()
        .queue_url(a.failures.url())
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    let body = out.messages()[0].body().unwrap();
    let back: BatchFailure = serde_json::from_str(body).unwrap();
    assert_eq!(back, failure);
}

#[tokio::test]
async fn the_status_document_is_overwritten_whole_with_cache_headers() {
    let (_local, a) = provisioned(HOUR, Duration::from_secs(30)).await;
    assert_eq!(a.status.get().await.unwrap(), None, "nothing yet");
    a.status.put(br#"{"v":1}"#).await.unwrap();
    a.status.put(br#"{"v":2}"#).await.unwrap();
    assert_eq!(
        a.status.get().await.unwrap().as_deref(),
        Some(&br#"{"v":2}"#[..])
    );
    let head = a
        .clients
        .s3
        .head_object()
        .bucket(&a.resources.bucket)
        .key(&a.resources.status_key)
        .send()
        .await
        .unwrap();
    assert_eq!(
        head.cache_control(),
        Some(booking_aws::status::STATUS_CACHE_CONTROL)
    );
    assert_eq!(head.content_type(), Some("application/json"));
}
