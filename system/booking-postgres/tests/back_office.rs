//! The back office on this machine's PostgreSQL (127.0.0.1:5432, trust auth;
//! `SELLOUT_TEST_POSTGRES_URL` overrides), each test in a schema of its own:
//! migrations once and in order even when two instances start together,
//! upserts that are idempotent and order-proof, and the sync handler's
//! partial-batch answer when the database goes away.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use booking::records::{BookingRecord, ConfirmPath, StreamKind, StreamRecord};
use booking::{CandidateHash, Level, PaymentId, SaleId};
use booking_postgres::{BackOffice, MIGRATIONS, SyncHandler};
use booking_streams::BatchHandler;

fn url() -> String {
    std::env::var("SELLOUT_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "host=127.0.0.1 port=5432 user=postgres dbname=test".to_owned())
}

fn schema() -> String {
    format!("t_{:016x}", rand::random::<u64>())
}

fn paid(c: &str, p: &str) -> BookingRecord {
    BookingRecord::held(
        CandidateHash::of(c),
        SaleId::parse("launch").unwrap(),
        Level::parse("gold").unwrap(),
        PaymentId::parse(p).unwrap(),
        1_000,
        601_000,
    )
    .into_paid(ConfirmPath::Webhook, 2_000)
}

fn modify(seq: u64, new: BookingRecord) -> StreamRecord {
    StreamRecord {
        kind: StreamKind::Modify,
        old: None,
        new: Some(new),
        user_identity: None,
        sequence: seq,
        at_ms: 1,
    }
}

#[tokio::test]
async fn migrations_apply_once_even_from_two_instances_at_once() {
    let s = schema();
    let a = BackOffice::connect(&url(), &s)
        .await
        .expect("PostgreSQL on 127.0.0.1:5432");
    let b = BackOffice::connect(&url(), &s).await.unwrap();
    let (ra, rb) = tokio::join!(a.migrate(), b.migrate());
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    let all: Vec<i32> = MIGRATIONS.iter().map(|m| m.0).collect();
    assert!(
        (ra == all && rb.is_empty()) || (rb == all && ra.is_empty()),
        "one applied everything, the other nothing: {ra:?} {rb:?}"
    );
    assert!(a.migrate().await.unwrap().is_empty(), "up to date");
    assert_eq!(a.applied().await.unwrap(), all);
    a.drop_schema().await.unwrap();
}

#[tokio::test]
async fn upserts_are_idempotent_and_an_older_image_cannot_take_the_email_back() {
    let office = BackOffice::connect(&url(), &schema()).await.unwrap();
    office.migrate().await.unwrap();
    let r = paid("alice", "P1");
    office.upsert_paid(&r).await.unwrap();
    office.upsert_paid(&r).await.unwrap();
    let rows = office.paid(&r.sale).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].paid_by, "webhook");
    assert_eq!(rows[0].candidate, r.candidate.as_str());
    assert!(!rows[0].email_sent);
    let emailed = BookingRecord {
        email_sent: true,
        ..r.clone()
    };
    office.upsert_paid(&emailed).await.unwrap();
    office.upsert_paid(&r).await.unwrap(); // a replay of the older image
    let row = office
        .paid_by_payment(&r.payment_id)
        .await
        .unwrap()
        .unwrap();
    assert!(row.email_sent, "email_sent only goes one way");
    // a hold is never copied, and changes nothing
    let hold = BookingRecord::held(
        CandidateHash::of("bob"),
        r.sale.clone(),
        r.level.clone(),
        PaymentId::parse("P2").unwrap(),
        1,
        2,
    );
    assert!(office.upsert_paid(&hold).await.is_err());
    assert_eq!(office.paid(&r.sale).await.unwrap().len(), 1);
    // the schema refuses a second paid seat for one candidate
    let other_payment = BookingRecord {
        payment_id: PaymentId::parse("P3").unwrap(),
        ..r.clone()
    };
    assert!(office.upsert_paid(&other_payment).await.is_err());
    office.drop_schema().await.unwrap();
}

#[tokio::test]
async fn the_sync_handler_copies_paid_records_and_reports_where_it_failed() {
    let s = schema();
    let office = Arc::new(BackOffice::connect(&url(), &s).await.unwrap());
    office.migrate().await.unwrap();
    let handler = SyncHandler::new(office.clone());
    let batch = vec![
        StreamRecord {
            kind: StreamKind::Insert,
            old: None,
            new: Some(BookingRecord::held(
                CandidateHash::of("x"),
                SaleId::parse("launch").unwrap(),
                Level::parse("gold").unwrap(),
                PaymentId::parse("H1").unwrap(),
                1,
                2,
            )),
            user_identity: None,
            sequence: 1,
            at_ms: 1,
        },
        modify(2, paid("a", "P1")),
        modify(3, paid("b", "P2")),
    ];
    assert_eq!(handler.handle_batch(&batch).await, None);
    assert_eq!(
        handler.handle_batch(&batch).await,
        None,
        "a replay is harmless"
    );
    let rows = office
        .paid(&SaleId::parse("launch").unwrap())
        .await
        .unwrap();
    assert_eq!(
        rows.iter()
            .map(|r| r.payment_id.as_str())
            .collect::<Vec<_>>(),
        ["P1", "P2"]
    );
    let stats = handler.stats();
    assert_eq!((stats.upserted, stats.ignored, stats.failures), (4, 2, 0));

    // the schema gone under it: the first PAID record fails, and is named
    office.drop_schema().await.unwrap();
    assert_eq!(handler.handle_batch(&batch).await, Some(2));
    assert_eq!(handler.stats().failures, 1);
    office.drop_schema().await.unwrap();
}

#[tokio::test]
async fn a_bad_schema_name_is_refused_before_any_connection() {
    let e = BackOffice::connect("host=127.0.0.1 port=1", "Robert'); DROP")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("schema"), "{e}");
}
