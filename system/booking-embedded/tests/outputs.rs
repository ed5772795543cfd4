//! The embedded outputs (status object, outbox, alert log): the outputs
//! contract suites, and what only the embedded ones have (being made
//! unavailable by hand, per-payment and per-kind lookups); and the status
//! writer on the embedded stack: the throttle, the once-only transitions, the
//! writer order, and two writers racing while a level fills.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use booking::clock::{Clock, ManualClock, SystemClock};
use booking::coordination::{Coordination, keys};
use booking::ledger::{Admission, Ledger, Step};
use booking::notify::{Alert, Alerts, Confirmation, Mailer, NotifyError, StatusSink};
use booking::status::{
    LevelState, Publish, StatusDocument, StatusError, StatusWriter, Transition, dirty_key,
    writer_lock_key,
};
use booking::{CandidateHash, Level, PaymentId, RequestToken, SaleId};
use booking_contract::outputs::{OutputLogFixture, Outputs, StatusSinkFixture, T0_MS};
use booking_embedded::coordination::EmbeddedCoordination;
use booking_embedded::ledger::EmbeddedLedger;
use booking_embedded::outputs::{AlertLog, EmbeddedOutputs, ObjectSink, OutboxMailer, SinkWrite};

const T0: u64 = 1_700_000_000_000;
const PREFIX: &str = "t";

fn sale() -> SaleId {
    SaleId::parse("launch").unwrap()
}
fn level(s: &str) -> Level {
    Level::parse(s).unwrap()
}
fn pay(s: &str) -> PaymentId {
    PaymentId::parse(s).unwrap()
}
fn token(i: usize) -> RequestToken {
    RequestToken::parse(&format!("r-{i}")).unwrap()
}
fn cand(i: usize) -> CandidateHash {
    CandidateHash::of(&format!("candidate-{i}"))
}

fn confirmation(payment: &str) -> Confirmation {
    Confirmation {
        sale: sale(),
        candidate: CandidateHash::of(payment),
        level: level("gold"),
        payment_id: pay(payment),
        trx_id: Some(format!("trx-{payment}")),
        recovered: false,
    }
}

fn doc(w: &SinkWrite) -> StatusDocument {
    StatusDocument::from_json(&w.document).unwrap()
}

// ---------------------------------------------------------------- outputs

/// The embedded outputs on a manual clock at the contract's start time.
struct Fixture {
    clock: ManualClock,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture {
            clock: ManualClock::new(T0_MS),
        }
    }
}

#[async_trait::async_trait]
impl StatusSinkFixture for Fixture {
    async fn sink(&self) -> Arc<dyn StatusSink> {
        Arc::new(ObjectSink::new(Arc::new(self.clock.clone())))
    }
}

#[async_trait::async_trait]
impl OutputLogFixture for Fixture {
    async fn outputs(&self) -> Outputs {
        let outputs = EmbeddedOutputs {
            mailer: Arc::new(OutboxMailer::new()),
            alerts: Arc::new(AlertLog::new()),
            sink: Arc::new(ObjectSink::new(Arc::new(self.clock.clone()))),
        };
        Outputs {
            mailer: outputs.mailer.clone(),
            alerts: outputs.alerts.clone(),
            status: outputs.sink.clone(),
            log: Arc::new(outputs),
        }
    }

    fn advance_ms(&self, ms: u64) {
        self.clock.advance_ms(ms);
    }
}

booking_contract::status_sink_contract!(Fixture::new());
booking_contract::output_log_contract!(Fixture::new());

#[tokio::test]
async fn the_object_sink_refuses_while_unavailable_and_records_no_refused_write() {
    let clock = ManualClock::new(T0);
    let sink = ObjectSink::new(Arc::new(clock.clone()));
    sink.put(b"one").await.unwrap();
    clock.advance_ms(5);
    sink.put(b"two").await.unwrap();
    assert_eq!(
        sink.writes(),
        [
            SinkWrite {
                at_ms: T0,
                document: b"one".to_vec()
            },
            SinkWrite {
                at_ms: T0 + 5,
                document: b"two".to_vec()
            }
        ]
    );
    assert_eq!(sink.write_count(), 2);

    sink.set_unavailable(true);
    assert!(matches!(
        sink.put(b"three").await,
        Err(NotifyError::Unavailable(_))
    ));
    assert!(sink.get().await.is_err());
    sink.set_unavailable(false);
    assert_eq!(sink.write_count(), 2, "a refused write is not recorded");
    assert_eq!(sink.current().as_deref(), Some(&b"two"[..]));
}

#[tokio::test]
async fn the_outbox_counts_per_payment_and_keeps_no_failed_send() {
    let mailer = OutboxMailer::new();
    mailer.send(&confirmation("TR1")).await.unwrap();
    mailer.send(&confirmation("TR2")).await.unwrap();
    mailer.send(&confirmation("TR1")).await.unwrap();
    assert_eq!(mailer.sent_for(&pay("TR1")), 2);
    assert_eq!(mailer.sent_for(&pay("TR2")), 1);
    assert_eq!(mailer.sent_for(&pay("TR3")), 0);

    mailer.set_unavailable(true);
    assert!(mailer.send(&confirmation("TR3")).await.is_err());
    mailer.set_unavailable(false);
    assert_eq!(mailer.sent().len(), 3, "a failed send is not in the outbox");
}

#[tokio::test]
async fn the_alert_log_finds_alerts_of_one_kind() {
    let log = AlertLog::new();
    let alert = |kind: &str, detail: &str| Alert {
        kind: kind.to_owned(),
        detail: detail.to_owned(),
        candidate: None,
        payment_id: Some(pay("TR1")),
    };
    log.raise(alert("dlq", "one")).await.unwrap();
    log.raise(alert("extensions_exhausted", "two"))
        .await
        .unwrap();
    log.raise(alert("dlq", "three")).await.unwrap();
    assert_eq!(
        log.of_kind("dlq")
            .iter()
            .map(|a| a.detail.as_str())
            .collect::<Vec<_>>(),
        ["one", "three"]
    );
    assert!(log.of_kind("nope").is_empty());
}

// ----------------------------------------------------------- status writer

struct Stack {
    ledger: Arc<EmbeddedLedger>,
    coordination: Arc<EmbeddedCoordination>,
    sink: Arc<ObjectSink>,
    clock: Arc<dyn Clock>,
}

impl Stack {
    /// Sale "launch": levels a (cap `cap_a`) and b (cap 100), open, with
    /// `candidates` eligible.
    async fn new(clock: Arc<dyn Clock>, cap_a: u32, candidates: usize) -> Stack {
        let ledger = Arc::new(EmbeddedLedger::new());
        ledger
            .reset(&sale(), &[(level("a"), cap_a), (level("b"), 100)])
            .await
            .unwrap();
        let cs: Vec<_> = (0..candidates).map(cand).collect();
        ledger.load_candidates(&sale(), &cs).await.unwrap();
        ledger.set_open(&sale(), true).await.unwrap();
        Stack {
            ledger,
            coordination: Arc::new(EmbeddedCoordination::new(clock.clone())),
            sink: Arc::new(ObjectSink::new(clock.clone())),
            clock,
        }
    }

    fn writer(&self, id: &str) -> StatusWriter {
        self.writer_to(id, self.sink.clone())
    }

    fn writer_to(&self, id: &str, sink: Arc<dyn StatusSink>) -> StatusWriter {
        StatusWriter::new(
            sale(),
            PREFIX,
            self.ledger.clone(),
            self.coordination.clone(),
            sink,
            self.clock.clone(),
        )
        .with_writer_id(id)
    }

    async fn admit(&self, i: usize, l: &str) -> Admission {
        self.ledger
            .admit(&sale(), &cand(i), &level(l), &token(i), self.clock.now_ms())
            .await
            .unwrap()
    }

    fn last(&self) -> StatusDocument {
        StatusDocument::from_json(&self.sink.current().unwrap()).unwrap()
    }
}

fn state(d: &StatusDocument, l: &str) -> (u32, LevelState) {
    let s = d.level(&level(l)).unwrap();
    (s.taken, s.state)
}

#[tokio::test]
async fn a_burst_collapses_to_one_write_per_throttle_window() {
    let clock = ManualClock::new(T0);
    let stack = Stack::new(Arc::new(clock.clone()), 10, 20).await;
    let writer = stack.writer("w");

    let first = writer.poke().await.unwrap();
    assert!(first.won_throttle);
    assert_eq!(first.publish, Publish::Wrote { writes: 1 });
    for i in 0..5 {
        stack.admit(i, "a").await;
        let p = writer.poke().await.unwrap();
        assert!(!p.won_throttle);
        assert_eq!(p.publish, Publish::Skipped);
    }
    assert_eq!(stack.sink.write_count(), 1);
    assert_eq!(state(&stack.last(), "a"), (0, LevelState::Open));

    clock.advance(Duration::from_millis(1_999));
    assert_eq!(writer.poke().await.unwrap().publish, Publish::Skipped);
    clock.advance_ms(1);
    let p = writer.poke().await.unwrap();
    assert!(p.won_throttle);
    assert_eq!(p.publish, Publish::Wrote { writes: 1 });
    assert_eq!(state(&stack.last(), "a"), (5, LevelState::Open));
    assert_eq!(stack.last().generated_at_ms, T0 + 2_000);
    assert_eq!(stack.sink.write_count(), 2);
}

#[tokio::test]
async fn a_level_filling_publishes_once_inside_the_throttle_window() {
    let clock = ManualClock::new(T0);
    let stack = Stack::new(Arc::new(clock.clone()), 2, 10).await;
    let (w1, w2) = (stack.writer("w1"), stack.writer("w2"));
    w1.poke().await.unwrap();
    stack.admit(0, "a").await;
    assert_eq!(w2.poke().await.unwrap().publish, Publish::Skipped);

    stack.admit(1, "a").await; // fills a
    let p = w2.poke().await.unwrap();
    assert_eq!(p.transitions, [Transition::LevelFull(level("a"))]);
    assert_eq!(p.publish, Publish::Wrote { writes: 1 });
    assert_eq!(state(&stack.last(), "a"), (2, LevelState::Full));
    // the other writer sees the same fill: the latch is taken, nothing to do
    let p = w1.poke().await.unwrap();
    assert!(p.transitions.is_empty());
    assert_eq!(p.publish, Publish::Skipped);
    assert_eq!(stack.sink.write_count(), 2);
    assert_eq!(
        stack
            .coordination
            .get(&keys::level_full_latch(PREFIX, &sale(), &level("a")))
            .await
            .unwrap()
            .as_deref(),
        Some("w2:1"),
        "the latch holds the winner's token"
    );
}

#[tokio::test]
async fn a_release_clears_the_latch_and_reopens_the_level_at_once() {
    let clock = ManualClock::new(T0);
    let stack = Stack::new(Arc::new(clock.clone()), 1, 10).await;
    let writer = stack.writer("w");
    writer.poke().await.unwrap();
    stack.admit(0, "a").await;
    assert_eq!(
        writer.poke().await.unwrap().transitions,
        [Transition::LevelFull(level("a"))]
    );
    assert_eq!(state(&stack.last(), "a"), (1, LevelState::Full));
    assert_eq!(stack.admit(1, "a").await, Admission::LevelFull);

    // the seat comes back (the reconciler's release), still inside the window
    let l = &stack.ledger;
    let deadline = T0 + 600_000;
    assert_eq!(
        l.attach_payment(&sale(), &cand(0), &token(0), &pay("TR0"), deadline)
            .await
            .unwrap(),
        Step::Done
    );
    assert_eq!(
        l.release(&sale(), &cand(0), &pay("TR0")).await.unwrap(),
        Step::Done
    );
    let p = writer.poke().await.unwrap();
    assert_eq!(p.transitions, [Transition::LevelReopened(level("a"))]);
    assert_eq!(p.publish, Publish::Wrote { writes: 1 });
    assert_eq!(state(&stack.last(), "a"), (0, LevelState::Open));

    // and the next fill publishes again
    stack.admit(1, "a").await;
    assert_eq!(
        writer.poke().await.unwrap().transitions,
        [Transition::LevelFull(level("a"))]
    );
    assert_eq!(state(&stack.last(), "a"), (1, LevelState::Full));
    assert_eq!(stack.sink.write_count(), 4);
}

#[tokio::test]
async fn closing_publishes_once_and_shows_every_level_closed() {
    let clock = ManualClock::new(T0);
    let stack = Stack::new(Arc::new(clock.clone()), 5, 10).await;
    let (w1, w2) = (stack.writer("w1"), stack.writer("w2"));
    w1.poke().await.unwrap();
    stack.ledger.set_open(&sale(), false).await.unwrap();
    let p = w2.poke().await.unwrap();
    assert_eq!(p.transitions, [Transition::SaleClosed]);
    assert_eq!(p.publish, Publish::Wrote { writes: 1 });
    assert_eq!(w1.poke().await.unwrap().publish, Publish::Skipped);
    let d = stack.last();
    assert!(!d.open);
    assert!(d.levels.iter().all(|l| l.state == LevelState::Closed));

    stack.ledger.set_open(&sale(), true).await.unwrap();
    let p = w1.poke().await.unwrap();
    assert_eq!(p.transitions, [Transition::SaleOpened]);
    assert!(stack.last().open);
    assert_eq!(stack.sink.write_count(), 3);
}

#[tokio::test]
async fn a_writer_finding_the_lock_taken_hands_over_and_the_holder_writes_again() {
    let clock = ManualClock::new(T0);
    let stack = Stack::new(Arc::new(clock.clone()), 5, 10).await;
    let writer = stack.writer("w");
    let (lock, dirty) = (writer_lock_key(PREFIX, &sale()), dirty_key(PREFIX, &sale()));
    let c = &stack.coordination;

    // someone else is mid-write
    assert!(
        c.try_lock(&lock, "other", Duration::from_secs(10))
            .await
            .unwrap()
    );
    stack.admit(0, "a").await;
    assert_eq!(writer.publish().await.unwrap(), Publish::HandedOver);
    assert_eq!(stack.sink.write_count(), 0);
    assert!(
        c.get(&dirty).await.unwrap().is_some(),
        "marked for the holder"
    );

    // the holder finishes, sees the mark, and a publication writes the news
    assert!(c.unlock(&lock, "other").await.unwrap());
    assert_eq!(
        writer.publish().await.unwrap(),
        Publish::Wrote { writes: 1 }
    );
    assert_eq!(state(&stack.last(), "a"), (1, LevelState::Open));
    assert!(c.get(&dirty).await.unwrap().is_none());
    assert!(c.get(&lock).await.unwrap().is_none(), "unlocked");
}

#[tokio::test]
async fn a_sink_failure_is_reported_and_the_lock_released() {
    let clock = ManualClock::new(T0);
    let stack = Stack::new(Arc::new(clock.clone()), 5, 10).await;
    let writer = stack.writer("w");
    stack.sink.set_unavailable(true);
    assert!(matches!(
        writer.poke().await,
        Err(StatusError::Sink(NotifyError::Unavailable(_)))
    ));
    let lock = writer_lock_key(PREFIX, &sale());
    assert!(stack.coordination.get(&lock).await.unwrap().is_none());
    stack.sink.set_unavailable(false);
    assert_eq!(
        writer.publish().await.unwrap(),
        Publish::Wrote { writes: 1 }
    );
}

/// A recording sink whose first write waits at a gate (and says so), to hold
/// a writer between its read and its write.
#[derive(Debug)]
struct GatedSink {
    inner: Arc<ObjectSink>,
    entered: parking_lot::Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    gate: tokio::sync::Mutex<Option<tokio::sync::oneshot::Receiver<()>>>,
}

#[async_trait::async_trait]
impl StatusSink for GatedSink {
    async fn put(&self, document: &[u8]) -> Result<(), NotifyError> {
        let entered = self.entered.lock().take();
        if let Some(entered) = entered {
            entered.send(()).unwrap();
            let gate = self.gate.lock().await.take().unwrap();
            gate.await.unwrap();
        }
        self.inner.put(document).await
    }

    async fn get(&self) -> Result<Option<Vec<u8>>, NotifyError> {
        self.inner.get().await
    }
}

#[tokio::test]
async fn a_slow_older_write_cannot_have_the_last_word() {
    let clock = ManualClock::new(T0);
    let stack = Arc::new(Stack::new(Arc::new(clock.clone()), 2, 10).await);
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel();
    let (gate_tx, gate_rx) = tokio::sync::oneshot::channel();
    let gated = Arc::new(GatedSink {
        inner: stack.sink.clone(),
        entered: parking_lot::Mutex::new(Some(entered_tx)),
        gate: tokio::sync::Mutex::new(Some(gate_rx)),
    });
    let slow = stack.writer_to("slow", gated);
    let fast = stack.writer("fast");
    stack.admit(0, "a").await;

    // the slow writer reads a = 1 of 2 (open) and stalls before its put
    let slow = tokio::spawn(async move { slow.publish().await.unwrap() });
    entered_rx.await.unwrap();
    // meanwhile a fills, and the fast writer wins the transition
    stack.admit(1, "a").await;
    let p = fast.poke().await.unwrap();
    assert_eq!(p.transitions, [Transition::LevelFull(level("a"))]);
    assert_eq!(
        p.publish,
        Publish::HandedOver,
        "the slow writer holds the lock"
    );
    assert_eq!(stack.sink.write_count(), 0);

    // the stale document lands, then the holder writes again from a new read
    gate_tx.send(()).unwrap();
    assert_eq!(slow.await.unwrap(), Publish::Wrote { writes: 2 });
    let writes = stack.sink.writes();
    assert_eq!(writes.len(), 2);
    assert_eq!(state(&doc(&writes[0]), "a"), (1, LevelState::Open));
    assert_eq!(state(&stack.last(), "a"), (2, LevelState::Full));
}

/// A recording sink that takes a while to write, so that writers overlap
/// between reading the counters and overwriting the document.
#[derive(Debug)]
struct SlowSink(Arc<ObjectSink>);

#[async_trait::async_trait]
impl StatusSink for SlowSink {
    async fn put(&self, document: &[u8]) -> Result<(), NotifyError> {
        tokio::time::sleep(Duration::from_micros(300)).await;
        self.0.put(document).await
    }

    async fn get(&self) -> Result<Option<Vec<u8>>, NotifyError> {
        self.0.get().await
    }
}

/// Two writers race while 300 admissions fill level a (cap 60); every
/// admission pokes one of them. Every document ever written must be
/// self-consistent (never a level "open" with taken >= cap), writes must land
/// in read order (a's count never goes back), and the last document must show
/// a full.
async fn race(throttle: Duration) {
    let stack = Arc::new(Stack::new(Arc::new(SystemClock), 60, 300).await);
    let sink: Arc<dyn StatusSink> = Arc::new(SlowSink(stack.sink.clone()));
    let writers = Arc::new([
        stack.writer_to("w1", sink.clone()).with_throttle(throttle),
        stack.writer_to("w2", sink).with_throttle(throttle),
    ]);
    let mut tasks = Vec::new();
    for i in 0..300 {
        let (stack, writers) = (stack.clone(), writers.clone());
        tasks.push(tokio::spawn(async move {
            let l = if i % 5 == 0 { "b" } else { "a" };
            stack.admit(i, l).await;
            tokio::task::yield_now().await;
            writers[i % 2].poke().await.unwrap()
        }));
    }
    let mut full_won = 0;
    for t in tasks {
        let p = t.await.unwrap();
        full_won += p
            .transitions
            .iter()
            .filter(|t| **t == Transition::LevelFull(level("a")))
            .count();
    }
    assert_eq!(full_won, 1, "the fill is published by exactly one writer");

    let writes = stack.sink.writes();
    assert!(!writes.is_empty());
    let mut last_a = 0;
    for w in &writes {
        let d = doc(w);
        assert!(
            d.shows_full_level_open().is_empty(),
            "a full level shown open: {d:?}"
        );
        for l in &d.levels {
            assert_eq!(l.state == LevelState::Full, l.taken >= l.cap, "{d:?}");
        }
        let (a, _) = state(&d, "a");
        assert!(
            a >= last_a,
            "an older read overwrote a newer one: {a} < {last_a}"
        );
        last_a = a;
    }
    assert_eq!(state(&stack.last(), "a"), (60, LevelState::Full));
    let counters = stack.ledger.counters(&sale()).await.unwrap();
    assert_eq!(counters.levels[0].count, 60);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_writers_never_show_a_full_level_open_without_a_throttle() {
    race(Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_writers_never_show_a_full_level_open_with_the_2s_throttle() {
    race(booking::settings::STATUS_THROTTLE).await;
}
