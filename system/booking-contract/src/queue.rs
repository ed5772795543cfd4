//! The queue contract suite: SQS FIFO's semantics as the worker relies on
//! them (`booking::queue` says each), for every adapter of
//! [`booking::Queue`].
//!
//! An adapter's test file implements [`QueueFixture`] (a fresh, empty queue
//! with a given [`QueueConfig`], a way to move its time, and the
//! [`Capabilities`] it lacks) and calls [`queue_contract!`](crate::queue_contract)
//! once, which expands to one `#[tokio::test]` per case:
//!
//! ```ignore
//! booking_contract::queue_contract!(MyFixture::start().await);
//! ```
//!
//! The cases wait in real time (long polls, a concurrent drain), so no case
//! pauses tokio's clock: an adapter that talks to a server needs real I/O
//! timeouts. Message times (visibility, the deduplication window, ages)
//! move with [`QueueFixture::advance`]: a manual clock where the adapter
//! takes an injected one (embedded, Redis), a sleep where it cannot (SQS on
//! moto, whose timing is the server's and in whole seconds). What an adapter
//! cannot show (moto's deduplication, SQS's approximate oldest age, …) is a
//! capability set to `false`: the case then checks what the adapter does
//! promise and says on stderr what it left out.

// a test suite: a failed call or check is the test failing
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use booking::CandidateHash;
use booking::queue::{
    Message, Queue, QueueConfig, QueueDepth, QueueError, ReceiptHandle, Received, SendOutcome,
};

/// A receive that expects nothing: a short poll.
pub const NO_WAIT: Duration = Duration::ZERO;
/// A receive that expects something: long enough for any adapter to deliver
/// it, returned from as soon as it does.
pub const WAIT: Duration = Duration::from_secs(2);
/// The visibility timeout of the cases where time is real (a sleep per
/// timeout): SQS's shortest that is not zero.
pub const REAL_TIME_VISIBILITY: Duration = Duration::from_secs(1);
/// How long a woken long poll may take, after what woke it, at most: well
/// under the poll's wait, so a poll that only returned at its timeout fails.
pub const WAKE_MAX: Duration = Duration::from_millis(1_500);

/// What an adapter can show; [`Capabilities::FULL`] is the embedded queue's
/// whole contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// [`QueueFixture::advance`] moves an injected clock: instant, exact to
    /// the millisecond, and as far as a case likes (five minutes of
    /// deduplication window). Otherwise it sleeps, and the cases keep their
    /// timeouts at [`REAL_TIME_VISIBILITY`].
    pub manual_time: bool,
    /// A duplicate send answers [`SendOutcome::Deduplicated`] (SQS answers
    /// every send alike; the duplicate is still delivered once).
    pub reports_duplicates: bool,
    /// Deduplication is scoped by message group, outlives a delete, and
    /// lasts the configured window (moto forgets an ID once its message is
    /// deleted and ignores the scope).
    pub full_deduplication: bool,
    /// A redelivered head is delivered before the rest of its group (moto
    /// may reorder a group after a visibility-timeout redelivery).
    pub order_after_redelivery: bool,
    /// Concurrent receives keep a group's one message in flight and deliver
    /// each message once (moto's threaded server runs receives without a
    /// lock, so two receives can take the next message of one group, or the
    /// same message).
    pub order_under_concurrent_receives: bool,
    /// A long poll sees a group that a delete unblocks while it waits
    /// (moto's keeps the groups that were in flight when it began blocked
    /// until it returns).
    pub long_poll_sees_unblocked_groups: bool,
    /// A receipt whose visibility ran out, or whose message was deleted, is
    /// refused (moto accepts some stale receipts).
    pub stale_receipts_refused: bool,
    /// [`Queue::oldest_age`] is the exact age of the oldest message not
    /// deleted (SQS's adapter reports what its own receives saw).
    pub exact_oldest_age: bool,
}

impl Capabilities {
    /// Everything: the embedded queue and the Redis queue.
    pub const FULL: Capabilities = Capabilities {
        manual_time: true,
        reports_duplicates: true,
        full_deduplication: true,
        order_after_redelivery: true,
        order_under_concurrent_receives: true,
        long_poll_sees_unblocked_groups: true,
        stale_receipts_refused: true,
        exact_oldest_age: true,
    };
}

/// An adapter under test.
#[async_trait]
pub trait QueueFixture: Send + Sync {
    /// A fresh, empty queue with `config` (its dead-letter queue empty too),
    /// reading the fixture's time. Without [`Capabilities::manual_time`] the
    /// deduplication window may be the service's own.
    async fn queue(&self, config: QueueConfig) -> Arc<dyn Queue>;

    /// Moves the time of the fixture's queues forward by at least `by`.
    async fn advance(&self, by: Duration);

    /// The time the fixture's queues read now, ms since the epoch.
    fn now_ms(&self) -> u64;

    /// What the adapter can show.
    fn capabilities(&self) -> Capabilities;
}

/// The configuration the cases use unless they test one: the settings'
/// where time is manual, [`REAL_TIME_VISIBILITY`] where it is real.
pub fn standard_config(capabilities: &Capabilities) -> QueueConfig {
    if capabilities.manual_time {
        QueueConfig::default()
    } else {
        QueueConfig {
            visibility_timeout: REAL_TIME_VISIBILITY,
            ..QueueConfig::default()
        }
    }
}

/// A message of `group` whose deduplication ID is `<group>-<body>`.
pub fn msg(group: &str, body: &str) -> Message {
    Message {
        body: body.into(),
        group_id: group.into(),
        deduplication_id: format!("{group}-{body}"),
    }
}

/// The bodies of a batch, in order.
pub fn bodies(received: &[Received]) -> Vec<&str> {
    received.iter().map(|r| r.message.body.as_str()).collect()
}

fn skipped(case: &str, what: &str) {
    eprintln!("queue contract, {case}: not checked on this adapter: {what}");
}

async fn fresh(fixture: &dyn QueueFixture) -> (Arc<dyn Queue>, Capabilities, QueueConfig) {
    let capabilities = fixture.capabilities();
    let config = standard_config(&capabilities);
    (fixture.queue(config.clone()).await, capabilities, config)
}

async fn depth(q: &dyn Queue) -> QueueDepth {
    q.depth().await.expect("depth")
}

async fn receive(q: &dyn Queue, max: usize, wait: Duration) -> Vec<Received> {
    q.receive(max, wait).await.expect("receive")
}

async fn send(q: &dyn Queue, m: Message) -> SendOutcome {
    q.send(m).await.expect("send")
}

/// Nothing more of a group is delivered while its head is in flight; groups
/// interleave, the oldest head first; a receive takes several consecutive
/// messages of a group; `depth` counts visible and in-flight messages.
pub async fn a_group_delivers_nothing_more_while_its_head_is_in_flight_and_groups_interleave(
    fixture: &dyn QueueFixture,
) {
    let (q, _, _) = fresh(fixture).await;
    for (g, b) in [
        ("aaaa", "a1"),
        ("aaaa", "a2"),
        ("bbbb", "b1"),
        ("aaaa", "a3"),
    ] {
        send(&*q, msg(g, b)).await;
    }
    assert_eq!(
        depth(&*q).await,
        QueueDepth {
            visible: 4,
            in_flight: 0
        }
    );
    let first = receive(&*q, 1, WAIT).await;
    assert_eq!(bodies(&first), ["a1"], "the oldest head first");
    let second = receive(&*q, 10, WAIT).await;
    assert_eq!(bodies(&second), ["b1"], "group aaaa is blocked behind a1");
    assert!(receive(&*q, 10, NO_WAIT).await.is_empty());

    q.delete(&first[0].receipt).await.expect("delete");
    let rest = receive(&*q, 10, WAIT).await;
    assert_eq!(
        bodies(&rest),
        ["a2", "a3"],
        "in order, several of a group at once"
    );
    assert_eq!(
        depth(&*q).await,
        QueueDepth {
            visible: 0,
            in_flight: 3
        }
    );
}

/// Six receivers drain eight groups of forty, handling each batch in order
/// before deleting: every message is seen once, each group in order.
pub async fn order_within_each_group_holds_under_concurrent_receivers(fixture: &dyn QueueFixture) {
    const CASE: &str = "order_within_each_group_holds_under_concurrent_receivers";
    const GROUPS: usize = 8;
    const PER_GROUP: usize = 40;
    // where receives race, fewer: the server is slow and what is checked less
    const PER_GROUP_RACING: usize = 10;
    let (q, capabilities, _) = fresh(fixture).await;
    let per_group = if capabilities.order_under_concurrent_receives {
        PER_GROUP
    } else {
        PER_GROUP_RACING
    };
    for i in 0..per_group {
        for g in 0..GROUPS {
            send(&*q, msg(&format!("g{g:03}"), &i.to_string())).await;
        }
    }
    let seen: Arc<Mutex<HashMap<String, Vec<usize>>>> = Arc::default();
    let mut receivers = Vec::new();
    for _ in 0..6 {
        let q = Arc::clone(&q);
        let seen = Arc::clone(&seen);
        receivers.push(tokio::spawn(async move {
            loop {
                let batch = q
                    .receive(3, Duration::from_millis(200))
                    .await
                    .expect("receive");
                if batch.is_empty() {
                    break;
                }
                for r in batch {
                    // handled, in the order received, then acknowledged
                    seen.lock()
                        .expect("seen")
                        .entry(r.message.group_id.clone())
                        .or_default()
                        .push(r.message.body.parse().expect("a number"));
                    tokio::task::yield_now().await;
                    q.delete(&r.receipt).await.expect("delete");
                }
            }
        }));
    }
    for r in receivers {
        r.await.expect("receiver");
    }
    let mut seen = std::mem::take(&mut *seen.lock().expect("seen"));
    assert_eq!(seen.len(), GROUPS);
    if !capabilities.order_under_concurrent_receives {
        skipped(
            CASE,
            "the order and once only; each message at least once is",
        );
        for order in seen.values_mut() {
            order.sort_unstable();
            order.dedup();
        }
    }
    for (group, order) in &seen {
        assert_eq!(
            *order,
            (0..per_group).collect::<Vec<_>>(),
            "group {group}: each message once, in order"
        );
    }
    assert_eq!(depth(&*q).await, QueueDepth::default());
}

/// A retried send (same group and deduplication ID) is queued once; a
/// re-booking (another request time, so another ID) is a new message.
pub async fn a_duplicate_send_is_queued_once(fixture: &dyn QueueFixture) {
    let (q, capabilities, _) = fresh(fixture).await;
    let c = CandidateHash::of("candidate-1");
    let now = fixture.now_ms();
    let m = Message::admission(&c, now, "{\"booking\":1}".into());
    assert_eq!(send(&*q, m.clone()).await, SendOutcome::Queued);
    let again = send(&*q, m.clone()).await;
    if capabilities.reports_duplicates {
        assert_eq!(again, SendOutcome::Deduplicated);
    }
    let rebooking = Message::admission(&c, now + 1, "{\"booking\":2}".into());
    assert_eq!(send(&*q, rebooking.clone()).await, SendOutcome::Queued);
    assert_eq!(
        depth(&*q).await,
        QueueDepth {
            visible: 2,
            in_flight: 0
        },
        "the duplicate was not queued"
    );
    let got = receive(&*q, 10, WAIT).await;
    assert_eq!(
        got.iter().map(|r| r.message.clone()).collect::<Vec<_>>(),
        [m, rebooking],
        "one group, in order, the duplicate once"
    );
}

/// Deduplication is by (group, ID), outlives the message's delete, runs
/// from the first send (a duplicate does not extend it) and ends with the
/// window.
pub async fn duplicates_are_scoped_by_group_outlive_the_delete_and_end_with_the_window(
    fixture: &dyn QueueFixture,
) {
    const CASE: &str = "duplicates_are_scoped_by_group_outlive_the_delete_and_end_with_the_window";
    let (q, capabilities, config) = fresh(fixture).await;
    if !(capabilities.full_deduplication && capabilities.manual_time) {
        skipped(CASE, "the deduplication scope, its window and a deleted ID");
        return;
    }
    let c = CandidateHash::of("candidate-1");
    let m = Message::admission(&c, fixture.now_ms(), "{\"booking\":1}".into());
    assert_eq!(send(&*q, m.clone()).await, SendOutcome::Queued);
    // scope is the message group: the same ID in another group is a new message
    let other_group = Message {
        group_id: "ffff".into(),
        ..m.clone()
    };
    assert_eq!(send(&*q, other_group).await, SendOutcome::Queued);

    // deleting the original does not end the window
    let got = receive(&*q, 1, WAIT).await;
    assert_eq!(got[0].message, m);
    q.delete(&got[0].receipt).await.expect("delete");
    fixture
        .advance(config.deduplication_window - Duration::from_millis(1))
        .await;
    assert_eq!(send(&*q, m.clone()).await, SendOutcome::Deduplicated);

    // a duplicate does not extend the window: it runs from the first send
    fixture.advance(Duration::from_millis(1)).await;
    assert_eq!(send(&*q, m.clone()).await, SendOutcome::Queued);
    assert_eq!(send(&*q, m).await, SendOutcome::Deduplicated);
    let d = depth(&*q).await;
    assert_eq!(d.visible + d.in_flight, 2);
}

/// An unacknowledged message comes back when its visibility runs out (not
/// a millisecond before), with its receive count raised and a new receipt;
/// the old receipt is dead; the group then moves on.
pub async fn an_expired_visibility_redelivers_with_the_count_raised_and_a_new_receipt(
    fixture: &dyn QueueFixture,
) {
    const CASE: &str = "an_expired_visibility_redelivers_with_the_count_raised_and_a_new_receipt";
    let (q, capabilities, config) = fresh(fixture).await;
    let v = config.visibility_timeout;
    let before = fixture.now_ms();
    send(&*q, msg("aaaa", "a1")).await;
    let after = fixture.now_ms();
    if capabilities.order_after_redelivery {
        send(&*q, msg("aaaa", "a2")).await;
    } else {
        skipped(CASE, "the group's order after a redelivery");
    }
    let first = receive(&*q, 1, WAIT).await.remove(0);
    assert_eq!(
        (first.message.body.as_str(), first.receive_count),
        ("a1", 1)
    );
    let slack = if capabilities.manual_time { 0 } else { 1_000 };
    assert!(
        (before.saturating_sub(slack)..=after + slack).contains(&first.sent_ms),
        "sent at {} (sent between {before} and {after})",
        first.sent_ms
    );

    if capabilities.manual_time {
        fixture.advance(v - Duration::from_millis(1)).await;
        assert!(
            receive(&*q, 10, NO_WAIT).await.is_empty(),
            "still hidden, and a2 waits behind it"
        );
        fixture.advance(Duration::from_millis(1)).await;
    } else {
        assert!(receive(&*q, 10, NO_WAIT).await.is_empty(), "hidden");
        fixture.advance(v).await;
    }
    let again = receive(&*q, 1, WAIT).await.remove(0);
    assert_eq!(
        (again.message.body.as_str(), again.receive_count),
        ("a1", 2)
    );
    assert_ne!(again.receipt, first.receipt);
    if capabilities.stale_receipts_refused {
        assert_eq!(
            q.delete(&first.receipt).await,
            Err(QueueError::InvalidReceipt),
            "the first receive's handle is stale"
        );
    }
    q.delete(&again.receipt).await.expect("delete");
    if capabilities.order_after_redelivery {
        let next = receive(&*q, 1, WAIT).await.remove(0);
        assert_eq!((next.message.body.as_str(), next.receive_count), ("a2", 1));
    }
}

/// After `receives_max` (5) receives a message goes to the dead-letter queue
/// instead of a sixth delivery, and its group moves on; reading the
/// dead-letter queue takes nothing from it.
pub async fn after_the_last_receive_a_message_goes_to_the_dead_letter_queue(
    fixture: &dyn QueueFixture,
) {
    let (q, capabilities, config) = fresh(fixture).await;
    assert_eq!(config.receives_max, 5);
    send(&*q, msg("aaaa", "poison")).await;
    send(&*q, msg("aaaa", "next")).await;
    for n in 1..=config.receives_max {
        let got = receive(&*q, 1, WAIT).await;
        assert_eq!(bodies(&got), ["poison"], "receive {n}");
        assert_eq!(got[0].receive_count, n);
        assert!(q.dead_letters().await.expect("dead letters").is_empty());
        // given back by running out (the last time too) or, as the worker
        // gives back poison, at once
        if capabilities.manual_time && n % 2 == 1 {
            fixture.advance(config.visibility_timeout).await;
        } else {
            q.change_visibility(&got[0].receipt, Duration::ZERO)
                .await
                .expect("change visibility");
        }
    }
    let got = receive(&*q, 10, WAIT).await;
    assert_eq!(bodies(&got), ["next"], "the group moves on, without poison");
    assert_eq!(got[0].receive_count, 1);
    assert_eq!(
        q.dead_letters().await.expect("dead letters"),
        vec![msg("aaaa", "poison")],
        "moved instead of a sixth delivery"
    );
    assert_eq!(
        q.dead_letters().await.expect("dead letters").len(),
        1,
        "a reading takes nothing"
    );
    assert_eq!(
        depth(&*q).await,
        QueueDepth {
            visible: 0,
            in_flight: 1
        },
        "the dead letter is not in the queue any more"
    );
}

/// The receive limit is the configuration's (here 2): the message that
/// runs out of its second visibility (set to zero) is a dead letter.
pub async fn the_receive_limit_follows_the_config(fixture: &dyn QueueFixture) {
    let config = QueueConfig {
        receives_max: 2,
        visibility_timeout: Duration::from_secs(1),
        ..QueueConfig::default()
    };
    let q = fixture.queue(config).await;
    send(&*q, msg("aaaa", "a1")).await;
    let first = receive(&*q, 1, WAIT).await;
    assert_eq!(first.len(), 1);
    fixture.advance(Duration::from_secs(1)).await;
    let second = receive(&*q, 1, WAIT).await;
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].receive_count, 2);
    q.change_visibility(&second[0].receipt, Duration::ZERO)
        .await
        .expect("change visibility");
    assert!(receive(&*q, 1, NO_WAIT).await.is_empty());
    assert_eq!(q.dead_letters().await.expect("dead letters").len(), 1);
    assert_eq!(depth(&*q).await, QueueDepth::default());
}

/// A receipt nobody issued is refused; so is one whose visibility ran out
/// (even before the message is received again) and one already used to
/// delete.
pub async fn stale_unknown_and_used_receipts_are_invalid(fixture: &dyn QueueFixture) {
    const CASE: &str = "stale_unknown_and_used_receipts_are_invalid";
    let (q, capabilities, config) = fresh(fixture).await;
    send(&*q, msg("aaaa", "a1")).await;
    let got = receive(&*q, 1, WAIT).await.remove(0);
    assert_eq!(
        q.change_visibility(&ReceiptHandle("nonsense".into()), Duration::ZERO)
            .await,
        Err(QueueError::InvalidReceipt)
    );
    if !capabilities.stale_receipts_refused {
        skipped(CASE, "expired and used receipts");
        q.delete(&got.receipt).await.expect("delete");
        return;
    }
    assert_eq!(
        q.delete(&ReceiptHandle("nonsense".into())).await,
        Err(QueueError::InvalidReceipt)
    );
    // visibility ran out: the handle died with it, even before a new receive
    fixture.advance(config.visibility_timeout).await;
    assert_eq!(
        q.delete(&got.receipt).await,
        Err(QueueError::InvalidReceipt)
    );
    assert_eq!(
        q.change_visibility(&got.receipt, Duration::from_secs(5))
            .await,
        Err(QueueError::InvalidReceipt)
    );
    assert_eq!(depth(&*q).await.visible, 1, "still there");

    let again = receive(&*q, 1, WAIT).await.remove(0);
    q.delete(&again.receipt).await.expect("delete");
    assert_eq!(
        q.delete(&again.receipt).await,
        Err(QueueError::InvalidReceipt),
        "deleted once"
    );
}

/// `change_visibility` hides a message longer, or (zero) returns it at once
/// with its count kept; past SQS's 12 hours it is refused.
pub async fn change_visibility_hides_longer_or_returns_at_once(fixture: &dyn QueueFixture) {
    let (q, _, config) = fresh(fixture).await;
    let v = config.visibility_timeout;
    send(&*q, msg("aaaa", "a1")).await;
    let got = receive(&*q, 1, WAIT).await.remove(0);
    q.change_visibility(&got.receipt, v * 4)
        .await
        .expect("change visibility");
    fixture.advance(v).await;
    assert!(receive(&*q, 1, NO_WAIT).await.is_empty(), "hidden longer");
    q.delete(&got.receipt).await.expect("delete");

    send(&*q, msg("aaaa", "a2")).await;
    let got = receive(&*q, 1, WAIT).await.remove(0);
    q.change_visibility(&got.receipt, Duration::ZERO)
        .await
        .expect("change visibility");
    let again = receive(&*q, 1, WAIT).await.remove(0);
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

/// A long poll returns as soon as a message is sent, and an empty one after
/// its wait.
pub async fn a_long_poll_returns_as_soon_as_a_message_is_sent(fixture: &dyn QueueFixture) {
    let (q, _, _) = fresh(fixture).await;
    let poll = {
        let q = Arc::clone(&q);
        tokio::spawn(async move {
            let started = Instant::now();
            let got = q
                .receive(10, Duration::from_secs(5))
                .await
                .expect("receive");
            (got, started.elapsed())
        })
    };
    let pause = Duration::from_millis(300);
    tokio::time::sleep(pause).await;
    let sent = Instant::now();
    send(&*q, msg("aaaa", "a1")).await;
    let (got, waited) = poll.await.expect("poll");
    assert_eq!(bodies(&got), ["a1"]);
    assert!(
        waited >= pause && sent.elapsed() < WAKE_MAX,
        "woken by the send, not the timeout: {waited:?}"
    );

    let started = Instant::now();
    assert!(
        receive(&*q, 10, Duration::from_secs(1)).await.is_empty(),
        "nothing more"
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(990) && waited < Duration::from_secs(3),
        "empty after the wait: {waited:?}"
    );
}

/// A long poll blocked behind a group's head wakes when the head is
/// deleted.
pub async fn a_long_poll_wakes_when_a_delete_unblocks_the_group(fixture: &dyn QueueFixture) {
    const CASE: &str = "a_long_poll_wakes_when_a_delete_unblocks_the_group";
    let (q, capabilities, _) = fresh(fixture).await;
    send(&*q, msg("aaaa", "a1")).await;
    send(&*q, msg("aaaa", "a2")).await;
    let head = receive(&*q, 1, WAIT).await.remove(0);
    assert_eq!(head.message.body, "a1");
    if !capabilities.long_poll_sees_unblocked_groups {
        skipped(CASE, "the wake; the next receive after the delete gets a2");
        q.delete(&head.receipt).await.expect("delete");
        assert_eq!(bodies(&receive(&*q, 1, WAIT).await), ["a2"]);
        return;
    }
    let poll = {
        let q = Arc::clone(&q);
        tokio::spawn(async move { q.receive(1, Duration::from_secs(5)).await.expect("receive") })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let deleted = Instant::now();
    q.delete(&head.receipt).await.expect("delete");
    let got = poll.await.expect("poll");
    assert_eq!(bodies(&got), ["a2"]);
    assert!(deleted.elapsed() < WAKE_MAX, "{:?}", deleted.elapsed());
}

/// Receives of 0 or 11 messages, a long poll over 20 s and a message
/// outside SQS's limits are refused before anything is queued.
pub async fn receive_limits_are_sqs_limits(fixture: &dyn QueueFixture) {
    let (q, _, _) = fresh(fixture).await;
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
    for bad in [
        Message {
            group_id: String::new(),
            ..msg("aaaa", "a1")
        },
        Message {
            deduplication_id: "has space".into(),
            ..msg("aaaa", "a1")
        },
        msg("aaaa", &"x".repeat(booking::queue::BODY_BYTES_MAX + 1)),
    ] {
        assert!(matches!(q.send(bad).await, Err(QueueError::Invalid(_))));
    }
    assert_eq!(depth(&*q).await, QueueDepth::default(), "nothing queued");
}

/// The oldest age is the oldest message not deleted, in flight or not;
/// `None` when the queue is empty.
pub async fn oldest_age_is_the_oldest_undeleted_message_in_flight_or_not(
    fixture: &dyn QueueFixture,
) {
    const CASE: &str = "oldest_age_is_the_oldest_undeleted_message_in_flight_or_not";
    let (q, capabilities, _) = fresh(fixture).await;
    assert_eq!(q.oldest_age().await.expect("oldest age"), None);
    if !(capabilities.exact_oldest_age && capabilities.manual_time) {
        skipped(CASE, "the exact age");
        send(&*q, msg("aaaa", "a1")).await;
        assert!(q.oldest_age().await.expect("oldest age").is_some());
        let got = receive(&*q, 1, WAIT).await.remove(0);
        q.delete(&got.receipt).await.expect("delete");
        assert_eq!(q.oldest_age().await.expect("oldest age"), None);
        return;
    }
    send(&*q, msg("aaaa", "a1")).await;
    fixture.advance(Duration::from_secs(3)).await;
    send(&*q, msg("bbbb", "b1")).await;
    fixture.advance(Duration::from_secs(1)).await;
    let age = |q: Arc<dyn Queue>| async move { q.oldest_age().await.expect("oldest age") };
    assert_eq!(age(Arc::clone(&q)).await, Some(Duration::from_secs(4)));

    let got = receive(&*q, 1, WAIT).await.remove(0);
    assert_eq!(got.message.body, "a1");
    assert_eq!(
        age(Arc::clone(&q)).await,
        Some(Duration::from_secs(4)),
        "received is not done with"
    );
    q.delete(&got.receipt).await.expect("delete");
    assert_eq!(age(Arc::clone(&q)).await, Some(Duration::from_secs(1)));
    let got = receive(&*q, 1, WAIT).await.remove(0);
    q.delete(&got.receipt).await.expect("delete");
    assert_eq!(age(q).await, None);
}

/// The ops reset's purge: every message, waiting or in flight, and every
/// dead letter goes, counted; a receipt of a purged message is refused, and
/// the queue takes and delivers new messages as before.
pub async fn purge_empties_the_queue_and_the_dead_letter_queue(fixture: &dyn QueueFixture) {
    const CASE: &str = "purge_empties_the_queue_and_the_dead_letter_queue";
    let config = QueueConfig {
        receives_max: 2,
        visibility_timeout: Duration::from_secs(1),
        ..QueueConfig::default()
    };
    let capabilities = fixture.capabilities();
    let q = fixture.queue(config).await;
    // a dead letter: received twice, its visibility then set to zero
    send(&*q, msg("dddd", "d1")).await;
    assert_eq!(receive(&*q, 1, WAIT).await.len(), 1);
    fixture.advance(Duration::from_secs(1)).await;
    let second = receive(&*q, 1, WAIT).await;
    assert_eq!(second.len(), 1);
    q.change_visibility(&second[0].receipt, Duration::ZERO)
        .await
        .expect("change visibility");
    assert!(receive(&*q, 1, NO_WAIT).await.is_empty());
    assert_eq!(q.dead_letters().await.expect("dead letters").len(), 1);
    // one in flight, two waiting
    send(&*q, msg("aaaa", "a1")).await;
    send(&*q, msg("aaaa", "a2")).await;
    send(&*q, msg("bbbb", "b1")).await;
    let held = receive(&*q, 1, WAIT).await.remove(0);
    assert_eq!(held.message, msg("aaaa", "a1"));
    assert_eq!(
        depth(&*q).await,
        QueueDepth {
            visible: 2,
            in_flight: 1
        }
    );

    let purged = q.purge().await.expect("purge").expect("the adapter purges");
    assert_eq!(
        purged,
        booking::queue::Purged {
            visible: 2,
            in_flight: 1,
            dead_letters: 1
        }
    );
    assert_eq!(depth(&*q).await, QueueDepth::default());
    assert!(q.dead_letters().await.expect("dead letters").is_empty());
    assert!(receive(&*q, 1, NO_WAIT).await.is_empty());
    if capabilities.stale_receipts_refused {
        assert_eq!(
            q.delete(&held.receipt).await,
            Err(QueueError::InvalidReceipt),
            "the worker's receipt died with its message"
        );
    } else {
        skipped(CASE, "the purged message's receipt refused");
    }

    send(&*q, msg("cccc", "c1")).await;
    let next = receive(&*q, 1, WAIT).await;
    assert_eq!(next.len(), 1, "the queue carries on");
    assert_eq!(next[0].message, msg("cccc", "c1"));
    assert_eq!(next[0].receive_count, 1);
    q.delete(&next[0].receipt).await.expect("delete");
}

/// One `#[tokio::test]` per case of the queue contract, each over the
/// fixture `$fixture` (an expression, evaluated in the test's runtime; it
/// may `.await`), which implements [`QueueFixture`].
#[macro_export]
macro_rules! queue_contract {
    ($fixture:expr) => {
        $crate::__queue_cases!($fixture;
            [tokio::test] a_group_delivers_nothing_more_while_its_head_is_in_flight_and_groups_interleave,
            [tokio::test(flavor = "multi_thread", worker_threads = 4)] order_within_each_group_holds_under_concurrent_receivers,
            [tokio::test] a_duplicate_send_is_queued_once,
            [tokio::test] duplicates_are_scoped_by_group_outlive_the_delete_and_end_with_the_window,
            [tokio::test] an_expired_visibility_redelivers_with_the_count_raised_and_a_new_receipt,
            [tokio::test] after_the_last_receive_a_message_goes_to_the_dead_letter_queue,
            [tokio::test] the_receive_limit_follows_the_config,
            [tokio::test] stale_unknown_and_used_receipts_are_invalid,
            [tokio::test] change_visibility_hides_longer_or_returns_at_once,
            [tokio::test] a_long_poll_returns_as_soon_as_a_message_is_sent,
            [tokio::test] a_long_poll_wakes_when_a_delete_unblocks_the_group,
            [tokio::test] receive_limits_are_sqs_limits,
            [tokio::test] oldest_age_is_the_oldest_undeleted_message_in_flight_or_not,
            [tokio::test] purge_empties_the_queue_and_the_dead_letter_queue,
        );
    };
}

/// The expansion of [`queue_contract!`](crate::queue_contract): one test
/// per `[attribute] case`.
#[doc(hidden)]
#[macro_export]
macro_rules! __queue_cases {
    ($fixture:expr; $( [$($attr:tt)*] $case:ident ),* $(,)?) => {
        $(
            #[$($attr)*]
            async fn $case() {
                let fixture = $fixture;
                $crate::queue::$case(&fixture).await;
            }
        )*
    };
}
