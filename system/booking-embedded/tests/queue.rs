//! The embedded queue against the queue contract (`booking_contract::queue`:
//! order within a group, deduplication window, visibility timeout, receive
//! counts, the dead-letter queue, receipts, long polling, the oldest age),
//! on a manual clock; and what only the embedded queue does: long polls in
//! tokio's virtual time, which the simulator runs on.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use booking::clock::{Clock, ManualClock};
use booking::queue::Queue;
use booking_contract::queue::{Capabilities, QueueFixture, bodies, msg};
use booking_embedded::queue::{EmbeddedQueue, QueueConfig};

const T0: u64 = 1_700_000_000_000;
const NO_WAIT: Duration = Duration::ZERO;

/// Embedded queues on one manual clock.
#[derive(Debug)]
struct Embedded {
    clock: ManualClock,
}

impl Embedded {
    fn new() -> Embedded {
        Embedded {
            clock: ManualClock::new(T0),
        }
    }
}

#[async_trait]
impl QueueFixture for Embedded {
    async fn queue(&self, config: QueueConfig) -> Arc<dyn Queue> {
        Arc::new(EmbeddedQueue::new(Arc::new(self.clock.clone()), config))
    }

    async fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::FULL
    }
}

booking_contract::queue_contract!(Embedded::new());

fn queue() -> Arc<EmbeddedQueue> {
    let clock = ManualClock::new(T0);
    Arc::new(EmbeddedQueue::new(Arc::new(clock), QueueConfig::default()))
}

#[tokio::test(start_paused = true)]
async fn in_virtual_time_a_long_poll_returns_at_the_send_or_exactly_at_its_wait() {
    let q = queue();
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
async fn in_virtual_time_a_long_poll_wakes_when_a_delete_unblocks_the_group() {
    let q = queue();
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

#[test]
fn the_default_queue_is_the_settings_queue() {
    let settings = booking::Settings {
        receives_max: 2,
        visibility_timeout: Duration::from_secs(1),
        ..booking::Settings::default()
    };
    let config = QueueConfig::from_settings(&settings);
    assert_eq!(
        (config.receives_max, config.visibility_timeout),
        (2, Duration::from_secs(1))
    );
    assert_eq!(
        QueueConfig::from_settings(&booking::Settings::default()),
        QueueConfig::default()
    );
}
