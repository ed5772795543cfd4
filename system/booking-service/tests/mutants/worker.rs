//! Issue 19: the worker's outcome when its last conflict round is the one
//! that wrote: a stale record replaced in the final round is reported (and
//! counted) as replaced, not stored.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use booking::Ledger;
use booking::queue::{Queue, ReceiptHandle, Received};
use booking::records::{Condition, RecordStore};
use booking_service::worker::{Outcome, Worker, WorkerConfig};
use common::{Stack, cand, pay};

fn delivery(m: &booking::AdmittedBooking) -> Received {
    Received {
        message: m.to_message().unwrap(),
        receipt: ReceiptHandle("none".into()),
        receive_count: 1,
        sent_ms: 0,
    }
}

#[tokio::test(start_paused = true)]
async fn a_stale_record_replaced_in_the_last_conflict_round_is_replaced() {
    let s = Stack::new(1, &["x"]).await;
    let w = Worker::new(
        s.queue.clone() as std::sync::Arc<dyn Queue>,
        s.records.clone(),
        s.ledger.clone(),
        s.alerts.clone(),
        WorkerConfig {
            conflict_rounds: 1,
            ..WorkerConfig::default()
        },
    );
    let old = s.book("x", "t1", "P1").await;
    s.records
        .put(old.held_record(), Condition::NotExists)
        .await
        .unwrap();
    // released by the ledger only (the record's delete lost): a stale record
    s.ledger
        .release(&s.sale, &cand("x"), &pay("P1"))
        .await
        .unwrap();
    s.clock.advance(Duration::from_secs(1));
    let new = s.book("x", "t2", "P2").await;
    assert_eq!(w.handle(&delivery(&new)).await, Outcome::Replaced);
    let record = s.records.get(&cand("x"), true).await.unwrap().unwrap();
    assert_eq!(record.payment_id, pay("P2"));
    // a fresh candidate's record, first try: stored
    let s2 = Stack::new(2, &["y", "z"]).await;
    let w2 = Worker::new(
        s2.queue.clone() as std::sync::Arc<dyn Queue>,
        s2.records.clone(),
        s2.ledger.clone(),
        s2.alerts.clone(),
        WorkerConfig {
            conflict_rounds: 1,
            ..WorkerConfig::default()
        },
    );
    let fresh = s2.book("y", "t1", "P1").await;
    assert_eq!(w2.handle(&delivery(&fresh)).await, Outcome::Stored);
}

/// The embedded queue, counting the dead-letter reads.
#[derive(Debug)]
struct CountingQueue {
    inner: std::sync::Arc<dyn Queue>,
    dead_letter_reads: std::sync::atomic::AtomicU64,
}

#[async_trait::async_trait]
impl Queue for CountingQueue {
    async fn send(
        &self,
        message: booking::queue::Message,
    ) -> Result<booking::queue::SendOutcome, booking::QueueError> {
        self.inner.send(message).await
    }
    async fn receive(
        &self,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Received>, booking::QueueError> {
        self.inner.receive(max, wait).await
    }
    async fn delete(&self, receipt: &ReceiptHandle) -> Result<(), booking::QueueError> {
        self.inner.delete(receipt).await
    }
    async fn change_visibility(
        &self,
        receipt: &ReceiptHandle,
        timeout: Duration,
    ) -> Result<(), booking::QueueError> {
        self.inner.change_visibility(receipt, timeout).await
    }
    async fn oldest_age(&self) -> Result<Option<Duration>, booking::QueueError> {
        self.inner.oldest_age().await
    }
    async fn depth(&self) -> Result<booking::QueueDepth, booking::QueueError> {
        self.inner.depth().await
    }
    async fn dead_letters(&self) -> Result<Vec<booking::queue::Message>, booking::QueueError> {
        self.dead_letter_reads
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.dead_letters().await
    }
}

/// The running worker looks at the dead-letter queue about once a second
/// for all its pollers (not after every receive), and a letter that
/// arrives while it runs is alerted.
#[tokio::test(start_paused = true)]
async fn the_running_worker_checks_dead_letters_once_a_second_and_alerts_new_ones() {
    let s = Stack::new(1, &["x"]).await;
    let queue = std::sync::Arc::new(CountingQueue {
        inner: s.queue.clone(),
        dead_letter_reads: Default::default(),
    });
    let w = std::sync::Arc::new(Worker::new(
        queue.clone(),
        s.records.clone(),
        s.ledger.clone(),
        s.alerts.clone(),
        WorkerConfig {
            wait: Duration::from_millis(100),
            pollers: 2,
            ..WorkerConfig::default()
        },
    ));
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(w.clone().run(shutdown));
    tokio::time::sleep(Duration::from_millis(10_500)).await;
    let reads = queue
        .dead_letter_reads
        .load(std::sync::atomic::Ordering::SeqCst);
    // two pollers receiving every 100 ms for 10.5 s: 11 checks, not ~200
    assert!((10..=12).contains(&reads), "{reads} dead-letter reads");
    assert!(s.alerts.kinds().is_empty());
    // a message received five times and never deleted becomes a dead letter
    let m = s.book("x", "t1", "P1").await;
    s.queue.send(m.to_message().unwrap()).await.unwrap();
    stop.send(true).unwrap();
    running.await.unwrap();
    for _ in 0..6 {
        let _ = s.queue.receive(1, Duration::ZERO).await.unwrap();
        s.clock.advance(Duration::from_secs(61)); // past the visibility timeout
    }
    assert_eq!(s.queue.dead_letters().await.unwrap().len(), 1);
    let (_stop, shutdown) = tokio::sync::watch::channel(false);
    let _running = tokio::spawn(w.clone().run(shutdown));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(s.alerts.kinds(), vec!["dead_letter".to_string()]);
    // a second letter: one more alert, saying how many are new
    let (_stop2, shutdown) = tokio::sync::watch::channel(false);
    let s2 = Stack::new(2, &["y", "z"]).await;
    let w2 = std::sync::Arc::new(Worker::new(
        s2.queue.clone(),
        s2.records.clone(),
        s2.ledger.clone(),
        s2.alerts.clone(),
        WorkerConfig::default(),
    ));
    for (who, p) in [("y", "P1"), ("z", "P2")] {
        let m = s2.book(who, "t", p).await;
        s2.queue.send(m.to_message().unwrap()).await.unwrap();
        for _ in 0..6 {
            let _ = s2.queue.receive(1, Duration::ZERO).await.unwrap();
            s2.clock.advance(Duration::from_secs(61));
        }
        assert_eq!(w2.check_dead_letters().await.unwrap(), 1, "{p}");
    }
    drop(shutdown);
    let details: Vec<String> = s2
        .alerts
        .0
        .lock()
        .iter()
        .map(|a| a.detail.clone())
        .collect();
    assert_eq!(
        details,
        vec![
            "1 new message(s) in the dead-letter queue (1 in all)".to_owned(),
            "1 new message(s) in the dead-letter queue (2 in all)".to_owned(),
        ]
    );
}
