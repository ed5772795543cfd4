//! The zoo's bug `unlatched_status_writer`, on the embedded backends: two
//! writers without the writer lock land their documents in the other order
//! than their reads, so a full level is shown open after it filled. The
//! same race with the lock (the default) cannot happen.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use booking::coordination::{Coordination, CoordinationError};
use booking::status::{StatusDocument, StatusWriter, writes_out_of_read_order};
use booking::{
    Admission, Bug, Bugs, CandidateHash, Clock, Ledger, Level, ManualClock, RequestToken, SaleId,
};
use booking_embedded::coordination::EmbeddedCoordination;
use booking_embedded::ledger::EmbeddedLedger;
use booking_embedded::outputs::ObjectSink;
use tokio::sync::Semaphore;

/// Coordination whose `get` waits for a permit: holds one writer between
/// its read of the counters and its write.
#[derive(Debug)]
struct Gate {
    inner: Arc<EmbeddedCoordination>,
    permits: Arc<Semaphore>,
}

#[async_trait]
impl Coordination for Gate {
    async fn try_lock(&self, k: &str, o: &str, t: Duration) -> Result<bool, CoordinationError> {
        self.inner.try_lock(k, o, t).await
    }
    async fn unlock(&self, k: &str, o: &str) -> Result<bool, CoordinationError> {
        self.inner.unlock(k, o).await
    }
    async fn extend_lock(&self, k: &str, o: &str, t: Duration) -> Result<bool, CoordinationError> {
        self.inner.extend_lock(k, o, t).await
    }
    async fn get(&self, k: &str) -> Result<Option<String>, CoordinationError> {
        self.permits.acquire().await.unwrap().forget();
        self.inner.get(k).await
    }
    async fn set(&self, k: &str, v: &str, t: Option<Duration>) -> Result<(), CoordinationError> {
        self.inner.set(k, v, t).await
    }
    async fn delete(&self, k: &str) -> Result<bool, CoordinationError> {
        self.inner.delete(k).await
    }
    async fn set_once(
        &self,
        k: &str,
        v: &str,
        t: Option<Duration>,
    ) -> Result<bool, CoordinationError> {
        self.inner.set_once(k, v, t).await
    }
}

/// The race: the slow writer reads one seat left and stalls at its next
/// coordination call; the seat goes; the fast writer publishes; the slow one
/// goes on. Returns the last document's `taken` and the writes out of order.
async fn race(bugs: Bugs) -> (u32, Vec<(usize, u64, u64)>) {
    let clock = ManualClock::new(1_000);
    let c: Arc<dyn Clock> = Arc::new(clock.clone());
    let sale = SaleId::parse("s").unwrap();
    let level = Level::parse("a").unwrap();
    let ledger = Arc::new(EmbeddedLedger::new());
    ledger.reset(&sale, &[(level.clone(), 1)]).await.unwrap();
    let who = CandidateHash::of("x");
    ledger
        .load_candidates(&sale, std::slice::from_ref(&who))
        .await
        .unwrap();
    ledger.set_open(&sale, true).await.unwrap();
    let sink = Arc::new(ObjectSink::new(c.clone()));
    let shared = Arc::new(EmbeddedCoordination::new(c.clone()));
    let slow_permits = Arc::new(Semaphore::new(0));
    let slow = StatusWriter::new(
        sale.clone(),
        "p",
        ledger.clone(),
        Arc::new(Gate {
            inner: shared.clone(),
            permits: slow_permits.clone(),
        }),
        sink.clone(),
        c.clone(),
    )
    .with_writer_id("slow")
    .with_bugs(&bugs);
    let fast = StatusWriter::new(
        sale.clone(),
        "p",
        ledger.clone(),
        shared.clone(),
        sink.clone(),
        c.clone(),
    )
    .with_writer_id("fast")
    .with_bugs(&bugs);

    // the slow writer reads a level with a seat left, then stalls
    let slow = tokio::spawn(async move { slow.publish().await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    // the seat goes; the fast writer reads and writes "full"
    clock.advance(Duration::from_millis(10));
    let admitted = ledger
        .admit(
            &sale,
            &who,
            &level,
            &RequestToken::parse("t").unwrap(),
            1_010,
        )
        .await
        .unwrap();
    assert!(matches!(admitted, Admission::Admitted { .. }));
    fast.publish().await.unwrap();
    // the slow writer lands its older document last
    slow_permits.add_permits(1);
    slow.await.unwrap().unwrap();

    let docs: Vec<StatusDocument> = sink
        .writes()
        .iter()
        .map(|w| StatusDocument::from_json(&w.document).unwrap())
        .collect();
    assert_eq!(ledger.counters(&sale).await.unwrap().levels[0].count, 1);
    let last = docs.last().unwrap().level(&level).unwrap().taken;
    (
        last,
        writes_out_of_read_order(docs.iter().map(|d| d.generated_at_ms)),
    )
}

#[tokio::test]
async fn an_unordered_writer_lands_an_older_read_after_a_newer_one() {
    let (last, out) = race(Bugs::of([Bug::UnlatchedStatusWriter])).await;
    assert_eq!(last, 0, "the page shows a seat left in a full level");
    assert_eq!(out, vec![(1, 1_000, 1_010)], "and the write order shows it");
}

#[tokio::test]
async fn with_the_writer_lock_the_same_race_ends_on_the_newest_read() {
    let (last, out) = race(Bugs::none()).await;
    assert_eq!(last, 1, "the page shows the level full");
    assert!(out.is_empty(), "{out:?}");
}
