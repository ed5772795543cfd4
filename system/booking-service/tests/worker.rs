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

/// Delegates to a real store, with one scripted behaviour: reads that fail,
/// or puts that each block their thread (not only their task) until
/// another put arrives (given up after [`MEETING_MAX`]).
#[derive(Debug)]
struct Scripted {
    inner: Arc<dyn RecordStore>,
    script: Script,
}

#[derive(Debug)]
enum Script {
    /// Every read fails.
    FailingReads,
    /// The first put waits for the second: the sender it will be woken by.
    MeetingPuts(std::sync::Mutex<Option<std::sync::mpsc::Sender<()>>>),
}

impl Scripted {
    fn failing_reads(inner: Arc<dyn RecordStore>) -> Arc<Scripted> {
        Arc::new(Scripted {
            inner,
            script: Script::FailingReads,
        })
    }

    fn meeting_puts(inner: Arc<dyn RecordStore>) -> Arc<Scripted> {
        Arc::new(Scripted {
            inner,
            script: Script::MeetingPuts(std::sync::Mutex::new(None)),
        })
    }

    /// With [`Script::MeetingPuts`], blocks the thread until another put
    /// comes (the second put wakes the first and goes on).
    fn meet(&self) -> Result<(), RecordError> {
        let Script::MeetingPuts(waiting) = &self.script else {
            return Ok(());
        };
        let first = {
            let mut waiting = waiting.lock().unwrap();
            match waiting.take() {
                Some(other) => {
                    let _ = other.send(());
                    None
                }
                None => {
                    let (tx, rx) = std::sync::mpsc::channel();
                    *waiting = Some(tx);
                    Some(rx)
                }
            }
        };
        match first {
            // blocks the thread: a poller sharing it cannot run meanwhile
            Some(rx) => rx
                .recv_timeout(MEETING_MAX)
                .map_err(|_| RecordError::Unavailable("the other put never came".into())),
            None => Ok(()),
        }
    }
}

/// How long a meeting put waits for the other (a hang, not a speed bound:
/// the other put comes at once or never).
const MEETING_MAX: Duration = Duration::from_secs(20);

#[async_trait]
impl RecordStore for Scripted {
    async fn put(&self, r: BookingRecord, c: Condition) -> Result<(), RecordError> {
        self.meet()?;
        self.inner.put(r, c).await
    }
    async fn mark_paid(
        &self,
        c: &CandidateHash,
        p: &PaymentId,
        path: ConfirmPath,
        now: u64,
    ) -> Result<BookingRecord, RecordError> {
        self.inner.mark_paid(c, p, path, now).await
    }
    async fn mark_emailed(
        &self,
        c: &CandidateHash,
        p: &PaymentId,
    ) -> Result<BookingRecord, RecordError> {
        self.inner.mark_emailed(c, p).await
    }
    async fn extend(
        &self,
        c: &CandidateHash,
        p: &PaymentId,
        d: u64,
    ) -> Result<BookingRecord, RecordError> {
        self.inner.extend(c, p, d).await
    }
    async fn note_query_failure(
        &self,
        c: &CandidateHash,
        p: &PaymentId,
    ) -> Result<BookingRecord, RecordError> {
        self.inner.note_query_failure(c, p).await
    }
    async fn clear_query_failures(
        &self,
        c: &CandidateHash,
        p: &PaymentId,
    ) -> Result<BookingRecord, RecordError> {
        self.inner.clear_query_failures(c, p).await
    }
    async fn delete(
        &self,
        c: &CandidateHash,
        cond: Condition,
    ) -> Result<BookingRecord, RecordError> {
        self.inner.delete(c, cond).await
    }
    async fn get(
        &self,
        c: &CandidateHash,
        strong: bool,
    ) -> Result<Option<BookingRecord>, RecordError> {
        match self.script {
            Script::FailingReads => Err(RecordError::Unavailable("scripted read failure".into())),
            Script::MeetingPuts(_) => self.inner.get(c, strong).await,
        }
    }
    async fn by_payment(&self, p: &PaymentId) -> Result<Option<BookingRecord>, RecordError> {
        self.inner.by_payment(p).await
    }
    async fn held_due(&self, d: u64, l: usize) -> Result<Vec<BookingRecord>, RecordError> {
        self.inner.held_due(d, l).await
    }
    async fn owed_emails(&self, p: u64, l: usize) -> Result<Vec<BookingRecord>, RecordError> {
        self.inner.owed_emails(p, l).await
    }
    async fn scan_all(&self) -> Result<Vec<BookingRecord>, RecordError> {
        self.inner.scan_all().await
    }
    async fn throttles(&self) -> Result<Throttles, RecordError> {
        self.inner.throttles().await
    }
}

/// The pollers run as tasks of their own, in parallel on a multi-threaded
/// runtime: two puts that each block their thread until the other comes
/// meet. Joined in one task (as they once were) the first put blocks the
/// only poller that could bring the second, and both messages are left.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn pollers_run_in_parallel_and_do_not_share_one_task() {
    let s = Stack::new(2, &["x", "y"]).await;
    for (name, token, payment) in [("x", "t1", "P1"), ("y", "t2", "P2")] {
        let m = s.book(name, token, payment).await;
        s.queue.send(m.to_message().unwrap()).await.unwrap();
    }
    let records = Scripted::meeting_puts(s.records.clone());
    let w = Arc::new(Worker::new(
        s.queue.clone(),
        records,
        s.ledger.clone(),
        s.alerts.clone(),
        WorkerConfig {
            pollers: 2,
            batch: 1,
            wait: Duration::from_millis(50),
            ..WorkerConfig::default()
        },
    ));
    let (tx, rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn({
        let w = w.clone();
        async move { w.run(rx).await }
    });
    let deadline = tokio::time::Instant::now() + MEETING_MAX + Duration::from_secs(5);
    while w.stats().stored < 2 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tx.send(true).unwrap();
    task.await.unwrap();
    assert_eq!(
        (w.stats().stored, w.stats().left),
        (2, 0),
        "{:?}",
        w.stats()
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_read_leaves_the_message_and_five_receives_dead_letter_it() {
    let s = Stack::new(2, &["x"]).await;
    let w = worker(&s, Scripted::failing_reads(s.records.clone()));
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

/// A queue that passes every call on, notes each receive (by deduplication
/// ID) and counts the visibility changes, and answers the changes of the
/// messages named in `refuse` with that error instead of passing them on.
#[derive(Debug)]
struct Watched {
    inner: Arc<dyn Queue>,
    /// (deduplication ID, receive count) of every message received.
    received: parking_lot::Mutex<Vec<(String, u32)>>,
    /// Receipt → deduplication ID.
    receipts: parking_lot::Mutex<std::collections::HashMap<String, String>>,
    /// Deduplication ID → the error its visibility changes get.
    refuse: parking_lot::Mutex<std::collections::HashMap<String, booking::QueueError>>,
    visibility_changes: std::sync::atomic::AtomicU64,
    /// The size of each `delete_batch` call.
    delete_batches: parking_lot::Mutex<Vec<usize>>,
    /// Receives under way now, and the most at once.
    receiving: std::sync::atomic::AtomicUsize,
    receiving_max: std::sync::atomic::AtomicUsize,
    /// Deduplication IDs of the messages deleted, in order.
    deleted: parking_lot::Mutex<Vec<String>>,
}

impl Watched {
    fn new(inner: Arc<dyn Queue>) -> Watched {
        Watched {
            inner,
            received: Default::default(),
            receipts: Default::default(),
            refuse: Default::default(),
            visibility_changes: Default::default(),
            delete_batches: Default::default(),
            receiving: Default::default(),
            receiving_max: Default::default(),
            deleted: Default::default(),
        }
    }

    fn changes(&self) -> u64 {
        self.visibility_changes
            .load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[async_trait]
impl Queue for Watched {
    async fn send(
        &self,
        m: booking::queue::Message,
    ) -> Result<booking::SendOutcome, booking::QueueError> {
        self.inner.send(m).await
    }
    async fn receive(
        &self,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Received>, booking::QueueError> {
        use std::sync::atomic::Ordering::SeqCst;
        let now = self.receiving.fetch_add(1, SeqCst) + 1;
        self.receiving_max.fetch_max(now, SeqCst);
        let batch = self.inner.receive(max, wait).await;
        self.receiving.fetch_sub(1, SeqCst);
        let batch = batch?;
        for r in &batch {
            let id = r.message.deduplication_id.clone();
            self.received.lock().push((id.clone(), r.receive_count));
            self.receipts.lock().insert(r.receipt.0.clone(), id);
        }
        Ok(batch)
    }
    async fn delete(&self, receipt: &ReceiptHandle) -> Result<(), booking::QueueError> {
        self.inner.delete(receipt).await?;
        if let Some(id) = self.receipts.lock().get(&receipt.0).cloned() {
            self.deleted.lock().push(id);
        }
        Ok(())
    }
    async fn delete_batch(
        &self,
        receipts: &[ReceiptHandle],
    ) -> Vec<Result<(), booking::QueueError>> {
        self.delete_batches.lock().push(receipts.len());
        let results = self.inner.delete_batch(receipts).await;
        for (receipt, result) in receipts.iter().zip(&results) {
            if let (Ok(()), Some(id)) = (result, self.receipts.lock().get(&receipt.0).cloned()) {
                self.deleted.lock().push(id);
            }
        }
        results
    }
    async fn change_visibility(
        &self,
        receipt: &ReceiptHandle,
        timeout: Duration,
    ) -> Result<(), booking::QueueError> {
        self.visibility_changes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let id = self.receipts.lock().get(&receipt.0).cloned();
        if let Some(e) = id.and_then(|id| self.refuse.lock().get(&id).cloned()) {
            return Err(e);
        }
        self.inner.change_visibility(receipt, timeout).await
    }
    async fn oldest_age(&self) -> Result<Option<Duration>, booking::QueueError> {
        self.inner.oldest_age().await
    }
    async fn depth(&self) -> Result<booking::QueueDepth, booking::QueueError> {
        self.inner.depth().await
    }
    async fn dead_letters(&self) -> Result<Vec<booking::queue::Message>, booking::QueueError> {
        self.inner.dead_letters().await
    }
}

/// A rehearsal's visibility timeout (the article's 60 s scaled by 0.01).
const SCALED_VISIBILITY: Duration = Duration::from_millis(600);

/// An embedded queue whose visibility timeout runs on tokio's (paused)
/// time, with [`SCALED_VISIBILITY`] and the article's five receives, watched.
fn scaled_queue() -> (Arc<Watched>, Arc<dyn booking::Clock>) {
    use booking_embedded::queue::{EmbeddedQueue, QueueConfig};
    let clock: Arc<dyn booking::Clock> = Arc::new(faults::TokioClock::new(common::START_MS));
    let queue = EmbeddedQueue::new(
        clock.clone(),
        QueueConfig {
            visibility_timeout: SCALED_VISIBILITY,
            ..QueueConfig::default()
        },
    );
    (Arc::new(Watched::new(Arc::new(queue))), clock)
}

/// The record store, each `put` taking `ms` (a loaded store).
fn slow_puts(s: &Stack, clock: Arc<dyn booking::Clock>, ms: u64) -> Arc<dyn RecordStore> {
    use faults::{Injector, Schedule, wrappers::FaultyRecords};
    let schedule = Schedule::from_toml(&format!(
        r#"
        [[fault]]
        name = "records-put-slow"
        target = "records"
        ops = ["put"]
        start_ms = 0
        duration_ms = 3_600_000
        kind = {{ type = "latency", delay = {{ fixed = {{ ms = {ms} }} }} }}
        "#
    ))
    .unwrap();
    let injector = Arc::new(Injector::new(schedule, 7, clock));
    Arc::new(FaultyRecords::new(
        s.records.clone(),
        s.records.clone(),
        injector,
    ))
}

fn scaled_worker(s: &Stack, queue: Arc<Watched>, records: Arc<dyn RecordStore>) -> Worker {
    Worker::new(
        queue,
        records,
        s.ledger.clone(),
        s.alerts.clone(),
        WorkerConfig {
            visibility: SCALED_VISIBILITY,
            pollers: 2,
            wait: Duration::from_millis(100),
            ..WorkerConfig::default()
        },
    )
}

/// Books each of `names` and queues its message (in FIFO group `group`
/// if given, else the design's group of the candidate); the deduplication
/// IDs, in order.
async fn queue_bookings(
    s: &Stack,
    queue: &Watched,
    names: &[String],
    group: Option<&str>,
) -> Vec<String> {
    let mut ids = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let m = s.book(name, &format!("t{i}"), &format!("P{i}")).await;
        let mut message = m.to_message().unwrap();
        if let Some(g) = group {
            message.group_id = g.to_owned();
        }
        ids.push(message.deduplication_id.clone());
        queue.send(message).await.unwrap();
    }
    ids
}

/// Measured in a loaded rehearsal (visibility 0.6 s): a poller handled its
/// batch of ten one message after another, for up to 3.8 s; the messages
/// not yet handled reappeared after 0.6 s, another poller received them
/// (half the deletes were refused for an invalid receipt) and after five
/// receives they were dead letters. The worker now extends the visibility
/// of the messages it still holds: a batch that takes five visibility
/// timeouts is received once, every message stored and deleted.
#[tokio::test(start_paused = true)]
async fn a_batch_slower_than_the_visibility_is_kept_hidden_and_received_once() {
    const N: usize = 10;
    let names: Vec<String> = (0..N).map(|i| format!("slow-{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let s = Stack::new(N as u32, &refs).await;
    let (queue, clock) = scaled_queue();
    // one group: handled one after another
    let ids = queue_bookings(&s, &queue, &names, Some("g")).await;
    // each write takes 300 ms: the batch of ten takes 3 s, five timeouts
    let w = Arc::new(scaled_worker(&s, queue.clone(), slow_puts(&s, clock, 300)));
    let (tx, rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn({
        let w = w.clone();
        async move { w.run(rx).await }
    });
    tokio::time::sleep(Duration::from_secs(20)).await;
    tx.send(true).unwrap();
    task.await.unwrap();

    let received = queue.received.lock().clone();
    assert!(
        received.iter().all(|(_, count)| *count == 1),
        "no message received twice: {received:?}"
    );
    let mut got: Vec<String> = received.into_iter().map(|(id, _)| id).collect();
    got.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(got, want, "every message received once");
    assert!(queue.dead_letters().await.unwrap().is_empty());
    assert!(s.alerts.kinds().is_empty(), "{:?}", s.alerts.kinds());
    assert_eq!(s.records.scan_all().await.unwrap().len(), N);
    let counts = w.stats();
    assert_eq!(
        (counts.received, counts.stored, counts.deleted),
        (N as u64, N as u64, N as u64),
        "{counts:?}"
    );
    assert_eq!((counts.queue_errors, counts.lost), (0, 0), "{counts:?}");
    // each message is extended every 300 ms until it is done with: the
    // last, held for 3 s, nine times
    assert!(counts.visibility_extended >= 9, "{counts:?}");
    assert_eq!(counts.visibility_extended, queue.changes(), "{counts:?}");
    let depth = queue.depth().await.unwrap();
    assert_eq!(depth.visible + depth.in_flight, 0);
}

/// The fast path costs nothing: a batch done with before half the
/// visibility timeout makes no visibility call.
#[tokio::test(start_paused = true)]
async fn a_batch_handled_in_time_makes_no_visibility_call() {
    const N: usize = 10;
    let names: Vec<String> = (0..N).map(|i| format!("fast-{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let s = Stack::new(N as u32, &refs).await;
    let (queue, clock) = scaled_queue();
    queue_bookings(&s, &queue, &names, Some("g")).await;
    // ten writes of 25 ms in one group: 250 ms, under the heartbeat's 300 ms
    let w = scaled_worker(&s, queue.clone(), slow_puts(&s, clock, 25));
    let outcomes = w.poll_once(WAIT).await.unwrap();
    assert_eq!(outcomes, vec![Outcome::Stored; N]);
    assert_eq!(queue.changes(), 0, "no visibility call");
    assert_eq!(w.stats().visibility_extended, 0);
    assert_eq!(w.stats().deleted, N as u64);
    // the ten deleted together, once the batch was done with
    assert_eq!(*queue.delete_batches.lock(), vec![N]);
}

/// A slow batch deletes what it has done with at each heartbeat (so no
/// handled message outlives its visibility waiting for the batch's end),
/// and the rest at the end: every message deleted once, in fewer calls
/// than messages.
#[tokio::test(start_paused = true)]
async fn a_slow_batch_deletes_at_each_heartbeat_and_at_its_end() {
    const N: usize = 10;
    let names: Vec<String> = (0..N).map(|i| format!("beat-{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let s = Stack::new(N as u32, &refs).await;
    let (queue, clock) = scaled_queue();
    // one group: handled one after another
    queue_bookings(&s, &queue, &names, Some("g")).await;
    // ten writes of 100 ms: 1 s, heartbeats every 300 ms
    let w = scaled_worker(&s, queue.clone(), slow_puts(&s, clock, 100));
    let outcomes = w.poll_once(WAIT).await.unwrap();
    assert_eq!(outcomes, vec![Outcome::Stored; N]);
    let batches = queue.delete_batches.lock().clone();
    assert_eq!(batches.iter().sum::<usize>(), N, "{batches:?}");
    assert!(
        (2..N).contains(&batches.len()),
        "deleted at the beats and at the end: {batches:?}"
    );
    assert_eq!(w.stats().deleted, N as u64);
    assert_eq!(w.stats().queue_errors, 0);
    let depth = queue.depth().await.unwrap();
    assert_eq!(depth.visible + depth.in_flight, 0);
}

/// With `receives_in_flight`, the pollers take turns at the queue: never
/// more long polls at once than asked, and every message still handled;
/// without it each poller polls on its own.
#[tokio::test(start_paused = true)]
async fn pollers_take_turns_at_the_queue_when_asked() {
    const N: usize = 20;
    let names: Vec<String> = (0..N).map(|i| format!("turn-{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    for (turns, most) in [(1, 1), (0, 4)] {
        let s = Stack::new(N as u32, &refs).await;
        let (queue, _clock) = scaled_queue();
        queue_bookings(&s, &queue, &names, None).await;
        let w = Arc::new(Worker::new(
            queue.clone(),
            s.records.clone(),
            s.ledger.clone(),
            s.alerts.clone(),
            WorkerConfig {
                visibility: SCALED_VISIBILITY,
                pollers: 4,
                batch: 3,
                wait: Duration::from_millis(100),
                receives_in_flight: turns,
                ..WorkerConfig::default()
            },
        ));
        let (tx, rx) = tokio::sync::watch::channel(false);
        let task = tokio::spawn({
            let w = w.clone();
            async move { w.run(rx).await }
        });
        tokio::time::sleep(Duration::from_secs(2)).await;
        tx.send(true).unwrap();
        task.await.unwrap();
        assert_eq!(w.stats().stored, N as u64, "turns {turns}");
        assert_eq!(
            queue
                .receiving_max
                .load(std::sync::atomic::Ordering::SeqCst),
            most,
            "turns {turns}"
        );
    }
}

/// An extension refused for a message's receipt: the message is not
/// handled (its latest receive owns it) and comes back; an extension that
/// fails otherwise: the message is handled anyway (at least once).
#[tokio::test(start_paused = true)]
async fn a_refused_extension_leaves_the_message_and_a_failed_one_does_not() {
    let names: Vec<String> = (0..3).map(|i| format!("beat-{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let s = Stack::new(3, &refs).await;
    let (queue, clock) = scaled_queue();
    // one group: the third is not in hand yet when its extension is refused
    let ids = queue_bookings(&s, &queue, &names, Some("g")).await;
    queue.refuse.lock().insert(
        ids[1].clone(),
        booking::QueueError::Unavailable("scripted".into()),
    );
    queue
        .refuse
        .lock()
        .insert(ids[2].clone(), booking::QueueError::InvalidReceipt);
    // each write takes 400 ms: the first heartbeat comes during the first
    let w = scaled_worker(&s, queue.clone(), slow_puts(&s, clock, 400));
    let outcomes = w.poll_once(WAIT).await.unwrap();
    assert_eq!(
        outcomes,
        vec![Outcome::Stored, Outcome::Stored, Outcome::Lost]
    );
    assert!(
        s.records
            .get(&cand(&names[2]), true)
            .await
            .unwrap()
            .is_none(),
        "a lost message is not handled"
    );
    let counts = w.stats();
    assert_eq!(counts.lost, 1, "{counts:?}");
    // the first extended; the second's extensions failed, and so did its
    // delete (its visibility ran out while it was written)
    assert!(counts.visibility_extended >= 1, "{counts:?}");
    assert!(counts.queue_errors >= 2, "{counts:?}");
    assert_eq!(counts.deleted, 1, "{counts:?}");
    // both come back and are done with
    queue.refuse.lock().clear();
    tokio::time::sleep(SCALED_VISIBILITY).await;
    let mut again = w.poll_once(WAIT).await.unwrap();
    again.sort_by_key(|o| format!("{o:?}"));
    assert_eq!(again, vec![Outcome::Duplicate, Outcome::Stored]);
    assert_eq!(s.records.scan_all().await.unwrap().len(), 3);
    assert!(queue.dead_letters().await.unwrap().is_empty());
}

/// The groups of a batch are handled at once, each group in order: ten
/// messages of ten groups whose writes take 300 ms each are done with in
/// one write's time (virtual), not ten; the four messages of one group are
/// written in the order they were sent.
#[tokio::test(start_paused = true)]
async fn a_batchs_groups_are_handled_at_once_and_each_group_in_order() {
    const N: usize = 10;
    let names: Vec<String> = (0..N).map(|i| format!("par-{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let s = Stack::new(N as u32, &refs).await;
    let (queue, clock) = scaled_queue();
    // messages 0..6 each in their own group, 6..10 in one group "shared"
    let mut ids = queue_bookings(&s, &queue, &names[..6], None).await;
    ids.extend(queue_bookings(&s, &queue, &names[6..], Some("shared")).await);
    let records = slow_puts(&s, clock.clone(), 300);
    let w = scaled_worker(&s, queue.clone(), records);
    let began = tokio::time::Instant::now();
    let outcomes = w.poll_once(WAIT).await.unwrap();
    let took = began.elapsed();
    assert_eq!(outcomes, vec![Outcome::Stored; N]);
    // six groups at once, the shared group's four one after another: four
    // writes' time (1.2 s), not ten (3 s)
    assert!(
        took >= Duration::from_millis(1200) && took < Duration::from_millis(1500),
        "{took:?}"
    );
    // the shared group's messages were done with in send order
    let deleted = queue.deleted.lock().clone();
    assert_eq!(deleted.len(), N);
    let shared: Vec<&String> = deleted.iter().filter(|id| ids[6..].contains(id)).collect();
    assert_eq!(shared, ids[6..].iter().collect::<Vec<_>>(), "{deleted:?}");
    assert_eq!(w.stats().deleted, N as u64);
    let depth = queue.depth().await.unwrap();
    assert_eq!(depth.visible + depth.in_flight, 0);
}

#[test]
fn by_group_keeps_each_groups_order_and_first_seen_group_order() {
    use booking::queue::Message;
    let m = |group: &str, id: &str| Received {
        message: Message {
            body: String::new(),
            group_id: group.to_owned(),
            deduplication_id: id.to_owned(),
        },
        receipt: ReceiptHandle(id.to_owned()),
        receive_count: 1,
        sent_ms: 0,
    };
    let batch = [
        m("a", "1"),
        m("b", "2"),
        m("a", "3"),
        m("c", "4"),
        m("b", "5"),
    ];
    assert_eq!(
        booking_service::worker::by_group(&batch),
        vec![vec![0, 2], vec![1, 4], vec![3]]
    );
    assert!(booking_service::worker::by_group(&[]).is_empty());
}

/// A stop in the middle of a batch: the message in hand finishes, the
/// messages not started go back to the queue at once (visibility zero), in
/// their order, for another worker to receive without waiting out the
/// visibility timeout.
#[tokio::test(start_paused = true)]
async fn a_stop_mid_batch_finishes_the_message_in_hand_and_hands_the_rest_back() {
    const N: usize = 5;
    let names: Vec<String> = (0..N).map(|i| format!("stop-{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let s = Stack::new(N as u32, &refs).await;
    let (queue, clock) = scaled_queue();
    // one group: handled one after another, 300 ms each
    let ids = queue_bookings(&s, &queue, &names, Some("g")).await;
    let w = Arc::new(Worker::new(
        queue.clone(),
        slow_puts(&s, clock, 300),
        s.ledger.clone(),
        s.alerts.clone(),
        WorkerConfig {
            visibility: SCALED_VISIBILITY,
            pollers: 1,
            batch: N,
            wait: Duration::from_millis(100),
            ..WorkerConfig::default()
        },
    ));
    let (tx, rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn({
        let w = w.clone();
        async move { w.run(rx).await }
    });
    // the first message is done at 300 ms, the second in hand until 600 ms
    tokio::time::sleep(Duration::from_millis(450)).await;
    tx.send(true).unwrap();
    task.await.unwrap();
    let stats = w.stats();
    assert_eq!(
        (stats.stored, stats.handed_back, stats.lost),
        (2, 3, 0),
        "{stats:?}"
    );
    assert_eq!(*queue.deleted.lock(), ids[..2].to_vec(), "the two handled");
    let depth = queue.depth().await.unwrap();
    assert_eq!(
        (depth.visible, depth.in_flight),
        (3, 0),
        "handed back: visible at once"
    );
    // another worker receives them now, in order, without the clock moving
    let again = queue.receive(10, Duration::ZERO).await.unwrap();
    let again: Vec<String> = again
        .into_iter()
        .map(|r| r.message.deduplication_id)
        .collect();
    assert_eq!(again, ids[2..].to_vec());
}

/// A receive in progress when the stop comes is let finish, and what it
/// brings back is handed back unhandled, not left hidden.
#[tokio::test(start_paused = true)]
async fn a_receive_in_progress_at_the_stop_hands_its_messages_back() {
    let s = Stack::new(1, &["late"]).await;
    let (queue, _clock) = scaled_queue();
    let w = Arc::new(Worker::new(
        queue.clone(),
        s.records.clone(),
        s.ledger.clone(),
        s.alerts.clone(),
        WorkerConfig {
            visibility: SCALED_VISIBILITY,
            pollers: 1,
            wait: Duration::from_secs(5),
            ..WorkerConfig::default()
        },
    ));
    let (tx, rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn({
        let w = w.clone();
        async move { w.run(rx).await }
    });
    // the long poll is waiting on an empty queue
    tokio::time::sleep(Duration::from_millis(100)).await;
    tx.send(true).unwrap();
    let ids = queue_bookings(&s, &queue, &["late".to_string()], None).await;
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap();
    let stats = w.stats();
    assert_eq!((stats.stored, stats.handed_back), (0, 1), "{stats:?}");
    assert!(
        s.records.scan_all().await.unwrap().is_empty(),
        "not handled"
    );
    let again = queue.receive(10, Duration::ZERO).await.unwrap();
    assert_eq!(again.len(), 1, "visible at once");
    assert_eq!(again[0].message.deduplication_id, ids[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_pollers_do_not_pass_a_handed_back_message_among_themselves() {
    // sixteen pollers in their long polls when the stop comes; a message
    // arriving then is received by one of them. Handed back at once, the
    // others' long polls still in progress would receive it in turn, each
    // receive counting towards the dead-letter limit (5): it must go back
    // once, after every poller has stopped receiving.
    let s = Stack::new(1, &["late"]).await;
    let (queue, _clock) = scaled_queue();
    let w = Arc::new(Worker::new(
        queue.clone(),
        s.records.clone(),
        s.ledger.clone(),
        s.alerts.clone(),
        WorkerConfig {
            visibility: SCALED_VISIBILITY,
            pollers: 16,
            wait: Duration::from_secs(2),
            ..WorkerConfig::default()
        },
    ));
    let (tx, rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn({
        let w = w.clone();
        async move { w.run(rx).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    tx.send(true).unwrap();
    let ids = queue_bookings(&s, &queue, &["late".to_string()], None).await;
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap();
    let stats = w.stats();
    assert_eq!(
        (stats.stored, stats.handed_back, stats.received),
        (0, 1, 1),
        "received once by the stopping worker, handed back once: {stats:?}"
    );
    let again = queue.receive(10, Duration::ZERO).await.unwrap();
    assert_eq!(again.len(), 1, "visible at once");
    assert_eq!(again[0].message.deduplication_id, ids[0]);
    assert_eq!(
        again[0].receive_count, 2,
        "one receive by the stopping worker, then this one"
    );
}
