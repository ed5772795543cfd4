//! Confirm path 1 (`callback::handle`) over the embedded stores and a
//! scripted gateway: only the payment's own signature is acted on, the
//! redirect's `status` decides nothing (unless a zoo bug is switched on),
//! execute gets its share of the request and never more than is left of the
//! hold, an "already completed" refusal is queried, a redirect delivered
//! twice executes once, and without a booking copy nothing is executed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::service::booked;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use booking::gateway::{CreatePayment, CreatedPayment, Executed, ExecutedVia};
use booking::records::{BookingRecord, ConfirmPath, RecordStatus};
use booking::{
    AdmittedBooking, Bug, Bugs, GatewayError, GatewayPaymentState, PaymentGateway, PaymentId,
    PaymentStatus, RecordStore,
};
use booking_service::admission::Quiet;
use booking_service::callback::{self, CallbackOutcome, CallbackQuery, Gate, gate, secrets_equal};
use booking_service::stack::Stack as ServiceStack;
use common::{Stack, cand, pay};
use parking_lot::Mutex;
use tokio::sync::Notify;

/// Creates `P1`, `P2`, … with signature `sig-<id>`; executes as `execute`
/// says (`Ok` → trx `TRX-<id>`), queries as `query` says; records the time
/// each execute was given. With `slow`, the first execute tells `entered` and
/// waits for `release`.
#[derive(Debug)]
struct Gateway {
    created: Mutex<u32>,
    execute: Mutex<Result<(), GatewayError>>,
    query: Mutex<GatewayPaymentState>,
    executes: Mutex<Vec<Duration>>,
    queries: Mutex<u32>,
    slow: bool,
    entered: Notify,
    release: Notify,
}

impl Gateway {
    fn new() -> Gateway {
        Gateway {
            created: Mutex::new(0),
            execute: Mutex::new(Ok(())),
            query: Mutex::new(GatewayPaymentState::Initiated),
            executes: Mutex::default(),
            queries: Mutex::new(0),
            slow: false,
            entered: Notify::new(),
            release: Notify::new(),
        }
    }

    fn refuse(&self, code: &str) {
        *self.execute.lock() = Err(GatewayError::Refused {
            code: code.into(),
            message: "refused (test)".into(),
        });
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
    async fn execute(&self, p: &PaymentId, within: Duration) -> Result<Executed, GatewayError> {
        let first = {
            let mut executes = self.executes.lock();
            executes.push(within);
            executes.len() == 1
        };
        if self.slow && first {
            self.entered.notify_one();
            self.release.notified().await;
        }
        self.execute.lock().clone().map(|()| Executed {
            payment_id: p.clone(),
            trx_id: format!("TRX-{p}"),
            amount: None,
            via: ExecutedVia::Answer,
        })
    }
    async fn query(&self, p: &PaymentId, _: Duration) -> Result<PaymentStatus, GatewayError> {
        *self.queries.lock() += 1;
        Ok(PaymentStatus {
            payment_id: p.clone(),
            state: self.query.lock().clone(),
            amount: None,
            invoice: None,
        })
    }
}

fn service(s: &Stack, gateway: Arc<Gateway>, bugs: Bugs) -> ServiceStack {
    let mut settings = s.settings.clone();
    settings.bugs = bugs;
    let records = s.records.clone();
    crate::service::stack(s, gateway, settings, records, "http://127.0.0.1:8080")
}

fn redirect(payment: &str, status: &str, signature: &str) -> CallbackQuery {
    CallbackQuery {
        payment_id: Some(payment.into()),
        status: Some(status.into()),
        signature: Some(signature.into()),
    }
}

async fn status(s: &Stack, who: &str) -> Option<RecordStatus> {
    s.records
        .get(&cand(who), true)
        .await
        .unwrap()
        .map(|r| r.status)
}

#[tokio::test(start_paused = true)]
async fn a_signed_redirect_is_executed_within_its_share_and_paid() {
    let s = Stack::new(2, &["x", "y"]).await;
    let gateway = Arc::new(Gateway::new());
    let svc = service(&s, gateway.clone(), Bugs::none());
    booked(&s, &svc, "x").await;
    let out = callback::handle(&svc, &Quiet, &redirect("P1", "success", "sig-P1")).await;
    assert_eq!(out, CallbackOutcome::Paid);
    // three quarters of the request deadline: the hold has far longer left
    assert_eq!(
        *gateway.executes.lock(),
        [s.settings.request_deadline * 3 / 4]
    );
    assert_eq!(status(&s, "x").await, Some(RecordStatus::Paid));
    {
        let sent = s.mailer.0.lock();
        assert_eq!(sent.len(), 1);
        assert_eq!(
            sent[0].trx_id.as_deref(),
            Some("TRX-P1"),
            "the executed one"
        );
    }

    // a forged `cancel` decides nothing: executed and paid all the same
    booked(&s, &svc, "y").await;
    let out = callback::handle(&svc, &Quiet, &redirect("P2", "cancel", "sig-P2")).await;
    assert_eq!(out, CallbackOutcome::Paid);
    assert_eq!(status(&s, "y").await, Some(RecordStatus::Paid));
    assert_eq!(s.count().await, 2);
    assert_eq!(gateway.executes.lock().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_wrong_missing_or_reordered_signature_is_forbidden_and_executes_nothing() {
    let s = Stack::new(1, &["x"]).await;
    let gateway = Arc::new(Gateway::new());
    let svc = service(&s, gateway.clone(), Bugs::none());
    booked(&s, &svc, "x").await;
    // same length as `sig-P1`: another payment's, two characters swapped, none
    for signature in ["sig-P2", "sig-1P", "sgi-P1", ""] {
        let out = callback::handle(&svc, &Quiet, &redirect("P1", "success", signature)).await;
        assert_eq!(out, CallbackOutcome::Forbidden, "{signature:?}");
    }
    let unsigned = CallbackQuery {
        signature: None,
        ..redirect("P1", "success", "")
    };
    assert_eq!(
        callback::handle(&svc, &Quiet, &unsigned).await,
        CallbackOutcome::Forbidden
    );
    assert!(gateway.executes.lock().is_empty());
    assert_eq!(status(&s, "x").await, Some(RecordStatus::Held));
    assert!(!secrets_equal("ab", "ba"));
    assert!(!secrets_equal("sig-P1", "sig-1P"));
}

#[tokio::test(start_paused = true)]
async fn past_the_hold_deadline_nothing_is_executed() {
    let s = Stack::new(1, &["x"]).await;
    let gateway = Arc::new(Gateway::new());
    let svc = service(&s, gateway.clone(), Bugs::none());
    booked(&s, &svc, "x").await;
    s.clock.advance(s.settings.hold);
    let out = callback::handle(&svc, &Quiet, &redirect("P1", "success", "sig-P1")).await;
    assert_eq!(out, CallbackOutcome::Expired);
    assert!(gateway.executes.lock().is_empty());
    assert_eq!(status(&s, "x").await, Some(RecordStatus::Held));
}

#[tokio::test(start_paused = true)]
async fn near_the_hold_deadline_execute_gets_only_what_is_left_of_the_hold() {
    let s = Stack::new(1, &["x"]).await;
    let gateway = Arc::new(Gateway::new());
    let svc = service(&s, gateway.clone(), Bugs::none());
    booked(&s, &svc, "x").await;
    s.clock
        .advance(s.settings.hold - Duration::from_millis(2_000));
    let out = callback::handle(&svc, &Quiet, &redirect("P1", "success", "sig-P1")).await;
    assert_eq!(out, CallbackOutcome::Paid);
    assert_eq!(*gateway.executes.lock(), [Duration::from_millis(2_000)]);
}

#[tokio::test(start_paused = true)]
async fn an_already_completed_refusal_is_queried_and_any_other_is_not_paid() {
    let s = Stack::new(3, &["x", "y", "z"]).await;
    let gateway = Arc::new(Gateway::new());
    let svc = service(&s, gateway.clone(), Bugs::none());
    *gateway.query.lock() = GatewayPaymentState::Completed {
        trx_id: "TRX-Q".into(),
    };
    for (who, payment, code) in [("x", "P1", "2117"), ("y", "P2", "2062")] {
        booked(&s, &svc, who).await;
        gateway.refuse(code);
        let out = callback::handle(
            &svc,
            &Quiet,
            &redirect(payment, "success", &format!("sig-{payment}")),
        )
        .await;
        assert_eq!(out, CallbackOutcome::Paid, "{code}");
        assert_eq!(status(&s, who).await, Some(RecordStatus::Paid), "{code}");
    }
    assert_eq!(*gateway.queries.lock(), 2);
    // not approved: not paid, not queried
    booked(&s, &svc, "z").await;
    gateway.refuse("2056");
    let out = callback::handle(&svc, &Quiet, &redirect("P3", "success", "sig-P3")).await;
    assert_eq!(out, CallbackOutcome::NotPaid);
    assert_eq!(status(&s, "z").await, Some(RecordStatus::Held));
    assert_eq!(*gateway.queries.lock(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_redirect_delivered_again_during_a_slow_execute_is_processing() {
    let s = Stack::new(1, &["x"]).await;
    let gateway = Arc::new(Gateway {
        slow: true,
        ..Gateway::new()
    });
    let svc = service(&s, gateway.clone(), Bugs::none());
    booked(&s, &svc, "x").await;
    let q = redirect("P1", "success", "sig-P1");
    let first = callback::handle(&svc, &Quiet, &q);
    let second = async {
        // (on a paused clock this gives up at once if the first never executes)
        tokio::time::timeout(Duration::from_secs(60), gateway.entered.notified())
            .await
            .expect("the first redirect executes");
        // the first execute has been going on for longer than a request
        // deadline (but less than its lock's two)
        s.clock
            .advance(s.settings.request_deadline + Duration::from_secs(2));
        let out = callback::handle(&svc, &Quiet, &q).await;
        gateway.release.notify_one();
        out
    };
    let (a, b) = tokio::join!(first, second);
    assert_eq!((a, b), (CallbackOutcome::Paid, CallbackOutcome::Processing));
    assert_eq!(gateway.executes.lock().len(), 1, "executed once");
    assert_eq!(s.mailer.0.lock().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn without_a_booking_copy_only_a_paid_record_answers_paid() {
    let s = Stack::new(3, &["x", "y", "z"]).await;
    let gateway = Arc::new(Gateway::new());
    let svc = service(&s, gateway.clone(), Bugs::none());
    // records only: no copy was kept under these payments
    for (who, p) in [("x", "P7"), ("y", "P8")] {
        let m = s.book(who, &format!("t-{who}"), p).await;
        s.records
            .put(m.held_record(), booking::Condition::NotExists)
            .await
            .unwrap();
    }
    s.records
        .mark_paid(&cand("x"), &pay("P7"), ConfirmPath::Webhook, s.now())
        .await
        .unwrap();
    let ask = |p: &'static str| {
        let q = redirect(p, "success", "anything");
        let svc = &svc;
        async move { callback::handle(svc, &Quiet, &q).await }
    };
    assert_eq!(ask("P7").await, CallbackOutcome::Paid);
    assert_eq!(ask("P8").await, CallbackOutcome::Forbidden);
    assert_eq!(ask("P9").await, CallbackOutcome::Unknown);
    s.clock.advance(s.settings.hold);
    assert_eq!(ask("P8").await, CallbackOutcome::Expired);
    assert_eq!(ask("P7").await, CallbackOutcome::Paid);
    assert!(gateway.executes.lock().is_empty());
    assert_eq!(status(&s, "y").await, Some(RecordStatus::Held));
}

#[tokio::test(start_paused = true)]
async fn the_zoo_bugs_trust_only_the_status_they_name() {
    // trust_redirect_cancel: a `cancel` releases without asking the gateway
    let s = Stack::new(1, &["x"]).await;
    let gateway = Arc::new(Gateway::new());
    let svc = service(&s, gateway.clone(), Bugs::of([Bug::TrustRedirectCancel]));
    booked(&s, &svc, "x").await;
    let out = callback::handle(&svc, &Quiet, &redirect("P1", "cancel", "sig-P1")).await;
    assert_eq!(out, CallbackOutcome::NotPaid);
    assert!(gateway.executes.lock().is_empty());
    assert_eq!(s.count().await, 0, "released");
    assert_eq!(status(&s, "x").await, None, "deleted");

    // trust_redirect_success: a `failure` is still executed (and refused)
    let s = Stack::new(1, &["x"]).await;
    let gateway = Arc::new(Gateway::new());
    let svc = service(&s, gateway.clone(), Bugs::of([Bug::TrustRedirectSuccess]));
    booked(&s, &svc, "x").await;
    gateway.refuse("2056");
    let out = callback::handle(&svc, &Quiet, &redirect("P1", "failure", "sig-P1")).await;
    assert_eq!(out, CallbackOutcome::NotPaid);
    assert_eq!(gateway.executes.lock().len(), 1);
    assert_eq!(status(&s, "x").await, Some(RecordStatus::Held));
}

#[test]
fn a_stale_record_of_the_same_millisecond_does_not_supersede_the_copy() {
    let c = AdmittedBooking {
        candidate: cand("c"),
        sale: booking::SaleId::parse("s").unwrap(),
        level: booking::Level::parse("a").unwrap(),
        payment_id: pay("P2"),
        signature: Some("sig".into()),
        token: None,
        request_ms: 2_000,
        deadline_ms: 602_000,
    };
    let other = BookingRecord::held(
        c.candidate.clone(),
        c.sale.clone(),
        c.level.clone(),
        pay("P1"),
        2_000,
        602_000,
    );
    assert_eq!(
        gate(&c, Some(&other)),
        Gate::Open {
            deadline_ms: 602_000
        }
    );
}
