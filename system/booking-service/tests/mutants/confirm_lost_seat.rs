//! Issue 19: what the confirm step answers when the ledger and the records
//! disagree about a paid booking (mutants of `mark_paid`'s and
//! `mark_paid_from_copy`'s "already paid?" checks). A booking PAID with this
//! payment is already paid whatever the ledger lost; a booking PAID with
//! another payment is not this payment's, and nothing is written or sent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use booking::ledger::Ledger;
use booking::records::{Condition, ConfirmPath, RecordStatus, RecordStore};
use booking_service::confirm::{
    FromCopy, MarkPaidOutcome, PaidRequest, mark_paid, mark_paid_from_copy,
};
use common::{Stack, cand, pay};

fn request(s: &Stack, payment: &str) -> PaidRequest {
    PaidRequest {
        sale: s.sale.clone(),
        candidate: cand("x"),
        payment_id: pay(payment),
        trx_id: Some("TRX".into()),
        path: ConfirmPath::Webhook,
        now_ms: s.now(),
    }
}

/// x booked with P1, its record PAID with `record_payment`, and the ledger's
/// hold of P1 released behind the record's back.
async fn paid_record_lost_seat(record_payment: &str) -> Stack {
    let s = Stack::new(2, &["x"]).await;
    let m = s.book("x", "t1", "P1").await;
    let mut paid = m.held_record().into_paid(ConfirmPath::Callback, s.now());
    paid.payment_id = pay(record_payment);
    s.records.put(paid, Condition::NotExists).await.unwrap();
    s.ledger
        .release(&s.sale, &cand("x"), &pay("P1"))
        .await
        .unwrap();
    s
}

#[tokio::test]
async fn a_paid_booking_whose_seat_the_ledger_lost_is_already_paid_for_its_payment() {
    let s = paid_record_lost_seat("P1").await;
    let out = mark_paid(s.confirm_ports(), &request(&s, "P1"))
        .await
        .unwrap();
    match &out {
        MarkPaidOutcome::AlreadyPaid { record, .. } => {
            assert_eq!(record.status, RecordStatus::Paid);
            assert_eq!(record.payment_id, pay("P1"));
        }
        other => panic!("a PAID booking told otherwise: {other:?}"),
    }
    assert!(!out.won());
    assert!(s.mailer.0.lock().is_empty(), "nothing sent again");
}

#[tokio::test]
async fn a_booking_paid_with_another_payment_is_not_this_payments() {
    let s = paid_record_lost_seat("P2").await;
    let out = mark_paid(s.confirm_ports(), &request(&s, "P1"))
        .await
        .unwrap();
    match &out {
        MarkPaidOutcome::NotHeld { current: Some(r) } => assert_eq!(r.payment_id, pay("P2")),
        other => panic!("P1 claimed a booking paid with P2: {other:?}"),
    }
    let record = s.records.get(&cand("x"), true).await.unwrap().unwrap();
    assert_eq!(
        (record.status, record.payment_id),
        (RecordStatus::Paid, pay("P2"))
    );
    assert!(s.mailer.0.lock().is_empty());
}

/// The fast payer's path (no HELD record when the payment completes): a
/// PAID record already there answers AlreadyPaid for its own payment and
/// NotOurs for another one; neither writes or sends anything.
#[tokio::test]
async fn the_copy_path_finds_a_paid_record_its_own_or_not_ours() {
    for (record_payment, ours) in [("P1", true), ("P2", false)] {
        let s = Stack::new(2, &["x"]).await;
        let copy = s.book("x", "t1", "P1").await;
        let mut paid = copy.held_record().into_paid(ConfirmPath::Callback, s.now());
        paid.payment_id = pay(record_payment);
        s.records
            .put(paid.clone(), Condition::NotExists)
            .await
            .unwrap();
        let out = mark_paid_from_copy(
            s.confirm_ports(),
            &copy,
            Some("TRX".into()),
            ConfirmPath::Webhook,
            s.now(),
        )
        .await;
        match (&out, ours) {
            (FromCopy::AlreadyPaid { record }, true) => assert_eq!(record, &paid),
            (FromCopy::NotOurs { current: Some(r) }, false) => assert_eq!(r, &paid),
            (other, _) => panic!("record paid with {record_payment}: {other:?}"),
        }
        assert_eq!(s.records.get(&cand("x"), true).await.unwrap(), Some(paid));
        assert!(s.mailer.0.lock().is_empty());
    }
}
