//! The request path of `POST /bookings` (`admission::book`) over the embedded
//! stores and a scripted gateway: what an admitted request keeps (the booking
//! copy, for as long as the hold and its slack), what a repeat request is
//! answered (the same checkout page), a copy that names another payment or
//! sale read as absent, an undone admission counted and not alerted, and the
//! names clients and metrics see.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use booking::coordination::keys;
use booking::gateway::{CreatePayment, CreatedPayment, Executed};
use booking::{
    AdmittedBooking, Coordination, GatewayError, Ledger, PaymentGateway, PaymentId, PaymentStatus,
    SaleId,
};
use booking_service::admission::{
    self, BookAnswer, Failed, HeldSeat, PathEvents, Quiet, Refusal, StoredCopy, UNDO_RESERVE,
    gateway_error_kind, load_copy, load_stored,
};
use booking_service::stack::Stack as ServiceStack;
use common::{Stack, cand, pay};
use parking_lot::Mutex;
use tokio::time::Instant;

/// Creates `P1`, `P2`, … (checkout `https://pay.test/<id>`), or fails with
/// `fail`; records each create and the time it was given.
#[derive(Debug, Default)]
struct CreatingGateway {
    fail: Mutex<Option<GatewayError>>,
    created: Mutex<Vec<(CreatePayment, Duration)>>,
}

#[async_trait]
impl PaymentGateway for CreatingGateway {
    async fn create(
        &self,
        req: &CreatePayment,
        within: Duration,
    ) -> Result<CreatedPayment, GatewayError> {
        let mut created = self.created.lock();
        created.push((req.clone(), within));
        if let Some(e) = self.fail.lock().clone() {
            return Err(e);
        }
        let id = format!("P{}", created.len());
        Ok(CreatedPayment {
            payment_id: pay(&id),
            bkash_url: format!("https://pay.test/{id}"),
            signature: format!("sig-{id}"),
        })
    }
    async fn execute(&self, _: &PaymentId, _: Duration) -> Result<Executed, GatewayError> {
        Err(GatewayError::Unavailable("not scripted".into()))
    }
    async fn query(&self, _: &PaymentId, _: Duration) -> Result<PaymentStatus, GatewayError> {
        Err(GatewayError::Unavailable("not scripted".into()))
    }
}

/// What the request path told its harness.
#[derive(Debug, Default)]
struct Heard {
    gateway: Mutex<Vec<(&'static str, Option<&'static str>)>>,
    undo: Mutex<Vec<(&'static str, &'static str)>>,
    held: Mutex<Vec<PaymentId>>,
    counters_changed: Mutex<u32>,
}

impl PathEvents for Heard {
    fn gateway_call(&self, op: &'static str, error: Option<&'static str>) {
        self.gateway.lock().push((op, error));
    }
    fn undo(&self, failed: &'static str, step: &'static str) {
        self.undo.lock().push((failed, step));
    }
    fn held(&self, booking: &AdmittedBooking) {
        self.held.lock().push(booking.payment_id.clone());
    }
    fn counters_changed(&self) {
        *self.counters_changed.lock() += 1;
    }
}

fn service(s: &Stack, gateway: Arc<CreatingGateway>) -> ServiceStack {
    let (settings, records) = (s.settings.clone(), s.records.clone());
    // a base URL with a trailing slash: the callback URL has one slash
    crate::service::stack(s, gateway, settings, records, "http://127.0.0.1:8080/")
}

async fn book(svc: &ServiceStack, events: &dyn PathEvents, who: &str) -> BookAnswer {
    let deadline = Instant::now() + svc.settings.request_deadline;
    admission::book(
        svc,
        events,
        &cand(who),
        &svc.prices.keys().next().unwrap().clone(),
        deadline,
    )
    .await
}

#[tokio::test(start_paused = true)]
async fn an_admitted_request_keeps_its_copy_and_a_repeat_goes_back_to_the_same_checkout() {
    let s = Stack::new(1, &["x"]).await;
    let gateway = Arc::new(CreatingGateway::default());
    let svc = service(&s, gateway.clone());
    let heard = Heard::default();

    let answer = book(&svc, &heard, "x").await;
    assert_eq!(answer.outcome(), "admitted");
    let BookAnswer::Admitted {
        booking,
        redirect_url,
    } = answer
    else {
        panic!("{answer:?}")
    };
    assert_eq!(redirect_url, "https://pay.test/P1");
    assert_eq!(booking.payment_id, pay("P1"));
    assert_eq!(booking.signature.as_deref(), Some("sig-P1"));
    {
        // the gateway sends the payer back to us, and had the request's time
        // less the undo reserve (no time passes on a paused runtime)
        let created = gateway.created.lock();
        assert_eq!(created.len(), 1);
        assert_eq!(
            created[0].0.callback_url,
            "http://127.0.0.1:8080/payment/callback"
        );
        assert_eq!(created[0].1, s.settings.request_deadline - UNDO_RESERVE);
    }
    assert_eq!(*heard.held.lock(), [pay("P1")]);
    assert!(heard.undo.lock().is_empty());
    assert_eq!(*heard.gateway.lock(), [("create", None)]);
    assert_eq!(s.count().await, 1);

    // the copy, for a payer faster than the worker
    let stored = load_stored(&svc, &pay("P1")).await.unwrap();
    assert_eq!(
        stored,
        Some(StoredCopy {
            booking: booking.clone(),
            redirect_url: Some("https://pay.test/P1".into()),
        })
    );
    assert_eq!(
        load_copy(&svc, &pay("P1")).await.unwrap(),
        Some(booking.clone())
    );
    assert_eq!(load_copy(&svc, &pay("P9")).await.unwrap(), None);

    // a repeat request: the live hold, with the same checkout page
    let again = book(&svc, &Quiet, "x").await;
    assert_eq!(again.outcome(), "already_holding");
    assert_eq!(
        again,
        BookAnswer::AlreadyHolding {
            level: s.level.clone(),
            held: Some(HeldSeat {
                level: s.level.clone(),
                payment_id: pay("P1"),
                deadline_ms: booking.deadline_ms,
                redirect_url: Some("https://pay.test/P1".into()),
            }),
        }
    );
    assert_eq!(gateway.created.lock().len(), 1, "no second payment");
    assert_eq!(s.count().await, 1);
}

#[tokio::test(start_paused = true)]
async fn a_stored_copy_naming_another_payment_or_sale_reads_as_absent() {
    let s = Stack::new(1, &["x"]).await;
    let svc = service(&s, Arc::default());
    let m = s.book("x", "t1", "P1").await;
    let key = keys::booking_copy("test", &s.sale, &pay("P1"));
    let put = |booking: AdmittedBooking| {
        let json = serde_json::to_string(&StoredCopy {
            booking,
            redirect_url: Some("https://pay.test/P1".into()),
        })
        .unwrap();
        let key = key.clone();
        let coordination = s.coordination.clone();
        async move { coordination.set(&key, &json, None).await.unwrap() }
    };

    put(m.clone()).await;
    assert_eq!(
        load_copy(&svc, &pay("P1")).await.unwrap(),
        Some(m.clone()),
        "the copy of this payment and sale is found"
    );

    put(AdmittedBooking {
        payment_id: pay("P2"),
        ..m.clone()
    })
    .await;
    assert_eq!(load_stored(&svc, &pay("P1")).await.unwrap(), None);
    assert_eq!(load_copy(&svc, &pay("P1")).await.unwrap(), None);

    put(AdmittedBooking {
        sale: SaleId::parse("other").unwrap(),
        ..m.clone()
    })
    .await;
    assert_eq!(load_stored(&svc, &pay("P1")).await.unwrap(), None);

    s.coordination.set(&key, "not json", None).await.unwrap();
    assert_eq!(load_stored(&svc, &pay("P1")).await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn the_copy_lives_as_long_as_the_hold_and_its_slack() {
    let s = Stack::new(1, &["x"]).await;
    let svc = service(&s, Arc::default());
    assert_eq!(book(&svc, &Quiet, "x").await.outcome(), "admitted");
    let lives = s.settings.hold + s.settings.booking_copy_slack;
    s.clock.advance(lives - Duration::from_secs(1));
    assert!(load_copy(&svc, &pay("P1")).await.unwrap().is_some());
    s.clock.advance(Duration::from_secs(2));
    assert_eq!(load_copy(&svc, &pay("P1")).await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn a_failed_create_is_undone_answered_busy_and_raises_no_alert() {
    let s = Stack::new(1, &["x"]).await;
    let gateway = Arc::new(CreatingGateway::default());
    *gateway.fail.lock() = Some(GatewayError::Timeout);
    let svc = service(&s, gateway);
    let heard = Heard::default();
    let answer = book(&svc, &heard, "x").await;
    assert_eq!(answer.outcome(), "busy");
    assert!(
        matches!(
            answer,
            BookAnswer::Busy {
                failed: Failed::Create,
                ..
            }
        ),
        "{answer:?}"
    );
    assert_eq!(*heard.gateway.lock(), [("create", Some("timeout"))]);
    assert_eq!(*heard.undo.lock(), [("create", "done")]);
    // admitted, then undone: two changes of the counters
    assert_eq!(*heard.counters_changed.lock(), 2);
    assert!(s.alerts.kinds().is_empty(), "{:?}", s.alerts.kinds());
    assert!(heard.held.lock().is_empty());
    assert_eq!(s.count().await, 0, "the seat is free again");
    assert!(s.ledger.hold(&s.sale, &cand("x")).await.unwrap().is_none());
}

#[tokio::test(start_paused = true)]
async fn a_refused_request_answers_its_code() {
    let s = Stack::new(1, &["x"]).await;
    let svc = service(&s, Arc::default());
    assert_eq!(
        book(&svc, &Quiet, "stranger").await,
        BookAnswer::Refused(Refusal::NotEligible)
    );
    s.ledger.set_open(&s.sale, false).await.unwrap();
    let closed = book(&svc, &Quiet, "x").await;
    assert_eq!(closed, BookAnswer::Refused(Refusal::SaleClosed));
    assert_eq!(closed.outcome(), "sale_closed");
}

#[test]
fn clients_and_metrics_see_these_names() {
    let refusals = [
        (
            Refusal::LevelFull,
            "level_full",
            "every seat of this level is taken",
        ),
        (Refusal::SaleClosed, "sale_closed", "the sale is not open"),
        (
            Refusal::NotEligible,
            "not_eligible",
            "this candidate is not on the list",
        ),
        (
            Refusal::UnknownLevel,
            "unknown_level",
            "this sale has no such level",
        ),
        (
            Refusal::AlreadyPaid,
            "already_paid",
            "this candidate has paid for a seat already",
        ),
    ];
    for (r, code, message) in refusals {
        assert_eq!(r.code(), code);
        assert_eq!(r.message(), message);
        assert_eq!(BookAnswer::Refused(r).outcome(), code);
    }
    let steps = [
        (Failed::Admit, "admit"),
        (Failed::Create, "create"),
        (Failed::Attach, "attach"),
        (Failed::Copy, "copy"),
        (Failed::Enqueue, "enqueue"),
    ];
    for (f, name) in steps {
        assert_eq!(f.as_str(), name);
    }
    let kinds = [
        (GatewayError::Timeout, "timeout"),
        (
            GatewayError::Refused {
                code: "2056".into(),
                message: "no".into(),
            },
            "refused",
        ),
        (GatewayError::Unavailable("down".into()), "unavailable"),
        (GatewayError::TokenUnavailable, "token_unavailable"),
    ];
    for (e, kind) in kinds {
        assert_eq!(gateway_error_kind(&e), kind);
    }
}
