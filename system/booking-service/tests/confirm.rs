#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use booking::Ledger;
use booking::records::{Condition, ConfirmPath, RecordStatus, RecordStore};
use booking_service::confirm::{EmailOutcome, LedgerMark, MarkPaidOutcome, PaidRequest, mark_paid};
use common::{Stack, cand, pay};

fn request(s: &Stack, who: &str, p: &str, path: ConfirmPath) -> PaidRequest {
    PaidRequest {
        sale: s.sale.clone(),
        candidate: cand(who),
        payment_id: pay(p),
        trx_id: Some("TRX".into()),
        path,
        now_ms: s.now(),
    }
}

#[tokio::test]
async fn one_path_wins_and_only_it_sends_the_email() {
    let s = Stack::new(1, &["x"]).await;
    let m = s.book("x", "t1", "P1").await;
    s.records
        .put(m.held_record(), Condition::NotExists)
        .await
        .unwrap();
    let won = mark_paid(
        s.confirm_ports(),
        &request(&s, "x", "P1", ConfirmPath::Callback),
    )
    .await
    .unwrap();
    match &won {
        MarkPaidOutcome::Won {
            record,
            ledger,
            email,
        } => {
            assert_eq!(record.status, RecordStatus::Paid);
            assert_eq!(record.expires_at_s, None);
            assert_eq!(*ledger, LedgerMark::Done);
            assert_eq!(*email, EmailOutcome::Sent);
        }
        other => panic!("{other:?}"),
    }
    for path in [
        ConfirmPath::Webhook,
        ConfirmPath::Reconciler,
        ConfirmPath::Callback,
    ] {
        let again = mark_paid(s.confirm_ports(), &request(&s, "x", "P1", path))
            .await
            .unwrap();
        assert!(matches!(
            again,
            MarkPaidOutcome::AlreadyPaid {
                ledger: LedgerMark::AlreadyPaid,
                ..
            }
        ));
        assert_eq!(again.winner(), Some(ConfirmPath::Callback));
    }
    assert_eq!(s.mailer.0.lock().len(), 1);
    assert!(
        s.records
            .get(&cand("x"), true)
            .await
            .unwrap()
            .unwrap()
            .email_sent
    );
    assert_eq!(
        s.ledger.paid(&s.sale, &cand("x")).await.unwrap(),
        Some(pay("P1"))
    );
}

#[tokio::test]
async fn another_payment_or_no_record_changes_nothing() {
    let s = Stack::new(1, &["x"]).await;
    let out = mark_paid(
        s.confirm_ports(),
        &request(&s, "x", "P1", ConfirmPath::Webhook),
    )
    .await
    .unwrap();
    assert_eq!(out, MarkPaidOutcome::NotHeld { current: None });
    let m = s.book("x", "t1", "P1").await;
    s.records
        .put(m.held_record(), Condition::NotExists)
        .await
        .unwrap();
    let out = mark_paid(
        s.confirm_ports(),
        &request(&s, "x", "P9", ConfirmPath::Webhook),
    )
    .await
    .unwrap();
    assert!(matches!(out, MarkPaidOutcome::NotHeld { current: Some(_) }));
    assert!(s.mailer.0.lock().is_empty());
    assert_eq!(
        s.records
            .get(&cand("x"), true)
            .await
            .unwrap()
            .unwrap()
            .status,
        RecordStatus::Held
    );
}

/// A HELD record does not prove that the ledger still holds its seat: the
/// reconciler releases the ledger before it deletes the record, and its
/// orphan sweep can re-create the record of a hold the safety net is
/// releasing. A payment that completes for such a record is alerted, and no
/// record goes PAID for a seat the ledger does not count (before the ledger
/// went first, the record went PAID with no seat behind it: "record Paid,
/// ledger None" in the audit).
#[tokio::test]
async fn a_payment_for_a_released_seat_is_alerted_and_never_marked_paid() {
    let s = Stack::new(1, &["x", "y"]).await;
    let m = s.book("x", "t1", "P1").await;
    s.records
        .put(m.held_record(), Condition::NotExists)
        .await
        .unwrap();
    // the reconciler released the ledger and has not deleted the record yet
    s.ledger
        .release(&s.sale, &cand("x"), &pay("P1"))
        .await
        .unwrap();
    // and the seat went to someone else
    s.book("y", "t2", "P2").await;
    for path in [ConfirmPath::Callback, ConfirmPath::Reconciler] {
        let out = mark_paid(s.confirm_ports(), &request(&s, "x", "P1", path))
            .await
            .unwrap();
        assert_eq!(out, MarkPaidOutcome::SeatNotHeld, "{path:?}");
    }
    let record = s.records.get(&cand("x"), true).await.unwrap().unwrap();
    assert_eq!(
        record.status,
        RecordStatus::Held,
        "never PAID without a seat"
    );
    assert_eq!(s.ledger.paid(&s.sale, &cand("x")).await.unwrap(), None);
    assert_eq!(s.count().await, 1, "one seat, counted once: y's hold");
    assert!(s.mailer.0.lock().is_empty());
    assert_eq!(
        s.alerts.kinds(),
        vec!["paid_after_release".to_string(); 2],
        "money moved for a released seat: a human refunds it"
    );
}

/// A ledger whose mark fails after the record went PAID (a PAID record
/// carries no TTL, so the blind safety net cannot release a completed
/// payment's seat): the seat stays counted as held, and the reconciler's
/// orphan sweep marks it paid in the ledger once the hold is past its
/// deadline (before, nothing did unless another confirm path came: the
/// ledger showed the seat held for good).
#[tokio::test]
async fn a_failed_ledger_step_is_repaired_by_the_orphan_sweep() {
    use std::sync::Arc;
    use std::time::Duration;

    use booking::records::Condition as C;
    use faults::{Injector, Schedule, wrappers::FaultyLedger};

    for kind in ["error", "reset"] {
        let s = Stack::new(1, &["x"]).await;
        let m = s.book("x", "t1", "P1").await;
        s.records.put(m.held_record(), C::NotExists).await.unwrap();
        // the ledger's mark_paid fails for a second: every attempt of the
        // callback's confirm step (a `reset` applies some, answers none)
        let schedule = Schedule::from_toml(&format!(
            r#"
            [[fault]]
            name = "ledger-mark-paid-{kind}"
            target = "ledger"
            ops = ["mark_paid"]
            start_ms = 0
            duration_ms = 1_000
            kind = {{ type = "{kind}" }}
            "#
        ))
        .unwrap();
        let injector = Arc::new(Injector::new(schedule, 7, Arc::new(s.clock.clone())));
        let faulty = FaultyLedger::new(s.ledger.clone(), injector);
        let ports = booking_service::confirm::ConfirmPorts {
            ledger: &faulty,
            ..s.confirm_ports()
        };
        let out = mark_paid(ports, &request(&s, "x", "P1", ConfirmPath::Callback))
            .await
            .unwrap();
        assert!(
            matches!(
                &out,
                MarkPaidOutcome::Won {
                    ledger: LedgerMark::Failed(_),
                    email: EmailOutcome::Sent,
                    ..
                }
            ),
            "{kind}: {out:?}"
        );
        let record = s.records.get(&cand("x"), true).await.unwrap().unwrap();
        assert_eq!(record.status, RecordStatus::Paid);
        assert_eq!(s.count().await, 1, "{kind}: the seat stays counted");
        // past the deadline and the copy's slack, the orphan sweep repairs
        s.clock
            .advance(s.settings.hold + s.settings.booking_copy_slack + Duration::from_secs(1));
        s.reconciler("r").sweep().await;
        assert_eq!(
            s.ledger.paid(&s.sale, &cand("x")).await.unwrap(),
            Some(pay("P1")),
            "{kind}: the ledger's paid marks are the PAID records"
        );
        assert_eq!(s.ledger.hold(&s.sale, &cand("x")).await.unwrap(), None);
        assert_eq!(s.count().await, 1);
        assert_eq!(s.mailer.0.lock().len(), 1, "{kind}: one email");
        assert!(
            s.alerts.kinds().is_empty(),
            "{kind}: {:?}",
            s.alerts.kinds()
        );
    }
}

/// The zoo's trap `email_before_paid`: the email goes before the update, so
/// every path that reaches the step sends one, winner or not.
#[tokio::test]
async fn the_email_before_paid_trap_sends_one_per_path() {
    for (bugs, emails) in [
        (booking::Bugs::none(), 1),
        (booking::Bugs::of([booking::Bug::EmailBeforePaid]), 2),
    ] {
        let mut s = Stack::new(1, &["x"]).await;
        s.settings.bugs = bugs.clone();
        let m = s.book("x", "t1", "P1").await;
        s.records
            .put(m.held_record(), Condition::NotExists)
            .await
            .unwrap();
        for path in [ConfirmPath::Callback, ConfirmPath::Webhook] {
            mark_paid(s.confirm_ports(), &request(&s, "x", "P1", path))
                .await
                .unwrap();
        }
        assert_eq!(s.mailer.0.lock().len(), emails, "{bugs:?}");
        let rec = s.records.get(&cand("x"), true).await.unwrap().unwrap();
        assert_eq!(rec.status, RecordStatus::Paid);
    }
}

/// What the confirm step told its harness.
#[derive(Default)]
struct Heard(parking_lot::Mutex<Vec<String>>);

impl booking_service::confirm::ConfirmEvents for Heard {
    fn paid(&self, path: ConfirmPath, source: &'static str) {
        self.0.lock().push(format!("paid {path:?} {source}"));
    }
    fn not_held(&self, payment: &booking::PaymentId, current: Option<&booking::BookingRecord>) {
        self.0
            .lock()
            .push(format!("not_held {payment} {}", current.is_some()));
    }
}

#[tokio::test]
async fn a_fast_payer_is_paid_from_the_copy_once_and_a_released_seat_is_not() {
    use booking_service::confirm::{Confirmed, confirm_payment};
    let s = Stack::new(2, &["x", "y"]).await;
    // no HELD record yet: the worker has not got to the message
    let copy = s.book("x", "t1", "P1").await;
    let heard = Heard::default();
    let req = request(&s, "x", "P1", ConfirmPath::Callback);
    let first = confirm_payment(s.confirm_ports(), &heard, &req, Some(&copy)).await;
    assert_eq!(first, Confirmed::Paid { won: true });
    let again = confirm_payment(s.confirm_ports(), &heard, &req, Some(&copy)).await;
    assert_eq!(again, Confirmed::Paid { won: false });
    assert_eq!(
        *heard.0.lock(),
        ["not_held P1 false", "paid Callback copy"],
        "the second call finds the PAID record: nothing more"
    );
    let record = s.records.get(&cand("x"), true).await.unwrap().unwrap();
    assert_eq!(record.status, RecordStatus::Paid);
    assert_eq!(record.expires_at_s, None);
    assert_eq!(s.mailer.0.lock().len(), 1);
    assert_eq!(
        s.ledger.paid(&s.sale, &cand("x")).await.unwrap(),
        Some(pay("P1"))
    );
    // without the copy nothing can be written: the reconciler's
    let orphan = s.book("y", "t2", "P2").await;
    let req = request(&s, "y", "P2", ConfirmPath::Webhook);
    let none = confirm_payment(s.confirm_ports(), &Heard::default(), &req, None).await;
    assert_eq!(none, Confirmed::Uncertain);
    assert_eq!(s.records.get(&cand("y"), true).await.unwrap(), None);
    // released meanwhile: the ledger no longer holds it, nothing is written
    // and a human is alerted
    s.ledger
        .release(&s.sale, &cand("y"), &pay("P2"))
        .await
        .unwrap();
    let late = confirm_payment(s.confirm_ports(), &Heard::default(), &req, Some(&orphan)).await;
    assert_eq!(late, Confirmed::NotOurs);
    assert_eq!(s.records.get(&cand("y"), true).await.unwrap(), None);
    assert!(s.alerts.kinds().contains(&"paid_after_release".to_owned()));
    assert_eq!(s.mailer.0.lock().len(), 1);
}
