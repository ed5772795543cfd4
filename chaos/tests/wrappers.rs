#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The wrappers over the embedded backends, on paused tokio time.

use std::sync::Arc;
use std::time::Duration;

use booking::{
    Admission, Alert, Alerts, BookingRecord, CandidateHash, Clock, Condition, Confirmation,
    Coordination, CoordinationError, CreatePayment, CreatedPayment, Executed, GatewayError, Ledger,
    LedgerError, Level, Mailer, Message, NotifyError, PaymentGateway, PaymentId, PaymentStatus,
    Queue, QueueError, RecordError, RecordStore, RequestToken, SaleId, SendOutcome, Settings,
    StatusSink,
};
use booking_embedded::coordination::EmbeddedCoordination;
use booking_embedded::ledger::EmbeddedLedger;
use booking_embedded::outputs::{AlertLog, ObjectSink, OutboxMailer};
use booking_embedded::queue::{EmbeddedQueue, QueueConfig};
use booking_embedded::records::{EmbeddedRecords, RecordsConfig};
use chaos::{
    Effect, FaultyAlerts, FaultyCoordination, FaultyGateway, FaultyLedger, FaultyMailer,
    FaultyQueue, FaultyRecords, FaultySink, FiredFault, Injector, Schedule, SkewedClock,
    TokioClock,
};
use tokio::time::Instant;

const EPOCH_MS: u64 = 1_800_000_000_000;

fn sale() -> SaleId {
    SaleId::parse("launch").unwrap()
}
fn gold() -> Level {
    Level::parse("gold").unwrap()
}
fn cand(n: u32) -> CandidateHash {
    CandidateHash::of(&format!("c{n}"))
}
fn token(n: u32) -> RequestToken {
    RequestToken::parse(&format!("t{n}")).unwrap()
}

/// A schedule, an injector on a tokio clock started now, and the clock.
fn injector(toml: &str, seed: u64) -> (Arc<Injector>, Arc<dyn Clock>) {
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::new(EPOCH_MS));
    let schedule = Schedule::from_toml(toml).unwrap();
    (
        Arc::new(Injector::new(schedule, seed, clock.clone())),
        clock,
    )
}

/// An open sale of `cap` gold seats with candidates 0..100 eligible.
async fn ledger(injector: &Arc<Injector>, cap: u32) -> (Arc<EmbeddedLedger>, FaultyLedger) {
    let inner = Arc::new(EmbeddedLedger::new());
    inner.reset(&sale(), &[(gold(), cap)]).await.unwrap();
    let all: Vec<CandidateHash> = (0..100).map(cand).collect();
    inner.load_candidates(&sale(), &all).await.unwrap();
    inner.set_open(&sale(), true).await.unwrap();
    let faulty = FaultyLedger::new(inner.clone(), injector.clone());
    (inner, faulty)
}

async fn count(ledger: &EmbeddedLedger) -> u32 {
    ledger.counters(&sale()).await.unwrap().levels[0].count
}

/// How long `f` takes on the paused clock.
async fn timed<T>(f: impl std::future::Future<Output = T>) -> (T, Duration) {
    let t0 = Instant::now();
    let out = f.await;
    (out, t0.elapsed())
}

#[tokio::test(start_paused = true)]
async fn latency_delays_exactly_the_targeted_op_during_its_window() {
    let (inj, _) = injector(
        r#"
[[fault]]
name = "slow-admits"
target = "ledger"
ops = ["admit"]
start_ms = 1_000
duration_ms = 2_000
kind = { type = "latency", delay = { fixed = { ms = 150 } } }
"#,
        1,
    );
    let (_, ledger) = ledger(&inj, 100).await;
    let admit = |n: u32| {
        let ledger = ledger.clone();
        async move {
            ledger
                .admit(&sale(), &cand(n), &gold(), &token(n), EPOCH_MS)
                .await
        }
    };
    // before the window
    let (r, took) = timed(admit(1)).await;
    assert!(matches!(r.unwrap(), Admission::Admitted { count: 1 }));
    assert_eq!(took, Duration::ZERO);
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    // in the window: admit is late, another op is not
    let (r, took) = timed(admit(2)).await;
    assert!(matches!(r.unwrap(), Admission::Admitted { count: 2 }));
    assert_eq!(took, Duration::from_millis(150));
    let (_, took) = timed(ledger.counters(&sale())).await;
    assert_eq!(took, Duration::ZERO, "counters is not targeted");
    // after the window (1_150 + 1_900 = 3_050 ≥ 3_000)
    tokio::time::sleep(Duration::from_millis(1_900)).await;
    let (_, took) = timed(admit(3)).await;
    assert_eq!(took, Duration::ZERO);
    let fired = inj.fired();
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].op, "admit");
    assert_eq!(fired[0].at_ms, 1_000);
    assert_eq!(fired[0].effect, Effect::Delayed { ms: 150 });
    assert_eq!(inj.counts()[0].calls, 1);
}

#[tokio::test(start_paused = true)]
async fn an_error_fails_the_op_with_the_mapped_error_and_changes_nothing() {
    let (inj, clock) = injector(
        r#"
[[fault]]
name = "redis-down"
target = "ledger"
ops = ["admit"]
start_ms = 0
duration_ms = 1_000

kind = { type = "error" }

[[fault]]
name = "dynamo-throttles"
target = "records"
ops = ["put"]
start_ms = 0
duration_ms = 1_000
kind = { type = "throttle" }

[[fault]]
name = "sqs-throttles"
target = "queue"
ops = ["send"]
start_ms = 0
duration_ms = 1_000
kind = { type = "throttle" }

[[fault]]
name = "lock-timeouts"
target = "coordination"
ops = ["try_lock"]
start_ms = 0
duration_ms = 1_000
kind = { type = "timeout", after_ms = 250 }
"#,
        2,
    );
    let (inner_ledger, ledger) = ledger(&inj, 100).await;
    let err = ledger
        .admit(&sale(), &cand(1), &gold(), &token(1), EPOCH_MS)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        LedgerError::Unavailable("injected fault redis-down: error".into())
    );
    assert_eq!(
        count(&inner_ledger).await,
        0,
        "the admission never happened"
    );
    assert_eq!(inner_ledger.hold(&sale(), &cand(1)).await.unwrap(), None);

    let records = Arc::new(EmbeddedRecords::new(
        clock.clone(),
        RecordsConfig::default(),
    ));
    let faulty_records = FaultyRecords::over(records.clone(), inj.clone());
    let record = BookingRecord::held(
        cand(1),
        sale(),
        gold(),
        PaymentId::parse("P1").unwrap(),
        EPOCH_MS,
        EPOCH_MS + 600_000,
    );
    let err = faulty_records
        .put(record, Condition::NotExists)
        .await
        .unwrap_err();
    assert_eq!(err, RecordError::Throttled);
    assert_eq!(records.get(&cand(1), true).await.unwrap(), None);
    assert_eq!(
        records.throttles().await.unwrap().total(),
        0,
        "injected throttles are the fault log's, not the table's"
    );

    let queue = Arc::new(EmbeddedQueue::new(
        clock.clone(),
        QueueConfig::from_settings(&Settings::default()),
    ));
    let faulty_queue = FaultyQueue::new(queue.clone(), inj.clone());
    let msg = Message::admission(&cand(1), EPOCH_MS, "{}".into());
    assert_eq!(
        faulty_queue.send(msg).await.unwrap_err(),
        QueueError::Throttled
    );
    assert_eq!(queue.depth().await.unwrap().visible, 0);

    let coordination = Arc::new(EmbeddedCoordination::new(clock.clone()));
    let faulty_coordination = FaultyCoordination::new(coordination.clone(), inj.clone());
    let (r, took) = timed(faulty_coordination.try_lock("k", "me", Duration::from_secs(5))).await;
    assert!(
        matches!(r, Err(CoordinationError::Unavailable(m)) if m.contains("timed out after 250 ms"))
    );
    assert_eq!(took, Duration::from_millis(250));
    assert_eq!(coordination.get("k").await.unwrap(), None, "no lock taken");
    // untargeted ops of the same port pass through
    assert!(faulty_coordination.set_once("k", "v", None).await.unwrap());

    let kinds: Vec<(String, Effect)> = inj
        .fired()
        .into_iter()
        .map(|f| (f.fault, f.effect))
        .collect();
    assert_eq!(
        kinds,
        [
            ("redis-down".to_owned(), Effect::Failed),
            ("dynamo-throttles".to_owned(), Effect::Throttled),
            ("sqs-throttles".to_owned(), Effect::Throttled),
            (
                "lock-timeouts".to_owned(),
                Effect::TimedOut { after_ms: 250 }
            ),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_reset_sometimes_applies_the_write_and_always_reports_unknown() {
    let (inj, _) = injector(
        r#"
[[fault]]
name = "redis-reset"
target = "ledger"
ops = ["admit"]
start_ms = 0
duration_ms = 60_000
kind = { type = "reset" }
"#,
        3,
    );
    let (inner, ledger) = ledger(&inj, 100).await;
    let mut applied = 0;
    for n in 0..40 {
        let err = ledger
            .admit(&sale(), &cand(n), &gold(), &token(n), EPOCH_MS)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, LedgerError::Unavailable(m) if m.contains("outcome unknown")),
            "{err}"
        );
        let held = inner.hold(&sale(), &cand(n)).await.unwrap().is_some();
        let logged = inj.fired().last().cloned().unwrap();
        assert_eq!(
            logged.effect,
            Effect::Reset { applied: held },
            "the log says whether the write took effect"
        );
        applied += u32::from(held);
    }
    assert!(
        (8..=32).contains(&applied),
        "a seeded coin applies some and not others: {applied} of 40"
    );
    assert_eq!(count(&inner).await, applied);
    assert_eq!(inj.counts()[0].resets_applied, u64::from(applied));
}

#[tokio::test(start_paused = true)]
async fn a_hang_blocks_until_its_window_ends_then_goes_through() {
    let (inj, clock) = injector(
        r#"
[[fault]]
name = "sqs-paused"
target = "queue"
start_ms = 500
duration_ms = 3_000
kind = { type = "hang" }

[[fault]]
name = "short-hang"
target = "ledger"
start_ms = 0
duration_ms = 10_000
kind = { type = "hang", ms = 700 }
"#,
        4,
    );
    let queue = Arc::new(EmbeddedQueue::new(
        clock.clone(),
        QueueConfig::from_settings(&Settings::default()),
    ));
    let faulty = FaultyQueue::new(queue.clone(), inj.clone());
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let msg = Message::admission(&cand(1), EPOCH_MS, "{}".into());
    let (r, took) = timed(faulty.send(msg)).await;
    assert_eq!(
        r.unwrap(),
        SendOutcome::Queued,
        "it goes through once resumed"
    );
    assert_eq!(took, Duration::from_millis(2_300), "until 3_500 ms");
    assert_eq!(inj.now_ms(), 3_500);
    let (_, took) = timed(faulty.depth()).await;
    assert_eq!(took, Duration::ZERO, "resumed");
    assert_eq!(queue.depth().await.unwrap().visible, 1);

    let (_, ledger) = ledger(&inj, 10).await;
    let (r, took) = timed(ledger.counters(&sale())).await;
    r.unwrap();
    assert_eq!(took, Duration::from_millis(700), "a hang of a set length");
    let effects: Vec<Effect> = inj.fired().into_iter().map(|f| f.effect).collect();
    assert_eq!(
        effects,
        [Effect::Hung { ms: 2_300 }, Effect::Hung { ms: 700 }]
    );
}

#[tokio::test(start_paused = true)]
async fn a_repeating_fault_fires_in_every_window_and_only_there() {
    let (inj, _) = injector(
        r#"
[[fault]]
name = "flapping-redis"
target = "ledger"
ops = ["hold"]
start_ms = 100
duration_ms = 50
every_ms = 400
kind = { type = "error" }
"#,
        5,
    );
    let (_, ledger) = ledger(&inj, 10).await;
    // one call every 25 ms for 2 s: windows [100,150), [500,550), … [1700,1750)
    let mut failed_at = Vec::new();
    for step in 0..80u64 {
        let at = step * 25;
        if ledger.hold(&sale(), &cand(1)).await.is_err() {
            failed_at.push(at);
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let expected: Vec<u64> = (0..5)
        .flat_map(|w| [100 + 400 * w, 125 + 400 * w])
        .collect();
    assert_eq!(failed_at, expected);
    assert_eq!(inj.counts()[0].fired, 10);
}

/// A run of mixed calls under a probabilistic schedule; its fired-fault log.
async fn seeded_run(seed: u64) -> Vec<FiredFault> {
    let (inj, clock) = injector(
        r#"
[[fault]]
name = "spikes"
target = "ledger"
start_ms = 0
duration_ms = 5_000
probability = 0.3
kind = { type = "latency", delay = { exponential = { mean_ms = 40.0, max_ms = 400 } } }

[[fault]]
name = "flaky"
target = "ledger"
ops = ["admit", "release"]
start_ms = 0
duration_ms = 5_000
probability = 0.2
kind = { type = "reset" }

[[fault]]
name = "sqs-errors"
target = "queue"
ops = ["send"]
start_ms = 200
duration_ms = 100
every_ms = 500
probability = 0.5
kind = { type = "error" }
"#,
        seed,
    );
    let (_, ledger) = ledger(&inj, 50).await;
    let queue = FaultyQueue::new(
        Arc::new(EmbeddedQueue::new(
            clock.clone(),
            QueueConfig::from_settings(&Settings::default()),
        )),
        inj.clone(),
    );
    for n in 0..60 {
        let _ = ledger
            .admit(&sale(), &cand(n), &gold(), &token(n), EPOCH_MS)
            .await;
        let _ = queue
            .send(Message::admission(
                &cand(n),
                EPOCH_MS + u64::from(n),
                "{}".into(),
            ))
            .await;
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    inj.fired()
}

#[tokio::test(start_paused = true)]
async fn the_same_seed_gives_the_same_fired_fault_log() {
    let a = seeded_run(11).await;
    let b = seeded_run(11).await;
    assert!(a.len() > 20, "enough fired to compare: {}", a.len());
    assert_eq!(a, b);
    let c = seeded_run(12).await;
    assert_ne!(a, c, "another seed, another run");
    for f in ["spikes", "flaky", "sqs-errors"] {
        assert!(a.iter().any(|x| x.fault == f), "{f} fired");
    }
}

/// A gateway that answers at once and remembers the time each call was given.
#[derive(Debug, Default)]
struct FakeGateway {
    within: parking_lot::Mutex<Vec<Duration>>,
}

#[async_trait::async_trait]
impl PaymentGateway for FakeGateway {
    async fn create(
        &self,
        _req: &CreatePayment,
        within: Duration,
    ) -> Result<CreatedPayment, GatewayError> {
        self.within.lock().push(within);
        Ok(CreatedPayment {
            payment_id: PaymentId::parse("P1").unwrap(),
            bkash_url: "http://pay".into(),
            signature: "s".into(),
        })
    }
    async fn execute(
        &self,
        _payment: &PaymentId,
        within: Duration,
    ) -> Result<Executed, GatewayError> {
        self.within.lock().push(within);
        Err(GatewayError::Refused {
            code: "2056".into(),
            message: "Invalid Payment State".into(),
        })
    }
    async fn query(
        &self,
        _payment: &PaymentId,
        within: Duration,
    ) -> Result<PaymentStatus, GatewayError> {
        self.within.lock().push(within);
        Err(GatewayError::Unavailable("fake".into()))
    }
}

#[tokio::test(start_paused = true)]
async fn gateway_delays_come_out_of_within_and_outputs_and_clocks_are_wrapped_too() {
    let (inj, clock) = injector(
        r#"
[[fault]]
name = "slow-create"
target = "gateway"
ops = ["create"]
start_ms = 0
duration_ms = 10_000
kind = { type = "latency", delay = { fixed = { ms = 300 } } }

[[fault]]
name = "execute-lost"
target = "gateway"
ops = ["execute"]
start_ms = 0
duration_ms = 10_000
kind = { type = "timeout", after_ms = 5_000 }

[[fault]]
name = "ses-down"
target = "mailer"
start_ms = 0
duration_ms = 10_000
kind = { type = "error" }

[[fault]]
name = "pager-reset"
target = "alerts"
start_ms = 0
duration_ms = 10_000
kind = { type = "reset" }

[[fault]]
name = "s3-throttles"
target = "status_sink"
ops = ["put"]
start_ms = 0
duration_ms = 10_000
kind = { type = "throttle" }

[[fault]]
name = "api-2-behind"
target = "clock"
instances = ["api-2"]
start_ms = 1_000
duration_ms = 2_000
kind = { type = "clock_skew", ms = -700 }
"#,
        6,
    );
    let fake = Arc::new(FakeGateway::default());
    let gateway = FaultyGateway::new(fake.clone(), inj.clone());
    let req = CreatePayment {
        invoice: "inv".into(),
        amount: "500".into(),
        payer_reference: "c1".into(),
        callback_url: "http://cb".into(),
    };
    let (r, took) = timed(gateway.create(&req, Duration::from_secs(2))).await;
    r.unwrap();
    assert_eq!(took, Duration::from_millis(300));
    let (r, took) = timed(gateway.create(&req, Duration::from_millis(200))).await;
    assert_eq!(
        r.unwrap_err(),
        GatewayError::Timeout,
        "the delay outlasts within"
    );
    assert_eq!(took, Duration::from_millis(200));
    let pid = PaymentId::parse("P1").unwrap();
    let (r, took) = timed(gateway.execute(&pid, Duration::from_secs(8))).await;
    assert_eq!(r.unwrap_err(), GatewayError::Timeout);
    assert_eq!(took, Duration::from_millis(5_000));
    let _ = gateway.query(&pid, Duration::from_secs(1)).await;
    assert_eq!(
        *fake.within.lock(),
        [Duration::from_millis(1_700), Duration::from_secs(1)],
        "create got what the delay left; the timed-out ones never reached it"
    );

    let outbox = Arc::new(OutboxMailer::new());
    let mailer = FaultyMailer::new(outbox.clone(), inj.clone());
    let confirmation = Confirmation {
        sale: sale(),
        candidate: cand(1),
        level: gold(),
        payment_id: pid.clone(),
        trx_id: None,
        recovered: false,
    };
    assert!(matches!(
        mailer.send(&confirmation).await,
        Err(NotifyError::Unavailable(m)) if m.contains("ses-down")
    ));
    assert!(outbox.sent().is_empty());

    let log = Arc::new(AlertLog::new());
    let alerts = FaultyAlerts::new(log.clone(), inj.clone());
    let alert = Alert {
        kind: "dead_letter".into(),
        detail: "one message".into(),
        candidate: None,
        payment_id: None,
    };
    assert!(alerts.raise(alert).await.is_err());
    let applied = log.raised().len();
    assert_eq!(
        inj.fired().last().unwrap().effect,
        Effect::Reset {
            applied: applied == 1
        }
    );

    let sink = FaultySink::new(Arc::new(ObjectSink::new(clock.clone())), inj.clone());
    assert!(sink.put(b"{}").await.is_err());
    assert_eq!(sink.get().await.unwrap(), None, "get is not targeted");

    // clocks: only api-2's reads 700 ms behind, and only in its window
    let (inj, clock) = injector(
        r#"
[[fault]]
name = "api-2-behind"
target = "clock"
instances = ["api-2"]
start_ms = 1_000
duration_ms = 2_000
kind = { type = "clock_skew", ms = -700 }
"#,
        6,
    );
    let api1 = SkewedClock::new(clock.clone(), inj.clone()).on_instance("api-1");
    let api2 = SkewedClock::new(clock.clone(), inj.clone()).on_instance("api-2");
    assert_eq!(api2.now_ms(), clock.now_ms(), "before the window");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(api2.now_ms(), clock.now_ms() - 700);
    assert_eq!(api2.now_ms(), clock.now_ms() - 700);
    assert_eq!(api1.now_ms(), clock.now_ms());
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(api2.now_ms(), clock.now_ms(), "after the window");
    let skews: Vec<_> = inj
        .fired()
        .into_iter()
        .map(|f| (f.instance, f.effect))
        .collect();
    assert_eq!(
        skews,
        [(Some("api-2".to_owned()), Effect::Skewed { ms: -700 })],
        "logged once for the window"
    );
    assert_eq!(inj.counts()[0].calls, 2, "two skewed reads");
}
