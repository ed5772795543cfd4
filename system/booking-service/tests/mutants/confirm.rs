//! Issue 19: `MarkPaidOutcome::won` must tell the winner of the HELD→PAID
//! race from the loser (mutants `won → true` / `won → false`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::atomic::{AtomicU64, Ordering};

use booking::records::{Condition, ConfirmPath, RecordStatus, RecordStore};
use booking_service::confirm::{
    ConfirmEvents, Confirmed, MarkPaidOutcome, PaidRequest, confirm_payment, mark_paid,
};
use common::{Stack, cand, pay};

fn request(s: &Stack, path: ConfirmPath) -> PaidRequest {
    PaidRequest {
        sale: s.sale.clone(),
        candidate: cand("x"),
        payment_id: pay("P1"),
        trx_id: Some("TRX".into()),
        path,
        now_ms: s.now(),
    }
}

async fn held_stack() -> Stack {
    let s = Stack::new(1, &["x"]).await;
    let m = s.book("x", "t1", "P1").await;
    s.records
        .put(m.held_record(), Condition::NotExists)
        .await
        .unwrap();
    s
}

#[tokio::test]
async fn of_two_racing_confirm_paths_exactly_one_won_and_only_it_emailed() {
    let s = held_stack().await;
    let (cb, wh) = (
        request(&s, ConfirmPath::Callback),
        request(&s, ConfirmPath::Webhook),
    );
    let (a, b) = tokio::join!(
        mark_paid(s.confirm_ports(), &cb),
        mark_paid(s.confirm_ports(), &wh)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(
        [a.won(), b.won()].iter().filter(|w| **w).count(),
        1,
        "exactly one winner: {a:?} / {b:?}"
    );
    let (winner, loser, winner_path) = if a.won() {
        (&a, &b, ConfirmPath::Callback)
    } else {
        (&b, &a, ConfirmPath::Webhook)
    };
    assert!(matches!(winner, MarkPaidOutcome::Won { .. }), "{winner:?}");
    assert!(
        matches!(loser, MarkPaidOutcome::AlreadyPaid { .. }),
        "{loser:?}"
    );
    assert!(!loser.won());
    // the winner is the path the record names, and the only email
    let record = s.records.get(&cand("x"), true).await.unwrap().unwrap();
    assert_eq!(record.status, RecordStatus::Paid);
    assert_eq!(record.paid_by, Some(winner_path));
    assert_eq!(winner.winner(), Some(winner_path));
    assert_eq!(loser.winner(), Some(winner_path));
    assert_eq!(s.mailer.0.lock().len(), 1, "one email, the winner's");

    // a third, late path loses too and sends nothing
    let late = mark_paid(s.confirm_ports(), &request(&s, ConfirmPath::Reconciler))
        .await
        .unwrap();
    assert!(!late.won(), "{late:?}");
    assert_eq!(s.mailer.0.lock().len(), 1);
}

#[tokio::test]
async fn a_lone_path_on_a_held_record_won_and_a_path_on_no_record_did_not() {
    let s = held_stack().await;
    let first = mark_paid(s.confirm_ports(), &request(&s, ConfirmPath::Webhook))
        .await
        .unwrap();
    assert!(first.won(), "{first:?}");
    // no record for this candidate at all: not held, not won
    let none = PaidRequest {
        candidate: cand("nobody"),
        payment_id: pay("P9"),
        ..request(&s, ConfirmPath::Callback)
    };
    let out = mark_paid(s.confirm_ports(), &none).await.unwrap();
    assert!(matches!(out, MarkPaidOutcome::NotHeld { .. }), "{out:?}");
    assert!(!out.won());
    assert_eq!(s.mailer.0.lock().len(), 1);
}

#[derive(Default)]
struct PaidCount(AtomicU64);

impl ConfirmEvents for PaidCount {
    fn paid(&self, _: ConfirmPath, _: &'static str) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// The callback and the webhook race through `confirm_payment`: one paid
/// count, one email, and `Confirmed::Paid { won }` agrees with the outcome.
#[tokio::test]
async fn racing_callback_and_webhook_count_one_payment_and_send_one_email() {
    let s = held_stack().await;
    let events = PaidCount::default();
    let (cb, wh) = (
        request(&s, ConfirmPath::Callback),
        request(&s, ConfirmPath::Webhook),
    );
    let (a, b) = tokio::join!(
        confirm_payment(s.confirm_ports(), &events, &cb, None),
        confirm_payment(s.confirm_ports(), &events, &wh, None)
    );
    let mut outcomes = vec![a, b];
    outcomes.sort_by_key(|c| format!("{c:?}"));
    assert_eq!(
        outcomes,
        vec![
            Confirmed::Paid { won: false },
            Confirmed::Paid { won: true }
        ]
    );
    assert_eq!(events.0.load(Ordering::SeqCst), 1, "one paid count");
    assert_eq!(s.mailer.0.lock().len(), 1, "one email");
    // a loser's outcome, asked directly, says it lost
    let again = mark_paid(s.confirm_ports(), &cb).await.unwrap();
    assert!(!again.won());
}
