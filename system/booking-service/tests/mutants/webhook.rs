//! Confirm path 2 (`webhook::handle`) over the embedded stores and a
//! scripted gateway: a verified IPN that matches its booking and the
//! gateway's query marks it paid (once), one naming another booking,
//! transaction or invoice is a mismatch, a PAID record answers without a
//! gateway call, and unreadable records are gone around with the copy only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::service::booked;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use booking::gateway::{CreatePayment, CreatedPayment, Executed};
use booking::records::{ConfirmPath, RecordStatus};
use booking::{
    AdmittedBooking, Bugs, GatewayError, GatewayPaymentState, PaymentGateway, PaymentId,
    PaymentStatus, RecordStore, invoice_number,
};
use booking_service::admission::Quiet;
use booking_service::stack::Stack as ServiceStack;
use booking_service::webhook::{self, NotificationOutcome};
use common::{Stack, cand, pay};
use parking_lot::Mutex;

/// Creates `P1`, `P2`, …; a query answers `state` with `invoice`, and is
/// counted.
#[derive(Debug)]
struct Gateway {
    created: Mutex<u32>,
    state: Mutex<GatewayPaymentState>,
    invoice: Mutex<Option<String>>,
    queries: Mutex<u32>,
}

impl Gateway {
    fn completed(trx: &str) -> Gateway {
        Gateway {
            created: Mutex::new(0),
            state: Mutex::new(GatewayPaymentState::Completed { trx_id: trx.into() }),
            invoice: Mutex::new(None),
            queries: Mutex::new(0),
        }
    }
}

#[async_trait]
impl PaymentGateway for Gateway {
    async fn create(&self, _: &CreatePayment, _: Duration) -> Result<CreatedPayment, GatewayError> {
        let id = {
            let mut n = self.created.lock();
            *n += 1;
            format!("P{n}")
        };
        Ok(CreatedPayment {
            payment_id: pay(&id),
            bkash_url: format!("https://pay.test/{id}"),
            signature: format!("sig-{id}"),
        })
    }
    async fn execute(&self, _: &PaymentId, _: Duration) -> Result<Executed, GatewayError> {
        Err(GatewayError::Unavailable("not scripted".into()))
    }
    async fn query(&self, p: &PaymentId, _: Duration) -> Result<PaymentStatus, GatewayError> {
        *self.queries.lock() += 1;
        Ok(PaymentStatus {
            payment_id: p.clone(),
            state: self.state.lock().clone(),
            amount: None,
            invoice: self.invoice.lock().clone(),
        })
    }
}

fn service(s: &Stack, gateway: Arc<Gateway>, records: Arc<dyn RecordStore>) -> ServiceStack {
    let mut settings = s.settings.clone();
    settings.bugs = Bugs::none();
    crate::service::stack(s, gateway, settings, records, "http://127.0.0.1:8080")
}

fn invoice(b: &AdmittedBooking) -> String {
    invoice_number(&b.sale, &b.candidate, b.request_ms)
}

fn ipn(payment: &str, trx: &str, invoice: Option<&str>) -> String {
    let mut m = serde_json::json!({
        "paymentID": payment,
        "trxID": trx,
        "transactionStatus": "Completed",
    });
    if let Some(i) = invoice {
        m["merchantInvoiceNumber"] = i.into();
    }
    m.to_string()
}

async fn status(s: &Stack, who: &str) -> Option<RecordStatus> {
    s.records
        .get(&cand(who), true)
        .await
        .unwrap()
        .map(|r| r.status)
}

#[tokio::test(start_paused = true)]
async fn a_matching_ipn_marks_its_booking_paid_once() {
    let s = Stack::new(1, &["x"]).await;
    let gateway = Arc::new(Gateway::completed("TRX-1"));
    let svc = service(&s, gateway.clone(), s.records.clone());
    let b = booked(&s, &svc, "x").await;
    *gateway.invoice.lock() = Some(invoice(&b));
    let message = ipn("P1", "TRX-1", Some(&invoice(&b)));
    let out = webhook::handle(&svc, &Quiet, &message).await;
    assert_eq!(out, NotificationOutcome::MarkedPaid);
    assert_eq!(status(&s, "x").await, Some(RecordStatus::Paid));
    assert_eq!(s.mailer.0.lock().len(), 1);
    assert_eq!(*gateway.queries.lock(), 1);
    // the replay: already paid, no second query, no second email
    let again = webhook::handle(&svc, &Quiet, &message).await;
    assert_eq!(again, NotificationOutcome::AlreadyPaid);
    assert_eq!(*gateway.queries.lock(), 1);
    assert_eq!(s.mailer.0.lock().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_ipn_naming_another_booking_transaction_or_invoice_changes_nothing() {
    let s = Stack::new(1, &["x"]).await;
    let gateway = Arc::new(Gateway::completed("TRX-1"));
    let svc = service(&s, gateway.clone(), s.records.clone());
    let b = booked(&s, &svc, "x").await;
    let ours = invoice(&b);
    let later = invoice_number(&b.sale, &b.candidate, b.request_ms + 1);
    let someone_else = invoice_number(&b.sale, &cand("y"), b.request_ms);
    let other_sale = invoice_number(
        &booking::SaleId::parse("other").unwrap(),
        &b.candidate,
        b.request_ms,
    );
    let handle = |m: String| {
        let svc = &svc;
        async move { webhook::handle(svc, &Quiet, &m).await }
    };
    for inv in [&later, &someone_else] {
        let out = handle(ipn("P1", "TRX-1", Some(inv))).await;
        assert!(
            matches!(out, NotificationOutcome::Mismatch(_)),
            "{inv}: {out:?}"
        );
    }
    assert_eq!(
        handle(ipn("P1", "TRX-1", Some(&other_sale))).await,
        NotificationOutcome::UnknownBooking
    );
    assert_eq!(*gateway.queries.lock(), 0);
    assert_eq!(
        handle(ipn("P1", "", Some(&ours))).await,
        NotificationOutcome::Unreadable
    );
    // the gateway's transaction or invoice differs
    let out = handle(ipn("P1", "TRX-2", Some(&ours))).await;
    assert!(matches!(out, NotificationOutcome::Mismatch(_)), "{out:?}");
    *gateway.invoice.lock() = Some(later.clone());
    let out = handle(ipn("P1", "TRX-1", Some(&ours))).await;
    assert!(matches!(out, NotificationOutcome::Mismatch(_)), "{out:?}");
    assert_eq!(status(&s, "x").await, Some(RecordStatus::Held));
    assert!(s.mailer.0.lock().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_paid_record_answers_already_paid_without_asking_the_gateway() {
    let s = Stack::new(1, &["x"]).await;
    // not completed as far as the gateway says: only the record can answer
    let gateway = Arc::new(Gateway::completed("TRX-1"));
    *gateway.state.lock() = GatewayPaymentState::Initiated;
    let svc = service(&s, gateway.clone(), s.records.clone());
    // no booking copy: the record is found by its payment
    let m = s.book("x", "t1", "P7").await;
    s.records
        .put(m.held_record(), booking::Condition::NotExists)
        .await
        .unwrap();
    s.records
        .mark_paid(&cand("x"), &pay("P7"), ConfirmPath::Callback, s.now())
        .await
        .unwrap();
    let out = webhook::handle(&svc, &Quiet, &ipn("P7", "TRX-1", None)).await;
    assert_eq!(out, NotificationOutcome::AlreadyPaid);
    assert_eq!(*gateway.queries.lock(), 0);
}

#[tokio::test(start_paused = true)]
async fn unreadable_records_are_gone_around_with_the_copy_and_only_with_it() {
    use faults::wrappers::FaultyRecords;
    let s = Stack::new(2, &["x", "y"]).await;
    let gateway = Arc::new(Gateway::completed("TRX-1"));
    let plain = service(&s, gateway.clone(), s.records.clone());
    let b = booked(&s, &plain, "x").await;
    // y: a HELD record, no copy
    let m = s.book("y", "t-y", "P7").await;
    s.records
        .put(m.held_record(), booking::Condition::NotExists)
        .await
        .unwrap();

    let schedule = faults::Schedule::from_toml(
        "[[fault]]\nname = \"f\"\ntarget = \"records\"\nops = [\"get\", \"by_payment\"]\n\
         start_ms = 0\nduration_ms = 3_600_000\nkind = { type = \"error\" }\n",
    )
    .unwrap();
    let injector = Arc::new(faults::Injector::new(
        schedule,
        7,
        Arc::new(s.clock.clone()),
    ));
    let faulty = Arc::new(FaultyRecords::new(
        s.records.clone(),
        s.records.clone(),
        injector,
    ));
    let svc = service(&s, gateway.clone(), faulty);
    let out = webhook::handle(&svc, &Quiet, &ipn("P1", "TRX-1", Some(&invoice(&b)))).await;
    assert_eq!(out, NotificationOutcome::MarkedPaid, "from the copy");
    assert_eq!(status(&s, "x").await, Some(RecordStatus::Paid));

    let out = webhook::handle(&svc, &Quiet, &ipn("P7", "TRX-1", None)).await;
    assert!(
        matches!(out, NotificationOutcome::Uncertain(_)),
        "no copy, no record: {out:?}"
    );
    assert_eq!(status(&s, "y").await, Some(RecordStatus::Held));
}

#[test]
fn logs_and_metrics_see_these_names() {
    let names = [
        (NotificationOutcome::MarkedPaid, "marked_paid"),
        (NotificationOutcome::AlreadyPaid, "already_paid"),
        (NotificationOutcome::Unreadable, "unreadable"),
        (NotificationOutcome::UnknownBooking, "unknown_booking"),
        (
            NotificationOutcome::NotConfirmed("q".into()),
            "not_confirmed",
        ),
        (NotificationOutcome::Mismatch("m".into()), "mismatch"),
        (NotificationOutcome::NotOurs, "not_ours"),
        (NotificationOutcome::Uncertain("u".into()), "uncertain"),
    ];
    for (outcome, name) in names {
        assert_eq!(outcome.name(), name);
    }
}
