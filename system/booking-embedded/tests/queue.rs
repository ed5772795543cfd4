//! The embedded queue against SQS FIFO's semantics: order within a group,
//! deduplication window, visibility timeout, receive counts, the dead-letter
//! queue, receipts, long polling and the age of the oldest message.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use booking::CandidateHash;
use booking::clock::ManualClock;
use booking::queue::{Message, Queue, QueueDepth, QueueError, ReceiptHandle, SendOutcome};
use booking::settings::{DEDUPLICATION_WINDOW, VISIBILITY_TIMEOUT};
use booking_embedded::queue::{EmbeddedQueue, QueueConfig};
use parking_lot::Mutex;

const T0: u64 = 1_700_000_000_000;
const NO_WAIT: Duration = Duration::ZERO;

fn queue() -> (Arc<EmbeddedQueue>, ManualClock) {
    let clock = ManualClock::new(T0);
    let q = EmbeddedQueue::new(Arc::new(clock.clone()), QueueConfig::default());
    (Arc::new(q), clock)
}

fn msg(group: &str, body: &str) -> Message {
    Message {
        body: body.into(),
        group_id: group.into(),
        deduplication_id: format!("{group}-{body}"),
    }
}

fn bodies(received: &[booking::queue::Received]) -> Vec<&str> {
    received.iter().map(|r| r.message.body.as_str()).collect()
}

#[tokio::test]
async fn a_group_delivers_nothing_more_while_its_head_is_in_flight_and_groups_interleave() {
    let (q, _) = queue();
    for (g, b) in [
        ("aaaa", "a1"),
        ("aaaa", "a2"),
        ("bbbb", "b1"),
        ("aaaa", "a3"),
    ] {
        assert_eq!(q.send(msg(g, b)).await.unwrap(), SendOutcome::Queued);
    }
    let first = q.receive(1, NO_WAIT).await.unwrap();
    assert_eq!(bodies(&first), ["a1"]);
    let second = q.receive(10, NO_WAIT).await.unwrap();
    assert_eq!(bodies(&second), ["b1"], "group aaaa is blocked behind a1");
    assert!(q.receive(10, NO_WAIT).await.unwrap().is_empty());

    q.delete(&first[0].receipt).await.unwrap();
    let rest = q.receive(10, NO_WAIT).await.unwrap();
    assert_eq!(
        bodies(&rest),
        ["a2", "a3"],
        "in order, several of a group at once"
    );
    assert_eq!(
        q.depth().await.unwrap(),
        QueueDepth {
            visible: 0,
            in_flight: 3
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn order_within_each_group_holds_under_concurrent_receivers() {
    const GROUPS: usize = 8;
    const PER_GROUP: usize = 40;
    let (q, _) = queue();
    for i in 0..PER_GROUP {
        for g in 0..GROUPS {
            q.send(msg(&format!("g{g:03}"), &i.to_string()))
                .await
                .unwrap();
        }
    }
    let seen: Arc<Mutex<HashMap<String, Vec<usize>>>> = Arc::default();
    let mut receivers = Vec::new();
    for _ in 0..6 {
        let q = Arc::clone(&q);
        let seen = Arc::clone(&seen);
        receivers.push(tokio::spawn(async move {
            loop {
                let batch = q.receive(3, Duration::from_millis(50)).await.unwrap();
                if batch.is_empty() {
                    break;
                }
                for r in batch {
                    // handled, in the order received, then acknowledged
                    seen.lock()
                        .entry(r.message.group_id.clone())
                        .or_default()
                        .push(r.message.body.parse().unwrap());
                    tokio::task::yield_now().await;
                    q.delete(&r.receipt).await.unwrap();
                }
            }
        }));
    }
    for r in receivers {
        r.await.unwrap();
    }
    let seen = std::mem::take(&mut *seen.lock());
    assert_eq!(seen.len(), GROUPS);
    for (group, order) in &seen {
        assert_eq!(
            *order,
            (0..PER_GROUP).collect::<Vec<_>>(),
            "group {group}: each message once, in order"
        );
    }
    assert_eq!(q.depth().await.unwrap(), QueueDepth::default());
}

#[tokio::test]
async fn duplicates_within_the_window_are_dropped_and_not_after_it() {
    let (q, clock) = queue();
    let c = CandidateHash::of("candidate-1");
    let m = Message::admission(&c, T0, "{\"booking\":1}".into());
    assert_eq!(q.send(m.clone()).await.unwrap(), SendOutcome::Queued);
    assert_eq!(q.send(m.clone()).await.unwrap(), SendOutcome::Deduplicated);

    // scope is the message group: the same ID in another group is a new message
    let other_group = Message {
        group_id: "ffff".into(),
        ..m.clone()
    };
    assert_eq!(q.send(other_group).await.unwrap(), SendOutcome::Queued);
    // a real re-booking has another request time, so another ID
    let rebooking = Message::admission(&c, T0 + 1, "{\"booking\":2}".into());
    assert_eq!(q.send(rebooking).await.unwrap(), SendOutcome::Queued);

    // deleting the original does not end the window
    let got = q.receive(1, NO_WAIT).await.unwrap();
    assert_eq!(got[0].message, m);
    q.delete(&got[0].receipt).await.unwrap();
    clock.advance(DEDUPLICATION_WINDOW - Duration::from_millis(1));
    assert_eq!(q.send(m.clone()).await.unwrap(), SendOutcome::Deduplicated);

    // a duplicate does not extend the window: it runs from the first send
    clock.advance_ms(1);
    assert_eq!(q.send(m.clone()).await.unwrap(), SendOutcome::Queued);
    assert_eq!(q.send(m).await.unwrap(), SendOutcome::Deduplicated);
    assert_eq!(
        q.depth().await.unwrap().visible + q.depth().await.unwrap().in_flight,
        3
    );
}

#[tokio::test]
async fn an_expired_visibility_redelivers_with_the_count_raised_and_a_new_receipt() {
    let (q, clock) = queue();
    q.send(msg("aaaa", "a1")).await.unwrap();
    q.send(msg("aaaa", "a2")).await.unwrap();
    let first = q.receive(1, NO_WAIT).await.unwrap().remove(0);
    assert_eq!(
        (first.message.body.as_str(), first.receive_count),
        ("a1", 1)
    );
    assert_eq!(first.sent_ms, T0);

    clock.advance(VISIBILITY_TIMEOUT - Duration::from_millis(1));
    assert!(
        q.receive(10, NO_WAIT).await.unwrap().is_empty(),
        "still hidden, and a2 waits behind it"
    );
    clock.advance_ms(1);
    let again = q.receive(1, NO_WAIT).await.unwrap().remove(0);
    assert_eq!(
        (again.message.body.as_str(), again.receive_count),
        ("a1", 2)
    );
    assert_ne!(again.receipt, first.receipt);

    assert_eq!(
        q.delete(&first.receipt).await,
        Err(QueueError::InvalidReceipt),
        "the first receive's handle is stale"
    );
    q.delete(&again.receipt).await.unwrap();
    let next = q.receive(1, NO_WAIT).await.unwrap().remove(0);
    assert_eq!((next.message.body.as_str(), next.receive_count), ("a2", 1));
}

#[tokio::test]
async fn after_five_receives_a_message_goes_to_the_dead_letter_queue() {
    let (q, clock) = queue();
    q.send(msg("aaaa", "poison")).await.unwrap();
    q.send(msg("aaaa", "next")).await.unwrap();
    for n in 1..=5 {
        let got = q.receive(1, NO_WAIT).await.unwrap();
        assert_eq!(bodies(&got), ["poison"]);
        assert_eq!(got[0].receive_count, n);
        assert!(q.dead_letters().await.unwrap().is_empty());
        clock.advance(VISIBILITY_TIMEOUT);
    }
    assert_eq!(
        q.dead_letters().await.unwrap(),
        vec![msg("aaaa", "poison")],
        "moved instead of a sixth delivery"
    );
    let got = q.receive(10, NO_WAIT).await.unwrap();
    assert_eq!(bodies(&got), ["next"], "the group moves on");
    assert_eq!(got[0].receive_count, 1);
    assert_eq!(
        q.depth().await.unwrap(),
        QueueDepth {
            visible: 0,
            in_flight: 1
        },
        "the dead letter is not in the queue any more"
    );
}

#[tokio::test]
async fn the_receive_limit_follows_the_settings() {
    let clock = ManualClock::new(T0);
    let settings = booking::Settings {
        receives_max: 2,
        visibility_timeout: Duration::from_secs(1),
        ..booking::Settings::default()
    };
    let q = EmbeddedQueue::new(
        Arc::new(clock.clone()),
        QueueConfig::from_settings(&settings),
    );
    q.send(msg("aaaa", "a1")).await.unwrap();
    for _ in 0..2 {
        assert_eq!(q.receive(1, NO_WAIT).await.unwrap().len(), 1);
        clock.advance(Duration::from_secs(1));
    }
    assert!(q.receive(1, NO_WAIT).await.unwrap().is_empty());
    assert_eq!(q.dead_letters().await.unwrap().len(), 1);
}

#[tokio::test]
async fn stale_unknown_and_used_receipts_are_invalid() {
    let (q, clock) = queue();
    q.send(msg("aaaa", "a1")).await.unwrap();
    let got = q.receive(1, NO_WAIT).await.unwrap().remove(0);
    assert_eq!(
        q.delete(&ReceiptHandle("nonsense".into())).await,
        Err(QueueError::InvalidReceipt)
    );

    // visibility ran out: the handle died with it, even before a new receive
    clock.advance(VISIBILITY_TIMEOUT);
    assert_eq!(
        q.delete(&got.receipt).await,
        Err(QueueError::InvalidReceipt)
    );
    assert_eq!(
        q.change_visibility(&got.receipt, Duration::from_secs(5))
            .await,
        Err(QueueError::InvalidReceipt)
    );
    assert_eq!(q.depth().await.unwrap().visible, 1, "still there");

    let again = q.receive(1, NO_WAIT).await.unwrap().remove(0);
    q.delete(&again.receipt).await.unwrap();
    assert_eq!(
        q.delete(&again.receipt).await,
        Err(QueueError::InvalidReceipt),
        "deleted once"
    );
}

#[tokio::test]
async fn change_visibility_hides_longer_or_returns_at_once() {
    let (q, clock) = queue();
    q.send(msg("aaaa", "a1")).await.unwrap();
    let got = q.receive(1, NO_WAIT).await.unwrap().remove(0);
    q.change_visibility(&got.receipt, Duration::from_secs(120))
        .await
        .unwrap();
    clock.advance(VISIBILITY_TIMEOUT);
    assert!(
        q.receive(1, NO_WAIT).await.unwrap().is_empty(),
        "hidden longer"
    );
    q.delete(&got.receipt).await.unwrap();

    q.send(msg("aaaa", "a2")).await.unwrap();
    let got = q.receive(1, NO_WAIT).await.unwrap().remove(0);
    q.change_visibility(&got.receipt, Duration::ZERO)
        .await
        .unwrap();
    let again = q.receive(1, NO_WAIT).await.unwrap().remove(0);
    assert_eq!(
        (again.message.body.as_str(), again.receive_count),
        ("a2", 2)
    );
    assert!(matches!(
        q.change_visibility(&again.receipt, Duration::from_secs(13 * 3600))
            .await,
        Err(QueueError::Invalid(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn a_long_poll_returns_as_soon_as_a_message_is_sent() {
    let (q, _) = queue();
    let poll = {
        let q = Arc::clone(&q);
        tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            let got = q.receive(10, Duration::from_secs(20)).await.unwrap();
            (got, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    q.send(msg("aaaa", "a1")).await.unwrap();
    let (got, waited) = poll.await.unwrap();
    assert_eq!(bodies(&got), ["a1"]);
    assert!(
        waited >= Duration::from_secs(3) && waited < Duration::from_secs(4),
        "woken by the send, not the timeout: {waited:?}"
    );

    let started = tokio::time::Instant::now();
    assert!(
        q.receive(10, Duration::from_secs(20))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(20),
        "empty after the wait"
    );
}

#[tokio::test(start_paused = true)]
async fn a_long_poll_wakes_when_a_delete_unblocks_the_group() {
    let (q, _) = queue();
    q.send(msg("aaaa", "a1")).await.unwrap();
    q.send(msg("aaaa", "a2")).await.unwrap();
    let head = q.receive(1, NO_WAIT).await.unwrap().remove(0);
    let poll = {
        let q = Arc::clone(&q);
        tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            (
                q.receive(1, Duration::from_secs(20)).await.unwrap(),
                started.elapsed(),
            )
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    q.delete(&head.receipt).await.unwrap();
    let (got, waited) = poll.await.unwrap();
    assert_eq!(bodies(&got), ["a2"]);
    assert!(waited < Duration::from_secs(3), "{waited:?}");
}

#[tokio::test]
async fn receive_limits_are_sqs_limits() {
    let (q, _) = queue();
    for max in [0, 11] {
        assert!(matches!(
            q.receive(max, NO_WAIT).await,
            Err(QueueError::Invalid(_))
        ));
    }
    assert!(matches!(
        q.receive(1, Duration::from_secs(21)).await,
        Err(QueueError::Invalid(_))
    ));
    assert!(matches!(
        q.send(Message {
            group_id: String::new(),
            ..msg("aaaa", "a1")
        })
        .await,
        Err(QueueError::Invalid(_))
    ));
}

#[tokio::test]
async fn oldest_age_is_the_oldest_undeleted_message_in_flight_or_not() {
    let (q, clock) = queue();
    assert_eq!(q.oldest_age().await.unwrap(), None);
    q.send(msg("aaaa", "a1")).await.unwrap();
    clock.advance(Duration::from_secs(3));
    q.send(msg("bbbb", "b1")).await.unwrap();
    clock.advance(Duration::from_secs(1));
    assert_eq!(q.oldest_age().await.unwrap(), Some(Duration::from_secs(4)));

    let got = q.receive(1, NO_WAIT).await.unwrap().remove(0);
    assert_eq!(got.message.body, "a1");
    assert_eq!(
        q.oldest_age().await.unwrap(),
        Some(Duration::from_secs(4)),
        "received is not done with"
    );
    q.delete(&got.receipt).await.unwrap();
    assert_eq!(q.oldest_age().await.unwrap(), Some(Duration::from_secs(1)));
    let got = q.receive(1, NO_WAIT).await.unwrap().remove(0);
    q.delete(&got.receipt).await.unwrap();
    assert_eq!(q.oldest_age().await.unwrap(), None);
}
