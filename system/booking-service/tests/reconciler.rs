#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use booking::records::{RecordStatus, RecordStore};
use booking::{Admission, Bug, Bugs, GatewayPaymentState, Ledger, RequestToken, Settings};
use booking_service::reconciler::SweepReport;
use common::{Script, Stack, cand, pay};

fn minutes(m: u64) -> Duration {
    Duration::from_secs(m * 60)
}

#[tokio::test(start_paused = true)]
async fn an_expired_hold_is_released_and_the_seat_can_be_admitted_again() {
    let s = Stack::new(1, &["x", "y"]).await;
    let m = s.book("x", "t1", "P1").await;
    s.records
        .put(m.held_record(), booking::Condition::NotExists)
        .await
        .unwrap();
    let r = s.reconciler("a");
    // pending before the deadline (even inside the window): left alone
    s.clock.advance(minutes(5));
    let report = r.tick().await;
    assert_eq!((report.due, report.left, report.released), (1, 1, 0));
    s.clock.advance(minutes(5));
    let report = r.tick().await;
    assert_eq!(report.released, 1, "{report:?}");
    assert_eq!(s.count().await, 0);
    assert!(s.records.get(&cand("x"), true).await.unwrap().is_none());
    let again = s
        .ledger
        .admit(
            &s.sale,
            &cand("y"),
            &s.level,
            &RequestToken::parse("t2").unwrap(),
            s.now(),
        )
        .await
        .unwrap();
    assert!(matches!(again, booking::Admission::Admitted { count: 1 }));
    assert_eq!(r.stats().released, 1);
    assert!(s.mailer.0.lock().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_payment_is_released_before_its_deadline() {
    let s = Stack::new(1, &["x"]).await;
    let m = s.book("x", "t1", "P1").await;
    s.records
        .put(m.held_record(), booking::Condition::NotExists)
        .await
        .unwrap();
    s.gateway
        .set(&pay("P1"), Script::State(GatewayPaymentState::Cancelled));
    s.clock.advance(minutes(5));
    assert_eq!(s.reconciler("a").tick().await.released, 1);
    assert_eq!(s.count().await, 0);
}

#[tokio::test(start_paused = true)]
async fn a_completed_payment_becomes_paid_with_one_email() {
    let s = Stack::new(1, &["x"]).await;
    let m = s.book("x", "t1", "P1").await;
    s.records
        .put(m.held_record(), booking::Condition::NotExists)
        .await
        .unwrap();
    s.gateway.set(
        &pay("P1"),
        Script::State(GatewayPaymentState::Completed {
            trx_id: "TRX1".into(),
        }),
    );
    s.clock.advance(minutes(11)); // even after the deadline: completed wins
    let r = s.reconciler("a");
    assert_eq!(r.tick().await.paid, 1);
    let rec = s.records.get(&cand("x"), true).await.unwrap().unwrap();
    assert_eq!(rec.status, RecordStatus::Paid);
    assert_eq!(rec.expires_at_s, None);
    assert!(rec.email_sent);
    assert_eq!(
        s.ledger.paid(&s.sale, &cand("x")).await.unwrap(),
        Some(pay("P1"))
    );
    assert_eq!(s.count().await, 1, "a paid seat stays counted");
    let r2 = r.tick().await;
    assert_eq!((r2.due, r2.paid), (0, 0), "PAID records are not due");
    let mails = s.mailer.0.lock().clone();
    assert_eq!(mails.len(), 1);
    assert_eq!(mails[0].trx_id.as_deref(), Some("TRX1"));
}

#[tokio::test(start_paused = true)]
async fn unanswered_queries_extend_three_times_then_alert_and_never_release() {
    let s = Stack::new(1, &["x"]).await;
    let m = s.book("x", "t1", "P1").await;
    s.records
        .put(m.held_record(), booking::Condition::NotExists)
        .await
        .unwrap();
    s.gateway.set(&pay("P1"), Script::Fail);
    let r = s.reconciler("a");
    s.clock.advance(minutes(11));
    let mut extended = 0;
    for _ in 0..200 {
        let report = r.tick().await;
        extended += report.extended;
        s.clock.advance(Duration::from_secs(20));
    }
    assert_eq!(extended, 3);
    let rec = s.records.get(&cand("x"), true).await.unwrap().unwrap();
    assert_eq!(
        rec.status,
        RecordStatus::Held,
        "never released on uncertainty"
    );
    assert_eq!(rec.extensions, 3);
    assert_eq!(rec.deadline_ms, m.deadline_ms + 3 * 600_000);
    assert_eq!(
        s.alerts.kinds(),
        vec!["extensions_exhausted".to_string()],
        "alerted once"
    );
    assert_eq!(s.count().await, 1);
    assert_eq!(r.stats().released, 0);
    match s
        .ledger
        .hold(&s.sale, &cand("x"))
        .await
        .unwrap()
        .unwrap()
        .state
    {
        booking::HoldState::Held { deadline_ms, .. } => {
            assert_eq!(
                deadline_ms,
                m.deadline_ms + 3 * 600_000,
                "ledger extended too"
            )
        }
        other => panic!("{other:?}"),
    }
    // once the gateway answers again, the decision is made
    s.gateway
        .set(&pay("P1"), Script::State(GatewayPaymentState::Failed));
    assert_eq!(r.tick().await.released, 1);
    assert_eq!(s.count().await, 0);
}

#[tokio::test(start_paused = true)]
async fn only_the_lock_holder_sweeps() {
    let s = Stack::new(1, &["x"]).await;
    let m = s.book("x", "t1", "P1").await;
    s.records
        .put(m.held_record(), booking::Condition::NotExists)
        .await
        .unwrap();
    s.clock.advance(minutes(5));
    let (a, b) = (s.reconciler("a"), s.reconciler("b"));
    assert!(a.tick().await.leader);
    let rb = b.tick().await;
    assert!(!rb.leader);
    assert_eq!(rb.due, 0);
    assert!(a.tick().await.leader, "renewed");
    assert_eq!(s.gateway.queried.lock().len(), 2, "only a queried");
    // a dies: its lock outlives the longest sweep (2 × 20 s + the 45 s budget
    // + the 8 s query timeout = 93 s), then b takes over
    s.clock.advance(Duration::from_secs(92));
    assert!(
        !b.tick().await.leader,
        "a's lock still covers a sweep in progress"
    );
    s.clock.advance(Duration::from_secs(2));
    assert!(b.tick().await.leader);
    assert!(!a.tick().await.leader);
    assert_eq!((a.stats().not_leader, b.stats().not_leader), (1, 2));
}

#[tokio::test(start_paused = true)]
async fn the_most_overdue_go_first_eight_at_a_time_within_the_budget() {
    let names: Vec<String> = (0..100).map(|i| format!("c{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let s = Stack::new(100, &refs).await;
    // one booking a second, so deadlines are spread; shuffled write order
    let mut msgs = Vec::new();
    for (i, n) in names.iter().enumerate() {
        msgs.push(s.book(n, &format!("t{i}"), &format!("P{i}")).await);
        s.clock.advance(Duration::from_secs(1));
    }
    for m in msgs.iter().rev() {
        s.records
            .put(m.held_record(), booking::Condition::NotExists)
            .await
            .unwrap();
    }
    *s.gateway.delay.lock() = Duration::from_secs(7);
    s.clock.advance(minutes(15));
    let r = s.reconciler("a");
    let report = r.tick().await;
    assert_eq!(report.due, 100);
    // starts at 0, 7, 14, 21, 28, 35, 42 s (8 each); at 49 s the 45 s budget is spent
    assert_eq!(report.started, 56, "{report:?}");
    assert_eq!(report.released, 56);
    assert_eq!(r.stats().deferred, 44);
    assert_eq!(s.gateway.max_in_flight.load(Ordering::SeqCst), 8);
    let queried = s.gateway.queried.lock().clone();
    let expected: Vec<_> = (0..56).map(|i| pay(&format!("P{i}"))).collect();
    assert_eq!(queried, expected, "most overdue first");
    assert_eq!(s.count().await, 44);
}

#[tokio::test(start_paused = true)]
async fn stale_pending_admissions_are_undone() {
    let s = Stack::new(2, &["x", "y"]).await;
    let t = RequestToken::parse("dead").unwrap();
    s.ledger
        .admit(&s.sale, &cand("x"), &s.level, &t, s.now())
        .await
        .unwrap();
    s.clock.advance(Duration::from_secs(30));
    let t2 = RequestToken::parse("young").unwrap();
    s.ledger
        .admit(&s.sale, &cand("y"), &s.level, &t2, s.now())
        .await
        .unwrap();
    s.clock.advance(Duration::from_secs(31));
    let report = s.reconciler("a").tick().await;
    assert_eq!(report.pending_undone, 1);
    assert_eq!(s.count().await, 1);
    assert!(s.ledger.hold(&s.sale, &cand("x")).await.unwrap().is_none());
}

/// A one-seat sale whose seat was admitted to "x" by an instance that died
/// before its booking was queued (counted, no payment, no record), swept by
/// a reconciler with `bugs` every sweep interval until well past the stale
/// bound. Returns the sweeps' reports, the count after them and whether "y"
/// could then take the seat.
async fn dead_admission_swept_with(bugs: Bugs) -> (Vec<SweepReport>, u32, Admission) {
    let s = Stack::new(1, &["x", "y"]).await;
    let dead = RequestToken::parse("dead").unwrap();
    let admitted = s
        .ledger
        .admit(&s.sale, &cand("x"), &s.level, &dead, s.now())
        .await
        .unwrap();
    assert_eq!(admitted, Admission::Admitted { count: 1 });
    let r = s.reconciler_with(
        "a",
        Settings {
            bugs,
            ..s.settings.clone()
        },
    );
    let mut reports = Vec::new();
    // a whole hold's worth of sweeps: far past `pending_stale_after`
    let sweeps = s.settings.hold.as_secs() / s.settings.sweep_interval.as_secs();
    for _ in 0..sweeps {
        s.clock.advance(s.settings.sweep_interval);
        reports.push(r.tick().await);
    }
    assert_eq!(
        r.stats().pending_undone,
        reports.iter().map(|r| r.pending_undone).sum::<u64>()
    );
    let count = s.count().await;
    let y = RequestToken::parse("alive").unwrap();
    let again = s
        .ledger
        .admit(&s.sale, &cand("y"), &s.level, &y, s.now())
        .await
        .unwrap();
    (reports, count, again)
}

#[tokio::test(start_paused = true)]
async fn a_dead_admission_past_the_stale_bound_gives_its_seat_back() {
    let (reports, count, again) = dead_admission_swept_with(Bugs::none()).await;
    let undone: Vec<u64> = reports.iter().map(|r| r.pending_undone).collect();
    assert_eq!(undone.iter().sum::<u64>(), 1, "undone once: {undone:?}");
    assert!(reports.iter().all(|r| r.errors == 0), "{reports:?}");
    assert_eq!(count, 0, "the dead admission's seat is free again");
    assert_eq!(again, Admission::Admitted { count: 1 });
}

/// The zoo's `no_stale_pending_cleanup`: the sweep never undoes the dead
/// admission, so its seat stays counted and the sale stays full.
#[tokio::test(start_paused = true)]
async fn with_no_stale_pending_cleanup_a_dead_admission_stays_counted() {
    let (reports, count, again) =
        dead_admission_swept_with(Bugs::of([Bug::NoStalePendingCleanup])).await;
    assert!(reports.len() > 10, "{}", reports.len());
    assert!(
        reports.iter().all(|r| r.leader && r.pending_undone == 0),
        "{reports:?}"
    );
    assert_eq!(count, 1, "the dead admission keeps its seat");
    assert_eq!(again, Admission::LevelFull);
}

#[tokio::test(start_paused = true)]
async fn the_loop_stops_on_shutdown_and_gives_the_lock_up() {
    let s = Stack::new(1, &["x"]).await;
    let r = std::sync::Arc::new(s.reconciler("a"));
    let (tx, rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn({
        let r = r.clone();
        async move { r.run(rx).await }
    });
    tokio::time::sleep(Duration::from_secs(61)).await;
    tx.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
    assert!(r.stats().sweeps >= 3);
    assert!(s.reconciler("b").tick().await.leader, "lock given up");
}

#[tokio::test(start_paused = true)]
async fn query_failures_count_in_a_row_an_answer_starts_the_count_again() {
    let s = Stack::new(1, &["x"]).await;
    let m = s.book("x", "t1", "P1").await;
    s.records
        .put(m.held_record(), booking::Condition::NotExists)
        .await
        .unwrap();
    let r = s.reconciler("a");
    s.clock.advance(minutes(5)); // inside the window, before the deadline
    s.gateway.set(&pay("P1"), Script::Fail);
    for _ in 0..2 {
        assert_eq!(r.tick().await.query_failures, 1);
    }
    let rec = s.records.get(&cand("x"), true).await.unwrap().unwrap();
    assert_eq!(rec.query_failures, 2);
    // the gateway answers: the payer is still paying
    s.gateway
        .set(&pay("P1"), Script::State(GatewayPaymentState::Initiated));
    assert_eq!(r.tick().await.left, 1);
    let rec = s.records.get(&cand("x"), true).await.unwrap().unwrap();
    assert_eq!(rec.query_failures, 0, "an answer clears the count");
    // two more failures are two in a row, not four: no extension yet
    s.gateway.set(&pay("P1"), Script::Fail);
    for _ in 0..2 {
        let report = r.tick().await;
        assert_eq!((report.query_failures, report.extended), (1, 0));
    }
    let rec = s.records.get(&cand("x"), true).await.unwrap().unwrap();
    assert_eq!((rec.query_failures, rec.extensions), (2, 0));
    // the third in a row extends
    assert_eq!(r.tick().await.extended, 1);
}

/// A hold whose admission message was dead-lettered has no record: the
/// reconciler re-creates it once the message could no longer arrive, and the
/// gateway's answer decides it like any other.
#[tokio::test(start_paused = true)]
async fn a_held_hold_with_no_record_is_recovered_then_released_or_paid() {
    let s = Stack::new(2, &["x", "y"]).await;
    s.book("x", "t1", "P1").await; // no record: the message never arrived
    s.book("y", "t2", "P2").await;
    s.gateway.set(
        &pay("P2"),
        Script::State(GatewayPaymentState::Completed {
            trx_id: "TRX2".into(),
        }),
    );
    let r = s.reconciler("a");
    // past the deadline but within the slack: the message may still come
    s.clock.advance(minutes(11));
    let report = r.tick().await;
    assert_eq!((report.orphans_recovered, report.due), (0, 0), "{report:?}");
    assert!(s.records.get(&cand("x"), true).await.unwrap().is_none());
    // past the deadline and the slack: recovered and decided in this sweep
    s.clock.advance(minutes(2));
    let report = r.tick().await;
    assert_eq!(report.orphans_recovered, 2, "{report:?}");
    assert_eq!((report.released, report.paid), (1, 1), "{report:?}");
    assert_eq!(s.count().await, 1, "x's seat came back, y's is paid");
    assert!(s.ledger.hold(&s.sale, &cand("x")).await.unwrap().is_none());
    assert!(s.records.get(&cand("x"), true).await.unwrap().is_none());
    let y = s.records.get(&cand("y"), true).await.unwrap().unwrap();
    assert_eq!(y.status, RecordStatus::Paid);
    assert_eq!(y.expires_at_s, None);
    assert_eq!(s.mailer.0.lock().len(), 1, "one email for y");
    // nothing left to recover
    let report = r.tick().await;
    assert_eq!((report.orphans_recovered, report.due), (0, 0));
    assert_eq!(r.stats().orphans_recovered, 2);
}

/// What a chaos rehearsal found (a Redis link blackhole inside link trouble,
/// the reconciler behind its budget): a payer paid before the deadline, the
/// callback could not confirm (the backends did not answer), and the
/// reconciler fell behind. The TTL service deleted the HELD record; the
/// reconciler's orphan sweep, which found the hold without its record,
/// re-created the record; the safety net then released the seat on the
/// deletion (here: while the gateway query about the re-created record is
/// in flight; in the rehearsal a sweep later); the reconciler heard
/// "completed" and marked the re-created record PAID: a PAID booking with
/// no seat in the ledger ("record Paid, ledger None", the level's count
/// below its PAID records). The confirm step asks the ledger whose seat it
/// is before it claims the record now: the seat is not held, nothing goes
/// PAID, a human is alerted for the refund, and the record is deleted like
/// any released one.
#[tokio::test(start_paused = true)]
async fn a_record_recreated_for_a_hold_the_safety_net_releases_is_never_marked_paid() {
    use booking::Condition;
    use booking_service::expiry::ExpiryHandler;

    let s = Stack::new(1, &["x", "y"]).await;
    let m = s.book("x", "t1", "P1").await;
    s.records
        .put(m.held_record(), Condition::NotExists)
        .await
        .unwrap();
    // paid before the deadline; no confirm path got through
    s.gateway.set(
        &pay("P1"),
        Script::State(GatewayPaymentState::Completed {
            trx_id: "TRX1".into(),
        }),
    );
    let expiry = ExpiryHandler::new(s.records.clone(), s.ledger.clone(), 0);
    // the reconciler lags: the TTL service deletes the HELD record first
    s.clock.advance(minutes(13));
    assert_eq!(s.records.sweep_ttl(10).len(), 1);
    // a sweep: the orphan step finds the hold without its record and
    // re-creates it, and the gateway is asked about it (slowly) ...
    *s.gateway.delay.lock() = Duration::from_secs(1);
    let r = s.reconciler("a");
    let sweep = tokio::spawn(async move { r.sweep().await });
    while !s.gateway.queried.lock().contains(&pay("P1")) {
        tokio::task::yield_now().await;
    }
    // ... while the safety net acts on the deletion: the seat goes back
    let batch = expiry.poll_once(Duration::ZERO).await.unwrap();
    assert_eq!(batch.failed_at, None);
    assert_eq!(expiry.stats().released, 1);
    assert_eq!(s.count().await, 0);
    // the gateway answers "completed"
    let report = sweep.await.unwrap();
    assert_eq!(report.orphans_recovered, 1, "{report:?}");
    assert_eq!((report.paid, report.released), (0, 1), "{report:?}");
    // the ledger's paid marks are exactly the PAID records, and the count
    // is the holds plus the paid
    let record = s.records.get(&cand("x"), true).await.unwrap();
    assert!(
        record.is_none(),
        "a PAID record without a seat, or a HELD one left: {record:?}"
    );
    assert_eq!(s.ledger.paid(&s.sale, &cand("x")).await.unwrap(), None);
    assert_eq!(s.ledger.hold(&s.sale, &cand("x")).await.unwrap(), None);
    assert_eq!(s.count().await, 0);
    assert!(s.mailer.0.lock().is_empty(), "no confirmation for no seat");
    assert_eq!(s.alerts.kinds(), vec!["paid_after_release".to_string()]);
    // the seat is free for the next candidate, and nothing is left to do
    s.book("y", "t2", "P2").await;
    assert_eq!(s.count().await, 1);
    let report = s.reconciler("a").sweep().await;
    assert_eq!((report.orphans_recovered, report.due), (0, 0), "{report:?}");
}

/// The headline chaos rehearsal (instance-1 killed holding execute locks,
/// Redis paused, a slow gateway link): seven completed payments ended with
/// no PAID booking. The leader's sweep listed a due HELD record, queried the
/// gateway (slow), and while the query was out the TTL service deleted the
/// record (its TTL is the deadline). The gateway said "completed", and the
/// HELD→PAID update found no record: "HELD→PAID refused: no HELD record
/// with this payment … path=Reconciler", and the sweep left it. The safety
/// net then released the seat on the TTL deletion ("TTL deletion of a HELD
/// record: seat released by the safety net", 130 ms later): money taken, no
/// booking. The reconciler had the record it was deciding on in hand and the
/// ledger still held the seat for this payment: it now marks the ledger paid
/// first and writes the PAID record from what it read, so the net's release
/// finds the seat paid.
#[tokio::test(start_paused = true)]
async fn a_completed_payment_whose_record_the_ttl_deletes_under_the_query_is_paid() {
    use booking::Condition;
    use booking_service::expiry::ExpiryHandler;

    let s = Stack::new(1, &["x"]).await;
    let m = s.book("x", "t1", "P1").await;
    s.records
        .put(m.held_record(), Condition::NotExists)
        .await
        .unwrap();
    // paid before the deadline; the callback's execute holder died
    s.gateway.set(
        &pay("P1"),
        Script::State(GatewayPaymentState::Completed {
            trx_id: "TRX1".into(),
        }),
    );
    let expiry = ExpiryHandler::new(s.records.clone(), s.ledger.clone(), 0);
    // the reconciler lags past the deadline; its sweep lists the record
    // and asks the gateway, slowly ...
    s.clock.advance(minutes(11));
    *s.gateway.delay.lock() = Duration::from_secs(1);
    let r = s.reconciler("a");
    let sweep = tokio::spawn(async move { r.sweep().await });
    while !s.gateway.queried.lock().contains(&pay("P1")) {
        tokio::task::yield_now().await;
    }
    // ... while the TTL service deletes the HELD record
    assert_eq!(s.records.sweep_ttl(10).len(), 1);
    // the gateway answers "completed"
    let report = sweep.await.unwrap();
    assert_eq!((report.due, report.released), (1, 0), "{report:?}");
    // then the safety net acts on the deletion: the seat must stay paid
    let batch = expiry.poll_once(Duration::ZERO).await.unwrap();
    assert_eq!(batch.failed_at, None);
    assert_eq!(expiry.stats().released, 0, "the net released a paid seat");
    assert_eq!(s.count().await, 1, "a paid seat stays counted");
    assert_eq!(
        s.ledger.paid(&s.sale, &cand("x")).await.unwrap(),
        Some(pay("P1"))
    );
    let record = s.records.get(&cand("x"), true).await.unwrap();
    let record = record.expect("a completed payment has its PAID record");
    assert_eq!(record.status, RecordStatus::Paid);
    assert_eq!(record.payment_id, pay("P1"));
    assert_eq!(record.expires_at_s, None);
    assert_eq!(report.paid, 1, "{report:?}");
    let mails = s.mailer.0.lock().clone();
    assert_eq!(mails.len(), 1, "one confirmation");
    assert!(s.alerts.kinds().is_empty(), "{:?}", s.alerts.kinds());
    // nothing is left to do
    let report = s.reconciler("a").sweep().await;
    assert_eq!((report.orphans_recovered, report.due), (0, 0), "{report:?}");
}

/// The same rehearsal's ledger/records mismatch (ledger 3572 paid, records
/// 3571): a callback wrote the ledger's paid mark from the booking copy and
/// its instance was killed before the PAID record; the worker's HELD record
/// then lost to the TTL service under the reconciler's query. The
/// reconciler's HELD→PAID found no record and left it: a seat paid in the
/// ledger with no record, forever. It is written PAID now.
#[tokio::test(start_paused = true)]
async fn a_ledger_paid_hold_whose_record_the_ttl_deletes_under_the_query_gets_its_record() {
    use booking::Condition;

    let s = Stack::new(1, &["x"]).await;
    let m = s.book("x", "t1", "P1").await;
    s.records
        .put(m.held_record(), Condition::NotExists)
        .await
        .unwrap();
    s.gateway.set(
        &pay("P1"),
        Script::State(GatewayPaymentState::Completed {
            trx_id: "TRX1".into(),
        }),
    );
    // the dead callback's step 1 of the PAID-from-copy write
    assert_eq!(
        s.ledger
            .mark_paid(&s.sale, &cand("x"), &pay("P1"))
            .await
            .unwrap(),
        booking::Step::Done
    );
    s.clock.advance(minutes(11));
    *s.gateway.delay.lock() = Duration::from_secs(1);
    let r = s.reconciler("a");
    let sweep = tokio::spawn(async move { r.sweep().await });
    while !s.gateway.queried.lock().contains(&pay("P1")) {
        tokio::task::yield_now().await;
    }
    assert_eq!(s.records.sweep_ttl(10).len(), 1);
    let report = sweep.await.unwrap();
    assert_eq!(report.paid, 1, "{report:?}");
    let record = s.records.get(&cand("x"), true).await.unwrap();
    let record = record.expect("the ledger's paid seat has its PAID record");
    assert_eq!(
        (record.status, record.payment_id),
        (RecordStatus::Paid, pay("P1"))
    );
    assert_eq!(s.mailer.0.lock().len(), 1);
    assert_eq!(s.count().await, 1);
}

/// The same rehearsal, one step earlier: after the blackhole the leader's
/// sweeps logged "sweep budget spent" with every due record deferred, sweep
/// after sweep, for eleven seconds, while the TTL service deleted the
/// overdue records and the safety net released their seats (completed
/// payments among them). The orphan step ran before the due records, inside
/// their budget, and read the record of every held hold past its deadline
/// one by one: a backlog of overdue holds (each with its record) made that
/// step outlast the budget, so no due record was started, so the backlog
/// grew. The orphan step now skips the holds whose HELD records the due
/// query already returned and stops at half the budget: the most overdue
/// records are decided in every sweep.
#[tokio::test(start_paused = true)]
async fn a_backlog_of_overdue_holds_does_not_starve_the_due_records() {
    use std::sync::Arc;

    use booking::Condition;
    use booking_service::reconciler::{Reconciler, ReconcilerConfig, ReconcilerPorts};
    use faults::{Injector, Schedule, wrappers::FaultyRecords};

    const BACKLOG: usize = 12;
    let names: Vec<String> = (0..BACKLOG).map(|i| format!("c{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let s = Stack::new(BACKLOG as u32, &refs).await;
    for (i, name) in names.iter().enumerate() {
        let m = s.book(name, &format!("t{i}"), &format!("P{i}")).await;
        s.records
            .put(m.held_record(), Condition::NotExists)
            .await
            .unwrap();
    }
    // every hold is past its deadline and the copy's slack; no payer paid
    s.clock.advance(minutes(13));
    // each record read takes 100 ms (a loaded store); the budget is 500 ms
    let schedule = Schedule::from_toml(
        r#"
        [[fault]]
        name = "records-get-slow"
        target = "records"
        ops = ["get"]
        start_ms = 0
        duration_ms = 3_600_000
        kind = { type = "latency", delay = { fixed = { ms = 100 } } }
        "#,
    )
    .unwrap();
    let injector = Arc::new(Injector::new(schedule, 7, Arc::new(s.clock.clone())));
    let records = Arc::new(FaultyRecords::new(
        s.records.clone(),
        s.records.clone(),
        injector,
    ));
    let settings = Settings {
        sweep_budget: Duration::from_millis(500),
        ..s.settings.clone()
    };
    let r = Reconciler::new(
        ReconcilerPorts {
            records,
            ledger: s.ledger.clone(),
            gateway: s.gateway.clone(),
            coordination: s.coordination.clone(),
            mailer: s.mailer.clone(),
            alerts: s.alerts.clone(),
            clock: Arc::new(s.clock.clone()),
        },
        ReconcilerConfig::new(s.sale.clone(), "test", "a", settings),
    );
    let report = r.sweep().await;
    assert_eq!(report.due, BACKLOG as u64, "{report:?}");
    assert_eq!(
        report.released, BACKLOG as u64,
        "every overdue hold decided in the first sweep: {report:?}"
    );
    assert_eq!(r.stats().deferred, 0);
    assert_eq!(s.count().await, 0);
}

/// A hold with a record is never re-created, even far past its deadline
/// while the gateway is silent (the record's own path extends it).
#[tokio::test(start_paused = true)]
async fn a_held_hold_with_a_record_is_not_recovered() {
    let s = Stack::new(1, &["x"]).await;
    let m = s.book("x", "t1", "P1").await;
    s.records
        .put(m.held_record(), booking::Condition::NotExists)
        .await
        .unwrap();
    s.gateway.set(&pay("P1"), Script::Fail);
    let r = s.reconciler("a");
    s.clock.advance(minutes(15));
    let report = r.tick().await;
    assert_eq!((report.orphans_recovered, report.query_failures), (0, 1));
}

#[tokio::test(start_paused = true)]
async fn an_email_owed_by_a_winner_that_died_is_sent_once_a_sweep_interval_later() {
    let s = Stack::new(1, &["x"]).await;
    let m = s.book("x", "t1", "P1").await;
    s.records
        .put(m.held_record(), booking::Condition::NotExists)
        .await
        .unwrap();
    // the winner's HELD→PAID update landed; it died before its email
    s.records
        .mark_paid(
            &cand("x"),
            &pay("P1"),
            booking::records::ConfirmPath::Callback,
            s.now(),
        )
        .await
        .unwrap();
    let r = s.reconciler("a");
    // a winner still sending is given a sweep interval
    let report = r.tick().await;
    assert_eq!(report.emails_recovered, 0, "{report:?}");
    assert!(s.mailer.0.lock().is_empty());
    s.clock
        .advance(s.settings.sweep_interval + Duration::from_secs(1));
    let report = r.tick().await;
    assert_eq!(report.emails_recovered, 1, "{report:?}");
    {
        let sent = s.mailer.0.lock();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].payment_id, pay("P1"));
        assert!(sent[0].recovered, "the sweep's send is marked recovered");
    }
    let record = s.records.get(&cand("x"), true).await.unwrap().unwrap();
    assert_eq!(record.status, RecordStatus::Paid);
    assert!(record.email_sent, "marked sent after the send");
    // owed no more: the next sweeps send nothing
    s.clock.advance(s.settings.sweep_interval * 2);
    assert_eq!(r.tick().await.emails_recovered, 0);
    assert_eq!(s.mailer.0.lock().len(), 1);
    assert_eq!(r.stats().emails_recovered, 1);
}

/// A leader that is stopped gives its lock up on the way out (an
/// owner-checked release), so another instance leads at its next sweep,
/// not a lock TTL (93 s here) later; an instance that does not hold the
/// lock leaves the holder's alone when it stops.
#[tokio::test(start_paused = true)]
async fn a_stopped_leaders_lock_is_free_right_after_the_stop() {
    use booking::Coordination;
    let s = Stack::new(1, &["x"]).await;
    let key = booking::coordination::keys::reconciler_lock("test", &s.sale);
    let a = std::sync::Arc::new(s.reconciler("a"));
    let (tx, rx) = tokio::sync::watch::channel(false);
    let running = tokio::spawn({
        let a = a.clone();
        async move { a.run(rx).await }
    });
    // the first tick is at once
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        s.coordination.get(&key).await.unwrap().as_deref(),
        Some("a"),
        "a leads"
    );
    let b = s.reconciler("b");
    assert!(!b.tick().await.leader, "not while a leads");
    tx.send(true).unwrap();
    running.await.unwrap();
    assert_eq!(s.coordination.get(&key).await.unwrap(), None, "released");
    // no time has passed: b takes over at once
    assert!(b.tick().await.leader);

    // a non-leader's stop does not release the leader's lock
    let c = std::sync::Arc::new(s.reconciler("c"));
    let (tx, rx) = tokio::sync::watch::channel(false);
    let running = tokio::spawn({
        let c = c.clone();
        async move { c.run(rx).await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    tx.send(true).unwrap();
    running.await.unwrap();
    assert_eq!(c.stats().not_leader, 1);
    assert_eq!(
        s.coordination.get(&key).await.unwrap().as_deref(),
        Some("b"),
        "b still leads"
    );
}
