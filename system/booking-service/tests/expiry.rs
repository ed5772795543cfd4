#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use booking::Ledger;
use booking::records::{Condition, ConfirmPath, RecordStatus, RecordStore};
use booking_service::expiry::ExpiryHandler;
use common::{Stack, cand, pay};

const WAIT: Duration = Duration::from_millis(10);

#[tokio::test(start_paused = true)]
async fn a_ttl_deletion_of_a_held_record_gives_the_seat_back_once() {
    let s = Stack::new(3, &["x", "y", "z"]).await;
    // x: HELD, deleted by TTL → released
    let x = s.book("x", "t1", "P1").await;
    s.records
        .put(x.held_record(), Condition::NotExists)
        .await
        .unwrap();
    // y: PAID (no TTL) → never deleted, never released
    let y = s.book("y", "t2", "P2").await;
    s.records
        .put(y.held_record(), Condition::NotExists)
        .await
        .unwrap();
    s.records
        .mark_paid(&cand("y"), &pay("P2"), ConfirmPath::Webhook, s.now())
        .await
        .unwrap();
    s.ledger
        .mark_paid(&s.sale, &cand("y"), &pay("P2"))
        .await
        .unwrap();
    // z: deleted by the application (the reconciler) → ignored by the handler
    let z = s.book("z", "t3", "P3").await;
    s.records
        .put(z.held_record(), Condition::NotExists)
        .await
        .unwrap();
    s.records
        .delete(
            &cand("z"),
            Condition::StatusIsWithPayment(RecordStatus::Held, pay("P3")),
        )
        .await
        .unwrap();
    s.clock.advance(Duration::from_secs(11 * 60));
    assert_eq!(s.records.sweep_ttl(100).len(), 1);
    assert_eq!(s.count().await, 3);

    let h = ExpiryHandler::new(s.records.clone(), s.ledger.clone(), 0);
    while h.poll_once(WAIT).await.unwrap().handled > 0 {}
    let st = h.stats();
    assert_eq!(st.released, 1);
    assert_eq!(
        s.count().await,
        2,
        "x's seat back; y paid; z still held in the ledger"
    );
    assert!(s.ledger.hold(&s.sale, &cand("x")).await.unwrap().is_none());
    assert!(
        s.ledger.hold(&s.sale, &cand("z")).await.unwrap().is_some(),
        "app deletes are ignored"
    );
    assert_eq!(
        s.ledger.paid(&s.sale, &cand("y")).await.unwrap(),
        Some(pay("P2"))
    );

    // a second run over the same stream is a no-op
    let again = ExpiryHandler::new(s.records.clone(), s.ledger.clone(), 0);
    while again.poll_once(WAIT).await.unwrap().handled > 0 {}
    assert_eq!((again.stats().released, again.stats().no_match), (0, 1));
    assert_eq!(s.count().await, 2);
}

#[tokio::test(start_paused = true)]
async fn a_ttl_deletion_after_the_reconciler_released_is_a_no_op() {
    let s = Stack::new(2, &["x", "y"]).await;
    let x = s.book("x", "t1", "P1").await;
    s.records
        .put(x.held_record(), Condition::NotExists)
        .await
        .unwrap();
    // the ledger released (the record delete was lost), then y took the seat
    s.ledger
        .release(&s.sale, &cand("x"), &pay("P1"))
        .await
        .unwrap();
    s.book("y", "t2", "P2").await;
    s.clock.advance(Duration::from_secs(11 * 60));
    s.records.sweep_ttl(100);
    let h = ExpiryHandler::new(s.records.clone(), s.ledger.clone(), 0);
    while h.poll_once(WAIT).await.unwrap().handled > 0 {}
    assert_eq!((h.stats().released, h.stats().no_match), (0, 1));
    assert_eq!(s.count().await, 1);
}
