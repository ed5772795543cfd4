#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use booking::queue::{Queue, ReceiptHandle, Received};
use booking::records::{
    BookingRecord, Condition, ConfirmPath, RecordError, RecordStatus, RecordStore, Throttles,
    WorkerVerdict, classify_conflict,
};
use booking::{CandidateHash, Ledger, PaymentId};
use booking_service::worker::{Outcome, Worker, WorkerConfig};
use common::{Stack, cand, pay};

fn worker(s: &Stack, records: Arc<dyn RecordStore>) -> Worker {
    Worker::new(
        s.queue.clone(),
        records,
        s.ledger.clone(),
        s.alerts.clone(),
        WorkerConfig::default(),
    )
}

fn delivery(m: &booking::AdmittedBooking, receive_count: u32) -> Received {
    Received {
        message: m.to_message().unwrap(),
        receipt: ReceiptHandle("none".into()),
        receive_count,
        sent_ms: 0,
    }
}

const WAIT: Duration = Duration::from_millis(10);

#[tokio::test(start_paused = true)]
async fn a_booking_becomes_a_held_record_and_a_duplicate_is_deleted() {
    let s = Stack::new(1, &["x"]).await;
    let w = worker(&s, s.records.clone());
    let m = s.book("x", "t1", "P1").await;
    s.queue.send(m.to_message().unwrap()).await.unwrap();
    assert_eq!(w.poll_once(WAIT).await.unwrap(), vec![Outcome::Stored]);
    let rec = s.records.get(&cand("x"), true).await.unwrap().unwrap();
    assert_eq!(
        (rec.status, rec.payment_id.clone()),
        (RecordStatus::Held, pay("P1"))
    );
    assert!(rec.expires_at_s.is_some());
    // the same booking sent again outside the dedup window: a duplicate
    s.clock.advance(Duration::from_secs(6 * 60));
    let again = booking::queue::Message {
        deduplication_id: "other".into(),
        ..m.to_message().unwrap()
    };
    s.queue.send(again).await.unwrap();
    assert_eq!(w.poll_once(WAIT).await.unwrap(), vec![Outcome::Duplicate]);
    assert_eq!(
        s.queue.depth().await.unwrap().visible + s.queue.depth().await.unwrap().in_flight,
        0
    );
    assert_eq!(s.count().await, 1, "the worker never touches the counters");
    assert_eq!(w.stats().deleted, 2);
}

#[tokio::test(start_paused = true)]
async fn a_paid_record_is_skipped_and_a_stale_one_is_replaced() {
    let s = Stack::new(1, &["x"]).await;
    let w = worker(&s, s.records.clone());
    let old = s.book("x", "t1", "P1").await;
    s.records
        .put(old.held_record(), Condition::NotExists)
        .await
        .unwrap();
    // released by the ledger only (record delete lost): a stale record
    s.ledger
        .release(&s.sale, &cand("x"), &pay("P1"))
        .await
        .unwrap();
    s.clock.advance(Duration::from_secs(1));
    let new = s.book("x", "t2", "P2").await;
    assert_eq!(w.handle(&delivery(&new, 1)).await, Outcome::Replaced);
    assert_eq!(
        s.records
            .get(&cand("x"), true)
            .await
            .unwrap()
            .unwrap()
            .payment_id,
        pay("P2")
    );
    s.records
        .mark_paid(&cand("x"), &pay("P2"), ConfirmPath::Callback, s.now())
        .await
        .unwrap();
    assert_eq!(w.handle(&delivery(&new, 1)).await, Outcome::PaidAlready);
}

#[tokio::test(start_paused = true)]
async fn a_redelivered_old_message_neither_overwrites_nor_resurrects() {
    let s = Stack::new(1, &["x"]).await;
    let w = worker(&s, s.records.clone());
    let old = s.book("x", "t1", "P1").await;
    s.queue.send(old.to_message().unwrap()).await.unwrap();
    // a worker writes the record, then dies before deleting the message
    let first = s.queue.receive(1, WAIT).await.unwrap();
    s.records
        .put(old.held_record(), Condition::NotExists)
        .await
        .unwrap();
    assert_eq!(first[0].receive_count, 1);
    // the reconciler releases it (payment cancelled)
    s.ledger
        .release(&s.sale, &cand("x"), &pay("P1"))
        .await
        .unwrap();
    s.records
        .delete(
            &cand("x"),
            Condition::StatusIsWithPayment(RecordStatus::Held, pay("P1")),
        )
        .await
        .unwrap();
    // the old message comes back: not resurrected
    s.clock.advance(Duration::from_secs(61));
    assert_eq!(w.poll_once(WAIT).await.unwrap(), vec![Outcome::Released]);
    assert!(s.records.get(&cand("x"), true).await.unwrap().is_none());
    // the candidate books again; the old message, redelivered once more (at
    // any receive count), does not overwrite the newer booking: the ledger
    // holds P2, so the worker drops P1 before it writes anything
    s.clock.advance(Duration::from_secs(1));
    let new = s.book("x", "t2", "P2").await;
    s.queue.send(new.to_message().unwrap()).await.unwrap();
    assert_eq!(w.poll_once(WAIT).await.unwrap(), vec![Outcome::Stored]);
    assert_eq!(w.handle(&delivery(&old, 2)).await, Outcome::Released);
    assert_eq!(w.handle(&delivery(&old, 1)).await, Outcome::Released);
    // without the ledger guard, the consistent read's verdict keeps P2 too
    let current = s.records.get(&cand("x"), true).await.unwrap();
    assert_eq!(
        classify_conflict(&old.held_record(), current.as_ref(), &Ok(current.clone())),
        WorkerVerdict::Stale
    );
    let rec = s.records.get(&cand("x"), true).await.unwrap().unwrap();
    assert_eq!(rec.payment_id, pay("P2"));
    assert_eq!(s.count().await, 1);
}

/// Delegates everything but consistent reads, which fail.
#[derive(Debug)]
struct FailingReads(Arc<dyn RecordStore>);

#[async_trait]
impl RecordStore for FailingReads {
    async fn put(&self, r: BookingRecord, c: Condition) -> Result<(), RecordError> {
        self.0.put(r, c).await
    }
    async fn mark_paid(
        &self,
        c: &CandidateHash,
        p: &PaymentId,
        path: ConfirmPath,
        now: u64,
    ) -> Result<BookingRecord, RecordError> {
        self.0.mark_paid(c, p, path, now).await
    }
    async fn mark_emailed(
        &self,
        c: &CandidateHash,
        p: &PaymentId,
    ) -> Result<BookingRecord, RecordError> {
        self.0.mark_emailed(c, p).await
    }
    async fn extend(
        &self,
        c: &CandidateHash,
        p: &PaymentId,
        d: u64,
    ) -> Result<BookingRecord, RecordError> {
        self.0.extend(c, p, d).await
    }
    async fn note_query_failure(
        &self,
        c: &CandidateHash,
        p: &PaymentId,
    ) -> Result<BookingRecord, RecordError> {
        self.0.note_query_failure(c, p).await
    }
    async fn clear_query_failures(
        &self,
        c: &CandidateHash,
        p: &PaymentId,
    ) -> Result<BookingRecord, RecordError> {
        self.0.clear_query_failures(c, p).await
    }
    async fn delete(
        &self,
        c: &CandidateHash,
        cond: Condition,
    ) -> Result<BookingRecord, RecordError> {
        self.0.delete(c, cond).await
    }
    async fn get(&self, _: &CandidateHash, _: bool) -> Result<Option<BookingRecord>, RecordError> {
        Err(RecordError::Unavailable("scripted read failure".into()))
    }
    async fn by_payment(&self, p: &PaymentId) -> Result<Option<BookingRecord>, RecordError> {
        self.0.by_payment(p).await
    }
    async fn held_due(&self, d: u64, l: usize) -> Result<Vec<BookingRecord>, RecordError> {
        self.0.held_due(d, l).await
    }
    async fn owed_emails(&self, p: u64, l: usize) -> Result<Vec<BookingRecord>, RecordError> {
        self.0.owed_emails(p, l).await
    }
    async fn scan_all(&self) -> Result<Vec<BookingRecord>, RecordError> {
        self.0.scan_all().await
    }
    async fn throttles(&self) -> Result<Throttles, RecordError> {
        self.0.throttles().await
    }
}

#[tokio::test(start_paused = true)]
async fn a_failed_read_leaves_the_message_and_five_receives_dead_letter_it() {
    let s = Stack::new(2, &["x"]).await;
    let w = worker(&s, Arc::new(FailingReads(s.records.clone())));
    let m = s.book("x", "t1", "P1").await;
    // a record is there, so the put fails and the worker must read
    s.records
        .put(m.held_record(), Condition::NotExists)
        .await
        .unwrap();
    s.queue.send(m.to_message().unwrap()).await.unwrap();
    for receive in 1..=5 {
        let outcomes = w.poll_once(WAIT).await.unwrap();
        assert!(
            matches!(outcomes.as_slice(), [Outcome::LeftForRetry(_)]),
            "receive {receive}: {outcomes:?}"
        );
        assert!(
            w.poll_once(WAIT).await.unwrap().is_empty(),
            "invisible until the timeout"
        );
        s.clock.advance(Duration::from_secs(61));
    }
    assert!(w.poll_once(WAIT).await.unwrap().is_empty());
    assert_eq!(s.queue.dead_letters().await.unwrap().len(), 1);
    assert_eq!(w.check_dead_letters().await.unwrap(), 1);
    assert_eq!(w.check_dead_letters().await.unwrap(), 0, "alerted once");
    assert_eq!(s.alerts.kinds(), vec!["dead_letter".to_string()]);
    assert_eq!(w.stats().left, 5);
}

#[tokio::test(start_paused = true)]
async fn the_worker_loop_drains_the_queue_and_stops() {
    let s = Stack::new(3, &["x", "y", "z"]).await;
    for (who, t, p) in [("x", "t1", "P1"), ("y", "t2", "P2"), ("z", "t3", "P3")] {
        let m = s.book(who, t, p).await;
        s.queue.send(m.to_message().unwrap()).await.unwrap();
    }
    let w = Arc::new(worker(&s, s.records.clone()));
    let (tx, rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn({
        let w = w.clone();
        async move { w.run(rx).await }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    tx.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(w.stats().stored, 3);
    assert_eq!(s.records.scan_all().await.unwrap().len(), 3);
}

/// The zoo's worker bugs, switched on: the stale record of a cancel-then-rebook
/// is kept (and, for one of them, the new booking's seat is given back).
#[tokio::test(start_paused = true)]
async fn the_zoos_worker_bugs_keep_the_stale_record_and_one_gives_a_seat_back() {
    use booking::{Bug, Bugs};
    for (bug, count_after) in [
        (Bug::StaleHeldNotReplaced, 1),
        (Bug::RebookCountedAsDuplicate, 0),
    ] {
        let s = Stack::new(1, &["x"]).await;
        let w = Worker::new(
            s.queue.clone(),
            s.records.clone(),
            s.ledger.clone(),
            s.alerts.clone(),
            WorkerConfig {
                bugs: Bugs::of([bug]),
                ..WorkerConfig::default()
            },
        );
        let old = s.book("x", "t1", "P1").await;
        s.records
            .put(old.held_record(), Condition::NotExists)
            .await
            .unwrap();
        s.ledger
            .release(&s.sale, &cand("x"), &pay("P1"))
            .await
            .unwrap();
        s.clock.advance(Duration::from_secs(1));
        let new = s.book("x", "t2", "P2").await;
        assert_eq!(
            w.handle(&delivery(&new, 1)).await,
            Outcome::Duplicate,
            "{bug}"
        );
        let rec = s.records.get(&cand("x"), true).await.unwrap().unwrap();
        assert_eq!(rec.payment_id, pay("P1"), "{bug}: the stale record stays");
        assert_eq!(s.count().await, count_after, "{bug}");
    }
}
