//! Issue 19: `ExpiryHandler::run` is the TTL safety net's loop; a `run` that
//! does nothing must fail here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use booking::Ledger;
use booking::records::{Condition, RecordStore};
use booking_service::expiry::ExpiryHandler;
use common::{Stack, cand};

const WAIT: Duration = Duration::from_millis(10);
const BACKOFF: Duration = Duration::from_millis(50);
/// How long (virtual time) the loop may take to give a seat back.
const BOUND: Duration = Duration::from_secs(5);

async fn wait_for_count(s: &Stack, want: u32) -> bool {
    let deadline = tokio::time::Instant::now() + BOUND;
    while tokio::time::Instant::now() < deadline {
        if s.count().await == want {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    s.count().await == want
}

#[tokio::test(start_paused = true)]
async fn the_running_loop_gives_back_ttl_deleted_holds_and_stops_on_shutdown() {
    let s = Stack::new(3, &["x", "y", "z"]).await;
    let x = s.book("x", "t1", "P1").await;
    s.records
        .put(x.held_record(), Condition::NotExists)
        .await
        .unwrap();
    let handler = Arc::new(ExpiryHandler::new(s.records.clone(), s.ledger.clone(), 0));
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let task = {
        let h = handler.clone();
        tokio::spawn(async move { h.run(shutdown, WAIT, BACKOFF).await })
    };

    // x's hold expires and the TTL service deletes it: the loop releases it
    s.clock.advance(Duration::from_secs(11 * 60));
    assert_eq!(s.records.sweep_ttl(100).len(), 1);
    assert!(
        wait_for_count(&s, 0).await,
        "the loop released x's seat within {BOUND:?}"
    );
    assert!(s.ledger.hold(&s.sale, &cand("x")).await.unwrap().is_none());
    assert_eq!(handler.stats().released, 1);

    // a later expiry is read by the same, still running loop
    let y = s.book("y", "t2", "P2").await;
    s.records
        .put(y.held_record(), Condition::NotExists)
        .await
        .unwrap();
    assert_eq!(s.count().await, 1);
    s.clock.advance(Duration::from_secs(11 * 60));
    assert_eq!(s.records.sweep_ttl(100).len(), 1);
    assert!(wait_for_count(&s, 0).await, "y released by the live loop");
    assert_eq!(handler.stats().released, 2);

    // shutdown: the loop ends promptly
    stop.send(true).unwrap();
    tokio::time::timeout(BOUND, task)
        .await
        .expect("the loop stops on shutdown")
        .unwrap();

    // after the stop nothing is read any more: z's expiry stays unhandled
    let z = s.book("z", "t3", "P3").await;
    s.records
        .put(z.held_record(), Condition::NotExists)
        .await
        .unwrap();
    s.clock.advance(Duration::from_secs(11 * 60));
    assert_eq!(s.records.sweep_ttl(100).len(), 1);
    tokio::time::sleep(BOUND).await;
    assert_eq!(s.count().await, 1, "a stopped loop releases nothing");
    assert_eq!(handler.stats().released, 2);
}

#[tokio::test(start_paused = true)]
async fn a_loop_started_after_shutdown_returns_at_once_and_handles_nothing() {
    let s = Stack::new(1, &["x"]).await;
    let x = s.book("x", "t1", "P1").await;
    s.records
        .put(x.held_record(), Condition::NotExists)
        .await
        .unwrap();
    s.clock.advance(Duration::from_secs(11 * 60));
    assert_eq!(s.records.sweep_ttl(100).len(), 1);
    let handler = ExpiryHandler::new(s.records.clone(), s.ledger.clone(), 0);
    let (stop, shutdown) = tokio::sync::watch::channel(true);
    tokio::time::timeout(
        Duration::from_millis(1),
        handler.run(shutdown, WAIT, BACKOFF),
    )
    .await
    .expect("a stopped loop returns at once");
    drop(stop);
    assert_eq!(s.count().await, 1);
    assert_eq!(handler.stats().released, 0);
}
